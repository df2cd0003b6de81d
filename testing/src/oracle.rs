//! The checkers' own reading of SPEC §2 (classes and budgets) and §3 (the
//! backoff schedule's floor): written out by hand here, so that a checker
//! never asks the code under test what should happen
//! (`RetryPolicy::class_of_response`, `MaxRetries::of`,
//! `polite_core::backoff`).
//!
//! Two helpers are shared with polite-core on purpose: [`StatusSet::contains`]
//! (`polite_core::policy::StatusSet`) and [`TransportKinds::contains`]
//! (`polite_core::policy::TransportKinds`), the membership tests of the
//! policy's own sets, which are the policy's data rather than its logic;
//! the table-driven tests below pin them to SPEC §2's table and to the
//! sets' documented meaning. Which transport errors are permanent is this
//! module's own table (SPEC §2.2's list), never
//! `TransportErrorKind::is_permanent`.
//!
//! [`StatusSet::contains`]: polite_core::policy::StatusSet::contains
//! [`TransportKinds::contains`]: polite_core::policy::TransportKinds::contains

use std::time::Duration;

use polite_core::policy::{Backoff, Jitter};
use polite_core::{Response, RetryClass, RetryPolicy, TransportErrorKind};

/// The retry class of an answer, by SPEC §2: the caller's classification
/// wins for a final status (`200..=599`); else a status in the policy's
/// rate-limited set is `RateLimited`, one in its server-error set is
/// `ServerError`, and anything else (a success, 404, 501, 505, ...) has no
/// class.
pub(crate) fn class_of(policy: &RetryPolicy, r: &Response<'_>) -> Option<RetryClass> {
    if let Some(c) = r.retry_class
        && (200..600).contains(&r.status)
    {
        return Some(c);
    }
    if policy.rate_limited_statuses.contains(r.status) {
        Some(RetryClass::RateLimited)
    } else if policy.server_error_statuses.contains(r.status) {
        Some(RetryClass::ServerError)
    } else {
        None
    }
}

/// Whether a send that failed with this transport error kind can never
/// succeed by repeating it, by SPEC §2.2's list: a body over the limit, too
/// many redirects, a redirect that would need an unreplayable body, a
/// rejected TLS certificate, an invalid request; an answer head over the
/// transport's limit, which the same send gets again, as a body over the
/// limit; and an answer that is not valid HTTP, which the same server
/// gives again (SPEC §5: a send that can never succeed by repeating it).
pub(crate) fn permanent(kind: TransportErrorKind) -> bool {
    match kind {
        TransportErrorKind::BodyTooLarge
        | TransportErrorKind::TooManyRedirects
        | TransportErrorKind::RedirectNotReplayable
        | TransportErrorKind::Certificate
        | TransportErrorKind::InvalidRequest
        | TransportErrorKind::HeadTooLarge
        | TransportErrorKind::InvalidAnswer => true,
        TransportErrorKind::Refused
        | TransportErrorKind::Reset
        | TransportErrorKind::Dns
        | TransportErrorKind::Timeout
        | TransportErrorKind::Aborted
        | TransportErrorKind::Tls
        | TransportErrorKind::Other => false,
        other => crate::unknown(&other),
    }
}

/// Whether a transport error of this kind is retried (class `Transport`):
/// never when it is permanent, else when the policy's
/// `retried_transport` set holds it. A kind that is not retried ends the
/// request at its first occurrence with `Outcome::Permanent { cause }`,
/// whatever the replayability and the budgets.
pub(crate) fn transport_retried(policy: &RetryPolicy, kind: TransportErrorKind) -> bool {
    !permanent(kind) && policy.retried_transport.contains(kind)
}

/// The retry budget of a class, read field by field.
pub(crate) fn budget(policy: &RetryPolicy, class: RetryClass) -> u32 {
    match class {
        RetryClass::RateLimited => policy.max_retries.rate_limited,
        RetryClass::ServerError => policy.max_retries.server_error,
        RetryClass::Transport => policy.max_retries.transport,
        other => crate::unknown(&other),
    }
}

