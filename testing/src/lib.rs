//! # polite-testing
//!
//! The test toolkit of [`polite_core`]: everything polite's own tests use
//! to prove the machines keep their promises, public so that you can prove
//! the same of *your* policies. Add it as a dev-dependency (as `tokio-test`
//! is to tokio); the product crates never depend on it.
//!
//! * [`Simulator`]: runs any [`Machine`](polite_core::Machine) against a
//!   scripted server (a list of [`Scripted`] answers, or a closure of time
//!   and request) in virtual time and returns the [`Trace`] of actions with
//!   their instants, records and notices. It is not a loop of its own: it
//!   is a virtual-time [`Io`](polite_core::drive::Io) run by
//!   [`polite_core::drive::drive`], the loop every adapter runs, so a
//!   simulated machine gets its notices, its job reports (through a
//!   [`Classify`](polite_core::drive::Classify)) and cancellation right
//!   before a send exactly as in production. A script answers one send
//!   per entry; once it runs out (and no [`server`](Simulator::server)
//!   closure answers), every further send *hangs*, as a server that never
//!   answers does: a machine that retries more often than your script
//!   foresaw then ends `TimedOut` at its deadline, not with an error about
//!   the script. Give one answer per send you expect (`trace.sends()`
//!   says how many went out), or end the script with a closure.
//! * The invariant checkers, written independently of the machines:
//!   [`Checker`] (one request, paced or not), [`PollChecker`] (waiting for a
//!   job), [`BatchChecker`] (a batch), [`ThrottleChecker`] (a rate limit);
//!   all but the last behind the [`Invariants`] trait. Between them they
//!   check: no sleep past the deadline and no send at or after it, no send
//!   after `Stop` (and `Stop` sticky), sends within the retry budgets, never
//!   before the server's `Retry-After`, a non-replayable request sent once,
//!   cancel honoured, and exactly one outcome (per item, for a batch).
//! * Machine-independent event scripts: [`Input`], and [`run_script`] /
//!   [`ScriptRunner`], which play one against any machine with any checker,
//!   injecting what no well-behaved server or clock does (late and stray
//!   answers, a clock stepping back); [`explore`] plays *every* script over
//!   a small alphabet up to a length.
//! * `strategies` (feature `proptest`): proptest strategies for scripts and
//!   policies; its docs show a ten-line property test of your own policy.
//! * `fuzz` (feature `arbitrary`): scripts decoded from fuzzer bytes, and
//!   the checks the fuzz targets in polite's `fuzz/` run, so that a test can
//!   replay a corpus the same way.
//! * A classifier that reads the body (polite-client's `Classifier`, e.g.
//!   "a 200 whose body says `busy` is a server error") is two things to
//!   test: its reading, a plain function of an answer
//!   (`classifier.class_of(&HttpAnswer(http::Response::new(body)))`,
//!   no machine needed), and what the machines do with the class it gives,
//!   which the [`Simulator`] plays: script the answer with that class
//!   ([`Scripted::retry_class`]) and check the trace. The scripted answers
//!   carry no body, so the simulator never runs the classifier itself; to
//!   run both at once, drive the client over a scripted transport in
//!   virtual time (polite-tokio's `tests/paused.rs` does so on tokio's
//!   paused clock).
//! * Small helpers: [`origin()`], an arbitrary start for virtual time;
//!   [`Fixed`], a random source that always draws the same value (the
//!   seeded [`SplitMix64`](polite_core::SplitMix64) lives in core);
//!   [`block_on`], which runs a future that never waits on a real timer.
//!
//! ```
//! use polite_testing::{Scripted, Simulator, origin};
//! use polite_core::{Method, Outcome, RequestId, RequestInfo, RetryMachine, RetryPolicy, SplitMix64};
//! use std::time::Duration;
//!
//! let t0 = origin();
//! let policy = RetryPolicy::default();
//! let request = RequestInfo::new(RequestId(1), Method::Get);
//! let machine = RetryMachine::new(policy, request, SplitMix64::new(3), t0, Duration::from_secs(30)).unwrap();
//! let trace = Simulator::new(t0)
//!     .replies([Scripted::status(503), Scripted::status(429).retry_after("2"), Scripted::status(200)])
//!     .check_retry(&policy, &request) // every step checked against SPEC's invariants
//!     .run(machine)
//!     .unwrap();
//! assert_eq!(trace.outcome, Outcome::Succeeded { status: 200 });
//! assert_eq!(trace.sends().count(), 3);
//! // The server asked for 2 s: the third send waited at least that long
//! // after the 429 arrived (10 ms after the second send).
//! assert!(trace.gaps()[1] >= Duration::from_millis(2010));
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use std::convert::Infallible;
use std::time::Instant;

mod batch_check;
mod check;
mod coverage;
mod explore;
#[cfg(feature = "arbitrary")]
pub mod fuzz;
mod oracle;
mod poll_check;
mod script;
mod server_time;
mod simulator;
#[cfg(feature = "proptest")]
pub mod strategies;
mod throttle_check;

pub use batch_check::BatchChecker;
pub use check::{Checker, Violation};
pub(crate) use check::{class_index, unknown, violation};
pub use coverage::Coverage;
pub use explore::{Counterexample, Exploration, explore, explore_from_origin};
pub use poll_check::PollChecker;
pub use script::{
    Answer, Input, Invariants, Job, ScriptRunner, Settle, default_wall_clock, run_script,
};
pub use simulator::{FromScript, Scripted, ScriptedReply, Simulator, Step, Trace};
pub use throttle_check::ThrottleChecker;

/// An arbitrary origin for virtual time: the first call reads the monotonic
/// clock once, and every call returns that same instant. Simulations only add
/// durations to it; nothing measures elapsed time against it.
///
/// ```
/// use polite_testing::origin;
/// assert_eq!(origin(), origin());
/// ```
#[must_use]
pub fn origin() -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    #[allow(clippy::disallowed_methods)] // the one clock read: an arbitrary origin
    *ORIGIN.get_or_init(Instant::now)
}

/// Runs a future to completion on the current thread, parking between polls
/// (safe code: the waker unparks this thread).
///
/// For futures that never wait on a real timer: a [`polite_core::drive`]
/// run over a virtual-time [`Io`](polite_core::drive::Io) (whose sleeps
/// complete at once by advancing the simulated clock), or one woken by
/// other threads. There is no timer here: a future that waits on a runtime's
/// timer parks forever. Adapters use their runtime (or, for blocking IO,
/// `polite-blocking`'s own loop).
///
/// ```
/// assert_eq!(polite_testing::block_on(async { 1 + 1 }), 2);
/// ```
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// A "generator" that always yields the same `u64`: for tables that fix the
/// jitter draw (`Fixed(0)` is `u = 0`, `Fixed(u64::MAX)` is `u` just under 1).
///
/// ```
/// use polite_testing::Fixed;
/// use rand_core::Rng;
/// assert_eq!(Fixed(5).next_u64(), 5);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixed(pub u64);

impl rand_core::TryRng for Fixed {
    type Error = Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok((self.0 >> 32) as u32)
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.0)
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        dst.fill(0);
        Ok(())
    }
}
