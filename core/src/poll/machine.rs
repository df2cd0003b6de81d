//! [`PollMachine`]: the machine that waits for a remote job.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand_core::Rng;

use crate::backoff;
use crate::decide::{Spent, deadline_after, later};
use crate::input::{Event, Reply, Response, RetryClass, SendId, TransportErrorKind};
use crate::machine::Machine;
use crate::outcome::Outcome;
use crate::output::{Action, Notice, SendPlan};
use crate::policy::PolicyError;
use crate::record::{AttemptRecord, RetryAfterNote};
use crate::request::RequestInfo;

use super::policy::PollPolicy;

mod answer;
mod fast;

/// How a [`PollMachine`] polls right now.
///
/// ```
/// use polite_core::poll::PollMode;
/// assert_ne!(PollMode::LongPoll, PollMode::Backoff);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PollMode {
    /// Every poll carries the wait parameter; a pending answer is followed
    /// by the next poll at once (the server already waited).
    LongPoll,
    /// Polls without the wait parameter, on the backoff schedule. Final for
    /// this wait.
    Backoff,
}

/// Where a wait stands. An explicit tag rather than a niche in the
/// instant's nanoseconds: `poll_action` reads one byte to dispatch
/// (issue 22).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Phase {
    /// The next poll may be sent now.
    Ready,
    /// This poll is in flight.
    InFlight(u32),
    /// Waiting to send the next poll at this instant.
    Waiting(Instant),
    /// Ended.
    Done(Outcome),
}