/// The least delay the `n`-th step (from 0) of a backoff schedule may take
/// with any jitter draw: `base × multiplier^n`, capped, then the low end of
/// the jitter's range (SPEC §2: none → the delay; full → 0; equal →
/// half of it; ±p % → `(1 − p/100)` of it), rounded down so that it is a
/// lower bound whatever the machine's own rounding.
pub(crate) fn least_backoff(b: &Backoff, n: u32) -> Duration {
    // In nanoseconds, with u128 and an explicit loop: no shared arithmetic.
    let cap = b.cap.as_nanos();
    let mut d = b.base.as_nanos().min(cap);
    for _ in 0..n {
        if d >= cap || b.multiplier <= 1 {
            break;
        }
        d = (d * u128::from(b.multiplier)).min(cap);
    }
    let low = match b.jitter {
        Jitter::None => d,
        Jitter::Full => 0,
        Jitter::Equal => d / 2,
        Jitter::Percent(p) => {
            let p = u128::from(p.min(100));
            d - (d * p).div_ceil(100)
        }
        // A jitter kind added after this was written: no floor known.
        _ => 0,
    };
    Duration::from_nanos(u64::try_from(low).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use polite_core::SendId;
    use std::time::UNIX_EPOCH;

    /// SPEC §2's table, written out: with the default policy every status
    /// from 100 to 599 has exactly the class the table gives it.
    #[test]
    fn default_classes_are_specs_table() {
        let p = RetryPolicy::default();
        for status in 100..=599u16 {
            let want = match status {
                429 => Some(RetryClass::RateLimited),
                500 | 502 | 503 | 504 => Some(RetryClass::ServerError),
                _ => None,
            };
            let r = Response::new(SendId::default(), status, UNIX_EPOCH);
            assert_eq!(class_of(&p, &r), want, "status {status}");
        }
        // The caller's classification wins for 200..=599, not outside it.
        for (status, want) in [
            (200, Some(RetryClass::Transport)),
            (404, Some(RetryClass::Transport)),
            (599, Some(RetryClass::Transport)),
            (199, None),
            (600, None),
        ] {
            let r = Response::new(SendId::default(), status, UNIX_EPOCH)
                .retry_class(RetryClass::Transport);
            assert_eq!(class_of(&p, &r), want, "status {status}");
        }
        // SPEC §2.2's policy: only 429 and 503.
        let q = RetryPolicy {
            server_error_statuses: polite_core::policy::StatusSet::of(&[503]),
            ..RetryPolicy::default()
        };
        let class = |s| class_of(&q, &Response::new(SendId::default(), s, UNIX_EPOCH));
        assert_eq!(
            [class(429), class(503), class(500), class(504)],
            [
                Some(RetryClass::RateLimited),
                Some(RetryClass::ServerError),
                None,
                None
            ]
        );
    }

    /// SPEC §2.2's permanent transport errors, and the policy's set: by
    /// default every other kind is retried; a kind left out of the set is
    /// not; a permanent kind put in the set is still not.
    #[test]
    fn transport_kinds_are_specs() {
        use TransportErrorKind as K;
        use polite_core::policy::TransportKinds;
        let permanent_by_spec = [
            K::BodyTooLarge,
            K::TooManyRedirects,
            K::RedirectNotReplayable,
            K::Certificate,
            K::InvalidRequest,
            K::HeadTooLarge,
            K::InvalidAnswer,
        ];
        let p = RetryPolicy::default();
        for k in K::ALL {
            let listed = permanent_by_spec.contains(&k);
            assert_eq!(permanent(k), listed, "{k:?}");
            assert_eq!(transport_retried(&p, k), !listed, "{k:?} by default");
            // The shared membership test means what its docs say.
            let none = RetryPolicy {
                retried_transport: TransportKinds::NONE,
                ..RetryPolicy::default()
            };
            assert!(!transport_retried(&none, k), "{k:?} with no kind retried");
            let only = RetryPolicy {
                retried_transport: TransportKinds::NONE.with(k),
                ..RetryPolicy::default()
            };
            assert_eq!(transport_retried(&only, k), !listed, "{k:?} alone");
            for other in K::ALL.into_iter().filter(|o| *o != k) {
                assert!(
                    !transport_retried(&only, other),
                    "{other:?} with only {k:?}"
                );
            }
            let without = RetryPolicy {
                retried_transport: TransportKinds::of(&K::ALL).without(k),
                ..RetryPolicy::default()
            };
            assert!(!transport_retried(&without, k), "{k:?} left out");
        }
    }

    /// SPEC §2's default budgets: 3 for rate-limited, 4 for server and
    /// transport errors.
    #[test]
    fn default_budgets_are_specs() {
        let p = RetryPolicy::default();
        assert_eq!(budget(&p, RetryClass::RateLimited), 3);
        assert_eq!(budget(&p, RetryClass::ServerError), 4);
        assert_eq!(budget(&p, RetryClass::Transport), 4);
    }

    /// SPEC §2: 250 ms doubling, capped at 4 s; SPEC §3: 2, 4, 8, 15, 15 s
    /// with ±20 %.
    #[test]
    fn backoff_floors_are_specs() {
        let ms = Duration::from_millis;
        let b = Backoff {
            base: ms(250),
            multiplier: 2,
            cap: ms(4000),
            jitter: Jitter::None,
        };
        let got: Vec<_> = (0..7).map(|n| least_backoff(&b, n)).collect();
        assert_eq!(got, [250, 500, 1000, 2000, 4000, 4000, 4000].map(ms));
        let poll = Backoff {
            base: ms(2000),
            multiplier: 2,
            cap: ms(15_000),
            jitter: Jitter::Percent(20),
        };
        let got: Vec<_> = (0..6).map(|n| least_backoff(&poll, n)).collect();
        assert_eq!(got, [1600, 3200, 6400, 12_000, 12_000, 12_000].map(ms));
        let with = |jitter| least_backoff(&Backoff { jitter, ..b }, 3);
        assert_eq!(with(Jitter::Full), Duration::ZERO);
        assert_eq!(with(Jitter::Equal), ms(1000));
        assert_eq!(with(Jitter::Percent(100)), Duration::ZERO);
        assert_eq!(with(Jitter::Percent(0)), ms(2000));
        // Huge: saturates at the cap, never overflows.
        let huge = Backoff {
            base: Duration::from_secs(u64::MAX / 2),
            multiplier: u32::MAX,
            cap: Duration::MAX,
            jitter: Jitter::None,
        };
        assert_eq!(
            least_backoff(&huge, u32::MAX),
            Duration::from_nanos(u64::MAX)
        );
    }
}
