//! Coverage of the three tools that look for broken invariants (issue 23):
//! which outcomes, attempt-record notes and machine phases the exhaustive
//! explorer's hostile alphabets, the proptest strategies and the fuzz
//! decoders reach, counted with [`Coverage`]. Each tool must reach the
//! kinds listed here (a tool that never reaches a kind cannot find a bug
//! behind it); run with `--nocapture` to see the counts.
//!
//! ```text
//! cargo test -p polite-core --test coverage -- --nocapture
//! ```

use std::time::Duration;

use polite_core::{
    Method, PollMachine, PollPolicy, RequestId, RequestInfo, RetryMachine, RetryPolicy, SplitMix64,
    TransportErrorKind,
};
use polite_testing::fuzz::{Case, PollCase, RetryCase};
use polite_testing::{
    Checker, Coverage, Input, Job, PollChecker, ScriptRunner, origin, strategies,
};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

/// What every tool must reach on `RetryMachine`.
const RETRY_KINDS: &[&str] = &[
    "Succeeded",
    "RateLimited",
    "RetriesExhausted",
    "TimedOut",
    "Cancelled",
    "Permanent",
    "Retry-After absent",
    "Retry-After valid, within 60 s",
    "Retry-After valid, saturated",
    "delay from Backoff",
    "delay from RetryAfter",
    "class RateLimited",
    "class ServerError",
    "class Transport",
    "send",
    "sleep",
    "stop",
];

/// What every tool must reach on `PollMachine`.
const POLL_KINDS: &[&str] = &[
    "Terminal",
    "RateLimited",
    "TimedOut",
    "Cancelled",
    "Permanent",
    "Retry-After absent",
    "Retry-After valid, within 60 s",
    "Retry-After valid, saturated",
    "delay from Schedule",
    "delay from RetryAfter",
    "send long poll",
    "send",
    "sleep",
    "notice LongPollUnsupported",
];

fn assert_reaches(tool: &str, c: &Coverage, kinds: &[&str]) {
    eprintln!("coverage: {tool}: {c}");
    let missing = c.missing(kinds);
    assert!(missing.is_empty(), "{tool} never reaches {missing:?}:\n{c}");
}

/// Every script of length 0..=`depth` over `alphabet`, each played and
/// settled by its own runner (the explorer's walk, with records kept).
fn enumerate(alphabet: &[Input], depth: usize, mut run: impl FnMut(&[Input])) {
    let mut script = Vec::new();
    fn walk(a: &[Input], left: usize, s: &mut Vec<Input>, run: &mut dyn FnMut(&[Input])) {
        run(s);
        if left == 0 {
            return;
        }
        for i in a {
            s.push(i.clone());
            walk(a, left - 1, s, run);
            s.pop();
        }
    }
    walk(alphabet, depth, &mut script, &mut run);
}

/// The hostile `RetryMachine` alphabet of `exhaustive.rs` and its plain
/// one, together.
fn retry_alphabet() -> Vec<Input> {
    vec![
        Input::status(200),
        Input::status(429).retry_after("2"),
        Input::status(429).retry_after("99999999999999999999"),
        Input::status(503).retry_after(format!("{}3", "0".repeat(70))),
        Input::status(503)
            .retry_after("Sun, 06 Nov 1994 08:48:60 GMT")
            .date("Sun, 06 Nov 1994 08:48:58 GMT"),
        Input::status(503).retry_after("1.5"),
        Input::transport(TransportErrorKind::Reset),
        Input::transport(TransportErrorKind::Certificate),
        Input::Wake,
        Input::Cancel,
    ]
}

/// The hostile `PollMachine` alphabet of `exhaustive.rs`.
fn poll_alphabet() -> Vec<Input> {
    vec![
        Input::status(200)
            .state("running")
            .after(Duration::from_secs(5)),
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
        Input::status(503).retry_after("99999999999999999999"),
        Input::transport(TransportErrorKind::Certificate),
        Input::WakeIfIdle,
        Input::Wake,
        Input::Cancel,
    ]
}

