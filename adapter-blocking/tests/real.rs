//! polite-blocking against the lab on loopback, in real time: cancel
//! latency (sleeping and in flight), what becomes of an abandoned attempt,
//! the hard deadline against a hanging server, threads sharing one client
//! and its throttle, bounded worker threads in a batch, the transport's
//! error mapping and body limit, and attempt records without credentials.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{
    CancelToken, Client, Config, Error, Outcome, Throttle, Transport, UreqTransport, block_on,
};
use polite_core::TransportErrorKind;
use polite_lab::{Disposition, Fault, Lab, LabConfig, LogStats, PathMatch, Quota, Step};

fn client(config: Config) -> Client<UreqTransport> {
    Client::with_transport(UreqTransport::default(), config).unwrap()
}

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

/// Cancels `token` after `after` from another thread; returns when it did.
fn cancel_later(token: &CancelToken, after: Duration) -> std::thread::JoinHandle<Instant> {
    let token = token.clone();
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let at = Instant::now();
        token.cancel();
        at
    })
}

/// Waits (bounded) until `f` holds; returns how long it took, or `None`.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

#[test]
fn client_is_clone_send_sync() {
    fn check<T: Clone + Send + Sync + 'static>() {}
    check::<Client<UreqTransport>>();
    check::<UreqTransport>();
    check::<CancelToken>();
}

#[test]
fn cancel_during_a_30s_backoff_returns_within_100ms() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/c",
        vec![
            Step::with_retry_after(503, Duration::from_secs(30)),
            Step::Normal,
        ],
    ))
    .unwrap();
    let c = client(Config {
        timeout: Duration::from_secs(60),
        ..Config::default()
    });
    let token = CancelToken::new();
    let canceller = cancel_later(&token, Duration::from_millis(500));
    let result = c.send_cancellable(get(lab.url("/items/c")), &token);
    let returned = Instant::now();
    let latency = returned - canceller.join().unwrap();
    assert_eq!(result.unwrap_err().outcome(), Some(Outcome::Cancelled));
    eprintln!("cancel latency during a 30 s backoff: {latency:?}");
    // "At once": far below the 30 s sleep, with 1 s of slack for a loaded
    // CI machine (the latency itself is measured in BENCHMARKS §6).
    assert!(latency < Duration::from_secs(1), "cancel took {latency:?}");
    assert_eq!(lab.log().len(), 1, "no send after the cancel");
}

/// The documented fate of an attempt abandoned by a cancel: the call
/// returns at once; the worker and its connection live until `abort_at`
/// (the request stays open at the server until then); then both are gone.
#[test]
fn cancel_during_an_in_flight_hang_returns_at_once_and_the_worker_ends_at_abort_at() {
    let lab = Lab::start(LabConfig::default().script("/items/h", vec![Step::Hang])).unwrap();
    let mut config = Config {
        timeout: Duration::from_millis(1000),
        ..Config::default()
    };
    config.retry.transport_cushion = Duration::from_millis(500);
    let c = client(config);
    let token = CancelToken::new();
    let started = Instant::now();
    let abort_at = started + Duration::from_millis(1500);
    let canceller = cancel_later(&token, Duration::from_millis(300));
    let result = c.send_cancellable(get(lab.url("/items/h")), &token);
    let returned = Instant::now();
    let latency = returned - canceller.join().unwrap();
    assert_eq!(result.unwrap_err().outcome(), Some(Outcome::Cancelled));
    eprintln!("cancel latency with an attempt in flight: {latency:?}");
    // "At once": before `abort_at` (1.2 s after the cancel), with 600 ms of
    // slack for a loaded CI machine.
    assert!(
        latency < Duration::from_millis(600),
        "cancel took {latency:?}"
    );

    // Right after the return: the request reached the server and is still
    // open there, and its worker is still alive.
    let log = lab.log();
    assert_eq!(log.len(), 1, "{}", log.render());
    assert_eq!(log[0].disposition, Disposition::Hung);
    assert_eq!(log[0].completed, None, "the socket is still open");
    assert_eq!(c.transport().live_workers(), 1);

    // After abort_at the worker is gone and the server saw the client close.
    let gone = eventually(Duration::from_secs(3), || c.transport().live_workers() == 0);
    let gone_at = Instant::now();
    assert!(gone.is_some(), "the abandoned worker outlived abort_at");
    eprintln!(
        "abandoned worker ended {:?} after abort_at",
        gone_at.saturating_duration_since(abort_at)
    );
    assert!(
        gone_at + Duration::from_millis(50) >= abort_at,
        "the worker ended before abort_at?"
    );
    assert!(gone_at < abort_at + Duration::from_millis(500));
    let closed = eventually(Duration::from_secs(1), || lab.log()[0].completed.is_some());
    assert!(
        closed.is_some(),
        "the server never saw the connection close"
    );
    let closed_at = lab.log()[0].completed.unwrap();
    assert!(
        closed_at + Duration::from_millis(50) >= abort_at
            && closed_at < abort_at + Duration::from_millis(500),
        "connection closed {:?} from abort_at",
        closed_at.duration_since(started)
    );
}