/// One wait for a remote job: polled until it reaches a terminal state, the
/// deadline passes, or the caller cancels. Sans-IO: it never reads a clock,
/// sleeps, or opens a socket; it owns its random source `R` and takes `now`
/// with every event.
///
/// **Inputs**: [`handle`](Self::handle)`(now, event)`. A job-status answer
/// carries what it says about the job in [`Response::job`], as the adapter's
/// classifier read it from the body: [`JobReport::State`](crate::poll::JobReport::State) or
/// [`JobReport::LongPollUnsupported`](crate::poll::JobReport::LongPollUnsupported) (by default an HTTP 400 with error
/// code `VALIDATION_ERROR`).
///
/// **Outputs**: [`poll_action`](Self::poll_action) answers an [`Action`];
/// every `Send` carries `long_poll: Some(n)` in long-poll mode (the adapter
/// adds `?{wait_param}=n`, see [`wait_param`](Self::wait_param)) and `None`
/// in backoff mode. [`take_record`](Self::take_record) gives the
/// [`AttemptRecord`] of each poll sent; [`take_notice`](Self::take_notice)
/// the one-time [`Notice`] when the machine falls back to backoff.
///
/// **How it polls**:
///
/// 1. *Long poll* (first, unless [`PollPolicy::long_poll_first`] is off):
///    each poll asks the server to hold it `min(whole seconds left
///    before the deadline, less a second for the answer to come back
///    ([`PollPolicy::ANSWER_ROOM`]), max_long_poll)`; a
///    pending answer is followed by the next poll at once (but never two
///    long polls started less than
///    [`min_long_poll_interval`](PollPolicy::min_long_poll_interval) apart).
///    With no whole second to ask for, the poll goes without the parameter
///    (`waitSeconds=0` would be a busy loop).
/// 2. *Backoff* (after the server rejects the wait parameter): the machine
///    says so once through [`Notice::LongPollUnsupported`], polls again at
///    once without the parameter (or after the rejection's `Retry-After`),
///    then waits 2, 4, 8, 15, 15, … s (±20 %) after each pending answer. It
///    never goes back to long polling within this wait.
/// 3. A 1xx–3xx answer naming a terminal state ends the wait with
///    [`Outcome::Terminal`]; any other state (including unknown ones and
///    names too long to be terminal) is pending.
/// 4. A 429, 5xx or transport error goes through the retry rules of
///    [`RetryMachine`](crate::RetryMachine) (budgets per class,
///    `max(backoff, Retry-After)`, the automatic wait cap, replayability),
///    inside the same deadline.
/// 5. `Retry-After` is honoured on every answer the machine acts on (SPEC
///    §2.1): a pending state, the rejection of the wait parameter, and every
///    failure. The next poll waits `max(schedule or backoff, server delay)`;
///    a server delay over the automatic wait cap ends the wait
///    `RateLimited { retry_at }`, never truncated.
/// 6. *The end of the budget*: a wait polls until the last instant at which
///    a poll can still be answered inside the deadline. When the schedule's
///    next poll would come back too late, the machine sends one final poll
///    at the last useful instant, `deadline - max(2 × latency, 10 ms)`
///    (never before the server's `Retry-After`), instead of stopping early;
///    it stops with `TimedOut` only when even that poll could not be
///    answered in time, or the final poll has been spent.
///
/// **Invariants** (checked by property tests with
/// `polite_testing::PollChecker`):
/// * every `SleepUntil(t)` has `t <= deadline`; every send happens before
///   the deadline and carries `abort_at = deadline + retry.transport_cushion`;
/// * every wait parameter is at least 1 and at most
///   `min(whole seconds of (left - 1 s), max_long_poll)`; a plain poll in
///   long-poll mode only with no whole second to ask for (under 2 s left);
/// * never back to long polling after the switch; the notice comes once;
/// * never a poll before the server's `Retry-After` instant, whatever the
///   answer that carried it;
/// * no stop with budget left: after a pending answer the wait ends
///   `TimedOut` only when no poll can be answered in time any more;
/// * after `Cancel` the next action is `Stop(Cancelled)`; `Stop` is sticky;
/// * an answer at or after the deadline gives `TimedOut`, even a terminal
///   state; late answers for earlier polls are ignored; time going
///   backwards is clamped to the latest `now` seen.
///
/// **Choices where SPEC.md is silent**:
/// * *Less than one whole second left in long-poll mode*: a long poll would
///   ask `waitSeconds=0`, a busy loop, so the machine sends a final plain
///   poll (no wait parameter) instead of stopping with budget left. The
///   mode stays long poll; a rejection of the wait parameter in answer to
///   such a poll ends the wait `NotRetryable` (it was not sent one).
/// * *The last useful instant*: after a pending answer (or the rejection)
///   whose next poll by the schedule would not be answered inside the
///   deadline, the next poll is pulled in to
///   `max(now, server's Retry-After instant, deadline - max(2 × latency, 10 ms))`,
///   at most once per wait (no hot loop in the last milliseconds; a poll
///   that is due anyway, e.g. at the server's instant, is not pulled in
///   and still goes). The
///   latency is the round trip of the answer just received, less the wait a
///   long poll asked for when the server held it that long. When even that
///   poll would come back at or after the deadline (`at + latency >= deadline`),
///   or the final poll has been spent, the machine stops at once with
///   `TimedOut { needed: Some(t) }`, `t` the schedule's instant, rather
///   than sleep for nothing; `needed` is `None` when the next poll would
///   have been immediate. The record of the pulled-in poll says
///   [`DelaySource::Schedule`](crate::record::DelaySource::Schedule) with the shortened delay.
/// * *Failed polls* keep the retry rules: a retry whose backoff (or
///   `Retry-After`) falls at or after the deadline stops at once with
///   `TimedOut { needed }` (SPEC §1); a retry under one whole second before
///   the deadline is a plain poll.
/// * *Retry budgets bound consecutive failures*: the per-class counters
///   reset after every poll the server answered properly (a pending state
///   or the rejection of the wait parameter), so a ten-minute wait does not
///   die of five separate 503 blips, while five 503s in a row still end it
///   with `RetriesExhausted`.
/// * *A success without a job report* (the classifier found no state in a
///   2xx body) is a protocol problem, not a pending job: the machine stops
///   with `NotRetryable { status }` and hands the answer back.
/// * *`LongPollUnsupported` for a poll that had no wait parameter* (a
///   confused server or classifier) stops with `NotRetryable { status }`
///   instead of polling in circles.
/// * *`Retry-After` on a pending answer* (a `202 Accepted` with
///   `Retry-After`, as many job APIs send) and *on the rejection of the wait
///   parameter* is honoured too: the next poll waits
///   `max(schedule, server delay)` (the first poll after the rejection:
///   the server delay), and a server delay over the automatic wait cap
///   stops with `RateLimited { retry_at }` (no notice then: the wait ends).
/// * *Failed polls in backoff mode* wait what the retry rules say (e.g.
///   250 ms for a first 503), not the job schedule: the state is unknown
///   after a failure. The schedule does not advance on failures.
/// * *Replayability*: a new poll after a pending answer is a new request,
///   not a re-send, so even a non-replayable poll (a `POST` status query)
///   keeps polling; only a *failed* non-replayable poll is never re-sent
///   (`NotReplayable`).
/// * *Attempt records*: one per poll sent (a poll in flight when a cancel
///   or the deadline ends the wait: `Aborted`, with the outcome); a pending answer's record
///   carries the next poll's [`PlannedDelay`](crate::record::PlannedDelay) with
///   [`DelaySource::Schedule`](crate::record::DelaySource::Schedule) (zero for an immediate re-poll), or
///   `RetryAfter` / `Clamp` when the server's delay was longer.
///
/// ```
/// use polite_core::{Action, Event, Method, Notice, Outcome, PollMachine, PollPolicy, RequestId,
///                   RequestInfo, Response};
/// use polite_core::poll::JobReport;
/// use polite_core::SplitMix64;
/// use std::time::{Duration, Instant, UNIX_EPOCH};
///
/// let t0 = Instant::now(); // the adapter's clock; tests use any instant
/// let mut m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
///                              SplitMix64::new(1), t0, Duration::from_secs(60)).unwrap();
///
/// // Long poll first: hold up to 25 s.
/// let Action::Send(p) = m.poll_action() else { unreachable!() };
/// assert_eq!(p.long_poll, Some(25));
/// // The server held it 25 s: still running. Poll again at once.
/// let t1 = t0 + Duration::from_secs(25);
/// m.handle(t1, Event::Response(Response::new(p.id, 200, UNIX_EPOCH).job(JobReport::State("running"))));
/// let Action::Send(p) = m.poll_action() else { unreachable!() };
/// assert_eq!(p.long_poll, Some(25));
///
/// // This server rejects the wait parameter after all: fall back, say so once.
/// m.handle(t1, Event::Response(Response::new(p.id, 400, UNIX_EPOCH).job(JobReport::LongPollUnsupported)));
/// assert_eq!(m.take_notice(), Some(Notice::LongPollUnsupported));
/// assert_eq!(m.take_notice(), None);
/// let Action::Send(p) = m.poll_action() else { unreachable!() };
/// assert_eq!(p.long_poll, None);
/// m.handle(t1, Event::Response(Response::new(p.id, 200, UNIX_EPOCH).job(JobReport::State("running"))));
/// let Action::SleepUntil(t2) = m.poll_action() else { unreachable!() }; // about 2 s (±20 %)
/// assert!(t2 >= t1 + Duration::from_millis(1600) && t2 < t1 + Duration::from_millis(2400));
///
/// m.handle(t2, Event::Tick);
/// let Action::Send(p) = m.poll_action() else { unreachable!() };
/// m.handle(t2, Event::Response(Response::new(p.id, 200, UNIX_EPOCH).job(JobReport::State("passed"))));
/// let Action::Stop(Outcome::Terminal { state }) = m.poll_action() else { unreachable!() };
/// assert_eq!(state.as_str(), "passed");
/// ```
#[derive(Clone, Debug)]
pub struct PollMachine<R> {
    /// Shared, not copied: a client's waits share its policy (about 900
    /// bytes) instead of each holding its own copy for as long as it waits.
    policy: Arc<PollPolicy>,
    request: RequestInfo,
    rng: R,
    deadline: Instant,
    abort_at: Instant,
    /// Until this instant a long poll asks the whole `max_long_poll`
    /// (`deadline - max_long_poll - ANSWER_ROOM` in whole seconds, when
    /// representable):
    /// one comparison per send instead of a subtraction of instants.
    full_long_poll_until: Option<Instant>,
    /// The wait parameter of a long poll with the whole `max_long_poll`
    /// left (as [`wait_param`] gives it, kept).
    full_long_poll: Option<u32>,
    /// `min_long_poll_interval` when it is not zero, kept.
    interval: Option<Duration>,
    last_now: Instant,
    /// Polls sent so far; the next poll's `SendId::attempt`.
    sent: u32,
    /// When the latest poll was sent.
    last_send_at: Instant,
    /// Until this instant a poll sent leaves at least `room` before the
    /// deadline (`deadline - room`, when representable).
    roomy_until: Option<Instant>,
    /// [`Self::room`] of the policy, kept (a few saturating additions).
    room: Duration,
    /// Whether the latest poll was sent by `roomy_until`: then
    /// [`plan_next`](Self::plan_next) may assume `room` was left before the
    /// deadline at the send (else nothing). A lower bound that spares the
    /// planning of most polls a subtraction of instants (issue 22).
    roomy_send: bool,
    /// How long after a roomy send an answer may come and still be planned
    /// by [`answer_fast`](Self::answer_fast), per mode (long poll, backoff);
    /// `None` turns the fast path off (the tests compare both).
    fast_span: [Option<Duration>; 2],
    /// `last_send_at + fast_span` of the poll in flight, when it was sent
    /// by `roomy_until` (and representable): until then a pending answer
    /// is planned without a subtraction of instants (issue 22).
    fast_until: Option<Instant>,
    /// The backoff's first steps, when its base and cap are under
    /// `backoff::SMALL_SECS`: the fast path's schedule without working
    /// out the exponent and the jitter's range per draw.
    steps: Option<backoff::Steps>,
    /// From this instant on an answer to the poll in flight may be planned
    /// by [`answer_fast`](Self::answer_fast) (read only while `fast_until`
    /// is set): `last_send_at + min_long_poll_interval` for a long poll
    /// (an answer from then on is polled again at once), `last_send_at`
    /// in backoff mode; raised to every later `now` the general path
    /// sees, so it is never before `last_now` and one comparison serves
    /// both (issue 22).
    fast_from: Instant,
    /// The wait parameter of the poll in flight (or the latest), if any.
    long_in_flight: Option<u32>,
    /// The one final poll pulled in ahead of the schedule has been sent.
    pulled_in: bool,
    /// Consecutive failures per retry class since the last proper answer.
    spent: Spent,
    /// Pending answers seen in backoff mode: the schedule's exponent.
    scheduled: u32,
    mode: PollMode,
    phase: Phase,
    notice: Option<Notice>,
    /// The record of the latest answered poll; `record_fresh` says it has
    /// not been taken yet. Kept whole, not in an `Option`, so that a
    /// decision writes its fields in place.
    record: AttemptRecord,
    record_fresh: bool,
}

