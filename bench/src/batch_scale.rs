//! Scale-batch: a batch far bigger than memory would hold if the answers
//! were kept — 10,000 × 1 MiB and 100,000 × 10 KiB at concurrency 4,
//! `--rate none` — per adapter, side by side with the loops a user writes
//! without polite (SPEC §4.4, issue 17).
//!
//! Each run is one client **process** (this binary re-executed as
//! `batch-client`), so its peak resident memory (`VmHWM`) is its own; the
//! lab (`GET /bytes/{n}`, one shared buffer, nothing copied) runs in this
//! process, fresh per run, and counts the TCP connections it accepted.
//! Requests come from a lazy iterator (never a `Vec`), every answer's body
//! is read whole, checked for its length and dropped.
//!
//! Clients:
//! * `polite-tokio`, `polite-async-io` (smol), `polite-blocking`:
//!   `Client::batch_stream(iter, BatchOrder::Input)` at `concurrency = 4`,
//!   no throttle;
//! * peer `reqwest buffer_unordered`: `futures::stream::iter(..)
//!   .map(|_| get + bytes()).buffer_unordered(4)` on the same reqwest client
//!   polite-tokio uses;
//! * peer `ureq 4 threads`: four threads sharing one `ureq::Agent`, taking
//!   the next index from an atomic counter;
//! * `polite-blocking-each`: the same batch handed out through
//!   `BatchStream::for_each_result` over the default `UreqTransport`, whose
//!   crew of threads runs the attempts and drives the batch itself (the
//!   `polite-blocking` row loops over `next_result` on a transport over the
//!   peer's agent: every attempt handed to a worker and back).

use std::io::Write as _;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use polite_client::BatchOrder;
use polite_lab::LabConfig;

use crate::proc::{cpu_seconds, hwm_kib, rss_kib};
use crate::stats::{Table, num, ratio};
use crate::{Size, get, lab};

/// Concurrency of every run.
const C: usize = 4;

/// Every client of the table, in row order; the first peer is the ratio base.
const CLIENTS: &[&str] = &[
    "reqwest",
    "polite-tokio",
    "polite-async-io",
    "ureq",
    "polite-blocking",
    "polite-blocking-each",
];

fn label(client: &str) -> &'static str {
    match client {
        "reqwest" => "peer: reqwest `buffer_unordered(4)`",
        "polite-tokio" => "polite-tokio `batch_stream`",
        "polite-async-io" => "polite-async-io `batch_stream` (smol)",
        "ureq" => "peer: ureq, 4 threads, one `Agent`",
        "polite-blocking" => "polite-blocking `batch_stream` (`next_result`, bench agent)",
        "polite-blocking-each" => {
            "polite-blocking `batch_stream` → `for_each_result` (default transport: the crew)"
        }
        _ => "?",
    }
}

fn config() -> polite_client::Config {
    polite_client::Config {
        concurrency: C as u32,
        timeout: Duration::from_secs(3600),
        throttle: None,
        ..polite_client::Config::default()
    }
}

/// Counts the answers that are a 200 with exactly `size` bytes.
#[derive(Default)]
struct Tally {
    ok: usize,
    bad: usize,
}

impl Tally {
    fn add(&mut self, good: bool) {
        if good {
            self.ok += 1;
        } else {
            self.bad += 1;
        }
    }
}

fn good<E>(r: Result<http::Response<bytes::Bytes>, E>, size: usize) -> bool {
    r.is_ok_and(|a| a.status() == 200 && a.body().len() == size)
}

