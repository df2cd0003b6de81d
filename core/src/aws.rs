//! An AWS profile: policies and retry budgets that make polite retry the
//! way the AWS SDKs' **standard** retry mode does, checked against the AWS
//! SDK conformance scenarios (`core/tests/aws_conformance.rs`).
//!
//! | | [`standard`] + [`standard_bucket`] (2026 revision) | [`legacy`] + [`legacy_bucket`] (before) |
//! |---|---|---|
//! | attempts | 3 (2 retries, all classes together) | 3 |
//! | throttling (429, or a throttling error code) | backoff from 1 s, doubling | from 1 s |
//! | transient (500, 502, 503, 504, a transient code, transport) | backoff from 50 ms, doubling | from 1 s |
//! | backoff | full jitter, capped at 20 s; exponent = retries so far | same |
//! | `x-amz-retry-after` (ms) | clamped to `[backoff, backoff + 5 s]` | ignored |
//! | retry quota | 500 tokens; throttling costs 5, others 14 | 500; every retry 5, a timeout 10 |
//! | refund | a success returns its last retry's cost, or 1 after a first-try success | same |
//!
//! Long-polling operations (e.g. SQS `ReceiveMessage`): set
//! [`RetryPolicy::backoff_when_budget_empty`] on the standard policy, so
//! that an empty quota still waits out the backoff before failing (the
//! legacy SDKs did not).
//!
//! **Error codes.** AWS marks throttling and some transient failures with an
//! error code in the body or the `x-amzn-ErrorType` header, often on a 400.
//! polite's machines read no bodies: the caller (or its [`Classify`]) turns
//! the code into [`Response::retry_class`](crate::Response::retry_class)
//! with [`error_class`]; [`ErrorTypeHeader`] does it from the header.
//!
//! Where polite adds to the SDKs: the deadline (no retry past it), the
//! standard `Retry-After` header (honoured, never truncated), and
//! replayability (a non-idempotent request without an idempotency key is
//! not re-sent). Where it differs: an answer has one class, so
//! `PriorRequestNotComplete`, which botocore counts as both throttling and
//! transient, is throttling here.
//!
//! The scenarios fix the SDKs' jitter at 1; with polite, a generator that
//! always yields `u64::MAX` (`polite_testing::Fixed`, from the test
//! toolkit crate) gives `u = 1 - 2^-64`: delays 1 ns under the scenarios' numbers.
//!
//! ```
//! use polite_core::{Action, Event, Method, Outcome, RequestId, RequestInfo, Response, RetryMachine, aws};
//! use polite_testing::Fixed;
//! use std::sync::{Arc, Mutex};
//! use std::time::{Duration, Instant, UNIX_EPOCH};
//!
//! let quota = Arc::new(Mutex::new(aws::standard_bucket())); // shared by every request
//! let t0 = Instant::now();
//! let mut m = RetryMachine::new(aws::standard(), RequestInfo::new(RequestId(1), Method::Get),
//!                               Fixed(u64::MAX), t0, Duration::from_secs(60)).unwrap()
//!     .with_budget(Arc::clone(&quota));
//! let Action::Send(p) = m.poll_action() else { unreachable!() };
//! m.handle(t0, Event::Response(Response::new(p.id, 500, UNIX_EPOCH)));
//! let Action::SleepUntil(at) = m.poll_action() else { unreachable!() };
//! assert!(at - t0 > Duration::from_millis(49)); // 50 ms, less 1 ns
//! assert_eq!(quota.lock().unwrap().tokens(), 486); // a transient retry costs 14
//! ```

use std::time::Duration;

use crate::budget::{RetryBucket, RetryCosts};
use crate::drive::{Answer, Classify};
use crate::input::{JobReport, RetryClass};
use crate::policy::{Backoff, BackoffExponent, Jitter, MaxRetries, RetryPolicy, StatusSet};

/// Error codes the AWS SDKs treat as throttling (botocore's list; the Java
/// and Go SDKs use the same names).
///
/// ```
/// assert!(polite_core::aws::THROTTLING_ERROR_CODES.contains(&"SlowDown"));
/// ```
pub const THROTTLING_ERROR_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// Error codes the AWS SDKs treat as transient, whatever the status.
///
/// ```
/// assert!(polite_core::aws::TRANSIENT_ERROR_CODES.contains(&"RequestTimeout"));
/// ```
pub const TRANSIENT_ERROR_CODES: &[&str] = &["RequestTimeout", "RequestTimeoutException"];

