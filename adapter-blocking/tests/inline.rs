//! Which thread runs an attempt: `send` and `wait` without a token, over
//! the default `UreqTransport`, to an IP address, run their attempts on the
//! calling thread, bounded end to end by the call's deadline (a hanging
//! server, a body that stalls after its headers); a call with a token, a
//! batch, a host name and an agent of your own keep the worker threads,
//! and so do the attempts of a transport that sends two at once.
//! Counted with `UreqTransport::worker_attempts`, in real time against
//! servers on 127.0.0.1.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{CancelToken, Client, Config, JsonJob, Outcome, UreqTransport};
use polite_lab::{Disposition, Fault, JobState, Lab, LabConfig, LogStats, PathMatch, Step};

fn client(transport: UreqTransport, timeout: Duration, cushion: Duration) -> Client {
    let mut config = Config {
        timeout,
        ..Config::default()
    };
    config.retry.transport_cushion = cushion;
    Client::with_transport(transport, config).unwrap()
}

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

#[test]
fn sends_and_waits_without_a_token_run_on_the_calling_thread() {
    let lab = Lab::start(
        LabConfig::default()
            .script(
                "/items/r",
                vec![Step::without_retry_after(503), Step::Normal],
            )
            .job("j", Duration::from_millis(200), JobState::Passed),
    )
    .unwrap();
    let c = client(
        UreqTransport::default(),
        Duration::from_secs(10),
        Duration::from_secs(2),
    );
    for i in 0..5 {
        let r = c.send(get(lab.url(&format!("/items/{i}")))).unwrap();
        assert_eq!(r.status(), 200);
    }
    // A retry: both attempts on this thread.
    assert_eq!(c.send(get(lab.url("/items/r"))).unwrap().status(), 200);
    let done = c
        .wait(get(lab.url("/runs/j")), &mut JsonJob::new("status"))
        .unwrap();
    assert_eq!(done.state, "passed");
    assert!(lab.log().len() >= 8, "{}", lab.log().render());
    assert_eq!(c.transport().worker_attempts(), 0);
    assert_eq!(c.transport().live_workers(), 0);
}

#[test]
fn a_hanging_server_ends_an_inline_call_at_its_deadline() {
    let lab =
        Lab::start(LabConfig::default().fault(PathMatch::exact("/items/h"), Fault::Hang)).unwrap();
    let c = client(
        UreqTransport::default(),
        Duration::from_millis(800),
        Duration::from_secs(2),
    );
    let started = Instant::now();
    let err = c.send(get(lab.url("/items/h"))).unwrap_err();
    let took = started.elapsed();
    eprintln!("hanging server, timeout 800 ms, inline: returned after {took:?}");
    assert!(
        matches!(err.outcome(), Some(Outcome::TimedOut { .. })),
        "{err}"
    );
    // At the deadline (800 ms), well before abort_at (2.8 s): an answer
    // after the deadline would be discarded, so the attempt ends there.
    assert!(took >= Duration::from_millis(790), "{took:?}");
    assert!(took < Duration::from_millis(1800), "{took:?}");
    assert_eq!(c.transport().worker_attempts(), 0, "not on a worker");
    // The connection was closed by the time the call returned (nothing
    // runs on after it).
    let log = lab.log();
    assert_eq!(log.len(), 1, "{}", log.render());
    assert_eq!(log[0].disposition, Disposition::Hung);
    let closed = (0..200).find_map(|_| {
        let at = lab.log()[0].completed;
        if at.is_none() {
            std::thread::sleep(Duration::from_millis(5));
        }
        at
    });
    let closed = closed.expect("the server saw the connection close");
    assert!(
        closed < started + Duration::from_millis(1800),
        "closed {:?} after the start",
        closed.duration_since(started)
    );
}

/// A server that sends a response head promising 1,000 body bytes, sends
/// 10, and stalls; accepts `n` connections, then stops.
fn stalling_body_server(n: usize) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/stall", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let mut open = Vec::new();
        for _ in 0..n {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789");
            let _ = s.flush();
            open.push(s); // kept open, silent
        }
        // Until the client hangs up (bounded by its timeout).
        for mut s in open {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.read(&mut [0u8; 16]);
        }
    });
    (url, server)
}

