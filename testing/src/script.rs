//! Machine-independent event scripts: what happens to a machine, written
//! once as a list of [`Input`]s, and [`ScriptRunner`] / [`run_script`],
//! which play a script against any [`Machine`] in virtual time and check
//! every step with an [`Invariants`] checker.
//!
//! The same scripts drive the property tests (`strategies`, feature
//! `proptest`), the fuzz targets (`fuzz`, feature `arbitrary`) and the
//! exhaustive explorer ([`explore`](crate::explore)): the rules live in the
//! checkers, and every tool uses the same ones.
//!
//! ## Why a runner beside `drive`
//!
//! polite has one drive loop, [`polite_core::drive::drive`], and the
//! [`Simulator`](crate::Simulator) runs machines through it. The
//! `ScriptRunner` is the one other place that polls a machine's actions,
//! because a script is *adversarial*: it is the world misbehaving, one
//! event at a time, which no `Io` can express to `drive` —
//!
//! * events at any point, not only when the loop waits: an answer for a
//!   send already answered (late, duplicated), an answer for a send never
//!   made (stray), a tick at any instant, a cancel between any two events;
//! * a clock that steps backwards (the `Io` contract says `now` is
//!   monotonic; the machines must clamp when an adapter breaks it);
//! * branching: the runner is `Clone` at every point of a script, so the
//!   [explorer](crate::explore) plays each prefix once and forks from it,
//!   and a fuzz case or a proptest shrinks script by script. A `drive`
//!   future cannot be cloned mid-run.
//!
//! What it does between events is what `drive` does (poll actions until
//! `SleepUntil` or `Stop`, keep the sends in flight, forward records and
//! notices), but it takes no decision of its own: where `drive` would wait,
//! the script says what happens next.
//!
//! ```
//! use polite_testing::{Checker, Input, origin, run_script};
//! use polite_core::SplitMix64;
//! use polite_core::{Method, Outcome, RequestId, RequestInfo, RetryMachine, RetryPolicy};
//! use std::time::Duration;
//!
//! let request = RequestInfo::new(RequestId(1), Method::Get);
//! let m = RetryMachine::new(RetryPolicy::default(), request, SplitMix64::new(1), origin(),
//!                           Duration::from_secs(30)).unwrap();
//! let checker = Checker::for_machine(&m);
//! let script = [
//!     Input::status(429).retry_after("2"), // the server says: in 2 s
//!     Input::Wake,                         // the machine sleeps until then
//!     Input::status(200),
//! ];
//! let trace = run_script(m, checker, &script).unwrap();
//! assert_eq!(trace.outcome, Outcome::Succeeded { status: 200 });
//! assert_eq!(trace.gaps(), [Duration::from_millis(2010)]); // 10 ms latency + 2 s
//! ```

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::{BatchChecker, Checker, PollChecker, Step, Trace, Violation, violation};
use polite_core::BudgetSet;
use polite_core::poll::JobReport;
use polite_core::record::AttemptRecord;
use polite_core::{
    Action, BatchMachine, Event, Machine, Notice, Outcome, PaceSet, Response, RetryClass, SendId,
    TransportErrorKind,
};

/// What the body of a job-status answer says (for
/// [`PollMachine`](polite_core::PollMachine); other machines ignore it).
///
/// ```
/// use polite_testing::{Input, Job};
/// let running = Input::status(200).job(Job::State("running".into()));
/// assert!(matches!(running, Input::Answer(a) if a.job.is_some()));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Job {
    /// The job's state as the server names it.
    State(String),
    /// The server rejected the long-poll wait parameter.
    LongPollUnsupported,
}

/// An HTTP answer in a script. Build one with [`Input::status`] and the
/// builder methods on [`Input`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Answer {
    /// The status.
    pub status: u16,
    /// The raw `Retry-After` value.
    pub retry_after: Option<Vec<u8>>,
    /// The raw `Date` value.
    pub date: Option<Vec<u8>>,
    /// What the body says about the job.
    pub job: Option<Job>,
    /// The caller's session generation at arrival.
    pub generation: Option<u64>,
    /// Other raw headers, (name, value), filed with
    /// [`Response::header`](polite_core::Response::header): `RateLimit`,
    /// `RateLimit-Policy`, `X-RateLimit-*`, `x-amz-retry-after`.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The caller's classification of the answer
    /// ([`Response::retry_class`](polite_core::Response::retry_class)).
    pub retry_class: Option<RetryClass>,
    /// Answer a send that was already answered (a late, duplicated or
    /// stale answer) instead of one in flight.
    pub late: bool,
    /// Which send: the `pick % n`-th of the `n` candidates (sends in
    /// flight, or with `late`, sends already answered).
    pub pick: u32,
    /// How long after the previous input it arrives.
    pub after: Duration,
}

