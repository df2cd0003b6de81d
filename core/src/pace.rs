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

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::adaptive::{AdaptiveRate, Answered};
use crate::event::{Action, Event, Response, SendPlan};
use crate::machine::Machine;
use crate::outcome::{Outcome, PaceLimit, RetryClass};
use crate::policy::{PolicyError, RetryAfterLimits};
use crate::ratelimit::{Quota, RateLimitHeaders, RateLimitInfo};
use crate::record::AttemptRecord;
use crate::retry::deadline_after;
use crate::retry_after;

/// Something that decides *when* a send may go: every send of a paced
/// machine asks [`acquire`](Pace::acquire) first.
///
/// Contract for implementors:
///
/// * `acquire(now)` answers `Ok(())` and counts the send, or `Err(t)`
///   with `t > now`, counts nothing, and promises that no grant comes
///   before `t` (callers sleep until `t` and ask again; they may skip
///   asking before `t`).
/// * `cool_down(until)`: refuse everyone until `until` (answering
///   `Err(until)` meanwhile); a later cool-down never shortens an earlier one.
/// * `observe(now, info)`: what a server said about its quota (see
///   [`RateLimitInfo`]); a pace may pause or resize itself, or ignore it
///   (the default). A resize may make an earlier refusal's instant
///   pessimistic: callers that cached a refusal ask again after observing.
/// * Never panic, never block for long (the mutex implementations lock for
///   a few nanoseconds), never read a clock: `now` is the caller's.
///
/// Implemented for [`RateThrottle`], [`Unpaced`], and for shared handles:
/// `&mut P`, `Box<P>`, `Arc<Mutex<P>>` (several tasks or threads; a
/// poisoned mutex is recovered, never a panic) and `Rc<RefCell<P>>` (one
/// thread).
///
/// ```
/// use polite_core::{Pace, RateThrottle};
/// use std::sync::{Arc, Mutex};
/// use std::time::{Duration, Instant};
///
/// let shared = Arc::new(Mutex::new(RateThrottle::new(1, Duration::from_secs(1)).unwrap()));
/// let (mut a, mut b) = (Arc::clone(&shared), Arc::clone(&shared));
/// let t0 = Instant::now();
/// assert_eq!(a.acquire(t0), Ok(()));
/// // b shares a's window: refused until the slot ages out, plus the 50 ms margin.
/// assert_eq!(b.acquire(t0), Err(t0 + Duration::from_millis(1050)));
/// ```
pub trait Pace {
    /// Asks for one send at `now`: `Ok(())` (counted) or `Err(t)`: not
    /// before `t`, nothing counted.
    ///
    /// # Errors
    ///
    /// `Err(t)`: the earliest instant at which asking again may succeed.
    ///
    /// ```
    /// use polite_core::{Pace, RateThrottle};
    /// use std::time::{Duration, Instant};
    /// fn try_send(pace: &mut impl Pace, now: Instant) -> bool { pace.acquire(now).is_ok() }
    /// let mut t = RateThrottle::new(1, Duration::from_secs(1)).unwrap();
    /// let t0 = Instant::now();
    /// assert!(try_send(&mut t, t0));
    /// assert!(!try_send(&mut t, t0));
    /// ```
    fn acquire(&mut self, now: Instant) -> Result<(), Instant>;

    /// Refuses every send until `until` (a server said so, e.g. a 429 with
    /// `Retry-After`). Never shortens an earlier cool-down.
    ///
    /// ```
    /// use polite_core::{Pace, RateThrottle};
    /// use std::sync::{Arc, Mutex};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut shared = Arc::new(Mutex::new(RateThrottle::default()));
    /// let mut other = Arc::clone(&shared);
    /// shared.cool_down(t0 + Duration::from_secs(3)); // one task saw a 429
    /// assert_eq!(other.acquire(t0), Err(t0 + Duration::from_secs(3))); // all wait
    /// ```
    fn cool_down(&mut self, until: Instant);

    /// What an answer at `now` said about the server's quota: a pause
    /// (no quota left until `now + pause`) and/or a quota to size by.
    /// Ignored by default, so every `Pace` keeps working unchanged;
    /// [`RateThrottle`] pauses, and sizes itself when it is
    /// [learning](RateThrottle::learning).
    ///
    /// ```
    /// use polite_core::{Pace, RateThrottle};
    /// use polite_core::ratelimit::RateLimitInfo;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut t = RateThrottle::default().with_margin(Duration::ZERO);
    /// // `RateLimit: "default";r=0;t=5`: nothing left for 5 s.
    /// let info = RateLimitInfo { pause: Some(Duration::from_secs(5)), ..RateLimitInfo::default() };
    /// Pace::observe(&mut t, t0, &info);
    /// assert_eq!(t.acquire(t0), Err(t0 + Duration::from_secs(5)));
    /// ```
    fn observe(&mut self, now: Instant, info: &RateLimitInfo) {
        let _ = (now, info);
    }

    /// An answer (or transport error) arrived at `now` for a send this pace
    /// granted; `throttled` when the retry policy (or the caller's
    /// classifier) classed it rate-limited — whatever its status — and the
    /// server gave no time of its own (a valid `Retry-After` is obeyed as a
    /// cool-down instead; such an answer is not reported here). An adaptive
    /// pace ([`RateThrottle::adaptive`]) slows down on throttles and speeds
    /// up again on the rest; ignored by default.
    ///
    /// ```
    /// use polite_core::{Pace, RateThrottle};
    /// use polite_core::adaptive::Answered;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut t = RateThrottle::new(1000, Duration::from_secs(1)).unwrap().adaptive();
    /// assert_eq!(t.acquire(t0), Ok(()));
    /// // That send is refused, bare, 2 s later: the adaptive rate starts pacing.
    /// let t2 = t0 + Duration::from_secs(2);
    /// Pace::on_answer(&mut t, Answered::new(t0, t2, true));
    /// assert!(t.acquire(t2).is_err());
    /// ```
    fn on_answer(&mut self, answer: Answered) {
        let _ = answer;
    }

