//! [`Client`]: polite's calls on async-io (async-std and smol).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use polite_client::{
    CancelToken, Config, Error, HttpAnswer, JobDone, NeverCancel, Transport, TransportError,
};
use polite_core::Notice;
use polite_core::drive::Classify;

use crate::clock::AsyncIoClock;

/// polite on async-io: every call runs the core machines through the one
/// drive loop (`polite_core::drive`, by way of `polite_client::Client`), on
/// an [`AsyncIoClock`], with the transport `T` ([`Http1Transport`] by
/// default). The futures run on any executor whose reactor is async-io's:
/// async-std, smol, or a plain `block_on`.
///
/// Cheap to clone; clones share the transport, the configuration and the
/// pace (throttle and 429 cool-down) of every call.
///
/// [`Http1Transport`]: crate::Http1Transport
///
/// ```
/// use bytes::Bytes;
/// use polite_lab::{Lab, LabConfig};
///
/// let lab = Lab::start(LabConfig::default()).unwrap();
/// let client = polite_async_std::Client::new();
/// let req = http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap();
/// let resp = async_std::task::block_on(client.send(req)).unwrap();
/// assert_eq!(resp.status(), 200);
/// ```
#[derive(Debug)]
pub struct Client<T> {
    inner: Arc<polite_client::Client<T>>,
}

impl<T> Clone for Client<T> {
    fn clone(&self) -> Self {
        Client {
            inner: Arc::clone(&self.inner),
        }
    }
}

#[cfg(feature = "http1")]
impl Client<crate::Http1Transport> {
    /// A client over [`Http1Transport`](crate::Http1Transport) with the
    /// default configuration (30 s per call, the SPEC's retry budgets).
    ///
    /// ```
    /// let client = polite_async_std::Client::new();
    /// assert_eq!(client.config().timeout, std::time::Duration::from_secs(30));
    /// ```
    #[must_use]
    pub fn new() -> Self {
        match Self::with_transport(crate::Http1Transport::new(), Config::default()) {
            Ok(c) => c,
            // The default configuration is valid (tested).
            Err(e) => unreachable!("default configuration rejected: {e}"),
        }
    }
}

#[cfg(feature = "http1")]
impl Default for Client<crate::Http1Transport> {
    fn default() -> Self {
        Client::new()
    }
}

