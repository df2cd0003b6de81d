//! [`Client`]: `send`, `wait` and `batch` written once over the drive loop,
//! for every adapter's [`Runtime`].

use std::collections::hash_map::RandomState;
use std::future::{Future, poll_fn};
use std::hash::{BuildHasher, Hasher};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use polite_core::drive::{self, Classify, NoJobs, Observe};
use polite_core::record::AttemptRecord;
use polite_core::{
    BatchMachine, CheckedRetryPolicy, Method, Notice, Outcome, Paced, PollMachine, PollPolicy,
    RequestId, RequestInfo, RetryMachine, RetryPolicy, SplitMix64,
};

use crate::answer::HttpAnswer;
use crate::batch_paces::BatchPaces;
use crate::classify::Both;
use crate::config::Config;
use crate::error::{Error, LimitError, Limits};
use crate::io::{Failure, HttpIo, SendSlots, Source};
use crate::meter::CallMeter;
use crate::options::{CallOptions, Session};
use crate::pace::ClientPace;
use crate::paces::{ClientBudget, PaceKey, Paces};
use crate::runtime::Runtime;
use crate::stream::{BatchOrder, BatchStream};
use crate::trace;
use crate::transport::{Cancel, Clock, NeverCancel, Transport};
use tracing::Instrument;

/// polite's calls, written once for every runtime: `send` (one logical
/// request with retries), `wait` (a remote job, long poll first) and
/// `batch` (many requests under one deadline), each also `*_cancellable`
/// with the runtime's cancel token.
///
/// `R` is the adapter's [`Runtime`] and `T` its [`Transport`]; users name
/// it through an adapter's alias (`polite_tokio::Client`,
/// `polite_async_io::Client`, `polite_blocking::Client`). On an async
/// runtime a call returns a future to `.await`; on threads it blocks and
/// returns the result (see [`Runtime::Call`]).
///
/// Cheap to clone: clones share the transport, the configuration and the
/// pace. Every attempt of every call (first sends and retries, of `send`,
/// `wait` and `batch`) passes one shared [`ClientPace`]: the optional
/// throttle, the adaptive rate, and the cool-down that a 429 with
/// `Retry-After` seen by any call imposes on all. The pace is in-process:
/// separate processes do not coordinate.
pub struct Client<R, T> {
    shared: Arc<Shared<T>>,
    observer: Option<RecordObserver>,
    runtime: PhantomData<fn() -> R>,
}

/// What the clones of a client share.
struct Shared<T> {
    transport: T,
    config: Config,
    /// `config.retry`, checked once (the calls without retry rules of
    /// their own make their machines from it).
    retry: CheckedRetryPolicy,
    /// `config.poll_policy()`, made once: the waits that keep the client's
    /// retry rules share it.
    poll_policy: Arc<PollPolicy>,
    paces: Paces,
    ids: AtomicU64,
    entropy: u64,
}

impl<R, T> Clone for Client<R, T> {
    fn clone(&self) -> Self {
        Client {
            shared: Arc::clone(&self.shared),
            observer: self.observer.clone(),
            runtime: PhantomData,
        }
    }
}

/// The header that makes any request replayable (SPEC §2).
const IDEMPOTENCY_KEY: http::HeaderName = http::HeaderName::from_static("idempotency-key");

/// What polite knows about a request from its method and headers: a request
/// with an `Idempotency-Key` header may be re-sent whatever its method; the
/// body is `Bytes`, which can always be produced again.
///
/// ```
/// let post = http::Request::post("http://127.0.0.1/x").body(bytes::Bytes::new()).unwrap();
/// assert!(!polite_client::request_info(1, &post).is_replayable());
/// let keyed = http::Request::post("http://127.0.0.1/x").header("Idempotency-Key", "k1")
///     .body(bytes::Bytes::new()).unwrap();
/// assert!(polite_client::request_info(2, &keyed).is_replayable());
/// ```
#[must_use]
pub fn request_info(id: u64, request: &http::Request<Bytes>) -> RequestInfo {
    let info = RequestInfo::new(
        RequestId(id),
        Method::parse(request.method().as_str().as_bytes()),
    );
    // A named constant: `contains_key(&str)` parses and validates the name
    // on every call; most requests carry no header at all.
    let headers = request.headers();
    if !headers.is_empty() && headers.contains_key(IDEMPOTENCY_KEY) {
        info.with_idempotency_key()
    } else {
        info
    }
}

impl<R: Runtime> Client<R, R::Ready>
where
    R::Ready: Transport + Default,
    <R::Ready as Transport>::Sending: Unpin,
{
    /// A client over the adapter's own transport with the default
    /// configuration (30 s per call, the SPEC's retry budgets, the adaptive
    /// pace).
    ///
    /// ```
    /// # use polite_client::Runtime;
    /// # fn f<R: Runtime>() where R::Ready: polite_client::Transport + Default,
    /// #     <R::Ready as polite_client::Transport>::Sending: Unpin {
    /// let client = polite_client::Client::<R, R::Ready>::new();
    /// assert_eq!(client.config().timeout, std::time::Duration::from_secs(30));
    /// # }
    /// ```
    #[must_use]
    pub fn new() -> Self {
        match Self::with_transport(R::Ready::default(), Config::default()) {
            Ok(c) => c,
            // The default configuration is valid (tested).
            Err(e) => unreachable!("default configuration rejected: {e}"),
        }
    }

    /// A client over the adapter's own transport with `config`.
    ///
    /// # Errors
    ///
    /// [`Error::Policy`] or [`Error::Config`] for a configuration that
    /// makes no sense.
    pub fn with_config(config: Config) -> Result<Self, Error> {
        Self::with_transport(R::Ready::default(), config)
    }
}

impl<R: Runtime> Default for Client<R, R::Ready>
where
    R::Ready: Transport + Default,
    <R::Ready as Transport>::Sending: Unpin,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<R: Runtime, T: Transport> Client<R, T>
