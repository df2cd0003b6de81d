//! Properties of pacing without hints (SPEC §4.1): the adaptive rate
//! ([`AdaptiveRate`]) alone and inside a [`RateThrottle`], over arbitrary
//! sequences of sends and answers (backwards clock steps included). The
//! expectations are written here from the specification, not asked of the
//! code: grants are counted by the test, the ceiling is the configured
//! window, the deadline is the test's own `t0 + timeout`.

use std::time::{Duration, Instant};

use polite_core::RateThrottle;
use polite_core::adaptive::{AdaptiveRate, Answered, BETA};
use polite_core::pace::PaceLimit;
use polite_testing::origin;
use proptest::prelude::*;

/// One call after the clock moved by `step_ms` (negative: backwards).
#[derive(Clone, Debug)]
enum Op {
    Acquire { step_ms: i64 },
    Answer { step_ms: i64, throttled: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (-50i64..400).prop_map(|step_ms| Op::Acquire { step_ms }),
        2 => Just(Op::Acquire { step_ms: 0 }),
        4 => (-50i64..400).prop_map(|step_ms| Op::Answer { step_ms, throttled: false }),
        1 => (-50i64..400).prop_map(|step_ms| Op::Answer { step_ms, throttled: true }),
    ]
}

fn step(clock: Instant, t0: Instant, ms: i64) -> Instant {
    if ms >= 0 {
        clock + Duration::from_millis(ms as u64)
    } else {
        clock
            .checked_sub(Duration::from_millis(ms.unsigned_abs()))
            .unwrap_or(t0)
            .max(t0)
    }
}

