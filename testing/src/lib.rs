//! # polite-testing
//!
//! The test toolkit of [`polite_core`]: everything polite's own tests use
//! to prove the machines keep their promises, public so that you can prove
//! the same of *your* policies. Add it as a dev-dependency.
//!
//! * [`Fixed`]: a deterministic random source (and
//!   [`polite_core::SplitMix64`], a seeded one, lives in core);
//!   [`origin()`]: an arbitrary start for virtual time; [`block_on`]: runs
//!   a future that never waits on a real timer.
//! * [`Simulator`]: runs any [`Machine`] against a scripted server (a list
//!   of [`Scripted`] answers, or a closure of time and request) and returns
//!   the [`Trace`] of actions with their instants.
//! * The invariant checkers, written independently of the machines:
//!   [`Checker`] (one request, paced or not), [`PollChecker`] (waiting for a
//!   job), [`BatchChecker`] (a batch), [`ThrottleChecker`] (a rate limit);
//!   all behind the [`Invariants`] trait. Between them they check: no sleep
//!   past the deadline and no send at or after it, no send after `Stop`
//!   (and `Stop` sticky), sends within the retry budgets, never before the
//!   server's `Retry-After`, a non-replayable request sent once, cancel
//!   honoured, and exactly one outcome (per item, for a batch).
//! * Machine-independent event scripts: [`Input`], and [`run_script`] /
//!   [`ScriptRunner`], which play one against any machine with any checker;
//!   [`explore`] plays *every* script over a small alphabet up to a length.
//! * `strategies` (feature `proptest`): proptest strategies for scripts and
//!   policies; its docs show a ten-line property test of your own policy.
//! * `fuzz` (feature `arbitrary`): scripts decoded from fuzzer bytes, and
//!   the checks the fuzz targets in `fuzz/` run, so that a test can replay
//!   a corpus the same way.
//!
//! ```
//! use polite_testing::{Scripted, Simulator};
//! use polite_core::SplitMix64;
//! use polite_core::{Method, Outcome, RequestId, RequestInfo, RetryMachine, RetryPolicy};
//! use std::time::{Duration, Instant};
//!
//! let t0 = Instant::now();
//! let policy = RetryPolicy::default();
//! let request = RequestInfo::new(RequestId(1), Method::Get);
//! let machine = RetryMachine::new(policy, request, SplitMix64::new(3), t0, Duration::from_secs(30)).unwrap();
//! let trace = Simulator::new(t0)
//!     .replies([Scripted::status(503), Scripted::status(429).retry_after("2"), Scripted::status(200)])
//!     .check_retry(&policy, &request)
//!     .run(machine)
//!     .unwrap();
//! assert_eq!(trace.outcome, Outcome::Succeeded { status: 200 });
//! assert_eq!(trace.sends().count(), 3);
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use polite_core::{
    Action, AttemptRecord, Event, Machine, Outcome, RequestInfo, Response, RetryClass, RetryPolicy,
    SendId, SendPlan, TransportErrorKind,
};

/// An arbitrary origin for virtual time: the first call reads the monotonic
/// clock once, and every call returns that same instant. Simulations only add
/// durations to it; nothing measures elapsed time against it.
///
/// ```
/// use polite_testing::origin;
/// assert_eq!(origin(), origin());
/// ```
#[must_use]
pub fn origin() -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    #[allow(clippy::disallowed_methods)] // the one clock read: an arbitrary origin
    *ORIGIN.get_or_init(Instant::now)
}

/// Runs a future to completion on the current thread, parking between polls
/// (safe code: the waker unparks this thread).
///
/// For futures that never wait on a real timer: a [`polite_core::drive`]
/// run over a virtual-time [`Io`](polite_core::drive::Io) (whose sleeps
/// complete at once by advancing the simulated clock), or one woken by
/// other threads. There is no timer here: a future that waits on a runtime's
/// timer parks forever. Adapters use their runtime (or, for blocking IO,
/// `polite-blocking`'s own loop).
///
/// ```
/// assert_eq!(polite_testing::block_on(async { 1 + 1 }), 2);
/// ```
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

mod poll_check;
mod server_time;
pub use poll_check::{JobBoard, PollChecker, PollTrace};
use server_time::NotBefore;
mod batch_check;
pub use batch_check::BatchChecker;
mod throttle_check;
pub use throttle_check::ThrottleChecker;
mod script;
pub use script::{
    Answer, Input, Invariants, Job, ScriptRunner, Settle, default_wall_clock, run_script,
};
mod explore;
pub use explore::{Counterexample, Exploration, explore, explore_from_origin};
#[cfg(feature = "arbitrary")]
pub mod fuzz;
#[cfg(feature = "proptest")]
pub mod strategies;

