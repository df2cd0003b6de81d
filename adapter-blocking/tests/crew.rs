//! `BatchStream::for_each_result` on threads: the batch is polled by the
//! crew of threads that run its attempts (src/crew.rs), and still keeps
//! every promise of a batch — results in order, about `concurrency`
//! connections, a cancel or the deadline ending it at once with attempts
//! in flight — against the lab on loopback.

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{BatchOrder, CancelToken, Client, Config, Error, UreqTransport};
use polite_core::Outcome;
use polite_lab::{Fault, Lab, LabConfig, PathMatch};

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

fn client(concurrency: u32, timeout: Duration) -> Client {
    Client::with_config(Config {
        concurrency,
        timeout,
        ..Config::default()
    })
    .unwrap()
}

/// Which thread handed each result out: the crew's members poll the batch
/// (and so call `each`) when they end an attempt.
fn on_crew() -> bool {
    std::thread::current().name() == Some("polite-crew")
}

#[test]
fn results_come_in_input_order_from_the_crew_over_about_concurrency_connections() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let client = client(4, Duration::from_secs(30));
    let requests = (0..400).map(|i| get(lab.url(&format!("/items/{i}"))));
    let mut stream = client.batch_stream(requests, BatchOrder::Input).unwrap();
    let (mut seen, mut crew) = (Vec::new(), 0);
    stream.for_each_result(|(i, result)| {
        let body = result.map(|r| r.into_body());
        seen.push((i, body.ok()));
        crew += usize::from(on_crew());
    });
    assert_eq!(
        stream.end(),
        Some(Outcome::BatchDone {
            succeeded: 400,
            failed: 0
        })
    );
    assert_eq!(seen.len(), 400);
    for (k, (i, body)) in seen.iter().enumerate() {
        assert_eq!(*i, k, "input order");
        let expected = format!("{{\"item\":\"{k}\"}}");
        assert_eq!(body.as_deref(), Some(expected.as_bytes()));
    }
    // The members, not the calling thread, drive the batch: they hand out
    // the results as they end their attempts.
    assert!(crew >= 300, "{crew} of 400 results handed out by the crew");
    assert_eq!(lab.log().len(), 400, "each item sent once");
    assert!(lab.connections() <= 8, "{} connections", lab.connections());
}

#[test]
fn completion_order_hands_out_each_item_once() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let client = client(3, Duration::from_secs(30));
    let requests = (0..100).map(|i| get(lab.url(&format!("/items/{i}"))));
    let mut stream = client
        .batch_stream(requests, BatchOrder::Completion)
        .unwrap();
    let mut seen = Vec::new();
    stream.for_each_result(|(i, result)| {
        assert!(result.is_ok(), "{result:?}");
        seen.push(i);
    });
    seen.sort_unstable();
    assert_eq!(seen, (0..100).collect::<Vec<_>>());
}

/// A cancel from another thread ends the batch while every member waits
/// on a server that never answers: the call returns at once (the members'
/// waits are interrupted), the items in progress end `Cancelled`.
#[test]
fn a_cancel_ends_the_batch_with_every_member_waiting() {
    let lab = Lab::start(LabConfig::default().fault(PathMatch::Any, Fault::Hang)).unwrap();
    let client = client(4, Duration::from_secs(60));
    let token = CancelToken::new();
    let requests = (0..8).map(|i| get(lab.url(&format!("/items/{i}"))));
    let mut stream = client
        .batch_stream_cancellable(requests, BatchOrder::Input, &token)
        .unwrap();
    let mut seen = Vec::new();
    let (returned, cancelled_at) = std::thread::scope(|s| {
        let canceller = s.spawn(|| {
            // Cancel once all four are in flight (bounded: 10 s).
            let until = Instant::now() + Duration::from_secs(10);
            while lab.in_flight() < 4 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            token.cancel();
            Instant::now()
        });
        stream.for_each_result(|(i, result)| {
            seen.push((i, result.err().and_then(|e| e.outcome())));
        });
        (Instant::now(), canceller.join().unwrap())
    });
    assert_eq!(lab.log().len(), 4, "four in flight, no more started");
    // The items pulled (those in flight, and those waiting in the window)
    // end `Cancelled`, in input order.
    assert!(seen.len() >= 4, "{seen:?}");
    for (k, (i, outcome)) in seen.iter().enumerate() {
        assert_eq!((*i, *outcome), (k, Some(Outcome::Cancelled)));
    }
    // Without the interrupt the members would wait for the attempts'
    // own end: the deadline (60 s) plus the cushion.
    let late = returned.saturating_duration_since(cancelled_at);
    assert!(
        late < Duration::from_secs(5),
        "returned {late:?} after the cancel"
    );
}

