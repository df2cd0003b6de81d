//! polite-tokio against the lab on loopback, in real time: cancel latency,
//! the pacing experiment next to a plain semaphore loop, and the shared
//! cool-down between concurrent waits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_core::Outcome;
use polite_lab::{Fault, JobState, Lab, LabConfig, LogStats, PathMatch, Quota, Step};
use polite_tokio::{CancellationToken, Client, Config, JsonJob, ReqwestTransport, Throttle};

fn client(config: Config) -> Client<ReqwestTransport> {
    Client::with_transport(ReqwestTransport::new(reqwest::Client::new()), config).unwrap()
}

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_30s_backoff_returns_within_100ms() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/c",
        vec![
            Step::with_retry_after(503, Duration::from_secs(30)),
            Step::Normal,
        ],
    ))
    .unwrap();
    let c = client(Config {
        timeout: Duration::from_secs(60),
        ..Config::default()
    });
    let token = CancellationToken::new();
    let call = tokio::spawn({
        let c = c.clone();
        let token = token.clone();
        let url = lab.url("/items/c");
        async move {
            let r = c.send_cancellable(get(url), &token).await;
            (r, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cancelled_at = Instant::now();
    token.cancel();
    let (result, returned_at) = call.await.unwrap();
    let latency = returned_at - cancelled_at;
    assert_eq!(result.unwrap_err().outcome(), Some(Outcome::Cancelled));
    // "At once": far below the 30 s sleep, with 1 s of slack for a loaded
    // CI machine (the latency itself is measured in BENCHMARKS §6).
    assert!(latency < Duration::from_secs(1), "cancel took {latency:?}");
    assert_eq!(lab.log().len(), 1, "no send after the cancel");
    eprintln!("cancel latency during backoff: {latency:?}");
}

/// SPEC §4's reference experiment, for real: quota 3 per 500 ms (fixed
/// window), 15 ms service time, 8 requests at concurrency 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pacing_experiment_plain_semaphore_vs_polite() {
    let lab_config = || {
        LabConfig::default()
            .quota(Quota::fixed(3, Duration::from_millis(500)))
            .fault(PathMatch::Any, Fault::Slow(Duration::from_millis(15)))
    };

    // A plain reqwest loop limited only by a semaphore of 2.
    let plain = Lab::start(lab_config()).unwrap();
    let http = reqwest::Client::new();
    let permits = Arc::new(tokio::sync::Semaphore::new(2));
    let mut tasks = Vec::new();
    for i in 1..=8 {
        let (http, permits, url) = (
            http.clone(),
            permits.clone(),
            plain.url(&format!("/items/{i}")),
        );
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await.unwrap();
            http.get(url).send().await.unwrap().status().as_u16()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let plain_429 = plain.log().count_429();

    // polite: the same 8 requests as a batch, concurrency 2, throttle 3 per 650 ms.
    let lab = Lab::start(lab_config()).unwrap();
    let c = client(Config {
        timeout: Duration::from_secs(10),
        concurrency: 2,
        throttle: Some(Throttle::new(3, Duration::from_millis(650))),
        ..Config::default()
    });
    let requests = (1..=8)
        .map(|i| get(lab.url(&format!("/items/{i}"))))
        .collect();
    let results = c.batch(requests).await.unwrap();
    assert!(
        results
            .iter()
            .all(|r| r.as_ref().is_ok_and(|r| r.status() == 200))
    );
    let log = lab.log();
    eprintln!(
        "pacing experiment: plain semaphore loop got {plain_429} x 429; polite got {} x 429, peak {} in flight",
        log.count_429(),
        log.peak_in_flight()
    );
    assert!(plain_429 > 0, "the plain loop should trip the quota");
    assert_eq!(log.count_429(), 0);
    assert_eq!(log.count_status(200), 8);
    assert!(log.peak_in_flight() <= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_on_one_wait_holds_off_the_other_wait_of_the_same_client() {
    let lab = Lab::start(
        LabConfig::default()
            .job("j1", Duration::ZERO, JobState::Passed)
            .job("j2", Duration::ZERO, JobState::Passed)
            .script(
                "/runs/j1",
                vec![
                    Step::with_retry_after(429, Duration::from_secs(2)),
                    Step::Normal,
                ],
            ),
    )
    .unwrap();
    let c = client(Config {
        timeout: Duration::from_secs(10),
        ..Config::default()
    });
    let first = tokio::spawn({
        let (c, url) = (c.clone(), lab.url("/runs/j1"));
        async move { c.wait(get(url), &mut JsonJob::new("status")).await }
    });
    // Let the 429 arrive, then start the second wait on the same client.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = c
        .wait(get(lab.url("/runs/j2")), &mut JsonJob::new("status"))
        .await
        .unwrap();
    assert_eq!(second.state, "passed");
    assert_eq!(first.await.unwrap().unwrap().state, "passed");

    let log = lab.log();
    let refused = log.iter().find(|e| e.status == Some(429)).unwrap();
    let j2 = log.iter().find(|e| e.path == "/runs/j2").unwrap();
    let held = j2.arrived - refused.arrived;
    eprintln!("second wait held off {held:?} after the first one's 429");
    assert!(
        held >= Duration::from_millis(1900),
        "the second wait did not honour the shared cool-down: {held:?}"
    );
}

/// Issue "server-informed pacing", end to end: a server with a quota of 10
/// per second that says so only in `RateLimit` / `RateLimit-Policy` headers.
/// A client with no configured throttle learns it from the first answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_learns_the_quota_from_ratelimit_headers() {
    let lab = Lab::start(
        LabConfig::default()
            .quota(Quota::fixed(10, Duration::from_secs(1)))
            .ratelimit_headers(true),
    )
    .unwrap();
    let c = client(Config {
        timeout: Duration::from_secs(30),
        concurrency: 8,
        ..Config::default()
    });
    let requests = (0..40)
        .map(|i| get(lab.url(&format!("/items/{i}"))))
        .collect();
    let results = c.batch(requests).await.unwrap();
    assert!(results.iter().all(Result::is_ok));
    let log = lab.log();
    eprintln!(
        "learning client: {} x 429 over {} requests",
        log.count_429(),
        log.len()
    );
    assert!(log.count_429() <= 1, "{}", log.render());

    // The same batch with learning off trips the quota.
    let lab = Lab::start(
        LabConfig::default()
            .quota(Quota::fixed(10, Duration::from_secs(1)))
            .ratelimit_headers(true),
    )
    .unwrap();
    let c = client(Config {
        timeout: Duration::from_secs(30),
        concurrency: 8,
        learn_quota: None,
        rate_limit_headers: polite_core::ratelimit::RateLimitHeaders::OFF,
        ..Config::default()
    });
    let requests = (0..40)
        .map(|i| get(lab.url(&format!("/items/{i}"))))
        .collect();
    let _ = c.batch(requests).await.unwrap();
    eprintln!("blind client: {} x 429", lab.log().count_429());
    assert!(lab.log().count_429() > 1);
}

/// SPEC §2.3 on a real long poll: the caller's session moves on (a logout)
/// while the wait's long poll is held by the lab; the job's end, which
/// arrives after, belongs to the old session and is dropped: the wait ends
/// `Stale` with no answer, after that one request. The same wait with the
/// session unchanged ends `passed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logout_during_a_long_poll_drops_the_jobs_end() {
    let lab = Lab::start(
        LabConfig::default()
            .job("j1", Duration::from_millis(600), JobState::Passed)
            .job("j2", Duration::from_millis(600), JobState::Passed),
    )
    .unwrap();
    let c = client(Config {
        timeout: Duration::from_secs(10),
        ..Config::default()
    });
    let session = polite_tokio::Session::new();
    let under = |url: String| {
        let mut r = get(url);
        r.extensions_mut()
            .insert(polite_tokio::CallOptions::new().session(&session));
        r
    };
    let logout = {
        let session = session.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            session.bump();
        })
    };
    let err = c
        .wait(under(lab.url("/runs/j1")), &mut JsonJob::new("status"))
        .await
        .unwrap_err();
    logout.await.unwrap();
    assert_eq!(err.outcome(), Some(Outcome::Stale), "{err:?}");
    assert!(
        matches!(err, polite_tokio::Error::Outcome { response: None, .. }),
        "{err:?}"
    );
    assert_eq!(lab.log().iter().filter(|e| e.path == "/runs/j1").count(), 1);
    let done = c
        .wait(under(lab.url("/runs/j2")), &mut JsonJob::new("status"))
        .await
        .unwrap();
    assert_eq!(done.state, "passed");
}
