//! [`RetryState`]: where one logical request stands, without its policy,
//! random source or budget — the part a [`RetryMachine`](crate::RetryMachine)
//! wraps and a batch keeps per item.

use std::time::{Duration, Instant};

use rand_core::Rng;

use crate::backoff;
use crate::budget::RetryBudget;
use crate::decide::{Spent, Verdict, classified, judge_with, later, over_backoff};
use crate::input::{Event, Reply, Response, RetryClass, SendId, TransportErrorKind};
use crate::outcome::Outcome;
use crate::output::{Action, SendPlan};
use crate::policy::{BackoffExponent, Jitter, RetryPolicy};
use crate::record::{AttemptRecord, DelaySource, PlannedDelay, RetryAfterNote};
use crate::request::RequestInfo;
use crate::retry_after;

/// The longest server delay the fast path takes, in whole seconds: under
/// 2^64 ns.
const MAX_SECS: u64 = u64::MAX / 1_000_000_000 - 1;

/// The code in [`FastPath::codes`] of a status of neither class.
const NEITHER: u8 = 2;

/// Every status [`NEITHER`].
const NO_CODES: [u8; CODED] = [NEITHER; CODED];

/// How many statuses from 400 on [`FastPath::codes`] codes: 400..=527,
/// every status of the default classes and the common others (408,
/// 520..=527). The fast path leaves 528..=599 to the general path.
const CODED: usize = 128;

/// The bits of the default policy's rate-limited and server-error statuses.
const DEFAULT_STATUSES: ([u64; 4], [u64; 4]) = {
    let policy = RetryPolicy::DEFAULT_STATUS_SETS;
    (policy.0.bits(), policy.1.bits())
};

/// [`FastPath::codes`] for the default policy's statuses.
const DEFAULT_CODES: [u8; CODED] = codes_of(DEFAULT_STATUSES.0, DEFAULT_STATUSES.1);

/// [`FastPath::codes`] for the statuses `rl` (rate limited) and `se`
/// (server errors), as [`StatusSet`](crate::policy::StatusSet) bits.
const fn codes_of(rl: [u64; 4], se: [u64; 4]) -> [u8; CODED] {
    let mut codes = NO_CODES;
    let mut i = 0;
    while i < CODED {
        // Rate limited first, as the general path's `class_of`.
        codes[i] = if rl[i / 64] & (1 << (i % 64)) != 0 {
            RetryClass::RateLimited.index() as u8
        } else if se[i / 64] & (1 << (i % 64)) != 0 {
            RetryClass::ServerError.index() as u8
        } else {
            NEITHER
        };
        i += 1;
    }
    codes
}

/// A backoff in nanoseconds, as [`backoff::delay_nanos`] takes it.
#[derive(Clone, Copy, Debug)]
struct FastBackoff {
    base: u64,
    cap: u64,
    multiplier: u32,
    jitter: Jitter,
    /// `jitter == Jitter::Full`.
    full: bool,
}

impl FastBackoff {
    /// The backoff of a fast path that is off (never drawn from).
    const OFF: FastBackoff = FastBackoff {
        base: 0,
        cap: 0,
        multiplier: 1,
        jitter: Jitter::None,
        full: false,
    };

    fn of(b: &crate::policy::Backoff) -> Option<FastBackoff> {
        let cap = backoff::small_nanos(b.cap)?;
        Some(FastBackoff {
            // At most the cap, as `delay_nanos` takes it (the same delays).
            base: backoff::small_nanos(b.base)?.min(cap),
            cap,
            multiplier: b.multiplier,
            jitter: b.jitter,
            full: b.jitter == Jitter::Full,
        })
    }

    /// At least the longest delay this backoff draws, in nanoseconds:
    /// the cap, or twice the cap for `Percent` (at most 100 %: the delay
    /// is under `cap - cap * p / 100 + cap * 2p / 100 <= 2 * cap`).
    fn longest(&self) -> u64 {
        match self.jitter {
            Jitter::Percent(_) => self.cap.saturating_mul(2),
            _ => self.cap,
        }
    }
}

