//! [`PoliteMiddleware`]: polite as a `reqwest_middleware::Middleware`
//! (feature `middleware`).

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use polite_client::{
    BoxError, CallOptions, DEFAULT_MAX_BODY, Error, NoTransport, PoliteAttempt, ReadWhole,
    RedirectHop, Transport, TransportError, in_box,
};
use polite_core::TransportErrorKind;
use reqwest_middleware::{Middleware, Next};

use crate::reqwest_transport::{detach, error, kind, read_whole, to_reqwest};

/// polite as a [`reqwest_middleware::Middleware`]: every request sent
/// through a `ClientWithMiddleware` that has it becomes one polite call —
/// retried by class (429, 500/502/503/504, transport errors; only when
/// replayable), the server's `Retry-After` honoured and never cut short,
/// one deadline for the whole call, and a pace per origin shared by every
/// call through it (a 429 from one API never slows calls to another). So
/// `client.get(url).send().await` call sites get polite's behaviour
/// without changing.
///
/// ```
/// use polite_lab::{Lab, LabConfig, Step};
/// use polite_tokio::{Config, PoliteMiddleware};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // A server that is unavailable once, asking for a second's patience.
/// let lab = Lab::start(LabConfig::default().script("/items/1", vec![
///     Step::with_retry_after(503, Duration::from_secs(1)),
///     Step::Normal,
/// ]))?;
///
/// // Redirects followed by polite, not by reqwest (see "Redirects" below).
/// let http = reqwest::Client::builder()
///     .redirect(reqwest::redirect::Policy::none())
///     .build()?;
/// let client = reqwest_middleware::ClientBuilder::new(http)
///     .with(PoliteMiddleware::new(Config::default())?)
///     .build();
/// let started = std::time::Instant::now();
/// let response = client.get(lab.url("/items/1")).send().await?;
/// assert_eq!(response.status(), 200);
/// assert!(started.elapsed() >= Duration::from_secs(1)); // the server's time, not less
/// assert_eq!(lab.log().len(), 2);
/// # Ok(()) }
/// ```
///
/// ## What comes back
///
/// * **`Ok(response)`** whenever the call ended on the server's word, as a
///   plain reqwest `send()` would return it: a success, a final status (a
///   404), the last answer of a spent budget (the last 503), a 429 whose
///   `Retry-After` is beyond what polite may wait (the automatic wait cap,
///   60 s by default). An answer of 400 or more carries the call's
///   [`Outcome`](crate::Outcome) in its extensions
///   (`response.extensions().get::<polite_tokio::Outcome>()`); one under
///   400 — a success, or a 3xx handed back unfollowed, which polite counts
///   as a success — carries none.
/// * **`Err(reqwest_middleware::Error::Middleware(e))`** when the call
///   timed out (including: the server's `Retry-After` falls after the
///   deadline — the call ends at once with the error, it does not wait), was
///   starved by the pace, or ended on a transport error. `e` is an
///   `anyhow::Error` around polite's [`Error`]:
///   `e.downcast_ref::<polite_tokio::Error>()` gives the outcome, the
///   attempts, the elapsed time, and the reqwest error as `source()`.
///
/// ## Bodies
///
/// * A request body that reqwest holds in memory (`.body(bytes)`,
///   `.json(..)`, `.form(..)`, or none) is copied once into the call and
///   re-sent on every retry. A **streaming body** (`Body::wrap_stream`)
///   cannot be produced again: such a request is sent **once**, through
///   the rest of the stack unchanged — still paced and inside the deadline,
///   never retried.
/// * Only answers polite may retry (the statuses of the call's
///   [`RetryPolicy`](polite_core::RetryPolicy)) are read whole, up to [`max_body`](Self::max_body)
///   (16 MiB by default; a larger one ends the call with a permanent
///   `BodyTooLarge`). Every other answer — a success above all — is handed
///   back as reqwest gave it, its body unread: downloads stream as before.
///   The deadline covers the call up to that answer's headers; reading its
///   body is yours, as with plain reqwest.
///
/// ## Per call
///
/// [`CallOptions`] (a call's own timeout, retry rules, pace key) go in the
/// request's extensions: `client.get(url).with_extension(CallOptions::new().timeout(..))`.
/// A request's own reqwest `.timeout(..)` still bounds each attempt.
///
/// ## The rest of the stack
///
/// * Each attempt, and each redirect hop polite follows, runs the
///   middleware after this one and the `reqwest::Client` again (logging
///   and tracing middleware below see every attempt), sharing the
///   request's extensions. A middleware that adds a credential belongs
///   **before** this one — see "Credentials" below.
/// * An error of a middleware below (`reqwest_middleware::Error::Middleware`
///   around anything but a reqwest error) is not retried, as
///   `reqwest-retry` does not retry one: the call ends at once with a
///   permanent [`TransportError::from_stack`] (`is_from_stack()`; its
///   `Display` says "error of the middleware below polite", not "invalid
///   request"), the middleware's own error its `source()`, with its whole
///   chain: `std::iter::successors(Some(&e as &dyn Error), |e| e.source())`
///   from polite's error finds it and its type.
/// * **Redirects.** A `reqwest::Client` that follows redirects itself
///   (reqwest's default: up to 10 hops) follows them by reqwest's rules,
///   inside one polite attempt: a hop to another host drops only
///   `Authorization`, `Cookie` and `Proxy-Authorization`, so another
///   header that carries a credential (an `X-Api-Key`) goes along. For
///   SPEC §5.1's rule — a hop to another origin drops **every** header the
///   caller set — build the client with
///   `.redirect(reqwest::redirect::Policy::none())`: polite then follows
///   each 3xx itself, by the [`Config::redirects`](polite_client::Config::redirects)
///   policy (up to 10 hops by default; [`RedirectPolicy::NONE`](polite_client::RedirectPolicy::NONE) hands the
///   3xx back to the caller instead). The example above does so.
/// * **Do not retry twice.** Put no `reqwest-retry` middleware in the same
///   stack, and leave reqwest 0.13's own retries (`ClientBuilder::retry`)
///   at their default, which re-sends only requests the server never
///   processed (protocol NACKs such as an HTTP/2 `REFUSED_STREAM`), or turn
///   them off with `reqwest::retry::never()`. A reqwest retry policy that
///   retries statuses (`retry::for_host(..).classify_fn(..)`) makes each
///   polite attempt up to 1 + `max_retries_per_request` sends, without
///   `Retry-After`, outside polite's pace and attempt records: the budgets
///   multiply (polite's 4 × reqwest's 2 → up to 15 sends for one 5xx
///   call). Only the deadline still holds: every attempt, with whatever
///   reqwest re-sends inside it, is aborted at polite's `abort_at`.
/// * **Stacked twice** (two `PoliteMiddleware`s in one chain, or one in a
///   shared stack that another adds to): the inner one sees
///   [`PoliteAttempt`](polite_client::PoliteAttempt) in the extensions of
///   each of the outer one's attempts and passes it through, so the budgets
///   are the outer call's, not multiplied (SPEC §2).
///
/// ## Credentials
///
/// polite drops the headers it is *given* on a hop to another origin
/// (SPEC §5.1). A middleware below it runs again for every hop, so one that
/// adds `Authorization` there would send the token to whatever origin a
/// redirect names. So:
///
/// * put a middleware that adds credentials **before** `PoliteMiddleware`
///   (`.with(Auth).with(PoliteMiddleware::new(..)?)`): polite is given its
///   headers, re-sends them on every retry and same-origin hop, and drops
///   them on a cross-origin hop (it then runs once per call, not per
///   attempt);
/// * or, when it must run below polite (a token refreshed per attempt),
///   have it leave a hop to another origin alone: every hop polite
///   follows carries a [`RedirectHop`] in the middleware extensions
///   (`extensions.get::<RedirectHop>()`), `cross_origin` when it leaves
///   the origin the caller named. The caller's first request and its
///   retries carry none.
///
/// ```
/// use polite_lab::hostile::{Hostile, Reply};
/// use polite_tokio::{Config, PoliteMiddleware, RedirectHop};
/// use reqwest_middleware::{Middleware, Next};
///
/// /// Adds the service's token, never to another origin polite is sent to.
/// struct Auth;
/// #[async_trait::async_trait]
/// impl Middleware for Auth {
///     async fn handle(
///         &self,
///         mut req: reqwest::Request,
///         extensions: &mut http::Extensions,
///         next: Next<'_>,
///     ) -> reqwest_middleware::Result<reqwest::Response> {
///         let elsewhere = extensions.get::<RedirectHop>().is_some_and(|h| h.cross_origin);
///         if !elsewhere {
///             req.headers_mut().insert("authorization", http::HeaderValue::from_static("Bearer s3cret"));
///         }
///         next.run(req, extensions).await
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cdn = Hostile::start(vec![("/blob", Reply::Body("the file".into()))])?;
/// let api = Hostile::start(vec![("/file", Reply::redirect(302, cdn.url("/blob")))])?;
/// let http = reqwest::Client::builder()
///     .redirect(reqwest::redirect::Policy::none())
///     .build()?;
/// let client = reqwest_middleware::ClientBuilder::new(http)
///     .with(PoliteMiddleware::new(Config::default())?)
///     .with(Auth) // below polite: it checks the mark
///     .build();
/// let file = client.get(api.url("/file")).send().await?;
/// assert_eq!(file.text().await?, "the file");
/// assert_eq!(api.seen()[0].header("authorization"), Some("Bearer s3cret"));
/// assert_eq!(cdn.seen()[0].header("authorization"), None);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PoliteMiddleware<T = NoTransport> {
    client: crate::Client<T>,
    max_body: usize,
}