/// A fresh rate (created at `origin()`) after `ops`, and the clock then.
fn replay(ops: &[Op]) -> (AdaptiveRate, Instant) {
    let t0 = origin();
    let mut rate = AdaptiveRate::new(t0);
    let mut clock = t0;
    for op in ops {
        match *op {
            Op::Acquire { step_ms } => {
                clock = step(clock, t0, step_ms);
                let _ = rate.acquire(clock);
            }
            Op::Answer { step_ms, throttled } => {
                clock = step(clock, t0, step_ms);
                rate.on_answer(clock, throttled);
            }
        }
    }
    (rate, clock)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// An adaptive throttle never grants more than its configured window
    /// allows, whatever the answers: the window is the ceiling. Refusals
    /// name a later instant.
    #[test]
    fn the_configured_window_stays_the_ceiling(
        limit in 1u32..10,
        window_ms in 50u64..2_000,
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let t0 = origin();
        let window = Duration::from_millis(window_ms);
        let mut t = RateThrottle::new(limit, window).unwrap().adaptive();
        let (mut clock, mut latest) = (t0, t0);
        let mut grants: Vec<Instant> = Vec::new();
        for op in &ops {
            match *op {
                Op::Acquire { step_ms } => {
                    clock = step(clock, t0, step_ms);
                    latest = latest.max(clock);
                    match t.acquire(clock) {
                        Ok(()) => grants.push(latest),
                        Err(at) => prop_assert!(at > latest, "refused until {at:?} <= now"),
                    }
                }
                Op::Answer { step_ms, throttled } => {
                    clock = step(clock, t0, step_ms);
                    latest = latest.max(clock);
                    t.on_answer(Answered::new(clock, clock, throttled));
                }
            }
        }
        for (i, start) in grants.iter().enumerate() {
            let inside = grants[i..].iter().take_while(|g| **g < *start + window).count();
            prop_assert!(inside <= limit as usize, "{inside} grants in one window of {window:?}");
        }
    }

    /// A server that never answers rate-limited never sees the pace slow
    /// down: without a throttled answer, every send is granted at once.
    #[test]
    fn no_throttle_no_slow_down(
        steps in prop::collection::vec((0i64..100, any::<bool>()), 0..300),
    ) {
        let t0 = origin();
        let mut rate = AdaptiveRate::new(t0);
        let mut learning = RateThrottle::learning(1000).unwrap().adaptive();
        let mut clock = t0;
        for (ms, answer) in steps {
            clock = step(clock, t0, ms);
            prop_assert_eq!(rate.acquire(clock), Ok(()));
            prop_assert_eq!(learning.acquire(clock), Ok(()));
            if answer {
                rate.on_answer(clock, false);
                learning.on_answer(Answered::new(clock, clock, false));
            }
        }
        prop_assert!(!rate.is_enabled());
    }

    /// A token bucket: between two answers (the fill rate is constant),
    /// the grants in any span of `d` seconds are at most the bucket's
    /// capacity plus `fill × d`; and coming back at a refusal's instant
    /// finds the token.
    #[test]
    fn a_token_bucket_between_answers(
        prefix in prop::collection::vec(op(), 1..60),
        tries in prop::collection::vec(0u64..300, 1..100),
    ) {
        let (mut rate, mut clock) = replay(&prefix);
        // Make sure it is on, then only ask.
        rate.on_answer(clock, true);
        let fill = rate.fill_rate();
        let capacity = fill.max(1.0);
        let start = clock;
        let mut grants = 0u32;
        for ms in tries {
            clock += Duration::from_millis(ms);
            match rate.acquire(clock) {
                Ok(()) => grants += 1,
                Err(at) => {
                    prop_assert!(at > clock);
                    clock = at;
                    prop_assert_eq!(rate.acquire(clock), Ok(()), "no token at the instant named");
                    grants += 1;
                }
            }
            let span = (clock - start).as_secs_f64();
            prop_assert!(
                f64::from(grants) <= capacity + fill * span + 1e-6,
                "{grants} grants in {span} s at {fill}/s, capacity {capacity}"
            );
        }
    }

    /// Convergence: after a throttle, steady successes (each send answered
    /// 10 ms later, sends as fast as the pace allows) bring the rate back
    /// to at least the rate it was cut from, within a bounded time.
    #[test]
    fn after_a_throttle_steady_success_regrows_the_rate(
        prefix in prop::collection::vec(op(), 1..80),
    ) {
        let (mut rate, mut clock) = replay(&prefix);
        rate.on_answer(clock, true);
        let cut = rate.fill_rate();
        // The rate before the cut, as the SPEC defines the cut (× 0.7).
        let before = rate.calculated_rate() / BETA;
        let end = clock + Duration::from_secs(60);
        while clock < end {
            match rate.acquire(clock) {
                Ok(()) => {
                    clock += Duration::from_millis(10);
                    rate.on_answer(clock, false);
                }
                Err(at) => clock = at,
            }
        }
        prop_assert!(rate.fill_rate() >= cut, "fell from {cut} to {}", rate.fill_rate());
        // (One send at a time, each answered in 10 ms, measures at most
        // 100/s, and the rate is capped at twice the measured one: a cut
        // from above ~90/s is judged against 90/s.)
        prop_assert!(
            rate.fill_rate() >= before.min(90.0) * 0.99,
            "after 60 s of success: {} /s, cut from {before} /s", rate.fill_rate()
        );
    }
}

/// The refusal names the adaptive rate, so a starved caller can say so.
#[test]
fn an_adaptive_refusal_names_the_rate() {
    let t0 = origin();
    let mut t = RateThrottle::new(100, Duration::from_secs(1))
        .unwrap()
        .adaptive();
    assert_eq!(t.acquire(t0), Ok(()));
    // One rate-limited answer 2 s in: 0.4/s measured, cut to 0.28, floored
    // at 0.5/s: one send per 2 s.
    let t2 = t0 + Duration::from_secs(2);
    t.on_answer(Answered::new(t2, t2, true));
    assert_eq!(t.acquire(t2), Err(t2 + Duration::from_secs(2)));
    assert_eq!(
        t.refusal(),
        PaceLimit::Adaptive {
            interval: Duration::from_secs(2)
        }
    );
    assert_eq!(t.acquire(t2 + Duration::from_secs(2)), Ok(()));
}

