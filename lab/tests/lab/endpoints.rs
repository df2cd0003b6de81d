//! Jobs, long polling, items, query handling.

use std::time::Instant;

use polite_lab::{JobClock, JobState, Lab, LabConfig, LogStats};

use crate::common::{agent, get, ms, request, secs, sleep_until};

#[test]
fn post_runs_creates_a_job_that_turns_terminal() {
    let lab = Lab::start(
        LabConfig::default()
            .run_duration(ms(300))
            .run_final_state(JobState::Failed),
    )
    .unwrap();
    let a = agent(secs(10));
    let created = request(&a, "POST", &lab.url("/runs")).unwrap();
    assert_eq!(created.status, 201);
    assert_eq!(created.json()["id"], "run-1");
    assert_eq!(created.json()["status"], "running");
    assert_eq!(created.header("location"), Some("/runs/run-1"));
    let second = request(&a, "POST", &lab.url("/runs")).unwrap();
    assert_eq!(second.json()["id"], "run-2");

    let now = get(&lab.url("/runs/run-1"));
    assert_eq!(now.status, 200);
    assert_eq!(now.json()["status"], "running");
    let start = Instant::now();
    let done = get(&lab.url("/runs/run-1?waitSeconds=5"));
    assert_eq!(
        done.json(),
        serde_json::json!({"id": "run-1", "status": "failed"})
    );
    assert!(start.elapsed() < secs(2), "{:?}", start.elapsed());
}

#[test]
fn long_poll_is_released_when_the_job_finishes() {
    let lab = Lab::start(LabConfig::default().job("j1", secs(1), JobState::Passed)).unwrap();
    let start = Instant::now();
    let reply = get(&lab.url("/runs/j1?waitSeconds=5"));
    let elapsed = start.elapsed();
    assert_eq!(
        reply.json(),
        serde_json::json!({"id": "j1", "status": "passed"})
    );
    // Held until the job finished (1 s after this first request), not for the 5 s asked.
    assert!(elapsed >= ms(950) && elapsed < ms(1600), "{elapsed:?}");
    let entry = &lab.log()[0];
    let held = entry.duration().unwrap();
    assert!(held >= ms(990) && held < ms(1500), "{held:?}");
}

#[test]
fn long_poll_holds_for_the_wait_when_the_job_runs_on() {
    let lab = Lab::start(LabConfig::default().job("slow", secs(30), JobState::Passed)).unwrap();
    let start = Instant::now();
    let reply = get(&lab.url("/runs/slow?waitSeconds=1"));
    let elapsed = start.elapsed();
    assert_eq!(reply.json()["status"], "running");
    assert!(elapsed >= ms(990) && elapsed < ms(1600), "{elapsed:?}");

    // waitSeconds=0 answers at once.
    let start = Instant::now();
    assert_eq!(
        get(&lab.url("/runs/slow?waitSeconds=0")).json()["status"],
        "running"
    );
    assert!(start.elapsed() < ms(500));
}

#[test]
fn long_poll_is_capped_by_max_wait() {
    let lab = Lab::start(LabConfig::default().max_wait(ms(400)).job(
        "slow",
        secs(30),
        JobState::Passed,
    ))
    .unwrap();
    let start = Instant::now();
    assert_eq!(
        get(&lab.url("/runs/slow?waitSeconds=30")).json()["status"],
        "running"
    );
    let elapsed = start.elapsed();
    assert!(elapsed >= ms(390) && elapsed < secs(1), "{elapsed:?}");
}

#[test]
fn long_poll_off_rejects_wait_seconds() {
    let lab = Lab::start(LabConfig::default().long_poll(false).job(
        "j1",
        secs(30),
        JobState::Passed,
    ))
    .unwrap();
    let start = Instant::now();
    let reply = get(&lab.url("/runs/j1?waitSeconds=5"));
    assert!(start.elapsed() < ms(500));
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.json(),
        serde_json::json!({"code": "VALIDATION_ERROR", "message": "unknown parameter waitSeconds"})
    );
    // Even a malformed value: the parameter itself is unknown.
    assert_eq!(get(&lab.url("/runs/j1?waitSeconds=abc")).status, 400);
    // Without it, plain polls work.
    assert_eq!(get(&lab.url("/runs/j1")).json()["status"], "running");
}

