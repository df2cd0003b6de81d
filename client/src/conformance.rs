//! The lab's adapter conformance suite, run over any adapter's parts
//! (feature `conformance`; for adapters' tests).
//!
//! Each adapter's test file is two lines: a function that runs one scenario
//! on its runtime with [`run`], and [`conformance_tests!`](crate::conformance_tests)
//! to make one `#[test]` per scenario (so the harness runs them in parallel)
//! plus a test that no lab scenario is left out.

use std::time::Instant;

use bytes::Bytes;
use polite_core::Outcome;
use polite_lab::Lab;
use polite_lab::conformance::{self, ExpectedOutcome, Observed, Work};

use crate::client::{Client, Config};
use crate::error::Error;
use crate::job::JsonJob;
use crate::transport::{CancelToken, Clock, Transport};

/// The conformance name of an outcome.
#[must_use]
pub fn expected(outcome: Option<Outcome>) -> ExpectedOutcome {
    match outcome {
        Some(Outcome::Succeeded { .. }) | None => ExpectedOutcome::Succeeded,
        Some(Outcome::Terminal { state }) => ExpectedOutcome::terminal(state.as_str()),
        Some(Outcome::NotRetryable { .. }) => ExpectedOutcome::NotRetryable,
        Some(Outcome::RetriesExhausted { .. }) => ExpectedOutcome::RetriesExhausted,
        Some(Outcome::RateLimited { .. }) => ExpectedOutcome::RateLimited,
        Some(Outcome::NotReplayable { .. }) => ExpectedOutcome::NotReplayable,
        Some(Outcome::TimedOut { .. }) => ExpectedOutcome::TimedOut,
        Some(Outcome::Cancelled) => ExpectedOutcome::Cancelled,
        Some(_) => ExpectedOutcome::NotAllSucceeded,
    }
}

fn observed<T>(result: &Result<T, Error>) -> ExpectedOutcome {
    match result {
        Ok(_) => ExpectedOutcome::Succeeded,
        Err(e) => expected(e.outcome()),
    }
}

fn request(method: &str, url: String) -> Result<http::Request<Bytes>, String> {
    http::Request::builder()
        .method(method)
        .uri(url)
        .body(Bytes::new())
        .map_err(|e| e.to_string())
}

/// Runs the named lab scenario with a client over `transport`, clocks from
/// `clock`, and a [`CancelToken`] cancelled from a thread when the scenario
/// says so. `Err` carries the lab's readable report of what differed.
///
/// # Errors
///
/// The scenario's check failed, or the scenario could not be set up.
pub async fn run<T, K>(name: &str, transport: T, clock: impl Fn() -> K) -> Result<(), String>
where
    T: Transport,
    T::Sending: Unpin,
    K: Clock,
{
    let scenario = conformance::scenario(name).ok_or_else(|| format!("no scenario {name}"))?;
    let lab = Lab::start(scenario.lab.clone()).map_err(|e| e.to_string())?;
    let work = &scenario.work;
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
            config.concurrency = u32::try_from(*concurrency).map_err(|e| e.to_string())?;
            config.throttle = *throttle;
        }
        Work::Send { .. } => {}
    }
    let client = Client::new(transport, config).map_err(|e| e.to_string())?;
    let token = CancelToken::new();
    if let Some(after) = work.cancel_after() {
        let token = token.clone();
        std::thread::spawn(move || {
            std::thread::sleep(after);
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
            let mut req = request(method, lab.url(path))?;
            if *replayable && !matches!(*method, "GET" | "HEAD" | "PUT" | "DELETE") {
                req.headers_mut().insert(
                    "idempotency-key",
                    http::HeaderValue::from_static("conformance"),
                );
            }
            let result = client.send_with(req, clock(), token).await;
            Observed::new(observed(&result), start.elapsed())
        }
        Work::Wait { path, .. } => {
            let req = request("GET", lab.url(path))?;
            let mut notices = 0;
            let result = client
                .wait_with(req, &mut JsonJob::new("status"), clock(), token, |_| {
                    notices += 1;
                })
                .await;
            if notices > 1 {
                return Err(format!("{name}: the fallback notice came {notices} times"));
            }
            let outcome = match &result {
                Ok(done) => ExpectedOutcome::terminal(done.state.as_str()),
                Err(e) => expected(e.outcome()),
            };
            Observed::new(outcome, start.elapsed())
        }
        Work::Batch { method, paths, .. } => {
            let requests = paths
                .iter()
                .map(|p| request(method, lab.url(p)))
                .collect::<Result<Vec<_>, _>>()?;
            let results = client
                .batch_with(requests, clock(), token)
                .await
                .map_err(|e| e.to_string())?;
            Observed::batch(results.iter().map(observed).collect(), start.elapsed())
        }
    };
    scenario.check(&observation, &lab.log())
}

/// Every scenario name the suite has, for [`conformance_tests!`](crate::conformance_tests).
#[must_use]
pub fn names() -> Vec<&'static str> {
    conformance::scenarios().iter().map(|s| s.name).collect()
}

/// One `#[test]` per lab scenario, each calling `$run(name)` (a function
/// that runs [`run`] on the adapter's runtime and panics on `Err`), plus
/// `every_lab_scenario_is_run_here`.
#[macro_export]
macro_rules! conformance_tests {
    ($run:path) => {
        $crate::conformance_tests!(@each $run;
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
            pacing_reference_experiment
        );
    };
    (@each $run:path; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $run(stringify!($name));
            }
        )*
        #[test]
        fn every_lab_scenario_is_run_here() {
            let here = [$(stringify!($name)),*];
            for name in $crate::conformance::names() {
                assert!(here.contains(&name), "lab scenario {name} is not run here");
            }
        }
    };
}
