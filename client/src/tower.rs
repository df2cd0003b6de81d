//! polite as a tower middleware (feature `tower`): [`PoliteLayer`] wraps any
//! HTTP [`Service`] — hyper-util's legacy client, the upstream call of an
//! axum proxy, a `tower::ServiceBuilder` stack — so that each request
//! through it is one polite call: retried by class (429, 5xx, transport
//! errors; only when replayable), `Retry-After` honoured and never cut
//! short, one deadline for the whole call, and the client's pace per origin
//! (a 429 from one origin slows the calls to that origin only), with
//! attempt records to `tracing` and the client's observer.
//!
//! It does for a user everything `tower::retry` does, and more:
//!
//! | | `tower::retry` | `PoliteLayer` |
//! |---|---|---|
//! | which failures are retried | your `Policy::retry` | 429, 500/502/503/504 and transport errors by class, each class its own budget ([`RetryPolicy`](polite_core::RetryPolicy)) |
//! | request replay | your `Policy::clone_request` | the body is buffered up to [`replay_limit`](PoliteLayer::replay_limit); a replayable method or an `Idempotency-Key` decides (SPEC §2) |
//! | delay before a retry | your `Policy::retry` future | backoff with jitter, and the server's `Retry-After` (never shorter) |
//! | budget across requests | `TpsBudget` | the shared per-origin pace: a cool-down on a 429 for every call to that origin, the adaptive rate, an optional throttle |
//! | time | none (each retry may take as long as the service) | one deadline per call ([`Config::timeout`], or the `timeout` of [`CallOptions`] in the request's extensions); every attempt is aborted at it |
//!
//! What is sent once (never retried): a request whose method is not
//! idempotent and that carries no `Idempotency-Key`, and a request whose
//! body is larger than the replay limit or carries trailers (it is streamed
//! through as it arrives: what was already read, then the rest). Such a
//! request is still paced and inside the deadline.
//!
//! Readiness: the layer is always ready; each attempt waits for a clone of
//! the inner service to be ready (`poll_ready`) before calling it, inside
//! the attempt's time. Redirects are not followed: a 3xx is the answer, as
//! the inner service gave it (a layer built [`from_client`](PoliteLayer::from_client)
//! follows them by that client's [`RedirectPolicy`]).
//!
//! Credentials: a layer that adds them (`Authorization`, an API key)
//! belongs **outside** (above) the `PoliteLayer`, so that polite is given
//! the header — and drops it on a hop to another origin (SPEC §5.1). A
//! layer below polite runs again for every redirect hop polite follows,
//! and would add its header to a hop to another origin too; if it must be
//! below (a token refreshed per attempt), have it leave alone a request
//! whose extensions hold a [`RedirectHop`] with `cross_origin` set:
//!
//! ```
//! use bytes::Bytes;
//! use polite_client::RedirectHop;
//! use polite_client::tower::PoliteBody;
//!
//! /// The auth step of a layer below polite (e.g. in a `map_request`).
//! fn authorize(mut request: http::Request<PoliteBody<Bytes>>) -> http::Request<PoliteBody<Bytes>> {
//!     let elsewhere = request.extensions().get::<RedirectHop>().is_some_and(|h| h.cross_origin);
//!     if !elsewhere {
//!         request.headers_mut().insert("authorization", http::HeaderValue::from_static("Bearer s3cret"));
//!     }
//!     request
//! }
//!
//! let mut hop = http::Request::new(PoliteBody::full(Bytes::new()));
//! hop.extensions_mut().insert(RedirectHop { hop: 1, cross_origin: true });
//! assert!(!authorize(hop).headers().contains_key("authorization"));
//! let first = http::Request::new(PoliteBody::full(Bytes::new()));
//! assert!(authorize(first).headers().contains_key("authorization"));
//! ```
//!
//! Answers: see [`PoliteService`] — a final answer of the server (a 404, the
//! last 503 after the budget, a 429 it may not wait out) is `Ok`, like the
//! inner service would give it, with the [`Outcome`](polite_core::Outcome) in its extensions;
//! only a call that timed out, was starved by the pace, or got no answer is
//! an `Err` ([`Error`]).
//!
//! ```
//! use bytes::Bytes;
//! use polite_client::tower::{PoliteBody, PoliteLayer};
//! use polite_client::{Config, Runtime};
//! use std::convert::Infallible;
//! use std::future::{Ready, ready};
//! use std::sync::{Arc, Mutex};
//! use std::task::{Context, Poll};
//! use tower_layer::Layer;
//! use tower_service::Service;
//! # use polite_client::{CancelToken, Clock};
//! # use std::future::Future;
//! # use std::time::Instant;
//! # /// A runtime on the test's own virtual time (see `Runtime`'s docs).
//! # struct Virtual(Instant);
//! # impl Clock for Virtual {
//! #     fn now(&self) -> Instant { self.0 }
//! #     fn poll_sleep(&mut self, _: &mut Context<'_>, until: Instant) -> Poll<()> { self.0 = until; Poll::Ready(()) }
//! # }
//! # struct Tiny;
//! # impl Runtime for Tiny {
//! #     type Clock = Virtual; type Token = CancelToken; type Cancel = CancelToken;
//! #     type Call<F: Future> = F; type Ready = ();
//! #     fn clock() -> Virtual { Virtual(Instant::now()) }
//! #     fn watch(t: &CancelToken) -> CancelToken { t.clone() }
//! #     fn cancel(t: &CancelToken) { t.cancel() }
//! #     fn call<F: Future>(call: F) -> F { call }
//! #     fn settle<F: Future>(call: F) -> impl Future<Output = F::Output> { call }
//! # }
//!
//! /// An upstream that is unavailable once, then answers.
//! #[derive(Clone, Default)]
//! struct Upstream(Arc<Mutex<u32>>);
//! impl Service<http::Request<PoliteBody<String>>> for Upstream {
//!     type Response = http::Response<String>;
//!     type Error = Infallible;
//!     type Future = Ready<Result<http::Response<String>, Infallible>>;
//!     fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
//!         Poll::Ready(Ok(()))
//!     }
//!     fn call(&mut self, _: http::Request<PoliteBody<String>>) -> Self::Future {
//!         let mut calls = self.0.lock().unwrap();
//!         *calls += 1;
//!         let status = if *calls == 1 { 503 } else { 200 };
//!         ready(Ok(http::Response::builder().status(status).body("hi".to_owned()).unwrap()))
//!     }
//! }
//!
//! let upstream = Upstream::default();
//! let mut service = PoliteLayer::<Tiny>::new(Config::default())?.layer(upstream.clone());
//! let request = http::Request::get("http://127.0.0.1:9/x").body(String::new()).unwrap();
//! let response = polite_testing::block_on(service.call(request))?;
//! assert_eq!(response.status(), 200);
//! assert_eq!(*upstream.0.lock().unwrap(), 2); // the 503 was retried
//! # Ok::<(), polite_client::Error>(())
//! ```

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use polite_core::TransportErrorKind;
use tower_layer::Layer;
use tower_service::Service;

