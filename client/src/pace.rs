//! [`ClientPace`]: the pace every call of one client shares.

use std::time::Instant;

use polite_core::ratelimit::RateLimitInfo;
use polite_core::{Pace, RateThrottle};

/// A client's shared pace: an optional [`RateThrottle`] plus a cool-down
/// that works even without a throttle, so that a 429 seen by one call holds
/// off every other call of the same client until the server's time.
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
}

impl ClientPace {
    /// A pace with an optional throttle.
    #[must_use]
    pub fn new(throttle: Option<RateThrottle>) -> ClientPace {
        ClientPace {
            throttle,
            cooling_until: None,
        }
    }

    /// The throttle, if one is configured.
    #[must_use]
    pub fn throttle(&self) -> Option<&RateThrottle> {
        self.throttle.as_ref()
    }
}

impl Pace for ClientPace {
    fn acquire(&mut self, now: Instant) -> Result<(), Instant> {
        if let Some(until) = self.cooling_until {
            if now < until {
                return Err(until);
            }
            self.cooling_until = None;
        }
        match &mut self.throttle {
            Some(t) => t.acquire(now),
            None => Ok(()),
        }
    }

    fn cool_down(&mut self, until: Instant) {
        if self.cooling_until.is_none_or(|u| u < until) {
            self.cooling_until = Some(until);
        }
    }

    /// Server-informed pacing: a learning throttle sizes itself from a
    /// `RateLimit-Policy`; a `RateLimit: r=0;t=N` pauses every call (through
    /// the throttle, or the client's own cool-down when there is none).
    fn observe(&mut self, now: Instant, info: &RateLimitInfo) {
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