impl PoliteMiddleware<NoTransport> {
    /// A middleware with its own polite client on `config` (its calls share
    /// one pace per origin). `config.redirects` applies to the 3xx that come
    /// back through the stack, that is with a `reqwest::Client` that
    /// follows none itself (see "Redirects" above); each hop runs the rest
    /// of the stack again, marked with a [`RedirectHop`] (see
    /// "Credentials" above).
    ///
    /// ```
    /// let m = polite_tokio::PoliteMiddleware::new(polite_tokio::Config::default())?;
    /// assert_eq!(m.client().config().redirects, polite_tokio::RedirectPolicy::default());
    /// # Ok::<(), polite_tokio::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Policy`] or [`Error::Config`] for a configuration that
    /// makes no sense.
    pub fn new(config: polite_client::Config) -> Result<Self, Error> {
        Ok(Self::from_client(crate::Client::with_transport(
            NoTransport,
            config,
        )?))
    }
}

impl<T> PoliteMiddleware<T>
where
    T: Transport + Send + Sync + 'static,
    T::Sending: Unpin,
{
    /// A middleware whose calls share `client`'s configuration, pace and
    /// observer: calls through the middleware and the client's own calls
    /// slow down together on a 429. The client's
    /// [`RedirectPolicy`](polite_client::RedirectPolicy) applies to a 3xx that comes back through the
    /// stack (with a `reqwest::Client` that follows none itself); each hop
    /// runs the rest of the stack again, marked with a [`RedirectHop`] (see
    /// "Credentials" above).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let polite = polite_tokio::Client::new();
    /// let m = polite_tokio::PoliteMiddleware::from_client(polite.clone());
    /// # drop(m); }
    /// ```
    #[must_use]
    pub fn from_client(client: crate::Client<T>) -> Self {
        PoliteMiddleware {
            client,
            max_body: DEFAULT_MAX_BODY,
        }
    }

    /// The largest answer body read whole (default 16 MiB); see "Bodies"
    /// above.
    ///
    /// ```
    /// let m = polite_tokio::PoliteMiddleware::new(polite_tokio::Config::default())?.max_body(1 << 20);
    /// # drop(m);
    /// # Ok::<(), polite_tokio::Error>(())
    /// ```
    #[must_use]
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// The polite client the middleware calls through.
    ///
    /// ```
    /// let m = polite_tokio::PoliteMiddleware::new(polite_tokio::Config::default())?;
    /// assert_eq!(m.client().config().timeout, std::time::Duration::from_secs(30));
    /// # Ok::<(), polite_tokio::Error>(())
    /// ```
    #[must_use]
    pub fn client(&self) -> &crate::Client<T> {
        &self.client
    }
}

