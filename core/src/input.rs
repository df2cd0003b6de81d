//! What the IO side feeds the machines: an [`Event`] (an answer, a
//! transport error, time passing, a cancel) and its parts: the
//! [`Response`] with the few headers the machines read, the [`SendId`] it
//! answers, why no answer came ([`TransportErrorKind`]), what a job-status
//! answer says ([`JobReport`]), the raw rate-limit fields
//! ([`RateLimitFields`]), a caller's [`RetryClass`], and [`Reply`], the
//! status or error an attempt came back with.
//!
//! The bottom layer: it depends on no other module of the crate.

use std::time::SystemTime;

/// Names one send: which item of a batch (0 outside batches) and which
/// attempt of it (0 for the first send, 1 for the first retry, ...).
///
/// Answers carry the id of the send they answer, so that a late answer for
/// an attempt the machine has given up on is recognised and ignored.
///
/// ```
/// use polite_core::SendId;
/// assert_eq!(SendId { item: 0, attempt: 2 }.to_string(), "0#2");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SendId {
    /// Index of the logical request in a batch; 0 for single machines.
    pub item: u32,
    /// Attempt index within the logical request; 0 is the first send.
    pub attempt: u32,
}

impl std::fmt::Display for SendId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.item, self.attempt)
    }
}

/// Why no HTTP answer came back.
///
/// Most kinds are *blips* (refused, reset, DNS, timeout...): the send may
/// well succeed when repeated, and the machines retry them as the
/// transport class. The [permanent](Self::is_permanent) kinds
/// (`BodyTooLarge`, `TooManyRedirects`, `RedirectNotReplayable`,
/// `Certificate`, `InvalidRequest`, `HeadTooLarge`, `InvalidAnswer`) can never succeed by
/// repeating the same send: they are never retried, whatever the request's replayability, and
/// end the machine with [`Outcome::Permanent`](crate::Outcome::Permanent)
/// (SPEC §5).
///
/// ```
/// use polite_core::TransportErrorKind;
/// assert_eq!(TransportErrorKind::Refused.to_string(), "connection refused");
/// assert!(!TransportErrorKind::Reset.is_permanent());
/// assert!(TransportErrorKind::BodyTooLarge.is_permanent());
/// assert!(TransportErrorKind::HeadTooLarge.is_permanent());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// Connection refused.
    Refused,
    /// Connection reset or closed before a complete answer.
    Reset,
    /// Name resolution failed.
    Dns,
    /// A connect, read or write timeout of the transport.
    Timeout,
    /// The adapter aborted the attempt at its `abort_at`.
    Aborted,
    /// A TLS handshake failure other than a rejected certificate
    /// (retried: it may be a blip).
    Tls,
    /// Anything else.
    Other,
    /// The answer's body is larger than the transport's limit (permanent).
    BodyTooLarge,
    /// The redirect limit was reached, or the redirects loop (permanent).
    TooManyRedirects,
    /// A redirect (307/308) would need the request re-sent where it may not
    /// be (a body that cannot be produced again, a method that must not be
    /// repeated), so it was not followed (permanent).
    RedirectNotReplayable,
    /// The server's TLS certificate was rejected (permanent: the same
    /// certificate will be rejected again).
    Certificate,
    /// The request cannot be sent as it is: an invalid or unsupported URL,
    /// header or method (permanent).
    InvalidRequest,
    /// The answer's head (status line and headers) is larger than the
    /// transport's limit, in bytes or in number of headers (permanent: the
    /// same request gets the same head again, as with `BodyTooLarge`).
    HeadTooLarge,
    /// The server's answer is not valid HTTP: a control byte in a header
    /// value, a garbage status line, a malformed chunk size. Permanent:
    /// the same server answers the same request the same way, so repeating
    /// it only adds load (SPEC §5). The transport's parser error is the
    /// `source()`. A connection cut before a complete answer is `Reset`,
    /// not this.
    ///
    /// ```
    /// use polite_core::TransportErrorKind as K;
    /// assert_eq!(K::InvalidAnswer.to_string(), "the server's answer is not valid HTTP");
    /// assert!(K::InvalidAnswer.is_permanent());
    /// ```
    InvalidAnswer,
}

