//! Issue 16: measured against hostile servers. Regression tests at the
//! level where the bugs lived (the core machines), each named after what it
//! keeps fixed. The widened explorer (`tests/exhaustive.rs`, the hostile
//! alphabets), the proptest strategies and the fuzz decoders found every
//! one of these on the old code before it was fixed; these pin them down.
//!
//! 1. `Retry-After` values that undercut the server: more digits than fit
//!    in 64 bits (treated as invalid, so resent at backoff), zero-padded
//!    past 64 bytes (rejected as too long), ignored on the long-poll
//!    rejection (`400 VALIDATION_ERROR`), and leap-second dates (refused).
//! 2. A wait that gave up with budget left (a server that ignores
//!    `waitSeconds` and answers "pending" at once).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use polite_core::poll::{JobReport, PollMode, StateName};
use polite_core::record::{DelaySource, RetryAfterNote};
use polite_core::{
    Action, Event, Method, Notice, Outcome, PollMachine, PollPolicy, RequestId, RequestInfo,
    Response, RetryMachine, RetryPolicy, SendPlan, SplitMix64,
};
use polite_testing::{
    Checker, Input, Job, PollChecker, ScriptRunner, Scripted, Simulator, Trace, origin, run_script,
};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

/// 2008-12-31 23:59:59 UTC: the leap second 23:59:60 follows it.
const BEFORE_LEAP: u64 = 1_230_767_999;

fn wall(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn get() -> RequestInfo {
    RequestInfo::new(RequestId(1), Method::Get)
}

fn retry_machine(t0: Instant, timeout: Duration) -> RetryMachine<SplitMix64> {
    RetryMachine::new(
        RetryPolicy::default(),
        get(),
        SplitMix64::new(1),
        t0,
        timeout,
    )
    .unwrap()
}

fn poll_machine(policy: PollPolicy, t0: Instant, timeout: Duration) -> PollMachine<SplitMix64> {
    PollMachine::new(policy, get(), SplitMix64::new(1), t0, timeout).unwrap()
}

fn send(m: &mut impl polite_core::Machine) -> SendPlan {
    match m.poll_action() {
        Action::Send(p) => p,
        other => panic!("expected a send, got {other:?}"),
    }
}

/// A century from `now`: the saturated server instant of a `Retry-After`
/// too large to represent ("not for a very long time", never "no time").
fn far(now: Instant) -> Action {
    Action::Stop(Outcome::RateLimited {
        retry_at: Some(now + Duration::from_secs(100 * 365 * 24 * 3600)),
    })
}

fn padded(zeros: usize, digits: &str) -> String {
    format!("{}{digits}", "0".repeat(zeros))
}

// ---------------------------------------------------------------------------
// 1 (a), (b): delta-seconds that overflow 64 bits, or are zero-padded.
// ---------------------------------------------------------------------------

/// `Retry-After: 99999999999999999999` is valid and huge: over the cap, the
/// request ends `RateLimited` (CLI exit 11), never resent at backoff.
#[test]
fn an_overflowing_retry_after_ends_the_request_rate_limited() {
    let t0 = origin();
    for status in [429, 503] {
        let mut m = retry_machine(t0, 30 * S);
        let p = send(&mut m);
        let t1 = t0 + 17 * MS;
        m.handle(
            t1,
            Event::Response(
                Response::new(p.id, status, wall(0)).retry_after(b"99999999999999999999"),
            ),
        );
        // Too far to represent: `retry_at` saturates a century away.
        assert_eq!(m.poll_action(), far(t1), "{status}");
        let rec = m.take_record().unwrap();
        assert_eq!(
            rec.retry_after,
            RetryAfterNote::Valid(Duration::from_secs(u64::MAX))
        );
        assert_eq!(m.sends(), 1, "{status}: never resent");
    }
}

/// A valid value zero-padded past 64 bytes is what its digits say (and a
/// padded huge value is huge).
#[test]
fn a_zero_padded_retry_after_is_honoured() {
    let t0 = origin();
    let mut m = retry_machine(t0, 60 * S);
    let p = send(&mut m);
    let v = padded(70, "38");
    m.handle(
        t0,
        Event::Response(Response::new(p.id, 503, wall(0)).retry_after(v.as_bytes())),
    );
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 38 * S));
    let next = m.take_record().unwrap().next.unwrap();
    assert_eq!((next.delay, next.source), (38 * S, DelaySource::RetryAfter));

    let mut m = retry_machine(t0, 60 * S);
    let p = send(&mut m);
    let v = padded(100, "99999999999999999999");
    m.handle(
        t0,
        Event::Response(Response::new(p.id, 429, wall(0)).retry_after(v.as_bytes())),
    );
    assert_eq!(m.poll_action(), far(t0));
}