use crate::client::Client;
use crate::config::Config;
use crate::error::{BoxError, Error, TransportError, io_error_kind};
use crate::options::{CallOptions, PoliteAttempt};
use crate::read_whole::ReadWhole;
use crate::redirect::{RedirectHop, RedirectPolicy};
use crate::runtime::{DEFAULT_MAX_BODY, Runtime, in_box};
use crate::transport::{Clock, NeverCancel, NoTransport, Transport};

/// The request bodies the layer buffers to replay by default: 1 MiB.
///
/// ```
/// assert_eq!(polite_client::tower::DEFAULT_REPLAY_LIMIT, 1 << 20);
/// ```
pub const DEFAULT_REPLAY_LIMIT: usize = 1 << 20;

/// A [`Layer`] that makes each request through the service it wraps one
/// polite call (see the [module docs](self)). Cheap to clone: every service
/// it makes shares one client — its configuration and its per-origin pace.
///
/// `R` is the runtime whose clock the calls sleep on (`polite_tokio::Tokio`,
/// `polite_async_io::AsyncIo`); it must be an async runtime, since a
/// service's calls are futures. `T` is the transport of the client the
/// layer was built from ([`NoTransport`] for [`new`](Self::new); the layer
/// never uses it).
///
/// ```
/// # use polite_client::Runtime;
/// # fn f<R: Runtime>() -> Result<(), polite_client::Error> {
/// use polite_client::{Config, tower::PoliteLayer};
/// let layer = PoliteLayer::<R>::new(Config::default())?.replay_limit(64 << 10);
/// assert_eq!(layer.client().config().redirects, polite_client::RedirectPolicy::NONE);
/// # Ok(()) }
/// ```
pub struct PoliteLayer<R, T = NoTransport> {
    client: Client<R, T>,
    max_body: usize,
    replay_limit: usize,
}

impl<R: Runtime> PoliteLayer<R, NoTransport> {
    /// A layer with its own client on `config`, following no redirect
    /// (`config.redirects` is set to [`RedirectPolicy::NONE`]: the 3xx the
    /// inner service gives is the answer, as it would be without polite).
    ///
    /// # Errors
    ///
    /// [`Error::Policy`] or [`Error::Config`] for a configuration that
    /// makes no sense.
    pub fn new(config: Config) -> Result<Self, Error> {
        let config = Config {
            redirects: RedirectPolicy::NONE,
            ..config
        };
        Ok(Self::from_client(Client::with_transport(
            NoTransport,
            config,
        )?))
    }
}

impl<R, T> PoliteLayer<R, T> {
    /// A layer whose calls share `client`'s configuration, pace and
    /// observer (calls through the layer and the client's own calls slow
    /// down together on a 429). The client's [`RedirectPolicy`] applies to
    /// a 3xx the inner service gives: each hop goes through the inner
    /// service again, marked with a [`RedirectHop`] — a layer below that
    /// adds credentials must check it, or be put above this one (see the
    /// [module docs](self)).
    ///
    /// ```
    /// # use polite_client::Runtime;
    /// # fn f<R: Runtime>(client: polite_client::Client<R, polite_client::NoTransport>) {
    /// let layer = polite_client::tower::PoliteLayer::from_client(client);
    /// # drop(layer); }
    /// ```
    #[must_use]
    pub fn from_client(client: Client<R, T>) -> Self {
        PoliteLayer {
            client,
            max_body: DEFAULT_MAX_BODY,
            replay_limit: DEFAULT_REPLAY_LIMIT,
        }
    }

