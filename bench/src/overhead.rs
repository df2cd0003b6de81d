//! Overhead: a polite `send` over its HTTP client versus the same client
//! called directly, on loopback, sequential GETs interleaved in rounds
//! (each round runs both, the order alternating), per-request medians.
//!
//! * polite-tokio `send` (reqwest transport) vs `reqwest` (`get().send()`,
//!   body read), on a current-thread tokio runtime;
//! * polite-blocking `send` (ureq transport) vs `ureq` (`call()`, body read);
//! * polite-async-io `send` vs its own bare `Http1Transport::send` (the
//!   adapter's transport has no peer crate; this isolates polite's share);
//! * the integrations, each vs the bare client under it: a reqwest-middleware
//!   stack with `PoliteMiddleware` vs reqwest (and vs the same stack with no
//!   middleware, to split reqwest-middleware's own share), and hyper-util's
//!   legacy client under `PoliteLayer` vs hyper-util.
//!
//! And each polite variant against the retry stack a user of its client
//! would adopt instead (same run, same rounds): reqwest in a `backon`
//! retry, reqwest-retry's `RetryTransientMiddleware`, tower's `retry` and
//! `timeout` layers over hyper-util, ureq in a blocking `backon` retry
//! ([`crate::stacks`]).
//!
//! Both sides of a pair set the same 5 s per-request timeout.

use std::future::Future;
use std::time::{Duration, Instant};

use polite_client::Transport as _;
use polite_lab::LabConfig;

use crate::stacks::{Stacks, TIMEOUT, Via};
use crate::stats::{Dist, Table, num, ratio};
use crate::{Size, get, lab, ms};

/// Per-request times (ms) of each variant (0 is the peer), and failures.
#[derive(Debug, Default)]
struct Samples {
    times: Vec<Vec<f64>>,
    failures: usize,
}

impl Samples {
    fn new(variants: usize) -> Samples {
        Samples {
            times: vec![Vec::new(); variants],
            failures: 0,
        }
    }

    fn push(&mut self, variant: usize, elapsed: Duration, ok: bool) {
        if !ok {
            self.failures += 1;
        }
        self.times[variant].push(ms(elapsed));
    }

    /// A row comparing `variant` with the peer (variant 0).
    fn row(&self, name: &str, variant: usize) -> Vec<String> {
        self.row_against(name, variant, 0)
    }

    /// A row comparing `variant` with the peer `peer`.
    fn row_against(&self, name: &str, variant: usize, peer: usize) -> Vec<String> {
        let raw = Dist::of(self.times[peer].iter().copied());
        let pol = Dist::of(self.times[variant].iter().copied());
        let raw_sum: f64 = self.times[peer].iter().sum();
        let pol_sum: f64 = self.times[variant].iter().sum();
        vec![
            name.to_owned(),
            format!("{}", raw.n.min(pol.n)),
            num(raw.p50 * 1e3, 1),
            num(pol.p50 * 1e3, 1),
            format!("**{}**", ratio(pol.p50, raw.p50)),
            ratio(pol.p90, raw.p90),
            ratio(pol_sum, raw_sum),
            self.failures.to_string(),
        ]
    }
}

/// The order of the variants in round `r`: rotated, so each goes first in turn.
fn order(r: usize, variants: usize) -> impl Iterator<Item = usize> {
    (0..variants).map(move |k| (k + r) % variants)
}

async fn interleave_async<F, Fut>(
    variants: usize,
    rounds: usize,
    per_round: usize,
    warm: usize,
    mut one: F,
) -> Samples
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..warm {
        for v in 0..variants {
            one(v).await;
        }
    }
    let mut samples = Samples::new(variants);
    for r in 0..rounds {
        for v in order(r, variants) {
            for _ in 0..per_round {
                let t = Instant::now();
                let ok = one(v).await;
                samples.push(v, t.elapsed(), ok);
            }
        }
    }
    samples
}

fn interleave_blocking(
    variants: usize,
    rounds: usize,
    per_round: usize,
    warm: usize,
    mut one: impl FnMut(usize) -> bool,
) -> Samples {
    for _ in 0..warm {
        for v in 0..variants {
            one(v);
        }
    }
    let mut samples = Samples::new(variants);
    for r in 0..rounds {
        for v in order(r, variants) {
            for _ in 0..per_round {
                let t = Instant::now();
                let ok = one(v);
                samples.push(v, t.elapsed(), ok);
            }
        }
    }
    samples
}

