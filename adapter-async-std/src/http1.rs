//! [`Http1Transport`]: the ready transport, HTTP/1.1 (and HTTPS, feature
//! `tls`) over `async_io::Async<TcpStream>` with the protocol done by
//! `ureq-proto`, and a pool of kept-alive connections.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_io::{Async, Timer};
use bytes::{Bytes, BytesMut};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use polite_client::{BoxSending, Transport, TransportError};
use polite_core::TransportErrorKind;
use ureq_proto::BodyMode;
use ureq_proto::client::state::{RecvBody, RecvResponse};
use ureq_proto::client::{
    Await100Result, Call, RecvBodyResult, RecvResponseResult, SendRequestResult,
};

use crate::pool::{Conn, Origin, Pool};
use polite_client::recycle::Recycler;

/// How much of a response head (status line and headers) is read at most.
const MAX_HEAD: usize = 64 << 10;
/// The size of the encoding buffer, of a fresh connection's read buffer,
/// and of a body's first allocation when its length is not declared.
const CHUNK: usize = 16 << 10;
/// The largest a connection's read buffer grows to: reads that bring at
/// least half of it double it, so a large body is read in 64 KiB reads (16
/// syscalls per MiB instead of 64), a small answer in one small one. Larger
/// was slower: at 256 KiB, 4 connections' buffers no longer stay in cache
/// (1 MiB bodies at concurrency 4: 960 µs of CPU per request at 256 KiB,
/// 725 µs at 64 KiB).
const MAX_READ_BUF: usize = 64 << 10;
/// How long an idle pooled connection is kept by default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How many idle connections are kept per origin by default.
pub const DEFAULT_MAX_IDLE_PER_HOST: usize = 32;

