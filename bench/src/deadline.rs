//! Deadlines, for every adapter, in real time on loopback.
//!
//! 1. **A hanging server**, 1 s timeout: the distribution of (return time −
//!    deadline), where deadline = call start + 1 s. polite's bound is the
//!    transport cushion (2 s): an attempt is aborted at `deadline + cushion`
//!    at the latest, and the call itself ends at the deadline. Peers: reqwest
//!    and ureq with their own 1 s timeouts.
//! 2. **A 429 whose `Retry-After` (5 s) lies beyond the deadline** (2 s
//!    timeout): polite stops at once (`TimedOut`) instead of sleeping to the
//!    deadline. Peer: a `backon` exponential retry on 429 under
//!    `tokio::time::timeout(2 s)`. Each run uses a fresh client (a shared
//!    client would hold later calls back with its cool-down).
//!
//! Runs go `conc` at a time to keep the wall time down.

use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable as _};
use polite_lab::{Fault, LabConfig, PathMatch};
use polite_tokio::Outcome;

use crate::stats::{Dist, Table, num};
use crate::{Size, get, lab, ms, signed_ms};

/// One call: when it started, when it returned, whether it ended as expected.
#[derive(Clone, Copy, Debug)]
struct Sample {
    start: Instant,
    end: Instant,
    expected: bool,
}

fn timed_out(e: &polite_client::Error) -> bool {
    matches!(e.outcome(), Some(Outcome::TimedOut { .. }))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Tokio,
    AsyncStd,
    Blocking,
    Reqwest,
    Ureq,
    Backon,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Tokio => "polite-tokio",
            Who::AsyncStd => "polite-async-io",
            Who::Blocking => "polite-blocking",
            Who::Reqwest => "reqwest `.timeout()` (peer)",
            Who::Ureq => "ureq `timeout_global` (peer)",
            Who::Backon => "backon exponential in `tokio::time::timeout` (peer)",
        }
    }
}

fn call_config(timeout: Duration) -> polite_client::Config {
    polite_client::Config {
        timeout,
        seed: Some(1),
        ..polite_client::Config::default()
    }
}

/// Runs `runs` calls of `who` against `url`, `conc` at a time.
fn calls(who: Who, url: &str, timeout: Duration, runs: usize, conc: usize) -> Vec<Sample> {
    let batches = runs.div_ceil(conc);
    let mut out = Vec::with_capacity(runs);
    match who {
        Who::Tokio | Who::Reqwest | Who::Backon => {
            let rt = crate::tokio_runtime();
            rt.block_on(async {
                let http = crate::reqwest_client();
                for _ in 0..batches {
                    let mut set = tokio::task::JoinSet::new();
                    for _ in 0..conc {
                        let (http, url) = (http.clone(), url.to_owned());
                        set.spawn(async move {
                            let start = Instant::now();
                            let expected = match who {
                                Who::Tokio => {
                                    // A fresh polite client over the shared reqwest pool.
                                    let c = polite_tokio::Client::with_transport(
                                        polite_tokio::ReqwestTransport::new(http),
                                        call_config(timeout),
                                    )
                                    .expect("valid config");
                                    c.send(get(&url)).await.is_err_and(|e| timed_out(&e))
                                }
                                Who::Reqwest => http
                                    .get(&url)
                                    .timeout(timeout)
                                    .send()
                                    .await
                                    .is_err_and(|e| e.is_timeout()),
                                _ => {
                                    let once = || {
                                        let (http, url) = (http.clone(), url.clone());
                                        async move {
                                            match http.get(&url).send().await {
                                                Ok(r) if r.status() == 429 => Err(()),
                                                _ => Ok(()),
                                            }
                                        }
                                    };
                                    let retry = once
                                        .retry(
                                            ExponentialBuilder::default()
                                                .with_min_delay(Duration::from_millis(250))
                                                .with_max_delay(Duration::from_secs(4))
                                                .with_jitter()
                                                .with_max_times(10),
                                        )
                                        .when(|_| true);
                                    tokio::time::timeout(timeout, retry).await.is_err()
                                }
                            };
                            Sample {
                                start,
                                end: Instant::now(),
                                expected,
                            }
                        });
                    }
                    while let Some(s) = set.join_next().await {
                        out.push(s.expect("task"));
                    }
                }
            });
        }
        Who::AsyncStd => async_std::task::block_on(async {
            for _ in 0..batches {
                let handles: Vec<_> = (0..conc)
                    .map(|_| {
                        let url = url.to_owned();
                        async_std::task::spawn(async move {
                            let start = Instant::now();
                            let c = polite_async_io::Client::with_transport(
                                polite_async_io::Http1Transport::new(),
                                call_config(timeout),
                            )
                            .expect("valid config");
                            let expected = c.send(get(&url)).await.is_err_and(|e| timed_out(&e));
                            Sample {
                                start,
                                end: Instant::now(),
                                expected,
                            }
                        })
                    })
                    .collect();
                for h in handles {
                    out.push(h.await);
                }
            }
        }),
        Who::Blocking | Who::Ureq => {
            let agent = crate::ureq_agent();
            for _ in 0..batches {
                let threads: Vec<_> = (0..conc)
                    .map(|_| {
                        let (agent, url) = (agent.clone(), url.to_owned());
                        std::thread::spawn(move || {
                            // The client a user gets (`with_config`: the
                            // default transport and agent), not one over the
                            // peer's agent; built before the call starts, as
                            // the peer's agent is.
                            let c = (who == Who::Blocking).then(|| {
                                polite_blocking::Client::with_config(call_config(timeout))
                                    .expect("valid config")
                            });
                            let start = Instant::now();
                            let expected = if let Some(c) = c {
                                c.send(get(&url)).is_err_and(|e| timed_out(&e))
                            } else {
                                agent
                                    .get(&url)
                                    .config()
                                    .timeout_global(Some(timeout))
                                    .build()
                                    .call()
                                    .is_err_and(|e| matches!(e, ureq::Error::Timeout(_)))
                            };
                            Sample {
                                start,
                                end: Instant::now(),
                                expected,
                            }
                        })
                    })
                    .collect();
                for t in threads {
                    out.push(t.join().expect("thread"));
                }
            }
        }
    }
    out.truncate(runs);
    out
}

