//! polite's metrics (feature `metrics`) against the lab on loopback, read
//! through metrics-util's debugging recorder (installed for the test's
//! thread only, so the tests do not see each other's calls): names,
//! labels and values for scripted runs.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use polite_blocking::{Client, Config, Throttle, UreqTransport};
use polite_client::api::Jitter;
use polite_lab::{Lab, LabConfig, LabHandle, Step};

/// One metric as recorded: its kind and name, its labels, its value.
#[derive(Debug)]
struct Metric {
    name: String,
    labels: HashMap<String, String>,
    value: DebugValue,
}

/// Runs `f` with a fresh recorder for this thread; every metric it left.
fn recorded(f: impl FnOnce()) -> Vec<Metric> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, f);
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (_, key) = key.into_parts();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            Metric {
                name: key.name().to_owned(),
                labels,
                value,
            }
        })
        .collect()
}

/// The metrics called `name` whose labels include every pair of `with`.
fn find<'a>(all: &'a [Metric], name: &str, with: &[(&str, &str)]) -> Vec<&'a Metric> {
    all.iter()
        .filter(|m| {
            m.name == name
                && with
                    .iter()
                    .all(|(k, v)| m.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect()
}

fn counter(all: &[Metric], name: &str, with: &[(&str, &str)]) -> u64 {
    find(all, name, with)
        .iter()
        .map(|m| match &m.value {
            DebugValue::Counter(n) => *n,
            other => panic!("{name} is no counter: {other:?}"),
        })
        .sum()
}

fn histogram(all: &[Metric], name: &str, with: &[(&str, &str)]) -> Vec<f64> {
    find(all, name, with)
        .iter()
        .flat_map(|m| match &m.value {
            DebugValue::Histogram(v) => v.iter().map(|x| x.0).collect::<Vec<_>>(),
            other => panic!("{name} is no histogram: {other:?}"),
        })
        .collect()
}

fn gauge(all: &[Metric], name: &str, with: &[(&str, &str)]) -> Option<f64> {
    find(all, name, with).iter().find_map(|m| match &m.value {
        DebugValue::Gauge(g) => Some(g.0),
        _ => None,
    })
}

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

fn origin(lab: &LabHandle) -> String {
    let url: http::Uri = lab.url("/").parse().unwrap();
    format!("http://127.0.0.1:{}", url.port_u16().unwrap())
}

fn client(config: Config) -> Client<UreqTransport> {
    Client::with_transport(UreqTransport::default(), config).unwrap()
}

#[test]
fn a_503_then_a_429_with_retry_after_1_then_200_shows_in_every_metric() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/m",
        vec![
            Step::without_retry_after(503),
            Step::with_retry_after(429, Duration::from_secs(1)),
            Step::Normal,
        ],
    ))
    .unwrap();
    let mut config = Config {
        timeout: Duration::from_secs(20),
        seed: Some(7),
        ..Config::default()
    };
    config.retry.backoff.jitter = Jitter::None;
    config.retry.backoff.base = Duration::from_millis(100);
    let c = client(config);
    let started = Instant::now();
    let all = recorded(|| {
        let answer = c
            .send(get(lab.url("/items/m?token=SECRET&page=2")))
            .unwrap();
        assert_eq!(answer.status(), 200);
    });
    let took = started.elapsed();
    let origin = origin(&lab);
    let call = [("call", "send"), ("origin", origin.as_str())];

    // Labels: the call and the origin, never the path or the query.
    assert!(!all.is_empty());
    for m in &all {
        assert!(m.name.starts_with("polite_"), "{m:?}");
        for v in m.labels.values() {
            assert!(
                !v.contains("/items") && !v.contains("SECRET") && !v.contains('?'),
                "{m:?}"
            );
        }
        assert_eq!(m.labels.get("origin"), Some(&origin), "{m:?}");
    }

    // Attempts by class, retries, the outcome.
    let class = |c: &str| {
        let mut with = call.to_vec();
        with.push(("class", c));
        counter(&all, "polite_attempts_total", &with)
    };
    assert_eq!(
        (class("server_error"), class("rate_limited"), class("none")),
        (1, 1, 1)
    );
    assert_eq!(counter(&all, "polite_attempts_total", &call), 3);
    assert_eq!(counter(&all, "polite_retries_total", &call), 2);
    let mut succeeded = call.to_vec();
    succeeded.push(("outcome", "succeeded"));
    assert_eq!(counter(&all, "polite_outcomes_total", &succeeded), 1);
    assert_eq!(counter(&all, "polite_outcomes_total", &call), 1);

    // Waits by cause: the 429's Retry-After: 1 is a wait of at least 1 s
    // under retry_after; the 503's backoff (base 100 ms, no jitter) under
    // backoff; nothing held by the pace.
    let waited = |cause: &str| {
        let mut with = call.to_vec();
        with.push(("cause", cause));
        histogram(&all, "polite_wait_seconds", &with)
    };
    let retry_after = waited("retry_after");
    assert_eq!(retry_after.len(), 1, "{retry_after:?}");
    assert!(
        retry_after[0] >= 1.0 && retry_after[0] < 2.0,
        "{retry_after:?}"
    );
    let backoff = waited("backoff");
    eprintln!("waits: retry_after {retry_after:?}, backoff {backoff:?}");
    assert_eq!(backoff.len(), 1, "{backoff:?}");
    assert!(backoff[0] > 0.0 && backoff[0] < 1.0, "{backoff:?}");
    assert_eq!(waited("pace"), Vec::<f64>::new());

    // The call's duration covers the waits; nothing is left in flight.
    let duration = histogram(&all, "polite_call_duration_seconds", &call);
    assert_eq!(duration.len(), 1);
    assert!(
        duration[0] >= retry_after[0] + backoff[0] && duration[0] <= took.as_secs_f64(),
        "{duration:?} vs {took:?}"
    );
    assert_eq!(gauge(&all, "polite_calls_in_flight", &call), Some(0.0));
}

