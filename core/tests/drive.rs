//! The one drive loop over a scripted, virtual-time `Io`.

use std::cell::Cell;
use std::collections::VecDeque;
use std::future::{Ready, ready};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use polite_core::drive::{self, Answer, Io, NoJobs};
use polite_core::{
    Method, Outcome, Reply, RequestId, RequestInfo, RetryMachine, RetryPolicy, SendPlan,
    SplitMix64, TransportErrorKind,
};
use polite_testing::origin;

#[derive(Debug)]
struct Ans {
    status: u16,
    retry_after: Option<&'static str>,
}

impl Answer for Ans {
    fn status(&self) -> u16 {
        self.status
    }
    fn header(&self, name: &str) -> Option<&[u8]> {
        match name {
            "retry-after" => self.retry_after.map(str::as_bytes),
            _ => None,
        }
    }
}

/// Answers at once from a script; sleeping jumps the virtual clock; the
/// caller "cancels" after a given number of sleeps, either visibly
/// (`poll_cancel` ready) or only through `is_cancelled` (a cancel racing the
/// end of a sleep).
struct Scripted {
    now: Cell<Instant>,
    script: VecDeque<Result<Ans, TransportErrorKind>>,
    sleeps: u32,
    cancel_after_sleeps: Option<u32>,
    cancel_visible: bool,
    /// The caller cancels (from elsewhere) while the loop sleeps.
    cancel_in_sleep: bool,
    cancel_fired: bool,
    plans: Vec<SendPlan>,
    /// What `wall_clock` answers, and how many times it was asked.
    wall: SystemTime,
    wall_reads: Cell<u32>,
    /// The statuses of the answers passed to `keep`, in order.
    kept: Vec<u16>,
}

impl Scripted {
    fn new(t0: Instant, script: Vec<Result<Ans, TransportErrorKind>>) -> Scripted {
        Scripted {
            now: Cell::new(t0),
            script: script.into(),
            sleeps: 0,
            cancel_after_sleeps: None,
            cancel_visible: true,
            cancel_in_sleep: false,
            cancel_fired: false,
            plans: Vec::new(),
            wall: UNIX_EPOCH,
            wall_reads: Cell::new(0),
            kept: Vec::new(),
        }
    }
    fn cancelled(&self) -> bool {
        self.cancel_fired || self.cancel_after_sleeps.is_some_and(|n| self.sleeps >= n)
    }
}

