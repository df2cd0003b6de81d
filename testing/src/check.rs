//! [`Violation`], and [`Checker`]: the invariants of one request (a
//! `RetryMachine`, paced or not), checked independently of its logic.

use std::time::{Duration, Instant};

use polite_core::{
    Action, Event, Method, Outcome, RequestInfo, RetryClass, RetryPolicy, SendId,
    TransportErrorKind,
};

use crate::oracle;
use crate::server_time::{self, NotBefore};

/// A broken invariant: which rule, and what happened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invariant `{rule}` broken: {detail}")]
pub struct Violation {
    /// The rule's short name (`sleep-past-deadline`, `send-after-stop`, ...).
    pub rule: &'static str,
    /// What happened.
    pub detail: String,
}

pub(crate) fn violation(rule: &'static str, detail: String) -> Result<(), Violation> {
    Err(Violation { rule, detail })
}

/// The checkers' own slot for a retry class in their per-class counters
/// (their own table: an oracle does not borrow the machines' arithmetic).
pub(crate) fn class_index(class: RetryClass) -> usize {
    match class {
        RetryClass::RateLimited => 0,
        RetryClass::ServerError => 1,
        RetryClass::Transport => 2,
        other => unknown(&other),
    }
}

/// Whether SPEC §2 lets `request` be sent again, by the checkers' own
/// reading of its list (never through `RequestInfo::is_replayable` or
/// `Method::is_idempotent`, the code under check): the method is one of
/// GET, HEAD, OPTIONS, TRACE, PUT, DELETE, or the request carries an
/// idempotency key; *and* its body can be produced again.
pub(crate) fn replayable(request: &RequestInfo) -> bool {
    let idempotent = match request.method {
        Method::Get
        | Method::Head
        | Method::Options
        | Method::Trace
        | Method::Put
        | Method::Delete => true,
        Method::Post | Method::Patch | Method::Connect | Method::Other => false,
        other => unknown(&other),
    };
    (idempotent || request.idempotency_key) && request.body_replayable
}

/// An event or a retry class that polite-core added after these checkers
/// were written (the enums are `#[non_exhaustive]`): the checkers cannot
/// judge what they do not know, so they say so loudly rather than pass it.
#[cold]
pub(crate) fn unknown(what: &dyn std::fmt::Debug) -> ! {
    panic!("polite-testing does not know {what:?}: its checkers need updating for this polite-core")
}

/// Checks the invariants of SPEC.md on a stream of inputs and outputs of a
/// single-request machine, independently of the machine's own logic:
///
/// * `sleep-past-deadline`: every `SleepUntil(t)` has `t <= deadline`;
/// * `send-after-deadline`: no send at or after the deadline;
/// * `abort-at`: every send carries `abort_at = deadline + cushion`;
/// * `send-after-stop` / `stop-sticky`: after `Stop(o)` every action is `Stop(o)`;
/// * `retry-budget`: retries charged to a class stay within its budget,
///   and all retries within `max_total_retries` when the policy sets it;
/// * `retry-after`: no send before the server's `Retry-After` instant
///   (read by the checker's own plain code: any number of digits, saturating;
///   a leap second in a date; never through `polite_core::retry_after`),
///   and none at all after a delay too large to represent;
/// * `rate-limited`: a `Stop(RateLimited { retry_at })` right after an
///   answer only when the server asked for more than the automatic wait cap
///   or the 429 budget is spent, with `retry_at` the server's instant (an
///   instant far past the cap when the server's is too far to represent);
/// * `not-replayable`: a non-replayable request is sent at most once, and
///   only a non-replayable one ends `NotReplayable` (replayable by the
///   checker's own reading of SPEC §2's list of methods);
/// * `cancel`: after `Cancel` the next action is `Stop(Cancelled)`;
/// * `late-success`: an answer at or after the deadline ends in
///   `TimedOut { needed: None }` (discarded, whatever it says);
/// * `stale`: an answer before the deadline that arrives when the session
///   is at another generation than the request's (SPEC §2.3) ends the
///   request `Stale` at once, whatever its status or `Retry-After`;
/// * `send-while-in-flight`: a single request never has two sends in flight;
/// * `permanent`: a transport error that is permanent (SPEC §2.2's list,
///   the checker's own table) or of a kind the policy's `retried_transport`
///   leaves out ends the request at once with `Permanent { cause }`,
///   whatever the replayability and the budgets.
///
/// The deadline is learnt from the first send's `abort_at` minus the cushion
/// (or given with [`Checker::deadline`]).
#[derive(Clone, Debug)]
pub struct Checker {
    policy: RetryPolicy,
    replayable: bool,
    /// The request's session generation, if it has one.
    generation: Option<u64>,
    deadline: Option<Instant>,
    now: Option<Instant>,
    stopped: Option<Outcome>,
    cancelled: bool,
    sends: u32,
    in_flight: Option<SendId>,
    last_class: Option<RetryClass>,
    retries: [u32; 3],
    not_before: Option<NotBefore>,
    /// What the last answer's `Retry-After` asked (the checker's reading).
    asked: Option<Duration>,
    late_answer: bool,
    /// A transport error that must end the request (`Permanent`).
    permanent: Option<TransportErrorKind>,
    /// An answer for another session generation came: the request must
    /// end `Stale`.
    stale: bool,
}