impl TransportErrorKind {
    /// Every kind, in declaration order: the seven retried by default
    /// first, the permanent ones after them.
    ///
    /// ```
    /// use polite_core::TransportErrorKind as K;
    /// assert_eq!(K::ALL.len(), 14);
    /// assert_eq!(K::ALL.iter().filter(|k| k.is_permanent()).count(), 7);
    /// assert!(K::ALL[7..].iter().all(|k| k.is_permanent()));
    /// ```
    pub const ALL: [TransportErrorKind; 14] = [
        TransportErrorKind::Refused,
        TransportErrorKind::Reset,
        TransportErrorKind::Dns,
        TransportErrorKind::Timeout,
        TransportErrorKind::Aborted,
        TransportErrorKind::Tls,
        TransportErrorKind::Other,
        TransportErrorKind::BodyTooLarge,
        TransportErrorKind::TooManyRedirects,
        TransportErrorKind::RedirectNotReplayable,
        TransportErrorKind::Certificate,
        TransportErrorKind::InvalidRequest,
        TransportErrorKind::HeadTooLarge,
        TransportErrorKind::InvalidAnswer,
    ];

    /// Whether repeating the same send can never succeed: such errors are
    /// not retried (SPEC §5).
    ///
    /// ```
    /// use polite_core::TransportErrorKind as K;
    /// assert!(K::TooManyRedirects.is_permanent() && K::InvalidRequest.is_permanent());
    /// assert!(K::HeadTooLarge.is_permanent());
    /// assert!(!K::Timeout.is_permanent() && !K::Tls.is_permanent());
    /// ```
    #[must_use]
    pub const fn is_permanent(self) -> bool {
        matches!(
            self,
            TransportErrorKind::BodyTooLarge
                | TransportErrorKind::TooManyRedirects
                | TransportErrorKind::RedirectNotReplayable
                | TransportErrorKind::Certificate
                | TransportErrorKind::InvalidRequest
                | TransportErrorKind::HeadTooLarge
                | TransportErrorKind::InvalidAnswer
        )
    }
}

impl std::fmt::Display for TransportErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransportErrorKind::Refused => "connection refused",
            TransportErrorKind::Reset => {
                "connection reset or closed before the answer was complete"
            }
            TransportErrorKind::Dns => "DNS failure",
            TransportErrorKind::Timeout => "timeout",
            TransportErrorKind::Aborted => "aborted: no answer in time",
            TransportErrorKind::Tls => "TLS failure",
            TransportErrorKind::Other => "other transport error",
            TransportErrorKind::BodyTooLarge => "body larger than the limit",
            TransportErrorKind::TooManyRedirects => "too many redirects",
            TransportErrorKind::RedirectNotReplayable => {
                "redirect not followed: the request may not be re-sent"
            }
            TransportErrorKind::Certificate => "TLS certificate rejected",
            TransportErrorKind::InvalidRequest => "invalid request",
            TransportErrorKind::HeadTooLarge => "answer head larger than the limit",
            TransportErrorKind::InvalidAnswer => "the server's answer is not valid HTTP",
        })
    }
}

/// The classes of failure that are retried, each with its own budget.
///
/// ```
/// use polite_core::RetryClass;
/// assert_eq!(RetryClass::ServerError.to_string(), "server error");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetryClass {
    /// A rate-limited answer (429 by default).
    RateLimited,
    /// A server error (500, 502, 503, 504 by default).
    ServerError,
    /// A transport error: refused, reset, DNS, timeout.
    Transport,
}

