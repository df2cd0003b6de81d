//! [`RedisFleet`]: a [`Fleet`] on one Redis, with its worker thread.

use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use polite_client::{Fleet, FleetBudget, FleetPace, FleetTerms, PaceKey};
use polite_core::Notice;
use polite_core::budget::RetryBucket;

use crate::backend::Backend;
use crate::pace::{RedisBudget, RedisPace};
use crate::state::{BudgetView, FleetStats, KeyState, Shared, Tuning};

/// How a [`RedisFleet`] behaves. Every field has a default
/// ([`FleetOptions::default`]); set what you need.
///
/// ```
/// use polite_redis::FleetOptions;
/// let o = FleetOptions { size: 8, ..FleetOptions::default() };
/// assert_eq!(o.prefix, "polite:");
/// assert_eq!(o.timeout.as_millis(), 200);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetOptions {
    /// Prepended to every key (`{prefix}{<pace key>}:log` and `:st`), so
    /// several fleets or applications share one Redis. Default `polite:`.
    pub prefix: String,
    /// How many processes share the quota: while Redis does not answer,
    /// each paces locally at `1 / size` of it. Default 1.
    pub size: u32,
    /// The longest one Redis call (connect, or a step) may take; an ask
    /// Redis has not answered for this long is answered locally. Default 200 ms.
    pub timeout: Duration,
    /// How long a leased permit may wait for its send; the fleet holds each
    /// grant this much longer than the window. Also how much later than
    /// the first slot that frees a window's refusal may name, so that the
    /// permits wanted then come in one round trip. Default 100 ms.
    pub lease: Duration,
    /// The most permits one round trip leases. Default 8.
    pub max_lease: u32,
    /// Added to every hold, for the server's clock and latency (as the
    /// local throttle's margin). Default 50 ms.
    pub margin: Duration,
    /// How often a fleet whose Redis failed tries again. Default 500 ms.
    pub retry_every: Duration,
    /// Idle keys expire on Redis after this long. Default 10 minutes.
    pub ttl: Duration,
    /// How long an ask without a lease is refused while the worker asks
    /// Redis (the refusal's instant). Default 2 ms.
    pub poll: Duration,
    /// Answers and returned permits ride with the next ask, or go alone
    /// after this long. Default 100 ms.
    pub flush_every: Duration,
}

impl Default for FleetOptions {
    fn default() -> Self {
        FleetOptions {
            prefix: "polite:".into(),
            size: 1,
            timeout: Duration::from_millis(200),
            lease: Duration::from_millis(100),
            max_lease: 8,
            margin: Duration::from_millis(50),
            retry_every: Duration::from_millis(500),
            ttl: Duration::from_secs(600),
            poll: Duration::from_millis(2),
            flush_every: Duration::from_millis(100),
        }
    }
}

