//! [`ReadWhole`]: which answers an attempt reads whole before handing them
//! to polite (the ones polite may retry), in 64 bytes.

use polite_core::RetryPolicy;
use polite_core::policy::StatusSet;

/// The statuses whose answers an attempt reads whole: those polite may
/// retry (the two status sets of the call's [`RetryPolicy`], what
/// [`RetryPolicy::class_of`] reads), 64 bytes where the whole policy is
/// several hundred, kept in every attempt's future by the integrations
/// (`PoliteLayer`, polite-tokio's `PoliteMiddleware`); any other answer is
/// handed back unread.
///
/// ```
/// use polite_client::ReadWhole;
/// use polite_core::RetryPolicy;
///
/// let read = ReadWhole::of(&RetryPolicy::default());
/// assert!(read.wants(503) && read.wants(429));
/// assert!(!read.wants(200) && !read.wants(404));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ReadWhole {
    rate_limited: StatusSet,
    server_error: StatusSet,
}

impl ReadWhole {
    /// The statuses `policy` retries.
    #[must_use]
    pub fn of(policy: &RetryPolicy) -> ReadWhole {
        ReadWhole {
            rate_limited: policy.rate_limited_statuses,
            server_error: policy.server_error_statuses,
        }
    }

    /// Whether an answer of `status` is read whole: as
    /// `policy.class_of(status).is_some()`.
    #[must_use]
    pub fn wants(self, status: u16) -> bool {
        self.rate_limited.contains(status) || self.server_error.contains(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An attempt reads whole exactly the answers its retry rules class
    /// (what `RetryPolicy::class_of` says), for the default rules and for
    /// rules of other statuses.
    #[test]
    fn read_whole_wants_the_statuses_the_policy_classes() {
        let custom = RetryPolicy {
            rate_limited_statuses: StatusSet::of(&[420, 429]),
            server_error_statuses: StatusSet::of(&[500, 599]),
            ..RetryPolicy::default()
        };
        for policy in [RetryPolicy::default(), custom] {
            let read = ReadWhole::of(&policy);
            for status in 0..=1000 {
                assert_eq!(
                    read.wants(status),
                    policy.class_of(status).is_some(),
                    "{status}"
                );
            }
        }
    }
}
