//! [`ClientPace`]: the pace every call of one client shares.

use std::time::Instant;

use polite_core::adaptive::{AdaptiveRate, Answered};
use polite_core::pace::PaceLimit;
use polite_core::ratelimit::RateLimitInfo;
use polite_core::{Pace, RateThrottle};

use crate::fleet::{FleetGrant, FleetPace};

/// A client's shared pace: an optional [`RateThrottle`] plus a cool-down
/// that works even without a throttle, so that a 429 seen by one call holds
/// off every other call of the same client until the server's time, and —
/// without a throttle — an optional [`AdaptiveRate`] (a throttle brings
/// its own, [`RateThrottle::adaptive`]).
///
/// ```
/// use polite_client::ClientPace;
/// use polite_core::Pace;
/// use std::time::{Duration, Instant};
/// let mut p = ClientPace::new(None);
/// let t0 = Instant::now();
/// assert_eq!(p.acquire(t0), Ok(()));
/// p.cool_down(t0 + Duration::from_secs(2));
/// assert_eq!(p.acquire(t0), Err(t0 + Duration::from_secs(2)));
/// assert_eq!(p.acquire(t0 + Duration::from_secs(2)), Ok(()));
/// ```
#[derive(Debug)]
pub struct ClientPace {
    throttle: Option<RateThrottle>,
    cooling_until: Option<Instant>,
    /// Without a throttle: adapt to rate-limited answers (made at the first
    /// call when `adaptive`).
    adaptive: bool,
    rate: Option<AdaptiveRate>,
    refused_by: PaceLimit,
    /// The fleet-wide pace (SPEC §4.3), asked first; the local pace above
    /// is the fallback while it does not answer.
    fleet: Option<Box<dyn FleetPace>>,
    /// How many processes share the quota: the local fallback's share.
    fleet_size: u32,
}

impl ClientPace {
    /// A pace with an optional throttle.
    #[must_use]
    pub fn new(throttle: Option<RateThrottle>) -> ClientPace {
        ClientPace {
            throttle,
            cooling_until: None,
            adaptive: false,
            rate: None,
            refused_by: PaceLimit::Unknown,
            fleet: None,
            fleet_size: 1,
        }
    }

    /// Asks `fleet` first (a pace shared with other processes, SPEC §4.3):
    /// its grants and refusals decide; while it answers
    /// [`FleetGrant::Unavailable`] this pace decides alone — its throttle
    /// should then be the fleet's divided by `fleet_size`, and a quota it
    /// learns from the server is divided by `fleet_size` too. Cool-downs,
    /// quotas and answers go to both.
    ///
    /// ```
    /// use polite_client::{ClientPace, FleetGrant, FleetPace};
    /// use polite_core::{Pace, adaptive::Answered, ratelimit::RateLimitInfo};
    /// use std::time::{Duration, Instant};
    /// #[derive(Debug)]
    /// struct Closed(Instant);
    /// impl FleetPace for Closed {
    ///     fn acquire(&mut self, _: Instant) -> FleetGrant {
    ///         FleetGrant::Refused { until: self.0, by: Default::default() }
    ///     }
    ///     fn cool_down(&mut self, _: Instant) {}
    ///     fn observe(&mut self, _: Instant, _: &RateLimitInfo) {}
    ///     fn on_answer(&mut self, _: Answered) {}
    /// }
    /// let t0 = Instant::now();
    /// let later = t0 + Duration::from_secs(1);
    /// let mut p = ClientPace::new(None).with_fleet(Box::new(Closed(later)), 4);
    /// assert_eq!(p.acquire(t0), Err(later));
    /// ```
    #[must_use]
    pub fn with_fleet(mut self, fleet: Box<dyn FleetPace>, fleet_size: u32) -> ClientPace {
        self.fleet = Some(fleet);
        self.fleet_size = fleet_size.max(1);
        self
    }

    /// Without a throttle, also adapt the send rate to rate-limited
    /// answers ([`AdaptiveRate`]); with one, make the throttle
    /// [adaptive](RateThrottle::adaptive) instead.
    ///
    /// ```
    /// use polite_client::ClientPace;
    /// use polite_core::Pace;
    /// use polite_core::adaptive::Answered;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut p = ClientPace::new(None).adaptive();
    /// assert_eq!(p.acquire(t0), Ok(()));
    /// p.on_answer(Answered::new(t0, t0 + Duration::from_secs(2), true)); // a bare 429
    /// assert!(p.acquire(t0 + Duration::from_secs(2)).is_err());
    /// ```
    #[must_use]
    pub fn adaptive(mut self) -> ClientPace {
        match self.throttle.take() {
            Some(t) => self.throttle = Some(t.adaptive()),
            None => self.adaptive = true,
        }
        self
    }

    /// Whether the pace holds nothing worth keeping at `now`: no cool-down
    /// still running. (A throttle's log and an adaptive rate are
    /// relearnt after an idle spell.)
    ///
    /// ```
    /// use polite_client::ClientPace;
    /// use polite_core::Pace;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut p = ClientPace::new(None);
    /// p.cool_down(t0 + Duration::from_secs(5));
    /// assert!(!p.quiet_at(t0));
    /// assert!(p.quiet_at(t0 + Duration::from_secs(5)));
    /// ```
    #[must_use]
    pub fn quiet_at(&self, now: Instant) -> bool {
        self.cooling_until.is_none_or(|until| until <= now)
    }

