//! Property tests: `PollMachine` over arbitrary scripts of events (answers
//! with random status, job report and Retry-After, transport errors, ticks of
//! random size, cancels, late answers for old polls, time going backwards),
//! checked by the independent `testing::PollChecker` and by explicit
//! assertions per property.

use std::time::{Duration, Instant, UNIX_EPOCH};

use polite_core::testing::{PollChecker, SplitMix64, origin};
use polite_core::{
    Action, AttemptRecord, Event, Jitter, JobReport, MaxRetries, Method, Notice, PollMachine,
    PollPolicy, RequestId, RequestInfo, Response, SendId, TransportErrorKind,
};
use proptest::prelude::*;

/// What an answer's body says about the job.
#[derive(Clone, Copy, Debug)]
enum Report {
    None,
    State(&'static str),
    Unsupported,
}

/// One scripted input.
#[derive(Clone, Debug)]
enum Input {
    /// An answer to the poll in flight (or, with `late`, to an earlier one).
    Answer {
        status: u16,
        report: Report,
        retry_after: Option<&'static str>,
        generation: Option<u64>,
        late: bool,
        after_ms: u64,
    },
    /// A transport error for the poll in flight.
    Transport {
        kind: TransportErrorKind,
        after_ms: u64,
    },
    /// Time passes by this much, then a tick.
    Tick { ms: u64 },
    /// Advance exactly to the instant the machine asked to wake at (unless a
    /// poll is in flight).
    Wake,
    /// The caller cancels.
    Cancel,
    /// The adapter's clock steps backwards (the machine must clamp).
    Backwards { ms: u64 },
}

fn status() -> impl Strategy<Value = u16> {
    prop_oneof![
        60 => Just(200u16),
        4 => Just(202u16),
        1 => Just(204u16),
        1 => Just(400u16),
        1 => Just(404u16),
        3 => Just(429u16),
        3 => Just(503u16),
        1 => Just(500u16),
        1 => Just(502u16),
        1 => Just(501u16),
        1 => 0u16..1000,
    ]
}

fn report() -> impl Strategy<Value = Report> {
    prop_oneof![
        1 => Just(Report::None),
        24 => Just(Report::State("running")),
        4 => Just(Report::State("queued")),
        1 => Just(Report::State("passed")),
        1 => Just(Report::State("failed")),
        1 => Just(Report::State("a-state-name-far-longer-than-thirty-one-bytes")),
        1 => Just(Report::State("")),
        2 => Just(Report::Unsupported),
    ]
}

fn retry_after() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        30 => Just(None),
        2 => Just(Some("1")),
        2 => Just(Some("5")),
        1 => Just(Some("0")),
        1 => Just(Some("30")),
        1 => Just(Some("61")),
        1 => Just(Some("86400")),
        1 => Just(Some("-1")),
        1 => Just(Some("Sun, 06 Nov 1994 08:49:37 GMT")),
        1 => Just(Some("")),
    ]
}

