//! [`PollChecker`]: the invariants of a [`PollMachine`], checked on its
//! stream of inputs, outputs and notices independently of its logic.

use std::time::{Duration, Instant};

use polite_core::poll::JobReport;
use polite_core::{
    Action, Event, Notice, Outcome, PollMachine, PollPolicy, RequestInfo, RetryClass, SendId,
    SendPlan,
};
use rand_core::Rng;

use crate::oracle;
use crate::server_time::{self, NotBefore};
use crate::{Violation, class_index, unknown, violation};

/// What a long poll leaves before the deadline for its held answer to come
/// back (the checker's own statement of the rule; polite-core calls it
/// `PollPolicy::ANSWER_ROOM`).
const ANSWER_ROOM: Duration = Duration::from_secs(1);

/// What the next action must be, learnt from the inputs since the last one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Exactly this stop.
    Stop(Outcome),
    /// A `TimedOut` stop, whatever instant it names.
    TimedOut,
    /// Some stop (two endings raced; either may win).
    AnyStop,
    /// Some stop: a failure whose server delay is over the automatic wait
    /// cap (`RateLimited`, or an earlier reason to stop).
    OverCap,
    /// `RateLimited` with a `retry_at` later than this instant (the
    /// server's is too far to represent).
    RateLimitedAfter(Instant),
}

