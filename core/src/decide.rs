//! The decision kernel shared by [`RetryMachine`](crate::RetryMachine),
//! [`PollMachine`](crate::PollMachine) and [`BatchMachine`](crate::BatchMachine):
//! the retry rules of SPEC §2, once, in [`judge_with`] (and [`judge`], the
//! same without a retry budget); what a logical request has spent on
//! retries ([`Spent`]); and the arithmetic of instants that keeps every
//! machine inside its deadline ([`later`], [`deadline_after`],
//! [`server_instant`]).
//!
//! Pure functions over a policy, the reply and `now`: no state of its own.

use std::time::{Duration, Instant};

use rand_core::Rng;

use crate::backoff;
use crate::budget::{NoBudget, RetryBudget};
use crate::input::{Reply, Response, RetryClass};
use crate::outcome::Outcome;
use crate::policy::{BackoffExponent, RetryPolicy};
use crate::ratelimit;
use crate::record::{DelaySource, PlannedDelay, RetryAfterNote};
use crate::retry_after;

/// Whether the caller classed a success (2xx, 3xx) as a failure: then it
/// is retried by that class, like a 5xx ([`RetryPolicy::class_of_response`]).
#[inline]
pub(crate) fn classified(response: Option<&Response<'_>>) -> bool {
    response.is_some_and(|r| r.retry_class.is_some() && (200..=399).contains(&r.status))
}

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

/// The delay to wait and where it came from, given the backoff's `delay`
/// (from `source`) and the server's delay `d` raised to the policy's
/// minimum `min`: the longer of the two (the server's value:
/// `RetryAfter`; the minimum: `Clamp`). `d` is within the automatic-wait
/// cap (checked before), and the cap is at most the clamp's maximum, so
/// clamping can only raise it. The one rule for the general decision
/// ([`judge_with`], over `Duration`s) and `RetryMachine`'s fast path (over
/// nanoseconds, all under 2^64: the same order).
#[inline(always)]
pub(crate) fn over_backoff<T: Ord + Copy>(
    d: T,
    min: T,
    delay: T,
    source: DelaySource,
) -> (T, DelaySource) {
    let clamped = d.max(min);
    if clamped <= delay {
        (delay, source)
    } else if clamped > d {
        (clamped, DelaySource::Clamp)
    } else {
        (clamped, DelaySource::RetryAfter)
    }
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

    /// [`charge`](Self::charge) when `class` has used `n < u32::MAX`
    /// retries: `n + 1` without saturating (`RetryMachine`'s fast path,
    /// which has read `n` and compared it with the class's budget).
    #[inline(always)]
    pub(crate) fn charge_under(&mut self, class: RetryClass, n: u32, cost: u32) {
        debug_assert_eq!(self.of(class), n);
        self.per_class[class.index()] = n + 1;
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
/// transport error, or a kind [`RetryPolicy::retried_transport`] leaves
/// out → `Permanent`, whatever the replayability); not
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
        // Permanent kinds have no class: never retried (SPEC §5); nor have
        // the kinds the policy leaves out.
        Reply::Transport(k) => (!k.is_permanent() && policy.retried_transport.contains(k))
            .then_some(RetryClass::Transport),
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
        match retry_after::server_delay_inline(value, date, wall) {
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
    // Only the stops below say the server's instant: computed there.
    let server_at = || raw.map(|d| server_instant(now, d.max(policy.retry_after.min)));
    if spent.of(class) >= policy.max_retries.of(class)
        || policy
            .max_total_retries
            .is_some_and(|max| spent.total() >= max)
    {
        let o = match class {
            RetryClass::RateLimited => Outcome::RateLimited {
                retry_at: server_at(),
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
                retry_at: server_at(),
            },
        );
    }
    let b = policy.backoff_of(class);
    let n = match policy.backoff_exponent {
        BackoffExponent::ClassRetries => spent.of(class),
        BackoffExponent::AllRetries => spent.total(),
    };
    let mut delay = backoff::delay(b, n, || rng.next_u64());
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
        (delay, source) = over_backoff(d, policy.retry_after.min, delay, source);
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
