//! A call that ends on a limit says so in one line on polite-blocking too
//! (SPEC §5): refused connections until the timeout keep their transport
//! error, and a Retry-After past the deadline names the answer and the
//! limit.

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{CallOptions, Client, Config, Error, Outcome, TransportError, UreqTransport};
use polite_core::TransportErrorKind;
use polite_lab::{Lab, LabConfig, Step};

/// A client whose transport retries outlast a 1 s budget (the default 4,
/// with full jitter, can all fit in it: the call would end
/// `RetriesExhausted`, not on its timeout).
fn client() -> Client<UreqTransport> {
    let mut config = Config::default();
    config.retry.max_retries.transport = 50;
    Client::with_transport(UreqTransport::default(), config).unwrap()
}

fn get(url: String, timeout: Duration) -> http::Request<Bytes> {
    let mut r = http::Request::get(url).body(Bytes::new()).unwrap();
    r.extensions_mut()
        .insert(CallOptions::new().timeout(timeout));
    r
}

/// F2: the refused connection survives a call that ends `TimedOut`.
#[test]
fn a_timeout_after_refused_connections_keeps_the_transport_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let e = client()
        .send(get(
            format!("http://127.0.0.1:{port}/x"),
            Duration::from_secs(1),
        ))
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "stopped early");
    let line = e.to_string();
    eprintln!("{line}");
    assert!(
        matches!(e.outcome(), Some(Outcome::TimedOut { needed: Some(_) })),
        "{e:?}"
    );
    let Error::Limit(limit) = &e else {
        panic!("want Error::Limit, got {e:?}")
    };
    let attempts = limit.attempts();
    assert!(attempts >= 2, "{line}");
    assert!(
        line.starts_with("timed out: the next attempt could go only in ")
            && line.contains(", after the 1.0s timeout (last: connection refused; ")
            && line.contains(&format!("; {attempts} attempts in ")),
        "{line}"
    );
    assert_eq!(
        e.transport_error().map(TransportError::kind),
        Some(TransportErrorKind::Refused)
    );
    let source = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<TransportError>())
        .expect("the transport error as source()");
    assert_eq!(source.kind(), TransportErrorKind::Refused);
}

/// F3: a 503 whose Retry-After falls after the deadline.
#[test]
fn a_retry_after_past_the_deadline_says_so_with_the_answer() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/ra",
        vec![Step::with_retry_after(503, Duration::from_secs(30))],
    ))
    .unwrap();
    let e = client()
        .send(get(lab.url("/items/ra"), Duration::from_secs(5)))
        .unwrap_err();
    let line = e.to_string();
    eprintln!("{line}");
    assert!(
        line.starts_with("timed out: the next attempt could go only in ")
            && line.contains("s (the server's Retry-After), after the 5.0s timeout (last: HTTP 503; 1 attempt in "),
        "{line}"
    );
    assert_eq!(e.response().map(|r| r.status().as_u16()), Some(503));
}