where
    T::Sending: Unpin,
{
    /// A client over any [`Transport`] with a configuration.
    ///
    /// # Errors
    ///
    /// [`Error::Policy`] for a policy that makes no sense,
    /// [`Error::Config`] for a bad long-poll parameter name.
    pub fn with_transport(transport: T, config: Config) -> Result<Self, Error> {
        let retry = CheckedRetryPolicy::new(config.retry)?;
        let poll_policy = Arc::new(config.poll_policy());
        poll_policy.validate()?;
        if !crate::io::valid_param_name(config.wait.wait_param) {
            return Err(Error::Config(
                "wait_param must be 1 to 64 ASCII letters, digits, '_', '-' or '.'",
            ));
        }
        config.batch_policy().validate()?;
        let paces = Paces::new(&config)?;
        let entropy = RandomState::new().build_hasher().finish();
        Ok(Client {
            shared: Arc::new(Shared {
                transport,
                config,
                retry,
                poll_policy,
                paces,
                ids: AtomicU64::new(1),
                entropy,
            }),
            observer: None,
            runtime: PhantomData,
        })
    }

    /// This client, also handing every attempt record and notice of its
    /// calls to `observer` (records always go to `tracing` too). For
    /// progress displays and logs of your own; records never hold
    /// credentials. The observer belongs to the returned client and the
    /// clones made from it; the pace stays shared with every clone.
    ///
    /// ```
    /// # use bytes::Bytes;
    /// # use polite_client::{CancelToken, Client, Clock, Config, Runtime, Transport, TransportError};
    /// # use std::future::{Future, Ready, ready};
    /// # use std::task::{Context, Poll, Waker};
    /// # use std::time::Instant;
    /// # struct Frozen(Instant);
    /// # impl Clock for Frozen {
    /// #     fn now(&self) -> Instant { self.0 }
    /// #     fn poll_sleep(&mut self, _: &mut Context<'_>, _: Instant) -> Poll<()> { Poll::Ready(()) }
    /// # }
    /// # struct Tiny;
    /// # impl Runtime for Tiny {
    /// #     type Clock = Frozen;
    /// #     type Token = CancelToken;
    /// #     type Cancel = CancelToken;
    /// #     type Call<F: Future> = F::Output;
    /// #     type Ready = ();
    /// #     fn clock() -> Frozen { Frozen(Instant::now()) }
    /// #     fn watch(token: &CancelToken) -> CancelToken { token.clone() }
    /// #     fn cancel(token: &CancelToken) { token.cancel() }
    /// #     fn call<F: Future>(call: F) -> F::Output {
    /// #         match std::pin::pin!(call).poll(&mut Context::from_waker(Waker::noop())) {
    /// #             Poll::Ready(out) => out,
    /// #             Poll::Pending => unreachable!("nothing here waits"),
    /// #         }
    /// #     }
    /// #     fn settle<F: Future>(output: F::Output) -> impl Future<Output = F::Output> { ready(output) }
    /// # }
    /// # /// Answers 200 "hi".
    /// # struct Hi;
    /// # impl Transport for Hi {
    /// #     type Sending = Ready<Result<http::Response<Bytes>, TransportError>>;
    /// #     fn send(&self, _: http::Request<Bytes>, _: Instant) -> Self::Sending {
    /// #         ready(Ok(http::Response::new(Bytes::from_static(b"hi"))))
    /// #     }
    /// # }
    /// # let get = || http::Request::get("http://127.0.0.1/").body(Bytes::new()).unwrap();
    /// use polite_client::Observed;
    /// use std::sync::{Arc, Mutex};
    /// let client: Client<Tiny, Hi> = Client::with_transport(Hi, Config::default())?; // answers 200
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = Arc::clone(&seen);
    /// let client = client.observe(move |event: Observed<'_>| {
    ///     if let Observed::Record(r) = event {
    ///         log.lock().unwrap().push(r.reply);
    ///     }
    /// });
    /// client.send(get())?;
    /// client.clone().send(get())?; // clones keep the observer
    /// assert_eq!(*seen.lock().unwrap(), [polite_core::Reply::Status(200); 2]);
    /// # Ok::<(), polite_client::Error>(())
    /// ```
    #[must_use]
    pub fn observe(mut self, observer: impl Fn(Observed<'_>) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The transport.
    #[must_use]
    pub fn transport(&self) -> &T {
        &self.shared.transport
    }

    /// The rate each pace of this client (and its clones) has settled on,
    /// sends per second, by key ([`Paces::rates`]): for a summary at the
    /// end of a run ("the pace settled at 4.2/s").
    ///
    /// ```
    /// # use bytes::Bytes;
    /// # use polite_client::{CancelToken, Client, Clock, Config, Runtime, Transport, TransportError};
    /// # use std::future::{Future, Ready, ready};
    /// # use std::task::{Context, Poll, Waker};
    /// # use std::time::Instant;
    /// # struct Frozen(Instant);
    /// # impl Clock for Frozen {
    /// #     fn now(&self) -> Instant { self.0 }
    /// #     fn poll_sleep(&mut self, _: &mut Context<'_>, _: Instant) -> Poll<()> { Poll::Ready(()) }
    /// # }
    /// # struct Tiny;
    /// # impl Runtime for Tiny {
    /// #     type Clock = Frozen;
    /// #     type Token = CancelToken;
    /// #     type Cancel = CancelToken;
    /// #     type Call<F: Future> = F::Output;
    /// #     type Ready = ();
    /// #     fn clock() -> Frozen { Frozen(Instant::now()) }
    /// #     fn watch(token: &CancelToken) -> CancelToken { token.clone() }
    /// #     fn cancel(token: &CancelToken) { token.cancel() }
    /// #     fn call<F: Future>(call: F) -> F::Output {
    /// #         match std::pin::pin!(call).poll(&mut Context::from_waker(Waker::noop())) {
    /// #             Poll::Ready(out) => out,
    /// #             Poll::Pending => unreachable!("nothing here waits"),
    /// #         }
    /// #     }
    /// #     fn settle<F: Future>(output: F::Output) -> impl Future<Output = F::Output> { ready(output) }
    /// # }
    /// # /// Answers 200 "hi".
    /// # struct Hi;
    /// # impl Transport for Hi {
    /// #     type Sending = Ready<Result<http::Response<Bytes>, TransportError>>;
    /// #     fn send(&self, _: http::Request<Bytes>, _: Instant) -> Self::Sending {
    /// #         ready(Ok(http::Response::new(Bytes::from_static(b"hi"))))
    /// #     }
    /// # }
    /// # let get = || http::Request::get("http://127.0.0.1/").body(Bytes::new()).unwrap();
    /// use polite_client::{PaceKey, Throttle};
    /// use std::time::Duration;
    /// // 30 sends per minute per origin.
    /// let config = Config { throttle: Some(Throttle::new(30, Duration::from_secs(60))), ..Config::default() };
    /// let client: Client<Tiny, Hi> = Client::with_transport(Hi, config)?;
    /// assert!(client.pace_rates().is_empty()); // no origin called yet
    /// client.send(get())?;
    /// for (key, rate) in client.pace_rates() {
    ///     println!("{}: {rate:.1}/s", key.as_str());
    /// }
    /// assert_eq!(client.pace_rates(), vec![(PaceKey::new("http://127.0.0.1:80"), 0.5)]);
    /// # Ok::<(), polite_client::Error>(())
    /// ```
    #[must_use]
    pub fn pace_rates(&self) -> Vec<(PaceKey, f64)> {
        self.shared.paces.rates()
    }

    /// One logical request with retries (429, 5xx and transport errors, by
    /// class; only when the request is replayable), inside the configured
    /// timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Transport`] when the call ended on an attempt that got no
    /// answer (its cause, attempts and time), [`Error::Limit`] when it ran
    /// into its timeout or a server's over-long wait (`TimedOut`,
    /// `RateLimited`: the limit, the last answer or transport error,
    /// attempts and time), [`Error::Outcome`] with the outcome and the last
    /// answer for every other end but success.
    pub fn send(
        &self,
        request: http::Request<Bytes>,
    ) -> R::Call<impl Future<Output = Result<http::Response<Bytes>, Error>>> {
        R::call_sequential(self.send_in(&self.shared.transport, request, NeverCancel))
    }

    /// Like [`send`](Self::send), over `transport` instead of the client's
    /// own, with the client's configuration and paces: for middleware that
    /// is handed the next layer per call (reqwest-middleware's `Next`, a
    /// tower service). Dropping the future cancels the call.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub fn send_via<'a, U>(
        &'a self,
        transport: &'a U,
        request: http::Request<Bytes>,
    ) -> R::Call<impl Future<Output = Result<http::Response<Bytes>, Error>> + 'a>
    where
        U: Transport,
        U::Sending: Unpin,
    {
        R::call(self.send_in(transport, request, NeverCancel))
    }

    /// Like [`send_via`](Self::send_via), with the call's options given
    /// here rather than found in the request's extensions (a
    /// [`CallOptions`] among them is then not read): for middleware that
    /// has the options at hand, so that they are not put into the request
    /// only to be looked up again.
    ///
    /// ```
    /// # use bytes::Bytes;
    /// # use polite_client::{CancelToken, Client, Clock, Config, NoTransport, Runtime, Transport, TransportError};
    /// # use std::future::{Future, Ready, ready};
    /// # use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    /// # use std::task::{Context, Poll, Waker};
    /// # use std::time::Instant;
    /// # /// Virtual time: a sleep moves the clock to its end at once.
    /// # struct Virtual(Instant);
    /// # impl Clock for Virtual {
    /// #     fn now(&self) -> Instant { self.0 }
    /// #     fn poll_sleep(&mut self, _: &mut Context<'_>, until: Instant) -> Poll<()> {
    /// #         self.0 = self.0.max(until);
    /// #         Poll::Ready(())
    /// #     }
    /// # }
    /// # struct Tiny;
    /// # impl Runtime for Tiny {
    /// #     type Clock = Virtual;
    /// #     type Token = CancelToken;
    /// #     type Cancel = CancelToken;
    /// #     type Call<F: Future> = F::Output;
    /// #     type Ready = ();
    /// #     fn clock() -> Virtual { Virtual(Instant::now()) }
    /// #     fn watch(token: &CancelToken) -> CancelToken { token.clone() }
    /// #     fn cancel(token: &CancelToken) { token.cancel() }
    /// #     fn call<F: Future>(call: F) -> F::Output {
    /// #         match std::pin::pin!(call).poll(&mut Context::from_waker(Waker::noop())) {
    /// #             Poll::Ready(out) => out,
    /// #             Poll::Pending => unreachable!("nothing here waits"),
    /// #         }
    /// #     }
    /// #     fn settle<F: Future>(output: F::Output) -> impl Future<Output = F::Output> { ready(output) }
    /// # }
    /// # /// Answers 503, counting its sends.
    /// # #[derive(Default)]
    /// # struct Unavailable(AtomicU32);
    /// # impl Transport for Unavailable {
    /// #     type Sending = Ready<Result<http::Response<Bytes>, TransportError>>;
    /// #     fn send(&self, _: http::Request<Bytes>, _: Instant) -> Self::Sending {
    /// #         self.0.fetch_add(1, Relaxed);
    /// #         ready(Ok(http::Response::builder().status(503).body(Bytes::new()).unwrap()))
    /// #     }
    /// # }
    /// use polite_client::CallOptions;
    /// use polite_core::RetryPolicy;
    /// let client: Client<Tiny, NoTransport> = Client::with_transport(NoTransport, Config::default())?;
    /// let no_retry = CallOptions::new().retry(RetryPolicy {
    ///     max_total_retries: Some(0),
    ///     ..client.config().retry
    /// });
    /// let get = || {
    ///     let mut request = http::Request::get("http://127.0.0.1/").body(Bytes::new()).unwrap();
    ///     request.extensions_mut().insert(no_retry.clone());
    ///     request
    /// };
    /// // `send_via` reads the options in the request: the 503 is not retried.
    /// let upstream = Unavailable::default();
    /// assert!(client.send_via(&upstream, get()).is_err());
    /// assert_eq!(upstream.0.load(Relaxed), 1);
    /// // The options given rule: the client's retry rules, retried.
    /// let upstream = Unavailable::default();
    /// assert!(client.send_via_with(&upstream, get(), &CallOptions::new()).is_err());
    /// assert!(upstream.0.load(Relaxed) > 1);
    /// # Ok::<(), polite_client::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub fn send_via_with<'a, U>(
        &'a self,
        transport: &'a U,
        request: http::Request<Bytes>,
        options: &'a CallOptions,
    ) -> R::Call<impl Future<Output = Result<http::Response<Bytes>, Error>> + 'a>
    where
        U: Transport,
        U::Sending: Unpin,
    {
        R::call(self.send_with(transport, request, Some(options), NeverCancel))
    }

    /// Like [`send`](Self::send), ended at once (`Cancelled`) when `token`
    /// is cancelled (from any thread or task): during a backoff sleep, a
    /// pacing wait or an attempt in flight. An attempt in flight is dropped;
    /// nothing promises it did not reach the server.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub fn send_cancellable(
        &self,
        request: http::Request<Bytes>,
        token: &R::Token,
    ) -> R::Call<impl Future<Output = Result<http::Response<Bytes>, Error>>> {
        R::call(self.send_in(&self.shared.transport, request, R::watch(token)))
    }

    /// Waits for a remote job: polls `request` (normally a `GET` of the job
    /// resource) — long polls first, a permanent fallback to backoff when
    /// the server rejects the wait parameter (one [`Notice`] to the
    /// observer) — until the job reaches a terminal state, inside the
    /// configured timeout. `classify` reads each answer
    /// ([`JsonJob`](crate::JsonJob) for JSON status bodies).
    ///
    /// # Errors
    ///
    /// [`Error::Outcome`] (or [`Error::Transport`]) for every end but a
    /// terminal state; a job that ended `failed` is *not* an error here:
    /// the state is handed back.
    pub fn wait<J: Classify<HttpAnswer>>(
        &self,
        request: http::Request<Bytes>,
        classify: &mut J,
    ) -> R::Call<impl Future<Output = Result<JobDone, Error>>> {
        R::call_sequential(self.wait_in(request, classify, NeverCancel))
    }

    /// Like [`wait`](Self::wait), ended at once (`Cancelled`) when `token`
    /// is cancelled.
    ///
    /// # Errors
    ///
    /// As for [`wait`](Self::wait).
    pub fn wait_cancellable<J: Classify<HttpAnswer>>(
        &self,
        request: http::Request<Bytes>,
        classify: &mut J,
        token: &R::Token,
    ) -> R::Call<impl Future<Output = Result<JobDone, Error>>> {
        R::call(self.wait_in(request, classify, R::watch(token)))
    }

    /// Many logical requests under one shared deadline (the configured
    /// timeout), at most `concurrency` in flight, every attempt through the
    /// client's shared pace of its own key; an item that ends `RateLimited`
    /// is restarted after the server's time while the deadline allows.
    /// Results come back in input order, one per request.
    ///
    /// The batch runs under the client's timeout and retry rules: an item
    /// whose [`CallOptions`] set its own `timeout`, `retry` or `session`
    /// (which one batch deadline cannot honour per item) ends
    /// [`InvalidRequest`](polite_core::TransportErrorKind::InvalidRequest)
    /// unsent, its error saying so; its `pace_key`, `label` and
    /// `one_shot_body` are honoured. **Each
    /// item is paced by its own key** (SPEC §4.2): its origin (or what
    /// [`PaceBy`](crate::PaceBy) says), or the key its [`CallOptions`]
    /// name — set the same key on every request to pace a whole batch as
    /// one. A 429 with `Retry-After` from one origin cools that origin's
    /// pace only: the items for other origins go on meanwhile, and a learnt
    /// `RateLimit` quota, the adaptive rate and the retry budget
    /// ([`Config::retry_budget`](crate::Config::retry_budget)) are per key
    /// too, shared with the client's other calls to that key. An item held
    /// back by its key's pace does not hold back other keys' items within
    /// the batch's window of 4 × `concurrency` items; a key whose pace
    /// cannot grant before the deadline ends its own items `Starved`.
    ///
    /// Where calls block (polite-blocking), a batch handed out through
    /// [`BatchStream::for_each_result`] is the faster form: the threads
    /// that run its attempts drive it themselves, where `batch` hands every
    /// attempt from the calling thread to a worker and back.
    ///
    /// # Errors
    ///
    /// The outer `Err` only for an invalid configuration; each item's own
    /// failure is an [`Error`] in its slot.
    pub fn batch(
        &self,
        requests: Vec<http::Request<Bytes>>,
    ) -> R::Call<impl Future<Output = BatchResult>> {
        R::call(self.batch_in(requests, NeverCancel))
    }

    /// Like [`batch`](Self::batch), cancellable through `token`: the items
    /// not finished when it is cancelled end `Cancelled`.
    ///
    /// # Errors
    ///
    /// As for [`batch`](Self::batch).
    pub fn batch_cancellable(
        &self,
        requests: Vec<http::Request<Bytes>>,
        token: &R::Token,
    ) -> R::Call<impl Future<Output = BatchResult>> {
        R::call(self.batch_in(requests, R::watch(token)))
    }

    /// Many logical requests, pulled from `requests` as capacity frees and
    /// handed out as each ends: memory stays bounded by the batch's window
    /// however many requests there are (a 10-million-line file, an endless
    /// iterator), and the first results arrive while the batch runs.
    /// Otherwise as [`batch`](Self::batch): one deadline (the configured
    /// timeout, from now), `concurrency` in flight, each item paced (and
    /// its retries budgeted) by its own key, restarts after the server's
    /// time.
    ///
    /// In [`BatchOrder::Input`] (the default) results come out in input
    /// order through a reorder window of [`BatchOrder::window`] items; in
    /// [`BatchOrder::Completion`] as they end. The machine keeps about 250
    /// bytes per item in progress (at most `4 × concurrency` items), the
    /// `Io` the request of each item in progress.
    ///
    /// The iterator is pulled on the thread that drives the batch, so it
    /// must not block: one that waits (lines of a pipe held open, a
    /// socket, a queue) holds back every send, answer, timer and cancel
    /// until it returns. Feed such input through a channel to
    /// [`batch_from_stream`](Self::batch_from_stream) instead.
    ///
    /// # Errors
    ///
    /// [`Error::Policy`] for a configuration that makes no sense; each
    /// item's own failure is an [`Error`] in its result.
    pub fn batch_stream<'c, I>(
        &'c self,
        requests: I,
        order: BatchOrder,
    ) -> Result<BatchStream<R, impl Future<Output = ()> + 'c>, Error>
    where
        I: IntoIterator<Item = http::Request<Bytes>>,
        I::IntoIter: Send + 'c,
    {
        self.stream_in(requests, order, NeverCancel)
    }

    /// Like [`batch_stream`](Self::batch_stream), cancellable through
    /// `token`: the items in progress end `Cancelled` and are handed out;
    /// no more are pulled.
    ///
    /// # Errors
    ///
    /// As for [`batch_stream`](Self::batch_stream).
    pub fn batch_stream_cancellable<'c, I>(
        &'c self,
        requests: I,
        order: BatchOrder,
        token: &R::Token,
    ) -> Result<BatchStream<R, impl Future<Output = ()> + 'c>, Error>
    where
        I: IntoIterator<Item = http::Request<Bytes>>,
        I::IntoIter: Send + 'c,
    {
        self.stream_in(requests, order, R::watch(token))
    }

    /// Like [`batch_stream`](Self::batch_stream), over requests that arrive
    /// when they arrive: a channel fed by a thread that reads a pipe, a
    /// socket or a queue. [`batch_stream`](Self::batch_stream) pulls its
    /// iterator on the thread that drives the batch, so an iterator that
    /// blocks (stdin held open, `tail -f`) stops every send, answer and
    /// timer until it returns; a stream that has no request yet holds
    /// nothing back: the items in progress go on, the deadline and a
    /// cancel end the batch on time, and the batch wakes when the next
    /// request comes. The input ends when the stream does.
    ///
    /// The batch's own metrics (`polite_call_duration_seconds`,
    /// `polite_calls_in_flight`) carry an empty `origin` label: the first
    /// request is not known when the batch starts.
    ///
    /// ```
    /// # use polite_client::{CancelToken, Clock, Runtime, Transport, TransportError};
    /// # use std::future::{Future, Ready, ready};
    /// # use std::task::Waker;
    /// # use std::time::Instant;
    /// # struct Frozen(Instant);
    /// # impl Clock for Frozen {
    /// #     fn now(&self) -> Instant { self.0 }
    /// #     fn poll_sleep(&mut self, _: &mut Context<'_>, _: Instant) -> Poll<()> { Poll::Ready(()) }
    /// # }
    /// # struct Tiny;
    /// # impl Runtime for Tiny {
    /// #     type Clock = Frozen;
    /// #     type Token = CancelToken;
    /// #     type Cancel = CancelToken;
    /// #     type Call<F: Future> = F::Output;
    /// #     type Ready = ();
    /// #     fn clock() -> Frozen { Frozen(Instant::now()) }
    /// #     fn watch(token: &CancelToken) -> CancelToken { token.clone() }
    /// #     fn cancel(token: &CancelToken) { token.cancel() }
    /// #     fn call<F: Future>(call: F) -> F::Output {
    /// #         match std::pin::pin!(call).poll(&mut Context::from_waker(Waker::noop())) {
    /// #             Poll::Ready(out) => out,
    /// #             Poll::Pending => unreachable!("nothing here waits"),
    /// #         }
    /// #     }
    /// #     fn settle<F: Future>(output: F::Output) -> impl Future<Output = F::Output> { ready(output) }
    /// # }
    /// # /// Answers 200 "hi".
    /// # struct Hi;
    /// # impl Transport for Hi {
    /// #     type Sending = Ready<Result<http::Response<Bytes>, TransportError>>;
    /// #     fn send(&self, _: http::Request<Bytes>, _: Instant) -> Self::Sending {
    /// #         ready(Ok(http::Response::new(Bytes::from_static(b"hi"))))
    /// #     }
    /// # }
    /// use bytes::Bytes;
    /// use futures_core::Stream;
    /// use polite_client::{BatchOrder, Client, Config};
    /// use std::pin::Pin;
    /// use std::task::{Context, Poll};
    ///
    /// /// Two requests, then the end (a real feed would be a channel).
    /// struct Two(u8);
    /// impl Stream for Two {
    ///     type Item = http::Request<Bytes>;
    ///     fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
    ///         self.0 += 1;
    ///         Poll::Ready((self.0 <= 2).then(|| http::Request::new(Bytes::new())))
    ///     }
    /// }
    /// let client: Client<Tiny, Hi> = Client::with_transport(Hi, Config::default())?; // answers 200
    /// let mut results = Vec::new();
    /// let mut stream = client.batch_from_stream(Two(0), BatchOrder::Input)?;
    /// stream.for_each_result(|(item, result)| results.push((item, result.is_ok())));
    /// assert_eq!(results, vec![(0, true), (1, true)]);
    /// # Ok::<(), polite_client::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`batch_stream`](Self::batch_stream).
    pub fn batch_from_stream<'c, S>(
        &'c self,
        requests: S,
        order: BatchOrder,
    ) -> Result<BatchStream<R, impl Future<Output = ()> + 'c>, Error>
    where
        S: Stream<Item = http::Request<Bytes>> + Send + 'c,
    {
        self.stream_from(Input::Stream(Box::pin(requests)), order, NeverCancel)
    }

    /// Like [`batch_from_stream`](Self::batch_from_stream), cancellable
    /// through `token`: the items in progress end `Cancelled` and are
    /// handed out; no more are taken from the stream, and the batch does
    /// not wait for its next request.
    ///
    /// # Errors
    ///
    /// As for [`batch_stream`](Self::batch_stream).
    pub fn batch_from_stream_cancellable<'c, S>(
        &'c self,
        requests: S,
        order: BatchOrder,
        token: &R::Token,
    ) -> Result<BatchStream<R, impl Future<Output = ()> + 'c>, Error>
    where
        S: Stream<Item = http::Request<Bytes>> + Send + 'c,
    {
        self.stream_from(Input::Stream(Box::pin(requests)), order, R::watch(token))
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.shared.ids.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn rng(&self, id: u64) -> SplitMix64 {
        let seed = self.shared.config.seed.unwrap_or(self.shared.entropy);
        SplitMix64::new(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// The call's observer; `servers` names each item's server for its
    /// attempt events (a batch's; `|_| None` for a call whose span names
    /// it).
    fn observer<'m, S>(&'m self, meter: &'m CallMeter, servers: S) -> Tracing<'m, S>
    where
        S: Fn(u32) -> Option<trace::Server>,
    {
        Tracing {
            observer: self.observer.as_deref(),
            meter,
            fleet: self.shared.config.fleet.as_deref(),
            servers,
        }
    }

    /// Runs one single-request machine to its end: paced through the
    /// client's shared pace, driven by the one drive loop over this call's
    /// `Io`, records and notices to `tracing` and the observer. Returns the
    /// outcome and the last answer.
    ///
    /// Not an `async fn`: the machine is wrapped in its pace here, before
    /// the future exists, so that the future holds the paced machine only
    /// (an `async fn` keeps its by-value arguments beside its locals: the
    /// bare machine would be held twice for the whole call). `call` is
    /// taken by value and read here too: the future keeps none of it, and
    /// the caller's future need not keep it across the call (376 bytes).
    ///
    /// Inlined into its caller: out of line it returned its future (1.7 KiB
    /// for `send` on tokio) to a temporary that the caller's `.await` then
    /// copied twice (about 0.4 k instructions per call).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn drive_one<'a, U, M, C, J>(
        &'a self,
        transport: &'a U,
        machine: M,
        request: &'a http::Request<Bytes>,
        call: Started,
        clock: R::Clock,
        cancel: C,
        classify: &'a mut J,
    ) -> impl Future<Output = Ended> + 'a
    where
        U: Transport,
        U::Sending: Unpin,
        M: polite_core::Machine + 'a,
        C: Cancel + 'a,
        J: Classify<HttpAnswer> + ?Sized,
    {
        let config = &self.shared.config;
        let now = call.now;
        let (timeout, wait_cap) = (call.timeout, call.retry(config).retry_after.auto_wait_cap);
        let span = trace::call_span(call.kind, request, call.label.as_deref());
        let pace = call.pace();
        let meter = CallMeter::start(call.kind, &call.key, &pace, now);
        let mut machine = Paced::new(machine, meter.pace(pace), now)
            .retry_after_limits(call.retry(config).retry_after)
            .rate_limit_headers(config.rate_limit_headers);
        let mut classify = Both {
            client: config.classify.as_ref(),
            call: classify,
        };
        let session = call.session.map(|(session, _)| session);
        async move {
            // What the sends leave, kept here: the `Io` borrows it, so
            // nothing is allocated for it.
            let slots = SendSlots::default();
            let mut io = HttpIo::with_slots(
                transport,
                clock,
                cancel,
                std::slice::from_ref(request),
                config.wait.wait_param,
                &slots,
            )
            .redirects(config.redirects)
            .meter(meter.clone())
            .session(session);
            let done = drive::drive(
                &mut machine,
                &mut io,
                &mut classify,
                &mut self.observer(&meter, |_| None),
            )
            .instrument(span.clone())
            .await;
            let end = drive::Io::now(&io);
            meter.ended(0, &done.outcome, || end);
            meter.finish(end);
            // A stale answer is dropped, not delivered (SPEC §2.3): it
            // belongs to the caller's earlier session.
            let last = match done.outcome {
                Outcome::Stale => None,
                _ => done.answers.into_iter().next().flatten().map(|a| a.0),
            };
            let attempts = io.sends(0);
            let status = last.as_ref().map(|r| r.status().as_u16());
            trace::end_span(&span, status, attempts, trace::error_type(&done.outcome));
            Ended {
                limits: Limits::at(&done.outcome, end, timeout, wait_cap),
                outcome: done.outcome,
                last,
                error: io.take_error(0),
                attempts,
                elapsed: end.saturating_duration_since(now),
            }
        }
    }

    /// What a call starts with: its id, clock reading, options and pace.
    fn start(
        &self,
        kind: &'static str,
        request: &http::Request<Bytes>,
        now: std::time::Instant,
    ) -> Started {
        self.start_with(kind, request, request.extensions().get(), now)
    }

    /// [`start`](Self::start) with the call's options given (`None`: it
    /// has none). By reference: only what the call keeps of them is
    /// copied.
    fn start_with(
        &self,
        kind: &'static str,
        request: &http::Request<Bytes>,
        options: Option<&CallOptions>,
        now: std::time::Instant,
    ) -> Started {
        let paces = &self.shared.paces;
        let key = match options.and_then(|o| o.pace_key.as_ref()) {
            Some(key) => key.clone(),
            None => paces.key_of(request),
        };
        let (pace, budget) = paces.entry(&key, now);
        Started {
            id: self.next_id(),
            now,
            own_retry: options.and_then(|o| o.retry),
            timeout: options
                .and_then(|o| o.timeout)
                .unwrap_or(self.shared.config.timeout),
            pace,
            budget,
            key,
            kind,
            label: options.and_then(|o| o.label.clone()),
            one_shot: options.is_some_and(|o| o.one_shot_body),
            session: options
                .and_then(|o| o.session.as_ref())
                .map(|s| (s.clone(), s.generation())),
        }
    }

    /// `send` over `transport`, cancelled by `cancel`: the plain future
    /// behind [`send`](Self::send) and [`send_via`](Self::send_via), for the
    /// crate's own integrations (the tower layer) that need it without
    /// [`Runtime::call`].
    pub(crate) fn send_in<U, C>(
        &self,
        transport: &U,
        request: http::Request<Bytes>,
        cancel: C,
    ) -> impl Future<Output = Result<http::Response<Bytes>, Error>>
    where
        U: Transport,
        U::Sending: Unpin,
        C: Cancel,
    {
        self.send_with(transport, request, None, cancel)
    }

    /// `send` with the call's options, when given (else they are read from
    /// the request's extensions). By reference: a by-value argument would
    /// be kept in the future for the whole call.
    ///
    /// A plain `fn` returning an `async move` block, not an `async fn`: an
    /// `async fn` keeps each argument twice in its future (as it was passed
    /// and as the body's own binding), which for the request is 256 bytes
    /// of every call's future (2,808 → 2,552 bytes for polite-tokio's
    /// `send`, `-Zprint-type-sizes`; 2,176 with the call's `Started` no
    /// longer kept across the drive). So is [`wait_in`](Self::wait_in).
    #[allow(clippy::manual_async_fn)] // the point: see above
    pub(crate) fn send_with<U, C>(
        &self,
        transport: &U,
        request: http::Request<Bytes>,
        options: Option<&CallOptions>,
        cancel: C,
    ) -> impl Future<Output = Result<http::Response<Bytes>, Error>>
    where
        U: Transport,
        U::Sending: Unpin,
        C: Cancel,
    {
        async move {
            let clock = R::clock();
            let mut no_jobs = NoJobs;
            // `call` in a block of its own: it is borrowed here, and a
            // local once borrowed is kept in the future until its scope
            // ends, even moved (376 bytes across the whole call).
            let ended = {
                let options = options.or_else(|| request.extensions().get());
                let call = self.start_with("send", &request, options, clock.now());
                let info = call.info(&request);
                let rng = self.rng(call.id);
                // The client's rules were checked when it was built; a
                // call's own are checked now (a bad one is its error).
                let machine = match &call.own_retry {
                    Some(own) => RetryMachine::new(*own, info, rng, call.now, call.timeout)?
                        .with_budget(call.budget()),
                    None => RetryMachine::checked(
                        &self.shared.retry,
                        info,
                        rng,
                        call.now,
                        call.timeout,
                        call.budget(),
                    ),
                };
                self.drive_one(
                    transport,
                    machine,
                    &request,
                    call,
                    clock,
                    cancel,
                    &mut no_jobs,
                )
            };
            ended.await.finish()
        }
    }

    /// `wait` over the client's transport, cancelled by `cancel` (a plain
    /// `fn`, as [`send_with`](Self::send_with) is, for its future's size).
    #[allow(clippy::manual_async_fn)] // the point: see send_with
    fn wait_in<J: Classify<HttpAnswer>, C: Cancel>(
        &self,
        request: http::Request<Bytes>,
        classify: &mut J,
        cancel: C,
    ) -> impl Future<Output = Result<JobDone, Error>> {
        async move {
            // polite owns the wait parameter: one already in the caller's
            // URL would go along with every poll, and a server reading the
            // first of two would be asked for more than the remaining
            // budget (SPEC §3), or rejects it again after the fallback.
            let mut request = request;
            let wait_param = self.shared.config.wait.wait_param;
            if let Some(uri) = crate::io::without_query_param(request.uri(), wait_param) {
                *request.uri_mut() = uri;
            }
            let clock = R::clock();
            let call = self.start("wait", &request, clock.now());
            let policy = if let Some(retry) = call.own_retry {
                Arc::new(PollPolicy {
                    retry,
                    ..self.shared.config.poll_policy()
                })
            } else {
                Arc::clone(&self.shared.poll_policy)
            };
            let machine = PollMachine::new(
                policy,
                call.info(&request),
                self.rng(call.id),
                call.now,
                call.timeout,
            )?;
            let transport = &self.shared.transport;
            let ended = self
                .drive_one(transport, machine, &request, call, clock, cancel, classify)
                .await;
            match (ended.outcome, ended.last) {
                (Outcome::Terminal { state }, Some(response)) => Ok(JobDone {
                    state: state.as_str().to_owned(),
                    response,
                }),
                (outcome, last) => Err(Ended {
                    outcome,
                    last,
                    ..ended
                }
                .into_error()),
            }
        }
    }

    async fn batch_in<C: Cancel>(
        &self,
        requests: Vec<http::Request<Bytes>>,
        cancel: C,
    ) -> BatchResult {
        let n = requests.len();
        let mut stream = self.stream_in(requests, BatchOrder::Completion, cancel)?;
        let mut slots: Vec<Option<Result<http::Response<Bytes>, Error>>> = Vec::new();
        slots.resize_with(n, || None);
        while let Some((i, result)) = poll_fn(|cx| stream.poll_item(cx)).await {
            if let Some(slot) = slots.get_mut(i) {
                *slot = Some(result);
            }
        }
        // An item never started was cut short by the batch's end.
        let end = stream.end().unwrap_or(Outcome::Cancelled);
        Ok(slots
            .into_iter()
            .map(|slot| {
                slot.unwrap_or(Err(Error::Outcome {
                    outcome: end,
                    response: None,
                }))
            })
            .collect())
    }

    /// A streaming batch over `requests` with `cancel`.
    fn stream_in<'c, I, C>(
        &'c self,
        requests: I,
        order: BatchOrder,
        cancel: C,
    ) -> Result<BatchStream<R, impl Future<Output = ()> + 'c>, Error>
    where
        I: IntoIterator<Item = http::Request<Bytes>>,
        I::IntoIter: Send + 'c,
        C: Cancel + 'c,
    {
        let iter: Box<dyn Iterator<Item = http::Request<Bytes>> + Send + 'c> =
            Box::new(requests.into_iter());
        self.stream_from(Input::Iter(iter.peekable()), order, cancel)
    }

    /// A streaming batch over `input`, cancelled by `cancel`: the plain
    /// future behind [`batch_stream`](Self::batch_stream) and
    /// [`batch_from_stream`](Self::batch_from_stream).
    fn stream_from<'c, C>(
        &'c self,
        input: Input<'c>,
        order: BatchOrder,
        cancel: C,
    ) -> Result<BatchStream<R, impl Future<Output = ()> + 'c>, Error>
    where
        C: Cancel + 'c,
    {
        let config = &self.shared.config;
        let mut input = input;
        let clock = R::clock();
        let now = clock.now();
        let paces = &self.shared.paces;
        // The batch's duration and in-flight metrics are labelled with its
        // first request's key; each item's own, with the item's key. A
        // stream's first request is not there yet (nor an empty
        // iterator's): the batch takes its key when that request is
        // numbered, and is counted in flight from then.
        let first_request = match &mut input {
            Input::Iter(iter) => iter.peek(),
            Input::Stream(_) => None,
        };
        let meter = match first_request {
            Some(first) => {
                let key = CallOptions::of(first)
                    .pace_key
                    .unwrap_or_else(|| paces.key_of(first));
                CallMeter::start("batch", &key, &paces.get(&key, now), now)
            }
            None => CallMeter::start_batch(now),
        };
        let first = crate::stream::reserve_ids(&self.shared.ids);
        // One pace (and retry budget) per key (SPEC §4.2): each request's
        // key is numbered as it is pulled, and given back when it ends.
        let keyed = BatchPaces::new(paces, meter.clone());
        let mut machine = BatchMachine::streaming(
            config.batch_policy(),
            self.rng(first),
            keyed.clone(),
            now,
            config.timeout,
        )?
        .with_budget(keyed.clone())
        .rate_limit_headers(config.rate_limit_headers);
        let numbering = keyed.clone();
        let mut pulled = 0u32;
        let number = move |request: http::Request<Bytes>| {
            let slot = numbering.assign(pulled, &request, || R::clock().now());
            pulled = pulled.wrapping_add(1);
            (request, slot)
        };
        let source = match input {
            Input::Iter(iter) => Source::Iter(Box::new(iter.map(number))),
            Input::Stream(stream) => Source::Stream {
                stream: Box::pin(Numbered { stream, number }),
                next: None,
            },
        };
        let (out, gate, sink) = crate::stream::channel(order, config.concurrency);
        let pull_gate = sink.gate();
        let mut sink =
            sink.into_fn::<R>(now, config.timeout, config.retry.retry_after.auto_wait_cap);
        let sink: Box<dyn FnMut(u32, Outcome, Option<HttpAnswer>, Failure) + Send + 'c> =
            Box::new(move |item, outcome, answer, failure| {
                keyed.release(item);
                sink(item, outcome, answer, failure);
            });
        let end = Arc::clone(&out);
        let drive = async move {
            let mut io = HttpIo::pulling(
                &self.shared.transport,
                clock,
                cancel,
                source,
                first,
                pull_gate,
                config.wait.wait_param,
                sink,
            )
            .redirects(config.redirects)
            .meter(meter.clone());
            let span = tracing::info_span!(
                target: "polite",
                "polite.batch",
                polite.concurrency = config.concurrency,
                polite.items = tracing::field::Empty,
            );
            let mut no_jobs = NoJobs;
            let mut classify = Both {
                client: config.classify.as_ref(),
                call: &mut no_jobs,
            };
            // The batch's span is one for all its items: each attempt
            // event names its item's server (looked up only when the
            // event is written).
            let servers = io.servers();
            let servers = |item| servers.as_ref().and_then(|s| s.server(item));
            let done = drive::drive(
                &mut machine,
                &mut io,
                &mut classify,
                &mut self.observer(&meter, servers),
            )
            .instrument(span.clone())
            .await;
            meter.finish(drive::Io::now(&io));
            span.record("polite.items", io.pulled());
            crate::stream::set_end(&end, done.outcome);
        };
        Ok(BatchStream::new(out, gate, drive))
    }
}