    /// Which limit made the latest refusal of [`acquire`](Pace::acquire)
    /// ([`PaceLimit::Unknown`] by default): a machine that has to stop
    /// because the pace refuses until after its deadline puts it in
    /// [`Outcome::Starved`], so the caller can say which setting to change.
    ///
    /// ```
    /// use polite_core::{Pace, PaceLimit, RateThrottle};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut t = RateThrottle::new(1, Duration::from_secs(60)).unwrap();
    /// t.acquire(t0).unwrap();
    /// assert!(t.acquire(t0).is_err());
    /// assert_eq!(Pace::refusal(&t),
    ///            PaceLimit::Window { limit: 1, window: Duration::from_secs(60), learned: false });
    /// ```
    fn refusal(&self) -> PaceLimit {
        PaceLimit::Unknown
    }
}

/// No pacing: every send is granted at once, cool-downs are ignored.
/// For machines that need a [`Pace`] but should only be limited by
/// concurrency (and for comparisons).
///
/// ```
/// use polite_core::{Pace, Unpaced};
/// use std::time::{Duration, Instant};
/// let t0 = Instant::now();
/// let mut p = Unpaced;
/// p.cool_down(t0 + Duration::from_secs(9));
/// assert_eq!(p.acquire(t0), Ok(()));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unpaced;

impl Pace for Unpaced {
    #[inline]
    fn acquire(&mut self, _now: Instant) -> Result<(), Instant> {
        Ok(())
    }
    #[inline]
    fn cool_down(&mut self, _until: Instant) {}
}

impl<P: Pace + ?Sized> Pace for &mut P {
    #[inline]
    fn acquire(&mut self, now: Instant) -> Result<(), Instant> {
        (**self).acquire(now)
    }
    #[inline]
    fn cool_down(&mut self, until: Instant) {
        (**self).cool_down(until);
    }
    #[inline]
    fn observe(&mut self, now: Instant, info: &RateLimitInfo) {
        (**self).observe(now, info);
    }
    #[inline]
    fn on_answer(&mut self, answer: Answered) {
        (**self).on_answer(answer);
    }
    #[inline]
    fn refusal(&self) -> PaceLimit {
        (**self).refusal()
    }
}

impl<P: Pace + ?Sized> Pace for Box<P> {
    #[inline]
    fn acquire(&mut self, now: Instant) -> Result<(), Instant> {
        (**self).acquire(now)
    }
    #[inline]
    fn cool_down(&mut self, until: Instant) {
        (**self).cool_down(until);
    }
    #[inline]
    fn observe(&mut self, now: Instant, info: &RateLimitInfo) {
        (**self).observe(now, info);
    }
    #[inline]
    fn on_answer(&mut self, answer: Answered) {
        (**self).on_answer(answer);
    }
    #[inline]
    fn refusal(&self) -> PaceLimit {
        (**self).refusal()
    }
}

/// Shared across tasks and threads. The lock is held only for the call. A
/// mutex poisoned by a panic elsewhere is recovered: the throttle's state
/// is valid after any call (a ring of instants and two counters), so the
/// guard is taken over rather than propagating the panic.
impl<P: Pace + ?Sized> Pace for Arc<Mutex<P>> {
    #[inline]
    fn acquire(&mut self, now: Instant) -> Result<(), Instant> {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .acquire(now)
    }
    #[inline]
    fn cool_down(&mut self, until: Instant) {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .cool_down(until);
    }
    #[inline]
    fn observe(&mut self, now: Instant, info: &RateLimitInfo) {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .observe(now, info);
    }
    #[inline]
    fn on_answer(&mut self, answer: Answered) {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .on_answer(answer);
    }
    #[inline]
    fn refusal(&self) -> PaceLimit {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .refusal()
    }
}

/// Shared between machines driven on one thread.
impl<P: Pace + ?Sized> Pace for Rc<RefCell<P>> {
    #[inline]
    fn acquire(&mut self, now: Instant) -> Result<(), Instant> {
        self.borrow_mut().acquire(now)
    }
    #[inline]
    fn cool_down(&mut self, until: Instant) {
        self.borrow_mut().cool_down(until);
    }
    #[inline]
    fn observe(&mut self, now: Instant, info: &RateLimitInfo) {
        self.borrow_mut().observe(now, info);
    }
    #[inline]
    fn on_answer(&mut self, answer: Answered) {
        self.borrow_mut().on_answer(answer);
    }
    #[inline]
    fn refusal(&self) -> PaceLimit {
        self.borrow().refusal()
    }
}

