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
        if i < self.base as usize || i >= self.len32() as usize || self.at(i).done.is_some() {
            return;
        }
        let base = self.base as usize;
        let item = &mut self.items[i - base];
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

    /// Records item `i`'s one outcome.
    pub(super) fn end(&mut self, i: usize, o: Outcome) {
        let item = self.at_mut(i);
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
            // Release the ended items at the front: memory follows the
            // items in progress, not the batch's size.
            while self.items.front().is_some_and(|it| it.done.is_some()) && self.base < self.fresh {
                self.items.pop_front();
                self.base += 1;
            }
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
        for k in self.base..self.fresh.max(self.reach) {
            if k < self.base {
                continue; // released by an end earlier in this loop
            }
            let i = k as usize;
            let base = self.base as usize;
            match self.at(i).wait {
                Wait::Nothing => {}
                Wait::Retry(at) if at <= now => {
                    let item = &mut self.items[i - base];
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
                    let item = &mut self.items[i - base];
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
        }
        self.next_wake = next;
    }

    pub(super) fn cancel(&mut self) {
        self.cancelled = true;
        self.closed = true;
        for i in self.base as usize..self.len32() as usize {
            if i >= self.base as usize && self.at(i).done.is_none() {
                let base = self.base as usize;
                let item = &mut self.items[i - base];
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
                self.end(i, Outcome::Cancelled);
            }
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
        self.closed = true;
        for i in self.base as usize..self.len32() as usize {
            if i >= self.base as usize && self.at(i).done.is_none() {
                let o = match self.at(i).wait {
                    // Its restart never happened: it stays what it was.
                    Wait::Restart { ended, .. } => ended,
                    _ => Outcome::TimedOut { needed: None },
                };
                // Its attempt in flight, dropped unanswered: its record.
                let state = &mut self.at_mut(i).state;
                if state.in_flight() {
                    state.finish(o);
                    if let Some(r) = state.take_record() {
                        self.dropped.push(r);
                    }
                }
                self.end(i, o);
            }
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
        for i in self.fresh as usize..self.len32() as usize {
            self.end(i, o);
        }
        self.fresh = self.len32();
        // Every later item would starve the same way: take no more.
        self.closed = true;
    }

    pub(super) fn has_ready(&self) -> bool {
        !self.ready.is_empty() || self.fresh < self.len32()
    }

    /// Takes the next ready item (restarts and retries before fresh items)
    /// and returns its send.
    pub(super) fn send_next(&mut self) -> Option<SendPlan> {
        let k = match self.ready.pop_front() {
            Some(k) if k < self.base || self.at(k as usize).done.is_some() => return None,
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