/// Checks the invariants of SPEC.md §1 and §3 on the inputs and outputs of
/// one [`PollMachine`], independently of the machine's own logic. Feed it
/// every event with [`input`](Self::input) (before the machine sees it),
/// every action with [`output`](Self::output), and every notice with
/// [`notice`](Self::notice). Rules, by the name a [`Violation`] carries:
///
/// * `sleep-past-deadline`: every `SleepUntil(t)` has `t <= deadline`;
/// * `deadline`: at or after the deadline the only action is `Stop`;
/// * `abort-at`: every send carries `abort_at = deadline + retry.transport_cushion`;
/// * `attempt-index`: polls are numbered 0, 1, 2, … on item 0;
/// * `send-while-in-flight`: never two polls in flight;
/// * `send-after-stop` / `stop-sticky`: after `Stop(o)` every action is `Stop(o)`;
/// * `wait-param`: a long poll asks `1 <= n <= min(whole seconds of (left
///   - 1 s), max_long_poll)`: it leaves a second for the held answer to
///   come back before the deadline (an answer after it is discarded, SPEC
///   §1; user trial 4 saw `waitSeconds=4` with 4 s left end `TimedOut`);
/// * `mode`: long polls until the server rejects the wait parameter (when
///   `long_poll_first`), plain polls after, never back; in long-poll mode a
///   plain poll only when less than one whole second is left to ask for
///   (less than 2 s left);
/// * `notice-once`: the notice comes once, only after the switch, and
///   before the first poll without the wait parameter;
/// * `retry-budget`: consecutive failures per class, between proper answers,
///   stay within the class budget;
/// * `retry-after`: no poll before the server's `Retry-After` instant, after
///   any answer that carries one (a pending state, the rejection of the wait
///   parameter, a failure), and none at all when the instant is too far to
///   represent. The checker reads `Retry-After` and `Date` with its own
///   plain code (any number of digits, saturating; a leap second), never
///   through `polite_core::retry_after`;
/// * `rate-limited`: a server delay over the automatic wait cap on a pending
///   answer or on the rejection ends the wait `RateLimited { retry_at }`
///   with the server's instant (on a failure: some stop);
/// * `gave-up-early`: after a pending answer or the rejection, before the
///   deadline, the wait ends only with `TimedOut`, and only when no poll can
///   be answered in time any more: the server's instant (or now) plus the
///   last round trip is at or after the deadline, or a final poll has
///   already gone out in the last stretch of the budget;
/// * `not-replayable`: a non-replayable poll is never re-sent after a failure;
/// * `poll-too-soon`: after a pending answer, long polls start at least
///   `min_long_poll_interval` apart, and backoff-mode polls wait at least the
///   schedule's smallest jittered delay; except one final poll per wait,
///   pulled in ahead of the schedule to the last stretch of the budget
///   (at or after `deadline - max(2 × last round trip, 10 ms)`);
/// * `cancel`, `late-answer`, `terminal`, `stale`, `no-report`: after a
///   cancel, an answer at or after the deadline, a terminal state, an answer
///   for another session generation, or a success without a job report, the
///   next action is the matching `Stop`;
/// * `permanent`: a transport error that is permanent (SPEC §2.2's list,
///   the checkers' own table) or of a kind `retry.retried_transport` leaves
///   out ends the wait at once with `Permanent { cause }`.
///
/// For the sharpest checks call `output` after every `input` (as the drive
/// loop does); when several inputs come between two outputs the checker
/// accepts any of the stops they could lead to.
///
/// ```
/// use polite_testing::PollChecker;
/// use polite_core::SplitMix64;
/// use polite_core::{Action, Event, Method, PollMachine, PollPolicy, RequestId, RequestInfo,
///                   Response};
/// use polite_core::poll::JobReport;
/// use std::time::{Duration, Instant, UNIX_EPOCH};
///
/// let t0 = Instant::now();
/// let mut m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
///                              SplitMix64::new(1), t0, Duration::from_secs(60)).unwrap();
/// let mut checker = PollChecker::for_machine(&m);
/// let a = m.poll_action();
/// checker.output(t0, &a).unwrap();
/// let Action::Send(p) = a else { unreachable!() };
/// let t1 = t0 + Duration::from_secs(25);
/// let e = Event::Response(Response::new(p.id, 200, UNIX_EPOCH).job(JobReport::State("running")));
/// checker.input(t1, &e);
/// m.handle(t1, e);
/// checker.output(t1, &m.poll_action()).unwrap();
///
/// // A broken machine that sleeps past the deadline is caught.
/// let err = checker.output(t1, &Action::SleepUntil(t0 + Duration::from_secs(61))).unwrap_err();
/// assert_eq!(err.rule, "sleep-past-deadline");
/// ```
#[derive(Clone, Debug)]
pub struct PollChecker {
    policy: PollPolicy,
    replayable: bool,
    generation: Option<u64>,
    deadline: Instant,
    now: Option<Instant>,
    stopped: Option<Outcome>,
    expect: Option<Expect>,
    /// An answer to the poll in flight came since the last output.
    answered: bool,
    sends: u32,
    in_flight: Option<SendPlan>,
    last_send_at: Option<Instant>,
    switched: bool,
    notices: u32,
    /// The class of the failure the last answer was, if it was one.
    failure: Option<RetryClass>,
    consecutive: [u32; 3],
    not_before: Option<NotBefore>,
    /// The round trip of the latest answered poll.
    rtt: Duration,
    /// A proper answer (pending, or the rejection) came at this instant,
    /// since the last output: the wait must go on if it can.
    proper: Option<Instant>,
    /// The one final poll ahead of the schedule has been sent.
    pulled_in: bool,
    /// A poll has been sent in the last stretch of the budget (at or after
    /// `deadline - max(2 × round trip, 10 ms)`): a final poll.
    final_sent: bool,
    /// Backoff-mode pending answers so far.
    scheduled: u32,
    /// Where the last pending answer said the next poll may start, at the
    /// earliest, by the job schedule.
    schedule_floor: Option<Instant>,
}

impl PollChecker {
    /// A checker for a `PollMachine` with this policy, request and deadline.
    ///
    /// ```
    /// use polite_testing::PollChecker;
    /// use polite_core::{Method, PollPolicy, RequestId, RequestInfo};
    /// use std::time::{Duration, Instant};
    /// let c = PollChecker::new(&PollPolicy::default(), &RequestInfo::new(RequestId(1), Method::Get),
    ///                          Instant::now() + Duration::from_secs(30));
    /// assert_eq!(c.outcome(), None);
    /// ```
    #[must_use]
    pub fn new(policy: &PollPolicy, request: &RequestInfo, deadline: Instant) -> PollChecker {
        PollChecker {
            policy: *policy,
            replayable: crate::check::replayable(request),
            generation: request.generation,
            deadline,
            now: None,
            stopped: None,
            expect: None,
            answered: false,
            sends: 0,
            in_flight: None,
            last_send_at: None,
            switched: false,
            notices: 0,
            failure: None,
            consecutive: [0; 3],
            not_before: None,
            rtt: Duration::ZERO,
            proper: None,
            pulled_in: false,
            final_sent: false,
            scheduled: 0,
            schedule_floor: None,
        }
    }