fn hanging(size: Size) -> Table {
    let runs = size.pick(200, 6);
    let conc = size.pick(20, 3);
    let timeout = size.pick(Duration::from_secs(1), Duration::from_millis(200));
    let mut t = Table::new(
        &format!(
            "Against a hanging server: return time − deadline ({runs} runs per client, {conc} at a time, timeout {} ms)",
            timeout.as_millis()
        ),
        &[
            "client",
            "p50 ms",
            "p99 ms",
            "max ms",
            "bound ms",
            "ended TimedOut / timeout error",
        ],
    );
    for who in [
        Who::Tokio,
        Who::AsyncStd,
        Who::Blocking,
        Who::Reqwest,
        Who::Ureq,
    ] {
        let lab = lab(LabConfig::default().fault(PathMatch::prefix("/items/"), Fault::Hang));
        let samples = calls(who, &lab.url("/items/h"), timeout, runs, conc);
        let over = Dist::of(samples.iter().map(|s| signed_ms(s.end, s.start + timeout)));
        let expected = samples.iter().filter(|s| s.expected).count();
        let bound = if matches!(who, Who::Reqwest | Who::Ureq) {
            "–".to_owned()
        } else {
            "2000 (cushion)".to_owned()
        };
        t.row(vec![
            who.name().into(),
            num(over.p50, 2),
            num(over.p99, 2),
            num(over.max, 2),
            bound,
            format!("{expected}/{}", samples.len()),
        ]);
    }
    t.note(
        "Deadline = call start + timeout. polite's calls end at the deadline (`TimedOut`) and \
         drop the attempt; the cushion bounds only how long an abandoned attempt may run on \
         (polite-blocking's worker thread, until deadline + 2 s).",
    );
    t
}

fn retry_after_beyond(size: Size) -> Table {
    let runs = size.pick(200, 6);
    let conc = size.pick(20, 3);
    let timeout = size.pick(Duration::from_secs(2), Duration::from_millis(500));
    let mut t = Table::new(
        &format!(
            "429 with `Retry-After: 5` beyond a {} ms deadline: time to return ({runs} runs per client, {conc} at a time)",
            timeout.as_millis()
        ),
        &[
            "client",
            "p50 ms",
            "p99 ms",
            "max ms",
            "vs deadline (p50)",
            "requests per call",
            "ended as expected",
        ],
    );
    for who in [Who::Tokio, Who::AsyncStd, Who::Blocking, Who::Backon] {
        let lab = lab(LabConfig::default()
            .fault(
                PathMatch::prefix("/items/"),
                Fault::FailRandomly {
                    probability: 1.0,
                    status: 429,
                },
            )
            .scripted_retry_after(Duration::from_secs(5)));
        let samples = calls(who, &lab.url("/items/r"), timeout, runs, conc);
        let took = Dist::of(samples.iter().map(|s| ms(s.end - s.start)));
        let expected = samples.iter().filter(|s| s.expected).count();
        let requests = lab.log().len() as f64 / samples.len().max(1) as f64;
        t.row(vec![
            who.name().into(),
            num(took.p50, 2),
            num(took.p99, 2),
            num(took.max, 2),
            format!("{:.4}×", took.p50 / ms(timeout)),
            num(requests, 2),
            format!("{expected}/{}", samples.len()),
        ]);
    }
    t.note(
        "Every answer is 429 with `Retry-After: 5` (s). polite: `TimedOut` at once (the next \
         permitted send is after the deadline). The peer ignores `Retry-After`, retries on its \
         own schedule and is cut off by the outer timeout.",
    );
    t
}

/// Runs the suite.
#[must_use]
pub fn run(size: Size) -> Vec<Table> {
    vec![hanging(size), retry_after_beyond(size)]
}
