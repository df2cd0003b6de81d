//! [`RetryMachine`]: one logical request, retried by class inside one hard
//! deadline.
//!
//! The retry rules live here once, in [`judge`]; `PollMachine` and the batch
//! machine call the same function for their failed attempts.

use std::time::{Duration, Instant};

use rand_core::Rng;

use crate::backoff;
use crate::event::{Action, Event, Response, SendId, SendPlan};
use crate::outcome::{Outcome, Reply, RetryClass};
use crate::policy::{PolicyError, RetryPolicy};
use crate::record::{AttemptRecord, DelaySource, PlannedDelay, RetryAfterNote};
use crate::request::RequestInfo;
use crate::retry_after;

/// `now + d`, or `None` when the instant is not representable.
#[inline]
pub(crate) fn later(now: Instant, d: Duration) -> Option<Instant> {
    now.checked_add(d)
}

/// The deadline for a budget of `timeout` starting at `now`. A timeout too
/// large to represent is taken as "a century", which no request outlives.
#[must_use]
pub fn deadline_after(now: Instant, timeout: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    later(now, timeout)
        .or_else(|| later(now, CENTURY))
        .unwrap_or(now)
}

/// Retries used so far, per class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Spent([u32; 3]);

impl Spent {
    #[inline]
    pub(crate) fn of(&self, class: RetryClass) -> u32 {
        self.0[class.index()]
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
}

/// The retry rules of SPEC §2, in one place: what to do after a reply that
/// is not a success. `response` gives the headers for HTTP replies.
///
/// Order of the checks: not retryable by class → `NotRetryable`; not
/// replayable → `NotReplayable`; class budget spent → `RateLimited` or
/// `RetriesExhausted`; server delay over the automatic wait cap →
/// `RateLimited { retry_at }`; next send at or after the deadline →
/// `TimedOut { needed }`; else retry after `max(backoff, server delay)`.
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
    let class = match reply {
        Reply::Status(s) => policy.class_of(s),
        Reply::Transport(_) => Some(RetryClass::Transport),
    };
    let mut judged = Judged {
        verdict: Verdict::Stop(Outcome::Cancelled),
        class,
        note: RetryAfterNote::Absent,
    };
    let stop = |mut j: Judged, o: Outcome| {
        j.verdict = Verdict::Stop(o);
        j
    };
    let Some(class) = class else {
        let status = match reply {
            Reply::Status(s) => s,
            Reply::Transport(_) => 0, // unreachable: transport always has a class
        };
        return stop(judged, Outcome::NotRetryable { status });
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
    let server_at = raw.and_then(|d| later(now, d.max(policy.retry_after.min)));
    if spent.of(class) >= policy.max_retries.of(class) {
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
    let mut delay = backoff::exponential(&policy.backoff, spent.of(class));
    if backoff::draws(policy.backoff.jitter) {
        delay = backoff::jitter(delay, policy.backoff.jitter, rng.next_u64());
    }
    let mut source = DelaySource::Backoff;
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
    spent.0[class.index()] += 1;
    judged.verdict = Verdict::Retry(PlannedDelay {
        delay,
        source,
        send_at,
    });
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

    fn finish(&mut self, outcome: Outcome) {
        self.phase = Phase::Done(outcome);
    }

    pub(crate) fn handle<R: Rng + ?Sized>(
        &mut self,
        policy: &RetryPolicy,
        rng: &mut R,
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
                _ => {}
            },
            Event::Response(r) => {
                self.on_reply(policy, rng, now, r.id, Reply::Status(r.status), Some(&r));
            }
            Event::TransportError(id, kind) => {
                self.on_reply(policy, rng, now, id, Reply::Transport(kind), None);
            }
        }
    }

    fn on_reply<R: Rng + ?Sized>(
        &mut self,
        policy: &RetryPolicy,
        rng: &mut R,
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
                Reply::Status(s @ 100..=399) => Some(Outcome::Succeeded { status: s }),
                Reply::Status(s @ (0..=99 | 600..)) => Some(Outcome::NotRetryable { status: s }),
                _ => {
                    let j = judge(
                        policy,
                        &mut self.spent,
                        self.request.is_replayable(),
                        now,
                        self.deadline,
                        reply,
                        response,
                        rng,
                    );
                    record.class = j.class;
                    record.retry_after = j.note;
                    match j.verdict {
                        Verdict::Retry(plan) => {
                            record.next = Some(plan);
                            self.phase = Phase::Waiting(plan.send_at);
                            None
                        }
                        Verdict::Stop(o) => Some(o),
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
            Phase::Waiting(at) => Action::SleepUntil(at),
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
///   for earlier attempts are ignored.
///
/// ```
/// use polite_core::{Action, Event, Method, Outcome, RequestId, RequestInfo, Response,
///                   RetryMachine, RetryPolicy};
/// use polite_core::testing::SplitMix64;
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
pub struct RetryMachine<R> {
    policy: RetryPolicy,
    state: RetryState,
    rng: R,
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
        })
    }

    /// Feeds what happened at `now`. Never fails: unexpected input (a late
    /// answer, an event after the end) is ignored.
    #[inline]
    pub fn handle(&mut self, now: Instant, event: Event<'_>) {
        self.state.handle(&self.policy, &mut self.rng, now, event);
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
