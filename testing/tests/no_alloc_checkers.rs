//! The checkers allocate nothing per step: a counting global allocator
//! (per thread, like core/tests/no_alloc.rs) around every call the script
//! runner makes into a checker (`input`, `output`, `notice`, `observe`),
//! after the checker is built, over happy-path scripts of every machine:
//! `Checker` (a `RetryMachine`), `PollChecker` (long poll and backoff
//! mode), `ThrottleChecker` (grants, refusals, cool-downs), `BatchChecker`
//! (unpaced, and `throttled` by one `RateThrottle`) and the keyed
//! `BatchChecker::throttled_per_key` (one `RateThrottle` per key). The fuzz
//! targets and the explorer run these checkers at every step, so an
//! allocation there is paid millions of times; formatting belongs on the
//! failure path only.
//!
//! Only the checkers are counted: the machines have their own test
//! (core/tests/no_alloc.rs), and the runner builds a `Response` per answer
//! (its rate-limit headers live in a fixed array, no heap either).
//!
//! `unsafe`: a `GlobalAlloc` impl must be `unsafe impl`; it forwards to the
//! system allocator and counts, as in core/tests/no_alloc.rs.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use polite_core::policy::MaxRetries;
use polite_core::{
    Action, BatchMachine, BatchPolicy, Event, Method, Notice, PollMachine, PollPolicy,
    RateThrottle, RequestId, RequestInfo, RetryMachine, RetryPolicy, SplitMix64,
    TransportErrorKind,
};
use polite_testing::{
    BatchChecker, Checker, Input, Invariants, PollChecker, ScriptRunner, Settle, ThrottleChecker,
    Violation, origin,
};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    /// Allocations inside checker calls, and checker calls, on this thread.
    static IN_CHECKER: Cell<u64> = const { Cell::new(0) };
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call unchanged to `System`; the counter is a
// thread-local `Cell` with const initialisation, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` as one checker call: counts it, and the allocations it made.
fn counted<T>(f: impl FnOnce() -> T) -> T {
    let before = ALLOCS.with(Cell::get);
    let out = f();
    let n = ALLOCS.with(Cell::get) - before;
    IN_CHECKER.with(|c| c.set(c.get() + n));
    CALLS.with(|c| c.set(c.get() + 1));
    out
}

/// Resets the counts; returns (allocations in checker calls, calls) since
/// the last reset.
fn take_counts() -> (u64, u64) {
    (
        IN_CHECKER.with(|c| c.replace(0)),
        CALLS.with(|c| c.replace(0)),
    )
}

/// A checker whose every call is counted.
struct Counted<C>(C);

impl<M: ?Sized, C: Invariants<M>> Invariants<M> for Counted<C> {
    fn input(&mut self, now: Instant, event: &Event<'_>) {
        counted(|| self.0.input(now, event));
    }
    fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        counted(|| self.0.output(now, action))
    }
    fn notice(&mut self, notice: Notice) -> Result<(), Violation> {
        counted(|| self.0.notice(notice))
    }
    fn observe(&mut self, machine: &M) -> Result<(), Violation> {
        counted(|| self.0.observe(machine))
    }
}

/// Plays `script` `rounds` times over `machine` under `checker` (built
/// before counting starts), settles, and asserts that no checker call
/// allocated. Returns the number of checker calls.
fn assert_no_checker_allocation<M, C>(
    what: &str,
    machine: M,
    checker: C,
    script: &[Input],
    rounds: usize,
) -> u64
where
    M: polite_core::Machine,
    C: Invariants<M>,
{
    let mut run = ScriptRunner::new(origin(), machine, Counted(checker))
        .settle(Settle::Answer(200))
        .recording(false);
    let _ = take_counts();
    for _ in 0..rounds {
        run.play(script).unwrap_or_else(|v| panic!("{what}: {v}"));
    }
    run.finish().unwrap_or_else(|v| panic!("{what}: {v}"));
    let (allocs, calls) = take_counts();
    assert!(
        calls > 20 * rounds as u64,
        "{what}: only {calls} checker calls"
    );
    assert_eq!(
        allocs, 0,
        "{what}: {allocs} allocations in {calls} checker calls"
    );
    calls
}

