//! Scenario tests for `PollMachine` through the public API, in virtual time.
//!
//! Servers are closures of the send instant and the plan (via
//! `Simulator::server`); each scripted answer carries the job report its
//! body would hold, and the `PollChecker` checks every step.
#![allow(clippy::field_reassign_with_default)] // policies are spelled as deltas from the default

use std::time::{Duration, Instant, UNIX_EPOCH};

use polite_core::policy::PolicyError;
use polite_core::poll::{JobReport, PollMode, StateName, TerminalStates};
use polite_core::record::{DelaySource, RetryAfterNote};
use polite_core::{
    Action, Event, Method, Notice, Outcome, PollMachine, PollPolicy, Reply, RequestId, RequestInfo,
    Response, RetryClass, SendPlan, SplitMix64, TransportErrorKind,
};
use polite_testing::{Job as Body, PollChecker, Scripted, Simulator, Trace, origin};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);
const LATENCY: Duration = Duration::from_millis(5);

fn get() -> RequestInfo {
    RequestInfo::new(RequestId(1), Method::Get)
}

fn backoff_first() -> PollPolicy {
    let mut p = PollPolicy::default();
    p.long_poll_first = false;
    p
}

fn machine(policy: PollPolicy, t0: Instant, timeout: Duration) -> PollMachine<SplitMix64> {
    PollMachine::new(policy, get(), SplitMix64::new(1), t0, timeout).unwrap()
}

fn state(name: &str) -> Outcome {
    Outcome::Terminal {
        state: StateName::new(name).unwrap(),
    }
}

/// A remote job in virtual time, and the server that reports it.
#[derive(Clone, Copy, Debug)]
struct Job {
    /// When it turns `final_state`; `None`: never.
    done_at: Option<Instant>,
    final_state: &'static str,
    /// Whether the server honours the wait parameter (else it rejects it
    /// with 400 VALIDATION_ERROR).
    long_poll: bool,
}

impl Job {
    fn ending(at: Instant) -> Job {
        Job {
            done_at: Some(at),
            final_state: "passed",
            long_poll: true,
        }
    }

    fn never() -> Job {
        Job {
            done_at: None,
            final_state: "passed",
            long_poll: true,
        }
    }

    fn without_long_poll(mut self) -> Job {
        self.long_poll = false;
        self
    }

    fn state_at(&self, t: Instant) -> &'static str {
        if self.done_at.is_some_and(|d| d <= t) {
            self.final_state
        } else {
            "running"
        }
    }

    /// A long poll is held until the job ends or the wait elapses; a plain
    /// poll is answered at once. Every answer takes `LATENCY` to arrive.
    fn answer(&self, now: Instant, plan: &SendPlan) -> Scripted {
        match plan.long_poll {
            Some(_) if !self.long_poll => Scripted::status(400)
                .after(LATENCY)
                .job(Body::LongPollUnsupported),
            Some(n) => {
                let wait_end = now + Duration::from_secs(u64::from(n));
                let at = match self.done_at {
                    Some(d) if d < wait_end => d.max(now),
                    _ => wait_end,
                };
                Scripted::status(200)
                    .after(at - now + LATENCY)
                    .state(self.state_at(at))
            }
            None => Scripted::status(200)
                .after(LATENCY)
                .state(self.state_at(now)),
        }
    }
}

/// Runs `m` in the simulator, every step checked by the `PollChecker`.
fn simulate(sim: Simulator, m: PollMachine<SplitMix64>) -> Trace {
    let checker = PollChecker::for_machine(&m);
    sim.check_poll(checker).run(m).unwrap()
}

/// Runs `m` against `job`, with `first` answers (and their reports) before
/// the job server takes over; checked by the `PollChecker`.
fn run_with(
    t0: Instant,
    job: Job,
    first: Vec<Scripted>,
    cancel_at: Option<Instant>,
    m: PollMachine<SplitMix64>,
) -> Trace {
    let mut sim = Simulator::new(t0)
        .replies(first)
        .server(move |now, plan| job.answer(now, plan));
    if let Some(c) = cancel_at {
        sim = sim.cancel_at(c);
    }
    simulate(sim, m)
}

