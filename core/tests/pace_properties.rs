//! Property tests for pacing: `RateThrottle` over arbitrary time sequences
//! (backwards steps included), `BatchMachine` and `Paced<RetryMachine>` over
//! arbitrary scripts of events, checked by the independent checkers of
//! `polite_core::testing`.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use polite_core::testing::{BatchChecker, Checker, SplitMix64, origin};
use polite_core::{
    Action, BatchMachine, BatchPolicy, Event, Jitter, MaxRetries, Method, Outcome, Pace, Paced,
    RateThrottle, RequestId, RequestInfo, Response, RetryMachine, RetryPolicy, SendId,
    TransportErrorKind, Unpaced,
};
use proptest::prelude::*;

const MS: Duration = Duration::from_millis(1);

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

/// A plainly written reference: a list of grant instants, time clamped to
/// its running maximum.
struct Model {
    limit: usize,
    window: Duration,
    margin: Duration,
    grants: Vec<Instant>,
    latest: Option<Instant>,
    cool: Option<Instant>,
}

impl Model {
    fn acquire(&mut self, now: Instant) -> Result<(), Instant> {
        let now = self.latest.map_or(now, |l| l.max(now));
        self.latest = Some(now);
        if let Some(c) = self.cool
            && now < c
        {
            return Err(c);
        }
        let live: Vec<Instant> = self
            .grants
            .iter()
            .copied()
            .filter(|g| *g + self.window > now)
            .collect();
        if live.len() < self.limit {
            self.grants.push(now);
            Ok(())
        } else {
            Err(live[0] + self.window + self.margin)
        }
    }
}

/// Runs `ops`; returns the (clamped) instants of the grants, checking each
/// answer against the model and that a refusal names a later instant.
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
    let mut model = Model {
        limit: limit as usize,
        window,
        margin,
        grants: Vec::new(),
        latest: None,
        cool: None,
    };
    let mut clock = t0;
    let mut latest = t0;
    let mut grants = Vec::new();
    for op in ops {
        match *op {
            Op::Acquire { step_ms } => {
                clock = step(clock, t0, step_ms);
                latest = latest.max(clock);
                let got = t.acquire(clock);
                let want = model.acquire(clock);
                if got != want {
                    return Err(format!(
                        "at {:?}: throttle {got:?}, model {want:?}",
                        clock - t0
                    ));
                }
                match got {
                    Ok(()) => grants.push(latest),
                    Err(at) if at <= latest => {
                        return Err(format!("refused until {at:?}, not after now {latest:?}"));
                    }
                    Err(_) => {}
                }
            }
            Op::CoolDown { step_ms, for_ms } => {
                clock = step(clock, t0, step_ms);
                let until = clock + Duration::from_millis(for_ms);
                t.cool_down(until);
                model.cool = Some(model.cool.map_or(until, |c| c.max(until)));
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
        prop_assert!(grants.windows(2).all(|w| w[0] <= w[1]), "grants out of order");
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

/// One scripted input to a batch.
#[derive(Clone, Debug)]
enum Input {
    /// An answer to the in-flight send chosen by `pick`, after `after_ms`.
    Answer {
        pick: usize,
        status: u16,
        retry_after: Option<&'static str>,
        after_ms: u64,
    },
    /// A transport error for the in-flight send chosen by `pick`.
    Transport {
        pick: usize,
        kind: TransportErrorKind,
        after_ms: u64,
    },
    /// An answer nobody waits for: an old attempt or an unknown item.
    Stray { item: u32, attempt: u32 },
    /// Time passes by this much, then a tick.
    Tick { ms: u64 },
    /// Advance exactly to the instant the batch asked to wake at.
    Wake,
    /// The caller cancels.
    Cancel,
    /// The adapter's clock steps backwards (the batch must clamp).
    Backwards { ms: u64 },
}

fn status() -> impl Strategy<Value = u16> {
    prop_oneof![
        6 => Just(200u16),
        1 => Just(404u16),
        6 => Just(429u16),
        3 => Just(503u16),
        1 => Just(501u16),
    ]
}

fn retry_after() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        4 => Just(None),
        3 => Just(Some("1")),
        2 => Just(Some("2")),
        1 => Just(Some("0")),
        1 => Just(Some("61")),
        1 => Just(Some("90")),
        1 => Just(Some("86400")),
        1 => Just(Some("x")),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        10 => (any::<usize>(), status(), retry_after(), 0u64..2_000).prop_map(
            |(pick, status, retry_after, after_ms)| Input::Answer { pick, status, retry_after, after_ms }),
        2 => (any::<usize>(), prop_oneof![Just(TransportErrorKind::Reset), Just(TransportErrorKind::Aborted)], 0u64..2_000)
            .prop_map(|(pick, kind, after_ms)| Input::Transport { pick, kind, after_ms }),
        1 => (0u32..12, 0u32..4).prop_map(|(item, attempt)| Input::Stray { item, attempt }),
        3 => (0u64..10_000).prop_map(|ms| Input::Tick { ms }),
        6 => Just(Input::Wake),
        1 => Just(Input::Cancel),
        1 => (0u64..3_000).prop_map(|ms| Input::Backwards { ms }),
    ]
}

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
        any::<u64>(),
        prop_oneof![0u64..20_000, 20_000u64..200_000],
    )
        .prop_map(
            |(
                (rl, se, tr),
                jitter,
                (concurrency, max_restarts),
                requests,
                throttle,
                seed,
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
                    seed,
                    timeout: Duration::from_millis(timeout_ms),
                }
            },
        )
}

