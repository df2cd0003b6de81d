//! # polite-async-io
//!
//! polite on async-io: for **smol**, for **async-std**, and for any executor
//! whose reactor is `async-io` (`async_io::block_on`,
//! `futures_lite::future::block_on`, …). Nothing here is specific to one
//! executor: the runtime is [`AsyncIo`].
//!
//! *Formerly `polite-async-std`* (renamed before its first release:
//! async-std is discontinued upstream in favour of smol, and the crate
//! serves every async-io executor; the source folder is still
//! `adapter-async-std/`). Replace `polite-async-std` with
//! `polite-async-io` in `Cargo.toml` and `polite_async_std` with
//! `polite_async_io` in code; nothing else changed in the rename.
//!
//! One logical request
//! retried by class inside one hard deadline, waits for remote jobs (long
//! poll first), and paced batches, with a ready pure-Rust HTTP/1.1 and
//! HTTPS transport that keeps connections alive ([`Http1Transport`],
//! features `http1` and `tls`, on by default).
//!
//! The crate holds no retry decision, no loop and no client code of its
//! own: [`Client`] is `polite_client::Client<AsyncIo, T>`, the one client
//! written for every runtime, and [`AsyncIo`] is this crate's whole
//! [`Runtime`]: async-io time ([`AsyncIoClock`]: one `async_io::Timer`,
//! re-armed as the instant changes), a [`CancelToken`] (its `cancel` wakes
//! a pending wait at once, from any thread; Ctrl-C with
//! [`cancel_on_ctrl_c`], see below), and calls that are futures. Any HTTP
//! client can be plugged in through [`Transport`]; everything you need to
//! configure a call ([`RetryPolicy`], [`TerminalStates`], [`Throttle`], …)
//! is re-exported here. Nothing here depends on tokio.
//!
//! ## Features
//!
//! | feature | default | what |
//! |---|---|---|
//! | `http1` | yes | [`Http1Transport`]: HTTP/1.1 on `async_io::Async<TcpStream>` (`ureq-proto`), a pool of kept-alive connections |
//! | `tls` | yes (through `webpki-roots`) | `https://` in that transport: rustls (`ring` provider) through `futures-rustls`, SNI, ALPN `http/1.1`; [`Http1Transport::with_tls`] takes your own `rustls::ClientConfig` ([`rustls`] is re-exported) |
//! | `webpki-roots` | yes | the default roots: Mozilla's, compiled in |
//! | `platform-verifier` | no | the operating system's verifier instead (`rustls-platform-verifier`); wins over `webpki-roots` |
//! | `ctrl-c` | yes | [`cancel_on_ctrl_c`] |
//!
//! ## On async-std
//!
//! ```
//! use bytes::Bytes;
//! use polite_lab::{Lab, LabConfig, Step};
//!
//! # fn main() -> Result<(), polite_async_io::Error> {
//! // A loopback server that fails once with 503 (polite retries it).
//! let lab = Lab::start(LabConfig::default().script("/items/1", vec![Step::without_retry_after(503), Step::Normal])).unwrap();
//!
//! async_std::task::block_on(async {
//!     let client = polite_async_io::Client::new();
//!     let req = http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap();
//!     let resp = client.send(req).await?; // retried on 429/5xx/transport, never past 30 s
//!     assert_eq!(resp.status(), 200);
//!     assert_eq!(lab.log().len(), 2);
//!     Ok(())
//! })
//! # }
//! ```
//!
//! (With async-std's `attributes` feature, `#[async_std::main]` works the
//! same way.)
//!
//! ## On smol: wait for a job, cancel from another task
//!
//! ```
//! use bytes::Bytes;
//! use polite_async_io::{CancelToken, Client, Config, JsonJob, Outcome};
//! use polite_lab::{JobState, Lab, LabConfig};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), polite_async_io::Error> {
//! let lab = Lab::start(LabConfig::default()
//!     .job("j1", Duration::from_millis(300), JobState::Passed)
//!     .job("slow", Duration::from_secs(3600), JobState::Passed)).unwrap();
//! let config = Config { timeout: Duration::from_secs(10), ..Config::default() };
//! let client = Client::with_config(config)?;
//!
//! smol::block_on(async {
//!     // Reads {"status": ...}; terminal states: passed, failed, cancelled.
//!     let req = http::Request::get(lab.url("/runs/j1")).body(Bytes::new()).unwrap();
//!     let done = client.wait(req, &mut JsonJob::new("status")).await?;
//!     assert_eq!(done.state, "passed");
//!
//!     // A job that outlives our patience: cancel it from a smol task.
//!     let token = CancelToken::new();
//!     let canceller = smol::spawn({
//!         let token = token.clone();
//!         async move {
//!             smol::Timer::after(Duration::from_millis(200)).await;
//!             token.cancel();
//!         }
//!     });
//!     let req = http::Request::get(lab.url("/runs/slow")).body(Bytes::new()).unwrap();
//!     let err = client.wait_cancellable(req, &mut JsonJob::new("status"), &token).await.unwrap_err();
//!     assert_eq!(err.outcome(), Some(Outcome::Cancelled));
//!     canceller.await;
//!     Ok(())
//! })
//! # }
//! ```
//!
//! ## Batches, paced
//!
//! ```
//! use bytes::Bytes;
//! use polite_async_io::{Client, Config, Throttle};
//! use polite_lab::{Lab, LabConfig, LogStats, Quota};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), polite_async_io::Error> {
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
//! let results = async_std::task::block_on(client.batch(requests))?; // in input order
//! assert!(results.iter().all(|r| r.is_ok()));
//! assert_eq!(lab.log().count_429(), 0);
//! # Ok(()) }
//! ```
//!
//! ## HTTPS, and what the transport does
//!
//! [`Http1Transport`] speaks HTTP/1.1 over `async_io::Async<TcpStream>`
//! (the protocol — framing, parsing, chunked bodies — is `ureq-proto`'s,
//! the sans-IO core of ureq 3) and `https://` over rustls. It keeps
//! connections alive in a pool per origin (scheme, host, port): 30 s idle
//! timeout, at most 32 idle per origin, a connection reused only after an
//! answer read to its exact end and without `Connection: close`; a request
//! on a reused connection that the server closed before answering is sent
//! once more on a fresh connection only when it is replayable. A rejected
//! certificate is the permanent `Certificate`: never retried, the rustls
//! error as its `source()`. It resolves names on the `blocking` thread
//! pool, reads bodies whole up to a limit (a larger one is a permanent
//! `BodyTooLarge` naming the limit, sent once; an answer head over 64 KiB
//! is a permanent `HeadTooLarge`, likewise), sends any method as given
//! (extension methods such as `PURGE` too), and aborts each attempt at
//! its `abort_at` (deadline + 2 s cushion) by racing it against an
//! `async_io::Timer`. It follows no redirect: polite does, by
//! [`Config::redirects`] (a [`RedirectPolicy`]: default up to 10 hops; a
//! cross-origin hop, `https` to `http` included, drops every header the
//! caller set). The whole story is on [`Http1Transport`].
//!
//! A server with a private CA — here a certificate made by the test — is
//! trusted through your own rustls configuration:
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use polite_async_io::{Client, Config, Http1Transport, rustls};
//! use polite_lab::{Lab, LabConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])?;
//! let lab = Lab::start(LabConfig::default().tls(cert.cert.pem(), cert.signing_key.serialize_pem()))?;
//!
//! let mut roots = rustls::RootCertStore::empty();
//! roots.add(cert.cert.der().clone())?;
//! let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
//!     .with_safe_default_protocol_versions()?
//!     .with_root_certificates(roots)
//!     .with_no_client_auth();
//! let client = Client::with_transport(Http1Transport::with_tls(Arc::new(tls)), Config::default())?;
//!
//! smol::block_on(async {
//!     for i in 0..3 {
//!         let req = http::Request::get(lab.url(&format!("/items/{i}"))).body(Bytes::new())?;
//!         assert_eq!(client.send(req).await?.status(), 200);
//!     }
//!     Ok::<_, Box<dyn std::error::Error>>(())
//! })?;
//! assert!(lab.url("/").starts_with("https://"));
//! assert_eq!(lab.connections(), 1); // one TLS connection, kept alive
//! # Ok(()) }
//! ```
//!
//! ## Cancellation, and Ctrl-C
//!
//! [`CancelToken::cancel`] ends a call at once with `Outcome::Cancelled`:
//! a backoff or pacing sleep is woken immediately, an attempt in flight is
//! dropped (its connection closed, never pooled), and the loop checks the
//! token again right before every send. Nothing promises that a request
//! already sent did not reach the server.
//!
//! For a command-line program, [`cancel_on_ctrl_c`] (feature `ctrl-c`, on
//! by default) cancels a token on the first Ctrl-C (a second one exits with
//! status 130); it needs no executor, so it works the same on smol and
//! async-std:
//!
//! ```no_run
//! use bytes::Bytes;
//! use polite_async_io::{CancelToken, Client, Outcome, cancel_on_ctrl_c};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let token = cancel_on_ctrl_c(CancelToken::new())?;
//! let client = Client::new();
//! let req = http::Request::get("https://api.example.com/runs/1").body(Bytes::new())?;
//! match smol::block_on(client.send_cancellable(req, &token)) {
//!     Err(e) if e.outcome() == Some(Outcome::Cancelled) => eprintln!("interrupted"),
//!     other => println!("{:?}", other.map(|r| r.status())),
//! }
//! # Ok(()) }
//! ```
//!
//! ## Attempt records
//!
//! Every attempt is recorded to `tracing` (target `polite`): ids, status or
//! error kind, the planned delay and its source, the final reason — never a
//! header value, a URL, a query string or a body.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod clock;
#[cfg(feature = "http1")]
mod http1;
#[cfg(feature = "http1")]
mod pool;
mod runtime;
#[cfg(feature = "tls")]
mod tls;