fn run(t0: Instant, job: Job, m: PollMachine<SplitMix64>) -> Trace {
    run_with(t0, job, Vec::new(), None, m)
}

fn sleeps(run: &Trace) -> impl Iterator<Item = Instant> + '_ {
    run.steps.iter().filter_map(|s| match s.action {
        Action::SleepUntil(t) => Some(t),
        _ => None,
    })
}

fn running(id: polite_core::SendId) -> Response<'static> {
    Response::new(id, 200, UNIX_EPOCH).job(JobReport::State("running"))
}

fn send(m: &mut PollMachine<SplitMix64>) -> SendPlan {
    match m.poll_action() {
        Action::Send(p) => p,
        other => panic!("expected a send, got {other:?}"),
    }
}

#[test]
fn long_poll_sees_the_end_within_10_ms_with_at_most_3_requests() {
    let t0 = origin();
    let done = t0 + 60 * S;
    let run = run(
        t0,
        Job::ending(done),
        machine(PollPolicy::default(), t0, 120 * S),
    );
    assert_eq!(run.outcome, state("passed"));
    assert!(run.sends().count() <= 3, "{:?}", run.steps);
    assert!(run.ended_at >= done);
    assert!(run.ended_at - done <= 10 * MS, "{:?}", run.ended_at - done);
    // Sent at once each time (the server already waited), asking 25 s.
    let sends: Vec<_> = run.sends().collect();
    assert_eq!(sends[0].0, t0);
    for w in sends.windows(2) {
        assert_eq!(w[1].0 - w[0].0, 25 * S + LATENCY);
    }
    assert!(sends.iter().all(|(_, p)| p.long_poll == Some(25)));
    // Every sleep is the in-flight "until the deadline" sentinel: never a
    // real pause between polls.
    assert!(sleeps(&run).all(|t| t == t0 + 120 * S));
    assert!(run.notices.is_empty());
    let last = run.records.last().unwrap();
    assert_eq!(last.outcome, Some(state("passed")));
    assert_eq!(last.reply, Reply::Status(200));
}

#[test]
fn without_long_poll_support_the_backoff_schedule_is_2_4_8_15_15() {
    let t0 = origin();
    let done = t0 + 60 * S;
    for seed in 0..20 {
        let m = PollMachine::new(
            PollPolicy::default(),
            get(),
            SplitMix64::new(seed),
            t0,
            120 * S,
        )
        .unwrap();
        let run = run(t0, Job::ending(done).without_long_poll(), m);
        assert_eq!(run.outcome, state("passed"), "seed {seed}");
        // Told once, when the first answer arrived.
        assert_eq!(
            run.notices,
            vec![(t0 + LATENCY, Notice::LongPollUnsupported)]
        );
        assert_eq!(
            Notice::LongPollUnsupported.to_string(),
            "server does not support long-poll; switching to backoff"
        );
        let sends: Vec<_> = run.sends().collect();
        assert_eq!(sends[0].1.long_poll, Some(25));
        assert!(sends[1..].iter().all(|(_, p)| p.long_poll.is_none()));
        // The plain poll follows the rejection at once.
        assert_eq!(sends[1].0, t0 + LATENCY);
        // Every planned delay after a pending answer is on the schedule, ±20 %.
        let planned: Vec<_> = run.records.iter().skip(1).filter_map(|r| r.next).collect();
        let schedule = [2u64, 4, 8, 15, 15, 15, 15, 15];
        assert!(planned.len() >= 5, "{planned:?}");
        for (i, p) in planned.iter().enumerate() {
            let base = Duration::from_secs(schedule[i]);
            assert!(
                p.delay >= base * 4 / 5 && p.delay < base * 6 / 5,
                "seed {seed} delay {i}: {:?} for {base:?}",
                p.delay
            );
            assert_eq!(p.source, DelaySource::Schedule);
            // ...and the poll is sent exactly then.
            assert_eq!(sends[i + 2].0, p.send_at);
            assert_eq!(p.send_at - sends[i + 1].0, p.delay + LATENCY);
        }
        // Seen at the first poll after the job ended.
        let (last, _) = sends.last().unwrap();
        assert!(*last >= done);
        assert!(sends[..sends.len() - 1].iter().all(|(t, _)| *t < done));
        assert_eq!(run.ended_at, *last + LATENCY);
    }
}