/// What a run showed.
#[derive(Debug, PartialEq)]
struct BatchRun {
    actions: Vec<(Instant, Action)>,
    /// The most sends in flight at once, counted by the driver.
    peak: usize,
    deadline: Instant,
    stop: Outcome,
    outcomes: Vec<Option<Outcome>>,
}

fn drive_batch(s: &Setup, script: &[Input]) -> Result<BatchRun, String> {
    match s.throttle {
        None => drive_batch_with(s, script, Unpaced),
        Some((limit, window)) => drive_batch_with(
            s,
            script,
            RateThrottle::new(limit, window).map_err(|e| e.to_string())?,
        ),
    }
}

/// Runs the script, then drives the batch to its end (answering every send
/// with 200 and sleeping as asked), checking every step with the
/// `BatchChecker` and the item outcomes after every step.
fn drive_batch_with<P: Pace>(s: &Setup, script: &[Input], pace: P) -> Result<BatchRun, String> {
    let t0 = origin();
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
    let mut checker = BatchChecker::new(&s.policy, &s.requests, deadline);
    if let Some((limit, window)) = s.throttle {
        checker = checker.throttled(limit, window);
    }
    let wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut st = Driver {
        now: t0,
        clock: t0,
        flying: Vec::new(),
        wake: None,
        stop: None,
        actions: Vec::new(),
        peak: 0,
    };
    let v = |e: polite_core::testing::Violation| e.to_string();
    st.drain(&mut b, &mut checker)?;
    for input in script {
        let event = match *input {
            Input::Answer {
                pick,
                status,
                retry_after,
                after_ms,
            } => {
                st.clock += Duration::from_millis(after_ms);
                if st.flying.is_empty() {
                    continue;
                }
                let id = st.flying.swap_remove(pick % st.flying.len());
                let mut r = Response::new(id, status, wall + (st.clock - t0));
                r.retry_after = retry_after.map(str::as_bytes);
                Event::Response(r)
            }
            Input::Transport {
                pick,
                kind,
                after_ms,
            } => {
                st.clock += Duration::from_millis(after_ms);
                if st.flying.is_empty() {
                    continue;
                }
                let id = st.flying.swap_remove(pick % st.flying.len());
                Event::TransportError(id, kind)
            }
            Input::Stray { item, attempt } => {
                let id = SendId { item, attempt };
                if st.flying.contains(&id) {
                    continue;
                }
                Event::Response(Response::new(id, 200, wall + (st.clock - t0)))
            }
            Input::Tick { ms } => {
                st.clock += Duration::from_millis(ms);
                Event::Tick
            }
            Input::Wake => {
                if let Some(w) = st.wake {
                    st.clock = st.clock.max(w);
                }
                Event::Tick
            }
            Input::Cancel => Event::Cancel,
            Input::Backwards { ms } => {
                st.clock = st
                    .clock
                    .checked_sub(Duration::from_millis(ms))
                    .unwrap_or(t0)
                    .max(t0);
                Event::Tick
            }
        };
        st.feed(&mut b, &mut checker, event)?;
    }
    // Drive to the end: answer what flies with 200, else sleep as asked.
    for _ in 0..10_000 {
        if st.stop.is_some() {
            break;
        }
        let event = if let Some(id) = st.flying.pop() {
            Event::Response(Response::new(id, 200, wall + (st.clock - t0)))
        } else {
            st.clock = st
                .clock
                .max(st.wake.ok_or("no wake-up and nothing in flight")?);
            Event::Tick
        };
        st.feed(&mut b, &mut checker, event)?;
    }
    let stop = st.stop.ok_or("the batch did not stop")?;
    // Sticky: more polls and events change nothing.
    for e in [
        Event::Tick,
        Event::Cancel,
        Event::Response(Response::new(SendId::default(), 503, wall)),
    ] {
        st.clock += MS;
        checker.input(st.clock, &e);
        b.handle(st.clock, e);
        for _ in 0..2 {
            let a = b.poll_action();
            checker.output(st.clock, &a).map_err(v)?;
            if a != Action::Stop(stop) {
                return Err(format!("stop-sticky: {a:?} after {stop:?}"));
            }
        }
    }
    checker.outcomes(b.outcomes()).map_err(v)?;
    Ok(BatchRun {
        actions: st.actions,
        peak: st.peak,
        deadline,
        stop,
        outcomes: b.outcomes().to_vec(),
    })
}