/// What [`RetryState::answer_fast`] decides by: the parts of a policy and a
/// request that a plain answer needs, worked out once at construction
/// (issue 22). The fast path takes an answer only when it is on, and
/// hands every other answer (and every answer it would stop on before
/// drawing a delay) to the general path, [`RetryState::handle`], which
/// decides by the whole policy.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastPath {
    /// Off when the request is not replayable or carries a generation, or
    /// the policy counts total retries, takes the exponent from all
    /// classes, reads millisecond hints, or has a backoff of 2^64 ns or more.
    /// Tested by successes only: when off, every status is coded
    /// [`NEITHER`], which the failures leave to the general path.
    on: bool,
    /// The class of status `400 + i` (below 528) in byte `i`: its
    /// [`RetryClass::index`] (0 rate limited, 1 server error), or
    /// [`NEITHER`]: one load instead of a test of two bitsets (128 bytes
    /// for their 64; two bits a status counted 5 instructions more).
    codes: [u8; CODED],
    /// The retry budget of each class, by index.
    max: [u32; 2],
    /// The backoff of each class, by [`RetryClass::index`] (rate limited,
    /// server error).
    backoff: [FastBackoff; 2],
    /// The longest backoff of each class in nanoseconds
    /// ([`FastBackoff::longest`]).
    longest: [u64; 2],
    /// For each class, the deadline less its longest backoff (or the
    /// machine's start when that is before it, or not an instant): an
    /// answer before it is before the deadline, and so is its next send
    /// after any backoff of at most `longest` — one comparison of
    /// instants instead of two (issue 22).
    roomy_until: [Instant; 2],
    /// `retry_after.min` in nanoseconds.
    min: u64,
    /// Whole seconds of `retry_after.auto_wait_cap`: a delay of whole
    /// seconds is over the cap exactly when its seconds are. At most
    /// `MAX_SECS` (a longer delay is left to the general path), so that
    /// a server's delay is under 2^64 ns.
    auto_wait_cap_secs: u64,
    /// `backoff_when_budget_empty`.
    linger: bool,
}

/// The half of a [`FastPath`] that only its policy decides, worked out
/// once per policy ([`CheckedRetryPolicy`](crate::CheckedRetryPolicy)):
/// [`FastPath::of`] adds a request's and a machine's instants.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastPolicy {
    /// The policy's part of [`FastPath::on`].
    on: bool,
    /// [`FastPath::codes`] when on.
    codes: [u8; CODED],
    max: [u32; 2],
    /// [`FastPath::backoff`] when on.
    backoff: [FastBackoff; 2],
    /// [`FastPath::longest`] when on.
    longest: [u64; 2],
    min: u64,
    auto_wait_cap_secs: u64,
    linger: bool,
}

impl FastPolicy {
    /// The policy's half of the fast path's constants.
    pub(crate) fn new(policy: &RetryPolicy) -> FastPolicy {
        let rl = policy.rate_limited_statuses.bits();
        let se = policy.server_error_statuses.bits();
        // The default classes' table is built at compile time: building it
        // here cost about 2 k instructions per machine, ten decisions' worth
        // (BENCHMARKS.md 1.2).
        let codes = if rl == DEFAULT_STATUSES.0 && se == DEFAULT_STATUSES.1 {
            DEFAULT_CODES
        } else {
            codes_of(rl, se)
        };
        let limited = FastBackoff::of(policy.backoff_of(RetryClass::RateLimited));
        let server = FastBackoff::of(policy.backoff_of(RetryClass::ServerError));
        let on = policy.max_total_retries.is_none()
            && policy.backoff_exponent == BackoffExponent::ClassRetries
            && policy.retry_after_ms.is_none();
        let min = backoff::small_nanos(policy.retry_after.min);
        let (on, backoff) = match (limited, server) {
            (Some(l), Some(s)) if on && min.is_some() => (true, [l, s]),
            _ => (false, [FastBackoff::OFF; 2]),
        };
        FastPolicy {
            on,
            codes: if on { codes } else { NO_CODES },
            max: [
                policy.max_retries.of(RetryClass::RateLimited),
                policy.max_retries.of(RetryClass::ServerError),
            ],
            backoff,
            longest: [backoff[0].longest(), backoff[1].longest()],
            min: min.unwrap_or(0),
            auto_wait_cap_secs: policy.retry_after.auto_wait_cap.as_secs().min(MAX_SECS),
            linger: policy.backoff_when_budget_empty,
        }
    }
}

impl FastPath {
    /// The fast path's constants for `policy` and `request`, for a machine
    /// started at `now` with `deadline`.
    #[inline]
    pub(crate) fn new(
        policy: &RetryPolicy,
        request: &RequestInfo,
        now: Instant,
        deadline: Instant,
    ) -> FastPath {
        FastPath::of(&FastPolicy::new(policy), request, now, deadline)
    }