/// The boxed future of [`Middleware::handle`].
type Handled<'a> = std::pin::Pin<
    Box<dyn Future<Output = reqwest_middleware::Result<reqwest::Response>> + Send + 'a>,
>;

// `async_trait`'s signature written out: the call's future is written into
// a box allocated first (`Box::pin` of an `async` block, as `async_trait`
// makes it, builds the future on the stack and copies it into the box).
#[async_trait::async_trait]
impl<T> Middleware for PoliteMiddleware<T>
where
    T: Transport + Send + Sync + 'static,
    T::Sending: Unpin,
{
    fn handle<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        req: reqwest::Request,
        extensions: &'life1 mut http::Extensions,
        next: Next<'life2>,
    ) -> Handled<'async_trait>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        // An attempt of a polite call further out in the chain (another
        // `PoliteMiddleware`): its budget, pace and deadline are that
        // call's (SPEC §1, §2: not multiplied, no fresh timeout).
        if PoliteAttempt::is_in(extensions) {
            return next.run(req, extensions);
        }
        in_box(|| self.call(req, extensions, next))
    }
}

impl<T> PoliteMiddleware<T>
where
    T: Transport + Send + Sync + 'static,
    T::Sending: Unpin,
{
    /// One call through the middleware ([`Middleware::handle`]).
    async fn call(
        &self,
        req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        // Everything up to the call in a plain `fn`: what it reads and
        // builds on the way (the caller's request, its parts, the retry
        // rules) is not kept in this boxed future across the call.
        let Prepared {
            template,
            uri_text,
            options,
            first,
            request_extensions,
            read_whole,
        } = self.prepare(req, extensions)?;
        // Every attempt runs the rest of the chain with the mark of a
        // polite call: a `PoliteMiddleware` further in passes it through.
        extensions.insert(PoliteAttempt);
        let shared = tokio::sync::Mutex::new(std::mem::take(extensions));
        let live = Mutex::new(None);
        let transport = NextTransport {
            next,
            extensions: &shared,
            live: &live,
            request_extensions,
            template: uri_text,
            streamed: matches!(first, First::Once(_)),
            first: Mutex::new(first),
            read_whole,
            max_body: self.max_body,
        };
        // The options go to the call as they are, not through the
        // request's extensions (a map allocated only to be read back).
        let options = match options.as_deref() {
            Some(options) => options,
            None => no_options(),
        };
        let ended = self
            .client
            .send_via_with(&transport, template, options)
            .await;
        drop(transport);
        *extensions = shared.into_inner();
        extensions.remove::<PoliteAttempt>();
        extensions.remove::<RedirectHop>();
        let (response, outcome) = match ended {
            Ok(response) => (response, None),
            Err(e) => match e.into_answer() {
                Ok((response, outcome)) => (response, Some(outcome)),
                Err(e) => return Err(reqwest_middleware::Error::middleware(e)),
            },
        };
        let (parts, bytes) = response.into_parts();
        // The live response of the call's last attempt, when it was
        // handed back unread: the answer the call ended on.
        let live = live.into_inner().unwrap_or_else(PoisonError::into_inner);
        let mut response = match live {
            Some(mut live) => {
                // The headers and the extensions went through polite (it
                // read the headers there).
                *live.headers_mut() = parts.headers;
                *live.extensions_mut() = parts.extensions;
                live
            }
            None => reqwest::Response::from(http::Response::from_parts(parts, bytes)),
        };
        if let Some(outcome) = outcome {
            response.extensions_mut().insert(outcome);
        }
        Ok(response)
    }
}

