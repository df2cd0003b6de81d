//! [`RetryPolicy`]: what is retried, how often, and how long to wait.
//!
//! Every number in SPEC.md is a default here and a public field a user can
//! change. [`RetryPolicy::validate`] rejects combinations that make no sense;
//! machines call it at construction, so a machine never runs on a bad policy.

use std::time::Duration;

use crate::input::{Response, RetryClass};

use super::{
    Backoff, BackoffExponent, Jitter, MaxRetries, PolicyError, RetryAfterLimits, StatusSet,
    TransportKinds, invalid,
};

/// Everything [`RetryMachine`](crate::RetryMachine) decides by: the classes of
/// failure, their budgets, the backoff, the `Retry-After` rules and the
/// transport cushion. Plain data: `Copy`, no heap.
///
/// Statuses below 400 end the request as
/// [`Outcome::Succeeded`](crate::Outcome::Succeeded); statuses in neither set
/// end it as [`Outcome::NotRetryable`](crate::Outcome::NotRetryable).
///
/// ```
/// use polite_core::RetryPolicy;
/// use polite_core::policy::{Jitter, StatusSet};
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
    /// The transport error kinds retried (as the transport class, within
    /// [`MaxRetries::transport`]). Default
    /// [`TransportKinds::RETRYABLE`]: every kind that is not permanent. A
    /// kind left out ends the request at its first occurrence with
    /// [`Outcome::Permanent`](crate::Outcome::Permanent) — e.g. leave out
    /// `Timeout` and `Aborted` when a timed-out request may still have
    /// been carried out.
    pub retried_transport: TransportKinds,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: MaxRetries::default(),
            rate_limited_statuses: Self::DEFAULT_STATUS_SETS.0,
            server_error_statuses: Self::DEFAULT_STATUS_SETS.1,
            backoff: Backoff::default(),
            retry_after: RetryAfterLimits::default(),
            transport_cushion: Duration::from_secs(2),
            max_total_retries: None,
            rate_limited_backoff: None,
            backoff_exponent: BackoffExponent::ClassRetries,
            retry_after_ms: None,
            backoff_when_budget_empty: false,
            retried_transport: TransportKinds::RETRYABLE,
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
    /// The default rate-limited (429) and server-error (500, 502, 503, 504)
    /// statuses.
    pub(crate) const DEFAULT_STATUS_SETS: (StatusSet, StatusSet) =
        (StatusSet::of(&[429]), StatusSet::of(&[500, 502, 503, 504]));

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
    /// use polite_core::{RetryClass, RetryPolicy};
    /// use polite_core::policy::Backoff;
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
    /// ([`Response::retry_class`](crate::Response::retry_class)) for a
    /// final status (`200..=599`) when it gave one — so a 200 whose body
    /// says "busy" is retried as the class the caller names — else
    /// [`class_of`](Self::class_of) its status. The machines and the test
    /// checkers all decide by this.
    ///
    /// ```
    /// use polite_core::{Response, RetryClass, RetryPolicy, SendId};
    /// use std::time::UNIX_EPOCH;
    /// let p = RetryPolicy::default();
    /// let throttled = Response::new(SendId::default(), 400, UNIX_EPOCH).retry_class(RetryClass::RateLimited);
    /// assert_eq!(p.class_of_response(&throttled), Some(RetryClass::RateLimited));
    /// let plain = Response::new(SendId::default(), 400, UNIX_EPOCH);
    /// assert_eq!(p.class_of_response(&plain), None);
    /// // A success the caller calls a failure is retried as one.
    /// let busy = Response::new(SendId::default(), 200, UNIX_EPOCH).retry_class(RetryClass::ServerError);
    /// assert_eq!(p.class_of_response(&busy), Some(RetryClass::ServerError));
    /// assert_eq!(p.class_of_response(&Response::new(SendId::default(), 200, UNIX_EPOCH)), None);
    /// ```
    #[must_use]
    #[inline]
    pub const fn class_of_response(&self, response: &Response<'_>) -> Option<RetryClass> {
        match response.retry_class {
            Some(c) if response.status >= 200 && response.status <= 599 => Some(c),
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
}
