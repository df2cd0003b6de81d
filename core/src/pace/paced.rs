//! [`Paced`]: a single machine whose every send asks a [`Pace`] first.

use std::collections::VecDeque;
use std::time::Instant;

use crate::input::{Event, Response, RetryClass};
use crate::machine::Machine;
use crate::outcome::Outcome;
use crate::output::{Action, Notice, SendPlan};
use crate::policy::RetryAfterLimits;
use crate::ratelimit::RateLimitHeaders;
use crate::record::AttemptRecord;

use super::{Pace, after_answer, cool_down_after, observe_rate_limit};

/// A single machine whose every send passes through a [`Pace`] first
/// (SPEC §2: retries are requests too).
///
/// For machines with **at most one send outstanding** at a time:
/// [`RetryMachine`](crate::RetryMachine) and `PollMachine`. (A batch paces
/// its own items: give [`BatchMachine`](crate::BatchMachine) the pace.)
///
/// **Inputs and outputs** are those of the inner machine ([`Machine`]):
///
/// * When the inner machine answers `Send(plan)`, `Paced` asks the pace.
///   Granted: the send goes out. Refused until `t`: the send is **held**
///   and `Paced` answers `SleepUntil(min(t, inner wake-up))`; the inner
///   machine's wake-up while its send is outstanding is never after its
///   deadline (for `RetryMachine` it *is* the deadline), so no sleep passes
///   the deadline. On the next poll (after a `Tick`) it asks again.
/// * If the pace refuses until an instant at or after the inner machine's
///   [`deadline`](Machine::deadline), `Paced` stops at once with
///   [`Outcome::Starved`]`{ until: t, by }` without sending (SPEC §1: no
///   sleeping for nothing; §4.1: the outcome names the pace's limit,
///   [`Pace::refusal`], rather than a bare timeout).
/// * Every event goes to the inner machine: a `Cancel` while a send is held
///   ends it `Cancelled` and the held send is dropped, never sent; a `Tick`
///   at the deadline ends it `TimedOut`.
/// * Every answered attempt goes to [`Pace::on_answer`], throttled when
///   the inner machine classed it rate-limited (its policy's statuses or
///   the caller's classifier, not a fixed 429), for an adaptive pace.
/// * A rate-limited answer with a valid `Retry-After` calls
///   [`Pace::cool_down`]`(now + delay)` (delay clamped to
///   [`RetryAfterLimits`] `min..=max`, default 1 s to 300 s); without a
///   server time, until the machine's own next send (its computed
///   backoff): every machine sharing the pace waits, not only this one.
/// * Every answer's rate-limit headers (`RateLimit`, `RateLimit-Policy`;
///   `X-RateLimit-*` when enabled with
///   [`rate_limit_headers`](Self::rate_limit_headers)) go to
///   [`Pace::observe`]: a pause or a quota reaches every machine sharing
///   the pace.
///
/// **Invariants**: the inner machine's, plus: a send goes out only when the
/// pace granted it, at most once, and before the deadline.
///
/// ```
/// use polite_core::{Action, Event, Method, Paced, RateThrottle, RequestId, RequestInfo,
///                   Response, RetryMachine, RetryPolicy};
/// use polite_core::SplitMix64;
/// use std::sync::{Arc, Mutex};
/// use std::time::{Duration, Instant, UNIX_EPOCH};
///
/// let t0 = Instant::now();
/// let throttle = Arc::new(Mutex::new(RateThrottle::new(1, Duration::from_secs(1)).unwrap()));
/// let make = |id| RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(id), Method::Get),
///                                   SplitMix64::new(id), t0, Duration::from_secs(30)).unwrap();
/// let mut a = Paced::new(make(1), Arc::clone(&throttle), t0);
/// let mut b = Paced::new(make(2), Arc::clone(&throttle), t0);
///
/// let Action::Send(plan) = a.poll_action() else { unreachable!() };
/// // b shares the window of one send per second: its first send is held.
/// assert_eq!(b.poll_action(), Action::SleepUntil(t0 + Duration::from_millis(1050)));
/// a.handle(t0, Event::Response(Response::new(plan.id, 200, UNIX_EPOCH)));
/// b.handle(t0 + Duration::from_millis(1050), Event::Tick);
/// assert!(matches!(b.poll_action(), Action::Send(_)));
/// ```
#[derive(Debug)]
pub struct Paced<M, P> {
    inner: M,
    pace: P,
    /// The inner machine's send waiting for the pace.
    held: Option<SendPlan>,
    /// Further sends, only from a machine that breaks the one-outstanding
    /// rule; kept so that none is lost (allocates only then).
    more: VecDeque<SendPlan>,
    now: Instant,
    /// The pace refused until this instant.
    refused_until: Option<Instant>,
    limits: RetryAfterLimits,
    rate_limit: RateLimitHeaders,
    stopped: Option<Outcome>,
    /// The inner machine's latest attempt record, read by `handle` (to
    /// tell the pace how the attempt was classed) and kept for
    /// [`Machine::take_record`].
    record: Option<AttemptRecord>,
    /// When the pace granted the latest send (for [`Pace::on_answer`]).
    sent_at: Instant,
}

