//! [`PaceSet`]: several paces addressed by a slot number, for a batch
//! whose items go to several origins (SPEC §4.2: one pace per origin, or
//! per user key), and [`SlotPace`], one slot of a set seen as a [`Pace`].
//!
//! Every [`Pace`] is a `PaceSet` whose every slot is that one pace, so a
//! batch given a single pace behaves exactly as before the sets existed.

use std::time::Instant;

use crate::adaptive::Answered;
use crate::outcome::PaceLimit;
use crate::ratelimit::RateLimitInfo;

use super::Pace;

/// Paces addressed by slot: what [`BatchMachine`](crate::BatchMachine)
/// asks before each send of an item, with the item's
/// [`pace_slot`](crate::RequestInfo::pace_slot). The caller decides which
/// slot an item uses (its origin, an API token, a tenant); the machine
/// never reads URLs.
///
/// Each slot keeps the [`Pace`] contract on its own: `acquire(slot, now)`
/// grants and counts, or refuses until `t > now` counting nothing;
/// `cool_down_slot(slot, until)` refuses that slot until `until`; and so on.
/// What is done to one slot never delays another — unless the set says
/// they are the same pace ([`is_single`](PaceSet::is_single)).
///
/// Implemented for every [`Pace`] (every slot is that pace;
/// `is_single() == true`), for `Vec<P>` and `[P; N]` (slot `i` is element
/// `i`; a slot past the end is not paced: granted at once).
///
/// ```
/// use polite_core::{PaceSet, RateThrottle};
/// use std::time::{Duration, Instant};
/// let t0 = Instant::now();
/// let mut paces = vec![RateThrottle::default(), RateThrottle::default()];
/// // A 429 with `Retry-After: 5` from slot 0's origin cools slot 0 only.
/// paces.cool_down_slot(0, t0 + Duration::from_secs(5));
/// assert_eq!(paces.acquire_slot(0, t0), Err(t0 + Duration::from_secs(5)));
/// assert_eq!(paces.acquire_slot(1, t0), Ok(()));
/// assert!(!paces.is_single());
/// ```
pub trait PaceSet {
    /// [`Pace::acquire`] for slot `slot`.
    ///
    /// # Errors
    ///
    /// `Err(t)`: slot `slot` grants nothing before `t`.
    fn acquire_slot(&mut self, slot: u32, now: Instant) -> Result<(), Instant>;

    /// [`Pace::cool_down`] for slot `slot`.
    fn cool_down_slot(&mut self, slot: u32, until: Instant);

    /// [`Pace::observe`] for slot `slot`. Ignored by default.
    fn observe_slot(&mut self, slot: u32, now: Instant, info: &RateLimitInfo) {
        let _ = (slot, now, info);
    }

    /// [`Pace::on_answer`] for slot `slot`. Ignored by default.
    fn on_answer_slot(&mut self, slot: u32, answer: Answered) {
        let _ = (slot, answer);
    }

    /// [`Pace::refusal`] for slot `slot`: which limit made its latest
    /// refusal. [`PaceLimit::Unknown`] by default.
    fn refusal_slot(&self, slot: u32) -> PaceLimit {
        let _ = slot;
        PaceLimit::Unknown
    }

    /// Whether every slot is one and the same pace (a single [`Pace`]):
    /// then a refusal of one slot is a refusal of all, and a batch treats
    /// all its items as one key. `false` by default.
    ///
    /// ```
    /// use polite_core::{PaceSet, RateThrottle};
    /// assert!(RateThrottle::default().is_single());
    /// assert!(![RateThrottle::default()].is_single());
    /// ```
    fn is_single(&self) -> bool {
        false
    }
}