/// Sends attempts over HTTP/1.1 on async-io sockets, `http://` and
/// `https://` (feature `tls`, on by default through `webpki-roots`),
/// reusing kept-alive connections: resolves the host (on the `blocking`
/// thread pool, or not at all for an IP address), connects an
/// `async_io::Async<TcpStream>`, does the TLS handshake with rustls
/// (`futures-rustls`), writes the request and reads the answer with
/// `ureq-proto` (the sans-IO protocol of ureq 3: content-length and
/// chunked bodies, 1xx answers, `Connection` rules), and aborts the whole
/// attempt at its `abort_at` by racing it against an `async_io::Timer`.
///
/// # TLS
///
/// * Roots: by default Mozilla's, compiled in (`webpki-roots`, feature
///   `webpki-roots`, default), or the operating system's verifier (feature
///   `platform-verifier`, which wins when both are on). With neither, the
///   default trusts nothing and every `https://` attempt fails with
///   `Certificate` until you give a configuration of your own.
/// * Your own rustls configuration (private CA, client certificates,
///   pinned roots, …): [`Http1Transport::with_tls`]. The transport only
///   sets its ALPN to `http/1.1`.
/// * SNI is the URL's host name (an IP address is checked against the
///   certificate's IP addresses and not sent, as RFC 6066 says). The crypto
///   provider is rustls' `ring` (a C compiler is all it needs to build).
/// * A rejected certificate — unknown issuer, expired, another host's name,
///   none at all — is the permanent `Certificate` (never retried, whatever
///   the request); the rustls error is its `source()`. Any other TLS
///   failure is `Tls` (retried as a transport error: it may be a blip).
///
/// # The connection pool
///
/// Requests are sent with HTTP/1.1's default keep-alive (no `Connection`
/// header is added), and a connection goes back to the pool of its origin
/// (scheme, host, port) only when its answer was read to its exact end:
///
/// * never after an error, an abort, or a body over the limit (the rest is
///   never read), nor when the server said `Connection: close`, answered
///   HTTP/1.0 without keep-alive, ended the body by closing, or sent bytes
///   past the answer; nor when the request itself said `Connection: close`;
/// * an idle connection is closed after [`pool_idle_timeout`](Self::pool_idle_timeout)
///   (30 s by default), and at most [`pool_max_idle_per_host`](Self::pool_max_idle_per_host)
///   (32 by default) are kept per origin, the oldest closed first; 0 turns
///   pooling off (one connection per attempt);
/// * an idle connection is taken most recently used first, and checked
///   once without blocking before use: one the server has closed (or sent
///   anything to, unasked) is dropped;
/// * clones of a transport share its pool (a [`Client`](crate::Client)
///   holds one transport: its calls and batches share connections).
///
/// A server may close an idle connection just as a request goes out on it.
/// When a request sent on a **reused** connection gets nothing back — the
/// connection is closed or reset before the first byte of an answer — the
/// transport sends it once more, on a fresh connection, **only if the
/// request is replayable** (GET, HEAD, PUT, DELETE, OPTIONS, TRACE, or any
/// request with an `Idempotency-Key`: [`polite_client::request_info`]'s
/// rule); otherwise the error is handed back as `Reset`, and the retry
/// machine, which knows the request may not be re-sent, does not resend
/// it. This is the only send the machines do not count (one per attempt
/// at most, and only after a reused connection died unanswered).
///
/// # Everything else
///
/// * The transport follows no redirect: a 3xx is handed back, and polite
///   follows it by the client's [`RedirectPolicy`](polite_client::RedirectPolicy)
///   (a cross-origin hop, `https` to `http` included, drops every header
///   the caller set).
/// * The body is read whole, up to [`body_limit`](Self::body_limit)
///   (16 MiB by default); a larger one (by `Content-Length` or by what
///   arrives) ends the attempt at once with a permanent `BodyTooLarge`
///   (never an out-of-memory, never retried; the connection is closed, the
///   rest never read). The response head (status line and headers) is
///   limited to 64 KiB and 128 headers: a larger one ends the attempt at
///   once with a permanent `HeadTooLarge` (never retried; the source says
///   the limit).
/// * Memory: each connection keeps its read buffer (16 to 64 KiB) while it
///   is pooled, and the transport keeps a handle on the last 8 bodies it
///   handed out (each up to 2 MiB, none past the idle timeout): once you
///   drop one, a later body of about its size (between it and twice it) is
///   decoded into the same allocation instead of fresh pages. A body you
///   still hold is never touched; `Bytes::is_unique` on a body is `false`
///   while its handle is kept.
/// * Any method is sent as given: extension methods (`PURGE`, `PROPFIND`,
///   and `get`, which is not `GET`: methods are case-sensitive) too.
/// * The request gets `Host` (from the URL) and `Content-Length` (from the
///   body, when it has one or the method expects one), each unless it
///   already has one; nothing else is added.
///
/// Errors map to [`TransportErrorKind`]: connection refused → `Refused`;
/// reset, aborted, broken pipe, or closed before a complete answer →
/// `Reset`; name resolution failed or found nothing → `Dns`; an OS timeout
/// → `Timeout`; the attempt still running at `abort_at` → `Aborted`; a
/// rejected certificate → `Certificate`; another TLS failure → `Tls`; a
/// request that cannot be written (unsupported URL, bad header, an HTTP
/// version other than 1.0 and 1.1) → `InvalidRequest`; a body too large →
/// `BodyTooLarge`; an answer head too large → `HeadTooLarge`; anything else
/// → `Other`, an answer that is not valid HTTP among them (a control byte
/// in a header value, a garbage status line: retried as a transport error,
/// as on every adapter). The I/O, TLS or protocol error is kept as the
/// [`TransportError`]'s `source()`.
///
/// ```
/// use polite_async_io::Http1Transport;
/// use std::time::Duration;
/// let t = Http1Transport::new()
///     .max_body(1 << 20)
///     .pool_idle_timeout(Duration::from_secs(10))
///     .pool_max_idle_per_host(4);
/// assert_eq!(t.body_limit(), 1 << 20);
/// assert_eq!(t.idle_timeout(), Duration::from_secs(10));
/// assert_eq!(t.max_idle_per_host(), 4);
/// assert_eq!(Http1Transport::default().body_limit(), polite_async_io::DEFAULT_MAX_BODY);
/// ```
#[derive(Clone)]
pub struct Http1Transport {
    max_body: usize,
    idle_timeout: Duration,
    max_idle_per_host: usize,
    pool: Arc<Pool>,
    /// Allocations of dropped bodies, for the next bodies (shared by clones).
    recycler: Arc<Recycler>,
    /// The caller's TLS configuration (`None`: the default one).
    #[cfg(feature = "tls")]
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Http1Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Http1Transport");
        d.field("max_body", &self.max_body)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_idle_per_host", &self.max_idle_per_host)
            .field("idle", &self.idle_connections());
        #[cfg(feature = "tls")]
        d.field(
            "tls",
            &if self.tls.is_some() {
                "caller's"
            } else {
                "default"
            },
        );
        d.finish()
    }
}

impl Default for Http1Transport {
    fn default() -> Self {
        Http1Transport::new()
    }
}