impl<M: Machine, P: Pace> Paced<M, P> {
    /// Wraps `inner` (created at `now` or earlier) so that each of its
    /// sends waits for `pace`.
    ///
    /// ```
    /// # use polite_core::{Action, Event, Method, Paced, RateThrottle, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let machine = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    /// #     SplitMix64::new(1), t0, Duration::from_secs(10)).unwrap();
    /// let mut paced = Paced::new(machine, RateThrottle::default(), t0);
    /// assert!(matches!(paced.poll_action(), Action::Send(_)));
    /// ```
    #[must_use]
    pub fn new(inner: M, pace: P, now: Instant) -> Paced<M, P> {
        Paced {
            inner,
            pace,
            held: None,
            more: VecDeque::new(),
            now,
            refused_until: None,
            limits: RetryAfterLimits::default(),
            rate_limit: RateLimitHeaders::default(),
            stopped: None,
            record: None,
            sent_at: now,
        }
    }

    /// Which rate-limit headers of the answers are read and handed to the
    /// pace (default [`RateLimitHeaders::default`]: `RateLimit` and
    /// `RateLimit-Policy`; `X-RateLimit-*` on request).
    ///
    /// ```
    /// use polite_core::{Action, Event, Method, Paced, RateThrottle, RequestId, RequestInfo,
    ///                   Response, RetryMachine, RetryPolicy};
    /// use polite_core::ratelimit::RateLimitHeaders;
    /// use polite_core::SplitMix64;
    /// use std::sync::{Arc, Mutex};
    /// use std::time::{Duration, Instant, UNIX_EPOCH};
    /// let t0 = Instant::now();
    /// let make = |id| RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(id), Method::Get),
    ///                                   SplitMix64::new(id), t0, Duration::from_secs(30)).unwrap();
    /// // An answer that says "nothing left for 5 s" in X-RateLimit-* headers only.
    /// let exhausted = |plan: polite_core::SendPlan| Response::new(plan.id, 200, UNIX_EPOCH)
    ///     .header("X-RateLimit-Remaining", b"0")
    ///     .header("X-RateLimit-Reset", b"5");
    /// for (headers, paused) in [(RateLimitHeaders::default().with_x_ratelimit(), true),
    ///                           (RateLimitHeaders::default(), false)] {
    ///     let pace = Arc::new(Mutex::new(RateThrottle::learning(100).unwrap()));
    ///     let mut a = Paced::new(make(1), Arc::clone(&pace), t0).rate_limit_headers(headers);
    ///     let Action::Send(plan) = a.poll_action() else { unreachable!() };
    ///     a.handle(t0, Event::Response(exhausted(plan)));
    ///     // Another machine on the same pace: held for the 5 s only when
    ///     // the X-RateLimit-* headers are read.
    ///     let mut b = Paced::new(make(2), Arc::clone(&pace), t0);
    ///     match b.poll_action() {
    ///         Action::SleepUntil(t) => assert!(paused && t >= t0 + Duration::from_secs(5)),
    ///         Action::Send(_) => assert!(!paused),
    ///         other => panic!("{other:?}"),
    ///     }
    /// }
    /// ```
    #[must_use]
    pub fn rate_limit_headers(mut self, headers: RateLimitHeaders) -> Paced<M, P> {
        self.rate_limit = headers;
        self
    }

    /// How a 429's `Retry-After` is clamped before it becomes a shared
    /// cool-down (default [`RetryAfterLimits::default`]; pass the inner
    /// machine's `policy.retry_after`).
    ///
    /// ```
    /// use polite_core::{Action, Event, Method, Paced, RateThrottle, RequestId, RequestInfo,
    ///                   Response, RetryMachine, RetryPolicy};
    /// use polite_core::policy::RetryAfterLimits;
    /// use polite_core::SplitMix64;
    /// use std::sync::{Arc, Mutex};
    /// use std::time::{Duration, Instant, UNIX_EPOCH};
    /// let t0 = Instant::now();
    /// let mut policy = RetryPolicy::default();
    /// policy.retry_after.min = Duration::from_secs(3); // a Retry-After: 0 means "wait 3 s"
    /// let make = |id| RetryMachine::new(policy, RequestInfo::new(RequestId(id), Method::Get),
    ///                                   SplitMix64::new(id), t0, Duration::from_secs(30)).unwrap();
    /// let pace = Arc::new(Mutex::new(RateThrottle::new(10, Duration::from_secs(1)).unwrap()));
    /// let mut a = Paced::new(make(1), Arc::clone(&pace), t0).retry_after_limits(policy.retry_after);
    /// let Action::Send(plan) = a.poll_action() else { unreachable!() };
    /// a.handle(t0, Event::Response(Response::new(plan.id, 429, UNIX_EPOCH).header("Retry-After", b"0")));
    /// // The shared cool-down is the 0 s raised to the limits' 3 s minimum:
    /// // another machine on the pace is held that long, and not much longer.
    /// let mut b = Paced::new(make(2), Arc::clone(&pace), t0);
    /// let Action::SleepUntil(t) = b.poll_action() else { panic!("sent during the cool-down") };
    /// assert!(t >= t0 + Duration::from_secs(3) && t < t0 + Duration::from_secs(4), "{:?}", t - t0);
    /// ```
    #[must_use]
    pub fn retry_after_limits(mut self, limits: RetryAfterLimits) -> Paced<M, P> {
        self.limits = limits;
        self
    }