/// The same through the script runner and the independent checker, which
/// reads the values with its own digit scanner.
#[test]
fn the_checker_agrees_on_hostile_delta_seconds() {
    let t0 = origin();
    let policy = RetryPolicy::default();
    let m = retry_machine(t0, 60 * S);
    let checker = Checker::for_retry(&policy, &get()).deadline(t0 + 60 * S);
    let script = [
        Input::status(503).retry_after(padded(80, "3")),
        Input::Wake,
        Input::status(429).retry_after(padded(5, "99999999999999999999")),
    ];
    let trace = run_script(m, checker, &script).unwrap();
    assert_eq!(Action::Stop(trace.outcome), far(trace.ended_at));
    assert_eq!(trace.gaps(), [10 * MS + 3 * S]);
}

// ---------------------------------------------------------------------------
// 1 (d): leap seconds.
// ---------------------------------------------------------------------------

/// `Retry-After: Wed, 31 Dec 2008 23:59:60 GMT` is a valid HTTP-date (RFC
/// 9110 allows second 60): 30 s after a `Date` of 23:59:30.
#[test]
fn a_leap_second_retry_after_date_is_honoured() {
    let t0 = origin();
    for form in [
        &b"Wed, 31 Dec 2008 23:59:60 GMT"[..],
        b"Wednesday, 31-Dec-08 23:59:60 GMT",
        b"Wed Dec 31 23:59:60 2008",
    ] {
        let mut m = retry_machine(t0, 60 * S);
        let p = send(&mut m);
        m.handle(
            t0,
            Event::Response(
                Response::new(p.id, 503, wall(0))
                    .retry_after(form)
                    .date(b"Wed, 31 Dec 2008 23:59:30 GMT"),
            ),
        );
        assert_eq!(
            m.poll_action(),
            Action::SleepUntil(t0 + 30 * S),
            "{:?}",
            form.escape_ascii()
        );
    }
}

/// A `Date` header on the leap second still cancels clock skew (it was
/// refused, so the date was measured against our wall clock instead).
#[test]
fn a_leap_second_date_header_is_honoured() {
    let t0 = origin();
    let mut m = retry_machine(t0, 60 * S);
    let p = send(&mut m);
    // Our wall clock is a day behind the server's.
    m.handle(
        t0,
        Event::Response(
            Response::new(p.id, 429, wall(BEFORE_LEAP - 86_400))
                .retry_after(b"Thu, 01 Jan 2009 00:00:20 GMT")
                .date(b"Wed, 31 Dec 2008 23:59:60 GMT"),
        ),
    );
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 20 * S));
}

// ---------------------------------------------------------------------------
// 1 (c): Retry-After on every answer a PollMachine acts on.
// ---------------------------------------------------------------------------

