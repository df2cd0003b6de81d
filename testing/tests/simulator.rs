//! The simulator is a virtual-time `Io` run by `polite_core::drive`: what
//! that means for its users (the scenario tests of polite-core cover the
//! machines themselves).

use std::time::{Duration, Instant};

use polite_core::record::AttemptRecord;
use polite_core::{
    Action, Event, Machine, Method, Notice, Outcome, PollMachine, PollPolicy, RequestId,
    RequestInfo, RetryMachine, RetryPolicy, SendId, SendPlan, SplitMix64, TransportErrorKind,
};
use polite_testing::{Invariants, Job, PollChecker, Scripted, Simulator, Step, Violation, origin};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

fn get() -> RequestInfo {
    RequestInfo::new(RequestId(1), Method::Get)
}

fn retry(t0: Instant, timeout: Duration) -> RetryMachine<SplitMix64> {
    RetryMachine::new(
        RetryPolicy::default(),
        get(),
        SplitMix64::new(1),
        t0,
        timeout,
    )
    .unwrap()
}

#[test]
fn notices_reach_the_trace_and_the_checker() {
    // A server that rejects the wait parameter: the machine falls back to
    // plain polls and says so once, when the rejection arrives.
    let t0 = origin();
    let m = PollMachine::new(PollPolicy::default(), get(), SplitMix64::new(1), t0, 60 * S).unwrap();
    let checker = PollChecker::for_machine(&m);
    let trace = Simulator::new(t0)
        .server(|_, plan| match plan.long_poll {
            Some(_) => Scripted::status(400).job(Job::LongPollUnsupported),
            None => Scripted::status(200).state("passed"),
        })
        .check_poll(checker)
        .run(m)
        .unwrap();
    assert!(matches!(trace.outcome, Outcome::Terminal { .. }));
    assert_eq!(trace.notices, [(t0 + 10 * MS, Notice::LongPollUnsupported)]);
    let waits: Vec<_> = trace.sends().map(|(_, p)| p.long_poll).collect();
    assert_eq!(waits, [Some(25), None]);
}

#[test]
fn a_cancel_before_a_send_is_seen_before_it_goes_out() {
    // As in production: the loop checks the cancel right before a send.
    let t0 = origin();
    let trace = Simulator::new(t0)
        .cancel_at(t0)
        .run(retry(t0, 10 * S))
        .unwrap();
    assert_eq!(trace.outcome, Outcome::Cancelled);
    assert_eq!(trace.ended_at, t0);
    assert!(trace.records.is_empty());
}

#[test]
fn a_cancel_ends_a_wait_at_its_instant_and_wins_a_tie() {
    let t0 = origin();
    // The answer and the cancel come at the same instant: the cancel wins.
    let trace = Simulator::new(t0)
        .replies([Scripted::status(200).after(S)])
        .cancel_at(t0 + S)
        .run(retry(t0, 10 * S))
        .unwrap();
    assert_eq!(trace.outcome, Outcome::Cancelled);
    assert_eq!(trace.ended_at, t0 + S);
}

