//! Property tests: `RetryMachine` over arbitrary scripts of events, checked
//! by the independent invariant checker of `polite_testing`.

use std::time::{Duration, UNIX_EPOCH};

use polite_core::{
    Action, Event, Method, RequestId, RequestInfo, Response, RetryMachine, RetryPolicy, SendId,
    SplitMix64,
};
use polite_testing::strategies::{request, retry_policy, script};
use polite_testing::{Checker, Input, ScriptRunner, Settle, Trace, origin};
use proptest::prelude::*;

/// Runs a script with the shared script runner and settles the machine;
/// returns the trace, or the first violated invariant.
fn run(
    policy: RetryPolicy,
    request: RequestInfo,
    seed: u64,
    timeout: Duration,
    script: &[Input],
    settle: Settle,
) -> Result<Trace, String> {
    let t0 = origin();
    let m = RetryMachine::new(policy, request, SplitMix64::new(seed), t0, timeout)
        .map_err(|e| e.to_string())?;
    let checker = Checker::for_retry(&policy, &request).deadline(t0 + timeout);
    let mut runner = ScriptRunner::new(t0, m, checker).settle(settle);
    runner.play(script).map_err(|v| v.to_string())?;
    runner.finish().map_err(|v| v.to_string())
}

fn settle() -> impl Strategy<Value = Settle> {
    prop_oneof![Just(Settle::Hang), Just(Settle::Answer(200))]
}

/// Budgets of up to a minute, one in five of 1 to 3 whole seconds: the
/// scripts' whole-second steps land answers exactly on those deadlines
/// (where an answer is discarded, `TimedOut`, even a success).
fn timeout() -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (0u64..60_000).prop_map(Duration::from_millis),
        1 => (1u64..=3).prop_map(Duration::from_secs),
    ]
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
    /// cancel honoured, late answers end in TimedOut, exactly one outcome;
    /// and (SPEC §2.4) each attempt yields exactly one record, answered or
    /// dropped in flight at the end (a cancel, the deadline).
    #[test]
    fn invariants_hold(
        policy in retry_policy(),
        request in request(),
        seed in any::<u64>(),
        timeout in timeout(),
        script in script(0..40),
        settle in settle(),
    ) {
        let r = run(policy, request, seed, timeout, &script, settle);
        let trace = r.map_err(TestCaseError::fail)?;
        prop_assert_eq!(trace.one_record_per_send(), Ok(()));
    }

    /// Same seed, same script → the same trace, action for action.
    #[test]
    fn same_seed_same_trace(
        policy in retry_policy(),
        request in request(),
        seed in any::<u64>(),
        script in script(0..30),
    ) {
        let a = run(policy, request, seed, Duration::from_secs(30), &script, Settle::Hang);
        let b = run(policy, request, seed, Duration::from_secs(30), &script, Settle::Hang);
        prop_assert_eq!(a, b);
    }

    /// A non-replayable request is sent exactly once, whatever happens.
    #[test]
    fn non_replayable_is_sent_once(
        policy in retry_policy(),
        seed in any::<u64>(),
        script in script(0..40),
        settle in settle(),
    ) {
        let post = RequestInfo::new(RequestId(9), Method::Post);
        let trace = run(policy, post, seed, Duration::from_secs(60), &script, settle).unwrap();
        prop_assert_eq!(trace.sends().count(), 1);
    }

    /// Sends never exceed 1 + the sum of the class budgets.
    #[test]
    fn total_sends_within_budget(
        policy in retry_policy(),
        seed in any::<u64>(),
        script in script(0..60),
        settle in settle(),
    ) {
        let get = RequestInfo::new(RequestId(1), Method::Get);
        let trace = run(policy, get, seed, Duration::from_secs(600), &script, settle).unwrap();
        let sends = trace.sends().count() as u32;
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

/// The checker's own rules for SPEC §2.3's stale answers, for an answer at
/// exactly the deadline, and for SPEC §2's list of replayable methods,
/// shown on hand-made traces (no machine: the rules are the checker's).
#[test]
fn the_checker_catches_stale_deadline_and_replayability_violations() {
    let t0 = origin();
    let policy = RetryPolicy::default();
    let deadline = t0 + Duration::from_secs(10);
    let plan = |request: &RequestInfo, attempt| polite_core::SendPlan {
        id: SendId { item: 0, attempt },
        request: request.id,
        abort_at: deadline + policy.transport_cushion,
        long_poll: None,
    };
    let retried = Action::SleepUntil(t0 + Duration::from_secs(1));

    // A 503 for another generation must end `Stale`, not wait to retry.
    let req = RequestInfo::new(RequestId(1), Method::Get).with_generation(4);
    let mut c = Checker::for_retry(&policy, &req).deadline(deadline);
    c.output(t0, &Action::Send(plan(&req, 0))).unwrap();
    let stale = Response::new(plan(&req, 0).id, 503, UNIX_EPOCH).generation(5);
    c.input(t0, &Event::Response(stale));
    assert_eq!(c.output(t0, &retried).unwrap_err().rule, "stale");
    // At the request's own generation the same wait is fine.
    let mut c = Checker::for_retry(&policy, &req).deadline(deadline);
    c.output(t0, &Action::Send(plan(&req, 0))).unwrap();
    let current = Response::new(plan(&req, 0).id, 503, UNIX_EPOCH).generation(4);
    c.input(t0, &Event::Response(current));
    c.output(t0, &retried).unwrap();

    // A success exactly at the deadline is discarded: `TimedOut { needed:
    // None }`, neither delivered nor "timed out, needing an instant".
    let get = RequestInfo::new(RequestId(2), Method::Get);
    for wrong in [
        polite_core::Outcome::Succeeded { status: 200 },
        polite_core::Outcome::TimedOut {
            needed: Some(deadline + Duration::from_secs(1)),
        },
    ] {
        let mut c = Checker::for_retry(&policy, &get).deadline(deadline);
        c.output(t0, &Action::Send(plan(&get, 0))).unwrap();
        c.input(
            deadline,
            &Event::Response(Response::new(plan(&get, 0).id, 200, UNIX_EPOCH)),
        );
        let err = c.output(deadline, &Action::Stop(wrong)).unwrap_err();
        assert_eq!(err.rule, "late-success", "{wrong:?}");
    }

    // HEAD, OPTIONS and TRACE are idempotent (SPEC §2): `NotReplayable`
    // after a 503 is wrong for them, by the checker's own list.
    for method in [Method::Head, Method::Options, Method::Trace] {
        let r = RequestInfo::new(RequestId(3), method);
        let mut c = Checker::for_retry(&policy, &r).deadline(deadline);
        c.output(t0, &Action::Send(plan(&r, 0))).unwrap();
        c.input(
            t0,
            &Event::Response(Response::new(plan(&r, 0).id, 503, UNIX_EPOCH)),
        );
        let stop = Action::Stop(polite_core::Outcome::NotReplayable {
            last: polite_core::Reply::Status(503),
        });
        assert_eq!(
            c.output(t0, &stop).unwrap_err().rule,
            "not-replayable",
            "{method:?}"
        );
    }
}