impl Http1Transport {
    /// A transport with the default body limit, pool and TLS roots.
    ///
    /// ```
    /// let t = polite_async_io::Http1Transport::new();
    /// assert_eq!(t.body_limit(), 16 << 20);
    /// assert_eq!(t.idle_timeout(), std::time::Duration::from_secs(30));
    /// assert_eq!(t.max_idle_per_host(), 32);
    /// ```
    #[must_use]
    pub fn new() -> Http1Transport {
        Http1Transport {
            max_body: polite_client::DEFAULT_MAX_BODY,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_idle_per_host: DEFAULT_MAX_IDLE_PER_HOST,
            pool: Arc::default(),
            recycler: Arc::default(),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// A transport that verifies servers with your rustls `config` (feature
    /// `tls`): a private CA's roots, client certificates, your own
    /// verifier. Its ALPN is set to `http/1.1` (the one protocol spoken
    /// here); everything else is used as given. `rustls` is re-exported as
    /// [`polite_async_io::rustls`](crate::rustls).
    ///
    /// ```
    /// use polite_async_io::{Http1Transport, rustls};
    /// use std::sync::Arc;
    ///
    /// let mut roots = rustls::RootCertStore::empty();
    /// // roots.add(your_ca_certificate_der)?;
    /// # let _ = &mut roots;
    /// let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
    ///     .with_safe_default_protocol_versions()?
    ///     .with_root_certificates(roots)
    ///     .with_no_client_auth();
    /// let transport = Http1Transport::with_tls(Arc::new(config));
    /// let client = polite_async_io::Client::with_transport(transport, polite_async_io::Config::default())?;
    /// # drop(client);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn with_tls(config: Arc<rustls::ClientConfig>) -> Http1Transport {
        Http1Transport {
            tls: Some(crate::tls::http1_only(config)),
            ..Http1Transport::new()
        }
    }

    /// Sets the largest body read; a larger one fails the attempt with a
    /// permanent `BodyTooLarge`.
    ///
    /// ```
    /// let t = polite_async_io::Http1Transport::new().max_body(4096);
    /// assert_eq!(t.body_limit(), 4096);
    /// ```
    #[must_use]
    pub fn max_body(mut self, bytes: usize) -> Http1Transport {
        self.max_body = bytes;
        self
    }

    /// Sets how long an idle connection is kept for reuse (30 s by
    /// default; zero turns pooling off). Servers close idle connections
    /// too (often after 5 to 75 s); a value under the server's makes a
    /// closed connection at reuse rarer.
    ///
    /// ```
    /// use std::time::Duration;
    /// let t = polite_async_io::Http1Transport::new().pool_idle_timeout(Duration::from_secs(5));
    /// assert_eq!(t.idle_timeout(), Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn pool_idle_timeout(mut self, timeout: Duration) -> Http1Transport {
        self.idle_timeout = timeout;
        self
    }

    /// Sets how many idle connections are kept per origin (32 by default;
    /// 0 turns pooling off: one connection per attempt). Keep it at least
    /// the client's concurrency, or a batch opens connections it cannot
    /// keep.
    ///
    /// ```
    /// let t = polite_async_io::Http1Transport::new().pool_max_idle_per_host(0);
    /// assert_eq!(t.max_idle_per_host(), 0);
    /// ```
    #[must_use]
    pub fn pool_max_idle_per_host(mut self, max: usize) -> Http1Transport {
        self.max_idle_per_host = max;
        self
    }

    /// The body limit.
    ///
    /// ```
    /// assert_eq!(polite_async_io::Http1Transport::new().body_limit(), 16 << 20);
    /// ```
    #[must_use]
    pub fn body_limit(&self) -> usize {
        self.max_body
    }

    /// How long an idle connection is kept.
    ///
    /// ```
    /// let t = polite_async_io::Http1Transport::new();
    /// assert_eq!(t.idle_timeout(), polite_async_io::DEFAULT_IDLE_TIMEOUT);
    /// ```
    #[must_use]
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// How many idle connections are kept per origin.
    ///
    /// ```
    /// let t = polite_async_io::Http1Transport::new();
    /// assert_eq!(t.max_idle_per_host(), polite_async_io::DEFAULT_MAX_IDLE_PER_HOST);
    /// ```
    #[must_use]
    pub fn max_idle_per_host(&self) -> usize {
        self.max_idle_per_host
    }

    /// Idle connections in the pool now, over every origin (shared with
    /// this transport's clones).
    ///
    /// ```
    /// assert_eq!(polite_async_io::Http1Transport::new().idle_connections(), 0);
    /// ```
    #[must_use]
    pub fn idle_connections(&self) -> usize {
        self.pool.idle(Instant::now(), self.idle_timeout)
    }

    /// One attempt: a pooled connection or a fresh one, and the one replay
    /// on a fresh connection described on the type.
    async fn attempt(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, TransportError> {
        let target = Target::of(request.uri())?;
        let spare = polite_client::request_info(0, &request)
            .is_replayable()
            .then(|| polite_client::copy_request(&request));
        let (wire, call) = encode(request)?;
        let pooled = self
            .pool
            .take(&target.origin, Instant::now(), self.idle_timeout);
        let reused = pooled.is_some();
        let input = match pooled {
            Some((conn, buf)) => Input::with_buffer(conn, buf),
            None => Input::new(self.connect(&target).await?),
        };
        let failure = match exchange(input, &wire, call, &self.reading()).await {
            Ok(done) => return Ok(self.finish(target.origin, done)),
            Err(failure) => failure,
        };
        match spare {
            Some(spare) if reused && failure.unanswered => {
                let (wire, call) = encode(spare)?;
                let input = Input::new(self.connect(&target).await?);
                match exchange(input, &wire, call, &self.reading()).await {
                    Ok(done) => Ok(self.finish(target.origin, done)),
                    Err(failure) => Err(failure.error),
                }
            }
            _ => Err(failure.error),
        }
    }

    /// How answers are read: up to the limit, into buffers reused from
    /// dropped bodies.
    fn reading(&self) -> Reading<'_> {
        Reading {
            max_body: self.max_body,
            recycler: &self.recycler,
            idle_timeout: self.idle_timeout,
        }
    }

    /// Hands the answer back, and its connection to the pool when it may
    /// carry another request.
    fn finish(&self, origin: Origin, (response, keep): Exchanged) -> http::Response<Bytes> {
        if let Some(input) = keep {
            self.pool.put(
                origin,
                input.stream,
                input.buf,
                Instant::now(),
                self.idle_timeout,
                self.max_idle_per_host,
            );
        }
        response
    }

