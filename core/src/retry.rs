//! [`RetryMachine`]: one logical request, retried by class inside one hard
//! deadline.
//!
//! The retry rules live here once, in [`judge`]; `PollMachine` and the batch
//! machine call the same function for their failed attempts.

use std::time::{Duration, Instant};

use rand_core::Rng;

use crate::backoff;
use crate::budget::{NoBudget, RetryBudget};
use crate::input::{Event, Reply, Response, RetryClass, SendId};
use crate::outcome::Outcome;
use crate::output::{Action, SendPlan};
use crate::policy::BackoffExponent;
use crate::policy::{PolicyError, RetryPolicy};
use crate::ratelimit;
use crate::record::{AttemptRecord, DelaySource, PlannedDelay, RetryAfterNote};
use crate::request::RequestInfo;
use crate::retry_after;

/// `now + d`, or `None` when the instant is not representable.
#[inline]
pub(crate) fn later(now: Instant, d: Duration) -> Option<Instant> {
    now.checked_add(d)
}

/// A century: longer than any request lives.
const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The deadline for a budget of `timeout` starting at `now`. A timeout too
/// large to represent is taken as "a century", which no request outlives.
#[must_use]
pub fn deadline_after(now: Instant, timeout: Duration) -> Instant {
    later(now, timeout)
        .or_else(|| later(now, CENTURY))
        .unwrap_or(now)
}

/// The server's instant `now + delay`, saturating: a delay too large to
/// represent (a saturated `Retry-After: 99999999999999999999`) is a century
/// away, still an instant, so that `RateLimited { retry_at }` says "not for
/// a very long time" rather than "the server named no time" (which a batch
/// would take as leave to restart after a backoff).
#[inline]
pub(crate) fn server_instant(now: Instant, delay: Duration) -> Instant {
    deadline_after(now, delay)
}

/// What one logical request has used so far: retries per class, and what
/// a shared retry budget took for the latest one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Spent {
    per_class: [u32; 3],
    /// The cost the budget took for the latest retry; `None` before any.
    last_cost: Option<u32>,
}

impl Spent {
    #[inline]
    pub(crate) fn of(&self, class: RetryClass) -> u32 {
        self.per_class[class.index()]
    }

    /// Retries of all classes together.
    #[inline]
    pub(crate) fn total(&self) -> u32 {
        self.per_class
            .iter()
            .fold(0u32, |sum, n| sum.saturating_add(*n))
    }

    /// What the budget took for the latest retry (`None`: no retry yet).
    #[inline]
    pub(crate) fn last_cost(&self) -> Option<u32> {
        self.last_cost
    }

    /// Notes what a retry the caller counts itself (a batch restart) cost.
    #[inline]
    pub(crate) fn note_cost(&mut self, cost: u32) {
        self.last_cost = Some(cost);
    }

    /// Counts a retry of `class` that cost `cost`.
    #[inline]
    pub(crate) fn charge(&mut self, class: RetryClass, cost: u32) {
        let n = &mut self.per_class[class.index()];
        *n = n.saturating_add(1);
        self.last_cost = Some(cost);
    }
}

/// What [`judge`] decided about a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Send again after this delay.
    Retry(PlannedDelay),
    /// Stop with this outcome.
    Stop(Outcome),
}

/// A verdict with what the record needs to explain it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Judged {
    pub(crate) verdict: Verdict,
    pub(crate) class: Option<RetryClass>,
    pub(crate) note: RetryAfterNote,
    /// With `Verdict::Stop`: wait until then before stopping (a budget
    /// refusal under `backoff_when_budget_empty`).
    pub(crate) linger: Option<Instant>,
}

/// [`judge_with`] without a retry budget (`PollMachine`).
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn judge<R: Rng + ?Sized>(
    policy: &RetryPolicy,
    spent: &mut Spent,
    replayable: bool,
    now: Instant,
    deadline: Instant,
    reply: Reply,
    response: Option<&Response<'_>>,
    rng: &mut R,
) -> Judged {
    judge_with(
        policy,
        spent,
        replayable,
        now,
        deadline,
        reply,
        response,
        rng,
        &mut NoBudget,
    )
}

