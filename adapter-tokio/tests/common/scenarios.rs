//! The lab's conformance scenarios that are one logical request
//! (`Work::Send`), run through an integration that is handed one request
//! at a time (the reqwest middleware, the tower layer). `wait` (a loop of
//! long polls) and `batch` (many requests under one deadline) are calls of
//! polite's own client with no counterpart in a per-request middleware, so
//! their scenarios are not run here (the client's suite runs them).

use std::future::Future;
use std::time::{Duration, Instant};

use polite_lab::conformance::{self, ExpectedOutcome, Observed, Work};
use polite_lab::{Lab, LabHandle};
use polite_tokio::{Config, Outcome};

/// One request as a scenario asks for it.
pub(crate) struct Call {
    pub(crate) config: Config,
    pub(crate) method: &'static str,
    pub(crate) url: String,
    /// Send an `Idempotency-Key` (a `POST` the scenario calls replayable).
    pub(crate) idempotency_key: bool,
}

/// What an integration's call ended with: `Ok(None)` a success, `Ok(Some)`
/// an answer with polite's outcome in its extensions, `Err` polite's error
/// (its outcome, if any).
pub(crate) type Ended = Result<Option<Outcome>, Option<Outcome>>;

fn expected(ended: &Ended) -> ExpectedOutcome {
    match ended {
        Ok(None) => ExpectedOutcome::Succeeded,
        Ok(Some(o)) | Err(Some(o)) => polite_lab::runner::expected(Some(*o)),
        Err(None) => ExpectedOutcome::NotAllSucceeded,
    }
}

async fn one<F, Fut>(name: &'static str, send: F) -> Result<(), String>
where
    F: FnOnce(Call) -> Fut,
    Fut: Future<Output = Ended>,
{
    let scenario = conformance::scenario(name).ok_or("no such scenario")?;
    let Work::Send {
        method,
        path,
        replayable,
        timeout,
        cancel_after,
    } = scenario.work.clone()
    else {
        return Err(format!("{name} is not a send"));
    };
    let lab: LabHandle = Lab::start(scenario.lab.clone()).map_err(|e| e.to_string())?;
    let call = Call {
        config: Config {
            timeout,
            ..Config::default()
        },
        method,
        url: lab.url(&path),
        idempotency_key: replayable && !matches!(method, "GET" | "HEAD" | "PUT" | "DELETE"),
    };
    // What `send` does before its future runs (building a client: reqwest
    // loads its TLS roots, slow with ten scenarios starting at once on a
    // busy machine) is setup, not the call: the clock starts after it.
    let sending = send(call);
    let start = Instant::now();
    // Cancelling a middleware call is dropping it.
    let outcome = match cancel_after {
        Some(after) => tokio::select! {
            ended = sending => expected(&ended),
            () = tokio::time::sleep(after) => ExpectedOutcome::Cancelled,
        },
        None => expected(&sending.await),
    };
    // A dropped call's connection may still be closing: let the lab log it.
    if cancel_after.is_some() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    scenario.check(&Observed::new(outcome, start.elapsed()), &lab.log())
}

/// Runs every `Work::Send` scenario through `send`, all at once (each on
/// its own lab), and panics with every report that differed.
pub(crate) fn run_all<F, Fut>(send: F)
where
    F: Fn(Call) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Ended> + Send + 'static,
{
    let names: Vec<&'static str> = conformance::scenarios()
        .iter()
        .filter(|s| matches!(s.work, Work::Send { .. }))
        .map(|s| s.name)
        .collect();
    assert!(names.len() >= 10, "send scenarios: {names:?}");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let failures: Vec<String> = rt.block_on(async {
        let tasks: Vec<_> = names
            .iter()
            .map(|&name| {
                let send = send.clone();
                (name, tokio::spawn(one(name, send)))
            })
            .collect();
        let mut failures = Vec::new();
        for (name, task) in tasks {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(report)) => failures.push(format!("{name}: {report}")),
                Err(e) => failures.push(format!("{name}: panicked: {e}")),
            }
        }
        failures
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
