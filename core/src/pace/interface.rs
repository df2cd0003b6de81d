//! The [`Pace`] interface — what a paced machine asks before every send —
//! with [`Unpaced`], and the impls that let machines share one pace
//! (`&mut P`, `Box<P>`, `Arc<Mutex<P>>`, `Rc<RefCell<P>>`).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::adaptive::Answered;
use crate::outcome::PaceLimit;
use crate::ratelimit::RateLimitInfo;

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
/// Implemented for [`RateThrottle`](crate::RateThrottle), [`Unpaced`], and for shared handles:
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
    /// [`RateThrottle`](crate::RateThrottle) pauses, and sizes itself when it is
    /// [learning](crate::RateThrottle::learning).
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
    /// pace ([`RateThrottle::adaptive`](crate::RateThrottle::adaptive)) slows down on throttles and speeds
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
    /// [`Outcome::Starved`](crate::Outcome::Starved), so the caller can say which setting to change.
    ///
    /// ```
    /// use polite_core::{Pace, RateThrottle};
    /// use polite_core::pace::PaceLimit;
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
/// use polite_core::Pace;
/// use polite_core::pace::Unpaced;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RateThrottle;
    use std::time::Duration;

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