    /// The largest answer body read whole (default [`DEFAULT_MAX_BODY`],
    /// 16 MiB). Only answers polite may act on — the statuses it retries —
    /// are read whole, to retry them; a larger one ends the call with a
    /// permanent `BodyTooLarge`. Every other answer is passed through as
    /// the inner service gave it, body unread.
    ///
    /// ```
    /// # use polite_client::Runtime;
    /// # fn f<R: Runtime>(layer: polite_client::tower::PoliteLayer<R>) {
    /// let layer = layer.max_body(1 << 20);
    /// # drop(layer); }
    /// ```
    #[must_use]
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// The largest request body buffered so that it can be sent again
    /// (default [`DEFAULT_REPLAY_LIMIT`], 1 MiB). A larger body is streamed
    /// through once: the request is not retried.
    ///
    /// ```
    /// # use polite_client::Runtime;
    /// # fn f<R: Runtime>(layer: polite_client::tower::PoliteLayer<R>) {
    /// let layer = layer.replay_limit(16 << 20);
    /// # drop(layer); }
    /// ```
    #[must_use]
    pub fn replay_limit(mut self, bytes: usize) -> Self {
        self.replay_limit = bytes;
        self
    }

    /// The client the layer's services call through.
    ///
    /// ```
    /// # use polite_client::Runtime;
    /// # fn f<R: Runtime>(layer: polite_client::tower::PoliteLayer<R>) {
    /// assert_eq!(layer.client().config().timeout, std::time::Duration::from_secs(30));
    /// # }
    /// ```
    #[must_use]
    pub fn client(&self) -> &Client<R, T> {
        &self.client
    }
}

impl<R, T> Clone for PoliteLayer<R, T> {
    fn clone(&self) -> Self {
        PoliteLayer {
            client: self.client.clone(),
            max_body: self.max_body,
            replay_limit: self.replay_limit,
        }
    }
}

impl<R, T: std::fmt::Debug> std::fmt::Debug for PoliteLayer<R, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoliteLayer")
            .field("client", &self.client)
            .field("max_body", &self.max_body)
            .field("replay_limit", &self.replay_limit)
            .finish()
    }
}

impl<S, R, T> Layer<S> for PoliteLayer<R, T> {
    type Service = PoliteService<S, R, T>;