    /// A fresh connection to `target`: resolved, connected, and for
    /// `https` with its TLS handshake done.
    async fn connect(&self, target: &Target) -> Result<Conn, TransportError> {
        let addrs = resolve(&target.origin.host, target.origin.port).await?;
        let tcp = connect(&addrs).await?;
        if !target.origin.tls {
            return Ok(Conn::Plain(tcp));
        }
        #[cfg(feature = "tls")]
        {
            let config = match &self.tls {
                Some(config) => Arc::clone(config),
                None => crate::tls::default_config()?,
            };
            crate::tls::handshake(config, &target.origin.host, tcp).await
        }
        #[cfg(not(feature = "tls"))]
        {
            // `Target::of` refuses `https` without TLS.
            drop(tcp);
            Err(unsendable())
        }
    }
}

impl Transport for Http1Transport {
    type Sending = BoxSending;

    fn send(&self, request: http::Request<Bytes>, abort_at: Instant) -> BoxSending {
        let this = self.clone();
        Box::pin(futures_lite::future::or(
            async move { this.attempt(request).await },
            async move {
                Timer::at(abort_at).await;
                Err(TransportErrorKind::Aborted.into())
            },
        ))
    }

    /// No timer of its own: polite's drive loop ends the attempt at
    /// `abort_at`.
    fn send_supervised(&self, request: http::Request<Bytes>, _: Instant) -> BoxSending {
        let this = self.clone();
        Box::pin(async move { this.attempt(request).await })
    }
}

/// Where a request goes.
#[derive(Debug)]
struct Target {
    origin: Origin,
}

impl Target {
    /// The origin of an absolute `http://` (or, with TLS, `https://`) URL.
    fn of(uri: &http::Uri) -> Result<Target, TransportError> {
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") if cfg!(feature = "tls") => true,
            // No TLS built in, another scheme, or a relative URL.
            _ => return Err(unsendable()),
        };
        let host = uri.host().ok_or_else(unsendable)?;
        // `http://h:99999/` names no port: not the scheme's default.
        if polite_client::names_no_port(uri) {
            return Err(unsendable());
        }
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(Target {
            origin: Origin { tls, host, port },
        })
    }
}

/// An I/O error as a [`TransportError`], keeping it (or the TLS error
/// inside it) as the source.
pub(crate) fn io_error(e: io::Error) -> TransportError {
    #[cfg(feature = "tls")]
    let e = match crate::tls::from_io(e) {
        Ok(tls) => return tls,
        Err(e) => e,
    };
    TransportError::new(io_kind(&e)).with_source(e)
}

/// The kind an I/O error is retried as (the mapping every adapter
/// shares; anything it does not know is `Other`).
fn io_kind(e: &io::Error) -> TransportErrorKind {
    polite_client::io_error_kind(e).unwrap_or(TransportErrorKind::Other)
}

/// A protocol error reading the answer: more headers than ureq-proto
/// parses (128) is `HeadTooLarge` (permanent); an answer that does not
/// parse (its status line or headers, or a chunk of its body) is
/// `InvalidAnswer` (permanent); anything else `Other`.
fn protocol(e: ureq_proto::Error) -> TransportError {
    use ureq_proto::Error as P;
    let kind = match e {
        P::HttpParseTooManyHeaders => TransportErrorKind::HeadTooLarge,
        P::HttpParseFail(_)
        | P::ChunkLenNotAscii
        | P::ChunkLenNotANumber
        | P::ChunkExpectedCrLf => TransportErrorKind::InvalidAnswer,
        _ => TransportErrorKind::Other,
    };
    TransportError::new(kind).with_source(e)
}

/// An answer head over [`MAX_HEAD`]: permanent (the same request gets the
/// same head again), with the limit and what was read as its source.
fn head_too_large(read: usize) -> TransportError {
    TransportError::head_too_large(MAX_HEAD as u64).with_source(HeadOverLimit { read })
}

/// The source of a `HeadTooLarge`: the answer's head was still going on
/// after `read` bytes, over [`MAX_HEAD`].
#[derive(Debug)]
struct HeadOverLimit {
    read: usize,
}

impl std::fmt::Display for HeadOverLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "response head (status line and headers) over the transport's limit of {MAX_HEAD} bytes ({} bytes read)",
            self.read
        )
    }
}

impl std::error::Error for HeadOverLimit {}

/// A protocol error writing the request (it cannot be sent as it is).
fn invalid(e: ureq_proto::Error) -> TransportError {
    TransportError::new(TransportErrorKind::InvalidRequest).with_source(e)
}

/// A request that cannot be written, with no more to say.
fn unsendable() -> TransportError {
    TransportError::new(TransportErrorKind::InvalidRequest)
}

