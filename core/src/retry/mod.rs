//! [`RetryMachine`]: one logical request, retried by class inside one hard
//! deadline.
//!
//! The retry rules are not here but in the decision kernel
//! ([`crate::decide::judge_with`]), which `PollMachine` and the batch
//! machine call too. [`state`] holds what one logical request has done so
//! far ([`RetryState`]), which a batch keeps per item.

mod state;

pub(crate) use state::RetryState;

use std::time::{Duration, Instant};

use rand_core::Rng;

use crate::budget::{NoBudget, RetryBudget};
use crate::decide::deadline_after;
use crate::input::{Event, Response, RetryClass};
use crate::machine::Machine;
use crate::outcome::Outcome;
use crate::output::Action;
use crate::policy::{PolicyError, RetryPolicy};
use crate::record::AttemptRecord;
use crate::request::RequestInfo;

/// One logical request, sent one or more times until it succeeds, is not
/// worth retrying, runs out of retries, runs out of time, or is cancelled.
///
/// Sans-IO: it never reads a clock, sleeps, or opens a socket; it owns its
/// random source `R` and takes `now` with every event.
///
/// **Inputs**: [`handle`](Self::handle)`(now, event)` with an [`Event`].
/// **Outputs**: [`poll_action`](Self::poll_action) answers an [`Action`];
/// [`take_record`](Self::take_record) the [`AttemptRecord`] of the last
/// answered attempt.
///
/// **Invariants** (checked by property tests):
/// * every `SleepUntil(t)` has `t <= deadline`; every send happens before
///   the deadline and carries `abort_at = deadline + cushion`;
/// * never a send before the server's `Retry-After` instant (the delay used is
///   `max(backoff, server delay)`; a server delay over the automatic wait
///   cap stops with `RateLimited`);
/// * a request that is not replayable is sent once;
/// * retries per class stay within the class budget;
/// * after `Cancel` the next action is `Stop(Cancelled)`;
/// * `Stop` is sticky: the machine ends with exactly one outcome;
/// * an answer at or after the deadline gives `TimedOut`, even a success;
/// * time going backwards is clamped to the latest `now` seen; late answers
///   for earlier attempts are ignored;
/// * with a shared retry budget `B` ([`with_budget`](Self::with_budget)):
///   every retry was granted by the budget, and a success gives back its
///   last retry's cost (see [`RetryBudget`]).
///
/// The budget `B` defaults to [`NoBudget`], which never refuses and
/// compiles to nothing: the plain machine pays nothing for the feature.
///
/// ```
/// use polite_core::{Action, Event, Method, Outcome, RequestId, RequestInfo, Response,
///                   RetryMachine, RetryPolicy};
/// use polite_core::SplitMix64;
/// use std::time::{Duration, Instant, UNIX_EPOCH};
///
/// let t0 = Instant::now(); // the adapter's clock; tests use any instant
/// let mut m = RetryMachine::new(RetryPolicy::default(),
///     RequestInfo::new(RequestId(1), Method::Get), SplitMix64::new(42),
///     t0, Duration::from_secs(30)).unwrap();
///
/// let Action::Send(first) = m.poll_action() else { unreachable!() };
/// // The server answers 429 with Retry-After: 2 after 10 ms.
/// let t1 = t0 + Duration::from_millis(10);
/// m.handle(t1, Event::Response(Response::new(first.id, 429, UNIX_EPOCH).retry_after(b"2")));
/// assert_eq!(m.poll_action(), Action::SleepUntil(t1 + Duration::from_secs(2)));
///
/// m.handle(t1 + Duration::from_secs(2), Event::Tick);
/// let Action::Send(second) = m.poll_action() else { unreachable!() };
/// m.handle(t1 + Duration::from_secs(2), Event::Response(Response::new(second.id, 200, UNIX_EPOCH)));
/// assert_eq!(m.poll_action(), Action::Stop(Outcome::Succeeded { status: 200 }));
/// ```
#[derive(Clone, Debug)]
pub struct RetryMachine<R, B = NoBudget> {
    policy: RetryPolicy,
    state: RetryState,
    rng: R,
    budget: B,
}

impl<R: Rng> RetryMachine<R> {
    /// A machine for `request` with a budget of `timeout` from `now`: the
    /// deadline is `now + timeout`, fixed before the first send.
    ///
    /// # Errors
    ///
    /// [`PolicyError`] when the policy makes no sense.
    pub fn new(
        policy: RetryPolicy,
        request: RequestInfo,
        rng: R,
        now: Instant,
        timeout: Duration,
    ) -> Result<Self, PolicyError> {
        Self::with_deadline(policy, request, rng, now, deadline_after(now, timeout))
    }

    /// A machine that spends an existing deadline (for nesting: an inner
    /// machine receives the outer deadline, never a fresh timeout).
    ///
    /// # Errors
    ///
    /// [`PolicyError`] when the policy makes no sense.
    pub fn with_deadline(
        policy: RetryPolicy,
        request: RequestInfo,
        rng: R,
        now: Instant,
        deadline: Instant,
    ) -> Result<Self, PolicyError> {
        policy.validate()?;
        Ok(RetryMachine {
            state: RetryState::new(&policy, request, 0, now, deadline),
            policy,
            rng,
            budget: NoBudget,
        })
    }
}