/// A streaming batch's requests as the caller gives them.
#[allow(clippy::large_enum_variant)] // one per batch, moved once
enum Input<'c> {
    /// [`Client::batch_stream`]'s: pulled when the batch wants one.
    Iter(std::iter::Peekable<Box<dyn Iterator<Item = http::Request<Bytes>> + Send + 'c>>),
    /// [`Client::batch_from_stream`]'s: polled, and waited for.
    Stream(Pin<Box<dyn Stream<Item = http::Request<Bytes>> + Send + 'c>>),
}

/// A stream of requests, each numbered (its pace slot) by `number` as it
/// comes.
struct Numbered<'c, F> {
    stream: Pin<Box<dyn Stream<Item = http::Request<Bytes>> + Send + 'c>>,
    number: F,
}

impl<F> Stream for Numbered<'_, F>
where
    F: FnMut(http::Request<Bytes>) -> (http::Request<Bytes>, u32) + Unpin,
{
    type Item = (http::Request<Bytes>, u32);

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        this.stream
            .as_mut()
            .poll_next(cx)
            .map(|next| next.map(&mut this.number))
    }
}

/// What a batch returns: per request, in input order, its answer or error
/// (the outer `Err` only for an invalid configuration).
///
/// ```
/// use polite_client::{BatchResult, Error};
/// use polite_core::Outcome;
/// fn succeeded(r: &BatchResult) -> usize {
///     r.as_ref().map_or(0, |items| items.iter().filter(|i| i.is_ok()).count())
/// }
/// let r: BatchResult = Ok(vec![Err(Error::Outcome { outcome: Outcome::Cancelled, response: None })]);
/// assert_eq!(succeeded(&r), 0);
/// ```
pub type BatchResult = Result<Vec<Result<http::Response<Bytes>, Error>>, Error>;

