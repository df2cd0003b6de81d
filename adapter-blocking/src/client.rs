//! [`Client`]: polite's calls for synchronous programs.

use std::sync::Arc;

use bytes::Bytes;
use polite_client::{CancelToken, Config, Error, HttpAnswer, JobDone, NeverCancel, Transport};
use polite_core::Notice;
use polite_core::drive::Classify;

use crate::block_on::block_on;
use crate::clock::ThreadClock;

/// polite for threads: every call blocks the calling thread while the core
/// machines run through the one drive loop ([`block_on`] with a
/// [`ThreadClock`]), over the transport `T` ([`UreqTransport`](crate::UreqTransport)
/// by default).
///
/// `Clone + Send + Sync` and cheap to clone: clones share the transport,
/// the configuration and the pace (the throttle and the cool-down after a
/// 429), so threads sharing a client stay under one throttle together. The
/// pace is in-process: separate processes do not coordinate.
///
/// ```
/// use bytes::Bytes;
/// use polite_blocking::{Client, Config};
/// use polite_lab::{Lab, LabConfig};
/// use std::time::Duration;
///
/// let lab = Lab::start(LabConfig::default()).unwrap();
/// let config = Config { throttle: Some((20, Duration::from_secs(1))), ..Config::default() };
/// let client = Client::with_transport(polite_blocking::UreqTransport::default(), config)?;
/// let threads: Vec<_> = (0..2)
///     .map(|i| {
///         let (client, url) = (client.clone(), lab.url(&format!("/items/{i}")));
///         std::thread::spawn(move || client.send(http::Request::get(url).body(Bytes::new()).unwrap()))
///     })
///     .collect();
/// for t in threads {
///     assert_eq!(t.join().unwrap()?.status(), 200);
/// }
/// # Ok::<(), polite_blocking::Error>(())
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

#[cfg(feature = "ureq")]
impl Client<crate::UreqTransport> {
    /// A client over a default ureq agent
    /// ([`UreqTransport::default_agent`](crate::UreqTransport::default_agent))
    /// with the default configuration (30 s per call, no throttle).
    ///
    /// ```
    /// let client = polite_blocking::Client::new();
    /// assert_eq!(client.config().timeout, std::time::Duration::from_secs(30));
    /// ```
    #[must_use]
    pub fn new() -> Self {
        match Self::with_transport(crate::UreqTransport::default(), Config::default()) {
            Ok(c) => c,
            // The default configuration is valid (tested).
            Err(e) => unreachable!("default configuration rejected: {e}"),
        }
    }
}

#[cfg(feature = "ureq")]
impl Default for Client<crate::UreqTransport> {
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
    /// ```
    /// use polite_blocking::{Client, Config, UreqTransport};
    /// let config = Config { timeout: std::time::Duration::from_secs(5), ..Config::default() };
    /// let client = Client::with_transport(UreqTransport::default().max_body(1 << 20), config)?;
    /// assert_eq!(client.transport().body_limit(), 1 << 20);
    /// # Ok::<(), polite_blocking::Error>(())
    /// ```
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

    /// Wraps an already built `polite_client::Client`, e.g. one with an
    /// [`observe`](polite_client::Client::observe)r for a progress display.
    ///
    /// ```
    /// use polite_blocking::{Client, Config, UreqTransport};
    /// let inner = polite_client::Client::new(UreqTransport::default(), Config::default())?
    ///     .observe(|event| eprintln!("{event:?}"));
    /// let client = Client::from_client(inner);
    /// # drop(client);
    /// # Ok::<(), polite_blocking::Error>(())
    /// ```
    #[must_use]
    pub fn from_client(inner: polite_client::Client<T>) -> Self {
        Client {
            inner: Arc::new(inner),
        }
    }

    /// The configuration.
    ///
    /// ```
    /// assert_eq!(polite_blocking::Client::new().config().concurrency, 4);
    /// ```
    #[must_use]
    pub fn config(&self) -> &Config {
        self.inner.config()
    }