/// The wait parameter for `secs` whole seconds of long poll: `None` under
/// one (`waitSeconds=0` would be a busy loop, so a plain poll instead).
fn wait_param(secs: u64) -> Option<u32> {
    (secs > 0).then(|| u32::try_from(secs).unwrap_or(u32::MAX))
}

impl<R: Rng> PollMachine<R> {
    /// A wait for the job polled by `request`, with a budget of `timeout`
    /// from `now`: the deadline is `now + timeout`, fixed before the first
    /// poll.
    ///
    /// The policy is a [`PollPolicy`] or an `Arc` of one: many waits can
    /// share one policy rather than each keep a copy.
    ///
    /// # Errors
    ///
    /// [`PolicyError`] when the policy makes no sense.
    ///
    /// ```
    /// use polite_core::{Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::sync::Arc;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                          SplitMix64::new(1), t0, Duration::from_secs(40)).unwrap();
    /// assert_eq!(m.deadline(), t0 + Duration::from_secs(40));
    ///
    /// let shared = Arc::new(PollPolicy::default());
    /// let a = PollMachine::new(Arc::clone(&shared), RequestInfo::new(RequestId(2), Method::Get),
    ///                          SplitMix64::new(2), t0, Duration::from_secs(40)).unwrap();
    /// assert!(std::ptr::eq(a.policy(), &*shared));
    /// ```
    pub fn new(
        policy: impl Into<Arc<PollPolicy>>,
        request: RequestInfo,
        rng: R,
        now: Instant,
        timeout: Duration,
    ) -> Result<Self, PolicyError> {
        Self::with_deadline(policy, request, rng, now, deadline_after(now, timeout))
    }