/// A job that reached a terminal state.
#[derive(Debug)]
pub struct JobDone {
    /// The terminal state (`passed`, `failed`, `cancelled`, ...).
    pub state: String,
    /// The answer that reported it.
    pub response: http::Response<Bytes>,
}

impl<R, T: std::fmt::Debug> std::fmt::Debug for Client<R, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("transport", &self.shared.transport)
            .field("config", &self.shared.config)
            .field("paces", &self.shared.paces.len())
            .field("observer", &self.observer.as_ref().map(|_| "Fn"))
            .finish_non_exhaustive()
    }
}

/// What a client's observer sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed<'a> {
    /// An attempt record.
    Record(&'a AttemptRecord),
    /// A one-time notice (e.g. the long-poll fallback).
    Notice(Notice),
}

/// A client-wide observer.
type RecordObserver = Arc<dyn Fn(Observed<'_>) + Send + Sync>;

/// Records and notices to `tracing`, the call's metrics and the client's
/// observer, with the fleet's notices (SPEC §4.3: its store stopped
/// answering, or answers again) as they come, at the next record.
struct Tracing<'o, S> {
    observer: Option<&'o (dyn Fn(Observed<'_>) + Send + Sync)>,
    meter: &'o CallMeter,
    fleet: Option<&'o dyn crate::fleet::Fleet>,
    /// Each item's server, for its attempt events (asked only when one is
    /// written).
    servers: S,
}

