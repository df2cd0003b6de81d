//! Property tests: `PollMachine` over arbitrary scripts of events (answers
//! with random status, job report and Retry-After, transport errors, ticks of
//! random size, cancels, late answers for old polls, time going backwards),
//! checked by the independent `testing::PollChecker` and by explicit
//! assertions per property.

use std::time::{Duration, Instant, UNIX_EPOCH};

use polite_core::poll::JobReport;
use polite_core::{
    Action, Event, Method, Notice, Outcome, PollMachine, PollPolicy, RequestId, RequestInfo,
    Response, SendId, SplitMix64,
};
use polite_testing::strategies::{poll_policy, poll_request, poll_script, timeout};
use polite_testing::{Input, Job, PollChecker, ScriptRunner, Trace, origin};
use proptest::prelude::*;

/// Everything one run produced.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Run {
    deadline: Instant,
    /// Every action up to the first `Stop`, records and the outcome.
    trace: Trace,
    notices: Vec<(Instant, Notice)>,
}

/// Runs a script with the shared script runner, then lets time run out;
/// returns the run, or the first invariant the checker saw broken.
fn run(
    policy: PollPolicy,
    request: RequestInfo,
    seed: u64,
    timeout: Duration,
    script: &[Input],
) -> Result<Run, String> {
    let t0 = origin();
    let m = PollMachine::new(policy, request, SplitMix64::new(seed), t0, timeout)
        .map_err(|e| e.to_string())?;
    // The test's own deadline, never the machine's word for it.
    let deadline = t0 + timeout;
    let checker = PollChecker::new(&policy, &request, deadline);
    let mut runner = ScriptRunner::new(t0, m, checker);
    runner.play(script).map_err(|v| v.to_string())?;
    let notices = runner.notices().to_vec();
    let trace = runner.finish().map_err(|v| v.to_string())?;
    Ok(Run {
        deadline,
        trace,
        notices,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Every rule of the `PollChecker` holds over arbitrary scripts, and
    /// (SPEC §2.4) each poll sent yields exactly one record, answered or
    /// dropped in flight at the end (a cancel, the deadline).
    #[test]
    fn the_checker_finds_nothing(
        policy in poll_policy(),
        request in poll_request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in poll_script(0..80),
    ) {
        let r = run(policy, request, seed, timeout, &script).map_err(TestCaseError::fail)?;
        prop_assert_eq!(r.trace.one_record_per_send(), Ok(()));
    }

    /// No `SleepUntil` past the deadline, no send at or after it.
    #[test]
    fn no_sleep_past_the_deadline(
        policy in poll_policy(),
        request in poll_request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in poll_script(0..80),
    ) {
        let r = run(policy, request, seed, timeout, &script).unwrap();
        for step in &r.trace.steps {
            match step.action {
                Action::SleepUntil(t) => prop_assert!(t <= r.deadline, "{:?}", step.action),
                Action::Send(_) => prop_assert!(step.at < r.deadline, "{:?} at {:?}", step.action, step.at),
                Action::Stop(_) => {}
            }
        }
    }

    /// Every wait parameter is at least 1 and at most
    /// `min(whole seconds of (left - 1 s), max_long_poll)`: a second is
    /// left for the held answer to come back before the deadline
    /// (`PollPolicy::ANSWER_ROOM`).
    #[test]
    fn the_wait_parameter_stays_within_the_budget(
        policy in poll_policy(),
        request in poll_request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in poll_script(0..80),
    ) {
        let r = run(policy, request, seed, timeout, &script).unwrap();
        for (at, plan) in r.trace.sends() {
            if let Some(n) = plan.long_poll {
                let left = (r.deadline - at).saturating_sub(Duration::from_secs(1)).as_secs();
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
        policy in poll_policy(),
        request in poll_request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in poll_script(0..80),
    ) {
        let r = run(policy, request, seed, timeout, &script).unwrap();
        let modes: Vec<bool> = r.trace.sends().map(|(_, p)| p.long_poll.is_some()).collect();
        if let Some(first_plain) = modes.iter().position(|long| !long) {
            prop_assert!(modes[first_plain..].iter().all(|long| !long), "{modes:?}");
        }
        // A plain poll with a whole second or more to ask for (2 s left:
        // one is the answer's room) means the machine fell back (with less,
        // long-poll mode sends a final plain poll: `waitSeconds=0` would be
        // a busy loop).
        let fell_back = r
            .trace
            .sends()
            .find(|(t, p)| p.long_poll.is_none() && r.deadline - *t >= Duration::from_secs(2));
        if let Some((at, _)) = fell_back && policy.long_poll_first {
            prop_assert_eq!(r.notices.len(), 1);
            prop_assert!(r.notices[0].0 <= at);
        }
        if !policy.long_poll_first {
            prop_assert!(modes.iter().all(|long| !long));
            prop_assert!(r.notices.is_empty());
        }
        prop_assert!(r.notices.len() <= 1);
    }

    /// The outcome is explained by the script, value by value (that there
    /// is exactly one, sticky, the runner checks by construction):
    /// `Terminal(s)` only after a current answer naming `s`, one of the
    /// policy's terminal states; `Cancelled` only after a cancel; `Stale`
    /// only for a request with a session generation, after an answer of
    /// another one; `NotRetryable { status }` only after an answer with that
    /// status; and an attempt record that carries an outcome carries this
    /// one.
    #[test]
    fn the_outcome_is_explained_by_the_script(
        policy in poll_policy(),
        request in poll_request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in poll_script(0..80),
    ) {
        let r = run(policy, request, seed, timeout, &script).unwrap();
        let answers: Vec<_> = script
            .iter()
            .filter_map(|i| match i {
                Input::Answer(a) if !a.late => Some(a),
                _ => None,
            })
            .collect();
        match r.trace.outcome {
            Outcome::Terminal { state } => {
                prop_assert!(policy.terminal_states.contains(state.as_str()), "{state:?}");
                prop_assert!(
                    answers.iter().any(|a| a.job == Some(Job::State(state.as_str().to_owned()))),
                    "{state:?} never answered"
                );
            }
            Outcome::Cancelled => prop_assert!(script.contains(&Input::Cancel)),
            Outcome::Stale => {
                let mine = request.generation;
                prop_assert!(mine.is_some());
                prop_assert!(answers.iter().any(|a| a.generation.is_some_and(|g| Some(g) != mine)));
            }
            Outcome::NotRetryable { status } => {
                prop_assert!(answers.iter().any(|a| a.status == status), "{status} never answered");
            }
            _ => {}
        }
        for rec in &r.trace.records {
            if let Some(o) = rec.outcome {
                prop_assert_eq!(o, r.trace.outcome);
            }
        }
    }

    /// Same seed, same script → the same trace, action for action, with the
    /// same records and notices.
    #[test]
    fn same_seed_same_trace(
        policy in poll_policy(),
        request in poll_request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in poll_script(0..80),
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

    // A plain poll after the switch without telling the user.
    let mut c = PollChecker::new(&policy, &get, deadline);
    c.output(t0, &Action::Send(plan(0, Some(25)))).unwrap();
    c.input(t0, &answer(0, JobReport::LongPollUnsupported));
    let err = c.output(t0, &Action::Send(plan(1, None))).unwrap_err();
    assert_eq!(err.rule, "notice-once");

    // Polling again at once in backoff mode.
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