    fn layer(&self, inner: S) -> PoliteService<S, R, T> {
        PoliteService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`PoliteLayer`] makes: each request is one polite call over
/// clones of the inner service `S`.
///
/// * **Request**: `http::Request<B>` for any body `B` of `Bytes`. The inner
///   service gets `http::Request<PoliteBody<B>>`: the buffered body (sent
///   again on a retry), or, for a body over the replay limit, what was read
///   then the rest of `B` (sent once). The request's extensions (and the
///   [`CallOptions`] among them) reach every attempt.
/// * **Response**: `http::Response<PoliteBody<RB>>` — the inner service's
///   answer. Answers polite may retry (the statuses of the call's
///   [`RetryPolicy`](polite_core::RetryPolicy)) are read whole (up to the layer's
///   [`max_body`](PoliteLayer::max_body)); every other answer, a success
///   above all, is passed through with its body unread (a download streams
///   as it would without polite).
/// * **`Ok`** for every answer that ended the call on the server's word:
///   a success, a final status (404), the last answer of a spent budget
///   (the last 503), a 429 whose `Retry-After` is beyond what polite may
///   wait — see [`Error::into_answer`]. Such an answer that is not a
///   success carries the call's [`Outcome`](polite_core::Outcome) in its extensions.
/// * **`Err`** ([`Error`]) when the call timed out (including: the server's
///   `Retry-After` falls after the deadline — it ends at once, not after
///   the wait), was starved by the pace, or ended on a transport error
///   (the inner service's error is its `source()`).
///
/// The future is `Send` when the inner service, its future and the bodies
/// are. Dropping it cancels the call.
///
/// ```
/// # use polite_client::Runtime;
/// # fn f<R: Runtime, S>(layer: polite_client::tower::PoliteLayer<R>, inner: S) {
/// use tower_layer::Layer;
/// let service = layer.layer(inner);
/// # drop(service); }
/// ```
pub struct PoliteService<S, R, T = NoTransport> {
    inner: S,
    layer: PoliteLayer<R, T>,
}

impl<S: Clone, R, T> Clone for PoliteService<S, R, T> {
    fn clone(&self) -> Self {
        PoliteService {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: std::fmt::Debug, R, T: std::fmt::Debug> std::fmt::Debug for PoliteService<S, R, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoliteService")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, R, T> PoliteService<S, R, T> {
    /// The inner service.
    ///
    /// ```
    /// # use polite_client::Runtime;
    /// # fn f<R: Runtime>(service: polite_client::tower::PoliteService<u8, R>) {
    /// assert_eq!(*service.get_ref(), 0);
    /// # }
    /// ```
    #[must_use]
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, the layer's client dropped.
    ///
    /// ```
    /// # use polite_client::Runtime;
    /// # fn f<R: Runtime>(service: polite_client::tower::PoliteService<u8, R>) {
    /// assert_eq!(service.into_inner(), 0);
    /// # }
    /// ```
    #[must_use]
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// The boxed future of a [`PoliteService`] call.
pub type ResponseFuture<RB> =
    Pin<Box<dyn Future<Output = Result<http::Response<PoliteBody<RB>>, Error>> + Send>>;

impl<S, R, T, B, RB> Service<http::Request<B>> for PoliteService<S, R, T>
where
    R: Runtime,
    R::Clock: Send + 'static,
    T: Transport + Send + Sync + 'static,
    T::Sending: Unpin,
    S: Service<http::Request<PoliteBody<B>>, Response = http::Response<RB>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: HttpBody<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = http::Response<PoliteBody<RB>>;
    type Error = Error;
    type Future = ResponseFuture<RB>;

    /// Always ready: each attempt waits for its own clone of the inner
    /// service to be ready, inside the call's time.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> ResponseFuture<RB> {
        // An attempt of a polite call around this layer: its budget, pace
        // and deadline are that call's (SPEC §1, §2: not multiplied).
        if PoliteAttempt::is_in(request.extensions()) {
            return Box::pin(pass_through::<S, R, B, RB>(self.inner.clone(), request));
        }
        // `respond`'s own future, boxed as it is (an `async` block around
        // it would hold the layer, the service and the request twice), and
        // written into a box allocated first: `Box::pin(respond(..))`
        // builds the future on the stack and copies it into the box.
        in_box(|| respond(self.layer.clone(), self.inner.clone(), request))
    }
}

/// A request that is already an attempt of an outer polite call
/// ([`PoliteAttempt`]), sent as it is through the inner service: its body
/// and its answer's are streamed through unread. An error of the inner
/// service is handed back as the outer call's transport sees any (its
/// `source()` chain kept, so the outer call classes it as it would have).
async fn pass_through<S, R, B, RB>(
    mut service: S,
    request: http::Request<B>,
) -> Result<http::Response<PoliteBody<RB>>, Error>
where
    R: Runtime,
    S: Service<http::Request<PoliteBody<B>>, Response = http::Response<RB>>,
    S::Error: Into<BoxError>,
    B: HttpBody<Data = Bytes> + Send + 'static,
    RB: HttpBody<Data = Bytes> + Send + 'static,
{
    let started = R::clock().now();
    let request = request.map(PoliteBody::stream);
    let ready: Result<(), BoxError> = poll_fn(|cx| service.poll_ready(cx))
        .await
        .map_err(Into::into);
    let answered = match ready {
        Ok(()) => service.call(request).await.map_err(Into::into),
        Err(e) => Err(e),
    };
    match answered {
        Ok(response) => Ok(response.map(PoliteBody::stream)),
        Err(e) => {
            let error = failure(e, TransportErrorKind::Other);
            Err(Error::Transport {
                outcome: polite_core::Outcome::Permanent {
                    cause: error.kind(),
                },
                error,
                attempts: 1,
                elapsed: R::clock().now().saturating_duration_since(started),
            })
        }
    }
}

/// One call: buffer the body (or keep it to send once), run it through the
/// client over the inner service, and turn the end into a response.
async fn respond<S, R, T, B, RB>(
    layer: PoliteLayer<R, T>,
    service: S,
    request: http::Request<B>,
) -> Result<http::Response<PoliteBody<RB>>, Error>
where
    R: Runtime,
    R::Clock: Send + 'static,
    T: Transport,
    T::Sending: Unpin,
    S: Service<http::Request<PoliteBody<B>>, Response = http::Response<RB>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: HttpBody<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let (parts, body) = request.into_parts();
    // A request without a body (a GET) does not start `buffer`'s future.
    let (bytes, once) = match empty_or(body) {
        Ok(bytes) => (bytes, None),
        Err(body) => match buffer(body, layer.replay_limit).await {
            Ok(bytes) => (bytes, None),
            Err(stream) => (Bytes::new(), Some(stream)),
        },
    };
    // `matches!`, not `is_some`: a local once borrowed is kept in this
    // boxed future across the call, moved or not.
    #[allow(clippy::redundant_pattern_matching)]
    let streamed = matches!(once, Some(_));
    // Up to the call in a plain `fn`: the retry rules and the request's
    // parts it reads on the way are not kept in this boxed future.
    let Prepared {
        template,
        options,
        extensions,
        read_whole,
    } = prepare(&layer, parts, bytes, streamed);
    let live = Mutex::new(None);
    let via = Via::<S, B, R, RB> {
        live: &live,
        state: Mutex::new(ViaState {
            service,
            once,
            streamed,
        }),
        extensions,
        max_body: layer.max_body,
        read_whole,
        runtime: std::marker::PhantomData,
    };
    // The options of a body sent once as changed above; any other call's
    // are the request's, which `send_with` reads from its extensions.
    let ended = layer
        .client
        .send_with(&via, template, options.as_deref(), NeverCancel)
        .await;
    let (response, outcome) = match ended {
        Ok(response) => (response, None),
        Err(e) => {
            let (response, outcome) = e.into_answer()?;
            (response, Some(outcome))
        }
    };
    drop(via);
    let (mut parts, bytes) = response.into_parts();
    // The body of the call's last attempt, when its answer was passed
    // through unread: the answer the call ended on.
    let body = match live.into_inner().unwrap_or_else(PoisonError::into_inner) {
        Some(live) => PoliteBody::stream(live),
        None => PoliteBody::full(bytes),
    };
    if let Some(outcome) = outcome {
        parts.extensions.insert(outcome);
    }
    Ok(http::Response::from_parts(parts, body))
}

/// What a call through the layer starts from ([`prepare`]).
struct Prepared {
    /// polite's copy of the request.
    template: http::Request<Bytes>,
    /// The call's options when they are not the request's own (a body sent
    /// once is never retried), boxed: a `CallOptions` is 312 bytes, moved
    /// with the call's future on every call for nothing.
    options: Option<Box<CallOptions>>,
    /// The request's extensions, given to every attempt.
    extensions: http::Extensions,
    read_whole: Option<ReadWhole>,
}

/// The call's request and options, and what its attempts read whole
/// (nothing when its body is sent once: `once`).
fn prepare<R, T>(
    layer: &PoliteLayer<R, T>,
    parts: http::request::Parts,
    bytes: Bytes,
    once: bool,
) -> Prepared
where
    R: Runtime,
    T: Transport,
    T::Sending: Unpin,
{
    let template = http::Request::from_parts(parts, bytes);
    let default = &layer.client.config().retry;
    let (options, read_whole) = if once {
        let mut options = CallOptions::of(&template);
        let read_whole = ReadWhole::for_call(&mut options, default, &template, true);
        (Some(Box::new(options)), read_whole)
    } else {
        // The request's own options, read where they are (as `send_with`
        // reads them): none is copied or made.
        let own = template.extensions().get::<CallOptions>();
        let retry = own.and_then(|o| o.retry.as_ref());
        (None, ReadWhole::for_request(retry, default, &template))
    };
    // Every attempt carries the mark of a polite call: a polite layer
    // inside the inner service passes it through.
    let mut extensions = template.extensions().clone();
    extensions.insert(PoliteAttempt);
    // Only the hops this call follows carry a `RedirectHop`.
    extensions.remove::<RedirectHop>();
    Prepared {
        extensions,
        template,
        options,
        read_whole,
    }
}

/// `Ok` (no bytes) for a body that is known to be empty, else the body.
#[allow(clippy::result_large_err)]
fn empty_or<B: HttpBody>(body: B) -> Result<Bytes, B> {
    if body.is_end_stream() {
        Ok(Bytes::new())
    } else {
        Err(body)
    }
}

/// Reads `body` whole when it fits in `limit` bytes and has no trailers;
/// otherwise hands it back as a body to send once: what was read, then the
/// rest (a read error is handed on to the inner service in its place).
async fn buffer<B>(body: B, limit: usize) -> Result<Bytes, PoliteBody<B>>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if body.is_end_stream() {
        return Ok(Bytes::new());
    }
    let mut rest = Box::pin(body);
    let limit = u64::try_from(limit).unwrap_or(u64::MAX);
    let mut read: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut len: u64 = 0;
    let failed = if rest.size_hint().lower() > limit {
        None
    } else {
        loop {
            match poll_fn(|cx| rest.as_mut().poll_frame(cx)).await {
                None => return Ok(concat(read)),
                Some(Err(e)) => break Some(e.into()),
                Some(Ok(frame)) => {
                    let trailers = !frame.is_data();
                    len = len.saturating_add(frame.data_ref().map_or(0, |d| d.len() as u64));
                    read.push_back(frame);
                    if trailers || len > limit {
                        break None;
                    }
                }
            }
        }
    };
    Err(PoliteBody {
        inner: Inner::Other(Other::Stream(Box::new(Streamed {
            read,
            failed,
            rest: Some(rest),
        }))),
    })
}