#[test]
fn a_40_s_timeout_with_a_job_that_never_ends_stops_by_40_s_in_both_modes() {
    let t0 = origin();
    let deadline = t0 + 40 * S;
    // Long poll: 25 s, then the whole seconds left but the second kept for
    // the answer to come back (14.995 s left: 13); under two seconds are
    // left when that answer comes, so no whole second to ask for: a plain
    // poll at once; its answer comes back in 5 ms, a plain poll a second
    // after the last, and as the next (1 s later) would fall after the
    // deadline, one final poll at the last useful instant (10 ms before
    // the deadline: twice the latency, at least 10 ms), then it stops.
    let run_lp = run(t0, Job::never(), machine(PollPolicy::default(), t0, 40 * S));
    let waits: Vec<_> = run_lp.sends().map(|(_, p)| p.long_poll).collect();
    assert_eq!(waits, vec![Some(25), Some(13), None, None, None]);
    let last = run_lp.sends().last().unwrap().0;
    assert_eq!(last, deadline - 10 * MS);
    assert_eq!(
        run_lp.outcome,
        Outcome::TimedOut {
            needed: Some(last + S)
        }
    );
    assert_eq!(run_lp.ended_at, deadline - 10 * MS + LATENCY);
    // Backoff: ~2 + 4 + 8 + 15 s of waits; the next 15 s would end past
    // the deadline, so one final poll at the last useful instant, and it
    // stops right after its answer, not at 40 s.
    for (name, policy, job) in [
        (
            "server without long poll",
            PollPolicy::default(),
            Job::never().without_long_poll(),
        ),
        ("backoff first", backoff_first(), Job::never()),
    ] {
        let run = run(t0, job, machine(policy, t0, 40 * S));
        let Outcome::TimedOut {
            needed: Some(needed),
        } = run.outcome
        else {
            panic!("{name}: {:?}", run.outcome)
        };
        assert!(needed >= deadline, "{name}");
        assert!(run.ended_at < deadline, "{name}");
        let last_send = run.sends().last().unwrap().0;
        assert_eq!(last_send, deadline - 10 * MS, "{name}: a final poll");
        assert_eq!(run.ended_at, last_send + LATENCY, "{name}: stopped at once");
        assert!(sleeps(&run).all(|t| t <= deadline), "{name}");
        assert!(run.sends().all(|(t, _)| t < deadline), "{name}");
    }
    assert!(sleeps(&run_lp).all(|t| t <= deadline));
    assert!(run_lp.sends().all(|(t, _)| t < deadline));
}

#[test]
fn the_wait_parameter_never_exceeds_the_remaining_budget() {
    let t0 = origin();
    let mut m = machine(PollPolicy::default(), t0, 32 * S);
    let p = send(&mut m);
    assert_eq!(p.long_poll, Some(25));
    m.handle(t0 + 25 * S, Event::Response(running(p.id)));
    // 7 s left: 6, a second kept for the held answer to come back before
    // the deadline (`PollPolicy::ANSWER_ROOM`; asking 7 made the answer of
    // a server that holds it as asked come after the deadline: TimedOut).
    assert_eq!(send(&mut m).long_poll, Some(6));

    // 7.9 s left: whole seconds only (6.9 → 6).
    let mut m = machine(PollPolicy::default(), t0, 7 * S + 900 * MS);
    assert_eq!(send(&mut m).long_poll, Some(6));

    // 26 s left: the whole 25 s leaves the second; 25.5 s does not.
    let mut m = machine(PollPolicy::default(), t0, 26 * S);
    assert_eq!(send(&mut m).long_poll, Some(25));
    let mut m = machine(PollPolicy::default(), t0, 25 * S + 500 * MS);
    assert_eq!(send(&mut m).long_poll, Some(24));

    // A smaller cap is honoured.
    let mut p = PollPolicy::default();
    p.max_long_poll = 10 * S + 500 * MS;
    let mut m = machine(p, t0, 60 * S);
    assert_eq!(send(&mut m).long_poll, Some(10));
}

