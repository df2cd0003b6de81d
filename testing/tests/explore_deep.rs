//! Deep exhaustive exploration (issue 22, item 3): **every** event script
//! of length 0 to 8 over an alphabet of 8 inputs (19,173,961 scripts per
//! configuration, 16,777,216 of them of full length), for the retry and
//! poll machines under several policies, each played and settled under
//! the same invariant checkers as the property tests and the fuzz targets.
//!
//! The full depth is for release builds, which CI runs on its own line:
//!
//! ```text
//! cargo test --release -p polite-testing --test explore_deep -- --nocapture
//! ```
//!
//! A debug build (`cargo test --workspace`) explores the same
//! configurations to length 4 only, as a smoke test: the depth-7 debug
//! explorations live in `core/tests/exhaustive.rs`.

use std::time::{Duration, Instant};

use polite_core::policy::{Jitter, MaxRetries, TransportKinds};
use polite_core::{
    Machine, Method, PollMachine, PollPolicy, RequestId, RequestInfo, RetryMachine, RetryPolicy,
    SplitMix64, TransportErrorKind,
};
use polite_testing::{
    Checker, Exploration, Input, Invariants, Job, PollChecker, ScriptRunner, explore, origin,
};

/// Script length for an alphabet of 8 letters.
const DEPTH: usize = if cfg!(debug_assertions) { 4 } else { 8 };
/// Script length for the 11-letter hostile poll alphabet: 11^7 =
/// 19,487,171 scripts of full length, as many as 8^8.
const HOSTILE_POLL_DEPTH: usize = if cfg!(debug_assertions) { 3 } else { 7 };
/// Length 8 for the first hostile configuration (long poll first, 40 s):
/// 11^8 = 214,358,881 scripts of full length, 235,794,769 in all. Measured
/// in release on the shared 2-core machine at load 7-8: 131 s of CPU
/// (1.8 M scripts per CPU-second; 430 s wall there), so about 2.2 min on
/// an idle core. The other two hostile configurations stay at length 7.
const HOSTILE_POLL_DEEPEST: usize = if cfg!(debug_assertions) { 3 } else { 8 };

/// The wall clock, only to report how long an exploration took (the
/// machines themselves run in virtual time).
#[allow(clippy::disallowed_methods)]
fn stopwatch() -> Instant {
    Instant::now()
}

fn run<M, C>(what: &str, m: M, checker: C, alphabet: &[Input], depth: usize) -> Exploration
where
    M: Machine + Clone,
    C: Invariants<M> + Clone,
{
    let start = stopwatch();
    let e = explore(ScriptRunner::new(origin(), m, checker), alphabet, depth)
        .unwrap_or_else(|c| panic!("{what}: {c}"));
    let took = start.elapsed();
    eprintln!(
        "explore_deep: {what}: {} scripts (every one of length 0..={}: {} of full length), {} events, {:.1?} ({:.0} scripts/s); outcomes {:?}",
        e.scripts,
        e.depth,
        e.full_length,
        e.events,
        took,
        e.scripts as f64 / took.as_secs_f64(),
        e.outcomes
    );
    let n = alphabet.len() as u64;
    assert_eq!(e.full_length, n.pow(depth as u32), "{what}");
    assert_eq!(
        e.scripts,
        (0..=depth as u32).map(|k| n.pow(k)).sum::<u64>(),
        "{what}"
    );
    e
}

fn retry(
    what: &str,
    policy: RetryPolicy,
    request: RequestInfo,
    timeout: Duration,
    alphabet: &[Input],
) -> Exploration {
    let t0 = origin();
    let m = RetryMachine::new(policy, request, SplitMix64::new(7), t0, timeout).unwrap();
    // The checker's deadline is the test's own `t0 + timeout`.
    let checker = Checker::for_retry(&policy, &request).deadline(t0 + timeout);
    run(what, m, checker, alphabet, DEPTH)
}

/// Success, 429 with a short Retry-After and one over the automatic wait
/// cap, 503, a transport error, the next wake-up, cancel, a late answer.
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