    /// A wait that spends an existing deadline (for nesting: "start the job,
    /// then wait for it" under one `--timeout`, never a fresh one).
    ///
    /// # Errors
    ///
    /// [`PolicyError`] when the policy makes no sense.
    ///
    /// ```
    /// use polite_core::{Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let deadline = Instant::now() + Duration::from_secs(30); // the outer budget
    /// let later = deadline - Duration::from_secs(12); // the job started 12 s in
    /// let m = PollMachine::with_deadline(PollPolicy::default(), RequestInfo::new(RequestId(2), Method::Get),
    ///                                    SplitMix64::new(1), later, deadline).unwrap();
    /// assert_eq!(m.deadline(), deadline);
    /// ```
    pub fn with_deadline(
        policy: impl Into<Arc<PollPolicy>>,
        request: RequestInfo,
        rng: R,
        now: Instant,
        deadline: Instant,
    ) -> Result<Self, PolicyError> {
        let policy = policy.into();
        policy.validate()?;
        Ok(PollMachine {
            abort_at: later(deadline, policy.retry.transport_cushion).unwrap_or(deadline),
            full_long_poll_until: deadline.checked_sub(
                Duration::from_secs(policy.max_long_poll.as_secs())
                    .saturating_add(PollPolicy::ANSWER_ROOM),
            ),
            full_long_poll: wait_param(policy.max_long_poll.as_secs()),
            interval: Some(policy.min_long_poll_interval).filter(|d| !d.is_zero()),
            roomy_until: deadline.checked_sub(Self::room(&policy)),
            room: Self::room(&policy),
            fast_span: Self::fast_span(&policy),
            fast_until: None,
            steps: backoff::Steps::new(&policy.backoff),
            fast_from: now,
            roomy_send: false,
            mode: if policy.long_poll_first {
                PollMode::LongPoll
            } else {
                PollMode::Backoff
            },
            policy,
            request,
            rng,
            deadline,
            last_now: now,
            sent: 0,
            last_send_at: now,
            long_in_flight: None,
            pulled_in: false,
            spent: Spent::default(),
            scheduled: 0,
            phase: Phase::Ready,
            notice: None,
            // The request and the item (0) never change: written once.
            record: AttemptRecord {
                request: request.id,
                ..AttemptRecord::EMPTY
            },
            record_fresh: false,
        })
    }