/// Issue 16: under one whole second left, a long poll would ask
/// `waitSeconds=0` (a busy loop); the machine sends a plain poll instead of
/// giving up with budget left.
#[test]
fn under_one_second_left_a_long_poll_becomes_a_plain_poll() {
    let t0 = origin();
    let mut m = machine(PollPolicy::default(), t0, 999 * MS);
    assert_eq!(send(&mut m).long_poll, None);
    assert_eq!(m.mode(), PollMode::LongPoll);
    // In backoff mode a plain poll as ever.
    let mut m = machine(backoff_first(), t0, 999 * MS);
    assert_eq!(send(&mut m).long_poll, None);
}

#[test]
fn a_429_with_retry_after_5_delays_the_next_poll_by_5_s() {
    let t0 = origin();
    for policy in [PollPolicy::default(), backoff_first()] {
        let done = t0 + 20 * S;
        let run = run_with(
            t0,
            Job::ending(done),
            vec![Scripted::status(429).retry_after("5").after(LATENCY)],
            None,
            machine(policy, t0, 60 * S),
        );
        assert_eq!(run.outcome, state("passed"));
        let sends: Vec<_> = run.sends().map(|(t, _)| t).collect();
        assert_eq!(sends[1] - sends[0], 5 * S + LATENCY);
        let rec = run.records[0];
        assert_eq!(rec.class, Some(RetryClass::RateLimited));
        assert_eq!(rec.retry_after, RetryAfterNote::Valid(5 * S));
        let next = rec.next.unwrap();
        assert_eq!((next.delay, next.source), (5 * S, DelaySource::RetryAfter));
    }
}

#[test]
fn a_503_is_retried_by_the_retry_rules() {
    let t0 = origin();
    let run = run_with(
        t0,
        Job::ending(t0 + 30 * S),
        vec![Scripted::status(503).after(LATENCY)],
        None,
        machine(PollPolicy::default(), t0, 60 * S),
    );
    assert_eq!(run.outcome, state("passed"));
    let rec = run.records[0];
    assert_eq!(rec.class, Some(RetryClass::ServerError));
    let next = rec.next.unwrap();
    // Retry rules: first server-error retry, 250 ms with full jitter.
    assert_eq!(next.source, DelaySource::Backoff);
    assert!(next.delay < 250 * MS);
    // The retry is a long poll again.
    let sends: Vec<_> = run.sends().collect();
    assert_eq!(sends[1].0, next.send_at);
    assert_eq!(sends[1].1.long_poll, Some(25));
}

#[test]
fn separate_503_blips_do_not_end_a_long_wait_but_consecutive_ones_do() {
    let t0 = origin();
    let done = t0 + 600 * S;
    let job = Job::ending(done);
    // Every other poll fails with 503: twelve blips in ten minutes, each
    // followed by a proper answer; the budget of 4 bounds consecutive ones.
    let mut n = 0u32;
    let sim = Simulator::new(t0).server(move |now, plan| {
        n += 1;
        if n % 2 == 1 && now < done - 60 * S {
            Scripted::status(503).after(LATENCY)
        } else {
            job.answer(now, plan)
        }
    });
    let run = simulate(sim, machine(PollPolicy::default(), t0, 900 * S));
    assert_eq!(run.outcome, state("passed"));
    let blips = run
        .records
        .iter()
        .filter(|r| r.reply == Reply::Status(503))
        .count();
    assert!(blips > 4, "{blips}");

    // Five 503s in a row: the fifth exhausts the budget of 4 retries.
    let sim = Simulator::new(t0).server(|_, _| Scripted::status(503).after(LATENCY));
    let run = simulate(sim, machine(PollPolicy::default(), t0, 900 * S));
    assert_eq!(run.sends().count(), 5);
    assert_eq!(
        run.outcome,
        Outcome::RetriesExhausted {
            class: RetryClass::ServerError,
            last: Reply::Status(503)
        }
    );
}