/// What a call through the middleware starts from (`PoliteMiddleware::prepare`).
struct Prepared {
    /// polite's copy of the request.
    template: http::Request<Bytes>,
    /// Where the text of the template's URI lies.
    uri_text: UriText,
    /// The call's options, when it has any of its own or its body is sent
    /// once (else [`no_options`]), boxed: a `CallOptions` is 312 bytes,
    /// moved with the call's future on every call for nothing.
    options: Option<Box<CallOptions>>,
    first: First,
    request_extensions: http::Extensions,
    read_whole: Option<ReadWhole>,
}

impl<T> PoliteMiddleware<T>
where
    T: Transport + Send + Sync + 'static,
    T::Sending: Unpin,
{
    /// The call's request, options and first attempt, from the caller's
    /// request and the middleware extensions.
    #[allow(clippy::result_large_err)]
    fn prepare(
        &self,
        req: reqwest::Request,
        extensions: &http::Extensions,
    ) -> reqwest_middleware::Result<Prepared> {
        let buffered = match req.body() {
            None => Some(Bytes::new()),
            Some(body) => body.as_bytes().map(Bytes::copy_from_slice),
        };
        // What the first attempt is sent as, without headers or body: the
        // caller's method, URL, version and timeout, so that its URL is not
        // formatted and parsed again (`like_proto`).
        let first = buffered.as_ref().map(|_| {
            let timeout = req.timeout().copied();
            (
                req.method().clone(),
                req.url().clone(),
                req.version(),
                timeout,
            )
        });
        let (mut parts, body) = http::Request::<reqwest::Body>::try_from(req)?.into_parts();
        // That is the caller's request when its extensions hold nothing but
        // the timeout (reqwest keeps them private: it cannot be given
        // others). Else the first attempt is built from polite's copy with
        // the extensions, as a retry is.
        let proto = first
            .filter(|(.., timeout)| parts.extensions.len() == usize::from(timeout.is_some()))
            .map(|(method, url, version, timeout)| {
                let mut proto = reqwest::Request::new(method, url);
                *proto.version_mut() = version;
                if timeout.is_some() {
                    *proto.timeout_mut() = timeout;
                }
                proto
            });
        let given = extensions
            .get::<CallOptions>()
            .or_else(|| parts.extensions.get::<CallOptions>())
            .cloned();
        let (template, first, request_extensions) = match buffered {
            Some(bytes) => {
                // Kept for the attempts not sent from `proto`; polite's copy
                // of the request needs only its options.
                let own = std::mem::take(&mut parts.extensions);
                let first = proto.map_or(First::Taken, First::Proto);
                (http::Request::from_parts(parts, bytes), first, own)
            }
            None => {
                let own = parts.extensions.clone();
                let template = http::Request::from_parts(parts.clone(), Bytes::new());
                let stream = reqwest::Request::try_from(http::Request::from_parts(parts, body))?;
                (template, First::Once(stream), own)
            }
        };
        let once = matches!(first, First::Once(_));
        let default = &self.client.config().retry;
        // A `CallOptions` only for a call that has its own or a body sent
        // once (whose rules change): else none is made.
        let (options, read_whole) = match given {
            Some(mut options) => {
                let read_whole = ReadWhole::for_call(&mut options, default, &template, once);
                (Some(Box::new(options)), read_whole)
            }
            None if once => {
                let mut options = CallOptions::default();
                let read_whole = ReadWhole::for_call(&mut options, default, &template, true);
                (Some(Box::new(options)), read_whole)
            }
            None => (None, ReadWhole::for_request(None, default, &template)),
        };
        Ok(Prepared {
            uri_text: UriText::of(template.uri()),
            template,
            options,
            first,
            request_extensions,
            read_whole,
        })
    }
}

