//! The conformance suite run through polite's own [`Client`], on any
//! adapter's [`Runtime`] and [`Transport`] (feature `runner`; for the
//! adapters' tests and for anyone writing an adapter).
//!
//! An adapter's whole conformance test file is two lines: a function that
//! runs one scenario with [`run`] on its runtime (and panics on `Err`), and
//! [`conformance_tests!`](crate::conformance_tests), which makes one
//! `#[test]` per scenario (so the harness runs them in parallel) plus a
//! test that no lab scenario is left out:
//!
//! ```text
//! // adapter-blocking/tests/conformance.rs, whole:
//! use polite_blocking::{Threads, UreqTransport, block_on};
//!
//! fn run(name: &str) {
//!     if let Err(report) = block_on(polite_lab::runner::run::<Threads, _>(name, UreqTransport::default())) {
//!         panic!("{report}");
//!     }
//! }
//!
//! polite_lab::conformance_tests!(run);
//! ```
//!
//! `run_tls` (features `runner` and `tls`) runs the same scenarios over
//! `https://`, against the lab in TLS mode.
//!
//! [`hostile`] does the same for answers that repeating cannot cure
//! (`polite_lab::hostile_tests!`), and [`keys`] for one pace per origin
//! inside a batch.

use std::time::Instant;

pub mod hostile;
pub mod keys;

use bytes::Bytes;
use polite_client::{
    Client, Config, Error, JsonJob, Observed as Seen, Runtime, Throttle, Transport,
};
use polite_core::Outcome;

use crate::Lab;
use crate::conformance::{self, ExpectedOutcome, Observed, Work};

/// The conformance name of an outcome (`None`: a success).
///
/// ```
/// use polite_lab::conformance::ExpectedOutcome;
/// use polite_core::Outcome;
/// assert_eq!(polite_lab::runner::expected(Some(Outcome::Cancelled)), ExpectedOutcome::Cancelled);
/// assert_eq!(polite_lab::runner::expected(None), ExpectedOutcome::Succeeded);
/// ```
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
        Err(e) => failed(e),
    }
}

/// The conformance name of a failed call: its outcome's, or
/// [`ExpectedOutcome::Error`] when the error carries none
/// (`Error::Config`, `Error::Policy`, ...): an error is never reported as a
/// success.
///
/// ```
/// use polite_lab::conformance::ExpectedOutcome;
/// let e = polite_client::Error::Config("no origin");
/// assert_eq!(polite_lab::runner::failed(&e), ExpectedOutcome::Error(e.to_string()));
/// ```
pub fn failed(e: &Error) -> ExpectedOutcome {
    match e.outcome() {
        Some(o) => expected(Some(o)),
        None => ExpectedOutcome::Error(e.to_string()),
    }
}

fn request(method: &str, url: String) -> Result<http::Request<Bytes>, String> {
    http::Request::builder()
        .method(method)
        .uri(url)
        .body(Bytes::new())
        .map_err(|e| e.to_string())
}

/// Runs the named lab scenario with a `Client<R, T>` over `transport`, and
/// the runtime's cancel token cancelled from a thread when the scenario
/// says so. `Err` carries the lab's readable report of what differed.
///
/// # Errors
///
/// The scenario's check failed, or the scenario could not be set up.
pub async fn run<R, T>(name: &str, transport: T) -> Result<(), String>
where
    R: Runtime,
    T: Transport,
    T::Sending: Unpin,
{
    let scenario = conformance::scenario(name).ok_or_else(|| format!("no scenario {name}"))?;
    run_on::<R, T>(name, transport, scenario.lab.clone()).await
}