#[test]
fn a_body_that_stalls_after_its_headers_cannot_hold_an_inline_call_past_its_deadline() {
    // Per-phase timeouts would give the body a whole budget of its own; the
    // end-to-end bound does not.
    let (url, server) = stalling_body_server(1);
    let c = client(
        UreqTransport::default(),
        Duration::from_millis(600),
        Duration::from_millis(400),
    );
    let started = Instant::now();
    let err = c.send(get(url)).unwrap_err();
    let took = started.elapsed();
    eprintln!("stalled body, timeout 600 ms, inline: returned after {took:?}");
    assert!(
        matches!(err.outcome(), Some(Outcome::TimedOut { .. })),
        "{err}"
    );
    // Deadline 600 ms, abort_at 1 s; generous slack for a loaded machine.
    assert!(took >= Duration::from_millis(590), "{took:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(c.transport().worker_attempts(), 0, "not on a worker");
    server.join().unwrap();
}

#[test]
fn a_call_with_a_token_runs_on_a_worker_and_its_cancel_returns_at_once() {
    let lab =
        Lab::start(LabConfig::default().fault(PathMatch::exact("/items/h"), Fault::Hang)).unwrap();
    let c = client(
        UreqTransport::default(),
        Duration::from_millis(1000),
        Duration::from_millis(500),
    );
    let token = CancelToken::new();
    let canceller = {
        let token = token.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let at = Instant::now();
            token.cancel();
            at
        })
    };
    let err = c
        .send_cancellable(get(lab.url("/items/h")), &token)
        .unwrap_err();
    let latency = canceller.join().unwrap().elapsed();
    assert_eq!(err.outcome(), Some(Outcome::Cancelled));
    assert!(latency < Duration::from_millis(100), "{latency:?}");
    assert_eq!(c.transport().worker_attempts(), 1);
}

#[test]
fn a_batch_keeps_its_attempts_on_workers() {
    let lab = Lab::start(
        LabConfig::default().fault(PathMatch::Any, Fault::Slow(Duration::from_millis(100))),
    )
    .unwrap();
    let c = Client::with_transport(
        UreqTransport::default(),
        Config {
            timeout: Duration::from_secs(10),
            concurrency: 4,
            ..Config::default()
        },
    )
    .unwrap();
    let requests = (0..8)
        .map(|i| get(lab.url(&format!("/items/{i}"))))
        .collect();
    let results = c.batch(requests).unwrap();
    assert!(results.iter().all(|r| r.is_ok()));
    assert_eq!(c.transport().worker_attempts(), 8);
    // Several at a time (one after another, as on the calling thread,
    // would show 1): the lab saw requests open together.
    let log = lab.log();
    let peak = log.iter().map(|e| e.in_flight_at_arrival).max();
    assert!(peak >= Some(2), "{}", log.render());
}

#[test]
fn a_host_name_and_an_agent_of_your_own_keep_the_workers() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let c = client(
        UreqTransport::default(),
        Duration::from_secs(5),
        Duration::from_secs(1),
    );
    // A host name: ureq would resolve it on a thread spawned per request.
    let named = lab.url("/items/1").replace("127.0.0.1", "localhost");
    let _ = c.send(get(named)); // answered or not (how localhost resolves)
    assert_eq!(c.transport().worker_attempts(), 1);

    let own = client(
        UreqTransport::new(UreqTransport::default_agent()),
        Duration::from_secs(5),
        Duration::from_secs(1),
    );
    assert_eq!(own.send(get(lab.url("/items/1"))).unwrap().status(), 200);
    assert_eq!(own.transport().worker_attempts(), 1);
}

/// Sends every attempt twice at once through the default transport and
/// answers with the first copy's result once both are in.
struct Twice(UreqTransport);

impl polite_blocking::Transport for Twice {
    type Sending = polite_client::BoxSending;

    fn send(&self, request: http::Request<Bytes>, abort_at: Instant) -> Self::Sending {
        let mut copy = http::Request::new(request.body().clone());
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.headers_mut() = request.headers().clone();
        let mut a = Some(self.0.send(request, abort_at));
        let mut b = Some(self.0.send(copy, abort_at));
        let (mut ra, mut rb) = (None, None);
        Box::pin(std::future::poll_fn(move |cx| {
            for (f, r) in [(&mut a, &mut ra), (&mut b, &mut rb)] {
                if let Some(sending) = f
                    && let std::task::Poll::Ready(out) = std::pin::Pin::new(sending).poll(cx)
                {
                    *r = Some(out);
                    *f = None;
                }
            }
            match (ra.take(), rb.is_some()) {
                (Some(out), true) => std::task::Poll::Ready(out),
                (out, _) => {
                    ra = out;
                    std::task::Poll::Pending
                }
            }
        }))
    }
}

#[test]
fn attempts_of_a_transport_that_sends_two_at_once_stay_concurrent_on_workers() {
    let lab = Lab::start(
        LabConfig::default().fault(PathMatch::Any, Fault::Slow(Duration::from_millis(200))),
    )
    .unwrap();
    let c = Client::with_transport(
        Twice(UreqTransport::default()),
        Config {
            timeout: Duration::from_secs(10),
            ..Config::default()
        },
    )
    .unwrap();
    for _ in 0..2 {
        assert_eq!(c.send(get(lab.url("/items/1"))).unwrap().status(), 200);
    }
    assert_eq!(c.transport().0.worker_attempts(), 4);
    let log = lab.log();
    assert_eq!(log.len(), 4, "{}", log.render());
    // Each pair was in flight together (one after another would show 1).
    let peak = log.iter().map(|e| e.in_flight_at_arrival).max();
    assert_eq!(peak, Some(2), "{}", log.render());
}
