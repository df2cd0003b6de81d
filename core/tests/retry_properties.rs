//! Property tests: `RetryMachine` over arbitrary scripts of events, checked
//! by the independent invariant checker of `polite_core::testing`.

use std::time::{Duration, Instant, UNIX_EPOCH};

use polite_core::testing::{Checker, SplitMix64, origin};
use polite_core::{
    Action, Event, Jitter, MaxRetries, Method, RequestId, RequestInfo, Response, RetryMachine,
    RetryPolicy, SendId, TransportErrorKind,
};
use proptest::prelude::*;

/// One scripted input.
#[derive(Clone, Debug)]
enum Input {
    /// An answer to the send in flight (or, with `late`, to an earlier one).
    Answer {
        status: u16,
        retry_after: Option<&'static str>,
        late: bool,
        after_ms: u64,
    },
    /// A transport error for the send in flight.
    Transport {
        kind: TransportErrorKind,
        after_ms: u64,
    },
    /// Time passes by this much, then a tick.
    Tick { ms: u64 },
    /// Advance exactly to the instant the machine asked to wake at.
    Wake,
    /// The caller cancels.
    Cancel,
    /// The adapter's clock steps backwards (the machine must clamp).
    Backwards { ms: u64 },
}

fn status() -> impl Strategy<Value = u16> {
    prop_oneof![
        3 => Just(200u16),
        1 => Just(204u16),
        1 => Just(404u16),
        1 => Just(400u16),
        4 => Just(429u16),
        4 => Just(503u16),
        2 => Just(500u16),
        1 => Just(502u16),
        1 => Just(501u16),
        1 => 0u16..1000,
    ]
}

fn retry_after() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        4 => Just(None),
        2 => Just(Some("1")),
        2 => Just(Some("3")),
        1 => Just(Some("0")),
        1 => Just(Some("30")),
        1 => Just(Some("61")),
        1 => Just(Some("86400")),
        1 => Just(Some("-1")),
        1 => Just(Some("1.5")),
        1 => Just(Some("Sun, 06 Nov 1994 08:49:37 GMT")),
        1 => Just(Some("")),
    ]
}

fn kind() -> impl Strategy<Value = TransportErrorKind> {
    prop_oneof![
        Just(TransportErrorKind::Refused),
        Just(TransportErrorKind::Reset),
        Just(TransportErrorKind::Timeout),
        Just(TransportErrorKind::Dns),
        Just(TransportErrorKind::Aborted),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        6 => (status(), retry_after(), prop::bool::weighted(0.1), 0u64..3_000)
            .prop_map(|(status, retry_after, late, after_ms)| Input::Answer { status, retry_after, late, after_ms }),
        2 => (kind(), 0u64..3_000).prop_map(|(kind, after_ms)| Input::Transport { kind, after_ms }),
        2 => (0u64..20_000).prop_map(|ms| Input::Tick { ms }),
        4 => Just(Input::Wake),
        1 => Just(Input::Cancel),
        1 => (0u64..5_000).prop_map(|ms| Input::Backwards { ms }),
    ]
}

fn jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![
        Just(Jitter::None),
        Just(Jitter::Full),
        Just(Jitter::Equal),
        (0u8..=100).prop_map(Jitter::Percent),
    ]
}

fn policy() -> impl Strategy<Value = RetryPolicy> {
    (0u32..5, 0u32..5, 0u32..5, jitter(), 1u64..2_000, 1u32..4).prop_map(
        |(rl, se, tr, jitter, base_ms, mult)| {
            let mut p = RetryPolicy {
                max_retries: MaxRetries {
                    rate_limited: rl,
                    server_error: se,
                    transport: tr,
                },
                ..RetryPolicy::default()
            };
            p.backoff.jitter = jitter;
            p.backoff.base = Duration::from_millis(base_ms);
            p.backoff.multiplier = mult;
            p.backoff.cap = p.backoff.base.max(Duration::from_secs(4));
            p
        },
    )
}