/// The retry rules of SPEC §2, in one place: what to do after a reply that
/// is not a success. `response` gives the headers for HTTP replies.
///
/// Order of the checks: not retryable by class → `NotRetryable` (a permanent
/// transport error → `Permanent`, whatever the replayability); not
/// replayable → `NotReplayable`; class budget (or the total budget) spent
/// → `RateLimited` or `RetriesExhausted`; server delay over the automatic
/// wait cap → `RateLimited { retry_at }`; next send at or after the
/// deadline → `TimedOut { needed }`; the shared `budget` refuses →
/// `RetryBudgetExhausted` (after the planned delay, when the policy says
/// `backoff_when_budget_empty`); else retry after
/// `max(backoff (or the clamped millisecond hint), server delay)`.
///
/// The budget is asked last, so that tokens are taken only for retries that
/// happen.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn judge_with<R: Rng + ?Sized, B: RetryBudget + ?Sized>(
    policy: &RetryPolicy,
    spent: &mut Spent,
    replayable: bool,
    now: Instant,
    deadline: Instant,
    reply: Reply,
    response: Option<&Response<'_>>,
    rng: &mut R,
    budget: &mut B,
) -> Judged {
    let class = match reply {
        Reply::Status(s) => match response {
            Some(r) => policy.class_of_response(r),
            None => policy.class_of(s),
        },
        // Permanent kinds have no class: never retried (SPEC §5).
        Reply::Transport(k) => (!k.is_permanent()).then_some(RetryClass::Transport),
    };
    let mut judged = Judged {
        verdict: Verdict::Stop(Outcome::Cancelled),
        class,
        note: RetryAfterNote::Absent,
        linger: None,
    };
    let stop = |mut j: Judged, o: Outcome| {
        j.verdict = Verdict::Stop(o);
        j
    };
    let Some(class) = class else {
        let o = match reply {
            Reply::Status(status) => Outcome::NotRetryable { status },
            Reply::Transport(cause) => Outcome::Permanent { cause },
        };
        return stop(judged, o);
    };
    // The server's delay, as asked (raw) — parsed before any stop so the
    // record always says what the server asked.
    let mut raw = None;
    if let Some(value) = response.and_then(|r| r.retry_after) {
        let (date, wall) =
            response.map_or((None, std::time::UNIX_EPOCH), |r| (r.date, r.wall_clock));
        match retry_after::server_delay(value, date, wall) {
            Ok(d) => {
                judged.note = RetryAfterNote::Valid(d);
                raw = Some(d);
            }
            Err(e) => judged.note = RetryAfterNote::Rejected(e),
        }
    }
    if !replayable {
        return stop(judged, Outcome::NotReplayable { last: reply });
    }
    let server_at = raw.map(|d| server_instant(now, d.max(policy.retry_after.min)));
    if spent.of(class) >= policy.max_retries.of(class)
        || policy
            .max_total_retries
            .is_some_and(|max| spent.total() >= max)
    {
        let o = match class {
            RetryClass::RateLimited => Outcome::RateLimited {
                retry_at: server_at,
            },
            _ => Outcome::RetriesExhausted { class, last: reply },
        };
        return stop(judged, o);
    }
    if let Some(d) = raw
        && d > policy.retry_after.auto_wait_cap
    {
        return stop(
            judged,
            Outcome::RateLimited {
                retry_at: server_at,
            },
        );
    }
    let b = policy.backoff_of(class);
    let n = match policy.backoff_exponent {
        BackoffExponent::ClassRetries => spent.of(class),
        BackoffExponent::AllRetries => spent.total(),
    };
    let mut delay = backoff::exponential(b, n);
    if backoff::draws(b.jitter) {
        delay = backoff::jitter(delay, b.jitter, rng.next_u64());
    }
    let mut source = DelaySource::Backoff;
    // A millisecond hint (x-amz-retry-after), clamped to [delay, delay + extra].
    if let Some(extra) = policy.retry_after_ms
        && let Some(ms) = response
            .and_then(|r| r.retry_after_ms)
            .and_then(|v| ratelimit::digits(v.trim_ascii()))
    {
        let asked = Duration::from_millis(ms);
        let hinted = asked.clamp(delay, delay.saturating_add(extra));
        if hinted > delay {
            source = if hinted < asked {
                DelaySource::Clamp
            } else {
                DelaySource::RetryAfter
            };
            delay = hinted;
        }
    }
    if let Some(d) = raw {
        // Within the cap (checked above), and the cap is at most the clamp's
        // maximum, so clamping can only raise the value.
        let clamped = d.max(policy.retry_after.min);
        if clamped > delay {
            delay = clamped;
            source = if clamped > d {
                DelaySource::Clamp
            } else {
                DelaySource::RetryAfter
            };
        }
    }
    let Some(send_at) = later(now, delay).filter(|t| *t < deadline) else {
        return stop(
            judged,
            Outcome::TimedOut {
                needed: later(now, delay),
            },
        );
    };
    let plan = PlannedDelay {
        delay,
        source,
        send_at,
    };
    match budget.withdraw(class, reply) {
        Some(cost) => {
            spent.charge(class, cost);
            judged.verdict = Verdict::Retry(plan);
        }
        None => {
            judged.verdict = Verdict::Stop(Outcome::RetryBudgetExhausted { class, last: reply });
            if policy.backoff_when_budget_empty {
                judged.linger = Some(send_at);
            }
        }
    }
    judged
}