impl Io for Scripted {
    type Answer = Ans;
    type Sending = Ready<Result<Ans, TransportErrorKind>>;
    fn now(&self) -> Instant {
        self.now.get()
    }
    fn wall_clock(&self) -> SystemTime {
        self.wall_reads.set(self.wall_reads.get() + 1);
        self.wall
    }
    fn send(&mut self, plan: &SendPlan) -> Self::Sending {
        self.plans.push(*plan);
        self.now.set(self.now.get() + Duration::from_millis(10));
        ready(
            self.script
                .pop_front()
                .unwrap_or(Err(TransportErrorKind::Other)),
        )
    }
    fn poll_sleep(&mut self, cx: &mut Context<'_>, until: Instant) -> Poll<()> {
        if self.cancel_in_sleep && !self.cancel_fired {
            // The sleep is pending; the caller cancels half a second in.
            self.cancel_fired = true;
            self.now.set(self.now.get() + Duration::from_millis(500));
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.sleeps += 1;
        self.now.set(self.now.get().max(until));
        Poll::Ready(())
    }
    fn poll_cancel(&mut self, _: &mut Context<'_>) -> Poll<()> {
        if self.cancel_visible && self.cancelled() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
    fn is_cancelled(&self) -> bool {
        self.cancelled()
    }
    fn keep(&mut self, answer: &mut Ans) {
        self.kept.push(answer.status);
    }
}

fn machine(t0: Instant) -> RetryMachine<SplitMix64> {
    RetryMachine::new(
        RetryPolicy::default(),
        RequestInfo::new(RequestId(1), Method::Get),
        SplitMix64::new(3),
        t0,
        Duration::from_secs(30),
    )
    .unwrap()
}

fn ok(status: u16) -> Result<Ans, TransportErrorKind> {
    Ok(Ans {
        status,
        retry_after: None,
    })
}

/// `keep` sees every answer the loop holds while its item goes on (the
/// 503 and the 429, during their retries), and never the answer that ends
/// the item (handed back as it came: a transport copies nothing for it).
#[test]
fn only_answers_kept_while_their_item_goes_on_are_passed_to_keep() {
    let t0 = origin();
    let mut io = Scripted::new(
        t0,
        vec![
            ok(503),
            Err(TransportErrorKind::Reset),
            Ok(Ans {
                status: 429,
                retry_after: Some("1"),
            }),
            ok(200),
        ],
    );
    let done = polite_testing::block_on(drive::drive(
        &mut machine(t0),
        &mut io,
        &mut NoJobs,
        &mut (),
    ));
    assert_eq!(done.outcome, Outcome::Succeeded { status: 200 });
    assert_eq!(io.kept, [503, 429]);
    assert_eq!(done.answers[0].as_ref().map(|a| a.status), Some(200));

    // A call whose first answer ends it keeps nothing.
    let mut io = Scripted::new(t0, vec![ok(404)]);
    let done = polite_testing::block_on(drive::drive(
        &mut machine(t0),
        &mut io,
        &mut NoJobs,
        &mut (),
    ));
    assert_eq!(io.kept, Vec::<u16>::new());
    assert_eq!(done.answers[0].as_ref().map(|a| a.status), Some(404));
}

#[test]
fn answers_records_and_headers_flow_through() {
    let t0 = origin();
    let mut io = Scripted::new(
        t0,
        vec![
            Err(TransportErrorKind::Reset),
            Ok(Ans {
                status: 429,
                retry_after: Some("3"),
            }),
            ok(200),
        ],
    );
    let mut m = machine(t0);
    let mut records = Vec::new();
    let done = polite_testing::block_on(drive::drive(
        &mut m,
        &mut io,
        &mut NoJobs,
        &mut drive::records(|r| records.push(*r)),
    ));
    assert_eq!(done.outcome, Outcome::Succeeded { status: 200 });
    assert_eq!(done.sends, 3);
    assert_eq!(done.answers.len(), 1);
    assert_eq!(done.answers[0].as_ref().map(|a| a.status), Some(200));
    let replies: Vec<Reply> = records.iter().map(|r| r.reply).collect();
    assert_eq!(
        replies,
        vec![
            Reply::Transport(TransportErrorKind::Reset),
            Reply::Status(429),
            Reply::Status(200)
        ]
    );
    // The Retry-After header was read: 3 s between the second and third send.
    let gap = records[1].next.unwrap();
    assert_eq!(gap.delay, Duration::from_secs(3));
    assert!(
        io.plans
            .iter()
            .all(|p| p.abort_at == t0 + Duration::from_secs(32))
    );
}

#[test]
fn cancel_during_a_sleep_stops_without_another_send() {
    let t0 = origin();
    let mut io = Scripted::new(t0, vec![ok(503), ok(200)]);
    io.cancel_in_sleep = true;
    let mut m = machine(t0);
    let done = polite_testing::block_on(drive::drive(&mut m, &mut io, &mut NoJobs, &mut ()));
    assert_eq!(done.outcome, Outcome::Cancelled);
    assert_eq!(done.sends, 1);
    // It ended when the cancel came, not at the end of the sleep.
    assert_eq!(io.now.get(), t0 + Duration::from_millis(510));
    assert_eq!(io.sleeps, 0, "the sleep never completed");
}

#[test]
fn cancel_racing_the_end_of_a_sleep_is_checked_before_sending() {
    let t0 = origin();
    let mut io = Scripted::new(t0, vec![ok(503), ok(200)]);
    // The sleep ends normally (the cancel signal is not seen by the wait),
    // but the caller has cancelled by the time the loop would send.
    io.cancel_after_sleeps = Some(1);
    io.cancel_visible = false;
    let mut m = machine(t0);
    let done = polite_testing::block_on(drive::drive(&mut m, &mut io, &mut NoJobs, &mut ()));
    assert_eq!(done.outcome, Outcome::Cancelled);
    assert_eq!(done.sends, 1, "no send after the cancel");
}

#[test]
fn a_final_answer_is_handed_back() {
    let t0 = origin();
    let mut io = Scripted::new(t0, vec![ok(404)]);
    let mut m = machine(t0);
    let done = polite_testing::block_on(drive::drive(&mut m, &mut io, &mut NoJobs, &mut ()));
    assert_eq!(done.outcome, Outcome::NotRetryable { status: 404 });
    assert_eq!(done.answers[0].as_ref().map(|a| a.status), Some(404));
}

/// A machine that sends once, then sleeps far past the send's `abort_at`
/// (no polite machine does: each wakes by its deadline, before any
/// `abort_at`), and stops at the first event after that.
struct SleepsPastAbort {
    t0: Instant,
    sent: bool,
    events: Vec<(Duration, String)>,
    stop: Option<Outcome>,
}

impl polite_core::Machine for SleepsPastAbort {
    fn handle(&mut self, now: Instant, event: polite_core::Event<'_>) {
        self.events.push((now - self.t0, format!("{event:?}")));
        self.stop = Some(Outcome::TimedOut { needed: None });
    }
    fn poll_action(&mut self) -> polite_core::Action {
        if let Some(o) = self.stop {
            return polite_core::Action::Stop(o);
        }
        if !self.sent {
            self.sent = true;
            return polite_core::Action::Send(SendPlan {
                id: polite_core::SendId {
                    item: 0,
                    attempt: 0,
                },
                request: RequestId(1),
                abort_at: self.t0 + Duration::from_secs(5),
                long_poll: None,
            });
        }
        polite_core::Action::SleepUntil(self.t0 + Duration::from_secs(60))
    }
    fn take_record(&mut self) -> Option<polite_core::record::AttemptRecord> {
        None
    }
}

/// A send that never ends by itself; counts its drops.
struct Hang(std::rc::Rc<Cell<u32>>);

impl std::future::Future for Hang {
    type Output = Result<Ans, TransportErrorKind>;
    fn poll(self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Pending
    }
}

impl Drop for Hang {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

/// An `Io` whose sends hang and keep no timer; sleeping jumps the clock.
struct Hanging {
    now: Cell<Instant>,
    dropped: std::rc::Rc<Cell<u32>>,
    sleeps_until: Vec<Instant>,
}

impl Io for Hanging {
    type Answer = Ans;
    type Sending = Hang;
    fn now(&self) -> Instant {
        self.now.get()
    }
    fn wall_clock(&self) -> SystemTime {
        UNIX_EPOCH
    }
    fn send(&mut self, _: &SendPlan) -> Hang {
        Hang(self.dropped.clone())
    }
    fn poll_sleep(&mut self, _: &mut Context<'_>, until: Instant) -> Poll<()> {
        self.sleeps_until.push(until);
        self.now.set(self.now.get().max(until));
        Poll::Ready(())
    }
    fn poll_cancel(&mut self, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
    fn is_cancelled(&self) -> bool {
        false
    }
}

/// Drives `m` over a `Hanging` Io from `t0`: how it ended, the instants
/// the loop slept until, and how many send futures were dropped.
fn drive_hanging(
    m: &mut impl polite_core::Machine,
    t0: Instant,
) -> (drive::Finished<Ans>, Vec<Instant>, u32) {
    let dropped = std::rc::Rc::new(Cell::new(0));
    let mut io = Hanging {
        now: Cell::new(t0),
        dropped: dropped.clone(),
        sleeps_until: Vec::new(),
    };
    let done = polite_testing::block_on(drive::drive(
        m,
        &mut io,
        &mut NoJobs,
        &mut drive::records(|_| {}),
    ));
    (done, io.sleeps_until, dropped.get())
}

#[test]
fn the_drive_loop_ends_a_send_at_its_abort_at_when_the_future_keeps_no_timer() {
    let t0 = origin();
    let mut m = SleepsPastAbort {
        t0,
        sent: false,
        events: Vec::new(),
        stop: None,
    };
    let (done, sleeps_until, dropped) = drive_hanging(&mut m, t0);
    // The loop slept until the send's abort_at (5 s), not the machine's
    // 60 s, and fed the machine the abort then.
    assert_eq!(sleeps_until, vec![t0 + Duration::from_secs(5)]);
    assert_eq!(m.events.len(), 1, "{:?}", m.events);
    assert_eq!(m.events[0].0, Duration::from_secs(5));
    assert!(
        m.events[0].1.contains("TransportError") && m.events[0].1.contains("Aborted"),
        "{:?}",
        m.events
    );
    // The attempt's future was dropped, once.
    assert_eq!(dropped, 1);
    assert_eq!(done.sends, 1);
    assert_eq!(done.outcome, Outcome::TimedOut { needed: None });
}

#[test]
fn a_retry_machine_ends_at_its_deadline_before_the_drive_loop_would_abort() {
    // The machine wakes at its deadline (30 s), before `abort_at` (32 s):
    // the send is dropped there and the outcome is TimedOut, as before the
    // drive loop kept `abort_at` itself.
    let t0 = origin();
    let mut m = machine(t0);
    let (done, sleeps_until, dropped) = drive_hanging(&mut m, t0);
    assert_eq!(sleeps_until, vec![t0 + Duration::from_secs(30)]);
    assert_eq!(done.outcome, Outcome::TimedOut { needed: None });
    assert_eq!((done.sends, dropped), (1, 1));
}

/// Sends once with a short `abort_at`, takes the answer, then waits past
/// that `abort_at` before it stops: what it was told is recorded.
struct ShortAbort {
    t0: Instant,
    step: u32,
    replies: Vec<Option<Reply>>,
}

impl polite_core::Machine for ShortAbort {
    fn handle(&mut self, _: Instant, event: polite_core::Event<'_>) {
        match event {
            polite_core::Event::Response(r) => self.replies.push(Some(Reply::Status(r.status))),
            polite_core::Event::TransportError(_, kind) => {
                self.replies.push(Some(Reply::Transport(kind)));
            }
            polite_core::Event::Tick => self.replies.push(None),
            _ => {}
        }
    }
    fn poll_action(&mut self) -> polite_core::Action {
        self.step += 1;
        match (self.step, self.replies.len()) {
            (1, _) => polite_core::Action::Send(SendPlan {
                id: polite_core::SendId::default(),
                request: RequestId(1),
                abort_at: self.t0 + Duration::from_secs(1),
                long_poll: None,
            }),
            (_, 0 | 1) => polite_core::Action::SleepUntil(self.t0 + Duration::from_secs(5)),
            _ => polite_core::Action::Stop(Outcome::Succeeded { status: 200 }),
        }
    }
    fn take_record(&mut self) -> Option<polite_core::record::AttemptRecord> {
        None
    }
}

#[test]
fn an_ended_sends_abort_at_neither_wakes_nor_aborts_anything() {
    // The box of an ended send stays for a later send (no allocation per
    // send); its `abort_at` must not count while it is empty. If it did, the
    // loop would wake at t0 + 1 s, "abort" the send that already ended, and
    // spin there without time passing.
    let t0 = origin();
    let mut m = ShortAbort {
        t0,
        step: 0,
        replies: Vec::new(),
    };
    let mut io = Scripted::new(t0, vec![ok(200)]);
    let done = polite_testing::block_on(drive::drive(&mut m, &mut io, &mut NoJobs, &mut ()));
    assert_eq!(done.outcome, Outcome::Succeeded { status: 200 });
    assert_eq!(
        m.replies,
        [Some(Reply::Status(200)), None],
        "one answer, then one tick at t0 + 5 s"
    );
    assert_eq!(io.sleeps, 1, "one sleep, to the machine's instant");
    assert_eq!(io.now(), t0 + Duration::from_secs(5));
}

/// The wall clock is read for an answer whose `Retry-After` is an
/// HTTP-date (the delay is measured against it: read as `UNIX_EPOCH`, the
/// date would lie decades ahead and end the call), and for no other.
#[test]
fn the_wall_clock_is_read_only_for_an_answer_that_needs_it() {
    let t0 = origin();
    let mut io = Scripted::new(
        t0,
        vec![
            Ok(Ans {
                status: 503,
                retry_after: Some("1"),
            }),
            Ok(Ans {
                status: 503,
                retry_after: Some("Sun, 06 Nov 1994 08:49:39 GMT"),
            }),
            ok(200),
        ],
    );
    // Sun, 06 Nov 1994 08:49:37 GMT: the date above is two seconds later.
    io.wall = UNIX_EPOCH + Duration::from_secs(784_111_777);
    let mut m = machine(t0);
    let mut records = Vec::new();
    let done = polite_testing::block_on(drive::drive(
        &mut m,
        &mut io,
        &mut NoJobs,
        &mut drive::records(|r| records.push(*r)),
    ));
    assert_eq!(done.outcome, Outcome::Succeeded { status: 200 });
    assert_eq!(io.wall_reads.get(), 1);
    assert_eq!(
        records[1].retry_after,
        polite_core::record::RetryAfterNote::Valid(Duration::from_secs(2))
    );
    assert!(io.now.get() >= t0 + Duration::from_secs(3));
}
