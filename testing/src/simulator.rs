//! [`Simulator`]: runs any machine against a scripted server in virtual
//! time, through polite-core's own drive loop.
//!
//! The simulator is not a loop of its own. It is a virtual-time
//! [`Io`](polite_core::drive::Io), run by
//! [`polite_core::drive::drive`] exactly as an adapter's `Io` is:
//!
//! * its clock ([`Io::now`]) is the simulated instant, and the wall clock
//!   ([`Io::wall_clock`]) advances with it;
//! * a send answers from the script (or the server closure): the answer
//!   resolves once the clock reaches the send's instant plus the scripted
//!   latency, and a server that hangs, or answers after `abort_at`, is
//!   aborted at `abort_at` (the `Io` contract);
//! * a sleep never waits: when the loop would wait, the clock jumps to the
//!   first thing that happens (the caller's cancel, an answer, or the
//!   instant the machine asked for, in that order on a tie) and the loop
//!   goes on at once;
//! * the caller's cancel is seen as a real one is: ready from its instant
//!   on, and checked right before every send.
//!
//! So a simulated machine gets its attempt records, its notices and its
//! job reports (through a [`Classify`], [`FromScript`] by default) the way
//! production gives them. The checkers see it through a thin wrapper
//! machine that checks each action as the loop takes it and each event as
//! the loop feeds it.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use polite_core::drive::{self, Classify, Io, Observe};
use polite_core::poll::JobReport;
use polite_core::record::AttemptRecord;
use polite_core::{
    Action, Event, Machine, Notice, Outcome, RequestInfo, Response, RetryClass, RetryPolicy,
    SendPlan, TransportErrorKind,
};

