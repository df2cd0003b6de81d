//! [`ThrottleChecker`]: a plainly written reference for
//! [`RateThrottle`](polite_core::RateThrottle), checked answer by answer.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::{Violation, violation};
use polite_core::RateThrottle;

/// Checks the answers of a [`RateThrottle`] (SPEC §4) against a reference
/// written as plainly as possible: a list of grant instants, time clamped
/// to its running maximum. Feed it every call and its answer. Rules:
///
/// * `rate`: a grant while `limit` grants are younger than `window` (in
///   every half-open interval `[a, a + window)` at most `limit` grants);
/// * `refusal-not-after-now`: a refusal `Err(t)` with `t <= now` (the
///   caller would spin);
/// * `cool-down`: a grant before the end of a cool-down, or a refusal
///   during one that names another instant;
/// * `throttle-model`: any other difference from the reference (a refusal
///   when a slot is free, or a wait other than the oldest live grant's
///   age-out plus the margin).
///
/// ```
/// use polite_testing::{ThrottleChecker, origin};
/// use polite_core::RateThrottle;
/// use std::time::Duration;
///
/// let t0 = origin();
/// let mut throttle = RateThrottle::new(2, Duration::from_secs(1)).unwrap();
/// let mut checker = ThrottleChecker::for_throttle(&throttle);
/// for ms in [0, 10, 20, 1000, 1060] {
///     let now = t0 + Duration::from_millis(ms);
///     checker.acquire(now, throttle.acquire(now)).unwrap();
/// }
/// // A broken throttle that grants a third send inside the window is caught.
/// let err = checker.acquire(t0 + Duration::from_millis(1070), Ok(())).unwrap_err();
/// assert_eq!(err.rule, "rate");
/// ```
#[derive(Clone, Debug)]
pub struct ThrottleChecker {
    limit: usize,
    window: Duration,
    margin: Duration,
    /// Grants that may still be live, oldest first.
    grants: VecDeque<Instant>,
    latest: Option<Instant>,
    cool: Option<Instant>,
    granted: u64,
}

/// The most grant or send instants a checker sizes its windows for at
/// construction (a `RateThrottle` limit above this grows them, amortised).
pub(crate) const PRESIZE: usize = 4096;

impl ThrottleChecker {
    /// A checker for a throttle of `limit` per `window` with this margin.
    ///
    /// ```
    /// use polite_testing::ThrottleChecker;
    /// use std::time::Duration;
    /// let c = ThrottleChecker::new(3, Duration::from_millis(500), Duration::from_millis(50));
    /// assert_eq!(c.granted(), 0);
    /// ```
    #[must_use]
    pub fn new(limit: u32, window: Duration, margin: Duration) -> ThrottleChecker {
        ThrottleChecker {
            limit: limit as usize,
            window,
            margin,
            // Never more than `limit` live grants (a full window refuses):
            // sized once, no allocation per call (up to a 4096 limit; a
            // larger one grows a few times, amortised).
            grants: VecDeque::with_capacity((limit as usize).min(PRESIZE)),
            latest: None,
            cool: None,
            granted: 0,
        }
    }

    /// A checker for this throttle's limit, window and margin (create it
    /// before the throttle's first call).
    ///
    /// ```
    /// use polite_testing::ThrottleChecker;
    /// use polite_core::RateThrottle;
    /// let c = ThrottleChecker::for_throttle(&RateThrottle::default());
    /// assert_eq!(c.granted(), 0);
    /// ```
    #[must_use]
    pub fn for_throttle(throttle: &RateThrottle) -> ThrottleChecker {
        ThrottleChecker::new(throttle.limit(), throttle.window(), throttle.margin())
    }

    /// Records a cool-down the throttle was given.
    ///
    /// ```
    /// use polite_testing::{ThrottleChecker, origin};
    /// use std::time::Duration;
    /// let t0 = origin();
    /// let mut c = ThrottleChecker::new(5, Duration::from_secs(1), Duration::ZERO);
    /// c.cool_down(t0 + Duration::from_secs(2));
    /// assert_eq!(c.acquire(t0, Ok(())).unwrap_err().rule, "cool-down");
    /// ```
    pub fn cool_down(&mut self, until: Instant) {
        self.cool = Some(self.cool.map_or(until, |c| c.max(until)));
    }

    /// Checks the throttle's `answer` to `acquire(now)`.
    ///
    /// # Errors
    ///
    /// The [`Violation`] it breaks.
    ///
    /// ```
    /// use polite_testing::{ThrottleChecker, origin};
    /// use std::time::Duration;
    /// let t0 = origin();
    /// let mut c = ThrottleChecker::new(1, Duration::from_secs(1), Duration::ZERO);
    /// c.acquire(t0, Ok(())).unwrap();
    /// assert_eq!(c.acquire(t0, Err(t0)).unwrap_err().rule, "refusal-not-after-now");
    /// ```
    pub fn acquire(&mut self, now: Instant, answer: Result<(), Instant>) -> Result<(), Violation> {
        let now = self.latest.map_or(now, |l| l.max(now));
        self.latest = Some(now);
        if let Err(t) = answer
            && t <= now
        {
            return violation(
                "refusal-not-after-now",
                format!("Err({t:?}) at {now:?}: not after now"),
            );
        }
        if let Some(c) = self.cool
            && now < c
        {
            return match answer {
                Err(t) if t == c => Ok(()),
                _ => violation(
                    "cool-down",
                    format!("{answer:?} during a cool-down until {c:?}"),
                ),
            };
        }
        while self
            .grants
            .front()
            .is_some_and(|g| g.checked_add(self.window).is_some_and(|end| end <= now))
        {
            self.grants.pop_front();
        }
        let full = self.grants.len() >= self.limit;
        // The oldest live grant ages out, plus the margin (SPEC §4); an
        // instant too far to represent: any refusal later than now will do
        // (checked above), so the reference takes the one given.
        let want = match self.grants.front() {
            Some(&oldest) if full => Err(oldest
                .checked_add(self.window.saturating_add(self.margin))
                .unwrap_or_else(|| answer.err().unwrap_or(now))),
            _ => Ok(()),
        };
        if answer == want {
            if answer.is_ok() {
                self.grants.push_back(now);
                self.granted += 1;
            }
            return Ok(());
        }
        if answer.is_ok() && full {
            return violation(
                "rate",
                format!(
                    "a grant at {now:?} with {} grants in the last {:?}",
                    self.grants.len(),
                    self.window
                ),
            );
        }
        violation(
            "throttle-model",
            format!("{answer:?} at {now:?}; the reference says {want:?}"),
        )
    }

    /// Grants seen.
    ///
    /// ```
    /// use polite_testing::{ThrottleChecker, origin};
    /// use std::time::Duration;
    /// let mut c = ThrottleChecker::new(1, Duration::from_secs(1), Duration::ZERO);
    /// c.acquire(origin(), Ok(())).unwrap();
    /// assert_eq!(c.granted(), 1);
    /// ```
    #[must_use]
    pub fn granted(&self) -> u64 {
        self.granted
    }
}
