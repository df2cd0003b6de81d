//! [`RetryMachine`]: one logical request, retried by class inside one hard
//! deadline.
//!
//! The retry rules are not here but in the decision kernel
//! ([`crate::decide::judge_with`]), which `PollMachine` and the batch
//! machine call too. [`state`] holds what one logical request has done so
//! far ([`RetryState`]), which a batch keeps per item.

mod state;

pub(crate) use state::RetryState;

use state::{FastPath, FastPolicy};

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

/// A [`RetryPolicy`] checked once ([`RetryPolicy::validate`]), with what
/// the machines' fast path needs of it worked out once: for a client that
/// makes a [`RetryMachine`] per call under one policy
/// ([`RetryMachine::checked`]), instead of checking and working it out
/// per call as [`RetryMachine::new`] does. The policy cannot be changed
/// afterwards (check a changed policy anew).
///
/// ```
/// use polite_core::{CheckedRetryPolicy, RetryPolicy};
/// use polite_core::policy::StatusSet;
///
/// let checked = CheckedRetryPolicy::new(RetryPolicy::default()).unwrap();
/// assert_eq!(*checked.policy(), RetryPolicy::default());
/// let overlapping = RetryPolicy {
///     server_error_statuses: StatusSet::of(&[429, 503]),
///     ..RetryPolicy::default()
/// };
/// assert!(CheckedRetryPolicy::new(overlapping).is_err());
/// ```
#[derive(Clone, Debug)]
pub struct CheckedRetryPolicy {
    policy: RetryPolicy,
    fast: FastPolicy,
}

impl CheckedRetryPolicy {
    /// `policy`, checked.
    ///
    /// # Errors
    ///
    /// [`PolicyError`] when the policy makes no sense (as
    /// [`RetryPolicy::validate`]).
    pub fn new(policy: RetryPolicy) -> Result<Self, PolicyError> {
        policy.validate()?;
        Ok(CheckedRetryPolicy {
            fast: FastPolicy::new(&policy),
            policy,
        })
    }

    /// The policy.
    #[must_use]
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }
}