/// The retry class an AWS error code stands for: throttling codes are
/// [`RetryClass::RateLimited`], transient ones [`RetryClass::ServerError`];
/// `None` for any other code (then the status decides). Accepts the raw
/// forms the services send: `ThrottlingException`,
/// `ThrottlingException:http://internal.amazon.com/...` (the
/// `x-amzn-ErrorType` header) and `com.amazonaws.dynamodb.v20120810#ThrottlingException`
/// (a JSON `__type`).
///
/// ```
/// use polite_core::{RetryClass, aws::error_class};
/// assert_eq!(error_class(b"Throttling"), Some(RetryClass::RateLimited));
/// assert_eq!(error_class(b"ThrottlingException:http://internal.amazon.com/coral/"), Some(RetryClass::RateLimited));
/// assert_eq!(error_class(b"aws.dynamodb#ProvisionedThroughputExceededException"), Some(RetryClass::RateLimited));
/// assert_eq!(error_class(b"RequestTimeout"), Some(RetryClass::ServerError));
/// assert_eq!(error_class(b"AccessDenied"), None);
/// ```
#[must_use]
pub fn error_class(code: &[u8]) -> Option<RetryClass> {
    let mut code = code.trim_ascii();
    if let Some(i) = code.iter().position(|&b| b == b':') {
        code = &code[..i];
    }
    if let Some(i) = code.iter().rposition(|&b| b == b'#') {
        code = &code[i + 1..];
    }
    let is = |list: &[&str]| list.iter().any(|c| c.as_bytes() == code);
    if is(THROTTLING_ERROR_CODES) {
        Some(RetryClass::RateLimited)
    } else if is(TRANSIENT_ERROR_CODES) {
        Some(RetryClass::ServerError)
    } else {
        None
    }
}

/// A [`Classify`] for the drive loop that reads the AWS error code from the
/// `x-amzn-ErrorType` header (JSON and REST-JSON protocols) into
/// [`Response::retry_class`](crate::Response::retry_class). It reads no
/// job reports. Protocols that put the code only in the body (XML) need a
/// classifier that reads the body and calls [`error_class`].
///
/// ```
/// use polite_core::RetryClass;
/// use polite_core::aws::ErrorTypeHeader;
/// use polite_core::drive::{Answer, Classify};
/// struct Throttled;
/// impl Answer for Throttled {
///     fn status(&self) -> u16 { 400 }
///     fn header(&self, name: &str) -> Option<&[u8]> {
///         name.eq_ignore_ascii_case("x-amzn-errortype").then_some(&b"ThrottlingException:http://x/"[..])
///     }
/// }
/// assert_eq!(ErrorTypeHeader.retry_class(&Throttled), Some(RetryClass::RateLimited));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorTypeHeader;

impl<A: Answer> Classify<A> for ErrorTypeHeader {
    fn job<'a>(&'a mut self, _answer: &'a A) -> Option<JobReport<'a>> {
        None
    }

    fn retry_class(&mut self, answer: &A) -> Option<RetryClass> {
        answer.header("x-amzn-errortype").and_then(error_class)
    }
}

fn backoff(base: Duration) -> Backoff {
    Backoff {
        base,
        multiplier: 2,
        cap: Duration::from_secs(20),
        jitter: Jitter::Full,
    }
}

fn common() -> RetryPolicy {
    RetryPolicy {
        // One budget for all classes: max_attempts 3.
        max_retries: MaxRetries {
            rate_limited: u32::MAX,
            server_error: u32::MAX,
            transport: u32::MAX,
        },
        max_total_retries: Some(2),
        rate_limited_statuses: StatusSet::of(&[429]),
        server_error_statuses: StatusSet::of(&[500, 502, 503, 504]),
        backoff_exponent: BackoffExponent::AllRetries,
        ..RetryPolicy::default()
    }
}

/// The AWS SDKs' standard retry mode (the 2026 revision, "SEP 2.1"): 3
/// attempts; throttling backs off from 1 s, anything else from 50 ms,
/// doubling per attempt, full jitter, capped at 20 s; `x-amz-retry-after`
/// honoured within `[backoff, backoff + 5 s]`. Use with
/// [`standard_bucket`] shared by all requests to the same service. The
/// other fields keep polite's defaults (`Retry-After` rules, cushion).
///
/// The SDKs' settings: `max_attempts` is [`with_max_attempts`],
/// `max_backoff` is [`with_max_backoff`].
///
/// ```
/// use polite_core::{RetryClass, aws};
/// use std::time::Duration;
/// let p = aws::standard();
/// assert_eq!(p.max_total_retries, Some(2));
/// assert_eq!(p.backoff_of(RetryClass::ServerError).base, Duration::from_millis(50));
/// assert_eq!(p.backoff_of(RetryClass::RateLimited).base, Duration::from_secs(1));
/// assert_eq!(p.retry_after_ms, Some(Duration::from_secs(5)));
/// assert!(p.validate().is_ok());
/// ```
#[must_use]
pub fn standard() -> RetryPolicy {
    RetryPolicy {
        backoff: backoff(Duration::from_millis(50)),
        rate_limited_backoff: Some(backoff(Duration::from_secs(1))),
        retry_after_ms: Some(Duration::from_secs(5)),
        ..common()
    }
}

