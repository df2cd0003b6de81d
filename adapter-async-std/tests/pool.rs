//! The connection pool of `Http1Transport`: what is reused, what never is,
//! and the one replay on a fresh connection when a reused one dies before
//! answering (replayable requests only).
//!
//! Most checks use a scripted raw server: each accepted connection follows
//! its own script (answer, answer and close, read the request and close
//! without answering), and the server records which request arrived on
//! which connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_async_io::{Client, Config, Http1Transport, Outcome, Transport};
use polite_core::TransportErrorKind;
use polite_lab::{Lab, LabConfig};

const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
const OK_CLOSE: &str = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";

/// What one connection does with each request it reads, in order; after
/// the last step it closes.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Writes this answer and waits for the next request.
    Answer(&'static str),
    /// Writes `OK` and closes at once (a server's idle close), then says so.
    AnswerThenClose,
    /// Reads the request and closes without a byte of answer.
    CloseUnanswered,
}

/// A scripted server: connection `i` follows `plans[i]`.
struct Scripted {
    addr: SocketAddr,
    /// `(connection index, "METHOD /path")` in arrival order.
    seen: Arc<Mutex<Vec<(usize, String)>>>,
    closed: mpsc::Receiver<usize>,
}

impl Scripted {
    fn start(plans: Vec<Vec<Step>>) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (closed_tx, closed) = mpsc::channel();
        let record = Arc::clone(&seen);
        std::thread::spawn(move || {
            for (index, plan) in plans.into_iter().enumerate() {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                let record = Arc::clone(&record);
                let closed_tx = closed_tx.clone();
                std::thread::spawn(move || serve(index, stream, &plan, &record, &closed_tx));
            }
        });
        Scripted { addr, seen, closed }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn seen(&self) -> Vec<(usize, String)> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads one request (head and `content-length` body); `None` at EOF.
fn read_request(reader: &mut BufReader<std::net::TcpStream>) -> Option<String> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let request = format!("{} {}", parts.next()?, parts.next()?);
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some(request)
}

fn serve(
    index: usize,
    stream: std::net::TcpStream,
    plan: &[Step],
    seen: &Mutex<Vec<(usize, String)>>,
    closed: &mpsc::Sender<usize>,
) {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    for step in plan {
        let Some(request) = read_request(&mut reader) else {
            return;
        };
        seen.lock().unwrap().push((index, request));
        match step {
            Step::Answer(answer) => writer.write_all(answer.as_bytes()).unwrap(),
            Step::AnswerThenClose => {
                writer.write_all(OK.as_bytes()).unwrap();
                drop(writer);
                drop(reader);
                let _ = closed.send(index);
                return;
            }
            Step::CloseUnanswered => return,
        }
    }
}

fn get(url: &str) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

fn send(t: &Http1Transport, request: http::Request<Bytes>) -> Result<String, TransportErrorKind> {
    let resp = smol::block_on(t.send(request, Instant::now() + Duration::from_secs(10)))
        .map_err(|e| e.kind())?;
    Ok(String::from_utf8_lossy(resp.body()).into_owned())
}

fn seen(list: &[(usize, &str)]) -> Vec<(usize, String)> {
    list.iter().map(|(i, r)| (*i, (*r).to_owned())).collect()
}

#[test]
fn a_replayable_request_on_a_reused_connection_the_server_dropped_is_sent_once_more_on_a_fresh_one()
{
    let server = Scripted::start(vec![
        vec![Step::Answer(OK), Step::CloseUnanswered],
        vec![Step::Answer(OK), Step::CloseUnanswered],
        vec![Step::Answer(OK)],
    ]);
    let t = Http1Transport::new();
    assert_eq!(send(&t, get(&server.url("/a"))).as_deref(), Ok("ok"));
    assert_eq!(send(&t, get(&server.url("/b"))).as_deref(), Ok("ok"));
    // A POST with an Idempotency-Key is replayable too.
    let keyed = http::Request::post(server.url("/c"))
        .header("idempotency-key", "k-1")
        .body(Bytes::from_static(b"{}"))
        .unwrap();
    assert_eq!(send(&t, keyed).as_deref(), Ok("ok"));
    assert_eq!(
        server.seen(),
        seen(&[
            (0, "GET /a"),
            (0, "GET /b"), // read, then the connection closed unanswered
            (1, "GET /b"), // the one replay, on a fresh connection
            (1, "POST /c"),
            (2, "POST /c"),
        ])
    );
}