/// A client-side rate limit: at most `limit` sends in any `window`
/// (SPEC §4; default **50 per 60 s**, deliberately under a typical
/// 60-per-minute server quota), plus a shared cool-down.
///
/// A sliding-window **log**: each grant records its instant in a ring of
/// `limit` instants allocated at construction (nothing is allocated after).
/// [`acquire`](Self::acquire)`(now)` first drops the grants that have aged
/// out (a grant at `t` holds its slot until `t + window`, exclusive), then
/// grants and records `now` if a slot is free. Otherwise it records nothing
/// and answers the instant at which the oldest grant ages out, **plus a
/// margin** (default 50 ms, for the server's clock and latency).
///
/// Invariant (property-tested): in every half-open interval
/// `[a, a + window)` of (clamped) time, at most `limit` grants.
///
/// **Time going backwards** is clamped to the latest `now` seen, so the log
/// stays ordered and no slot is freed or counted twice.
///
/// **Cool-down**: [`cool_down`](Self::cool_down)`(until)` refuses every
/// send until `until` (answering `Err(until)`), so that when one request
/// sharing the throttle sees a 429 with a server retry time, the others do
/// not each discover the limit.
///
/// **In-process only**: the throttle does not coordinate separate
/// processes (or separate throttles); share one value between all the
/// machines that talk to the same quota (see [`Pace`]).
///
/// **Server-informed** ([`observe`](Self::observe), fed by [`Paced`] and
/// [`BatchMachine`](crate::BatchMachine) from each answer's rate-limit
/// headers): a server that says no quota is left for `t` seconds pauses the
/// throttle until then, plus the margin, like a cool-down. A throttle made
/// with [`learning`](Self::learning) also sizes itself to the quota the
/// server advertises (`RateLimit-Policy`); one made with
/// [`new`](Self::new) keeps the size it was given.
///
/// ```
/// use polite_core::RateThrottle;
/// use std::time::{Duration, Instant};
///
/// let ms = Duration::from_millis;
/// let t0 = Instant::now();
/// let mut throttle = RateThrottle::new(3, ms(500)).unwrap();
/// assert_eq!(throttle.acquire(t0), Ok(()));
/// assert_eq!(throttle.acquire(t0 + ms(10)), Ok(()));
/// assert_eq!(throttle.acquire(t0 + ms(20)), Ok(()));
/// // Full: wait until the first grant ages out, plus the 50 ms margin.
/// assert_eq!(throttle.acquire(t0 + ms(30)), Err(t0 + ms(550)));
/// assert_eq!(throttle.acquire(t0 + ms(550)), Ok(()));
/// ```
#[derive(Clone, Debug)]
pub struct RateThrottle {
    /// Grant instants, a ring of `cap` slots allocated at construction;
    /// filled on first use, then overwritten in place.
    slots: Vec<Instant>,
    /// Index of the oldest grant.
    head: usize,
    /// Grants in the log.
    len: usize,
    /// Grants allowed per window; `usize::MAX` while a learning throttle
    /// has not learnt a quota.
    limit: usize,
    /// The ring's size: `limit` for a throttle of fixed size, the largest
    /// learnable limit for a learning one.
    cap: usize,
    /// Sizes itself from `RateLimit-Policy`.
    learning: bool,
    window: Duration,
    margin: Duration,
    /// `window + margin`, saturated.
    hold: Duration,
    latest: Option<Instant>,
    cool_until: Option<Instant>,
    /// While the log is full: the instant its oldest grant ages out, and
    /// the answer to give until then (that instant plus the margin). Set at
    /// the first refusal, so that repeated refusals are two comparisons.
    full: Option<(Instant, Instant)>,
    /// Adapts to rate-limited answers ([`adaptive`](Self::adaptive)).
    adaptive: bool,
    /// The adaptive rate, made at the first call after `adaptive()`.
    rate: Option<AdaptiveRate>,
    /// Which limit made the latest refusal.
    refused_by: PaceLimit,
}

impl Default for RateThrottle {
    /// 50 per 60 s, 50 ms margin.
    fn default() -> Self {
        RateThrottle::with_limits(50, Duration::from_secs(60))
    }
}

impl RateThrottle {
    /// The largest `limit` accepted: the log is allocated up front, one
    /// instant per slot.
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// use std::time::Duration;
    /// assert!(RateThrottle::new(RateThrottle::MAX_LIMIT + 1, Duration::from_secs(1)).is_err());
    /// ```
    pub const MAX_LIMIT: u32 = 1 << 20;

    /// The default margin added to a refusal's wait: 50 ms.
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// assert_eq!(RateThrottle::default().margin(), RateThrottle::DEFAULT_MARGIN);
    /// ```
    pub const DEFAULT_MARGIN: Duration = Duration::from_millis(50);

    /// A throttle of `limit` sends per `window`, with the default 50 ms
    /// margin.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Invalid`] naming `limit` (0, or over
    /// [`MAX_LIMIT`](Self::MAX_LIMIT)) or `window` (zero).
    ///
    /// ```
    /// use polite_core::{PolicyError, RateThrottle};
    /// use std::time::Duration;
    /// assert!(matches!(RateThrottle::new(0, Duration::from_secs(1)),
    ///                  Err(PolicyError::Invalid { field: "limit", .. })));
    /// assert!(matches!(RateThrottle::new(5, Duration::ZERO),
    ///                  Err(PolicyError::Invalid { field: "window", .. })));
    /// ```
    pub fn new(limit: u32, window: Duration) -> Result<RateThrottle, PolicyError> {
        if limit == 0 {
            return Err(PolicyError::Invalid {
                field: "limit",
                reason: "must be at least 1",
            });
        }
        if limit > Self::MAX_LIMIT {
            return Err(PolicyError::Invalid {
                field: "limit",
                reason: "must be at most 1048576 (the log is allocated up front)",
            });
        }
        if window.is_zero() {
            return Err(PolicyError::Invalid {
                field: "window",
                reason: "must be greater than zero",
            });
        }
        Ok(RateThrottle::with_limits(limit, window))
    }

    fn with_limits(limit: u32, window: Duration) -> RateThrottle {
        let limit = limit as usize;
        RateThrottle {
            slots: Vec::with_capacity(limit),
            head: 0,
            len: 0,
            limit,
            cap: limit,
            learning: false,
            window,
            margin: Self::DEFAULT_MARGIN,
            hold: window.saturating_add(Self::DEFAULT_MARGIN),
            latest: None,
            cool_until: None,
            full: None,
            adaptive: false,
            rate: None,
            refused_by: PaceLimit::Unknown,
        }
    }

