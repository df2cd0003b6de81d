//! What goes into a machine ([`Event`]) and what comes out ([`Action`]).

use std::time::{Instant, SystemTime};

use crate::outcome::Outcome;
use crate::request::RequestId;

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
/// ```
/// use polite_core::TransportErrorKind;
/// assert_eq!(TransportErrorKind::Refused.to_string(), "connection refused");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// TLS handshake or certificate failure.
    Tls,
    /// Anything else.
    Other,
}

impl std::fmt::Display for TransportErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransportErrorKind::Refused => "connection refused",
            TransportErrorKind::Reset => "connection reset",
            TransportErrorKind::Dns => "DNS failure",
            TransportErrorKind::Timeout => "timeout",
            TransportErrorKind::Aborted => "aborted at abort_at",
            TransportErrorKind::Tls => "TLS failure",
            TransportErrorKind::Other => "other transport error",
        })
    }
}

/// What a job-status answer says, as classified by the adapter or caller
/// (the machines never parse bodies). Used by `PollMachine`; other machines
/// ignore it.
///
/// ```
/// use polite_core::JobReport;
/// let r = JobReport::State("running");
/// assert_ne!(r, JobReport::LongPollUnsupported);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
/// ```
/// use polite_core::{Response, SendId};
/// use std::time::UNIX_EPOCH;
/// let r = Response::new(SendId::default(), 429, UNIX_EPOCH)
///     .retry_after(b"2")
///     .date(b"Sun, 06 Nov 1994 08:49:37 GMT");
/// assert_eq!(r.status, 429);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response<'a> {
    /// The send this answers ([`SendPlan::id`]).
    pub id: SendId,
    /// The HTTP status.
    pub status: u16,
    /// The raw `Retry-After` value, if present.
    pub retry_after: Option<&'a [u8]>,
    /// The raw `Date` value, if present.
    pub date: Option<&'a [u8]>,
    /// The wall-clock time when the answer arrived; used only to turn an
    /// HTTP-date into a delay when `Date` is missing or invalid.
    pub wall_clock: SystemTime,
    /// The caller's session generation *now*, if it tracks one.
    pub generation: Option<u64>,
    /// For job polls: what the answer says about the job.
    pub job: Option<JobReport<'a>>,
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
        }
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

/// Something that happened, observed at the `now` passed with it.
///
/// ```
/// use polite_core::{Event, SendId, TransportErrorKind};
/// let e = Event::TransportError(SendId::default(), TransportErrorKind::Reset);
/// assert!(matches!(e, Event::TransportError(..)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// Everything an adapter needs to perform one send.
///
/// ```
/// use polite_core::{Method, RequestId, RequestInfo, RetryMachine, RetryPolicy, Action};
/// use polite_core::testing::SplitMix64;
/// use std::time::{Duration, Instant};
/// let now = Instant::now();
/// let mut m = RetryMachine::new(
///     RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
///     SplitMix64::new(1), now, Duration::from_secs(10)).unwrap();
/// let Action::Send(plan) = m.poll_action() else { panic!() };
/// assert_eq!(plan.abort_at, now + Duration::from_secs(12)); // deadline + 2 s cushion
/// assert_eq!(plan.long_poll, None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendPlan {
    /// Echo this in the answer's [`Response::id`].
    pub id: SendId,
    /// The logical request.
    pub request: RequestId,
    /// The adapter must abort the attempt at this instant (deadline +
    /// transport cushion) and report
    /// [`TransportErrorKind::Aborted`] if it still has the machine's ear.
    pub abort_at: Instant,
    /// For long polls: ask the server to hold the request this many seconds.
    pub long_poll: Option<u32>,
}

/// What the machine wants done next. Exhaustive on purpose: an adapter
/// handles every case.
///
/// * `Send`: perform this send now (then ask again: several sends may be
///   wanted at once by a batch).
/// * `SleepUntil(t)`: nothing to do until `t`, an answer to an in-flight send,
///   or a cancel; then feed the event back. `t` is never after the deadline.
/// * `Stop(outcome)`: the machine has ended; every later call repeats it.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send now.
    Send(SendPlan),
    /// Wait until this instant (or an answer, or a cancel), then `Tick`.
    SleepUntil(Instant),
    /// Ended; sticky.
    Stop(Outcome),
}