/// One thing that happens to a machine in a script.
///
/// The runner keeps a virtual clock (the adapter's, which may step
/// backwards) and the list of sends in flight; an input that needs a send
/// (an answer, a transport error) when there is none is skipped.
///
/// ```
/// use polite_testing::Input;
/// use polite_core::TransportErrorKind;
/// use std::time::Duration;
/// let script = vec![
///     Input::status(503).after(Duration::from_millis(40)),
///     Input::Wake,
///     Input::transport(TransportErrorKind::Reset),
///     Input::Tick(Duration::from_secs(1)),
///     Input::status(200).late(), // an answer for the first attempt, too late
///     Input::Cancel,
/// ];
/// assert_eq!(script.len(), 6);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Input {
    /// An HTTP answer arrives.
    Answer(Answer),
    /// A send in flight ends without an answer.
    Transport {
        /// Why.
        kind: TransportErrorKind,
        /// Which send in flight: the `pick % n`-th.
        pick: u32,
        /// How long after the previous input.
        after: Duration,
    },
    /// An answer for a send that was never made (an unknown item or
    /// attempt), at the current time; skipped if that send is in flight.
    Stray {
        /// `SendId::item`.
        item: u32,
        /// `SendId::attempt`.
        attempt: u32,
        /// The status.
        status: u16,
    },
    /// Time passes by this much; then a tick.
    Tick(Duration),
    /// Nothing arrives before the instant the machine asked to wake at:
    /// the clock jumps there (if it is later), then a tick. With a send in
    /// flight this is a server that hangs until the deadline.
    Wake,
    /// Like [`Wake`](Input::Wake) when no send is in flight; skipped
    /// otherwise (the answer comes first).
    WakeIfIdle,
    /// The caller cancels.
    Cancel,
    /// The adapter's clock steps back by this much (before the script's
    /// start too, when the instant exists), then a tick: the machine must
    /// clamp.
    Backwards(Duration),
    /// The wall clock (what answers carry as the time they arrived, which
    /// turns an HTTP-date into a delay when there is no valid `Date`)
    /// jumps forward by this much; the monotonic clock does not move (an
    /// NTP step, a suspended laptop).
    WallForward(Duration),
    /// The wall clock jumps back by this much; the monotonic clock does not
    /// move.
    WallBack(Duration),
}

impl Input {
    /// An answer with `status` to the send in flight, 10 ms after the
    /// previous input.
    ///
    /// ```
    /// use polite_testing::Input;
    /// let Input::Answer(a) = Input::status(204) else { unreachable!() };
    /// assert_eq!((a.status, a.late, a.retry_after), (204, false, None));
    /// ```
    #[must_use]
    pub fn status(status: u16) -> Input {
        Input::Answer(Answer {
            status,
            retry_after: None,
            date: None,
            job: None,
            generation: None,
            headers: Vec::new(),
            retry_class: None,
            late: false,
            pick: 0,
            after: Duration::from_millis(10),
        })
    }

    /// A transport error of the send in flight, 10 ms after the previous
    /// input.
    ///
    /// ```
    /// use polite_testing::Input;
    /// use polite_core::TransportErrorKind;
    /// assert!(matches!(Input::transport(TransportErrorKind::Dns), Input::Transport { .. }));
    /// ```
    #[must_use]
    pub fn transport(kind: TransportErrorKind) -> Input {
        Input::Transport {
            kind,
            pick: 0,
            after: Duration::from_millis(10),
        }
    }

    fn answer_mut(&mut self) -> Option<&mut Answer> {
        match self {
            Input::Answer(a) => Some(a),
            _ => None,
        }
    }

    /// Sets the raw `Retry-After` of an answer (other inputs unchanged).
    ///
    /// ```
    /// use polite_testing::Input;
    /// let Input::Answer(a) = Input::status(429).retry_after("3") else { unreachable!() };
    /// assert_eq!(a.retry_after.as_deref(), Some(&b"3"[..]));
    /// ```
    #[must_use]
    pub fn retry_after(mut self, value: impl AsRef<[u8]>) -> Input {
        if let Some(a) = self.answer_mut() {
            a.retry_after = Some(value.as_ref().to_vec());
        }
        self
    }

    /// Sets the raw `Date` of an answer.
    ///
    /// ```
    /// use polite_testing::Input;
    /// let Input::Answer(a) = Input::status(429).date("Sun, 06 Nov 1994 08:49:37 GMT") else { unreachable!() };
    /// assert!(a.date.is_some());
    /// ```
    #[must_use]
    pub fn date(mut self, value: impl AsRef<[u8]>) -> Input {
        if let Some(a) = self.answer_mut() {
            a.date = Some(value.as_ref().to_vec());
        }
        self
    }

    /// Sets what the answer's body says about the job.
    ///
    /// ```
    /// use polite_testing::{Input, Job};
    /// let Input::Answer(a) = Input::status(400).job(Job::LongPollUnsupported) else { unreachable!() };
    /// assert_eq!((a.status, a.job), (400, Some(Job::LongPollUnsupported)));
    /// ```
    #[must_use]
    pub fn job(mut self, job: Job) -> Input {
        if let Some(a) = self.answer_mut() {
            a.job = Some(job);
        }
        self
    }

    /// Shorthand: an answer whose body says the job is in `state`.
    ///
    /// ```
    /// use polite_testing::{Input, Job};
    /// assert_eq!(Input::status(200).state("running"), Input::status(200).job(Job::State("running".into())));
    /// ```
    #[must_use]
    pub fn state(self, state: &str) -> Input {
        self.job(Job::State(state.to_owned()))
    }

