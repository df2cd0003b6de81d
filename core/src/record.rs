//! Attempt records: one per attempt (answered, or dropped in flight when
//! the call ends: `Reply::Transport(Aborted)`), for logs and traces.
//!
//! A record never holds header values, URLs, query strings or bodies
//! (credentials live there): only ids, statuses, error kinds, durations and
//! reasons. Adapters forward records to `tracing`.

use std::time::{Duration, Instant};

use crate::input::{Reply, RetryClass, SendId};
use crate::outcome::Outcome;
use crate::request::RequestId;
use crate::retry_after::RetryAfterError;

/// Where a planned delay came from.
///
/// ```
/// use polite_core::record::DelaySource;
/// assert_eq!(DelaySource::RetryAfter.to_string(), "retry-after");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DelaySource {
    /// The local backoff (larger than any server delay).
    Backoff,
    /// The server's `Retry-After`, taken as it was.
    RetryAfter,
    /// The server's `Retry-After`, raised to the policy minimum.
    Clamp,
    /// A long-poll or job-poll schedule (`PollMachine`).
    Schedule,
}

impl std::fmt::Display for DelaySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DelaySource::Backoff => "backoff",
            DelaySource::RetryAfter => "retry-after",
            DelaySource::Clamp => "retry-after-clamped",
            DelaySource::Schedule => "schedule",
        })
    }
}

/// The wait planned before the next send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedDelay {
    /// How long.
    pub delay: Duration,
    /// Why that long.
    pub source: DelaySource,
    /// The instant of the next send.
    pub send_at: Instant,
}

/// What the machine made of a `Retry-After` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RetryAfterNote {
    /// No header (or not looked at: a success or a final answer).
    #[default]
    Absent,
    /// A valid header asking for this delay (before clamping).
    Valid(Duration),
    /// An invalid header, ignored in favour of the backoff.
    Rejected(RetryAfterError),
}

/// One attempt: what came back and what the machine decided.
///
/// ```
/// use polite_core::{Action, Event, Method, RequestId, RequestInfo, Response, RetryMachine, RetryPolicy};
/// use polite_core::SplitMix64;
/// use std::time::{Duration, Instant, UNIX_EPOCH};
/// let t0 = Instant::now();
/// let mut m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(9), Method::Get),
///                               SplitMix64::new(7), t0, Duration::from_secs(30)).unwrap();
/// let Action::Send(plan) = m.poll_action() else { panic!() };
/// m.handle(t0, Event::Response(Response::new(plan.id, 503, UNIX_EPOCH).retry_after(b"3")));
/// let rec = m.take_record().unwrap();
/// assert_eq!(rec.request, RequestId(9));
/// assert_eq!(rec.next.unwrap().delay, Duration::from_secs(3));
/// assert_eq!(rec.outcome, None); // not the last attempt
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptRecord {
    /// The logical request.
    pub request: RequestId,
    /// Which send.
    pub id: SendId,
    /// What came back.
    pub reply: Reply,
    /// The retry class of the reply, if it is retried by class.
    pub class: Option<RetryClass>,
    /// What the machine made of `Retry-After`.
    pub retry_after: RetryAfterNote,
    /// The delay before the next send, when there is one.
    pub next: Option<PlannedDelay>,
    /// The final reason, when this attempt ended the request.
    pub outcome: Option<Outcome>,
}

impl AttemptRecord {
    /// A placeholder for a machine that has no record yet (never handed
    /// out: the machine keeps a flag).
    pub(crate) const EMPTY: AttemptRecord = AttemptRecord {
        request: RequestId(0),
        id: SendId {
            item: 0,
            attempt: 0,
        },
        reply: Reply::Status(0),
        class: None,
        retry_after: RetryAfterNote::Absent,
        next: None,
        outcome: None,
    };
}
