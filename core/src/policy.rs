//! [`RetryPolicy`]: what is retried, how often, and how long to wait.
//!
//! Every number in SPEC.md is a default here and a public field a user can
//! change. [`RetryPolicy::validate`] rejects combinations that make no sense;
//! machines call it at construction, so a machine never runs on a bad policy.

use std::time::Duration;

use crate::input::{Response, RetryClass};

/// A policy that makes no sense, named by the field at fault.
///
/// Returned by [`RetryPolicy::validate`] and by every machine constructor.
///
/// ```
/// use polite_core::{PolicyError, RetryPolicy};
/// use std::time::Duration;
///
/// let mut policy = RetryPolicy::default();
/// policy.backoff.cap = Duration::ZERO;
/// assert_eq!(
///     policy.validate(),
///     Err(PolicyError::Invalid { field: "backoff.cap", reason: "must be at least backoff.base" })
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A field holds a value outside what the machine can honour.
    #[error("invalid policy: `{field}` {reason}")]
    Invalid {
        /// The offending field, as a path (`backoff.cap`).
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

const fn invalid(field: &'static str, reason: &'static str) -> PolicyError {
    PolicyError::Invalid { field, reason }
}

/// How a computed backoff delay is randomised.
///
/// `u` below is uniform in `[0, 1)`, drawn from the machine's random source.
///
/// ```
/// use polite_core::Jitter;
/// let j = Jitter::Percent(20); // ±20 %
/// assert_ne!(j, Jitter::None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Jitter {
    /// `delay` exactly; draws nothing from the random source.
    None,
    /// `delay * u`: anywhere from zero to the delay ("full jitter").
    #[default]
    Full,
    /// `delay * (0.5 + 0.5 * u)`: at least half the delay ("equal jitter").
    Equal,
    /// `delay * (1 ± p/100)`: the delay spread by at most `p` percent (0..=100).
    Percent(u8),
}

/// Exponential backoff: `base * multiplier^n`, capped, then jittered, where
/// `n` is the number of retries the failure's class has already used.
///
/// ```
/// use polite_core::{Backoff, Jitter};
/// use std::time::Duration;
/// let b = Backoff::default();
/// assert_eq!(b.base, Duration::from_millis(250));
/// assert_eq!(b.cap, Duration::from_secs(4));
/// assert_eq!(b.multiplier, 2);
/// assert_eq!(b.jitter, Jitter::Full);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The delay before the first retry of a class (before jitter). Default 250 ms.
    pub base: Duration,
    /// Growth per retry. Default 2 (doubling).
    pub multiplier: u32,
    /// Upper bound on the un-jittered delay. Default 4 s.
    pub cap: Duration,
    /// How the delay is randomised. Default [`Jitter::Full`].
    pub jitter: Jitter,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(250),
            multiplier: 2,
            cap: Duration::from_secs(4),
            jitter: Jitter::Full,
        }
    }
}

/// What the `n` of the backoff (`base * multiplier^n`) counts.
///
/// ```
/// use polite_core::BackoffExponent;
/// assert_eq!(BackoffExponent::default(), BackoffExponent::ClassRetries);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum BackoffExponent {
    /// The retries the failure's own class has used (SPEC §2: each class
    /// counts its own). The default.
    #[default]
    ClassRetries,
    /// The retries of all classes together (the AWS SDKs: the exponent is
    /// the attempt number, whatever failed before).
    AllRetries,
}

/// How a server's `Retry-After` is honoured (SPEC §2.1).
///
/// ```
/// use polite_core::RetryAfterLimits;
/// use std::time::Duration;
/// let l = RetryAfterLimits::default();
/// assert_eq!((l.min, l.max, l.auto_wait_cap),
///            (Duration::from_secs(1), Duration::from_secs(300), Duration::from_secs(60)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryAfterLimits {
    /// A server delay below this is raised to it (a `Retry-After: 0` or a
    /// date in the past means "wait this long"). Default 1 s.
    pub min: Duration,
    /// Sanity clamp for a server delay. Default 300 s. Must be at least
    /// `auto_wait_cap`, so that the clamp can never shorten a wait the machine
    /// actually takes (it would resend before the server's time).
    pub max: Duration,
    /// The longest server delay the machine waits out on its own. A server
    /// that asks for more ends the request with
    /// [`Outcome::RateLimited`](crate::Outcome::RateLimited) carrying the
    /// server's instant, so the caller decides; the machine never resends
    /// early. Default 60 s.
    pub auto_wait_cap: Duration,
}

