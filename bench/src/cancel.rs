//! Cancel latency during a backoff sleep, for every adapter: the server
//! answers 503 with `Retry-After: 30`, the call (60 s budget) sleeps, and
//! 100 ms in the caller cancels; latency = when the call has returned −
//! when `cancel()` was called. Runs are sequential (one call at a time).
//!
//! Peer (tokio): a `backon` exponential retry on 503 raced against
//! `CancellationToken::cancelled()` in `tokio::select!`, which is how a tokio
//! user cancels a loop that has no cancel of its own. (A blocking `backon`
//! loop cannot be cancelled during its `thread::sleep`: it returns when the
//! sleep ends; not measured.)

use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable as _};
use polite_lab::{Fault, LabConfig, PathMatch};
use polite_tokio::{CancellationToken, Outcome};

use crate::stats::{Dist, Table, num};
use crate::{Size, get, lab, signed_ms};

fn cancelled<T>(r: &Result<T, polite_client::Error>) -> bool {
    matches!(r, Err(e) if e.outcome() == Some(Outcome::Cancelled))
}

fn config() -> polite_client::Config {
    polite_client::Config {
        timeout: Duration::from_secs(60),
        seed: Some(3),
        ..polite_client::Config::default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Tokio,
    AsyncStd,
    Blocking,
    BackonSelect,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Tokio => "polite-tokio `send_cancellable`",
            Who::AsyncStd => "polite-async-io `send_cancellable`",
            Who::Blocking => "polite-blocking `send_cancellable` (cancel from another thread)",
            Who::BackonSelect => "backon retry in `select!` with `cancelled()` (peer, tokio)",
        }
    }
}

/// (latency ms, ended Cancelled) per run.
fn measure(who: Who, url: &str, runs: usize, after: Duration) -> Vec<(f64, bool)> {
    let mut out = Vec::with_capacity(runs);
    match who {
        Who::Tokio | Who::BackonSelect => {
            let rt = crate::tokio_runtime();
            rt.block_on(async {
                let http = crate::reqwest_client();
                for _ in 0..runs {
                    let token = CancellationToken::new();
                    let (http, url, tk) = (http.clone(), url.to_owned(), token.clone());
                    let call = tokio::spawn(async move {
                        let ok = if who == Who::Tokio {
                            let c = polite_tokio::Client::with_transport(
                                polite_tokio::ReqwestTransport::new(http),
                                config(),
                            )
                            .expect("valid config");
                            // Bounded by the call's own 60 s budget.
                            cancelled(&c.send_cancellable(get(&url), &tk).await)
                        } else {
                            let once = || {
                                let (http, url) = (http.clone(), url.clone());
                                async move {
                                    match http.get(&url).send().await {
                                        Ok(r) if r.status() == 503 => Err(()),
                                        _ => Ok(()),
                                    }
                                }
                            };
                            let retry = once
                                .retry(
                                    ExponentialBuilder::default()
                                        .with_min_delay(Duration::from_secs(1))
                                        .with_max_times(4),
                                )
                                .when(|_| true);
                            tokio::select! {
                                _ = retry => false,
                                () = tk.cancelled() => true,
                            }
                        };
                        (Instant::now(), ok)
                    });
                    tokio::time::sleep(after).await;
                    let at = Instant::now();
                    token.cancel();
                    let (end, ok) = call.await.expect("task");
                    out.push((signed_ms(end, at), ok));
                }
            });
        }
        Who::AsyncStd => async_std::task::block_on(async {
            for _ in 0..runs {
                let token = polite_async_io::CancelToken::new();
                let (url, tk) = (url.to_owned(), token.clone());
                let call = async_std::task::spawn(async move {
                    let c = polite_async_io::Client::with_transport(
                        polite_async_io::Http1Transport::new(),
                        config(),
                    )
                    .expect("valid config");
                    let r = c.send_cancellable(get(&url), &tk).await;
                    (Instant::now(), cancelled(&r))
                });
                async_std::task::sleep(after).await;
                let at = Instant::now();
                token.cancel();
                let (end, ok) = call.await;
                out.push((signed_ms(end, at), ok));
            }
        }),
        Who::Blocking => {
            let agent = crate::ureq_agent();
            for _ in 0..runs {
                let token = polite_blocking::CancelToken::new();
                let (url, tk, agent) = (url.to_owned(), token.clone(), agent.clone());
                let call = std::thread::spawn(move || {
                    let c = polite_blocking::Client::with_transport(
                        polite_blocking::UreqTransport::new(agent),
                        config(),
                    )
                    .expect("valid config");
                    let r = c.send_cancellable(get(&url), &tk);
                    (Instant::now(), cancelled(&r))
                });
                std::thread::sleep(after);
                let at = Instant::now();
                token.cancel();
                let (end, ok) = call.join().expect("thread");
                out.push((signed_ms(end, at), ok));
            }
        }
    }
    out
}

/// Runs the suite.
#[must_use]
pub fn run(size: Size) -> Vec<Table> {
    let runs = size.pick(100, 3);
    let after = size.pick(Duration::from_millis(100), Duration::from_millis(50));
    let mut t = Table::new(
        &format!("Cancel during a backoff sleep: latency ({runs} runs per client, sequential)"),
        &[
            "client",
            "p50 ms",
            "p99 ms",
            "max ms",
            "ended Cancelled",
            "requests per call",
        ],
    );
    for who in [Who::Tokio, Who::AsyncStd, Who::Blocking, Who::BackonSelect] {
        let lab = lab(LabConfig::default()
            .fault(
                PathMatch::prefix("/items/"),
                Fault::FailRandomly {
                    probability: 1.0,
                    status: 503,
                },
            )
            .scripted_retry_after(Duration::from_secs(30)));
        let samples = measure(who, &lab.url("/items/c"), runs, after);
        let d = Dist::of(samples.iter().map(|s| s.0));
        let ok = samples.iter().filter(|s| s.1).count();
        t.row(vec![
            who.name().into(),
            num(d.p50, 3),
            num(d.p99, 3),
            num(d.max, 3),
            format!("{ok}/{}", samples.len()),
            num(lab.log().len() as f64 / samples.len().max(1) as f64, 2),
        ]);
    }
    t.note(format!(
        "Every answer is 503 with `Retry-After: 30`; the caller cancels {} ms after the call \
         starts (the call is then sleeping). The limit is 0 ms and 1 request.",
        after.as_millis()
    ));
    vec![t]
}
