//! Starting, addresses, errors, and shutting down.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use polite_lab::{Fault, JobState, Lab, LabConfig, LabError, PathMatch, Quota};

use crate::common::{agent, get, ms, request, secs, wait_until};

#[test]
fn binds_loopback_and_builds_urls() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    assert_eq!(lab.addr().ip(), Ipv4Addr::LOCALHOST);
    assert_ne!(lab.addr().port(), 0);
    let base = format!("http://127.0.0.1:{}", lab.addr().port());
    assert_eq!(lab.url("/items/a"), format!("{base}/items/a"));
    assert_eq!(lab.url("items/a"), format!("{base}/items/a"));
    assert_eq!(get(&lab.url("/")).status, 200);
}

#[test]
fn a_taken_port_is_a_bind_error() {
    let first = Lab::start(LabConfig::default()).unwrap();
    let port = first.addr().port();
    match Lab::start(LabConfig::default().port(port)) {
        Err(LabError::Bind { port: p, .. }) => assert_eq!(p, port),
        other => panic!("expected a bind error, got {other:?}"),
    }
}

#[test]
fn bad_configs_are_refused() {
    let bad = [
        LabConfig::default().quota(Quota::fixed(1, Duration::ZERO)),
        LabConfig::default().fault(
            PathMatch::Any,
            Fault::FailRandomly {
                probability: 1.5,
                status: 503,
            },
        ),
        LabConfig::default().fault(
            PathMatch::Any,
            Fault::FailRandomly {
                probability: f64::NAN,
                status: 503,
            },
        ),
        LabConfig::default().script("/a", vec![polite_lab::Step::status(99)]),
        LabConfig::default().quota(Quota::fixed(1, secs(1)).named("bad \"name\"")),
        LabConfig::default().date_skew_secs(i64::MAX),
    ];
    for config in bad {
        assert!(
            matches!(Lab::start(config.clone()), Err(LabError::Config(_))),
            "{config:?}"
        );
    }
}

#[test]
fn drop_is_prompt_even_with_hanging_and_long_polling_requests() {
    let lab = Lab::start(
        LabConfig::default()
            .fault(PathMatch::prefix("/items/"), Fault::Hang)
            .job("j", secs(60), JobState::Passed),
    )
    .unwrap();
    let hang_url = lab.url("/items/h");
    let poll_url = lab.url("/runs/j?waitSeconds=30");
    let clients: Vec<_> = [hang_url, poll_url]
        .into_iter()
        .map(|url| {
            std::thread::spawn(move || {
                let start = Instant::now();
                let result = request(&agent(secs(20)), "GET", &url);
                (result.map(|r| r.status), start.elapsed())
            })
        })
        .collect();
    assert!(
        wait_until(secs(5), || lab.in_flight() == 2),
        "requests never arrived"
    );
    let start = Instant::now();
    drop(lab);
    let dropped_in = start.elapsed();
    assert!(dropped_in < secs(1), "drop took {dropped_in:?}");
    for client in clients {
        let (result, elapsed) = client.join().unwrap();
        // The connection was closed under the client: an error, promptly.
        assert!(result.is_err(), "{result:?}");
        assert!(elapsed < secs(5), "{elapsed:?}");
    }
}

#[test]
fn after_drop_the_port_refuses_connections() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let url = lab.url("/items/a");
    lab.shutdown();
    assert!(request(&agent(secs(2)), "GET", &url).is_err());
}

#[test]
fn works_when_started_and_dropped_inside_a_tokio_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let lab = Lab::start(LabConfig::default()).unwrap();
        let url = lab.url("/items/a");
        // A blocking client on the runtime's thread: the lab must not need it.
        assert_eq!(get(&url).status, 200);
        let start = Instant::now();
        drop(lab);
        assert!(start.elapsed() < ms(1000));
    });
    rt.block_on(async {
        let lab = Lab::start(LabConfig::default()).unwrap();
        let url = lab.url("/items/b");
        let status = tokio::task::spawn_blocking(move || get(&url).status)
            .await
            .unwrap();
        assert_eq!(status, 200);
    });
}

#[test]
fn many_labs_at_once() {
    let labs: Vec<_> = (0..8)
        .map(|_| Lab::start(LabConfig::default()).unwrap())
        .collect();
    for lab in &labs {
        assert_eq!(get(&lab.url("/items/a")).status, 200);
        assert_eq!(lab.log().len(), 1);
    }
}

#[test]
fn handles_are_send_and_sync() {
    fn shareable<T: Send + Sync>() {}
    shareable::<polite_lab::LabHandle>();
    shareable::<polite_lab::LabConfig>();
    shareable::<polite_lab::conformance::Scenario>();
}