fn rejection(p: &SendPlan, retry_after: &'static [u8]) -> Event<'static> {
    Event::Response(
        Response::new(p.id, 400, wall(0))
            .job(JobReport::LongPollUnsupported)
            .retry_after(retry_after),
    )
}

/// The long-poll rejection (`400 VALIDATION_ERROR`) with `Retry-After: 38`:
/// the machine falls back, says so once, and polls again after 38 s, not
/// at once.
#[test]
fn retry_after_on_the_long_poll_rejection_is_honoured() {
    let t0 = origin();
    let mut m = poll_machine(PollPolicy::default(), t0, 120 * S);
    let p = send(&mut m);
    assert!(p.long_poll.is_some());
    let t1 = t0 + 20 * MS;
    m.handle(t1, rejection(&p, b"38"));
    assert_eq!(m.take_notice(), Some(Notice::LongPollUnsupported));
    assert_eq!(m.mode(), PollMode::Backoff);
    assert_eq!(m.poll_action(), Action::SleepUntil(t1 + 38 * S));
    let rec = m.take_record().unwrap();
    assert_eq!(rec.retry_after, RetryAfterNote::Valid(38 * S));
    assert_eq!(rec.next.unwrap().source, DelaySource::RetryAfter);
    m.handle(t1 + 38 * S, Event::Tick);
    assert_eq!(send(&mut m).long_poll, None);
}

/// Over the automatic wait cap on the rejection (120 s, or more digits
/// than fit in 64 bits): the wait ends `RateLimited`, never truncated.
#[test]
fn an_over_cap_retry_after_on_the_rejection_ends_rate_limited() {
    let t0 = origin();
    for (value, stop) in [
        (
            &b"120"[..],
            Action::Stop(Outcome::RateLimited {
                retry_at: Some(t0 + 120 * S),
            }),
        ),
        (b"99999999999999999999", far(t0)),
    ] {
        let mut m = poll_machine(PollPolicy::default(), t0, 600 * S);
        let p = send(&mut m);
        m.handle(t0, rejection(&p, value));
        assert_eq!(m.poll_action(), stop, "{:?}", value.escape_ascii());
        assert_eq!(m.sends(), 1);
    }
}

/// A pending answer (`202` + `Retry-After`) with an overflowing value ends
/// the wait `RateLimited`; zero-padded, it is honoured; a leap-second date
/// too.
#[test]
fn hostile_retry_after_on_a_pending_answer() {
    let t0 = origin();
    let pending = |p: &SendPlan, ra: &'static [u8]| {
        Event::Response(
            Response::new(p.id, 202, wall(BEFORE_LEAP - 2))
                .job(JobReport::State("running"))
                .retry_after(ra),
        )
    };
    let mut m = poll_machine(PollPolicy::default(), t0, 600 * S);
    let p = send(&mut m);
    m.handle(t0, pending(&p, b"99999999999999999999"));
    assert_eq!(m.poll_action(), far(t0));

    let mut m = poll_machine(PollPolicy::default(), t0, 600 * S);
    let p = send(&mut m);
    let v: &'static str = Box::leak(padded(70, "7").into_boxed_str());
    m.handle(t0, pending(&p, v.as_bytes()));
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 7 * S));

    // No Date header: against the wall clock, 23:59:57; 23:59:60 is 3 s on.
    let mut m = poll_machine(PollPolicy::default(), t0, 600 * S);
    let p = send(&mut m);
    m.handle(t0, pending(&p, b"Wed, 31 Dec 2008 23:59:60 GMT"));
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 3 * S));
}

/// A failed poll (503) with an overflowing `Retry-After` ends the wait
/// `RateLimited` instead of retrying at backoff.
#[test]
fn an_overflowing_retry_after_on_a_failed_poll_ends_rate_limited() {
    let t0 = origin();
    let mut m = poll_machine(PollPolicy::default(), t0, 600 * S);
    let p = send(&mut m);
    m.handle(
        t0,
        Event::Response(Response::new(p.id, 503, wall(0)).retry_after(b"99999999999999999999")),
    );
    assert_eq!(m.poll_action(), far(t0));
}

// ---------------------------------------------------------------------------
// 2: a wait that gives up with budget left.
// ---------------------------------------------------------------------------

/// A server that ignores `waitSeconds` and answers at once with latency
/// `latency`, the job reaching `passed` at `done` (never if `None`); every
/// step checked by the `PollChecker` with the test's own deadline.
fn impatient_server(
    t0: Instant,
    policy: PollPolicy,
    timeout: Duration,
    latency: Duration,
    done: Option<Instant>,
) -> Trace {
    let sim = Simulator::new(t0).server(move |now, _plan| {
        let state = if done.is_some_and(|d| now >= d) {
            "passed"
        } else {
            "running"
        };
        Scripted::status(200).after(latency).state(state)
    });
    let m = poll_machine(policy, t0, timeout);
    let checker = PollChecker::new(&policy, m.request(), t0 + timeout);
    sim.check_poll(checker).run(m).unwrap()
}

fn passed() -> Outcome {
    Outcome::Terminal {
        state: StateName::new("passed").unwrap(),
    }
}