/// A single pace: every slot is this one pace.
impl<P: Pace + ?Sized> PaceSet for P {
    #[inline]
    fn acquire_slot(&mut self, _slot: u32, now: Instant) -> Result<(), Instant> {
        Pace::acquire(self, now)
    }
    #[inline]
    fn cool_down_slot(&mut self, _slot: u32, until: Instant) {
        Pace::cool_down(self, until);
    }
    #[inline]
    fn observe_slot(&mut self, _slot: u32, now: Instant, info: &RateLimitInfo) {
        Pace::observe(self, now, info);
    }
    #[inline]
    fn on_answer_slot(&mut self, _slot: u32, answer: Answered) {
        Pace::on_answer(self, answer);
    }
    #[inline]
    fn refusal_slot(&self, _slot: u32) -> PaceLimit {
        Pace::refusal(self)
    }
    #[inline]
    fn is_single(&self) -> bool {
        true
    }
}

/// `PaceSet` for a container indexed by slot (`Vec<P>`, `[P; N]`): slot
/// `i` is `self[i]`; a slot past the end is granted at once.
macro_rules! indexed_pace_set {
    ([$($generics:tt)*] $set:ty) => {
        /// Slot `i` is `self[i]`; a slot past the end is granted at once.
        impl<P: Pace $($generics)*> PaceSet for $set {
            #[inline]
            fn acquire_slot(&mut self, slot: u32, now: Instant) -> Result<(), Instant> {
                self.get_mut(slot as usize).map_or(Ok(()), |p| p.acquire(now))
            }
            #[inline]
            fn cool_down_slot(&mut self, slot: u32, until: Instant) {
                if let Some(p) = self.get_mut(slot as usize) {
                    p.cool_down(until);
                }
            }
            #[inline]
            fn observe_slot(&mut self, slot: u32, now: Instant, info: &RateLimitInfo) {
                if let Some(p) = self.get_mut(slot as usize) {
                    p.observe(now, info);
                }
            }
            #[inline]
            fn on_answer_slot(&mut self, slot: u32, answer: Answered) {
                if let Some(p) = self.get_mut(slot as usize) {
                    p.on_answer(answer);
                }
            }
            #[inline]
            fn refusal_slot(&self, slot: u32) -> PaceLimit {
                self.get(slot as usize).map_or(PaceLimit::Unknown, Pace::refusal)
            }
        }
    };
}

indexed_pace_set!([] Vec<P>);
indexed_pace_set!([, const N: usize] [P; N]);

/// One slot of a [`PaceSet`], seen as a [`Pace`] (what the feedback
/// helpers shared with [`Paced`](crate::Paced) take).
///
/// ```
/// use polite_core::{Pace, PaceSet, RateThrottle};
/// use polite_core::pace::SlotPace;
/// use std::time::{Duration, Instant};
/// let t0 = Instant::now();
/// let mut paces = [RateThrottle::default(), RateThrottle::default()];
/// SlotPace::new(&mut paces, 1).cool_down(t0 + Duration::from_secs(2));
/// assert_eq!(paces.acquire_slot(0, t0), Ok(()));
/// assert!(paces.acquire_slot(1, t0).is_err());
/// ```
#[derive(Debug)]
pub struct SlotPace<'a, S: ?Sized> {
    set: &'a mut S,
    slot: u32,
}

impl<'a, S: PaceSet + ?Sized> SlotPace<'a, S> {
    /// Slot `slot` of `set`.
    pub fn new(set: &'a mut S, slot: u32) -> Self {
        SlotPace { set, slot }
    }
}

impl<S: PaceSet + ?Sized> Pace for SlotPace<'_, S> {
    #[inline]
    fn acquire(&mut self, now: Instant) -> Result<(), Instant> {
        self.set.acquire_slot(self.slot, now)
    }
    #[inline]
    fn cool_down(&mut self, until: Instant) {
        self.set.cool_down_slot(self.slot, until);
    }
    #[inline]
    fn observe(&mut self, now: Instant, info: &RateLimitInfo) {
        self.set.observe_slot(self.slot, now, info);
    }
    #[inline]
    fn on_answer(&mut self, answer: Answered) {
        self.set.on_answer_slot(self.slot, answer);
    }
    #[inline]
    fn refusal(&self) -> PaceLimit {
        self.set.refusal_slot(self.slot)
    }
}