/// Variants: 0 reqwest, 1 polite-tokio's transport alone, 2 polite-tokio
/// `send`, 3 reqwest in a `backon` retry.
fn tokio_samples(url: &str, rounds: usize, per_round: usize, warm: usize) -> Samples {
    stack_samples(
        url,
        &[
            Via::Reqwest,
            Via::TokioTransport,
            Via::TokioSend,
            Via::ReqwestBackon,
        ],
        (rounds, per_round, warm),
    )
}

/// Variants: 0 reqwest, 1 a reqwest-middleware stack with no middleware,
/// 2 the same stack with `PoliteMiddleware`, 3 hyper-util's legacy client,
/// 4 the same client under `PoliteLayer`, 5 the stack with reqwest-retry's
/// middleware, 6 hyper-util under tower's `retry` and `timeout`. Every
/// variant reads the body.
fn integration_samples(url: &str, rounds: usize, per_round: usize, warm: usize) -> Samples {
    stack_samples(
        url,
        &[
            Via::Reqwest,
            Via::EmptyStack,
            Via::Middleware,
            Via::Hyper,
            Via::Layer,
            Via::RetryMiddleware,
            Via::TowerRetry,
        ],
        (rounds, per_round, warm),
    )
}

/// `vias` interleaved on a current-thread tokio runtime (variant `k` is
/// `vias[k]`).
fn stack_samples(
    url: &str,
    vias: &[Via],
    (rounds, per_round, warm): (usize, usize, usize),
) -> Samples {
    let rt = crate::tokio_current_thread();
    rt.block_on(async {
        let stacks = Stacks::new(url);
        interleave_async(vias.len(), rounds, per_round, warm, |variant| {
            stacks.get(vias[variant])
        })
        .await
    })
}

/// Variants: 0 ureq ([`ureq_agent`](crate::ureq_agent): ureq's own
/// connectors and a thread-free resolver, with a global timeout), 1
/// polite-blocking's transport alone over that agent (on a worker), 2
/// polite-blocking `send` over the default `UreqTransport` (attempts on
/// the calling thread, BENCHMARKS §8.13), 3 `send` over
/// `UreqTransport::new(agent)` (attempts on worker threads), 4 ureq with
/// ureq's own default agent (whose resolver spawns a thread per request
/// under a global timeout), 5 ureq (as 0) in a blocking `backon` retry.
fn blocking_samples(url: &str, rounds: usize, per_round: usize, warm: usize) -> Samples {
    let agent = crate::ureq_agent();
    let plain = ureq::Agent::new_with_defaults();
    let transport = polite_blocking::UreqTransport::new(crate::ureq_agent());
    let inline = polite_blocking::Client::with_transport(
        polite_blocking::UreqTransport::default(),
        polite_blocking::Config::default(),
    )
    .expect("default config");
    let workers = polite_blocking::Client::with_transport(
        polite_blocking::UreqTransport::new(crate::ureq_agent()),
        polite_blocking::Config::default(),
    )
    .expect("default config");
    let bare = |agent: &ureq::Agent| {
        let req = agent
            .get(url)
            .config()
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .build();
        match req.call() {
            Ok(mut r) => r.status() == 200 && r.body_mut().read_to_vec().is_ok(),
            Err(_) => false,
        }
    };
    interleave_blocking(6, rounds, per_round, warm, |variant| match variant {
        5 => crate::stacks::ureq_backon(&agent, url),
        4 => bare(&plain),
        3 => workers.send(get(url)).is_ok_and(|r| r.status() == 200),
        2 => inline.send(get(url)).is_ok_and(|r| r.status() == 200),
        1 => polite_blocking::block_on(transport.send(get(url), Instant::now() + TIMEOUT))
            .is_ok_and(|r| r.status() == 200),
        _ => bare(&agent),
    })
}

