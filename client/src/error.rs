//! [`Error`]: why a call did not succeed, with the last answer when there
//! was one.

use bytes::Bytes;
use polite_core::{Outcome, PolicyError};

/// Why a `send`, `wait` or batch item did not succeed.
///
/// ```
/// use polite_client::Error;
/// use polite_core::Outcome;
/// let e = Error::Outcome { outcome: Outcome::Cancelled, response: None };
/// assert_eq!(e.to_string(), "cancelled");
/// assert_eq!(e.outcome(), Some(Outcome::Cancelled));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The machine ended without success: the outcome says why, and
    /// `response` is the last HTTP answer, if any (a 404, the last 503...).
    #[error("{outcome}")]
    Outcome {
        /// How the machine ended.
        outcome: Outcome,
        /// The last answer received, if any.
        response: Option<Box<http::Response<Bytes>>>,
    },
    /// The policy makes no sense.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The client configuration makes no sense.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}

impl Error {
    /// The outcome, for `Error::Outcome`.
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        match self {
            Error::Outcome { outcome, .. } => Some(*outcome),
            _ => None,
        }
    }

    /// The last answer received, if any.
    #[must_use]
    pub fn response(&self) -> Option<&http::Response<Bytes>> {
        match self {
            Error::Outcome { response, .. } => response.as_deref(),
            _ => None,
        }
    }
}