impl RetryClass {
    /// Index for per-class counters.
    #[inline]
    pub(crate) const fn index(self) -> usize {
        match self {
            RetryClass::RateLimited => 0,
            RetryClass::ServerError => 1,
            RetryClass::Transport => 2,
        }
    }
}

impl std::fmt::Display for RetryClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RetryClass::RateLimited => "rate limited",
            RetryClass::ServerError => "server error",
            RetryClass::Transport => "transport",
        })
    }
}

/// What came back from one attempt: an HTTP status or a transport error.
///
/// ```
/// use polite_core::{Reply, TransportErrorKind};
/// assert_eq!(Reply::Status(503).to_string(), "HTTP 503");
/// assert_eq!(Reply::Transport(TransportErrorKind::Reset).to_string(), "transport error: connection reset or closed before the answer was complete");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reply {
    /// An HTTP answer with this status.
    Status(u16),
    /// No HTTP answer.
    Transport(TransportErrorKind),
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Status(s) => write!(f, "HTTP {s}"),
            Reply::Transport(k) => write!(f, "transport error: {k}"),
        }
    }
}

/// What a job-status answer says, as classified by the adapter or caller
/// (the machines never parse bodies). Used by `PollMachine`; other machines
/// ignore it.
///
/// ```
/// use polite_core::poll::JobReport;
/// let r = JobReport::State("running");
/// assert_ne!(r, JobReport::LongPollUnsupported);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobReport<'a> {
    /// The job's current state as the server names it (`running`, `passed`...).
    State(&'a str),
    /// The server rejected the long-poll wait parameter (by default: HTTP 400
    /// with error code `VALIDATION_ERROR`).
    LongPollUnsupported,
}

/// An HTTP answer, reduced to what the machines read: the status and the few
/// headers that matter. Header values are borrowed raw bytes (they need not be
/// UTF-8); nothing is kept after [`handle`](crate::RetryMachine::handle)
/// returns.
///
/// The headers read are listed in [`Response::HEADERS`]; [`header`](Self::header)
/// files a header by name into its field (the drive loop and the test
/// simulator use it, so the mapping lives here once).
///
/// ```
/// use polite_core::{Response, SendId};
/// use std::time::UNIX_EPOCH;
/// let r = Response::new(SendId::default(), 429, UNIX_EPOCH)
///     .retry_after(b"2")
///     .date(b"Sun, 06 Nov 1994 08:49:37 GMT")
///     .header("RateLimit", br#""default";r=0;t=2"#);
/// assert_eq!(r.status, 429);
/// assert!(!r.rate_limit.is_empty());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response<'a> {
    /// The send this answers ([`SendPlan::id`](crate::SendPlan::id)).
    pub id: SendId,
    /// The HTTP status.
    pub status: u16,
    /// The raw `Retry-After` value, if present.
    pub retry_after: Option<&'a [u8]>,
    /// The raw `Date` value, if present.
    pub date: Option<&'a [u8]>,
    /// The wall-clock time when the answer arrived; used only to turn an
    /// HTTP-date into a delay when `Date` is missing or invalid, and an
    /// `X-RateLimit-Reset` epoch time into an instant. The drive loop
    /// ([`drive::drive`](crate::drive::drive)) reads the clock only for an
    /// answer with such a header and leaves `UNIX_EPOCH` here otherwise.
    pub wall_clock: SystemTime,
    /// The caller's session generation *now*, if it tracks one.
    pub generation: Option<u64>,
    /// For job polls: what the answer says about the job.
    pub job: Option<JobReport<'a>>,
    /// The raw rate-limit headers (`RateLimit`, `RateLimit-Policy`,
    /// `X-RateLimit-*`), read by pacing ([`Paced`](crate::Paced),
    /// [`BatchMachine`](crate::BatchMachine)) through
    /// [`RateLimitInfo`](crate::ratelimit::RateLimitInfo).
    pub rate_limit: RateLimitFields<'a>,
    /// The raw `x-amz-retry-after` value: a delay in milliseconds (AWS).
    /// Honoured only when the policy sets
    /// [`RetryPolicy::retry_after_ms`](crate::RetryPolicy::retry_after_ms).
    pub retry_after_ms: Option<&'a [u8]>,
    /// The caller's classification of this answer, when the status alone
    /// does not tell (e.g. an AWS `400` whose error code is `Throttling`,
    /// see [`aws::error_class`](crate::aws::error_class)). For statuses
    /// 400..=599 it replaces the policy's status sets; successes and
    /// statuses outside 100..=599 ignore it. The machines never parse bodies.
    pub retry_class: Option<RetryClass>,
}