use crate::{BatchChecker, Checker, Invariants, Job, PollChecker, Violation};

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
        /// [`Response::header`](polite_core::Response::header): `RateLimit`,
        /// `RateLimit-Policy`, `X-RateLimit-*`, `x-amz-retry-after`.
        headers: Vec<(String, Vec<u8>)>,
        /// What the body says about the job (read by the simulator's
        /// default classifier, [`FromScript`], for a `PollMachine`).
        job: Option<Job>,
        /// The caller's classification of the answer (read by
        /// [`FromScript`] into
        /// [`Response::retry_class`](polite_core::Response::retry_class)).
        retry_class: Option<RetryClass>,
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
                job: None,
                retry_class: None,
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
    /// [`Response::header`](polite_core::Response::header): e.g. `RateLimit`, `RateLimit-Policy`,
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

    /// Sets what the answer's body says about the job (HTTP answers only):
    /// the simulator's default classifier, [`FromScript`], hands it to the
    /// machine as the [`JobReport`], as an adapter's classifier reads it out
    /// of a JSON body.
    ///
    /// ```
    /// use polite_testing::{Job, Scripted};
    /// let rejected = Scripted::status(400).job(Job::LongPollUnsupported);
    /// assert_ne!(rejected, Scripted::status(400));
    /// ```
    #[must_use]
    pub fn job(mut self, value: Job) -> Scripted {
        if let ScriptedReply::Status { job, .. } = &mut self.reply {
            *job = Some(value);
        }
        self
    }

    /// Shorthand: an answer whose body says the job is in `state`.
    ///
    /// ```
    /// use polite_testing::{Job, Scripted};
    /// assert_eq!(Scripted::status(200).state("running"),
    ///            Scripted::status(200).job(Job::State("running".into())));
    /// ```
    #[must_use]
    pub fn state(self, state: &str) -> Scripted {
        self.job(Job::State(state.to_owned()))
    }

    /// Sets the caller's classification of the answer (HTTP answers only),
    /// e.g. what an AWS error code says of a 400.
    ///
    /// ```
    /// use polite_testing::{Scripted, ScriptedReply};
    /// use polite_core::RetryClass;
    /// let s = Scripted::status(400).retry_class(RetryClass::RateLimited);
    /// assert!(matches!(s.reply, ScriptedReply::Status { retry_class: Some(_), .. }));
    /// ```
    #[must_use]
    pub fn retry_class(mut self, class: RetryClass) -> Scripted {
        if let ScriptedReply::Status { retry_class, .. } = &mut self.reply {
            *retry_class = Some(class);
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

/// What a simulation (or a script) produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Every action with its instant, in order (a trailing `Stop` once).
    pub steps: Vec<Step>,
    /// Every attempt record, in order.
    pub records: Vec<AttemptRecord>,
    /// Every notice the machine gave (e.g. a `PollMachine` falling back
    /// from long polling), with the instant it gave it.
    pub notices: Vec<(Instant, Notice)>,
    /// The outcome.
    pub outcome: Outcome,
    /// When the machine stopped.
    pub ended_at: Instant,
}

impl Trace {
    /// SPEC §2.4, each attempt yields one record: every send of a run that
    /// stopped has exactly one record with its id (an answered one, or one
    /// dropped in flight when the machine stopped), and no record names
    /// another id. Counted here from the trace alone.
    ///
    /// # Errors
    ///
    /// The ids sent and the ids recorded, when they differ.
    ///
    /// ```
    /// use polite_testing::{Scripted, Simulator, origin};
    /// use polite_core::{Method, RequestId, RequestInfo, RetryMachine, RetryPolicy, SplitMix64};
    /// use std::time::Duration;
    /// let t0 = origin();
    /// let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                           SplitMix64::new(1), t0, Duration::from_secs(10)).unwrap();
    /// // A 503, then a send still in flight when the caller cancels.
    /// let trace = Simulator::new(t0)
    ///     .replies([Scripted::status(503), Scripted::status(200).after(Duration::from_secs(60))])
    ///     .cancel_at(t0 + Duration::from_secs(5))
    ///     .run(m)
    ///     .unwrap();
    /// assert_eq!(trace.records.len(), 2);
    /// assert_eq!(trace.one_record_per_send(), Ok(()));
    /// ```
    pub fn one_record_per_send(&self) -> Result<(), String> {
        let mut sent: Vec<_> = self
            .sends()
            .map(|(_, p)| (p.id.item, p.id.attempt))
            .collect();
        let mut recorded: Vec<_> = self
            .records
            .iter()
            .map(|r| (r.id.item, r.id.attempt))
            .collect();
        sent.sort_unstable();
        recorded.sort_unstable();
        if sent == recorded {
            Ok(())
        } else {
            Err(format!("sent {sent:?}, recorded {recorded:?}"))
        }
    }

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

/// A boxed classifier.
struct Classifier(Box<dyn Classify<Scripted>>);

impl std::fmt::Debug for Classifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Classifier")
    }
}

/// A scripted HTTP answer is the simulator's [`drive::Answer`]: the drive
/// loop reads its status and headers into the machine's `Response` as it
/// reads a real one (a `Retry-After` or `Date` set with
/// [`Scripted::retry_after`] / [`Scripted::date`] wins over one in the
/// other headers; of two headers with one name, the later one).
/// Only HTTP answers reach the loop as answers: the simulator turns
/// transport errors and hangs into `TransportError` events (a status of 0
/// stands for "not an HTTP answer").
///
/// ```
/// use polite_core::drive::Answer;
/// use polite_testing::Scripted;
/// let s = Scripted::status(429).retry_after("3").header("RateLimit", "x");
/// assert_eq!(Answer::status(&s), 429);
/// assert_eq!(Answer::header(&s, "retry-after"), Some(&b"3"[..]));
/// assert_eq!(Answer::header(&s, "ratelimit"), Some(&b"x"[..]));
/// ```
impl drive::Answer for Scripted {
    fn status(&self) -> u16 {
        match &self.reply {
            ScriptedReply::Status { status, .. } => *status,
            _ => 0,
        }
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        let ScriptedReply::Status {
            retry_after,
            date,
            headers,
            ..
        } = &self.reply
        else {
            return None;
        };
        let field = if name.eq_ignore_ascii_case("retry-after") {
            retry_after.as_deref()
        } else if name.eq_ignore_ascii_case("date") {
            date.as_deref()
        } else {
            None
        };
        field.or_else(|| {
            headers
                .iter()
                .rev()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_slice())
        })
    }
}

