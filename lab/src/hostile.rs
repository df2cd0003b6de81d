//! [`Hostile`]: a tiny loopback HTTP/1.1 server for the answers a client
//! must survive without retrying them: a body of gigabytes (streamed in
//! chunks, never allocated), a head of hundreds of KiB, redirect loops,
//! endless redirect chains, 307s after a `PUT`, redirects to another
//! origin, and answers that are not valid HTTP ([`Reply::Raw`]). It counts and keeps every request it sees (method, path,
//! headers, body), so tests count at the server.
//!
//! std only, one thread per connection, one request per connection
//! (`Connection: close`), every socket with 5 s read and write timeouts:
//! nothing it starts outlives a test by more than that. It listens on
//! 127.0.0.1 only.
//!
//! ```
//! use polite_lab::hostile::{Hostile, Reply};
//! use std::io::{Read, Write};
//!
//! let server = Hostile::start(vec![("/loop", Reply::redirect(302, "/loop"))]).unwrap();
//! let mut s = std::net::TcpStream::connect(server.addr()).unwrap();
//! s.write_all(b"GET /loop HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
//! let mut answer = String::new();
//! s.read_to_string(&mut answer).unwrap();
//! assert!(answer.starts_with("HTTP/1.1 302"), "{answer}");
//! assert_eq!(server.count("/loop"), 1);
//! ```

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the server answers on a path.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Reply {
    /// `200` with this body (and `Content-Length`).
    Body(String),
    /// `200` with a chunked body of `total` bytes, written 64 KiB at a
    /// time until done or the client goes away.
    Chunked {
        /// Bytes in all.
        total: u64,
    },
    /// `200` declaring `Content-Length: length`, then sending up to
    /// `length` bytes until the client goes away.
    Declared {
        /// The declared length.
        length: u64,
    },
    /// A redirect: `status` with `Location: location`.
    Redirect {
        /// 301, 302, 303, 307 or 308.
        status: u16,
        /// The `Location` value as sent.
        location: String,
    },
    /// An endless chain: `/prefix/N` redirects (302) to `/prefix/N+1`.
    Chain,
    /// `200` whose head (status line and headers) is at least `bytes`
    /// long: filler headers of 4 KiB each (`x-filler-N: xxx…`), then an
    /// empty body. Written until done or the client goes away.
    BigHead {
        /// The head's size at least, in bytes.
        bytes: u64,
    },
    /// These bytes as they are, as the whole answer, then the connection
    /// closes: for answers that are not valid HTTP (a header value with a
    /// control byte, a garbage status line).
    Raw(Vec<u8>),
}

impl Reply {
    /// A redirect to `location`.
    #[must_use]
    pub fn redirect(status: u16, location: impl Into<String>) -> Reply {
        Reply::Redirect {
            status,
            location: location.into(),
        }
    }
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The method.
    pub method: String,
    /// The request target (path and query).
    pub path: String,
    /// The headers, names lower case, in order.
    pub headers: Vec<(String, String)>,
    /// The body (by `Content-Length`, at most 1 MiB).
    pub body: Vec<u8>,
}