    /// Feeds what happened at `now`. Never fails: unexpected input (a late
    /// answer for an earlier poll, an event after the end, an instant
    /// earlier than one already seen) is ignored or clamped.
    ///
    /// Any event at or after the deadline ends a wait that has not ended
    /// with `TimedOut` (a `Cancel` gives `Cancelled`).
    ///
    /// ```
    /// use polite_core::{Action, Event, Method, Outcome, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                              SplitMix64::new(1), t0, Duration::from_secs(10)).unwrap();
    /// let _first = m.poll_action();
    /// m.handle(t0 + Duration::from_secs(10), Event::Tick); // the poll still hangs at the deadline
    /// assert_eq!(m.poll_action(), Action::Stop(Outcome::TimedOut { needed: None }));
    /// ```
    #[inline]
    pub fn handle(&mut self, now: Instant, event: Event<'_>) {
        if let Event::Response(ref r) = event
            && self.answer_fast(now, r)
        {
            return;
        }
        self.handle_general(now, &event);
    }

    /// [`handle`](Self::handle) for every event the fast path leaves: out
    /// of line, so that the fast path's caller keeps few registers and a
    /// small frame (issue 22).
    #[inline(never)]
    fn handle_general(&mut self, now: Instant, event: &Event<'_>) {
        let now = now.max(self.last_now);
        self.last_now = now;
        self.fast_from = self.fast_from.max(now);
        if let Phase::Done(_) = self.phase {
            return;
        }
        match event {
            Event::Cancel => {
                self.end_unanswered(Outcome::Cancelled);
                return;
            }
            Event::Tick => {}
            // By reference: no copy of the answer's header slots.
            Event::Response(r) => {
                self.on_reply(now, r.id, Reply::Status(r.status), Some(r));
            }
            Event::TransportError(id, kind) => {
                self.on_reply(now, *id, Reply::Transport(*kind), None);
            }
        }
        match self.phase {
            Phase::Done(_) => {}
            _ if now >= self.deadline => self.end_unanswered(Outcome::TimedOut { needed: None }),
            Phase::Waiting(at) if now >= at => self.phase = Phase::Ready,
            _ => {}
        }
    }

