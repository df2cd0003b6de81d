//! [`PollMachine`]: one wait for a remote job (a run, a build, an export),
//! long polling first, with a permanent fallback to a backoff schedule, all
//! inside one hard deadline.
//!
//! Failed polls (429, 5xx, transport errors) go through the same retry rules
//! as [`RetryMachine`](crate::RetryMachine): [`crate::decide::judge`].
//!
//! Two files: [`policy`] holds what a caller configures
//! ([`TerminalStates`], [`PollPolicy`]); [`machine`] holds the machine
//! ([`PollMachine`] and its [`PollMode`]).

mod machine;
mod policy;

pub use machine::{PollMachine, PollMode};
pub use policy::{PollPolicy, TerminalStates};

use std::time::Duration;

/// The shortest budget a long poll needs: the wait parameter counts whole
/// seconds, and `waitSeconds=0` would be a busy loop.
pub(crate) const ONE_SECOND: Duration = Duration::from_secs(1);
