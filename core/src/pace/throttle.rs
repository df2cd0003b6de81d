//! [`RateThrottle`]: the sliding-window log with a shared cool-down, a
//! learnt size, and an optional adaptive rate. What the server says about
//! its quota (pauses, the size a learning throttle learns) is in [`quota`].

use std::time::{Duration, Instant};

use crate::adaptive::{AdaptiveRate, Answered};
use crate::decide::deadline_after;
use crate::outcome::PaceLimit;
use crate::policy::PolicyError;
use crate::ratelimit::RateLimitInfo;

mod quota;

use super::Pace;

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
/// **Server-informed** ([`observe`](Self::observe), fed by [`Paced`](crate::Paced) and
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
#[derive(Debug)]
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

/// A clone has a log of its own with the original's capacity (`cap`
/// slots), so that it never reallocates either (a derived `Clone` would
/// copy only the grants recorded: the clone of a fresh throttle would
/// allocate at its first grant).
impl Clone for RateThrottle {
    fn clone(&self) -> RateThrottle {
        let mut slots = Vec::with_capacity(self.cap);
        slots.extend_from_slice(&self.slots);
        RateThrottle {
            slots,
            head: self.head,
            len: self.len,
            limit: self.limit,
            cap: self.cap,
            learning: self.learning,
            window: self.window,
            margin: self.margin,
            hold: self.hold,
            latest: self.latest,
            cool_until: self.cool_until,
            full: self.full,
            adaptive: self.adaptive,
            rate: self.rate.clone(),
            refused_by: self.refused_by,
        }
    }
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
    /// use polite_core::RateThrottle;
    /// use polite_core::policy::PolicyError;
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
    /// use polite_core::RateThrottle;
    /// use polite_core::pace::PaceLimit;
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
    /// use polite_core::RateThrottle;
    /// use polite_core::pace::PaceLimit;
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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// An arbitrary start for virtual time, read once (unit tests inside
    /// the crate cannot use `polite_testing::origin`: that crate sees
    /// another copy of this one).
    fn t0() -> Instant {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        #[allow(clippy::disallowed_methods)] // the one clock read: an arbitrary origin
        *ORIGIN.get_or_init(Instant::now)
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
    fn clones_keep_the_log_capacity() {
        let t0 = t0();
        let fresh = throttle(3, 30);
        let mut used = throttle(3, 30);
        assert_eq!(used.acquire(t0), Ok(()));
        for mut t in [fresh.clone(), used.clone()] {
            assert_eq!(t.slots.capacity(), 3);
            for i in 0..100u32 {
                let _ = t.acquire(t0 + i * MS);
            }
            assert_eq!(t.slots.capacity(), 3, "no reallocation");
        }
        // The clone goes on from the original's state.
        let mut a = used.clone();
        for i in 0..100u32 {
            assert_eq!(a.acquire(t0 + i * 7 * MS), used.acquire(t0 + i * 7 * MS));
        }
        let learning = RateThrottle::learning(1000).unwrap();
        assert_eq!(learning.clone().slots.capacity(), 1000);
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
}