    fn finish(&mut self, outcome: Outcome) {
        self.phase = Phase::Done(outcome);
    }

    /// Ends the wait with `outcome` with no answer to act on (a cancel, the
    /// deadline). A poll still in flight then is dropped unanswered and
    /// yields its record now (SPEC §2.4: each attempt yields one):
    /// `Aborted`, with the outcome.
    fn end_unanswered(&mut self, outcome: Outcome) {
        if let Phase::InFlight(attempt) = self.phase {
            self.record = AttemptRecord {
                request: self.request.id,
                id: SendId { item: 0, attempt },
                reply: Reply::Transport(TransportErrorKind::Aborted),
                class: None,
                retry_after: RetryAfterNote::Absent,
                next: None,
                outcome: Some(outcome),
            };
            self.record_fresh = true;
        }
        self.finish(outcome);
    }

    /// What to do next. Call after construction and after every `handle`
    /// until it answers `SleepUntil` or `Stop`.
    ///
    /// * `Send(plan)`: send the next poll now; in long-poll mode
    ///   `plan.long_poll` is `Some(n)` with
    ///   `1 <= n <= min(whole seconds of (left - 1 s), max_long_poll)` (a
    ///   second kept for the held answer to come back before the deadline:
    ///   [`PollPolicy::ANSWER_ROOM`]), or `None` for a final plain poll when
    ///   no whole second is left to ask for.
    /// * `SleepUntil(t)`: wait until `t` (never after the deadline), an
    ///   answer, or a cancel. While a poll is in flight `t` is the deadline.
    /// * `Stop(outcome)`: the wait has ended; every later call repeats it.
    ///
    /// ```
    /// use polite_core::{Action, Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let new = |timeout| PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                                      SplitMix64::new(1), t0, timeout).unwrap();
    /// let Action::Send(p) = new(Duration::from_millis(7_900)).poll_action() else { unreachable!() };
    /// // Never more than the budget, and a second left for the answer.
    /// assert_eq!(p.long_poll, Some(6));
    /// // Under two seconds left: a long poll would be `waitSeconds=0`, so a
    /// // final plain poll (the budget is used to its end).
    /// let Action::Send(p) = new(Duration::from_millis(1_900)).poll_action() else { unreachable!() };
    /// assert_eq!(p.long_poll, None);
    /// ```
    #[inline]
    pub fn poll_action(&mut self) -> Action {
        match self.phase {
            Phase::Ready => {
                let now = self.last_now;
                // A roomy send (by `deadline - room`, room > 0) is before
                // the deadline and has the whole `max_long_poll` left
                // (room > max_long_poll): neither needs its comparison.
                let roomy = matches!(self.roomy_until, Some(until) if now <= until);
                if !roomy && now >= self.deadline {
                    return self.stop(Outcome::TimedOut { needed: None });
                }
                let long_poll = match self.mode {
                    PollMode::Backoff => {
                        self.fast_until = match self.fast_span[1] {
                            Some(span) if roomy => later(now, span),
                            _ => None,
                        };
                        self.fast_from = now;
                        None
                    }
                    PollMode::LongPoll if roomy => {
                        let from = match self.interval {
                            None => Some(now),
                            Some(interval) => later(now, interval),
                        };
                        (self.fast_until, self.fast_from) = match (self.fast_span[0], from) {
                            (Some(span), Some(from)) => (later(now, span), from),
                            _ => (None, now),
                        };
                        self.full_long_poll
                    }
                    PollMode::LongPoll => {
                        (self.fast_until, self.fast_from) = (None, now);
                        let max = self.policy.max_long_poll.as_secs();
                        let secs = match self.full_long_poll_until {
                            // `deadline - now >= max + room` whole seconds.
                            Some(until) if now <= until => max,
                            // Room for the held answer to come back before
                            // the deadline (`PollPolicy::ANSWER_ROOM`).
                            _ => (self.deadline - now)
                                .saturating_sub(PollPolicy::ANSWER_ROOM)
                                .as_secs()
                                .min(max),
                        };
                        // Under one whole second to ask for: `waitSeconds=0`
                        // would be a busy loop, so a final plain poll.
                        wait_param(secs)
                    }
                };
                self.long_in_flight = long_poll;
                let id = SendId {
                    item: 0,
                    attempt: self.sent,
                };
                self.sent = self.sent.saturating_add(1);
                self.last_send_at = now;
                self.roomy_send = roomy;
                self.phase = Phase::InFlight(id.attempt);
                Action::Send(SendPlan {
                    id,
                    request: self.request.id,
                    abort_at: self.abort_at,
                    long_poll,
                })
            }
            Phase::InFlight(_) => Action::SleepUntil(self.deadline),
            Phase::Waiting(at) => Action::SleepUntil(at),
            Phase::Done(o) => Action::Stop(o),
        }
    }