    /// Sets the session generation current at the answer's arrival.
    ///
    /// ```
    /// use polite_testing::Input;
    /// let Input::Answer(a) = Input::status(200).generation(8) else { unreachable!() };
    /// assert_eq!(a.generation, Some(8));
    /// ```
    #[must_use]
    pub fn generation(mut self, generation: u64) -> Input {
        if let Some(a) = self.answer_mut() {
            a.generation = Some(generation);
        }
        self
    }

    /// Adds a raw header to an answer (filed by name with
    /// [`Response::header`](polite_core::Response::header)).
    ///
    /// ```
    /// use polite_testing::Input;
    /// let i = Input::status(200).header("RateLimit", r#""default";r=0;t=2"#);
    /// assert!(matches!(i, Input::Answer(a) if a.headers.len() == 1));
    /// ```
    #[must_use]
    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Input {
        if let Some(a) = self.answer_mut() {
            a.headers.push((name.to_owned(), value.as_ref().to_vec()));
        }
        self
    }

    /// Sets the caller's classification of an answer.
    ///
    /// ```
    /// use polite_testing::Input;
    /// use polite_core::RetryClass;
    /// let i = Input::status(400).retry_class(RetryClass::RateLimited);
    /// assert!(matches!(i, Input::Answer(a) if a.retry_class.is_some()));
    /// ```
    #[must_use]
    pub fn retry_class(mut self, class: RetryClass) -> Input {
        if let Some(a) = self.answer_mut() {
            a.retry_class = Some(class);
        }
        self
    }

    /// Makes the answer one for a send already answered (late).
    ///
    /// ```
    /// use polite_testing::Input;
    /// assert!(matches!(Input::status(200).late(), Input::Answer(a) if a.late));
    /// ```
    #[must_use]
    pub fn late(mut self) -> Input {
        if let Some(a) = self.answer_mut() {
            a.late = true;
        }
        self
    }

    /// Chooses which send an answer or a transport error is for.
    ///
    /// ```
    /// use polite_testing::Input;
    /// assert!(matches!(Input::status(200).pick(3), Input::Answer(a) if a.pick == 3));
    /// ```
    #[must_use]
    pub fn pick(mut self, n: u32) -> Input {
        match &mut self {
            Input::Answer(a) => a.pick = n,
            Input::Transport { pick, .. } => *pick = n,
            _ => {}
        }
        self
    }

    /// Sets how long after the previous input an answer or a transport
    /// error arrives.
    ///
    /// ```
    /// use polite_testing::Input;
    /// use std::time::Duration;
    /// let i = Input::status(200).after(Duration::ZERO);
    /// assert!(matches!(i, Input::Answer(a) if a.after.is_zero()));
    /// ```
    #[must_use]
    pub fn after(mut self, latency: Duration) -> Input {
        match &mut self {
            Input::Answer(a) => a.after = latency,
            Input::Transport { after, .. } => *after = latency,
            _ => {}
        }
        self
    }
}

/// A compact form for counterexamples: `429 Retry-After="2" +10ms`,
/// `transport connection reset +10ms`, `wake`, `cancel`, ...
///
/// ```
/// use polite_testing::Input;
/// assert_eq!(Input::status(429).retry_after("2").to_string(), r#"429 Retry-After="2" +10ms"#);
/// assert_eq!(Input::status(200).late().to_string(), "200 late +10ms");
/// assert_eq!(Input::Wake.to_string(), "wake");
/// ```
impl std::fmt::Display for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Input::Answer(a) => {
                write!(f, "{}", a.status)?;
                if let Some(v) = &a.retry_after {
                    write!(f, " Retry-After={:?}", String::from_utf8_lossy(v))?;
                }
                if let Some(v) = &a.date {
                    write!(f, " Date={:?}", String::from_utf8_lossy(v))?;
                }
                match &a.job {
                    Some(Job::State(s)) => write!(f, " job={s:?}")?,
                    Some(Job::LongPollUnsupported) => f.write_str(" long-poll-unsupported")?,
                    None => {}
                }
                if let Some(g) = a.generation {
                    write!(f, " generation={g}")?;
                }
                for (name, value) in &a.headers {
                    write!(f, " {name}={:?}", String::from_utf8_lossy(value))?;
                }
                if let Some(c) = a.retry_class {
                    write!(f, " class={c}")?;
                }
                if a.late {
                    f.write_str(" late")?;
                }
                if a.pick != 0 {
                    write!(f, " pick={}", a.pick)?;
                }
                write!(f, " +{:?}", a.after)
            }
            Input::Transport { kind, pick, after } => {
                write!(f, "transport {kind}")?;
                if *pick != 0 {
                    write!(f, " pick={pick}")?;
                }
                write!(f, " +{after:?}")
            }
            Input::Stray {
                item,
                attempt,
                status,
            } => write!(f, "stray {status} for {item}#{attempt}"),
            Input::Tick(d) => write!(f, "tick +{d:?}"),
            Input::Wake => f.write_str("wake"),
            Input::WakeIfIdle => f.write_str("wake-if-idle"),
            Input::Cancel => f.write_str("cancel"),
            Input::Backwards(d) => write!(f, "backwards -{d:?}"),
            Input::WallForward(d) => write!(f, "wall clock +{d:?}"),
            Input::WallBack(d) => write!(f, "wall clock -{d:?}"),
        }
    }
}