#[test]
fn cancel_during_a_backoff_sleep_stops_at_once() {
    let t0 = origin();
    let cancel = t0 + S; // inside the first ~2 s sleep
    let run = run_with(
        t0,
        Job::never(),
        Vec::new(),
        Some(cancel),
        machine(backoff_first(), t0, 60 * S),
    );
    assert_eq!(run.outcome, Outcome::Cancelled);
    assert_eq!(run.ended_at, cancel);
    assert_eq!(run.sends().count(), 1);
}

#[test]
fn non_terminal_states_keep_polling() {
    let t0 = origin();
    let long_name = "waiting-for-an-available-runner-in-pool-7"; // over StateName::CAPACITY
    assert!(long_name.len() > StateName::CAPACITY);
    let states = ["queued", "running", long_name, "RUNNING", "passed"];
    let mut next = states.into_iter();
    let sim = Simulator::new(t0).server(move |_, _| {
        let s = next.next().unwrap_or("passed");
        Scripted::status(200).after(LATENCY).state(s)
    });
    let run = simulate(sim, machine(backoff_first(), t0, 120 * S));
    assert_eq!(run.outcome, state("passed"));
    assert_eq!(run.sends().count(), states.len());
    assert!(run.records[..4].iter().all(|r| r.outcome.is_none()));
}

#[test]
fn early_long_poll_answers_are_spaced_a_second_apart() {
    // A server that ignores the wait parameter without rejecting it
    // answers at once: without a floor that would be a hot loop.
    let t0 = origin();
    let done = t0 + 10 * S;
    let sim = Simulator::new(t0).server(move |now, _| {
        let s = if now >= done { "passed" } else { "queued" };
        Scripted::status(200).after(LATENCY).state(s)
    });
    let run = simulate(sim, machine(PollPolicy::default(), t0, 60 * S));
    assert_eq!(run.outcome, state("passed"));
    let sends: Vec<_> = run.sends().map(|(t, _)| t).collect();
    assert_eq!(sends.len(), 11);
    assert!(sends.windows(2).all(|w| w[1] - w[0] == S));
    // With the floor off it re-polls at once, as the user asked.
    let mut p = PollPolicy::default();
    p.min_long_poll_interval = Duration::ZERO;
    let mut m = machine(p, t0, 60 * S);
    let first = send(&mut m);
    m.handle(t0 + LATENCY, Event::Response(running(first.id)));
    assert!(matches!(m.poll_action(), Action::Send(_)));
}

#[test]
fn an_answer_after_the_deadline_is_timed_out_even_a_terminal_one() {
    let t0 = origin();
    let mut m = machine(PollPolicy::default(), t0, 10 * S);
    let p = send(&mut m);
    assert_eq!(p.long_poll, Some(9));
    assert_eq!(p.abort_at, t0 + 12 * S);
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 10 * S));
    m.handle(
        t0 + 10 * S + 300 * MS,
        Event::Response(Response::new(p.id, 200, UNIX_EPOCH).job(JobReport::State("passed"))),
    );
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::TimedOut { needed: None })
    );
    let rec = m.take_record().unwrap();
    assert_eq!(rec.reply, Reply::Status(200));
    assert_eq!(rec.outcome, Some(Outcome::TimedOut { needed: None }));
}

#[test]
fn a_tick_at_the_deadline_with_a_poll_in_flight_times_out() {
    let t0 = origin();
    let run = simulate(
        Simulator::new(t0).replies([Scripted::hang()]),
        machine(PollPolicy::default(), t0, 3 * S),
    );
    assert_eq!(run.outcome, Outcome::TimedOut { needed: None });
    assert_eq!(run.ended_at, t0 + 3 * S);
}

#[test]
fn same_seed_same_trace() {
    let t0 = origin();
    let go = |seed| {
        let m = PollMachine::new(
            PollPolicy::default(),
            get(),
            SplitMix64::new(seed),
            t0,
            90 * S,
        )
        .unwrap();
        run(t0, Job::ending(t0 + 70 * S).without_long_poll(), m)
    };
    let (a, b, c) = (go(5), go(5), go(6));
    assert_eq!(a, b);
    assert_ne!(a.gaps(), c.gaps());
}

