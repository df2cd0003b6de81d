//! # polite-client
//!
//! The part of polite's adapters that does not depend on a runtime, written
//! once: HTTP requests and answers (`http` types with `Bytes` bodies), the
//! [`HttpIo`] that runs the core drive loop over an adapter's
//! [`Transport`], [`Clock`] and [`Cancel`], the default job classifier
//! [`JsonJob`], attempt records to `tracing`, and the [`Client`] calls.
//!
//! Adapters (`polite-tokio`, `polite-async-io`, `polite-blocking`) supply
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
//!   count and the elapsed time; one that runs into its timeout or a
//!   server's over-long wait returns [`Error::Limit`] (the limit, the last
//!   answer or transport error as `source()`, attempts, time). Permanent kinds
//!   ([`TransportErrorKind::is_permanent`](polite_core::TransportErrorKind::is_permanent))
//!   are never retried.
//!
//! An adapter is a [`Runtime`] (its [`Clock`], its cancel token and
//! [`Cancel`] signal, whether calls are futures or block), a
//! [`Transport`], and a type alias of [`Client`]; the [`Runtime`] docs
//! show a complete one in thirty lines.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod answer;
pub mod api;
mod batch_paces;
mod classify;
mod client;
mod config;
#[cfg(feature = "ctrl-c")]
mod ctrl_c;
mod error;
mod fleet;
mod io;
mod items;
mod job;
mod meter;
#[cfg(feature = "metrics")]
pub mod metrics;
mod options;
mod pace;
mod paces;
mod read_whole;
pub mod recycle;
pub mod redirect;
mod runtime;
mod stream;
#[cfg(feature = "tower")]
pub mod tower;
mod trace;
mod transport;

pub use answer::HttpAnswer;
pub use classify::Classifier;
pub use client::{BatchResult, Client, JobDone, Observed, request_info};
pub use config::{Config, Throttle, WaitConfig};
#[cfg(feature = "ctrl-c")]
pub use ctrl_c::{CtrlCError, cancel_on_ctrl_c};
pub use error::{BoxError, Error, LimitError, TransportError, io_error_kind};
pub use fleet::{Fleet, FleetBudget, FleetGrant, FleetPace, FleetTerms, SharedFleet};
pub use io::{HttpIo, Sending, copy_request, valid_param_name, with_query_param};
pub use job::JsonJob;
pub use options::{CallOptions, PoliteAttempt, Session};
pub use pace::ClientPace;
pub use paces::{ClientBudget, PaceBy, PaceKey, Paces};
pub use read_whole::ReadWhole;
pub use redirect::{RedirectHop, RedirectPolicy};
pub use runtime::{BoxSending, DEFAULT_MAX_BODY, Runtime, in_box};
pub use stream::{BatchOrder, BatchStream, Item as BatchItem};
pub use trace::{redacted_url, trace_record};
pub use transport::{
    Cancel, CancelToken, Clock, NeverCancel, NoTransport, Transport, names_no_port,
};