#[test]
fn the_explorer_alphabets_reach_all_kinds() {
    let t0 = origin();
    let mut c = Coverage::default();
    let mut policy = RetryPolicy::default();
    policy.max_retries.server_error = 1;
    let request = RequestInfo::new(RequestId(1), Method::Get);
    enumerate(&retry_alphabet(), 4, |script| {
        let m = RetryMachine::new(
            policy,
            request,
            SplitMix64::new(7),
            t0,
            Duration::from_secs(30),
        )
        .unwrap();
        let checker = Checker::for_retry(&policy, &request).deadline(t0 + Duration::from_secs(30));
        let mut run = ScriptRunner::new(t0, m, checker);
        run.play(script).unwrap();
        c.add(&run.finish().unwrap());
    });
    assert_reaches("explorer, RetryMachine", &c, RETRY_KINDS);

    let mut c = Coverage::default();
    let policy = PollPolicy::default();
    enumerate(&poll_alphabet(), 3, |script| {
        let m = PollMachine::new(
            policy,
            request,
            SplitMix64::new(7),
            t0,
            Duration::from_secs(40),
        )
        .unwrap();
        let checker = PollChecker::new(&policy, &request, t0 + Duration::from_secs(40));
        let mut run = ScriptRunner::new(t0, m, checker);
        run.play(script).unwrap();
        c.add(&run.finish().unwrap());
    });
    assert_reaches("explorer, PollMachine", &c, POLL_KINDS);
}

#[test]
fn the_strategies_reach_all_kinds() {
    let t0 = origin();
    let mut retry = Coverage::default();
    let mut poll = Coverage::default();
    let mut runner = TestRunner::deterministic();
    for _ in 0..1_000 {
        let policy = strategies::retry_policy()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let request = strategies::request()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let timeout = strategies::timeout()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let script = strategies::script(0..40)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let m = RetryMachine::new(policy, request, SplitMix64::new(1), t0, timeout).unwrap();
        let checker = Checker::for_retry(&policy, &request).deadline(t0 + timeout);
        let mut run = ScriptRunner::new(t0, m, checker);
        run.play(&script).unwrap();
        retry.add(&run.finish().unwrap());

        let policy = strategies::poll_policy()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let request = strategies::poll_request()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let script = strategies::poll_script(0..80)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let m = PollMachine::new(policy, request, SplitMix64::new(1), t0, timeout).unwrap();
        let checker = PollChecker::new(&policy, &request, t0 + timeout);
        let mut run = ScriptRunner::new(t0, m, checker);
        run.play(&script).unwrap();
        poll.add(&run.finish().unwrap());
    }
    assert_reaches("strategies, RetryMachine", &retry, RETRY_KINDS);
    assert_reaches("strategies, PollMachine", &poll, POLL_KINDS);
}

/// Pseudo-random fuzzer inputs (no corpus: what the decoders reach from
/// nothing) of 64 to 2,048 bytes.
fn random_inputs(n: usize) -> impl Iterator<Item = Vec<u8>> {
    let mut rng = SplitMix64::new(23);
    (0..n).map(move |_| {
        use rand_core::Rng;
        let len = 64 + (rng.next_u64() % 1_984) as usize;
        let mut v = vec![0u8; len];
        for b in &mut v {
            *b = rng.next_u64() as u8;
        }
        v
    })
}

#[test]
fn the_fuzz_decoders_reach_all_kinds() {
    let mut retry = Coverage::default();
    let mut poll = Coverage::default();
    for data in random_inputs(2_000) {
        let case = RetryCase::decode(&data);
        if case.policy.validate().is_ok() {
            retry.add(&case.trace().unwrap());
        }
        let case = PollCase::decode(&data);
        if case.policy.validate().is_ok() {
            poll.add(&case.trace().unwrap());
        }
    }
    assert_reaches("fuzz decoders, RetryMachine", &retry, RETRY_KINDS);
    assert_reaches("fuzz decoders, PollMachine", &poll, POLL_KINDS);
}