/// The invariants of one kind of machine, checked on its stream of inputs
/// and outputs, independently of its logic. [`Checker`] (single requests,
/// also paced), [`PollChecker`] and [`BatchChecker`] implement it, and so
/// do `()` (no checks) and pairs (both).
///
/// The runner calls [`input`](Self::input) before the machine sees an
/// event, [`output`](Self::output) for every action,
/// [`notice`](Self::notice) for every notice, and
/// [`observe`](Self::observe) with the machine after every round of
/// actions (a batch checker reads the item outcomes there).
///
/// ```
/// use polite_testing::{Invariants, Violation};
/// use polite_core::{Action, Event};
/// use std::time::Instant;
///
/// /// A house rule on top of the built-in ones: at most 3 sends in all.
/// #[derive(Clone, Debug, Default)]
/// struct AtMostThree(u32);
/// impl<M> Invariants<M> for AtMostThree {
///     fn input(&mut self, _: Instant, _: &Event<'_>) {}
///     fn output(&mut self, _: Instant, action: &Action) -> Result<(), Violation> {
///         if let Action::Send(_) = action { self.0 += 1; }
///         if self.0 > 3 {
///             return Err(Violation { rule: "at-most-three", detail: format!("send #{}", self.0) });
///         }
///         Ok(())
///     }
/// }
/// // Use it with a built-in checker as a pair: `(Checker::for_machine(&m), AtMostThree::default())`.
/// let mut rule = AtMostThree::default();
/// let t0 = Instant::now();
/// let send = Action::Send(polite_core::SendPlan { id: polite_core::SendId::default(),
///     request: polite_core::RequestId(1), abort_at: t0, long_poll: None });
/// for _ in 0..3 {
///     assert!(Invariants::<()>::output(&mut rule, t0, &send).is_ok());
/// }
/// assert_eq!(Invariants::<()>::output(&mut rule, t0, &send).unwrap_err().rule, "at-most-three");
/// ```
pub trait Invariants<M: ?Sized> {
    /// An event about to be fed to the machine at `now`.
    fn input(&mut self, now: Instant, event: &Event<'_>);
    /// An action the machine answered at `now`.
    ///
    /// # Errors
    ///
    /// The [`Violation`] it breaks.
    fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation>;
    /// A notice the machine gave.
    ///
    /// # Errors
    ///
    /// The [`Violation`] it breaks.
    fn notice(&mut self, _notice: Notice) -> Result<(), Violation> {
        Ok(())
    }
    /// The machine itself, after each round of actions.
    ///
    /// # Errors
    ///
    /// The [`Violation`] it breaks.
    fn observe(&mut self, _machine: &M) -> Result<(), Violation> {
        Ok(())
    }
}

/// No checks: the runner still checks that the machine terminates and that
/// `Stop` is sticky.
impl<M: ?Sized> Invariants<M> for () {
    fn input(&mut self, _now: Instant, _event: &Event<'_>) {}
    fn output(&mut self, _now: Instant, _action: &Action) -> Result<(), Violation> {
        Ok(())
    }
}

/// Both checkers; the first violation wins.
impl<M: ?Sized, A: Invariants<M>, B: Invariants<M>> Invariants<M> for (A, B) {
    fn input(&mut self, now: Instant, event: &Event<'_>) {
        self.0.input(now, event);
        self.1.input(now, event);
    }
    fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        self.0.output(now, action)?;
        self.1.output(now, action)
    }
    fn notice(&mut self, notice: Notice) -> Result<(), Violation> {
        self.0.notice(notice)?;
        self.1.notice(notice)
    }
    fn observe(&mut self, machine: &M) -> Result<(), Violation> {
        self.0.observe(machine)?;
        self.1.observe(machine)
    }
}

impl<M: ?Sized> Invariants<M> for Checker {
    fn input(&mut self, now: Instant, event: &Event<'_>) {
        Checker::input(self, now, event);
    }
    fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        Checker::output(self, now, action)
    }
    fn notice(&mut self, notice: Notice) -> Result<(), Violation> {
        violation(
            "notice",
            format!("{notice:?} from a machine that has none to give"),
        )
    }
}

impl<M: ?Sized> Invariants<M> for PollChecker {
    fn input(&mut self, now: Instant, event: &Event<'_>) {
        PollChecker::input(self, now, event);
    }
    fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        PollChecker::output(self, now, action)
    }
    fn notice(&mut self, notice: Notice) -> Result<(), Violation> {
        PollChecker::notice(self, notice)
    }
}

impl<R: rand_core::Rng, P: PaceSet, B: BudgetSet> Invariants<BatchMachine<R, P, B>>
    for BatchChecker
{
    fn input(&mut self, now: Instant, event: &Event<'_>) {
        BatchChecker::input(self, now, event);
    }
    fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        BatchChecker::output(self, now, action)
    }
    fn observe(&mut self, machine: &BatchMachine<R, P, B>) -> Result<(), Violation> {
        self.outcomes(machine.outcomes())
    }
}

