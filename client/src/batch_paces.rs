//! [`BatchPaces`]: the paces of one batch's keys (SPEC §4.2), numbered by
//! slot for the batch machine's [`PaceSet`] and [`BudgetSet`]: each item
//! is paced, and draws its retries, by its own key — its origin (or what
//! the client's [`PaceBy`](crate::PaceBy) says), or the key its
//! [`CallOptions`](crate::CallOptions) name — through the client's shared
//! [`Paces`], so a 429 from one origin never holds back the batch's items
//! for another.
//!
//! The batch's `Io` numbers each request's key as it is pulled
//! ([`assign`](BatchPaces::assign)) and gives the slot back when the item
//! ends ([`release`](BatchPaces::release)): a batch holds the paces of the
//! keys of its items in progress only, and a key's slot number is never
//! reused within a batch (a cached refusal of an old slot cannot hold back
//! a new key).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use polite_core::adaptive::Answered;
use polite_core::budget::RetryBudget;
use polite_core::pace::PaceLimit;
use polite_core::ratelimit::RateLimitInfo;
use polite_core::{BudgetSet, Pace, PaceSet, Reply, RetryClass};

use crate::items::ItemMap;
use crate::meter::{CallMeter, Origin};
use crate::options::CallOptions;
use crate::paces::{ClientBudget, PaceKey, Paces};

/// One key of a batch: its pace (metered for the call), its budget, and
/// how many items in progress use it.
struct Slot {
    key: PaceKey,
    /// The key's metrics label (and its shared pace).
    origin: Origin,
    pace: Box<dyn Pace + Send>,
    budget: ClientBudget,
    items: u32,
}

#[derive(Default)]
struct Slots {
    by_key: HashMap<PaceKey, u32>,
    /// The key numbered last and its slot, while that slot is held (most
    /// batches pull item after item for the same key: no lookup then).
    last: Option<(PaceKey, u32)>,
    slots: ItemMap<u32, Slot>,
    /// The slot of each item in progress.
    items: ItemMap<u32, u32>,
    next: u32,
}

/// The paces and budgets of one batch's keys, by slot (cheap to clone:
/// the batch machine and its `Io` share one).
#[derive(Clone)]
pub(crate) struct BatchPaces<'c> {
    slots: Arc<Mutex<Slots>>,
    paces: &'c Paces,
    meter: CallMeter,
}

impl std::fmt::Debug for BatchPaces<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("BatchPaces")
            .field("keys", &s.slots.len())
            .field("items", &s.items.len())
            .finish()
    }
}

