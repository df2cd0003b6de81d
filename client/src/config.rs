//! [`Config`]: what a [`Client`](crate::Client) applies to every call.

use std::time::Duration;

use polite_core::budget::RetryBucket;
use polite_core::policy::Backoff;
use polite_core::poll::TerminalStates;
use polite_core::ratelimit::RateLimitHeaders;
use polite_core::{BatchPolicy, PollPolicy, RetryPolicy};

use crate::classify::Classifier;
use crate::fleet::SharedFleet;
use crate::paces::PaceBy;
use crate::redirect::RedirectPolicy;

/// What a [`Client`](crate::Client) applies to every call.
///
/// ```
/// use polite_client::{Config, Throttle};
/// use std::time::Duration;
/// let c = Config {
///     timeout: Duration::from_secs(10),
///     throttle: Some(Throttle::new(20, Duration::from_secs(1))),
///     ..Config::default()
/// };
/// assert_eq!(c.wait.wait_param, "waitSeconds");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The retry rules for every attempt of every call (`send`, each poll
    /// of `wait`, each item of `batch`).
    pub retry: RetryPolicy,
    /// The budget of each call: its deadline is fixed when the call starts.
    /// Default 30 s.
    pub timeout: Duration,
    /// Whether and how far redirects are followed, inside each attempt
    /// (default: up to 10, a cross-origin hop drops every header the caller
    /// set); see [`RedirectPolicy`].
    pub redirects: RedirectPolicy,
    /// How `wait` polls a job: long poll first, then backoff; the terminal
    /// states; the long-poll query parameter.
    pub wait: WaitConfig,
    /// A fixed seed for jitter (reproducible runs); default: process entropy.
    pub seed: Option<u64>,
    /// Which calls share one pace (default: the calls to one origin; a 429
    /// from one API never holds back calls to another). See [`PaceBy`].
    pub pace_by: PaceBy,
    /// A client-side sliding-window throttle, one per pace (per origin by
    /// default). Default: none (the server's cool-downs, a quota learnt from
    /// its `RateLimit-Policy` and the adaptive rate pace the calls).
    pub throttle: Option<Throttle>,
    /// How many requests of one `batch` are in flight at once. Default 4.
    pub concurrency: u32,
    /// How often a batch restarts an item that ended `RateLimited` (inside
    /// the same deadline, after the server's time). Default 2.
    pub max_restarts: u32,
    /// Which rate-limit headers inform the pace (default: the IETF
    /// `RateLimit` / `RateLimit-Policy` fields; `X-RateLimit-*` opt-in).
    pub rate_limit_headers: RateLimitHeaders,
    /// With no `throttle` configured: learn one from the server's
    /// `RateLimit-Policy`, up to this many sends per window (the throttle's
    /// log is allocated once at this size). `None`: never learn. Default
    /// `Some(1000)`.
    pub learn_quota: Option<u32>,
    /// The retry budget (SPEC §2: a token bucket of retries, the AWS SDKs'
    /// "retry quota"), one per pace key like the pace: a retry withdraws
    /// 5 tokens after a 429 and 14 after any other failure; a success gives
    /// back what its last retry cost, or 1 when it needed none. On by
    /// default with 500 tokens, so a server that is down for good sees
    /// about 35 retries from this client and then one attempt per call
    /// until successes refill the bucket — instead of every call retrying
    /// to its own limit (reqwest 0.13 and the AWS SDKs also ship with a
    /// budget on). `None`: every retry the policy allows.
    ///
    /// Compared with gRPC's retry throttling (`maxTokens`, `tokenRatio`):
    /// gRPC takes one token per *failed attempt* and gives back
    /// `tokenRatio` per success, and refuses every retry while fewer than
    /// half the tokens are left; polite (like the AWS SDKs) takes a
    /// class-dependent cost per *retry* (a 429 costs less than a 5xx),
    /// refuses a retry only when its cost is no longer there, refunds a
    /// success's last retry in full, and keeps one bucket per pace key
    /// (per origin by default) rather than per channel. A first attempt is
    /// never refused by either.
    pub retry_budget: Option<RetryBucket>,
    /// The client's own reading of answers whose status does not tell
    /// (a 200 saying "busy", a 400 saying "throttled"), for every call;
    /// see [`Classifier`]. Default: none (statuses decide).
    pub classify: Option<Classifier>,
    /// Adapt the send rate to rate-limited answers when the server gives
    /// no quota (SPEC §4.1; the AWS SDKs' adaptive mode, see
    /// [`polite_core::adaptive`]): a 429 without hints cuts the rate every
    /// call of the client may use, successes grow it back. A configured
    /// `throttle` stays the ceiling; a quota learnt from `RateLimit-Policy`
    /// replaces the guess; a server that never answers 429 never sees the
    /// client slow down. Default `true`.
    pub adaptive: bool,
    /// Share every pace (and the retry budget) with other processes
    /// (SPEC §4.3): e.g. `polite_redis::RedisFleet` keeps them on Redis.
    /// The throttle, learnt quota and adaptive rate then count for the
    /// whole fleet; when the store does not answer, each process paces
    /// locally at the quota divided by [`Fleet::size`](crate::Fleet::size).
    /// Default: none (the pace is per process).
    pub fleet: Option<SharedFleet>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(30),
            redirects: RedirectPolicy::default(),
            wait: WaitConfig::default(),
            seed: None,
            pace_by: PaceBy::Origin,
            throttle: None,
            concurrency: 4,
            max_restarts: 2,
            rate_limit_headers: RateLimitHeaders::default(),
            learn_quota: Some(1000),
            retry_budget: Some(RetryBucket::default()),
            classify: None,
            adaptive: true,
            fleet: None,
        }
    }
}