    /// A throttle that learns its size from the server: **unlimited until
    /// an answer advertises a quota** (`RateLimit-Policy`, see
    /// [`crate::ratelimit`]), then `q` sends per `w`, re-sized whenever the
    /// advertised quota changes. Pauses work as for any throttle.
    ///
    /// The log is allocated **once, here**, at `max_limit` slots: resizing
    /// never allocates, and a quota above `max_limit` is capped to it (more
    /// cautious than the server, never less). While unlimited it still
    /// records the latest `max_limit` grants, so the sends made before the
    /// quota was known count against it once it is.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Invalid`] naming `max_limit` (0, or over
    /// [`MAX_LIMIT`](Self::MAX_LIMIT)).
    ///
    /// ```
    /// use polite_core::{Pace, RateThrottle};
    /// use polite_core::ratelimit::{Quota, RateLimitInfo};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut t = RateThrottle::learning(1000).unwrap();
    /// for _ in 0..8 {
    ///     assert_eq!(t.acquire(t0), Ok(())); // unlimited so far
    /// }
    /// // An answer says: 10 per second.
    /// let quota = Quota { limit: 10, window: Duration::from_secs(1) };
    /// t.observe(t0, &RateLimitInfo { quota: Some(quota), ..RateLimitInfo::default() });
    /// assert_eq!(t.quota(), Some(quota));
    /// assert_eq!(t.acquire(t0), Ok(()));
    /// assert_eq!(t.acquire(t0), Ok(())); // 10 in this second, the 8 earlier ones included
    /// assert_eq!(t.acquire(t0), Err(t0 + Duration::from_millis(1050)));
    /// ```
    pub fn learning(max_limit: u32) -> Result<RateThrottle, PolicyError> {
        if max_limit == 0 || max_limit > Self::MAX_LIMIT {
            return Err(PolicyError::Invalid {
                field: "max_limit",
                reason: "must be between 1 and 1048576 (the log is allocated up front)",
            });
        }
        let cap = max_limit as usize;
        Ok(RateThrottle {
            slots: Vec::with_capacity(cap),
            head: 0,
            len: 0,
            limit: usize::MAX,
            cap,
            learning: true,
            // Nothing ages out until a window is known.
            window: Duration::MAX,
            margin: Self::DEFAULT_MARGIN,
            hold: Duration::MAX,
            latest: None,
            cool_until: None,
            full: None,
            adaptive: false,
            rate: None,
            refused_by: PaceLimit::Unknown,
        })
    }

    /// Sets the margin added to a refusal's wait (default 50 ms; zero is
    /// allowed).
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut t = RateThrottle::new(1, Duration::from_secs(1)).unwrap().with_margin(Duration::ZERO);
    /// assert_eq!(t.acquire(t0), Ok(()));
    /// assert_eq!(t.acquire(t0), Err(t0 + Duration::from_secs(1)));
    /// ```
    #[must_use]
    pub fn with_margin(mut self, margin: Duration) -> RateThrottle {
        self.margin = margin;
        self.hold = self.window.saturating_add(margin);
        self
    }

    /// Adds an adaptive rate ([`AdaptiveRate`], the AWS SDKs' adaptive
    /// mode) for servers that give no hints (SPEC §4.1): every
    /// [`on_answer`](Self::on_answer) feeds it; the first rate-limited
    /// answer turns it on, and from then on a send needs both a free slot
    /// in the window and a token of the adaptive rate.
    ///
    /// * The window stays the **ceiling**: the adaptive rate only ever
    ///   makes the throttle stricter.
    /// * A **learnt quota wins over the guess**: once a
    ///   [learning](Self::learning) throttle knows the server's quota, the
    ///   adaptive rate no longer refuses sends.
    /// * A server that never answers rate-limited **never sees the
    ///   throttle slow down**.
    ///
    /// ```
    /// use polite_core::{PaceLimit, RateThrottle};
    /// use polite_core::adaptive::Answered;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let ms = Duration::from_millis;
    /// let mut t = RateThrottle::learning(1000).unwrap().adaptive();
    /// for i in 0..20 { // 20 quick successes: nothing slows down
    ///     let now = t0 + ms(50 * i);
    ///     assert_eq!(t.acquire(now), Ok(()));
    ///     t.on_answer(Answered::new(now, now, false));
    /// }
    /// // A bare 429: ~20/s cut to ~14/s.
    /// t.on_answer(Answered::new(t0 + ms(950), t0 + ms(1000), true));
    /// let next = t.acquire(t0 + ms(1000)).unwrap_err(); // the bucket refills first
    /// assert!(matches!(t.refusal(), PaceLimit::Adaptive { .. }));
    /// assert!(next <= t0 + ms(1040));
    /// assert_eq!(t.acquire(next), Ok(()));
    /// assert!(t.acquire(next).is_err()); // then one per ~73 ms
    /// ```
    #[must_use]
    pub fn adaptive(mut self) -> RateThrottle {
        self.adaptive = true;
        self
    }

    /// Whether an adaptive rate is part of this throttle.
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// assert!(RateThrottle::default().adaptive().is_adaptive());
    /// assert!(!RateThrottle::default().is_adaptive());
    /// ```
    #[must_use]
    pub fn is_adaptive(&self) -> bool {
        self.adaptive
    }

    /// The adaptive rate, once it has seen an answer.
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// use polite_core::adaptive::Answered;
    /// use std::time::Instant;
    /// let mut t = RateThrottle::default().adaptive();
    /// assert!(t.adaptive_rate().is_none());
    /// let now = Instant::now();
    /// t.on_answer(Answered::new(now, now, false));
    /// assert!(!t.adaptive_rate().unwrap().is_enabled());
    /// ```
    #[must_use]
    pub fn adaptive_rate(&self) -> Option<&AdaptiveRate> {
        self.rate.as_ref()
    }

    /// An answer arrived for a send of this throttle (see
    /// [`Pace::on_answer`]): feeds the adaptive rate, if there is one
    /// ([`AdaptiveRate::answered`]: one cut per burst).
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// use polite_core::adaptive::Answered;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut t = RateThrottle::default().adaptive();
    /// t.on_answer(Answered::new(t0, t0 + Duration::from_secs(2), true));
    /// assert!(t.adaptive_rate().unwrap().is_enabled());
    /// ```
    pub fn on_answer(&mut self, answer: Answered) {
        // A `now` seen: later calls with an earlier one are clamped to it.
        let now = match self.latest {
            Some(latest) if latest >= answer.at => latest,
            _ => {
                self.latest = Some(answer.at);
                answer.at
            }
        };
        if self.adaptive {
            self.rate
                .get_or_insert_with(|| AdaptiveRate::new(now))
                .answered(Answered { at: now, ..answer });
        }
    }