#[test]
fn a_batch_under_a_throttle_reports_its_pace_waits_and_rate() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let config = Config {
        timeout: Duration::from_secs(20),
        throttle: Some(Throttle::new(2, Duration::from_millis(400))),
        concurrency: 4,
        ..Config::default()
    };
    let c = client(config);
    let all = recorded(|| {
        let items: Vec<_> = (0..4)
            .map(|i| get(lab.url(&format!("/items/{i}"))))
            .collect();
        let results = c.batch(items).unwrap();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    });
    let origin = origin(&lab);
    let call = [("call", "batch"), ("origin", origin.as_str())];
    let mut succeeded = call.to_vec();
    succeeded.push(("outcome", "succeeded"));
    assert_eq!(counter(&all, "polite_outcomes_total", &succeeded), 4);
    assert_eq!(counter(&all, "polite_attempts_total", &call), 4);
    assert_eq!(counter(&all, "polite_retries_total", &call), 0);
    // Two go at once; the other two wait for the window (400 ms + margin).
    let mut pace = call.to_vec();
    pace.push(("cause", "pace"));
    let held: f64 = histogram(&all, "polite_wait_seconds", &pace).iter().sum();
    eprintln!("batch held by the pace: {held:.3} s");
    assert!((0.4..2.0).contains(&held), "held {held}");
    assert_eq!(
        histogram(&all, "polite_call_duration_seconds", &call).len(),
        1
    );
    assert_eq!(
        gauge(
            &all,
            "polite_pace_requests_per_second",
            &[("origin", origin.as_str())]
        ),
        Some(5.0)
    );
    assert_eq!(gauge(&all, "polite_calls_in_flight", &call), Some(0.0));
}

#[test]
fn a_batch_over_two_origins_labels_each_item_by_its_own_origin() {
    // A answers 503 once, then 200; B answers 200. The batch's first item
    // goes to B, so a batch labelled by its first key would put A's retry
    // and its backoff under B.
    let a = Lab::start(LabConfig::default().script(
        "/items/a",
        vec![Step::without_retry_after(503), Step::Normal],
    ))
    .unwrap();
    let b = Lab::start(LabConfig::default()).unwrap();
    let mut config = Config {
        timeout: Duration::from_secs(20),
        seed: Some(7),
        concurrency: 2,
        ..Config::default()
    };
    config.retry.backoff.jitter = Jitter::None;
    config.retry.backoff.base = Duration::from_millis(100);
    let c = client(config);
    let all = recorded(|| {
        let items = vec![
            get(b.url("/items/0")),
            get(a.url("/items/a")),
            get(b.url("/items/1")),
            get(b.url("/items/2")),
        ];
        let results = c.batch(items).unwrap();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    });
    let (oa, ob) = (origin(&a), origin(&b));
    let on_a = [("call", "batch"), ("origin", oa.as_str())];
    let on_b = [("call", "batch"), ("origin", ob.as_str())];
    fn with<'a>(base: &[(&'a str, &'a str)], k: &'a str, v: &'a str) -> Vec<(&'a str, &'a str)> {
        let mut l = base.to_vec();
        l.push((k, v));
        l
    }
    // A: two attempts (a 503, then a success), one retry, one outcome.
    assert_eq!(counter(&all, "polite_attempts_total", &on_a), 2);
    assert_eq!(
        counter(
            &all,
            "polite_attempts_total",
            &with(&on_a, "class", "server_error")
        ),
        1
    );
    assert_eq!(counter(&all, "polite_retries_total", &on_a), 1);
    assert_eq!(
        counter(
            &all,
            "polite_outcomes_total",
            &with(&on_a, "outcome", "succeeded")
        ),
        1
    );
    let backoff = histogram(
        &all,
        "polite_wait_seconds",
        &with(&on_a, "cause", "backoff"),
    );
    assert_eq!(backoff.len(), 1, "{backoff:?}");
    assert!((0.05..1.0).contains(&backoff[0]), "{backoff:?}");
    // B: three attempts, no retry, no backoff.
    assert_eq!(counter(&all, "polite_attempts_total", &on_b), 3);
    assert_eq!(counter(&all, "polite_retries_total", &on_b), 0);
    assert_eq!(
        counter(
            &all,
            "polite_outcomes_total",
            &with(&on_b, "outcome", "succeeded")
        ),
        3
    );
    assert!(
        histogram(
            &all,
            "polite_wait_seconds",
            &with(&on_b, "cause", "backoff")
        )
        .is_empty()
    );
    // The batch as a whole (its duration, in flight) carries its first
    // item's origin.
    assert_eq!(
        histogram(&all, "polite_call_duration_seconds", &on_b).len(),
        1
    );
    assert!(histogram(&all, "polite_call_duration_seconds", &on_a).is_empty());
    assert_eq!(gauge(&all, "polite_calls_in_flight", &on_b), Some(0.0));
}