#[test]
fn a_hanging_server_cannot_hold_a_call_past_deadline_plus_cushion() {
    let lab =
        Lab::start(LabConfig::default().fault(PathMatch::exact("/items/h"), Fault::Hang)).unwrap();
    let c = client(Config {
        timeout: Duration::from_secs(1),
        ..Config::default()
    });
    let started = Instant::now();
    let result = c.send(get(lab.url("/items/h")));
    let took = started.elapsed();
    eprintln!("hanging server, timeout 1 s, cushion 2 s: returned after {took:?}");
    assert!(
        matches!(
            result.unwrap_err().outcome(),
            Some(Outcome::TimedOut { .. })
        ),
        "not TimedOut"
    );
    assert!(took < Duration::from_millis(3300), "{took:?}");
    // And the worker does not outlive abort_at (1 s + 2 s).
    let gone = eventually(Duration::from_secs(4), || c.transport().live_workers() == 0);
    assert!(gone.is_some());
    assert!(started.elapsed() < Duration::from_millis(3500));
}

/// Two threads share one client with a throttle of 5 per 500 ms: together
/// they stay within it (the lab, with the same quota, refuses nothing).
#[test]
fn two_threads_sharing_a_client_stay_within_its_throttle_together() {
    let window = Duration::from_millis(500);
    let lab = Lab::start(LabConfig::default().quota(Quota::sliding(5, window))).unwrap();
    let c = client(Config {
        timeout: Duration::from_secs(20),
        throttle: Some(Throttle::new(5, window)),
        ..Config::default()
    });
    let started = Instant::now();
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let (c, base) = (c.clone(), format!("http://{}", lab.addr()));
            std::thread::spawn(move || {
                (0..8)
                    .map(|i| c.send(get(format!("{base}/items/t{t}-{i}"))))
                    .filter(Result::is_ok)
                    .count()
            })
        })
        .collect();
    let ok: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let took = started.elapsed();
    let log = lab.log();
    eprintln!(
        "two threads, 16 sends, throttle 5/500ms: {took:?}, most in any 500 ms window: {}, 429s: {}",
        log.max_arrivals_within(window),
        log.count_429()
    );
    assert_eq!(ok, 16);
    assert_eq!(log.len(), 16, "{}", log.render());
    assert_eq!(log.count_429(), 0);
    assert!(log.max_arrivals_within(window) <= 5);
    // 16 sends at 5 per 500 ms need at least three full windows.
    assert!(took >= Duration::from_millis(1500), "{took:?}");
}

/// A batch keeps at most `concurrency` attempts in flight, so at most that
/// many worker threads, never one per item; all are gone at the end.
#[test]
fn a_batch_runs_at_most_concurrency_workers() {
    let lab = Lab::start(
        LabConfig::default().fault(PathMatch::Any, Fault::Slow(Duration::from_millis(60))),
    )
    .unwrap();
    let c = client(Config {
        timeout: Duration::from_secs(20),
        concurrency: 3,
        ..Config::default()
    });
    let peak = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = std::thread::spawn({
        let (peak, done, c) = (peak.clone(), done.clone(), c.clone());
        move || {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(c.transport().live_workers(), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    let requests = (0..20)
        .map(|i| get(lab.url(&format!("/items/{i}"))))
        .collect();
    let results = c.batch(requests).unwrap();
    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    assert!(results.iter().all(Result::is_ok));
    let peak = peak.load(Ordering::SeqCst);
    eprintln!(
        "batch of 20, concurrency 3: peak {peak} workers, peak {} in flight at the lab",
        lab.log().peak_in_flight()
    );
    assert!((2..=3).contains(&peak), "peak workers {peak}");
    assert!(lab.log().peak_in_flight() <= 3);
    assert!(eventually(Duration::from_secs(1), || c.transport().live_workers() == 0).is_some());
}

#[test]
fn a_cancelled_batch_returns_at_once_with_every_item_ended() {
    let lab =
        Lab::start(LabConfig::default().fault(PathMatch::Any, Fault::Slow(Duration::from_secs(5))))
            .unwrap();
    let c = client(Config {
        timeout: Duration::from_secs(20),
        concurrency: 2,
        ..Config::default()
    });
    let token = CancelToken::new();
    let canceller = cancel_later(&token, Duration::from_millis(300));
    let requests = (0..6)
        .map(|i| get(lab.url(&format!("/items/{i}"))))
        .collect();
    let results = c.batch_cancellable(requests, &token).unwrap();
    let latency = canceller.join().unwrap().elapsed();
    eprintln!("cancel latency, batch with 2 in flight: {latency:?}");
    // "At once": far below the 5 s answers, with 1 s of slack.
    assert!(latency < Duration::from_secs(1), "{latency:?}");
    assert_eq!(results.len(), 6);
    for r in &results {
        assert_eq!(
            r.as_ref().unwrap_err().outcome(),
            Some(Outcome::Cancelled),
            "{r:?}"
        );
    }
    assert_eq!(lab.log().len(), 2, "only the two in flight were sent");
}

/// A writer that collects everything the tracing subscriber prints.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn attempt_records_reach_tracing_without_credentials() {
    let capture = Capture::default();
    let sink = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let lab = Lab::start(LabConfig::default().script(
        "/items/s",
        vec![Step::without_retry_after(503), Step::Normal],
    ))
    .unwrap();
    let req = http::Request::put(lab.url("/items/s?token=SECRET-QUERY"))
        .header("Authorization", "Bearer SECRET")
        .body(Bytes::from_static(b"SECRET-BODY"))
        .unwrap();
    let resp = Client::new().send(req).unwrap();
    assert_eq!(resp.status(), 200);
    // The server did get the credentials (so the test means something).
    let log = lab.log();
    assert_eq!(log.len(), 2);
    assert!(log.iter().all(|e| e.has_header("authorization")));
    assert!(log[0].query.as_deref().unwrap_or("").contains("SECRET"));

    let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("attempt"), "no attempt events: {text}");
    assert!(text.contains("503"), "{text}");
    assert!(!text.contains("SECRET"), "credentials leaked: {text}");
}

// ---- the transport on its own ----

fn attempt(
    t: &UreqTransport,
    req: http::Request<Bytes>,
    within: Duration,
) -> Result<http::Response<Bytes>, TransportErrorKind> {
    block_on(t.send(req, Instant::now() + within)).map_err(|e| e.kind())
}

#[test]
fn error_statuses_are_answers_with_their_headers() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/a",
        vec![Step::with_retry_after(429, Duration::from_secs(7))],
    ))
    .unwrap();
    let r = attempt(
        &UreqTransport::default(),
        get(lab.url("/items/a")),
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    assert!(!r.body().is_empty());
}