impl Seen {
    /// The first value of header `name` (case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default)]
struct Shared {
    seen: Mutex<Vec<Seen>>,
    body_bytes_sent: AtomicU64,
    stop: AtomicBool,
}

/// The server; stops (and joins its accept thread) when dropped.
#[derive(Debug)]
pub struct Hostile {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

/// The most connections one server accepts (a bound on a runaway client).
const MAX_CONNECTIONS: usize = 1000;
const CHUNK: usize = 64 << 10;
/// The value of one filler header of [`Reply::BigHead`].
const FILLER: usize = 4 << 10;
const TIMEOUT: Duration = Duration::from_secs(5);

impl Hostile {
    /// Starts a server on 127.0.0.1 (a free port) with `routes`: a path
    /// (without query) to its reply; a `Reply::Chain` route matches every
    /// path under it. Anything else is `404`.
    ///
    /// # Errors
    ///
    /// When the listener cannot be bound.
    pub fn start(routes: Vec<(&str, Reply)>) -> io::Result<Hostile> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let routes: Arc<Vec<(String, Reply)>> =
            Arc::new(routes.into_iter().map(|(p, r)| (p.to_owned(), r)).collect());
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("hostile-accept".into())
            .spawn(move || {
                for (n, conn) in listener.incoming().enumerate() {
                    if s.stop.load(Ordering::SeqCst) || n >= MAX_CONNECTIONS {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let (s, routes) = (Arc::clone(&s), Arc::clone(&routes));
                    let _ = std::thread::Builder::new()
                        .name("hostile-conn".into())
                        .spawn(move || {
                            let _ = serve(conn, &s, &routes);
                        });
                }
            })?;
        Ok(Hostile {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT{path}`.
    #[must_use]
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request seen so far.
    #[must_use]
    pub fn seen(&self) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Requests seen whose path (without query) is `path`, or starts with
    /// `path/` for a chain.
    #[must_use]
    pub fn count(&self, path: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| {
                let p = s.path.split('?').next().unwrap_or_default();
                p == path || p.starts_with(&format!("{path}/"))
            })
            .count()
    }

    /// Body bytes written so far, over all answers (chunk framing not
    /// counted): how much a client made the server push.
    #[must_use]
    pub fn body_bytes_sent(&self) -> u64 {
        self.shared.body_bytes_sent.load(Ordering::SeqCst)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn serve(conn: TcpStream, shared: &Shared, routes: &[(String, Reply)]) -> io::Result<()> {
    conn.set_read_timeout(Some(TIMEOUT))?;
    conn.set_write_timeout(Some(TIMEOUT))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.by_ref().take(8 << 10).read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
        return Ok(());
    };
    let (method, path) = (method.to_owned(), path.to_owned());
    let mut headers = Vec::new();
    for _ in 0..200 {
        let mut h = String::new();
        reader.by_ref().take(8 << 10).read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((n, v)) = h.split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .unwrap_or(0)
        .min(1 << 20);
    let mut body = Vec::new();
    reader.by_ref().take(length).read_to_end(&mut body)?;
    let bare = path.split('?').next().unwrap_or_default().to_owned();
    shared
        .seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Seen {
            method,
            path,
            headers,
            body,
        });
    let reply = routes.iter().find_map(|(p, r)| {
        let hit = *p == bare || matches!(r, Reply::Chain) && bare.starts_with(&format!("{p}/"));
        hit.then_some((p.as_str(), r))
    });
    let mut out = conn;
    match reply {
        None => out
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"),
        Some((_, Reply::Body(text))) => write!(
            out,
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
            text.len()
        ),
        Some((_, Reply::Redirect { status, location })) => write!(
            out,
            "HTTP/1.1 {status} Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ),
        Some((prefix, Reply::Chain)) => {
            let n: u64 = bare[prefix.len() + 1..].parse().unwrap_or(0);
            write!(
                out,
                "HTTP/1.1 302 Found\r\nlocation: {prefix}/{}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                n.saturating_add(1)
            )
        }
        Some((_, Reply::Chunked { total })) => {
            out.write_all(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
            )?;
            let chunk = vec![b'x'; CHUNK];
            let mut left = *total;
            while left > 0 {
                let n = left.min(CHUNK as u64);
                write!(out, "{n:x}\r\n")?;
                out.write_all(&chunk[..n as usize])?;
                out.write_all(b"\r\n")?;
                shared.body_bytes_sent.fetch_add(n, Ordering::SeqCst);
                left -= n;
            }
            out.write_all(b"0\r\n\r\n")
        }
        Some((_, Reply::BigHead { bytes })) => {
            let mut head = Vec::with_capacity(CHUNK);
            head.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
            let mut written = 0u64;
            let filler = "x".repeat(FILLER);
            let mut n = 0u64;
            while written + (head.len() as u64) < *bytes {
                write!(head, "x-filler-{n}: {filler}\r\n")?;
                n += 1;
                if head.len() >= CHUNK {
                    out.write_all(&head)?;
                    written += head.len() as u64;
                    head.clear();
                }
            }
            head.extend_from_slice(b"content-length: 0\r\nconnection: close\r\n\r\n");
            out.write_all(&head)
        }
        Some((_, Reply::Raw(bytes))) => out.write_all(bytes),
        Some((_, Reply::Declared { length })) => {
            write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n"
            )?;
            let chunk = vec![b'x'; CHUNK];
            let mut left = *length;
            while left > 0 {
                let n = left.min(CHUNK as u64);
                out.write_all(&chunk[..n as usize])?;
                shared.body_bytes_sent.fetch_add(n, Ordering::SeqCst);
                left -= n;
            }
            Ok(())
        }
    }
}
