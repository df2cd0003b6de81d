//! `--redis`, `--redis-key-prefix`, `--fleet-size`: many `polite`
//! processes share one quota through Redis (SPEC §4.3, `polite-redis`).

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use polite_blocking::Config;
use polite_client::SharedFleet;
use polite_redis::{FleetOptions, RedisFleet};

use crate::tally::FleetRun;

/// The fleet options every command shares.
#[derive(Debug, Args)]
pub(crate) struct FleetArgs {
    /// Share the pace with every process that uses this Redis and key
    /// prefix (`redis://host:port/db`): --rate, cool-downs, a quota learnt
    /// from RateLimit headers, the adaptive rate and the retry budget are
    /// then the whole fleet's. If Redis does not answer, each process paces
    /// alone at 1/--fleet-size of the quota and says so once.
    #[arg(long = "redis", value_name = "URL", env = "POLITE_REDIS_URL", value_parser = redis_url)]
    pub(crate) redis: Option<String>,
    /// The prefix of polite's Redis keys (fleets with different prefixes
    /// share nothing).
    #[arg(
        long,
        value_name = "PREFIX",
        default_value = "polite:",
        env = "POLITE_REDIS_KEY_PREFIX"
    )]
    pub(crate) redis_key_prefix: String,
    /// How many processes share the quota (used only while Redis does not
    /// answer: each then sends at 1/N of it).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..),
        requires = "redis"
    )]
    pub(crate) fleet_size: u32,
    /// Trust only this CA certificate (PEM) for a rediss:// Redis, instead
    /// of the system's roots.
    #[cfg(feature = "redis-tls")]
    #[arg(
        long,
        value_name = "FILE",
        env = "POLITE_REDIS_CA_CERT",
        requires = "redis"
    )]
    pub(crate) redis_ca_cert: Option<std::path::PathBuf>,
}

/// Checks a Redis URL at parse time (a usage error, exit 2).
fn redis_url(s: &str) -> Result<String, String> {
    // This build's own answer: polite-redis may have TLS from elsewhere in
    // the dependency tree (features are unified), but this binary was built
    // without a way to trust a Redis certificate.
    #[cfg(not(feature = "redis-tls"))]
    if s.get(..9)
        .is_some_and(|p| p.eq_ignore_ascii_case("rediss://"))
    {
        return Err(format!(
            "TLS to Redis is not in this build: expected {SCHEMES}"
        ));
    }
    RedisFleet::check_url(s)
        .map(|()| s.to_owned())
        .map_err(|e| format!("{}: expected {SCHEMES}", with_cause(&e)))
}

/// `e` and what caused it (redis-rs says which part of a URL it could not
/// take: "Invalid database number", "Missing hostname"; none of its URL
/// messages quotes the URL, so no password is echoed).
fn with_cause(e: &dyn std::error::Error) -> String {
    match e.source() {
        Some(cause) => format!("{e} ({cause})"),
        None => e.to_string(),
    }
}

#[cfg(feature = "redis-tls")]
const SCHEMES: &str = "redis://host:port/db or rediss://host:port/db";
#[cfg(not(feature = "redis-tls"))]
const SCHEMES: &str = "redis://host:port/db (rediss:// needs polite built with feature redis-tls)";

/// The fleet for `url`, trusting `--redis-ca-cert` when given.
fn fleet(args: &FleetArgs, url: &str, options: FleetOptions) -> Result<RedisFleet, String> {
    #[cfg(feature = "redis-tls")]
    if let Some(path) = &args.redis_ca_cert {
        let pem =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        return RedisFleet::with_tls_root(url, options, &pem).map_err(|e| with_cause(&e));
    }
    let _ = args;
    RedisFleet::new(url, options).map_err(|e| with_cause(&e))
}

/// Puts the fleet `args` ask for into `config` (nothing without `--redis`),
/// and returns it, to watch what it does ([`Watch::new`]). A fleet that
/// cannot start (no thread) leaves the process pacing alone, saying so.
pub(crate) fn apply(args: &FleetArgs, config: &mut Config) -> Option<Arc<RedisFleet>> {
    let url = args.redis.as_ref()?;
    let options = FleetOptions {
        prefix: args.redis_key_prefix.clone(),
        size: args.fleet_size,
        ..FleetOptions::default()
    };
    match fleet(args, url, options) {
        Ok(fleet) => {
            let fleet = Arc::new(fleet);
            config.fleet = Some(SharedFleet::from_arc(Arc::clone(&fleet) as _));
            Some(fleet)
        }
        Err(e) => {
            eprintln!("polite: cannot share the pace through Redis ({e}); pacing alone");
            None
        }
    }
}

/// A command's fleet, as its summary and progress line tell it: what the
/// fleet was asked to keep (the configured rate is the whole fleet's; this
/// process's local fallback is its share) and how many sends went on the
/// fleet's pace or alone (the fleet's own counts).
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    redis: Arc<RedisFleet>,
    rate: Option<(u32, Duration)>,
    learns: bool,
    size: u32,
}

impl Watch {
    /// The watch of `redis`, for a client made with `config` (its final
    /// throttle, quota learning and adaptive rate).
    pub(crate) fn new(redis: Arc<RedisFleet>, config: &Config) -> Watch {
        Watch {
            rate: config.throttle.map(|t| (t.limit, t.window)),
            learns: config.learn_quota.is_some() || config.adaptive,
            size: config.fleet.as_ref().map_or(1, |f| f.size().max(1)),
            redis,
        }
    }

    /// Whether Redis answered its last round trip (the fleet's pace is in
    /// force).
    pub(crate) fn up(&self) -> bool {
        self.redis.is_up()
    }

    /// What the fleet did so far; `refused`: the last time this process
    /// paced alone, Redis refused it (rather than did not answer).
    pub(crate) fn run(&self, refused: bool) -> FleetRun {
        let stats = self.redis.stats();
        FleetRun {
            rate: self.rate,
            learns: self.learns,
            size: self.size,
            shared: stats.used,
            alone: stats.local,
            refused,
        }
    }
}