    /// How much room before the deadline the planning of the next poll
    /// takes for granted when a poll was sent at least this long before
    /// it: room for a whole long poll, the least interval between two, and
    /// the longest backoff (twice: the lead before the deadline is twice
    /// the latency), plus 10 s. Any value is correct (the planning checks
    /// against it and otherwise subtracts instants); this one lets almost
    /// every poll but the last few skip the subtraction.
    fn room(policy: &PollPolicy) -> Duration {
        policy
            .max_long_poll
            .saturating_add(policy.min_long_poll_interval)
            .saturating_add(policy.backoff.cap)
            .saturating_mul(2)
            .saturating_add(Duration::from_secs(10))
    }

    /// How long after its send an answer may come for
    /// [`answer_fast`](Self::answer_fast) to plan the next poll, per mode
    /// (long poll, backoff), when the poll left `room` before the deadline:
    /// an answer `since_send <= span` after it, with a next poll due in
    /// `delay` (zero for a long poll, at most the backoff cap in backoff
    /// mode), has `since_send + delay + max(2 × latency, 10 ms) <=
    /// 3 × span + 10 ms + delay <= room`: the planning's shortcut holds.
    fn fast_span(policy: &PollPolicy) -> [Option<Duration>; 2] {
        let room = Self::room(policy).saturating_sub(Duration::from_millis(10));
        // Not so long that `send + span` is rarely representable.
        let most = Duration::from_secs(1 << 32);
        [
            Some((room / 3).min(most)),
            Some((room.saturating_sub(policy.backoff.cap) / 3).min(most)),
        ]
    }

    fn stop(&mut self, outcome: Outcome) -> Action {
        self.finish(outcome);
        Action::Stop(outcome)
    }

