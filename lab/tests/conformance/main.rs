//! The conformance suite itself: well-formed, `check` rejects wrong
//! observations, and a small reference client (blocking, ureq, written from
//! the spec's defaults) passes every scenario against real labs.

#[path = "../common/mod.rs"]
mod common;

mod reference;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use polite_lab::conformance::{self, ExpectedOutcome, Observed, Scenario, WAIT_PARAM, Work};
use polite_lab::{Disposition, LogEntry};

#[test]
fn scenarios_are_well_formed() {
    let all = conformance::scenarios();
    assert!(all.len() >= 8);
    let mut names = HashSet::new();
    for s in &all {
        assert!(names.insert(s.name), "duplicate name {}", s.name);
        assert!(
            !s.name.is_empty()
                && s.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{} is not snake_case",
            s.name
        );
        assert!(!s.description.is_empty(), "{}", s.name);
        s.lab
            .validate()
            .unwrap_or_else(|e| panic!("{}: {e}", s.name));
        assert_eq!(
            s.lab.configured_port(),
            0,
            "{}: scenarios must bind any free port",
            s.name
        );
        let e = &s.expect;
        assert!(
            e.min_requests >= 1 && e.min_requests <= e.max_requests,
            "{}",
            s.name
        );
        assert!(e.min_elapsed <= e.max_elapsed, "{}", s.name);
        assert!(
            e.max_elapsed <= Duration::from_secs(6),
            "{}: over 6 s",
            s.name
        );
        assert!(e.max_429 <= e.max_requests, "{}", s.name);
        if let Some(statuses) = &e.statuses {
            assert!(
                (e.min_requests..=e.max_requests).contains(&statuses.len()),
                "{}",
                s.name
            );
            let n429 = statuses.iter().filter(|st| **st == Some(429)).count();
            assert!(n429 <= e.max_429, "{}: statuses contradict max_429", s.name);
        }
        assert!(s.work.timeout() > Duration::ZERO, "{}", s.name);
        if let Some(cancel) = s.work.cancel_after() {
            assert!(
                cancel < s.work.timeout() && cancel <= e.max_elapsed,
                "{}",
                s.name
            );
        }
        match &s.work {
            Work::Send { method, path, .. } => {
                assert!(
                    ["GET", "PUT", "POST", "DELETE"].contains(method),
                    "{}",
                    s.name
                );
                assert!(path.starts_with('/'), "{}", s.name);
            }
            Work::Wait { path, .. } => {
                assert!(path.starts_with("/runs/"), "{}", s.name);
                assert!(matches!(
                    e.outcome,
                    ExpectedOutcome::Terminal(_)
                        | ExpectedOutcome::TimedOut
                        | ExpectedOutcome::Cancelled
                ));
            }
            Work::Batch {
                paths, concurrency, ..
            } => {
                assert!(!paths.is_empty() && *concurrency >= 1, "{}", s.name);
                assert!(
                    e.min_requests >= paths.len(),
                    "{}: a batch sends every path",
                    s.name
                );
                assert!(matches!(
                    e.outcome,
                    ExpectedOutcome::AllSucceeded | ExpectedOutcome::NotAllSucceeded
                ));
            }
        }
        assert_eq!(conformance::scenario(s.name).map(|f| f.name), Some(s.name));
    }
    for wanted in [
        "retry_then_success",
        "retry_after_imf_fixdate",
        "retry_after_rfc850",
        "retry_after_asctime",
        "hostile_retry_after",
        "non_replayable_post_503",
        "long_poll_sees_result_at_once",
        "long_poll_fallback_to_backoff",
        "hang_times_out_within_cushion",
        "pacing_reference_experiment",
    ] {
        assert!(names.contains(wanted), "missing {wanted}");
    }
    assert!(conformance::scenario("no_such_scenario").is_none());
}

/// A synthetic log: `(offset ms, status, query)` per request.
fn fake_log(requests: &[(u64, Option<u16>, Option<&str>)]) -> Vec<LogEntry> {
    let t0 = Instant::now();
    requests
        .iter()
        .enumerate()
        .map(|(i, (at, status, query))| {
            let offset = Duration::from_millis(*at);
            LogEntry {
                seq: i as u64,
                method: "GET".into(),
                path: "/items/a".into(),
                query: query.map(str::to_owned),
                header_names: vec!["host".into()],
                arrived: t0 + offset,
                arrived_offset: offset,
                completed: Some(t0 + offset + Duration::from_millis(1)),
                completed_offset: Some(offset + Duration::from_millis(1)),
                status: *status,
                disposition: if status.is_some() {
                    Disposition::Answered
                } else {
                    Disposition::Reset
                },
                in_flight_at_arrival: 1,
            }
        })
        .collect()
}

fn retry_then_success() -> Scenario {
    conformance::scenario("retry_then_success").unwrap()
}

#[test]
fn check_accepts_a_right_observation() {
    let s = retry_then_success();
    let log = fake_log(&[
        (0, Some(503), None),
        (260, Some(429), None),
        (1300, Some(200), None),
    ]);
    let ok = Observed::new(ExpectedOutcome::Succeeded, Duration::from_millis(1310));
    assert_eq!(s.check(&ok, &log), Ok(()));
}