/// The options of a call that has none of its own.
fn no_options() -> &'static CallOptions {
    static NONE: std::sync::OnceLock<CallOptions> = std::sync::OnceLock::new();
    NONE.get_or_init(CallOptions::default)
}

/// The request a call's first attempt goes out as, when it is not built
/// from polite's copy.
enum First {
    /// The caller's request without headers or body (its method, URL,
    /// version and timeout, when its extensions hold nothing else), when
    /// its body is buffered, until the first attempt to its URL is sent
    /// from it.
    Proto(reqwest::Request),
    /// A request with a streaming body, sent once.
    Once(reqwest::Request),
    /// Sent, or none.
    Taken,
}

impl First {
    /// This request when `wanted`, `Taken` left in its place; else `Taken`
    /// (nothing moved).
    fn take(&mut self, wanted: impl FnOnce(&First) -> bool) -> First {
        if wanted(self) {
            std::mem::replace(self, First::Taken)
        } else {
            First::Taken
        }
    }
}

/// One call's transport: each attempt runs the rest of the middleware stack
/// and the `reqwest::Client` (`next`), aborted at its `abort_at`.
struct NextTransport<'a> {
    next: Next<'a>,
    /// The middleware extensions, shared by the attempts one after another
    /// (as `reqwest-retry` does), handed back when the call ends.
    extensions: &'a tokio::sync::Mutex<http::Extensions>,
    /// The live reqwest response of the last attempt when it was handed
    /// back unread (its status and headers went to polite): emptied as
    /// each attempt starts (a call's attempts run one after another), so
    /// that at the call's end it holds the response of the answer the call
    /// ended on, if any. Kept beside the call, not in the answer's
    /// extensions (an `Arc`, a box and a map entry per call).
    live: &'a Mutex<Option<reqwest::Response>>,
    /// The request's own extensions (reqwest keeps its per-request timeout
    /// there), given to every attempt not sent from `proto`.
    request_extensions: http::Extensions,
    /// Where the text of polite's copy of the request's URI lies.
    template: UriText,
    /// The request the first attempt goes out as, until it is sent (one
    /// lock per attempt).
    first: Mutex<First>,
    /// Whether the call's body is a stream, sent once.
    streamed: bool,
    /// When the call may be retried, the statuses of its retry rules: its
    /// retryable answers are read whole; `None`: every answer is handed
    /// back unread.
    read_whole: Option<ReadWhole>,
    max_body: usize,
}