impl Checker {
    /// A checker for a `RetryMachine` with this policy and request.
    #[must_use]
    pub fn for_retry(policy: &RetryPolicy, request: &RequestInfo) -> Checker {
        Checker {
            policy: *policy,
            replayable: replayable(request),
            generation: request.generation,
            deadline: None,
            now: None,
            stopped: None,
            cancelled: false,
            sends: 0,
            in_flight: None,
            last_class: None,
            retries: [0; 3],
            not_before: None,
            asked: None,
            late_answer: false,
            permanent: None,
            stale: false,
        }
    }

    /// A checker for this machine: its policy, request and deadline.
    ///
    /// It takes the deadline from the machine, so it cannot see a machine
    /// that gets its own deadline wrong: polite's own tools (explorer,
    /// proptests, fuzz cases) use [`for_retry`](Self::for_retry) with
    /// [`deadline`](Self::deadline)`(t0 + timeout)`, their own arithmetic.
    ///
    /// ```
    /// use polite_testing::{Checker, origin};
    /// use polite_core::SplitMix64;
    /// use polite_core::{Method, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// use std::time::Duration;
    /// let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                           SplitMix64::new(1), origin(), Duration::from_secs(5)).unwrap();
    /// let c = Checker::for_machine(&m);
    /// assert_eq!(c.outcome(), None);
    /// ```
    #[must_use]
    pub fn for_machine<R: rand_core::Rng, B: polite_core::budget::RetryBudget>(
        machine: &polite_core::RetryMachine<R, B>,
    ) -> Checker {
        Checker::for_retry(machine.policy(), machine.request()).deadline(machine.deadline())
    }

    /// Tells the checker the deadline up front (otherwise learnt from the
    /// first send).
    #[must_use]
    pub fn deadline(mut self, deadline: Instant) -> Checker {
        self.deadline = Some(deadline);
        self
    }

    /// Records an input fed to the machine at `now`.
    pub fn input(&mut self, now: Instant, event: &Event<'_>) {
        let now = self.now.map_or(now, |n| n.max(now));
        self.now = Some(now);
        if self.stopped.is_some() {
            return;
        }
        let answered = |id: &SendId, s: &Self| s.in_flight == Some(*id);
        match event {
            Event::Cancel => self.cancelled = true,
            Event::Tick => {}
            Event::Response(r) => {
                if !answered(&r.id, self) {
                    return;
                }
                self.in_flight = None;
                if self.deadline.is_some_and(|d| now >= d) {
                    self.late_answer = true;
                } else if let (Some(mine), Some(current)) = (self.generation, r.generation)
                    && mine != current
                {
                    // SPEC §2.3: dropped, whatever it says.
                    self.stale = true;
                }
                // SPEC §2's classes, by the checkers' own table.
                self.last_class = oracle::class_of(&self.policy, r);
                self.asked = r
                    .retry_after
                    .and_then(|v| server_time::asked(v, r.date, r.wall_clock));
                if let Some(d) = self.asked {
                    self.not_before = Some(NotBefore::after(now, d, self.policy.retry_after.min));
                }
            }
            Event::TransportError(id, kind) => {
                if !answered(id, self) {
                    return;
                }
                self.in_flight = None;
                if self.deadline.is_some_and(|d| now >= d) {
                    self.late_answer = true;
                }
                self.asked = None;
                if oracle::transport_retried(&self.policy, *kind) {
                    self.last_class = Some(RetryClass::Transport);
                } else {
                    self.last_class = None;
                    self.permanent = Some(*kind);
                }
            }
            other => unknown(other),
        }
    }