impl<R: rand_core::Rng, P: PaceSet, B: BudgetSet> Invariants<&mut BatchMachine<R, P, B>>
    for BatchChecker
{
    fn input(&mut self, now: Instant, event: &Event<'_>) {
        BatchChecker::input(self, now, event);
    }
    fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        BatchChecker::output(self, now, action)
    }
    fn observe(&mut self, machine: &&mut BatchMachine<R, P, B>) -> Result<(), Violation> {
        self.outcomes(machine.outcomes())
    }
}

/// How [`ScriptRunner::finish`] brings the machine to its end after the
/// script.
///
/// ```
/// use polite_testing::Settle;
/// assert_eq!(Settle::default(), Settle::Hang);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Settle {
    /// Nothing answers any more: the clock jumps to each wake-up the
    /// machine asks for, until it stops (at the latest, at its deadline).
    #[default]
    Hang,
    /// Every send in flight is answered at once with this status (no
    /// headers, no job report); otherwise the clock jumps to each wake-up.
    Answer(u16),
}

/// The wall-clock time at a script's start, unless set with
/// [`ScriptRunner::wall_clock`]: 1994-11-06 08:48:20 GMT, so that the
/// RFC's example date `Sun, 06 Nov 1994 08:49:37 GMT` is 77 s ahead.
///
/// ```
/// use polite_testing::default_wall_clock;
/// use std::time::{Duration, UNIX_EPOCH};
/// assert_eq!(default_wall_clock(), UNIX_EPOCH + Duration::from_secs(784_111_700));
/// ```
#[must_use]
pub fn default_wall_clock() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(784_111_700)
}

/// Plays a script against a machine in virtual time, one [`Input`] at a
/// time, checking every step with an [`Invariants`] checker.
///
/// The runner is the adapter: after every event it polls actions until
/// `SleepUntil` or `Stop`, keeps the sends in flight, and remembers the
/// wake-up.
///
/// **Why a runner beside [`polite_core::drive`]**: a script is the world
/// misbehaving one event at a time — late, duplicated and stray answers,
/// ticks and cancels between any two events, a clock stepping backwards —
/// which no [`Io`](polite_core::drive::Io) can express to `drive` (its
/// contract is a well-behaved world); and the runner is `Clone` at every
/// point, so that the [explorer](crate::explore) can fork a run, which a
/// `drive` future cannot. Between events it does what `drive` does and
/// decides nothing of its own. For a well-behaved world, use the
/// [`Simulator`](crate::Simulator), which runs `drive` itself. [`finish`](Self::finish) settles the machine to its end (see
/// [`Settle`]), checks that it ends with exactly one, sticky outcome, and
/// returns the [`Trace`]. Rules the runner checks itself, whatever the
/// checker: `stop-sticky`, `terminates` (a `Stop` within 10,000 settling
/// steps) and `no-wait` (no more than 100,000 sends in a row).
///
/// It is `Clone` when the machine and the checker are, so that an explorer
/// can branch from any point of a script ([`explore`](crate::explore)).
///
/// ```
/// use polite_testing::{Input, PollChecker, ScriptRunner, origin};
/// use polite_core::SplitMix64;
/// use polite_core::{Method, Outcome, PollMachine, PollPolicy, RequestId, RequestInfo};
/// use std::time::Duration;
///
/// let t0 = origin();
/// let m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
///                          SplitMix64::new(1), t0, Duration::from_secs(60)).unwrap();
/// let checker = PollChecker::for_machine(&m);
/// let mut run = ScriptRunner::new(t0, m, checker);
/// run.step(&Input::status(200).state("running").after(Duration::from_secs(25))).unwrap();
/// run.step(&Input::status(200).state("passed").after(Duration::from_secs(3))).unwrap();
/// let trace = run.finish().unwrap();
/// assert!(matches!(trace.outcome, Outcome::Terminal { .. }));
/// ```
#[derive(Clone, Debug)]
pub struct ScriptRunner<M, C> {
    machine: M,
    checker: C,
    start: Instant,
    wall: SystemTime,
    /// The adapter's clock; may step backwards.
    clock: Instant,
    /// The latest instant fed: what the machine takes as "now".
    now: Instant,
    flying: Ids,
    answered: Ids,
    wake: Option<Instant>,
    stopped: Option<(Instant, Outcome)>,
    started: bool,
    recording: bool,
    settle: Settle,
    steps: Vec<Step>,
    records: Vec<AttemptRecord>,
    notices: Vec<(Instant, Notice)>,
    events: u64,
    sends: u64,
}

/// Send ids in order, stored inline up to [`Ids::INLINE`] of them (a
/// single request has at most one in flight, a batch as many as its
/// concurrency; the runner remembers 16 answered ones), on the heap beyond:
/// cloning a runner, which the explorer does at every node of its tree,
/// then allocates nothing.
#[derive(Clone, Debug, Default)]
struct Ids {
    small: [SendId; Ids::INLINE],
    len: usize,
    /// All the ids once there are more than `INLINE` (then `len` is 0).
    spill: Vec<SendId>,
}