/// A "generator" that always yields the same `u64`: for tables that fix the
/// jitter draw (`Fixed(0)` is `u = 0`, `Fixed(u64::MAX)` is `u` just under 1).
///
/// ```
/// use polite_testing::Fixed;
/// use rand_core::Rng;
/// assert_eq!(Fixed(5).next_u64(), 5);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixed(pub u64);

impl rand_core::TryRng for Fixed {
    type Error = Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok((self.0 >> 32) as u32)
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.0)
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        dst.fill(0);
        Ok(())
    }
}

/// One scripted server answer: what comes back to the next send, and how long
/// after the send it arrives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scripted {
    /// What comes back.
    pub reply: ScriptedReply,
    /// Latency from the send to the answer.
    pub after: Duration,
}

/// What a scripted answer is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptedReply {
    /// An HTTP answer.
    Status {
        /// Status.
        status: u16,
        /// Raw `Retry-After`.
        retry_after: Option<Vec<u8>>,
        /// Raw `Date`.
        date: Option<Vec<u8>>,
        /// Other raw headers (name, value), filed with
        /// [`Response::header`]: `RateLimit`, `RateLimit-Policy`,
        /// `X-RateLimit-*`, `x-amz-retry-after`.
        headers: Vec<(String, Vec<u8>)>,
    },
    /// A transport error.
    Transport(TransportErrorKind),
    /// No answer at all (the adapter aborts at `abort_at`).
    Hang,
}

impl Scripted {
    /// An HTTP answer after 10 ms.
    #[must_use]
    pub fn status(status: u16) -> Scripted {
        Scripted {
            reply: ScriptedReply::Status {
                status,
                retry_after: None,
                date: None,
                headers: Vec::new(),
            },
            after: Duration::from_millis(10),
        }
    }

    /// A transport error after 10 ms.
    #[must_use]
    pub fn transport(kind: TransportErrorKind) -> Scripted {
        Scripted {
            reply: ScriptedReply::Transport(kind),
            after: Duration::from_millis(10),
        }
    }

    /// A server that never answers.
    #[must_use]
    pub fn hang() -> Scripted {
        Scripted {
            reply: ScriptedReply::Hang,
            after: Duration::ZERO,
        }
    }

    /// Adds a raw `Retry-After` value (HTTP answers only).
    #[must_use]
    pub fn retry_after(mut self, value: impl AsRef<[u8]>) -> Scripted {
        if let ScriptedReply::Status { retry_after, .. } = &mut self.reply {
            *retry_after = Some(value.as_ref().to_vec());
        }
        self
    }

    /// Adds a raw `Date` value (HTTP answers only).
    #[must_use]
    pub fn date(mut self, value: impl AsRef<[u8]>) -> Scripted {
        if let ScriptedReply::Status { date, .. } = &mut self.reply {
            *date = Some(value.as_ref().to_vec());
        }
        self
    }

    /// Adds a raw header (HTTP answers only), filed into the answer with
    /// [`Response::header`]: e.g. `RateLimit`, `RateLimit-Policy`,
    /// `X-RateLimit-Remaining`, `x-amz-retry-after`.
    ///
    /// ```
    /// use polite_testing::{Scripted, ScriptedReply};
    /// let s = Scripted::status(200).header("RateLimit", r#""default";r=0;t=1"#);
    /// assert!(matches!(s.reply, ScriptedReply::Status { ref headers, .. } if headers.len() == 1));
    /// ```
    #[must_use]
    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Scripted {
        if let ScriptedReply::Status { headers, .. } = &mut self.reply {
            headers.push((name.to_owned(), value.as_ref().to_vec()));
        }
        self
    }

    /// Sets the latency.
    #[must_use]
    pub fn after(mut self, latency: Duration) -> Scripted {
        self.after = latency;
        self
    }
}

/// One step of a trace: an action the machine answered, at virtual time `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Virtual time.
    pub at: Instant,
    /// The action.
    pub action: Action,
}

/// What a simulation produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Every action with its instant, in order (a trailing `Stop` once).
    pub steps: Vec<Step>,
    /// Every attempt record, in order.
    pub records: Vec<AttemptRecord>,
    /// The outcome.
    pub outcome: Outcome,
    /// When the machine stopped.
    pub ended_at: Instant,
}

impl Trace {
    /// The sends with their instants.
    pub fn sends(&self) -> impl Iterator<Item = (Instant, SendPlan)> + '_ {
        self.steps.iter().filter_map(|s| match s.action {
            Action::Send(p) => Some((s.at, p)),
            _ => None,
        })
    }

    /// The planned delays between consecutive sends.
    #[must_use]
    pub fn gaps(&self) -> Vec<Duration> {
        let sends: Vec<_> = self.sends().map(|(t, _)| t).collect();
        sends.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// A boxed server closure.
type Respond = dyn FnMut(Instant, &SendPlan) -> Scripted;
struct ServerFn(Box<Respond>);

impl std::fmt::Debug for ServerFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerFn")
    }
}