/// One logical request, sent one or more times until it succeeds, is not
/// worth retrying, runs out of retries, runs out of time, or is cancelled.
///
/// Sans-IO: it never reads a clock, sleeps, or opens a socket; it owns its
/// random source `R` and takes `now` with every event.
///
/// **Inputs**: [`handle`](Self::handle)`(now, event)` with an [`Event`].
/// **Outputs**: [`poll_action`](Self::poll_action) answers an [`Action`];
/// [`take_record`](Self::take_record) the [`AttemptRecord`] of the last
/// answered attempt (or of the attempt dropped in flight when a cancel or
/// the deadline ends the request: one record per attempt, SPEC §2.4).
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
    /// The policy's constants for plain answers (issue 22).
    fast: FastPath,
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
            fast: FastPath::new(&policy, &request, now, deadline),
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
            fast: self.fast,
            state: self.state,
            rng: self.rng,
            budget,
        }
    }

    /// [`new`](Self::new) under a policy checked once, drawing from
    /// `budget` ([`with_budget`](Self::with_budget)): the same machine,
    /// without checking the policy again (so without an error), built
    /// with its budget in place (one move of the machine fewer).
    ///
    /// ```
    /// use polite_core::{CheckedRetryPolicy, Method, RequestId, RequestInfo, RetryMachine,
    ///                   RetryPolicy, SplitMix64};
    /// use polite_core::budget::NoBudget;
    /// use std::time::{Duration, Instant};
    ///
    /// let policy = CheckedRetryPolicy::new(RetryPolicy::default()).unwrap();
    /// let t0 = Instant::now();
    /// for id in 1..=3 {
    ///     let m = RetryMachine::checked(&policy, RequestInfo::new(RequestId(id), Method::Get),
    ///         SplitMix64::new(id), t0, Duration::from_secs(30), NoBudget);
    ///     assert_eq!(m.policy(), policy.policy());
    /// }
    /// ```
    #[must_use]
    #[inline]
    pub fn checked(
        policy: &CheckedRetryPolicy,
        request: RequestInfo,
        rng: R,
        now: Instant,
        timeout: Duration,
        budget: B,
    ) -> Self {
        let deadline = deadline_after(now, timeout);
        RetryMachine {
            fast: FastPath::of(&policy.fast, &request, now, deadline),
            state: RetryState::new(&policy.policy, request, 0, now, deadline),
            policy: policy.policy,
            rng,
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
        if let Event::Response(ref r) = event
            && self
                .state
                .answer_fast(&self.fast, &mut self.rng, &mut self.budget, now, r)
        {
            return;
        }
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
    /// `None` until another attempt is answered). An attempt still in
    /// flight when a cancel or the deadline ends the request yields its
    /// record then: `Reply::Transport(Aborted)`, with the outcome.
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

/// The fast path of an answer ([`RetryState::answer_fast`]) decides as the
/// general path does: the same actions, records and outcomes for the same
/// events, over arbitrary policies, requests, budgets and answers.
#[cfg(test)]
mod fast_path_tests {
    use std::time::{Duration, Instant, UNIX_EPOCH};

    use proptest::prelude::*;
    use rand_core::Rng;

    use super::RetryMachine;
    use crate::budget::{RetryBucket, RetryBudget, RetryCosts};
    use crate::input::{Event, Response, RetryClass, SendId, TransportErrorKind};
    use crate::output::Action;
    use crate::policy::{Backoff, BackoffExponent, Jitter, RetryPolicy, StatusSet};
    use crate::request::{Method, RequestId, RequestInfo};
    use crate::rng::SplitMix64;

    /// An arbitrary origin for the tests' instants (read once).
    fn origin() -> Instant {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        #[allow(clippy::disallowed_methods)] // the one clock read: an arbitrary origin
        *ORIGIN.get_or_init(Instant::now)
    }

    const STATUSES: [u16; 16] = [
        0, 99, 100, 200, 204, 399, 400, 404, 408, 429, 500, 501, 503, 599, 600, 999,
    ];
    const RETRY_AFTER: [Option<&[u8]>; 11] = [
        None,
        Some(b"2"),
        Some(b"0"),
        Some(b"60"),
        Some(b"61"),
        Some(b"007"),
        Some(b"99999999999999999999"),
        Some(b" 3"),
        Some(b""),
        Some(b"1.5"),
        Some(b"Sun, 06 Nov 1994 08:49:37 GMT"),
    ];

    #[derive(Clone, Copy, Debug)]
    enum Step {
        Tick,
        Cancel,
        Transport(u8),
        Answer {
            status: usize,
            retry_after: usize,
            class: Option<u8>,
            generation: Option<u64>,
            ms: bool,
            wrong_id: bool,
        },
    }

    fn step() -> impl Strategy<Value = (i64, Step)> {
        let answer = (
            prop_oneof![2 => prop::sample::select(vec![3usize, 9, 12]), 1 => 0..STATUSES.len()],
            prop_oneof![3 => Just(0usize), 2 => 0..RETRY_AFTER.len()],
            proptest::option::weighted(0.1, 0u8..3),
            proptest::option::weighted(0.1, 0u64..2),
            proptest::bool::weighted(0.1),
            proptest::bool::weighted(0.05),
        )
            .prop_map(|(status, retry_after, class, generation, ms, wrong_id)| {
                Step::Answer {
                    status,
                    retry_after,
                    class,
                    generation,
                    ms,
                    wrong_id,
                }
            });
        let kind = prop_oneof![
            6 => answer,
            3 => Just(Step::Tick),
            1 => (0..TransportErrorKind::ALL.len() as u8).prop_map(Step::Transport),
            1 => Just(Step::Cancel),
        ];
        (-50i64..8_000, kind)
    }

    fn backoff() -> impl Strategy<Value = Backoff> {
        let jitter = prop_oneof![
            Just(Jitter::None),
            Just(Jitter::Full),
            Just(Jitter::Equal),
            Just(Jitter::Percent(0)),
            Just(Jitter::Percent(20)),
            Just(Jitter::Percent(100)),
        ];
        let base = prop_oneof![
            Just(Duration::from_nanos(1)),
            Just(Duration::from_millis(250)),
            Just(Duration::from_secs(2)),
            Just(Duration::from_secs(u64::MAX / 1_000_000_000 + 1)),
        ];
        (base, 1u32..4, 1u32..20, jitter).prop_map(|(base, multiplier, k, jitter)| Backoff {
            base,
            multiplier,
            cap: base.saturating_mul(k),
            jitter,
        })
    }

    fn policy() -> impl Strategy<Value = RetryPolicy> {
        (
            (backoff(), proptest::option::weighted(0.3, backoff())),
            (0u32..4, 0u32..5, 0u32..3),
            proptest::option::weighted(0.1, 0u32..4),
            proptest::bool::weighted(0.1),
            proptest::option::weighted(0.1, 0u64..3000),
            (
                1u64..4,
                prop_oneof![Just(2u64), Just(60), Just(61)],
                any::<bool>(),
            ),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(
                    (b, rl),
                    (rate_limited, server_error, transport),
                    total,
                    all,
                    ms,
                    (min, cap, half),
                    linger,
                    wide,
                )| {
                    let mut p = RetryPolicy {
                        backoff: b,
                        rate_limited_backoff: rl,
                        max_total_retries: total,
                        backoff_exponent: if all {
                            BackoffExponent::AllRetries
                        } else {
                            BackoffExponent::ClassRetries
                        },
                        retry_after_ms: ms.map(Duration::from_millis),
                        backoff_when_budget_empty: linger,
                        ..RetryPolicy::default()
                    };
                    p.max_retries.rate_limited = rate_limited;
                    p.max_retries.server_error = server_error;
                    p.max_retries.transport = transport;
                    p.retry_after.min = Duration::from_secs(min);
                    p.retry_after.auto_wait_cap = Duration::from_secs(cap)
                        + Duration::from_millis(if half { 500 } else { 0 });
                    if wide {
                        p.server_error_statuses = StatusSet::of(&[408, 500, 503, 599]);
                        p.rate_limited_statuses = StatusSet::of(&[400, 429, 504]);
                    }
                    p
                },
            )
    }

    fn request() -> impl Strategy<Value = RequestInfo> {
        (
            proptest::bool::weighted(0.9),
            proptest::option::weighted(0.1, 0u64..2),
        )
            .prop_map(|(get, generation)| {
                let mut r =
                    RequestInfo::new(RequestId(3), if get { Method::Get } else { Method::Post });
                r.generation = generation;
                r
            })
    }

    /// Runs `steps` through `fast` and `general` (its fast path off),
    /// comparing everything they say; how many answers the fast path took,
    /// of how many answers came while a send was in flight.
    fn compare<B: RetryBudget + Clone + PartialEq + std::fmt::Debug>(
        mut fast: RetryMachine<SplitMix64, B>,
        t0: Instant,
        steps: &[(i64, Step)],
    ) -> Result<(usize, usize), TestCaseError> {
        let mut general = fast.clone();
        general.fast = general.fast.off();
        let mut now = t0;
        let mut last = SendId::default();
        let (mut taken, mut answers) = (0, 0);
        for (i, &(dt, step)) in steps.iter().enumerate() {
            // Time mostly moves on; a negative step goes back (clamped).
            now = if dt >= 0 {
                now + Duration::from_millis(dt.unsigned_abs())
            } else {
                now.checked_sub(Duration::from_millis(dt.unsigned_abs()))
                    .unwrap_or(now)
            };
            let event = match step {
                Step::Tick => Event::Tick,
                Step::Cancel => Event::Cancel,
                Step::Transport(k) => {
                    Event::TransportError(last, TransportErrorKind::ALL[usize::from(k)])
                }
                Step::Answer {
                    status,
                    retry_after,
                    class,
                    generation,
                    ms,
                    wrong_id,
                } => {
                    let mut id = last;
                    if wrong_id {
                        id.attempt = id.attempt.wrapping_add(1);
                    }
                    let mut r = Response::new(id, STATUSES[status], UNIX_EPOCH);
                    r.retry_after = RETRY_AFTER[retry_after];
                    r.retry_class = class.map(|c| {
                        [
                            RetryClass::RateLimited,
                            RetryClass::ServerError,
                            RetryClass::Transport,
                        ][usize::from(c)]
                    });
                    r.generation = generation;
                    if ms {
                        r.retry_after_ms = Some(b"1500");
                    }
                    Event::Response(r)
                }
            };
            if let Event::Response(r) = event
                && fast.in_flight()
            {
                answers += 1;
                let mut probe = fast.clone();
                if probe
                    .state
                    .answer_fast(&probe.fast, &mut probe.rng, &mut probe.budget, now, &r)
                {
                    taken += 1;
                }
            }
            fast.handle(now, event);
            general.handle(now, event);
            let (a, b) = (fast.poll_action(), general.poll_action());
            prop_assert_eq!(a, b, "action after step {} {:?}", i, step);
            if let Action::Send(plan) = a {
                last = plan.id;
            }
            prop_assert_eq!(
                fast.take_record(),
                general.take_record(),
                "record, step {}",
                i
            );
            prop_assert_eq!(fast.outcome(), general.outcome());
            prop_assert_eq!(fast.sends(), general.sends());
            prop_assert_eq!(&fast.budget, &general.budget);
            prop_assert_eq!(
                fast.rng.next_u64(),
                general.rng.next_u64(),
                "draws, step {}",
                i
            );
        }
        Ok((taken, answers))
    }

    proptest! {
        /// A policy checked once makes the machine `new` makes (the same
        /// fast path, state, policy and draws, compared by their `Debug`),
        /// and refuses what `validate` refuses.
        #[test]
        fn a_checked_policy_makes_the_machine_new_makes(
            policy in policy(),
            request in request(),
            timeout_ms in 0u64..30_000,
            seed in any::<u64>(),
        ) {
            let t0 = origin();
            let timeout = Duration::from_millis(timeout_ms);
            match super::CheckedRetryPolicy::new(policy) {
                Err(e) => prop_assert_eq!(Err(e), policy.validate()),
                Ok(checked) => {
                    prop_assert_eq!(checked.policy(), &policy);
                    let new = RetryMachine::new(policy, request, SplitMix64::new(seed), t0, timeout)
                        .unwrap();
                    let made = RetryMachine::checked(
                        &checked,
                        request,
                        SplitMix64::new(seed),
                        t0,
                        timeout,
                        crate::budget::NoBudget,
                    );
                    prop_assert_eq!(format!("{new:?}"), format!("{made:?}"));
                    let bucket = || RetryBucket::new(7, RetryCosts::default());
                    let new = new.with_budget(bucket());
                    let made =
                        RetryMachine::checked(&checked, request, SplitMix64::new(seed), t0, timeout, bucket());
                    prop_assert_eq!(format!("{new:?}"), format!("{made:?}"));
                }
            }
        }
    }

    /// Also counts the answers the fast path took: a test whose scripts
    /// never reach it would compare the general path with itself.
    #[test]
    fn fast_path_decides_as_the_general_path() {
        // As `proptest!` sets it up: the failures saved in
        // proptest-regressions/retry/mod.txt are replayed first.
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            source_file: Some(file!()),
            ..ProptestConfig::with_cases(2000)
        });
        let (taken, answers) = (std::cell::Cell::new(0usize), std::cell::Cell::new(0usize));
        let strategy = (
            policy(),
            request(),
            0u64..30_000,
            any::<u64>(),
            proptest::option::weighted(0.3, 0u32..40),
            proptest::collection::vec(step(), 1..24),
        );
        runner
            .run(
                &strategy,
                |(policy, request, timeout_ms, seed, bucket, steps)| {
                    prop_assume!(policy.validate().is_ok());
                    let t0 = origin();
                    let m = RetryMachine::new(
                        policy,
                        request,
                        SplitMix64::new(seed),
                        t0,
                        Duration::from_millis(timeout_ms),
                    )
                    .unwrap();
                    let (t, a) = match bucket {
                        None => compare(m, t0, &steps)?,
                        Some(n) => compare(
                            m.with_budget(RetryBucket::new(n, RetryCosts::default())),
                            t0,
                            &steps,
                        )?,
                    };
                    taken.set(taken.get() + t);
                    answers.set(answers.get() + a);
                    Ok(())
                },
            )
            .unwrap();
        let (taken, answers) = (taken.get(), answers.get());
        // Most answers go to policies or requests the fast path leaves
        // alone, or are ones it leaves (about 210 of 1,130 taken when
        // written; 18 of about 1,100 before the generators were weighted
        // towards plain policies): far fewer would leave it barely tested.
        assert!(answers > 500, "{taken} of {answers} answers");
        assert!(
            taken * 8 > answers,
            "fast path took {taken} of {answers} answers"
        );
    }

    /// The fast path takes the common answers and leaves the rest, at the
    /// edges of what it takes.
    #[test]
    fn fast_path_takes_what_it_should() {
        fn takes(
            policy: RetryPolicy,
            request: RequestInfo,
            r: impl Fn(SendId) -> Response<'static>,
        ) -> bool {
            takes_within(Duration::from_secs(30), policy, request, r)
        }
        fn takes_within(
            timeout: Duration,
            policy: RetryPolicy,
            request: RequestInfo,
            r: impl Fn(SendId) -> Response<'static>,
        ) -> bool {
            let t0 = origin();
            let mut m =
                RetryMachine::new(policy, request, SplitMix64::new(1), t0, timeout).unwrap();
            let Action::Send(plan) = m.poll_action() else {
                unreachable!()
            };
            let answer = r(plan.id);
            let mut general = m.clone();
            general.fast = general.fast.off();
            let took = m
                .state
                .answer_fast(&m.fast, &mut m.rng, &mut m.budget, t0, &answer);
            if !took {
                m.handle(t0, Event::Response(answer));
            }
            general.handle(t0, Event::Response(answer));
            assert_eq!(m.poll_action(), general.poll_action(), "{answer:?}");
            assert_eq!(m.take_record(), general.take_record(), "{answer:?}");
            took
        }
        let p = RetryPolicy::default();
        let get = RequestInfo::new(RequestId(1), Method::Get);
        let at = |s| move |id| Response::new(id, s, UNIX_EPOCH);
        assert!(takes(p, get, at(503)));
        assert!(takes(p, get, at(429)));
        assert!(takes(p, get, at(200)));
        assert!(takes(p, get, at(100)));
        assert!(takes(p, get, at(399)));
        assert!(takes(p, get, |id| Response::new(id, 429, UNIX_EPOCH)
            .retry_after(b"2")));
        assert!(takes(p, get, |id| Response::new(id, 503, UNIX_EPOCH)
            .retry_after(b"0")));
        // The automatic wait cap, 60 s: 60 is waited, 61 stops.
        assert!(takes(p, get, |id| Response::new(id, 429, UNIX_EPOCH)
            .retry_after(b"60")));
        assert!(!takes(p, get, |id| Response::new(id, 429, UNIX_EPOCH)
            .retry_after(b"61")));
        assert!(!takes(p, get, |id| Response::new(id, 429, UNIX_EPOCH)
            .retry_after(b" 2")));
        assert!(!takes(p, get, at(99)));
        assert!(!takes(p, get, at(404)));
        assert!(!takes(p, get, at(501)));
        assert!(!takes(p, get, at(600)));
        assert!(!takes(p, get, |id| {
            Response::new(id, 200, UNIX_EPOCH).retry_class(RetryClass::ServerError)
        }));
        assert!(!takes(
            p,
            RequestInfo::new(RequestId(1), Method::Post),
            at(503)
        ));
        let mut generation = get;
        generation.generation = Some(1);
        assert!(!takes(p, generation, at(503)));
        let mut none_left = p;
        none_left.max_retries.server_error = 0;
        assert!(!takes(none_left, get, at(503)));
        assert!(takes(none_left, get, at(429)));
        let mut ms = p;
        ms.retry_after_ms = Some(Duration::from_secs(1));
        assert!(!takes(ms, get, at(503)));
        // The room: a failure is taken while the deadline is at least the
        // class's longest backoff away (the cap, 4 s; twice the cap for
        // `Percent` jitter); a success up to the deadline.
        let secs = Duration::from_secs;
        assert!(takes_within(secs(5), p, get, at(503)));
        assert!(!takes_within(secs(4), p, get, at(503)));
        assert!(takes_within(secs(1), p, get, at(200)));
        let mut percent = p;
        percent.backoff.jitter = Jitter::Percent(20);
        assert!(takes_within(secs(9), percent, get, at(503)));
        assert!(!takes_within(secs(8), percent, get, at(503)));
        // A server delay past the room is compared with the deadline.
        assert!(takes_within(secs(10), p, get, |id| {
            Response::new(id, 429, UNIX_EPOCH).retry_after(b"9")
        }));
        assert!(takes_within(secs(10), p, get, |id| {
            Response::new(id, 429, UNIX_EPOCH).retry_after(b"10")
        }));
        // Statuses from 528 on are left, whatever their class.
        let mut wide = p;
        wide.server_error_statuses = StatusSet::of(&[503, 527, 528, 599]);
        assert!(takes(wide, get, at(527)));
        assert!(!takes(wide, get, at(528)));
        assert!(!takes(wide, get, at(599)));
    }
}
