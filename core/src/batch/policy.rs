//! [`BatchPolicy`]: what a caller configures for a batch.

use crate::policy::{PolicyError, RetryPolicy};

/// How a batch runs: the retry rules of each item, how many items may be in
/// flight at once, and how often the batch itself restarts an item that
/// ended `RateLimited`.
///
/// ```
/// use polite_core::BatchPolicy;
/// let p = BatchPolicy::default();
/// assert_eq!((p.concurrency, p.max_restarts), (4, 2));
/// assert!(p.validate().is_ok());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchPolicy {
    /// The retry rules of every item (SPEC §2), applied per item.
    pub retry: RetryPolicy,
    /// At most this many sends in flight at once. Default 4.
    pub concurrency: u32,
    /// At most this many batch-level restarts per item after it ended
    /// `RateLimited` (its 429 budget spent, or the server asked for longer
    /// than the automatic wait cap). Default 2; 0 turns restarts off.
    pub max_restarts: u32,
}

impl Default for BatchPolicy {
    fn default() -> Self {
        BatchPolicy {
            retry: RetryPolicy::default(),
            concurrency: 4,
            max_restarts: 2,
        }
    }
}

impl BatchPolicy {
    /// Checks the policy; [`BatchMachine`](crate::BatchMachine) constructors call this.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Invalid`] naming the field: `concurrency` (zero), or a
    /// field of `retry` (see [`RetryPolicy::validate`]).
    ///
    /// ```
    /// use polite_core::BatchPolicy;
    /// use polite_core::policy::PolicyError;
    /// let p = BatchPolicy { concurrency: 0, ..BatchPolicy::default() };
    /// assert!(matches!(p.validate(), Err(PolicyError::Invalid { field: "concurrency", .. })));
    /// ```
    pub const fn validate(&self) -> Result<(), PolicyError> {
        if self.concurrency == 0 {
            return Err(PolicyError::Invalid {
                field: "concurrency",
                reason: "must be at least 1",
            });
        }
        self.retry.validate()
    }
}
