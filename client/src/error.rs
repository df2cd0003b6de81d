//! [`Error`]: why a call did not succeed, with the last answer when there
//! was one; [`TransportError`]: why one attempt got no answer.

use std::time::Duration;

use bytes::Bytes;
use polite_core::policy::PolicyError;
use polite_core::{Outcome, TransportErrorKind};

/// The underlying error of a transport, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why one attempt got no HTTP answer: the [`TransportErrorKind`] the
/// machines decide by (retry a blip, stop at once on a permanent kind), the
/// transport's own error as [`source`](std::error::Error::source), and for
/// limits, the limit.
///
/// Its `Display` names the cause and never the URL, a header or the body
/// (reqwest errors are stored without their URL); the source may say more.
///
/// ```
/// use polite_client::TransportError;
/// use polite_core::TransportErrorKind;
/// let e = TransportError::body_too_large(16 << 20);
/// assert_eq!(e.kind(), TransportErrorKind::BodyTooLarge);
/// assert_eq!(e.to_string(), "body larger than the 16 MiB limit");
/// let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// let e = TransportError::new(TransportErrorKind::Refused).with_source(io);
/// assert!(std::error::Error::source(&e).is_some());
/// assert_eq!(e.to_string(), "connection refused");
/// ```
#[derive(Debug)]
pub struct TransportError {
    kind: TransportErrorKind,
    detail: Detail,
    source: Option<BoxError>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Detail {
    None,
    BodyLimit(u64),
    HeadLimit(u64),
    RedirectLimit(u32),
    RedirectLoop,
    Stack,
}

impl TransportError {
    /// An error of `kind` with no more to say.
    #[must_use]
    pub fn new(kind: TransportErrorKind) -> TransportError {
        TransportError {
            kind,
            detail: Detail::None,
            source: None,
        }
    }

    /// A body larger than `limit` bytes (permanent: not retried).
    ///
    /// ```
    /// let e = polite_client::TransportError::body_too_large(1000);
    /// assert_eq!(e.to_string(), "body larger than the 1000-byte limit");
    /// assert_eq!(e.limit(), Some(1000));
    /// ```
    #[must_use]
    pub fn body_too_large(limit: u64) -> TransportError {
        TransportError {
            detail: Detail::BodyLimit(limit),
            ..TransportError::new(TransportErrorKind::BodyTooLarge)
        }
    }

    /// An answer whose head (status line and headers) is larger than
    /// `limit` bytes, the transport's limit (permanent: not retried, as a
    /// body over its limit; the same request gets the same head again).
    ///
    /// ```
    /// use polite_core::TransportErrorKind;
    /// let e = polite_client::TransportError::head_too_large(64 << 10);
    /// assert_eq!(e.kind(), TransportErrorKind::HeadTooLarge);
    /// assert_eq!(e.to_string(), "answer head (status line and headers) larger than the 64 KiB limit");
    /// assert_eq!(e.limit(), Some(64 << 10));
    /// ```
    #[must_use]
    pub fn head_too_large(limit: u64) -> TransportError {
        TransportError {
            detail: Detail::HeadLimit(limit),
            ..TransportError::new(TransportErrorKind::HeadTooLarge)
        }
    }

    /// More than `max` redirects in one attempt (permanent).
    ///
    /// ```
    /// let e = polite_client::TransportError::too_many_redirects(10);
    /// assert_eq!(e.to_string(), "too many redirects (more than 10)");
    /// ```
    #[must_use]
    pub fn too_many_redirects(max: u32) -> TransportError {
        TransportError {
            detail: Detail::RedirectLimit(max),
            ..TransportError::new(TransportErrorKind::TooManyRedirects)
        }
    }

    /// A redirect back to a URL already visited in the same attempt
    /// (permanent: it would loop until the limit).
    ///
    /// ```
    /// let e = polite_client::TransportError::redirect_loop();
    /// assert_eq!(e.to_string(), "too many redirects (a redirect loop)");
    /// ```
    #[must_use]
    pub fn redirect_loop() -> TransportError {
        TransportError {
            detail: Detail::RedirectLoop,
            ..TransportError::new(TransportErrorKind::TooManyRedirects)
        }
    }

