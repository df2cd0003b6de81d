//! A [`RateThrottle`] and what the server says about its quota
//! ([`observe`](RateThrottle::observe), fed from each answer's rate-limit
//! headers): a pause refuses every send until it ends, and a
//! [`learning`](RateThrottle::learning) throttle sizes itself to the
//! advertised quota.

use std::time::{Duration, Instant};

use crate::decide::deadline_after;
use crate::outcome::PaceLimit;
use crate::policy::PolicyError;
use crate::ratelimit::{Quota, RateLimitInfo};

use super::RateThrottle;

impl RateThrottle {
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

    /// What a server said about its quota, at `now` (see [`Pace::observe`](crate::Pace::observe)):
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
}
