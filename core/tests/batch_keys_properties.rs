//! Keyed batches (SPEC §4.2) against arbitrary scripts: items over three
//! keys, one `RateThrottle` per key, checked step by step by the
//! `BatchChecker` with `throttled_per_key` (rate and cool-down per key, no
//! head-of-line blocking across keys, no starving a free key), whose rules
//! are its own reading of SPEC, not the machine's code. The same for a
//! streaming keyed batch, fed its items as it asks for them (as the drive
//! loop does). Then every script over a small alphabet, exhaustively.

use std::time::{Duration, Instant, UNIX_EPOCH};

use polite_core::policy::{Jitter, MaxRetries};
use polite_core::record::AttemptRecord;
use polite_core::{
    Action, BatchMachine, BatchPolicy, Event, Machine, Method, Notice, Outcome, RateThrottle,
    RequestId, RequestInfo, Response, RetryClass, RetryPolicy, SplitMix64,
};
use polite_testing::strategies::{keyed_batch_script, keyed_requests};
use polite_testing::{
    BatchChecker, Input, Invariants, ScriptRunner, Settle, Trace, Violation, explore, origin,
};
use proptest::prelude::*;

const KEYS: usize = 3;

#[derive(Clone, Debug)]
struct Setup {
    policy: BatchPolicy,
    requests: Vec<RequestInfo>,
    limit: u32,
    window: Duration,
    seed: u64,
    timeout: Duration,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        (0u32..4, 0u32..3, 0u32..3),
        prop_oneof![Just(Jitter::None), Just(Jitter::Full)],
        (1u32..5, 0u32..3),
        keyed_requests(0..12, KEYS as u32),
        (1u32..4, 50u64..3_000),
        any::<u64>(),
        prop_oneof![0u64..20_000, 20_000u64..200_000],
    )
        .prop_map(
            |((rl, se, tr), jitter, (concurrency, max_restarts), requests, (limit, w), seed, t)| {
                let mut retry = RetryPolicy {
                    max_retries: MaxRetries {
                        rate_limited: rl,
                        server_error: se,
                        transport: tr,
                    },
                    ..RetryPolicy::default()
                };
                retry.backoff.jitter = jitter;
                Setup {
                    policy: BatchPolicy {
                        retry,
                        concurrency,
                        max_restarts,
                    },
                    requests,
                    limit,
                    window: Duration::from_millis(w),
                    seed,
                    timeout: Duration::from_millis(t),
                }
            },
        )
}

type Paces = [RateThrottle; KEYS];

fn machine(s: &Setup, t0: Instant) -> BatchMachine<SplitMix64, Paces> {
    let throttle = || RateThrottle::new(s.limit, s.window).unwrap();
    BatchMachine::new(
        s.policy,
        s.requests.clone(),
        SplitMix64::new(s.seed),
        [throttle(), throttle(), throttle()],
        t0,
        s.timeout,
    )
    .unwrap()
}

/// The checker, from the test's own facts: the requests, the policy, and
/// the deadline `t0 + timeout`.
fn checker(s: &Setup, t0: Instant) -> BatchChecker {
    BatchChecker::new(&s.policy, &s.requests, t0 + s.timeout).throttled_per_key(s.limit, s.window)
}