    /// Which limit made the latest refusal (see [`Pace::refusal`]).
    ///
    /// ```
    /// use polite_core::{PaceLimit, RateThrottle};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut t = RateThrottle::default();
    /// t.cool_down(t0 + Duration::from_secs(1));
    /// assert!(t.acquire(t0).is_err());
    /// assert_eq!(t.refusal(), PaceLimit::CoolDown);
    /// ```
    #[must_use]
    pub fn refusal(&self) -> PaceLimit {
        self.refused_by
    }

    fn window_limit(&self) -> PaceLimit {
        PaceLimit::Window {
            limit: self.limit(),
            window: self.window,
            learned: self.learning,
        }
    }

    /// Drops the grants that have aged out at `now`: a grant at `t` has
    /// aged out when `t + window <= now`. When `now - window` is not
    /// representable, nothing recorded is that old.
    #[inline]
    fn age_out(&mut self, now: Instant) {
        if let Some(cutoff) = now.checked_sub(self.window) {
            while self.len > 0 && self.slots[self.head] <= cutoff {
                self.head += 1;
                if self.head == self.cap {
                    self.head = 0;
                }
                self.len -= 1;
            }
        }
    }

    /// Asks for one send at `now`.
    ///
    /// Drops the grants older than the window; if a slot is free, records
    /// `now` and answers `Ok(())`. Otherwise records nothing and answers
    /// `Err(t)`: the oldest grant ages out at `t` minus the margin. During a
    /// cool-down it answers `Err(until)` without looking at the log.
    ///
    /// `now` earlier than a `now` already seen is taken as that latest
    /// `now`. Constant memory, no allocation, a few nanoseconds.
    ///
    /// # Errors
    ///
    /// `Err(t)` with `t > now`: sleep until `t`, then ask again.
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut t = RateThrottle::new(1, Duration::from_secs(1)).unwrap();
    /// assert_eq!(t.acquire(t0 + Duration::from_secs(5)), Ok(()));
    /// // Backwards: clamped to t0 + 5 s, so still inside the window.
    /// assert_eq!(t.acquire(t0), Err(t0 + Duration::from_millis(6050)));
    /// ```
    #[inline]
    pub fn acquire(&mut self, now: Instant) -> Result<(), Instant> {
        let now = match self.latest {
            Some(latest) if latest >= now => latest,
            _ => {
                self.latest = Some(now);
                now
            }
        };
        if let Some(until) = self.cool_until
            && now < until
        {
            self.refused_by = PaceLimit::CoolDown;
            return Err(until);
        }
        if let Some((until, answer)) = self.full {
            if now < until {
                // Still full: nothing has aged out and nothing was granted.
                self.refused_by = self.window_limit();
                return Err(answer);
            }
            self.full = None;
        }
        self.age_out(now);
        if self.len < self.limit {
            // The adaptive rate guesses only while no quota was learnt.
            if self.adaptive && !(self.learning && self.limit != usize::MAX) {
                let rate = self.rate.get_or_insert_with(|| AdaptiveRate::new(now));
                if let Err(t) = rate.acquire(now) {
                    self.refused_by = PaceLimit::Adaptive {
                        interval: rate.interval(),
                    };
                    return Err(t);
                }
            }
            if self.len == self.cap {
                // Only an unsized learning throttle gets here (otherwise
                // len < limit <= cap): keep the latest `cap` grants.
                self.head += 1;
                if self.head == self.cap {
                    self.head = 0;
                }
                self.len -= 1;
            }
            let mut tail = self.head + self.len;
            if tail >= self.cap {
                tail -= self.cap;
            }
            if tail == self.slots.len() {
                // First pass over the ring: within the capacity reserved at
                // construction, so this never reallocates.
                self.slots.push(now);
            } else {
                self.slots[tail] = now;
            }
            self.len += 1;
            Ok(())
        } else {
            Err(self.refuse())
        }
    }

    /// The log is full: cache when it frees and what to answer until then.
    /// After a learning throttle shrank, the log may hold more than `limit`
    /// grants: a slot frees when the `(len - limit + 1)`-th oldest ages out.
    #[cold]
    fn refuse(&mut self) -> Instant {
        let mut i = self.head + (self.len - self.limit);
        if i >= self.cap {
            i -= self.cap;
        }
        let oldest = self.slots[i];
        self.refused_by = self.window_limit();
        let answer = deadline_after(oldest, self.hold);
        self.full = Some((oldest.checked_add(self.window).unwrap_or(answer), answer));
        answer
    }

    /// Refuses every send until `until`: [`acquire`](Self::acquire) answers
    /// `Err(until)` meanwhile. Call it when a request sharing this throttle
    /// gets a 429 with a server retry time. A later call never shortens an
    /// earlier cool-down.
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut t = RateThrottle::default();
    /// t.cool_down(t0 + Duration::from_secs(2));
    /// t.cool_down(t0 + Duration::from_secs(1)); // does not shorten it
    /// assert_eq!(t.acquire(t0), Err(t0 + Duration::from_secs(2)));
    /// assert_eq!(t.acquire(t0 + Duration::from_secs(2)), Ok(()));
    /// ```
    pub fn cool_down(&mut self, until: Instant) {
        self.cool_until = Some(match self.cool_until {
            Some(c) if c > until => c,
            _ => until,
        });
    }

    /// The end of the current cool-down, if one was ever set (it may lie
    /// in the past).
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// assert_eq!(RateThrottle::default().cooling_until(), None);
    /// ```
    #[must_use]
    pub fn cooling_until(&self) -> Option<Instant> {
        self.cool_until
    }

