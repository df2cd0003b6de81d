//! [`Machine`]: the one interface every polite state machine offers, so that
//! a single drive loop (and the test simulator) can run any of them.

use std::time::Instant;

use crate::input::{Event, Response, RetryClass};
use crate::outcome::Outcome;
use crate::output::{Action, Notice};
use crate::record::AttemptRecord;
use crate::request::RequestInfo;

/// A sans-IO machine: events in with the current time, actions out.
///
/// Contract: call [`poll_action`](Machine::poll_action) until it answers
/// `SleepUntil` or `Stop`, performing every `Send`; then wait for an answer,
/// the instant, or a cancel, and feed it to [`handle`](Machine::handle) with
/// the time it happened. `handle` never fails; `poll_action` is total.
///
/// ```
/// use polite_core::{Action, Machine, Method, RequestId, RequestInfo, RetryMachine, RetryPolicy};
/// use polite_core::SplitMix64;
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
    /// The record of the last answered attempt, once; at the end, those of
    /// the attempts dropped in flight (one record per attempt, SPEC §2.4).
    fn take_record(&mut self) -> Option<AttemptRecord>;
    /// The machine's fixed deadline, when it tells (`None` by default).
    /// Wrappers such as [`Paced`](crate::Paced) use it to stop at once when
    /// the next permitted send would fall at or after it.
    ///
    /// ```
    /// use polite_core::{Machine, Method, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                           SplitMix64::new(1), t0, Duration::from_secs(5)).unwrap();
    /// assert_eq!(Machine::deadline(&m), Some(t0 + Duration::from_secs(5)));
    /// ```
    fn deadline(&self) -> Option<Instant> {
        None
    }
    /// A one-time notice for the user (e.g. `PollMachine` falling back from
    /// long polling), once; `None` by default.
    fn take_notice(&mut self) -> Option<Notice> {
        None
    }
    /// How this machine's policy classes `response` (a classifier's verdict
    /// in [`Response::retry_class`] included); `None` by default. Wrappers
    /// such as [`Paced`](crate::Paced) ask it for every answer, also one the
    /// machine itself ignores (a late answer still says the server is
    /// rate limiting, and until when).
    ///
    /// ```
    /// use polite_core::{Machine, Method, RequestId, RequestInfo, Response, RetryClass,
    ///                   RetryMachine, RetryPolicy, SendId, SplitMix64};
    /// use std::time::{Duration, Instant, UNIX_EPOCH};
    /// let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                           SplitMix64::new(1), Instant::now(), Duration::from_secs(5)).unwrap();
    /// let r = Response::new(SendId::default(), 429, UNIX_EPOCH);
    /// assert_eq!(Machine::class_of(&m, &r), Some(RetryClass::RateLimited));
    /// ```
    fn class_of(&self, response: &Response<'_>) -> Option<RetryClass> {
        let _ = response;
        None
    }
    /// For a machine fed its items as it goes ([`BatchMachine::streaming`](crate::BatchMachine::streaming)):
    /// how many more items it would take now. `0` by default.
    fn wants_items(&self) -> u32 {
        0
    }
    /// Gives the machine its next item; its index is the number of items
    /// given before it. Ignored by default.
    fn push_item(&mut self, request: RequestInfo) {
        let _ = request;
    }
    /// Says that no more items will come. Ignored by default.
    fn close_items(&mut self) {}
    /// An item that ended since the last call, with its outcome, once; for
    /// a machine that hands its items' results out as they end. `None` by
    /// default.
    fn take_ended(&mut self) -> Option<(u32, Outcome)> {
        None
    }
}

/// A machine borrowed mutably is a machine: drive it and keep it to read
/// its results afterwards (e.g. [`BatchMachine::outcomes`](crate::BatchMachine::outcomes)).
impl<M: Machine + ?Sized> Machine for &mut M {
    #[inline]
    fn handle(&mut self, now: Instant, event: Event<'_>) {
        (**self).handle(now, event);
    }
    #[inline]
    fn poll_action(&mut self) -> Action {
        (**self).poll_action()
    }
    fn take_record(&mut self) -> Option<AttemptRecord> {
        (**self).take_record()
    }
    fn deadline(&self) -> Option<Instant> {
        (**self).deadline()
    }
    fn take_notice(&mut self) -> Option<Notice> {
        (**self).take_notice()
    }
    fn class_of(&self, response: &Response<'_>) -> Option<RetryClass> {
        (**self).class_of(response)
    }
    fn wants_items(&self) -> u32 {
        (**self).wants_items()
    }
    fn push_item(&mut self, request: RequestInfo) {
        (**self).push_item(request);
    }
    fn close_items(&mut self) {
        (**self).close_items();
    }
    fn take_ended(&mut self) -> Option<(u32, Outcome)> {
        (**self).take_ended()
    }
}
