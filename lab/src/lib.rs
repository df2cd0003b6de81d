//! `polite-lab`: a real HTTP/1.1 server to show polite's claims against, not a mock.
//!
//! [`Lab::start`] binds `127.0.0.1` (port 0 by default), serves on its own
//! thread with its own single-threaded tokio runtime, and hands back a
//! [`LabHandle`]. Because nothing runs on the caller's thread, a lab works the
//! same from blocking code, async-std, smol, and from inside a tokio runtime.
//! Dropping the handle stops the server, aborting requests that hang or long
//! poll; the drop returns within about a second whatever the clients do.
//!
//! # Endpoints
//!
//! | request | answer |
//! |---|---|
//! | `POST /runs` | `201 {"id":"run-N","status":"running"}`, a job that turns [`LabConfig::run_final_state`] after [`LabConfig::run_duration`] |
//! | `GET /runs/{id}` | `200 {"id":..,"status":"running"\|"passed"\|"failed"\|"cancelled"}`, 404 for an unknown id |
//! | `GET /runs/{id}?waitSeconds=N` | long poll: held until the job is terminal (answered at that instant) or N seconds pass (capped by [`LabConfig::max_wait`]) |
//! | `GET\|PUT\|DELETE /items/{k}` | `200 {"item":"k"}` |
//! | `POST /items/{k}` | `201 {"item":"k"}` |
//! | `GET /bytes/{n}` | `200`, `n` bytes of `application/octet-stream` (n ≤ 16 MiB; 400 otherwise), served from one shared buffer — for batches of large bodies |
//! | any method `/redirect?to=URL[&status=N]` | `N` (301, 302, 303, 307, 308; default 302) with `Location: URL`, for redirect tests (e.g. from a TLS lab to a plain one) |
//! | anything else | 404 (405 for a known path with another method) |
//!
//! `waitSeconds` rules: when long polling is off
//! ([`LabConfig::long_poll`]`(false)`), any `waitSeconds` gets
//! `400 {"code":"VALIDATION_ERROR","message":"unknown parameter waitSeconds"}`.
//! When it is on, a value that is not 1 to 9 ASCII digits (a sign, a
//! fraction, spaces, empty) also gets a 400 `VALIDATION_ERROR` ("invalid
//! waitSeconds ..."), the first `waitSeconds` in the query counts, and other
//! parameters are ignored. The query is parsed with `form_urlencoded`, which
//! never fails on garbage.
//!
//! # Order of processing
//!
//! Every request is logged at arrival, its body is read (up to 1 MiB), then:
//! 1. **quotas** ([`Quota`]): a request over any matching quota gets 429 with a
//!    Retry-After in [`RetryAfterStyle`] (the true time until the window frees,
//!    rounded up to whole seconds, at least 1, unless
//!    [`LabConfig::fixed_retry_after`]); refused requests do not count unless
//!    [`LabConfig::count_refused`]. Rate-limit headers, when switched on, are
//!    on every response of a quota'd path.
//! 2. **faults** ([`Fault`]), rule by rule in the configured order: slow
//!    responses wait, and the first script step, random failure, reset or
//!    hang that applies decides. A script's counter counts the requests that
//!    reach its rule (not those refused by a quota), per distinct path.
//! 3. the **endpoint**.
//!
//! Every response carries `Date` (skewed by [`LabConfig::date_skew_secs`];
//! HTTP-date Retry-After values use the same skewed clock) and
//! `Content-Type: application/json`.
//!
//! # The request log
//!
//! [`LabHandle::log`] returns a snapshot of [`LogEntry`]s in arrival order;
//! [`LogStats`] answers the usual questions (429s, peak in flight, requests
//! per path or job, arrival times). Header values are never stored.
//!
//! # Conformance
//!
//! [`conformance`] holds the scenarios every adapter runs with its own client.
//!
//! # Example
//!
//! ```
//! use std::io::{Read, Write};
//! use std::time::Duration;
//! use polite_lab::{Lab, LabConfig, LogStats, Quota};
//!
//! let lab = Lab::start(LabConfig::default().quota(Quota::fixed(1, Duration::from_secs(60))))?;
//! for _ in 0..2 {
//!     let mut s = std::net::TcpStream::connect(lab.addr())?;
//!     s.write_all(b"GET /items/a HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n")?;
//!     let mut answer = String::new();
//!     s.read_to_string(&mut answer)?;
//! }
//! let log = lab.log();
//! assert_eq!(log.statuses(), [Some(200), Some(429)]);
//! assert_eq!(lab.url("/items/a"), format!("http://{}/items/a", lab.addr()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod config;
pub mod conformance;
pub mod hostile;
mod log;
pub mod nginx;
mod quota;
pub mod redis;
mod rng;
#[cfg(feature = "runner")]
pub mod runner;
mod server;
#[cfg(feature = "tls")]
mod tls;
mod wire;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use config::{
    Fault, FaultRule, JobClock, JobSpec, JobState, LabConfig, PathMatch, Quota, RetryAfter,
    RetryAfterStyle, Step, WindowKind, parse_script,
};
pub use log::{Disposition, LogEntry, LogStats};
pub use wire::format_retry_after;

