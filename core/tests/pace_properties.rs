//! Property tests for pacing: `RateThrottle` over arbitrary time sequences
//! (backwards steps included), `BatchMachine` and `Paced<RetryMachine>` over
//! arbitrary scripts of events, checked by the independent checkers of
//! `polite_testing`.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use polite_core::pace::Unpaced;
use polite_core::policy::{Jitter, MaxRetries};
use polite_core::{
    Action, BatchMachine, BatchPolicy, Method, Outcome, Pace, Paced, RateThrottle, RequestId,
    RequestInfo, RetryMachine, RetryPolicy, SplitMix64,
};
use polite_testing::strategies::{self, batch_script};
use polite_testing::{
    BatchChecker, Checker, Input, ScriptRunner, Settle, ThrottleChecker, Trace, origin,
};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(1000)
}

// ---------------------------------------------------------------------------
// RateThrottle
// ---------------------------------------------------------------------------

/// One call on a throttle, after the clock moved by `step_ms` (negative:
/// the caller's clock stepped backwards).
#[derive(Clone, Debug)]
enum Op {
    Acquire { step_ms: i64 },
    CoolDown { step_ms: i64, for_ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (-300i64..1_500).prop_map(|step_ms| Op::Acquire { step_ms }),
        4 => Just(Op::Acquire { step_ms: 0 }),
        1 => (-300i64..1_500, 0u64..3_000).prop_map(|(step_ms, for_ms)| Op::CoolDown { step_ms, for_ms }),
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

/// Runs `ops`; returns the (clamped) instants of the grants, checking each
/// answer against the toolkit's plainly written reference
/// (`ThrottleChecker`: a list of grants, time clamped to its running
/// maximum) and that a refusal names a later instant.
fn run_throttle(
    limit: u32,
    window: Duration,
    margin: Duration,
    ops: &[Op],
) -> Result<Vec<Instant>, String> {
    let t0 = origin();
    let mut t = RateThrottle::new(limit, window)
        .map_err(|e| e.to_string())?
        .with_margin(margin);
    let mut model = ThrottleChecker::for_throttle(&t);
    let mut clock = t0;
    let mut latest = t0;
    let mut grants = Vec::new();
    for op in ops {
        match *op {
            Op::Acquire { step_ms } => {
                clock = step(clock, t0, step_ms);
                latest = latest.max(clock);
                let got = t.acquire(clock);
                model.acquire(clock, got).map_err(|v| v.to_string())?;
                if got.is_ok() {
                    grants.push(latest);
                }
            }
            Op::CoolDown { step_ms, for_ms } => {
                clock = step(clock, t0, step_ms);
                let until = clock + Duration::from_millis(for_ms);
                t.cool_down(until);
                model.cool_down(until);
            }
        }
    }
    Ok(grants)
}

proptest! {
    #![proptest_config(config())]

    /// In every half-open interval of length `window` (of clamped time), the
    /// throttle grants at most `limit` sends, whatever the sequence of
    /// instants, backwards steps and cool-downs.
    #[test]
    fn throttle_never_grants_more_than_limit_per_window(
        limit in 1u32..8,
        window_ms in 1u64..2_000,
        margin_ms in 0u64..100,
        ops in prop::collection::vec(op(), 0..120),
    ) {
        let window = Duration::from_millis(window_ms);
        let grants = run_throttle(limit, window, Duration::from_millis(margin_ms), &ops);
        prop_assert!(grants.is_ok(), "{}", grants.unwrap_err());
        let grants = grants.unwrap();
        for (i, start) in grants.iter().enumerate() {
            let inside = grants[i..].iter().take_while(|g| **g < *start + window).count();
            prop_assert!(inside <= limit as usize,
                "{inside} grants in [{:?}, +{window:?})", *start - origin());
        }
    }

    /// Decision for decision, the throttle answers what a plainly written
    /// list-of-grants model answers: refusals are never counted, the wait
    /// is the oldest grant's age-out plus the margin, a cool-down answers
    /// its own end, backwards steps are clamped.
    #[test]
    fn throttle_matches_the_reference_model(
        limit in 1u32..6,
        window_ms in 1u64..1_000,
        margin_ms in 0u64..100,
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let r = run_throttle(limit, Duration::from_millis(window_ms), Duration::from_millis(margin_ms), &ops);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
    }
}

// ---------------------------------------------------------------------------
// BatchMachine
// ---------------------------------------------------------------------------

fn request() -> impl Strategy<Value = RequestInfo> {
    prop_oneof![
        4 => Just(Method::Get),
        1 => Just(Method::Post),
    ]
    .prop_map(|m| RequestInfo::new(RequestId(0), m))
}

#[derive(Clone, Debug)]
struct Setup {
    policy: BatchPolicy,
    requests: Vec<RequestInfo>,
    /// `None`: unpaced; else a throttle of (limit, window).
    throttle: Option<(u32, Duration)>,
    /// The throttle also adapts to rate-limited answers (SPEC §4.1): the
    /// checker's `rate` rule then checks that the window stays the ceiling.
    adaptive: bool,
    seed: u64,
    timeout: Duration,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        (0u32..4, 0u32..4, 0u32..3),
        prop_oneof![Just(Jitter::None), Just(Jitter::Full)],
        (1u32..5, 0u32..4),
        prop::collection::vec(request(), 0..10),
        prop::option::weighted(0.7, (1u32..5, 50u64..3_000)),
        (any::<u64>(), any::<bool>()),
        prop_oneof![0u64..20_000, 20_000u64..200_000],
    )
        .prop_map(
            |(
                (rl, se, tr),
                jitter,
                (concurrency, max_restarts),
                requests,
                throttle,
                (seed, adaptive),
                timeout_ms,
            )| {
                let mut retry = RetryPolicy {
                    max_retries: MaxRetries {
                        rate_limited: rl,
                        server_error: se,
                        transport: tr,
                    },
                    ..RetryPolicy::default()
                };
                retry.backoff.jitter = jitter;
                let requests = requests
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| RequestInfo {
                        id: RequestId(i as u64),
                        ..r
                    })
                    .collect();
                Setup {
                    policy: BatchPolicy {
                        retry,
                        concurrency,
                        max_restarts,
                    },
                    requests,
                    throttle: throttle.map(|(l, w)| (l, Duration::from_millis(w))),
                    adaptive,
                    seed,
                    timeout: Duration::from_millis(timeout_ms),
                }
            },
        )
}