    /// A checker for this machine (its policy, request and deadline). Create
    /// it before the machine's first action.
    ///
    /// It takes the deadline from the machine, so it cannot see a machine
    /// that gets its own deadline wrong: polite's own tools (explorer,
    /// proptests, fuzz cases) use [`new`](Self::new) with `t0 + timeout`,
    /// their own arithmetic.
    ///
    /// ```
    /// use polite_testing::PollChecker;
    /// use polite_core::SplitMix64;
    /// use polite_core::{Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use std::time::{Duration, Instant};
    /// let m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                          SplitMix64::new(1), Instant::now(), Duration::from_secs(30)).unwrap();
    /// let c = PollChecker::for_machine(&m);
    /// assert_eq!(c.outcome(), None);
    /// ```
    #[must_use]
    pub fn for_machine<R: Rng>(machine: &PollMachine<R>) -> PollChecker {
        PollChecker::new(machine.policy(), machine.request(), machine.deadline())
    }

    /// Sets what the next action must be, unless an earlier input since the
    /// last output already did; after an answer the machine may have ended
    /// on its own, so any later expectation is only "some stop".
    // `#[inline]` here and on the other checking methods: they are then
    // compiled into the `poll_script` fuzz target with its coverage
    // counters (polite-testing itself is built without them for fuzzing;
    // fuzz/README.md, "Speed").
    #[inline]
    fn expect(&mut self, e: Expect) {
        if self.expect.is_none() {
            self.expect = Some(if self.answered { Expect::AnyStop } else { e });
        }
    }

    /// Records an input fed to the machine at `now` (call it before the
    /// machine's `handle`).
    ///
    /// ```
    /// use polite_testing::PollChecker;
    /// use polite_core::{Action, Event, Method, Outcome, PollPolicy, RequestId, RequestInfo};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut c = PollChecker::new(&PollPolicy::default(), &RequestInfo::new(RequestId(1), Method::Get),
    ///                              t0 + Duration::from_secs(30));
    /// c.input(t0, &Event::Cancel);
    /// assert_eq!(c.output(t0, &Action::SleepUntil(t0)).unwrap_err().rule, "cancel");
    /// ```
    #[inline]
    pub fn input(&mut self, now: Instant, event: &Event<'_>) {
        let now = self.now.map_or(now, |n| n.max(now));
        self.now = Some(now);
        if self.stopped.is_some() {
            return;
        }
        let answered = match event {
            Event::Cancel => {
                self.expect(Expect::Stop(Outcome::Cancelled));
                return;
            }
            Event::Tick => false,
            Event::TransportError(id, kind) => {
                if self.in_flight.is_some_and(|p| p.id == *id) {
                    self.answer_arrived(now);
                    if now < self.deadline {
                        // SPEC §2.2: permanent kinds, and the kinds the
                        // policy leaves out, end the wait at once.
                        if oracle::transport_retried(&self.policy.retry, *kind) {
                            self.failure = Some(RetryClass::Transport);
                        } else {
                            self.expect(Expect::Stop(Outcome::Permanent { cause: *kind }));
                        }
                    }
                    true
                } else {
                    false
                }
            }
            Event::Response(r) => match self.in_flight.filter(|p| p.id == r.id) {
                Some(plan) => {
                    self.answer_arrived(now);
                    if now < self.deadline {
                        self.response(now, plan, r);
                    }
                    true
                }
                None => false,
            },
            other => unknown(other),
        };
        // Any event at or after the deadline ends the wait (an answer that
        // ended it otherwise set its own expectation above).
        if now >= self.deadline {
            self.expect(Expect::TimedOut);
        }
        self.answered |= answered;
    }