    /// The transport.
    ///
    /// ```
    /// assert_eq!(polite_blocking::Client::new().transport().live_workers(), 0);
    /// ```
    #[must_use]
    pub fn transport(&self) -> &T {
        self.inner.transport()
    }

    /// One logical request with retries (429, 5xx, transport errors; only
    /// when the request is replayable), inside the configured timeout.
    /// Blocks the calling thread until the end.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_lab::{Lab, LabConfig, Step};
    /// let lab = Lab::start(LabConfig::default().script("/items/1", vec![Step::without_retry_after(503), Step::Normal])).unwrap();
    /// let req = http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap();
    /// let resp = polite_blocking::Client::new().send(req)?;
    /// assert_eq!(resp.status(), 200);
    /// # Ok::<(), polite_blocking::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Outcome`] with the outcome and the last answer, for every
    /// end but success.
    pub fn send(&self, request: http::Request<Bytes>) -> Result<http::Response<Bytes>, Error> {
        block_on(self.inner.send_with(request, ThreadClock, NeverCancel))
    }

    /// Like [`send`](Self::send), ended at once (`Cancelled`) when `token`
    /// is cancelled, from any thread: during a backoff sleep, a wait for the
    /// throttle, or an attempt in flight. An attempt in flight is abandoned
    /// (see [`UreqTransport`](crate::UreqTransport) for what becomes of its
    /// worker); nothing promises it did not reach the server.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_blocking::{CancelToken, Client, Outcome};
    /// use polite_lab::{Lab, LabConfig, Step};
    /// use std::time::Duration;
    ///
    /// let lab = Lab::start(LabConfig::default().script(
    ///     "/items/1", vec![Step::with_retry_after(503, Duration::from_secs(20)), Step::Normal])).unwrap();
    /// let token = CancelToken::new();
    /// let canceller = token.clone();
    /// std::thread::spawn(move || { std::thread::sleep(Duration::from_millis(100)); canceller.cancel() });
    /// let req = http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap();
    /// let err = Client::new().send_cancellable(req, &token).unwrap_err();
    /// assert_eq!(err.outcome(), Some(Outcome::Cancelled));
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub fn send_cancellable(
        &self,
        request: http::Request<Bytes>,
        token: &CancelToken,
    ) -> Result<http::Response<Bytes>, Error> {
        block_on(self.inner.send_with(request, ThreadClock, token.clone()))
    }

    /// Waits for a remote job (long poll first, permanent fallback to
    /// backoff), reading each answer with `classify` (e.g.
    /// [`JsonJob`](polite_client::JsonJob)), inside the configured timeout.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_blocking::{Client, JsonJob};
    /// use polite_lab::{JobState, Lab, LabConfig};
    /// use std::time::Duration;
    ///
    /// let lab = Lab::start(LabConfig::default().job("j1", Duration::from_millis(200), JobState::Failed)).unwrap();
    /// let req = http::Request::get(lab.url("/runs/j1")).body(Bytes::new()).unwrap();
    /// let done = Client::new().wait(req, &mut JsonJob::new("status"))?;
    /// assert_eq!(done.state, "failed"); // a terminal state, handed back: not an error
    /// # Ok::<(), polite_blocking::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Outcome`] for every end but a terminal job state.
    pub fn wait<J: Classify<HttpAnswer>>(
        &self,
        request: http::Request<Bytes>,
        classify: &mut J,
    ) -> Result<JobDone, Error> {
        block_on(
            self.inner
                .wait_with(request, classify, ThreadClock, NeverCancel, |_| {}),
        )
    }