struct Driver {
    now: Instant,
    clock: Instant,
    flying: Vec<SendId>,
    wake: Option<Instant>,
    stop: Option<Outcome>,
    actions: Vec<(Instant, Action)>,
    peak: usize,
}

impl Driver {
    fn feed<P: Pace>(
        &mut self,
        b: &mut BatchMachine<SplitMix64, P>,
        checker: &mut BatchChecker,
        event: Event<'_>,
    ) -> Result<(), String> {
        self.now = self.now.max(self.clock);
        checker.input(self.clock, &event);
        b.handle(self.clock, event);
        if matches!(event, Event::Cancel) || self.stop.is_some() {
            self.flying.clear();
        }
        self.drain(b, checker)
    }

    fn drain<P: Pace>(
        &mut self,
        b: &mut BatchMachine<SplitMix64, P>,
        checker: &mut BatchChecker,
    ) -> Result<(), String> {
        let before = b.outcomes().to_vec();
        for _ in 0..=(b.len() + 1) {
            let a = b.poll_action();
            checker.output(self.now, &a).map_err(|e| e.to_string())?;
            checker.outcomes(b.outcomes()).map_err(|e| e.to_string())?;
            // Exactly once, directly: an outcome once set never changes.
            for (k, (was, is)) in before.iter().zip(b.outcomes()).enumerate() {
                if was.is_some() && was != is {
                    return Err(format!("item {k}: {was:?} became {is:?}"));
                }
            }
            self.actions.push((self.now, a));
            match a {
                Action::Send(p) => {
                    self.flying.push(p.id);
                    self.peak = self.peak.max(self.flying.len());
                }
                Action::SleepUntil(t) => {
                    self.wake = Some(t);
                    return Ok(());
                }
                Action::Stop(o) => {
                    self.stop = Some(o);
                    self.flying.clear();
                    return Ok(());
                }
            }
        }
        Err("more sends in a row than there are items".into())
    }
}

proptest! {
    #![proptest_config(config())]

    /// The batch never has more than `concurrency` sends in flight (counted
    /// by the driver, and by the checker's `concurrency` rule), and every
    /// other invariant of the checker holds.
    #[test]
    fn batch_never_exceeds_its_concurrency(s in setup(), script in prop::collection::vec(input(), 0..60)) {
        let r = drive_batch(&s, &script);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        let r = r.unwrap();
        prop_assert!(r.peak <= s.policy.concurrency as usize, "peak {} > {}", r.peak, s.policy.concurrency);
    }

    /// Every item ends with exactly one outcome: `outcomes()` never changes
    /// an outcome once set, and at `Stop` every item has one, consistent
    /// with the batch's own outcome.
    #[test]
    fn every_item_ends_exactly_once(s in setup(), script in prop::collection::vec(input(), 0..60)) {
        let r = drive_batch(&s, &script);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        let r = r.unwrap();
        prop_assert_eq!(r.outcomes.len(), s.requests.len());
        prop_assert!(r.outcomes.iter().all(Option::is_some));
        match r.stop {
            Outcome::BatchDone { succeeded, failed } =>
                prop_assert_eq!((succeeded + failed) as usize, s.requests.len()),
            Outcome::Cancelled | Outcome::TimedOut { needed: None } => {}
            other => prop_assert!(false, "batch outcome {other:?}"),
        }
    }

    /// No `SleepUntil` past the batch's deadline and no send at or after it.
    #[test]
    fn batch_never_sleeps_past_its_deadline(s in setup(), script in prop::collection::vec(input(), 0..60)) {
        let r = drive_batch(&s, &script);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        let r = r.unwrap();
        for (at, a) in &r.actions {
            match a {
                Action::SleepUntil(t) => prop_assert!(*t <= r.deadline),
                Action::Send(_) => prop_assert!(*at < r.deadline),
                Action::Stop(_) => {}
            }
        }
    }

    /// `Stop` is sticky: after the first `Stop(o)` every action is `Stop(o)`,
    /// whatever comes in; and the same seed and script give the same trace.
    #[test]
    fn batch_stop_is_sticky_and_runs_are_reproducible(s in setup(), script in prop::collection::vec(input(), 0..60)) {
        let a = drive_batch(&s, &script);
        prop_assert!(a.is_ok(), "{}", a.unwrap_err());
        let a = a.unwrap();
        let first = a.actions.iter().position(|(_, x)| matches!(x, Action::Stop(_))).unwrap();
        prop_assert!(a.actions[first..].iter().all(|(_, x)| *x == Action::Stop(a.stop)));
        let b = drive_batch(&s, &script).unwrap();
        prop_assert_eq!(a, b);
    }
}

