//! Instructions per call: what one polite call costs over its bare HTTP
//! client, counted by valgrind's callgrind rather than timed. A count does
//! not move with the machine's load (this VM's loopback latency moves
//! fivefold with it, and it has no hardware counters), so it shows a
//! change of a few hundred instructions that a timed run cannot.
//!
//! Each variant runs `n` sequential loopback GETs against a lab in this
//! same process (`polite-bench calls <variant> <n>`), under
//! `valgrind --tool=callgrind`, twice (`n` and `2n`); the difference,
//! divided by `n`, is the cost of one more call — setup (runtime, lab,
//! clients) cancels out. The lab's own work per request is included on
//! both sides of every ratio.

use std::process::Command;

use polite_lab::LabConfig;

use crate::stacks::{Stacks, TIMEOUT, Via};
use crate::stats::Table;
use crate::{Size, get, lab};

/// A variant's client: one of the async stacks, or a blocking one.
#[derive(Clone, Copy, Debug)]
pub enum Client {
    /// Through [`Stacks`], on a current-thread tokio runtime.
    Async(Via),
    /// ureq, bare: [`ureq_agent`](crate::ureq_agent) (ureq's own
    /// connectors) with an end-to-end timeout.
    Ureq,
    /// polite-blocking `send` over the default `UreqTransport` (attempts
    /// on the calling thread, BENCHMARKS §8.13).
    BlockingSend,
    /// polite-blocking `send` over `UreqTransport::new(agent)` (attempts
    /// on worker threads, as every attempt was before).
    BlockingWorkers,
    /// ureq (as [`Client::Ureq`]) in a blocking `backon` retry: the retry
    /// stack a ureq user writes instead of polite-blocking.
    UreqBackon,
}

/// The variants, in the order of their rows: (name, its client, the bare
/// client it is compared with, or `None` for a bare client).
pub const VARIANTS: &[(&str, Client, Option<&str>)] = &[
    ("reqwest", Client::Async(Via::Reqwest), None),
    (
        "tokio-transport",
        Client::Async(Via::TokioTransport),
        Some("reqwest"),
    ),
    ("tokio-send", Client::Async(Via::TokioSend), Some("reqwest")),
    (
        "middleware",
        Client::Async(Via::Middleware),
        Some("reqwest"),
    ),
    ("hyper", Client::Async(Via::Hyper), None),
    ("layer", Client::Async(Via::Layer), Some("hyper")),
    ("ureq", Client::Ureq, None),
    ("blocking-send", Client::BlockingSend, Some("ureq")),
    (
        "blocking-send-workers",
        Client::BlockingWorkers,
        Some("ureq"),
    ),
    (
        "reqwest-backon",
        Client::Async(Via::ReqwestBackon),
        Some("reqwest"),
    ),
    (
        "reqwest-retry",
        Client::Async(Via::RetryMiddleware),
        Some("reqwest"),
    ),
    ("tower-retry", Client::Async(Via::TowerRetry), Some("hyper")),
    ("ureq-backon", Client::UreqBackon, Some("ureq")),
];

/// Each polite variant and the retry stack a user of its client adopts
/// instead (the retry peers of [`crate::stacks`]), compared in rows of
/// their own.
pub const RETRY_PEERS: &[(&str, &str)] = &[
    ("tokio-send", "reqwest-backon"),
    ("middleware", "reqwest-retry"),
    ("layer", "tower-retry"),
    ("blocking-send", "ureq-backon"),
];

/// Runs `n` sequential GETs of `variant` against a fresh lab; returns how
/// many were answered 200 (the `calls` helper, run under callgrind).
///
/// # Panics
///
/// On an unknown variant, or when a client cannot be built.
#[must_use]
pub fn calls(variant: &str, n: usize) -> usize {
    let Some(&(_, client, _)) = VARIANTS.iter().find(|(v, _, _)| *v == variant) else {
        panic!("unknown variant {variant}")
    };
    let lab = lab(LabConfig::default());
    let url = lab.url("/items/a");
    let via = match client {
        Client::Async(via) => via,
        Client::Ureq => {
            let agent = crate::ureq_agent();
            return blocking_calls(n, || ureq_get(&agent, &url));
        }
        Client::UreqBackon => {
            let agent = crate::ureq_agent();
            return blocking_calls(n, || crate::stacks::ureq_backon(&agent, &url));
        }
        Client::BlockingSend | Client::BlockingWorkers => {
            let transport = if matches!(client, Client::BlockingSend) {
                polite_blocking::UreqTransport::default()
            } else {
                polite_blocking::UreqTransport::new(crate::ureq_agent())
            };
            let polite = polite_blocking::Client::with_transport(
                transport,
                polite_blocking::Config::default(),
            )
            .expect("default config");
            return blocking_calls(n, || {
                polite.send(get(&url)).is_ok_and(|r| r.status() == 200)
            });
        }
    };
    let rt = crate::tokio_current_thread();
    rt.block_on(async {
        let stacks = Stacks::new(&url);
        let mut ok = 0;
        for _ in 0..n {
            ok += usize::from(stacks.get(via).await);
        }
        ok
    })
}