    /// What a server said about its quota, at `now` (see [`Pace::observe`]):
    /// a pause refuses every send until `now + pause + margin` (a
    /// cool-down); a quota re-sizes a [learning](Self::learning) throttle
    /// (capped to its maximum; a throttle of fixed size keeps its size).
    /// Never allocates.
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// use polite_core::ratelimit::{Quota, RateLimitInfo};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let quota = Some(Quota { limit: 5, window: Duration::from_secs(1) });
    /// let mut fixed = RateThrottle::new(50, Duration::from_secs(60)).unwrap();
    /// fixed.observe(t0, &RateLimitInfo { quota, pause: Some(Duration::from_secs(2)), ..Default::default() });
    /// assert_eq!(fixed.limit(), 50); // kept its size...
    /// assert_eq!(fixed.acquire(t0), Err(t0 + Duration::from_millis(2050))); // ...but pauses
    /// ```
    pub fn observe(&mut self, now: Instant, info: &RateLimitInfo) {
        if self.learning
            && let Some(q) = info.quota
        {
            self.resize(q);
        }
        if let Some(pause) = info.pause
            && !self.log_covers(now, info)
        {
            self.cool_down(deadline_after(now, pause.saturating_add(self.margin)));
        }
    }

    /// Whether the log already refuses for as long as a server pause can
    /// matter: the server advertises its quota, this throttle's own is at
    /// least as strict (no more sends, over no shorter a window), and the
    /// log is full at `now`. Then the log's own refusal (its oldest grant
    /// ages out, plus the margin) comes no earlier than the server's
    /// window resets — a sliding window of `limit` never puts more than
    /// `limit` sends in any window of the server's — and it is exact,
    /// where `RateLimit`'s reset is whole seconds, rounded up (a 500 ms
    /// window's "0.49 s left" arrives as `t=1`). When the log is not full
    /// (others share the quota) or the server's quota is unknown, the
    /// pause is obeyed.
    fn log_covers(&mut self, now: Instant, info: &RateLimitInfo) -> bool {
        let Some(q) = info.quota else {
            return false;
        };
        if self.limit == usize::MAX || (self.limit as u64) > q.limit || self.window < q.window {
            return false;
        }
        let now = self.latest.map_or(now, |l| l.max(now));
        self.age_out(now);
        self.len >= self.limit
    }

    /// Sizes a learning throttle to `q` (capped to its ring).
    fn resize(&mut self, q: Quota) {
        let limit = usize::try_from(q.limit)
            .unwrap_or(usize::MAX)
            .clamp(1, self.cap);
        let window = q.window.max(Duration::from_nanos(1));
        if limit == self.limit && window == self.window {
            return;
        }
        self.limit = limit;
        self.window = window;
        self.hold = window.saturating_add(self.margin);
        self.full = None;
    }

    /// Whether this throttle sizes itself from the server
    /// ([`learning`](Self::learning)).
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// assert!(RateThrottle::learning(100).unwrap().is_learning());
    /// assert!(!RateThrottle::default().is_learning());
    /// ```
    #[must_use]
    pub fn is_learning(&self) -> bool {
        self.learning
    }

    /// The quota it paces by now: `None` for a learning throttle that has
    /// not learnt one yet (it is unlimited).
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// use polite_core::ratelimit::Quota;
    /// use std::time::Duration;
    /// assert_eq!(RateThrottle::default().quota(),
    ///            Some(Quota { limit: 50, window: Duration::from_secs(60) }));
    /// assert_eq!(RateThrottle::learning(100).unwrap().quota(), None);
    /// ```
    #[must_use]
    pub fn quota(&self) -> Option<Quota> {
        (self.limit != usize::MAX).then_some(Quota {
            limit: self.limit as u64,
            window: self.window,
        })
    }

    /// Sends allowed per window (`u32::MAX` while a learning throttle is
    /// unlimited).
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// assert_eq!(RateThrottle::default().limit(), 50);
    /// assert_eq!(RateThrottle::learning(10).unwrap().limit(), u32::MAX);
    /// ```
    #[must_use]
    pub fn limit(&self) -> u32 {
        u32::try_from(self.limit).unwrap_or(u32::MAX)
    }

    /// The window (`Duration::MAX` while a learning throttle is unlimited).
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// use std::time::Duration;
    /// assert_eq!(RateThrottle::default().window(), Duration::from_secs(60));
    /// ```
    #[must_use]
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The margin added to a refusal's wait.
    ///
    /// ```
    /// use polite_core::RateThrottle;
    /// use std::time::Duration;
    /// assert_eq!(RateThrottle::default().margin(), Duration::from_millis(50));
    /// ```
    #[must_use]
    pub fn margin(&self) -> Duration {
        self.margin
    }
}

impl Pace for RateThrottle {
    #[inline]
    fn acquire(&mut self, now: Instant) -> Result<(), Instant> {
        RateThrottle::acquire(self, now)
    }
    #[inline]
    fn cool_down(&mut self, until: Instant) {
        RateThrottle::cool_down(self, until);
    }
    #[inline]
    fn observe(&mut self, now: Instant, info: &RateLimitInfo) {
        RateThrottle::observe(self, now, info);
    }
    #[inline]
    fn on_answer(&mut self, answer: Answered) {
        RateThrottle::on_answer(self, answer);
    }
    #[inline]
    fn refusal(&self) -> PaceLimit {
        self.refused_by
    }
}

/// Reads the rate-limit headers of `response` that `headers` enables and
/// hands what they say to `pace`. Costs a few `Option` checks when the
/// answer has none. Returns whether the pace was told anything (a caller
/// caching a refusal then asks again).
pub(crate) fn observe_rate_limit<P: Pace + ?Sized>(
    pace: &mut P,
    headers: &RateLimitHeaders,
    now: Instant,
    response: &Response<'_>,
) -> bool {
    if response.rate_limit.is_empty() {
        return false;
    }
    let info = RateLimitInfo::read(response, headers);
    if info.quota.is_none() && info.pause.is_none() {
        return false;
    }
    pace.observe(now, &info);
    true
}