/// Budgets large enough that no machine stops for lack of retries.
fn roomy() -> RetryPolicy {
    RetryPolicy {
        max_retries: MaxRetries {
            rate_limited: 10_000,
            server_error: 10_000,
            transport: 10_000,
        },
        ..RetryPolicy::default()
    }
}

/// Failures a retrying machine retries: 503, 429 with a delay, an
/// HTTP-date and a zero-padded value, a reset connection, each waited out.
fn retried() -> Vec<Input> {
    vec![
        Input::status(503),
        Input::Wake,
        Input::status(429).retry_after("1"),
        Input::Wake,
        Input::status(503)
            .retry_after("Sun, 06 Nov 1994 08:49:37 GMT")
            .date("Sun, 06 Nov 1994 08:49:35 GMT"),
        Input::Wake,
        Input::status(429).retry_after(
            "000000000000000000000000000000000000000000000000000000000000000000000002",
        ),
        Input::Wake,
        Input::transport(TransportErrorKind::Reset),
        Input::Wake,
        Input::Tick(Duration::from_millis(1)),
        Input::status(200).late(),
        Input::Wake,
    ]
}

#[test]
fn the_counter_counts() {
    let _ = take_counts();
    let v = counted(|| vec![1u8; 16]);
    assert_eq!(take_counts(), (1, 1));
    drop(v);
}

/// The counting wrapper sees an allocating checker: the test above can
/// fail.
#[test]
fn an_allocating_checker_is_caught() {
    struct Formats(Vec<String>);
    impl<M: ?Sized> Invariants<M> for Formats {
        fn input(&mut self, now: Instant, _event: &Event<'_>) {
            self.0.push(format!("{now:?}"));
        }
        fn output(&mut self, _now: Instant, _action: &Action) -> Result<(), Violation> {
            Ok(())
        }
    }
    let t0 = origin();
    let m = RetryMachine::new(
        roomy(),
        RequestInfo::new(RequestId(1), Method::Get),
        SplitMix64::new(1),
        t0,
        Duration::from_secs(1_000_000),
    )
    .unwrap();
    let result = std::panic::catch_unwind(|| {
        assert_no_checker_allocation("formats", m, Formats(Vec::new()), &retried(), 5)
    });
    let message = result.expect_err("an allocating checker passed");
    let text = message
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    assert!(text.contains("allocations in"), "{text}");
}

#[test]
fn retry_checker_allocates_nothing_per_step() {
    let t0 = origin();
    let policy = roomy();
    let request = RequestInfo::new(RequestId(1), Method::Get);
    let timeout = Duration::from_secs(1_000_000);
    let m = RetryMachine::new(policy, request, SplitMix64::new(1), t0, timeout).unwrap();
    let checker = Checker::for_retry(&policy, &request).deadline(t0 + timeout);
    let calls = assert_no_checker_allocation("Checker", m, checker, &retried(), 50);
    eprintln!("Checker: {calls} calls, no allocation");
}

#[test]
fn poll_checker_allocates_nothing_per_step() {
    let t0 = origin();
    let timeout = Duration::from_secs(1_000_000);
    let request = RequestInfo::new(RequestId(1), Method::Get);
    for long_poll_first in [true, false] {
        let mut policy = PollPolicy {
            retry: roomy(),
            long_poll_first,
            ..PollPolicy::default()
        };
        policy.min_long_poll_interval = Duration::ZERO;
        let m = PollMachine::new(policy, request, SplitMix64::new(1), t0, timeout).unwrap();
        let checker = PollChecker::new(&policy, &request, t0 + timeout);
        let mut script = vec![
            Input::status(200).state("running"),
            Input::Wake,
            Input::status(200).state("queued"),
            Input::Wake,
        ];
        script.extend(retried());
        let calls = assert_no_checker_allocation("PollChecker", m, checker, &script, 50);
        eprintln!("PollChecker (long_poll_first {long_poll_first}): {calls} calls, no allocation");
    }
}