#[test]
fn terminal_states_are_configurable_and_handed_back() {
    let t0 = origin();
    let mut p = PollPolicy::default();
    p.terminal_states = TerminalStates::of(&["succeeded", "errored"]).unwrap();
    let mut m = machine(p, t0, 60 * S);
    let first = send(&mut m);
    // `passed` is no longer terminal here.
    m.handle(
        t0 + S,
        Event::Response(Response::new(first.id, 200, UNIX_EPOCH).job(JobReport::State("passed"))),
    );
    let second = send(&mut m);
    m.handle(
        t0 + 2 * S,
        Event::Response(Response::new(second.id, 200, UNIX_EPOCH).job(JobReport::State("errored"))),
    );
    assert_eq!(m.poll_action(), Action::Stop(state("errored")));
    assert_eq!(m.outcome(), Some(state("errored")));
}

#[test]
fn a_success_without_a_job_report_is_not_retryable() {
    let t0 = origin();
    let mut m = machine(PollPolicy::default(), t0, 60 * S);
    let p = send(&mut m);
    m.handle(
        t0 + S,
        Event::Response(Response::new(p.id, 200, UNIX_EPOCH)),
    );
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::NotRetryable { status: 200 })
    );
}

#[test]
fn final_statuses_end_the_wait() {
    let t0 = origin();
    for status in [400, 401, 404, 410, 501, 0, 600] {
        let mut m = machine(PollPolicy::default(), t0, 60 * S);
        let p = send(&mut m);
        m.handle(
            t0 + S,
            Event::Response(Response::new(p.id, status, UNIX_EPOCH)),
        );
        assert_eq!(
            m.poll_action(),
            Action::Stop(Outcome::NotRetryable { status })
        );
    }
}

#[test]
fn a_rejected_wait_parameter_that_was_not_sent_is_final() {
    let t0 = origin();
    let mut m = machine(backoff_first(), t0, 60 * S);
    assert_eq!(m.mode(), PollMode::Backoff);
    let p = send(&mut m);
    assert_eq!(p.long_poll, None);
    m.handle(
        t0 + S,
        Event::Response(Response::new(p.id, 400, UNIX_EPOCH).job(JobReport::LongPollUnsupported)),
    );
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::NotRetryable { status: 400 })
    );
    assert_eq!(m.take_notice(), None);
}

#[test]
fn the_switch_to_backoff_is_permanent() {
    let t0 = origin();
    let mut m = machine(PollPolicy::default(), t0, 600 * S);
    let p = send(&mut m);
    m.handle(
        t0 + LATENCY,
        Event::Response(Response::new(p.id, 400, UNIX_EPOCH).job(JobReport::LongPollUnsupported)),
    );
    assert_eq!(m.mode(), PollMode::Backoff);
    assert_eq!(m.take_notice(), Some(Notice::LongPollUnsupported));
    let mut now = t0 + LATENCY;
    for _ in 0..20 {
        let p = send(&mut m);
        assert_eq!(p.long_poll, None);
        now += LATENCY;
        m.handle(now, Event::Response(running(p.id)));
        assert_eq!(m.take_notice(), None);
        let Action::SleepUntil(t) = m.poll_action() else {
            break;
        };
        now = t;
        m.handle(now, Event::Tick);
    }
    assert_eq!(m.mode(), PollMode::Backoff);
}

#[test]
fn a_failed_non_replayable_poll_is_never_resent_but_pending_ones_repoll() {
    let t0 = origin();
    let post = RequestInfo::new(RequestId(2), Method::Post);
    let mut m =
        PollMachine::new(PollPolicy::default(), post, SplitMix64::new(1), t0, 60 * S).unwrap();
    let p = send(&mut m);
    m.handle(t0 + S, Event::Response(running(p.id)));
    let p = send(&mut m);
    assert_eq!(p.id.attempt, 1);
    m.handle(
        t0 + 2 * S,
        Event::TransportError(p.id, TransportErrorKind::Timeout),
    );
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::NotReplayable {
            last: Reply::Transport(TransportErrorKind::Timeout)
        })
    );
    assert_eq!(m.sends(), 2);
}