/// The data frames as one `Bytes` (no copy for one frame).
fn concat(mut frames: VecDeque<Frame<Bytes>>) -> Bytes {
    if frames.len() == 1 {
        if let Some(Ok(data)) = frames.pop_front().map(Frame::into_data) {
            return data;
        }
        return Bytes::new();
    }
    let mut out = BytesMut::new();
    for data in frames.iter().filter_map(Frame::data_ref) {
        out.extend_from_slice(data);
    }
    out.freeze()
}

/// What the attempts of one call share.
struct ViaState<S, B> {
    /// Cloned for each attempt.
    service: S,
    /// The body to send once (over the replay limit), until it is sent.
    once: Option<PoliteBody<B>>,
    /// Whether the call's body was sent once (later sends, redirect hops,
    /// have no body to send).
    streamed: bool,
}

/// One call's transport: each attempt is a ready clone of the inner
/// service, called with the attempt's request, aborted at `abort_at`.
struct Via<'a, S, B, R, RB> {
    /// The body of the last attempt's answer when it was passed through
    /// unread: emptied as each attempt starts (a call's attempts run one
    /// after another), so that at the call's end it holds the body of the
    /// answer the call ended on, if any. Kept beside the call, not in the
    /// answer's extensions (an `Arc`, a box and a map entry per call).
    live: &'a Mutex<Option<RB>>,
    state: Mutex<ViaState<S, B>>,
    extensions: http::Extensions,
    max_body: usize,
    read_whole: Option<ReadWhole>,
    runtime: std::marker::PhantomData<fn() -> R>,
}