#[test]
fn a_hanging_or_late_answer_is_aborted_at_abort_at() {
    /// Sends once with `abort_at`, then waits an hour for what comes back.
    #[derive(Debug)]
    struct Patient {
        plan: SendPlan,
        sent: bool,
        got: Option<(Instant, String)>,
    }
    impl Machine for Patient {
        fn handle(&mut self, now: Instant, event: Event<'_>) {
            if !matches!(event, Event::Tick) {
                self.got = Some((now, format!("{event:?}")));
            }
        }
        fn poll_action(&mut self) -> Action {
            if !self.sent {
                self.sent = true;
                return Action::Send(self.plan);
            }
            match self.got {
                Some(_) => Action::Stop(Outcome::Cancelled),
                None => Action::SleepUntil(self.plan.abort_at + 3600 * S),
            }
        }
        fn take_record(&mut self) -> Option<AttemptRecord> {
            None
        }
    }
    let t0 = origin();
    let plan = SendPlan {
        id: SendId::default(),
        request: RequestId(1),
        abort_at: t0 + 2 * S,
        long_poll: None,
    };
    for server in [Scripted::hang(), Scripted::status(200).after(3 * S)] {
        let mut m = Patient {
            plan,
            sent: false,
            got: None,
        };
        let trace = Simulator::new(t0).replies([server]).run(&mut m).unwrap();
        assert_eq!(trace.ended_at, t0 + 2 * S);
        let (at, event) = m.got.unwrap();
        assert_eq!(at, t0 + 2 * S);
        assert!(event.contains("Aborted"), "{event}");
    }
    // The machines stop at their deadline, before the abort.
    let trace = Simulator::new(t0)
        .replies([Scripted::hang()])
        .run(retry(t0, 2 * S))
        .unwrap();
    assert_eq!(trace.outcome, Outcome::TimedOut { needed: None });
    assert_eq!(trace.ended_at, t0 + 2 * S);
}

#[test]
fn a_violation_ends_the_run_at_once() {
    /// At most one send.
    #[derive(Debug)]
    struct One(u32);
    impl<M> Invariants<M> for One {
        fn input(&mut self, _: Instant, _: &Event<'_>) {}
        fn output(&mut self, _: Instant, action: &Action) -> Result<(), Violation> {
            if let Action::Send(_) = action {
                self.0 += 1;
            }
            if self.0 > 1 {
                return Err(Violation {
                    rule: "one",
                    detail: format!("send #{}", self.0),
                });
            }
            Ok(())
        }
    }
    let t0 = origin();
    let err = Simulator::new(t0)
        .replies([Scripted::status(503), Scripted::status(200)])
        .run_checked(retry(t0, 10 * S), One(0))
        .unwrap_err();
    assert_eq!((err.rule, err.detail.as_str()), ("one", "send #2"));
}

#[test]
fn a_machine_that_never_stops_breaks_terminates() {
    /// Sleeps a millisecond at a time, forever.
    #[derive(Debug)]
    struct Forever(Instant);
    impl Machine for Forever {
        fn handle(&mut self, now: Instant, _: Event<'_>) {
            self.0 = now;
        }
        fn poll_action(&mut self) -> Action {
            Action::SleepUntil(self.0 + MS)
        }
        fn take_record(&mut self) -> Option<AttemptRecord> {
            None
        }
    }
    let t0 = origin();
    let err = Simulator::new(t0).run(Forever(t0)).unwrap_err();
    assert_eq!(err.rule, "terminates");
}

#[test]
fn answers_arrive_in_virtual_time_through_the_drive_loop() {
    let t0 = origin();
    let trace = Simulator::new(t0)
        .replies([
            Scripted::transport(TransportErrorKind::Reset).after(20 * MS),
            Scripted::status(200).after(30 * MS),
        ])
        .check_retry(&RetryPolicy::default(), &get())
        .run(retry(t0, 10 * S))
        .unwrap();
    assert_eq!(trace.outcome, Outcome::Succeeded { status: 200 });
    let first = SendPlan {
        id: SendId::default(),
        request: RequestId(1),
        abort_at: t0 + 10 * S + RetryPolicy::default().transport_cushion,
        long_poll: None,
    };
    assert_eq!(
        trace.steps[..2],
        [
            Step {
                at: t0,
                action: Action::Send(first)
            },
            Step {
                at: t0,
                action: Action::SleepUntil(t0 + 10 * S)
            },
        ]
    );
    // The reset arrived 20 ms in; the retry went after its backoff; the
    // 200 arrived 30 ms after that, and the machine stopped then.
    let sends: Vec<Instant> = trace.sends().map(|(t, _)| t).collect();
    assert_eq!(trace.records.len(), 2);
    assert_eq!(trace.ended_at, sends[1] + 30 * MS);
    assert!(sends[1] >= t0 + 20 * MS);
}