impl<S: Fn(u32) -> Option<trace::Server>> Observe for Tracing<'_, S> {
    fn record(&mut self, record: &AttemptRecord) {
        if let Some(notice) = self.fleet.and_then(|f| f.take_notice()) {
            self.notice(notice);
        }
        trace::trace_attempt(record, || (self.servers)(record.id.item));
        self.meter.record(record);
        if let Some(o) = self.observer {
            o(Observed::Record(record));
        }
    }
    fn notice(&mut self, notice: Notice) {
        tracing::warn!(target: "polite", %notice);
        if let Some(o) = self.observer {
            o(Observed::Notice(notice));
        }
    }
}

/// A call as it starts: its id and instant, its retry rules and budget
/// (the client's, or its [`CallOptions`]'), and the key of its pace.
struct Started {
    id: u64,
    now: std::time::Instant,
    /// The call's own retry rules (from its [`CallOptions`]); `None`:
    /// the client's.
    own_retry: Option<RetryPolicy>,
    timeout: Duration,
    /// The key's pace and retry budget (one lookup).
    pace: Arc<Mutex<ClientPace>>,
    budget: ClientBudget,
    key: PaceKey,
    /// `send` or `wait`, for the span.
    kind: &'static str,
    label: Option<String>,
    /// The body is sent once ([`CallOptions::one_shot_body`]).
    one_shot: bool,
    /// The caller's session and its generation when the call started.
    session: Option<(Session, u64)>,
}

