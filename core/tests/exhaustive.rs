//! Exhaustive exploration: **every** event script up to a length over a
//! small alphabet, for several policies, played against the machines and
//! checked step by step by the same invariant checkers as the property
//! tests and the fuzz targets (`testing::explore`). Each script is also
//! settled to its end, to check that it ends with exactly one outcome.
//!
//! Run with `--nocapture` to see how many scripts were checked.

use std::time::{Duration, Instant};

use polite_core::policy::{Jitter, MaxRetries};
use polite_core::record::AttemptRecord;
use polite_core::{
    Action, Event, Machine, Method, PollMachine, PollPolicy, RequestId, RequestInfo, RetryMachine,
    RetryPolicy, SplitMix64, TransportErrorKind,
};
use polite_testing::{
    Checker, Exploration, Input, Job, PollChecker, ScriptRunner, explore, origin,
};

/// The length of every script explored for `RetryMachine`: 8^7 = 2,097,152
/// scripts of full length per alphabet and policy, 2,396,745 in all
/// (measured: about 20 s per exploration in a debug build on a shared
/// machine; the eight explorations of this file, 17.8 M scripts, take
/// about 95 s on 2 cores).
const RETRY_DEPTH: usize = 7;
/// The length for `PollMachine` (its alphabet has 8 letters too).
const POLL_DEPTH: usize = 7;

/// success, 429 with a short Retry-After, 429 with a Retry-After over the
/// automatic wait cap, 503, a transport error, advance to the next
/// wake-up, cancel, a late answer for an old attempt.
fn retry_alphabet() -> [Input; 8] {
    [
        Input::status(200),
        Input::status(429).retry_after("2"),
        Input::status(429).retry_after("120"),
        Input::status(503),
        Input::transport(TransportErrorKind::Reset),
        Input::Wake,
        Input::Cancel,
        Input::status(200).late(),
    ]
}

/// The wall clock, only to report how long an exploration took (the
/// machines themselves run in virtual time).
#[allow(clippy::disallowed_methods)]
fn stopwatch() -> Instant {
    Instant::now()
}

fn report(what: &str, e: &Exploration, took: Duration) {
    eprintln!(
        "exhaustive: {what}: {} scripts (every one of length 0..={}: {} of full length), {} events, {:.1?}; outcomes {:?}",
        e.scripts, e.depth, e.full_length, e.events, took, e.outcomes
    );
}

fn explore_retry(what: &str, policy: RetryPolicy, request: RequestInfo, timeout: Duration) {
    explore_retry_with(
        what,
        policy,
        request,
        timeout,
        &retry_alphabet(),
        RETRY_DEPTH,
    );
}

fn explore_retry_with(
    what: &str,
    policy: RetryPolicy,
    request: RequestInfo,
    timeout: Duration,
    alphabet: &[Input],
    depth: usize,
) {
    let t0 = origin();
    let m = RetryMachine::new(policy, request, SplitMix64::new(7), t0, timeout).unwrap();
    // The checker's deadline is the test's own `t0 + timeout`, never the
    // machine's word for it.
    let checker = Checker::for_retry(&policy, &request).deadline(t0 + timeout);
    let start = stopwatch();
    let e = explore(ScriptRunner::new(t0, m, checker), alphabet, depth)
        .unwrap_or_else(|c| panic!("{what}: {c}"));
    report(what, &e, start.elapsed());
    let n = alphabet.len() as u64;
    assert_eq!(e.full_length, n.pow(depth as u32));
    assert_eq!(e.scripts, (0..=depth as u32).map(|k| n.pow(k)).sum::<u64>());
}

/// Hostile `Retry-After` values (issue 16), on 429 and 503: more digits
/// than fit in 64 bits, zero-padded past 64 bytes, a leap-second date, a
/// leap-second `Date` header. All valid: the first ends the request
/// `RateLimited`, the others ask for 3 s, 2 s and 20 s.
fn hostile_retry_alphabet() -> [Input; 8] {
    [
        Input::status(200),
        Input::status(429).retry_after("99999999999999999999"),
        Input::status(503).retry_after(format!("{}3", "0".repeat(70))),
        // 08:48:60 is 08:49:00; the server's clock says 08:48:58.
        Input::status(503)
            .retry_after("Sun, 06 Nov 1994 08:48:60 GMT")
            .date("Sun, 06 Nov 1994 08:48:58 GMT"),
        // The server's clock is on a leap second (08:47:60 = 08:48:00).
        Input::status(429)
            .retry_after("Sun, 06 Nov 1994 08:48:20 GMT")
            .date("Sun, 06 Nov 1994 08:47:60 GMT"),
        Input::transport(TransportErrorKind::Reset),
        Input::Wake,
        Input::Cancel,
    ]
}

