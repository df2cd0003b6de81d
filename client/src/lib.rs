//! # polite-client
//!
//! The part of polite's adapters that does not depend on a runtime, written
//! once: HTTP requests and answers (`http` types with `Bytes` bodies), the
//! [`HttpIo`] that runs the core drive loop over an adapter's
//! [`Transport`], [`Clock`] and [`Cancel`], the default job classifier
//! [`JsonJob`], attempt records to `tracing`, and the [`Client`] calls.
//!
//! Adapters (`polite-tokio`, `polite-async-std`, `polite-blocking`) supply
//! the three runtime-specific pieces and re-export the rest. Users normally
//! use an adapter; this crate is for writing one.
//!
//! Two things every adapter gets from here, the same way:
//!
//! * **Redirects** are followed by polite, not by the transport, per the
//!   client's [`RedirectPolicy`] ([`Config::redirects`]; default up to 10
//!   hops, a cross-origin hop drops every header the caller set, a loop
//!   ends the attempt at once). See [`redirect`].
//! * **Transport errors** arrive as a [`TransportError`] (its kind, the
//!   client's own error as `source()`, the limit for a body too large) and
//!   a call that ends on one returns [`Error::Transport`] with the attempt
//!   count and the elapsed time. Permanent kinds
//!   ([`TransportErrorKind::is_permanent`](polite_core::TransportErrorKind::is_permanent))
//!   are never retried.
//!
//! ```
//! use bytes::Bytes;
//! use polite_client::{Clock, Client, Config, NeverCancel, Transport, TransportError};
//! use std::future::{Ready, ready};
//! use std::task::{Context, Poll};
//! use std::time::Instant;
//!
//! /// A transport that answers 200 "hi" at once.
//! struct Hi;
//! impl Transport for Hi {
//!     type Sending = Ready<Result<http::Response<Bytes>, TransportError>>;
//!     fn send(&self, _: http::Request<Bytes>, _: Instant) -> Self::Sending {
//!         ready(Ok(http::Response::new(Bytes::from_static(b"hi"))))
//!     }
//! }
//! /// A clock whose sleeps end at once (fine for a transport that never fails).
//! struct Now;
//! impl Clock for Now {
//!     fn now(&self) -> Instant { polite_core::testing::origin() }
//!     fn poll_sleep(&mut self, _: &mut Context<'_>, _: Instant) -> Poll<()> { Poll::Ready(()) }
//! }
//!
//! let client = Client::new(Hi, Config::default()).unwrap();
//! let req = http::Request::get("http://127.0.0.1/").body(Bytes::new()).unwrap();
//! let resp = polite_core::drive::block_on(client.send_with(req, Now, NeverCancel)).unwrap();
//! assert_eq!(resp.body().as_ref(), b"hi");
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod answer;
mod client;
#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
mod io;
mod job;
mod pace;
pub mod redirect;
mod trace;
mod transport;

pub use answer::HttpAnswer;
pub use client::{Client, Config, JobDone, Observed, request_info};
pub use error::{BoxError, Error, TransportError};
pub use io::{HttpIo, Sending, copy_request, valid_param_name, with_query_param};
pub use job::JsonJob;
pub use pace::ClientPace;
pub use redirect::RedirectPolicy;
pub use trace::trace_record;
pub use transport::{Cancel, CancelToken, Clock, NeverCancel, Transport};