/// The simulator's default classifier: reads the job report
/// ([`Scripted::job`], [`Scripted::state`]) and the retry class
/// ([`Scripted::retry_class`]) a scripted answer carries, as an adapter's
/// classifier reads them out of a body. Replace it with
/// [`Simulator::classify`] to run a classifier of your own (e.g.
/// [`polite_core::aws::ErrorTypeHeader`]).
///
/// ```
/// use polite_core::poll::JobReport;
/// use polite_core::drive::Classify;
/// use polite_testing::{FromScript, Scripted};
/// let answer = Scripted::status(200).state("running");
/// assert_eq!(FromScript.job(&answer), Some(JobReport::State("running")));
/// assert_eq!(FromScript.retry_class(&answer), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FromScript;

impl Classify<Scripted> for FromScript {
    fn job<'a>(&'a mut self, answer: &'a Scripted) -> Option<JobReport<'a>> {
        match &answer.reply {
            ScriptedReply::Status { job: Some(job), .. } => Some(match job {
                Job::State(s) => JobReport::State(s),
                Job::LongPollUnsupported => JobReport::LongPollUnsupported,
            }),
            _ => None,
        }
    }

    fn retry_class(&mut self, answer: &Scripted) -> Option<RetryClass> {
        match &answer.reply {
            ScriptedReply::Status { retry_class, .. } => *retry_class,
            _ => None,
        }
    }
}

/// Runs a [`Machine`] against scripted answers in virtual time: the
/// simulator is the clock, nothing sleeps. Answers are used in order, one per
/// send; when the script runs out, the [`server`](Self::server) closure
/// answers, and without one every further send hangs.
///
/// The simulator is not a loop of its own: the machine runs in
/// [`polite_core::drive::drive`], the loop every adapter runs, over a
/// virtual-time [`Io`](polite_core::drive::Io):
///
/// * its clock is the simulated instant, and the wall clock advances with
///   it (from [`wall_clock`](Self::wall_clock));
/// * a send answers from the script: the answer resolves once the clock
///   reaches the send's instant plus the scripted latency; a server that
///   hangs, or answers after the send's `abort_at`, is aborted at
///   `abort_at` (the `Io` contract);
/// * a sleep never waits: when the loop would wait, the clock jumps to the
///   first thing that happens — the caller's cancel, an answer, or the
///   instant the machine asked for, in that order on a tie;
/// * the caller's cancel ([`cancel_at`](Self::cancel_at)) is seen as a
///   real one: ready from its instant on, and checked right before every
///   send;
/// * answers are classified by a [`Classify`] ([`FromScript`] unless set
///   with [`classify`](Self::classify)), and the machine's records and
///   notices reach the [`Trace`] through the loop's observer.
///
/// Checkers set with [`check_retry`](Self::check_retry),
/// [`check_poll`](Self::check_poll), [`check_batch`](Self::check_batch)
/// or given to [`run_checked`](Self::run_checked) see every event before
/// the machine does, every action, and every notice.
#[derive(Debug)]
pub struct Simulator {
    start: Instant,
    replies: VecDeque<Scripted>,
    server: Option<ServerFn>,
    cancel_at: Option<Instant>,
    wall: SystemTime,
    classify: Classifier,
    checker: Option<Checker>,
    poll_checker: Option<PollChecker>,
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
            classify: Classifier(Box::new(FromScript)),
            checker: None,
            poll_checker: None,
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
    /// use polite_testing::{Scripted, Simulator, origin};
    /// use polite_core::{Method, Outcome, RequestId, RequestInfo, RetryMachine, RetryPolicy, SplitMix64};
    /// use std::time::Duration;
    /// let t0 = origin();
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

    /// The caller cancels at this instant: from then on the loop sees the
    /// cancel (ready while it waits, and checked right before every send).
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

