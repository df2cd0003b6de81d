//! # polite-blocking
//!
//! polite for synchronous programs (CLIs, scripts, build tools): one
//! logical request retried by class inside one hard deadline, waits for
//! remote jobs, and paced batches, on plain threads, with a ready
//! [`UreqTransport`] (feature `ureq`, on by default; TLS through rustls).
//!
//! The adapter holds no retry decision, no loop and no client code of its
//! own: [`Client`] is `polite_client::Client<Threads, T>`, the one client
//! written for every runtime, and [`Threads`] is this crate's whole
//! [`Runtime`]: each call runs the `polite-core` machines through the one
//! drive loop on the calling thread with [`block_on`], a [`ThreadClock`]
//! and a [`CancelToken`], and returns its result (no `.await`).
//! Everything you need to configure a call ([`RetryPolicy`],
//! [`TerminalStates`], [`Throttle`], …) is re-exported here.
//!
//! ## How a call waits
//!
//! * **Sleeps** (backoff, Retry-After, the throttle) park the calling thread
//!   with `park_timeout` until the instant the machine asked for; nothing
//!   polls in small steps.
//! * **Attempts** run on a worker thread each (ureq blocks), which wakes the
//!   calling thread when the answer is in. A `send` or `wait` has one in
//!   flight, a `batch` up to `concurrency`. A `send` or `wait` without a
//!   token over the default [`UreqTransport`] to an IP address (or a host
//!   name its resolver looked up less than 30 s ago: it reuses answers)
//!   runs its attempts on the calling thread instead (on Unix), bounded end to end
//!   by the call's deadline (no hand-off: two context switches fewer per
//!   request). The default agent's connections wait on their sockets with
//!   `poll(2)`, so that bound holds to the millisecond, where a socket
//!   timeout fires up to 32 ms late.
//! * **A streaming batch handed out with
//!   [`for_each_result`](polite_client::BatchStream::for_each_result)** is
//!   driven by a crew of up to `concurrency` threads that run its attempts
//!   over the default [`UreqTransport`] themselves: the thread that ends an
//!   attempt takes the answer and starts the next one, with no hand-off
//!   (about one context switch per request, as plain ureq threads; a loop
//!   over `next_result` pays about three). The calling thread keeps the
//!   batch's timers and its cancel; when the batch ends, attempts still in
//!   flight on the crew are interrupted at once.
//! * **A cancel** ([`CancelToken::cancel`], from any thread, or Ctrl-C with
//!   [`cancel_on_ctrl_c`]) wakes the calling thread at once: the call returns
//!   `Cancelled` within milliseconds, whether it was sleeping or had an
//!   attempt in flight. An abandoned attempt's worker runs on until its own
//!   timeout at `abort_at` (deadline + transport cushion, 2 s by default),
//!   then closes its connection and exits; see [`UreqTransport`]. Nothing
//!   promises that a cancelled request did not reach the server.
//! * **The deadline** is fixed when the call starts (`Config::timeout`,
//!   default 30 s) and every attempt's ureq timeout ends at `abort_at`, so a
//!   hanging server never holds a call past deadline + cushion.
//! * **Redirects** are followed by polite, not ureq, by [`Config::redirects`]
//!   (a [`RedirectPolicy`]: default up to 10 hops; a cross-origin hop drops
//!   every header the caller set; a loop ends the call at once). A body
//!   over the limit, too many redirects, a rejected certificate or an
//!   invalid URL are sent once and never retried; the [`Error::Transport`]
//!   names the cause, keeps ureq's error as `source()`, and counts the
//!   attempts and the time.
//!
//! Attempt records go to `tracing` (target `polite`) without header values,
//! query strings or bodies. (ureq's own `log` output at `DEBUG` redacts
//! headers but may show URLs; its `TRACE` level shows the wire.)
//!
//! ## send: one logical request
//!
//! ```
//! use bytes::Bytes;
//! use polite_lab::{Lab, LabConfig, Step};
//!
//! // A loopback server that fails once with 503 (polite retries it).
//! let lab = Lab::start(LabConfig::default().script("/items/1", vec![Step::without_retry_after(503), Step::Normal])).unwrap();
//!
//! let client = polite_blocking::Client::new();
//! let req = http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap();
//! let resp = client.send(req)?; // retried on 429/5xx/transport, never past 30 s
//! assert_eq!(resp.status(), 200);
//! # Ok::<(), polite_blocking::Error>(())
//! ```
//!
//! ## wait: a remote job, long poll first
//!
//! ```
//! use bytes::Bytes;
//! use polite_blocking::{Client, Config, JsonJob};
//! use polite_lab::{JobState, Lab, LabConfig};
//! use std::time::Duration;
//!
//! let lab = Lab::start(LabConfig::default().job("j1", Duration::from_millis(300), JobState::Passed)).unwrap();
//! let config = Config { timeout: Duration::from_secs(10), ..Config::default() };
//! let client = Client::with_config(config)?;
//! let req = http::Request::get(lab.url("/runs/j1")).body(Bytes::new()).unwrap();
//! // Reads {"status": ...}; terminal states: passed, failed, cancelled.
//! let done = client.wait(req, &mut JsonJob::new("status"))?;
//! assert_eq!(done.state, "passed");
//! assert!(lab.log().len() <= 2); // the long poll saw the result as soon as it existed
//! # Ok::<(), polite_blocking::Error>(())
//! ```
//!
//! ## batch: many requests, paced
//!
//! ```
//! use bytes::Bytes;
//! use polite_blocking::{Client, Config, Throttle};
//! use polite_lab::{Lab, LabConfig, LogStats, Quota};
//! use std::time::Duration;
//!
//! // The server allows 5 requests per 200 ms; the client throttles itself to match.
//! let lab = Lab::start(LabConfig::default().quota(Quota::fixed(5, Duration::from_millis(200)))).unwrap();
//! let config = Config {
//!     timeout: Duration::from_secs(10),
//!     concurrency: 4,
//!     throttle: Some(Throttle::new(5, Duration::from_millis(250))),
//!     ..Config::default()
//! };
//! let client = Client::with_config(config)?;
//! let requests = (0..12)
//!     .map(|i| http::Request::get(lab.url(&format!("/items/{i}"))).body(Bytes::new()).unwrap())
//!     .collect();
//! let results = client.batch(requests)?; // in input order
//! assert!(results.iter().all(|r| r.is_ok()));
//! assert_eq!(lab.log().count_429(), 0);
//! # Ok::<(), polite_blocking::Error>(())
//! ```
//!
//! ## A batch as a stream: results as they end, input pulled as it goes
//!
//! Memory stays bounded by the window however many requests (an iterator
//! of ten million is fine), and each result is handed to the closure as
//! its item ends, in input order here.
//!
//! ```
//! use bytes::Bytes;
//! use polite_blocking::{BatchOrder, Client, Config};
//! use polite_lab::{Lab, LabConfig};
//!
//! let lab = Lab::start(LabConfig::default()).unwrap();
//! let client = Client::with_config(Config { concurrency: 4, ..Config::default() })?;
//! let requests = (0..100)
//!     .map(|i| http::Request::get(lab.url(&format!("/items/{i}"))).body(Bytes::new()).unwrap());
//! let mut next = 0;
//! client.batch_stream(requests, BatchOrder::Input)?.for_each_result(|(i, result)| {
//!     assert_eq!(i, next); // input order
//!     assert_eq!(result.map(|r| r.status()).ok(), Some(http::StatusCode::OK));
//!     next += 1;
//! });
//! assert_eq!(next, 100);
//! # Ok::<(), polite_blocking::Error>(())
//! ```
//!
//! ## Cancelling from another thread (or Ctrl-C)
//!
//! ```
//! use bytes::Bytes;
//! use polite_blocking::{CancelToken, Client, Outcome};
//! use polite_lab::{Lab, LabConfig, Step};
//! use std::time::{Duration, Instant};
//!
//! // The server asks for 20 s of patience (inside the 30 s budget); the user
//! // gives up after 100 ms.
//! let lab = Lab::start(LabConfig::default().script(
//!     "/items/1", vec![Step::with_retry_after(503, Duration::from_secs(20)), Step::Normal])).unwrap();
//! let token = CancelToken::new(); // or polite_blocking::cancel_on_ctrl_c(CancelToken::new())?
//! let canceller = token.clone();
//! std::thread::spawn(move || { std::thread::sleep(Duration::from_millis(100)); canceller.cancel() });
//! let started = Instant::now();
//! let req = http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap();
//! let err = Client::new().send_cancellable(req, &token).unwrap_err();
//! assert_eq!(err.outcome(), Some(Outcome::Cancelled));
//! assert!(started.elapsed() < Duration::from_secs(5));
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod block_on;
mod clock;
mod crew;
#[cfg(all(feature = "ureq", unix))]
mod poll_tcp;
#[cfg(feature = "ureq")]
mod resolver;
mod runtime;
#[cfg(feature = "ureq")]
mod ureq_transport;

pub use block_on::block_on;
pub use clock::ThreadClock;
pub use polite_client::CancelToken;
pub use polite_client::api::*;
/// Metrics of every call (feature `metrics`): names, labels, `describe()`.
#[cfg(feature = "metrics")]
pub use polite_client::metrics;
#[cfg(feature = "ctrl-c")]
pub use runtime::cancel_on_ctrl_c;
pub use runtime::{Client, Threads};
#[cfg(feature = "ureq")]
pub use ureq_transport::{UreqSending, UreqTransport};
