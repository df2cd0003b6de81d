//! [`BatchMachine`]: many logical requests under one deadline, a
//! concurrency limit and a [`Pace`](crate::Pace) — or one pace per key
//! ([`PaceSet`]: per origin, per API key; SPEC §4.2).
//!
//! The files: [`policy`] holds what a caller configures
//! ([`BatchPolicy`]); this one the machine, its inputs and outputs and what
//! a caller reads of it; [`items`] the bookkeeping of its items (answers,
//! backoffs, restarts, cancel, the deadline, starving, the next send);
//! [`keyed`] which item sends next when the items have paces of their own;
//! [`budgets`] the retry budgets per key ([`BudgetSet`]).

mod budgets;
mod items;
mod keyed;
mod policy;

pub use budgets::BudgetSet;
pub use policy::BatchPolicy;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand_core::Rng;

use crate::budget::NoBudget;
use crate::decide::deadline_after;
use crate::input::{Event, RetryClass};
use crate::machine::Machine;
use crate::outcome::Outcome;
use crate::output::Action;
use crate::pace::{PaceSet, SlotPace, cool_down_after, observe_rate_limit};
use crate::policy::PolicyError;
use crate::ratelimit::RateLimitHeaders;
use crate::record::AttemptRecord;
use crate::request::RequestInfo;
use crate::retry::RetryState;

/// What the batch waits for on an item's behalf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// Nothing: the item is fresh, ready, in flight or ended.
    Nothing,
    /// The item's backoff: it may send again at this instant.
    Retry(Instant),
    /// The item ended `ended` (`RateLimited`); the batch restarts it at
    /// this instant. If the batch ends first, `ended` is its outcome.
    Restart { at: Instant, ended: Outcome },
}

impl Item {
    fn new(
        policy: &BatchPolicy,
        request: RequestInfo,
        k: u32,
        now: Instant,
        deadline: Instant,
    ) -> Item {
        Item {
            index: k,
            state: RetryState::new(&policy.retry, request, k, now, deadline),
            restarts: 0,
            wait: Wait::Nothing,
            sent_at: now,
            done: None,
            slot: request.pace_slot,
            started: false,
        }
    }
}

#[derive(Clone, Debug)]
struct Item {
    /// Its index in the input (`SendId::item`).
    index: u32,
    state: RetryState,
    restarts: u32,
    wait: Wait,
    /// When the pace granted its latest send (for [`Pace::on_answer`](crate::Pace::on_answer)).
    sent_at: Instant,
    /// How it ended, once it has.
    done: Option<Outcome>,
    /// Its request's pace slot (and budget slot).
    slot: u32,
    /// Keyed batches: it has been sent, or ended without a send.
    started: bool,
}

/// How many different pace slots `requests` name: a bit mask when every
/// slot is below 64 (the usual few keys: no allocation, no sort), else
/// sorted and deduplicated.
fn distinct_slots(requests: &[RequestInfo]) -> usize {
    let mut low = 0u64;
    let mut high = false;
    for r in requests {
        low |= 1u64.checked_shl(r.pace_slot).unwrap_or(0);
        high |= r.pace_slot >= u64::BITS;
    }
    if !high {
        return low.count_ones() as usize;
    }
    let mut slots: Vec<u32> = requests.iter().map(|r| r.pace_slot).collect();
    slots.sort_unstable();
    slots.dedup();
    slots.len()
}

/// Keyed batches: a slot's pace refused until `until` (by `by`); `stale`
/// once an answer may have changed the pace (ask again before trusting it).
#[derive(Clone, Copy, Debug)]
struct Refusal {
    slot: u32,
    until: Instant,
    by: crate::pace::PaceLimit,
    stale: bool,
}