#[test]
fn a_post_on_a_reused_connection_the_server_dropped_is_not_resent() {
    let server = Scripted::start(vec![
        vec![Step::Answer(OK), Step::CloseUnanswered],
        vec![Step::Answer(OK), Step::CloseUnanswered],
        vec![Step::Answer(OK)],
    ]);
    let post = |path: &str| {
        http::Request::post(server.url(path))
            .body(Bytes::from_static(b"{}"))
            .unwrap()
    };
    // The transport alone: the error is handed back as a reset.
    let t = Http1Transport::new();
    assert_eq!(send(&t, get(&server.url("/a"))).as_deref(), Ok("ok"));
    assert_eq!(send(&t, post("/b")), Err(TransportErrorKind::Reset));
    // Through a client: the retry machine does not resend it either.
    let client = Client::with_transport(Http1Transport::new(), Config::default()).unwrap();
    smol::block_on(async {
        assert_eq!(
            client.send(get(&server.url("/c"))).await.unwrap().status(),
            200
        );
        let err = client.send(post("/d")).await.unwrap_err();
        assert!(
            matches!(err.outcome(), Some(Outcome::NotReplayable { .. })),
            "{err:?}"
        );
    });
    assert_eq!(
        server.seen(),
        seen(&[(0, "GET /a"), (0, "POST /b"), (1, "GET /c"), (1, "POST /d")]),
        "each POST arrived once; connection 2 was never opened"
    );
}

#[test]
fn a_connection_the_server_closed_while_idle_is_not_reused() {
    let server = Scripted::start(vec![vec![Step::AnswerThenClose], vec![Step::Answer(OK)]]);
    let t = Http1Transport::new();
    assert_eq!(send(&t, get(&server.url("/a"))).as_deref(), Ok("ok"));
    assert_eq!(
        t.idle_connections(),
        1,
        "kept alive: no Connection: close came"
    );
    // The server has closed its side (no sleep: it says when).
    assert_eq!(server.closed.recv_timeout(Duration::from_secs(5)), Ok(0));
    assert_eq!(send(&t, get(&server.url("/b"))).as_deref(), Ok("ok"));
    assert_eq!(server.seen(), seen(&[(0, "GET /a"), (1, "GET /b")]));
}

#[test]
fn an_answer_with_connection_close_is_not_reused() {
    // Connection 0 says `Connection: close` but stays open: a client that
    // reused it would show up as a second request on connection 0.
    let server = Scripted::start(vec![
        vec![Step::Answer(OK_CLOSE), Step::Answer(OK)],
        vec![Step::Answer(OK)],
    ]);
    let t = Http1Transport::new();
    assert_eq!(send(&t, get(&server.url("/a"))).as_deref(), Ok("ok"));
    assert_eq!(t.idle_connections(), 0);
    assert_eq!(send(&t, get(&server.url("/b"))).as_deref(), Ok("ok"));
    assert_eq!(t.idle_connections(), 1);
    assert_eq!(server.seen(), seen(&[(0, "GET /a"), (1, "GET /b")]));
}

#[test]
fn a_request_saying_connection_close_is_not_reused() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let t = Http1Transport::new();
    for _ in 0..2 {
        let req = http::Request::get(lab.url("/items/a"))
            .header("connection", "close")
            .body(Bytes::new())
            .unwrap();
        assert!(send(&t, req).is_ok());
    }
    assert_eq!(t.idle_connections(), 0);
    assert_eq!(lab.connections(), 2);
}

#[test]
fn an_answer_not_read_to_its_end_is_not_reused() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    // `{"item":"a"}` is over 4 bytes: the attempt stops at the head.
    let t = Http1Transport::new().max_body(4);
    for _ in 0..2 {
        assert_eq!(
            send(&t, get(&lab.url("/items/a"))),
            Err(TransportErrorKind::BodyTooLarge)
        );
        assert_eq!(t.idle_connections(), 0);
    }
    assert_eq!(lab.connections(), 2);
}

#[test]
fn an_attempt_aborted_mid_answer_does_not_leave_its_connection_behind() {
    let lab = Lab::start(LabConfig::default().fault(
        polite_lab::PathMatch::exact("/items/slow"),
        polite_lab::Fault::Hang,
    ))
    .unwrap();
    let t = Http1Transport::new();
    assert!(send(&t, get(&lab.url("/items/a"))).is_ok());
    assert_eq!(t.idle_connections(), 1);
    let aborted = smol::block_on(t.send(
        get(&lab.url("/items/slow")),
        Instant::now() + Duration::from_millis(200),
    ));
    assert_eq!(aborted.unwrap_err().kind(), TransportErrorKind::Aborted);
    assert_eq!(
        t.idle_connections(),
        0,
        "the aborted attempt took it and dropped it"
    );
    assert!(send(&t, get(&lab.url("/items/b"))).is_ok());
    assert_eq!(lab.connections(), 2);
}

#[test]
fn clones_share_the_pool_and_pooling_can_be_turned_off() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let t = Http1Transport::new();
    let clone = t.clone();
    assert!(send(&t, get(&lab.url("/items/a"))).is_ok());
    assert!(send(&clone, get(&lab.url("/items/b"))).is_ok());
    assert_eq!(lab.connections(), 1);

    let lab = Lab::start(LabConfig::default()).unwrap();
    let off = Http1Transport::new().pool_max_idle_per_host(0);
    for _ in 0..3 {
        assert!(send(&off, get(&lab.url("/items/a"))).is_ok());
    }
    assert_eq!(lab.connections(), 3);
}
