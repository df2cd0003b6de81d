//! The one drive loop: runs any [`Machine`] over any [`Io`].
//!
//! Written once, here, with no runtime dependency. Each adapter implements
//! [`Io`] (a clock, a way to start a send, a timer and a cancellation signal)
//! and calls [`drive`]; none contains a retry decision or a loop of its own.
//! Nor does the test toolkit: the `polite-testing` simulator is a
//! virtual-time [`Io`] that this same loop runs.
//!
//! The loop:
//!
//! 1. ask the machine for actions until it answers `SleepUntil` or `Stop`;
//!    for each `Send`, check cancellation *right before* sending (a cancel
//!    may have raced the end of a sleep), then start the send;
//! 2. wait for whichever comes first: an answer to any send in flight, the
//!    instant, or a cancel;
//! 3. feed it back with the adapter's clock, forward the attempt records, and
//!    go to 1. On `Stop`, sends still in flight are dropped (aborted).

mod flights;

use std::future::{Future, poll_fn};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::input::{Event, JobReport, Response, RetryClass, SendId, TransportErrorKind};
use crate::item_map::ItemSlots;
use crate::machine::Machine;
use crate::outcome::Outcome;
use crate::output::{Action, Notice, SendPlan};
use crate::record::AttemptRecord;
use crate::request::RequestInfo;
use flights::Flights;

/// What a send produced, as far as the machines look at it.
///
/// ```
/// use polite_core::drive::Answer;
/// struct Plain(u16);
/// impl Answer for Plain {
///     fn status(&self) -> u16 { self.0 }
///     fn header(&self, _name: &str) -> Option<&[u8]> { None }
/// }
/// assert_eq!(Plain(204).status(), 204);
/// ```
pub trait Answer {
    /// The HTTP status.
    fn status(&self) -> u16;
    /// A header's raw value by (case-insensitive) name; the first if repeated.
    fn header(&self, name: &str) -> Option<&[u8]>;

    /// Files every header the machines read ([`Response::HEADERS`]) into
    /// `response`. By default one [`header`](Self::header) lookup per
    /// name; a type that can walk its headers cheaply may instead pass
    /// each of them to [`Response::file_header`] once, in order (which
    /// also keeps the later of repeated `Retry-After` values, where one
    /// lookup per name sees only the first).
    ///
    /// ```
    /// use polite_core::drive::Answer;
    /// use polite_core::{Response, SendId};
    /// use std::time::UNIX_EPOCH;
    /// struct Pairs(Vec<(&'static str, &'static [u8])>);
    /// impl Answer for Pairs {
    ///     fn status(&self) -> u16 { 429 }
    ///     fn header(&self, name: &str) -> Option<&[u8]> {
    ///         self.0.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
    ///     }
    /// }
    /// let a = Pairs(vec![("Retry-After", b"2"), ("retry-after", b"7"), ("Server", b"x")]);
    /// let mut r = Response::new(SendId::default(), a.status(), UNIX_EPOCH);
    /// a.file_headers(&mut r);
    /// assert_eq!(r.retry_after, Some(&b"2"[..]));
    /// ```
    fn file_headers<'a>(&'a self, response: &mut Response<'a>) {
        for name in Response::HEADERS {
            if let Some(value) = self.header(name) {
                response.file_header(name, value);
            }
        }
    }
}

/// Reads what the machines cannot see in the status and headers out of an
/// answer (the machines never parse bodies): a job report for
/// `PollMachine`, and optionally a retry class. [`NoJobs`] reads nothing.
pub trait Classify<A> {
    /// What the answer says about the job, if anything. The report may
    /// borrow from the answer or from the classifier (e.g. a buffer holding
    /// the state parsed out of a JSON body).
    fn job<'a>(&'a mut self, answer: &'a A) -> Option<JobReport<'a>>;