/// The retry alphabet with a stale answer in place of the 429 over the
/// cap (which ends a request `RateLimited` at once whatever its budgets;
/// the default configuration explores it): a 503 that arrives when the
/// session is at generation 8, for a request of generation 7. SPEC §2.3:
/// dropped, `Stale`, never retried.
fn stale_alphabet() -> [Input; 8] {
    let mut a = retry_alphabet();
    a[2] = Input::status(503).generation(8);
    a
}

/// Hostile `Retry-After` values (issue 16): more digits than 64 bits hold,
/// zero-padded past 64 bytes, leap-second dates and `Date` headers.
fn hostile_retry_alphabet() -> [Input; 8] {
    [
        Input::status(200),
        Input::status(429).retry_after("99999999999999999999"),
        Input::status(503).retry_after(format!("{}3", "0".repeat(70))),
        Input::status(503)
            .retry_after("Sun, 06 Nov 1994 08:48:60 GMT")
            .date("Sun, 06 Nov 1994 08:48:58 GMT"),
        Input::status(429)
            .retry_after("Sun, 06 Nov 1994 08:48:20 GMT")
            .date("Sun, 06 Nov 1994 08:47:60 GMT"),
        Input::transport(TransportErrorKind::Reset),
        Input::Wake,
        Input::Cancel,
    ]
}

/// Transport errors of three sorts under a policy that leaves timeouts out
/// of `retried_transport` and puts a permanent kind in: a retried kind
/// (reset), a kind left out (timeout: ends the request `Permanent` at
/// once), a permanent kind in the set (certificate: never retried all the
/// same).
fn transport_alphabet() -> [Input; 8] {
    [
        Input::status(200),
        Input::status(429).retry_after("2"),
        Input::status(503),
        Input::transport(TransportErrorKind::Reset),
        Input::transport(TransportErrorKind::Timeout),
        Input::transport(TransportErrorKind::Certificate),
        Input::Wake,
        Input::Cancel,
    ]
}

#[test]
fn deep_default_policy() {
    retry(
        "default policy, GET, 30 s",
        RetryPolicy::default(),
        RequestInfo::new(RequestId(1), Method::Get),
        Duration::from_secs(30),
        &retry_alphabet(),
    );
}

#[test]
fn deep_hostile_retry_after() {
    retry(
        "hostile Retry-After, default policy, GET, 30 s",
        RetryPolicy::default(),
        RequestInfo::new(RequestId(6), Method::Get),
        Duration::from_secs(30),
        &hostile_retry_alphabet(),
    );
}

#[test]
fn deep_tight_budgets() {
    let mut policy = RetryPolicy {
        max_retries: MaxRetries {
            rate_limited: 1,
            server_error: 1,
            transport: 1,
        },
        ..RetryPolicy::default()
    };
    policy.backoff.jitter = Jitter::None;
    let e = retry(
        "budgets 1/1/1, no jitter, GET of session generation 7, stale 503s, 5 s",
        policy,
        RequestInfo::new(RequestId(2), Method::Get).with_generation(7),
        Duration::from_secs(5),
        &stale_alphabet(),
    );
    assert!(e.outcomes.get("Stale").is_some_and(|n| *n > 0), "{e:?}");
}

#[test]
fn deep_non_replayable_post() {
    retry(
        "default policy, POST (not replayable), 30 s",
        RetryPolicy::default(),
        RequestInfo::new(RequestId(3), Method::Post),
        Duration::from_secs(30),
        &retry_alphabet(),
    );
}

#[test]
fn deep_retried_transport_kinds() {
    let policy = RetryPolicy {
        // Timeouts left out; a permanent kind put in, which must still
        // never be retried.
        retried_transport: TransportKinds::RETRYABLE
            .without(TransportErrorKind::Timeout)
            .with(TransportErrorKind::Certificate),
        ..RetryPolicy::default()
    };
    let e = retry(
        "timeouts not retried, certificate in the set, GET, 30 s",
        policy,
        RequestInfo::new(RequestId(8), Method::Get),
        Duration::from_secs(30),
        &transport_alphabet(),
    );
    assert!(e.outcomes.get("Permanent").is_some_and(|n| *n > 0), "{e:?}");
}

