//! A batch fed from a `Stream` (`Client::batch_from_stream`) on threads:
//! while the stream has no request, the items in progress go on, the
//! deadline and a cancel end the batch on time, and a request that comes
//! later is sent when it comes. (`batch_stream` pulls its iterator on the
//! thread that drives the batch: an iterator that blocks, such as stdin
//! held open, held every send, answer and timer back; user trial 3.)

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_channel::mpsc;
use polite_blocking::{BatchOrder, CancelToken, Client, Config, Throttle};
use polite_core::Outcome;
use polite_lab::{Lab, LabConfig};

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

fn client(timeout: Duration) -> Client {
    Client::with_config(Config {
        concurrency: 2,
        timeout,
        ..Config::default()
    })
    .unwrap()
}

/// Sends `request` into the feed (its buffer has room: nothing waits).
fn feed(tx: &mut mpsc::Sender<http::Request<Bytes>>, request: http::Request<Bytes>) {
    tx.try_send(request).expect("room in the feed");
}

#[test]
fn a_feed_with_nothing_new_holds_nothing_back_and_the_deadline_ends_the_batch() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let timeout = Duration::from_secs(2);
    let client = client(timeout);
    let (mut tx, rx) = mpsc::channel(8);
    feed(&mut tx, get(lab.url("/items/first")));
    let started = Instant::now();
    let mut stream = client.batch_from_stream(rx, BatchOrder::Input).unwrap();
    let mut seen = Vec::new();
    // The sender stays open and silent for the whole batch.
    stream.for_each_result(|(i, result)| seen.push((i, result.is_ok(), started.elapsed())));
    let took = started.elapsed();
    drop(tx);
    assert_eq!(lab.log().len(), 1, "the request fed was sent");
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (item, ok, at) = seen[0];
    assert!(item == 0 && ok, "{seen:?}");
    // Handed out as it ended, not at the batch's end (500 ms of slack).
    assert!(at + Duration::from_millis(500) < timeout, "{seen:?}");
    assert!(
        matches!(stream.end(), Some(Outcome::TimedOut { .. })),
        "{:?}",
        stream.end()
    );
    assert!(took >= timeout, "{took:?}");
    assert!(took < timeout + Duration::from_secs(1), "{took:?}");
}

#[test]
fn a_cancel_ends_a_batch_waiting_for_its_feed() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let client = client(Duration::from_secs(60));
    let token = CancelToken::new();
    let (mut tx, rx) = mpsc::channel(8);
    feed(&mut tx, get(lab.url("/items/first")));
    let mut stream = client
        .batch_from_stream_cancellable(rx, BatchOrder::Input, &token)
        .unwrap();
    let mut seen = Vec::new();
    let (returned, cancelled_at) = std::thread::scope(|s| {
        let canceller = s.spawn(|| {
            // Once the fed request has been answered (bounded: 10 s).
            let until = Instant::now() + Duration::from_secs(10);
            while lab.log().is_empty() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(100));
            token.cancel();
            Instant::now()
        });
        stream.for_each_result(|(i, result)| seen.push((i, result.is_ok())));
        (Instant::now(), canceller.join().unwrap())
    });
    drop(tx);
    assert_eq!(seen, vec![(0, true)]);
    assert_eq!(stream.end(), Some(Outcome::Cancelled));
    let late = returned.saturating_duration_since(cancelled_at);
    assert!(
        late < Duration::from_secs(1),
        "returned {late:?} after the cancel"
    );
}

#[test]
fn a_request_fed_later_is_sent_when_it_comes_and_the_feed_ending_ends_the_batch() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let client = client(Duration::from_secs(30));
    let (mut tx, rx) = mpsc::channel(8);
    feed(&mut tx, get(lab.url("/items/0")));
    let mut stream = client.batch_from_stream(rx, BatchOrder::Input).unwrap();
    let mut seen = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            // After the first is answered (bounded: 10 s), one more, then
            // the end of the feed.
            let until = Instant::now() + Duration::from_secs(10);
            while lab.log().is_empty() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(200));
            feed(&mut tx, get(lab.url("/items/1")));
            drop(tx);
        });
        stream.for_each_result(|(i, result)| {
            let body = result.map(|r| r.into_body());
            seen.push((i, body.ok()));
        });
    });
    assert_eq!(
        stream.end(),
        Some(Outcome::BatchDone {
            succeeded: 2,
            failed: 0
        })
    );
    let bodies: Vec<_> = seen
        .iter()
        .map(|(i, b)| (*i, b.as_deref().map(<[u8]>::to_vec)))
        .collect();
    assert_eq!(
        bodies,
        vec![
            (0, Some(b"{\"item\":\"0\"}".to_vec())),
            (1, Some(b"{\"item\":\"1\"}".to_vec()))
        ]
    );
}

/// A batch fed from a stream makes a pace only for the keys of the
/// requests it is fed: its call is labelled by its first request once that
/// comes, not by a pace of the empty key made at its start (which the
/// CLI's summary counted as a second pace: "the slowest of 2 paces").
#[test]
fn a_fed_batch_paces_only_the_keys_of_its_requests() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let client = Client::with_config(Config {
        concurrency: 2,
        timeout: Duration::from_secs(30),
        throttle: Some(Throttle::new(100, Duration::from_secs(1))),
        ..Config::default()
    })
    .unwrap();
    let (mut tx, rx) = mpsc::channel(8);
    feed(&mut tx, get(lab.url("/items/0")));
    drop(tx);
    let mut stream = client.batch_from_stream(rx, BatchOrder::Input).unwrap();
    let mut answered = 0;
    stream.for_each_result(|(_, result)| {
        assert!(result.is_ok(), "{result:?}");
        answered += 1;
    });
    assert_eq!(answered, 1);
    let keys: Vec<String> = client
        .pace_rates()
        .into_iter()
        .map(|(key, _)| key.as_str().to_owned())
        .collect();
    let origin = lab.url("/");
    assert_eq!(keys, vec![origin.trim_end_matches('/').to_owned()]);
}
