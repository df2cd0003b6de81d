//! One pace per origin inside one batch (SPEC §4.2), against two real
//! servers: lab A answers its first request 429 with `Retry-After: 5`,
//! lab B is healthy (200 after 150 ms). A mixed batch finishes B's items
//! without waiting for A's cool-down, and A's items are sent again only
//! after A's five seconds, as A's own log shows.

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{BatchOrder, Client};
use polite_lab::{Fault, Lab, LabConfig, LogStats, PathMatch, Step};

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

#[test]
fn a_429_from_one_origin_never_holds_back_the_batch_items_of_another() {
    let a = Lab::start(LabConfig::default().script(
        "/items/a",
        vec![Step::with_retry_after(429, Duration::from_secs(5))],
    ))
    .unwrap();
    let b = Lab::start(LabConfig::default().fault(
        PathMatch::prefix("/items"),
        Fault::Slow(Duration::from_millis(150)),
    ))
    .unwrap();
    // A first (its 429 comes back long before any of B's answers), then
    // A and B mixed: 3 items for A, 6 for B, in a window of 4 × 4 items.
    let mut requests = vec![get(a.url("/items/a"))];
    let mut is_a = vec![true];
    for i in 0..8 {
        let for_a = i % 4 == 3;
        is_a.push(for_a);
        requests.push(get(if for_a {
            a.url("/items/a")
        } else {
            b.url(&format!("/items/{i}"))
        }));
    }
    let client = Client::new();
    let started = Instant::now();
    let mut stream = client
        .batch_stream(requests, BatchOrder::Completion)
        .unwrap();
    let mut b_done = None;
    let mut ended = 0;
    let mut b_left = is_a.iter().filter(|a| !**a).count();
    while let Some((i, result)) = stream.next_result() {
        assert!(result.is_ok(), "item {i}: {result:?}");
        ended += 1;
        if !is_a[i] {
            b_left -= 1;
            if b_left == 0 {
                b_done = Some(started.elapsed());
            }
        }
        assert!(started.elapsed() < Duration::from_secs(20), "bounded");
    }
    assert_eq!(ended, is_a.len());
    // B's six items, 150 ms each at concurrency 4: two rounds, far below A's 5 s.
    let b_done = b_done.unwrap();
    eprintln!("B's items all ended after {b_done:?}");
    assert!(
        b_done < Duration::from_millis(2500),
        "B's items waited {b_done:?} (for A's cool-down?)"
    );
    assert_eq!(b.log().len(), 6);
    // A: one 429, then every later request at least 5 s after it was answered.
    let log = a.log();
    assert_eq!(log.count_429(), 1, "{log:?}");
    assert_eq!(log.len(), 4, "each A item once, the 429'd one twice");
    let answered = log[0].completed.unwrap();
    for e in &log[1..] {
        assert!(
            e.arrived >= answered + Duration::from_secs(5),
            "A asked again {:?} after its 429",
            e.arrived - answered
        );
    }
}