impl Ids {
    const INLINE: usize = 16;

    fn as_slice(&self) -> &[SendId] {
        if self.spill.is_empty() {
            &self.small[..self.len]
        } else {
            &self.spill
        }
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn push(&mut self, id: SendId) {
        if self.spill.is_empty() && self.len < Ids::INLINE {
            self.small[self.len] = id;
            self.len += 1;
            return;
        }
        if self.spill.is_empty() {
            self.spill.extend_from_slice(&self.small[..self.len]);
            self.len = 0;
        }
        self.spill.push(id);
    }

    /// Removes and returns the `i`-th id (`i < len`), keeping the order.
    fn remove(&mut self, i: usize) -> SendId {
        if self.spill.is_empty() {
            let id = self.small[i];
            self.small.copy_within(i + 1..self.len, i);
            self.len -= 1;
            id
        } else {
            self.spill.remove(i)
        }
    }
}

/// At most this many sends in a row without a wait.
const DRAIN_LIMIT: usize = 100_000;
/// At most this many events to settle a machine after its script.
const SETTLE_LIMIT: usize = 10_000;
/// Sends remembered for late answers.
const ANSWERED_KEPT: usize = 16;

impl<M: Machine, C: Invariants<M>> ScriptRunner<M, C> {
    /// A runner whose virtual clock starts at `start` (create the machine
    /// at that instant).
    #[must_use]
    pub fn new(start: Instant, machine: M, checker: C) -> ScriptRunner<M, C> {
        ScriptRunner {
            machine,
            checker,
            start,
            wall: default_wall_clock(),
            clock: start,
            now: start,
            flying: Ids::default(),
            answered: Ids::default(),
            wake: None,
            stopped: None,
            started: false,
            recording: true,
            settle: Settle::Hang,
            steps: Vec::new(),
            records: Vec::new(),
            notices: Vec::new(),
            events: 0,
            sends: 0,
        }
    }

    /// The wall-clock time at `start` (advances with virtual time); it
    /// turns HTTP-dates into delays when an answer has no valid `Date`.
    /// Default [`default_wall_clock()`].
    ///
    /// ```
    /// use polite_testing::{Input, ScriptRunner, origin};
    /// use std::time::{Duration, UNIX_EPOCH};
    /// # use polite_testing::Checker;
    /// # use polite_core::SplitMix64;
    /// # use polite_core::{Method, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// # let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    /// #                           SplitMix64::new(1), origin(), Duration::from_secs(30)).unwrap();
    /// // The server's date is 20 s after this wall clock: a 20 s wait.
    /// let mut run = ScriptRunner::new(origin(), m, ())
    ///     .wall_clock(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    /// run.step(&Input::status(503).retry_after("Tue, 14 Nov 2023 22:13:40 GMT")
    ///     .after(Duration::ZERO)).unwrap();
    /// let trace = run.finish().unwrap();
    /// assert_eq!(trace.gaps()[0], Duration::from_secs(20));
    /// ```
    #[must_use]
    pub fn wall_clock(mut self, wall: SystemTime) -> ScriptRunner<M, C> {
        self.wall = wall;
        self
    }

    /// How [`finish`](Self::finish) settles the machine (default
    /// [`Settle::Hang`]).
    #[must_use]
    pub fn settle(mut self, settle: Settle) -> ScriptRunner<M, C> {
        self.settle = settle;
        self
    }

    /// Whether to keep the actions, records and notices for the trace
    /// (default `true`; an explorer turns it off to branch cheaply).
    #[must_use]
    pub fn recording(mut self, on: bool) -> ScriptRunner<M, C> {
        self.recording = on;
        self
    }

    /// Polls the machine's first actions (once; [`step`](Self::step) and
    /// [`finish`](Self::finish) do it when needed).
    ///
    /// # Errors
    ///
    /// The first [`Violation`].
    pub fn start(&mut self) -> Result<(), Violation> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        self.drain()
    }

