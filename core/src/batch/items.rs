//! The batch's bookkeeping of its items: an answer for one item, backoffs
//! and restarts coming due, an item ending (restarted by the batch when it
//! ended `RateLimited`, within the rules of [`BatchMachine`]), a cancel, the
//! deadline, starving, and which item sends next.

use std::time::Instant;

use rand_core::Rng;

use crate::budget::RetryBudget;
use crate::decide::later;
use crate::input::{Event, Reply, Response, RetryClass};
use crate::outcome::Outcome;
use crate::output::{Action, SendPlan};
use crate::pace::{Pace, after_answer};
use crate::retry::RetryState;

use super::{BatchMachine, Wait};

impl<R: Rng, P: Pace, B: RetryBudget> BatchMachine<R, P, B> {
    /// An answer (or transport error) for item `k`; the pace hears how the
    /// attempt was classed (`after_answer`).
    pub(super) fn answer(&mut self, k: u32, event: Event<'_>, response: Option<&Response<'_>>) {
        let i = k as usize;
        if i >= self.items.len() || self.outcomes[i].is_some() {
            return;
        }
        let item = &mut self.items[i];
        let was_in_flight = item.state.in_flight();
        item.state.handle(
            &self.policy.retry,
            &mut self.rng,
            &mut self.budget,
            self.now,
            event,
        );
        let record = item.state.take_record();
        if was_in_flight && !item.state.in_flight() {
            self.in_flight -= 1;
        }
        if let Some(r) = record {
            after_answer(
                &mut self.pace,
                &self.policy.retry.retry_after,
                self.items[i].sent_at,
                self.now,
                response,
                &r,
            );
            // A cool-down or a slower rate refuses later than cached.
            self.refused_until = None;
            self.record = Some(r);
        }
        if let Some(o) = self.items[i].state.outcome() {
            self.item_ended(k, o);
        } else if let Some(at) = self.items[i].state.wake_at() {
            // Backing off until `at` (before the deadline, by `judge`), or
            // waiting out a budget refusal before ending.
            self.items[i].wait = Wait::Retry(at);
            self.wake_at(at);
        }
    }

    fn wake_at(&mut self, at: Instant) {
        self.next_wake = Some(self.next_wake.map_or(at, |w| w.min(at)));
    }

    /// Item `k`'s state ended with `o`: restart it (a `RateLimited` within
    /// the restart rules) or record its outcome.
    fn item_ended(&mut self, k: u32, o: Outcome) {
        let i = k as usize;
        if let Outcome::RateLimited { retry_at } = o
            && self.items[i].restarts < self.policy.max_restarts
            && !self.cancelled
        {
            let at = retry_at.or_else(|| later(self.now, self.policy.retry.backoff.cap));
            if let Some(at) = at
                && at < self.deadline
                && at.saturating_duration_since(self.now) <= self.policy.retry.retry_after.max
                && let Some(cost) = self
                    .budget
                    .withdraw(RetryClass::RateLimited, Reply::Status(429))
            {
                // A restart is a retry of the same logical request.
                self.items[i].state.spent.note_cost(cost);
                self.items[i].restarts += 1;
                self.items[i].wait = Wait::Restart { at, ended: o };
                self.wake_at(at);
                return;
            }
        }
        self.end(i, o);
    }

    /// Records item `i`'s one outcome.
    fn end(&mut self, i: usize, o: Outcome) {
        if self.outcomes[i].is_none() {
            self.outcomes[i] = Some(o);
            self.ended += 1;
        }
        self.items[i].wait = Wait::Nothing;
    }

    /// A Tick: items whose backoff or restart is due become ready.
    pub(super) fn wake_due(&mut self) {
        let now = self.now;
        if self.next_wake.is_none_or(|w| w > now) {
            return;
        }
        let mut next: Option<Instant> = None;
        for k in 0..self.fresh {
            let i = k as usize;
            match self.items[i].wait {
                Wait::Nothing => {}
                Wait::Retry(at) if at <= now => {
                    let item = &mut self.items[i];
                    item.wait = Wait::Nothing;
                    item.state.handle(
                        &self.policy.retry,
                        &mut self.rng,
                        &mut self.budget,
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
                    let item = &mut self.items[i];
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
        for i in 0..self.items.len() {
            if self.outcomes[i].is_none() {
                self.items[i].state.handle(
                    &self.policy.retry,
                    &mut self.rng,
                    &mut self.budget,
                    self.now,
                    Event::Cancel,
                );
                self.end(i, Outcome::Cancelled);
            }
        }
        self.settle();
    }

    /// The deadline has come: every item not yet ended ends now.
    pub(super) fn expire(&mut self) {
        if self.ended == self.len32() {
            return;
        }
        for i in 0..self.items.len() {
            if self.outcomes[i].is_none() {
                let o = match self.items[i].wait {
                    // Its restart never happened: it stays what it was.
                    Wait::Restart { ended, .. } => ended,
                    _ => Outcome::TimedOut { needed: None },
                };
                self.end(i, o);
            }
        }
        self.settle();
    }

    /// Every item has ended: nothing in flight, ready or waiting.
    fn settle(&mut self) {
        self.in_flight = 0;
        self.ready.clear();
        self.fresh = self.len32();
        self.next_wake = None;
    }

    /// The pace cannot grant a send before `needed`, at or after the
    /// deadline: every item waiting to send stops now (SPEC §1).
    pub(super) fn starve(&mut self, needed: Instant) {
        let o = Outcome::Starved {
            until: needed,
            by: self.pace.refusal(),
        };
        while let Some(k) = self.ready.pop_front() {
            self.end(k as usize, o);
        }
        for i in self.fresh as usize..self.items.len() {
            self.end(i, o);
        }
        self.fresh = self.len32();
    }

    pub(super) fn has_ready(&self) -> bool {
        !self.ready.is_empty() || self.fresh < self.len32()
    }

    /// Takes the next ready item (restarts and retries before fresh items)
    /// and returns its send.
    pub(super) fn send_next(&mut self) -> Option<SendPlan> {
        let k = match self.ready.pop_front() {
            Some(k) => k,
            None if self.fresh < self.len32() => {
                self.fresh += 1;
                self.fresh - 1
            }
            None => return None,
        };
        match self.items[k as usize].state.poll_action() {
            Action::Send(plan) => {
                self.in_flight += 1;
                self.items[k as usize].sent_at = self.now;
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
        let mut succeeded = 0;
        let mut starved = None;
        for o in self.outcomes.iter().flatten() {
            match o {
                Outcome::TimedOut { .. } => return Outcome::TimedOut { needed: None },
                Outcome::Starved { .. } => starved = starved.or(Some(*o)),
                o if o.is_success() => succeeded += 1,
                _ => {}
            }
        }
        if let Some(o) = starved {
            return o;
        }
        Outcome::BatchDone {
            succeeded,
            failed: self.len32() - succeeded,
        }
    }
}