    /// The inner machine (e.g. for its `outcome()` or `sends()`).
    ///
    /// ```
    /// # use polite_core::{Action, Event, Method, Paced, RateThrottle, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let machine = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    /// #     SplitMix64::new(1), t0, Duration::from_secs(10)).unwrap();
    /// let paced = Paced::new(machine, RateThrottle::default(), t0);
    /// assert_eq!(paced.inner().sends(), 0);
    /// ```
    #[must_use]
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// The pace.
    ///
    /// ```
    /// # use polite_core::{Action, Event, Method, Paced, RateThrottle, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let machine = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    /// #     SplitMix64::new(1), t0, Duration::from_secs(10)).unwrap();
    /// let paced = Paced::new(machine, RateThrottle::default(), t0);
    /// assert_eq!(paced.pace().limit(), 50);
    /// ```
    #[must_use]
    pub fn pace(&self) -> &P {
        &self.pace
    }

    /// Whether a send is held, waiting for the pace.
    ///
    /// ```
    /// # use polite_core::{Action, Event, Method, Paced, RateThrottle, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let machine = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    /// #     SplitMix64::new(1), t0, Duration::from_secs(10)).unwrap();
    /// let mut throttle = RateThrottle::new(1, Duration::from_secs(1)).unwrap();
    /// throttle.acquire(t0).unwrap(); // the only slot is taken
    /// let mut paced = Paced::new(machine, throttle, t0);
    /// assert!(matches!(paced.poll_action(), Action::SleepUntil(_)));
    /// assert!(paced.is_holding());
    /// ```
    #[must_use]
    pub fn is_holding(&self) -> bool {
        self.held.is_some()
    }

    /// The inner machine and the pace.
    ///
    /// ```
    /// # use polite_core::{Action, Event, Method, Paced, RateThrottle, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let machine = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    /// #     SplitMix64::new(1), t0, Duration::from_secs(10)).unwrap();
    /// let (machine, throttle) = Paced::new(machine, RateThrottle::default(), t0).into_parts();
    /// assert_eq!((machine.sends(), throttle.limit()), (0, 50));
    /// ```
    #[must_use]
    pub fn into_parts(self) -> (M, P) {
        (self.inner, self.pace)
    }

    /// Feeds what happened at `now` to the inner machine (and a 429's
    /// `Retry-After` to the pace as a cool-down, and an answer's rate-limit
    /// headers to [`Pace::observe`]).
    ///
    /// ```
    /// # use polite_core::{Action, Event, Method, Paced, RateThrottle, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let machine = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    /// #     SplitMix64::new(1), t0, Duration::from_secs(10)).unwrap();
    /// let mut paced = Paced::new(machine, RateThrottle::default(), t0);
    /// let _ = paced.poll_action();
    /// paced.handle(t0, Event::Cancel);
    /// assert_eq!(paced.poll_action(), Action::Stop(polite_core::Outcome::Cancelled));
    /// ```
    pub fn handle(&mut self, now: Instant, event: Event<'_>) {
        let now = now.max(self.now);
        self.now = now;
        if self.stopped.is_some() {
            return;
        }
        // An answer for a send the pace still holds answers nothing that was
        // sent (a stray or misrouted answer): ignore it, as the machines
        // ignore answers for sends they do not wait for. (The inner machine
        // already counts a held send as in flight.)
        let answered = match &event {
            Event::Response(r) => Some(r.id),
            Event::TransportError(id, _) => Some(*id),
            Event::Tick | Event::Cancel => None,
        };
        if let Some(id) = answered
            && (self.held.is_some_and(|p| p.id == id) || self.more.iter().any(|p| p.id == id))
        {
            return;
        }
        let response = match event {
            Event::Response(r) => {
                // Every rate-limited answer's server time reaches the pace,
                // also one the inner machine ignores (a late answer).
                let rl = self.inner.class_of(&r) == Some(RetryClass::RateLimited);
                cool_down_after(&mut self.pace, &self.limits, now, rl, &r);
                if observe_rate_limit(&mut self.pace, &self.rate_limit, now, &r) {
                    // A resized pace may grant earlier than it said: ask again.
                    self.refused_until = None;
                }
                Some(r)
            }
            _ => None,
        };
        self.inner.handle(now, event);
        if let Some(record) = self.inner.take_record() {
            if answered.is_none() {
                // A send the machine dropped at its end (a cancel, the
                // deadline): an attempt's record, unless the pace still
                // held that send (never sent: no attempt). Nothing was
                // answered, so the pace hears nothing.
                let held = |p: &SendPlan| p.id == record.id;
                if !(self.held.as_ref().is_some_and(held) || self.more.iter().any(held)) {
                    self.record = Some(record);
                }
                return;
            }
            after_answer(
                &mut self.pace,
                &self.limits,
                self.sent_at,
                now,
                response.as_ref(),
                &record,
            );
            // A cool-down or a slower rate refuses later than cached.
            self.refused_until = None;
            self.record = Some(record);
        }
    }

