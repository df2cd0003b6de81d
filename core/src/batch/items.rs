//! The batch's bookkeeping of its items: an answer for one item, backoffs
//! and restarts coming due, an item ending (restarted by the batch when it
//! ended `RateLimited`, within the rules of [`BatchMachine`]), a cancel, the
//! deadline, starving, and which item sends next.

use std::time::Instant;

use rand_core::Rng;

use crate::decide::later;
use crate::input::{Event, Reply, Response, RetryClass};
use crate::outcome::Outcome;
use crate::output::{Action, SendPlan};
use crate::pace::{PaceSet, SlotPace, after_answer};
use crate::retry::RetryState;

use super::budgets::{BudgetSet, SlotBudget};
use super::{BatchMachine, Wait};

impl<R: Rng, P: PaceSet, B: BudgetSet> BatchMachine<R, P, B> {
    /// An answer (or transport error) for item `k`; the pace hears how the
    /// attempt was classed (`after_answer`).
    pub(super) fn answer(&mut self, k: u32, event: Event<'_>, response: Option<&Response<'_>>) {
        let i = k as usize;
        // Unknown, or ended (a streaming batch holds no ended item).
        let Some(p) = self.position(i).filter(|&p| self.items[p].done.is_none()) else {
            return;
        };
        let item = &mut self.items[p];
        let was_in_flight = item.state.in_flight();
        let slot = item.slot;
        item.state.handle(
            &self.policy.retry,
            &mut self.rng,
            &mut SlotBudget {
                set: &mut self.budget,
                slot,
            },
            self.now,
            event,
        );
        let record = item.state.take_record();
        if was_in_flight && !item.state.in_flight() {
            self.in_flight -= 1;
        }
        if let Some(r) = record {
            let sent_at = self.at(i).sent_at;
            let slot = self.pace_slot(slot);
            after_answer(
                &mut SlotPace::new(&mut self.pace, slot),
                &self.policy.retry.retry_after,
                sent_at,
                self.now,
                response,
                &r,
            );
            // A cool-down or a slower rate refuses later than cached.
            self.unrefuse(slot);
            self.record = Some(r);
        }
        if let Some(o) = self.at_mut(i).state.outcome() {
            self.item_ended(k, o);
        } else if let Some(at) = self.at_mut(i).state.wake_at() {
            // Backing off until `at` (before the deadline, by `judge`), or
            // waiting out a budget refusal before ending.
            self.at_mut(i).wait = Wait::Retry(at);
            self.wake_at(at);
        }
    }

    fn wake_at(&mut self, at: Instant) {
        self.next_wake = Some(self.next_wake.map_or(at, |w| w.min(at)));
    }

    /// Item `k`'s state ended with `o`: restart it (a `RateLimited` within
    /// the restart rules) or record its outcome.
    pub(super) fn item_ended(&mut self, k: u32, o: Outcome) {
        let i = k as usize;
        if let Outcome::RateLimited { retry_at } = o
            && self.at_mut(i).restarts < self.policy.max_restarts
            && !self.cancelled
        {
            let at = retry_at.or_else(|| later(self.now, self.policy.retry.backoff.cap));
            if let Some(at) = at
                && at < self.deadline
                && at.saturating_duration_since(self.now) <= self.policy.retry.retry_after.max
                && let Some(cost) = self.budget.withdraw_slot(
                    self.at(i).slot,
                    RetryClass::RateLimited,
                    Reply::Status(429),
                )
            {
                // A restart is a retry of the same logical request.
                self.at_mut(i).state.spent.note_cost(cost);
                self.at_mut(i).restarts += 1;
                self.at_mut(i).wait = Wait::Restart { at, ended: o };
                self.wake_at(at);
                return;
            }
        }
        self.end(i, o);
    }

    /// Records item `i`'s one outcome (a streaming batch releases it).
    pub(super) fn end(&mut self, i: usize, o: Outcome) {
        let Some(p) = self.position(i) else {
            return; // released: it has ended
        };
        let item = &mut self.items[p];
        item.wait = Wait::Nothing;
        if item.done.is_some() {
            return;
        }
        item.done = Some(o);
        let never_started = !std::mem::replace(&mut item.started, true);
        self.unstarted -= u32::from(never_started);
        self.ended += 1;
        self.last_ended = Some(i as u32);
        if !self.single {
            self.skip_started();
        }
        match o {
            Outcome::TimedOut { .. } => self.timed_out = true,
            // The batch says what starved its first starved item.
            Outcome::Starved { .. } if self.starved.is_none_or(|(k, _)| i < k as usize) => {
                self.starved = Some((i as u32, o));
            }
            o if o.is_success() => self.succeeded += 1,
            _ => {}
        }
        if self.streaming {
            self.ended_out.push_back((i as u32, o));
            // Released where it ends: memory follows the items in
            // progress, not the batch's size nor how far the batch got
            // past an item that hangs.
            let _ = self.items.remove(p);
        } else if let Some(slot) = self.outcomes.get_mut(i) {
            *slot = Some(o);
        }
    }