/// `polite wait --timeout 5s` against a server that ignores `waitSeconds`:
/// it used to stop `timed out` at 3.0 s with 2 s unused, missing a job that
/// ends at 4 s. It now polls once a second to the last second (a plain poll
/// when under a whole second is left), then once more at the last useful
/// instant.
#[test]
fn a_server_that_ignores_the_wait_parameter_is_polled_to_the_end_of_the_budget() {
    let t0 = origin();
    let latency = 17 * MS;
    let deadline = t0 + 5 * S;
    // A job that ends at 4 s is seen.
    let run = impatient_server(t0, PollPolicy::default(), 5 * S, latency, Some(t0 + 4 * S));
    assert_eq!(run.outcome, passed());
    assert!(run.ended_at < deadline);

    // A job that never ends: long polls at 0, 1, 2, 3 s (at least 1 s
    // apart), each asking for the time left but a second (room for the
    // held answer to come back: `PollPolicy::ANSWER_ROOM`), a plain poll at
    // 4 s (no whole second left to ask for), then one final plain poll
    // 34 ms (twice the latency) before the deadline.
    let run = impatient_server(t0, PollPolicy::default(), 5 * S, latency, None);
    let sends: Vec<(Instant, Option<u32>)> = run.sends().map(|(t, p)| (t, p.long_poll)).collect();
    assert_eq!(
        sends,
        [
            (t0, Some(4)),
            (t0 + S, Some(3)),
            (t0 + 2 * S, Some(2)),
            (t0 + 3 * S, Some(1)),
            (t0 + 4 * S, None),
            (deadline - 2 * latency, None),
        ]
    );
    assert_eq!(
        run.outcome,
        Outcome::TimedOut {
            needed: Some(deadline - 2 * latency + S)
        }
    );
    assert_eq!(run.ended_at, deadline - latency);

    // A job that ends at 4.5 s is seen by that final poll.
    let run = impatient_server(
        t0,
        PollPolicy::default(),
        5 * S,
        latency,
        Some(t0 + 4500 * MS),
    );
    assert_eq!(run.outcome, passed());
    assert_eq!(run.ended_at, deadline - latency);
}

/// Backoff mode: polls at 0, 2 and 6 s (no jitter); the next (14 s) would
/// fall after a 10 s deadline, so one final poll goes at the last useful
/// instant instead of stopping at 6 s; a job that ends at 8 s is seen.
#[test]
fn backoff_mode_polls_at_the_last_useful_instant() {
    let t0 = origin();
    let mut policy = PollPolicy {
        long_poll_first: false,
        ..PollPolicy::default()
    };
    policy.backoff.jitter = polite_core::policy::Jitter::None;
    let latency = 5 * MS;
    let deadline = t0 + 10 * S;
    let run = impatient_server(t0, policy, 10 * S, latency, Some(t0 + 8 * S));
    assert_eq!(run.outcome, passed());
    let sends: Vec<Instant> = run.sends().map(|(t, _)| t).collect();
    // 2·latency is under the 10 ms floor.
    assert_eq!(
        sends,
        [
            t0,
            t0 + latency + 2 * S,
            t0 + 2 * latency + 6 * S,
            deadline - 10 * MS
        ]
    );
    let last = run.records.last().unwrap();
    assert_eq!(last.outcome, Some(passed()));
}

