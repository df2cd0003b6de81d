//! Keyed batches (SPEC §4.2) against arbitrary scripts: items over three
//! keys, one `RateThrottle` per key, checked step by step by the
//! `BatchChecker` with `throttled_per_key` (rate and cool-down per key, no
//! head-of-line blocking across keys, no starving a free key), whose rules
//! are its own reading of SPEC, not the machine's code. Then every script
//! over a small alphabet, exhaustively.

use std::time::{Duration, Instant, UNIX_EPOCH};

use polite_core::policy::{Jitter, MaxRetries};
use polite_core::{
    BatchMachine, BatchPolicy, Method, RateThrottle, RequestId, RequestInfo, RetryPolicy,
    SplitMix64,
};
use polite_testing::strategies::{keyed_batch_script, keyed_requests};
use polite_testing::{BatchChecker, Input, ScriptRunner, Settle, Trace, explore, origin};
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
    /// Retry-After, outcomes) plus its per-key rules.
    #[test]
    fn keyed_batches_keep_every_promise(s in setup(), script in keyed_batch_script(0..60)) {
        let trace = run(&s, &script);
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