    /// The record of the last answered poll, once (later calls give `None`
    /// until another poll is answered; a poll in flight when a cancel or
    /// the deadline ends the wait yields its record then). Records hold no
    /// header values, URLs or bodies.
    ///
    /// ```
    /// use polite_core::{Action, Event, Method, PollMachine, PollPolicy, RequestId, RequestInfo,
    ///                   Response};
    /// use polite_core::poll::JobReport;
    /// use polite_core::record::DelaySource;
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant, UNIX_EPOCH};
    /// let t0 = Instant::now();
    /// let mut m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                              SplitMix64::new(1), t0, Duration::from_secs(60)).unwrap();
    /// let Action::Send(p) = m.poll_action() else { unreachable!() };
    /// let t1 = t0 + Duration::from_secs(25);
    /// m.handle(t1, Event::Response(Response::new(p.id, 200, UNIX_EPOCH).job(JobReport::State("running"))));
    /// let rec = m.take_record().unwrap();
    /// assert_eq!(rec.id, p.id);
    /// assert_eq!(rec.next.unwrap().source, DelaySource::Schedule);
    /// assert_eq!(rec.next.unwrap().delay, Duration::ZERO); // long poll: again at once
    /// assert_eq!(m.take_record(), None);
    /// ```
    pub fn take_record(&mut self) -> Option<AttemptRecord> {
        std::mem::take(&mut self.record_fresh).then_some(self.record)
    }

    /// The notice to show the user, once: [`Notice::LongPollUnsupported`]
    /// right after the machine falls back to backoff mode; `None` before and
    /// after. Call it after `handle`.
    ///
    /// ```
    /// use polite_core::{Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let mut m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                              SplitMix64::new(1), Instant::now(), Duration::from_secs(60)).unwrap();
    /// assert_eq!(m.take_notice(), None);
    /// ```
    pub fn take_notice(&mut self) -> Option<Notice> {
        self.notice.take()
    }

    /// The outcome, once the wait has ended.
    ///
    /// ```
    /// use polite_core::{Event, Method, Outcome, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                              SplitMix64::new(1), t0, Duration::from_secs(60)).unwrap();
    /// assert_eq!(m.outcome(), None);
    /// m.handle(t0, Event::Cancel);
    /// assert_eq!(m.outcome(), Some(Outcome::Cancelled));
    /// ```
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        match self.phase {
            Phase::Done(o) => Some(o),
            _ => None,
        }
    }

    /// How the machine polls now ([`PollMode::Backoff`] is final).
    ///
    /// ```
    /// use polite_core::{Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::poll::PollMode;
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let mut policy = PollPolicy::default();
    /// policy.long_poll_first = false;
    /// let m = PollMachine::new(policy, RequestInfo::new(RequestId(1), Method::Get),
    ///                          SplitMix64::new(1), Instant::now(), Duration::from_secs(60)).unwrap();
    /// assert_eq!(m.mode(), PollMode::Backoff);
    /// ```
    #[must_use]
    pub fn mode(&self) -> PollMode {
        self.mode
    }

    /// The name of the wait query parameter for long polls
    /// ([`PollPolicy::wait_param`]): the adapter sends
    /// `?{wait_param}={plan.long_poll}` when `long_poll` is `Some`.
    ///
    /// ```
    /// use polite_core::{Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                          SplitMix64::new(1), Instant::now(), Duration::from_secs(60)).unwrap();
    /// assert_eq!(m.wait_param(), "waitSeconds");
    /// ```
    #[must_use]
    pub fn wait_param(&self) -> &'static str {
        self.policy.wait_param
    }

    /// The fixed deadline.
    ///
    /// ```
    /// use polite_core::{Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                          SplitMix64::new(1), t0, Duration::from_secs(5)).unwrap();
    /// assert_eq!(m.deadline(), t0 + Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The status request this machine sends.
    ///
    /// ```
    /// use polite_core::{Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(3), Method::Get),
    ///                          SplitMix64::new(1), Instant::now(), Duration::from_secs(5)).unwrap();
    /// assert_eq!(m.request().id, RequestId(3));
    /// ```
    #[must_use]
    pub fn request(&self) -> &RequestInfo {
        &self.request
    }

    /// The policy.
    ///
    /// ```
    /// use polite_core::{Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                          SplitMix64::new(1), Instant::now(), Duration::from_secs(5)).unwrap();
    /// assert_eq!(*m.policy(), PollPolicy::default());
    /// ```
    #[must_use]
    pub fn policy(&self) -> &PollPolicy {
        &self.policy
    }

    /// How many polls the machine has asked for so far (the next poll's
    /// [`SendId::attempt`]).
    ///
    /// ```
    /// use polite_core::{Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let mut m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                              SplitMix64::new(1), Instant::now(), Duration::from_secs(5)).unwrap();
    /// let _ = m.poll_action();
    /// assert_eq!(m.sends(), 1);
    /// ```
    #[must_use]
    pub fn sends(&self) -> u32 {
        self.sent
    }

    /// Whether a poll is in flight (the machine waits for its answer).
    ///
    /// ```
    /// use polite_core::{Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let mut m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                              SplitMix64::new(1), Instant::now(), Duration::from_secs(5)).unwrap();
    /// assert!(!m.in_flight());
    /// let _ = m.poll_action();
    /// assert!(m.in_flight());
    /// ```
    #[must_use]
    pub fn in_flight(&self) -> bool {
        matches!(self.phase, Phase::InFlight(_))
    }
}

impl<R: Rng> Machine for PollMachine<R> {
    #[inline]
    fn handle(&mut self, now: Instant, event: Event<'_>) {
        PollMachine::handle(self, now, event);
    }
    #[inline]
    fn poll_action(&mut self) -> Action {
        PollMachine::poll_action(self)
    }
    fn take_record(&mut self) -> Option<AttemptRecord> {
        PollMachine::take_record(self)
    }
    fn deadline(&self) -> Option<Instant> {
        Some(PollMachine::deadline(self))
    }
    fn take_notice(&mut self) -> Option<Notice> {
        PollMachine::take_notice(self)
    }
    fn class_of(&self, response: &Response<'_>) -> Option<RetryClass> {
        self.policy.retry.class_of_response(response)
    }
}
