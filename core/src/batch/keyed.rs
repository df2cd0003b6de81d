//! Scheduling of a keyed batch: items whose pace slots are different paces
//! ([`PaceSet::is_single`] is false). An item whose key's pace refuses
//! waits; the items of other keys go meanwhile (no head-of-line blocking
//! across keys), within a lookahead of `STREAM_WINDOW × concurrency` items
//! from the oldest one not yet started. A key whose pace cannot grant
//! before the deadline starves its own items only.

use std::time::Instant;

use rand_core::Rng;

use crate::outcome::Outcome;
use crate::output::{Action, SendPlan};
use crate::pace::{PaceLimit, PaceSet};

use super::budgets::BudgetSet;
use super::{BatchMachine, Refusal};

/// What a slot's pace says to one item.
enum Ask {
    Granted,
    Refused(Instant),
    Starved(Outcome),
}

/// What one look over the candidates found.
enum Pick {
    Send(SendPlan),
    /// Items ended (starved, or stopped before sending): look again.
    Again,
    /// Nothing may go: the earliest refusal among the candidates.
    Wait(Option<Instant>),
}

impl<R: Rng, P: PaceSet, B: BudgetSet> BatchMachine<R, P, B> {
    /// The slot `slot` is paced by: 0 for a single pace.
    pub(super) fn pace_slot(&self, slot: u32) -> u32 {
        if self.single { 0 } else { slot }
    }

    /// The pace slot of item `item`, when the batch knows it (a keyed
    /// streaming batch forgets the items it released).
    pub(super) fn pace_slot_of(&self, item: u32) -> Option<u32> {
        if self.single {
            return Some(0);
        }
        self.window_item(item as usize).map(|i| i.slot)
    }

    /// Slot `slot`'s pace may have changed (an answer, a cool-down, a new
    /// quota): its cached refusal is asked again before it is trusted.
    pub(super) fn unrefuse(&mut self, slot: u32) {
        if self.single {
            self.refused_until = None;
            return;
        }
        for e in &mut self.refused {
            if e.slot == slot {
                e.stale = true;
            }
        }
    }

    /// Moves `fresh` past the items started out of order (and those
    /// released: every ended item was started, or ended unstarted).
    pub(super) fn skip_started(&mut self) {
        while self.fresh < self.len32()
            && self
                .window_item(self.fresh as usize)
                .is_none_or(|it| it.started)
        {
            self.fresh += 1;
        }
    }

    /// Items never started whose key's pace is not known to refuse now:
    /// those waiting to start (a streaming batch pulls no more than there
    /// is room to send).
    pub(super) fn waiting_keyed(&self) -> u32 {
        let now = self.now;
        // Every item never started lies at or after `fresh`: with no key
        // refused, all of them wait (the count kept, not a walk of the
        // window on every action).
        let from = self.first_from(self.fresh);
        if self.refused.is_empty() {
            debug_assert_eq!(
                self.unstarted,
                self.items.range(from..).filter(|it| !it.started).count() as u32
            );
            return self.unstarted;
        }
        self.items
            .range(from..)
            .filter(|it| {
                !it.started
                    && it.done.is_none()
                    && !self
                        .refused
                        .iter()
                        .any(|e| e.slot == it.slot && e.until > now)
            })
            .count() as u32
    }

    /// `poll_action` of a keyed batch (after the stop and deadline checks).
    pub(super) fn poll_keyed(&mut self) -> Action {
        loop {
            if self.ended == self.len32() && self.closed {
                let o = self.summary();
                self.stopped = Some(o);
                return Action::Stop(o);
            }
            if self.in_flight >= self.policy.concurrency || !self.has_ready() {
                return self.sleep(None);
            }
            match self.pick() {
                Pick::Send(plan) => return Action::Send(plan),
                Pick::Again => {}
                Pick::Wait(refused) => return self.sleep(refused),
            }
        }
    }

    fn sleep(&self, refused: Option<Instant>) -> Action {
        let mut wake = self.deadline;
        if let Some(w) = self.next_wake {
            wake = wake.min(w);
        }
        if let Some(t) = refused {
            wake = wake.min(t);
        }
        Action::SleepUntil(wake)
    }