    /// The retry class of the answer when its status alone does not tell
    /// (goes to [`Response::retry_class`]), e.g. an AWS error code saying
    /// `Throttling` on a 400 ([`aws::ErrorTypeHeader`](crate::aws::ErrorTypeHeader)).
    /// `None` by default: the policy's status sets decide.
    ///
    /// ```
    /// use polite_core::RetryClass;
    /// use polite_core::drive::{Answer, Classify, NoJobs};
    /// struct Plain;
    /// impl Answer for Plain {
    ///     fn status(&self) -> u16 { 400 }
    ///     fn header(&self, _: &str) -> Option<&[u8]> { None }
    /// }
    /// assert_eq!(NoJobs.retry_class(&Plain), None);
    /// ```
    fn retry_class(&mut self, answer: &A) -> Option<RetryClass> {
        let _ = answer;
        None
    }
}

/// A classifier that never reports a job (for `RetryMachine` and batches).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoJobs;

impl<A> Classify<A> for NoJobs {
    fn job<'a>(&'a mut self, _answer: &'a A) -> Option<JobReport<'a>> {
        None
    }
}

/// Sees what the loop learns besides actions: every attempt record, and the
/// machine's one-time notices. `()` observes nothing; [`records`] turns a
/// closure over records into an observer.
pub trait Observe {
    /// An attempt record (adapters forward it to `tracing`).
    fn record(&mut self, record: &AttemptRecord);
    /// A notice for the user, e.g. "server does not support long-poll;
    /// switching to backoff". Ignored by default.
    fn notice(&mut self, notice: Notice) {
        let _ = notice;
    }
}

impl Observe for () {
    fn record(&mut self, _: &AttemptRecord) {}
}

/// An observer that hands each record to a closure (and ignores notices).
#[derive(Debug)]
pub struct Records<F>(F);

/// Observes records with `f`.
///
/// ```
/// use polite_core::drive::Observe;
/// use polite_core::record::{AttemptRecord, RetryAfterNote};
/// use polite_core::{Reply, RequestId, SendId};
/// let mut n = 0;
/// let mut observer = polite_core::drive::records(|_record| n += 1);
/// let rec = AttemptRecord { request: RequestId(1), id: SendId::default(), reply: Reply::Status(503),
///     class: None, retry_after: RetryAfterNote::Absent, next: None, outcome: None };
/// observer.record(&rec);
/// observer.record(&rec);
/// drop(observer);
/// assert_eq!(n, 2);
/// ```
pub fn records<F: FnMut(&AttemptRecord)>(f: F) -> Records<F> {
    Records(f)
}

impl<F: FnMut(&AttemptRecord)> Observe for Records<F> {
    fn record(&mut self, record: &AttemptRecord) {
        (self.0)(record);
    }
}