#[test]
fn a_post_body_reaches_the_server() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let req = http::Request::post(lab.url("/items/p"))
        .body(Bytes::from_static(b"{\"x\":1}"))
        .unwrap();
    let r = attempt(&UreqTransport::default(), req, Duration::from_secs(5)).unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(r.body().as_ref(), br#"{"item":"p"}"#);
}

#[test]
fn a_refused_connection_is_refused() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let r = attempt(
        &UreqTransport::default(),
        get(format!("http://127.0.0.1:{port}/")),
        Duration::from_secs(5),
    );
    assert_eq!(r.unwrap_err(), TransportErrorKind::Refused);
}

#[test]
fn a_reset_connection_is_reset() {
    let lab = Lab::start(LabConfig::default().script("/items/r", vec![Step::Reset])).unwrap();
    let r = attempt(
        &UreqTransport::default(),
        get(lab.url("/items/r")),
        Duration::from_secs(5),
    );
    assert_eq!(r.unwrap_err(), TransportErrorKind::Reset);
}

#[test]
fn a_hanging_attempt_is_aborted_at_abort_at() {
    let lab = Lab::start(LabConfig::default().script("/items/h", vec![Step::Hang])).unwrap();
    let t = UreqTransport::default();
    let started = Instant::now();
    let r = attempt(&t, get(lab.url("/items/h")), Duration::from_millis(300));
    let took = started.elapsed();
    assert_eq!(r.unwrap_err(), TransportErrorKind::Aborted);
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_millis(600),
        "{took:?}"
    );
    assert!(eventually(Duration::from_secs(1), || t.live_workers() == 0).is_some());
}

#[test]
fn an_oversize_body_is_a_transport_error_not_an_allocation() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let small = UreqTransport::default().max_body(4);
    let r = attempt(&small, get(lab.url("/items/big")), Duration::from_secs(5));
    assert_eq!(r.unwrap_err(), TransportErrorKind::BodyTooLarge);
    // Exactly at the limit is fine.
    let exact = UreqTransport::default().max_body(br#"{"item":"big"}"#.len());
    let r = attempt(&exact, get(lab.url("/items/big")), Duration::from_secs(5)).unwrap();
    assert_eq!(r.body().len(), exact.body_limit());

    // Through a client (default retries), the call ends with that at
    // once: a body over the limit is permanent, sent once, never retried.
    let c =
        Client::with_transport(UreqTransport::default().max_body(4), Config::default()).unwrap();
    let e = c.send(get(lab.url("/items/big"))).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Transport {
                outcome: Outcome::Permanent {
                    cause: TransportErrorKind::BodyTooLarge
                },
                attempts: 1,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string().split(" (").next(),
        Some("body larger than the 4-byte limit, not retried")
    );
    assert_eq!(
        lab.log()
            .iter()
            .filter(|r| r.path.starts_with("/items/big"))
            .count(),
        3
    );
}