    /// An answer to the poll in flight, before the deadline.
    #[inline]
    fn response(&mut self, now: Instant, plan: SendPlan, r: &polite_core::Response<'_>) {
        if let (Some(mine), Some(now_gen)) = (self.generation, r.generation)
            && mine != now_gen
        {
            return self.expect(Expect::Stop(Outcome::Stale));
        }
        let limits = self.policy.retry.retry_after;
        let asked = r
            .retry_after
            .and_then(|v| server_time::asked(v, r.date, r.wall_clock));
        let server = asked.map(|d| NotBefore::after(now, d, limits.min));
        let over_cap = asked.is_some_and(|d| d > limits.auto_wait_cap);
        let rate_limited = match server {
            Some(NotBefore::At(t)) => Expect::Stop(Outcome::RateLimited { retry_at: Some(t) }),
            _ => Expect::RateLimitedAfter(now.checked_add(limits.auto_wait_cap).unwrap_or(now)),
        };
        // A success the caller classes as a failure is retried by class
        // (SPEC §2; the checkers' own table in `oracle::class_of`).
        let classified = r.retry_class.is_some() && (200..=399).contains(&r.status);
        match (r.status, r.job) {
            (status, Some(JobReport::LongPollUnsupported)) => {
                if plan.long_poll.is_some() {
                    self.switched = true;
                    self.consecutive = [0; 3];
                    if over_cap {
                        return self.expect(rate_limited);
                    }
                    self.not_before = server;
                    self.proper = Some(now);
                } else {
                    self.expect(Expect::Stop(Outcome::NotRetryable { status }));
                }
            }
            (100..=399, Some(JobReport::State(s))) if !classified => {
                let terminal = self.policy.terminal_states.iter().find(|t| t.as_str() == s);
                if let Some(state) = terminal {
                    return self.expect(Expect::Stop(Outcome::Terminal { state }));
                }
                self.consecutive = [0; 3];
                if over_cap {
                    return self.expect(rate_limited);
                }
                self.not_before = server;
                self.proper = Some(now);
                // The mode's schedule (a plain poll in long-poll mode, sent
                // under one whole second before the deadline, keeps the
                // long-poll spacing).
                let long_poll_mode = self.policy.long_poll_first && !self.switched;
                self.schedule_floor = if long_poll_mode {
                    self.last_send_at
                        .and_then(|t| t.checked_add(self.policy.min_long_poll_interval))
                } else {
                    // SPEC §3's schedule at its lowest jitter, by the
                    // checkers' own arithmetic.
                    let least = oracle::least_backoff(&self.policy.backoff, self.scheduled);
                    self.scheduled += 1;
                    now.checked_add(least)
                };
            }
            (status @ 100..=399, None) | (status @ (0..=99 | 600..), _) if !classified => {
                self.expect(Expect::Stop(Outcome::NotRetryable { status }));
            }
            (status, _) => match oracle::class_of(&self.policy.retry, r) {
                Some(class) => {
                    self.failure = Some(class);
                    self.not_before = server;
                    if over_cap {
                        // Over the cap, out of budget, or not replayable:
                        // whichever comes first, the wait ends.
                        self.expect(Expect::OverCap);
                    }
                }
                None => self.expect(Expect::Stop(Outcome::NotRetryable { status })),
            },
        }
    }

    #[inline]
    fn answer_arrived(&mut self, now: Instant) {
        if let Some(sent) = self.last_send_at {
            self.rtt = now.saturating_duration_since(sent);
        }
        self.in_flight = None;
        self.failure = None;
        self.not_before = None;
        self.schedule_floor = None;
        if now >= self.deadline {
            self.expect(Expect::TimedOut);
        }
    }

    /// Records a notice the machine gave after an input.
    ///
    /// # Errors
    ///
    /// A `notice-once` [`Violation`] for a second notice, or one before the
    /// switch to backoff.
    ///
    /// ```
    /// use polite_testing::PollChecker;
    /// use polite_core::{Method, Notice, PollPolicy, RequestId, RequestInfo};
    /// use std::time::{Duration, Instant};
    /// let mut c = PollChecker::new(&PollPolicy::default(), &RequestInfo::new(RequestId(1), Method::Get),
    ///                              Instant::now() + Duration::from_secs(30));
    /// assert_eq!(c.notice(Notice::LongPollUnsupported).unwrap_err().rule, "notice-once");
    /// ```
    #[inline]
    pub fn notice(&mut self, notice: Notice) -> Result<(), Violation> {
        self.notices += 1;
        if !self.switched {
            return violation("notice-once", format!("{notice:?} before any switch"));
        }
        if self.notices > 1 {
            return violation("notice-once", format!("{notice:?} #{}", self.notices));
        }
        Ok(())
    }

