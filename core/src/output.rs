//! What the machines answer: an [`Action`] (send this [`SendPlan`], sleep
//! until an instant, or stop with an [`Outcome`]), and the one-time
//! [`Notice`]s a machine has for the user.

use std::time::Instant;

use crate::input::SendId;
use crate::outcome::Outcome;
use crate::request::RequestId;

/// Everything an adapter needs to perform one send.
///
/// ```
/// use polite_core::{Method, RequestId, RequestInfo, RetryMachine, RetryPolicy, Action};
/// use polite_core::SplitMix64;
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
    /// Echo this in the answer's [`Response::id`](crate::Response::id).
    pub id: SendId,
    /// The logical request.
    pub request: RequestId,
    /// The attempt ends at this instant (deadline + transport cushion) if
    /// it has not ended before, reported as
    /// [`TransportErrorKind::Aborted`](crate::TransportErrorKind::Aborted):
    /// the [drive loop](crate::drive::drive) does this itself; code that
    /// drives a machine by hand must abort the attempt then.
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

/// Something the adapter should tell the user once (print, log).
///
/// ```
/// use polite_core::Notice;
/// assert_eq!(Notice::LongPollUnsupported.to_string(),
///            "server does not support long-poll; switching to backoff");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Notice {
    /// The server rejected the wait parameter; this wait now polls on the
    /// backoff schedule, for good.
    LongPollUnsupported,
    /// The fleet's shared pace (SPEC §4.3, e.g. on Redis) does not answer:
    /// this process paces alone, at its share of the quota, until it does.
    FleetUnavailable,
    /// The fleet's shared pace answers again: the quota is shared again.
    FleetRestored,
    /// The fleet's shared pace answers, but refuses this process (on
    /// Redis: a wrong password or user, no permission, a database number
    /// the server does not have): a setting to fix, not an outage. This
    /// process paces alone, at its share of the quota, meanwhile.
    FleetRefused,
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Notice::LongPollUnsupported => {
                "server does not support long-poll; switching to backoff"
            }
            Notice::FleetUnavailable => {
                "the fleet's shared pace does not answer; pacing locally at this process's share of the quota"
            }
            Notice::FleetRestored => "the fleet's shared pace answers again; sharing the quota",
            Notice::FleetRefused => {
                "the fleet's shared pace refuses this process (authentication, permission or database: check its URL and credentials); pacing locally at this process's share of the quota"
            }
        })
    }
}