/// Where a URI's text lies (its scheme, and the address and length of its
/// authority and of its path and query): two URIs with equal `UriText`s
/// are the same text, since a URI's bytes never change. Clones of one URI
/// have equal `UriText`s; a URI parsed anew does not.
#[derive(Clone, Debug, PartialEq, Eq)]
struct UriText {
    scheme: Option<http::uri::Scheme>,
    authority: Option<(usize, usize)>,
    path_and_query: Option<(usize, usize)>,
}

impl UriText {
    fn of(uri: &http::Uri) -> UriText {
        let at = |s: &str| (s.as_ptr() as usize, s.len());
        UriText {
            scheme: uri.scheme().cloned(),
            authority: uri.authority().map(|a| at(a.as_str())),
            path_and_query: uri.path_and_query().map(|p| at(p.as_str())),
        }
    }
}

type Sending<'a> = std::pin::Pin<
    Box<dyn Future<Output = Result<http::Response<Bytes>, TransportError>> + Send + 'a>,
>;

impl NextTransport<'_> {
    /// `request` built from the caller's own (`proto`, taken: the first
    /// attempt, which most calls are) when it goes to the same URL with
    /// the same method (the URL kept as reqwest parsed it); else `request`
    /// back. A retry is built from polite's copy (its URL parsed again):
    /// keeping `proto` for it would cost a copy of the URL and the
    /// extensions on every attempt.
    #[allow(clippy::result_large_err)]
    fn like_proto(
        &self,
        first: &mut First,
        request: http::Request<Bytes>,
    ) -> Result<reqwest::Request, http::Request<Bytes>> {
        // An attempt to the template's URI holds a clone of it, whose text
        // is the template's own bytes (a redirect hop's is not): no need to
        // compare the URI with the URL piece by piece.
        let same = |f: &First| {
            matches!(f, First::Proto(p)
                if request.method() == p.method() && self.template == UriText::of(request.uri()))
        };
        let First::Proto(mut out) = first.take(same) else {
            return Err(request);
        };
        let (parts, body) = request.into_parts();
        *out.headers_mut() = parts.headers;
        *out.version_mut() = parts.version;
        *out.body_mut() = Some(body.into());
        Ok(out)
    }
}

