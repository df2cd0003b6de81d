//! [`BatchChecker`]: the invariants of a [`BatchMachine`](polite_core::BatchMachine),
//! checked on its stream of inputs and outputs independently of its logic.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::throttle_check::PRESIZE;
use crate::{Violation, class_index, oracle, server_time, unknown, violation};
use polite_core::{Action, BatchPolicy, Event, Outcome, RequestInfo, RetryClass, SendId};

/// Checks the invariants of SPEC.md §1, §2 and §4 on the inputs and outputs
/// of a batch:
///
/// * `sleep-past-deadline`: every `SleepUntil(t)` has `t <= deadline`;
/// * `send-after-deadline`: no send at or after the deadline;
/// * `abort-at`: every send carries `abort_at = deadline + cushion`;
/// * `send-after-stop` / `stop-sticky`: after `Stop(o)` every action is `Stop(o)`;
/// * `cancel`: after `Cancel` the next action is `Stop(Cancelled)`;
/// * `item-range`: every send names an item of the batch;
/// * `concurrency`: never more than `policy.concurrency` sends in flight
///   (a send is in flight until its answer or transport error is fed);
/// * `send-while-in-flight`: an item never has two sends in flight;
/// * `attempt-order`: an item's attempt numbers strictly increase;
/// * `not-replayable`: a non-replayable item is sent at most once;
/// * `retry-budget`: an item resends only after a failure of a retried
///   class, and its retries per class stay within that class's budget;
/// * `restarts`: a resend after an answer that can only have ended the item
///   `RateLimited` (a rate-limited answer with the class budget spent, or a
///   `Retry-After` over the automatic wait cap) is a batch restart; at most
///   `max_restarts` per item, and they do not refill the class budgets;
/// * `retry-after`: an item never sends before the instant its last answer's
///   valid `Retry-After` named (raised to `retry_after.min`);
/// * with [`throttled`](Self::throttled): `rate` (never more than `limit`
///   sends in any half-open window) and `cool-down` (no send before the end
///   of a cool-down started by a rate-limited answer with a valid
///   `Retry-After`, clamped to `retry_after.min..=max`);
/// * with [`throttled_per_key`](Self::throttled_per_key) (one throttle per
///   [`pace_slot`](RequestInfo::pace_slot), SPEC §4.2): `rate` and
///   `cool-down` per key (a cool-down from one key's answer holds that
///   key's items only), `head-of-line` (the batch never waits, with room
///   in flight, while an item never sent — within its lookahead of
///   4 × `concurrency` items from the oldest one not yet started — belongs
///   to a key that is *plainly free*: no rate-limited answer or rate-limit
///   header seen for it, and fewer than `limit` of its sends within the
///   last window plus SPEC's 50 ms margin) and `starved-key` (an item
///   never ends `Starved` while its own key is plainly free);
/// * through [`outcomes`](Self::outcomes): `outcome-changed` (an item's
///   outcome, once set, never changes), `item-unfinished` (at `Stop` every
///   item has one), `late-success` (an item answered at or after the
///   deadline ends `TimedOut`), `starved-early` (an item ends `Starved`
///   only when the pace could not send before the deadline) and `stop-outcome` (the batch's outcome is
///   `Cancelled` exactly after a cancel, else `TimedOut` if an item timed
///   out or the input never ended ([`input_open`](Self::input_open)), else
///   the first `Starved` item's outcome if the pace starved one, else
///   `BatchDone` with the right counts).
///
/// Feed it every input with [`input`](Self::input) and every output with
/// [`output`](Self::output) (the [`Simulator`](crate::Simulator) does with
/// [`check_batch`](crate::Simulator::check_batch)), and the machine's
/// [`outcomes`](polite_core::BatchMachine::outcomes) whenever you can.
///
/// ```
/// use polite_testing::{BatchChecker, Scripted, Simulator, origin};
/// use polite_core::{BatchMachine, BatchPolicy, Method, Outcome, RateThrottle, RequestId,
///                   RequestInfo, SplitMix64};
/// use std::time::Duration;
///
/// let t0 = origin();
/// let requests: Vec<_> = (0..6).map(|i| RequestInfo::new(RequestId(i), Method::Get)).collect();
/// let policy = BatchPolicy { concurrency: 2, ..BatchPolicy::default() };
/// let mut batch = BatchMachine::new(policy, requests.clone(), SplitMix64::new(1),
///     RateThrottle::new(3, Duration::from_millis(500)).unwrap(), t0, Duration::from_secs(10)).unwrap();
/// let checker = BatchChecker::new(&policy, &requests, batch.deadline())
///     .throttled(3, Duration::from_millis(500));
/// let trace = Simulator::new(t0)
///     .server(|_, _| Scripted::status(200))
///     .check_batch(checker)
///     .run(&mut batch)
///     .unwrap();
/// assert_eq!(trace.outcome, Outcome::BatchDone { succeeded: 6, failed: 0 });
///
/// // The same checks, by hand, on the item outcomes:
/// let mut checker = BatchChecker::new(&policy, &requests, batch.deadline());
/// checker.output(t0, &polite_core::Action::Stop(trace.outcome)).unwrap();
/// checker.outcomes(batch.outcomes()).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct BatchChecker {
    policy: BatchPolicy,
    deadline: Instant,
    /// `deadline + transport_cushion`: every send's `abort_at` (added once).
    abort_at: Option<Instant>,
    throttle: Option<(u32, Duration)>,
    now: Option<Instant>,
    stopped: Option<Outcome>,
    cancelled: bool,
    /// A streaming batch whose input never ends ([`input_open`](Self::input_open)).
    input_open: bool,
    /// What the checker knows of each item, in one allocation.
    items: Vec<Item>,
    in_flight: u32,
    peak: u32,
    total: u32,
    cool_until: Option<Instant>,
    recent: VecDeque<Instant>,
    outcomes: Vec<Option<Outcome>>,
    /// Whether each pace slot has a throttle of its own
    /// (`throttled_per_key`), and what the checker knows of each, by slot
    /// (sorted; every slot the requests name, from `throttled_per_key` on).
    keyed: bool,
    keys: Vec<(u32, Key)>,
    /// The instant of the batch's latest `SleepUntil`, until its next
    /// action or input (the `head-of-line` rule looks at it).
    sleeping: Option<Instant>,
    /// How many of `outcomes` are set (see [`outcomes_since`](Self::outcomes_since)).
    seen: u32,
    /// An item with an outcome seen heard a late answer since the last
    /// look: `late-success` must look at every item again.
    recheck: bool,
    /// No item before this one is waiting to start (never sent, no
    /// outcome): what the `head-of-line` rule looks for, which only moves
    /// forward.
    first_waiting: usize,
    /// A full look after `Stop` found no violation, with the outcomes now
    /// in `outcomes` (see [`outcomes_since`](Self::outcomes_since)).
    settled: bool,
}