/// Runs a [`Machine`] against scripted answers in virtual time: the
/// simulator is the clock, nothing sleeps. Answers are used in order, one per
/// send; when the script runs out, every further send hangs.
#[derive(Debug)]
pub struct Simulator {
    start: Instant,
    replies: VecDeque<Scripted>,
    server: Option<ServerFn>,
    cancel_at: Option<Instant>,
    wall: SystemTime,
    checker: Option<Checker>,
    batch_checker: Option<BatchChecker>,
    max_steps: usize,
}

impl Simulator {
    /// A simulator whose virtual clock starts at `start`.
    #[must_use]
    pub fn new(start: Instant) -> Simulator {
        Simulator {
            start,
            replies: VecDeque::new(),
            server: None,
            cancel_at: None,
            wall: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            checker: None,
            batch_checker: None,
            max_steps: 10_000,
        }
    }

    /// The server's answers, in order.
    #[must_use]
    pub fn replies(mut self, replies: impl IntoIterator<Item = Scripted>) -> Simulator {
        self.replies.extend(replies);
        self
    }

    /// A server as a closure of the send instant and the plan: called once per
    /// send, after the scripted [`replies`](Self::replies) run out. Use it for
    /// servers whose answer depends on time (quotas, jobs that finish).
    ///
    /// ```
    /// use polite_testing::{Scripted, Simulator};
    /// use polite_core::SplitMix64;
    /// use polite_core::{Method, Outcome, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                           SplitMix64::new(1), t0, Duration::from_secs(60)).unwrap();
    /// // Unavailable for the first 2 seconds.
    /// let trace = Simulator::new(t0)
    ///     .server(move |now, _plan| Scripted::status(if now < t0 + Duration::from_secs(2) { 503 } else { 200 }))
    ///     .run(m).unwrap();
    /// assert_eq!(trace.outcome, Outcome::Succeeded { status: 200 });
    /// ```
    #[must_use]
    pub fn server(
        mut self,
        server: impl FnMut(Instant, &SendPlan) -> Scripted + 'static,
    ) -> Simulator {
        self.server = Some(ServerFn(Box::new(server)));
        self
    }

    /// The caller cancels at this instant.
    #[must_use]
    pub fn cancel_at(mut self, at: Instant) -> Simulator {
        self.cancel_at = Some(at);
        self
    }

    /// Wall-clock time at `start` (advances with virtual time).
    #[must_use]
    pub fn wall_clock(mut self, wall: SystemTime) -> Simulator {
        self.wall = wall;
        self
    }

    /// Checks every step with a [`Checker`] for a `RetryMachine` with this
    /// policy and request; [`run`](Self::run) fails on the first violation.
    #[must_use]
    pub fn check_retry(mut self, policy: &RetryPolicy, request: &RequestInfo) -> Simulator {
        self.checker = Some(Checker::for_retry(policy, request));
        self
    }

    /// Checks every step with a [`BatchChecker`] (for a `BatchMachine`);
    /// [`run`](Self::run) fails on the first violation.
    #[must_use]
    pub fn check_batch(mut self, checker: BatchChecker) -> Simulator {
        self.batch_checker = Some(checker);
        self
    }

