//! # polite-bench
//!
//! The macro half of polite's performance evidence (the micro half is the
//! criterion benches of `polite-core`): real requests on loopback against
//! the lab, polite's adapters side by side with the code a user would write
//! without polite (reqwest + a semaphore, `backon` retry loops, raw reqwest
//! and ureq calls), every number a median of runs made in the same process
//! at the same time, with the ratio to the peer and to the limit.
//!
//! Run a suite with `cargo run --release -p polite-bench -- <suite>`; the
//! suites, their sizes and what they print are described in `BENCHMARKS.md`
//! at the repository root. `--smoke` runs every suite at a tiny size (the
//! workspace test does that, in seconds).
//!
//! Only `127.0.0.1` is ever bound or connected to, and every request loop is
//! bounded in count and in time.
#![forbid(unsafe_code)]

/// The README's Rust blocks, compiled (and `no_run` ones not run) as
/// doctests, so the front door's programs keep building.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

pub mod batch_scale;
pub mod cancel;
pub mod deadline;
pub mod fleet;
pub mod instructions;
pub mod nohints;
pub mod overhead;
pub mod poll;
pub mod proc;
pub mod quota;
pub mod scale;
pub mod stacks;
pub mod stats;
pub mod tls;

use std::time::Duration;

use bytes::Bytes;
use polite_lab::{Lab, LabConfig, LabHandle};

/// How big a run is: the real measurement, or a smoke test of the harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// The sizes BENCHMARKS.md quotes.
    Full,
    /// Tiny sizes: checks that the harness works, measures nothing.
    Smoke,
}

impl Size {
    /// `full` in a real run, `smoke` in a smoke test.
    #[must_use]
    pub fn pick<T>(self, full: T, smoke: T) -> T {
        match self {
            Size::Full => full,
            Size::Smoke => smoke,
        }
    }
}

/// Starts a lab (panics with the reason if it cannot: a benchmark without
/// its server has nothing to say).
///
/// # Panics
///
/// When the lab cannot bind 127.0.0.1 or start its thread.
#[must_use]
pub fn lab(config: LabConfig) -> LabHandle {
    match Lab::start(config) {
        Ok(lab) => lab,
        Err(e) => panic!("cannot start the lab: {e}"),
    }
}

/// `GET url` with an empty body, as polite's adapters take it.
///
/// # Panics
///
/// For a URL `http` cannot parse (the harness only builds lab URLs).
#[must_use]
pub fn get(url: &str) -> http::Request<Bytes> {
    match http::Request::get(url).body(Bytes::new()) {
        Ok(r) => r,
        Err(e) => panic!("bad URL {url}: {e}"),
    }
}

/// A multi-thread tokio runtime with two workers (the machine has two cores).
///
/// # Panics
///
/// When the runtime cannot be built.
#[must_use]
pub fn tokio_runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build a tokio runtime: {e}"),
    }
}

/// A current-thread tokio runtime (for sequential latency loops).
///
/// # Panics
///
/// When the runtime cannot be built.
#[must_use]
pub fn tokio_current_thread() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build a tokio runtime: {e}"),
    }
}

/// A plain reqwest client, as both the raw peers and polite's transport use it.
///
/// # Panics
///
/// When reqwest cannot build a client (no TLS roots, ...).
#[must_use]
pub fn reqwest_client() -> reqwest::Client {
    match reqwest::Client::builder().build() {
        Ok(c) => c,
        Err(e) => panic!("cannot build a reqwest client: {e}"),
    }
}

/// The ureq peer's agent: ureq's own connectors (its `TcpConnector`, whose
/// waits are socket timeouts), the pool and status settings of the agent
/// polite-blocking uses by default, and a resolver that answers an IP
/// address itself (as polite-blocking's default agent does: ureq's own
/// resolver spawns a thread per request to resolve even `127.0.0.1` when a
/// global timeout is set, which would make the peer pay for a thread that
/// no user of an IP address needs).
#[must_use]
pub fn ureq_agent() -> ureq::Agent {
    let config = polite_blocking::UreqTransport::default_agent()
        .config()
        .clone();
    ureq::Agent::with_parts(
        config,
        ureq::unversioned::transport::DefaultConnector::default(),
        IpResolver::default(),
    )
}

/// The ureq peer's resolver: an IP address is its own answer; anything else
/// goes to ureq's `DefaultResolver`.
#[derive(Debug, Default)]
struct IpResolver(ureq::unversioned::resolver::DefaultResolver);

impl ureq::unversioned::resolver::Resolver for IpResolver {
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let host = uri.host().unwrap_or("");
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port = uri.port_u16().or(match uri.scheme_str() {
            Some("https") => Some(443),
            Some("http") => Some(80),
            _ => None,
        });
        match (host.parse::<std::net::IpAddr>(), port) {
            (Ok(ip), Some(port)) => {
                let mut addrs = self.empty();
                addrs.push(std::net::SocketAddr::new(ip, port));
                Ok(addrs)
            }
            _ => self.0.resolve(uri, config, timeout),
        }
    }
}

/// Milliseconds as `f64`.
#[must_use]
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Signed milliseconds from `b` to `a` (`a - b`).
#[must_use]
pub fn signed_ms(a: std::time::Instant, b: std::time::Instant) -> f64 {
    if a >= b { ms(a - b) } else { -ms(b - a) }
}