impl<'a> Response<'a> {
    /// An answer to send `id` with `status`, arrived at wall-clock `wall_clock`.
    #[must_use]
    pub const fn new(id: SendId, status: u16, wall_clock: SystemTime) -> Response<'a> {
        Response {
            id,
            status,
            retry_after: None,
            date: None,
            wall_clock,
            generation: None,
            job: None,
            rate_limit: RateLimitFields::EMPTY,
            retry_after_ms: None,
            retry_class: None,
        }
    }

    /// The header names the machines read (lower case; matching is
    /// case-insensitive). An adapter looks each up and files it with
    /// [`header`](Self::header).
    ///
    /// ```
    /// use polite_core::Response;
    /// assert!(Response::HEADERS.contains(&"ratelimit-policy"));
    /// ```
    pub const HEADERS: [&'static str; 8] = [
        "retry-after",
        "date",
        "ratelimit",
        "ratelimit-policy",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "x-amz-retry-after",
    ];

    /// Files the raw `value` of header `name` (case-insensitive) into its
    /// field: `Retry-After`, `Date`, `RateLimit`, `RateLimit-Policy`,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`,
    /// `x-amz-retry-after`. Other names are ignored.
    ///
    /// ```
    /// use polite_core::{Response, SendId};
    /// use std::time::UNIX_EPOCH;
    /// let r = Response::new(SendId::default(), 503, UNIX_EPOCH)
    ///     .header("Retry-After", b"3")
    ///     .header("X-RateLimit-Remaining", b"0")
    ///     .header("x-amz-retry-after", b"1500")
    ///     .header("Content-Type", b"text/plain"); // not read: ignored
    /// assert_eq!(r.retry_after, Some(&b"3"[..]));
    /// assert_eq!(r.rate_limit.x_ratelimit_remaining, Some(&b"0"[..]));
    /// assert_eq!(r.retry_after_ms, Some(&b"1500"[..]));
    /// ```
    #[must_use]
    pub fn header(mut self, name: &str, value: &'a [u8]) -> Self {
        if let Some(field) = self.field(name) {
            *field = Some(value);
        }
        self
    }

    /// Files `value` under header `name` as [`header`](Self::header) does,
    /// unless that field already holds a value: walking an answer's headers
    /// in order, the first value of a repeated header is the one kept —
    /// except `Retry-After`, where the value asking for the later time is
    /// kept (SPEC §2.1: never resend before the server's time, whichever
    /// of its answers' values that is). Returns whether `name` is one
    /// polite reads ([`Response::HEADERS`]).
    ///
    /// Two `Retry-After` values compare when both are delta-seconds, both
    /// HTTP-dates, or one is invalid (the valid one is kept); a date and
    /// delta-seconds compare against a valid `Date` header filed before
    /// them (what the machines measure a date against). Without one the
    /// first is kept: the wall clock is not read here.
    ///
    /// ```
    /// use polite_core::{Response, SendId};
    /// use std::time::UNIX_EPOCH;
    /// let mut r = Response::new(SendId::default(), 429, UNIX_EPOCH);
    /// assert!(r.file_header("date", b"Sun, 06 Nov 1994 08:49:37 GMT"));
    /// assert!(r.file_header("Date", b"Mon, 07 Nov 1994 08:49:37 GMT")); // the first stays
    /// assert_eq!(r.date, Some(&b"Sun, 06 Nov 1994 08:49:37 GMT"[..]));
    /// assert!(r.file_header("retry-after", b"3"));
    /// assert!(r.file_header("Retry-After", b"120")); // repeated: the later time wins
    /// assert!(r.file_header("Retry-After", b"soon")); // invalid: not kept
    /// assert!(!r.file_header("content-type", b"text/plain"));
    /// assert_eq!(r.retry_after, Some(&b"120"[..]));
    /// ```
    pub fn file_header(&mut self, name: &str, value: &'a [u8]) -> bool {
        let date = self.date;
        let retry_after = name.len() == 11 && name.eq_ignore_ascii_case("retry-after");
        match self.field(name) {
            Some(field) => {
                match field {
                    None => *field = Some(value),
                    Some(kept) if retry_after && later(value, kept, date) => *field = Some(value),
                    Some(_) => {}
                }
                true
            }
            None => false,
        }
    }

    /// The field of header `name` (case-insensitive), if polite reads it.
    fn field(&mut self, name: &str) -> Option<&mut Option<&'a [u8]>> {
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        // By length first: most names an answer carries are none of these.
        Some(match name.len() {
            4 if is("date") => &mut self.date,
            9 if is("ratelimit") => &mut self.rate_limit.ratelimit,
            11 if is("retry-after") => &mut self.retry_after,
            16 if is("ratelimit-policy") => &mut self.rate_limit.ratelimit_policy,
            17 if is("x-ratelimit-limit") => &mut self.rate_limit.x_ratelimit_limit,
            17 if is("x-ratelimit-reset") => &mut self.rate_limit.x_ratelimit_reset,
            17 if is("x-amz-retry-after") => &mut self.retry_after_ms,
            21 if is("x-ratelimit-remaining") => &mut self.rate_limit.x_ratelimit_remaining,
            _ => return None,
        })
    }

    /// Sets all the raw rate-limit headers at once.
    ///
    /// ```
    /// use polite_core::{Response, SendId};
    /// use polite_core::ratelimit::RateLimitFields;
    /// use std::time::UNIX_EPOCH;
    /// let f = RateLimitFields::EMPTY.ratelimit(br#""default";r=9;t=50"#);
    /// let r = Response::new(SendId::default(), 200, UNIX_EPOCH).rate_limit(f);
    /// assert_eq!(r.rate_limit, f);
    /// ```
    #[must_use]
    pub const fn rate_limit(mut self, fields: RateLimitFields<'a>) -> Self {
        self.rate_limit = fields;
        self
    }

    /// Sets the raw `RateLimit` value.
    ///
    /// ```
    /// use polite_core::{Response, SendId};
    /// use std::time::UNIX_EPOCH;
    /// let r = Response::new(SendId::default(), 200, UNIX_EPOCH).ratelimit(br#""default";r=0;t=5"#);
    /// assert!(r.rate_limit.ratelimit.is_some());
    /// ```
    #[must_use]
    pub const fn ratelimit(mut self, value: &'a [u8]) -> Self {
        self.rate_limit.ratelimit = Some(value);
        self
    }

    /// Sets the raw `RateLimit-Policy` value.
    ///
    /// ```
    /// use polite_core::{Response, SendId};
    /// use std::time::UNIX_EPOCH;
    /// let r = Response::new(SendId::default(), 200, UNIX_EPOCH)
    ///     .ratelimit_policy(br#""default";q=100;w=10"#);
    /// assert!(r.rate_limit.ratelimit_policy.is_some());
    /// ```
    #[must_use]
    pub const fn ratelimit_policy(mut self, value: &'a [u8]) -> Self {
        self.rate_limit.ratelimit_policy = Some(value);
        self
    }

    /// Sets the raw `x-amz-retry-after` value (milliseconds).
    ///
    /// ```
    /// use polite_core::{Response, SendId};
    /// use std::time::UNIX_EPOCH;
    /// let r = Response::new(SendId::default(), 500, UNIX_EPOCH).retry_after_ms(b"1500");
    /// assert_eq!(r.retry_after_ms, Some(&b"1500"[..]));
    /// ```
    #[must_use]
    pub const fn retry_after_ms(mut self, value: &'a [u8]) -> Self {
        self.retry_after_ms = Some(value);
        self
    }

    /// Sets the caller's classification of this answer (see
    /// [`Response::retry_class`](#structfield.retry_class)).
    ///
    /// ```
    /// use polite_core::{Response, RetryClass, SendId};
    /// use std::time::UNIX_EPOCH;
    /// // An AWS 400 with error code "Throttling" is a rate-limited answer.
    /// let r = Response::new(SendId::default(), 400, UNIX_EPOCH).retry_class(RetryClass::RateLimited);
    /// assert_eq!(r.retry_class, Some(RetryClass::RateLimited));
    /// ```
    #[must_use]
    pub const fn retry_class(mut self, class: RetryClass) -> Self {
        self.retry_class = Some(class);
        self
    }

    /// Sets the raw `Retry-After` value.
    #[must_use]
    pub const fn retry_after(mut self, value: &'a [u8]) -> Self {
        self.retry_after = Some(value);
        self
    }

    /// Sets the raw `Date` value.
    #[must_use]
    pub const fn date(mut self, value: &'a [u8]) -> Self {
        self.date = Some(value);
        self
    }

    /// Sets the session generation current at arrival.
    #[must_use]
    pub const fn generation(mut self, generation: u64) -> Self {
        self.generation = Some(generation);
        self
    }

    /// Sets the job report (for `PollMachine`).
    #[must_use]
    pub const fn job(mut self, report: JobReport<'a>) -> Self {
        self.job = Some(report);
        self
    }
}