pub use clock::AsyncIoClock;
#[cfg(feature = "http1")]
pub use http1::{DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_IDLE_PER_HOST, Http1Transport};
pub use polite_client::CancelToken;
pub use polite_client::api::*;
/// Metrics of every call (feature `metrics`): names, labels, `describe()`.
#[cfg(feature = "metrics")]
pub use polite_client::metrics;
#[cfg(feature = "ctrl-c")]
pub use runtime::cancel_on_ctrl_c;
pub use runtime::{AsyncIo, Client};

/// polite as a tower layer on async-io (feature `tower`): see
/// [`polite_client::tower`]. Its waits (backoff, `Retry-After`, the pace)
/// sleep on async-io timers; no tokio is involved.
///
/// ```
/// let layer = polite_async_io::PoliteLayer::new(polite_async_io::Config::default())?;
/// assert_eq!(layer.client().config().timeout, std::time::Duration::from_secs(30));
/// # Ok::<(), polite_async_io::Error>(())
/// ```
#[cfg(feature = "tower")]
pub type PoliteLayer<T = NoTransport> = polite_client::tower::PoliteLayer<AsyncIo, T>;
/// The service a [`PoliteLayer`] makes over `S` (feature `tower`): see
/// [`polite_client::tower::PoliteService`].
///
/// ```
/// use tower::Layer;
/// let layer = polite_async_io::PoliteLayer::new(polite_async_io::Config::default())?;
/// let service: polite_async_io::PoliteService<()> = layer.layer(());
/// assert_eq!(service.get_ref(), &());
/// # Ok::<(), polite_async_io::Error>(())
/// ```
#[cfg(feature = "tower")]
pub type PoliteService<S, T = NoTransport> = polite_client::tower::PoliteService<S, AsyncIo, T>;
#[cfg(feature = "tower")]
pub use polite_client::tower::PoliteBody;
/// rustls, as [`Http1Transport::with_tls`] takes its `ClientConfig`
/// (feature `tls`): the same version, without a dependency of your own.
#[cfg(feature = "tls")]
pub use rustls;
