//! [`RetryState`]: where one logical request stands, without its policy,
//! random source or budget — the part a [`RetryMachine`](crate::RetryMachine)
//! wraps and a batch keeps per item.

use std::time::Instant;

use rand_core::Rng;

use crate::budget::RetryBudget;
use crate::decide::{Spent, Verdict, classified, judge_with, later};
use crate::input::{Event, Reply, Response, RetryClass, SendId};
use crate::outcome::Outcome;
use crate::output::{Action, SendPlan};
use crate::policy::RetryPolicy;
use crate::record::{AttemptRecord, RetryAfterNote};
use crate::request::RequestInfo;

/// Where a logical request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The next attempt may be sent now.
    Ready,
    /// This attempt is in flight.
    InFlight(u32),
    /// Waiting to send the next attempt at this instant.
    Waiting(Instant),
    /// Decided to stop with `RetryBudgetExhausted` for this failure, after
    /// waiting until this instant (`backoff_when_budget_empty`).
    Closing(Instant, RetryClass, Reply),
    /// Ended.
    Done(Outcome),
}

/// The state of one logical request without its policy and random source:
/// the part a batch keeps per item.
#[derive(Clone, Debug)]
pub(crate) struct RetryState {
    pub(crate) request: RequestInfo,
    item: u32,
    pub(super) deadline: Instant,
    abort_at: Instant,
    last_now: Instant,
    pub(crate) sent: u32,
    pub(crate) spent: Spent,
    phase: Phase,
    record: Option<AttemptRecord>,
}

impl RetryState {
    pub(crate) fn new(
        policy: &RetryPolicy,
        request: RequestInfo,
        item: u32,
        now: Instant,
        deadline: Instant,
    ) -> RetryState {
        RetryState {
            request,
            item,
            deadline,
            abort_at: later(deadline, policy.transport_cushion).unwrap_or(deadline),
            last_now: now,
            sent: 0,
            spent: Spent::default(),
            phase: Phase::Ready,
            record: None,
        }
    }

    /// Whether the next call to `poll_action` would send (used by pacing to
    /// gate sends through a throttle).
    pub(crate) fn wants_send(&self) -> bool {
        self.phase == Phase::Ready && self.last_now < self.deadline
    }

    pub(crate) fn outcome(&self) -> Option<Outcome> {
        match self.phase {
            Phase::Done(o) => Some(o),
            _ => None,
        }
    }

    pub(crate) fn take_record(&mut self) -> Option<AttemptRecord> {
        self.record.take()
    }

    pub(crate) fn in_flight(&self) -> bool {
        matches!(self.phase, Phase::InFlight(_))
    }

    /// The instant of the next wake-up this request waits for (a backoff,
    /// or a delayed stop), if it waits.
    pub(crate) fn wake_at(&self) -> Option<Instant> {
        match self.phase {
            Phase::Waiting(at) | Phase::Closing(at, ..) => Some(at),
            _ => None,
        }
    }

    fn finish(&mut self, outcome: Outcome) {
        self.phase = Phase::Done(outcome);
    }