/// N logical requests (e.g. "start 100 test runs") sent under one deadline
/// for the whole batch, at most `concurrency` at once, every attempt (first
/// sends and retries) passing its key's pace: one [`Pace`](crate::Pace) for all,
/// or a [`PaceSet`] addressed by each request's
/// [`pace_slot`](RequestInfo::pace_slot).
///
/// **One pace per key** (SPEC §4.2). With a [`PaceSet`] that is not a
/// single pace (e.g. `[RateThrottle; 2]`, or a client's paces per origin),
/// each item asks the pace of its own slot — for every send, retries and
/// restarts included — and everything an answer says goes to the answered
/// item's slot only: a `Retry-After` cool-down, the shared slow-down after
/// a bare rate-limited answer, a learnt `RateLimit` quota or pause, the
/// adaptive rate. An item whose key's pace refuses waits while the items
/// of other keys go (no head-of-line blocking across keys), within a
/// lookahead of [`STREAM_WINDOW`](Self::STREAM_WINDOW) × `concurrency`
/// items from the oldest one not yet started (memory stays bounded: a key
/// that holds that many items back holds the batch). A key whose pace
/// cannot grant before the deadline ends its own waiting items
/// `Starved { by }` with its own limit; the other keys go on. Retries draw
/// from the item's key's budget when the budget is a [`BudgetSet`] such as
/// `Vec<RetryBucket>`. With a single [`Pace`](crate::Pace) every slot is that pace and
/// items go in input order, exactly as without keys.
///
/// Each item is a logical request with the retry rules of SPEC §2 (the
/// same code as [`RetryMachine`](crate::RetryMachine)); its sends carry
/// `SendPlan::id.item` = its index in the input.
///
/// **Inputs**: [`handle`](Self::handle)`(now, event)`; answers name their
/// item by `SendId::item`. **Outputs**: [`poll_action`](Self::poll_action):
///
/// * `Send(plan)`: several in a row when several items may go; ask again.
/// * `SleepUntil(t)`: nothing due before `t` — the next backoff or restart,
///   the instant the pace grants, or the deadline — other than answers to
///   the sends in flight. `t` is never after the deadline.
/// * `Stop(outcome)`: every item has ended (see below); sticky.
///
/// **Outcomes.** Every item ends with exactly one outcome, in
/// [`outcomes`](Self::outcomes) in input order. The batch's own outcome:
///
/// * `Cancelled` when the caller cancelled (items not yet ended end
///   `Cancelled`; nothing promises that requests in flight did not reach
///   the server);
/// * `TimedOut { needed: None }` when any item ended `TimedOut`: the
///   deadline came while it was unfinished, or its next permitted send
///   (backoff or `Retry-After`) would have been at or after the deadline;
///   and when the deadline came before a streaming batch's input ended
///   ([`close_items`](Machine::close_items)), items in progress or not;
/// * otherwise the first [`Outcome::Starved`] item's outcome when the pace
///   could not grant a send before the deadline: the items waiting for it
///   stop at once, `Starved { until, by }` naming the pace's limit
///   ([`Pace::refusal`](crate::Pace::refusal)), instead of sleeping for nothing;
/// * otherwise [`Outcome::BatchDone`]`{ succeeded, failed }`.
///
/// **Rate-limited items are retried by the batch** (SPEC §4), within the
/// same deadline: an item that ends `RateLimited { retry_at }` is restarted
/// at `retry_at` (or, without a server time, after `policy.retry.backoff.cap`),
/// through the pace like every send, if that instant is before the deadline,
/// at most `retry.retry_after.max` away, and the item has been restarted
/// fewer than `max_restarts` times. A restart **continues the same logical
/// request**: its per-class retry counters and attempt numbers carry over,
/// so budgets are not multiplied — after its 429 budget is spent, each
/// restart adds exactly one send. An item sends at most
/// `1 + rate_limited + server_error + transport + max_restarts` times.
///
/// **Shared cool-down** (SPEC §4.1): a rate-limited answer (by the
/// policy's class, or the caller's classifier's) with a valid
/// `Retry-After` calls [`Pace::cool_down`](crate::Pace::cool_down) (delay clamped to
/// `retry.retry_after` `min..=max`); without one, until the item's own
/// computed backoff ends — so the other items, and every other machine
/// sharing the pace, wait too. Every answered attempt also goes to
/// [`Pace::on_answer`](crate::Pace::on_answer) (an [adaptive](crate::RateThrottle::adaptive) pace
/// slows down on rate-limited answers and speeds up on the rest).
///
/// **Server-informed pacing**: every answer's rate-limit headers
/// (`RateLimit`, `RateLimit-Policy`; `X-RateLimit-*` when enabled with
/// [`rate_limit_headers`](Self::rate_limit_headers)) go to
/// [`Pace::observe`](crate::Pace::observe). With a [`RateThrottle::learning`](crate::RateThrottle::learning)
/// pace, a batch that was never told the quota paces itself by the one the
/// server advertises from its first answers on.
///
/// **Shared retry budget** (optional, [`with_budget`](Self::with_budget)):
/// every retry of every item — and every batch restart, at the
/// rate-limited cost — first withdraws from the budget; a refused retry
/// ends the item `RetryBudgetExhausted`, a refused restart leaves it
/// `RateLimited`.
///
/// **Invariants** (property-tested with `polite_testing::BatchChecker`):
/// at most `concurrency` sends in flight; no sleep past the deadline and no send at or after it;
/// every send carries `abort_at = deadline + cushion`; every item ends
/// exactly once; `Stop` is sticky; after `Cancel` the next action is
/// `Stop(Cancelled)`.
///
/// Memory is allocated at construction (one state per item); `handle` and
/// `poll_action` do not allocate.
///
/// ```
/// use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RateThrottle,
///                   RequestId, RequestInfo, Response};
/// use polite_core::SplitMix64;
/// use std::time::{Duration, Instant, UNIX_EPOCH};
///
/// let t0 = Instant::now();
/// let requests = (0..3).map(|i| RequestInfo::new(RequestId(i), Method::Get)).collect();
/// let policy = BatchPolicy { concurrency: 2, ..BatchPolicy::default() };
/// let throttle = RateThrottle::new(2, Duration::from_secs(1)).unwrap();
/// let mut batch = BatchMachine::new(policy, requests, SplitMix64::new(1), throttle, t0,
///                                   Duration::from_secs(30)).unwrap();
///
/// let Action::Send(a) = batch.poll_action() else { unreachable!() };
/// let Action::Send(b) = batch.poll_action() else { unreachable!() };
/// assert_eq!((a.id.item, b.id.item), (0, 1));
/// // Two in flight: wait for an answer (or the deadline).
/// assert_eq!(batch.poll_action(), Action::SleepUntil(t0 + Duration::from_secs(30)));
///
/// let t1 = t0 + Duration::from_millis(20);
/// batch.handle(t1, Event::Response(Response::new(a.id, 200, UNIX_EPOCH)));
/// // A slot is free, but the throttle allows 2 per second: wait (+ 50 ms margin).
/// assert_eq!(batch.poll_action(), Action::SleepUntil(t0 + Duration::from_millis(1050)));
/// ```
/// Cloned, it forks: the clone runs on its own from the same state (the
/// exhaustive explorer branches this way); a shared pace (`Arc<Mutex<_>>`)
/// stays shared.
#[derive(Clone, Debug)]
pub struct BatchMachine<R, P, B = NoBudget> {
    policy: BatchPolicy,
    rng: R,
    pace: P,
    budget: B,
    rate_limit: RateLimitHeaders,
    /// The items held, in input order (by [`Item::index`]): every item of
    /// a batch built from a list; for a streaming batch, only those not yet
    /// ended (an item is released where it ends, so an ended item costs
    /// nothing, wherever it lies). Looked up by index through
    /// [`at`](Self::at), [`at_mut`](Self::at_mut) and
    /// [`window_item`](Self::window_item) only.
    items: VecDeque<Item>,
    /// Items known so far (pushed, for a streaming batch).
    len: u32,
    /// Every item's outcome, for a batch built from a list (empty when
    /// streaming: ended items are handed out through `take_ended`).
    outcomes: Vec<Option<Outcome>>,
    /// Streaming: items come through `push_item` and leave through
    /// `take_ended`; `closed` once no more will come.
    streaming: bool,
    closed: bool,
    ended_out: VecDeque<(u32, Outcome)>,
    /// For the batch's summary: successes, whether any item timed out, and
    /// the first item (by index) that starved.
    succeeded: u32,
    timed_out: bool,
    starved: Option<(u32, Outcome)>,
    /// Started items ready to send (after a backoff or a restart).
    ready: VecDeque<u32>,
    /// Items at or after this index have never been sent.
    fresh: u32,
    in_flight: u32,
    ended: u32,
    /// The item that ended last (see [`last_ended`](Self::last_ended)).
    last_ended: Option<u32>,
    deadline: Instant,
    now: Instant,
    /// The earliest `Wait::Retry`/`Wait::Restart` instant.
    next_wake: Option<Instant>,
    /// The pace refused until this instant (a single pace).
    refused_until: Option<Instant>,
    /// Whether the pace is one pace for every item ([`PaceSet::is_single`]):
    /// then the batch schedules as one key, in input order.
    single: bool,
    /// Keyed batches: the latest refusal of each slot that has one, at
    /// most one entry per slot of the items held (capacity reserved at
    /// construction).
    refused: Vec<Refusal>,
    /// Keyed batches: one past the highest item started (items start out
    /// of order when their keys' paces differ).
    reach: u32,
    /// Items held and never started (what a streaming keyed batch waits
    /// to start when no key is refused), kept as items come and start.
    unstarted: u32,
    cancelled: bool,
    stopped: Option<Outcome>,
    record: Option<AttemptRecord>,
    /// The records of the attempts in flight when the batch ended (a
    /// cancel, the deadline), dropped unanswered: handed out after
    /// `record`, in item order (kept reversed). Empty (no allocation)
    /// until then.
    dropped: Vec<AttemptRecord>,
}

