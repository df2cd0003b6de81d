//! Each fault happens as configured.

use std::time::{Instant, SystemTime};

use polite_lab::{
    Disposition, Fault, Lab, LabConfig, LogStats, PathMatch, RetryAfter, Step, parse_script,
};

use crate::common::{agent, get, ms, request, secs, wait_until};

#[test]
fn reset_closes_the_connection_without_an_answer() {
    let lab =
        Lab::start(LabConfig::default().fault(PathMatch::exact("/items/r"), Fault::Reset)).unwrap();
    let result = request(&agent(secs(5)), "GET", &lab.url("/items/r"));
    match result {
        Err(ureq::Error::Io(_)) | Err(ureq::Error::Protocol(_)) => {}
        other => panic!("expected a transport error, got {other:?}"),
    }
    let log = lab.log();
    assert_eq!(log.len(), 1, "{}", log.render());
    assert_eq!(log[0].status, None);
    assert_eq!(log[0].disposition, Disposition::Reset);
    assert!(log[0].completed.is_some());
    // Other paths are unaffected.
    assert_eq!(get(&lab.url("/items/ok")).status, 200);
}

#[test]
fn hang_never_answers() {
    let lab =
        Lab::start(LabConfig::default().fault(PathMatch::prefix("/items/"), Fault::Hang)).unwrap();
    let start = Instant::now();
    let result = request(&agent(ms(300)), "GET", &lab.url("/items/h"));
    let elapsed = start.elapsed();
    assert!(matches!(result, Err(ureq::Error::Timeout(_))), "{result:?}");
    assert!(elapsed >= ms(290) && elapsed < secs(2), "{elapsed:?}");
    let log = lab.log();
    assert_eq!(
        (log[0].status, log[0].disposition),
        (None, Disposition::Hung)
    );
    // The client gave up and closed the connection: the lab notices, and the
    // entry stays a hang, completed at that moment.
    assert!(
        wait_until(secs(2), || lab.in_flight() == 0),
        "the hang outlived its client"
    );
    let log = lab.log();
    assert_eq!(
        (log[0].status, log[0].disposition),
        (None, Disposition::Hung)
    );
    // Completed when the client closed, after its 300 ms timeout: measured
    // from the client's start (the lab's own duration starts when it read
    // the head, which a loaded machine may delay by more than 10 ms).
    let completed = log[0].completed.expect("completed when the client closed");
    assert!(completed >= start + ms(290), "{:?}", completed - start);
}

#[test]
fn slow_delays_the_headers() {
    let lab = Lab::start(LabConfig::default().fault(PathMatch::Any, Fault::Slow(ms(300)))).unwrap();
    let start = Instant::now();
    assert_eq!(get(&lab.url("/items/s")).status, 200);
    let elapsed = start.elapsed();
    assert!(elapsed >= ms(300) && elapsed < secs(2), "{elapsed:?}");
    assert!(lab.log()[0].duration().unwrap() >= ms(300));
}

#[test]
fn date_is_skewed_both_ways() {
    for skew in [3600i64, -7200] {
        let lab = Lab::start(LabConfig::default().date_skew_secs(skew)).unwrap();
        let reply = get(&lab.url("/items/a"));
        let date = httpdate::parse_http_date(reply.header("date").unwrap()).unwrap();
        let now = SystemTime::now();
        let offset = match date.duration_since(now) {
            Ok(ahead) => ahead.as_secs_f64(),
            Err(behind) => -behind.duration().as_secs_f64(),
        };
        // Dates are whole seconds: allow 2 s either way.
        assert!(
            (offset - skew as f64).abs() <= 2.0,
            "skew {skew}: offset {offset}"
        );
    }
}