/// A request of session generation 7 whose answers come at generation 7
/// or, after a logout, 8 (SPEC §2.3: a stale answer of any status ends it
/// `Stale` at once, a success too), mixed with current answers and
/// failures. Length 6 (262,144 scripts of full length): the release
/// explorer (`polite-testing`'s `explore_deep`) goes to 8 with a stale
/// letter of its own.
#[test]
fn every_script_with_stale_answers() {
    let alphabet = [
        Input::status(200).generation(7),
        Input::status(200).generation(8),
        Input::status(503).generation(8),
        Input::status(503).generation(7),
        Input::status(429).retry_after("2").generation(8),
        Input::transport(TransportErrorKind::Reset),
        Input::Wake,
        Input::Cancel,
    ];
    explore_retry_with(
        "session generation 7, stale answers at 8, GET, 30 s",
        RetryPolicy::default(),
        RequestInfo::new(RequestId(9), Method::Get).with_generation(7),
        Duration::from_secs(30),
        &alphabet,
        6,
    );
}

/// The default policy against hostile `Retry-After` values.
#[test]
fn every_script_hostile_retry_after() {
    explore_retry_with(
        "hostile Retry-After, default policy, GET, 30 s",
        RetryPolicy::default(),
        RequestInfo::new(RequestId(6), Method::Get),
        Duration::from_secs(30),
        &hostile_retry_alphabet(),
        RETRY_DEPTH,
    );
}

/// The default policy, a GET, 30 s.
#[test]
fn every_script_default_policy() {
    explore_retry(
        "default policy, GET, 30 s",
        RetryPolicy::default(),
        RequestInfo::new(RequestId(1), Method::Get),
        Duration::from_secs(30),
    );
}

/// Tight budgets (one retry per class) and no jitter, a short deadline.
#[test]
fn every_script_tight_budgets() {
    let mut policy = RetryPolicy {
        max_retries: MaxRetries {
            rate_limited: 1,
            server_error: 1,
            transport: 1,
        },
        ..RetryPolicy::default()
    };
    policy.backoff.jitter = Jitter::None;
    explore_retry(
        "budgets 1/1/1, no jitter, GET, 5 s",
        policy,
        RequestInfo::new(RequestId(2), Method::Get),
        Duration::from_secs(5),
    );
}

/// A POST without an idempotency key: never re-sent.
#[test]
fn every_script_non_replayable_post() {
    explore_retry(
        "default policy, POST (not replayable), 30 s",
        RetryPolicy::default(),
        RequestInfo::new(RequestId(3), Method::Post),
        Duration::from_secs(30),
    );
}

/// `PollMachine`: a pending state (after a long poll held 5 s), a terminal
/// state, the server rejecting the wait parameter, a 429 with a short
/// Retry-After, a 503, a transport error, advance to the next wake-up,
/// cancel.
#[test]
fn every_poll_script() {
    let alphabet = [
        Input::status(200)
            .state("running")
            .after(Duration::from_secs(5)),
        Input::status(200).state("passed"),
        Input::status(400).job(Job::LongPollUnsupported),
        Input::status(429).retry_after("2"),
        Input::status(503),
        Input::transport(TransportErrorKind::Timeout),
        Input::Wake,
        Input::Cancel,
    ];
    let t0 = origin();
    let mut policy = PollPolicy::default();
    policy.retry.max_retries = MaxRetries {
        rate_limited: 1,
        server_error: 2,
        transport: 1,
    };
    let m = PollMachine::new(
        policy,
        RequestInfo::new(RequestId(4), Method::Get),
        SplitMix64::new(7),
        t0,
        Duration::from_secs(40),
    )
    .unwrap();
    let checker = PollChecker::new(
        &policy,
        &RequestInfo::new(RequestId(4), Method::Get),
        t0 + Duration::from_secs(40),
    );
    let start = stopwatch();
    let e = explore(ScriptRunner::new(t0, m, checker), &alphabet, POLL_DEPTH)
        .unwrap_or_else(|c| panic!("poll: {c}"));
    report("PollMachine, budgets 1/2/1, GET, 40 s", &e, start.elapsed());
    assert_eq!(e.full_length, 8u64.pow(POLL_DEPTH as u32));
}

/// The length of the hostile poll explorations (11 letters).
const HOSTILE_POLL_DEPTH: usize = 6;