/// The socket addresses of `host:port` (`host` without brackets); an IP
/// address is used as is.
async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, TransportError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let name = host.to_owned();
    let found = blocking::unblock(move || {
        (name.as_str(), port)
            .to_socket_addrs()
            .map(Iterator::collect::<Vec<_>>)
    })
    .await;
    match found {
        Ok(addrs) if !addrs.is_empty() => Ok(addrs),
        Ok(_) => Err(TransportErrorKind::Dns.into()),
        Err(e) => Err(TransportError::new(TransportErrorKind::Dns).with_source(e)),
    }
}

/// Connects to the first address that accepts.
async fn connect(addrs: &[SocketAddr]) -> Result<Async<TcpStream>, TransportError> {
    let mut last = TransportError::new(TransportErrorKind::Dns);
    for addr in addrs {
        match Async::<TcpStream>::connect(*addr).await {
            Ok(stream) => {
                // The request goes out in one write; no reason to wait for
                // an ACK before anything else.
                let _ = stream.get_ref().set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = io_error(e),
        }
    }
    Err(last)
}

/// What reading an answer takes from the transport.
struct Reading<'a> {
    /// The largest body read.
    max_body: usize,
    /// Where body buffers come from and go back to.
    recycler: &'a Recycler,
    /// How long a dropped body's allocation is kept (the pool's idle
    /// timeout: the transport keeps nothing longer than an idle connection).
    idle_timeout: Duration,
}

/// An answer, and its connection (with its read buffer, empty) when it may
/// carry another request.
type Exchanged = (http::Response<Bytes>, Option<Input>);

/// Why an exchange failed, and whether nothing of an answer had come
/// (the one case a request on a reused connection may be replayed).
#[derive(Debug)]
struct Failure {
    error: TransportError,
    unanswered: bool,
}

/// Writes the request on `conn` and reads the answer whole.
async fn exchange(
    mut input: Input,
    wire: &[u8],
    call: Call<RecvResponse>,
    reading: &Reading<'_>,
) -> Result<Exchanged, Failure> {
    let conn = &mut input.stream;
    let written = async {
        conn.write_all(wire).await?;
        conn.flush().await
    };
    if let Err(e) = written.await {
        return Err(Failure {
            error: io_error(e),
            unanswered: true,
        });
    }
    match receive(&mut input, call, reading).await {
        Ok((response, reusable)) => {
            // Bytes past the answer: the framing is in doubt, never reuse.
            let keep = (reusable && input.buffered().is_empty()).then_some(input);
            Ok((response, keep))
        }
        Err(error) => Err(Failure {
            error,
            unanswered: input.received == 0,
        }),
    }
}

/// The whole request on the wire (head and body, framed), and the call
/// ready to read the answer.
fn encode(request: http::Request<Bytes>) -> Result<(Vec<u8>, Call<RecvResponse>), TransportError> {
    let (parts, body) = request.into_parts();
    // ureq-proto writes the version as given (`HTTP/2.0` too) once its
    // check of methods against versions is off (below): HTTP/1.x only.
    if parts.version != http::Version::HTTP_11 && parts.version != http::Version::HTTP_10 {
        return Err(invalid(ureq_proto::Error::UnsupportedVersion));
    }
    let mut call = Call::new(http::Request::from_parts(parts, ())).map_err(invalid)?;
    // Any method is sent as given: by default ureq-proto refuses every
    // method it does not know for the version (`PURGE`, `PROPFIND`, `get`:
    // methods are case-sensitive) with `MethodVersionMismatch`.
    call.allow_non_standard_methods(true);
    let headers = call.headers();
    let framed = headers.contains_key(http::header::CONTENT_LENGTH)
        || headers.contains_key(http::header::TRANSFER_ENCODING);
    let wants_body = matches!(call.method().as_str(), "POST" | "PUT" | "PATCH");
    if !framed && (wants_body || !body.is_empty()) {
        call.header(http::header::CONTENT_LENGTH, body.len())
            .map_err(invalid)?;
    }

    // Framed straight into `wire`: each write gets initialised room at its
    // tail (zeroed as it is taken, so never more than a write can fill;
    // a 16 KiB scratch buffer zeroed per request was a third of the
    // transport's instructions on a small HTTPS GET).
    let mut wire = Vec::with_capacity(HEAD_ROOM + body.len());
    let mut call = call.proceed();
    let mut room = HEAD_ROOM;
    while !call.can_proceed() {
        match write_into(&mut wire, room, |out| call.write(out)) {
            Ok(0) => return Err(unsendable()),
            Ok(_) => {}
            // Not even the next line fits: more room, up to CHUNK (a line
            // longer than that is never sent).
            Err(ureq_proto::Error::OutputOverflow) if room < CHUNK => room *= 2,
            Err(e) => return Err(invalid(e)),
        }
    }
    let mut call = match call.proceed().map_err(invalid)? {
        Some(SendRequestResult::RecvResponse(call)) => return Ok((wire, call)),
        Some(SendRequestResult::SendBody(call)) => call,
        // `Expect: 100-continue`: the body is sent without waiting (allowed;
        // a late `100 Continue` is skipped when the answer is read).
        Some(SendRequestResult::Await100(call)) => match call.proceed().map_err(invalid)? {
            Await100Result::SendBody(call) => call,
            Await100Result::RecvResponse(call) => return Ok((wire, call)),
        },
        None => return Err(unsendable()),
    };
    let mut rest: &[u8] = &body;
    while !call.can_proceed() {
        // Room for the rest and its framing (a chunk's size line and end),
        // at most CHUNK a write.
        let room = rest.len().saturating_add(64).min(CHUNK);
        let take = rest.len().min(call.calculate_max_input(room));
        let mut used = 0;
        let n = write_into(&mut wire, room, |out| {
            let (u, n) = call.write(&rest[..take], out)?;
            used = u;
            Ok(n)
        })
        .map_err(invalid)?;
        if rest.is_empty() && n == 0 && !call.can_proceed() {
            // The framing asks for more body than there is.
            return Err(unsendable());
        }
        rest = &rest[used..];
    }
    if !rest.is_empty() {
        // More body than its Content-Length says.
        return Err(unsendable());
    }
    let call = call.proceed().ok_or_else(unsendable)?;
    Ok((wire, call))
}

