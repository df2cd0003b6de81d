//! What the policies are made of: the backoff ([`Backoff`], [`Jitter`],
//! [`BackoffExponent`]), the retry budgets per class ([`MaxRetries`]), the
//! statuses of a class ([`StatusSet`]), how a server's `Retry-After` is
//! honoured ([`RetryAfterLimits`]), and the one error a machine can give,
//! an invalid policy ([`PolicyError`]).
//!
//! The policies themselves are at the crate root:
//! [`RetryPolicy`], [`PollPolicy`](crate::PollPolicy) and
//! [`BatchPolicy`](crate::BatchPolicy). Every number in SPEC.md is a
//! default there or here and a public field a user can change; `validate`
//! rejects combinations that make no sense, and the machines call it at
//! construction, so a machine never runs on a bad policy.

pub(crate) mod retry;

pub(crate) use retry::RetryPolicy;

use std::time::Duration;

use crate::input::{RetryClass, TransportErrorKind};

/// A policy that makes no sense, named by the field at fault.
///
/// Returned by [`RetryPolicy::validate`] and by every machine constructor.
///
/// ```
/// use polite_core::RetryPolicy;
/// use polite_core::policy::PolicyError;
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
/// use polite_core::policy::Jitter;
/// let j = Jitter::Percent(20); // ±20 %
/// assert_ne!(j, Jitter::None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
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
/// use polite_core::policy::{Backoff, Jitter};
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
/// use polite_core::policy::BackoffExponent;
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
/// use polite_core::policy::RetryAfterLimits;
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
/// use polite_core::policy::MaxRetries;
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
    /// use polite_core::RetryClass;
    /// use polite_core::policy::MaxRetries;
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
/// use polite_core::policy::StatusSet;
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
    /// use polite_core::policy::StatusSet;
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

    /// The set's bits: bit `i % 64` of word `i / 64` for status `400 + i`.
    #[inline]
    pub(crate) const fn bits(&self) -> [u64; 4] {
        self.bits
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

/// A set of [`TransportErrorKind`]s: the ones a [`RetryPolicy`] retries
/// ([`RetryPolicy::retried_transport`]). A kind left out ends the request at
/// its first occurrence with [`Outcome::Permanent`](crate::Outcome::Permanent),
/// as a [permanent](TransportErrorKind::is_permanent) kind always does —
/// putting a permanent kind in the set does not make it retried (SPEC §5).
///
/// ```
/// use polite_core::policy::TransportKinds;
/// use polite_core::TransportErrorKind as K;
/// // Do not retry timeouts (the server may still be working on the request).
/// let kinds = TransportKinds::RETRYABLE.without(K::Timeout).without(K::Aborted);
/// assert!(kinds.contains(K::Reset) && !kinds.contains(K::Timeout));
/// assert!(!TransportKinds::RETRYABLE.contains(K::Certificate)); // permanent
/// assert_eq!(TransportKinds::of(&[K::Refused, K::Dns]), TransportKinds::NONE.with(K::Dns).with(K::Refused));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransportKinds {
    bits: u32,
}

impl TransportKinds {
    /// No kind: transport errors are never retried.
    pub const NONE: TransportKinds = TransportKinds { bits: 0 };

    /// Every kind that is not [permanent](TransportErrorKind::is_permanent):
    /// refused, reset, DNS, timeout, aborted, TLS, other. The default.
    pub const RETRYABLE: TransportKinds = TransportKinds::of(&[
        TransportErrorKind::Refused,
        TransportErrorKind::Reset,
        TransportErrorKind::Dns,
        TransportErrorKind::Timeout,
        TransportErrorKind::Aborted,
        TransportErrorKind::Tls,
        TransportErrorKind::Other,
    ]);

    /// A set of the given kinds.
    #[must_use]
    pub const fn of(kinds: &[TransportErrorKind]) -> TransportKinds {
        let mut set = TransportKinds::NONE;
        let mut i = 0;
        while i < kinds.len() {
            set = set.with(kinds[i]);
            i += 1;
        }
        set
    }

    const fn bit(kind: TransportErrorKind) -> u32 {
        1 << (kind as u32)
    }

    /// This set and `kind`.
    #[must_use]
    pub const fn with(self, kind: TransportErrorKind) -> TransportKinds {
        TransportKinds {
            bits: self.bits | Self::bit(kind),
        }
    }

    /// This set without `kind`.
    #[must_use]
    pub const fn without(self, kind: TransportErrorKind) -> TransportKinds {
        TransportKinds {
            bits: self.bits & !Self::bit(kind),
        }
    }

    /// Whether `kind` is in the set.
    #[must_use]
    #[inline]
    pub const fn contains(self, kind: TransportErrorKind) -> bool {
        self.bits & Self::bit(kind) != 0
    }
}

impl Default for TransportKinds {
    fn default() -> Self {
        TransportKinds::RETRYABLE
    }
}

impl std::fmt::Debug for TransportKinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(
                TransportErrorKind::ALL
                    .iter()
                    .filter(|k| self.contains(**k)),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_kinds() {
        use TransportErrorKind as K;
        let all = TransportErrorKind::ALL;
        // RETRYABLE is exactly the kinds that are not permanent.
        for k in all {
            assert_eq!(
                TransportKinds::RETRYABLE.contains(k),
                !k.is_permanent(),
                "{k:?}"
            );
            assert!(!TransportKinds::NONE.contains(k));
            assert!(TransportKinds::NONE.with(k).contains(k));
            assert!(!TransportKinds::of(&all).without(k).contains(k));
            assert!(TransportKinds::of(&all).contains(k));
        }
        // Every kind has its own bit.
        let bits: Vec<u32> = all
            .iter()
            .map(|k| TransportKinds::NONE.with(*k).bits)
            .collect();
        for (i, b) in bits.iter().enumerate() {
            assert_eq!(b.count_ones(), 1);
            assert!(!bits[..i].contains(b));
        }
        assert_eq!(TransportKinds::default(), TransportKinds::RETRYABLE);
        assert_eq!(
            format!("{:?}", TransportKinds::of(&[K::Dns, K::Refused])),
            "{Refused, Dns}"
        );
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