impl<S, B, R, RB> Via<'_, S, B, R, RB> {
    fn lock(&self) -> std::sync::MutexGuard<'_, ViaState<S, B>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An attempt of [`Via`]: it may put its answer's body in the call's slot.
type ViaSending<'a> =
    Pin<Box<dyn Future<Output = Result<http::Response<Bytes>, TransportError>> + Send + 'a>>;

impl<'a, S, B, R, RB> Transport for Via<'a, S, B, R, RB>
where
    R: Runtime,
    R::Clock: Send + 'static,
    S: Service<http::Request<PoliteBody<B>>, Response = http::Response<RB>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: HttpBody<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Sending = ViaSending<'a>;

    /// The attempt of [`send_supervised`](Transport::send_supervised),
    /// raced against a timer of its own that ends it at `abort_at`.
    fn send(&self, request: http::Request<Bytes>, abort_at: Instant) -> ViaSending<'a> {
        let mut attempt = self.send_supervised(request, abort_at);
        Box::pin(async move {
            let mut clock = R::clock();
            poll_fn(|cx| {
                if let Poll::Ready(r) = attempt.as_mut().poll(cx) {
                    return Poll::Ready(r);
                }
                match clock.poll_sleep(cx, abort_at) {
                    Poll::Ready(()) => Poll::Ready(Err(TransportErrorKind::Aborted.into())),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await
        })
    }

    /// No timer of its own: polite's drive loop ends the attempt at
    /// `abort_at`.
    fn send_supervised(&self, request: http::Request<Bytes>, _: Instant) -> ViaSending<'a> {
        // An earlier attempt's body (a 3xx polite follows) is not this
        // attempt's answer's.
        drop(
            self.live
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let (service, body) = {
            let mut state = self.lock();
            let body = match state.once.take() {
                Some(body) => Ok(body),
                // A redirect hop after the body was streamed: only a hop
                // that sends no body (303, or 301/302 after a POST) can go.
                None if state.streamed
                    && !matches!(*request.method(), http::Method::GET | http::Method::HEAD) =>
                {
                    Err(TransportError::new(
                        TransportErrorKind::RedirectNotReplayable,
                    ))
                }
                None => Ok(PoliteBody::full(request.body().clone())),
            };
            (state.service.clone(), body)
        };
        let body = match body {
            Ok(body) => body,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let (mut parts, _) = request.into_parts();
        // A redirect hop polite follows keeps its mark (the request's
        // extensions below are the caller's, given to every attempt).
        let hop = parts.extensions.remove::<RedirectHop>();
        parts.extensions = self.extensions.clone();
        if let Some(hop) = hop {
            parts.extensions.insert(hop);
        }
        let request = http::Request::from_parts(parts, body);
        let max_body = self.max_body;
        let read_whole = self.read_whole;
        Box::pin(attempt(service, request, max_body, read_whole, self.live))
    }
}

/// One attempt: wait for the service to be ready, call it, and read the
/// answer (whole when polite may retry it, else passed through).
///
/// Small, since it is boxed per attempt (for hyper-util's client, under
/// glibc's 1 KiB thread cache): an `async` block (an `async fn` would keep
/// the service and the request twice), the statuses to read whole rather
/// than the whole retry policy, and an answer read whole read by a future
/// boxed apart (`read_body`), only for the statuses polite may retry.
#[allow(clippy::manual_async_fn)] // an `async fn` would hold its arguments twice
fn attempt<S, B, RB>(
    mut service: S,
    request: http::Request<PoliteBody<B>>,
    max_body: usize,
    read_whole: Option<ReadWhole>,
    live: &Mutex<Option<RB>>,
) -> impl Future<Output = Result<http::Response<Bytes>, TransportError>>
where
    S: Service<http::Request<PoliteBody<B>>, Response = http::Response<RB>>,
    S::Error: Into<BoxError>,
    RB: HttpBody<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    async move {
        poll_fn(|cx| service.poll_ready(cx))
            .await
            .map_err(|e| failure(e.into(), TransportErrorKind::Other))?;
        let response = service
            .call(request)
            .await
            .map_err(|e| failure(e.into(), TransportErrorKind::Other))?;
        let (parts, body) = response.into_parts();
        if read_whole.is_none_or(|r| !r.wants(parts.status.as_u16())) {
            *live.lock().unwrap_or_else(PoisonError::into_inner) = Some(body);
            return Ok(http::Response::from_parts(parts, Bytes::new()));
        }
        Box::pin(read_body(parts, body, max_body)).await
    }
}

/// An answer polite may retry, its body read whole up to `max_body` bytes.
async fn read_body<RB>(
    parts: http::response::Parts,
    body: RB,
    max_body: usize,
) -> Result<http::Response<Bytes>, TransportError>
where
    RB: HttpBody<Data = Bytes>,
    RB::Error: Into<BoxError>,
{
    let limit = u64::try_from(max_body).unwrap_or(u64::MAX);
    if body.size_hint().lower() > limit {
        return Err(TransportError::body_too_large(limit));
    }
    let mut body = std::pin::pin!(body);
    let mut read = BytesMut::new();
    while let Some(frame) = poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame.map_err(|e| failure(e.into(), TransportErrorKind::Reset))?;
        if let Some(data) = frame.data_ref() {
            if read.len().saturating_add(data.len()) > max_body {
                return Err(TransportError::body_too_large(limit));
            }
            read.extend_from_slice(data);
        }
    }
    Ok(http::Response::from_parts(parts, read.freeze()))
}