/// The shared cool-down after a rate-limited answer: when `rate_limited`
/// and the answer carries a valid `Retry-After`, every request sharing
/// `pace` waits until `now + delay`, the delay clamped to
/// `[limits.min, limits.max]` (a hostile `Retry-After: 86400` must not
/// stall everyone for a day).
pub(crate) fn cool_down_after<P: Pace + ?Sized>(
    pace: &mut P,
    limits: &RetryAfterLimits,
    now: Instant,
    rate_limited: bool,
    response: &Response<'_>,
) -> bool {
    if !rate_limited {
        return false;
    }
    let Some(value) = response.retry_after else {
        return false;
    };
    if let Ok(d) = retry_after::server_delay(value, response.date, response.wall_clock)
        && let Some(until) = now.checked_add(d.clamp(limits.min, limits.max))
    {
        pace.cool_down(until);
        return true;
    }
    false
}

/// What a pace learns from one answered attempt, the same for [`Paced`]
/// and [`BatchMachine`](crate::BatchMachine) (SPEC §4.1), decided by the
/// attempt's class — the retry policy's or the caller's classifier's, not
/// a fixed status:
///
/// * a rate-limited answer with a valid `Retry-After` cools the pace down
///   until the server's time (clamped to `limits`): the server said when,
///   and that is obeyed, not guessed at;
/// * a rate-limited answer **without** a server time cools it down until
///   the item's own computed backoff ends (`record.next`), so everything
///   sharing the pace slows down, not only the refused item, and feeds
///   [`Pace::on_answer`] as a throttle (the adaptive rate is cut);
/// * every other answer feeds [`Pace::on_answer`] as a success.
pub(crate) fn after_answer<P: Pace + ?Sized>(
    pace: &mut P,
    limits: &RetryAfterLimits,
    sent: Instant,
    now: Instant,
    response: Option<&Response<'_>>,
    record: &AttemptRecord,
) {
    if record.class != Some(RetryClass::RateLimited) {
        pace.on_answer(Answered::new(sent, now, false));
        return;
    }
    if let Some(r) = response
        && cool_down_after(pace, limits, now, true, r)
    {
        return;
    }
    pace.on_answer(Answered::new(sent, now, true));
    if let Some(next) = record.next
        && next.send_at > now
    {
        pace.cool_down(next.send_at);
    }
}

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
/// use polite_core::testing::SplitMix64;
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
    /// # use polite_core::testing::SplitMix64;
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
    /// use polite_core::{Method, Paced, RateThrottle, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// use polite_core::ratelimit::RateLimitHeaders;
    /// use polite_core::testing::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                           SplitMix64::new(1), t0, Duration::from_secs(5)).unwrap();
    /// let _paced = Paced::new(m, RateThrottle::learning(100).unwrap(), t0)
    ///     .rate_limit_headers(RateLimitHeaders::default().with_x_ratelimit());
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
    /// use polite_core::{Paced, RetryAfterLimits, RetryMachine, RetryPolicy, RequestInfo, RequestId,
    ///                   Method, Unpaced};
    /// use polite_core::testing::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let policy = RetryPolicy::default();
    /// let m = RetryMachine::new(policy, RequestInfo::new(RequestId(1), Method::Get),
    ///                           SplitMix64::new(1), t0, Duration::from_secs(5)).unwrap();
    /// let _paced = Paced::new(m, Unpaced, t0).retry_after_limits(policy.retry_after);
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
    /// # use polite_core::testing::SplitMix64;
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
    /// # use polite_core::testing::SplitMix64;
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
    /// # use polite_core::testing::SplitMix64;
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
    /// # use polite_core::testing::SplitMix64;
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
    /// # use polite_core::testing::SplitMix64;
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
    /// # use polite_core::testing::SplitMix64;
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
    fn take_notice(&mut self) -> Option<crate::Notice> {
        self.inner.take_notice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn t0() -> Instant {
        crate::testing::origin()
    }

    fn throttle(limit: u32, window_ms: u32) -> RateThrottle {
        RateThrottle::new(limit, window_ms * MS).unwrap()
    }

    #[test]
    fn validates_limit_and_window() {
        let field = |r: Result<RateThrottle, PolicyError>| match r {
            Err(PolicyError::Invalid { field, .. }) => field,
            Ok(_) => "accepted",
        };
        assert_eq!(field(RateThrottle::new(0, MS)), "limit");
        assert_eq!(
            field(RateThrottle::new(RateThrottle::MAX_LIMIT + 1, MS)),
            "limit"
        );
        assert_eq!(field(RateThrottle::new(1, Duration::ZERO)), "window");
        assert!(RateThrottle::new(RateThrottle::MAX_LIMIT, MS).is_ok());
        let d = RateThrottle::default();
        assert_eq!(
            (d.limit(), d.window(), d.margin()),
            (50, 60_000 * MS, 50 * MS)
        );
    }

    #[test]
    fn burst_then_refusal_then_age_out() {
        let t0 = t0();
        let mut t = throttle(3, 500);
        for _ in 0..3 {
            assert_eq!(t.acquire(t0), Ok(()));
        }
        // Refused: the oldest (t0) ages out at 500 ms; + 50 ms margin.
        assert_eq!(t.acquire(t0 + 499 * MS), Err(t0 + 550 * MS));
        // At exactly t0 + window all three slots have aged out (half-open).
        for _ in 0..3 {
            assert_eq!(t.acquire(t0 + 500 * MS), Ok(()));
        }
        assert_eq!(t.acquire(t0 + 500 * MS), Err(t0 + 1050 * MS));
    }

    #[test]
    fn sliding_not_fixed() {
        let t0 = t0();
        let mut t = throttle(2, 1000);
        assert_eq!(t.acquire(t0), Ok(()));
        assert_eq!(t.acquire(t0 + 600 * MS), Ok(()));
        // The first grant frees at 1000 ms; the second still counts.
        assert_eq!(t.acquire(t0 + 999 * MS), Err(t0 + 1050 * MS));
        assert_eq!(t.acquire(t0 + 1000 * MS), Ok(()));
        // Now the oldest is the one at 600 ms.
        assert_eq!(t.acquire(t0 + 1001 * MS), Err(t0 + 1650 * MS));
    }

    #[test]
    fn refusals_are_not_counted() {
        let t0 = t0();
        let mut t = throttle(1, 1000);
        assert_eq!(t.acquire(t0), Ok(()));
        for i in 1..100 {
            assert_eq!(t.acquire(t0 + i * MS), Err(t0 + 1050 * MS));
        }
        // Hundreds of refusals later, exactly one slot frees at 1000 ms.
        assert_eq!(t.acquire(t0 + 1000 * MS), Ok(()));
        assert_eq!(t.acquire(t0 + 1000 * MS), Err(t0 + 2050 * MS));
    }

    #[test]
    fn margin_is_configurable() {
        let t0 = t0();
        let mut t = throttle(1, 100).with_margin(7 * MS);
        assert_eq!(t.acquire(t0), Ok(()));
        assert_eq!(t.acquire(t0), Err(t0 + 107 * MS));
        assert_eq!(t.margin(), 7 * MS);
    }

    #[test]
    fn clock_stepping_backwards_is_clamped() {
        let t0 = t0();
        let mut t = throttle(2, 1000);
        assert_eq!(t.acquire(t0 + 5000 * MS), Ok(()));
        // A stale `now` counts as 5000 ms: the grant is recorded there, not
        // in the past (it would free early and let a third send through).
        assert_eq!(t.acquire(t0), Ok(()));
        assert_eq!(t.acquire(t0 + 100 * MS), Err(t0 + 6050 * MS));
        assert_eq!(t.acquire(t0 + 5999 * MS), Err(t0 + 6050 * MS));
        assert_eq!(t.acquire(t0 + 6000 * MS), Ok(()));
        assert_eq!(t.acquire(t0 + 6000 * MS), Ok(()));
        assert_eq!(t.acquire(t0 + 6000 * MS), Err(t0 + 7050 * MS));
    }

    #[test]
    fn ring_wraps_many_times() {
        let t0 = t0();
        let mut t = throttle(3, 30);
        let mut granted = 0;
        for i in 0..1000u32 {
            if t.acquire(t0 + i * MS).is_ok() {
                granted += 1;
            }
        }
        // 3 per 30 ms over 1000 ms: 100 full windows → 3 * 34 (last partial).
        assert_eq!(granted, 3 * 34);
        assert_eq!(t.slots.capacity(), 3, "no reallocation");
    }

    #[test]
    fn cool_down_refuses_everyone_until_then() {
        let t0 = t0();
        let mut t = throttle(10, 1000);
        assert_eq!(t.acquire(t0), Ok(()));
        t.cool_down(t0 + 2000 * MS);
        assert_eq!(t.acquire(t0 + MS), Err(t0 + 2000 * MS));
        assert_eq!(t.acquire(t0 + 1999 * MS), Err(t0 + 2000 * MS));
        // A shorter cool-down does not shorten it.
        t.cool_down(t0 + 1500 * MS);
        assert_eq!(t.cooling_until(), Some(t0 + 2000 * MS));
        assert_eq!(t.acquire(t0 + 2000 * MS), Ok(()));
        // The window still applies after the cool-down.
        for _ in 0..9 {
            assert_eq!(t.acquire(t0 + 2000 * MS), Ok(()));
        }
        assert_eq!(t.acquire(t0 + 2000 * MS), Err(t0 + 3050 * MS));
    }

    #[test]
    fn cool_down_clamps_the_server_delay() {
        let t0 = t0();
        let wall = std::time::UNIX_EPOCH;
        let limits = RetryAfterLimits::default();
        let mut t = throttle(10, 1000);
        let r = Response::new(crate::SendId::default(), 429, wall).retry_after(b"86400");
        cool_down_after(&mut t, &limits, t0, true, &r);
        assert_eq!(t.cooling_until(), Some(t0 + limits.max));
        let mut t = throttle(10, 1000);
        let r = Response::new(crate::SendId::default(), 429, wall).retry_after(b"0");
        cool_down_after(&mut t, &limits, t0, true, &r);
        assert_eq!(t.cooling_until(), Some(t0 + limits.min));
        // Invalid header, or not rate limited: no cool-down.
        let mut t = throttle(10, 1000);
        let r = Response::new(crate::SendId::default(), 429, wall).retry_after(b"1.5");
        cool_down_after(&mut t, &limits, t0, true, &r);
        let r = Response::new(crate::SendId::default(), 503, wall).retry_after(b"5");
        cool_down_after(&mut t, &limits, t0, false, &r);
        assert_eq!(t.cooling_until(), None);
    }

    #[test]
    fn poisoned_mutex_is_recovered() {
        let shared = Arc::new(Mutex::new(throttle(1, 1000)));
        let poisoner = Arc::clone(&shared);
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.lock().unwrap();
            panic!("poison the lock");
        })
        .join();
        assert!(shared.is_poisoned());
        let mut handle = Arc::clone(&shared);
        let t0 = t0();
        assert_eq!(Pace::acquire(&mut handle, t0), Ok(()));
        assert_eq!(Pace::acquire(&mut handle, t0), Err(t0 + 1050 * MS));
        handle.cool_down(t0 + 5000 * MS);
        assert_eq!(Pace::acquire(&mut handle, t0), Err(t0 + 5000 * MS));
    }

    #[test]
    fn shared_handles_share_one_log() {
        let t0 = t0();
        let rc = Rc::new(RefCell::new(throttle(2, 1000)));
        let (mut a, mut b) = (Rc::clone(&rc), Rc::clone(&rc));
        assert_eq!(Pace::acquire(&mut a, t0), Ok(()));
        assert_eq!(Pace::acquire(&mut b, t0), Ok(()));
        assert!(Pace::acquire(&mut a, t0).is_err());
        let mut owned = throttle(1, 1000);
        let mut by_ref = &mut owned;
        assert_eq!(Pace::acquire(&mut by_ref, t0), Ok(()));
        let mut boxed: Box<dyn Pace> = Box::new(throttle(1, 1000));
        assert_eq!(boxed.acquire(t0), Ok(()));
        assert!(boxed.acquire(t0).is_err());
    }
}