    /// The first item that may send: the ready ones (retries and restarts
    /// due) in order, then those never started within the lookahead, each
    /// asking its own key's pace.
    fn pick(&mut self) -> Pick {
        let mut wait: Option<Instant> = None;
        let mut changed = false;
        let mut q = 0;
        while q < self.ready.len() {
            let k = self.ready[q];
            if self
                .window_item(k as usize)
                .is_none_or(|it| it.done.is_some())
            {
                let _ = self.ready.remove(q);
                continue;
            }
            match self.ask(self.at(k as usize).slot) {
                Ask::Granted => {
                    let _ = self.ready.remove(q);
                    return self.start(k).map_or(Pick::Again, Pick::Send);
                }
                Ask::Refused(t) => {
                    wait = Some(wait.map_or(t, |w| w.min(t)));
                    q += 1;
                }
                Ask::Starved(o) => {
                    let _ = self.ready.remove(q);
                    self.end(k as usize, o);
                    changed = true;
                }
            }
        }
        let lookahead = self.policy.concurrency.saturating_mul(Self::STREAM_WINDOW);
        let end = self.fresh.saturating_add(lookahead);
        // The items held within the lookahead (those released have ended).
        let mut p = self.first_from(self.fresh);
        while p < self.items.len() && self.items[p].index < end {
            let item = &self.items[p];
            let k = item.index;
            if item.started || item.done.is_some() {
                p += 1;
                continue;
            }
            match self.ask(item.slot) {
                Ask::Granted => return self.start(k).map_or(Pick::Again, Pick::Send),
                Ask::Refused(t) => wait = Some(wait.map_or(t, |w| w.min(t))),
                Ask::Starved(o) => {
                    self.end(k as usize, o);
                    changed = true;
                }
            }
            p = self.next_after(p, k);
        }
        if changed {
            Pick::Again
        } else {
            Pick::Wait(wait)
        }
    }

    /// Asks slot `slot`'s pace for a send now, trusting a cached refusal
    /// that no answer has made stale.
    fn ask(&mut self, slot: u32) -> Ask {
        let now = self.now;
        if let Some(e) = self.refused.iter().find(|e| e.slot == slot)
            && !e.stale
            && e.until > now
        {
            return self.judge(e.until, e.by);
        }
        match self.pace.acquire_slot(slot, now) {
            Ok(()) => {
                self.refused.retain(|e| e.slot != slot);
                Ask::Granted
            }
            Err(t) => {
                let by = self.pace.refusal_slot(slot);
                self.note_refusal(slot, t, by);
                self.judge(t, by)
            }
        }
    }

    /// A refusal until `t`: wait for it, or — at or after the deadline —
    /// starve (SPEC §1: no sleeping for nothing; §4.1: name the limit).
    fn judge(&self, t: Instant, by: PaceLimit) -> Ask {
        if t >= self.deadline {
            Ask::Starved(Outcome::Starved { until: t, by })
        } else {
            Ask::Refused(t)
        }
    }

    fn note_refusal(&mut self, slot: u32, until: Instant, by: PaceLimit) {
        let fresh = Refusal {
            slot,
            until,
            by,
            stale: false,
        };
        if let Some(e) = self.refused.iter_mut().find(|e| e.slot == slot) {
            *e = fresh;
            return;
        }
        if self.refused.len() == self.refused.capacity() {
            // Full (a streaming batch that has seen many keys): keep the
            // refusals still running for keys of items held. There is
            // room then: at most one per slot of the items held.
            let (now, items) = (self.now, &self.items);
            self.refused.retain(|e| {
                e.until > now && items.iter().any(|i| i.done.is_none() && i.slot == e.slot)
            });
        }
        self.refused.push(fresh);
    }

    /// Starts item `k` (granted by its pace): its send, or `None` when its
    /// state ended it instead.
    fn start(&mut self, k: u32) -> Option<SendPlan> {
        let i = k as usize;
        if !self.at(i).started {
            self.at_mut(i).started = true;
            self.unstarted -= 1;
            self.reach = self.reach.max(k + 1);
            self.skip_started();
        }
        match self.at_mut(i).state.poll_action() {
            Action::Send(plan) => {
                self.in_flight += 1;
                self.at_mut(i).sent_at = self.now;
                Some(plan)
            }
            Action::Stop(o) => {
                self.item_ended(k, o);
                None
            }
            // Not reachable: a ready item before the deadline sends.
            Action::SleepUntil(_) => None,
        }
    }
}