impl<R: Rng, P: PaceSet> BatchMachine<R, P> {
    /// A batch of `requests` with a budget of `timeout` from `now` for the
    /// whole batch (deadline `now + timeout`, fixed before the first send).
    ///
    /// # Errors
    ///
    /// [`PolicyError`] when the policy makes no sense, or naming `requests`
    /// when there are more than `u32::MAX` of them.
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// assert_eq!(batch.deadline(), t0 + Duration::from_secs(10));
    /// ```
    pub fn new(
        policy: BatchPolicy,
        requests: Vec<RequestInfo>,
        rng: R,
        pace: P,
        now: Instant,
        timeout: Duration,
    ) -> Result<Self, PolicyError> {
        Self::with_deadline(
            policy,
            requests,
            rng,
            pace,
            now,
            deadline_after(now, timeout),
        )
    }

    /// A batch that spends an existing deadline (nesting: never a fresh
    /// timeout).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let deadline = t0 + Duration::from_secs(10); // e.g. an outer operation's
    /// let batch = BatchMachine::with_deadline(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced,
    ///                                         t0, deadline).unwrap();
    /// assert_eq!(batch.deadline(), deadline);
    /// ```
    pub fn with_deadline(
        policy: BatchPolicy,
        requests: Vec<RequestInfo>,
        rng: R,
        pace: P,
        now: Instant,
        deadline: Instant,
    ) -> Result<Self, PolicyError> {
        policy.validate()?;
        let n = u32::try_from(requests.len()).map_err(|_| PolicyError::Invalid {
            field: "requests",
            reason: "more than u32::MAX items",
        })?;
        let single = pace.is_single();
        // A keyed batch keeps one refusal per slot: room for every slot.
        let slots = if single { 0 } else { distinct_slots(&requests) };
        let items: VecDeque<Item> = requests
            .into_iter()
            .zip(0..n)
            .map(|(request, k)| Item::new(&policy, request, k, now, deadline))
            .collect();
        Ok(BatchMachine {
            policy,
            rng,
            pace,
            budget: NoBudget,
            rate_limit: RateLimitHeaders::default(),
            outcomes: vec![None; items.len()],
            ready: VecDeque::with_capacity(items.len()),
            items,
            len: n,
            streaming: false,
            closed: true,
            ended_out: VecDeque::new(),
            succeeded: 0,
            timed_out: false,
            starved: None,
            fresh: 0,
            in_flight: 0,
            ended: 0,
            last_ended: None,
            deadline,
            now,
            next_wake: None,
            refused_until: None,
            single,
            refused: Vec::with_capacity(slots),
            reach: 0,
            unstarted: n,
            cancelled: false,
            stopped: None,
            record: None,
            dropped: Vec::new(),
        })
    }