/// The hidden `batch-client <url> <n> <size> <client>` command: one batch,
/// then one `RESULT` line.
pub fn batch_client(url: &str, n: usize, size: usize, client: &str) {
    let requests = || (0..n).map(|_| get(url));
    let rss0 = rss_kib().unwrap_or(0);
    let cpu0 = cpu_seconds().unwrap_or(f64::NAN);
    let start = Instant::now();
    let mut tally = Tally::default();
    match client {
        "polite-tokio" => {
            let rt = crate::tokio_runtime();
            let c = polite_tokio::Client::with_transport(
                polite_tokio::ReqwestTransport::new(crate::reqwest_client()),
                config(),
            )
            .expect("valid config");
            rt.block_on(async {
                let mut s = c
                    .batch_stream(requests(), BatchOrder::Input)
                    .expect("batch");
                while let Some((_, r)) = s.next_result().await {
                    tally.add(good(r, size));
                }
            });
        }
        "polite-async-io" => {
            let c = polite_async_io::Client::with_transport(
                polite_async_io::Http1Transport::new(),
                config(),
            )
            .expect("valid config");
            smol::block_on(async {
                let mut s = c
                    .batch_stream(requests(), BatchOrder::Input)
                    .expect("batch");
                while let Some((_, r)) = s.next_result().await {
                    tally.add(good(r, size));
                }
            });
        }
        "polite-blocking-each" => {
            // The default transport (its crew runs attempts over the
            // default agent's connections only).
            let c = polite_blocking::Client::with_config(config()).expect("valid config");
            c.batch_stream(requests(), BatchOrder::Input)
                .expect("batch")
                .for_each_result(|(_, r)| tally.add(good(r, size)));
        }
        "polite-blocking" => {
            let c = polite_blocking::Client::with_transport(
                polite_blocking::UreqTransport::new(crate::ureq_agent()),
                config(),
            )
            .expect("valid config");
            let mut s = c
                .batch_stream(requests(), BatchOrder::Input)
                .expect("batch");
            while let Some((_, r)) = s.next_result() {
                tally.add(good(r, size));
            }
        }
        "reqwest" => {
            let rt = crate::tokio_runtime();
            let http = crate::reqwest_client();
            rt.block_on(async {
                let mut answers = futures_util::stream::iter(0..n)
                    .map(|_| {
                        let http = http.clone();
                        async move {
                            let r = http.get(url).send().await?;
                            let status = r.status();
                            r.bytes().await.map(|b| (status, b))
                        }
                    })
                    .buffer_unordered(C);
                while let Some(r) = answers.next().await {
                    tally.add(r.is_ok_and(|(s, b)| s == 200 && b.len() == size));
                }
            });
        }
        "ureq" => {
            let agent = crate::ureq_agent();
            let next = Arc::new(AtomicUsize::new(0));
            let workers: Vec<_> = (0..C)
                .map(|_| {
                    let (agent, next, url) = (agent.clone(), Arc::clone(&next), url.to_owned());
                    std::thread::spawn(move || {
                        let mut t = Tally::default();
                        while next.fetch_add(1, Ordering::Relaxed) < n {
                            let r = agent.get(&url).call().ok().and_then(|mut a| {
                                let status = a.status();
                                let body = a
                                    .body_mut()
                                    .with_config()
                                    .limit(64 << 20)
                                    .read_to_vec()
                                    .ok()?;
                                Some((status, body))
                            });
                            t.add(r.is_some_and(|(s, b)| s == 200 && b.len() == size));
                        }
                        (t.ok, t.bad)
                    })
                })
                .collect();
            for w in workers {
                let (ok, bad) = w.join().unwrap_or((0, n));
                tally.ok += ok;
                tally.bad += bad;
            }
        }
        other => panic!("unknown client {other}"),
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds().unwrap_or(f64::NAN) - cpu0;
    println!(
        "RESULT ok={} bad={} wall_s={wall:.3} rss_before_kib={rss0} hwm_kib={} cpu_s={cpu:.3}",
        tally.ok,
        tally.bad,
        hwm_kib().unwrap_or(0),
    );
    let _ = std::io::stdout().flush();
}

/// `key=value` of a `RESULT` line.
fn field(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// One run: a fresh lab, one client process. Returns the `RESULT` line and
/// the connections the lab accepted.
fn one_run(n: usize, size: usize, client: &str) -> Result<(String, u64), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let lab = lab(LabConfig::default());
    let url = lab.url(&format!("/bytes/{size}"));
    let out = Command::new(&exe)
        .args([
            "batch-client",
            &url,
            &n.to_string(),
            &size.to_string(),
            client,
        ])
        .output()
        .map_err(|e| format!("cannot run the client process: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{client}: client process failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("RESULT"))
        .ok_or_else(|| format!("{client}: no RESULT line in {text:?}"))?
        .to_owned();
    Ok((line, lab.connections()))
}

fn table(n: usize, size: usize, size_label: &str) -> Table {
    let mut t = Table::new(
        &format!("{n} × {size_label} at concurrency {C}, no rate limit, one process per run"),
        &[
            "client",
            "ok",
            "wall s",
            "req/s",
            "req/s vs its peer",
            "peak RSS MiB",
            "RSS goal MiB",
            "connections",
            "connections per 10,000",
            "CPU s",
        ],
    );
    let goal_mib = 64.0 + (C * size) as f64 / f64::from(1 << 20);
    let mut peer_rate = f64::NAN;
    for &client in CLIENTS {
        match one_run(n, size, client) {
            Ok((line, conns)) => {
                let wall = field(&line, "wall_s");
                let rate = n as f64 / wall;
                // reqwest is the tokio and async-io adapters' peer; ureq
                // the blocking one's.
                if client == "reqwest" || client == "ureq" {
                    peer_rate = rate;
                }
                let vs = if client.starts_with("polite") {
                    ratio(rate, peer_rate)
                } else {
                    "1.00×".to_owned()
                };
                t.row(vec![
                    label(client).to_owned(),
                    format!("{}/{n}", field(&line, "ok")),
                    num(wall, 2),
                    num(rate, 0),
                    vs,
                    num(field(&line, "hwm_kib") / 1024.0, 1),
                    num(goal_mib, 0),
                    conns.to_string(),
                    num(conns as f64 * 10_000.0 / n as f64, 1),
                    num(field(&line, "cpu_s"), 2),
                ]);
            }
            Err(e) => t.row(vec![label(client).to_owned(), format!("failed: {e}")]),
        }
    }
    t.note(format!(
        "Goals (issue 17): peak RSS ≤ 64 MiB + concurrency × body = {goal_mib:.0} MiB; \
         ≤ 2 × C = {} connections per 10,000 requests; req/s ≥ 0.95× the peer \
         (reqwest for polite-tokio and polite-async-io, ureq threads for polite-blocking). \
         Before streaming (wave 1), `polite batch` kept every answer: 500 × 1 MB peaked at 525 MB RSS \
         and 10,000 small answers at C = 4 opened 612 connections (issue 17).",
        2 * C
    ));
    t
}

/// The scale-batch suite.
#[must_use]
pub fn run(size: Size) -> Vec<Table> {
    vec![
        table(size.pick(10_000, 20), 1 << 20, "1 MiB"),
        table(size.pick(100_000, 200), 10 << 10, "10 KiB"),
    ]
}
