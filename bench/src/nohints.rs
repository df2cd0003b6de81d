//! Pacing without hints (SPEC §4.1): a batch of GETs against a fixed-window
//! quota that answers **bare 429s** — no `Retry-After`, no `RateLimit`
//! headers, as nginx `limit_req` and many gateways do. Four clients side by
//! side, each against its own lab with the same quota, all running at once
//! (the harness of the `quota` suite):
//!
//! * **semaphore only**: tokio + reqwest + `tokio::sync::Semaphore`, no
//!   retry (a 429 is a failed item);
//! * **backon**: the same, each request retried on 429 with `backon`'s
//!   exponential backoff (250 ms doubling to 4 s, jitter, up to 10 retries);
//! * **polite, configured throttle**: polite-tokio `batch` with
//!   `Config::throttle = Some((limit, window))`, the quota as documented;
//! * **polite, defaults**: polite-tokio `batch` with `Config::default()`
//!   (only the batch's timeout, concurrency and seed set), told nothing: the
//!   adaptive rate and the shared cool-down after each bare 429 pace it.
//!
//! 429s and requests are counted by the lab's request log. The limit: 0 ×
//! 429 and the quota's rate, shown two ways: against the (⌈n/limit⌉ − 1)
//! windows a client that bursts each window's quota needs (the `quota`
//! suite's convention), and against n/limit windows (every send at the
//! steady rate).

use std::time::Duration;

use crate::Size;
use crate::quota::{Scenario, Variant, scenario_table};
use crate::stats::Table;

const VARIANTS: [Variant; 4] = [
    Variant::Semaphore,
    Variant::Backon,
    Variant::PoliteThrottle,
    Variant::PoliteDefault,
];

/// Runs the suite.
#[must_use]
pub fn run(size: Size) -> Vec<Table> {
    let batch = Scenario {
        title: "No hints: 200 GETs against 20 per second (bare 429s), concurrency 4",
        limit: 20,
        window: Duration::from_secs(1),
        slow: None,
        n: size.pick(200, 24),
        concurrency: 4,
        reps: size.pick(3, 1),
        timeout: Duration::from_secs(60),
        hints: false,
        variants: &VARIANTS,
        vs_rate: true,
    };
    let nginx = Scenario {
        title: "No hints, nginx-like: 40 GETs against 10 per second (bare 429s), concurrency 8",
        limit: 10,
        window: Duration::from_secs(1),
        slow: None,
        n: size.pick(40, 12),
        concurrency: 8,
        reps: size.pick(3, 1),
        timeout: Duration::from_secs(60),
        hints: false,
        variants: &VARIANTS,
        vs_rate: true,
    };
    vec![scenario_table(&batch), scenario_table(&nginx)]
}