/// The raw rate-limit header values of one answer, as received (bytes;
/// they need not be UTF-8). All `None` when the answer has none.
///
/// ```
/// use polite_core::ratelimit::RateLimitFields;
/// let f = RateLimitFields::EMPTY
///     .ratelimit(br#""default";r=0;t=5"#)
///     .ratelimit_policy(br#""default";q=10;w=1"#);
/// assert!(!f.is_empty());
/// assert!(RateLimitFields::EMPTY.is_empty());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateLimitFields<'a> {
    /// `RateLimit` (IETF draft): the current service limits.
    pub ratelimit: Option<&'a [u8]>,
    /// `RateLimit-Policy` (IETF draft): the quota policies.
    pub ratelimit_policy: Option<&'a [u8]>,
    /// `X-RateLimit-Limit`.
    pub x_ratelimit_limit: Option<&'a [u8]>,
    /// `X-RateLimit-Remaining`.
    pub x_ratelimit_remaining: Option<&'a [u8]>,
    /// `X-RateLimit-Reset`.
    pub x_ratelimit_reset: Option<&'a [u8]>,
}

impl<'a> RateLimitFields<'a> {
    /// No field.
    ///
    /// ```
    /// use polite_core::ratelimit::RateLimitFields;
    /// assert_eq!(RateLimitFields::EMPTY, RateLimitFields::default());
    /// ```
    pub const EMPTY: RateLimitFields<'static> = RateLimitFields {
        ratelimit: None,
        ratelimit_policy: None,
        x_ratelimit_limit: None,
        x_ratelimit_remaining: None,
        x_ratelimit_reset: None,
    };

    /// Whether no field is present (then reading costs nothing more).
    ///
    /// ```
    /// use polite_core::ratelimit::RateLimitFields;
    /// assert!(RateLimitFields::default().is_empty());
    /// ```
    #[must_use]
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.ratelimit.is_none()
            && self.ratelimit_policy.is_none()
            && self.x_ratelimit_limit.is_none()
            && self.x_ratelimit_remaining.is_none()
            && self.x_ratelimit_reset.is_none()
    }

    /// Sets the raw `RateLimit` value.
    ///
    /// ```
    /// use polite_core::ratelimit::RateLimitFields;
    /// let f = RateLimitFields::EMPTY.ratelimit(br#""default";r=50;t=30"#);
    /// assert_eq!(f.ratelimit, Some(&br#""default";r=50;t=30"#[..]));
    /// ```
    #[must_use]
    pub const fn ratelimit(mut self, value: &'a [u8]) -> Self {
        self.ratelimit = Some(value);
        self
    }

    /// Sets the raw `RateLimit-Policy` value.
    ///
    /// ```
    /// use polite_core::ratelimit::RateLimitFields;
    /// let f = RateLimitFields::EMPTY.ratelimit_policy(br#""default";q=100;w=10"#);
    /// assert!(f.ratelimit_policy.is_some());
    /// ```
    #[must_use]
    pub const fn ratelimit_policy(mut self, value: &'a [u8]) -> Self {
        self.ratelimit_policy = Some(value);
        self
    }

    /// Sets the raw `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` values (each optional).
    ///
    /// ```
    /// use polite_core::ratelimit::RateLimitFields;
    /// let f = RateLimitFields::EMPTY.x_ratelimit(Some(b"60"), Some(b"0"), Some(b"12"));
    /// assert_eq!(f.x_ratelimit_remaining, Some(&b"0"[..]));
    /// ```
    #[must_use]
    pub const fn x_ratelimit(
        mut self,
        limit: Option<&'a [u8]>,
        remaining: Option<&'a [u8]>,
        reset: Option<&'a [u8]>,
    ) -> Self {
        self.x_ratelimit_limit = limit;
        self.x_ratelimit_remaining = remaining;
        self.x_ratelimit_reset = reset;
        self
    }
}