    /// The error of a middleware or layer below polite — not of HTTP, not
    /// of the request — kept whole as the [`source`](std::error::Error::source)
    /// (its own `source()` chain with it): an auth middleware whose token
    /// refresh failed, say. Its kind is the permanent
    /// [`InvalidRequest`](TransportErrorKind::InvalidRequest) (the stack
    /// would not send the request; sending it again is not polite's to
    /// decide, as `reqwest-retry` does not retry one either), but it says
    /// what it is: [`is_from_stack`](Self::is_from_stack), and its
    /// `Display`.
    ///
    /// ```
    /// use std::error::Error as _;
    /// let vault = std::io::Error::other("token refresh failed: vault sealed");
    /// let e = polite_client::TransportError::from_stack(vault);
    /// assert!(e.is_from_stack());
    /// assert_eq!(e.to_string(), "error of the middleware below polite");
    /// let cause = e.source().unwrap();
    /// assert_eq!(cause.to_string(), "token refresh failed: vault sealed");
    /// assert!(cause.downcast_ref::<std::io::Error>().is_some());
    /// ```
    #[must_use]
    pub fn from_stack(source: impl Into<BoxError>) -> TransportError {
        TransportError {
            detail: Detail::Stack,
            ..TransportError::new(TransportErrorKind::InvalidRequest)
        }
        .with_source(source)
    }

    /// Whether this is the error of a middleware or layer below polite
    /// ([`from_stack`](Self::from_stack)), its own error the `source()`.
    ///
    /// ```
    /// use polite_core::TransportErrorKind;
    /// let e = polite_client::TransportError::new(TransportErrorKind::InvalidRequest);
    /// assert!(!e.is_from_stack());
    /// ```
    #[must_use]
    pub fn is_from_stack(&self) -> bool {
        self.detail == Detail::Stack
    }

    /// Keeps the transport's own error as the [`source`](std::error::Error::source).
    #[must_use]
    pub fn with_source(mut self, source: impl Into<BoxError>) -> TransportError {
        self.source = Some(source.into());
        self
    }

    /// The kind the machines decide by.
    #[must_use]
    pub fn kind(&self) -> TransportErrorKind {
        self.kind
    }