/// Variants: 0 polite-async-io's bare transport, 1 polite-async-io `send`.
fn async_std_samples(url: &str, rounds: usize, per_round: usize, warm: usize) -> Samples {
    let transport = polite_async_io::Http1Transport::new();
    let polite = polite_async_io::Client::with_transport(
        polite_async_io::Http1Transport::new(),
        polite_async_io::Config::default(),
    )
    .expect("default config");
    async_std::task::block_on(interleave_async(2, rounds, per_round, warm, |variant| {
        let (transport, polite) = (&transport, &polite);
        async move {
            if variant == 1 {
                polite.send(get(url)).await.is_ok_and(|r| r.status() == 200)
            } else {
                transport
                    .send(get(url), Instant::now() + TIMEOUT)
                    .await
                    .is_ok_and(|r| r.status() == 200)
            }
        }
    }))
}

/// Runs the suite.
#[must_use]
pub fn run(size: Size) -> Vec<Table> {
    let rounds = size.pick(20, 2);
    let per_round = size.pick(100, 5);
    let warm = size.pick(50, 2);
    let lab = lab(LabConfig::default());
    let url = lab.url("/items/a");

    let mut t = Table::new(
        "Overhead of a polite send over its HTTP client (loopback GET, sequential)",
        &[
            "pair (polite vs peer)",
            "requests each",
            "peer p50 µs",
            "polite p50 µs",
            "p50 ratio",
            "p90 ratio",
            "total-time ratio",
            "failures",
        ],
    );
    let tokio = tokio_samples(&url, rounds, per_round, warm);
    t.row(tokio.row("polite-tokio `send` vs reqwest", 2));
    t.row(tokio.row("(polite-tokio's `ReqwestTransport` alone vs reqwest)", 1));
    t.row(tokio.row_against(
        "polite-tokio `send` vs reqwest in a `backon` retry (retry peer)",
        2,
        3,
    ));
    t.row(tokio.row("(reqwest in a `backon` retry vs reqwest)", 3));
    let blocking = blocking_samples(&url, rounds, per_round, warm);
    t.row(blocking.row("polite-blocking `send` vs ureq", 2));
    t.row(blocking.row_against(
        "polite-blocking `send` vs ureq in a blocking `backon` retry (retry peer)",
        2,
        5,
    ));
    t.row(blocking.row("(ureq in a blocking `backon` retry vs ureq)", 5));
    t.row(blocking.row(
        "(polite-blocking `send`, attempts on workers: `UreqTransport::new(agent)`, vs ureq)",
        3,
    ));
    t.row(blocking.row("(polite-blocking's `UreqTransport` alone vs ureq)", 1));
    t.row(blocking.row(
        "(ureq's own default agent, a resolver thread per request, vs ureq)",
        4,
    ));
    let asyncstd = async_std_samples(&url, rounds, per_round, warm);
    t.row(asyncstd.row("polite-async-io `send` vs its bare Http1Transport", 1));
    let integrations = integration_samples(&url, rounds, per_round, warm);
    t.row(integrations.row(
        "reqwest-middleware stack with `PoliteMiddleware` vs reqwest",
        2,
    ));
    t.row(integrations.row_against(
        "(the same stack with `PoliteMiddleware` vs with no middleware)",
        2,
        1,
    ));
    t.row(integrations.row(
        "(a reqwest-middleware stack with no middleware vs reqwest)",
        1,
    ));
    t.row(integrations.row_against(
        "reqwest-middleware stack with `PoliteMiddleware` vs with reqwest-retry's `RetryTransientMiddleware` (retry peer)",
        2,
        5,
    ));
    t.row(integrations.row(
        "(a reqwest-middleware stack with `RetryTransientMiddleware` vs reqwest)",
        5,
    ));
    t.row(integrations.row_against("hyper-util client under `PoliteLayer` vs hyper-util", 4, 3));
    t.row(integrations.row_against(
        "hyper-util client under `PoliteLayer` vs under tower's `retry` + `timeout` (retry peer)",
        4,
        6,
    ));
    t.row(integrations.row_against(
        "(hyper-util under tower's `retry` + `timeout` vs hyper-util)",
        6,
        3,
    ));
    t.note(format!(
        "{rounds} rounds × {per_round} GETs per variant, interleaved (the order rotating per \
         round), after {warm} warm-up GETs each; one lab on its own thread; target ratio ≤ 1.05. \
         Rows in parentheses split polite's share: the adapter's transport called directly \
         (no machine, no drive loop). Retry peers: the retry stack a user of the same client \
         adopts instead of polite, retrying 429, 5xx and errors up to 3 times."
    ));
    vec![t]
}