    /// A Tick: items whose backoff or restart is due become ready.
    pub(super) fn wake_due(&mut self) {
        let now = self.now;
        if self.next_wake.is_none_or(|w| w > now) {
            return;
        }
        let mut next: Option<Instant> = None;
        // The items ever started (only those wait): held ones below this.
        let started = self.fresh.max(self.reach);
        let mut p = 0;
        while p < self.items.len() && self.items[p].index < started {
            let k = self.items[p].index;
            match self.items[p].wait {
                Wait::Nothing => {}
                Wait::Retry(at) if at <= now => {
                    let item = &mut self.items[p];
                    item.wait = Wait::Nothing;
                    let slot = item.slot;
                    item.state.handle(
                        &self.policy.retry,
                        &mut self.rng,
                        &mut SlotBudget {
                            set: &mut self.budget,
                            slot,
                        },
                        now,
                        Event::Tick,
                    );
                    if item.state.wants_send() {
                        self.ready.push_back(k);
                    } else if let Some(o) = item.state.outcome() {
                        self.item_ended(k, o);
                    }
                }
                Wait::Restart { at, .. } if at <= now => {
                    let item = &mut self.items[p];
                    let old = &item.state;
                    let mut state =
                        RetryState::new(&self.policy.retry, old.request, k, now, self.deadline);
                    // The same logical request: budgets and attempt numbers
                    // carry over.
                    state.sent = old.sent;
                    state.spent = old.spent;
                    item.state = state;
                    item.wait = Wait::Nothing;
                    self.ready.push_back(k);
                }
                Wait::Retry(at) | Wait::Restart { at, .. } => {
                    next = Some(next.map_or(at, |w| w.min(at)));
                }
            }
            p = self.next_after(p, k);
        }
        self.next_wake = next;
    }

    pub(super) fn cancel(&mut self) {
        self.cancelled = true;
        self.closed = true;
        let mut p = 0;
        while p < self.items.len() {
            let k = self.items[p].index;
            if self.items[p].done.is_none() {
                let item = &mut self.items[p];
                let slot = item.slot;
                item.state.handle(
                    &self.policy.retry,
                    &mut self.rng,
                    &mut SlotBudget {
                        set: &mut self.budget,
                        slot,
                    },
                    self.now,
                    Event::Cancel,
                );
                // Its attempt in flight, dropped unanswered: its record.
                if let Some(r) = item.state.take_record() {
                    self.dropped.push(r);
                }
                self.end(k as usize, Outcome::Cancelled);
            }
            p = self.next_after(p, k);
        }
        // Handed out last first: in item order.
        self.dropped.reverse();
        self.settle();
    }

    /// The deadline has come: every item not yet ended ends now.
    pub(super) fn expire(&mut self) {
        if self.ended == self.len32() && self.closed {
            return;
        }
        // A streaming batch whose input had not ended: the deadline cut it
        // short, whether or not an item was in progress then (one fed from
        // a stream may have been waiting for its next request).
        if !self.closed {
            self.timed_out = true;
        }
        self.closed = true;
        let mut p = 0;
        while p < self.items.len() {
            let k = self.items[p].index;
            let i = k as usize;
            if self.items[p].done.is_none() {
                let o = match self.items[p].wait {
                    // Its restart never happened: it stays what it was.
                    Wait::Restart { ended, .. } => ended,
                    _ => Outcome::TimedOut { needed: None },
                };
                // Its attempt in flight, dropped unanswered: its record.
                let state = &mut self.items[p].state;
                if state.in_flight() {
                    state.finish(o);
                    if let Some(r) = state.take_record() {
                        self.dropped.push(r);
                    }
                }
                self.end(i, o);
            }
            p = self.next_after(p, k);
        }
        self.dropped.reverse();
        self.settle();
    }

    /// Every item has ended: nothing in flight, ready or waiting.
    fn settle(&mut self) {
        self.in_flight = 0;
        self.ready.clear();
        self.fresh = self.len32();
        self.reach = self.len32();
        self.next_wake = None;
    }

    /// The pace cannot grant a send before `needed`, at or after the
    /// deadline: every item waiting to send stops now (SPEC §1).
    pub(super) fn starve(&mut self, needed: Instant) {
        let o = Outcome::Starved {
            until: needed,
            by: self.pace.refusal_slot(0),
        };
        while let Some(k) = self.ready.pop_front() {
            self.end(k as usize, o);
        }
        // The items never sent: those from `fresh` on.
        let mut p = self.first_from(self.fresh);
        while p < self.items.len() {
            let k = self.items[p].index;
            self.end(k as usize, o);
            p = self.next_after(p, k);
        }
        self.fresh = self.len32();
        // Every later item would starve the same way: take no more.
        self.closed = true;
    }

    /// The position after item `k`, which lay at position `p` before a
    /// step that may have released it (and only it): walks the items held
    /// while they end.
    pub(super) fn next_after(&self, p: usize, k: u32) -> usize {
        if self.items.get(p).is_some_and(|it| it.index == k) {
            p + 1
        } else {
            p
        }
    }

    pub(super) fn has_ready(&self) -> bool {
        !self.ready.is_empty() || self.fresh < self.len32()
    }

    /// Takes the next ready item (restarts and retries before fresh items)
    /// and returns its send.
    pub(super) fn send_next(&mut self) -> Option<SendPlan> {
        let k = match self.ready.pop_front() {
            // Ended meanwhile (released, in a streaming batch).
            Some(k)
                if self
                    .window_item(k as usize)
                    .is_none_or(|it| it.done.is_some()) =>
            {
                return None;
            }
            Some(k) => k,
            None if self.fresh < self.len32() => {
                self.fresh += 1;
                self.fresh - 1
            }
            None => return None,
        };
        match self.at_mut(k as usize).state.poll_action() {
            Action::Send(plan) => {
                self.in_flight += 1;
                self.at_mut(k as usize).sent_at = self.now;
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

    pub(super) fn summary(&self) -> Outcome {
        if self.cancelled {
            return Outcome::Cancelled;
        }
        if self.timed_out {
            return Outcome::TimedOut { needed: None };
        }
        if let Some((_, o)) = self.starved {
            return o;
        }
        Outcome::BatchDone {
            succeeded: self.succeeded,
            failed: self.len32() - self.succeeded,
        }
    }
}