    /// For a body over the limit ([`BodyTooLarge`](TransportErrorKind::BodyTooLarge))
    /// or an answer head over it ([`HeadTooLarge`](TransportErrorKind::HeadTooLarge),
    /// when the transport knows its limit in bytes): the limit, in bytes.
    ///
    /// ```
    /// use polite_client::TransportError;
    /// assert_eq!(TransportError::body_too_large(1000).limit(), Some(1000));
    /// assert_eq!(TransportError::head_too_large(4096).limit(), Some(4096));
    /// assert_eq!(TransportError::too_many_redirects(10).limit(), None);
    /// ```
    #[must_use]
    pub fn limit(&self) -> Option<u64> {
        match self.detail {
            Detail::BodyLimit(n) | Detail::HeadLimit(n) => Some(n),
            _ => None,
        }
    }
}

/// The kind an I/O error is retried as, or `None` when its kind does not
/// tell (the caller picks a default): refused, reset (also aborted, broken
/// pipe, unexpected end, not connected) and timed out. For transports that
/// find an `std::io::Error` in their client's error chain.
///
/// ```
/// use polite_core::TransportErrorKind;
/// use std::io::ErrorKind as K;
/// assert_eq!(polite_client::io_error_kind(&K::ConnectionRefused.into()), Some(TransportErrorKind::Refused));
/// assert_eq!(polite_client::io_error_kind(&K::BrokenPipe.into()), Some(TransportErrorKind::Reset));
/// assert_eq!(polite_client::io_error_kind(&K::TimedOut.into()), Some(TransportErrorKind::Timeout));
/// assert_eq!(polite_client::io_error_kind(&K::PermissionDenied.into()), None);
/// ```
#[must_use]
pub fn io_error_kind(e: &std::io::Error) -> Option<TransportErrorKind> {
    use std::io::ErrorKind as K;
    Some(match e.kind() {
        K::ConnectionRefused => TransportErrorKind::Refused,
        K::ConnectionReset
        | K::ConnectionAborted
        | K::BrokenPipe
        | K::UnexpectedEof
        | K::NotConnected => TransportErrorKind::Reset,
        K::TimedOut => TransportErrorKind::Timeout,
        _ => return None,
    })
}

impl From<TransportErrorKind> for TransportError {
    fn from(kind: TransportErrorKind) -> Self {
        TransportError::new(kind)
    }
}

/// `16 MiB`, `64 KiB`, `1000-byte`: a limit as people write it.
fn bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    const GIB: u64 = 1024 * MIB;
    match n {
        n if n >= GIB && n % GIB == 0 => format!("{} GiB", n / GIB),
        n if n >= MIB && n % MIB == 0 => format!("{} MiB", n / MIB),
        n if n >= KIB && n % KIB == 0 => format!("{} KiB", n / KIB),
        n => format!("{n}-byte"),
    }
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.detail {
            Detail::BodyLimit(n) => write!(f, "body larger than the {} limit", bytes(n)),
            Detail::HeadLimit(n) => write!(
                f,
                "answer head (status line and headers) larger than the {} limit",
                bytes(n)
            ),
            Detail::RedirectLimit(n) => write!(f, "too many redirects (more than {n})"),
            Detail::RedirectLoop => f.write_str("too many redirects (a redirect loop)"),
            Detail::Stack => f.write_str("error of the middleware below polite"),
            Detail::None => write!(f, "{}", self.kind),
        }
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Why a `send`, `wait` or batch item did not succeed.
///
/// ```
/// use polite_client::Error;
/// use polite_core::Outcome;
/// let e = Error::Outcome { outcome: Outcome::Cancelled, response: None };
/// assert_eq!(e.to_string(), "cancelled");
/// assert_eq!(e.outcome(), Some(Outcome::Cancelled));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The machine ended without success: the outcome says why, and
    /// `response` is the last HTTP answer, if any (a 404, the last 503...).
    #[error("{outcome}")]
    Outcome {
        /// How the machine ended.
        outcome: Outcome,
        /// The last answer received, if any.
        response: Option<Box<http::Response<Bytes>>>,
    },
    /// The machine ended on a transport error (a permanent one, or the
    /// last of a spent budget, or one on a request that may not be
    /// re-sent): the error itself (its `source()` is the transport's own
    /// error), how many attempts were sent and how long the call took.
    ///
    /// ```
    /// use polite_client::{Error, TransportError};
    /// use polite_core::{Outcome, TransportErrorKind};
    /// use std::time::Duration;
    /// let e = Error::Transport {
    ///     outcome: Outcome::Permanent { cause: TransportErrorKind::BodyTooLarge },
    ///     error: TransportError::body_too_large(16 << 20),
    ///     attempts: 1,
    ///     elapsed: Duration::from_millis(250),
    /// };
    /// assert_eq!(e.to_string(), "body larger than the 16 MiB limit, not retried (1 attempt in 250.0ms)");
    /// assert!(std::error::Error::source(&e).is_some());
    /// ```
    #[error("{}", transport_summary(.error, .outcome, *.attempts, *.elapsed))]
    Transport {
        /// How the machine ended.
        outcome: Outcome,
        /// The last transport error.
        #[source]
        error: TransportError,
        /// Sends made for this request (retries included).
        attempts: u32,
        /// Time from the start of the call to its end.
        elapsed: Duration,
    },
    /// The call ran into a limit: its timeout (`TimedOut`: the deadline
    /// passed, or the next attempt could go only after it), or a server
    /// that asks for a longer wait than polite takes by itself, or a spent
    /// 429 budget (`RateLimited`). The [`LimitError`] says which limit,
    /// how far off the next attempt was, the last answer or transport
    /// error (its `source()`), the attempts and the time taken.
    ///
    /// Calls that end so return this variant; [`Error::Outcome`] with the
    /// same outcome is what a batch item never started gets.
    #[error(transparent)]
    Limit(Box<LimitError>),
    /// The policy makes no sense.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The client configuration makes no sense.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}

fn transport_summary(
    error: &TransportError,
    outcome: &Outcome,
    attempts: u32,
    elapsed: Duration,
) -> String {
    let what = match outcome {
        Outcome::Permanent { .. } => format!("{error}, not retried"),
        Outcome::RetriesExhausted { class, .. } => format!("{error}: {class} retries exhausted"),
        Outcome::NotReplayable { .. } => format!("{error}: not replayable, not re-sent"),
        Outcome::RetryBudgetExhausted { .. } => {
            format!("{error}: retry budget exhausted, not retried")
        }
        other => format!("{error}: {other}"),
    };
    let s = if attempts == 1 { "" } else { "s" };
    format!("{what} ({attempts} attempt{s} in {elapsed:.1?})")
}

impl Error {
    /// The outcome, for `Error::Outcome`, `Error::Transport` and
    /// `Error::Limit`.
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        match self {
            Error::Outcome { outcome, .. } | Error::Transport { outcome, .. } => Some(*outcome),
            Error::Limit(limit) => Some(limit.outcome),
            _ => None,
        }
    }

    /// The last answer received, if any.
    #[must_use]
    pub fn response(&self) -> Option<&http::Response<Bytes>> {
        match self {
            Error::Outcome { response, .. } => response.as_deref(),
            Error::Limit(limit) => limit.response(),
            _ => None,
        }
    }