    /// The fast path's constants from the policy's half (worked out once
    /// per policy by [`FastPolicy::new`] for a checked policy, or here by
    /// [`new`](Self::new)): what is left per machine is the request's part
    /// of `on` and the two instants.
    #[inline]
    pub(crate) fn of(
        policy: &FastPolicy,
        request: &RequestInfo,
        now: Instant,
        deadline: Instant,
    ) -> FastPath {
        let on = policy.on && request.is_replayable() && request.generation.is_none();
        let (backoff, longest) = if on {
            (policy.backoff, policy.longest)
        } else {
            ([FastBackoff::OFF; 2], [0, 0])
        };
        let roomy = |l: u64| {
            deadline
                .checked_sub(Duration::from_nanos(l))
                .filter(|t| *t > now)
                .unwrap_or(now)
        };
        FastPath {
            on,
            codes: if on { policy.codes } else { NO_CODES },
            max: policy.max,
            backoff,
            longest,
            roomy_until: [roomy(longest[0]), roomy(longest[1])],
            min: policy.min,
            auto_wait_cap_secs: policy.auto_wait_cap_secs,
            linger: policy.linger,
        }
    }

    /// The same constants with the fast path off (tests compare both paths).
    #[cfg(test)]
    pub(crate) fn off(mut self) -> FastPath {
        self.on = false;
        self.codes = NO_CODES;
        self
    }
}

/// A send's id as one number: one comparison of 64 bits instead of two
/// of 32 (the loads of adjacent fields combine).
#[inline(always)]
fn key(id: SendId) -> u64 {
    u64::from(id.item) | (u64::from(id.attempt) << 32)
}

