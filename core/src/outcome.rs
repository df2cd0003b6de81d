//! How a machine ends: exactly one [`Outcome`] per logical request or wait.

use std::time::{Duration, Instant};

use crate::input::{Reply, RetryClass, TransportErrorKind};

/// Which limit of a [`Pace`](crate::Pace) refused a send: the facts that
/// [`Outcome::Starved`] carries so that a caller can say which setting to
/// change (SPEC §4.1: starving is not timing out).
///
/// ```
/// use polite_core::pace::PaceLimit;
/// use std::time::Duration;
/// let w = PaceLimit::Window { limit: 50, window: Duration::from_secs(60), learned: false };
/// assert_eq!(w.to_string(), "the rate limit of 50 per 60s");
/// let a = PaceLimit::Adaptive { interval: Duration::from_millis(1500) };
/// assert_eq!(a.to_string(), "the adaptive rate (one send every 1.5s, slowed by rate-limited answers)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PaceLimit {
    /// A sliding window was full: `limit` sends per `window`, configured,
    /// or learnt from the server's `RateLimit-Policy` (`learned`).
    Window {
        /// Sends per window.
        limit: u32,
        /// The window.
        window: Duration,
        /// Learnt from the server rather than configured.
        learned: bool,
    },
    /// The adaptive rate ([`AdaptiveRate`](crate::adaptive::AdaptiveRate)),
    /// slowed by rate-limited answers: one send per `interval`.
    Adaptive {
        /// The time between two sends at the current rate.
        interval: Duration,
    },
    /// A cool-down: a server's `Retry-After` or `RateLimit` pause, or the
    /// shared slow-down after a rate-limited answer without one.
    CoolDown,
    /// A pace that does not say why.
    #[default]
    Unknown,
}

impl std::fmt::Display for PaceLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PaceLimit::Window {
                limit,
                window,
                learned: false,
            } => write!(f, "the rate limit of {limit} per {}", Secs(*window)),
            PaceLimit::Window {
                limit,
                window,
                learned: true,
            } => write!(
                f,
                "the server's quota of {limit} per {} (from its RateLimit-Policy)",
                Secs(*window)
            ),
            PaceLimit::Adaptive { interval } => write!(
                f,
                "the adaptive rate (one send every {}, slowed by rate-limited answers)",
                Secs(*interval)
            ),
            PaceLimit::CoolDown => f.write_str("a cool-down the server asked for"),
            PaceLimit::Unknown => f.write_str("the pace"),
        }
    }
}

/// A duration as a person writes it: `60s`, `1.5s`, `500ms`.
struct Secs(Duration);

impl std::fmt::Display for Secs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.0;
        if d >= Duration::from_secs(1) {
            let s = d.as_secs_f64();
            if d.subsec_millis() == 0 {
                write!(f, "{}s", d.as_secs())
            } else {
                write!(f, "{}s", (s * 10.0).round() / 10.0)
            }
        } else {
            write!(f, "{}ms", d.as_millis())
        }
    }
}

/// The name of a job's terminal state, stored inline (at most
/// [`StateName::CAPACITY`] bytes) so that [`Outcome`] stays `Copy`.
///
/// ```
/// use polite_core::poll::StateName;
/// let s = StateName::new("passed").unwrap();
/// assert_eq!(s.as_str(), "passed");
/// assert!(StateName::new(&"x".repeat(StateName::CAPACITY + 1)).is_none());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateName {
    len: u8,
    bytes: [u8; StateName::CAPACITY],
}

impl StateName {
    /// The longest name that fits.
    pub const CAPACITY: usize = 31;