impl<'a> Transport for NextTransport<'a> {
    type Sending = Sending<'a>;

    fn send(&self, request: http::Request<Bytes>, abort_at: Instant) -> Sending<'a> {
        self.start(request, Some(abort_at))
    }

    /// No timer of its own: polite's drive loop ends the attempt at
    /// `abort_at`.
    fn send_supervised(&self, request: http::Request<Bytes>, _: Instant) -> Sending<'a> {
        self.start(request, None)
    }

    /// As [`ReqwestTransport`](crate::ReqwestTransport)'s: a retried
    /// answer's header values and small body are copied out of the
    /// connection's read buffer.
    fn keep(&self, answer: &mut http::Response<Bytes>) {
        detach(answer);
    }
}

impl<'a> NextTransport<'a> {
    /// One attempt, aborted at `abort_at` by a timer of its own when given.
    fn start(&self, request: http::Request<Bytes>, abort_at: Option<Instant>) -> Sending<'a> {
        // An earlier attempt's live response (a 3xx polite follows) is not
        // this attempt's answer.
        drop(
            self.live
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        // A redirect hop polite follows: marked for the rest of the stack.
        let hop = request.extensions().get::<RedirectHop>().copied();
        let mut first = self.first.lock().unwrap_or_else(PoisonError::into_inner);
        let request = match first.take(|f| matches!(f, First::Once(_))) {
            First::Once(request) => Ok(request),
            // A redirect hop after the body was streamed: only a hop that
            // sends no body (303, or 301/302 after a POST) can go.
            _ if self.streamed
                && !matches!(*request.method(), http::Method::GET | http::Method::HEAD) =>
            {
                Err(TransportError::new(
                    TransportErrorKind::RedirectNotReplayable,
                ))
            }
            _ => match self.like_proto(&mut first, request) {
                Ok(request) => Ok(request),
                Err(mut request) => {
                    *request.extensions_mut() = self.request_extensions.clone();
                    if let Some(hop) = hop {
                        request.extensions_mut().insert(hop);
                    }
                    to_reqwest(request)
                }
            },
        };
        drop(first);
        let next = self.next.clone();
        let (extensions, live) = (self.extensions, self.live);
        let (read_whole, max_body) = (self.read_whole, self.max_body);
        // Small (under glibc's 1 KiB thread cache, as its box): an answer
        // read whole is read by a future boxed apart (`read_answer`), only
        // for the statuses polite may retry.
        let attempt = async move {
            let request = request?;
            let response = {
                let mut extensions = extensions.lock().await;
                // The mark is this attempt's: a hop's, or none.
                match hop {
                    Some(hop) => extensions.insert(hop),
                    None => extensions.remove::<RedirectHop>(),
                };
                next.run(request, &mut extensions)
                    .await
                    .map_err(middleware_error)?
            };
            match answer(response, read_whole) {
                Ok((out, response)) => {
                    *live.lock().unwrap_or_else(PoisonError::into_inner) = Some(response);
                    Ok(out)
                }
                Err(response) => Box::pin(read_answer(response, max_body)).await,
            }
        };
        // Boxed apart: a supervised attempt's box holds no timer.
        let Some(abort_at) = abort_at else {
            return Box::pin(attempt);
        };
        Box::pin(async move {
            let at = tokio::time::Instant::from_std(abort_at);
            match tokio::time::timeout_at(at, attempt).await {
                Ok(r) => r,
                Err(_) => Err(TransportErrorKind::Aborted.into()),
            }
        })
    }
}