/// SPEC §4: a refused throttle answers "when the oldest send ages out,
/// plus 50 ms".
const MARGIN: Duration = Duration::from_millis(50);

/// `BatchMachine`'s documented lookahead: 4 × `concurrency` items from the
/// oldest one not yet started.
const LOOKAHEAD: u32 = 4;

/// What the checker knows of one item.
#[derive(Clone, Copy, Debug)]
struct Item {
    replayable: bool,
    /// Its pace slot.
    slot: u32,
    /// Its key's index in `keys` (set by `throttled_per_key`, which knows
    /// every slot: read only when `keyed`).
    key: u32,
    flying: Option<SendId>,
    sends: u32,
    last_class: Option<RetryClass>,
    over_cap: bool,
    retries: [u32; 3],
    restarts: u32,
    last_attempt: Option<u32>,
    not_before: Option<Instant>,
    late: bool,
}

/// What the checker knows of one key's throttle.
#[derive(Clone, Debug, Default)]
struct Key {
    cool_until: Option<Instant>,
    /// Its sends within the last window plus the margin, each as the
    /// instants its window ends and its window plus the margin ends
    /// (`None`: past the end of time), added once per send.
    sent: VecDeque<(Option<Instant>, Option<Instant>)>,
    /// It heard something that may slow it down in ways the checker does
    /// not model (a rate-limited answer: the cool-down until the item's
    /// own jittered backoff; rate-limit headers: a pause or a quota).
    tainted: bool,
}