/// Where a logical request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The next attempt may be sent now.
    Ready,
    /// This attempt is in flight.
    InFlight(u32),
    /// Waiting to send the next attempt at this instant.
    Waiting(Instant),
    /// Decided to stop with `RetryBudgetExhausted` for this failure, after
    /// waiting until this instant (`backoff_when_budget_empty`).
    Closing(Instant, RetryClass, Reply),
    /// Ended.
    Done(Outcome),
}

/// The state of one logical request without its policy and random source:
/// the part a batch keeps per item.
#[derive(Clone, Debug)]
pub(crate) struct RetryState {
    pub(crate) request: RequestInfo,
    item: u32,
    deadline: Instant,
    abort_at: Instant,
    last_now: Instant,
    pub(crate) sent: u32,
    pub(crate) spent: Spent,
    phase: Phase,
    record: Option<AttemptRecord>,
}

impl RetryState {
    pub(crate) fn new(
        policy: &RetryPolicy,
        request: RequestInfo,
        item: u32,
        now: Instant,
        deadline: Instant,
    ) -> RetryState {
        RetryState {
            request,
            item,
            deadline,
            abort_at: later(deadline, policy.transport_cushion).unwrap_or(deadline),
            last_now: now,
            sent: 0,
            spent: Spent::default(),
            phase: Phase::Ready,
            record: None,
        }
    }

    /// Whether the next call to `poll_action` would send (used by pacing to
    /// gate sends through a throttle).
    pub(crate) fn wants_send(&self) -> bool {
        self.phase == Phase::Ready && self.last_now < self.deadline
    }

    pub(crate) fn outcome(&self) -> Option<Outcome> {
        match self.phase {
            Phase::Done(o) => Some(o),
            _ => None,
        }
    }

    pub(crate) fn take_record(&mut self) -> Option<AttemptRecord> {
        self.record.take()
    }

    pub(crate) fn in_flight(&self) -> bool {
        matches!(self.phase, Phase::InFlight(_))
    }

    /// The instant of the next wake-up this request waits for (a backoff,
    /// or a delayed stop), if it waits.
    pub(crate) fn wake_at(&self) -> Option<Instant> {
        match self.phase {
            Phase::Waiting(at) | Phase::Closing(at, ..) => Some(at),
            _ => None,
        }
    }

    fn finish(&mut self, outcome: Outcome) {
        self.phase = Phase::Done(outcome);
    }