#[test]
fn retry_after_on_a_pending_answer_is_honoured() {
    let t0 = origin();
    let mut m = machine(PollPolicy::default(), t0, 600 * S);
    let p = send(&mut m);
    m.handle(t0 + S, Event::Response(running(p.id).retry_after(b"30")));
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 31 * S));
    let next = m.take_record().unwrap().next.unwrap();
    assert_eq!((next.delay, next.source), (30 * S, DelaySource::RetryAfter));
    // Over the automatic wait cap: hand it to the caller, do not poll early.
    m.handle(t0 + 31 * S, Event::Tick);
    let p = send(&mut m);
    m.handle(
        t0 + 32 * S,
        Event::Response(running(p.id).retry_after(b"120")),
    );
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::RateLimited {
            retry_at: Some(t0 + 152 * S)
        })
    );
}

#[test]
fn a_retry_landing_in_the_last_second_of_a_long_poll_wait_stops_at_once() {
    let t0 = origin();
    let mut m = machine(PollPolicy::default(), t0, 10 * S);
    let p = send(&mut m);
    // 429 at 6 s asking for 3.5 s → the next long poll would have 0.5 s.
    let at = t0 + 6 * S;
    m.handle(
        at,
        Event::Response(Response::new(p.id, 429, UNIX_EPOCH).retry_after(b"4")),
    );
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::TimedOut {
            needed: Some(at + 4 * S)
        })
    );
}

#[test]
fn a_response_for_an_old_session_generation_is_stale() {
    let t0 = origin();
    let req = get().with_generation(4);
    let mut m =
        PollMachine::new(PollPolicy::default(), req, SplitMix64::new(1), t0, 60 * S).unwrap();
    let p = send(&mut m);
    m.handle(
        t0 + S,
        Event::Response(
            Response::new(p.id, 200, UNIX_EPOCH)
                .job(JobReport::State("passed"))
                .generation(5),
        ),
    );
    assert_eq!(m.poll_action(), Action::Stop(Outcome::Stale));
}

#[test]
fn late_answers_for_old_polls_are_ignored_and_time_going_backwards_is_clamped() {
    let t0 = origin() + 100 * S;
    let mut m = machine(backoff_first(), t0, 60 * S);
    let first = send(&mut m);
    m.handle(t0 + S, Event::Response(running(first.id)));
    let Action::SleepUntil(wake) = m.poll_action() else {
        panic!()
    };
    // A tick from the past does not fire the wait.
    m.handle(t0 - 50 * S, Event::Tick);
    assert_eq!(m.poll_action(), Action::SleepUntil(wake));
    m.handle(wake, Event::Tick);
    let second = send(&mut m);
    assert_eq!(second.id.attempt, 1);
    // The first poll's answer shows up again, terminal: ignored.
    m.handle(
        wake + MS,
        Event::Response(Response::new(first.id, 200, UNIX_EPOCH).job(JobReport::State("passed"))),
    );
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 60 * S));
    assert!(m.in_flight());
}

#[test]
fn stop_is_sticky() {
    let t0 = origin();
    let mut m = machine(PollPolicy::default(), t0, 10 * S);
    let p = send(&mut m);
    m.handle(t0, Event::Cancel);
    for _ in 0..3 {
        assert_eq!(m.poll_action(), Action::Stop(Outcome::Cancelled));
        m.handle(
            t0 + S,
            Event::Response(Response::new(p.id, 200, UNIX_EPOCH).job(JobReport::State("passed"))),
        );
        m.handle(t0 + 20 * S, Event::Tick);
    }
    assert_eq!(m.outcome(), Some(Outcome::Cancelled));
    assert_eq!(m.sends(), 1);
}

#[test]
fn an_invalid_policy_is_rejected_at_construction() {
    let mut p = PollPolicy::default();
    p.wait_param = "wait=1&x";
    let err = PollMachine::new(p, get(), SplitMix64::new(1), origin(), S).unwrap_err();
    assert!(matches!(
        err,
        PolicyError::Invalid {
            field: "wait_param",
            ..
        }
    ));
    assert!(err.to_string().contains("wait_param"));
}

#[test]
fn records_never_hold_header_values() {
    let t0 = origin();
    let mut m = machine(PollPolicy::default(), t0, 60 * S);
    let p = send(&mut m);
    let secret: &[u8] = b"Bearer SECRET-TOKEN";
    m.handle(
        t0 + S,
        Event::Response(running(p.id).retry_after(secret).date(secret)),
    );
    let rec = m.take_record().unwrap();
    let text = format!("{rec:?}");
    assert!(!text.contains("SECRET"), "{text}");
    assert!(matches!(rec.retry_after, RetryAfterNote::Rejected(_)));
}