/// The real world, as an adapter provides it.
///
/// Contract:
/// * `now` is monotonic;
/// * `send` starts the attempt described by the plan (an adapter keeps the
///   request itself; the plan says which item and whether to long-poll).
///   The drive loop ends it at `plan.abort_at` if it has not resolved by
///   then: it drops the future and feeds
///   `TransportErrorKind::Aborted`, so the future needs no timer of its own
///   for `abort_at` (one that resolves `Aborted` by itself is fine too).
///   Like any future, it wakes the waker it was last polled with once it
///   can go on: with several sends in flight, the loop polls only the
///   sends woken since their last poll;
/// * `poll_sleep` is ready once `now() >= until` and otherwise arranges a
///   wake-up at `until` (the instant may change between calls);
/// * `poll_cancel` is ready once the caller has cancelled (and stays ready),
///   and wakes the task at once when that happens.
pub trait Io {
    /// A finished HTTP answer (status, headers, and whatever body the adapter
    /// read), handed back to the caller at the end.
    type Answer: Answer;
    /// A send in progress.
    type Sending: Future<Output = Result<Self::Answer, TransportErrorKind>>;
    /// The monotonic clock.
    fn now(&self) -> Instant;
    /// The wall clock (only to turn an HTTP-date into a delay). Read only
    /// for an answer that carries a header that may need it: a
    /// `Retry-After` that is not a number of seconds, or an
    /// `X-RateLimit-Reset` (which may be an epoch time). Every other
    /// answer reaches the machines with [`Response::wall_clock`] at
    /// `UNIX_EPOCH`, which they never read.
    fn wall_clock(&self) -> SystemTime;
    /// Starts a send.
    fn send(&mut self, plan: &SendPlan) -> Self::Sending;
    /// Polls the timer for `until`.
    fn poll_sleep(&mut self, cx: &mut Context<'_>, until: Instant) -> Poll<()>;
    /// Polls the cancellation signal.
    fn poll_cancel(&mut self, cx: &mut Context<'_>) -> Poll<()>;
    /// Whether the caller has cancelled (checked right before every send).
    fn is_cancelled(&self) -> bool;
    /// The caller's session generation now, if it tracks one.
    fn generation(&self) -> Option<u64> {
        None
    }
    /// The next item, for a machine that takes its items as it goes (a
    /// streaming batch): asked whenever the machine
    /// [wants](Machine::wants_items) more. [`Pull::Done`] by default.
    fn pull(&mut self) -> Pull {
        Pull::Done
    }
    /// Ready once [`pull`](Io::pull) may give an item again after it said
    /// [`Pull::Later`] (the caller took results out); polled while the
    /// drive loop waits. Pending by default.
    fn poll_pull(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let _ = cx;
        Poll::Pending
    }
    /// Whether the caller has results to take before more items may come:
    /// while it does, a drive loop that could only wait for its timer
    /// returns to the caller instead (pending), so that a caller driving
    /// the loop can take them. `false` by default.
    fn caller_behind(&self) -> bool {
        false
    }
    /// `answer` stays kept (to hand back at its item's end) while the call
    /// goes on: a poll's answer during the next poll, a retried answer
    /// during the retry, an item's answer while other sends go on. Called
    /// once per kept answer, as soon as the machine's next action shows the
    /// call going on (before any other send or wait). An `Io` whose answers
    /// borrow a buffer a later read would otherwise reuse (a connection's
    /// read buffer) copies them out here; the answer a call ends with and
    /// hands back at once is never passed here. Nothing by default.
    fn keep(&mut self, answer: &mut Self::Answer) {
        let _ = answer;
    }
    /// Item `item` ended with `outcome`; `answer` is its last answer. Take
    /// the answer (hand it to your caller now), or give it back to keep it
    /// for [`Finished::answers`] (the default).
    fn ended(
        &mut self,
        item: u32,
        outcome: Outcome,
        answer: Option<Self::Answer>,
    ) -> Option<Self::Answer> {
        let _ = (item, outcome);
        answer
    }
}

/// What [`Io::pull`] hands the drive loop.
///
/// ```
/// use polite_core::drive::Pull;
/// use polite_core::{Method, RequestId, RequestInfo};
/// let next = Pull::Item(RequestInfo::new(RequestId(7), Method::Get));
/// assert!(matches!(next, Pull::Item(_)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pull {
    /// The next item.
    Item(RequestInfo),
    /// None now (e.g. an output window is full); ask again after an item
    /// has ended.
    Later,
    /// No more items.
    Done,
}

/// How a drive ended: the machine's outcome and, per item, the last answer
/// received (index 0 for single machines), to hand back per the outcome.
#[derive(Debug)]
pub struct Finished<A> {
    /// The machine's outcome.
    pub outcome: Outcome,
    /// The last answer per item (`None` where an item got no HTTP answer).
    pub answers: Vec<Option<A>>,
    /// How many sends were started.
    pub sends: u32,
}

enum Woke<A> {
    Cancel,
    Tick,
    /// The `Io` may give items again.
    Pull,
    Answer(usize, Result<A, TransportErrorKind>),
}

/// Runs `machine` to its end over `io`. `classify` reads job reports (use
/// [`NoJobs`] for machines other than `PollMachine`); `observe` sees every
/// attempt record (adapters forward them to `tracing`) and every notice.
///
/// ```
/// use polite_core::drive::{self, Answer, Io, NoJobs};
/// use polite_core::{Method, Outcome, RequestId, RequestInfo, RetryMachine, RetryPolicy,
///                   SendPlan, TransportErrorKind};
/// use polite_core::SplitMix64;
/// use std::cell::Cell;
/// use std::future::{Ready, ready};
/// use std::task::{Context, Poll};
/// use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
///
/// struct Status(u16);
/// impl Answer for Status {
///     fn status(&self) -> u16 { self.0 }
///     fn header(&self, _: &str) -> Option<&[u8]> { None }
/// }
///
/// /// A virtual-time Io: answers 503 then 200 at once; sleeping advances time
/// /// (`polite_testing::Simulator` is a complete one, with scripts and checks).
/// struct Fake { now: Cell<Instant>, sent: u32 }
/// impl Io for Fake {
///     type Answer = Status;
///     type Sending = Ready<Result<Status, TransportErrorKind>>;
///     fn now(&self) -> Instant { self.now.get() }
///     fn wall_clock(&self) -> SystemTime { UNIX_EPOCH }
///     fn send(&mut self, _: &SendPlan) -> Self::Sending {
///         self.sent += 1;
///         ready(Ok(Status(if self.sent == 1 { 503 } else { 200 })))
///     }
///     fn poll_sleep(&mut self, _: &mut Context<'_>, until: Instant) -> Poll<()> {
///         self.now.set(self.now.get().max(until));
///         Poll::Ready(())
///     }
///     fn poll_cancel(&mut self, _: &mut Context<'_>) -> Poll<()> { Poll::Pending }
///     fn is_cancelled(&self) -> bool { false }
/// }
///
/// let t0 = Instant::now();
/// let mut io = Fake { now: Cell::new(t0), sent: 0 };
/// let mut m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
///                               SplitMix64::new(1), t0, Duration::from_secs(10)).unwrap();
/// let mut records = 0;
/// let done = polite_testing::block_on(drive::drive(&mut m, &mut io, &mut NoJobs, &mut drive::records(|_| records += 1)));
/// assert_eq!(done.outcome, Outcome::Succeeded { status: 200 });
/// assert_eq!(done.answers[0].as_ref().map(|a| a.0), Some(200));
/// assert_eq!((done.sends, records), (2, 2));
/// ```
pub async fn drive<M, I, C, O>(
    machine: &mut M,
    io: &mut I,
    classify: &mut C,
    observe: &mut O,
) -> Finished<I::Answer>
where
    M: Machine + ?Sized,
    I: Io,
    C: Classify<I::Answer> + ?Sized,
    O: Observe + ?Sized,
{
    // The sends in flight, each with its `abort_at`: the first in this
    // future (a call that has one send in flight at a time, `send` and
    // `wait`, allocates nothing for them), the others in boxes that stay
    // when their send ends (emptied: `None`) and take a later send (no
    // allocation per send once there are as many boxes as sends in flight
    // at once, and no second vector for the empty ones), each with a
    // waker of its own (`flights`: only the sends woken are polled).
    let first_sending = std::pin::pin!(None);
    let mut flying = Flights::new(first_sending);
    // The last answer of every item not yet handed out (the newest one is
    // `fresh` until the items that ended have been handed out: most answers
    // end their item and go straight to the `Io`, never into the map).
    let mut answers: Kept<I::Answer> = Kept::default();
    // The item whose answer was just kept and not yet passed to
    // `Io::keep`: that happens once the machine's next action is not
    // `Stop` (so a call's last answer, handed back at once, never is).
    let mut unkept: Option<u32> = None;
    let mut sends = 0u32;
    let mut closed = false;
    loop {
        let mut later;
        // 1. Actions until a wait or the end (first, items for a machine
        // that takes them as it goes: before every action, since a send or
        // an end may have made room).
        let wake_at = loop {
            later = false;
            while !closed && machine.wants_items() > 0 {
                match io.pull() {
                    Pull::Item(request) => machine.push_item(request),
                    Pull::Later => {
                        later = true;
                        break;
                    }
                    Pull::Done => {
                        machine.close_items();
                        closed = true;
                    }
                }
            }
            let action = machine.poll_action();
            // The machine goes on: the answer just kept stays kept.
            if !matches!(action, Action::Stop(_))
                && let Some(item) = unkept.take()
                && let Some(answer) = answers.get_mut(&item)
            {
                io.keep(answer);
            }
            match action {
                Action::Send(plan) => {
                    if io.is_cancelled() {
                        machine.handle(io.now(), Event::Cancel);
                        // The records of the sends it drops in flight; not
                        // this one's: it never went out (no attempt).
                        forward(machine, observe, Some(plan.id));
                        continue;
                    }
                    sends += 1;
                    let sending = io.send(&plan);
                    flying.start(plan.id, plan.abort_at, sending);
                }
                // Deciding may have made room for items (a keyed batch's
                // items held back by their key's pace do not count as
                // starting): take them before waiting, so that a busy key
                // does not hold back the others.
                Action::SleepUntil(_) if !closed && !later && machine.wants_items() > 0 => {}
                Action::SleepUntil(t) => break t,
                Action::Stop(outcome) => {
                    hand_out(machine, io, &mut answers, &mut None);
                    return Finished {
                        outcome,
                        answers: into_slots(answers),
                        sends,
                    };
                }
            }
        };
        // 2. Wait for the first of: cancel, an answer, the instant.
        let woke = poll_fn(|cx| {
            if io.poll_cancel(cx).is_ready() {
                return Poll::Ready(Woke::Cancel);
            }
            if let Some((i, r)) = flying.poll_any(cx) {
                return Poll::Ready(Woke::Answer(i, r));
            }
            if later && io.poll_pull(cx).is_ready() {
                return Poll::Ready(Woke::Pull);
            }
            if later && io.caller_behind() {
                // Back to the caller, who takes results and polls again;
                // the timer is not armed meanwhile (nothing here is due
                // sooner than the caller's next poll can see).
                return Poll::Pending;
            }
            // The first of the machine's instant and the sends' `abort_at`
            // (a machine wakes by its deadline, before any `abort_at`: this
            // holds the contract for any machine).
            let until = flying.abort_ats().fold(wake_at, Instant::min);
            if io.poll_sleep(cx, until).is_ready() {
                // A send past its `abort_at` ends first, as it would have
                // ended by itself had its future kept a timer.
                let now = io.now();
                if let Some(i) = flying.past(now) {
                    return Poll::Ready(Woke::Answer(i, Err(TransportErrorKind::Aborted)));
                }
                return Poll::Ready(Woke::Tick);
            }
            Poll::Pending
        })
        .await;
        // 3. Feed it back. (`fresh` is declared here, after the wait, so
        // that the future does not keep a slot for it across the wait.)
        let now = io.now();
        let mut fresh: Option<(u32, I::Answer)> = None;
        match woke {
            Woke::Cancel => machine.handle(now, Event::Cancel),
            Woke::Tick => machine.handle(now, Event::Tick),
            // Back to the top: the items come in before the next action.
            Woke::Pull => {}
            Woke::Answer(i, result) => {
                // Dropped now, as it ended; its place serves a later send.
                let id = flying.end(i);
                match result {
                    Ok(answer) => {
                        // The wall clock only when a header may need it
                        // (read once per such answer, not on every one).
                        let mut r = Response::new(id, answer.status(), UNIX_EPOCH);
                        answer.file_headers(&mut r);
                        if needs_wall_clock(&r) {
                            r.wall_clock = io.wall_clock();
                        }
                        r.generation = io.generation();
                        r.retry_class = classify.retry_class(&answer);
                        r.job = classify.job(&answer);
                        machine.handle(now, Event::Response(r));
                        fresh = Some((id.item, answer));
                    }
                    Err(kind) => machine.handle(now, Event::TransportError(id, kind)),
                }
            }
        }
        forward(machine, observe, None);
        hand_out(machine, io, &mut answers, &mut fresh);
        if let Some((item, answer)) = fresh.take() {
            // Two answers kept with no send between them (a batch): the
            // older one is passed to `keep` now.
            if let Some(older) = unkept.replace(item)
                && older != item
                && let Some(kept) = answers.get_mut(&older)
            {
                io.keep(kept);
            }
            answers.insert(item, Box::new(answer));
        }
    }
}

/// Hands the machine's new attempt records (but `unsent`'s) and notices
/// to `observe`.
fn forward<M, O>(machine: &mut M, observe: &mut O, unsent: Option<SendId>)
where
    M: Machine + ?Sized,
    O: Observe + ?Sized,
{
    while let Some(record) = machine.take_record() {
        if Some(record.id) != unsent {
            observe.record(&record);
        }
    }
    while let Some(notice) = machine.take_notice() {
        observe.notice(notice);
    }
}

/// Whether the machines may read `response`'s [`Response::wall_clock`]:
/// they read it only to turn a time into a delay, for a `Retry-After` that
/// is not delta-seconds (an HTTP-date, measured against `Date` or the wall
/// clock; an invalid value is read the same way before it is rejected) and
/// for an `X-RateLimit-Reset` (an epoch time is measured the same way).
fn needs_wall_clock(response: &Response<'_>) -> bool {
    let seconds = |v: &[u8]| !v.is_empty() && v.iter().all(u8::is_ascii_digit);
    response.retry_after.is_some_and(|v| !seconds(v))
        || response.rate_limit.x_ratelimit_reset.is_some()
}

/// The last answer of every item not yet handed out. A call of one item
/// (`send`, `wait`) keeps at most one: inline in [`ItemSlots`] (no hash
/// table), and boxed (16 bytes in the call's future, not an answer's size).
type Kept<A> = ItemSlots<u32, Box<A>>;

/// The answers by item number, for [`Finished::answers`].
fn into_slots<A>(kept: Kept<A>) -> Vec<Option<A>> {
    let mut slots = Vec::new();
    for (item, answer) in kept {
        let slot = item as usize;
        if slots.len() <= slot {
            slots.resize_with(slot + 1, || None);
        }
        slots[slot] = Some(*answer);
    }
    slots
}

/// Hands every item that ended to the `Io` with its last answer (`fresh`,
/// the answer just received, when it is that item's), keeping the answers
/// the `Io` gives back.
fn hand_out<M, I>(
    machine: &mut M,
    io: &mut I,
    answers: &mut Kept<I::Answer>,
    fresh: &mut Option<(u32, I::Answer)>,
) where
    M: Machine + ?Sized,
    I: Io,
{
    while let Some((item, outcome)) = machine.take_ended() {
        let older = answers.remove(&item).map(|a| *a);
        let answer = match fresh {
            Some((i, _)) if *i == item => fresh.take().map(|(_, a)| a),
            _ => older,
        };
        if let Some(kept) = io.ended(item, outcome, answer) {
            answers.insert(item, Box::new(kept));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wall_clock_is_needed_for_dates_and_resets_only() {
        let needs = |f: &dyn Fn(Response<'static>) -> Response<'static>| {
            needs_wall_clock(&f(Response::new(SendId::default(), 429, UNIX_EPOCH)))
        };
        assert!(!needs(&|r| r));
        assert!(!needs(&|r| r.retry_after(b"2")));
        assert!(!needs(&|r| r.header("ratelimit", b"\"d\";r=0;t=2")));
        assert!(needs(&|r| r.retry_after(b"Sun, 06 Nov 1994 08:49:37 GMT")));
        assert!(needs(&|r| r.retry_after(b" 2")));
        assert!(needs(&|r| r.retry_after(b"")));
        assert!(needs(&|r| r.header("x-ratelimit-reset", b"1700000000")));
    }
}