/// Where a logical request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The next attempt may be sent now.
    Ready,
    /// This send is in flight (its whole id: one comparison with an
    /// answer's).
    InFlight(SendId),
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
    pub(super) deadline: Instant,
    abort_at: Instant,
    last_now: Instant,
    pub(crate) sent: u32,
    pub(crate) spent: Spent,
    phase: Phase,
    /// The record of the latest answered attempt; `record_fresh` says it
    /// has not been taken yet. Kept whole, not in an `Option`: its request
    /// and item never change, so a decision writes only the rest (issue 22).
    record: AttemptRecord,
    record_fresh: bool,
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
            record: AttemptRecord {
                request: request.id,
                id: SendId { item, attempt: 0 },
                ..AttemptRecord::EMPTY
            },
            record_fresh: false,
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
        std::mem::take(&mut self.record_fresh).then_some(self.record)
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

    /// Ends the request with `outcome`. An attempt still in flight then
    /// (a cancel, the deadline) is dropped unanswered and yields its record
    /// now (SPEC §2.4: each attempt yields one): `Aborted`, with the
    /// outcome.
    pub(crate) fn finish(&mut self, outcome: Outcome) {
        if let Phase::InFlight(id) = self.phase {
            self.record_fresh = true;
            let record = &mut self.record;
            record.id.attempt = id.attempt;
            record.reply = Reply::Transport(TransportErrorKind::Aborted);
            record.class = None;
            record.retry_after = RetryAfterNote::Absent;
            record.next = None;
            record.outcome = Some(outcome);
        }
        self.phase = Phase::Done(outcome);
    }

    #[inline]
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
            // By reference: moving the answer out of the event would copy
            // its ~200 bytes of header slots (a `memcpy` per decision).
            Event::Response(ref r) => {
                let reply = Reply::Status(r.status);
                self.on_reply(policy, rng, budget, now, r.id, reply, Some(r));
            }
            Event::TransportError(id, kind) => {
                let reply = Reply::Transport(kind);
                self.on_reply(policy, rng, budget, now, id, reply, None);
            }
        }
    }

    /// The fast path of an answer (issue 22): decides a plain answer — no
    /// caller's class, `Retry-After` absent or all digits, a success or a
    /// status of a class with retries left — as [`handle`](Self::handle)
    /// would, with the policy's constants worked out beforehand and fewer
    /// branches. `false` (and nothing changed) for any other answer: the
    /// caller then hands it to `handle`.
    #[inline]
    pub(crate) fn answer_fast<R: Rng + ?Sized, B: RetryBudget + ?Sized>(
        &mut self,
        fast: &FastPath,
        rng: &mut R,
        budget: &mut B,
        now: Instant,
        r: &Response<'_>,
    ) -> bool {
        let id = r.id;
        if r.retry_class.is_some() || !matches!(self.phase, Phase::InFlight(s) if key(s) == key(id))
        {
            return false;
        }
        // Time gone backwards (clamped to the latest `now` by the general
        // path): the general path.
        if now < self.last_now {
            return false;
        }
        let status = r.status;
        let reply = Reply::Status(status);
        let i = usize::from(status).wrapping_sub(400);
        if i >= CODED {
            // Not a success (528..=599 among them: not coded), or the
            // deadline reached: the general path.
            if !fast.on || !(100..=399).contains(&status) || now >= self.deadline {
                return false;
            }
            // A success (the caller classed nothing: `retry_class` is None).
            self.last_now = now;
            budget.deposit(self.spent.last_cost());
            let o = Outcome::Succeeded { status };
            self.record_fresh = true;
            let record = &mut self.record;
            record.id.attempt = id.attempt;
            record.reply = reply;
            record.class = None;
            record.retry_after = RetryAfterNote::Absent;
            record.next = None;
            record.outcome = Some(o);
            self.phase = Phase::Done(o);
            return true;
        }
        let c = usize::from(fast.codes[i]);
        // Neither class (the index is in bounds from here on).
        if c > 1 {
            return false;
        }
        let class = if c == 0 {
            RetryClass::RateLimited
        } else {
            RetryClass::ServerError
        };
        let n = self.spent.of(class);
        // No retry left, or too near the deadline for the comparison of
        // `roomy_until` alone (the deadline reached among them): the
        // general path.
        if n >= fast.max[c] || now >= fast.roomy_until[c] {
            return false;
        }
        let b = &fast.backoff[c];
        let Some(v) = r.retry_after else {
            // Decided from here on: the delay draws from `rng`.
            self.decided(now, id, reply, class);
            let delay =
                backoff::delay_nanos(b.base, b.cap, b.multiplier, b.jitter, b.full, n, || {
                    rng.next_u64()
                });
            // Within the class's longest backoff: the send is before the
            // deadline (`now < roomy_until`).
            let note = RetryAfterNote::Absent;
            return self.plan_fast(
                fast,
                budget,
                reply,
                class,
                n,
                delay,
                DelaySource::Backoff,
                note,
                true,
            );
        };
        // `Retry-After`: all digits (within the cap), else the general path.
        let secs = match retry_after::short_delta_seconds(v) {
            Some(secs) if secs <= fast.auto_wait_cap_secs => secs,
            _ => return false,
        };
        self.decided(now, id, reply, class);
        let delay = backoff::delay_nanos(b.base, b.cap, b.multiplier, b.jitter, b.full, n, || {
            rng.next_u64()
        });
        let note = RetryAfterNote::Valid(Duration::from_secs(secs));
        // In nanoseconds: no comparisons of `Duration`s.
        let (delay, source) =
            over_backoff(secs * 1_000_000_000, fast.min, delay, DelaySource::Backoff);
        // A longer server delay is compared with the deadline.
        let roomy = delay <= fast.longest[c];
        self.plan_fast(fast, budget, reply, class, n, delay, source, note, roomy)
    }

    /// What [`answer_fast`](Self::answer_fast) writes once it has decided
    /// on a failure, before the draw (fewer values kept across it): the
    /// latest `now` and the record's fields known by then.
    #[inline(always)]
    fn decided(&mut self, now: Instant, id: SendId, reply: Reply, class: RetryClass) {
        self.last_now = now;
        self.record_fresh = true;
        let record = &mut self.record;
        record.id.attempt = id.attempt;
        record.reply = reply;
        record.class = Some(class);
    }

    /// The end of [`answer_fast`](Self::answer_fast) for a failure: the
    /// record, the send's instant, and the charge or the stop. Inlined
    /// into each way it is reached (a backoff; a server delay), so that
    /// the backoff's constants (its source, the absent note, the known
    /// room) are constants there.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn plan_fast<B: RetryBudget + ?Sized>(
        &mut self,
        fast: &FastPath,
        budget: &mut B,
        reply: Reply,
        class: RetryClass,
        n: u32,
        delay: u64,
        source: DelaySource,
        note: RetryAfterNote,
        roomy: bool,
    ) -> bool {
        let delay = Duration::from_nanos(delay);
        let record = &mut self.record;
        record.retry_after = note;
        if roomy {
            // The send is before the deadline (`now < roomy_until` and
            // the delay within the class's longest): the budget first, so
            // that fewer values are kept across `checked_add`.
            let granted = budget.withdraw(class, reply);
            if let Some(cost) = granted {
                // `n` is under the class's budget: no saturation.
                self.spent.charge_under(class, n, cost);
            }
            // From the field just written (`now`): std's `checked_add`
            // takes the instant by reference, so no copy of `now` to the
            // stack. Always an instant here (before the deadline).
            let Some(send_at) = self.last_now.checked_add(delay) else {
                debug_assert!(false, "a roomy send is before the deadline");
                let o = Outcome::TimedOut { needed: None };
                record.next = None;
                record.outcome = Some(o);
                self.phase = Phase::Done(o);
                return true;
            };
            let record = &mut self.record;
            if granted.is_some() {
                record.next = Some(PlannedDelay {
                    delay,
                    source,
                    send_at,
                });
                record.outcome = None;
                self.phase = Phase::Waiting(send_at);
            } else {
                let o = Outcome::RetryBudgetExhausted { class, last: reply };
                record.next = None;
                record.outcome = Some(o);
                self.phase = if fast.linger {
                    Phase::Closing(send_at, class, reply)
                } else {
                    Phase::Done(o)
                };
            }
            return true;
        }
        let send_at = self.last_now.checked_add(delay);
        let send_at = match send_at {
            Some(t) if t < self.deadline => t,
            needed => {
                let o = Outcome::TimedOut { needed };
                record.next = None;
                record.outcome = Some(o);
                self.phase = Phase::Done(o);
                return true;
            }
        };
        match budget.withdraw(class, reply) {
            Some(cost) => {
                // `n` is under the class's budget: no saturation.
                self.spent.charge_under(class, n, cost);
                record.next = Some(PlannedDelay {
                    delay,
                    source,
                    send_at,
                });
                record.outcome = None;
                self.phase = Phase::Waiting(send_at);
            }
            None => {
                let o = Outcome::RetryBudgetExhausted { class, last: reply };
                record.next = None;
                record.outcome = Some(o);
                self.phase = if fast.linger {
                    Phase::Closing(send_at, class, reply)
                } else {
                    Phase::Done(o)
                };
            }
        }
        true
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
        // (`matches!`, not `!=` on the phase: the derived comparison
        // materialises a whole `Phase` to compare with.)
        if !matches!(self.phase, Phase::InFlight(s) if s == id) {
            return;
        }
        // Written in place: the record is the machine's (no 120-byte copy
        // at the end).
        self.record_fresh = true;
        let record = &mut self.record;
        record.id.attempt = id.attempt;
        record.reply = reply;
        record.class = None;
        record.retry_after = RetryAfterNote::Absent;
        record.next = None;
        record.outcome = None;
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
                Reply::Status(s @ 100..=399) if !classified(response) => {
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
            self.phase = Phase::Done(o);
        }
    }

    pub(crate) fn poll_action(&mut self) -> Action {
        match self.phase {
            Phase::Ready => self.send_now(),
            Phase::InFlight(_) => Action::SleepUntil(self.deadline),
            Phase::Waiting(at) | Phase::Closing(at, ..) => Action::SleepUntil(at),
            Phase::Done(o) => Action::Stop(o),
        }
    }

    /// `poll_action` when the next attempt may be sent: out of line, so
    /// that the waits and ends that follow answers are not merged with a
    /// send's words (issue 22).
    #[inline(never)]
    fn send_now(&mut self) -> Action {
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
                self.phase = Phase::InFlight(id);
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

#[cfg(test)]
mod codes_tests {
    use super::*;
    use crate::policy::StatusSet;
    use crate::request::{Method, RequestId, RequestInfo};

    /// The fast path's table gives every coded status the class the
    /// general path's `class_of` gives it: the default classes (a table
    /// built at compile time) and others (built per machine).
    #[test]
    fn the_status_table_is_the_policy_s_classes() {
        let custom = RetryPolicy {
            rate_limited_statuses: StatusSet::of(&[408, 429, 420]),
            server_error_statuses: StatusSet::of(&[500, 503, 520, 527, 529]),
            ..RetryPolicy::default()
        };
        let narrow = RetryPolicy {
            rate_limited_statuses: StatusSet::EMPTY,
            server_error_statuses: StatusSet::of(&[503]),
            ..RetryPolicy::default()
        };
        let request = RequestInfo::new(RequestId(1), Method::Get);
        #[allow(clippy::disallowed_methods)] // the one clock read: an arbitrary origin
        let now = Instant::now();
        let deadline = now + Duration::from_secs(30);
        for policy in [RetryPolicy::default(), custom, narrow] {
            let fast = FastPath::new(&policy, &request, now, deadline);
            assert!(fast.on);
            for (i, code) in fast.codes.iter().enumerate() {
                let status = 400 + i as u16;
                let want = match policy.class_of(status) {
                    Some(class) => class.index() as u8,
                    None => NEITHER,
                };
                assert_eq!(*code, want, "status {status}");
            }
        }
        assert_eq!(
            DEFAULT_CODES,
            codes_of(
                RetryPolicy::default().rate_limited_statuses.bits(),
                RetryPolicy::default().server_error_statuses.bits()
            )
        );
    }
}
