//! [`ReadWhole`]: which answers an attempt reads whole before handing them
//! to polite (the ones polite may retry), in 64 bytes.

use bytes::Bytes;
use polite_core::RetryPolicy;
use polite_core::policy::StatusSet;

use crate::client::request_info;
use crate::options::CallOptions;

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

    /// What the attempts of a call through an integration read whole, and
    /// its retry rules: a body sent once (`once`: it could not be
    /// buffered) is never re-sent, so the call's `options` get
    /// [`one_shot_body`](CallOptions::one_shot_body) (a failure ends
    /// `NotReplayable`) and nothing is read whole; a request
    /// polite may not re-send (a `POST` without an `Idempotency-Key`) reads
    /// nothing whole either; any other, the statuses its rules
    /// (`options.retry`, else `default`) retry. The rules are read where
    /// they are, not copied (a `RetryPolicy` is a few hundred bytes).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_client::{CallOptions, ReadWhole};
    /// use polite_core::RetryPolicy;
    ///
    /// let get = http::Request::get("http://127.0.0.1/").body(Bytes::new()).unwrap();
    /// let mut options = CallOptions::default();
    /// let read = ReadWhole::for_call(&mut options, &RetryPolicy::default(), &get, false);
    /// assert!(read.is_some_and(|r| r.wants(503)));
    /// assert!(options.retry.is_none(), "the rules are the client's");
    ///
    /// let read = ReadWhole::for_call(&mut options, &RetryPolicy::default(), &get, true);
    /// assert!(read.is_none());
    /// assert!(options.one_shot_body, "sent once");
    ///
    /// let post = http::Request::post("http://127.0.0.1/").body(Bytes::new()).unwrap();
    /// let mut options = CallOptions::default();
    /// assert!(ReadWhole::for_call(&mut options, &RetryPolicy::default(), &post, false).is_none());
    /// ```
    #[must_use]
    pub fn for_call(
        options: &mut CallOptions,
        default: &RetryPolicy,
        request: &http::Request<Bytes>,
        once: bool,
    ) -> Option<ReadWhole> {
        if once {
            // Sent once: nothing will be retried, so nothing is read whole.
            options.one_shot_body = true;
            None
        } else {
            ReadWhole::for_request(options.retry.as_ref(), default, request)
        }
    }

    /// [`for_call`](Self::for_call) for a body that is not sent once, by
    /// the call's own rules `retry` (`None`: `default`), without a
    /// [`CallOptions`] to change: for a call that has none, none is made.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_client::ReadWhole;
    /// use polite_core::RetryPolicy;
    ///
    /// let get = http::Request::get("http://127.0.0.1/").body(Bytes::new()).unwrap();
    /// assert!(ReadWhole::for_request(None, &RetryPolicy::default(), &get).is_some_and(|r| r.wants(503)));
    /// let post = http::Request::post("http://127.0.0.1/").body(Bytes::new()).unwrap();
    /// assert!(ReadWhole::for_request(None, &RetryPolicy::default(), &post).is_none());
    /// ```
    #[must_use]
    pub fn for_request(
        retry: Option<&RetryPolicy>,
        default: &RetryPolicy,
        request: &http::Request<Bytes>,
    ) -> Option<ReadWhole> {
        request_info(0, request)
            .is_replayable()
            .then(|| ReadWhole::of(retry.unwrap_or(default)))
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

    /// `for_request` reads whole what `for_call` reads for a body not sent
    /// once, by the call's own rules or the client's, and `for_call`
    /// leaves such a call's options as they were.
    #[test]
    fn for_request_is_for_call_without_options() {
        let custom = RetryPolicy {
            rate_limited_statuses: StatusSet::of(&[420]),
            server_error_statuses: StatusSet::of(&[599]),
            ..RetryPolicy::default()
        };
        let requests = [
            http::Request::get("http://127.0.0.1/").body(Bytes::new()),
            http::Request::post("http://127.0.0.1/").body(Bytes::new()),
            http::Request::post("http://127.0.0.1/")
                .header("idempotency-key", "k")
                .body(Bytes::new()),
        ];
        for request in requests.map(Result::unwrap) {
            for own in [None, Some(custom)] {
                let mut options = CallOptions {
                    retry: own,
                    ..CallOptions::default()
                };
                let a = ReadWhole::for_call(&mut options, &RetryPolicy::default(), &request, false);
                let b = ReadWhole::for_request(own.as_ref(), &RetryPolicy::default(), &request);
                assert_eq!(options.retry, own);
                assert_eq!(a.is_some(), b.is_some());
                if let (Some(a), Some(b)) = (a, b) {
                    for status in 0..=1000 {
                        assert_eq!(a.wants(status), b.wants(status), "{status}");
                    }
                }
            }
        }
    }

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