impl<'c> BatchPaces<'c> {
    /// The paces of a batch drawing on the client's `paces`, each metered
    /// by the call's `meter`.
    pub(crate) fn new(paces: &'c Paces, meter: CallMeter) -> BatchPaces<'c> {
        BatchPaces {
            slots: Arc::default(),
            paces,
            meter,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Numbers the key of `request`, item `item` of the batch, at `now`:
    /// its [`CallOptions::pace_key`], else its key by the client's
    /// [`PaceBy`](crate::PaceBy). Returns the item's slot (its
    /// [`RequestInfo::pace_slot`](polite_core::RequestInfo::pace_slot)).
    /// `now` is read only when the key is new to the batch.
    pub(crate) fn assign(
        &self,
        item: u32,
        request: &http::Request<Bytes>,
        now: impl FnOnce() -> Instant,
    ) -> u32 {
        let key = CallOptions::of(request)
            .pace_key
            .unwrap_or_else(|| self.paces.key_of(request));
        let mut s = self.lock();
        let last = match &s.last {
            Some((k, slot)) if *k == key => Some(*slot),
            _ => None,
        };
        let slot = match last.or_else(|| s.by_key.get(&key).copied()) {
            Some(slot) => slot,
            None => {
                let now = now();
                let slot = s.next;
                s.next = s.next.wrapping_add(1);
                let origin = Origin::new(&key, self.paces.get(&key, now));
                let pace: Box<dyn Pace + Send> = Box::new(self.meter.key_pace(&origin));
                let budget = self.paces.budget(&key, now);
                s.by_key.insert(key.clone(), slot);
                s.slots.insert(
                    slot,
                    Slot {
                        key: key.clone(),
                        origin,
                        pace,
                        budget,
                        items: 0,
                    },
                );
                slot
            }
        };
        if let Some(e) = s.slots.get_mut(&slot) {
            e.items += 1;
            self.meter.item(item, &e.origin);
        }
        s.items.insert(item, slot);
        if last.is_none() {
            s.last = Some((key, slot));
        }
        slot
    }

    /// Item `item` ended: the last item of a key gives its slot back (the
    /// key's pace lives on in the client's [`Paces`]).
    pub(crate) fn release(&self, item: u32) {
        let mut s = self.lock();
        let Some(slot) = s.items.remove(&item) else {
            return;
        };
        let gone = s.slots.get_mut(&slot).is_some_and(|e| {
            e.items = e.items.saturating_sub(1);
            e.items == 0
        });
        if gone && let Some(e) = s.slots.remove(&slot) {
            s.by_key.remove(&e.key);
            if s.last.as_ref().is_some_and(|(_, l)| *l == slot) {
                s.last = None;
            }
        }
    }

    /// How many keys the batch holds now.
    #[cfg(test)]
    pub(crate) fn keys(&self) -> usize {
        self.lock().slots.len()
    }

    fn with<T>(&self, slot: u32, f: impl FnOnce(&mut Slot) -> T) -> Option<T> {
        self.lock().slots.get_mut(&slot).map(f)
    }
}

/// Each slot is its key's pace; a slot no item uses any more is not paced.
impl PaceSet for BatchPaces<'_> {
    fn acquire_slot(&mut self, slot: u32, now: Instant) -> Result<(), Instant> {
        self.with(slot, |s| s.pace.acquire(now)).unwrap_or(Ok(()))
    }
    fn cool_down_slot(&mut self, slot: u32, until: Instant) {
        self.with(slot, |s| s.pace.cool_down(until));
    }
    fn observe_slot(&mut self, slot: u32, now: Instant, info: &RateLimitInfo) {
        self.with(slot, |s| s.pace.observe(now, info));
    }
    fn on_answer_slot(&mut self, slot: u32, answer: Answered) {
        self.with(slot, |s| s.pace.on_answer(answer));
    }
    fn refusal_slot(&self, slot: u32) -> PaceLimit {
        self.lock()
            .slots
            .get(&slot)
            .map_or(PaceLimit::Unknown, |s| s.pace.refusal())
    }
}

/// Each slot draws from its key's budget.
impl BudgetSet for BatchPaces<'_> {
    fn withdraw_slot(&mut self, slot: u32, class: RetryClass, last: Reply) -> Option<u32> {
        let budget = self.with(slot, |s| s.budget.clone());
        budget.map_or(Some(0), |mut b| b.withdraw(class, last))
    }
    fn deposit_slot(&mut self, slot: u32, last_cost: Option<u32>) {
        if let Some(mut b) = self.with(slot, |s| s.budget.clone()) {
            b.deposit(last_cost);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::time::Duration;

    fn req(url: &str) -> http::Request<Bytes> {
        http::Request::get(url).body(Bytes::new()).unwrap()
    }

    #[test]
    fn keys_are_numbered_as_pulled_and_given_back_when_their_items_end() {
        let paces = Paces::new(&Config::default()).unwrap();
        let t0 = Instant::now();
        let first = PaceKey::new("http://127.0.0.1:1");
        let meter = CallMeter::start("batch", &first, &paces.get(&first, t0), t0);
        let mut set = BatchPaces::new(&paces, meter);
        let a1 = req("http://127.0.0.1:1/x");
        let b = req("http://127.0.0.1:2/x");
        let a2 = req("http://127.0.0.1:1/y?q=1");
        let mut own = req("http://127.0.0.1:2/x");
        own.extensions_mut()
            .insert(CallOptions::new().pace_key(PaceKey::new("tenant-7")));
        let slots: Vec<u32> = [&a1, &b, &a2, &own]
            .into_iter()
            .enumerate()
            .map(|(item, r)| set.assign(item as u32, r, || t0))
            .collect();
        assert_eq!(slots, [0, 1, 0, 2]);
        assert_eq!(set.keys(), 3);
        // A's cool-down is A's only, and it is the client's pace of A.
        set.cool_down_slot(0, t0 + Duration::from_secs(5));
        assert!(set.acquire_slot(0, t0).is_err());
        assert_eq!(set.acquire_slot(1, t0), Ok(()));
        let mut shared = paces.get(&first, t0);
        assert!(Pace::acquire(&mut shared, t0).is_err());
        // A's slot goes when its last item ends; a new item of A gets a new slot.
        set.release(0);
        assert_eq!(set.keys(), 3);
        set.release(2);
        assert_eq!(set.keys(), 2);
        let a3 = req("http://127.0.0.1:1/z");
        assert_eq!(set.assign(4, &a3, || t0), 3);
        // ... still paced by the client's pace of A.
        assert!(set.acquire_slot(3, t0).is_err());
    }
}