impl BatchChecker {
    /// A checker for a batch of `requests` run with `policy` until
    /// `deadline`.
    ///
    /// ```
    /// # use polite_testing::BatchChecker;
    /// # use polite_core::{Action, BatchPolicy, Event, Method, Outcome, RequestId, RequestInfo, SendId, SendPlan};
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let policy = BatchPolicy::default();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 2];
    /// # let deadline = t0 + Duration::from_secs(10);
    /// # let send = |item| Action::Send(SendPlan { id: SendId { item, attempt: 0 }, request: RequestId(1),
    /// #     abort_at: deadline + policy.retry.transport_cushion, long_poll: None });
    /// let mut c = BatchChecker::new(&policy, &requests, deadline);
    /// assert!(c.output(t0, &Action::SleepUntil(deadline + Duration::from_secs(1))).is_err());
    /// ```
    #[must_use]
    pub fn new(policy: &BatchPolicy, requests: &[RequestInfo], deadline: Instant) -> BatchChecker {
        let n = requests.len();
        BatchChecker {
            policy: *policy,
            deadline,
            abort_at: deadline.checked_add(policy.retry.transport_cushion),
            throttle: None,
            now: None,
            stopped: None,
            cancelled: false,
            input_open: false,
            items: requests
                .iter()
                .map(|r| Item {
                    replayable: crate::check::replayable(r),
                    slot: r.pace_slot,
                    key: 0,
                    flying: None,
                    sends: 0,
                    last_class: None,
                    over_cap: false,
                    retries: [0; 3],
                    restarts: 0,
                    last_attempt: None,
                    not_before: None,
                    late: false,
                })
                .collect(),
            in_flight: 0,
            peak: 0,
            total: 0,
            cool_until: None,
            recent: VecDeque::new(),
            outcomes: vec![None; n],
            keyed: false,
            keys: Vec::new(),
            sleeping: None,
            seen: 0,
            recheck: false,
            first_waiting: 0,
            settled: false,
        }
    }

    /// A checker for this batch: its policy, requests and deadline (add
    /// [`throttled`](Self::throttled) when its pace is a throttle of its own).
    ///
    /// ```
    /// use polite_testing::{BatchChecker, origin};
    /// use polite_core::SplitMix64;
    /// use polite_core::{BatchMachine, BatchPolicy, Method, RequestId, RequestInfo};
    /// use polite_core::pace::Unpaced;
    /// use std::time::Duration;
    /// let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced,
    ///                               origin(), Duration::from_secs(10)).unwrap();
    /// let c = BatchChecker::for_machine(&batch);
    /// assert_eq!(c.sends(), 0);
    /// ```
    #[must_use]
    pub fn for_machine<R: rand_core::Rng, P: polite_core::PaceSet, B: polite_core::BudgetSet>(
        batch: &polite_core::BatchMachine<R, P, B>,
    ) -> BatchChecker {
        let requests: Vec<RequestInfo> = (0..batch.len())
            .filter_map(|i| batch.request(i).copied())
            .collect();
        BatchChecker::new(batch.policy(), &requests, batch.deadline())
    }

    /// The batch's pace is a [`RateThrottle`](polite_core::RateThrottle) of
    /// `limit` per `window` that nothing else uses: check the `rate` and
    /// `cool-down` rules too.
    ///
    /// ```
    /// # use polite_testing::BatchChecker;
    /// # use polite_core::{Action, BatchPolicy, Event, Method, Outcome, RequestId, RequestInfo, SendId, SendPlan};
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let policy = BatchPolicy::default();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 2];
    /// # let deadline = t0 + Duration::from_secs(10);
    /// # let send = |item| Action::Send(SendPlan { id: SendId { item, attempt: 0 }, request: RequestId(1),
    /// #     abort_at: deadline + policy.retry.transport_cushion, long_poll: None });
    /// let mut c = BatchChecker::new(&policy, &requests, deadline).throttled(1, Duration::from_secs(1));
    /// c.output(t0, &send(0)).unwrap();
    /// assert_eq!(c.output(t0, &send(1)).unwrap_err().rule, "rate");
    /// ```
    #[must_use]
    pub fn throttled(mut self, limit: u32, window: Duration) -> BatchChecker {
        self.throttle = Some((limit, window));
        // At most `limit` sends in the window: sized once, so that checking
        // a send allocates nothing.
        self.recent = VecDeque::with_capacity((limit as usize).min(PRESIZE));
        self
    }

    /// For a streaming batch whose input never ends after `requests` (a
    /// stream waiting for its next request): such a batch can only end
    /// `Cancelled` or at its deadline, and the deadline cut its input
    /// short, so the `stop-outcome` rule expects `TimedOut` when it was not
    /// cancelled, whatever its items' outcomes.
    ///
    /// ```
    /// use polite_core::{Action, BatchPolicy, Method, Outcome, RequestId, RequestInfo};
    /// use polite_testing::BatchChecker;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let requests = [RequestInfo::new(RequestId(1), Method::Get)];
    /// let done = Outcome::Succeeded { status: 200 };
    /// let mut c = BatchChecker::new(&BatchPolicy::default(), &requests, t0 + Duration::from_secs(1))
    ///     .input_open();
    /// c.output(t0, &Action::Stop(Outcome::BatchDone { succeeded: 1, failed: 0 })).unwrap();
    /// assert_eq!(c.outcomes(&[Some(done)]).unwrap_err().rule, "stop-outcome");
    /// ```
    #[must_use]
    pub fn input_open(mut self) -> BatchChecker {
        self.input_open = true;
        self
    }

    /// The batch's pace is one [`RateThrottle`](polite_core::RateThrottle)
    /// of `limit` per `window` per key (e.g. `[RateThrottle; N]`, slot `i`
    /// for the items whose [`pace_slot`](RequestInfo::pace_slot) is `i`),
    /// each used by this batch only: check `rate` and `cool-down` per key,
    /// and `head-of-line` and `starved-key`.
    ///
    /// ```
    /// # use polite_testing::BatchChecker;
    /// # use polite_core::{Action, BatchPolicy, Event, Method, Outcome, RequestId, RequestInfo, SendId, SendPlan};
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let policy = BatchPolicy::default();
    /// # let deadline = t0 + Duration::from_secs(10);
    /// # let send = |item| Action::Send(SendPlan { id: SendId { item, attempt: 0 }, request: RequestId(1),
    /// #     abort_at: deadline + policy.retry.transport_cushion, long_poll: None });
    /// let requests: Vec<_> = (0..3)
    ///     .map(|i| RequestInfo::new(RequestId(i), Method::Get).with_pace_slot((i % 2) as u32))
    ///     .collect();
    /// let mut c = BatchChecker::new(&policy, &requests, deadline)
    ///     .throttled_per_key(1, Duration::from_secs(1));
    /// c.output(t0, &send(0)).unwrap(); // key 0
    /// // Waiting while item 1 (key 1, never sent, free) could go:
    /// c.output(t0, &Action::SleepUntil(deadline)).unwrap();
    /// assert_eq!(c.outcomes(&[None, None, None]).unwrap_err().rule, "head-of-line");
    /// c.output(t0, &send(1)).unwrap(); // key 1: its own window
    /// assert_eq!(c.output(t0, &send(2)).unwrap_err().rule, "rate"); // key 0 again
    /// ```
    #[must_use]
    pub fn throttled_per_key(mut self, limit: u32, window: Duration) -> BatchChecker {
        self.throttle = Some((limit, window));
        self.keyed = true;
        // Every key the requests name, known from the start (a key never
        // sent to and never heard of is a default `Key`, which is what a
        // missing one means), each with room for the sends of a window
        // plus the margin (`2 * limit` when the window is at least the
        // 50 ms margin; a shorter window grows it, amortised): checking a
        // step then allocates nothing.
        let room = (limit as usize).saturating_mul(2).min(PRESIZE);
        for k in 0..self.items.len() {
            let slot = self.items[k].slot;
            if let Err(at) = self.keys.binary_search_by_key(&slot, |(s, _)| *s) {
                let key = Key {
                    sent: VecDeque::with_capacity(room),
                    ..Key::default()
                };
                self.keys.insert(at, (slot, key));
            }
        }
        for k in 0..self.items.len() {
            let slot = self.items[k].slot;
            if let Ok(i) = self.keys.binary_search_by_key(&slot, |(s, _)| *s) {
                self.items[k].key = i as u32;
            }
        }
        self
    }

    /// Item `k`'s key (only when `keyed`: `throttled_per_key` knows
    /// every slot).
    #[inline]
    fn key_of(&mut self, k: usize) -> &mut Key {
        &mut self.keys[self.items[k].key as usize].1
    }

    /// Whether item `k`'s key is plainly free at `now` (see
    /// `head-of-line`; only when `keyed`).
    fn plainly_free(&self, k: usize, now: Instant) -> bool {
        let Some((limit, _)) = self.throttle else {
            return false;
        };
        let key = &self.keys[self.items[k].key as usize].1;
        // Its sends until `t + window + MARGIN` (`None`: past the end of
        // time). They are in the order sent, at instants that never go
        // back (`clamp_now`), so those already gone come first.
        let recent = key.sent.len()
            - key
                .sent
                .iter()
                .take_while(|(_, gone)| gone.is_some_and(|e| e <= now))
                .count();
        !key.tainted && key.cool_until.is_none_or(|c| c <= now) && recent < limit as usize
    }

    /// The `head-of-line` rule, after the batch chose to wait at `now`.
    fn check_head_of_line(&mut self, now: Instant) -> Result<(), Violation> {
        if !self.keyed
            || self.cancelled
            || self.stopped.is_some()
            || now >= self.deadline
            || self.in_flight >= self.policy.concurrency
        {
            return Ok(());
        }
        // Items before `first_waiting` are not waiting, and never will be
        // again (sends and outcomes are never taken back).
        let oldest = (self.first_waiting..self.outcomes.len())
            .find(|&k| self.items[k].sends == 0 && self.outcomes[k].is_none());
        self.first_waiting = oldest.unwrap_or(self.outcomes.len());
        let Some(oldest) = oldest else {
            return Ok(());
        };
        let waiting = |k: &usize| self.items[*k].sends == 0 && self.outcomes[*k].is_none();
        let reach = self.policy.concurrency.saturating_mul(LOOKAHEAD) as usize;
        let end = oldest.saturating_add(reach).min(self.outcomes.len());
        // Whether a key is plainly free does not change within this look:
        // asked once per key (for the first few keys; more are asked
        // every time).
        let mut asked: [(u32, bool); 4] = [(0, false); 4];
        let mut n_asked = 0;
        let mut free = |k: usize| {
            let slot = self.items[k].slot;
            if let Some(&(_, f)) = asked[..n_asked].iter().find(|(s, _)| *s == slot) {
                return f;
            }
            let f = self.plainly_free(k, now);
            if n_asked < asked.len() {
                asked[n_asked] = (slot, f);
                n_asked += 1;
            }
            f
        };
        if let Some(k) = (oldest..end).filter(waiting).find(|&k| free(k)) {
            return violation(
                "head-of-line",
                format!(
                    "waiting with {} in flight while item {k} of free key {} could go",
                    self.in_flight, self.items[k].slot
                ),
            );
        }
        Ok(())
    }

    /// The most sends seen in flight at once.
    ///
    /// ```
    /// # use polite_testing::BatchChecker;
    /// # use polite_core::{Action, BatchPolicy, Event, Method, Outcome, RequestId, RequestInfo, SendId, SendPlan};
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let policy = BatchPolicy::default();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 2];
    /// # let deadline = t0 + Duration::from_secs(10);
    /// # let send = |item| Action::Send(SendPlan { id: SendId { item, attempt: 0 }, request: RequestId(1),
    /// #     abort_at: deadline + policy.retry.transport_cushion, long_poll: None });
    /// let mut c = BatchChecker::new(&policy, &requests, deadline);
    /// c.output(t0, &send(0)).unwrap();
    /// c.output(t0, &send(1)).unwrap();
    /// assert_eq!(c.peak_in_flight(), 2);
    /// ```
    #[must_use]
    pub fn peak_in_flight(&self) -> u32 {
        self.peak
    }

    /// Sends seen.
    ///
    /// ```
    /// # use polite_testing::BatchChecker;
    /// # use polite_core::{Action, BatchPolicy, Event, Method, Outcome, RequestId, RequestInfo, SendId, SendPlan};
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let policy = BatchPolicy::default();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 2];
    /// # let deadline = t0 + Duration::from_secs(10);
    /// # let send = |item| Action::Send(SendPlan { id: SendId { item, attempt: 0 }, request: RequestId(1),
    /// #     abort_at: deadline + policy.retry.transport_cushion, long_poll: None });
    /// let mut c = BatchChecker::new(&policy, &requests, deadline);
    /// c.output(t0, &send(0)).unwrap();
    /// assert_eq!(c.sends(), 1);
    /// ```
    #[must_use]
    pub fn sends(&self) -> u32 {
        self.total
    }

    /// The batch's outcome, once it stopped.
    ///
    /// ```
    /// # use polite_testing::BatchChecker;
    /// # use polite_core::{Action, BatchPolicy, Event, Method, Outcome, RequestId, RequestInfo, SendId, SendPlan};
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let policy = BatchPolicy::default();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 2];
    /// # let deadline = t0 + Duration::from_secs(10);
    /// # let send = |item| Action::Send(SendPlan { id: SendId { item, attempt: 0 }, request: RequestId(1),
    /// #     abort_at: deadline + policy.retry.transport_cushion, long_poll: None });
    /// let mut c = BatchChecker::new(&policy, &requests, deadline);
    /// c.input(t0, &Event::Cancel);
    /// c.output(t0, &Action::Stop(Outcome::Cancelled)).unwrap();
    /// assert_eq!(c.outcome(), Some(Outcome::Cancelled));
    /// ```
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        self.stopped
    }

    fn clamp_now(&mut self, now: Instant) -> Instant {
        let now = self.now.map_or(now, |n| n.max(now));
        self.now = Some(now);
        now
    }

    /// Records an input fed to the batch at `now`.
    ///
    /// ```
    /// # use polite_testing::BatchChecker;
    /// # use polite_core::{Action, BatchPolicy, Event, Method, Outcome, RequestId, RequestInfo, SendId, SendPlan};
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let policy = BatchPolicy::default();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 2];
    /// # let deadline = t0 + Duration::from_secs(10);
    /// # let send = |item| Action::Send(SendPlan { id: SendId { item, attempt: 0 }, request: RequestId(1),
    /// #     abort_at: deadline + policy.retry.transport_cushion, long_poll: None });
    /// let mut c = BatchChecker::new(&policy, &requests, deadline);
    /// c.input(t0, &Event::Cancel);
    /// assert_eq!(c.output(t0, &send(0)).unwrap_err().rule, "cancel");
    /// ```
    pub fn input(&mut self, now: Instant, event: &Event<'_>) {
        let now = self.clamp_now(now);
        if self.stopped.is_some() {
            return;
        }
        let retry = &self.policy.retry;
        let id = match event {
            Event::Cancel => {
                self.cancelled = true;
                return;
            }
            Event::Tick => return,
            Event::Response(r) => {
                let item = r.id.item as usize;
                let rate_limited = oracle::class_of(retry, r) == Some(RetryClass::RateLimited);
                if self.keyed
                    && item < self.items.len()
                    && (rate_limited || !r.rate_limit.is_empty() || r.retry_after_ms.is_some())
                {
                    self.keys[self.items[item].key as usize].1.tainted = true;
                }
                if let Some(v) = r.retry_after
                    && let Some(d) = server_time::asked(v, r.date, r.wall_clock)
                {
                    if self.throttle.is_some()
                        && rate_limited
                        && let Some(until) =
                            now.checked_add(d.clamp(retry.retry_after.min, retry.retry_after.max))
                    {
                        let cool = if self.keyed {
                            // The answered item's key only (an unknown item: none).
                            let key = self.items.get(item).map(|it| it.key as usize);
                            key.map(|i| &mut self.keys[i].1.cool_until)
                        } else {
                            Some(&mut self.cool_until)
                        };
                        if let Some(c) = cool {
                            *c = Some(c.map_or(until, |c| c.max(until)));
                        }
                    }
                    if let Some(it) = self.items.get_mut(item)
                        && it.flying == Some(r.id)
                    {
                        it.not_before = now.checked_add(d.max(retry.retry_after.min));
                        it.over_cap = d > retry.retry_after.auto_wait_cap;
                    }
                }
                (r.id, oracle::class_of(retry, r))
            }
            Event::TransportError(id, _) => (*id, Some(RetryClass::Transport)),
            other => unknown(other),
        };
        let (id, class) = id;
        let item = id.item as usize;
        if let Some(it) = self.items.get_mut(item)
            && it.flying == Some(id)
        {
            it.last_class = class;
            it.flying = None;
            self.in_flight -= 1;
            if now >= self.deadline && !self.cancelled {
                it.late = true;
                // `late-success` applies to an outcome seen before, too.
                self.recheck = true;
            }
        }
    }

    /// Checks an action the batch answered at `now`.
    ///
    /// # Errors
    ///
    /// The [`Violation`] it breaks.
    ///
    /// ```
    /// # use polite_testing::BatchChecker;
    /// # use polite_core::{Action, BatchPolicy, Event, Method, Outcome, RequestId, RequestInfo, SendId, SendPlan};
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let policy = BatchPolicy::default();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 2];
    /// # let deadline = t0 + Duration::from_secs(10);
    /// # let send = |item| Action::Send(SendPlan { id: SendId { item, attempt: 0 }, request: RequestId(1),
    /// #     abort_at: deadline + policy.retry.transport_cushion, long_poll: None });
    /// let mut c = BatchChecker::new(&policy, &requests, deadline);
    /// c.output(t0, &send(0)).unwrap();
    /// assert_eq!(c.output(t0, &send(0)).unwrap_err().rule, "send-while-in-flight");
    /// ```
    pub fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        let now = self.clamp_now(now);
        if let Some(o) = self.stopped {
            return match action {
                Action::Stop(p) if *p == o => Ok(()),
                Action::Send(_) => violation("send-after-stop", format!("{action:?} after {o:?}")),
                _ => violation("stop-sticky", format!("{action:?} after {o:?}")),
            };
        }
        if self.cancelled && *action != Action::Stop(Outcome::Cancelled) {
            return violation("cancel", format!("{action:?} after Cancel"));
        }
        self.sleeping = match action {
            Action::SleepUntil(_) => Some(now),
            _ => None,
        };
        match *action {
            Action::Stop(o) => {
                self.stopped = Some(o);
                Ok(())
            }
            Action::SleepUntil(t) if t > self.deadline => violation(
                "sleep-past-deadline",
                format!("SleepUntil past the deadline by {:?}", t - self.deadline),
            ),
            Action::SleepUntil(_) => Ok(()),
            Action::Send(plan) => {
                let item = plan.id.item as usize;
                let retry = &self.policy.retry;
                if now >= self.deadline {
                    return violation("send-after-deadline", format!("{plan:?}"));
                }
                if Some(plan.abort_at) != self.abort_at {
                    return violation("abort-at", format!("{plan:?}"));
                }
                if item >= self.items.len() {
                    return violation("item-range", format!("{plan:?}"));
                }
                if let Some(f) = self.items[item].flying {
                    return violation("send-while-in-flight", format!("{plan:?} while {f} flies"));
                }
                if self.in_flight >= self.policy.concurrency {
                    return violation(
                        "concurrency",
                        format!("{plan:?} with {} in flight", self.in_flight),
                    );
                }
                if self.items[item]
                    .last_attempt
                    .is_some_and(|a| a >= plan.id.attempt)
                {
                    return violation("attempt-order", format!("{plan:?}"));
                }
                if self.items[item].sends >= 1 && !self.items[item].replayable {
                    return violation("not-replayable", format!("second send {plan:?}"));
                }
                if self.items[item].sends > 0 {
                    let Some(class) = self.items[item].last_class else {
                        return violation(
                            "retry-budget",
                            format!("{plan:?}: a resend without a retried failure"),
                        );
                    };
                    let i = class_index(class);
                    let budget = oracle::budget(retry, class);
                    let spent = self.items[item].retries[i] >= budget;
                    let restart = match class {
                        RetryClass::RateLimited => spent || self.items[item].over_cap,
                        _ => !spent && self.items[item].over_cap,
                    };
                    if restart {
                        self.items[item].restarts += 1;
                        if self.items[item].restarts > self.policy.max_restarts {
                            return violation(
                                "restarts",
                                format!("item {item}: restart {}", self.items[item].restarts),
                            );
                        }
                    } else {
                        self.items[item].retries[i] += 1;
                        if self.items[item].retries[i] > budget {
                            return violation(
                                "retry-budget",
                                format!(
                                    "item {item}: {} {class} retries, the policy allows \
                                     {budget}: {plan:?} at {now:?}",
                                    self.items[item].retries[i]
                                ),
                            );
                        }
                    }
                }
                if let Some(nb) = self.items[item].not_before
                    && now < nb
                {
                    return violation(
                        "retry-after",
                        format!("item {item} sent {:?} before the server's time", nb - now),
                    );
                }
                if let Some((limit, window)) = self.throttle
                    && self.keyed
                {
                    let slot = self.items[item].slot;
                    let key = self.key_of(item);
                    if let Some(c) = key.cool_until
                        && now < c
                    {
                        return violation(
                            "cool-down",
                            format!("{plan:?} {:?} before its key's cool-down ends", c - now),
                        );
                    }
                    // Each send as `(t + window, t + window + MARGIN)`.
                    while key
                        .sent
                        .front()
                        .is_some_and(|(_, gone)| gone.is_some_and(|e| e <= now))
                    {
                        key.sent.pop_front();
                    }
                    // In the order sent, at instants that never go back
                    // (`clamp_now`): the sends out of the window come first.
                    let in_window = key.sent.len()
                        - key
                            .sent
                            .iter()
                            .take_while(|(end, _)| end.is_some_and(|e| e <= now))
                            .count();
                    if in_window >= limit as usize {
                        return violation(
                            "rate",
                            format!(
                                "{} sends of key {} within one window of {window:?}",
                                limit + 1,
                                slot
                            ),
                        );
                    }
                    let end = now.checked_add(window);
                    key.sent
                        .push_back((end, end.and_then(|e| e.checked_add(MARGIN))));
                } else if let Some((limit, window)) = self.throttle {
                    if let Some(c) = self.cool_until
                        && now < c
                    {
                        return violation(
                            "cool-down",
                            format!("{plan:?} {:?} before the cool-down ends", c - now),
                        );
                    }
                    while self
                        .recent
                        .front()
                        .is_some_and(|t| t.checked_add(window).is_some_and(|e| e <= now))
                    {
                        self.recent.pop_front();
                    }
                    if self.recent.len() >= limit as usize {
                        return violation(
                            "rate",
                            format!("{} sends within one window of {window:?}", limit + 1),
                        );
                    }
                    self.recent.push_back(now);
                }
                self.items[item].flying = Some(plan.id);
                self.in_flight += 1;
                self.peak = self.peak.max(self.in_flight);
                self.items[item].sends += 1;
                self.total += 1;
                self.items[item].last_attempt = Some(plan.id.attempt);
                self.items[item].not_before = None;
                self.items[item].last_class = None;
                self.items[item].over_cap = false;
                Ok(())
            }
        }
    }

    /// Checks the batch's item outcomes (`BatchMachine::outcomes()`); call
    /// it after any step, and once after `Stop`.
    ///
    /// # Errors
    ///
    /// The [`Violation`] it breaks.
    ///
    /// ```
    /// # use polite_testing::BatchChecker;
    /// # use polite_core::{Action, BatchPolicy, Event, Method, Outcome, RequestId, RequestInfo, SendId, SendPlan};
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let policy = BatchPolicy::default();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 2];
    /// # let deadline = t0 + Duration::from_secs(10);
    /// # let send = |item| Action::Send(SendPlan { id: SendId { item, attempt: 0 }, request: RequestId(1),
    /// #     abort_at: deadline + policy.retry.transport_cushion, long_poll: None });
    /// let mut c = BatchChecker::new(&policy, &requests, deadline);
    /// let done = Some(Outcome::Succeeded { status: 200 });
    /// c.outcomes(&[done, None]).unwrap();
    /// assert_eq!(c.outcomes(&[None, None]).unwrap_err().rule, "outcome-changed");
    /// ```
    pub fn outcomes(&mut self, items: &[Option<Outcome>]) -> Result<(), Violation> {
        if items.len() != self.outcomes.len() {
            return violation(
                "item-unfinished",
                format!("{} outcomes for {} items", items.len(), self.outcomes.len()),
            );
        }
        self.recheck = false;
        // The first item newly starved while its key was plainly free
        // (`starved-key`, reported after the per-item rules, as before):
        // found in the same pass, without collecting the starved items.
        let mut starved_free = None;
        for (k, now) in items.iter().enumerate() {
            // Seen before and unchanged, neither starved nor answered late:
            // no rule of `item_outcome` can apply (checked inline, as it is
            // most items once the batch is under way).
            if let (Some(seen), Some(o)) = (&self.outcomes[k], now)
                && seen == o
                && !self.items[k].late
                && !matches!(o, Outcome::Starved { .. })
            {
                continue;
            }
            self.item_outcome(k, now, &mut starved_free)?;
        }
        self.after_items(items, starved_free)
    }

    /// [`outcomes`](Self::outcomes), told by the batch how many items have
    /// ended so far and which ended last
    /// ([`BatchMachine::ended_count`](polite_core::BatchMachine::ended_count)
    /// and [`last_ended`](polite_core::BatchMachine::last_ended)): when
    /// that is as many as the checker has seen, it skips the per-item
    /// rules (no outcome is new); one more, it looks at item `last_ended`
    /// only; otherwise at every item, as `outcomes` does. The batch's
    /// rules (`starved-key`, `head-of-line`, and at `Stop` every rule on
    /// every item, `outcome-changed` included) are checked as by
    /// `outcomes`, so a batch whose count is right gets the same verdict,
    /// and the same first violation, at a cost that does not grow with
    /// its size. What it trusts: that an outcome set without counting
    /// does not stay unseen until `Stop` (it is seen by the next full look:
    /// a count that does not match, a late answer, or the `Stop`). After
    /// `Stop`, when a full look has passed, a look at the very same
    /// outcomes (compared item by item: `outcome-changed`) has that look's
    /// verdict: nothing else the rules read changes after `Stop`.
    ///
    /// # Errors
    ///
    /// The [`Violation`] it breaks.
    ///
    /// ```
    /// # use polite_testing::BatchChecker;
    /// # use polite_core::{Action, BatchPolicy, Outcome, Method, RequestId, RequestInfo};
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let policy = BatchPolicy::default();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 2];
    /// # let deadline = t0 + Duration::from_secs(10);
    /// let mut c = BatchChecker::new(&policy, &requests, deadline);
    /// let done = Some(Outcome::Succeeded { status: 200 });
    /// c.outcomes_since(&[None, done], 1, Some(1)).unwrap();
    /// // Item 0 ends without being counted: not looked at before the Stop...
    /// c.outcomes_since(&[done, Some(Outcome::Cancelled)], 1, Some(1)).unwrap();
    /// // ... where every item is (item 1 changed).
    /// c.output(t0, &Action::Stop(Outcome::BatchDone { succeeded: 2, failed: 0 })).unwrap();
    /// let err = c.outcomes_since(&[done, Some(Outcome::Cancelled)], 2, Some(0)).unwrap_err();
    /// assert_eq!(err.rule, "outcome-changed");
    ///
    /// // After a look at `Stop` that passed, the same outcomes pass again
    /// // and any change is still caught.
    /// let mut c = BatchChecker::new(&policy, &requests, deadline);
    /// c.output(t0, &Action::Stop(Outcome::BatchDone { succeeded: 2, failed: 0 })).unwrap();
    /// c.outcomes_since(&[done, done], 2, Some(1)).unwrap();
    /// c.outcomes_since(&[done, done], 2, Some(1)).unwrap();
    /// let err = c.outcomes_since(&[done, None], 2, Some(1)).unwrap_err();
    /// assert_eq!(err.rule, "outcome-changed");
    /// ```
    pub fn outcomes_since(
        &mut self,
        items: &[Option<Outcome>],
        ended: u32,
        last: Option<u32>,
    ) -> Result<(), Violation> {
        if self.stopped.is_some() {
            // After `Stop` nothing the rules read changes but the outcomes
            // (`input` records nothing more, `output` only compares, no
            // `SleepUntil` is pending): a look at the same outcomes as the
            // last full one, which passed, has its verdict. Comparing them
            // is `outcome-changed` on every item; any change, the full
            // look again.
            if self.settled && !self.recheck && items == self.outcomes.as_slice() {
                return Ok(());
            }
            self.outcomes(items)?;
            self.settled = true;
            return Ok(());
        }
        if items.len() != self.outcomes.len() || self.recheck {
            return self.outcomes(items);
        }
        let mut starved_free = None;
        if ended == self.seen {
            // No outcome is new.
        } else if let Some(k) = last
            && ended == self.seen.wrapping_add(1)
            && let Some(now) = items.get(k as usize)
        {
            self.item_outcome(k as usize, now, &mut starved_free)?;
        } else {
            return self.outcomes(items);
        }
        self.after_items(items, starved_free)
    }

    /// The rules of [`outcomes`](Self::outcomes) on item `k`, whose
    /// outcome is `now`.
    #[inline]
    fn item_outcome(
        &mut self,
        k: usize,
        now: &Option<Outcome>,
        starved_free: &mut Option<usize>,
    ) -> Result<(), Violation> {
        let seen = self.outcomes[k];
        if let Some(seen) = seen {
            // Set before: it must not change (and stays as it is; the
            // rules on the outcome itself are checked below again).
            if Some(seen) != *now {
                return violation(
                    "outcome-changed",
                    format!("item {k}: {:?} then {now:?}", Some(seen)),
                );
            }
        } else if now.is_none() {
            // Still running: every rule below is about an outcome.
            // (Called after every step, this is most items most of
            // the time.)
            return Ok(());
        } else {
            if self.keyed
                && starved_free.is_none()
                && matches!(now, Some(Outcome::Starved { .. }))
                && self.now.is_some_and(|at| self.plainly_free(k, at))
            {
                *starved_free = Some(k);
            }
            self.outcomes[k] = *now;
            self.seen += 1;
        }
        if let Some(Outcome::Starved { until, .. }) = now
            && *until < self.deadline
        {
            return violation(
                "starved-early",
                format!(
                    "item {k} starved although the pace could send at {until:?}, before the deadline"
                ),
            );
        }
        if self.items[k].late
            && let Some(o) = now
            && !matches!(o, Outcome::TimedOut { .. })
        {
            return violation(
                "late-success",
                format!("item {k} answered at/after the deadline ended {o:?}"),
            );
        }
        Ok(())
    }

    /// The rules of [`outcomes`](Self::outcomes) after the per-item ones.
    fn after_items(
        &mut self,
        items: &[Option<Outcome>],
        starved_free: Option<usize>,
    ) -> Result<(), Violation> {
        if let Some(k) = starved_free {
            return violation(
                "starved-key",
                format!(
                    "item {k} starved while its key {} was free",
                    self.items[k].slot
                ),
            );
        }
        if let Some(at) = self.sleeping {
            self.check_head_of_line(at)?;
        }
        let Some(stop) = self.stopped else {
            return Ok(());
        };
        if let Some(k) = items.iter().position(Option::is_none) {
            return violation(
                "item-unfinished",
                format!("item {k} has no outcome at {stop:?}"),
            );
        }
        let expected = if self.cancelled {
            Outcome::Cancelled
        } else if self.input_open
            || items
                .iter()
                .flatten()
                .any(|o| matches!(o, Outcome::TimedOut { .. }))
        {
            Outcome::TimedOut { needed: None }
        } else if let Some(o) = items
            .iter()
            .flatten()
            .find(|o| matches!(o, Outcome::Starved { .. }))
        {
            // Starved by the pace (SPEC §4.1): the batch says so, with the
            // first starved item's facts.
            *o
        } else {
            let succeeded = items.iter().flatten().filter(|o| o.is_success()).count() as u32;
            Outcome::BatchDone {
                succeeded,
                failed: items.len() as u32 - succeeded,
            }
        };
        if stop != expected {
            return violation("stop-outcome", format!("{stop:?}, expected {expected:?}"));
        }
        Ok(())
    }
}
