//! One decision (event in → action out), Retry-After parsing, and backoff
//! delays side by side with `backon`.
//!
//! `cargo bench -p polite-core --bench decisions`

mod common;

use std::hint::black_box;
use std::time::Duration;

use backon::BackoffBuilder;
use common::{Floor, floor_decision, in_flight, poll_decision, poll_in_flight, retry_decision};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use polite_core::RetryPolicy;
use polite_core::policy::{Backoff, Jitter};
use polite_testing::origin;

/// Fresh inputs per timed batch, the same for every decision bench and its
/// floor. Not `BatchSize::SmallInput` (a tenth of the iterations per batch:
/// 10,000s of machines, 10-25 MB for 536-byte `RetryMachine`s and
/// 1,184-byte `PollMachine`s, built before the clock starts and walked
/// after their cache lines were evicted, against 16-byte floor states that
/// stay cached; plus the page faults of a fresh output vector inside the
/// timed loop, more for 48-byte `Action`s than for the floor's 16-byte
/// answers). 256 inputs fit in L2 on both sides; the two clock reads per
/// batch add ~0.2 ns per iteration, to both.
const BATCH: BatchSize = BatchSize::NumIterations(256);

fn retry_decisions(c: &mut Criterion) {
    let t0 = origin();
    let now = t0 + Duration::from_millis(10);
    let wall = common::wall();
    let policy = RetryPolicy::default();
    let mut g = c.benchmark_group("retry_decision");
    g.bench_function("503_backoff", |b| {
        b.iter_batched_ref(
            || in_flight(policy, t0),
            |m| retry_decision(m, now, wall, 503, false),
            BATCH,
        );
    });
    g.bench_function("429_retry_after_seconds", |b| {
        b.iter_batched_ref(
            || in_flight(policy, t0),
            |m| retry_decision(m, now, wall, 429, true),
            BATCH,
        );
    });
    // The floor (issue 22): what any retry decision must do at least, by
    // hand (common::Floor), in the same harness (a fresh state per
    // iteration), so `503_backoff / floor` is polite's price over the minimum.
    g.bench_function("floor", |b| {
        b.iter_batched_ref(Floor::new, |f| floor_decision(f, now, false), BATCH);
    });
    g.bench_function("floor_retry_after_seconds", |b| {
        b.iter_batched_ref(Floor::new, |f| floor_decision(f, now, true), BATCH);
    });
    g.bench_function("200_success", |b| {
        b.iter_batched_ref(
            || in_flight(policy, t0),
            |m| retry_decision(m, now, wall, 200, false),
            BATCH,
        );
    });
    g.finish();
}

fn retry_after_parsing(c: &mut Criterion) {
    let mut g = c.benchmark_group("retry_after_parse");
    let forms: [(&str, &[u8]); 4] = [
        ("seconds", b"120"),
        ("imf_fixdate", b"Sun, 06 Nov 1994 08:49:37 GMT"),
        ("rfc850", b"Sunday, 06-Nov-94 08:49:37 GMT"),
        ("asctime", b"Sun Nov  6 08:49:37 1994"),
    ];
    for (name, value) in forms {
        g.bench_function(name, |b| {
            b.iter(|| polite_core::retry_after::RetryAfter::parse(black_box(value)));
        });
    }
    g.finish();
}

/// Six delays of 250 ms doubling capped at 4 s, without jitter, computed by
/// polite's pure backoff and by backon's exponential builder.
fn backoff_delays(c: &mut Criterion) {
    let mut g = c.benchmark_group("backoff_6_delays");
    let b = Backoff {
        jitter: Jitter::None,
        ..Backoff::default()
    };
    g.bench_function("polite", |bench| {
        bench.iter(|| {
            let b = black_box(&b);
            let mut sum = Duration::ZERO;
            for n in 0..6 {
                sum += polite_core::backoff::exponential(b, n);
            }
            sum
        });
    });
    let builder = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(4))
        .with_factor(2.0)
        .with_max_times(6);
    g.bench_function("backon", |bench| {
        bench.iter(|| black_box(builder).build().sum::<Duration>());
    });
    g.finish();
}

/// One poll decision: a pending answer in, the next action out (long poll:
/// the next send at once; backoff: a jittered sleep on the schedule).
fn poll_decisions(c: &mut Criterion) {
    let t0 = origin();
    let now = t0 + Duration::from_secs(25);
    let wall = common::wall();
    let mut g = c.benchmark_group("poll_decision");
    // The same floor as `retry_decision/floor`: a pending job's next poll
    // is one jittered delay on a schedule.
    g.bench_function("floor", |b| {
        b.iter_batched_ref(Floor::new, |f| floor_decision(f, now, false), BATCH);
    });
    for (name, long_poll_first) in [("pending_long_poll", true), ("pending_backoff", false)] {
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || poll_in_flight(long_poll_first, t0),
                |m| poll_decision(m, now, wall),
                BATCH,
            );
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    retry_decisions,
    retry_after_parsing,
    backoff_delays,
    poll_decisions
);
criterion_main!(benches);