fn run(s: &Setup, script: &[Input]) -> Result<Trace, String> {
    let t0 = origin();
    let mut runner = ScriptRunner::new(t0, machine(s, t0), checker(s, t0))
        .wall_clock(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .settle(Settle::Answer(200));
    runner.play(script).map_err(|v| v.to_string())?;
    runner.finish().map_err(|v| v.to_string())
}

/// A streaming keyed batch fed `requests` as it asks for them, the way the
/// drive loop feeds one (before every action: items while it wants them,
/// then the end of the input), its items' outcomes gathered as they are
/// handed out. Items never fed (the batch ended first) take the batch's
/// own outcome, as the clients report them.
struct Streamed {
    batch: BatchMachine<SplitMix64, Paces>,
    requests: Vec<RequestInfo>,
    fed: usize,
    outcomes: Vec<Option<Outcome>>,
    /// [`BatchMachine::STREAM_WINDOW`] × concurrency: the most items it may
    /// hold at once (fed and not handed out).
    window: usize,
    /// Whether the input stays open after the last request, as a stream
    /// waiting for its next one (else it ends once every request is fed).
    open: bool,
}

impl Streamed {
    fn new(s: &Setup, t0: Instant) -> Streamed {
        let throttle = || RateThrottle::new(s.limit, s.window).unwrap();
        let batch = BatchMachine::streaming(
            s.policy,
            SplitMix64::new(s.seed),
            [throttle(), throttle(), throttle()],
            t0,
            s.timeout,
        )
        .unwrap();
        Streamed {
            batch,
            requests: s.requests.clone(),
            fed: 0,
            outcomes: vec![None; s.requests.len()],
            window: (BatchMachine::<SplitMix64, Paces>::STREAM_WINDOW * s.policy.concurrency)
                as usize,
            open: false,
        }
    }

    /// The same, its input never ending.
    fn open(mut self) -> Streamed {
        self.open = true;
        self
    }

    fn feed(&mut self) {
        while self.fed < self.requests.len() && self.batch.wants_items() > 0 {
            self.batch.push_item(self.requests[self.fed]);
            self.fed += 1;
        }
        if self.fed == self.requests.len() && !self.open {
            self.batch.close_items();
        }
        let held = self.fed - self.outcomes[..self.fed].iter().flatten().count();
        assert!(
            held <= self.window,
            "{held} items held, window {}",
            self.window
        );
    }

    fn gather(&mut self) {
        while let Some((item, outcome)) = self.batch.take_ended() {
            let slot = &mut self.outcomes[item as usize];
            assert!(slot.is_none(), "item {item} handed out twice");
            *slot = Some(outcome);
        }
    }
}

impl Machine for Streamed {
    fn handle(&mut self, now: Instant, event: Event<'_>) {
        self.batch.handle(now, event);
        self.gather();
    }
    fn poll_action(&mut self) -> Action {
        let action = loop {
            self.feed();
            let action = self.batch.poll_action();
            self.gather();
            // As the drive loop: a wait that made room for items (an item
            // ended while the batch looked for one to start) is not acted
            // on; the items come in first.
            if !(matches!(action, Action::SleepUntil(_))
                && self.fed < self.requests.len()
                && self.batch.wants_items() > 0)
            {
                break action;
            }
        };
        if let Action::Stop(end) = action {
            for slot in &mut self.outcomes[self.fed..] {
                slot.get_or_insert(end);
            }
        }
        action
    }
    fn take_record(&mut self) -> Option<AttemptRecord> {
        self.batch.take_record()
    }
    fn deadline(&self) -> Option<Instant> {
        Machine::deadline(&self.batch)
    }
    fn take_notice(&mut self) -> Option<Notice> {
        self.batch.take_notice()
    }
    fn class_of(&self, response: &Response<'_>) -> Option<RetryClass> {
        self.batch.class_of(response)
    }
}

impl Invariants<Streamed> for BatchChecker {
    fn input(&mut self, now: Instant, event: &Event<'_>) {
        BatchChecker::input(self, now, event);
    }
    fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        BatchChecker::output(self, now, action)
    }
    fn observe(&mut self, machine: &Streamed) -> Result<(), Violation> {
        self.outcomes(&machine.outcomes)
    }
}

/// `s` with at most a window of items: a streaming batch holds at most a
/// window of items not yet ended, so a key refused for long (a cool-down,
/// a retry's wait) whose items fill it holds back the items past it
/// whatever their keys (the price of bounded memory; the checker's
/// `head-of-line` rule knows every item from the start).
fn within_window(s: &Setup) -> Setup {
    let mut s = s.clone();
    let window = BatchMachine::<SplitMix64, Paces>::STREAM_WINDOW * s.policy.concurrency;
    s.requests.truncate(window as usize);
    s
}

fn run_streamed(s: &Setup, script: &[Input]) -> Result<Trace, String> {
    run_streamed_open(s, script, false)
}