    /// The last answer and the outcome, when the call ended on the
    /// server's own word: a final status by policy (`NotRetryable`, e.g. a
    /// 404), a spent budget (`RetriesExhausted`, `RetryBudgetExhausted`,
    /// e.g. the last 503), a rate limit it may not wait out (`RateLimited`,
    /// the 429 with its `Retry-After`), or a failure on a request that may
    /// not be re-sent (`NotReplayable`). Otherwise (timed out, starved by
    /// the pace, cancelled, stale, no answer at all) the error itself.
    ///
    /// This is what a plain HTTP client call returns as `Ok` (any status is
    /// an answer), and what polite's reqwest-middleware and tower
    /// integrations hand back as `Ok`.
    ///
    /// # Errors
    ///
    /// `self`, when the call did not end on an answer of the server.
    ///
    /// ```
    /// use polite_client::Error;
    /// use polite_core::Outcome;
    /// let mut gone = http::Response::new(bytes::Bytes::new());
    /// *gone.status_mut() = http::StatusCode::NOT_FOUND;
    /// let e = Error::Outcome { outcome: Outcome::NotRetryable { status: 404 }, response: Some(Box::new(gone)) };
    /// let (answer, outcome) = e.into_answer().unwrap();
    /// assert_eq!((answer.status().as_u16(), outcome), (404, Outcome::NotRetryable { status: 404 }));
    /// let late = Error::Outcome { outcome: Outcome::TimedOut { needed: None }, response: None };
    /// assert!(late.into_answer().is_err());
    /// ```
    #[allow(clippy::result_large_err)] // the error is handed back as it came
    pub fn into_answer(self) -> Result<(http::Response<Bytes>, Outcome), Error> {
        match self {
            Error::Outcome {
                outcome:
                    outcome @ (Outcome::NotRetryable { .. }
                    | Outcome::RetriesExhausted { .. }
                    | Outcome::RetryBudgetExhausted { .. }
                    | Outcome::RateLimited { .. }
                    | Outcome::NotReplayable { .. }),
                response: Some(response),
            } => Ok((*response, outcome)),
            Error::Limit(limit)
                if matches!(limit.outcome, Outcome::RateLimited { .. })
                    && limit.response.is_some() =>
            {
                let LimitError {
                    outcome, response, ..
                } = *limit;
                match response {
                    Some(response) => Ok((response, outcome)),
                    None => unreachable!("checked above"),
                }
            }
            other => Err(other),
        }
    }

    /// The transport error the call ended on: for `Error::Transport`, and
    /// for `Error::Limit` when the last attempt got no answer (a call that
    /// timed out retrying a refused connection).
    #[must_use]
    pub fn transport_error(&self) -> Option<&TransportError> {
        match self {
            Error::Transport { error, .. } => Some(error),
            Error::Limit(limit) => limit.transport_error(),
            _ => None,
        }
    }
}

/// A call that ran into a limit ([`Error::Limit`]): the deadline
/// ([`Outcome::TimedOut`]) or a server's wait longer than polite takes by
/// itself, or a spent 429 budget ([`Outcome::RateLimited`]), with what
/// came before: the last answer, or the last attempt's transport error (as
/// [`source`](std::error::Error::source)), the attempts and the time taken.
///
/// Its `Display` is one line: what ended the call, the limit and how far
/// off the next attempt was, then the last answer or error, the attempts
/// and the time, as `RetriesExhausted` says them. It never quotes a header
/// but the parsed `Retry-After` delay, nor the URL.
#[derive(Debug)]
pub struct LimitError {
    outcome: Outcome,
    response: Option<http::Response<Bytes>>,
    error: Option<TransportError>,
    attempts: u32,
    elapsed: Duration,
    timeout: Option<Duration>,
    wait_cap: Option<Duration>,
    next_in: Option<Duration>,
}

impl LimitError {
    /// How the call ended: `TimedOut` or `RateLimited`.
    #[must_use]
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// The last answer received, if any.
    #[must_use]
    pub fn response(&self) -> Option<&http::Response<Bytes>> {
        self.response.as_ref()
    }

    /// The last attempt's transport error, when it got no answer.
    #[must_use]
    pub fn transport_error(&self) -> Option<&TransportError> {
        self.error.as_ref()
    }