    /// The throttle, if one is configured.
    #[must_use]
    pub fn throttle(&self) -> Option<&RateThrottle> {
        self.throttle.as_ref()
    }

    /// The rate the pace has settled on, sends per second: the throttle's
    /// limit per window (once a learning throttle has learnt a quota), or
    /// the adaptive rate once a rate-limited answer has enabled it,
    /// whichever is lower; `None` while nothing limits the rate (a
    /// cool-down is a pause, not a rate).
    ///
    /// ```
    /// use polite_client::ClientPace;
    /// use polite_core::{Pace, RateThrottle};
    /// use polite_core::adaptive::Answered;
    /// use std::time::{Duration, Instant};
    /// let throttle = RateThrottle::new(50, Duration::from_secs(10)).unwrap();
    /// assert_eq!(ClientPace::new(Some(throttle)).rate(), Some(5.0));
    /// let t0 = Instant::now();
    /// let mut p = ClientPace::new(None).adaptive();
    /// assert_eq!(p.rate(), None);
    /// p.on_answer(Answered::new(t0, t0 + Duration::from_secs(2), true)); // a bare 429
    /// assert_eq!(p.rate(), Some(0.5)); // the adaptive floor
    /// ```
    #[must_use]
    pub fn rate(&self) -> Option<f64> {
        let (window, adaptive) = match &self.throttle {
            Some(t) => {
                let limit = t.limit();
                let window = t.window().as_secs_f64();
                let sized = limit != u32::MAX && window > 0.0;
                // The throttle adapts only while no quota was learnt.
                let adapts = !(t.is_learning() && sized);
                (
                    sized.then(|| f64::from(limit) / window),
                    t.adaptive_rate().filter(|_| adapts),
                )
            }
            None => (None, self.rate.as_ref()),
        };
        let adaptive = adaptive
            .filter(|r| r.is_enabled())
            .map(AdaptiveRate::fill_rate);
        match (window, adaptive) {
            (Some(w), Some(a)) => Some(w.min(a)),
            (w, a) => w.or(a),
        }
    }
}

impl Pace for ClientPace {
    fn acquire(&mut self, now: Instant) -> Result<(), Instant> {
        if let Some(until) = self.cooling_until {
            if now < until {
                self.refused_by = PaceLimit::CoolDown;
                return Err(until);
            }
            self.cooling_until = None;
        }
        if let Some(fleet) = &mut self.fleet {
            match fleet.acquire(now) {
                FleetGrant::Granted => return Ok(()),
                FleetGrant::Refused { until, by } if until > now => {
                    self.refused_by = by;
                    return Err(until);
                }
                // A refusal in the past: ask locally rather than spin.
                FleetGrant::Refused { .. } | FleetGrant::Unavailable => {}
            }
        }
        if let Some(t) = &mut self.throttle {
            let r = t.acquire(now);
            self.refused_by = t.refusal();
            return r;
        }
        if self.adaptive {
            let rate = self.rate.get_or_insert_with(|| AdaptiveRate::new(now));
            rate.acquire(now).inspect_err(|_| {
                self.refused_by = PaceLimit::Adaptive {
                    interval: rate.interval(),
                };
            })
        } else {
            Ok(())
        }
    }

    fn on_answer(&mut self, answer: Answered) {
        if let Some(fleet) = &mut self.fleet {
            fleet.on_answer(answer);
        }
        if let Some(t) = &mut self.throttle {
            t.on_answer(answer);
        } else if self.adaptive {
            self.rate
                .get_or_insert_with(|| AdaptiveRate::new(answer.at))
                .answered(answer);
        }
    }

    fn refusal(&self) -> PaceLimit {
        self.refused_by
    }

    fn cool_down(&mut self, until: Instant) {
        if let Some(fleet) = &mut self.fleet {
            fleet.cool_down(until);
        }
        if self.cooling_until.is_none_or(|u| u < until) {
            self.cooling_until = Some(until);
        }
    }

    /// Server-informed pacing: a learning throttle sizes itself from a
    /// `RateLimit-Policy`; a `RateLimit: r=0;t=N` pauses every call (through
    /// the throttle, or the client's own cool-down when there is none).
    fn observe(&mut self, now: Instant, info: &RateLimitInfo) {
        let share;
        let mut info = info;
        if let Some(fleet) = &mut self.fleet {
            fleet.observe(now, info);
            if let Some(q) = info.quota
                && self.fleet_size > 1
            {
                // The local fallback's share of the fleet's quota.
                let mut q = q;
                q.limit = q.limit.div_ceil(u64::from(self.fleet_size));
                let mut s = *info;
                s.quota = Some(q);
                share = s;
                info = &share;
            }
        }
        match &mut self.throttle {
            Some(t) => t.observe(now, info),
            None => {
                if let Some(pause) = info.pause
                    && let Some(until) = now.checked_add(pause)
                {
                    self.cool_down(until);
                }
            }
        }
    }
}
