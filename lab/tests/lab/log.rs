//! The request log is exact.

use std::sync::Barrier;
use std::time::Duration;

use polite_lab::{Disposition, Fault, JobState, Lab, LabConfig, LogStats, PathMatch, Quota};

use crate::common::{agent, get, ms, request_with, secs, wait_until};

#[test]
fn every_request_is_logged_with_its_facts_and_no_header_values() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let a = agent(secs(5));
    let secret = "Bearer s3cr3t-t0ken";
    let r1 = request_with(&a, "GET", &lab.url("/items/a?x=1&y=%20z"), &[]).unwrap();
    let r2 = request_with(
        &a,
        "PUT",
        &lab.url("/items/b"),
        &[("Authorization", secret), ("X-Trace", "t1")],
    )
    .unwrap();
    let r3 = request_with(&a, "GET", &lab.url("/nowhere"), &[]).unwrap();
    assert_eq!((r1.status, r2.status, r3.status), (200, 200, 404));

    let log = lab.log();
    assert_eq!(log.len(), 3);
    assert_eq!(log.statuses(), [Some(200), Some(200), Some(404)]);
    let methods: Vec<&str> = log.iter().map(|e| e.method.as_str()).collect();
    assert_eq!(methods, ["GET", "PUT", "GET"]);
    let paths: Vec<&str> = log.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["/items/a", "/items/b", "/nowhere"]);
    assert_eq!(log[0].query.as_deref(), Some("x=1&y=%20z"));
    assert_eq!(log[0].query_param("y").as_deref(), Some(" z"));
    assert_eq!(log[1].query, None);
    assert!(log[1].has_header("authorization") && log[1].has_header("X-Trace"));
    assert!(!log[0].has_header("authorization"));
    assert!(
        !format!("{log:?}").contains("s3cr3t"),
        "a header value leaked into the log"
    );
    for (i, e) in log.iter().enumerate() {
        assert_eq!(e.seq, i as u64);
        assert_eq!(e.in_flight_at_arrival, 1, "sequential requests");
        assert_eq!(e.disposition, Disposition::Answered);
        assert!(e.completed.unwrap() >= e.arrived);
        assert_eq!(e.arrived.duration_since(lab.started_at()), e.arrived_offset);
    }
    assert!(log.windows(2).all(|w| w[0].arrived <= w[1].arrived));
    assert_eq!(log.to_path("/items/a").len(), 1);
    assert_eq!(log.under("/items/").len(), 2);
    assert_eq!(log.peak_in_flight(), 1);
    assert!(log.render().contains("PUT /items/b -> 200"));
}

#[test]
fn in_flight_at_arrival_counts_concurrent_requests() {
    let lab = Lab::start(LabConfig::default().fault(PathMatch::Any, Fault::Slow(ms(400)))).unwrap();
    let barrier = Barrier::new(4);
    std::thread::scope(|s| {
        for i in 0..4 {
            let (lab, barrier) = (&lab, &barrier);
            s.spawn(move || {
                barrier.wait();
                assert_eq!(get(&lab.url(&format!("/items/{i}"))).status, 200);
            });
        }
    });
    let log = lab.log();
    assert_eq!(log.len(), 4);
    let mut counts: Vec<usize> = log.iter().map(|e| e.in_flight_at_arrival).collect();
    counts.sort();
    assert_eq!(counts, [1, 2, 3, 4], "{}", log.render());
    assert_eq!(log.peak_in_flight(), 4);
    assert_eq!(log.max_arrivals_within(ms(400)), 4);
    assert_eq!(lab.in_flight(), 0);
}

#[test]
fn helpers_count_429s_per_job_and_arrivals() {
    let lab = Lab::start(
        LabConfig::default()
            .quota(Quota::fixed(2, secs(60)).on(PathMatch::exact("/runs/j1")))
            .job("j1", secs(60), JobState::Passed)
            .job("j2", secs(60), JobState::Passed),
    )
    .unwrap();
    for path in ["/runs/j1", "/runs/j1", "/runs/j1", "/runs/j2", "/runs/j1"] {
        get(&lab.url(path));
    }
    let log = lab.log();
    assert_eq!(log.count_429(), 2);
    assert_eq!(log.count_status(200), 3);
    assert_eq!(log.for_job("j1").len(), 4);
    assert_eq!(log.for_job("j2").len(), 1);
    let arrivals = log.arrival_offsets();
    assert_eq!(arrivals.len(), 5);
    assert!(arrivals.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(log.max_arrivals_within(Duration::from_secs(60)), 5);
    assert_eq!(log.max_arrivals_within(Duration::ZERO), 0);
}

#[test]
fn clear_log_empties_it_and_sequence_numbers_go_on() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    get(&lab.url("/items/a"));
    get(&lab.url("/items/b"));
    lab.clear_log();
    assert!(lab.log().is_empty());
    get(&lab.url("/items/c"));
    let log = lab.log();
    assert_eq!(log.len(), 1);
    assert_eq!((log[0].seq, log[0].path.as_str()), (2, "/items/c"));
}

#[test]
fn a_client_that_gives_up_on_a_long_poll_is_logged_as_abandoned() {
    let lab = Lab::start(LabConfig::default().job("j", secs(60), JobState::Passed)).unwrap();
    let result = request_with(
        &agent(ms(300)),
        "GET",
        &lab.url("/runs/j?waitSeconds=20"),
        &[],
    );
    assert!(result.is_err());
    assert!(
        wait_until(secs(2), || lab.in_flight() == 0),
        "the long poll outlived its client"
    );
    let log = lab.log();
    assert_eq!(
        (log[0].status, log[0].disposition),
        (None, Disposition::Abandoned)
    );
    let held = log[0].duration().unwrap();
    assert!(held >= ms(290) && held < secs(2), "{held:?}");
}