/// A learnt quota wins over the guess: once the server advertised its
/// quota, the adaptive rate no longer refuses.
#[test]
fn a_learnt_quota_replaces_the_guess() {
    use polite_core::ratelimit::{Quota, RateLimitInfo};
    let t0 = origin();
    let mut t = RateThrottle::learning(1000).unwrap().adaptive();
    assert_eq!(t.acquire(t0), Ok(()));
    let t2 = t0 + Duration::from_secs(2);
    t.on_answer(Answered::new(t2, t2, true));
    assert!(t.acquire(t2).is_err(), "the guess paces");
    let quota = Quota {
        limit: 50,
        window: Duration::from_secs(1),
    };
    t.observe(
        t2,
        &RateLimitInfo {
            quota: Some(quota),
            ..RateLimitInfo::default()
        },
    );
    // The grant at t0 has aged out of the learnt 1 s window: 50 more.
    for _ in 0..50 {
        assert_eq!(t.acquire(t2), Ok(()), "the learnt quota paces");
    }
    assert!(t.acquire(t2).is_err());
    assert!(matches!(
        t.refusal(),
        PaceLimit::Window {
            limit: 50,
            learned: true,
            ..
        }
    ));
}

/// polite's first deviation from the SDKs (documented on
/// `AdaptiveRate::answered`'s helper): a throttle before the first 0.5 s
/// bucket closes cuts to 0.7 × what the server accepted so far (over at
/// least a second), not to the 0.5/s floor. nginx `limit_req` at 10 r/s
/// with a burst of 10 accepts 11 of a fast client's first sends.
#[test]
fn a_throttle_in_the_first_half_second_cuts_to_what_the_server_accepted() {
    let t0 = origin();
    let mut rate = AdaptiveRate::new(t0);
    let ms = Duration::from_millis;
    for i in 0..11 {
        rate.on_answer(t0 + ms(i), false);
    }
    rate.on_answer(t0 + ms(12), true);
    assert!(
        (rate.fill_rate() - 0.7 * 11.0).abs() < 1e-9,
        "{}",
        rate.fill_rate()
    );
    // After the first bucket closed, the SDKs' rule: min(measured, fill).
    let later = t0 + ms(2_000);
    rate.on_answer(later, true);
    assert!(rate.fill_rate() < 0.7 * 11.0);
}

/// polite's second deviation: refusals of sends granted before the last
/// cut are one congestion signal, not one cut each.
#[test]
fn one_burst_of_refusals_is_one_cut() {
    let t0 = origin();
    let ms = Duration::from_millis;
    let mut burst = AdaptiveRate::new(t0);
    let mut each = AdaptiveRate::new(t0);
    for i in 0..100 {
        let t = t0 + ms(10 * i);
        burst.answered(Answered::new(t, t, false));
        each.on_answer(t, false);
    }
    // Eight sends in flight at 1.0 s, all refused at 1.01 s.
    let (sent, at) = (t0 + ms(1_000), t0 + ms(1_010));
    for _ in 0..8 {
        burst.answered(Answered::new(sent, at, true));
        each.on_answer(at, true);
    }
    let one_cut = burst.fill_rate();
    assert!(one_cut > 40.0, "one cut from ~100/s: {one_cut}");
    assert!(
        each.fill_rate() < 10.0,
        "eight SDK cuts: {}",
        each.fill_rate()
    );
    // A send granted after the cut, refused: that is news, and cuts again.
    burst.answered(Answered::new(at, t0 + ms(1_020), true));
    assert!(burst.fill_rate() < one_cut);
}

/// polite's third refinement: against a fixed-window quota every send
/// after the window is spent is refused, however right the rate; a cut
/// never goes below 0.7 × what the server accepted in the last second.
#[test]
fn refusals_after_a_spent_window_do_not_cut_below_what_was_accepted() {
    let t0 = origin();
    let ms = Duration::from_millis;
    let mut rate = AdaptiveRate::new(t0);
    // A 20-per-second window: 20 accepted in the first 50 ms...
    for i in 0..20 {
        let t = t0 + ms(i * 2);
        rate.answered(Answered::new(t, t, false));
    }
    // ...then every send until the window ends is refused, each sent after
    // the cut before it (so each is news).
    let mut t = t0 + ms(60);
    for _ in 0..8 {
        rate.answered(Answered::new(t, t + ms(1), true));
        t += ms(100);
        assert!(
            rate.fill_rate() >= 0.7 * 20.0 - 1e-9,
            "{}",
            rate.fill_rate()
        );
    }
}