#[test]
fn scripted_sequence_then_the_normal_answer() {
    let lab = Lab::start(
        LabConfig::default()
            .scripted_retry_after(secs(2))
            .script(
                "/items/a",
                parse_script("503,429:1,500,reset,ok,404").unwrap(),
            )
            .script(
                "/items/b",
                vec![
                    Step::Status {
                        status: 429,
                        retry_after: Some(RetryAfter::Raw("Fri, 31 Dec 1999 23:59:59 GMT".into())),
                    },
                    Step::without_retry_after(503),
                ],
            ),
    )
    .unwrap();
    let mut seen = Vec::new();
    for _ in 0..8 {
        // A fresh connection each time: no client-side retry of a reused connection.
        match request(&agent(secs(5)), "GET", &lab.url("/items/a")) {
            Ok(r) => seen.push((Some(r.status), r.header("retry-after").map(str::to_owned))),
            Err(_) => seen.push((None, None)),
        }
    }
    let s = |status: u16, ra: Option<&str>| (Some(status), ra.map(str::to_owned));
    assert_eq!(
        seen,
        [
            s(503, Some("2")),
            s(429, Some("1")),
            s(500, None),
            (None, None),
            s(200, None),
            s(404, None),
            s(200, None),
            s(200, None),
        ]
    );
    let b1 = get(&lab.url("/items/b"));
    assert_eq!(
        (b1.status, b1.header("retry-after")),
        (429, Some("Fri, 31 Dec 1999 23:59:59 GMT"))
    );
    let b2 = get(&lab.url("/items/b"));
    assert_eq!((b2.status, b2.header("retry-after")), (503, None));
    assert_eq!(
        b2.json(),
        serde_json::json!({"code": "SCRIPTED", "status": 503})
    );
    assert_eq!(get(&lab.url("/items/b")).status, 200);
}

#[test]
fn a_script_counts_each_path_on_its_own() {
    let lab = Lab::start(LabConfig::default().fault(
        PathMatch::prefix("/items/"),
        Fault::Script(vec![Step::status(503), Step::Normal]),
    ))
    .unwrap();
    let statuses: Vec<u16> = ["a", "b", "a", "b"]
        .iter()
        .map(|k| get(&lab.url(&format!("/items/{k}"))).status)
        .collect();
    assert_eq!(statuses, [503, 503, 200, 200]);
}

#[test]
fn random_failures_are_deterministic_under_a_seed() {
    let run = |seed: u64| {
        let lab = Lab::start(LabConfig::default().seed(seed).fault(
            PathMatch::prefix("/items/"),
            Fault::FailRandomly {
                probability: 0.5,
                status: 503,
            },
        ))
        .unwrap();
        let a = agent(secs(5));
        (0..40)
            .map(|i| {
                request(&a, "GET", &lab.url(&format!("/items/{i}")))
                    .unwrap()
                    .status
            })
            .collect::<Vec<u16>>()
    };
    let (first, again, other) = std::thread::scope(|s| {
        let a = s.spawn(|| run(42));
        let b = s.spawn(|| run(42));
        let c = s.spawn(|| run(43));
        (a.join().unwrap(), b.join().unwrap(), c.join().unwrap())
    });
    assert_eq!(first, again);
    assert_ne!(first, other);
    let failures = first.iter().filter(|s| **s == 503).count();
    assert!((8..=32).contains(&failures), "{failures} of 40");
    assert!(first.iter().all(|s| *s == 503 || *s == 200));
}

#[test]
fn random_failures_at_the_extremes() {
    let lab = Lab::start(
        LabConfig::default()
            .fault(
                PathMatch::exact("/items/never"),
                Fault::FailRandomly {
                    probability: 0.0,
                    status: 500,
                },
            )
            .fault(
                PathMatch::exact("/items/always"),
                Fault::FailRandomly {
                    probability: 1.0,
                    status: 429,
                },
            ),
    )
    .unwrap();
    for _ in 0..5 {
        assert_eq!(get(&lab.url("/items/never")).status, 200);
        let always = get(&lab.url("/items/always"));
        assert_eq!(
            (always.status, always.header("retry-after")),
            (429, Some("1"))
        );
    }
}
