//! `keyed_batch`: a batch whose items go to several keys (origins), one
//! pace per key and optionally one retry budget per key, checked by
//! [`BatchChecker::throttled_per_key`] — the checker of the keyed-batch
//! properties (`core/tests/batch_keys_properties.rs`).

use std::time::Duration;

use arbitrary::Unstructured;

use super::{Case, Flavour, U, int, pick, script, settle};
use crate::script::{Input, Settle};
use crate::{BatchChecker, Violation, origin};
use polite_core::budget::{RetryBucket, RetryCosts};
use polite_core::policy::{Jitter, MaxRetries};
use polite_core::{
    BatchMachine, BatchPolicy, BudgetSet, Method, RateThrottle, RequestId, RequestInfo,
    RetryPolicy, SplitMix64,
};

/// At most this many keys (one `RateThrottle` each).
const MAX_KEYS: u64 = 4;

/// The retry budgets of a [`KeyedCase`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyedBudget {
    /// None: only the policy's per-class retry counts.
    None,
    /// One token bucket (capacity, tokens) shared by every key.
    Shared(u32, u32),
    /// One token bucket (capacity, tokens) per key: SPEC §4.3, each key's
    /// retries draw on its own origin's budget.
    PerKey(u32, u32),
}

/// A keyed batch: requests spread over `keys` pace slots, one
/// `RateThrottle` of `limit` per `window` per key (a `Vec<RateThrottle>`,
/// SPEC §4.2), a retry budget (none, shared, or per key), and an event
/// script, checked by [`BatchChecker::throttled_per_key`]: besides every
/// batch rule, `rate` and `cool-down` per key, `head-of-line` (never
/// waiting while an item of a plainly free key could go) and `starved-key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyedCase {
    /// The batch's policy.
    pub policy: BatchPolicy,
    /// How many keys (pace slots).
    pub keys: u32,
    /// The requests, each with its [`pace_slot`](RequestInfo::pace_slot)
    /// below `keys`.
    pub requests: Vec<RequestInfo>,
    /// Every key's throttle limit.
    pub limit: u32,
    /// Every key's throttle window.
    pub window: Duration,
    /// The jitter seed.
    pub seed: u64,
    /// The budget.
    pub timeout: Duration,
    /// The retry budgets.
    pub budget: KeyedBudget,
    /// How the batch is brought to its end after its script.
    pub settle: Settle,
    /// The script.
    pub script: Vec<Input>,
}

fn keyed_policy(u: U<'_, '_>) -> BatchPolicy {
    let mut retry = RetryPolicy {
        max_retries: MaxRetries {
            rate_limited: int(u, 0..=3) as u32,
            server_error: int(u, 0..=2) as u32,
            transport: int(u, 0..=2) as u32,
        },
        ..RetryPolicy::default()
    };
    retry.backoff.jitter = match int(u, 0..=2) {
        0 => Jitter::Full,
        _ => Jitter::None,
    };
    retry.retry_after.min = Duration::from_millis(pick(u, &[1_000, 1, 100]));
    BatchPolicy {
        retry,
        concurrency: int(u, 1..=5) as u32,
        max_restarts: int(u, 0..=2) as u32,
    }
}

impl Case for KeyedCase {
    fn decode(data: &[u8]) -> KeyedCase {
        let u = &mut Unstructured::new(data);
        let policy = keyed_policy(u);
        let keys = int(u, 1..=MAX_KEYS) as u32;
        let requests = (0..int(u, 0..=12))
            .map(|i| {
                let method = if int(u, 0..=4) == 0 {
                    Method::Post
                } else {
                    Method::Get
                };
                let slot = int(u, 0..=u64::from(keys) - 1) as u32;
                RequestInfo::new(RequestId(i), method).with_pace_slot(slot)
            })
            .collect();
        let limit = int(u, 1..=4) as u32;
        let window = Duration::from_millis(match int(u, 0..=3) {
            0 => int(u, 1..=3_000),
            _ => pick(u, &[1_000, 250, 2_000]),
        });
        let seed = u.arbitrary().unwrap_or(0);
        let timeout = Duration::from_millis(match int(u, 0..=1) {
            0 => int(u, 0..=20_000),
            _ => int(u, 20_000..=200_000),
        });
        let budget = match int(u, 0..=3) {
            0 | 1 => KeyedBudget::None,
            which => {
                let capacity = pick(u, &[20, 0, 5, 10, 500]);
                let tokens = int(u, 0..=u64::from(capacity)) as u32;
                if which == 2 {
                    KeyedBudget::PerKey(capacity, tokens)
                } else {
                    KeyedBudget::Shared(capacity, tokens)
                }
            }
        };
        let settle = settle(u);
        let script = script(u, Flavour::Batch);
        KeyedCase {
            policy,
            keys,
            requests,
            limit,
            window,
            seed,
            timeout,
            budget,
            settle,
            script,
        }
    }

    #[inline]
    fn check(&self) -> Result<(), Violation> {
        let invalid = |e: polite_core::policy::PolicyError| Violation {
            rule: "valid-policy",
            detail: e.to_string(),
        };
        let t0 = origin();
        let throttle = RateThrottle::new(self.limit, self.window).map_err(invalid)?;
        let paces = vec![throttle; self.keys as usize];
        let b = BatchMachine::new(
            self.policy,
            self.requests.clone(),
            SplitMix64::new(self.seed),
            paces,
            t0,
            self.timeout,
        )
        .map_err(invalid)?;
        // The checker from the case's own facts, not the machine's: the
        // requests, the policy and the deadline t0 + timeout.
        let c = BatchChecker::new(&self.policy, &self.requests, t0 + self.timeout)
            .throttled_per_key(self.limit, self.window);
        let bucket = |capacity, tokens| {
            RetryBucket::new(capacity, RetryCosts::default()).with_tokens(tokens)
        };
        match self.budget {
            KeyedBudget::None => self.play(b, c),
            KeyedBudget::Shared(capacity, tokens) => {
                self.play(b.with_budget(bucket(capacity, tokens)), c)
            }
            KeyedBudget::PerKey(capacity, tokens) => {
                let budgets = vec![bucket(capacity, tokens); self.keys as usize];
                self.play(b.with_budget(budgets), c)
            }
        }
    }

    /// Out of line, here (see [`Case::dispose`]); the script's buffers
    /// go back to `spare` for the next cases.
    #[inline(never)]
    fn dispose(self) {
        super::spare::recycle_script(self.script);
    }
}

impl KeyedCase {
    /// The machine is built here, in the fuzz target (its code keeps its
    /// coverage counters); the runner is `batch_run::play`'s.
    #[inline]
    fn play<B: BudgetSet>(
        &self,
        mut b: BatchMachine<SplitMix64, Vec<RateThrottle>, B>,
        c: BatchChecker,
    ) -> Result<(), Violation> {
        super::batch_run::play(&mut b, c, self.settle, &self.script)
    }
}