/// The deadline ends the batch at its instant, not at the attempts' abort
/// instant (the deadline plus the transport's cushion): the members'
/// waits are interrupted when the batch ends.
#[test]
fn the_deadline_ends_the_batch_without_waiting_for_the_cushion() {
    let lab = Lab::start(LabConfig::default().fault(PathMatch::Any, Fault::Hang)).unwrap();
    let timeout = Duration::from_millis(300);
    let client = client(2, timeout);
    let started = Instant::now();
    let requests = (0..4).map(|i| get(lab.url(&format!("/items/{i}"))));
    let mut stream = client.batch_stream(requests, BatchOrder::Input).unwrap();
    let mut seen = Vec::new();
    stream.for_each_result(|(i, result)| seen.push((i, result.err().and_then(|e| e.outcome()))));
    let took = started.elapsed();
    let timed_out = |o: &Option<Outcome>| matches!(o, Some(Outcome::TimedOut { .. }));
    // The two in flight and those waiting in the window end `TimedOut`.
    assert!(seen.len() >= 2, "{seen:?}");
    assert_eq!(lab.log().len(), 2, "two in flight, no more started");
    assert!(seen.iter().all(|(_, o)| timed_out(o)), "{seen:?}");
    assert!(timed_out(&stream.end()), "{:?}", stream.end());
    assert!(took >= timeout, "{took:?}");
    // The cushion is 2 s: an attempt left to run to its own abort instant
    // would hold the call until then.
    let cushion = polite_blocking::RetryPolicy::default().transport_cushion;
    assert!(took < timeout + cushion, "{took:?}");
}

/// Items to a host name not yet looked up go to a pool worker (the lookup
/// cannot be interrupted); once looked up, they run on the crew.
#[test]
fn a_host_name_is_looked_up_off_the_crew_then_sent_on_it() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let transport = UreqTransport::default();
    let client = Client::with_transport(
        transport.clone(),
        Config {
            concurrency: 2,
            ..Config::default()
        },
    )
    .unwrap();
    let url = |i: usize| format!("http://localhost:{}/items/{i}", lab.addr().port());
    let mut stream = client
        .batch_stream((0..50).map(|i| get(url(i))), BatchOrder::Input)
        .unwrap();
    let mut ok = 0;
    stream.for_each_result(|(_, result)| ok += usize::from(result.is_ok()));
    assert_eq!(ok, 50);
    assert_eq!(
        transport.worker_attempts(),
        50,
        "every attempt off the calling thread"
    );
}

/// A failure of every item ends each with its error; nothing hangs.
#[test]
fn refused_connections_end_every_item() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = client(2, Duration::from_secs(2));
    let requests = (0..6).map(|i| get(format!("http://127.0.0.1:{port}/items/{i}")));
    let mut stream = client.batch_stream(requests, BatchOrder::Input).unwrap();
    let mut errors = Vec::new();
    stream.for_each_result(|(i, result)| {
        errors.push((
            i,
            matches!(
                result,
                Err(Error::Outcome { .. } | Error::Transport { .. } | Error::Limit(_))
            ),
        ));
    });
    assert_eq!(errors.len(), 6, "{errors:?}");
    assert!(errors.iter().all(|(_, failed)| *failed), "{errors:?}");
}

/// The batch's timers run on the crew too: a throttled batch keeps under
/// the server's quota (the keeper wakes for each grant), and an item
/// refused with a 429 and `Retry-After: 1` is sent again no sooner than
/// the server asked.
#[test]
fn the_pace_and_retry_after_hold_on_the_crew() {
    use polite_blocking::Throttle;
    use polite_lab::{LogStats, Quota, Step};
    let lab = Lab::start(
        LabConfig::default()
            .quota(Quota::fixed(5, Duration::from_millis(200)))
            .script("/items/x", vec![Step::status(429), Step::Normal]),
    )
    .unwrap();
    let client = Client::with_config(Config {
        concurrency: 4,
        timeout: Duration::from_secs(20),
        throttle: Some(Throttle::new(5, Duration::from_millis(250))),
        ..Config::default()
    })
    .unwrap();
    let mut requests: Vec<_> = (0..12)
        .map(|i| get(lab.url(&format!("/items/{i}"))))
        .collect();
    requests.insert(3, get(lab.url("/items/x")));
    let mut stream = client.batch_stream(requests, BatchOrder::Input).unwrap();
    let mut ok = 0;
    stream.for_each_result(|(i, result)| {
        assert!(result.is_ok(), "item {i}: {result:?}");
        ok += 1;
    });
    assert_eq!(ok, 13);
    let log = lab.log();
    assert_eq!(log.count_429(), 1, "only the scripted one");
    let x: Vec<_> = log.iter().filter(|e| e.path == "/items/x").collect();
    assert_eq!(x.len(), 2, "refused once, then answered");
    let answered = x[0].completed.expect("the 429 was answered");
    let waited = x[1].arrived.saturating_duration_since(answered);
    assert!(
        waited >= Duration::from_secs(1),
        "resent {waited:?} after the 429"
    );
}

/// The closure a batch hands its results to may make blocking calls of
/// its own (on the crew's thread): their attempts are theirs, not the
/// crew's, and nothing waits for itself.
#[test]
fn a_blocking_call_inside_the_closure_runs_its_own_attempts() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let client = client(2, Duration::from_secs(30));
    let other = client.clone();
    let token = CancelToken::new();
    let requests = (0..6).map(|i| get(lab.url(&format!("/items/{i}"))));
    let mut stream = client.batch_stream(requests, BatchOrder::Input).unwrap();
    let mut followed = 0;
    stream.for_each_result(|(i, result)| {
        assert!(result.is_ok());
        // A cancellable send always takes a worker; a plain one to an IP
        // address runs on this thread.
        let a = other.send_cancellable(get(lab.url(&format!("/items/a{i}"))), &token);
        let b = other.send(get(lab.url(&format!("/items/b{i}"))));
        assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
        followed += 1;
    });
    assert_eq!(followed, 6);
    assert_eq!(lab.log().len(), 18);
}