/// An error of the inner service (or of an answer's body) as a transport
/// error: the kind of an I/O error in its `source()` chain, else `default`;
/// the error itself as the source.
fn failure(error: BoxError, default: TransportErrorKind) -> TransportError {
    let mut kind = default;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&*error);
    while let Some(e) = next {
        if let Some(k) = e.downcast_ref::<std::io::Error>().and_then(io_error_kind) {
            kind = k;
            break;
        }
        next = e.source();
    }
    TransportError::new(kind).with_source(error)
}

/// The body of what the layer sends and hands back: bytes it holds whole,
/// or a body streamed through (after what was already read of it).
///
/// * Requests: the inner service is called with `http::Request<PoliteBody<B>>`
///   where `B` is the caller's body type — build hyper-util's client for it
///   (`Client::builder(..).build::<_, PoliteBody<Full<Bytes>>>(connector)`).
/// * Answers: `http::Response<PoliteBody<RB>>`, where `RB` is the inner
///   service's body type.
///
/// Its errors are boxed (`Box<dyn Error + Send + Sync>`), as hyper and axum
/// take them.
///
/// ```
/// use bytes::Bytes;
/// use http_body::Body;
/// use polite_client::tower::PoliteBody;
/// let body: PoliteBody<String> = PoliteBody::full(Bytes::from_static(b"{}"));
/// assert_eq!(body.size_hint().exact(), Some(2));
/// let streamed = PoliteBody::stream("streamed".to_owned());
/// assert_eq!(streamed.size_hint().exact(), Some(8));
/// ```
pub struct PoliteBody<B> {
    inner: Inner<B>,
}

/// As small as a `Full<Bytes>` (32 bytes: a request's body is moved with
/// it through the inner service, hyper-util's client moves it several
/// times per request).
enum Inner<B> {
    /// Bytes held whole, until they are read (then empty).
    Full(Bytes),
    Other(Other<B>),
}

enum Other<B> {
    /// A body passed through as it is (an answer polite did not read).
    Passed(Pin<Box<B>>),
    /// A request body over the replay limit: what was read of it, then the
    /// rest.
    Stream(Box<Streamed<B>>),
}

struct Streamed<B> {
    read: VecDeque<Frame<Bytes>>,
    failed: Option<BoxError>,
    rest: Option<Pin<Box<B>>>,
}

impl<B> PoliteBody<B> {
    /// A body of these bytes.
    ///
    /// ```
    /// use http_body::Body;
    /// let body = polite_client::tower::PoliteBody::<String>::full(bytes::Bytes::from_static(b"hi"));
    /// assert_eq!(body.size_hint().exact(), Some(2));
    /// ```
    #[must_use]
    pub fn full(bytes: Bytes) -> Self {
        PoliteBody {
            inner: Inner::Full(bytes),
        }
    }

    /// `body`, streamed through as it is.
    ///
    /// ```
    /// use http_body::Body;
    /// let body = polite_client::tower::PoliteBody::stream(String::from("hi"));
    /// assert_eq!(body.size_hint().exact(), Some(2)); // the inner body's hint
    /// ```
    #[must_use]
    pub fn stream(body: B) -> Self {
        PoliteBody {
            inner: Inner::Other(Other::Passed(Box::pin(body))),
        }
    }
}

impl<B> std::fmt::Debug for PoliteBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Inner::Full(bytes) => f
                .debug_struct("PoliteBody::Full")
                .field("len", &bytes.len())
                .finish(),
            Inner::Other(Other::Passed(_)) => f
                .debug_struct("PoliteBody::Stream")
                .field("read_frames", &0)
                .field("rest", &true)
                .finish(),
            Inner::Other(Other::Stream(s)) => f
                .debug_struct("PoliteBody::Stream")
                .field("read_frames", &s.read.len())
                .field("rest", &s.rest.is_some())
                .finish(),
        }
    }
}