    /// Checks an action the machine answered at `now`.
    ///
    /// # Errors
    ///
    /// The [`Violation`] it breaks.
    pub fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        let now = self.now.map_or(now, |n| n.max(now));
        self.now = Some(now);
        if let Some(o) = self.stopped {
            return match action {
                Action::Stop(p) if *p == o => Ok(()),
                Action::Send(_) => violation("send-after-stop", format!("{action:?} after {o:?}")),
                _ => violation("stop-sticky", format!("{action:?} after {o:?}")),
            };
        }
        if self.cancelled && *action != Action::Stop(Outcome::Cancelled) {
            return violation("cancel", format!("{action:?} after Cancel"));
        }
        // Discarded, not judged: no retry was weighed, so no instant a
        // retry would have needed either.
        if self.late_answer && *action != Action::Stop(Outcome::TimedOut { needed: None }) {
            return violation(
                "late-success",
                format!("{action:?} after an answer at/after the deadline"),
            );
        }
        if std::mem::take(&mut self.stale) && *action != Action::Stop(Outcome::Stale) {
            return violation(
                "stale",
                format!("{action:?} after an answer for another session generation"),
            );
        }
        if let Some(cause) = self.permanent.take()
            && !self.late_answer
            && *action != Action::Stop(Outcome::Permanent { cause })
        {
            return violation(
                "permanent",
                format!("{action:?} after a {cause:?} transport error, which is not retried"),
            );
        }
        match *action {
            Action::Stop(o) => {
                if self.replayable && matches!(o, Outcome::NotReplayable { .. }) {
                    return violation(
                        "not-replayable",
                        format!("{o:?}, but SPEC §2's list makes the request replayable"),
                    );
                }
                self.rate_limited(now, o)?;
                self.stopped = Some(o);
            }
            Action::SleepUntil(t) => {
                if let Some(d) = self.deadline
                    && t > d
                {
                    return violation(
                        "sleep-past-deadline",
                        format!("SleepUntil {:?} past deadline by {:?}", t, t - d),
                    );
                }
            }
            Action::Send(plan) => {
                let deadline = *self
                    .deadline
                    .get_or_insert_with(|| plan.abort_at - self.policy.transport_cushion);
                if plan.abort_at != deadline + self.policy.transport_cushion {
                    return violation("abort-at", format!("{plan:?}, deadline {deadline:?}"));
                }
                if now >= deadline {
                    return violation("send-after-deadline", format!("{plan:?} at {now:?}"));
                }
                if let Some(f) = self.in_flight {
                    return violation("send-while-in-flight", format!("{plan:?} while {f} flies"));
                }
                if self.sends > 0 {
                    if !self.replayable {
                        return violation("not-replayable", format!("second send {plan:?}"));
                    }
                    let Some(class) = self.last_class else {
                        return violation("retry-budget", "retry without a failure".into());
                    };
                    self.retries[class_index(class)] += 1;
                    let budget = oracle::budget(&self.policy, class);
                    if self.retries[class_index(class)] > budget {
                        return violation(
                            "retry-budget",
                            format!(
                                "{} {class} retries, the policy allows {budget}: send {} \
                                 ({plan:?}) at {now:?}",
                                self.retries[class_index(class)],
                                self.sends + 1
                            ),
                        );
                    }
                    let total: u32 = self.retries.iter().sum();
                    if let Some(most) = self.policy.max_total_retries
                        && total > most
                    {
                        return violation(
                            "retry-budget",
                            format!("{total} retries in all, at most {most}"),
                        );
                    }
                    if let Some(nb) = self.not_before
                        && nb.forbids(now)
                    {
                        return violation(
                            "retry-after",
                            format!("send at {now:?} before the server's time {nb:?}"),
                        );
                    }
                }
                self.sends += 1;
                self.in_flight = Some(plan.id);
                self.last_class = None;
                self.not_before = None;
                self.asked = None;
            }
        }
        Ok(())
    }

    /// A `RateLimited` stop right after an answer: only when the server asked
    /// for more than the automatic wait cap, or the 429 budget is spent;
    /// `retry_at` is the server's instant when it gave one.
    fn rate_limited(&self, now: Instant, o: Outcome) -> Result<(), Violation> {
        let Outcome::RateLimited { retry_at } = o else {
            return Ok(());
        };
        if self.late_answer || self.cancelled || self.in_flight.is_some() || !self.replayable {
            return Ok(());
        }
        let Some(class) = self.last_class else {
            return Ok(());
        };
        let over_cap = self
            .asked
            .is_some_and(|d| d > self.policy.retry_after.auto_wait_cap);
        let total: u32 = self.retries.iter().sum();
        let spent = self.retries[class_index(class)] >= oracle::budget(&self.policy, class)
            || self.policy.max_total_retries.is_some_and(|m| total >= m);
        let justified = over_cap || (spent && class == RetryClass::RateLimited);
        if !justified {
            return violation(
                "rate-limited",
                format!(
                    "{o:?} at {now:?}, but the server asked {:?} (cap {:?}) and the {class} budget is not spent",
                    self.asked, self.policy.retry_after.auto_wait_cap
                ),
            );
        }
        let cap = self.policy.retry_after.auto_wait_cap;
        let ok = match self.not_before {
            None => retry_at.is_none(),
            Some(NotBefore::At(t)) => retry_at == Some(t),
            // Too far to represent: any instant well past the cap will do
            // (never "no time": that would invite a restart).
            Some(NotBefore::Never) => {
                retry_at.is_some_and(|t| t.checked_duration_since(now).is_some_and(|d| d > cap))
            }
        };
        if !ok {
            return violation(
                "rate-limited",
                format!("{o:?}, but the server's time is {:?}", self.not_before),
            );
        }
        Ok(())
    }

    /// The outcome seen, if the machine stopped.
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        self.stopped
    }
}