    /// Like [`wait`](Self::wait), cancellable through `token`, with the
    /// one-time fallback notice ("server does not support long-poll;
    /// switching to backoff") handed to `on_notice`.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_blocking::{CancelToken, Client, JsonJob};
    /// use polite_lab::{JobState, Lab, LabConfig};
    /// use std::time::Duration;
    ///
    /// // A server without long polling: the client falls back to backoff, once.
    /// let lab = Lab::start(LabConfig::default().long_poll(false).job("j1", Duration::from_millis(100), JobState::Passed)).unwrap();
    /// let req = http::Request::get(lab.url("/runs/j1")).body(Bytes::new()).unwrap();
    /// let mut notices = Vec::new();
    /// let done = Client::new().wait_with(req, &mut JsonJob::new("status"), &CancelToken::new(),
    ///                                    |n| notices.push(n.to_string()))?;
    /// assert_eq!(done.state, "passed");
    /// assert_eq!(notices.len(), 1);
    /// # Ok::<(), polite_blocking::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`wait`](Self::wait).
    pub fn wait_with<J: Classify<HttpAnswer>>(
        &self,
        request: http::Request<Bytes>,
        classify: &mut J,
        token: &CancelToken,
        on_notice: impl FnMut(Notice),
    ) -> Result<JobDone, Error> {
        block_on(
            self.inner
                .wait_with(request, classify, ThreadClock, token.clone(), on_notice),
        )
    }

    /// Many requests under one shared deadline (the configured timeout), at
    /// most `concurrency` in flight (one worker thread each), every attempt
    /// through the throttle shared by all calls of this client; results in
    /// input order.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_blocking::{Client, Config, UreqTransport};
    /// use polite_lab::{Lab, LabConfig, LogStats};
    /// use std::time::Duration;
    ///
    /// let lab = Lab::start(LabConfig::default()).unwrap();
    /// let config = Config { concurrency: 3, ..Config::default() };
    /// let client = Client::with_transport(UreqTransport::default(), config)?;
    /// let requests = (0..6)
    ///     .map(|i| http::Request::get(lab.url(&format!("/items/{i}"))).body(Bytes::new()).unwrap())
    ///     .collect();
    /// let results = client.batch(requests)?;
    /// assert_eq!(results.len(), 6);
    /// assert!(results.iter().all(|r| r.is_ok()));
    /// assert!(lab.log().peak_in_flight() <= 3);
    /// # Ok::<(), polite_blocking::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The outer `Err` only for an invalid configuration; each item's own
    /// failure is in its slot.
    pub fn batch(&self, requests: Vec<http::Request<Bytes>>) -> BatchResult {
        block_on(self.inner.batch_with(requests, ThreadClock, NeverCancel))
    }

    /// Like [`batch`](Self::batch), cancellable through `token`: items not
    /// finished when it is cancelled end `Cancelled`.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_blocking::{CancelToken, Client};
    /// use polite_lab::{Lab, LabConfig};
    ///
    /// let lab = Lab::start(LabConfig::default()).unwrap();
    /// let token = CancelToken::new();
    /// token.cancel(); // cancelled before it starts: nothing is sent
    /// let requests = vec![http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap()];
    /// let results = Client::new().batch_cancellable(requests, &token)?;
    /// assert!(results[0].is_err());
    /// assert!(lab.log().is_empty());
    /// # Ok::<(), polite_blocking::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`batch`](Self::batch).
    pub fn batch_cancellable(
        &self,
        requests: Vec<http::Request<Bytes>>,
        token: &CancelToken,
    ) -> BatchResult {
        block_on(self.inner.batch_with(requests, ThreadClock, token.clone()))
    }
}

/// What a batch returns: per request, in input order, its answer or error.
///
/// ```
/// use polite_blocking::{BatchResult, Outcome};
/// fn succeeded(r: &BatchResult) -> usize {
///     r.as_ref().map_or(0, |items| items.iter().filter(|i| i.is_ok()).count())
/// }
/// let r: BatchResult = Ok(vec![Err(polite_blocking::Error::Outcome { outcome: Outcome::Cancelled, response: None })]);
/// assert_eq!(succeeded(&r), 0);
/// ```
pub type BatchResult = Result<Vec<Result<http::Response<Bytes>, Error>>, Error>;
