//! A call that ends on a limit (its timeout, a server's wait longer than
//! polite takes by itself) says so in one line, through a real adapter
//! against real loopback servers (SPEC §5, "errors that explain"): the last
//! answer or transport error, the attempts, the time, and the limit.

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_core::{Outcome, TransportErrorKind};
use polite_lab::{Lab, LabConfig, Step};
use polite_tokio::{CallOptions, Client, Config, Error, ReqwestTransport, TransportError};

/// A client whose transport retries outlast a 1 s budget (the default 4,
/// with full jitter, can all fit in it: the call would end
/// `RetriesExhausted`, not on its timeout).
fn client() -> Client<ReqwestTransport> {
    let mut config = Config::default();
    config.retry.max_retries.transport = 50;
    Client::with_transport(ReqwestTransport::new(reqwest::Client::new()), config).unwrap()
}

fn get(url: String, timeout: Duration) -> http::Request<Bytes> {
    let mut r = http::Request::get(url).body(Bytes::new()).unwrap();
    r.extensions_mut()
        .insert(CallOptions::new().timeout(timeout));
    r
}

/// A port nothing listens on: bound, then closed.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// F2: refused connections retried until the next attempt would go after
/// the deadline: the error keeps the last transport error as `source()`,
/// and says the attempts, the time and why it stopped before the timeout.
#[tokio::test]
async fn a_timeout_after_refused_connections_keeps_the_transport_error() {
    let url = format!("http://127.0.0.1:{}/x?token=SECRET", closed_port());
    let started = Instant::now();
    let e = client()
        .send(get(url, Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "stopped early");
    assert!(
        matches!(e.outcome(), Some(Outcome::TimedOut { needed: Some(_) })),
        "{e:?}"
    );
    let line = e.to_string();
    eprintln!("{line}");
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
    assert!(!line.contains("SECRET") && !line.contains('\n'), "{line}");
    assert_eq!(
        e.transport_error().map(TransportError::kind),
        Some(TransportErrorKind::Refused)
    );
    let source = std::error::Error::source(&e).expect("the transport error as source()");
    let source = source
        .downcast_ref::<TransportError>()
        .expect("a TransportError");
    assert_eq!(source.kind(), TransportErrorKind::Refused);
    // and the transport's own error below it
    assert!(std::error::Error::source(source).is_some());
    assert!(limit.next_in().is_some() && limit.elapsed() < Duration::from_secs(1));
}

/// F3: a 503 whose Retry-After falls after the deadline: the call stops at
/// once, and says the answer, the server's Retry-After and the timeout.
#[tokio::test]
async fn a_retry_after_past_the_deadline_says_so_with_the_answer() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/ra",
        vec![Step::with_retry_after(503, Duration::from_secs(30))],
    ))
    .unwrap();
    let e = client()
        .send(get(lab.url("/items/ra"), Duration::from_secs(5)))
        .await
        .unwrap_err();
    let line = e.to_string();
    eprintln!("{line}");
    assert!(
        matches!(e.outcome(), Some(Outcome::TimedOut { needed: Some(_) })),
        "{e:?}"
    );
    assert!(
        line.starts_with("timed out: the next attempt could go only in ")
            && line.contains("s (the server's Retry-After), after the 5.0s timeout (last: HTTP 503; 1 attempt in "),
        "{line}"
    );
    assert_eq!(e.response().map(|r| r.status().as_u16()), Some(503));
    assert!(e.transport_error().is_none() && std::error::Error::source(&e).is_none());
    assert_eq!(lab.log().len(), 1);
}

/// A lab answering `status` with `Retry-After: 86400` (a day), and the
/// error (and its line) of a 5 s call to it.
async fn asked_to_wait_a_day(status: u16) -> (Error, String) {
    let lab = Lab::start(LabConfig::default().script(
        "/items/day",
        vec![Step::with_retry_after(status, Duration::from_secs(86_400))],
    ))
    .unwrap();
    let e = client()
        .send(get(lab.url("/items/day"), Duration::from_secs(5)))
        .await
        .unwrap_err();
    let line = e.to_string();
    eprintln!("{line}");
    (e, line)
}

/// F3: a 429 asking for a day: "rate limited" with the wait asked and
/// polite's own cap; the 429 is still handed back by `into_answer`.
#[tokio::test]
async fn a_429_asking_for_a_day_says_the_wait_and_the_cap() {
    let (e, line) = asked_to_wait_a_day(429).await;
    assert!(
        matches!(
            e.outcome(),
            Some(Outcome::RateLimited { retry_at: Some(_) })
        ),
        "{e:?}"
    );
    assert!(
        line.starts_with("rate limited: the server asks to wait 86")
            && line.contains("s (the server's Retry-After), longer than polite waits by itself (60.0s) (last: HTTP 429; 1 attempt in "),
        "{line}"
    );
    let (answer, _) = e.into_answer().unwrap();
    assert_eq!(answer.status().as_u16(), 429);
}

/// F3: a 503 asking for a day is not called "rate limited".
#[tokio::test]
async fn a_503_asking_for_a_day_is_not_called_rate_limited() {
    let (e, line) = asked_to_wait_a_day(503).await;
    assert!(
        matches!(e.outcome(), Some(Outcome::RateLimited { .. })),
        "{e:?}"
    );
    assert!(
        line.starts_with("not retried: the server asks to wait 86")
            && line.contains("(last: HTTP 503; 1 attempt in ")
            && !line.contains("rate limited"),
        "{line}"
    );
}

/// F3: a server that never answers: the timeout that passed and the
/// attempt count, not a bare "timed out".
#[tokio::test]
async fn a_hung_server_says_the_timeout_and_the_attempts() {
    let lab = Lab::start(LabConfig::default().script("/items/hang", vec![Step::Hang])).unwrap();
    let e = client()
        .send(get(lab.url("/items/hang"), Duration::from_millis(500)))
        .await
        .unwrap_err();
    let line = e.to_string();
    eprintln!("{line}");
    assert!(
        matches!(e.outcome(), Some(Outcome::TimedOut { .. })),
        "{e:?}"
    );
    assert!(
        line.starts_with("timed out: the 500.0ms timeout passed (")
            && line.contains("1 attempt in "),
        "{line}"
    );
}
