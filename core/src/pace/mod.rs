//! Pacing by time: [`RateThrottle`] (a sliding-window log with a shared
//! cool-down), the [`Pace`] interface that lets several machines share one
//! throttle, and [`Paced`], which passes every send of a single machine
//! through a pace (SPEC §2: retries are requests too).
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
//! `X-RateLimit-*`); [`Paced`] and [`BatchMachine`](crate::BatchMachine)
//! read those headers ([`crate::ratelimit`]) and hand them to the pace with
//! [`Pace::observe`]. A [`RateThrottle`] pauses every machine sharing it
//! when the server says no quota is left until some time, and a
//! [`RateThrottle::learning`] throttle sizes itself to the advertised
//! quota: a client that was never told the quota stops earning 429s after
//! the first answer that carries it.

mod feedback;
mod interface;
mod paced;
mod throttle;

pub(crate) use feedback::{after_answer, cool_down_after, observe_rate_limit};
pub use interface::{Pace, Unpaced};
pub use paced::Paced;
pub use throttle::RateThrottle;