/// The room a request head is framed in at first (doubled, up to
/// [`CHUNK`], while a header line does not fit).
const HEAD_ROOM: usize = 512;

/// Runs `write` on `room` initialised bytes at the end of `wire` and keeps
/// what it wrote: how many bytes (nothing on an error).
fn write_into(
    wire: &mut Vec<u8>,
    room: usize,
    write: impl FnOnce(&mut [u8]) -> Result<usize, ureq_proto::Error>,
) -> Result<usize, ureq_proto::Error> {
    let at = wire.len();
    wire.resize(at + room, 0);
    let written = write(&mut wire[at..]);
    let n = written.as_ref().map_or(0, |&n| n.min(room));
    wire.truncate(at + n);
    written.map(|_| n)
}

/// Bytes read from the connection and not yet used: the window
/// `buf[start..end]` of one buffer the socket reads into directly (no
/// scratch copy; consuming moves `start`, nothing is shifted until the
/// buffer's end is reached). The buffer goes back to the pool with its
/// connection (empty), and grows from [`CHUNK`] to [`MAX_READ_BUF`] while
/// reads bring at least half of it.
struct Input {
    stream: Conn,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes read in all: 0 means no answer had begun.
    received: usize,
    /// The last read brought at least half a buffer: the next one doubles
    /// it (up to [`MAX_READ_BUF`]).
    big: bool,
}

impl Input {
    fn new(stream: Conn) -> Input {
        Input::with_buffer(stream, Vec::new())
    }

    /// `stream` with the read buffer it had before (its content is stale).
    fn with_buffer(stream: Conn, mut buf: Vec<u8>) -> Input {
        if buf.len() < CHUNK {
            buf.resize(CHUNK, 0);
        }
        Input {
            stream,
            buf,
            start: 0,
            end: 0,
            received: 0,
            big: false,
        }
    }

    /// The bytes read and not yet used.
    fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Reads once more from the connection; `Ok(0)` at the end of the stream.
    async fn fill(&mut self) -> Result<usize, TransportError> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        if self.big && self.buf.len() < MAX_READ_BUF {
            // The data comes faster than one buffer a read: grow (zeroed
            // once: the buffer stays with the connection).
            self.buf.resize((self.buf.len() * 2).min(MAX_READ_BUF), 0);
        }
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                (self.start, self.end) = (0, self.end - self.start);
            } else {
                // A head longer than the buffer (bounded by MAX_HEAD).
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
        let n = self
            .stream
            .read(&mut self.buf[self.end..])
            .await
            .map_err(io_error)?;
        self.big = n >= self.buf.len() / 2;
        self.end += n;
        self.received = self.received.saturating_add(n);
        Ok(n)
    }

    fn consume(&mut self, n: usize) {
        self.start = self.end.min(self.start.saturating_add(n));
    }
}

/// Reads the answer: the head, then the body whole (up to the limit);
/// `true` with it when the connection may carry another request.
async fn receive(
    input: &mut Input,
    mut call: Call<RecvResponse>,
    reading: &Reading<'_>,
) -> Result<(http::Response<Bytes>, bool), TransportError> {
    let head = loop {
        let (used, head) = call
            .try_response(input.buffered(), false)
            .map_err(protocol)?;
        if let Some(head) = head {
            // Parsed whole from one read: held to the same limit.
            if used > MAX_HEAD {
                return Err(head_too_large(used));
            }
            input.consume(used);
            break head;
        }
        input.consume(used);
        if used > 0 {
            continue; // a 1xx answer was skipped; the real one may be buffered
        }
        if input.buffered().len() > MAX_HEAD {
            return Err(head_too_large(input.buffered().len()));
        }
        if input.fill().await? == 0 {
            return Err(TransportErrorKind::Reset.into()); // closed before an answer
        }
    };
    let declared = head
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let limit = u64::try_from(reading.max_body).unwrap_or(u64::MAX);
    if declared.is_some_and(|n| n > limit) {
        return Err(TransportError::body_too_large(limit));
    }
    let (body, reusable) = match call.proceed() {
        Some(RecvResponseResult::RecvBody(call)) => {
            // `declared <= limit` here, so it fits in a usize.
            let expected = declared.and_then(|n| usize::try_from(n).ok());
            read_body(input, call, reading, expected).await?
        }
        Some(RecvResponseResult::Redirect(call)) => {
            (Bytes::new(), !call.proceed().must_close_connection())
        }
        Some(RecvResponseResult::Cleanup(call)) => (Bytes::new(), !call.must_close_connection()),
        None => return Err(TransportErrorKind::Other.into()),
    };
    let (parts, ()) = head.into_parts();
    Ok((http::Response::from_parts(parts, body), reusable))
}

