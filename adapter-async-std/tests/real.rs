//! polite-async-io against the lab on loopback, in real time, on both
//! executors: cancel latency during a 30 s backoff, a hanging server inside
//! timeout + cushion, and an oversized body.

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_async_io::{CancelToken, Client, Config, Http1Transport, Outcome};
use polite_lab::{Fault, Lab, LabConfig, LabHandle, LogStats, PathMatch, Step};

fn client(timeout: Duration) -> Client<Http1Transport> {
    let config = Config {
        timeout,
        ..Config::default()
    };
    Client::with_transport(Http1Transport::new(), config).unwrap()
}

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

/// A lab whose `/items/c` answers 503 with `Retry-After: 30` first.
fn backoff_lab() -> LabHandle {
    Lab::start(LabConfig::default().script(
        "/items/c",
        vec![
            Step::with_retry_after(503, Duration::from_secs(30)),
            Step::Normal,
        ],
    ))
    .unwrap()
}

/// What a cancelled call reports: its result and the instant it returned.
type Returned = (
    Result<http::Response<Bytes>, polite_async_io::Error>,
    Instant,
);

/// Checks a call cancelled at `cancelled_at` during its 30 s backoff.
fn check_cancel(executor: &str, lab: &LabHandle, cancelled_at: Instant, returned: Returned) {
    let (result, returned_at) = returned;
    let latency = returned_at - cancelled_at;
    assert_eq!(result.unwrap_err().outcome(), Some(Outcome::Cancelled));
    // "At once": far below the 30 s sleep, with 1 s of slack for a loaded
    // CI machine (the latency itself is measured in BENCHMARKS §6).
    assert!(
        latency < Duration::from_secs(1),
        "{executor}: cancel took {latency:?}"
    );
    assert_eq!(lab.log().len(), 1, "no send after the cancel");
    eprintln!("{executor}: cancel latency during a 30 s backoff: {latency:?}");
}

#[test]
fn cancel_during_a_30s_backoff_returns_within_100ms_on_async_std() {
    let lab = backoff_lab();
    let c = client(Duration::from_secs(60));
    let token = CancelToken::new();
    let (cancelled_at, returned) = async_std::task::block_on(async {
        let call = async_std::task::spawn({
            let (c, token, url) = (c.clone(), token.clone(), lab.url("/items/c"));
            async move {
                let r = c.send_cancellable(get(url), &token).await;
                (r, Instant::now())
            }
        });
        async_std::task::sleep(Duration::from_millis(500)).await;
        assert_eq!(lab.log().count_status(503), 1, "the 503 came first");
        let cancelled_at = Instant::now();
        token.cancel();
        (cancelled_at, call.await)
    });
    check_cancel("async-std", &lab, cancelled_at, returned);
}

#[test]
fn cancel_during_a_30s_backoff_returns_within_100ms_on_smol() {
    let lab = backoff_lab();
    let c = client(Duration::from_secs(60));
    let token = CancelToken::new();
    let (cancelled_at, returned) = smol::block_on(async {
        let call = smol::spawn({
            let (c, token, url) = (c.clone(), token.clone(), lab.url("/items/c"));
            async move {
                let r = c.send_cancellable(get(url), &token).await;
                (r, Instant::now())
            }
        });
        smol::Timer::after(Duration::from_millis(500)).await;
        assert_eq!(lab.log().count_status(503), 1, "the 503 came first");
        let cancelled_at = Instant::now();
        token.cancel();
        (cancelled_at, call.await)
    });
    check_cancel("smol", &lab, cancelled_at, returned);
}

/// A cancel from a plain thread while the executor is parked in the wait.
#[test]
fn cancel_from_another_thread_wakes_the_wait_at_once() {
    let lab = backoff_lab();
    let c = client(Duration::from_secs(60));
    let token = CancelToken::new();
    let canceller = std::thread::spawn({
        let token = token.clone();
        move || {
            std::thread::sleep(Duration::from_millis(500));
            let at = Instant::now();
            token.cancel();
            at
        }
    });
    let result = smol::block_on(c.send_cancellable(get(lab.url("/items/c")), &token));
    let returned_at = Instant::now();
    let cancelled_at = canceller.join().unwrap();
    check_cancel(
        "smol::block_on, thread",
        &lab,
        cancelled_at,
        (result, returned_at),
    );
}

fn hang_lab() -> LabHandle {
    Lab::start(LabConfig::default().fault(PathMatch::exact("/items/hang"), Fault::Hang)).unwrap()
}

/// Timeout 1 s, cushion 2 s: `TimedOut` by 3 s plus slack, never later.
fn check_hang(executor: &str, lab: &LabHandle, elapsed: Duration, result: Returned) {
    let (result, _) = result;
    let err = result.unwrap_err();
    assert!(
        matches!(err.outcome(), Some(Outcome::TimedOut { .. })),
        "{executor}: {err:?}"
    );
    assert!(
        elapsed >= Duration::from_millis(950),
        "{executor}: {elapsed:?}"
    );
    assert!(
        elapsed <= Duration::from_millis(3500),
        "{executor}: a hanging server kept the call {elapsed:?}"
    );
    assert_eq!(lab.log().len(), 1);
    eprintln!("{executor}: hanging server, timeout 1 s: returned after {elapsed:?}");
}

#[test]
fn a_hanging_server_returns_within_timeout_plus_cushion_on_async_std() {
    let lab = hang_lab();
    let c = client(Duration::from_secs(1));
    let start = Instant::now();
    let result = async_std::task::block_on(c.send(get(lab.url("/items/hang"))));
    check_hang("async-std", &lab, start.elapsed(), (result, Instant::now()));
}

#[test]
fn a_hanging_server_returns_within_timeout_plus_cushion_on_smol() {
    let lab = hang_lab();
    let c = client(Duration::from_secs(1));
    let start = Instant::now();
    let result = smol::block_on(c.send(get(lab.url("/items/hang"))));
    check_hang("smol", &lab, start.elapsed(), (result, Instant::now()));
}

#[test]
fn an_oversized_body_is_a_permanent_error_sent_once() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let config = Config {
        timeout: Duration::from_secs(10),
        ..Config::default()
    };
    // `{"item":"a"}` is 12 bytes: over a 4-byte limit.
    let c = Client::with_transport(Http1Transport::new().max_body(4), config).unwrap();
    let err = smol::block_on(c.send(get(lab.url("/items/a")))).unwrap_err();
    assert!(
        matches!(err.outcome(), Some(Outcome::Permanent { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("4-byte limit"), "{err}");
    assert!(err.response().is_none(), "no answer was handed over");
    // Sent once: repeating cannot make the body smaller.
    assert_eq!(lab.log().len(), 1);
}