/// What a run showed.
#[derive(Debug, PartialEq)]
struct BatchRun {
    trace: Trace,
    /// The most sends in flight at once, as the checker counted them.
    peak: u32,
    deadline: Instant,
    outcomes: Vec<Option<Outcome>>,
}

fn drive_batch(s: &Setup, script: &[Input]) -> Result<BatchRun, String> {
    match s.throttle {
        None => drive_batch_with(s, script, Unpaced),
        Some((limit, window)) => {
            let throttle = RateThrottle::new(limit, window).map_err(|e| e.to_string())?;
            if s.adaptive {
                drive_batch_with(s, script, throttle.adaptive())
            } else {
                drive_batch_with(s, script, throttle)
            }
        }
    }
}

/// Runs the script with the shared script runner, then drives the batch to
/// its end (answering every send with 200 and sleeping as asked), checking
/// every step with the `BatchChecker`, and the item outcomes after every
/// step (an outcome once set never changes; at `Stop` every item has one).
fn drive_batch_with<P: Pace>(s: &Setup, script: &[Input], pace: P) -> Result<BatchRun, String> {
    let t0 = origin();
    let v = |e: polite_testing::Violation| e.to_string();
    let mut b = BatchMachine::new(
        s.policy,
        s.requests.clone(),
        SplitMix64::new(s.seed),
        pace,
        t0,
        s.timeout,
    )
    .map_err(|e| e.to_string())?;
    let deadline = b.deadline();
    let mut checker = BatchChecker::for_machine(&b);
    if let Some((limit, window)) = s.throttle {
        checker = checker.throttled(limit, window);
    }
    let mut runner = ScriptRunner::new(t0, &mut b, checker)
        .wall_clock(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .settle(Settle::Answer(200));
    runner.play(script).map_err(v)?;
    // The checker fails the run on any send over the limit, settling
    // included; its peak before settling is kept as evidence.
    let peak = runner.checker().peak_in_flight();
    let trace = runner.finish().map_err(v)?;
    Ok(BatchRun {
        trace,
        peak,
        deadline,
        outcomes: b.outcomes().to_vec(),
    })
}

proptest! {
    #![proptest_config(config())]

    /// The batch never has more than `concurrency` sends in flight (the
    /// checker's `concurrency` rule, and its peak), and every other
    /// invariant of the checker holds.
    #[test]
    fn batch_never_exceeds_its_concurrency(s in setup(), script in batch_script(0..60)) {
        let r = drive_batch(&s, &script);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        let r = r.unwrap();
        prop_assert!(r.peak <= s.policy.concurrency, "peak {} > {}", r.peak, s.policy.concurrency);
    }

    /// Every item ends with exactly one outcome: `outcomes()` never changes
    /// an outcome once set, and at `Stop` every item has one, consistent
    /// with the batch's own outcome.
    #[test]
    fn every_item_ends_exactly_once(s in setup(), script in batch_script(0..60)) {
        let r = drive_batch(&s, &script);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        let r = r.unwrap();
        prop_assert_eq!(r.outcomes.len(), s.requests.len());
        prop_assert!(r.outcomes.iter().all(Option::is_some));
        match r.trace.outcome {
            Outcome::BatchDone { succeeded, failed } =>
                prop_assert_eq!((succeeded + failed) as usize, s.requests.len()),
            Outcome::Cancelled | Outcome::TimedOut { needed: None } => {}
            Outcome::Starved { until, .. } => prop_assert!(
                r.outcomes.iter().flatten().any(|o| matches!(o, Outcome::Starved { .. }))
                    && until >= r.deadline,
                "batch starved at {until:?} with deadline {:?}", r.deadline
            ),
            other => prop_assert!(false, "batch outcome {other:?}"),
        }
    }

    /// No `SleepUntil` past the batch's deadline and no send at or after it.
    #[test]
    fn batch_never_sleeps_past_its_deadline(s in setup(), script in batch_script(0..60)) {
        let r = drive_batch(&s, &script);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        let r = r.unwrap();
        for step in &r.trace.steps {
            match step.action {
                Action::SleepUntil(t) => prop_assert!(t <= r.deadline),
                Action::Send(_) => prop_assert!(step.at < r.deadline),
                Action::Stop(_) => {}
            }
        }
    }

    /// The same seed and script give the same run, action for action (that
    /// `Stop` is sticky and comes once, the runner checks by construction).
    #[test]
    fn batch_runs_are_reproducible(s in setup(), script in batch_script(0..60)) {
        let a = drive_batch(&s, &script);
        prop_assert!(a.is_ok(), "{}", a.unwrap_err());
        let a = a.unwrap();
        let b = drive_batch(&s, &script).unwrap();
        prop_assert_eq!(a, b);
    }
}

// ---------------------------------------------------------------------------
// Paced<RetryMachine>
// ---------------------------------------------------------------------------

/// One input to a paced retry machine: a script input, or another machine
/// sharing the throttle taking a slot now.
#[derive(Clone, Debug)]
enum Single {
    Input(Input),
    Sharer,
}

fn single() -> impl Strategy<Value = Single> {
    prop_oneof![
        8 => strategies::input().prop_map(Single::Input),
        2 => Just(Single::Sharer),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// A paced retry machine sharing its throttle with others keeps every
    /// invariant of the retry checker (no sleep past the deadline, sends
    /// within budget and never before Retry-After, cancel honoured, Stop
    /// sticky), one record per send, and its sends plus the sharer's never
    /// exceed the throttle.
    #[test]
    fn paced_retry_machine_keeps_the_invariants(
        limit in 1u32..4,
        window_ms in 100u64..3_000,
        timeout_ms in 0u64..20_000,
        seed in any::<u64>(),
        adaptive in any::<bool>(),
        script in prop::collection::vec(single(), 0..40),
    ) {
        let t0 = origin();
        let policy = RetryPolicy::default();
        let window = Duration::from_millis(window_ms);
        let throttle = RateThrottle::new(limit, window).unwrap();
        // Adaptive or not, the window is the ceiling (SPEC §4.1).
        let throttle = if adaptive { throttle.adaptive() } else { throttle };
        let shared = Rc::new(RefCell::new(throttle));
        let inner = RetryMachine::new(policy, RequestInfo::new(RequestId(1), Method::Get),
                                      SplitMix64::new(seed), t0, Duration::from_millis(timeout_ms)).unwrap();
        // The test's own deadline, never the machine's word for it.
        let checker = Checker::for_retry(&policy, &RequestInfo::new(RequestId(1), Method::Get))
            .deadline(t0 + Duration::from_millis(timeout_ms));
        let m = Paced::new(inner, Rc::clone(&shared), t0).retry_after_limits(policy.retry_after);
        let mut runner = ScriptRunner::new(t0, m, checker);
        let mut grants = Vec::new();
        for s in &script {
            match s {
                Single::Input(input) => {
                    let r = runner.step(input);
                    prop_assert!(r.is_ok(), "{}", r.unwrap_err());
                }
                Single::Sharer => {
                    let now = runner.now();
                    if shared.borrow_mut().acquire(now).is_ok() {
                        grants.push(now);
                    }
                }
            }
        }
        let trace = runner.finish();
        prop_assert!(trace.is_ok(), "{}", trace.unwrap_err());
        let trace = trace.unwrap();
        // One record per send actually sent (SPEC §2.4): none for a send
        // the pace held when the machine stopped.
        prop_assert_eq!(trace.one_record_per_send(), Ok(()));
        grants.extend(trace.sends().map(|(at, _)| at));
        grants.sort();
        for (i, start) in grants.iter().enumerate() {
            let inside = grants[i..].iter().take_while(|g| **g < *start + window).count();
            prop_assert!(inside <= limit as usize, "{inside} sends in one window");
        }
    }
}