    /// Sends made for this request (retries included).
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Time from the start of the call to its end.
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// The call's timeout (its deadline is its start plus this).
    #[must_use]
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// How long after the call's end the next attempt could have gone:
    /// the backoff or the server's `Retry-After` delay that fell past the
    /// deadline (`TimedOut`), or the wait the server asked for
    /// (`RateLimited`). `None` when nothing named a time.
    #[must_use]
    pub fn next_in(&self) -> Option<Duration> {
        self.next_in
    }

    /// The longest server wait polite takes by itself
    /// ([`RetryAfterLimits::auto_wait_cap`](polite_core::policy::RetryAfterLimits::auto_wait_cap)).
    #[must_use]
    pub fn wait_cap(&self) -> Option<Duration> {
        self.wait_cap
    }

    /// Whether the last answer carries a `Retry-After` header (only its
    /// presence is said, never its value).
    fn retry_after(&self) -> bool {
        self.response
            .as_ref()
            .is_some_and(|r| r.headers().contains_key(http::header::RETRY_AFTER))
    }
}

impl std::fmt::Display for LimitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = if self.retry_after() {
            " (the server's Retry-After)"
        } else {
            ""
        };
        let status = self.response.as_ref().map(|r| r.status().as_u16());
        match (self.outcome, self.next_in) {
            (Outcome::TimedOut { .. }, Some(next)) => {
                write!(
                    f,
                    "timed out: the next attempt could go only in {next:.1?}{per}"
                )?;
                match self.timeout {
                    Some(t) => write!(f, ", after the {t:.1?} timeout")?,
                    None => f.write_str(", after the deadline")?,
                }
            }
            (Outcome::TimedOut { .. }, None) => match self.timeout {
                Some(t) => write!(f, "timed out: the {t:.1?} timeout passed")?,
                None => f.write_str("timed out: the deadline passed")?,
            },
            (Outcome::RateLimited { .. }, Some(next))
                if self.wait_cap.is_none_or(|cap| next > cap) =>
            {
                // A 503 that asks for a day is not "rate limited".
                if status == Some(429) {
                    f.write_str("rate limited: ")?;
                } else {
                    f.write_str("not retried: ")?;
                }
                write!(f, "the server asks to wait {next:.1?}{per}")?;
                match self.wait_cap {
                    Some(cap) => write!(f, ", longer than polite waits by itself ({cap:.1?})")?,
                    None => f.write_str(", longer than polite waits by itself")?,
                }
            }
            (Outcome::RateLimited { .. }, next) => {
                f.write_str("rate limited retries exhausted")?;
                if let Some(next) = next.filter(|n| !n.is_zero()) {
                    write!(f, ", the server asks to wait {next:.1?} more{per}")?;
                }
            }
            (other, _) => write!(f, "{other}")?,
        }
        f.write_str(" (")?;
        match (&self.error, status) {
            (Some(e), _) => write!(f, "last: {e}; ")?,
            (None, Some(s)) => write!(f, "last: HTTP {s}; ")?,
            (None, None) if self.attempts > 0 => f.write_str("no answer; ")?,
            (None, None) => {}
        }
        let s = if self.attempts == 1 { "" } else { "s" };
        write!(f, "{} attempt{s} in {:.1?})", self.attempts, self.elapsed)
    }
}

impl std::error::Error for LimitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// What a call knows of its limits when it ends, for [`LimitError`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Limits {
    /// The call's timeout.
    pub(crate) timeout: Option<Duration>,
    /// The longest server wait polite takes by itself.
    pub(crate) wait_cap: Option<Duration>,
    /// How long after the call's end the next attempt could have gone.
    pub(crate) next_in: Option<Duration>,
}

impl Limits {
    /// The limits of a call that ended at `end` on `outcome`.
    pub(crate) fn at(
        outcome: &Outcome,
        end: std::time::Instant,
        timeout: Duration,
        wait_cap: Duration,
    ) -> Limits {
        let next = match *outcome {
            Outcome::TimedOut { needed } => needed,
            Outcome::RateLimited { retry_at } => retry_at,
            _ => None,
        };
        Limits {
            timeout: Some(timeout),
            wait_cap: Some(wait_cap),
            next_in: next.map(|at| at.saturating_duration_since(end)),
        }
    }
}

impl LimitError {
    pub(crate) fn new(
        outcome: Outcome,
        response: Option<http::Response<Bytes>>,
        error: Option<TransportError>,
        attempts: u32,
        elapsed: Duration,
        limits: Limits,
    ) -> LimitError {
        LimitError {
            outcome,
            response,
            error,
            attempts,
            elapsed,
            timeout: limits.timeout,
            wait_cap: limits.wait_cap,
            next_in: limits.next_in,
        }
    }
}