    /// Plays one input.
    ///
    /// # Errors
    ///
    /// The first [`Violation`] the checker (or the runner) finds.
    pub fn step(&mut self, input: &Input) -> Result<(), Violation> {
        self.start()?;
        match input {
            Input::Answer(a) => {
                self.clock = later(self.clock, a.after);
                let id = if a.late {
                    pick(self.answered.as_slice(), a.pick)
                } else {
                    self.take_flying(a.pick)
                };
                let Some(id) = id else { return Ok(()) };
                let mut r = Response::new(id, a.status, self.wall_now());
                for (name, value) in &a.headers {
                    r = r.header(name, value);
                }
                r.retry_class = a.retry_class;
                r.retry_after = a.retry_after.as_deref().or(r.retry_after);
                r.date = a.date.as_deref().or(r.date);
                r.generation = a.generation;
                r.job = a.job.as_ref().map(|j| match j {
                    Job::State(s) => JobReport::State(s),
                    Job::LongPollUnsupported => JobReport::LongPollUnsupported,
                });
                self.feed(Event::Response(r))
            }
            Input::Transport { kind, pick, after } => {
                self.clock = later(self.clock, *after);
                let Some(id) = self.take_flying(*pick) else {
                    return Ok(());
                };
                self.feed(Event::TransportError(id, *kind))
            }
            Input::Stray {
                item,
                attempt,
                status,
            } => {
                let id = SendId {
                    item: *item,
                    attempt: *attempt,
                };
                if self.flying.as_slice().contains(&id) {
                    return Ok(());
                }
                let r = Response::new(id, *status, self.wall_now());
                self.feed(Event::Response(r))
            }
            Input::Tick(d) => {
                self.clock = later(self.clock, *d);
                self.feed(Event::Tick)
            }
            Input::Wake => self.wake_up(),
            Input::WakeIfIdle => {
                if self.flying.is_empty() {
                    self.wake_up()
                } else {
                    Ok(())
                }
            }
            Input::Cancel => self.feed(Event::Cancel),
            Input::Backwards(d) => {
                self.clock = self.clock.checked_sub(*d).unwrap_or(self.clock);
                self.feed(Event::Tick)
            }
            Input::WallForward(d) => {
                self.wall = self.wall.checked_add(*d).unwrap_or(self.wall);
                Ok(())
            }
            Input::WallBack(d) => {
                self.wall = self.wall.checked_sub(*d).unwrap_or(self.wall);
                Ok(())
            }
        }
    }

    /// Plays every input of `script`.
    ///
    /// # Errors
    ///
    /// The first [`Violation`].
    pub fn play(&mut self, script: &[Input]) -> Result<(), Violation> {
        script.iter().try_for_each(|i| self.step(i))
    }

    /// Settles the machine to its end (see [`Settle`]), checks that its
    /// outcome is sticky whatever comes after (a tick, a cancel, a stray
    /// answer), and returns the trace.
    ///
    /// # Errors
    ///
    /// The first [`Violation`]; `terminates` when the machine has not
    /// stopped after 10,000 settling events.
    pub fn finish(self) -> Result<Trace, Violation> {
        self.finish_counted().map(|(trace, _)| trace)
    }

    /// [`finish`](Self::finish), and how many events it fed.
    pub(crate) fn finish_counted(self) -> Result<(Trace, u64), Violation> {
        self.finish_full().map(|(trace, fed, _)| (trace, fed))
    }

    /// [`finish`](Self::finish), how many events it fed, and how many sends
    /// the machine made in all.
    pub(crate) fn finish_full(mut self) -> Result<(Trace, u64, u64), Violation> {
        let before = self.events;
        self.start()?;
        for _ in 0..SETTLE_LIMIT {
            if self.stopped.is_some() {
                break;
            }
            match (self.settle, self.flying.as_slice().first().copied()) {
                (Settle::Answer(status), Some(id)) => {
                    self.flying.remove(0);
                    self.remember(id);
                    let r = Response::new(id, status, self.wall_now());
                    self.feed(Event::Response(r))?;
                }
                _ => self.wake_up()?,
            }
        }
        let Some((ended_at, outcome)) = self.stopped else {
            return Err(Violation {
                rule: "terminates",
                detail: format!("no Stop after {SETTLE_LIMIT} settling events"),
            });
        };
        let stray = SendId {
            item: u32::MAX,
            attempt: u32::MAX,
        };
        let after = [
            Input::Tick(Duration::from_millis(1)),
            Input::Cancel,
            Input::Stray {
                item: stray.item,
                attempt: stray.attempt,
                status: 503,
            },
        ];
        for input in &after {
            self.step(input)?;
        }
        let fed = self.events - before;
        Ok((
            Trace {
                steps: self.steps,
                records: self.records,
                notices: self.notices,
                outcome,
                ended_at,
            },
            fed,
            self.sends,
        ))
    }

    /// The machine.
    #[must_use]
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// The checker.
    #[must_use]
    pub fn checker(&self) -> &C {
        &self.checker
    }