/// `policy` with the SDKs' `max_attempts` setting: at most `attempts`
/// sends in all (`max_total_retries = attempts - 1`; 0 counts as 1).
///
/// ```
/// use polite_core::aws;
/// assert_eq!(aws::with_max_attempts(aws::standard(), 5).max_total_retries, Some(4));
/// ```
#[must_use]
pub fn with_max_attempts(policy: RetryPolicy, attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_total_retries: Some(attempts.saturating_sub(1)),
        ..policy
    }
}

/// `policy` with the SDKs' `max_backoff` setting: every backoff (both
/// classes) capped at `max`, which may be below a class's base (the SDKs
/// compute `min(base * 2^n, max)`; polite then lowers that base to `max`,
/// which gives the same delays). A zero `max` is taken as 1 ns.
///
/// ```
/// use polite_core::{RetryClass, aws};
/// use std::time::Duration;
/// let p = aws::with_max_backoff(aws::standard(), Duration::from_millis(200));
/// assert_eq!(p.backoff_of(RetryClass::ServerError).cap, Duration::from_millis(200));
/// assert_eq!(p.backoff_of(RetryClass::RateLimited).base, Duration::from_millis(200));
/// assert!(p.validate().is_ok());
/// ```
#[must_use]
pub fn with_max_backoff(policy: RetryPolicy, max: Duration) -> RetryPolicy {
    let max = max.max(Duration::from_nanos(1));
    let cap = |b: Backoff| Backoff {
        base: b.base.min(max),
        cap: max,
        ..b
    };
    RetryPolicy {
        backoff: cap(policy.backoff),
        rate_limited_backoff: policy.rate_limited_backoff.map(cap),
        ..policy
    }
}

/// The retry quota of the standard mode: 500 tokens; a throttling retry
/// costs 5, any other 14; a success returns its last retry's cost, or 1
/// when it needed none.
///
/// ```
/// let b = polite_core::aws::standard_bucket();
/// assert_eq!((b.capacity(), b.costs().rate_limited, b.costs().server_error), (500, 5, 14));
/// ```
#[must_use]
pub fn standard_bucket() -> RetryBucket {
    RetryBucket::new(500, RetryCosts::default())
}

/// The AWS SDKs' standard retry mode before the 2026 revision ("v2.0"):
/// 3 attempts, every failure backs off from 1 s, doubling, full jitter,
/// capped at 20 s; no `x-amz-retry-after`. Use with [`legacy_bucket`].
///
/// ```
/// use polite_core::{RetryClass, aws};
/// use std::time::Duration;
/// let p = aws::legacy();
/// assert_eq!(p.backoff_of(RetryClass::ServerError).base, Duration::from_secs(1));
/// assert_eq!(p.backoff_of(RetryClass::RateLimited).base, Duration::from_secs(1));
/// assert_eq!(p.retry_after_ms, None);
/// ```
#[must_use]
pub fn legacy() -> RetryPolicy {
    RetryPolicy {
        backoff: backoff(Duration::from_secs(1)),
        ..common()
    }
}

/// The retry quota before the 2026 revision: 500 tokens; every retry costs
/// 5, a retry after a timeout 10; the same refunds.
///
/// ```
/// use polite_core::{Reply, RetryClass, TransportErrorKind};
/// let b = polite_core::aws::legacy_bucket();
/// assert_eq!(b.costs().of(RetryClass::RateLimited, Reply::Status(429)), 5);
/// assert_eq!(b.costs().of(RetryClass::Transport, Reply::Transport(TransportErrorKind::Timeout)), 10);
/// ```
#[must_use]
pub fn legacy_bucket() -> RetryBucket {
    RetryBucket::new(
        500,
        RetryCosts {
            rate_limited: 5,
            server_error: 5,
            transport: 5,
            timeout: 10,
            first_try_success: 1,
        },
    )
}