/// The default terminal states cover the names job APIs commonly end with:
/// a job that ends `done` (or `succeeded`, `completed`, `error`, ...) ends
/// the wait at once instead of being polled until the timeout.
#[test]
fn the_default_terminal_states_cover_the_common_names() {
    for name in [
        "done",
        "succeeded",
        "success",
        "completed",
        "complete",
        "finished",
        "error",
        "errored",
        "failure",
        "aborted",
        "canceled",
        "passed",
        "failed",
        "cancelled",
    ] {
        let t0 = origin();
        let mut m = machine(PollPolicy::default(), t0, Duration::from_secs(60));
        let p = send(&mut m);
        m.handle(
            t0 + Duration::from_millis(5),
            Event::Response(Response::new(p.id, 200, UNIX_EPOCH).job(JobReport::State(name))),
        );
        assert_eq!(m.poll_action(), Action::Stop(state(name)), "{name}");
    }
    // Work in progress keeps the wait going.
    for name in ["running", "pending", "queued", "in_progress", "started"] {
        let t0 = origin();
        let mut m = machine(PollPolicy::default(), t0, Duration::from_secs(60));
        let p = send(&mut m);
        m.handle(
            t0 + Duration::from_millis(5),
            Event::Response(Response::new(p.id, 200, UNIX_EPOCH).job(JobReport::State(name))),
        );
        assert!(!matches!(m.poll_action(), Action::Stop(_)), "{name}");
    }
}

/// An answer at *exactly* the deadline is discarded (core's contract: "an
/// answer at or after the deadline is discarded"): a terminal state, a
/// pending one and a 503 there all end `TimedOut { needed: None }`; one
/// nanosecond earlier the terminal state is handed back. The
/// `PollChecker` (deadline `t0 + timeout`, the test's own arithmetic)
/// watches every step.
#[test]
fn an_answer_exactly_at_the_deadline_is_timed_out_even_a_terminal_one() {
    let t0 = origin();
    let timeout = 10 * S;
    let deadline = t0 + timeout;
    type Answer = fn(SendPlan) -> Response<'static>;
    let answers: [(&str, Answer); 4] = [
        ("passed", |p| {
            Response::new(p.id, 200, UNIX_EPOCH).job(JobReport::State("passed"))
        }),
        ("running", |p| running(p.id)),
        ("503", |p| Response::new(p.id, 503, UNIX_EPOCH)),
        ("stale passed", |p| {
            Response::new(p.id, 200, UNIX_EPOCH)
                .job(JobReport::State("passed"))
                .generation(5)
        }),
    ];
    for (name, make) in answers {
        for at in [deadline, deadline - Duration::from_nanos(1)] {
            let req = get().with_generation(4);
            let policy = PollPolicy::default();
            let mut m = PollMachine::new(policy, req, SplitMix64::new(1), t0, timeout).unwrap();
            let mut checker = PollChecker::new(&policy, &req, deadline);
            let p = send(&mut m);
            checker.output(t0, &Action::Send(p)).unwrap();
            let sleep = m.poll_action();
            assert_eq!(sleep, Action::SleepUntil(deadline));
            checker.output(t0, &sleep).unwrap();
            let e = Event::Response(make(p));
            checker.input(at, &e);
            m.handle(at, e);
            let a = m.poll_action();
            checker
                .output(at, &a)
                .unwrap_or_else(|v| panic!("{name}: {v}"));
            if at == deadline {
                assert_eq!(
                    a,
                    Action::Stop(Outcome::TimedOut { needed: None }),
                    "{name} at the deadline"
                );
                let rec = m.take_record().unwrap();
                assert_eq!(
                    rec.outcome,
                    Some(Outcome::TimedOut { needed: None }),
                    "{name}"
                );
            } else if name == "passed" {
                assert_eq!(a, Action::Stop(state("passed")), "{name} just before");
            }
        }
    }
}