    pub(crate) fn handle<R: Rng + ?Sized, B: RetryBudget + ?Sized>(
        &mut self,
        policy: &RetryPolicy,
        rng: &mut R,
        budget: &mut B,
        now: Instant,
        event: Event<'_>,
    ) {
        let now = now.max(self.last_now);
        self.last_now = now;
        if let Phase::Done(_) = self.phase {
            return;
        }
        match event {
            Event::Cancel => self.finish(Outcome::Cancelled),
            Event::Tick => match self.phase {
                Phase::InFlight(_) if now >= self.deadline => {
                    self.finish(Outcome::TimedOut { needed: None });
                }
                Phase::Waiting(_) if now >= self.deadline => {
                    self.finish(Outcome::TimedOut { needed: None });
                }
                Phase::Waiting(at) if now >= at => self.phase = Phase::Ready,
                // The stop was decided before the deadline; it stands.
                Phase::Closing(at, class, last) if now >= at => {
                    self.finish(Outcome::RetryBudgetExhausted { class, last });
                }
                _ => {}
            },
            Event::Response(r) => {
                let reply = Reply::Status(r.status);
                self.on_reply(policy, rng, budget, now, r.id, reply, Some(&r));
            }
            Event::TransportError(id, kind) => {
                let reply = Reply::Transport(kind);
                self.on_reply(policy, rng, budget, now, id, reply, None);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_reply<R: Rng + ?Sized, B: RetryBudget + ?Sized>(
        &mut self,
        policy: &RetryPolicy,
        rng: &mut R,
        budget: &mut B,
        now: Instant,
        id: SendId,
        reply: Reply,
        response: Option<&Response<'_>>,
    ) {
        // Only the answer to the attempt in flight counts; anything else is a
        // late or stray answer and is ignored.
        if self.phase != Phase::InFlight(id.attempt) || id.item != self.item {
            return;
        }
        let mut record = AttemptRecord {
            request: self.request.id,
            id,
            reply,
            class: None,
            retry_after: RetryAfterNote::Absent,
            next: None,
            outcome: None,
        };
        let stale = match (self.request.generation, response.and_then(|r| r.generation)) {
            (Some(mine), Some(current)) => mine != current,
            _ => false,
        };
        let outcome = if now >= self.deadline {
            Some(Outcome::TimedOut { needed: None })
        } else if stale {
            Some(Outcome::Stale)
        } else {
            match reply {
                Reply::Status(s @ 100..=399) => {
                    budget.deposit(self.spent.last_cost());
                    Some(Outcome::Succeeded { status: s })
                }
                Reply::Status(s @ (0..=99 | 600..)) => Some(Outcome::NotRetryable { status: s }),
                _ => {
                    let j = judge_with(
                        policy,
                        &mut self.spent,
                        self.request.is_replayable(),
                        now,
                        self.deadline,
                        reply,
                        response,
                        rng,
                        budget,
                    );
                    record.class = j.class;
                    record.retry_after = j.note;
                    match (j.verdict, j.linger) {
                        (Verdict::Retry(plan), _) => {
                            record.next = Some(plan);
                            self.phase = Phase::Waiting(plan.send_at);
                            None
                        }
                        (
                            Verdict::Stop(o @ Outcome::RetryBudgetExhausted { class, last }),
                            Some(at),
                        ) => {
                            // The record says how the request ended; the
                            // machine says so after the wait.
                            record.outcome = Some(o);
                            self.phase = Phase::Closing(at, class, last);
                            None
                        }
                        (Verdict::Stop(o), _) => Some(o),
                    }
                }
            }
        };
        if let Some(o) = outcome {
            record.outcome = Some(o);
            self.finish(o);
        }
        self.record = Some(record);
    }

    pub(crate) fn poll_action(&mut self) -> Action {
        match self.phase {
            Phase::Ready if self.last_now >= self.deadline => {
                let o = Outcome::TimedOut { needed: None };
                self.finish(o);
                Action::Stop(o)
            }
            Phase::Ready => {
                let id = SendId {
                    item: self.item,
                    attempt: self.sent,
                };
                self.sent += 1;
                self.phase = Phase::InFlight(id.attempt);
                Action::Send(SendPlan {
                    id,
                    request: self.request.id,
                    abort_at: self.abort_at,
                    long_poll: None,
                })
            }
            Phase::InFlight(_) => Action::SleepUntil(self.deadline),
            Phase::Waiting(at) | Phase::Closing(at, ..) => Action::SleepUntil(at),
            Phase::Done(o) => Action::Stop(o),
        }
    }
}

/// One logical request, sent one or more times until it succeeds, is not
/// worth retrying, runs out of retries, runs out of time, or is cancelled.
///
/// Sans-IO: it never reads a clock, sleeps, or opens a socket; it owns its
/// random source `R` and takes `now` with every event.
///
/// **Inputs**: [`handle`](Self::handle)`(now, event)` with an [`Event`].
/// **Outputs**: [`poll_action`](Self::poll_action) answers an [`Action`];
/// [`take_record`](Self::take_record) the [`AttemptRecord`] of the last
/// answered attempt.
///
/// **Invariants** (checked by property tests):
/// * every `SleepUntil(t)` has `t <= deadline`; every send happens before
///   the deadline and carries `abort_at = deadline + cushion`;
/// * never a send before the server's `Retry-After` instant (the delay used is
///   `max(backoff, server delay)`; a server delay over the automatic wait
///   cap stops with `RateLimited`);
/// * a request that is not replayable is sent once;
/// * retries per class stay within the class budget;
/// * after `Cancel` the next action is `Stop(Cancelled)`;
/// * `Stop` is sticky: the machine ends with exactly one outcome;
/// * an answer at or after the deadline gives `TimedOut`, even a success;
/// * time going backwards is clamped to the latest `now` seen; late answers
///   for earlier attempts are ignored;
/// * with a shared retry budget `B` ([`with_budget`](Self::with_budget)):
///   every retry was granted by the budget, and a success gives back its
///   last retry's cost (see [`RetryBudget`]).
///
/// The budget `B` defaults to [`NoBudget`], which never refuses and
/// compiles to nothing: the plain machine pays nothing for the feature.
///
/// ```
/// use polite_core::{Action, Event, Method, Outcome, RequestId, RequestInfo, Response,
///                   RetryMachine, RetryPolicy};
/// use polite_core::SplitMix64;
/// use std::time::{Duration, Instant, UNIX_EPOCH};
///
/// let t0 = Instant::now(); // the adapter's clock; tests use any instant
/// let mut m = RetryMachine::new(RetryPolicy::default(),
///     RequestInfo::new(RequestId(1), Method::Get), SplitMix64::new(42),
///     t0, Duration::from_secs(30)).unwrap();
///
/// let Action::Send(first) = m.poll_action() else { unreachable!() };
/// // The server answers 429 with Retry-After: 2 after 10 ms.
/// let t1 = t0 + Duration::from_millis(10);
/// m.handle(t1, Event::Response(Response::new(first.id, 429, UNIX_EPOCH).retry_after(b"2")));
/// assert_eq!(m.poll_action(), Action::SleepUntil(t1 + Duration::from_secs(2)));
///
/// m.handle(t1 + Duration::from_secs(2), Event::Tick);
/// let Action::Send(second) = m.poll_action() else { unreachable!() };
/// m.handle(t1 + Duration::from_secs(2), Event::Response(Response::new(second.id, 200, UNIX_EPOCH)));
/// assert_eq!(m.poll_action(), Action::Stop(Outcome::Succeeded { status: 200 }));
/// ```
#[derive(Clone, Debug)]
pub struct RetryMachine<R, B = NoBudget> {
    policy: RetryPolicy,
    state: RetryState,
    rng: R,
    budget: B,
}

impl<R: Rng> RetryMachine<R> {
    /// A machine for `request` with a budget of `timeout` from `now`: the
    /// deadline is `now + timeout`, fixed before the first send.
    ///
    /// # Errors
    ///
    /// [`PolicyError`] when the policy makes no sense.
    pub fn new(
        policy: RetryPolicy,
        request: RequestInfo,
        rng: R,
        now: Instant,
        timeout: Duration,
    ) -> Result<Self, PolicyError> {
        Self::with_deadline(policy, request, rng, now, deadline_after(now, timeout))
    }

    /// A machine that spends an existing deadline (for nesting: an inner
    /// machine receives the outer deadline, never a fresh timeout).
    ///
    /// # Errors
    ///
    /// [`PolicyError`] when the policy makes no sense.
    pub fn with_deadline(
        policy: RetryPolicy,
        request: RequestInfo,
        rng: R,
        now: Instant,
        deadline: Instant,
    ) -> Result<Self, PolicyError> {
        policy.validate()?;
        Ok(RetryMachine {
            state: RetryState::new(&policy, request, 0, now, deadline),
            policy,
            rng,
            budget: NoBudget,
        })
    }
}

impl<R: Rng, B: RetryBudget> RetryMachine<R, B> {
    /// The same machine drawing its retries from a shared retry budget
    /// (see [`RetryBudget`]): each retry first withdraws its cost, a
    /// refusal ends the request with [`Outcome::RetryBudgetExhausted`],
    /// and a success gives back its last retry's cost. Share one bucket
    /// between machines through `&mut`, `Arc<Mutex<_>>` or `Rc<RefCell<_>>`.
    /// Call it before the first answer.
    ///
    /// ```
    /// use polite_core::{Action, Event, Method, Outcome, Reply, RequestId, RequestInfo, Response,
    ///                   RetryBucket, RetryClass, RetryCosts, RetryMachine, RetryPolicy};
    /// use polite_core::SplitMix64;
    /// use std::cell::RefCell;
    /// use std::rc::Rc;
    /// use std::time::{Duration, Instant, UNIX_EPOCH};
    ///
    /// let t0 = Instant::now();
    /// // 20 tokens; a retry after a server error costs 14.
    /// let bucket = Rc::new(RefCell::new(RetryBucket::new(20, RetryCosts::default())));
    /// let new = |id| RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(id), Method::Get),
    ///     SplitMix64::new(id), t0, Duration::from_secs(30)).unwrap().with_budget(Rc::clone(&bucket));
    /// let (mut a, mut b) = (new(1), new(2));
    ///
    /// let Action::Send(pa) = a.poll_action() else { unreachable!() };
    /// let Action::Send(pb) = b.poll_action() else { unreachable!() };
    /// a.handle(t0, Event::Response(Response::new(pa.id, 503, UNIX_EPOCH)));
    /// assert!(matches!(a.poll_action(), Action::SleepUntil(_))); // a retries: 6 tokens left
    /// b.handle(t0, Event::Response(Response::new(pb.id, 503, UNIX_EPOCH)));
    /// assert_eq!(b.poll_action(), Action::Stop(Outcome::RetryBudgetExhausted {
    ///     class: RetryClass::ServerError, last: Reply::Status(503) }));
    /// assert_eq!(bucket.borrow().tokens(), 6);
    /// ```
    #[must_use]
    pub fn with_budget<B2: RetryBudget>(self, budget: B2) -> RetryMachine<R, B2> {
        RetryMachine {
            policy: self.policy,
            state: self.state,
            rng: self.rng,
            budget,
        }
    }

    /// The retry budget.
    ///
    /// ```
    /// use polite_core::{Method, NoBudget, RequestId, RequestInfo, RetryBucket, RetryMachine, RetryPolicy};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                           SplitMix64::new(1), Instant::now(), Duration::from_secs(5)).unwrap();
    /// assert_eq!(*m.budget(), NoBudget);
    /// let m = m.with_budget(RetryBucket::default());
    /// assert_eq!(m.budget().tokens(), 500);
    /// ```
    #[must_use]
    pub fn budget(&self) -> &B {
        &self.budget
    }

    /// Feeds what happened at `now`. Never fails: unexpected input (a late
    /// answer, an event after the end) is ignored.
    #[inline]
    pub fn handle(&mut self, now: Instant, event: Event<'_>) {
        self.state
            .handle(&self.policy, &mut self.rng, &mut self.budget, now, event);
    }

    /// What to do next. Call after construction and after every `handle`
    /// until it answers `SleepUntil` or `Stop`.
    #[inline]
    pub fn poll_action(&mut self) -> Action {
        self.state.poll_action()
    }

    /// The record of the last answered attempt, once (later calls give
    /// `None` until another attempt is answered).
    pub fn take_record(&mut self) -> Option<AttemptRecord> {
        self.state.take_record()
    }

    /// The outcome, once the machine has ended.
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        self.state.outcome()
    }

    /// The fixed deadline.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.state.deadline
    }

    /// The request this machine governs.
    #[must_use]
    pub fn request(&self) -> &RequestInfo {
        &self.state.request
    }

    /// The policy.
    #[must_use]
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// How many sends the machine has asked for so far.
    #[must_use]
    pub fn sends(&self) -> u32 {
        self.state.sent
    }

    /// Whether a send is in flight (the machine waits for its answer).
    #[must_use]
    pub fn in_flight(&self) -> bool {
        self.state.in_flight()
    }
}