    /// Stores `name`, or `None` when it is longer than [`Self::CAPACITY`].
    #[must_use]
    pub fn new(name: &str) -> Option<StateName> {
        let len = name.len();
        if len > Self::CAPACITY {
            return None;
        }
        let mut bytes = [0; Self::CAPACITY];
        bytes[..len].copy_from_slice(name.as_bytes());
        Some(StateName {
            len: len as u8,
            bytes,
        })
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Built from a `&str` cut at its own length, so always valid UTF-8.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::fmt::Debug for StateName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for StateName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a machine ended. Every machine ends with exactly one outcome, and
/// once it has one, every later [`Action`](crate::Action) repeats it.
///
/// The adapter keeps the last response itself; the outcome says what to do
/// with it (hand it back for `Succeeded`, `NotRetryable`, and the exhausted or
/// non-replayable cases with a [`Reply::Status`]).
///
/// ```
/// use polite_core::{Outcome, RetryClass, Reply};
/// let o = Outcome::RetriesExhausted { class: RetryClass::ServerError, last: Reply::Status(503) };
/// assert!(!o.is_success());
/// assert_eq!(o.to_string(), "server error retries exhausted (last: HTTP 503)");
/// let b = Outcome::RetryBudgetExhausted { class: RetryClass::ServerError, last: Reply::Status(503) };
/// assert_eq!(b.to_string(), "retry budget exhausted, not retried (last: HTTP 503)");
/// assert_eq!(
///     Outcome::Stale.to_string(),
///     "stale session: the answer came after the session moved on, and was dropped"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// A final answer below 400.
    Succeeded {
        /// Its status.
        status: u16,
    },
    /// A job reached a terminal state (`PollMachine`).
    Terminal {
        /// The state.
        state: StateName,
    },
    /// A final answer by policy (404, 501, ...), handed back as it is.
    NotRetryable {
        /// Its status.
        status: u16,
    },
    /// The class's retry budget is spent.
    RetriesExhausted {
        /// The class whose budget ran out.
        class: RetryClass,
        /// The last failure.
        last: Reply,
    },
    /// A shared retry budget ([`RetryBudget`](crate::budget::RetryBudget), e.g. a
    /// [`RetryBucket`](crate::budget::RetryBucket)) refused the retry this failure
    /// would have earned: too many requests sharing it are failing. Only
    /// machines given a budget end this way.
    RetryBudgetExhausted {
        /// The class of the failure.
        class: RetryClass,
        /// The failure, handed back.
        last: Reply,
    },
    /// The 429 budget is spent, or the server asked for a longer wait than
    /// the automatic wait cap. The machine did not resend early.
    RateLimited {
        /// When the server said a request may be sent again, if it said so.
        retry_at: Option<Instant>,
    },
    /// A failure on a request that must not be re-sent (SPEC §2).
    NotReplayable {
        /// The failure, handed back.
        last: Reply,
    },
    /// A transport error that repeating the send cannot cure (a body over
    /// the limit, too many redirects, a redirect that would need an
    /// unreplayable re-send, a rejected certificate, an invalid request):
    /// not retried (SPEC §5). See [`TransportErrorKind::is_permanent`].
    Permanent {
        /// The cause.
        cause: TransportErrorKind,
    },
    /// The deadline was reached, or the next permitted send would have
    /// been at or after it.
    TimedOut {
        /// The instant the next send would have needed, when that is why.
        needed: Option<Instant>,
    },
    /// The pace could not grant a send before the deadline: the client's
    /// own limit, not the server, used up the budget. `until` is the
    /// earliest instant it could have sent, `by` the limit that refused
    /// (SPEC §4.1: starving is not timing out; a caller names the setting
    /// to change).
    Starved {
        /// When the pace would have granted the send (at or after the
        /// deadline).
        until: Instant,
        /// Which limit refused.
        by: PaceLimit,
    },
    /// The caller cancelled. Nothing promises that an in-flight request
    /// did not reach the server.
    Cancelled,
    /// The session generation changed; the answer was dropped undelivered.
    Stale,
    /// A batch ([`BatchMachine`](crate::BatchMachine)) in which every item
    /// ended on its own: none was cut short by the batch's deadline (that
    /// ends the batch `TimedOut`) or by a cancel (`Cancelled`). Each item's
    /// own outcome is in [`BatchMachine::outcomes`](crate::BatchMachine::outcomes).
    BatchDone {
        /// Items that ended `Succeeded`.
        succeeded: u32,
        /// Items that ended otherwise (`NotRetryable`, `RateLimited`, ...).
        failed: u32,
    },
}

impl Outcome {
    /// `Succeeded` or `Terminal`, or a `BatchDone` in which no item failed.
    #[must_use]
    pub const fn is_success(&self) -> bool {
        matches!(
            self,
            Outcome::Succeeded { .. }
                | Outcome::Terminal { .. }
                | Outcome::BatchDone { failed: 0, .. }
        )
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Succeeded { status } => write!(f, "succeeded (HTTP {status})"),
            Outcome::Terminal { state } => write!(f, "job ended: {state}"),
            Outcome::NotRetryable { status } => write!(f, "not retryable (HTTP {status})"),
            Outcome::RetriesExhausted { class, last } => {
                write!(f, "{class} retries exhausted (last: {last})")
            }
            Outcome::RetryBudgetExhausted { last, .. } => {
                write!(f, "retry budget exhausted, not retried (last: {last})")
            }
            Outcome::RateLimited { .. } => f.write_str("rate limited"),
            Outcome::NotReplayable { last } => {
                write!(f, "not replayable, not re-sent (last: {last})")
            }
            Outcome::Permanent { cause } => write!(f, "{cause}, not retried"),
            Outcome::TimedOut { .. } => f.write_str("timed out"),
            Outcome::Starved { by, .. } => write!(
                f,
                "starved by the client's own pace: {by} allows no send before the deadline"
            ),
            Outcome::Cancelled => f.write_str("cancelled"),
            Outcome::Stale => f.write_str(
                "stale session: the answer came after the session moved on, and was dropped",
            ),
            Outcome::BatchDone { succeeded, failed } => {
                write!(f, "batch done: {succeeded} succeeded, {failed} failed")
            }
        }
    }
}