    /// Checks an action the machine answered at `now`.
    ///
    /// # Errors
    ///
    /// The [`Violation`] it breaks.
    ///
    /// ```
    /// use polite_testing::PollChecker;
    /// use polite_core::{Action, Method, PollPolicy, RequestId, RequestInfo, SendId, SendPlan};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let deadline = t0 + Duration::from_secs(7);
    /// let mut c = PollChecker::new(&PollPolicy::default(), &RequestInfo::new(RequestId(1), Method::Get), deadline);
    /// let plan = SendPlan { id: SendId::default(), request: RequestId(1),
    ///                       abort_at: deadline + Duration::from_secs(2), long_poll: Some(8) };
    /// assert_eq!(c.output(t0, &Action::Send(plan)).unwrap_err().rule, "wait-param");
    /// ```
    #[inline]
    pub fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        let now = self.now.map_or(now, |n| n.max(now));
        self.now = Some(now);
        self.answered = false;
        let proper = self.proper.take();
        if let Some(o) = self.stopped {
            return match action {
                Action::Stop(p) if *p == o => Ok(()),
                Action::Send(_) => violation("send-after-stop", format!("{action:?} after {o:?}")),
                _ => violation("stop-sticky", format!("{action:?} after {o:?}")),
            };
        }
        if let Some(e) = self.expect {
            let ok = match (e, action) {
                (Expect::Stop(o), Action::Stop(p)) => o == *p,
                (Expect::TimedOut, Action::Stop(p)) => matches!(p, Outcome::TimedOut { .. }),
                (Expect::AnyStop | Expect::OverCap, Action::Stop(_)) => true,
                (
                    Expect::RateLimitedAfter(after),
                    Action::Stop(Outcome::RateLimited { retry_at: Some(t) }),
                ) => *t > after,
                _ => false,
            };
            if !ok {
                let rule = match e {
                    Expect::Stop(Outcome::Cancelled) => "cancel",
                    Expect::Stop(Outcome::Terminal { .. }) => "terminal",
                    Expect::Stop(Outcome::Stale) => "stale",
                    Expect::Stop(Outcome::NotRetryable { .. }) => "not-retryable",
                    Expect::Stop(Outcome::Permanent { .. }) => "permanent",
                    Expect::TimedOut => "late-answer",
                    Expect::OverCap
                    | Expect::RateLimitedAfter(_)
                    | Expect::Stop(Outcome::RateLimited { .. }) => "rate-limited",
                    _ => "cancel",
                };
                return violation(rule, format!("{action:?}, expected {e:?}"));
            }
        }
        match *action {
            Action::Stop(o) => {
                self.stopped = Some(o);
                match (proper, self.expect.take()) {
                    (Some(at), None) => self.gave_up(at, o),
                    _ => Ok(()),
                }
            }
            _ if now >= self.deadline => {
                violation("deadline", format!("{action:?} at or after the deadline"))
            }
            Action::SleepUntil(t) => {
                if t > self.deadline {
                    return violation(
                        "sleep-past-deadline",
                        format!("SleepUntil past the deadline by {:?}", t - self.deadline),
                    );
                }
                Ok(())
            }
            Action::Send(plan) => self.send(now, plan),
        }
    }

    /// A stop right after a proper answer at `at` (no other reason to stop
    /// came since): only `TimedOut`, and only when no poll can be answered
    /// in time any more.
    #[inline]
    fn gave_up(&self, at: Instant, o: Outcome) -> Result<(), Violation> {
        if !matches!(o, Outcome::TimedOut { .. }) {
            return violation(
                "gave-up-early",
                format!("{o:?} after a proper answer at {at:?}"),
            );
        }
        if self.final_sent {
            return Ok(());
        }
        // The earliest instant the next poll may go: now, or the server's.
        let earliest = match self.not_before {
            Some(NotBefore::Never) => return Ok(()),
            Some(NotBefore::At(t)) => t.max(at),
            None => at,
        };
        match earliest.checked_add(self.rtt) {
            Some(answered) if answered < self.deadline => violation(
                "gave-up-early",
                format!(
                    "{o:?} at {at:?} with {:?} left: a poll at {earliest:?} would be answered {:?} before the deadline (round trip {:?})",
                    self.deadline - at,
                    self.deadline - answered,
                    self.rtt
                ),
            ),
            _ => Ok(()),
        }
    }

    #[inline]
    fn send(&mut self, now: Instant, plan: SendPlan) -> Result<(), Violation> {
        let cushion = self.policy.retry.transport_cushion;
        if self.deadline.checked_add(cushion) != Some(plan.abort_at) {
            return violation("abort-at", format!("{plan:?}"));
        }
        if plan.id
            != (SendId {
                item: 0,
                attempt: self.sends,
            })
        {
            return violation("attempt-index", format!("{plan:?} as poll #{}", self.sends));
        }
        if let Some(f) = self.in_flight {
            return violation("send-while-in-flight", format!("{plan:?} while {f:?}"));
        }
        let long = self.policy.long_poll_first && !self.switched;
        match plan.long_poll {
            Some(n) => {
                if !long {
                    return violation("mode", format!("long poll {plan:?} in backoff mode"));
                }
                let left = self.deadline - now;
                let most = left
                    .saturating_sub(ANSWER_ROOM)
                    .as_secs()
                    .min(self.policy.max_long_poll.as_secs());
                if n == 0 || u64::from(n) > most {
                    return violation(
                        "wait-param",
                        format!("wait {n} s with {left:?} left (at most {most})"),
                    );
                }
            }
            None if long && self.deadline - now >= ANSWER_ROOM + Duration::from_secs(1) => {
                return violation(
                    "mode",
                    format!("plain poll {plan:?} in long-poll mode with a second or more left"),
                );
            }
            None if self.switched && self.notices == 0 => {
                return violation(
                    "notice-once",
                    format!("plain poll {plan:?} after the switch, but no notice"),
                );
            }
            None => {}
        }
        if let Some(class) = self.failure {
            if !self.replayable {
                return violation(
                    "not-replayable",
                    format!("{plan:?} after a {class} failure"),
                );
            }
            let i = class_index(class);
            self.consecutive[i] += 1;
            let budget = oracle::budget(&self.policy.retry, class);
            if self.consecutive[i] > budget {
                return violation(
                    "retry-budget",
                    format!(
                        "{} consecutive {class} retries, the policy allows {budget}: {plan:?} at {now:?}",
                        self.consecutive[i]
                    ),
                );
            }
        }
        if let Some(nb) = self.not_before
            && nb.forbids(now)
        {
            return violation(
                "retry-after",
                format!("poll at {now:?} before the server's time {nb:?}"),
            );
        }
        // The last stretch of the budget, by the last round trip (a long
        // poll's round trip counts whole: a careful upper bound of the
        // latency the machine may estimate).
        let lead = self.rtt.saturating_mul(2).max(Duration::from_millis(10));
        let stretch = self.deadline.checked_sub(lead).unwrap_or(self.deadline);
        let in_stretch = now >= stretch;
        if let Some(floor) = self.schedule_floor
            && now < floor
        {
            // One final poll may be pulled in ahead of the schedule, into
            // the last stretch of the budget.
            if self.pulled_in || !in_stretch {
                return violation(
                    "poll-too-soon",
                    format!(
                        "poll {:?} before the schedule allows (final poll spent: {})",
                        floor - now,
                        self.pulled_in
                    ),
                );
            }
            self.pulled_in = true;
        }
        self.final_sent |= in_stretch;
        self.sends += 1;
        self.in_flight = Some(plan);
        self.last_send_at = Some(now);
        self.failure = None;
        self.not_before = None;
        self.schedule_floor = None;
        Ok(())
    }

    /// The outcome seen, if the machine stopped.
    ///
    /// ```
    /// use polite_testing::PollChecker;
    /// use polite_core::{Action, Method, Outcome, PollPolicy, RequestId, RequestInfo};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut c = PollChecker::new(&PollPolicy::default(), &RequestInfo::new(RequestId(1), Method::Get),
    ///                              t0 + Duration::from_secs(30));
    /// c.output(t0, &Action::Stop(Outcome::Cancelled)).unwrap();
    /// assert_eq!(c.outcome(), Some(Outcome::Cancelled));
    /// ```
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        self.stopped
    }

    /// Whether the checker saw the server reject the wait parameter.
    ///
    /// ```
    /// use polite_testing::PollChecker;
    /// use polite_core::{Method, PollPolicy, RequestId, RequestInfo};
    /// use std::time::{Duration, Instant};
    /// let c = PollChecker::new(&PollPolicy::default(), &RequestInfo::new(RequestId(1), Method::Get),
    ///                          Instant::now() + Duration::from_secs(30));
    /// assert!(!c.switched());
    /// ```
    #[must_use]
    pub fn switched(&self) -> bool {
        self.switched
    }
}
