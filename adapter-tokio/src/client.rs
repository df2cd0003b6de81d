//! [`Client`]: polite's calls on tokio.

use std::sync::Arc;

use bytes::Bytes;
use polite_client::{Config, Error, HttpAnswer, JobDone, NeverCancel, Transport};
use polite_core::Notice;
use polite_core::drive::Classify;
use tokio_util::sync::CancellationToken;

use crate::cancel::TokioCancel;
use crate::clock::TokioClock;

/// polite on tokio: every call runs the core machines through the one drive
/// loop, on tokio time, with the transport `T` (reqwest by default).
///
/// Cheap to clone; clones share the transport, the configuration and (once
/// pacing is configured) the throttle.
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

#[cfg(feature = "reqwest")]
impl Client<crate::ReqwestTransport> {
    /// A client over `reqwest` with the default configuration. polite
    /// follows redirects itself only when `http` follows none of its own
    /// (see [`ReqwestTransport::default_client`](crate::ReqwestTransport::default_client)).
    ///
    /// ```
    /// let client = polite_tokio::Client::new(reqwest::Client::new());
    /// # drop(client);
    /// ```
    #[must_use]
    pub fn new(http: reqwest::Client) -> Self {
        match Self::with_transport(crate::ReqwestTransport::new(http), Config::default()) {
            Ok(c) => c,
            // The default configuration is valid (tested).
            Err(e) => unreachable!("default configuration rejected: {e}"),
        }
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
    pub fn with_transport(transport: T, config: Config) -> Result<Self, Error> {
        Ok(Client {
            inner: Arc::new(polite_client::Client::new(transport, config)?),
        })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        self.inner.config()
    }

    /// One logical request with retries, inside the configured timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Outcome`] with the outcome and the last answer, for every
    /// end but success.
    pub async fn send(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, Error> {
        self.inner
            .send_with(request, TokioClock::new(), NeverCancel)
            .await
    }

    /// Like [`send`](Self::send), ended at once (`Cancelled`) when `token`
    /// is cancelled. A request already in flight is dropped; nothing
    /// promises it did not reach the server.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub async fn send_cancellable(
        &self,
        request: http::Request<Bytes>,
        token: CancellationToken,
    ) -> Result<http::Response<Bytes>, Error> {
        self.inner
            .send_with(request, TokioClock::new(), TokioCancel::new(token))
            .await
    }

    /// Waits for a remote job (long poll first, permanent fallback to
    /// backoff), reading each answer with `classify` (e.g.
    /// [`JsonJob`](polite_client::JsonJob)), inside the configured timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Outcome`] for every end but a terminal job state.
    pub async fn wait<J: Classify<HttpAnswer>>(
        &self,
        request: http::Request<Bytes>,
        classify: &mut J,
    ) -> Result<JobDone, Error> {
        self.inner
            .wait_with(request, classify, TokioClock::new(), NeverCancel, |_| {})
            .await
    }

    /// Like [`wait`](Self::wait), cancellable through `token`, with the
    /// one-time fallback notice handed to `on_notice`.
    ///
    /// # Errors
    ///
    /// As for [`wait`](Self::wait).
    pub async fn wait_with<J: Classify<HttpAnswer>>(
        &self,
        request: http::Request<Bytes>,
        classify: &mut J,
        token: CancellationToken,
        on_notice: impl FnMut(Notice),
    ) -> Result<JobDone, Error> {
        self.inner
            .wait_with(
                request,
                classify,
                TokioClock::new(),
                TokioCancel::new(token),
                on_notice,
            )
            .await
    }

    /// Many requests under one shared deadline, `concurrency` in flight,
    /// every attempt through the throttle shared by all calls of this client;
    /// results in input order.
    ///
    /// # Errors
    ///
    /// The outer `Err` only for an invalid configuration; each item's own
    /// failure is in its slot.
    pub async fn batch(&self, requests: Vec<http::Request<Bytes>>) -> BatchResult {
        self.inner
            .batch_with(requests, TokioClock::new(), NeverCancel)
            .await
    }

    /// Like [`batch`](Self::batch), cancellable through `token`.
    ///
    /// # Errors
    ///
    /// As for [`batch`](Self::batch).
    pub async fn batch_cancellable(
        &self,
        requests: Vec<http::Request<Bytes>>,
        token: CancellationToken,
    ) -> BatchResult {
        self.inner
            .batch_with(requests, TokioClock::new(), TokioCancel::new(token))
            .await
    }
}

/// What a batch returns: per request, in input order, its answer or error.
pub type BatchResult = Result<Vec<Result<http::Response<Bytes>, Error>>, Error>;