// ---------------------------------------------------------------------------
// Paced<RetryMachine>
// ---------------------------------------------------------------------------

/// One scripted input to a paced retry machine.
#[derive(Clone, Debug)]
enum Single {
    Answer {
        status: u16,
        retry_after: Option<&'static str>,
        after_ms: u64,
    },
    /// Another machine sharing the throttle takes a slot now.
    Sharer,
    Tick {
        ms: u64,
    },
    Wake,
    Cancel,
}

fn single() -> impl Strategy<Value = Single> {
    prop_oneof![
        6 => (status(), retry_after(), 0u64..2_000)
            .prop_map(|(status, retry_after, after_ms)| Single::Answer { status, retry_after, after_ms }),
        2 => Just(Single::Sharer),
        2 => (0u64..5_000).prop_map(|ms| Single::Tick { ms }),
        6 => Just(Single::Wake),
        1 => Just(Single::Cancel),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// A paced retry machine sharing its throttle with others keeps every
    /// invariant of the retry checker (no sleep past the deadline, sends
    /// within budget and never before Retry-After, cancel honoured, Stop
    /// sticky), and its sends plus the sharer's never exceed the throttle.
    #[test]
    fn paced_retry_machine_keeps_the_invariants(
        limit in 1u32..4,
        window_ms in 100u64..3_000,
        timeout_ms in 0u64..20_000,
        seed in any::<u64>(),
        script in prop::collection::vec(single(), 0..40),
    ) {
        let t0 = origin();
        let policy = RetryPolicy::default();
        let request = RequestInfo::new(RequestId(1), Method::Get);
        let window = Duration::from_millis(window_ms);
        let shared = Rc::new(RefCell::new(RateThrottle::new(limit, window).unwrap()));
        let inner = RetryMachine::new(policy, request, SplitMix64::new(seed), t0,
                                      Duration::from_millis(timeout_ms)).unwrap();
        let deadline = inner.deadline();
        let mut m = Paced::new(inner, Rc::clone(&shared), t0).retry_after_limits(policy.retry_after);
        let mut checker = Checker::for_retry(&policy, &request).deadline(deadline);
        let wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let (mut clock, mut flying, mut wake, mut grants) = (t0, None::<SendId>, None::<Instant>, Vec::new());
        let drain = |m: &mut Paced<RetryMachine<SplitMix64>, Rc<RefCell<RateThrottle>>>,
                         checker: &mut Checker, now: Instant, flying: &mut Option<SendId>,
                         wake: &mut Option<Instant>, grants: &mut Vec<Instant>| -> Result<(), String> {
            for _ in 0..3 {
                let a = m.poll_action();
                checker.output(now, &a).map_err(|e| e.to_string())?;
                match a {
                    Action::Send(p) => { *flying = Some(p.id); grants.push(now); }
                    Action::SleepUntil(t) => { *wake = Some(t); return Ok(()); }
                    Action::Stop(_) => { *flying = None; return Ok(()); }
                }
            }
            Err("sends without waiting".into())
        };
        let r = drain(&mut m, &mut checker, clock, &mut flying, &mut wake, &mut grants);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        for input in &script {
            let event = match *input {
                Single::Answer { status, retry_after, after_ms } => {
                    clock += Duration::from_millis(after_ms);
                    let Some(id) = flying.take() else { continue };
                    let mut r = Response::new(id, status, wall + (clock - t0));
                    r.retry_after = retry_after.map(str::as_bytes);
                    Event::Response(r)
                }
                Single::Sharer => {
                    if shared.borrow_mut().acquire(clock).is_ok() {
                        grants.push(clock);
                    }
                    continue;
                }
                Single::Tick { ms } => { clock += Duration::from_millis(ms); Event::Tick }
                Single::Wake => { if let Some(w) = wake { clock = clock.max(w); } Event::Tick }
                Single::Cancel => Event::Cancel,
            };
            checker.input(clock, &event);
            m.handle(clock, event);
            let r = drain(&mut m, &mut checker, clock, &mut flying, &mut wake, &mut grants);
            prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        }
        grants.sort();
        for (i, start) in grants.iter().enumerate() {
            let inside = grants[i..].iter().take_while(|g| **g < *start + window).count();
            prop_assert!(inside <= limit as usize, "{inside} sends in one window");
        }
    }
}