    /// Runs the machine to its end.
    ///
    /// # Errors
    ///
    /// The first [`Violation`] the checker finds, or a violation of rule
    /// `"terminates"` if the machine has not stopped after 10,000 steps.
    pub fn run<M: Machine>(mut self, mut machine: M) -> Result<Trace, Violation> {
        let mut now = self.start;
        let mut steps = Vec::new();
        let mut records = Vec::new();
        // In-flight sends: (arrival instant, id, reply); hangs never arrive.
        let mut flying: Vec<(Instant, SendId, Scripted)> = Vec::new();
        for _ in 0..self.max_steps {
            let action = machine.poll_action();
            if let Some(c) = &mut self.checker {
                c.output(now, &action)?;
            }
            if let Some(c) = &mut self.batch_checker {
                c.output(now, &action)?;
            }
            steps.push(Step { at: now, action });
            match action {
                Action::Send(plan) => {
                    let s = match (self.replies.pop_front(), &mut self.server) {
                        (Some(s), _) => s,
                        (None, Some(f)) => (f.0)(now, &plan),
                        (None, None) => Scripted::hang(),
                    };
                    let arrival = match s.reply {
                        ScriptedReply::Hang => plan.abort_at,
                        _ => now + s.after,
                    };
                    flying.push((arrival.min(plan.abort_at), plan.id, s));
                }
                Action::Stop(outcome) => {
                    return Ok(Trace {
                        steps,
                        records,
                        outcome,
                        ended_at: now,
                    });
                }
                Action::SleepUntil(t) => {
                    let next_reply = flying.iter().enumerate().min_by_key(|(_, f)| f.0);
                    let cancel = self.cancel_at.filter(|c| *c <= t);
                    let reply_at = next_reply.map(|(_, f)| f.0).filter(|a| *a <= t);
                    let earliest = [cancel, reply_at].into_iter().flatten().min();
                    match earliest {
                        Some(at) if Some(at) == cancel => {
                            now = now.max(at);
                            self.cancel_at = None;
                            self.feed(&mut machine, now, Event::Cancel)?;
                        }
                        Some(at) => {
                            now = now.max(at);
                            let i = next_reply.map(|(i, _)| i).unwrap_or_default();
                            let (_, id, s) = flying.swap_remove(i);
                            let wall = self.wall + (now - self.start);
                            match &s.reply {
                                ScriptedReply::Status {
                                    status,
                                    retry_after,
                                    date,
                                    headers,
                                } => {
                                    let mut r = Response::new(id, *status, wall);
                                    for (name, value) in headers {
                                        r = r.header(name, value);
                                    }
                                    r.retry_after = retry_after.as_deref().or(r.retry_after);
                                    r.date = date.as_deref().or(r.date);
                                    self.feed(&mut machine, now, Event::Response(r))?;
                                }
                                ScriptedReply::Transport(k) => {
                                    self.feed(&mut machine, now, Event::TransportError(id, *k))?;
                                }
                                ScriptedReply::Hang => {
                                    self.feed(
                                        &mut machine,
                                        now,
                                        Event::TransportError(id, TransportErrorKind::Aborted),
                                    )?;
                                }
                            }
                        }
                        None => {
                            now = now.max(t);
                            self.feed(&mut machine, now, Event::Tick)?;
                        }
                    }
                    if let Some(r) = machine.take_record() {
                        records.push(r);
                    }
                }
            }
        }
        Err(Violation {
            rule: "terminates",
            detail: format!("no Stop after {} steps", self.max_steps),
        })
    }

    fn feed<M: Machine>(
        &mut self,
        machine: &mut M,
        now: Instant,
        event: Event<'_>,
    ) -> Result<(), Violation> {
        if let Some(c) = &mut self.checker {
            c.input(now, &event);
        }
        if let Some(c) = &mut self.batch_checker {
            c.input(now, &event);
        }
        machine.handle(now, event);
        Ok(())
    }
}

/// A broken invariant: which rule, and what happened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invariant `{rule}` broken: {detail}")]
pub struct Violation {
    /// The rule's short name (`sleep-past-deadline`, `send-after-stop`, ...).
    pub rule: &'static str,
    /// What happened.
    pub detail: String,
}

fn violation(rule: &'static str, detail: String) -> Result<(), Violation> {
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
/// * `not-replayable`: a non-replayable request is sent at most once;
/// * `cancel`: after `Cancel` the next action is `Stop(Cancelled)`;
/// * `late-success`: an answer at or after the deadline ends in `TimedOut`;
/// * `send-while-in-flight`: a single request never has two sends in flight.
///
/// The deadline is learnt from the first send's `abort_at` minus the cushion
/// (or given with [`Checker::deadline`]).
#[derive(Clone, Debug)]
pub struct Checker {
    policy: RetryPolicy,
    replayable: bool,
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
}

impl Checker {
    /// A checker for a `RetryMachine` with this policy and request.
    #[must_use]
    pub fn for_retry(policy: &RetryPolicy, request: &RequestInfo) -> Checker {
        Checker {
            policy: *policy,
            replayable: request.is_replayable(),
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
    pub fn for_machine<R: rand_core::Rng, B: polite_core::RetryBudget>(
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
                }
                // The caller's classification wins, as in the machines.
                self.last_class = self.policy.class_of_response(r);
                self.asked = r
                    .retry_after
                    .and_then(|v| server_time::asked(v, r.date, r.wall_clock));
                if let Some(d) = self.asked {
                    self.not_before = Some(NotBefore::after(now, d, self.policy.retry_after.min));
                }
            }
            Event::TransportError(id, _) => {
                if !answered(id, self) {
                    return;
                }
                self.in_flight = None;
                if self.deadline.is_some_and(|d| now >= d) {
                    self.late_answer = true;
                }
                self.last_class = Some(RetryClass::Transport);
                self.asked = None;
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
        if self.late_answer && !matches!(action, Action::Stop(Outcome::TimedOut { .. })) {
            return violation(
                "late-success",
                format!("{action:?} after an answer at/after the deadline"),
            );
        }
        match *action {
            Action::Stop(o) => {
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
                    if self.retries[class_index(class)] > self.policy.max_retries.of(class) {
                        return violation(
                            "retry-budget",
                            format!("{} {class} retries", self.retries[class_index(class)]),
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
        let spent = self.retries[class_index(class)] >= self.policy.max_retries.of(class)
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