fn request() -> impl Strategy<Value = RequestInfo> {
    prop_oneof![
        3 => Just(RequestInfo::new(RequestId(1), Method::Get)),
        1 => Just(RequestInfo::new(RequestId(2), Method::Post)),
        1 => Just(RequestInfo::new(RequestId(3), Method::Post).with_idempotency_key()),
        1 => Just(RequestInfo::new(RequestId(4), Method::Put).with_one_shot_body()),
    ]
}

/// Runs a script; returns every action with its instant, or the first
/// violated invariant.
fn run(
    policy: RetryPolicy,
    request: RequestInfo,
    seed: u64,
    timeout: Duration,
    script: &[Input],
) -> Result<Vec<(Instant, Action)>, String> {
    let t0 = origin();
    let mut m = RetryMachine::new(policy, request, SplitMix64::new(seed), t0, timeout)
        .map_err(|e| e.to_string())?;
    let mut checker = Checker::for_retry(&policy, &request).deadline(m.deadline());
    let mut now = t0;
    let mut clock = t0; // the adapter's clock, which may step backwards
    let mut trace = Vec::new();
    let mut flying: Option<SendId> = None;
    let mut old: Option<SendId> = None;
    let mut wake = None;
    let wall = UNIX_EPOCH + Duration::from_secs(784_111_700);
    let mut drain = |m: &mut RetryMachine<SplitMix64>,
                     checker: &mut Checker,
                     now: Instant,
                     flying: &mut Option<SendId>,
                     old: &mut Option<SendId>,
                     wake: &mut Option<Instant>|
     -> Result<(), String> {
        for _ in 0..4 {
            let a = m.poll_action();
            checker.output(now, &a).map_err(|v| v.to_string())?;
            trace.push((now, a));
            match a {
                Action::Send(p) => {
                    *old = flying.or(*old);
                    *flying = Some(p.id);
                }
                Action::SleepUntil(t) => {
                    *wake = Some(t);
                    return Ok(());
                }
                Action::Stop(_) => return Ok(()),
            }
        }
        Err("more than one send without waiting".into())
    };
    drain(&mut m, &mut checker, now, &mut flying, &mut old, &mut wake)?;
    for input in script {
        let event = match input {
            Input::Answer {
                status,
                retry_after,
                late,
                after_ms,
            } => {
                clock += Duration::from_millis(*after_ms);
                let id = if *late { old } else { flying };
                let Some(id) = id else { continue };
                let mut r = Response::new(id, *status, wall + (clock - t0));
                r.retry_after = retry_after.map(str::as_bytes);
                Event::Response(r)
            }
            Input::Transport { kind, after_ms } => {
                clock += Duration::from_millis(*after_ms);
                let Some(id) = flying else { continue };
                Event::TransportError(id, *kind)
            }
            Input::Tick { ms } => {
                clock += Duration::from_millis(*ms);
                Event::Tick
            }
            Input::Wake => {
                if let Some(w) = wake {
                    clock = clock.max(w);
                }
                Event::Tick
            }
            Input::Cancel => Event::Cancel,
            Input::Backwards { ms } => {
                clock = clock
                    .checked_sub(Duration::from_millis(*ms))
                    .unwrap_or(clock)
                    .max(t0);
                Event::Tick
            }
        };
        now = now.max(clock);
        checker.input(clock, &event);
        m.handle(clock, event);
        drain(&mut m, &mut checker, now, &mut flying, &mut old, &mut wake)?;
    }
    Ok(trace)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 1000,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Every invariant of the checker holds over arbitrary scripts: no sleep
    /// past the deadline, no send after Stop, Stop sticky, sends per class
    /// within budget, never before Retry-After, non-replayable sent once,
    /// cancel honoured, late answers end in TimedOut.
    #[test]
    fn invariants_hold(
        policy in policy(),
        request in request(),
        seed in any::<u64>(),
        timeout_ms in 0u64..60_000,
        script in prop::collection::vec(input(), 0..40),
    ) {
        let r = run(policy, request, seed, Duration::from_millis(timeout_ms), &script);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
    }

    /// Same seed, same script → the same trace, action for action.
    #[test]
    fn same_seed_same_trace(
        policy in policy(),
        request in request(),
        seed in any::<u64>(),
        script in prop::collection::vec(input(), 0..30),
    ) {
        let a = run(policy, request, seed, Duration::from_secs(30), &script);
        let b = run(policy, request, seed, Duration::from_secs(30), &script);
        prop_assert_eq!(a, b);
    }

    /// A non-replayable request is sent exactly once, whatever happens.
    #[test]
    fn non_replayable_is_sent_once(
        policy in policy(),
        seed in any::<u64>(),
        script in prop::collection::vec(input(), 0..40),
    ) {
        let post = RequestInfo::new(RequestId(9), Method::Post);
        let trace = run(policy, post, seed, Duration::from_secs(60), &script).unwrap();
        let sends = trace.iter().filter(|(_, a)| matches!(a, Action::Send(_))).count();
        prop_assert_eq!(sends, 1);
    }

    /// Sends never exceed 1 + the sum of the class budgets.
    #[test]
    fn total_sends_within_budget(
        policy in policy(),
        seed in any::<u64>(),
        script in prop::collection::vec(input(), 0..60),
    ) {
        let get = RequestInfo::new(RequestId(1), Method::Get);
        let trace = run(policy, get, seed, Duration::from_secs(600), &script).unwrap();
        let sends = trace.iter().filter(|(_, a)| matches!(a, Action::Send(_))).count() as u32;
        let m = policy.max_retries;
        prop_assert!(sends <= 1 + m.rate_limited + m.server_error + m.transport);
    }
}