impl Default for RetryAfterLimits {
    fn default() -> Self {
        RetryAfterLimits {
            min: Duration::from_secs(1),
            max: Duration::from_secs(300),
            auto_wait_cap: Duration::from_secs(60),
        }
    }
}

/// Retries allowed per class (sends after the first; the first send is not a
/// retry). Each class counts its own.
///
/// ```
/// use polite_core::MaxRetries;
/// let m = MaxRetries::default();
/// assert_eq!((m.rate_limited, m.server_error, m.transport), (3, 4, 4));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxRetries {
    /// Retries after a rate-limited answer (429 by default). Default 3.
    pub rate_limited: u32,
    /// Retries after a server error (500, 502, 503, 504 by default). Default 4.
    pub server_error: u32,
    /// Retries after a transport error (refused, reset, DNS, timeout). Default 4.
    pub transport: u32,
}

impl Default for MaxRetries {
    fn default() -> Self {
        MaxRetries {
            rate_limited: 3,
            server_error: 4,
            transport: 4,
        }
    }
}

impl MaxRetries {
    /// The budget of one class.
    ///
    /// ```
    /// use polite_core::{MaxRetries, RetryClass};
    /// assert_eq!(MaxRetries::default().of(RetryClass::RateLimited), 3);
    /// ```
    #[must_use]
    pub const fn of(&self, class: RetryClass) -> u32 {
        match class {
            RetryClass::RateLimited => self.rate_limited,
            RetryClass::ServerError => self.server_error,
            RetryClass::Transport => self.transport,
        }
    }
}

/// A set of HTTP status codes in `400..=599`, as a fixed bitset (no heap).
///
/// ```
/// use polite_core::StatusSet;
/// let s = StatusSet::of(&[429, 503]);
/// assert!(s.contains(503));
/// assert!(!s.contains(500));
/// assert!(!s.contains(200)); // outside the range: never a member
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct StatusSet {
    bits: [u64; 4],
}

impl StatusSet {
    const LOW: u16 = 400;
    const HIGH: u16 = 599;

    /// The empty set.
    pub const EMPTY: StatusSet = StatusSet { bits: [0; 4] };

    /// A set of the given statuses. Statuses outside `400..=599` cannot be
    /// retried by class and are left out; use [`StatusSet::insert`] to learn
    /// whether one was refused.
    #[must_use]
    pub const fn of(statuses: &[u16]) -> StatusSet {
        let mut set = StatusSet::EMPTY;
        let mut i = 0;
        while i < statuses.len() {
            let _ = set.insert(statuses[i]);
            i += 1;
        }
        set
    }

    /// Adds a status; returns `false` (and changes nothing) when it lies
    /// outside `400..=599`.
    ///
    /// ```
    /// use polite_core::StatusSet;
    /// let mut s = StatusSet::EMPTY;
    /// assert!(s.insert(408));
    /// assert!(!s.insert(200));
    /// ```
    pub const fn insert(&mut self, status: u16) -> bool {
        if status < Self::LOW || status > Self::HIGH {
            return false;
        }
        let i = (status - Self::LOW) as usize;
        self.bits[i / 64] |= 1 << (i % 64);
        true
    }

    /// Whether `status` is in the set.
    #[must_use]
    #[inline]
    pub const fn contains(&self, status: u16) -> bool {
        if status < Self::LOW || status > Self::HIGH {
            return false;
        }
        let i = (status - Self::LOW) as usize;
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    const fn intersects(&self, other: &StatusSet) -> bool {
        let mut i = 0;
        while i < 4 {
            if self.bits[i] & other.bits[i] != 0 {
                return true;
            }
            i += 1;
        }
        false
    }

    /// The members, in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (Self::LOW..=Self::HIGH).filter(|s| self.contains(*s))
    }
}