#[test]
fn deep_poll() {
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
    let request = RequestInfo::new(RequestId(4), Method::Get);
    let timeout = Duration::from_secs(40);
    let m = PollMachine::new(policy, request, SplitMix64::new(7), t0, timeout).unwrap();
    let checker = PollChecker::new(&policy, &request, t0 + timeout);
    run(
        "PollMachine, budgets 1/2/1, GET, 40 s",
        m,
        checker,
        &alphabet,
        DEPTH,
    );
}

/// `PollMachine` with transport errors retried, left out and permanent.
#[test]
fn deep_poll_retried_transport_kinds() {
    let alphabet = [
        Input::status(200)
            .state("running")
            .after(Duration::from_secs(5)),
        Input::status(200).state("passed"),
        Input::status(400).job(Job::LongPollUnsupported),
        Input::status(503),
        Input::transport(TransportErrorKind::Reset),
        Input::transport(TransportErrorKind::Dns),
        Input::transport(TransportErrorKind::InvalidRequest),
        Input::Wake,
    ];
    let t0 = origin();
    let mut policy = PollPolicy::default();
    policy.retry.retried_transport = TransportKinds::NONE
        .with(TransportErrorKind::Reset)
        .with(TransportErrorKind::InvalidRequest);
    let request = RequestInfo::new(RequestId(9), Method::Get);
    let timeout = Duration::from_secs(40);
    let m = PollMachine::new(policy, request, SplitMix64::new(7), t0, timeout).unwrap();
    let checker = PollChecker::new(&policy, &request, t0 + timeout);
    let e = run(
        "PollMachine, only reset (and a permanent kind) retried, GET, 40 s",
        m,
        checker,
        &alphabet,
        DEPTH,
    );
    assert!(e.outcomes.get("Permanent").is_some_and(|n| *n > 0), "{e:?}");
}

/// `PollMachine` against hostile servers: a `Retry-After` on every kind
/// of answer, and a server that ignores the wait parameter.
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

fn hostile_poll(what: &str, long_poll_first: bool, timeout: Duration) {
    hostile_poll_with(
        what,
        long_poll_first,
        timeout,
        &hostile_poll_alphabet(),
        HOSTILE_POLL_DEPTH,
    );
}

fn hostile_poll_with(
    what: &str,
    long_poll_first: bool,
    timeout: Duration,
    alphabet: &[Input],
    depth: usize,
) {
    let t0 = origin();
    let policy = PollPolicy {
        long_poll_first,
        ..PollPolicy::default()
    };
    let request = RequestInfo::new(RequestId(7), Method::Get);
    let m = PollMachine::new(policy, request, SplitMix64::new(7), t0, timeout).unwrap();
    let checker = PollChecker::new(&policy, &request, t0 + timeout);
    run(what, m, checker, alphabet, depth);
}

/// Length 8 for the hostile answers themselves: the 11-letter alphabet
/// without the immediate "running", the wake-if-idle and the cancel.
#[test]
fn deep_hostile_poll_answers_length_8() {
    let all = hostile_poll_alphabet();
    let alphabet: Vec<Input> = [0, 2, 3, 4, 5, 6, 7, 9]
        .into_iter()
        .map(|i| all[i].clone())
        .collect();
    assert_eq!(alphabet.len(), 8);
    hostile_poll_with(
        "hostile PollMachine answers, long poll first, 40 s",
        true,
        Duration::from_secs(40),
        &alphabet,
        DEPTH,
    );
}

#[test]
fn deep_hostile_poll_40s() {
    hostile_poll_with(
        "hostile PollMachine, long poll first, 40 s",
        true,
        Duration::from_secs(40),
        &hostile_poll_alphabet(),
        HOSTILE_POLL_DEEPEST,
    );
}

#[test]
fn deep_hostile_poll_short_budget() {
    hostile_poll(
        "hostile PollMachine, long poll first, 2.5 s",
        true,
        Duration::from_millis(2_500),
    );
}

#[test]
fn deep_hostile_poll_backoff() {
    hostile_poll(
        "hostile PollMachine, backoff, 5 s",
        false,
        Duration::from_secs(5),
    );
}