/// The checker itself must catch a broken machine: feed it a trace that
/// sleeps past the deadline and one that resends a POST.
#[test]
fn the_checker_catches_violations() {
    let t0 = origin();
    let policy = RetryPolicy::default();
    let get = RequestInfo::new(RequestId(1), Method::Get);
    let deadline = t0 + Duration::from_secs(10);
    let mut c = Checker::for_retry(&policy, &get).deadline(deadline);
    let err = c
        .output(t0, &Action::SleepUntil(deadline + Duration::from_millis(1)))
        .unwrap_err();
    assert_eq!(err.rule, "sleep-past-deadline");

    let post = RequestInfo::new(RequestId(2), Method::Post);
    let mut c = Checker::for_retry(&policy, &post).deadline(deadline);
    let plan = |attempt| polite_core::SendPlan {
        id: SendId { item: 0, attempt },
        request: post.id,
        abort_at: deadline + policy.transport_cushion,
        long_poll: None,
    };
    c.output(t0, &Action::Send(plan(0))).unwrap();
    c.input(
        t0,
        &Event::Response(Response::new(plan(0).id, 503, UNIX_EPOCH)),
    );
    let err = c.output(t0, &Action::Send(plan(1))).unwrap_err();
    assert_eq!(err.rule, "not-replayable");

    let mut c = Checker::for_retry(&policy, &get).deadline(deadline);
    c.output(t0, &Action::Send(plan(0))).unwrap();
    c.input(
        t0,
        &Event::Response(Response::new(plan(0).id, 429, UNIX_EPOCH).retry_after(b"5")),
    );
    let err = c
        .output(t0 + Duration::from_secs(4), &Action::Send(plan(1)))
        .unwrap_err();
    assert_eq!(err.rule, "retry-after");

    let mut c = Checker::for_retry(&policy, &get).deadline(deadline);
    c.output(t0, &Action::Stop(polite_core::Outcome::Cancelled))
        .unwrap();
    let err = c.output(t0, &Action::Send(plan(0))).unwrap_err();
    assert_eq!(err.rule, "send-after-stop");
}
