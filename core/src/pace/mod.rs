//! Pacing by time, and the two names a pace needs besides the main ones:
//! [`Unpaced`], a pace that grants every send at once, and [`PaceLimit`],
//! which limit of a pace refused (as
//! [`Outcome::Starved`](crate::Outcome::Starved) reports it).
//!
//! The main pieces are at the crate root:
//! [`RateThrottle`](crate::RateThrottle) (a sliding-window log with a
//! shared cool-down), the [`Pace`] interface that lets several
//! machines share one throttle, and [`Paced`](crate::Paced), which passes
//! every send of a single machine through a pace (SPEC §2: retries are
//! requests too).
//!
//! Concurrency (how many requests are in flight at once) is a different
//! limit; [`BatchMachine`](crate::BatchMachine) keeps it for its items.
//! Both are needed: two requests in flight can still send eight requests
//! in a few dozen milliseconds when the server answers fast.
//!
//! **The throttle is in-process.** It paces the machines that share it
//! (through `&mut`, `Arc<Mutex<_>>` or `Rc<RefCell<_>>`) and nothing else:
//! separate processes, or separate throttles in one process, do not
//! coordinate, and each may use the server's whole quota.
//!
//! **Server-informed pacing.** Answers may say what the quota is
//! (`RateLimit-Policy`) and how much of it is left (`RateLimit`,
//! `X-RateLimit-*`); [`Paced`](crate::Paced) and
//! [`BatchMachine`](crate::BatchMachine) read those headers
//! ([`crate::ratelimit`]) and hand them to the pace with
//! [`Pace::observe`]. A
//! [`RateThrottle`](crate::RateThrottle) pauses every machine sharing it
//! when the server says no quota is left until some time, and a
//! [`RateThrottle::learning`](crate::RateThrottle::learning) throttle sizes
//! itself to the advertised quota: a client that was never told the quota
//! stops earning 429s after the first answer that carries it.

// The files: interface.rs holds the Pace trait, Unpaced and the impls for
// shared handles; throttle.rs the RateThrottle (throttle/quota.rs what the
// server says about its quota); paced.rs Paced; feedback.rs what a pace
// hears back from each answer, shared by Paced and the batch machine.

mod feedback;
pub(crate) mod interface;
pub(crate) mod paced;
pub(crate) mod set;
pub(crate) mod throttle;

pub use crate::outcome::PaceLimit;
pub use interface::Unpaced;
pub use set::{PaceSet, SlotPace};

pub(crate) use feedback::{after_answer, cool_down_after, observe_rate_limit};
pub(crate) use interface::Pace;
