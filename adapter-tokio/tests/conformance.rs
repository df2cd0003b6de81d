//! The lab's adapter conformance suite, run against polite-tokio over
//! reqwest on loopback, in real time. One test per scenario, so the harness
//! runs them in parallel; `every_lab_scenario_is_run_here` keeps the list
//! complete.

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_core::Outcome;
use polite_lab::Lab;
use polite_lab::conformance::{self, ExpectedOutcome, Observed, Scenario, Work};
use polite_tokio::{CancellationToken, Client, Config, Error, JsonJob, ReqwestTransport};

fn expected(outcome: Option<Outcome>) -> ExpectedOutcome {
    match outcome {
        Some(Outcome::Succeeded { .. }) | None => ExpectedOutcome::Succeeded,
        Some(Outcome::Terminal { state }) => ExpectedOutcome::terminal(state.as_str()),
        Some(Outcome::NotRetryable { .. }) => ExpectedOutcome::NotRetryable,
        Some(Outcome::RetriesExhausted { .. }) => ExpectedOutcome::RetriesExhausted,
        Some(Outcome::RateLimited { .. }) => ExpectedOutcome::RateLimited,
        Some(Outcome::NotReplayable { .. }) => ExpectedOutcome::NotReplayable,
        Some(Outcome::TimedOut { .. }) => ExpectedOutcome::TimedOut,
        Some(Outcome::Cancelled) => ExpectedOutcome::Cancelled,
        Some(other) => panic!("no conformance name for {other:?}"),
    }
}

fn observed<T>(result: &Result<T, Error>) -> ExpectedOutcome {
    match result {
        Ok(_) => ExpectedOutcome::Succeeded,
        Err(e) => expected(e.outcome()),
    }
}

async fn run(name: &str) {
    let Some(scenario) = conformance::scenario(name) else {
        panic!("no scenario {name}")
    };
    let Scenario { lab, work, .. } = &scenario;
    let lab = Lab::start(lab.clone()).expect("lab starts");
    let mut config = Config {
        timeout: work.timeout(),
        ..Config::default()
    };
    match work {
        Work::Wait { long_poll, .. } => config.poll.long_poll_first = *long_poll,
        Work::Batch {
            concurrency,
            throttle,
            ..
        } => {
            config.concurrency = u32::try_from(*concurrency).expect("small");
            config.throttle = *throttle;
        }
        Work::Send { .. } => {}
    }
    let client = Client::with_transport(ReqwestTransport::new(reqwest::Client::new()), config)
        .expect("valid config");
    let token = CancellationToken::new();
    if let Some(after) = work.cancel_after() {
        let token = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            token.cancel();
        });
    }
    let start = Instant::now();
    let observation = match work {
        Work::Send {
            method,
            path,
            replayable,
            ..
        } => {
            let mut req = http::Request::builder().method(*method).uri(lab.url(path));
            if *replayable && !matches!(*method, "GET" | "HEAD" | "PUT" | "DELETE") {
                req = req.header("Idempotency-Key", "conformance");
            }
            let req = req.body(Bytes::new()).expect("request");
            let result = client.send_cancellable(req, token).await;
            Observed::new(observed(&result), start.elapsed())
        }
        Work::Wait { path, .. } => {
            let req = http::Request::get(lab.url(path))
                .body(Bytes::new())
                .expect("request");
            let mut notices = 0;
            let result = client
                .wait_with(req, &mut JsonJob::new("status"), token, |_| notices += 1)
                .await;
            let outcome = match &result {
                Ok(done) => ExpectedOutcome::terminal(done.state.as_str()),
                Err(e) => expected(e.outcome()),
            };
            assert!(notices <= 1, "the fallback notice is given at most once");
            Observed::new(outcome, start.elapsed())
        }
        Work::Batch { method, paths, .. } => {
            let requests = paths
                .iter()
                .map(|p| {
                    http::Request::builder()
                        .method(*method)
                        .uri(lab.url(p))
                        .body(Bytes::new())
                        .expect("request")
                })
                .collect();
            let results = client
                .batch_cancellable(requests, token)
                .await
                .expect("valid batch");
            let per_item = results.iter().map(observed).collect();
            Observed::batch(per_item, start.elapsed())
        }
    };
    if let Err(msg) = scenario.check(&observation, &lab.log()) {
        panic!("{msg}");
    }
}

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        const RUN_HERE: &[&str] = &[$(stringify!($name)),*];
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                run(stringify!($name)).await;
            }
        )*
    };
}

scenarios!(
    retry_then_success,
    retry_after_imf_fixdate,
    retry_after_rfc850,
    retry_after_asctime,
    retry_after_date_against_skewed_server_date,
    invalid_retry_after_falls_back_to_backoff,
    hostile_retry_after,
    non_replayable_post_503,
    not_retryable_404,
    server_errors_exhaust_budget,
    rate_limit_budget_spent,
    retry_after_beyond_deadline_stops_at_once,
    reset_then_success,
    cancel_during_backoff,
    hang_times_out_within_cushion,
    long_poll_sees_result_at_once,
    long_poll_fallback_to_backoff,
    long_poll_failed_job,
    pacing_reference_experiment,
);

#[test]
fn every_lab_scenario_is_run_here() {
    for s in conformance::scenarios() {
        assert!(
            RUN_HERE.contains(&s.name),
            "scenario {} is not run by polite-tokio",
            s.name
        );
    }
    let _ = Duration::ZERO;
}
