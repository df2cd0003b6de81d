//! Observe: what watching polite costs. polite-blocking `send` (ureq) on
//! loopback, sequential GETs interleaved in rounds (the order rotating per
//! round), per-request p50/p90, every variant against the plain `send`:
//!
//! * no `tracing` subscriber and no `metrics` recorder (the baseline; this
//!   crate builds polite with feature `metrics`, so the metrics calls are
//!   compiled in and go to the facade's no-op recorder);
//! * a no-op subscriber: `tracing_subscriber::registry()` with no layer
//!   (every span and event is enabled, built and dropped);
//! * a real `fmt` subscriber at `DEBUG` writing to `io::sink` (every span
//!   and attempt event formatted);
//! * a `metrics` recorder installed: metrics-exporter-prometheus's
//!   recorder (counters, histograms and gauges aggregated as a Prometheus
//!   exporter keeps them), rendered once at the end to check it counted.
//!
//! The subscriber and the recorder are set for the running thread only
//! (`tracing::subscriber::with_default`, `metrics::with_local_recorder`),
//! around each GET of their variant.

use std::time::{Duration, Instant};

use polite_lab::LabConfig;

use polite_bench::stats::{Dist, Table, num, ratio};
use polite_bench::{Size, get, lab, ms};

const VARIANTS: [&str; 4] = [
    "plain `send` (no subscriber, no recorder)",
    "no-op subscriber (`registry()`, no layer)",
    "`fmt` subscriber at DEBUG → `io::sink`",
    "metrics recorder installed (Prometheus)",
];

/// Runs the suite.
#[must_use]
pub(crate) fn run(size: Size) -> Vec<Table> {
    // Short blocks, many rounds: a noisy spell of a shared machine falls
    // on every variant alike.
    let rounds = size.pick(200, 2);
    let per_round = size.pick(10, 5);
    let warm = size.pick(50, 2);
    let lab = lab(LabConfig::default());
    let url = lab.url("/items/a");
    let client = polite_blocking::Client::with_transport(
        polite_blocking::UreqTransport::new(polite_bench::ureq_agent()),
        polite_blocking::Config {
            timeout: Duration::from_secs(5),
            ..polite_blocking::Config::default()
        },
    )
    .expect("valid config");
    let noop = tracing_subscriber::registry();
    let fmt = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(std::io::sink)
        .finish();
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let rendered = prometheus.handle();

    let send = || client.send(get(&url)).is_ok_and(|r| r.status() == 200);
    let fmt = tracing::Dispatch::new(fmt);
    let noop = tracing::Dispatch::new(noop);
    let one = |variant: usize| match variant {
        1 => tracing::dispatcher::with_default(&noop, send),
        2 => tracing::dispatcher::with_default(&fmt, send),
        3 => metrics::with_local_recorder(&prometheus, send),
        _ => send(),
    };

    for _ in 0..warm {
        for v in 0..VARIANTS.len() {
            one(v);
        }
    }
    let mut times = vec![Vec::new(); VARIANTS.len()];
    let mut failures = 0usize;
    for r in 0..rounds {
        for k in 0..VARIANTS.len() {
            let v = (k + r) % VARIANTS.len();
            for _ in 0..per_round {
                let t = Instant::now();
                if !one(v) {
                    failures += 1;
                }
                times[v].push(ms(t.elapsed()));
            }
        }
    }
    // The recorder saw every send of its variant (and only those).
    let text = rendered.render();
    let counted = text
        .lines()
        .find(|l| l.starts_with("polite_outcomes_total{") && l.contains("outcome=\"succeeded\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or(0.0);
    let expected = (rounds * per_round + warm) as f64;

    let base = Dist::of(times[0].iter().copied());
    let mut t = Table::new(
        "What observing costs: polite-blocking `send` on loopback (sequential GETs)",
        &[
            "variant",
            "requests",
            "p50 µs",
            "p90 µs",
            "p50 ratio",
            "p90 ratio",
            "failures",
        ],
    );
    for (v, name) in VARIANTS.iter().enumerate() {
        let d = Dist::of(times[v].iter().copied());
        t.row(vec![
            (*name).to_owned(),
            d.n.to_string(),
            num(d.p50 * 1e3, 1),
            num(d.p90 * 1e3, 1),
            format!("**{}**", ratio(d.p50, base.p50)),
            ratio(d.p90, base.p90),
            if v == 0 {
                failures.to_string()
            } else {
                String::new()
            },
        ]);
    }
    t.note(format!(
        "{rounds} rounds × {per_round} GETs per variant, interleaved (the order rotating per \
         round), after {warm} warm-up GETs each; ratios against the plain `send`; goal ≤ 1.05× \
         p50 with the recorder installed. The Prometheus recorder counted {counted} succeeded \
         calls of the {expected} it was installed for."
    ));
    vec![t]
}