/// `n` sequential calls of `one`; how many answered 200.
fn blocking_calls(n: usize, mut one: impl FnMut() -> bool) -> usize {
    (0..n).map(|_| usize::from(one())).sum()
}

/// One GET through a bare ureq agent (with the same end-to-end timeout as
/// the polite side), body read.
fn ureq_get(agent: &ureq::Agent, url: &str) -> bool {
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
}

/// Instructions callgrind counts for `polite-bench calls <variant> <n>`.
fn counted(variant: &str, n: usize) -> Result<u64, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(me)
        .args(["calls", variant, &n.to_string()])
        .output()
        .map_err(|e| format!("valgrind: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("valgrind failed: {}", stderr.trim()));
    }
    // "==123== Collected : 170795553"
    stderr
        .lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no instruction count in: {}", stderr.trim()))
}

/// The suite: instructions per call of every variant, and each polite
/// variant's ratio to its bare client. Without valgrind (and at smoke
/// size) it runs each variant in this process instead and says so.
#[must_use]
pub fn run(size: Size) -> Vec<Table> {
    let n = match size {
        Size::Full => 1000,
        Size::Smoke => 5,
    };
    let mut t = Table::new(
        "Instructions per call (callgrind, sequential loopback GETs)",
        &[
            "variant",
            "instructions per call",
            "over its bare client",
            "ratio",
        ],
    );
    let valgrind = size == Size::Full
        && Command::new("valgrind")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if !valgrind {
        for (variant, _, _) in VARIANTS {
            let ok = calls(variant, n);
            t.row(vec![
                (*variant).to_owned(),
                format!("not counted ({ok}/{n} answered 200)"),
                "-".to_owned(),
                "-".to_owned(),
            ]);
        }
        t.notes.push(match size {
            Size::Smoke => {
                "Smoke size: each variant ran in this process, nothing counted.".to_owned()
            }
            Size::Full => {
                "valgrind not found (Debian: `apt-get install valgrind`): nothing counted."
                    .to_owned()
            }
        });
        return vec![t];
    }
    let mut per_call: Vec<(&str, Result<u64, String>)> = Vec::new();
    for (variant, _, _) in VARIANTS {
        let cost = counted(variant, n)
            .and_then(|one| counted(variant, 2 * n).map(|two| two.saturating_sub(one) / n as u64));
        per_call.push((variant, cost));
    }
    let cost_of = |name: &str| {
        per_call
            .iter()
            .find(|(v, _)| *v == name)
            .and_then(|(_, c)| c.as_ref().ok().copied())
    };
    for ((variant, _, peer), (_, cost)) in VARIANTS.iter().zip(&per_call) {
        let (count, over, ratio) = match (cost, peer.and_then(cost_of)) {
            (Ok(c), Some(p)) => (
                c.to_string(),
                format!("+{}", c.saturating_sub(p)),
                format!("**{:.2}×**", *c as f64 / p as f64),
            ),
            (Ok(c), None) => (c.to_string(), "-".to_owned(), "-".to_owned()),
            (Err(e), _) => (format!("failed: {e}"), "-".to_owned(), "-".to_owned()),
        };
        t.row(vec![(*variant).to_owned(), count, over, ratio]);
    }
    for (polite, peer) in RETRY_PEERS {
        if let (Some(c), Some(p)) = (cost_of(polite), cost_of(peer)) {
            t.row(vec![
                format!("{polite} vs {peer} (retry peer)"),
                "-".to_owned(),
                format!("{:+}", c as i64 - p as i64),
                format!("**{:.2}×**", c as f64 / p as f64),
            ]);
        }
    }
    t.notes.push(format!(
        "(I({}) - I({n})) / {n} per variant under `valgrind --tool=callgrind`; the lab's work per request is on both sides. `cargo run --release -p polite-bench -- instructions`.",
        2 * n
    ));
    vec![t]
}
