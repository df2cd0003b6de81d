//! Waiting for a remote job with [`PollMachine`](crate::PollMachine): the
//! words of that wait. What a job-status answer says ([`JobReport`], read
//! from the body by the adapter's classifier), the [`TerminalStates`] that
//! end the wait, the [`StateName`] it ended in
//! ([`Outcome::Terminal`](crate::Outcome::Terminal)), and how the machine
//! polls right now ([`PollMode`]).
//!
//! The machine and its policy are at the crate root:
//! [`PollMachine`](crate::PollMachine), one wait for a remote job (a run, a
//! build, an export), long polling first, with a permanent fallback to a
//! backoff schedule, all inside one hard deadline; and
//! [`PollPolicy`](crate::PollPolicy). Failed polls (429, 5xx, transport
//! errors) go through the same retry rules as
//! [`RetryMachine`](crate::RetryMachine).

// The files: policy.rs holds what a caller configures (TerminalStates,
// PollPolicy); machine.rs the machine, and machine/answer.rs how it takes
// an answer (what it means, when the next poll goes). The retry rules for
// failed polls are the kernel's (crate::decide::judge).

pub(crate) mod machine;
pub(crate) mod policy;

pub use crate::input::JobReport;
pub use crate::outcome::StateName;
pub use machine::PollMode;
pub use policy::TerminalStates;

use std::time::Duration;

/// The shortest budget a long poll needs: the wait parameter counts whole
/// seconds, and `waitSeconds=0` would be a busy loop.
pub(crate) const ONE_SECOND: Duration = Duration::from_secs(1);
