//! # polite-tokio
//!
//! polite on tokio: one logical request retried by class inside one hard
//! deadline, on tokio time, with a ready [`ReqwestTransport`] (feature
//! `reqwest`, on by default; TLS is whatever your own `reqwest` dependency
//! turns on: polite enables no reqwest feature).
//!
//! The adapter holds no retry decision, no loop and no client code of its
//! own: [`Client`] is `polite_client::Client<Tokio, T>`, the one client
//! written for every runtime, and [`Tokio`] is this crate's whole
//! [`Runtime`]: tokio's clock ([`TokioClock`]), a `CancellationToken`
//! ([`TokioCancel`]), and calls that are futures. Any HTTP client can be
//! plugged in through [`Transport`]; everything you need to configure a
//! call ([`RetryPolicy`], [`TerminalStates`], [`Throttle`], …) is
//! re-exported here, and so is [`reqwest`] (polite-tokio needs reqwest
//! 0.13: a `reqwest::Client` of another version is another type).
//!
//! ## Redirects
//!
//! polite follows redirects itself, up to 10 per attempt by default
//! ([`Config::redirects`], a [`RedirectPolicy`]: off, same origin only, or
//! up to N hops); a redirect to another origin drops every header the
//! caller set (SPEC §5.1), and a redirect loop ends the call at once
//! (`TooManyRedirects`, never retried). This needs a `reqwest::Client`
//! that follows no redirect of its own
//! ([`ReqwestTransport::default_client`]); one that does follows them by
//! reqwest's rules instead.
//!
//! ## Cancel
//!
//! A call ends `Cancelled` at once when it is dropped, or through
//! `*_cancellable(…, &token)` when its [`CancellationToken`] is cancelled
//! (from any task; Ctrl-C with [`cancel_on_ctrl_c`]): during a backoff
//! sleep, a pacing wait or an attempt in flight (the attempt is dropped).
//! A token cancelled before the call sends nothing. Nothing promises that a
//! cancelled request did not reach the server.
//!
//! ## send: one logical request
//!
//! ```
//! use bytes::Bytes;
//! use polite_lab::{Lab, LabConfig, Step};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), polite_tokio::Error> {
//! // A loopback server that fails once with 503 (polite retries it).
//! let lab = Lab::start(LabConfig::default().script("/items/1", vec![Step::without_retry_after(503), Step::Normal])).unwrap();
//!
//! let client = polite_tokio::Client::new();
//! let req = http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap();
//! let resp = client.send(req).await?; // retried on 429/5xx/transport, never past 30 s
//! assert_eq!(resp.status(), 200);
//! # Ok(()) }
//! ```
//!
//! ## wait: a remote job, long poll first
//!
//! ```
//! use bytes::Bytes;
//! use polite_lab::{JobState, Lab, LabConfig};
//! use polite_tokio::{Client, Config, JsonJob};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), polite_tokio::Error> {
//! let lab = Lab::start(LabConfig::default().job("j1", Duration::from_millis(300), JobState::Passed)).unwrap();
//! let config = Config { timeout: Duration::from_secs(10), ..Config::default() };
//! let client = Client::with_config(config)?;
//! let req = http::Request::get(lab.url("/runs/j1")).body(Bytes::new()).unwrap();
//! // Reads {"status": ...}; terminal states: passed, failed, cancelled.
//! let done = client.wait(req, &mut JsonJob::new("status")).await?;
//! assert_eq!(done.state, "passed");
//! assert!(lab.log().len() <= 2); // the long poll saw the result as soon as it existed
//! # Ok(()) }
//! ```
//!
//! ## batch: many requests, paced
//!
//! ```
//! use bytes::Bytes;
//! use polite_lab::{Lab, LabConfig, LogStats, Quota};
//! use polite_tokio::{Client, Config, Throttle};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), polite_tokio::Error> {
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
//! let results = client.batch(requests).await?; // in input order
//! assert!(results.iter().all(|r| r.is_ok()));
//! assert_eq!(lab.log().count_429(), 0);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod cancel;
mod clock;
#[cfg(feature = "middleware")]
mod middleware;
#[cfg(feature = "reqwest")]
mod reqwest_transport;
mod runtime;

pub use cancel::TokioCancel;
pub use clock::TokioClock;
#[cfg(feature = "middleware")]
pub use middleware::PoliteMiddleware;
pub use polite_client::api::*;
/// Metrics of every call (feature `metrics`): names, labels, `describe()`.
#[cfg(feature = "metrics")]
pub use polite_client::metrics;
#[cfg(feature = "reqwest")]
pub use reqwest;
#[cfg(feature = "middleware")]
pub use reqwest_middleware;
#[cfg(feature = "reqwest")]
pub use reqwest_transport::ReqwestTransport;
#[cfg(feature = "ctrl-c")]
pub use runtime::cancel_on_ctrl_c;
pub use runtime::{Client, Tokio};
pub use tokio_util::sync::CancellationToken;

/// polite as a tower layer on tokio (feature `tower`): see
/// [`polite_client::tower`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), polite_tokio::Error> {
/// let layer = polite_tokio::PoliteLayer::new(polite_tokio::Config::default())?;
/// # drop(layer); Ok(()) }
/// ```
#[cfg(feature = "tower")]
pub type PoliteLayer<T = NoTransport> = polite_client::tower::PoliteLayer<Tokio, T>;
/// The service a [`PoliteLayer`] makes over `S` (feature `tower`): see
/// [`polite_client::tower::PoliteService`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), polite_tokio::Error> {
/// use tower::Layer;
/// let service: polite_tokio::PoliteService<()> = polite_tokio::PoliteLayer::new(polite_tokio::Config::default())?.layer(());
/// # drop(service); Ok(()) }
/// ```
#[cfg(feature = "tower")]
pub type PoliteService<S, T = NoTransport> = polite_client::tower::PoliteService<S, Tokio, T>;
#[cfg(feature = "tower")]
pub use polite_client::tower::PoliteBody;