#[test]
fn check_rejects_wrong_observations_with_a_readable_message() {
    let s = retry_then_success();
    let log = fake_log(&[
        (0, Some(503), None),
        (260, Some(429), None),
        (1300, Some(200), None),
    ]);
    let ok = Observed::new(ExpectedOutcome::Succeeded, Duration::from_millis(1310));

    let wrong_outcome = Observed::new(ExpectedOutcome::RetriesExhausted, ok.elapsed);
    let msg = s.check(&wrong_outcome, &log).unwrap_err();
    assert!(
        msg.contains("retry_then_success") && msg.contains("outcome"),
        "{msg}"
    );
    assert!(
        msg.contains("expected Succeeded, observed RetriesExhausted"),
        "{msg}"
    );
    assert!(
        msg.contains("GET /items/a -> 503"),
        "the message shows the log: {msg}"
    );

    let too_fast = Observed::new(ExpectedOutcome::Succeeded, Duration::from_millis(400));
    assert!(s.check(&too_fast, &log).unwrap_err().contains("elapsed"));

    let too_slow = Observed::new(ExpectedOutcome::Succeeded, Duration::from_secs(30));
    assert!(s.check(&too_slow, &log).unwrap_err().contains("elapsed"));

    let extra = fake_log(&[
        (0, Some(503), None),
        (260, Some(429), None),
        (1300, Some(429), None),
        (2300, Some(200), None),
    ]);
    let msg = s.check(&ok, &extra).unwrap_err();
    assert!(msg.contains("requests: expected 3, the lab saw 4"), "{msg}");
    assert!(msg.contains("429s") && msg.contains("statuses"), "{msg}");

    // The 429's Retry-After (1 s) was not honoured.
    let early = fake_log(&[
        (0, Some(503), None),
        (260, Some(429), None),
        (600, Some(200), None),
    ]);
    let msg = s.check(&ok, &early).unwrap_err();
    assert!(msg.contains("request #2 came"), "{msg}");
}

#[test]
fn check_rejects_wrong_query_and_batch_observations() {
    let fallback = conformance::scenario("long_poll_fallback_to_backoff").unwrap();
    let passed = Observed::new(
        ExpectedOutcome::terminal("passed"),
        Duration::from_millis(2100),
    );
    let good = fake_log(&[
        (0, Some(400), Some("waitSeconds=7")),
        (2000, Some(200), None),
    ]);
    assert_eq!(fallback.check(&passed, &good), Ok(()));
    let relapsed = fake_log(&[
        (0, Some(400), Some("waitSeconds=7")),
        (2000, Some(200), Some("waitSeconds=5")),
    ]);
    let msg = fallback.check(&passed, &relapsed).unwrap_err();
    assert!(
        msg.contains(WAIT_PARAM) && msg.contains("request #1"),
        "{msg}"
    );
    let other_state = Observed::new(ExpectedOutcome::terminal("failed"), passed.elapsed);
    assert!(fallback.check(&other_state, &good).is_err());

    let pacing = conformance::scenario("pacing_reference_experiment").unwrap();
    let Work::Batch { paths, .. } = &pacing.work else {
        panic!("pacing is a batch")
    };
    let eight: Vec<_> = (0..8).map(|i| (i * 250, Some(200), None)).collect();
    let log = fake_log(&eight);
    let all = Observed::batch(
        vec![ExpectedOutcome::Succeeded; paths.len()],
        Duration::from_millis(1900),
    );
    assert_eq!(all.outcome, ExpectedOutcome::AllSucceeded);
    assert_eq!(pacing.check(&all, &log), Ok(()));
    let missing = Observed::new(ExpectedOutcome::AllSucceeded, all.elapsed);
    assert!(
        pacing
            .check(&missing, &log)
            .unwrap_err()
            .contains("per_item")
    );
    let mut items = vec![ExpectedOutcome::Succeeded; paths.len()];
    items[3] = ExpectedOutcome::RateLimited;
    let one_failed = Observed::batch(items, all.elapsed);
    assert_eq!(one_failed.outcome, ExpectedOutcome::NotAllSucceeded);
    let msg = pacing.check(&one_failed, &log).unwrap_err();
    assert!(msg.contains("item /items/4"), "{msg}");
    // A burst: 4 arrivals within 500 ms, up to 4 in flight.
    let mut burst = fake_log(&[
        (0, Some(200), None),
        (0, Some(200), None),
        (10, Some(200), None),
        (20, Some(200), None),
        (900, Some(200), None),
        (1150, Some(200), None),
        (1400, Some(200), None),
        (1650, Some(200), None),
    ]);
    for (i, e) in burst.iter_mut().take(4).enumerate() {
        e.in_flight_at_arrival = i + 1;
    }
    let msg = pacing.check(&all, &burst).unwrap_err();
    assert!(
        msg.contains("in flight") && msg.contains("arrived within"),
        "{msg}"
    );
}

#[test]
fn the_reference_client_passes_every_scenario() {
    let started = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = conformance::scenarios()
            .into_iter()
            .map(|scenario| s.spawn(move || reference::run(&scenario)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(started.elapsed() < Duration::from_secs(20));
}