/// The metrics of a snapshot, as [`recorded`] lists them.
fn metrics_of(snapshot: metrics_util::debugging::Snapshot) -> Vec<Metric> {
    snapshot
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (_, key) = key.into_parts();
            Metric {
                name: key.name().to_owned(),
                labels: key
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect(),
                value,
            }
        })
        .collect()
}

#[test]
fn a_batch_fed_from_a_stream_carries_its_first_requests_origin() {
    // The stream's first request is not there when the batch starts: the
    // batch takes its origin when it arrives (it was labelled `""`).
    let lab = Lab::start(LabConfig::default()).unwrap();
    let c = client(Config {
        timeout: Duration::from_secs(20),
        concurrency: 2,
        ..Config::default()
    });
    let origin = origin(&lab);
    let call = [("call", "batch"), ("origin", origin.as_str())];
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // A snapshot drains what it reads (gauges too): the one taken while
    // the batch runs and the one after it, together, are all of it.
    let mut all = Vec::new();
    metrics::with_local_recorder(&recorder, || {
        let (mut tx, rx) = futures_channel::mpsc::channel(4);
        tx.try_send(get(lab.url("/items/0"))).unwrap();
        let mut stream = c
            .batch_from_stream(rx, polite_blocking::BatchOrder::Input)
            .unwrap();
        // Results taken on this thread (the recorder is this thread's).
        let (i, first) = stream.next_result().unwrap();
        assert!(i == 0 && first.is_ok(), "{first:?}");
        // The feed is open: the batch runs, in flight under the origin.
        all = metrics_of(snapshotter.snapshot());
        assert_eq!(gauge(&all, "polite_calls_in_flight", &call), Some(1.0));
        tx.try_send(get(lab.url("/items/1"))).unwrap();
        drop(tx);
        let (i, second) = stream.next_result().unwrap();
        assert!(i == 1 && second.is_ok(), "{second:?}");
        assert!(stream.next_result().is_none());
    });
    let after = metrics_of(snapshotter.snapshot());
    // ... and no longer after it.
    assert_eq!(gauge(&after, "polite_calls_in_flight", &call), Some(-1.0));
    all.extend(after);
    assert_eq!(
        histogram(&all, "polite_call_duration_seconds", &call).len(),
        1
    );
    assert_eq!(counter(&all, "polite_attempts_total", &call), 2);
    let unlabelled: Vec<_> = all
        .iter()
        .filter(|m| m.labels.get("origin").is_some_and(String::is_empty))
        .collect();
    assert!(unlabelled.is_empty(), "{unlabelled:?}");
}

#[test]
fn a_batch_fed_from_an_empty_stream_is_never_in_flight_and_has_no_origin() {
    let c = client(Config::default());
    let all = recorded(|| {
        let (tx, rx) = futures_channel::mpsc::channel::<http::Request<Bytes>>(1);
        drop(tx);
        let mut stream = c
            .batch_from_stream(rx, polite_blocking::BatchOrder::Input)
            .unwrap();
        assert!(stream.next_result().is_none());
    });
    // Its duration under the documented empty origin; never counted in
    // flight (it had no origin to be counted under).
    let call = [("call", "batch"), ("origin", "")];
    assert_eq!(
        histogram(&all, "polite_call_duration_seconds", &call).len(),
        1
    );
    assert!(
        find(&all, "polite_calls_in_flight", &[]).is_empty(),
        "{:?}",
        find(&all, "polite_calls_in_flight", &[])
    );
}