impl Started {
    /// What the machines know of the call's request: its method, key and
    /// whether its body can be sent again.
    fn info(&self, request: &http::Request<Bytes>) -> RequestInfo {
        let mut info = request_info(self.id, request);
        if self.one_shot {
            info = info.with_one_shot_body();
        }
        if let Some((_, generation)) = &self.session {
            info = info.with_generation(*generation);
        }
        info
    }

    /// The call's retry rules: its own, or the client's (`config`).
    fn retry<'a>(&'a self, config: &'a Config) -> &'a RetryPolicy {
        self.own_retry.as_ref().unwrap_or(&config.retry)
    }

    fn pace(&self) -> Arc<Mutex<ClientPace>> {
        Arc::clone(&self.pace)
    }

    fn budget(&self) -> ClientBudget {
        self.budget.clone()
    }
}

/// How one logical request ended: the outcome, its last answer, the
/// transport error of its last send when that got no answer, its sends and
/// the call's time.
pub(crate) struct Ended {
    pub(crate) outcome: Outcome,
    pub(crate) last: Option<http::Response<Bytes>>,
    pub(crate) error: Option<crate::error::TransportError>,
    pub(crate) attempts: u32,
    pub(crate) elapsed: Duration,
    /// Its timeout, wait cap and how far off the next attempt was.
    pub(crate) limits: Limits,
}