impl std::fmt::Debug for StatusSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// Everything [`RetryMachine`](crate::RetryMachine) decides by: the classes of
/// failure, their budgets, the backoff, the `Retry-After` rules and the
/// transport cushion. Plain data: `Copy`, no heap.
///
/// Statuses below 400 end the request as
/// [`Outcome::Succeeded`](crate::Outcome::Succeeded); statuses in neither set
/// end it as [`Outcome::NotRetryable`](crate::Outcome::NotRetryable).
///
/// ```
/// use polite_core::{Jitter, RetryPolicy, StatusSet};
/// use std::time::Duration;
///
/// // SPEC §2.2: retry only 429 and 503, at most 3 retries, base 2^retry s,
/// // equal jitter, automatic wait cap 30 s.
/// let mut policy = RetryPolicy::default();
/// policy.server_error_statuses = StatusSet::of(&[503]);
/// policy.max_retries.rate_limited = 3;
/// policy.max_retries.server_error = 3;
/// policy.backoff.base = Duration::from_secs(1);
/// policy.backoff.cap = Duration::from_secs(60);
/// policy.backoff.jitter = Jitter::Equal;
/// policy.retry_after.auto_wait_cap = Duration::from_secs(30);
/// assert!(policy.validate().is_ok());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retry budgets per class.
    pub max_retries: MaxRetries,
    /// Statuses of the rate-limited class. Default `{429}`.
    pub rate_limited_statuses: StatusSet,
    /// Statuses of the server-error class. Default `{500, 502, 503, 504}`.
    pub server_error_statuses: StatusSet,
    /// The local backoff.
    pub backoff: Backoff,
    /// How a server's `Retry-After` is honoured.
    pub retry_after: RetryAfterLimits,
    /// How long past the deadline an in-flight attempt may run before the
    /// adapter aborts it: every send carries `abort_at = deadline + cushion`.
    /// Default 2 s.
    pub transport_cushion: Duration,
    /// Retries of all classes together, on top of the per-class budgets
    /// (the AWS SDKs' `max_attempts - 1`). Default `None`: only the
    /// per-class budgets count. When spent, the request ends as if its
    /// class's budget were spent.
    pub max_total_retries: Option<u32>,
    /// The backoff of the rate-limited class, when it differs from
    /// [`backoff`](Self::backoff) (the AWS SDKs back off throttling from
    /// 1 s, other failures from 50 ms). Default `None`: `backoff`.
    pub rate_limited_backoff: Option<Backoff>,
    /// What the backoff exponent counts. Default
    /// [`BackoffExponent::ClassRetries`].
    pub backoff_exponent: BackoffExponent,
    /// Honour a millisecond retry hint ([`Response::retry_after_ms`](crate::Response::retry_after_ms),
    /// AWS's `x-amz-retry-after`): the delay becomes the hint clamped to
    /// `[backoff, backoff + this]`. Unlike `Retry-After`, it is a hint: it
    /// can neither shorten the backoff nor lengthen it by more than this.
    /// An invalid value (not ASCII digits) is ignored. Default `None`: the
    /// header is not read. `Retry-After`, when valid, still applies on top
    /// (the larger delay wins).
    pub retry_after_ms: Option<Duration>,
    /// When a shared retry budget refuses a retry, wait out the backoff the
    /// retry would have had before stopping with
    /// [`Outcome::RetryBudgetExhausted`](crate::Outcome::RetryBudgetExhausted)
    /// (the AWS SDKs do this for long-polling operations, so that a caller
    /// polling in a loop does not spin against a failing server). The wait
    /// ends early on a cancel and never passes the deadline. Default `false`:
    /// stop at once.
    pub backoff_when_budget_empty: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: MaxRetries::default(),
            rate_limited_statuses: StatusSet::of(&[429]),
            server_error_statuses: StatusSet::of(&[500, 502, 503, 504]),
            backoff: Backoff::default(),
            retry_after: RetryAfterLimits::default(),
            transport_cushion: Duration::from_secs(2),
            max_total_retries: None,
            rate_limited_backoff: None,
            backoff_exponent: BackoffExponent::ClassRetries,
            retry_after_ms: None,
            backoff_when_budget_empty: false,
        }
    }
}