/// Reads a body whole, decoding its framing; `true` with it when the
/// connection may carry another request. The body is decoded straight into
/// its own buffer, sized once from `expected` (the declared length,
/// already checked against the limit: a body of known length is never
/// regrown) and reused from a body the caller has dropped when one fits
/// ([`Recycler`]). It is never zeroed ahead: each step extends the
/// initialised part by what the read buffer holds (zeroing only that much,
/// which the decoder overwrites at once, while it is in cache; a reused
/// buffer's stale bytes are initialised already).
async fn read_body(
    input: &mut Input,
    mut call: Call<RecvBody>,
    reading: &Reading<'_>,
    expected: Option<usize>,
) -> Result<(Bytes, bool), TransportError> {
    let max_body = reading.max_body;
    let close_delimited = matches!(call.body_mode(), BodyMode::CloseDelimited);
    let want = expected.unwrap_or(CHUNK).min(max_body);
    // `body[..len]` is the body so far; the rest of `body` is initialised
    // room (stale bytes of a reused buffer, or zeroes).
    let mut body = reading
        .recycler
        .buffer(want, Instant::now(), reading.idle_timeout);
    let mut len = 0;
    let finish = |mut body: BytesMut, len: usize| {
        body.truncate(len);
        let body = body.freeze();
        reading.recycler.keep(&body, Instant::now());
        body
    };
    loop {
        if !close_delimited && call.can_proceed() {
            let reusable = match call.proceed() {
                Some(RecvBodyResult::Redirect(call)) => !call.proceed().must_close_connection(),
                Some(RecvBodyResult::Cleanup(call)) => !call.must_close_connection(),
                None => false,
            };
            return Ok((finish(body, len), reusable));
        }
        let buffered = input.buffered().len();
        if buffered > 0 {
            // Room for what is buffered (the decoded body is never longer
            // than its encoding), never past the limit.
            let room = max_body - len;
            let end = len + buffered.min(room);
            if body.len() < end {
                body.resize(end, 0);
            }
            let decoded = call.read(input.buffered(), &mut body[len..end]);
            let (used, n) = match decoded {
                Ok(step) => step,
                Err(e) => return Err(protocol(e)),
            };
            len += n;
            input.consume(used);
            if used > 0 || n > 0 {
                continue;
            }
            if room == 0 {
                // Full to the limit, and the decoder has body bytes to give.
                return Err(TransportError::body_too_large(
                    u64::try_from(max_body).unwrap_or(u64::MAX),
                ));
            }
        }
        if input.fill().await? == 0 {
            // The end of the stream ends a close-delimited body, and a
            // chunked one whose last chunk came (a server that closed
            // right after `0\r\n`); anything else was cut short. Either
            // way the connection is closed: never reused.
            return if close_delimited || call.is_ended_chunked() {
                Ok((finish(body, len), false))
            } else {
                Err(TransportErrorKind::Reset.into())
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(request: http::Request<Bytes>) -> String {
        let (wire, _) = encode(request).unwrap();
        String::from_utf8(wire).unwrap()
    }

    #[test]
    fn a_get_goes_out_in_origin_form_with_host_and_no_connection_header() {
        let get = http::Request::get("http://127.0.0.1:8080/runs/1?waitSeconds=5")
            .header("authorization", "Bearer x")
            .body(Bytes::new())
            .unwrap();
        let text = wire(get);
        assert!(
            text.starts_with("GET /runs/1?waitSeconds=5 HTTP/1.1\r\n"),
            "{text}"
        );
        assert!(text.contains("host: 127.0.0.1:8080\r\n"), "{text}");
        assert!(
            !text.contains("connection"),
            "keep-alive is HTTP/1.1's default: {text}"
        );
        assert!(!text.contains("content-length"), "{text}");
        assert!(text.ends_with("\r\n\r\n"), "{text}");
    }

    #[test]
    fn bodies_are_framed_by_length_or_chunks() {
        let post = http::Request::post("http://h.test/items")
            .body(Bytes::from_static(b"{\"a\":1}"))
            .unwrap();
        let text = wire(post);
        assert!(text.contains("content-length: 7\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n{\"a\":1}"), "{text}");

        let empty = http::Request::post("http://h.test/items")
            .body(Bytes::new())
            .unwrap();
        assert!(wire(empty).contains("content-length: 0\r\n"));

        let chunked = http::Request::put("http://h.test/items/1")
            .header("transfer-encoding", "chunked")
            .body(Bytes::from_static(b"hello"))
            .unwrap();
        assert!(wire(chunked).ends_with("5\r\nhello\r\n0\r\n\r\n"));

        let big = vec![b'x'; 3 * CHUNK + 17];
        let post = http::Request::post("http://h.test/items")
            .body(Bytes::from(big.clone()))
            .unwrap();
        let (bytes, _) = encode(post).unwrap();
        assert!(bytes.ends_with(&big));
    }

    #[test]
    fn heads_longer_than_the_first_room_go_out_whole_up_to_a_line_of_chunk() {
        // A long request line, then 40 headers of about 100 bytes, then
        // one of 10 KiB: each outgrows the room the head starts with.
        let path = format!("/{}", "p".repeat(3 * HEAD_ROOM));
        let mut get = http::Request::get(format!("http://h.test{path}"));
        let mut expected = Vec::new();
        for i in 0..40 {
            let value = format!("{i:03}-{}", "v".repeat(96));
            expected.push(format!("x-h{i}: {value}\r\n"));
            get = get.header(format!("x-h{i}"), value);
        }
        let cookie = "c".repeat(10 << 10);
        expected.push(format!("cookie: {cookie}\r\n"));
        let text = wire(get.header("cookie", cookie).body(Bytes::new()).unwrap());
        assert!(text.starts_with(&format!("GET {path} HTTP/1.1\r\n")));
        assert!(text.ends_with("\r\n\r\n"));
        let mut at = 0;
        for line in &expected {
            let found = text[at..].find(line.as_str()).map(|i| at + i);
            assert!(found.is_some(), "{line:.20} missing or out of order");
            at = found.unwrap_or(at) + line.len();
        }

        // One line longer than CHUNK is never sent, as before.
        let huge = http::Request::get("http://h.test/")
            .header("cookie", "c".repeat(CHUNK + 1))
            .body(Bytes::new())
            .unwrap();
        assert_eq!(
            encode(huge).err().map(|e| e.kind()),
            Some(TransportErrorKind::InvalidRequest)
        );
    }

    #[test]
    fn a_body_that_contradicts_its_length_is_not_sent() {
        let long = http::Request::post("http://h.test/items")
            .header("content-length", "2")
            .body(Bytes::from_static(b"hello"))
            .unwrap();
        assert_eq!(
            encode(long).err().map(|e| e.kind()),
            Some(TransportErrorKind::InvalidRequest)
        );
        let short = http::Request::post("http://h.test/items")
            .header("content-length", "9")
            .body(Bytes::from_static(b"hello"))
            .unwrap();
        assert_eq!(
            encode(short).err().map(|e| e.kind()),
            Some(TransportErrorKind::InvalidRequest)
        );
    }

    #[test]
    fn extension_methods_go_out_as_given() {
        for (method, body) in [("PURGE", ""), ("PROPFIND", "<propfind/>"), ("get", "")] {
            let req = http::Request::builder()
                .method(method)
                .uri("http://h.test/echo")
                .body(Bytes::from(body))
                .unwrap();
            let text = wire(req);
            assert!(
                text.starts_with(&format!("{method} /echo HTTP/1.1\r\n")),
                "{text}"
            );
            assert!(text.ends_with(&format!("\r\n\r\n{body}")), "{text}");
        }
    }

    #[test]
    fn a_version_other_than_http_1_is_not_written() {
        for version in [http::Version::HTTP_2, http::Version::HTTP_3] {
            let req = http::Request::get("http://h.test/")
                .version(version)
                .body(Bytes::new())
                .unwrap();
            let e = encode(req).err().unwrap();
            assert_eq!(e.kind(), TransportErrorKind::InvalidRequest, "{version:?}");
            assert!(std::error::Error::source(&e).is_some());
        }
        let old = http::Request::get("http://h.test/")
            .version(http::Version::HTTP_10)
            .body(Bytes::new())
            .unwrap();
        assert!(wire(old).starts_with("GET / HTTP/1.0\r\n"));
    }

    #[test]
    fn a_head_over_the_limit_is_permanent_and_names_it() {
        let e = head_too_large(MAX_HEAD + 1);
        assert_eq!(e.kind(), TransportErrorKind::HeadTooLarge);
        assert_eq!(e.limit(), Some(MAX_HEAD as u64));
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert!(
            source.as_deref().is_some_and(|s| s.contains("65536 bytes")),
            "{source:?}"
        );
        let many = protocol(ureq_proto::Error::HttpParseTooManyHeaders);
        assert_eq!(many.kind(), TransportErrorKind::HeadTooLarge);
        let garbage = protocol(ureq_proto::Error::HttpParseFail("x".into()));
        assert_eq!(garbage.kind(), TransportErrorKind::InvalidAnswer);
    }

    #[test]
    fn io_errors_map_to_kinds() {
        use io::ErrorKind as K;
        for (kind, expected) in [
            (K::ConnectionRefused, TransportErrorKind::Refused),
            (K::ConnectionReset, TransportErrorKind::Reset),
            (K::UnexpectedEof, TransportErrorKind::Reset),
            (K::BrokenPipe, TransportErrorKind::Reset),
            (K::TimedOut, TransportErrorKind::Timeout),
            (K::PermissionDenied, TransportErrorKind::Other),
        ] {
            assert_eq!(io_kind(&io::Error::from(kind)), expected, "{kind:?}");
        }
    }
}