    /// Reads job reports and retry classes out of the scripted answers with
    /// `classify` instead of [`FromScript`]: e.g. the AWS error-type header,
    /// or a classifier of your own over the headers.
    ///
    /// ```
    /// use polite_testing::{Scripted, Simulator, origin};
    /// use polite_core::{Method, Outcome, RequestId, RequestInfo, RetryMachine, SplitMix64, aws};
    /// use std::time::Duration;
    /// let t0 = origin();
    /// let m = RetryMachine::new(aws::standard(), RequestInfo::new(RequestId(1), Method::Get),
    ///                           SplitMix64::new(1), t0, Duration::from_secs(60)).unwrap();
    /// let throttled = Scripted::status(400).header("x-amzn-ErrorType", "ThrottlingException");
    /// let trace = Simulator::new(t0)
    ///     .replies([throttled, Scripted::status(200)])
    ///     .classify(aws::ErrorTypeHeader)
    ///     .run(m).unwrap();
    /// assert_eq!(trace.outcome, Outcome::Succeeded { status: 200 }); // the 400 was retried
    /// ```
    #[must_use]
    pub fn classify(mut self, classify: impl Classify<Scripted> + 'static) -> Simulator {
        self.classify = Classifier(Box::new(classify));
        self
    }

    /// Checks every step with a [`Checker`] for a `RetryMachine` with this
    /// policy and request; [`run`](Self::run) fails on the first violation.
    #[must_use]
    pub fn check_retry(mut self, policy: &RetryPolicy, request: &RequestInfo) -> Simulator {
        self.checker = Some(Checker::for_retry(policy, request));
        self
    }

    /// Checks every step, notices included, with a [`PollChecker`] (for a
    /// `PollMachine`); [`run`](Self::run) fails on the first violation.
    ///
    /// ```
    /// use polite_testing::{PollChecker, Scripted, Simulator, origin};
    /// use polite_core::{Method, Outcome, PollMachine, PollPolicy, RequestId, RequestInfo, SplitMix64};
    /// use std::time::Duration;
    ///
    /// let t0 = origin();
    /// let done = t0 + Duration::from_secs(40);
    /// let m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                          SplitMix64::new(1), t0, Duration::from_secs(120)).unwrap();
    /// let checker = PollChecker::for_machine(&m);
    /// // A server that holds each long poll until the job ends or the wait elapses.
    /// let trace = Simulator::new(t0)
    ///     .server(move |now, plan| {
    ///         let until = now + Duration::from_secs(u64::from(plan.long_poll.unwrap_or(0)));
    ///         let at = until.min(done.max(now));
    ///         Scripted::status(200).after(at - now).state(if at >= done { "passed" } else { "running" })
    ///     })
    ///     .check_poll(checker)
    ///     .run(m)
    ///     .unwrap();
    /// assert!(matches!(trace.outcome, Outcome::Terminal { .. }));
    /// assert_eq!(trace.sends().count(), 2);
    /// assert!(trace.notices.is_empty()); // the server honours long polls
    /// ```
    #[must_use]
    pub fn check_poll(mut self, checker: PollChecker) -> Simulator {
        self.poll_checker = Some(checker);
        self
    }

    /// Checks every step with a [`BatchChecker`] (for a `BatchMachine`);
    /// [`run`](Self::run) fails on the first violation. (Its
    /// [`outcomes`](BatchChecker::outcomes) rules need the machine: give
    /// the checker to [`run_checked`](Self::run_checked) for those.)
    #[must_use]
    pub fn check_batch(mut self, checker: BatchChecker) -> Simulator {
        self.batch_checker = Some(checker);
        self
    }

    /// Runs the machine to its end.
    ///
    /// # Errors
    ///
    /// The first [`Violation`] a checker finds, or a violation of rule
    /// `"terminates"` if the machine has not stopped after 10,000 actions.
    pub fn run<M: Machine>(self, machine: M) -> Result<Trace, Violation> {
        self.run_checked(machine, ())
    }