    /// The outcome, once the machine stopped.
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        self.stopped.map(|(_, o)| o)
    }

    /// The latest instant fed to the machine.
    #[must_use]
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The notices the machine gave so far, with their instants.
    #[must_use]
    pub fn notices(&self) -> &[(Instant, Notice)] {
        &self.notices
    }

    /// Events fed to the machine so far.
    #[must_use]
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Sends the machine made so far (counted whether or not the runner
    /// is [recording](Self::recording)).
    ///
    /// ```
    /// use polite_testing::{Input, ScriptRunner, origin};
    /// # use polite_core::SplitMix64;
    /// # use polite_core::{Method, RequestId, RequestInfo, RetryMachine, RetryPolicy};
    /// # use std::time::Duration;
    /// # let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    /// #                           SplitMix64::new(1), origin(), Duration::from_secs(30)).unwrap();
    /// let mut run = ScriptRunner::new(origin(), m, ()).recording(false);
    /// run.play(&[Input::status(503), Input::Wake]).unwrap();
    /// assert_eq!(run.sends(), 2); // the first send and one retry
    /// ```
    #[must_use]
    pub fn sends(&self) -> u64 {
        self.sends
    }

    fn wall_now(&self) -> SystemTime {
        let elapsed = self.clock.saturating_duration_since(self.start);
        self.wall.checked_add(elapsed).unwrap_or(self.wall)
    }

    fn remember(&mut self, id: SendId) {
        if self.answered.len() == ANSWERED_KEPT {
            self.answered.remove(0);
        }
        self.answered.push(id);
    }

    fn take_flying(&mut self, n: u32) -> Option<SendId> {
        if self.flying.is_empty() {
            return None;
        }
        let id = self.flying.remove(n as usize % self.flying.len());
        self.remember(id);
        Some(id)
    }

    fn wake_up(&mut self) -> Result<(), Violation> {
        if let Some(w) = self.wake {
            self.clock = self.clock.max(w);
        }
        self.feed(Event::Tick)
    }

    fn feed(&mut self, event: Event<'_>) -> Result<(), Violation> {
        self.now = self.now.max(self.clock);
        self.events += 1;
        self.checker.input(self.clock, &event);
        self.machine.handle(self.clock, event);
        if let Some(r) = self.machine.take_record()
            && self.recording
        {
            self.records.push(r);
        }
        if let Some(n) = self.machine.take_notice() {
            self.checker.notice(n)?;
            if self.recording {
                self.notices.push((self.now, n));
            }
        }
        self.drain()
    }

    fn drain(&mut self) -> Result<(), Violation> {
        for _ in 0..DRAIN_LIMIT {
            let action = self.machine.poll_action();
            self.checker.output(self.now, &action)?;
            if let Some((_, o)) = self.stopped {
                if action != Action::Stop(o) {
                    return violation("stop-sticky", format!("{action:?} after Stop({o:?})"));
                }
                return self.checker.observe(&self.machine);
            }
            if self.recording {
                self.steps.push(Step {
                    at: self.now,
                    action,
                });
            }
            match action {
                Action::Send(plan) => {
                    self.sends += 1;
                    self.flying.push(plan.id);
                }
                Action::SleepUntil(t) => {
                    self.wake = Some(t);
                    return self.checker.observe(&self.machine);
                }
                Action::Stop(o) => {
                    self.stopped = Some((self.now, o));
                    return self.checker.observe(&self.machine);
                }
            }
        }
        violation(
            "no-wait",
            format!("more than {DRAIN_LIMIT} sends without a wait"),
        )
    }
}

fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d).unwrap_or(t)
}

fn pick(ids: &[SendId], n: u32) -> Option<SendId> {
    if ids.is_empty() {
        None
    } else {
        Some(ids[n as usize % ids.len()])
    }
}

/// Plays `script` against `machine` (created at [`origin()`](crate::origin))
/// from [`origin()`](crate::origin), checking every step with `checker`,
/// then settles it (nothing answers any more) and returns the trace.
///
/// # Errors
///
/// The first [`Violation`].
///
/// ```
/// use polite_testing::{Checker, Input, origin, run_script};
/// use polite_core::SplitMix64;
/// use polite_core::{Method, Outcome, Reply, RequestId, RequestInfo, RetryMachine, RetryPolicy};
/// use std::time::Duration;
///
/// // A POST without an idempotency key is never re-sent.
/// let post = RequestInfo::new(RequestId(1), Method::Post);
/// let m = RetryMachine::new(RetryPolicy::default(), post, SplitMix64::new(1), origin(),
///                           Duration::from_secs(30)).unwrap();
/// let trace = run_script(m, Checker::for_retry(&RetryPolicy::default(), &post),
///                        &[Input::status(503), Input::Wake, Input::status(200)]).unwrap();
/// assert_eq!(trace.outcome, Outcome::NotReplayable { last: Reply::Status(503) });
/// assert_eq!(trace.sends().count(), 1);
/// ```
pub fn run_script<M: Machine, C: Invariants<M>>(
    machine: M,
    checker: C,
    script: &[Input],
) -> Result<Trace, Violation> {
    let mut runner = ScriptRunner::new(crate::origin(), machine, checker);
    runner.play(script)?;
    runner.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Ids` keeps the order of a `Vec` through pushes and removals, below
    /// and above its inline capacity.
    #[test]
    fn ids_behave_like_a_vec() {
        let id = |n: u32| SendId {
            item: n,
            attempt: n % 3,
        };
        let mut ids = Ids::default();
        let mut model: Vec<SendId> = Vec::new();
        let mut n = 0u32;
        for round in 0..200u32 {
            if round % 5 == 4 && !model.is_empty() {
                let i = (round as usize * 7) % model.len();
                assert_eq!(ids.remove(i), model.remove(i));
            } else {
                n += 1;
                ids.push(id(n));
                model.push(id(n));
            }
            assert_eq!(ids.as_slice(), &model[..]);
            assert_eq!((ids.len(), ids.is_empty()), (model.len(), model.is_empty()));
        }
        assert!(model.len() > Ids::INLINE);
        while !model.is_empty() {
            assert_eq!(ids.remove(0), model.remove(0));
            assert_eq!(ids.as_slice(), &model[..]);
        }
        ids.push(id(1));
        assert_eq!(ids.as_slice(), &[id(1)]);
    }
}
