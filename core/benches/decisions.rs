//! One decision (event in → action out), Retry-After parsing, and backoff
//! delays side by side with `backon`.
//!
//! `cargo bench -p polite-core --bench decisions`

use std::hint::black_box;
use std::time::{Duration, Instant, UNIX_EPOCH};

use backon::BackoffBuilder;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use polite_core::policy::{Backoff, Jitter};
use polite_core::{
    Action, Event, Method, RequestId, RequestInfo, Response, RetryMachine, RetryPolicy, SendPlan,
    SplitMix64,
};
use polite_testing::origin;

fn in_flight(policy: RetryPolicy, t0: Instant) -> (RetryMachine<SplitMix64>, SendPlan) {
    let mut m = RetryMachine::new(
        policy,
        RequestInfo::new(RequestId(1), Method::Get),
        SplitMix64::new(7),
        t0,
        Duration::from_secs(60),
    )
    .expect("valid policy");
    let Action::Send(plan) = m.poll_action() else {
        unreachable!("a new machine sends first")
    };
    (m, plan)
}

fn retry_decisions(c: &mut Criterion) {
    let t0 = origin();
    let now = t0 + Duration::from_millis(10);
    let wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let policy = RetryPolicy::default();
    let mut g = c.benchmark_group("retry_decision");
    g.bench_function("503_backoff", |b| {
        b.iter_batched_ref(
            || in_flight(policy, t0),
            |(m, plan)| {
                m.handle(now, Event::Response(Response::new(plan.id, 503, wall)));
                black_box(m.poll_action())
            },
            BatchSize::SmallInput,
        );
    });
    g.bench_function("429_retry_after_seconds", |b| {
        b.iter_batched_ref(
            || in_flight(policy, t0),
            |(m, plan)| {
                m.handle(
                    now,
                    Event::Response(Response::new(plan.id, 429, wall).retry_after(b"2")),
                );
                black_box(m.poll_action())
            },
            BatchSize::SmallInput,
        );
    });
    // The floor (issue 22): what any retry decision must do at least, by
    // hand — match the status, bump the attempt count, draw one random
    // number, scale the capped delay by it (a widening multiply), add it to
    // an `Instant` — in the same harness (a fresh state per iteration), so
    // `503_backoff / floor` is polite's price over the minimum.
    g.bench_function("floor", |b| {
        b.iter_batched_ref(
            Floor::new,
            |f| black_box(f.decide(now, black_box(503), None)),
            BatchSize::SmallInput,
        );
    });
    g.bench_function("floor_retry_after_seconds", |b| {
        b.iter_batched_ref(
            Floor::new,
            |f| black_box(f.decide(now, black_box(429), Some(black_box(b"2")))),
            BatchSize::SmallInput,
        );
    });
    g.bench_function("200_success", |b| {
        b.iter_batched_ref(
            || in_flight(policy, t0),
            |(m, plan)| {
                m.handle(now, Event::Response(Response::new(plan.id, 200, wall)));
                black_box(m.poll_action())
            },
            BatchSize::SmallInput,
        );
    });
    g.finish();
}

/// The hand-written floor of a retry decision (see `retry_decisions`).
struct Floor {
    attempts: u32,
    rng: SplitMix64,
}

impl Floor {
    fn new() -> Floor {
        Floor {
            attempts: 1,
            rng: SplitMix64::new(7),
        }
    }

    /// The instant of the next send, or `None` to stop.
    fn decide(&mut self, now: Instant, status: u16, retry_after: Option<&[u8]>) -> Option<Instant> {
        use rand_core::Rng;
        if !matches!(status, 429 | 500 | 502 | 503 | 504) || self.attempts >= 4 {
            return None;
        }
        self.attempts += 1;
        if let Some(digits) = retry_after {
            let mut secs: u64 = 0;
            for &d in digits {
                if !d.is_ascii_digit() {
                    return None;
                }
                secs = secs.saturating_mul(10).saturating_add(u64::from(d - b'0'));
            }
            return now.checked_add(Duration::from_secs(secs));
        }
        // Full jitter over 250 ms doubling, capped at 4 s, in nanoseconds.
        let cap: u64 = (250_000_000u64 << (self.attempts - 1)).min(4_000_000_000);
        let nanos = ((u128::from(self.rng.next_u64()) * u128::from(cap)) >> 64) as u64;
        now.checked_add(Duration::from_nanos(nanos))
    }
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

/// A `PollMachine` with a poll in flight; `long_poll_first` picks the mode.
fn poll_in_flight(
    long_poll_first: bool,
    t0: Instant,
) -> (polite_core::PollMachine<SplitMix64>, SendPlan) {
    let policy = polite_core::PollPolicy {
        long_poll_first,
        ..polite_core::PollPolicy::default()
    };
    let mut m = polite_core::PollMachine::new(
        policy,
        RequestInfo::new(RequestId(1), Method::Get),
        SplitMix64::new(7),
        t0,
        Duration::from_secs(600),
    )
    .expect("valid policy");
    let Action::Send(plan) = m.poll_action() else {
        unreachable!("a new machine polls first")
    };
    (m, plan)
}

/// One poll decision: a pending answer in, the next action out (long poll:
/// the next send at once; backoff: a jittered sleep on the schedule).
fn poll_decisions(c: &mut Criterion) {
    let t0 = origin();
    let now = t0 + Duration::from_secs(25);
    let wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let pending = polite_core::poll::JobReport::State("running");
    let mut g = c.benchmark_group("poll_decision");
    // The same floor as `retry_decision/floor`: a pending job's next poll
    // is one jittered delay on a schedule.
    g.bench_function("floor", |b| {
        b.iter_batched_ref(
            Floor::new,
            |f| black_box(f.decide(now, black_box(503), None)),
            BatchSize::SmallInput,
        );
    });
    for (name, long_poll_first) in [("pending_long_poll", true), ("pending_backoff", false)] {
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || poll_in_flight(long_poll_first, t0),
                |(m, plan)| {
                    m.handle(
                        now,
                        Event::Response(Response::new(plan.id, 200, wall).job(pending)),
                    );
                    black_box(m.poll_action())
                },
                BatchSize::SmallInput,
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