    /// Asks the pace unless it refused until a later instant.
    #[inline]
    fn granted(&mut self) -> bool {
        if let Some(t) = self.refused_until
            && self.now < t
        {
            return false;
        }
        match self.pace.acquire(self.now) {
            Ok(()) => {
                self.refused_until = None;
                true
            }
            Err(t) => {
                self.refused_until = Some(t);
                false
            }
        }
    }

    /// What to do next: the inner machine's action, with sends held until
    /// the pace grants them.
    ///
    /// ```
    /// # use polite_core::{Action, Event, Method, Paced, RateThrottle, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// # use polite_core::SplitMix64;
    /// # use std::time::{Duration, Instant};
    /// # let t0 = Instant::now();
    /// # let machine = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    /// #     SplitMix64::new(1), t0, Duration::from_secs(10)).unwrap();
    /// let mut throttle = RateThrottle::new(1, Duration::from_secs(1)).unwrap();
    /// throttle.acquire(t0).unwrap();
    /// let mut paced = Paced::new(machine, throttle, t0);
    /// // Held until the slot ages out, plus the 50 ms margin.
    /// assert_eq!(paced.poll_action(), Action::SleepUntil(t0 + Duration::from_millis(1050)));
    /// ```
    pub fn poll_action(&mut self) -> Action {
        if let Some(o) = self.stopped {
            return Action::Stop(o);
        }
        loop {
            match self.inner.poll_action() {
                Action::Stop(o) => {
                    // A held send (cancel or deadline while held) is dropped.
                    self.held = None;
                    self.more.clear();
                    return Action::Stop(o);
                }
                Action::Send(plan) => {
                    if self.held.is_none() {
                        if self.granted() {
                            self.sent_at = self.now;
                            return Action::Send(plan);
                        }
                        self.held = Some(plan);
                    } else {
                        self.more.push_back(plan);
                    }
                    // Go round: the inner machine's next answer is its wake-up.
                }
                Action::SleepUntil(wake) => {
                    let Some(plan) = self.held else {
                        return Action::SleepUntil(wake);
                    };
                    // `wake` is never after the deadline; a wake-up due now
                    // (e.g. the deadline) goes to the inner machine first.
                    if self.now < wake && self.granted() {
                        self.held = self.more.pop_front();
                        self.sent_at = self.now;
                        return Action::Send(plan);
                    }
                    let Some(until) = self.refused_until else {
                        return Action::SleepUntil(wake);
                    };
                    if let Some(deadline) = self.inner.deadline()
                        && until >= deadline
                    {
                        let o = Outcome::Starved {
                            until,
                            by: self.pace.refusal(),
                        };
                        self.stopped = Some(o);
                        self.held = None;
                        self.more.clear();
                        return Action::Stop(o);
                    }
                    return Action::SleepUntil(until.min(wake));
                }
            }
        }
    }
}

impl<M: Machine, P: Pace> Machine for Paced<M, P> {
    #[inline]
    fn handle(&mut self, now: Instant, event: Event<'_>) {
        Paced::handle(self, now, event);
    }
    #[inline]
    fn poll_action(&mut self) -> Action {
        Paced::poll_action(self)
    }
    fn take_record(&mut self) -> Option<AttemptRecord> {
        self.record.take().or_else(|| self.inner.take_record())
    }
    fn deadline(&self) -> Option<Instant> {
        self.inner.deadline()
    }
    fn take_notice(&mut self) -> Option<Notice> {
        self.inner.take_notice()
    }
    fn class_of(&self, response: &Response<'_>) -> Option<RetryClass> {
        self.inner.class_of(response)
    }
}