/// Something that happened, observed at the `now` passed with it.
///
/// ```
/// use polite_core::{Event, SendId, TransportErrorKind};
/// let e = Event::TransportError(SendId::default(), TransportErrorKind::Reset);
/// assert!(matches!(e, Event::TransportError(..)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'a> {
    /// An HTTP answer arrived.
    Response(Response<'a>),
    /// A send ended without an HTTP answer.
    TransportError(SendId, TransportErrorKind),
    /// Time passed: fire whatever is due at `now`. Idempotent; early or
    /// repeated ticks are harmless.
    Tick,
    /// The caller cancelled: the next action is `Stop(Cancelled)`.
    Cancel,
}

/// Whether `Retry-After` value `new` asks for a later time than `kept` (see
/// [`Response::file_header`]): a valid value beats an invalid one; a date
/// and delta-seconds compare only against a valid `Date` header (`date`).
/// Reached only for a repeated `Retry-After`.
#[cold]
fn later(new: &[u8], kept: &[u8], date: Option<&[u8]>) -> bool {
    use crate::retry_after::RetryAfter;
    match (RetryAfter::parse(new), RetryAfter::parse(kept)) {
        (Err(_), _) => false,
        (Ok(_), Err(_)) => true,
        (Ok(RetryAfter::Delay(a)), Ok(RetryAfter::Delay(b))) => a > b,
        (Ok(RetryAfter::At(a)), Ok(RetryAfter::At(b))) => a > b,
        (Ok(a), Ok(b)) => {
            // A date against delta-seconds: measured from the `Date`
            // header, as the machines measure it (the wall clock is not
            // read here; without a valid `Date` the first stays).
            let Some(base) = date.and_then(|d| RetryAfter::parse(d).ok()) else {
                return false;
            };
            let RetryAfter::At(base) = base else {
                return false;
            };
            let delay = |v: RetryAfter| v.delay(None, base);
            delay(a) > delay(b)
        }
    }
}