/// [`run_streamed`], its input left open after the last request when
/// `open` (a stream waiting for its next one): only the deadline or a
/// cancel ends the batch, and the checker knows it.
fn run_streamed_open(s: &Setup, script: &[Input], open: bool) -> Result<Trace, String> {
    let t0 = origin();
    let s = &within_window(s);
    let (streamed, checker) = if open {
        (Streamed::new(s, t0).open(), checker(s, t0).input_open())
    } else {
        (Streamed::new(s, t0), checker(s, t0))
    };
    let mut runner = ScriptRunner::new(t0, streamed, checker)
        .wall_clock(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .settle(Settle::Answer(200));
    runner.play(script).map_err(|v| v.to_string())?;
    runner.finish().map_err(|v| v.to_string())
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(512),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Every keyed batch keeps SPEC's promises whatever the servers answer:
    /// the BatchChecker's rules (deadline, concurrency, budgets, restarts,
    /// Retry-After, outcomes) plus its per-key rules; and (SPEC §2.4) each
    /// attempt of every item yields exactly one record, answered or dropped
    /// in flight when the batch ends.
    #[test]
    fn keyed_batches_keep_every_promise(s in setup(), script in keyed_batch_script(0..60)) {
        let trace = run(&s, &script).map_err(TestCaseError::fail)?;
        prop_assert_eq!(trace.one_record_per_send(), Ok(()));
    }

    /// A streaming keyed batch, fed as it asks, keeps the same promises
    /// and holds no more items than its window.
    #[test]
    fn streaming_keyed_batches_keep_every_promise(s in setup(), script in keyed_batch_script(0..60)) {
        let trace = run_streamed(&s, &script);
        prop_assert!(trace.is_ok(), "{}", trace.unwrap_err());
    }

    /// A streaming keyed batch whose input does not end (a stream waiting
    /// for its next request) keeps the same promises, and the deadline
    /// ends it `TimedOut` whether or not an item is in progress then (the
    /// checker's `stop-outcome` with `input_open`).
    #[test]
    fn streaming_keyed_batches_waiting_for_input_keep_every_promise(
        s in setup(),
        script in keyed_batch_script(0..60),
    ) {
        let trace = run_streamed_open(&s, &script, true);
        prop_assert!(trace.is_ok(), "{}", trace.unwrap_err());
    }

    /// Same setup, same script: same trace.
    #[test]
    fn keyed_batches_are_reproducible(s in setup(), script in keyed_batch_script(0..40)) {
        prop_assert_eq!(run(&s, &script), run(&s, &script));
    }
}

/// A 429 with `Retry-After: 2` on the first send in flight, a 200 on the
/// next, a bare 429, a 503, a late answer, a short tick, and waking up.
fn alphabet() -> [Input; 8] {
    [
        Input::status(200),
        Input::status(200).pick(1),
        Input::status(429).retry_after("2"),
        Input::status(429).pick(1),
        Input::status(503),
        Input::status(200).late(),
        Input::Tick(Duration::from_millis(300)),
        Input::Wake,
    ]
}

#[test]
fn every_short_script_over_two_keys() {
    // A B A B B A, two in flight; each key 2 sends per second.
    let t0 = origin();
    let requests: Vec<_> = [0u32, 1, 0, 1, 1, 0]
        .iter()
        .zip(0..)
        .map(|(&slot, i)| RequestInfo::new(RequestId(i), Method::Get).with_pace_slot(slot))
        .collect();
    let s = Setup {
        policy: BatchPolicy {
            concurrency: 2,
            ..BatchPolicy::default()
        },
        requests,
        limit: 2,
        window: Duration::from_secs(1),
        seed: 3,
        timeout: Duration::from_secs(20),
    };
    let runner = ScriptRunner::new(t0, machine(&s, t0), checker(&s, t0))
        .wall_clock(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .settle(Settle::Answer(200))
        .recording(false);
    let depth = 5;
    let e = explore(runner, &alphabet(), depth).unwrap_or_else(|c| panic!("{c}"));
    eprintln!(
        "exhaustive keyed batch: {} scripts (length 0..={depth}), {} events; outcomes {:?}",
        e.scripts, e.events, e.outcomes
    );
    assert_eq!(e.full_length, 8u64.pow(depth as u32));
}