impl<R: Rng, B: RetryBudget> RetryMachine<R, B> {
    /// The same machine drawing its retries from a shared retry budget
    /// (see [`RetryBudget`]): each retry first withdraws its cost, a
    /// refusal ends the request with [`Outcome::RetryBudgetExhausted`],
    /// and a success gives back its last retry's cost. Share one bucket
    /// between machines through `&mut`, `Arc<Mutex<_>>` or `Rc<RefCell<_>>`.
    /// Call it before the first answer.
    ///
    /// ```
    /// use polite_core::{Action, Event, Method, Outcome, Reply, RequestId, RequestInfo, Response,
    ///                   RetryClass, RetryMachine, RetryPolicy};
    /// use polite_core::budget::{RetryBucket, RetryCosts};
    /// use polite_core::SplitMix64;
    /// use std::cell::RefCell;
    /// use std::rc::Rc;
    /// use std::time::{Duration, Instant, UNIX_EPOCH};
    ///
    /// let t0 = Instant::now();
    /// // 20 tokens; a retry after a server error costs 14.
    /// let bucket = Rc::new(RefCell::new(RetryBucket::new(20, RetryCosts::default())));
    /// let new = |id| RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(id), Method::Get),
    ///     SplitMix64::new(id), t0, Duration::from_secs(30)).unwrap().with_budget(Rc::clone(&bucket));
    /// let (mut a, mut b) = (new(1), new(2));
    ///
    /// let Action::Send(pa) = a.poll_action() else { unreachable!() };
    /// let Action::Send(pb) = b.poll_action() else { unreachable!() };
    /// a.handle(t0, Event::Response(Response::new(pa.id, 503, UNIX_EPOCH)));
    /// assert!(matches!(a.poll_action(), Action::SleepUntil(_))); // a retries: 6 tokens left
    /// b.handle(t0, Event::Response(Response::new(pb.id, 503, UNIX_EPOCH)));
    /// assert_eq!(b.poll_action(), Action::Stop(Outcome::RetryBudgetExhausted {
    ///     class: RetryClass::ServerError, last: Reply::Status(503) }));
    /// assert_eq!(bucket.borrow().tokens(), 6);
    /// ```
    #[must_use]
    pub fn with_budget<B2: RetryBudget>(self, budget: B2) -> RetryMachine<R, B2> {
        RetryMachine {
            policy: self.policy,
            state: self.state,
            rng: self.rng,
            budget,
        }
    }

    /// The retry budget.
    ///
    /// ```
    /// use polite_core::{Method, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// use polite_core::budget::{NoBudget, RetryBucket};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                           SplitMix64::new(1), Instant::now(), Duration::from_secs(5)).unwrap();
    /// assert_eq!(*m.budget(), NoBudget);
    /// let m = m.with_budget(RetryBucket::default());
    /// assert_eq!(m.budget().tokens(), 500);
    /// ```
    #[must_use]
    pub fn budget(&self) -> &B {
        &self.budget
    }

    /// Feeds what happened at `now`. Never fails: unexpected input (a late
    /// answer, an event after the end) is ignored.
    #[inline]
    pub fn handle(&mut self, now: Instant, event: Event<'_>) {
        self.state
            .handle(&self.policy, &mut self.rng, &mut self.budget, now, event);
    }

    /// What to do next. Call after construction and after every `handle`
    /// until it answers `SleepUntil` or `Stop`.
    #[inline]
    pub fn poll_action(&mut self) -> Action {
        self.state.poll_action()
    }

    /// The record of the last answered attempt, once (later calls give
    /// `None` until another attempt is answered).
    pub fn take_record(&mut self) -> Option<AttemptRecord> {
        self.state.take_record()
    }

    /// The outcome, once the machine has ended.
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        self.state.outcome()
    }

    /// The fixed deadline.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.state.deadline
    }

    /// The request this machine governs.
    #[must_use]
    pub fn request(&self) -> &RequestInfo {
        &self.state.request
    }

    /// The policy.
    #[must_use]
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// How many sends the machine has asked for so far.
    #[must_use]
    pub fn sends(&self) -> u32 {
        self.state.sent
    }

    /// Whether a send is in flight (the machine waits for its answer).
    #[must_use]
    pub fn in_flight(&self) -> bool {
        self.state.in_flight()
    }
}

impl<R: Rng, B: RetryBudget> Machine for RetryMachine<R, B> {
    #[inline]
    fn handle(&mut self, now: Instant, event: Event<'_>) {
        RetryMachine::handle(self, now, event);
    }
    #[inline]
    fn poll_action(&mut self) -> Action {
        RetryMachine::poll_action(self)
    }
    fn take_record(&mut self) -> Option<AttemptRecord> {
        RetryMachine::take_record(self)
    }
    fn deadline(&self) -> Option<Instant> {
        Some(RetryMachine::deadline(self))
    }
    fn class_of(&self, response: &Response<'_>) -> Option<RetryClass> {
        self.policy().class_of_response(response)
    }
}