/// `PollMachine` against hostile servers (issue 16): a `Retry-After` on
/// every kind of answer (the rejection of the wait parameter with 38 s and
/// with more digits than fit in 64 bits, a pending answer zero-padded past
/// 64 bytes and with a leap-second date, a 503 that overflows), and a
/// server that ignores the wait parameter and answers "running" at once.
fn hostile_poll_alphabet() -> [Input; 11] {
    [
        Input::status(200)
            .state("running")
            .after(Duration::from_secs(5)),
        Input::status(200).state("running"),
        Input::status(200).state("passed"),
        Input::status(400)
            .job(Job::LongPollUnsupported)
            .retry_after("38"),
        Input::status(400)
            .job(Job::LongPollUnsupported)
            .retry_after("99999999999999999999"),
        Input::status(202)
            .state("running")
            .retry_after(format!("{}4", "0".repeat(70))),
        // 08:48:60 is 08:49:00: 3 s after the server's 08:48:57.
        Input::status(202)
            .state("running")
            .retry_after("Sun, 06 Nov 1994 08:48:60 GMT")
            .date("Sun, 06 Nov 1994 08:48:57 GMT"),
        Input::status(503).retry_after("99999999999999999999"),
        Input::WakeIfIdle,
        Input::Wake,
        Input::Cancel,
    ]
}

fn explore_poll_hostile(what: &str, long_poll_first: bool, timeout: Duration) {
    let t0 = origin();
    let policy = PollPolicy {
        long_poll_first,
        ..PollPolicy::default()
    };
    let request = RequestInfo::new(RequestId(7), Method::Get);
    let m = PollMachine::new(policy, request, SplitMix64::new(7), t0, timeout).unwrap();
    let checker = PollChecker::new(&policy, &request, t0 + timeout);
    let alphabet = hostile_poll_alphabet();
    let start = stopwatch();
    let e = explore(
        ScriptRunner::new(t0, m, checker),
        &alphabet,
        HOSTILE_POLL_DEPTH,
    )
    .unwrap_or_else(|c| panic!("{what}: {c}"));
    report(what, &e, start.elapsed());
    assert_eq!(e.full_length, 11u64.pow(HOSTILE_POLL_DEPTH as u32));
}

/// Long polls first, 40 s: room for the server's 38 s.
#[test]
fn every_hostile_poll_script_40s() {
    explore_poll_hostile(
        "hostile PollMachine, long poll first, 40 s",
        true,
        Duration::from_secs(40),
    );
}

/// Long polls first, 2.5 s: the end of the budget comes within the script
/// (under one whole second left for a long poll).
#[test]
fn every_hostile_poll_script_short_budget() {
    explore_poll_hostile(
        "hostile PollMachine, long poll first, 2.5 s",
        true,
        Duration::from_millis(2_500),
    );
}

/// Backoff from the start, 5 s: the schedule's next poll (about 4 s after
/// the second) falls after the deadline.
#[test]
fn every_hostile_poll_script_backoff() {
    explore_poll_hostile(
        "hostile PollMachine, backoff, 5 s",
        false,
        Duration::from_secs(5),
    );
}

/// A broken machine, to show that the exploration finds what it looks for:
/// it forgets a cancel that comes while it waits to retry.
#[derive(Clone, Debug)]
struct ForgetsCancelWhileWaiting(RetryMachine<SplitMix64>);

impl Machine for ForgetsCancelWhileWaiting {
    fn handle(&mut self, now: Instant, event: Event<'_>) {
        let waiting = self.0.sends() > 0 && !self.0.in_flight() && self.0.outcome().is_none();
        if !(waiting && event == Event::Cancel) {
            self.0.handle(now, event);
        }
    }
    fn poll_action(&mut self) -> Action {
        self.0.poll_action()
    }
    fn take_record(&mut self) -> Option<AttemptRecord> {
        self.0.take_record()
    }
    fn deadline(&self) -> Option<Instant> {
        Some(self.0.deadline())
    }
}

#[test]
fn the_exploration_finds_a_planted_bug_with_a_shortest_script() {
    let t0 = origin();
    let policy = RetryPolicy::default();
    let m = RetryMachine::new(
        policy,
        RequestInfo::new(RequestId(5), Method::Get),
        SplitMix64::new(7),
        t0,
        Duration::from_secs(30),
    )
    .unwrap();
    let checker = Checker::for_retry(&policy, &RequestInfo::new(RequestId(5), Method::Get))
        .deadline(t0 + Duration::from_secs(30));
    let found = explore(
        ScriptRunner::new(t0, ForgetsCancelWhileWaiting(m), checker),
        &retry_alphabet(),
        RETRY_DEPTH,
    )
    .unwrap_err();
    assert_eq!(found.violation.rule, "cancel");
    // Depth first meets it at length 7 first; the shortest is a failure
    // that makes the machine wait, then a cancel.
    assert_eq!(found.script.len(), 2, "{found}");
    assert_eq!(found.script[1], Input::Cancel);
    eprintln!("exhaustive: planted bug found: {found}");
}