    /// Runs the machine to its end, checking every step with `checker` too
    /// (any [`Invariants`]: a built-in checker, a pair, a rule of your
    /// own), which also sees the machine after each round of actions.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    ///
    /// ```
    /// use polite_testing::{BatchChecker, Scripted, Simulator, origin};
    /// use polite_core::{BatchMachine, BatchPolicy, Method, Outcome, RequestId, RequestInfo,
    ///                   SplitMix64};
    /// use polite_core::pace::Unpaced;
    /// use std::time::Duration;
    /// let t0 = origin();
    /// let requests: Vec<_> = (0..4).map(|i| RequestInfo::new(RequestId(i), Method::Get)).collect();
    /// let batch = BatchMachine::new(BatchPolicy::default(), requests, SplitMix64::new(1), Unpaced,
    ///                               t0, Duration::from_secs(10)).unwrap();
    /// let checker = BatchChecker::for_machine(&batch); // also checks every item's outcome
    /// let trace = Simulator::new(t0)
    ///     .replies([Scripted::status(503)])
    ///     .server(|_, _| Scripted::status(200))
    ///     .run_checked(batch, checker)
    ///     .unwrap();
    /// assert_eq!(trace.outcome, Outcome::BatchDone { succeeded: 4, failed: 0 });
    /// ```
    pub fn run_checked<M: Machine, C: Invariants<M>>(
        self,
        machine: M,
        checker: C,
    ) -> Result<Trace, Violation> {
        let Simulator {
            start,
            replies,
            server,
            cancel_at,
            wall,
            mut classify,
            checker: retry,
            poll_checker: poll,
            batch_checker: batch,
            max_steps,
        } = self;
        let clock = Rc::new(Cell::new(start));
        let mut io = VirtualIo {
            clock: Rc::clone(&clock),
            start,
            wall,
            replies,
            server,
            cancel_at,
            arrivals: Vec::new(),
        };
        let mut watched = Watched {
            machine,
            checker: (Builtin { retry, poll, batch }, checker),
            clock: Rc::clone(&clock),
            steps: Vec::new(),
            polls: 0,
            max_steps,
            failed: None,
        };
        let mut seen = Seen {
            clock: Rc::clone(&clock),
            records: Vec::new(),
            notices: Vec::new(),
        };
        let finished = run_virtual(drive::drive(
            &mut watched,
            &mut io,
            &mut *classify.0,
            &mut seen,
        ));
        if let Some(v) = watched.failed {
            return Err(v);
        }
        let Some(finished) = finished else {
            return Err(Violation {
                rule: "stalled",
                detail: "the drive loop waited with nothing to happen in virtual time".into(),
            });
        };
        Ok(Trace {
            steps: watched.steps,
            records: seen.records,
            notices: seen.notices,
            outcome: finished.outcome,
            ended_at: clock.get(),
        })
    }
}

/// Runs a drive over the virtual-time `Io` to its end, on this thread.
///
/// The `Io` never waits for real: when the loop would wait, it has already
/// moved its clock to the next thing that happens and woken the task, so
/// the next poll goes on. A poll that pends *without* a wake-up could never
/// end: that is `None` (an error for the caller), never a hang or a spin.
fn run_virtual<F: Future>(future: F) -> Option<F::Output> {
    struct Woken(AtomicBool);
    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::Relaxed);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let woken = Arc::new(Woken(AtomicBool::new(false)));
    let waker = Waker::from(Arc::clone(&woken));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return Some(out);
        }
        if !woken.0.swap(false, Ordering::Relaxed) {
            return None;
        }
    }
}

/// The simulated world: a virtual clock, the script, the caller's cancel.
struct VirtualIo {
    /// The simulated instant, shared with the sends in flight and the
    /// checking wrapper.
    clock: Rc<Cell<Instant>>,
    start: Instant,
    wall: SystemTime,
    replies: VecDeque<Scripted>,
    server: Option<ServerFn>,
    cancel_at: Option<Instant>,
    /// When each send in flight resolves (stale entries, at or before the
    /// clock, are those already resolved), with the waker it was last
    /// polled with (woken when the clock reaches that instant).
    arrivals: Vec<(Instant, Rc<RefCell<Option<Waker>>>)>,
}