    #[inline]
    pub(crate) fn handle<R: Rng + ?Sized, B: RetryBudget + ?Sized>(
        &mut self,
        policy: &RetryPolicy,
        rng: &mut R,
        budget: &mut B,
        now: Instant,
        event: Event<'_>,
    ) {
        let now = now.max(self.last_now);
        self.last_now = now;
        if let Phase::Done(_) = self.phase {
            return;
        }
        match event {
            Event::Cancel => self.finish(Outcome::Cancelled),
            Event::Tick => match self.phase {
                Phase::InFlight(_) if now >= self.deadline => {
                    self.finish(Outcome::TimedOut { needed: None });
                }
                Phase::Waiting(_) if now >= self.deadline => {
                    self.finish(Outcome::TimedOut { needed: None });
                }
                Phase::Waiting(at) if now >= at => self.phase = Phase::Ready,
                // The stop was decided before the deadline; it stands.
                Phase::Closing(at, class, last) if now >= at => {
                    self.finish(Outcome::RetryBudgetExhausted { class, last });
                }
                _ => {}
            },
            // By reference: moving the answer out of the event would copy
            // its ~200 bytes of header slots (a `memcpy` per decision).
            Event::Response(ref r) => {
                let reply = Reply::Status(r.status);
                self.on_reply(policy, rng, budget, now, r.id, reply, Some(r));
            }
            Event::TransportError(id, kind) => {
                let reply = Reply::Transport(kind);
                self.on_reply(policy, rng, budget, now, id, reply, None);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_reply<R: Rng + ?Sized, B: RetryBudget + ?Sized>(
        &mut self,
        policy: &RetryPolicy,
        rng: &mut R,
        budget: &mut B,
        now: Instant,
        id: SendId,
        reply: Reply,
        response: Option<&Response<'_>>,
    ) {
        // Only the answer to the attempt in flight counts; anything else is a
        // late or stray answer and is ignored.
        // (`matches!`, not `!=` on the phase: the derived comparison
        // materialises a whole `Phase` to compare with.)
        if !matches!(self.phase, Phase::InFlight(a) if a == id.attempt) || id.item != self.item {
            return;
        }
        // Written in place: the record is the machine's (no 120-byte copy
        // at the end).
        let record = self.record.insert(AttemptRecord {
            request: self.request.id,
            id,
            reply,
            class: None,
            retry_after: RetryAfterNote::Absent,
            next: None,
            outcome: None,
        });
        let stale = match (self.request.generation, response.and_then(|r| r.generation)) {
            (Some(mine), Some(current)) => mine != current,
            _ => false,
        };
        let outcome = if now >= self.deadline {
            Some(Outcome::TimedOut { needed: None })
        } else if stale {
            Some(Outcome::Stale)
        } else {
            match reply {
                Reply::Status(s @ 100..=399) if !classified(response) => {
                    budget.deposit(self.spent.last_cost());
                    Some(Outcome::Succeeded { status: s })
                }
                Reply::Status(s @ (0..=99 | 600..)) => Some(Outcome::NotRetryable { status: s }),
                _ => {
                    let j = judge_with(
                        policy,
                        &mut self.spent,
                        self.request.is_replayable(),
                        now,
                        self.deadline,
                        reply,
                        response,
                        rng,
                        budget,
                    );
                    record.class = j.class;
                    record.retry_after = j.note;
                    match (j.verdict, j.linger) {
                        (Verdict::Retry(plan), _) => {
                            record.next = Some(plan);
                            self.phase = Phase::Waiting(plan.send_at);
                            None
                        }
                        (
                            Verdict::Stop(o @ Outcome::RetryBudgetExhausted { class, last }),
                            Some(at),
                        ) => {
                            // The record says how the request ended; the
                            // machine says so after the wait.
                            record.outcome = Some(o);
                            self.phase = Phase::Closing(at, class, last);
                            None
                        }
                        (Verdict::Stop(o), _) => Some(o),
                    }
                }
            }
        };
        if let Some(o) = outcome {
            record.outcome = Some(o);
            self.phase = Phase::Done(o);
        }
    }

    pub(crate) fn poll_action(&mut self) -> Action {
        match self.phase {
            Phase::Ready if self.last_now >= self.deadline => {
                let o = Outcome::TimedOut { needed: None };
                self.finish(o);
                Action::Stop(o)
            }
            Phase::Ready => {
                let id = SendId {
                    item: self.item,
                    attempt: self.sent,
                };
                self.sent += 1;
                self.phase = Phase::InFlight(id.attempt);
                Action::Send(SendPlan {
                    id,
                    request: self.request.id,
                    abort_at: self.abort_at,
                    long_poll: None,
                })
            }
            Phase::InFlight(_) => Action::SleepUntil(self.deadline),
            Phase::Waiting(at) | Phase::Closing(at, ..) => Action::SleepUntil(at),
            Phase::Done(o) => Action::Stop(o),
        }
    }
}