/// [`run`] over `https://`: the scenario's lab in TLS mode (feature `tls`)
/// with this certificate chain and key (PEM), and `transport` trusting it
/// (the caller builds it, e.g. with a rustls `ClientConfig` whose roots
/// hold the certificate). Everything else is as in [`run`].
///
/// ```text
/// // adapter-async-std/tests/conformance_https.rs, in short:
/// fn run(name: &str) {
///     let tls = Http1Transport::with_tls(client_config_trusting(&cert));
///     let result = smol::block_on(polite_lab::runner::run_tls::<AsyncIo, _>(name, tls, &cert_pem, &key_pem));
///     if let Err(report) = result { panic!("{report}"); }
/// }
/// polite_lab::conformance_tests!(run);
/// ```
///
/// # Errors
///
/// The scenario's check failed, or the scenario (or its TLS lab) could not
/// be set up.
#[cfg(feature = "tls")]
pub async fn run_tls<R, T>(
    name: &str,
    transport: T,
    cert_pem: &str,
    key_pem: &str,
) -> Result<(), String>
where
    R: Runtime,
    T: Transport,
    T::Sending: Unpin,
{
    let scenario = conformance::scenario(name).ok_or_else(|| format!("no scenario {name}"))?;
    let lab = scenario.lab.clone().tls(cert_pem, key_pem);
    run_on::<R, T>(name, transport, lab).await
}

/// Runs the scenario `name` against a lab started from `lab`.
async fn run_on<R, T>(name: &str, transport: T, lab: crate::LabConfig) -> Result<(), String>
where
    R: Runtime,
    T: Transport,
    T::Sending: Unpin,
{
    let scenario = conformance::scenario(name).ok_or_else(|| format!("no scenario {name}"))?;
    let lab = Lab::start(lab).map_err(|e| e.to_string())?;
    let work = &scenario.work;
    let mut config = Config {
        timeout: work.timeout(),
        ..Config::default()
    };
    match work {
        Work::Wait { long_poll, .. } => config.wait.long_poll_first = *long_poll,
        Work::Batch {
            concurrency,
            throttle,
            ..
        } => {
            config.concurrency = u32::try_from(*concurrency).map_err(|e| e.to_string())?;
            config.throttle = throttle.map(|(limit, window)| Throttle::new(limit, window));
        }
        Work::Send { .. } => {}
    }
    let notices = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = Client::<R, T>::with_transport(transport, config)
        .map_err(|e| e.to_string())?
        .observe({
            let notices = std::sync::Arc::clone(&notices);
            move |seen| {
                if let Seen::Notice(_) = seen {
                    notices.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
    let token = R::Token::default();
    // Taken before the cancel thread starts its sleep: a call that ends
    // within microseconds of the cancel must not measure as ending before
    // `cancel_after` (it did: 499.99 ms for a 500 ms cancel).
    let start = Instant::now();
    if let Some(after) = work.cancel_after() {
        let token = token.clone();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            R::cancel(&token);
        });
    }
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
            let result = R::settle(client.send_cancellable(req, &token)).await;
            Observed::new(observed(&result), start.elapsed())
        }
        Work::Wait { path, .. } => {
            let req = request("GET", lab.url(path))?;
            let mut job = JsonJob::new("status");
            let result = R::settle(client.wait_cancellable(req, &mut job, &token)).await;
            let notices = notices.load(std::sync::atomic::Ordering::Relaxed);
            if notices > 1 {
                return Err(format!("{name}: the fallback notice came {notices} times"));
            }
            let outcome = match &result {
                Ok(done) => ExpectedOutcome::terminal(done.state.as_str()),
                Err(e) => failed(e),
            };
            Observed::new(outcome, start.elapsed())
        }
        Work::Batch { method, paths, .. } => {
            let requests = paths
                .iter()
                .map(|p| request(method, lab.url(p)))
                .collect::<Result<Vec<_>, _>>()?;
            let results = R::settle(client.batch_cancellable(requests, &token))
                .await
                .map_err(|e| e.to_string())?;
            Observed::batch(results.iter().map(observed).collect(), start.elapsed())
        }
    };
    scenario.check(&observation, &lab.log())
}

/// Every scenario name the suite has, for [`conformance_tests!`](crate::conformance_tests).
///
/// ```
/// assert!(polite_lab::runner::names().contains(&"retry_then_success"));
/// ```
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
            for name in $crate::runner::names() {
                assert!(here.contains(&name), "lab scenario {name} is not run here");
            }
        }
    };
}