    /// A batch that takes its items as it goes (SPEC §4.4): the drive loop
    /// pushes each request ([`Machine::push_item`]) while the machine
    /// [wants](Machine::wants_items) more, says when there are no more
    /// ([`Machine::close_items`]), and takes each item's outcome as it ends
    /// ([`Machine::take_ended`]). The machine holds only the items not yet
    /// ended (an item is released as it ends, its outcome waiting in
    /// `take_ended`): at most [`BatchMachine::STREAM_WINDOW`] ×
    /// `concurrency` of them (about 250 bytes each), whatever the batch's
    /// size and however far it got past an item that hangs. An item whose
    /// attempt is never answered holds its own place (and its concurrency
    /// slot) until the deadline, not the items after it: they go on being
    /// pulled and sent while slots are free. Nor does it pull past a
    /// window from the oldest item not yet started (the lookahead of a
    /// keyed batch). [`outcomes`](Self::outcomes) stays empty. Items never
    /// pushed (the batch was cancelled, timed out or starved first) have
    /// no outcome here.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Invalid`] for a policy that makes no sense.
    ///
    /// ```
    /// use polite_core::{Action, BatchMachine, BatchPolicy, Machine, Method, RequestId, RequestInfo};
    /// use polite_core::pace::Unpaced;
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let policy = BatchPolicy { concurrency: 2, ..BatchPolicy::default() };
    /// let mut batch = BatchMachine::streaming(policy, SplitMix64::new(1), Unpaced, t0,
    ///                                         Duration::from_secs(10)).unwrap();
    /// // As many as could start now (the concurrency); at most 4 × concurrency
    /// // held (not yet ended).
    /// assert_eq!(batch.wants_items(), 2);
    /// batch.push_item(RequestInfo::new(RequestId(1), Method::Get));
    /// assert_eq!(batch.wants_items(), 1);
    /// assert!(matches!(batch.poll_action(), Action::Send(p) if p.id.item == 0));
    /// batch.close_items();
    /// assert_eq!(batch.wants_items(), 0);
    /// ```
    pub fn streaming(
        policy: BatchPolicy,
        rng: R,
        pace: P,
        now: Instant,
        timeout: Duration,
    ) -> Result<Self, PolicyError> {
        let mut batch = Self::with_deadline(
            policy,
            Vec::new(),
            rng,
            pace,
            now,
            deadline_after(now, timeout),
        )?;
        batch.streaming = true;
        batch.closed = false;
        batch.outcomes = Vec::new();
        // Room for a window of items held, ready and refused, reserved once.
        let held = batch.policy.concurrency.saturating_mul(Self::STREAM_WINDOW) as usize;
        batch.items = VecDeque::with_capacity(held);
        batch.ready = VecDeque::with_capacity(held);
        if !batch.single {
            // At most one refusal per slot of the items held.
            batch.refused = Vec::with_capacity(held);
        }
        Ok(batch)
    }
}

impl<R: Rng, P: PaceSet, B: BudgetSet> BatchMachine<R, P, B> {
    /// A streaming batch holds at most this many items not yet ended per
    /// unit of concurrency (ended items are released at once, wherever
    /// they lie), and starts none further than this many per unit of
    /// concurrency past the oldest item not yet started: 4.
    pub const STREAM_WINDOW: u32 = 4;