#[test]
fn malformed_wait_seconds_is_a_validation_error_when_long_poll_is_on() {
    let lab = Lab::start(LabConfig::default().job("j1", secs(30), JobState::Passed)).unwrap();
    for bad in ["abc", "-1", "%2B1", "1.5", "", "%201", "99999999999"] {
        let start = Instant::now();
        let reply = get(&lab.url(&format!("/runs/j1?waitSeconds={bad}")));
        assert_eq!(reply.status, 400, "{bad}");
        assert_eq!(reply.json()["code"], "VALIDATION_ERROR", "{bad}");
        assert!(start.elapsed() < ms(500), "{bad} was held");
    }
    // Garbage in the rest of the query is ignored, never a panic.
    for q in ["%%%&&==", "a=b&&c", "=&=", "waitSecond=3", "%FF%FE=1"] {
        assert_eq!(get(&lab.url(&format!("/runs/j1?{q}"))).status, 200, "{q}");
    }
    // The first waitSeconds counts.
    let start = Instant::now();
    assert_eq!(
        get(&lab.url("/runs/j1?waitSeconds=0&waitSeconds=x")).status,
        200
    );
    assert!(start.elapsed() < ms(500));
}

#[test]
fn unknown_jobs_and_paths_are_404_and_wrong_methods_405() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let a = agent(secs(10));
    let unknown = get(&lab.url("/runs/nope"));
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["code"], "NOT_FOUND");
    assert_eq!(get(&lab.url("/runs/nope?waitSeconds=3")).status, 404);
    assert_eq!(get(&lab.url("/elsewhere")).status, 404);
    let wrong = request(&a, "DELETE", &lab.url("/runs/x")).unwrap();
    assert_eq!(wrong.status, 405);
    assert_eq!(wrong.header("allow"), Some("GET"));
    assert_eq!(request(&a, "GET", &lab.url("/runs")).unwrap().status, 405);
    assert_eq!(
        request(&a, "PATCH", &lab.url("/items/a")).unwrap().status,
        405
    );
}

#[test]
fn items_answer_every_method() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let a = agent(secs(10));
    for (method, status) in [("GET", 200), ("PUT", 200), ("DELETE", 200), ("POST", 201)] {
        let reply = request(&a, method, &lab.url("/items/k1")).unwrap();
        assert_eq!(reply.status, status, "{method}");
        assert_eq!(reply.json(), serde_json::json!({"item": "k1"}), "{method}");
        assert_eq!(reply.header("content-type"), Some("application/json"));
        assert!(reply.header("date").is_some());
    }
    assert_eq!(
        lab.log().statuses(),
        [Some(200), Some(200), Some(200), Some(201)]
    );
}

#[test]
fn bytes_serves_the_size_asked() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let a = agent(secs(10));
    let reply = request(&a, "GET", &lab.url("/bytes/1048576")).unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body.len(), 1 << 20);
    assert!(reply.body.bytes().all(|b| b == b'x'));
    assert_eq!(
        reply.header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(get(&lab.url("/bytes/0")).body, "");
    for bad in ["/bytes/16777217", "/bytes/1k", "/bytes/"] {
        let reply = get(&lab.url(bad));
        assert_eq!(reply.status, 400, "{bad}");
        assert_eq!(reply.json()["code"], "VALIDATION_ERROR", "{bad}");
    }
    assert_eq!(
        request(&a, "POST", &lab.url("/bytes/1")).unwrap().status,
        405
    );
}

#[test]
fn declared_jobs_start_their_clock_as_configured() {
    let first = Lab::start(LabConfig::default().job("j", ms(300), JobState::Cancelled)).unwrap();
    let at_start = Lab::start(LabConfig::default().job_clock(JobClock::LabStart).job(
        "j",
        ms(300),
        JobState::Cancelled,
    ))
    .unwrap();
    sleep_until(at_start.started_at().max(first.started_at()) + ms(400));
    // Lab start: 400 ms in, the job is over. First request: its clock starts now.
    assert_eq!(get(&at_start.url("/runs/j")).json()["status"], "cancelled");
    assert_eq!(get(&first.url("/runs/j")).json()["status"], "running");
    let start = Instant::now();
    assert_eq!(
        get(&first.url("/runs/j?waitSeconds=5")).json()["status"],
        "cancelled"
    );
    assert!(start.elapsed() < ms(500));
}

#[test]
fn redirect_answers_with_the_asked_status_and_location() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let to = "https://127.0.0.1:9/items/x?y=1";
    let query = format!("to={}", to.replace('&', "%26").replace('?', "%3F"));
    let agent = agent(secs(10));
    let found = request(&agent, "GET", &lab.url(&format!("/redirect?{query}"))).unwrap();
    assert_eq!(found.status, 302);
    assert_eq!(found.header("location"), Some(to));
    let kept = request(
        &agent,
        "PUT",
        &lab.url(&format!("/redirect?{query}&status=307")),
    )
    .unwrap();
    assert_eq!(kept.status, 307);
    assert_eq!(kept.header("location"), Some(to));
    for bad in ["/redirect", "/redirect?to=", "/redirect?to=/x&status=200"] {
        let reply = get(&lab.url(bad));
        assert_eq!(reply.status, 400, "{bad}");
        assert_eq!(reply.json()["code"], "VALIDATION_ERROR", "{bad}");
    }
}