use server::Shared;

/// Why a lab could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LabError {
    /// The configuration is inconsistent (see [`LabConfig::validate`]).
    #[error("invalid lab config: {0}")]
    Config(String),
    /// Binding 127.0.0.1 failed (e.g. the port is taken).
    #[error("cannot bind 127.0.0.1:{port}: {source}")]
    Bind {
        /// The port asked for (0: any).
        port: u16,
        /// The OS error.
        source: std::io::Error,
    },
    /// The lab's thread or runtime could not be set up.
    #[error("cannot start the lab's runtime: {0}")]
    Runtime(std::io::Error),
}

/// The entry point: [`Lab::start`].
#[derive(Debug)]
pub struct Lab;

impl Lab {
    /// Binds `127.0.0.1:{port}` (port 0 by default: any free port) and serves
    /// `config` on a new thread with its own tokio runtime. Never creates or
    /// enters a runtime on the caller's thread.
    pub fn start(config: LabConfig) -> Result<LabHandle, LabError> {
        config.validate()?;
        #[cfg(feature = "tls")]
        let tls = config
            .tls
            .as_ref()
            .map(tls::acceptor)
            .transpose()
            .map_err(LabError::Config)?;
        #[cfg(not(feature = "tls"))]
        let tls: server::Tls = None;
        let port = config.port;
        let bind = |source| LabError::Bind { port, source };
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let addr = listener.local_addr().map_err(bind)?;

        let started = Instant::now();
        let shared = Arc::new(Shared::new(config, started));
        let (ready_tx, ready_rx) = mpsc::channel::<std::io::Result<()>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("polite-lab-{}", addr.port()))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let listener = {
                    let _entered = runtime.enter();
                    tokio::net::TcpListener::from_std(listener)
                };
                match listener {
                    Ok(listener) => {
                        let _ = ready_tx.send(Ok(()));
                        runtime.block_on(server::serve(listener, thread_shared, stop_rx, tls));
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
                // Drops every connection task: hanging and long-polling
                // requests end here, their sockets close.
                runtime.shutdown_timeout(Duration::from_millis(500));
                let _ = done_tx.send(());
            })
            .map_err(LabError::Runtime)?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(LabHandle {
                addr,
                shared,
                stop: Some(stop_tx),
                done: std::sync::Mutex::new(done_rx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(LabError::Runtime(e))
            }
            Err(_) => {
                let _ = thread.join();
                Err(LabError::Runtime(std::io::Error::other(
                    "the lab thread ended before serving",
                )))
            }
        }
    }
}

/// A running lab. Dropping it stops the server (within about a second).
pub struct LabHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// In a mutex only so that the handle is `Sync` (shareable across tasks).
    done: std::sync::Mutex<mpsc::Receiver<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LabHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabHandle")
            .field("addr", &self.addr)
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl LabHandle {
    /// The bound address (always 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` followed by `path` (a missing leading `/` is
    /// added); `https://` for a lab in TLS mode (`LabConfig::tls`, feature
    /// `tls`).
    pub fn url(&self, path: &str) -> String {
        let slash = if path.starts_with('/') { "" } else { "/" };
        let scheme = if self.shared.config.is_tls() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}{slash}{path}", self.addr)
    }

    /// The instant the lab started (log offsets count from here).
    pub fn started_at(&self) -> Instant {
        self.shared.started
    }

    /// The configuration being served.
    pub fn config(&self) -> &LabConfig {
        &self.shared.config
    }

    /// A snapshot of the request log, in arrival order.
    pub fn log(&self) -> Vec<LogEntry> {
        self.shared.log.snapshot()
    }

    /// Empties the log (sequence numbers go on; requests in flight are no
    /// longer reported).
    pub fn clear_log(&self) {
        self.shared.log.clear();
    }

    /// TCP connections accepted since the lab started: how well a client
    /// reuses its connections (keep-alive) — 1,000 sequential GETs over one
    /// kept-alive connection count 1.
    ///
    /// ```
    /// let lab = polite_lab::Lab::start(polite_lab::LabConfig::default()).unwrap();
    /// assert_eq!(lab.connections(), 0);
    /// let agent = ureq::Agent::new_with_defaults();
    /// for _ in 0..3 {
    ///     agent.get(&lab.url("/items/1")).call().unwrap().body_mut().read_to_vec().unwrap();
    /// }
    /// assert_eq!(lab.connections(), 1);
    /// ```
    pub fn connections(&self) -> u64 {
        self.shared
            .connections
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Requests being handled right now (including hanging ones).
    pub fn in_flight(&self) -> usize {
        self.shared.log.in_flight()
    }

    /// Stops the lab now (the same as dropping the handle).
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for LabHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Wait for the lab thread, but never more than about a second: a
        // blocked drop would be worse than a detached thread.
        let done = self
            .done
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .recv_timeout(Duration::from_millis(1000));
        if let (Ok(()), Some(thread)) = (done, self.thread.take()) {
            let _ = thread.join();
        }
    }
}