    /// The same batch drawing every retry (and every restart) from a shared
    /// retry budget (see [`RetryBudget`](crate::budget::RetryBudget)), or
    /// from each item's key's budget (a [`BudgetSet`] such as
    /// `Vec<RetryBucket>`). Call it before the first answer.
    ///
    /// ```
    /// use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    ///                   RequestInfo, Response};
    /// use polite_core::budget::{RetryBucket, RetryCosts};
    /// use polite_core::pace::Unpaced;
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant, UNIX_EPOCH};
    /// let t0 = Instant::now();
    /// let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 2];
    /// // Room for one retry after a server error (cost 14).
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(30)).unwrap()
    ///     .with_budget(RetryBucket::new(20, RetryCosts::default()));
    /// let Action::Send(a) = batch.poll_action() else { unreachable!() };
    /// let Action::Send(b) = batch.poll_action() else { unreachable!() };
    /// batch.handle(t0, Event::Response(Response::new(a.id, 503, UNIX_EPOCH)));
    /// batch.handle(t0, Event::Response(Response::new(b.id, 503, UNIX_EPOCH)));
    /// assert!(batch.outcomes()[0].is_none()); // item 0 retries
    /// assert!(matches!(batch.outcomes()[1], Some(Outcome::RetryBudgetExhausted { .. })));
    /// assert_eq!(batch.budget().tokens(), 6);
    /// ```
    #[must_use]
    pub fn with_budget<B2: BudgetSet>(self, budget: B2) -> BatchMachine<R, P, B2> {
        BatchMachine {
            policy: self.policy,
            rng: self.rng,
            pace: self.pace,
            budget,
            rate_limit: self.rate_limit,
            items: self.items,
            len: self.len,
            outcomes: self.outcomes,
            streaming: self.streaming,
            closed: self.closed,
            ended_out: self.ended_out,
            succeeded: self.succeeded,
            timed_out: self.timed_out,
            starved: self.starved,
            ready: self.ready,
            fresh: self.fresh,
            in_flight: self.in_flight,
            ended: self.ended,
            last_ended: self.last_ended,
            deadline: self.deadline,
            now: self.now,
            next_wake: self.next_wake,
            refused_until: self.refused_until,
            single: self.single,
            refused: self.refused,
            reach: self.reach,
            unstarted: self.unstarted,
            cancelled: self.cancelled,
            stopped: self.stopped,
            record: self.record,
            dropped: self.dropped,
        }
    }

    /// Which rate-limit headers of the answers are read and handed to the
    /// pace (default [`RateLimitHeaders::default`]: `RateLimit` and
    /// `RateLimit-Policy`; `X-RateLimit-*` on request).
    ///
    /// ```
    /// use polite_core::{Action, BatchMachine, BatchPolicy, Event, Machine, Method, RateThrottle,
    ///                   RequestId, RequestInfo, Response};
    /// use polite_core::ratelimit::RateLimitHeaders;
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant, UNIX_EPOCH};
    /// let t0 = Instant::now();
    /// let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let policy = BatchPolicy { concurrency: 1, ..BatchPolicy::default() };
    /// let mut batch = BatchMachine::new(policy, requests, SplitMix64::new(1),
    ///                                   RateThrottle::learning(1000).unwrap(), t0, Duration::from_secs(60))
    ///     .unwrap()
    ///     .rate_limit_headers(RateLimitHeaders::default().with_x_ratelimit());
    /// let Action::Send(first) = batch.poll_action() else { unreachable!() };
    /// // The first answer says "nothing left for 5 s" in X-RateLimit-* headers.
    /// batch.handle(t0, Event::Response(Response::new(first.id, 200, UNIX_EPOCH)
    ///     .header("X-RateLimit-Remaining", b"0")
    ///     .header("X-RateLimit-Reset", b"5")));
    /// // The next item waits those 5 s out.
    /// let Action::SleepUntil(t) = batch.poll_action() else { panic!("sent during the pause") };
    /// assert!(t >= t0 + Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn rate_limit_headers(mut self, headers: RateLimitHeaders) -> Self {
        self.rate_limit = headers;
        self
    }

    /// The retry budget.
    ///
    /// ```
    /// use polite_core::{BatchMachine, BatchPolicy, Method, RequestId, RequestInfo};
    /// use polite_core::budget::NoBudget;
    /// use polite_core::pace::Unpaced;
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced,
    ///                               Instant::now(), Duration::from_secs(60)).unwrap();
    /// assert_eq!(*batch.budget(), NoBudget);
    /// ```
    #[must_use]
    pub fn budget(&self) -> &B {
        &self.budget
    }

    /// Items known so far (pushed, for a streaming batch).
    fn len32(&self) -> u32 {
        self.len
    }

    /// Where item `item` lies in `items`, if it is held: at once when the
    /// items from the first held one on are all held (a batch from a
    /// list), else by binary search (a streaming batch holds at most a
    /// window of items).
    fn position(&self, item: usize) -> Option<usize> {
        let item = u32::try_from(item).ok()?;
        let guess = item.checked_sub(self.items.front()?.index)? as usize;
        if self.items.get(guess).is_some_and(|it| it.index == item) {
            return Some(guess);
        }
        self.items.binary_search_by_key(&item, |it| it.index).ok()
    }

    /// The position in `items` of the first item held at or after index
    /// `item`.
    fn first_from(&self, item: u32) -> usize {
        self.items.partition_point(|it| it.index < item)
    }

    /// Item `item` if it is still held (always, for a batch from a list;
    /// for a streaming batch, while it has not ended).
    fn window_item(&self, item: usize) -> Option<&Item> {
        self.position(item).map(|p| &self.items[p])
    }

    /// Item `i`, held.
    fn at(&self, i: usize) -> &Item {
        self.window_item(i).expect("an item held")
    }

    /// Item `i`, held.
    fn at_mut(&mut self, i: usize) -> &mut Item {
        let p = self.position(i).expect("an item held");
        &mut self.items[p]
    }

    /// Feeds what happened at `now`. Answers name their item by
    /// `SendId::item`; unknown items, late answers and events after the
    /// end are ignored. A rate-limited answer with a valid `Retry-After`
    /// starts a shared cool-down on the pace.
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// let Action::Send(plan) = batch.poll_action() else { unreachable!() };
    /// batch.handle(t0, Event::Response(Response::new(plan.id, 404, UNIX_EPOCH)));
    /// assert_eq!(batch.outcomes()[0], Some(Outcome::NotRetryable { status: 404 }));
    /// ```
    pub fn handle(&mut self, now: Instant, event: Event<'_>) {
        let now = now.max(self.now);
        self.now = now;
        if self.stopped.is_some() {
            return;
        }
        match event {
            Event::Cancel => self.cancel(),
            // At the deadline nothing restarts: `expire` below ends all.
            Event::Tick if now < self.deadline => self.wake_due(),
            Event::Tick => {}
            Event::Response(r) => {
                // Every rate-limited answer's server time reaches the pace,
                // also a late one no item waits for (the server said so).
                // (A keyed batch knows the slot of the items it holds only.)
                let rl = self.policy.retry.class_of_response(&r) == Some(RetryClass::RateLimited);
                if let Some(slot) = self.pace_slot_of(r.id.item) {
                    let mut pace = SlotPace::new(&mut self.pace, slot);
                    cool_down_after(&mut pace, &self.policy.retry.retry_after, now, rl, &r);
                    if observe_rate_limit(&mut pace, &self.rate_limit, now, &r) {
                        // A resized pace may grant earlier than it said: ask again.
                        self.unrefuse(slot);
                    }
                }
                self.answer(r.id.item, event, Some(&r));
            }
            Event::TransportError(id, _) => self.answer(id.item, event, None),
        }
        if now >= self.deadline {
            self.expire();
        }
    }

    /// What to do next. Call after construction and after every `handle`
    /// until it answers `SleepUntil` or `Stop`.
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// // Concurrency 4 by default: all three go at once, then the batch waits.
    /// for item in 0..3 {
    ///     assert!(matches!(batch.poll_action(), Action::Send(p) if p.id.item == item));
    /// }
    /// assert_eq!(batch.poll_action(), Action::SleepUntil(batch.deadline()));
    /// ```
    pub fn poll_action(&mut self) -> Action {
        if let Some(o) = self.stopped {
            return Action::Stop(o);
        }
        if self.now >= self.deadline {
            self.expire();
        }
        if !self.single {
            return self.poll_keyed();
        }
        loop {
            if self.ended == self.len32() && self.closed {
                let o = self.summary();
                self.stopped = Some(o);
                return Action::Stop(o);
            }
            if self.in_flight >= self.policy.concurrency || !self.has_ready() {
                break;
            }
            let grant = match self.refused_until {
                Some(t) if t > self.now => Err(t),
                _ => self.pace.acquire_slot(0, self.now),
            };
            match grant {
                Ok(()) => {
                    self.refused_until = None;
                    if let Some(plan) = self.send_next() {
                        return Action::Send(plan);
                    }
                }
                Err(t) if t >= self.deadline => {
                    self.refused_until = Some(t);
                    self.starve(t);
                }
                Err(t) => {
                    self.refused_until = Some(t);
                    break;
                }
            }
        }
        let mut wake = self.deadline;
        if let Some(w) = self.next_wake {
            wake = wake.min(w);
        }
        if self.in_flight < self.policy.concurrency
            && self.has_ready()
            && let Some(t) = self.refused_until
        {
            wake = wake.min(t);
        }
        Action::SleepUntil(wake)
    }

    /// The record of the last answered attempt, once. Each `handle` call
    /// concerns one item and produces at most one record, except the one
    /// that ends the batch (a cancel, the deadline): then one more per
    /// attempt dropped in flight (`Aborted`, with its item's outcome; call
    /// until `None`). `record.id.item` names the item.
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// let Action::Send(plan) = batch.poll_action() else { unreachable!() };
    /// batch.handle(t0, Event::Response(Response::new(plan.id, 200, UNIX_EPOCH)));
    /// assert_eq!(batch.take_record().map(|r| r.id.item), Some(0));
    /// assert_eq!(batch.take_record(), None);
    /// ```
    pub fn take_record(&mut self) -> Option<AttemptRecord> {
        self.record.take().or_else(|| self.dropped.pop())
    }

    /// Each item's outcome, in input order: `None` while it has not ended.
    /// Once `Some`, an item's outcome never changes.
    ///
    /// ```
    /// use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    ///                   RequestInfo};
    /// use polite_core::pace::Unpaced;
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let reqs = vec![RequestInfo::new(RequestId(1), Method::Get); 2];
    /// let mut b = BatchMachine::new(BatchPolicy::default(), reqs, SplitMix64::new(1), Unpaced, t0,
    ///                               Duration::from_secs(5)).unwrap();
    /// let _ = b.poll_action();
    /// b.handle(t0, Event::Cancel);
    /// assert_eq!(b.poll_action(), Action::Stop(Outcome::Cancelled));
    /// assert_eq!(b.outcomes(), &[Some(Outcome::Cancelled), Some(Outcome::Cancelled)]);
    /// ```
    #[must_use]
    pub fn outcomes(&self) -> &[Option<Outcome>] {
        &self.outcomes
    }

    /// How many items have ended so far: how many of
    /// [`outcomes`](Self::outcomes) are `Some` (every item ends once; a
    /// streaming batch counts the items it handed out too). With
    /// [`last_ended`](Self::last_ended), a caller that looks at the
    /// outcomes after every step can look only at what changed: the same
    /// count as at its last look, no outcome was set since; one more, only
    /// item `last_ended` was.
    ///
    /// ```
    /// use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    ///                   RequestInfo, Response};
    /// use polite_core::pace::Unpaced;
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant, UNIX_EPOCH};
    /// let t0 = Instant::now();
    /// let reqs = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut b = BatchMachine::new(BatchPolicy::default(), reqs, SplitMix64::new(1), Unpaced, t0,
    ///                               Duration::from_secs(5)).unwrap();
    /// let Action::Send(first) = b.poll_action() else { unreachable!() };
    /// let Action::Send(second) = b.poll_action() else { unreachable!() };
    /// assert_eq!((b.ended_count(), b.last_ended()), (0, None));
    /// b.handle(t0, Event::Response(Response::new(second.id, 404, UNIX_EPOCH)));
    /// assert_eq!((b.ended_count(), b.last_ended()), (1, Some(second.id.item)));
    /// assert_eq!(b.outcomes()[1], Some(Outcome::NotRetryable { status: 404 }));
    /// // A cancel ends the two others at once: two more (item 2 last).
    /// b.handle(t0, Event::Cancel);
    /// assert_eq!((b.ended_count(), b.last_ended()), (3, Some(2)));
    /// # let _ = first;
    /// ```
    #[must_use]
    pub fn ended_count(&self) -> u32 {
        self.ended
    }

    /// The item whose outcome was set last, if any has ended (see
    /// [`ended_count`](Self::ended_count)).
    ///
    /// ```
    /// use polite_core::{BatchMachine, BatchPolicy, Event, Method, RequestId, RequestInfo};
    /// use polite_core::pace::Unpaced;
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let reqs = vec![RequestInfo::new(RequestId(1), Method::Get); 2];
    /// let mut b = BatchMachine::new(BatchPolicy::default(), reqs, SplitMix64::new(1), Unpaced, t0,
    ///                               Duration::from_secs(5)).unwrap();
    /// assert_eq!(b.last_ended(), None);
    /// b.handle(t0, Event::Cancel);
    /// assert_eq!(b.last_ended(), Some(1));
    /// ```
    #[must_use]
    pub fn last_ended(&self) -> Option<u32> {
        self.last_ended
    }

    /// The batch's outcome, once it has stopped.
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// assert_eq!(batch.outcome(), None);
    /// batch.handle(t0, Event::Cancel);
    /// let _ = batch.poll_action();
    /// assert_eq!(batch.outcome(), Some(Outcome::Cancelled));
    /// ```
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        self.stopped
    }

    /// The fixed deadline of the whole batch.
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// assert_eq!(batch.deadline(), t0 + Duration::from_secs(10));
    /// ```
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Sends in flight now.
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// let _ = batch.poll_action();
    /// assert_eq!(batch.in_flight(), 1);
    /// ```
    #[must_use]
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The number of items.
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// assert_eq!(batch.len(), 3);
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.len32() as usize
    }

    /// Whether the batch has no items (it stops at once with
    /// `BatchDone { succeeded: 0, failed: 0 }`).
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// assert!(!batch.is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len32() == 0
    }

    /// How many times the batch restarted item `item` after it ended
    /// `RateLimited` (0 for an unknown item).
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// assert_eq!(batch.restarts(0), 0);
    /// ```
    #[must_use]
    pub fn restarts(&self, item: usize) -> u32 {
        self.window_item(item).map_or(0, |i| i.restarts)
    }

    /// The request of item `item`.
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// assert_eq!(batch.request(2).map(|r| r.method), Some(Method::Get));
    /// assert!(batch.request(3).is_none());
    /// ```
    #[must_use]
    pub fn request(&self, item: usize) -> Option<&RequestInfo> {
        self.window_item(item).map(|i| &i.state.request)
    }

    /// The policy.
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// assert_eq!(batch.policy().concurrency, 4);
    /// ```
    #[must_use]
    pub fn policy(&self) -> &BatchPolicy {
        &self.policy
    }

    /// The pace.
    ///
    /// ```
    /// # use polite_core::{Action, BatchMachine, BatchPolicy, Event, Method, Outcome, RequestId,
    /// #                   RequestInfo, Response};
    /// # use polite_core::pace::Unpaced;
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant, UNIX_EPOCH};
    /// # let t0 = Instant::now();
    /// # let requests = vec![RequestInfo::new(RequestId(1), Method::Get); 3];
    /// let mut batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced, t0,
    ///                                   Duration::from_secs(10)).unwrap();
    /// assert_eq!(*batch.pace(), Unpaced);
    /// ```
    #[must_use]
    pub fn pace(&self) -> &P {
        &self.pace
    }
}