fn kind() -> impl Strategy<Value = TransportErrorKind> {
    prop_oneof![
        Just(TransportErrorKind::Refused),
        Just(TransportErrorKind::Reset),
        Just(TransportErrorKind::Timeout),
        Just(TransportErrorKind::Aborted),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    let answer = (
        status(),
        report(),
        retry_after(),
        prop_oneof![20 => Just(None), 1 => Just(Some(7u64)), 1 => Just(Some(8u64))],
        prop::bool::weighted(0.1),
        prop_oneof![4 => 0u64..3_000, 1 => 0u64..30_000],
    )
        .prop_map(
            |(status, report, retry_after, generation, late, after_ms)| Input::Answer {
                status,
                report,
                retry_after,
                generation,
                late,
                after_ms,
            },
        );
    prop_oneof![
        30 => answer,
        3 => (kind(), 0u64..5_000).prop_map(|(kind, after_ms)| Input::Transport { kind, after_ms }),
        6 => (0u64..20_000).prop_map(|ms| Input::Tick { ms }),
        12 => Just(Input::Wake),
        1 => Just(Input::Cancel),
        3 => (0u64..5_000).prop_map(|ms| Input::Backwards { ms }),
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

fn policy() -> impl Strategy<Value = PollPolicy> {
    (
        prop::bool::weighted(0.8),
        1u64..40,
        0u64..2_000,
        (jitter(), 100u64..3_000, 1u32..4),
        (0u32..5, 0u32..5, 0u32..5),
    )
        .prop_map(
            |(first, max_lp, floor_ms, (jitter, base_ms, mult), (rl, se, tr))| {
                let mut p = PollPolicy {
                    long_poll_first: first,
                    max_long_poll: Duration::from_secs(max_lp),
                    min_long_poll_interval: Duration::from_millis(floor_ms),
                    ..PollPolicy::default()
                };
                p.backoff.jitter = jitter;
                p.backoff.base = Duration::from_millis(base_ms);
                p.backoff.multiplier = mult;
                p.backoff.cap = p.backoff.base.max(Duration::from_secs(15));
                p.retry.max_retries = MaxRetries {
                    rate_limited: rl,
                    server_error: se,
                    transport: tr,
                };
                p
            },
        )
}

fn request() -> impl Strategy<Value = RequestInfo> {
    prop_oneof![
        4 => Just(RequestInfo::new(RequestId(1), Method::Get)),
        1 => Just(RequestInfo::new(RequestId(2), Method::Post)),
        1 => Just(RequestInfo::new(RequestId(3), Method::Get).with_generation(7)),
    ]
}

/// Everything one run produced.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Run {
    deadline: Instant,
    /// Every action with the instant it was answered.
    steps: Vec<(Instant, Action)>,
    records: Vec<AttemptRecord>,
    notices: Vec<(Instant, Notice)>,
}

impl Run {
    fn sends(&self) -> impl Iterator<Item = (Instant, polite_core::SendPlan)> + '_ {
        self.steps.iter().filter_map(|(t, a)| match a {
            Action::Send(p) => Some((*t, *p)),
            _ => None,
        })
    }
}

/// Runs a script; returns the run, or the first invariant the checker saw
/// broken.
fn run(
    policy: PollPolicy,
    request: RequestInfo,
    seed: u64,
    timeout: Duration,
    script: &[Input],
) -> Result<Run, String> {
    let t0 = origin();
    let mut m = PollMachine::new(policy, request, SplitMix64::new(seed), t0, timeout)
        .map_err(|e| e.to_string())?;
    let mut checker = PollChecker::for_machine(&m);
    let mut out = Run {
        deadline: m.deadline(),
        steps: Vec::new(),
        records: Vec::new(),
        notices: Vec::new(),
    };
    let mut now = t0; // the latest instant the machine has seen
    let mut clock = t0; // the adapter's clock, which may step backwards
    let mut flying: Option<SendId> = None;
    let mut old: Option<SendId> = None;
    let mut wake = None;
    let wall = UNIX_EPOCH + Duration::from_secs(784_111_700);
    let drain = |m: &mut PollMachine<SplitMix64>,
                 checker: &mut PollChecker,
                 out: &mut Run,
                 now: Instant,
                 flying: &mut Option<SendId>,
                 old: &mut Option<SendId>,
                 wake: &mut Option<Instant>|
     -> Result<(), String> {
        for _ in 0..4 {
            let a = m.poll_action();
            checker.output(now, &a).map_err(|v| v.to_string())?;
            out.steps.push((now, a));
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
    drain(
        &mut m,
        &mut checker,
        &mut out,
        now,
        &mut flying,
        &mut old,
        &mut wake,
    )?;
    for input in script {
        let event = match input {
            Input::Answer {
                status,
                report,
                retry_after,
                generation,
                late,
                after_ms,
            } => {
                clock += Duration::from_millis(*after_ms);
                let id = if *late { old } else { flying };
                let Some(id) = id else { continue };
                let mut r = Response::new(id, *status, wall + (clock - t0));
                r.retry_after = retry_after.map(str::as_bytes);
                r.generation = *generation;
                r.job = match report {
                    Report::None => None,
                    Report::State(s) => Some(JobReport::State(s)),
                    Report::Unsupported => Some(JobReport::LongPollUnsupported),
                };
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
                // While a poll is in flight the machine sleeps until the
                // deadline; big ticks cover that, so only real waits end here.
                if m.in_flight() {
                    continue;
                }
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
        if let Some(r) = m.take_record() {
            out.records.push(r);
        }
        if let Some(n) = m.take_notice() {
            checker.notice(n).map_err(|v| v.to_string())?;
            out.notices.push((now, n));
        }
        drain(
            &mut m,
            &mut checker,
            &mut out,
            now,
            &mut flying,
            &mut old,
            &mut wake,
        )?;
    }
    Ok(out)
}

fn script() -> impl Strategy<Value = Vec<Input>> {
    prop::collection::vec(input(), 0..80)
}

/// Mostly budgets long enough for many polls; sometimes under a second.
fn timeout() -> impl Strategy<Value = Duration> {
    prop_oneof![
        1 => 0u64..2_000,
        9 => 0u64..600_000,
    ]
    .prop_map(Duration::from_millis)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Every rule of the `PollChecker` holds over arbitrary scripts.
    #[test]
    fn the_checker_finds_nothing(
        policy in policy(),
        request in request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in script(),
    ) {
        let r = run(policy, request, seed, timeout, &script);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
    }

    /// No `SleepUntil` past the deadline, no send at or after it.
    #[test]
    fn no_sleep_past_the_deadline(
        policy in policy(),
        request in request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in script(),
    ) {
        let r = run(policy, request, seed, timeout, &script).unwrap();
        for (at, a) in &r.steps {
            match a {
                Action::SleepUntil(t) => prop_assert!(*t <= r.deadline, "{a:?}"),
                Action::Send(_) => prop_assert!(*at < r.deadline, "{a:?} at {at:?}"),
                Action::Stop(_) => {}
            }
        }
    }

    /// Every wait parameter is at least 1 and at most
    /// `min(whole seconds left, max_long_poll)`.
    #[test]
    fn the_wait_parameter_stays_within_the_budget(
        policy in policy(),
        request in request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in script(),
    ) {
        let r = run(policy, request, seed, timeout, &script).unwrap();
        for (at, plan) in r.sends() {
            if let Some(n) = plan.long_poll {
                let left = (r.deadline - at).as_secs();
                prop_assert!(n >= 1);
                prop_assert!(u64::from(n) <= left.min(policy.max_long_poll.as_secs()));
            }
        }
    }

    /// After the first poll without the wait parameter, never a long poll
    /// again; the notice comes at most once, and exactly once when the
    /// machine fell back.
    #[test]
    fn never_back_to_long_poll(
        policy in policy(),
        request in request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in script(),
    ) {
        let r = run(policy, request, seed, timeout, &script).unwrap();
        let modes: Vec<bool> = r.sends().map(|(_, p)| p.long_poll.is_some()).collect();
        if let Some(first_plain) = modes.iter().position(|long| !long) {
            prop_assert!(modes[first_plain..].iter().all(|long| !long), "{modes:?}");
            if policy.long_poll_first {
                prop_assert_eq!(r.notices.len(), 1);
                prop_assert!(r.notices[0].0 <= r.sends().nth(first_plain).unwrap().0);
            }
        }
        if !policy.long_poll_first {
            prop_assert!(modes.iter().all(|long| !long));
            prop_assert!(r.notices.is_empty());
        }
        prop_assert!(r.notices.len() <= 1);
    }

    /// Once `Stop(o)`, every later action is `Stop(o)`: no send after stop.
    #[test]
    fn stop_is_sticky_and_nothing_is_sent_after(
        policy in policy(),
        request in request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in script(),
    ) {
        let r = run(policy, request, seed, timeout, &script).unwrap();
        if let Some(i) = r.steps.iter().position(|(_, a)| matches!(a, Action::Stop(_))) {
            let stop = r.steps[i].1;
            prop_assert!(r.steps[i..].iter().all(|(_, a)| *a == stop), "{:?}", &r.steps[i..]);
            let stopped_at = r.steps[i].0;
            prop_assert!(r.records.iter().filter(|rec| rec.outcome.is_some()).count() <= 1);
            prop_assert!(stopped_at <= r.steps.last().unwrap().0);
        }
    }

    /// Same seed, same script → the same trace, action for action, with the
    /// same records and notices.
    #[test]
    fn same_seed_same_trace(
        policy in policy(),
        request in request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in script(),
    ) {
        let a = run(policy, request, seed, timeout, &script);
        let b = run(policy, request, seed, timeout, &script);
        prop_assert_eq!(a, b);
    }
}

/// The checker itself must catch a broken machine.
#[test]
fn the_checker_catches_violations() {
    use polite_core::{Outcome, SendPlan};
    let t0 = origin();
    let policy = PollPolicy::default();
    let get = RequestInfo::new(RequestId(1), Method::Get);
    let deadline = t0 + Duration::from_secs(30);
    let plan = |attempt, long_poll| SendPlan {
        id: SendId { item: 0, attempt },
        request: get.id,
        abort_at: deadline + policy.retry.transport_cushion,
        long_poll,
    };
    let answer = |attempt, job| {
        Event::Response(Response::new(SendId { item: 0, attempt }, 400, UNIX_EPOCH).job(job))
    };

    // Back to long poll after the switch.
    let mut c = PollChecker::new(&policy, &get, deadline);
    c.output(t0, &Action::Send(plan(0, Some(25)))).unwrap();
    c.input(t0, &answer(0, JobReport::LongPollUnsupported));
    c.notice(Notice::LongPollUnsupported).unwrap();
    c.output(t0, &Action::Send(plan(1, None))).unwrap();
    c.input(
        t0,
        &Event::Response(
            Response::new(
                SendId {
                    item: 0,
                    attempt: 1,
                },
                200,
                UNIX_EPOCH,
            )
            .job(JobReport::State("running")),
        ),
    );
    let err = c
        .output(
            t0 + Duration::from_secs(5),
            &Action::Send(plan(2, Some(25))),
        )
        .unwrap_err();
    assert_eq!(err.rule, "mode");
    assert_eq!(
        c.notice(Notice::LongPollUnsupported).unwrap_err().rule,
        "notice-once"
    );

    // Polling again at once in backoff mode.
    let mut c = PollChecker::new(&policy, &get, deadline);
    c.output(t0, &Action::Send(plan(0, Some(25)))).unwrap();
    c.input(t0, &answer(0, JobReport::LongPollUnsupported));
    c.output(t0, &Action::Send(plan(1, None))).unwrap();
    c.input(
        t0,
        &Event::Response(
            Response::new(
                SendId {
                    item: 0,
                    attempt: 1,
                },
                200,
                UNIX_EPOCH,
            )
            .job(JobReport::State("running")),
        ),
    );
    let err = c.output(t0, &Action::Send(plan(2, None))).unwrap_err();
    assert_eq!(err.rule, "poll-too-soon");

    // A terminal state that does not stop the wait.
    let mut c = PollChecker::new(&policy, &get, deadline);
    c.output(t0, &Action::Send(plan(0, Some(25)))).unwrap();
    c.input(
        t0,
        &Event::Response(
            Response::new(
                SendId {
                    item: 0,
                    attempt: 0,
                },
                200,
                UNIX_EPOCH,
            )
            .job(JobReport::State("passed")),
        ),
    );
    let err = c.output(t0, &Action::Send(plan(1, Some(25)))).unwrap_err();
    assert_eq!(err.rule, "terminal");

    // Too many consecutive 503s.
    let mut p = policy;
    p.retry.max_retries.server_error = 1;
    let mut c = PollChecker::new(&p, &get, deadline);
    let s503 = |a| {
        Event::Response(Response::new(
            SendId {
                item: 0,
                attempt: a,
            },
            503,
            UNIX_EPOCH,
        ))
    };
    c.output(t0, &Action::Send(plan(0, Some(25)))).unwrap();
    c.input(t0, &s503(0));
    c.output(t0, &Action::Send(plan(1, Some(25)))).unwrap();
    c.input(t0, &s503(1));
    let err = c.output(t0, &Action::Send(plan(2, Some(25)))).unwrap_err();
    assert_eq!(err.rule, "retry-budget");

    // Anything but Stop at the deadline; a send after stop.
    let mut c = PollChecker::new(&policy, &get, deadline);
    c.output(t0, &Action::Send(plan(0, Some(25)))).unwrap();
    let err = c
        .output(deadline, &Action::SleepUntil(deadline))
        .unwrap_err();
    assert_eq!(err.rule, "deadline");
    let mut c = PollChecker::new(&policy, &get, deadline);
    c.output(t0, &Action::Stop(Outcome::Cancelled)).unwrap();
    let err = c.output(t0, &Action::Send(plan(0, Some(25)))).unwrap_err();
    assert_eq!(err.rule, "send-after-stop");
}
