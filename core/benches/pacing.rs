//! `RateThrottle::acquire` side by side with governor's direct rate limiter
//! `check()` (same quota: 50 per 60 s), on the granted and the refused
//! path; and one step of a `BatchMachine`.
//!
//! `cargo bench -p polite-core --bench pacing -- --warm-up-time 1 --measurement-time 3`
//!
//! * `acquire_granted`: steady state — the log is full and the clock moves
//!   on by one period (60 s / 50 = 1.2 s) per call, so every call ages out
//!   one grant and records one. polite takes `now` as an argument; governor
//!   is measured with its default clock (quanta, as users run it, with a
//!   quota so large that it always grants) and with its `FakeRelativeClock`
//!   advanced by 1.2 s per call (the same arithmetic as polite's).
//! * `acquire_refused`: the log is full and nothing ages out; every call is
//!   refused with the instant to retry at.
//! * `batch_step`: a batch of 64 items at concurrency 4: one answer in, the
//!   next send and the wake-up out.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use polite_core::pace::Unpaced;
use polite_core::{
    Action, BatchMachine, BatchPolicy, Event, Method, Pace, RateThrottle, RequestId, RequestInfo,
    Response, SendPlan, SplitMix64,
};
use polite_testing::origin;

const LIMIT: u32 = 50;
const WINDOW: Duration = Duration::from_secs(60);
const PERIOD: Duration = Duration::from_millis(1200); // WINDOW / LIMIT

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

/// governor's equivalent of 50 per 60 s: one cell per 1.2 s, bursts of 50.
fn quota() -> Quota {
    Quota::with_period(PERIOD)
        .expect("non-zero period")
        .allow_burst(nz(LIMIT))
}

/// A throttle whose log is full, filled one period apart, ending at `t0`.
fn full_throttle(t0: Instant) -> (RateThrottle, Instant) {
    let mut t = RateThrottle::new(LIMIT, WINDOW).expect("valid");
    let mut now = t0;
    for _ in 0..LIMIT {
        t.acquire(now).expect("room");
        now += PERIOD;
    }
    (t, now)
}

fn acquire_granted(c: &mut Criterion) {
    let t0 = origin();
    let mut g = c.benchmark_group("acquire_granted");
    g.bench_function("polite", |b| {
        let (mut t, mut now) = full_throttle(t0);
        b.iter(|| {
            let r = t.acquire(black_box(now));
            now += PERIOD;
            r
        });
    });
    g.bench_function("polite_arc_mutex", |b| {
        let (t, mut now) = full_throttle(t0);
        let mut shared = Arc::new(Mutex::new(t));
        b.iter(|| {
            let r = Pace::acquire(&mut shared, black_box(now));
            now += PERIOD;
            r
        });
    });
    g.bench_function("governor_fake_clock", |b| {
        let clock = FakeRelativeClock::default();
        let lim = RateLimiter::direct_with_clock(quota(), clock.clone());
        for _ in 0..LIMIT {
            lim.check().expect("room");
            clock.advance(PERIOD);
        }
        b.iter(|| {
            let r = lim.check();
            clock.advance(PERIOD);
            r.is_ok()
        });
    });
    g.bench_function("governor_quanta_clock", |b| {
        // 10^9 per second: every call is granted, through the real clock.
        let lim = RateLimiter::direct(Quota::per_second(nz(1_000_000_000)));
        b.iter(|| black_box(&lim).check().is_ok());
    });
    g.finish();
}

fn acquire_refused(c: &mut Criterion) {
    let t0 = origin();
    let mut g = c.benchmark_group("acquire_refused");
    g.bench_function("polite", |b| {
        let (mut t, now) = full_throttle(t0);
        let now = now - PERIOD; // the last grant's instant: nothing ages out
        b.iter(|| t.acquire(black_box(now)));
    });
    g.bench_function("governor_fake_clock", |b| {
        let clock = FakeRelativeClock::default();
        let lim = RateLimiter::direct_with_clock(quota(), clock);
        while lim.check().is_ok() {}
        b.iter(|| black_box(&lim).check().is_err());
    });
    g.bench_function("governor_quanta_clock", |b| {
        let lim = RateLimiter::direct(quota());
        while lim.check().is_ok() {}
        b.iter(|| black_box(&lim).check().is_err());
    });
    g.finish();
}

/// A batch of 64 GETs at concurrency 4 with its first four sends out.
fn started_batch<P: Pace>(pace: P, t0: Instant) -> (BatchMachine<SplitMix64, P>, Vec<SendPlan>) {
    let requests = (0..64)
        .map(|i| RequestInfo::new(RequestId(i), Method::Get))
        .collect();
    let policy = BatchPolicy {
        concurrency: 4,
        ..BatchPolicy::default()
    };
    let mut b = BatchMachine::new(
        policy,
        requests,
        SplitMix64::new(1),
        pace,
        t0,
        Duration::from_secs(600),
    )
    .expect("valid policy");
    let mut plans = Vec::new();
    while let Action::Send(p) = b.poll_action() {
        plans.push(p);
    }
    (b, plans)
}

fn batch_step(c: &mut Criterion) {
    let t0 = origin();
    let now = t0 + Duration::from_millis(20);
    let wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut g = c.benchmark_group("batch_step");
    g.bench_function("unpaced", |bench| {
        bench.iter_batched_ref(
            || started_batch(Unpaced, t0),
            |(b, plans)| {
                b.handle(now, Event::Response(Response::new(plans[0].id, 200, wall)));
                let send = b.poll_action();
                (send, b.poll_action())
            },
            BatchSize::SmallInput,
        );
    });
    g.bench_function("throttled", |bench| {
        bench.iter_batched_ref(
            || {
                started_batch(
                    RateThrottle::new(100, Duration::from_secs(1)).expect("valid"),
                    t0,
                )
            },
            |(b, plans)| {
                b.handle(now, Event::Response(Response::new(plans[0].id, 200, wall)));
                let send = b.poll_action();
                (send, b.poll_action())
            },
            BatchSize::SmallInput,
        );
    });
    g.finish();
}

criterion_group!(benches, acquire_granted, acquire_refused, batch_step);
criterion_main!(benches);