impl<R: Rng, P: PaceSet, B: BudgetSet> Machine for BatchMachine<R, P, B> {
    #[inline]
    fn handle(&mut self, now: Instant, event: Event<'_>) {
        BatchMachine::handle(self, now, event);
    }
    #[inline]
    fn poll_action(&mut self) -> Action {
        BatchMachine::poll_action(self)
    }
    fn take_record(&mut self) -> Option<AttemptRecord> {
        BatchMachine::take_record(self)
    }
    fn deadline(&self) -> Option<Instant> {
        Some(self.deadline)
    }
    fn wants_items(&self) -> u32 {
        if !self.streaming || self.closed || self.stopped.is_some() {
            return 0;
        }
        // Only the items not yet ended count: an item that hangs holds
        // its own place, not the pulling of those after it.
        let held = self.items.len() as u32;
        let window = self.policy.concurrency.saturating_mul(Self::STREAM_WINDOW);
        // Pull only what could start now: no more waiting to start than
        // there is room to send (in a keyed batch, items whose key's pace
        // refuses do not count: they must not hold back the other keys),
        // and none past the lookahead of a window from the oldest item
        // not yet started (in a keyed batch an item past it could not
        // start; with one pace the items not started are all held, so
        // they never reach past it).
        let waiting = if self.single {
            self.len32() - self.fresh
        } else {
            self.waiting_keyed()
        };
        let lookahead = self
            .fresh
            .saturating_add(window)
            .saturating_sub(self.len32());
        window
            .saturating_sub(held)
            .min(self.policy.concurrency.saturating_sub(waiting))
            .min(lookahead)
    }
    fn push_item(&mut self, request: RequestInfo) {
        if !self.streaming || self.closed || self.len32() == u32::MAX {
            return;
        }
        let k = self.len32();
        let item = Item::new(&self.policy, request, k, self.now, self.deadline);
        self.items.push_back(item);
        self.len += 1;
        self.unstarted += 1;
    }
    fn close_items(&mut self) {
        self.closed = true;
    }
    fn take_ended(&mut self) -> Option<(u32, Outcome)> {
        self.ended_out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::distinct_slots;
    use crate::{Method, RequestId, RequestInfo};

    /// The bit mask counts what sorting and deduplicating counts, slots at
    /// and past 64 included.
    #[test]
    fn distinct_slots_as_sort_and_dedup() {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for case in 0..2000_u32 {
            let n = case % 40;
            let spread = [1, 2, 4, 63, 64, 65, 200, u32::MAX][(case % 8) as usize];
            let requests: Vec<RequestInfo> = (0..n)
                .map(|i| {
                    x = x
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let slot = ((x >> 33) as u32) % spread;
                    RequestInfo::new(RequestId(u64::from(i)), Method::Get).with_pace_slot(slot)
                })
                .collect();
            let mut slots: Vec<u32> = requests.iter().map(|r| r.pace_slot).collect();
            slots.sort_unstable();
            slots.dedup();
            assert_eq!(distinct_slots(&requests), slots.len(), "{requests:?}");
        }
        let at = |slot| RequestInfo::new(RequestId(0), Method::Get).with_pace_slot(slot);
        assert_eq!(distinct_slots(&[]), 0);
        assert_eq!(distinct_slots(&[at(63), at(64), at(63), at(u32::MAX)]), 3);
    }
}