impl Config {
    /// The batch policy `batch` runs.
    ///
    /// ```
    /// let c = polite_client::Config { concurrency: 8, ..Default::default() };
    /// assert_eq!(c.batch_policy().concurrency, 8);
    /// ```
    #[must_use]
    pub fn batch_policy(&self) -> BatchPolicy {
        BatchPolicy {
            retry: self.retry,
            concurrency: self.concurrency,
            max_restarts: self.max_restarts,
        }
    }

    /// The poll policy `wait` runs: [`wait`](Config::wait) with
    /// [`retry`](Config::retry) as its retry rules.
    ///
    /// ```
    /// let c = polite_client::Config::default();
    /// assert_eq!(c.poll_policy().retry, c.retry);
    /// assert_eq!(c.poll_policy().wait_param, c.wait.wait_param);
    /// ```
    #[must_use]
    pub fn poll_policy(&self) -> PollPolicy {
        let w = &self.wait;
        PollPolicy {
            retry: self.retry,
            long_poll_first: w.long_poll_first,
            max_long_poll: w.max_long_poll,
            wait_param: w.wait_param,
            min_long_poll_interval: w.min_long_poll_interval,
            backoff: w.backoff,
            terminal_states: w.terminal_states,
        }
    }
}

/// How `wait` polls a job (the poll half of [`PollPolicy`]; the retry half
/// is [`Config::retry`]). Defaults are [`PollPolicy::default`]'s.
///
/// ```
/// use polite_client::{Config, WaitConfig};
/// let config = Config {
///     wait: WaitConfig { long_poll_first: false, ..WaitConfig::default() },
///     ..Config::default()
/// };
/// assert!(!config.poll_policy().long_poll_first);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitConfig {
    /// Start in long-poll mode. Default `true`. With `false` the wait polls
    /// on the backoff schedule from the start and never sends the wait
    /// parameter.
    pub long_poll_first: bool,
    /// The longest wait one long poll asks the server for (whole seconds).
    /// Default 25 s. At least 1 s.
    pub max_long_poll: Duration,
    /// The name of the long-poll query parameter. Default `"waitSeconds"`.
    /// 1 to 64 ASCII letters, digits, `_`, `-` or `.`.
    pub wait_param: &'static str,
    /// The least time between the starts of two long polls (a server that
    /// ignores the parameter is not polled in a hot loop). Default 1 s.
    pub min_long_poll_interval: Duration,
    /// The backoff-mode schedule (default base 2 s, ×2, cap 15 s, ±20 %).
    pub backoff: Backoff,
    /// The states that end the wait (default
    /// [`TerminalStates::DEFAULT_NAMES`]: `passed`, `failed`, `done`, …).
    pub terminal_states: TerminalStates,
}

impl Default for WaitConfig {
    fn default() -> Self {
        let p = PollPolicy::default();
        WaitConfig {
            long_poll_first: p.long_poll_first,
            max_long_poll: p.max_long_poll,
            wait_param: p.wait_param,
            min_long_poll_interval: p.min_long_poll_interval,
            backoff: p.backoff,
            terminal_states: p.terminal_states,
        }
    }
}

/// A client-side sliding-window throttle: at most `limit` sends in any
/// `window`, shared by every call of the client.
///
/// ```
/// use polite_client::Throttle;
/// use std::time::Duration;
/// let t = Throttle::new(5, Duration::from_millis(250));
/// assert_eq!((t.limit, t.window), (5, Duration::from_millis(250)));
/// assert_eq!(Throttle::per_second(20), Throttle::new(20, Duration::from_secs(1)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttle {
    /// Sends allowed per window (at least 1).
    pub limit: u32,
    /// The sliding window (more than zero).
    pub window: Duration,
}

impl Throttle {
    /// At most `limit` sends in any `window`.
    #[must_use]
    pub const fn new(limit: u32, window: Duration) -> Throttle {
        Throttle { limit, window }
    }

    /// At most `limit` sends in any second.
    #[must_use]
    pub const fn per_second(limit: u32) -> Throttle {
        Throttle::new(limit, Duration::from_secs(1))
    }
}