/// Checks one backoff; `fields` names its fields in the order base,
/// multiplier, cap, jitter.
const fn validate_backoff(b: &Backoff, fields: [&'static str; 4]) -> Result<(), PolicyError> {
    if b.base.is_zero() {
        return Err(invalid(fields[0], "must be greater than zero"));
    }
    if b.multiplier == 0 {
        return Err(invalid(fields[1], "must be at least 1"));
    }
    if b.cap.as_nanos() < b.base.as_nanos() {
        return Err(invalid(fields[2], "must be at least backoff.base"));
    }
    if let Jitter::Percent(p) = b.jitter
        && p > 100
    {
        return Err(invalid(fields[3], "percent must be at most 100"));
    }
    Ok(())
}

impl RetryPolicy {
    /// Checks that the policy makes sense; machines call this at construction.
    ///
    /// Rejected: a zero `backoff.base`, a zero `backoff.multiplier`, a
    /// `backoff.cap` below the base, `Jitter::Percent` above 100 (the same
    /// for `rate_limited_backoff` when set), a zero `retry_after.min`, `retry_after.max` below `retry_after.min` or below
    /// `retry_after.auto_wait_cap`, and a status in both classes.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Invalid`] naming the first field at fault.
    pub const fn validate(&self) -> Result<(), PolicyError> {
        if let Err(e) = validate_backoff(
            &self.backoff,
            [
                "backoff.base",
                "backoff.multiplier",
                "backoff.cap",
                "backoff.jitter",
            ],
        ) {
            return Err(e);
        }
        if let Some(b) = &self.rate_limited_backoff
            && let Err(e) = validate_backoff(
                b,
                [
                    "rate_limited_backoff.base",
                    "rate_limited_backoff.multiplier",
                    "rate_limited_backoff.cap",
                    "rate_limited_backoff.jitter",
                ],
            )
        {
            return Err(e);
        }
        let r = &self.retry_after;
        if r.min.is_zero() {
            return Err(invalid("retry_after.min", "must be greater than zero"));
        }
        if r.max.as_nanos() < r.min.as_nanos() {
            return Err(invalid(
                "retry_after.max",
                "must be at least retry_after.min",
            ));
        }
        if r.max.as_nanos() < r.auto_wait_cap.as_nanos() {
            return Err(invalid(
                "retry_after.auto_wait_cap",
                "must be at most retry_after.max (the clamp must never shorten a wait)",
            ));
        }
        if self
            .rate_limited_statuses
            .intersects(&self.server_error_statuses)
        {
            return Err(invalid(
                "server_error_statuses",
                "shares a status with rate_limited_statuses",
            ));
        }
        Ok(())
    }

    /// The backoff of a class: [`rate_limited_backoff`](Self::rate_limited_backoff)
    /// for the rate-limited class when set, else [`backoff`](Self::backoff).
    ///
    /// ```
    /// use polite_core::{Backoff, RetryClass, RetryPolicy};
    /// use std::time::Duration;
    /// let mut p = RetryPolicy::default();
    /// p.rate_limited_backoff = Some(Backoff { base: Duration::from_secs(1), ..Backoff::default() });
    /// assert_eq!(p.backoff_of(RetryClass::RateLimited).base, Duration::from_secs(1));
    /// assert_eq!(p.backoff_of(RetryClass::ServerError).base, Duration::from_millis(250));
    /// ```
    #[must_use]
    #[inline]
    pub const fn backoff_of(&self, class: RetryClass) -> &Backoff {
        match (class, &self.rate_limited_backoff) {
            (RetryClass::RateLimited, Some(b)) => b,
            _ => &self.backoff,
        }
    }

    /// The retry class of an answer: the caller's classification
    /// ([`Response::retry_class`](crate::Response::retry_class)) for a status
    /// in `400..=599` when it gave one, else [`class_of`](Self::class_of)
    /// its status. The machines and the test checkers all decide by this.
    ///
    /// ```
    /// use polite_core::{Response, RetryClass, RetryPolicy, SendId};
    /// use std::time::UNIX_EPOCH;
    /// let p = RetryPolicy::default();
    /// let throttled = Response::new(SendId::default(), 400, UNIX_EPOCH).retry_class(RetryClass::RateLimited);
    /// assert_eq!(p.class_of_response(&throttled), Some(RetryClass::RateLimited));
    /// let plain = Response::new(SendId::default(), 400, UNIX_EPOCH);
    /// assert_eq!(p.class_of_response(&plain), None);
    /// // A success stays a success, whatever the hint.
    /// let ok = Response::new(SendId::default(), 200, UNIX_EPOCH).retry_class(RetryClass::ServerError);
    /// assert_eq!(p.class_of_response(&ok), None);
    /// ```
    #[must_use]
    #[inline]
    pub const fn class_of_response(&self, response: &Response<'_>) -> Option<RetryClass> {
        match response.retry_class {
            Some(c) if response.status >= 400 && response.status <= 599 => Some(c),
            _ => self.class_of(response.status),
        }
    }

    /// The retry class of a status, or `None` when it is not retried by class
    /// (a success below 400, or a final answer such as 404 or 501).
    ///
    /// ```
    /// use polite_core::{RetryClass, RetryPolicy};
    /// let p = RetryPolicy::default();
    /// assert_eq!(p.class_of(429), Some(RetryClass::RateLimited));
    /// assert_eq!(p.class_of(502), Some(RetryClass::ServerError));
    /// assert_eq!(p.class_of(501), None);
    /// ```
    #[must_use]
    #[inline]
    pub const fn class_of(&self, status: u16) -> Option<RetryClass> {
        if self.rate_limited_statuses.contains(status) {
            Some(RetryClass::RateLimited)
        } else if self.server_error_statuses.contains(status) {
            Some(RetryClass::ServerError)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        assert_eq!(RetryPolicy::default().validate(), Ok(()));
    }

    #[test]
    fn each_bad_field_is_named() {
        type Mutate = fn(&mut RetryPolicy);
        let cases: [(Mutate, &str); 10] = [
            (
                |p| {
                    p.rate_limited_backoff = Some(Backoff {
                        base: Duration::ZERO,
                        ..Backoff::default()
                    })
                },
                "rate_limited_backoff.base",
            ),
            (
                |p| {
                    p.rate_limited_backoff = Some(Backoff {
                        jitter: Jitter::Percent(200),
                        ..Backoff::default()
                    })
                },
                "rate_limited_backoff.jitter",
            ),
            (|p| p.backoff.base = Duration::ZERO, "backoff.base"),
            (|p| p.backoff.multiplier = 0, "backoff.multiplier"),
            (|p| p.backoff.cap = Duration::from_millis(1), "backoff.cap"),
            (
                |p| p.backoff.jitter = Jitter::Percent(101),
                "backoff.jitter",
            ),
            (|p| p.retry_after.min = Duration::ZERO, "retry_after.min"),
            (
                |p| {
                    p.retry_after.min = Duration::from_secs(10);
                    p.retry_after.max = Duration::from_secs(5);
                },
                "retry_after.max",
            ),
            (
                |p| p.retry_after.auto_wait_cap = Duration::from_secs(301),
                "retry_after.auto_wait_cap",
            ),
            (
                |p| {
                    p.server_error_statuses.insert(429);
                },
                "server_error_statuses",
            ),
        ];
        for (mutate, field) in cases {
            let mut p = RetryPolicy::default();
            mutate(&mut p);
            match p.validate() {
                Err(PolicyError::Invalid { field: f, .. }) => assert_eq!(f, field),
                Ok(()) => panic!("{field}: accepted"),
            }
        }
    }

    #[test]
    fn status_set_bounds() {
        let mut s = StatusSet::EMPTY;
        assert!(s.insert(400));
        assert!(s.insert(599));
        assert!(!s.insert(399));
        assert!(!s.insert(600));
        assert!(!s.insert(0));
        assert!(!s.insert(u16::MAX));
        assert!(s.contains(400) && s.contains(599) && !s.contains(401));
        assert!(!s.contains(u16::MAX));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![400, 599]);
        assert_eq!(format!("{s:?}"), "{400, 599}");
    }
}