impl Ended {
    /// The call's result: the answer for a success, else the error.
    pub(crate) fn finish(self) -> Result<http::Response<Bytes>, Error> {
        match (self.outcome, self.last) {
            (Outcome::Succeeded { .. }, Some(response)) => Ok(response),
            (outcome, last) => Err(Ended {
                outcome,
                last,
                ..self
            }
            .into_error()),
        }
    }

    /// The error: `Error::Limit` when the call ran into its deadline or a
    /// rate limit (with its last transport error, if any), `Error::Transport`
    /// when the outcome was decided by a transport error (permanent, or the
    /// last one of a spent budget or a request that may not be re-sent),
    /// else `Error::Outcome`.
    fn into_error(self) -> Error {
        if matches!(
            self.outcome,
            Outcome::TimedOut { .. } | Outcome::RateLimited { .. }
        ) {
            return Error::Limit(Box::new(LimitError::new(
                self.outcome,
                self.last,
                self.error,
                self.attempts,
                self.elapsed,
                self.limits,
            )));
        }
        let by_transport = match self.outcome {
            Outcome::Permanent { .. } => true,
            Outcome::RetriesExhausted { last, .. }
            | Outcome::RetryBudgetExhausted { last, .. }
            | Outcome::NotReplayable { last } => matches!(last, polite_core::Reply::Transport(_)),
            _ => false,
        };
        match self.error {
            Some(error) if by_transport => Error::Transport {
                outcome: self.outcome,
                error,
                attempts: self.attempts,
                elapsed: self.elapsed,
            },
            _ => Error::Outcome {
                outcome: self.outcome,
                response: self.last.map(Box::new),
            },
        }
    }
}