/// An attempt's answer for polite when it is handed back unread: its status,
/// headers and extensions, and the live response to keep aside;
/// `Err(response)` when polite may retry it (`read_whole_by`'s statuses),
/// to be read whole by [`read_answer`].
#[allow(clippy::result_large_err)]
fn answer(
    mut response: reqwest::Response,
    read_whole_by: Option<ReadWhole>,
) -> Result<(http::Response<Bytes>, reqwest::Response), reqwest::Response> {
    let status = response.status();
    if read_whole_by.is_some_and(|r| r.wants(status.as_u16())) {
        return Err(response);
    }
    let mut out = http::Response::new(Bytes::new());
    *out.status_mut() = status;
    *out.version_mut() = response.version();
    *out.headers_mut() = std::mem::take(response.headers_mut());
    // The response's own extensions (reqwest's connection info is there)
    // go through polite and back to it when the call ends.
    *out.extensions_mut() = std::mem::take(response.extensions_mut());
    Ok((out, response))
}

/// An answer polite may retry, read whole (its body then comes back with
/// it), with its extensions and URL.
async fn read_answer(
    mut response: reqwest::Response,
    max_body: usize,
) -> Result<http::Response<Bytes>, TransportError> {
    let url = response.url().clone();
    let extensions = std::mem::take(response.extensions_mut());
    let mut out = read_whole(response, max_body).await?;
    out.extensions_mut().extend(extensions);
    // reqwest keeps an answer's URL in a private extension that only its
    // response builder can set.
    let with_url = reqwest::ResponseBuilderExt::url(http::Response::builder(), url).body(());
    if let Ok(with_url) = with_url {
        out.extensions_mut()
            .extend(with_url.into_parts().0.extensions);
    }
    Ok(out)
}

/// What the rest of the stack failed with, as a transport error: a reqwest
/// error by its kind (as `ReqwestTransport` classifies it), also inside a
/// middleware's error; any other middleware error is
/// [`TransportError::from_stack`], permanent (not retried: `reqwest-retry`
/// treats it as fatal too), the middleware's own error its `source()`: the
/// error the `anyhow::Error` was made from, moved out of it so that it
/// downcasts to its own type (`BoxError::from` would box anyhow's wrapper,
/// which does not), its own `source()` chain kept.
fn middleware_error(e: reqwest_middleware::Error) -> TransportError {
    match e {
        reqwest_middleware::Error::Reqwest(e) => error(e),
        reqwest_middleware::Error::Middleware(e) => match e.downcast_ref::<reqwest::Error>() {
            Some(reqwest) => TransportError::new(kind(reqwest)).with_source(BoxError::from(e)),
            None => {
                TransportError::from_stack(e.reallocate_into_boxed_dyn_error_without_backtrace())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clone of the template's URI (what polite sends as the first
    /// attempt) is recognised; the same text parsed anew, another scheme,
    /// or another URL is not (such an attempt is built from polite's copy).
    #[test]
    fn only_a_clone_of_the_templates_uri_has_its_text() {
        let template: http::Uri = "http://127.0.0.1:8/items/1?x=1".parse().unwrap();
        let text = UriText::of(&template);
        assert_eq!(UriText::of(&template.clone()), text);
        let again: http::Uri = "http://127.0.0.1:8/items/1?x=1".parse().unwrap();
        assert_ne!(UriText::of(&again), text);
        let mut parts = template.clone().into_parts();
        parts.scheme = Some(http::uri::Scheme::HTTPS);
        let https = http::Uri::from_parts(parts).unwrap();
        assert_ne!(UriText::of(&https), text);
        let other: http::Uri = "http://127.0.0.1:8/items/2".parse().unwrap();
        assert_ne!(UriText::of(&other), text);
    }
}
