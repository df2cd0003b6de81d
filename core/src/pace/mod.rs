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

mod paced;
mod throttle;

pub use paced::Paced;
pub use throttle::RateThrottle;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::adaptive::Answered;
use crate::input::{Response, RetryClass};
use crate::outcome::PaceLimit;
use crate::policy::RetryAfterLimits;
use crate::ratelimit::{RateLimitHeaders, RateLimitInfo};
use crate::record::AttemptRecord;
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
    /// [`Outcome::Starved`](crate::Outcome::Starved), so the caller can say which setting to change.
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