/// The final poll never goes before the server's `Retry-After`, goes at
/// most once ahead of the schedule, and is not sent when it could not be
/// answered inside the deadline.
#[test]
fn the_final_poll_respects_the_server_and_the_round_trip() {
    let t0 = origin();
    let mut policy = PollPolicy {
        long_poll_first: false,
        ..PollPolicy::default()
    };
    policy.backoff.jitter = polite_core::policy::Jitter::None;
    let running = |p: &SendPlan, ra: Option<&'static [u8]>| {
        let mut r = Response::new(p.id, 202, wall(0)).job(JobReport::State("running"));
        r.retry_after = ra;
        Event::Response(r)
    };

    // 1.025 s budget; the schedule says 2 s (after the deadline), the
    // server 1 s; 10 ms round trip. The last useful instant (20 ms before
    // the deadline, 1.005 s) is before the server's 1.01 s: the final poll
    // goes at the server's instant, not before.
    let mut m = poll_machine(policy, t0, 1025 * MS);
    let p = send(&mut m);
    let t1 = t0 + 10 * MS;
    m.handle(t1, running(&p, Some(b"1")));
    assert_eq!(m.poll_action(), Action::SleepUntil(t1 + S));
    let rec = m.take_record().unwrap();
    assert_eq!(rec.next.unwrap().delay, S);
    m.handle(t1 + S, Event::Tick);
    let p = send(&mut m);
    // Still running; the one final poll is spent: stop at once.
    m.handle(t1 + S + 5 * MS, running(&p, None));
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::TimedOut {
            needed: Some(t1 + S + 5 * MS + 4 * S)
        })
    );

    // A slow server: the first answer takes 1 s of a 1.5 s budget; a poll
    // now would come back after the deadline, so the wait stops at once
    // with half a second left rather than send it for nothing.
    let mut m = poll_machine(policy, t0, 1500 * MS);
    let p = send(&mut m);
    m.handle(t0 + S, running(&p, None));
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::TimedOut {
            needed: Some(t0 + 3 * S)
        })
    );
}

/// The checker catches a machine that gives up with budget left (the
/// rule the old `PollMachine` broke).
#[test]
fn the_checker_catches_a_wait_that_gives_up_with_budget_left() {
    let t0 = origin();
    let deadline = t0 + 5 * S;
    let mut c = PollChecker::new(&PollPolicy::default(), &get(), deadline);
    let plan = SendPlan {
        id: polite_core::SendId::default(),
        request: RequestId(1),
        abort_at: deadline + 2 * S,
        long_poll: Some(4),
    };
    c.output(t0, &Action::Send(plan)).unwrap();
    let t1 = t0 + 17 * MS;
    c.input(
        t1,
        &Event::Response(Response::new(plan.id, 200, wall(0)).job(JobReport::State("running"))),
    );
    let err = c
        .output(t1, &Action::Stop(Outcome::TimedOut { needed: None }))
        .unwrap_err();
    assert_eq!(err.rule, "gave-up-early");
}

/// The explorer's hostile alphabet, one letter at a time, through the
/// script runner: each is honoured as SPEC §2.1 says.
#[test]
fn hostile_poll_scripts_end_as_the_spec_says() {
    let t0 = origin();
    let policy = PollPolicy::default();
    let run = |script: &[Input], timeout: Duration| {
        let m = poll_machine(policy, t0, timeout);
        let c = PollChecker::new(&policy, &get(), t0 + timeout);
        let mut r = ScriptRunner::new(t0, m, c);
        r.play(script).unwrap();
        r.finish().unwrap()
    };
    let trace = run(
        &[
            Input::status(400)
                .job(Job::LongPollUnsupported)
                .retry_after("38"),
            Input::WakeIfIdle,
            Input::status(200).state("passed"),
        ],
        40 * S,
    );
    assert_eq!(trace.outcome, passed());
    assert_eq!(trace.gaps(), [10 * MS + 38 * S]);
    let trace = run(
        &[Input::status(400)
            .job(Job::LongPollUnsupported)
            .retry_after("99999999999999999999")],
        40 * S,
    );
    assert_eq!(Action::Stop(trace.outcome), far(t0 + 10 * MS));
}

/// A batch item answered `429` with an overflowing `Retry-After` ends
/// `RateLimited` a century away, and the batch does not restart it after
/// a backoff (a `retry_at` of `None` used to read as "the server named no
/// time", which a batch restarts after `backoff.cap`).
#[test]
fn a_batch_does_not_restart_an_item_the_server_shut_out() {
    use polite_core::pace::Unpaced;
    use polite_core::{BatchMachine, BatchPolicy};
    let t0 = origin();
    let mut b = BatchMachine::new(
        BatchPolicy::default(),
        vec![get()],
        SplitMix64::new(1),
        Unpaced,
        t0,
        60 * S,
    )
    .unwrap();
    let p = send(&mut b);
    b.handle(
        t0 + 10 * MS,
        Event::Response(Response::new(p.id, 429, wall(0)).retry_after(b"99999999999999999999")),
    );
    assert!(matches!(b.poll_action(), Action::Stop(_)));
    assert_eq!(Action::Stop(b.outcomes()[0].unwrap()), far(t0 + 10 * MS));
}
