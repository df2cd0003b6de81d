//! # polite-tokio
//!
//! polite on tokio: one logical request retried by class inside one hard
//! deadline, on tokio time, with a ready [`ReqwestTransport`] (feature
//! `reqwest`, on by default; TLS through rustls).
//!
//! The adapter holds no retry decision and no loop of its own: the calls run
//! the `polite-core` machines through `polite_core::drive`, with tokio's
//! clock ([`TokioClock`]), a `CancellationToken` ([`TokioCancel`]) and a
//! transport. Any HTTP client can be plugged in through [`Transport`].
//!
//! ```no_run
//! # async fn f() -> Result<(), polite_tokio::Error> {
//! let client = polite_tokio::Client::new(reqwest::Client::new());
//! let req = http::Request::get("http://127.0.0.1:8080/items/1").body(bytes::Bytes::new()).unwrap();
//! let resp = client.send(req).await?; // retried on 429/5xx/transport, never past 30 s
//! println!("{}", resp.status());
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod cancel;
mod client;
mod clock;
#[cfg(feature = "reqwest")]
mod reqwest_transport;

pub use cancel::{TokioCancel, cancel_on_ctrl_c};
pub use client::Client;
pub use clock::TokioClock;
pub use polite_client::{Config, Error, HttpAnswer, JobDone, JsonJob, Transport};
pub use polite_core::{Notice, Outcome};
#[cfg(feature = "reqwest")]
pub use reqwest_transport::{BoxSending, ReqwestTransport};
pub use tokio_util::sync::CancellationToken;