/// A send in flight: resolves once the virtual clock reaches its instant
/// (and is woken then, as a real send would be: the drive loop polls only
/// the sends woken once several are in flight).
struct InFlight {
    clock: Rc<Cell<Instant>>,
    at: Instant,
    waker: Rc<RefCell<Option<Waker>>>,
    result: Option<Result<Scripted, TransportErrorKind>>,
}

impl Future for InFlight {
    type Output = Result<Scripted, TransportErrorKind>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.clock.get() < this.at {
            // Woken by the `Io`'s sleep, which moves the clock here.
            let mut waker = this.waker.borrow_mut();
            if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *waker = Some(cx.waker().clone());
            }
            return Poll::Pending;
        }
        Poll::Ready(
            this.result
                .take()
                .unwrap_or(Err(TransportErrorKind::Aborted)),
        )
    }
}

impl Io for VirtualIo {
    type Answer = Scripted;
    type Sending = InFlight;

    fn now(&self) -> Instant {
        self.clock.get()
    }

    fn wall_clock(&self) -> SystemTime {
        let elapsed = self.clock.get().saturating_duration_since(self.start);
        self.wall.checked_add(elapsed).unwrap_or(self.wall)
    }

    fn send(&mut self, plan: &SendPlan) -> InFlight {
        let now = self.clock.get();
        let scripted = match (self.replies.pop_front(), &mut self.server) {
            (Some(s), _) => s,
            (None, Some(f)) => (f.0)(now, plan),
            (None, None) => Scripted::hang(),
        };
        let at = now.checked_add(scripted.after);
        let (at, result) = match scripted.reply {
            // The adapter aborts at `abort_at` at the latest.
            ScriptedReply::Hang => (None, Err(TransportErrorKind::Aborted)),
            ScriptedReply::Transport(kind) => (at, Err(kind)),
            ScriptedReply::Status { .. } => (at, Ok(scripted)),
        };
        let (at, result) = match at {
            Some(at) if at <= plan.abort_at => (at, result),
            _ => (plan.abort_at, Err(TransportErrorKind::Aborted)),
        };
        let waker = Rc::default();
        self.arrivals.push((at, Rc::clone(&waker)));
        InFlight {
            clock: Rc::clone(&self.clock),
            at,
            waker,
            result: Some(result),
        }
    }

    fn poll_sleep(&mut self, cx: &mut Context<'_>, until: Instant) -> Poll<()> {
        // The loop polls the cancel and every send woken before the
        // sleep: all are still ahead. The next thing to happen is the
        // earliest of them; if it comes no later than `until`, jump there,
        // wake the sends that resolve then, and let the loop take them (a
        // tie goes to them, not to the tick).
        let now = self.clock.get();
        self.arrivals.retain(|(at, _)| *at > now);
        let cancel = self.cancel_at.filter(|at| *at > now);
        let next = self.arrivals.iter().map(|(at, _)| *at).chain(cancel).min();
        match next {
            Some(at) if at <= until => {
                self.clock.set(at);
                for (_, waker) in self.arrivals.iter().filter(|(a, _)| *a <= at) {
                    if let Some(waker) = waker.borrow_mut().take() {
                        waker.wake();
                    }
                }
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            _ => {
                self.clock.set(now.max(until));
                Poll::Ready(())
            }
        }
    }

    fn poll_cancel(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        if self.is_cancelled() {
            Poll::Ready(())
        } else {
            // No wake-up to arrange: the sleep moves the clock to the cancel.
            Poll::Pending
        }
    }

    fn is_cancelled(&self) -> bool {
        self.cancel_at.is_some_and(|at| at <= self.clock.get())
    }
}

/// What the loop hands its observer: records, and notices with their instant.
struct Seen {
    clock: Rc<Cell<Instant>>,
    records: Vec<AttemptRecord>,
    notices: Vec<(Instant, Notice)>,
}

impl Observe for Seen {
    fn record(&mut self, record: &AttemptRecord) {
        self.records.push(*record);
    }