/// What can go wrong making a [`RedisFleet`] (nothing later: a Redis that
/// does not answer makes the fleet pace locally, never an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// The URL is not a Redis URL redis-rs accepts.
    #[error("invalid Redis URL")]
    Url(#[source] redis::RedisError),
    /// An option is out of range.
    #[error("invalid fleet option: {0}")]
    Option(&'static str),
    /// The worker thread could not be started.
    #[error("cannot start the fleet's worker thread")]
    Thread(#[source] std::io::Error),
}

/// A fleet-wide pace on one Redis: put it in
/// [`Config::fleet`](polite_client::Config::fleet) of every process that
/// shares the quota. See the [crate docs](crate) for the design.
///
/// ```no_run
/// use polite_client::{Config, SharedFleet, Throttle};
/// use polite_redis::{FleetOptions, RedisFleet};
/// let fleet = RedisFleet::new("redis://127.0.0.1:6379/", FleetOptions { size: 8, ..Default::default() })?;
/// let config = Config {
///     throttle: Some(Throttle::per_second(20)), // for the whole fleet
///     fleet: Some(SharedFleet::new(fleet)),
///     ..Config::default()
/// };
/// # assert!(config.fleet.is_some());
/// # Ok::<(), polite_redis::FleetError>(())
/// ```
#[derive(Debug)]
pub struct RedisFleet {
    shared: Arc<Shared>,
    prefix: String,
    size: u32,
    /// The worker, and what tells that it has returned.
    worker: Mutex<Option<(JoinHandle<()>, Receiver<()>)>>,
}

impl RedisFleet {
    /// A fleet on the Redis at `url` (`redis://host:port/db`). Connects
    /// lazily, on its worker thread: a Redis that is down now makes the
    /// fleet pace locally until it answers.
    ///
    /// # Errors
    ///
    /// [`FleetError`] for a bad URL or option, or no thread.
    pub fn new(url: &str, options: FleetOptions) -> Result<RedisFleet, FleetError> {
        #[cfg(feature = "tls")]
        if url.starts_with("rediss:") {
            crate::tls::provider();
        }
        let client = redis::Client::open(url).map_err(FleetError::Url)?;
        Self::start(Backend::Single(client), options)
    }

    /// A fleet on a **Redis Cluster**, reached through any of `nodes`
    /// (`redis://host:port`): each pace key's state lives on the node of
    /// its hash slot (its two Redis keys share the hash tag
    /// `{<pace key>}`), so every step is still one atomic script on one
    /// node. Each call is bounded by [`FleetOptions::timeout`], without
    /// redis-rs's own retries (a failed step makes the fleet pace locally,
    /// as with one Redis). Instants are each node's `TIME`: keep the
    /// nodes' clocks in sync (NTP). Feature `cluster`.
    ///
    /// ```no_run
    /// use polite_redis::{FleetOptions, RedisFleet};
    /// let nodes = ["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"];
    /// let fleet = RedisFleet::cluster(&nodes, FleetOptions::default())?;
    /// assert!(fleet.is_up());
    /// # Ok::<(), polite_redis::FleetError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`FleetError::Url`] for a node URL redis-rs does not accept;
    /// otherwise as [`new`](Self::new).
    #[cfg(feature = "cluster")]
    pub fn cluster(nodes: &[&str], options: FleetOptions) -> Result<RedisFleet, FleetError> {
        let backend = crate::backend::cluster(nodes, options.timeout).map_err(FleetError::Url)?;
        Self::start(backend, options)
    }

    /// A fleet on the Redis at a `rediss://` `url` (TLS), trusting only
    /// `root_pem` (PEM certificates: your own CA, a self-signed server's
    /// certificate) instead of the system's roots. Feature `tls`.
    ///
    /// ```no_run
    /// use polite_redis::{FleetOptions, RedisFleet};
    /// let ca = std::fs::read("redis-ca.pem")?;
    /// let fleet = RedisFleet::with_tls_root("rediss://redis.internal:6380/", FleetOptions::default(), &ca)?;
    /// assert!(fleet.is_up());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new); [`FleetError::Url`] also for a URL that is
    /// not `rediss://` or a root that does not parse.
    #[cfg(feature = "tls")]
    pub fn with_tls_root(
        url: &str,
        options: FleetOptions,
        root_pem: &[u8],
    ) -> Result<RedisFleet, FleetError> {
        crate::tls::provider();
        let client = crate::tls::client(url, root_pem).map_err(FleetError::Url)?;
        Self::start(Backend::Single(client), options)
    }

    fn start(backend: Backend, options: FleetOptions) -> Result<RedisFleet, FleetError> {
        if options.timeout.is_zero() {
            return Err(FleetError::Option("timeout must be more than zero"));
        }
        if options.max_lease == 0 {
            return Err(FleetError::Option("max_lease must be at least 1"));
        }
        if options.poll.is_zero() {
            return Err(FleetError::Option("poll must be more than zero"));
        }
        let shared = Arc::new(Shared::new(Tuning {
            timeout: options.timeout,
            lease: options.lease,
            max_lease: options.max_lease,
            margin: options.margin,
            retry_every: options.retry_every,
            ttl: options.ttl.max(Duration::from_millis(1)),
            poll: options.poll,
            flush_every: options.flush_every,
            size: options.size.max(1),
        }));
        let for_worker = Arc::clone(&shared);
        let (done, finished) = std::sync::mpsc::channel();
        let worker = std::thread::Builder::new()
            .name("polite-redis".into())
            .spawn(move || crate::worker::run(&for_worker, &backend, done))
            .map_err(FleetError::Thread)?;
        Ok(RedisFleet {
            shared,
            prefix: options.prefix,
            size: options.size.max(1),
            worker: Mutex::new(Some((worker, finished))),
        })
    }

    /// Whether `url` is a Redis URL [`new`](Self::new) accepts (nothing is
    /// connected).
    ///
    /// ```
    /// use polite_redis::RedisFleet;
    /// assert!(RedisFleet::check_url("redis://127.0.0.1:6379/0").is_ok());
    /// assert!(RedisFleet::check_url("http://example.com/").is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// [`FleetError::Url`] when it is not.
    pub fn check_url(url: &str) -> Result<(), FleetError> {
        redis::Client::open(url).map(drop).map_err(FleetError::Url)
    }

    /// The Redis key base of a pace key: `{prefix}{<key>}` (the braces are
    /// a Redis Cluster hash tag: a key's two entries live on one node).
    ///
    /// ```no_run
    /// # use polite_redis::{FleetOptions, RedisFleet};
    /// let fleet = RedisFleet::new("redis://127.0.0.1/", FleetOptions::default()).unwrap();
    /// let key = polite_client::PaceKey::new("https://api.example.com:443");
    /// assert_eq!(fleet.redis_key(&key), "polite:{https://api.example.com:443}");
    /// ```
    #[must_use]
    pub fn redis_key(&self, key: &PaceKey) -> String {
        format!("{}{{{}}}", self.prefix, key.as_str())
    }

    /// Counters so far (round trips, failures, permits).
    #[must_use]
    pub fn stats(&self) -> FleetStats {
        self.shared.lock().stats
    }

    /// Whether Redis answered the last round trip.
    #[must_use]
    pub fn is_up(&self) -> bool {
        self.shared.lock().up
    }

    fn entry(&self, key: &PaceKey, f: impl FnOnce(&mut KeyState)) -> String {
        let name = self.redis_key(key);
        let mut st = self.shared.lock();
        let k = st.keys.entry(name.clone()).or_default();
        k.handles += 1;
        f(k);
        name
    }
}

impl Fleet for RedisFleet {
    fn join(&self, key: &PaceKey, terms: &FleetTerms) -> Box<dyn FleetPace> {
        let name = self.entry(key, |k| {
            let (limit, window) = terms
                .throttle
                .map_or((0, Duration::ZERO), |t| (t.limit, t.window));
            k.limit = limit;
            k.window = window;
            k.learn_max = terms.learn_quota.unwrap_or(0);
            k.adaptive = terms.adaptive;
        });
        Box::new(RedisPace {
            shared: Arc::clone(&self.shared),
            key: name,
        })
    }

    fn budget(&self, key: &PaceKey, bucket: RetryBucket) -> Option<Box<dyn FleetBudget>> {
        if bucket.capacity() == 0 {
            return None;
        }
        let name = self.entry(key, |k| {
            if k.budget.is_none() {
                k.budget = Some(BudgetView { bucket, pending: 0 });
            }
        });
        Some(Box::new(RedisBudget {
            shared: Arc::clone(&self.shared),
            key: name,
        }))
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn take_notice(&self) -> Option<Notice> {
        self.shared.lock().notices.pop_front()
    }
}

impl Drop for RedisFleet {
    /// Stops the worker after it has given back the unused permits and
    /// shared the last changes (one round trip per key), waiting for that
    /// at most the fleet's timeout: dropping a client on an async runtime's
    /// thread never holds it longer, and with Redis down not at all. A
    /// worker still talking then finishes on its own (each call bounded).
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        let worker = self
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((w, finished)) = worker {
            // Disconnected when the worker returns; a timeout detaches it.
            if finished.recv_timeout(self.shared.tuning.timeout)
                != Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            {
                let _ = w.join();
            }
        }
    }
}
