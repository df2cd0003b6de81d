//! The names a user of any adapter needs to configure it, call it and read
//! its results; each adapter re-exports this module whole
//! (`pub use polite_client::api::*`), so `polite_tokio::RetryPolicy`,
//! `polite_blocking::RetryPolicy` and `polite_async_io::RetryPolicy` are
//! one type and a user never adds `polite-core` just to configure a call.
//!
//! ```
//! use polite_client::api::{Config, RetryPolicy, StatusSet, TerminalStates, Throttle};
//! use std::time::Duration;
//!
//! let mut retry = RetryPolicy::default();
//! retry.server_error_statuses = StatusSet::of(&[502, 503, 504]);
//! let mut config = Config { retry, throttle: Some(Throttle::per_second(10)), ..Config::default() };
//! config.wait.terminal_states = TerminalStates::of(&["ready", "broken"]).unwrap();
//! assert!(config.retry.validate().is_ok());
//! ```

pub use crate::classify::Classifier;
pub use crate::client::{BatchResult, JobDone, Observed};
pub use crate::config::{Config, Throttle, WaitConfig};
#[cfg(feature = "ctrl-c")]
pub use crate::ctrl_c::CtrlCError;
pub use crate::error::{Error, LimitError, TransportError};
// What `Config::fleet` takes (polite-redis's `RedisFleet` goes in it).
pub use crate::fleet::SharedFleet;
pub use crate::job::JsonJob;
pub use crate::options::{CallOptions, PoliteAttempt, Session};
pub use crate::paces::{PaceBy, PaceKey};
pub use crate::redirect::{RedirectHop, RedirectPolicy};
pub use crate::runtime::{BoxSending, Runtime};
pub use crate::stream::{BatchOrder, BatchStream, Item as BatchItem};
pub use crate::transport::{Cancel, Clock, NoTransport, Transport};
pub use crate::{answer::HttpAnswer, runtime::DEFAULT_MAX_BODY};
pub use polite_core::budget::{RetryBucket, RetryCosts};
pub use polite_core::drive::Classify;
pub use polite_core::policy::{
    Backoff, Jitter, MaxRetries, RetryAfterLimits, StatusSet, TransportKinds,
};
pub use polite_core::poll::{JobReport, TerminalStates};
pub use polite_core::ratelimit::RateLimitHeaders;
pub use polite_core::record::AttemptRecord;
pub use polite_core::{Notice, Outcome, Reply, RetryClass, RetryPolicy, TransportErrorKind};