impl<T> Client<T>
where
    T: Transport,
    T::Sending: Unpin,
{
    /// A client over any [`Transport`] with a configuration.
    ///
    /// # Errors
    ///
    /// [`Error::Policy`] or [`Error::Config`] for a configuration that
    /// makes no sense.
    ///
    /// ```
    /// use polite_async_std::{Client, Config, Http1Transport};
    /// use std::time::Duration;
    /// let config = Config { timeout: Duration::from_secs(5), ..Config::default() };
    /// let client = Client::with_transport(Http1Transport::new().max_body(1 << 20), config).unwrap();
    /// assert_eq!(client.config().timeout, Duration::from_secs(5));
    /// ```
    pub fn with_transport(transport: T, config: Config) -> Result<Self, Error> {
        Ok(Client {
            inner: Arc::new(polite_client::Client::new(transport, config)?),
        })
    }

    /// The configuration.
    ///
    /// ```
    /// assert_eq!(polite_async_std::Client::new().config().concurrency, 4);
    /// ```
    #[must_use]
    pub fn config(&self) -> &Config {
        self.inner.config()
    }

    /// The transport.
    ///
    /// ```
    /// assert_eq!(polite_async_std::Client::new().transport().body_limit(), 16 << 20);
    /// ```
    #[must_use]
    pub fn transport(&self) -> &T {
        self.inner.transport()
    }

    /// One logical request with retries, inside the configured timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Outcome`] with the outcome and the last answer, for every
    /// end but success.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_async_std::Outcome;
    /// use polite_lab::{Lab, LabConfig};
    ///
    /// let lab = Lab::start(LabConfig::default()).unwrap();
    /// let client = polite_async_std::Client::new();
    /// let req = http::Request::get(lab.url("/nowhere")).body(Bytes::new()).unwrap();
    /// let err = smol::block_on(client.send(req)).unwrap_err();
    /// assert_eq!(err.outcome(), Some(Outcome::NotRetryable { status: 404 }));
    /// assert_eq!(err.response().map(|r| r.status().as_u16()), Some(404));
    /// ```
    pub async fn send(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, Error> {
        self.inner
            .send_with(request, AsyncIoClock::new(), NeverCancel)
            .await
    }

    /// Like [`send`](Self::send), ended at once (`Cancelled`) when `token`
    /// is cancelled — from any thread or task, during a backoff sleep, a
    /// pacing wait or an attempt in flight. An attempt in flight is
    /// dropped (its connection closed); nothing promises it did not reach
    /// the server.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_async_std::{CancelToken, Outcome};
    /// use polite_lab::{Lab, LabConfig};
    ///
    /// let lab = Lab::start(LabConfig::default()).unwrap();
    /// let client = polite_async_std::Client::new();
    /// let token = CancelToken::new();
    /// token.cancel(); // cancelled before the first send: nothing is sent
    /// let req = http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap();
    /// let err = async_std::task::block_on(client.send_cancellable(req, &token)).unwrap_err();
    /// assert_eq!(err.outcome(), Some(Outcome::Cancelled));
    /// assert!(lab.log().is_empty());
    /// ```
    pub async fn send_cancellable(
        &self,
        request: http::Request<Bytes>,
        token: &CancelToken,
    ) -> Result<http::Response<Bytes>, Error> {
        self.inner
            .send_with(request, AsyncIoClock::new(), token.clone())
            .await
    }

    /// Waits for a remote job (long poll first, permanent fallback to
    /// backoff), reading each answer with `classify` (e.g.
    /// [`JsonJob`](polite_client::JsonJob)), inside the configured timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Outcome`] for every end but a terminal job state (a job
    /// that ended `failed` is handed back, not an error).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_async_std::JsonJob;
    /// use polite_lab::{JobState, Lab, LabConfig};
    /// use std::time::Duration;
    ///
    /// let lab = Lab::start(LabConfig::default().job("j1", Duration::from_millis(200), JobState::Failed)).unwrap();
    /// let client = polite_async_std::Client::new();
    /// let req = http::Request::get(lab.url("/runs/j1")).body(Bytes::new()).unwrap();
    /// let done = smol::block_on(client.wait(req, &mut JsonJob::new("status"))).unwrap();
    /// assert_eq!(done.state, "failed");
    /// ```
    pub async fn wait<J: Classify<HttpAnswer>>(
        &self,
        request: http::Request<Bytes>,
        classify: &mut J,
    ) -> Result<JobDone, Error> {
        self.inner
            .wait_with(request, classify, AsyncIoClock::new(), NeverCancel, |_| {})
            .await
    }

    /// Like [`wait`](Self::wait), cancellable through `token`, with the
    /// one-time fallback notice ("server does not support long-poll;
    /// switching to backoff") handed to `on_notice`.
    ///
    /// # Errors
    ///
    /// As for [`wait`](Self::wait).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_async_std::{CancelToken, JsonJob};
    /// use polite_lab::{JobState, Lab, LabConfig};
    /// use std::time::Duration;
    ///
    /// // A server without long polling: the wait falls back to backoff, once.
    /// let lab = Lab::start(LabConfig::default().long_poll(false)
    ///     .job("j1", Duration::from_millis(100), JobState::Passed)).unwrap();
    /// let client = polite_async_std::Client::new();
    /// let req = http::Request::get(lab.url("/runs/j1")).body(Bytes::new()).unwrap();
    /// let mut notices = Vec::new();
    /// let done = async_std::task::block_on(client.wait_with(
    ///     req, &mut JsonJob::new("status"), &CancelToken::new(), |n| notices.push(n.to_string()),
    /// )).unwrap();
    /// assert_eq!(done.state, "passed");
    /// assert_eq!(notices.len(), 1);
    /// ```
    pub async fn wait_with<J: Classify<HttpAnswer>>(
        &self,
        request: http::Request<Bytes>,
        classify: &mut J,
        token: &CancelToken,
        on_notice: impl FnMut(Notice),
    ) -> Result<JobDone, Error> {
        self.inner
            .wait_with(
                request,
                classify,
                AsyncIoClock::new(),
                token.clone(),
                on_notice,
            )
            .await
    }

    /// Many requests under one shared deadline, `concurrency` in flight,
    /// every attempt through the pace shared by all calls of this client;
    /// results in input order.
    ///
    /// # Errors
    ///
    /// The outer `Err` only for an invalid configuration; each item's own
    /// failure is in its slot.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_lab::{Lab, LabConfig};
    ///
    /// let lab = Lab::start(LabConfig::default()).unwrap();
    /// let client = polite_async_std::Client::new();
    /// let requests = ["/items/a", "/nowhere", "/items/b"]
    ///     .map(|p| http::Request::get(lab.url(p)).body(Bytes::new()).unwrap())
    ///     .to_vec();
    /// let results = smol::block_on(client.batch(requests)).unwrap();
    /// assert_eq!(results.iter().map(|r| r.is_ok()).collect::<Vec<_>>(), [true, false, true]);
    /// ```
    pub async fn batch(&self, requests: Vec<http::Request<Bytes>>) -> BatchResult {
        self.inner
            .batch_with(requests, AsyncIoClock::new(), NeverCancel)
            .await
    }

    /// Like [`batch`](Self::batch), cancellable through `token`: items not
    /// finished when it is cancelled end `Cancelled`.
    ///
    /// # Errors
    ///
    /// As for [`batch`](Self::batch).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_async_std::{CancelToken, Outcome};
    /// use polite_lab::{Lab, LabConfig};
    ///
    /// let lab = Lab::start(LabConfig::default()).unwrap();
    /// let client = polite_async_std::Client::new();
    /// let token = CancelToken::new();
    /// token.cancel();
    /// let requests = vec![http::Request::get(lab.url("/items/a")).body(Bytes::new()).unwrap()];
    /// let results = smol::block_on(client.batch_cancellable(requests, &token)).unwrap();
    /// assert_eq!(results[0].as_ref().unwrap_err().outcome(), Some(Outcome::Cancelled));
    /// ```
    pub async fn batch_cancellable(
        &self,
        requests: Vec<http::Request<Bytes>>,
        token: &CancelToken,
    ) -> BatchResult {
        self.inner
            .batch_with(requests, AsyncIoClock::new(), token.clone())
            .await
    }
}

/// What a batch returns: per request, in input order, its answer or error.
///
/// ```
/// fn statuses(r: polite_async_std::BatchResult) -> Vec<Option<u16>> {
///     r.map(|items| items.iter().map(|i| i.as_ref().ok().map(|a| a.status().as_u16())).collect())
///         .unwrap_or_default()
/// }
/// assert!(statuses(Ok(Vec::new())).is_empty());
/// ```
pub type BatchResult = Result<Vec<Result<http::Response<Bytes>, Error>>, Error>;

/// A boxed attempt (so the drive loop can hold many): the `Sending` type of
/// `Http1Transport`, handy for other transports too.
///
/// ```
/// use bytes::Bytes;
/// use polite_async_std::{BoxSending, Transport};
/// use std::time::Instant;
///
/// /// Answers 204 after 10 ms of async-io time.
/// struct Slow;
/// impl Transport for Slow {
///     type Sending = BoxSending;
///     fn send(&self, _: http::Request<Bytes>, _abort_at: Instant) -> BoxSending {
///         Box::pin(async {
///             async_io::Timer::after(std::time::Duration::from_millis(10)).await;
///             let mut r = http::Response::new(Bytes::new());
///             *r.status_mut() = http::StatusCode::NO_CONTENT;
///             Ok(r)
///         })
///     }
/// }
/// let req = http::Request::get("http://127.0.0.1:9/").body(Bytes::new()).unwrap();
/// let resp = smol::block_on(polite_async_std::Client::with_transport(Slow, Default::default())
///     .unwrap().send(req)).unwrap();
/// assert_eq!(resp.status(), 204);
/// ```
pub type BoxSending =
    Pin<Box<dyn Future<Output = Result<http::Response<Bytes>, TransportError>> + Send>>;

#[cfg(all(test, feature = "http1"))]
mod tests {
    #[test]
    fn the_default_configuration_is_valid() {
        let _ = super::Client::new();
    }
}
