//! One pace per origin (SPEC §4.2), against two real servers: lab A answers
//! 429 with `Retry-After: 5`, lab B is healthy. While a call to A waits
//! out A's five seconds, calls to B go at once.

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{CancelToken, Client, Outcome};
use polite_lab::{Lab, LabConfig, LogStats, Step};

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

#[test]
fn a_429_from_one_lab_never_delays_calls_to_another() {
    let a = Lab::start(LabConfig::default().script(
        "/items/1",
        vec![
            Step::with_retry_after(429, Duration::from_secs(5)),
            Step::Normal,
        ],
    ))
    .unwrap();
    let b = Lab::start(LabConfig::default()).unwrap();
    let client = Client::new();
    let token = CancelToken::new();
    let waiting = std::thread::spawn({
        let (client, token, url) = (client.clone(), token.clone(), a.url("/items/1"));
        move || client.send_cancellable(get(url), &token)
    });
    // Until A has answered its 429, B's calls prove nothing.
    let started = Instant::now();
    while a.log().count_429() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "lab A never answered"
        );
        std::thread::yield_now();
    }
    let t = Instant::now();
    for i in 0..5 {
        client.send(get(b.url(&format!("/items/{i}")))).unwrap();
    }
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "B waited {took:?} for A's cool-down"
    );
    assert_eq!(b.log().len(), 5);
    // A's call is still waiting out the server's time: cancel it.
    token.cancel();
    let err = waiting.join().unwrap().unwrap_err();
    assert_eq!(err.outcome(), Some(Outcome::Cancelled));
    assert_eq!(a.log().len(), 1, "A was not asked again before its time");
}