impl<B> HttpBody for PoliteBody<B>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let inner = &mut self.get_mut().inner;
        match inner {
            Inner::Full(bytes) if bytes.is_empty() => Poll::Ready(None),
            Inner::Full(bytes) => Poll::Ready(Some(Ok(Frame::data(std::mem::take(bytes))))),
            Inner::Other(Other::Passed(body)) => match body.as_mut().poll_frame(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(None) => {
                    *inner = Inner::Full(Bytes::new());
                    Poll::Ready(None)
                }
                Poll::Ready(Some(frame)) => Poll::Ready(Some(frame.map_err(Into::into))),
            },
            Inner::Other(Other::Stream(streamed)) => {
                let Streamed { read, failed, rest } = &mut **streamed;
                if let Some(frame) = read.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                if let Some(e) = failed.take() {
                    *rest = None;
                    return Poll::Ready(Some(Err(e)));
                }
                let Some(body) = rest else {
                    return Poll::Ready(None);
                };
                match body.as_mut().poll_frame(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(None) => {
                        *rest = None;
                        Poll::Ready(None)
                    }
                    Poll::Ready(Some(frame)) => Poll::Ready(Some(frame.map_err(Into::into))),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Full(bytes) => bytes.is_empty(),
            Inner::Other(Other::Passed(body)) => body.is_end_stream(),
            Inner::Other(Other::Stream(streamed)) => {
                let Streamed { read, failed, rest } = &**streamed;
                read.is_empty()
                    && failed.is_none()
                    && rest.as_ref().is_none_or(|b| b.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Full(bytes) => SizeHint::with_exact(bytes.len() as u64),
            Inner::Other(Other::Passed(body)) => body.size_hint(),
            Inner::Other(Other::Stream(streamed)) => {
                let Streamed { read, rest, .. } = &**streamed;
                let held: u64 = read
                    .iter()
                    .filter_map(Frame::data_ref)
                    .map(|d| d.len() as u64)
                    .sum();
                let Some(body) = rest else {
                    return SizeHint::with_exact(held);
                };
                let hint = body.size_hint();
                let mut out = SizeHint::new();
                out.set_lower(hint.lower().saturating_add(held));
                if let Some(upper) = hint.upper() {
                    out.set_upper(upper.saturating_add(held));
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames<B: HttpBody<Data = Bytes>>(body: B) -> Vec<Result<Bytes, String>>
    where
        B::Error: std::fmt::Display,
    {
        let mut body = std::pin::pin!(body);
        let mut out = Vec::new();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        while let Poll::Ready(Some(frame)) = body.as_mut().poll_frame(&mut cx) {
            out.push(
                frame
                    .map(|f| f.into_data().unwrap_or_default())
                    .map_err(|e| e.to_string()),
            );
        }
        out
    }

    #[test]
    fn a_body_within_the_limit_is_buffered_one_over_it_streams_what_was_read_then_the_rest() {
        let small = polite_testing::block_on(buffer(PoliteBody::<String>::stream("abc".into()), 3));
        assert_eq!(small.unwrap(), Bytes::from_static(b"abc"));
        let empty = polite_testing::block_on(buffer(String::new(), 0));
        assert_eq!(empty.unwrap(), Bytes::new());
        let Err(over) = polite_testing::block_on(buffer("abcd".to_owned(), 3)) else {
            panic!("over the limit");
        };
        // A String's size hint is exact: over the limit, nothing is read.
        assert_eq!(over.size_hint().exact(), Some(4));
        assert_eq!(frames(over), vec![Ok(Bytes::from_static(b"abcd"))]);
    }

    #[test]
    fn a_streamed_body_yields_its_read_frames_then_the_rest() {
        let mut read = VecDeque::new();
        read.push_back(Frame::data(Bytes::from_static(b"ab")));
        let body = PoliteBody {
            inner: Inner::Other(Other::Stream(Box::new(Streamed {
                read,
                failed: None,
                rest: Some(Box::pin("cd".to_owned())),
            }))),
        };
        assert_eq!(body.size_hint().exact(), Some(4));
        assert!(!body.is_end_stream());
        assert_eq!(
            frames(body),
            vec![Ok(Bytes::from_static(b"ab")), Ok(Bytes::from_static(b"cd"))]
        );
        let failed = PoliteBody::<String> {
            inner: Inner::Other(Other::Stream(Box::new(Streamed {
                read: VecDeque::new(),
                failed: Some("gone".into()),
                rest: Some(Box::pin("never".to_owned())),
            }))),
        };
        assert_eq!(frames(failed), vec![Err("gone".to_owned())]);
        let full = PoliteBody::<String>::full(Bytes::new());
        assert!(full.is_end_stream());
        assert!(frames(full).is_empty());
    }

    /// A body passed through yields the inner body's frames, then ends;
    /// every `PoliteBody` is as small as hyper's `Full<Bytes>`.
    #[test]
    fn a_passed_body_yields_the_inner_frames_and_is_as_small_as_full_bytes() {
        let body = PoliteBody::stream("ef".to_owned());
        assert!(!body.is_end_stream());
        assert_eq!(frames(body), vec![Ok(Bytes::from_static(b"ef"))]);
        let mut body = std::pin::pin!(PoliteBody::stream("gh".to_owned()));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(matches!(
            body.as_mut().poll_frame(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        assert!(matches!(
            body.as_mut().poll_frame(&mut cx),
            Poll::Ready(None)
        ));
        assert!(body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(0));
        assert_eq!(
            std::mem::size_of::<PoliteBody<String>>(),
            std::mem::size_of::<Option<Bytes>>()
        );
    }

    /// A client error whose source is the I/O error (as hyper-util's are).
    #[derive(Debug)]
    struct Connect(std::io::Error);
    impl std::fmt::Display for Connect {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("connect failed")
        }
    }
    impl std::error::Error for Connect {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_io_error_in_the_chain_names_the_kind() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = failure(Box::new(Connect(refused)), TransportErrorKind::Other);
        assert_eq!(e.kind(), TransportErrorKind::Refused);
        let plain = failure("no idea".into(), TransportErrorKind::Reset);
        assert_eq!(plain.kind(), TransportErrorKind::Reset);
        assert!(std::error::Error::source(&plain).is_some());
    }
}