#[test]
fn throttle_checker_allocates_nothing_per_call() {
    let t0 = origin();
    for limit in [1, 3, 10] {
        let mut throttle = RateThrottle::new(limit, Duration::from_millis(400)).unwrap();
        let mut checker = ThrottleChecker::for_throttle(&throttle);
        let _ = take_counts();
        let mut now = t0;
        let (mut granted, mut refused) = (0u32, 0u32);
        for i in 0..2_000u64 {
            now += Duration::from_millis(7 + i % 50);
            if i % 97 == 0 {
                let until = now + Duration::from_millis(300);
                throttle.cool_down(until);
                counted(|| checker.cool_down(until));
            }
            let answer = throttle.acquire(now);
            match answer {
                Ok(()) => granted += 1,
                Err(_) => refused += 1,
            }
            counted(|| checker.acquire(now, answer)).unwrap();
        }
        let (allocs, calls) = take_counts();
        assert!(
            granted > 100 && refused > 100,
            "{granted} granted, {refused} refused"
        );
        assert_eq!(
            allocs, 0,
            "limit {limit}: {allocs} allocations in {calls} calls"
        );
    }
}

fn batch_requests(n: u64, keys: u32) -> Vec<RequestInfo> {
    (0..n)
        .map(|i| {
            RequestInfo::new(RequestId(i), Method::Get).with_pace_slot((i % u64::from(keys)) as u32)
        })
        .collect()
}

fn batch_policy() -> BatchPolicy {
    BatchPolicy {
        retry: roomy(),
        concurrency: 4,
        max_restarts: 3,
    }
}

/// Answers for a batch: mostly successes, some retried failures, with
/// waits between.
fn batch_script() -> Vec<Input> {
    vec![
        Input::status(200),
        Input::status(503).pick(1),
        Input::status(200),
        Input::WakeIfIdle,
        Input::status(429).retry_after("1").pick(2),
        Input::status(200),
        Input::Wake,
        Input::transport(TransportErrorKind::Reset),
        Input::status(200).pick(3),
        Input::Tick(Duration::from_millis(30)),
        Input::status(200),
        Input::Wake,
        Input::status(200).late(),
        Input::Wake,
    ]
}

#[test]
fn batch_checkers_allocate_nothing_per_step() {
    let t0 = origin();
    let timeout = Duration::from_secs(1_000_000);
    let policy = batch_policy();
    let requests = batch_requests(400, 1);
    let deadline = t0 + timeout;

    let unpaced = BatchMachine::new(
        policy,
        requests.clone(),
        SplitMix64::new(1),
        polite_core::pace::Unpaced,
        t0,
        timeout,
    )
    .unwrap();
    let checker = BatchChecker::new(&policy, &requests, deadline);
    let calls = assert_no_checker_allocation("BatchChecker", unpaced, checker, &batch_script(), 30);
    eprintln!("BatchChecker (unpaced): {calls} calls, no allocation");

    let (limit, window) = (3, Duration::from_millis(500));
    let throttle = RateThrottle::new(limit, window).unwrap();
    let paced = BatchMachine::new(
        policy,
        requests.clone(),
        SplitMix64::new(1),
        throttle,
        t0,
        timeout,
    )
    .unwrap();
    let checker = BatchChecker::new(&policy, &requests, deadline).throttled(limit, window);
    let calls = assert_no_checker_allocation(
        "BatchChecker::throttled",
        paced,
        checker,
        &batch_script(),
        30,
    );
    eprintln!("BatchChecker::throttled: {calls} calls, no allocation");
}

#[test]
fn keyed_batch_checker_allocates_nothing_per_step() {
    let t0 = origin();
    let timeout = Duration::from_secs(1_000_000);
    let policy = batch_policy();
    let keys = 3;
    let requests = batch_requests(400, keys);
    let (limit, window) = (2, Duration::from_millis(300));
    let paces = vec![RateThrottle::new(limit, window).unwrap(); keys as usize];
    let b = BatchMachine::new(
        policy,
        requests.clone(),
        SplitMix64::new(1),
        paces,
        t0,
        timeout,
    )
    .unwrap();
    let checker =
        BatchChecker::new(&policy, &requests, t0 + timeout).throttled_per_key(limit, window);
    let calls = assert_no_checker_allocation(
        "BatchChecker::throttled_per_key",
        b,
        checker,
        &batch_script(),
        30,
    );
    eprintln!("BatchChecker::throttled_per_key: {calls} calls, no allocation");
}