    fn notice(&mut self, notice: Notice) {
        self.notices.push((self.clock.get(), notice));
    }
}

/// The checkers set on the simulator with `check_*`.
struct Builtin {
    retry: Option<Checker>,
    poll: Option<PollChecker>,
    batch: Option<BatchChecker>,
}

impl<M: ?Sized> Invariants<M> for Builtin {
    fn input(&mut self, now: Instant, event: &Event<'_>) {
        if let Some(c) = &mut self.retry {
            c.input(now, event);
        }
        if let Some(c) = &mut self.poll {
            c.input(now, event);
        }
        if let Some(c) = &mut self.batch {
            c.input(now, event);
        }
    }

    fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        if let Some(c) = &mut self.retry {
            c.output(now, action)?;
        }
        if let Some(c) = &mut self.poll {
            c.output(now, action)?;
        }
        if let Some(c) = &mut self.batch {
            c.output(now, action)?;
        }
        Ok(())
    }

    fn notice(&mut self, notice: Notice) -> Result<(), Violation> {
        if let Some(c) = &mut self.retry {
            Invariants::<M>::notice(c, notice)?;
        }
        if let Some(c) = &mut self.poll {
            c.notice(notice)?;
        }
        Ok(())
    }
}

/// The machine as the loop sees it, with the checkers watching: each event
/// goes to the checker before the machine, each action to the checker as
/// the loop takes it, each notice as the loop collects it. On the first
/// violation (or after `max_steps` actions) it answers `Stop` so that the
/// loop ends at once; [`Simulator::run_checked`] then returns the
/// violation, not that outcome.
struct Watched<M, C> {
    machine: M,
    checker: C,
    clock: Rc<Cell<Instant>>,
    steps: Vec<Step>,
    polls: usize,
    max_steps: usize,
    failed: Option<Violation>,
}

/// What [`Watched`] answers once a check failed: any `Stop` ends the loop.
const ENDED: Action = Action::Stop(Outcome::Cancelled);

impl<M, C> Watched<M, C> {
    /// Keeps the first violation.
    fn fail(&mut self, violation: Violation) {
        if self.failed.is_none() {
            self.failed = Some(violation);
        }
    }
}

impl<M: Machine, C: Invariants<M>> Machine for Watched<M, C> {
    fn handle(&mut self, now: Instant, event: Event<'_>) {
        if self.failed.is_some() {
            return;
        }
        self.checker.input(now, &event);
        self.machine.handle(now, event);
    }

    fn poll_action(&mut self) -> Action {
        if self.failed.is_some() {
            return ENDED;
        }
        if self.polls == self.max_steps {
            let detail = format!("no Stop after {} steps", self.max_steps);
            self.fail(Violation {
                rule: "terminates",
                detail,
            });
            return ENDED;
        }
        self.polls += 1;
        let now = self.clock.get();
        let action = self.machine.poll_action();
        if let Err(v) = self.checker.output(now, &action) {
            self.fail(v);
            return ENDED;
        }
        self.steps.push(Step { at: now, action });
        if !matches!(action, Action::Send(_))
            && let Err(v) = self.checker.observe(&self.machine)
        {
            self.fail(v);
            return ENDED;
        }
        action
    }

    fn take_record(&mut self) -> Option<AttemptRecord> {
        self.machine.take_record()
    }

    fn deadline(&self) -> Option<Instant> {
        self.machine.deadline()
    }

    fn take_notice(&mut self) -> Option<Notice> {
        let notice = self.machine.take_notice()?;
        if self.failed.is_none()
            && let Err(v) = self.checker.notice(notice)
        {
            self.fail(v);
        }
        Some(notice)
    }

    fn class_of(&self, response: &Response<'_>) -> Option<RetryClass> {
        self.machine.class_of(response)
    }
}
