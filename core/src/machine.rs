//! [`Machine`]: the one interface every polite state machine offers, so that
//! a single drive loop (and the test simulator) can run any of them.

use std::time::Instant;

use crate::event::{Action, Event};
use crate::record::AttemptRecord;

/// A sans-IO machine: events in with the current time, actions out.
///
/// Contract: call [`poll_action`](Machine::poll_action) until it answers
/// `SleepUntil` or `Stop`, performing every `Send`; then wait for an answer,
/// the instant, or a cancel, and feed it to [`handle`](Machine::handle) with
/// the time it happened. `handle` never fails; `poll_action` is total.
///
/// ```
/// use polite_core::{Action, Machine, Method, RequestId, RequestInfo, RetryMachine, RetryPolicy};
/// use polite_core::testing::SplitMix64;
/// use std::time::{Duration, Instant};
///
/// fn first_action(m: &mut impl Machine) -> Action { m.poll_action() }
/// let mut m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
///                               SplitMix64::new(1), Instant::now(), Duration::from_secs(5)).unwrap();
/// assert!(matches!(first_action(&mut m), Action::Send(_)));
/// ```
pub trait Machine {
    /// Feeds what happened at `now`.
    fn handle(&mut self, now: Instant, event: Event<'_>);
    /// What to do next.
    fn poll_action(&mut self) -> Action;
    /// The record of the last answered attempt, once.
    fn take_record(&mut self) -> Option<AttemptRecord>;
}

impl<R: rand_core::Rng> Machine for crate::retry::RetryMachine<R> {
    #[inline]
    fn handle(&mut self, now: Instant, event: Event<'_>) {
        crate::retry::RetryMachine::handle(self, now, event);
    }
    #[inline]
    fn poll_action(&mut self) -> Action {
        crate::retry::RetryMachine::poll_action(self)
    }
    fn take_record(&mut self) -> Option<AttemptRecord> {
        crate::retry::RetryMachine::take_record(self)
    }
}
