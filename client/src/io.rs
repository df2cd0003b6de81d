//! [`HttpIo`]: the drive loop's `Io`, assembled from an adapter's
//! [`Transport`], [`Clock`] and [`Cancel`].

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures_core::Stream;
use polite_core::drive::{Io, Pull};
use polite_core::{Outcome, SendPlan, TransportErrorKind};

use crate::answer::HttpAnswer;
use crate::error::TransportError;
use crate::items::ItemSlots;
use crate::meter::CallMeter;
use crate::options::{CallOptions, Session};
use crate::redirect::{Chain, Next, RedirectPolicy};
use crate::trace::Server;
use crate::transport::{Cancel, Clock, Transport};

/// One call's `Io`: the requests it may send (indexed by `SendId::item`),
/// the name of the long-poll parameter, and the adapter's parts.
#[derive(Debug)]
pub struct HttpIo<'a, T, K, C> {
    transport: &'a T,
    clock: K,
    cancel: C,
    requests: Requests<'a>,
    wait_param: &'a str,
    redirects: RedirectPolicy,
    shared: Shared<'a>,
    /// The call's metrics (feature `metrics`; empty otherwise).
    meter: Option<CallMeter>,
    /// The caller's session, whose generation each answer is stamped with.
    session: Option<Session>,
}

/// Where a call's requests come from.
enum Requests<'a> {
    /// All of them, indexed by item.
    Slice(&'a [http::Request<Bytes>]),
    /// Pulled one by one as the machine wants them (a streaming batch).
    Pulled(Box<Pulled<'a>>),
}

impl std::fmt::Debug for Requests<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Requests::Slice(r) => write!(f, "Slice({})", r.len()),
            Requests::Pulled(p) => write!(f, "Pulled(next {})", p.next),
        }
    }
}

/// A streaming batch's requests: the source (each request with its pace
/// slot), and what to do with each item's end. The requests of the items
/// started and not yet ended are kept per item (memory bounded by the
/// machine's window) in the call's [`Shared`] state.
struct Pulled<'a> {
    source: Source<'a>,
    next: u32,
    /// The request id of item 0 (item `k` has `first_id + k`).
    first_id: u64,
    /// When another item may be pulled (the caller keeps up; the reorder
    /// window of input order).
    gate: Arc<crate::stream::Gate>,
    sink: Box<dyn FnMut(u32, Outcome, Option<HttpAnswer>, Failure) + Send + 'a>,
}

/// Where a streaming batch's requests come from, each with its pace slot.
#[allow(clippy::large_enum_variant)] // one per batch, in the `Pulled` box
pub(crate) enum Source<'a> {
    /// An iterator: pulled on the thread that drives the batch, so it must
    /// not block (a file, a vector, a generator).
    Iter(Box<dyn Iterator<Item = (http::Request<Bytes>, u32)> + Send + 'a>),
    /// A stream (a channel fed by a thread reading a pipe, a socket, a
    /// queue): while it has nothing, the batch goes on with its items in
    /// progress and is woken when it has. `next` holds what a poll of the
    /// drive's wait took out, for the pull that follows it.
    Stream {
        stream: Pin<Box<dyn Stream<Item = (http::Request<Bytes>, u32)> + Send + 'a>>,
        next: Option<Option<(http::Request<Bytes>, u32)>>,
    },
}

impl Source<'_> {
    /// The next request: `Ready(None)` at the end, `Pending` while a
    /// stream has none yet (its waker is `cx`'s).
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(http::Request<Bytes>, u32)>> {
        match self {
            Source::Iter(iter) => Poll::Ready(iter.next()),
            Source::Stream { stream, next } => match next.take() {
                Some(taken) => Poll::Ready(taken),
                None => stream.as_mut().poll_next(cx),
            },
        }
    }

    /// Takes the next request out of a stream into `next` (`Ready` once
    /// there is one, or the end); an iterator is always ready.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self {
            Source::Iter(_) => Poll::Ready(()),
            Source::Stream { stream, next } => {
                if next.is_none() {
                    match stream.as_mut().poll_next(cx) {
                        Poll::Ready(taken) => *next = Some(taken),
                        Poll::Pending => return Poll::Pending,
                    }
                }
                Poll::Ready(())
            }
        }
    }
}

/// What the transport left of an item's sends: how many, and the error of
/// the last one when it got no answer.
#[derive(Debug, Default)]
pub(crate) struct Failure {
    /// Sends of the item.
    pub(crate) sends: u32,
    /// The error of its last send, when that got no answer.
    pub(crate) error: Option<TransportError>,
}

impl<'a, T, K, C> HttpIo<'a, T, K, C> {
    /// An `Io` over `requests` (one for `send` and `wait`, many for `batch`).
    /// `wait_param` must be a valid query parameter name (see
    /// [`valid_param_name`]).
    pub fn new(
        transport: &'a T,
        clock: K,
        cancel: C,
        requests: &'a [http::Request<Bytes>],
        wait_param: &'a str,
    ) -> Self {
        Self::sharing(
            transport,
            clock,
            cancel,
            requests,
            wait_param,
            Shared::Own(Arc::default()),
        )
    }

    /// [`new`](Self::new), keeping what the sends leave in `slots`, which
    /// the caller owns (no allocation per call).
    pub(crate) fn with_slots(
        transport: &'a T,
        clock: K,
        cancel: C,
        requests: &'a [http::Request<Bytes>],
        wait_param: &'a str,
        slots: &'a SendSlots,
    ) -> Self {
        Self::sharing(
            transport,
            clock,
            cancel,
            requests,
            wait_param,
            Shared::Lent(slots),
        )
    }

    /// The `Io` of a call over `requests`, its sends' slots in `shared`.
    fn sharing(
        transport: &'a T,
        clock: K,
        cancel: C,
        requests: &'a [http::Request<Bytes>],
        wait_param: &'a str,
        shared: Shared<'a>,
    ) -> Self {
        HttpIo {
            transport,
            clock,
            cancel,
            requests: Requests::Slice(requests),
            wait_param,
            redirects: RedirectPolicy::NONE,
            shared,
            meter: None,
            session: None,
        }
    }

    /// An `Io` that pulls its requests from `source` as the machine wants
    /// them (for [`BatchMachine::streaming`](polite_core::BatchMachine::streaming)),
    /// each with its pace slot ([`RequestInfo::pace_slot`](polite_core::RequestInfo::pace_slot)),
    /// item `k` with request id `first_id + k`, and hands each item's end to
    /// `sink` (its outcome, last answer, sends and last transport error),
    /// keeping only the requests of items in progress. With a `window`, an
    /// item is started only while fewer than `window` items lie between it
    /// and the oldest one `taken` has not yet passed (output in input order
    /// holds at most `window` results).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn pulling(
        transport: &'a T,
        clock: K,
        cancel: C,
        source: Source<'a>,
        first_id: u64,
        gate: Arc<crate::stream::Gate>,
        wait_param: &'a str,
        sink: Box<dyn FnMut(u32, Outcome, Option<HttpAnswer>, Failure) + Send + 'a>,
    ) -> Self {
        HttpIo {
            transport,
            clock,
            cancel,
            requests: Requests::Pulled(Box::new(Pulled {
                source,
                next: 0,
                first_id,
                gate,
                sink,
            })),
            wait_param,
            redirects: RedirectPolicy::NONE,
            shared: Shared::Own(Arc::default()),
            meter: None,
            session: None,
        }
    }

    /// Follows redirects by `policy` (default: [`RedirectPolicy::NONE`],
    /// a 3xx is the answer; [`Client`](crate::Client) passes its
    /// configured policy).
    #[must_use]
    pub fn redirects(mut self, policy: RedirectPolicy) -> Self {
        self.redirects = policy;
        self
    }

    /// Reports the call's sends and its items' ends to `meter`.
    #[must_use]
    pub(crate) fn meter(mut self, meter: CallMeter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Stamps each answer with `session`'s generation when it arrives
    /// (SPEC §2.3: an answer for a call of an earlier generation ends it
    /// `Stale`).
    #[must_use]
    pub(crate) fn session(mut self, session: Option<Session>) -> Self {
        self.session = session;
        self
    }

    /// Where a streaming batch's items in progress go, for their attempt
    /// events (`None` for a call over a slice: a `send` or `wait`, whose
    /// span names its server). One reference count per batch; the item's
    /// request is looked up only when an event asks.
    pub(crate) fn servers(&self) -> Option<ItemServers> {
        match (&self.requests, &self.shared) {
            (Requests::Pulled(_), Shared::Own(own)) => Some(ItemServers(Arc::clone(own))),
            _ => None,
        }
    }

    /// How many items a streaming batch has pulled so far (0 otherwise).
    #[must_use]
    pub fn pulled(&self) -> u32 {
        match &self.requests {
            Requests::Slice(_) => 0,
            Requests::Pulled(p) => p.next,
        }
    }

    /// How many sends item `item` has had so far.
    #[must_use]
    pub fn sends(&self, item: usize) -> u32 {
        failures(&self.shared)
            .get(&item)
            .map_or(0, |f| f.failure.sends)
    }

    /// Takes the transport error of item `item`'s latest send, when that
    /// send got no answer.
    pub fn take_error(&self, item: usize) -> Option<TransportError> {
        failures(&self.shared)
            .get_mut(&item)
            .and_then(|f| f.failure.error.take())
    }
}

/// A streaming batch's requests of the items in progress, as its `Io`
/// keeps them (see [`HttpIo::servers`]).
#[derive(Debug)]
pub(crate) struct ItemServers(Arc<Mutex<Failures>>);

impl ItemServers {
    /// Item `item`'s server (its request's host and port): `None` once the
    /// item has ended, or when its URL names none. Records are observed
    /// before their item ends, so an attempt's item is still there.
    pub(crate) fn server(&self, item: u32) -> Option<Server> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(item as usize))?
            .request
            .as_ref()
            .and_then(|r| Server::of(r.uri()))
    }
}

/// Whether `name` can be appended to a query as is: 1 to 64 ASCII letters,
/// digits, `_`, `-` or `.`.
///
/// ```
/// assert!(polite_client::valid_param_name("waitSeconds"));
/// assert!(!polite_client::valid_param_name("wait seconds"));
/// assert!(!polite_client::valid_param_name(""));
/// ```
#[must_use]
pub fn valid_param_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// `uri` with `name=value` as its only `name` parameter: any `name`
/// already in the query is dropped first (polite owns the wait parameter:
/// a `waitSeconds=999` left in the caller's URL must not ask the server for
/// more than the remaining budget, SPEC §3), the other parameters are kept
/// in their order.
///
/// ```
/// let u: http::Uri = "http://127.0.0.1:8/runs/1?x=1".parse().unwrap();
/// assert_eq!(polite_client::with_query_param(&u, "waitSeconds", 25).to_string(),
///            "http://127.0.0.1:8/runs/1?x=1&waitSeconds=25");
/// let u: http::Uri = "http://127.0.0.1:8/runs/1".parse().unwrap();
/// assert_eq!(polite_client::with_query_param(&u, "waitSeconds", 7).to_string(),
///            "http://127.0.0.1:8/runs/1?waitSeconds=7");
/// let u: http::Uri = "http://127.0.0.1:8/runs/1?waitSeconds=999&x=1".parse().unwrap();
/// assert_eq!(polite_client::with_query_param(&u, "waitSeconds", 7).to_string(),
///            "http://127.0.0.1:8/runs/1?x=1&waitSeconds=7");
/// ```
#[must_use]
pub fn with_query_param(uri: &http::Uri, name: &str, value: u32) -> http::Uri {
    rebuild_query(uri, name, Some(value)).unwrap_or_else(|| uri.clone())
}

/// `uri` without any `name` parameter in its query; `None` when it has
/// none (nothing to change).
pub(crate) fn without_query_param(uri: &http::Uri, name: &str) -> Option<http::Uri> {
    let query = uri.query()?;
    if !query.split('&').any(|pair| param_name(pair) == name) {
        return None;
    }
    rebuild_query(uri, name, None)
}

/// The name of one `name=value` pair of a query (all of it without `=`).
fn param_name(pair: &str) -> &str {
    pair.split_once('=').map_or(pair, |(name, _)| name)
}

/// `uri` with every `name` parameter dropped and, when `value` is given,
/// `name=value` appended. `None` when the result is not a valid URI
/// (unreachable for a valid name, which the client checks at construction).
fn rebuild_query(uri: &http::Uri, name: &str, value: Option<u32>) -> Option<http::Uri> {
    use std::fmt::Write as _;
    let mut parts = uri.clone().into_parts();
    let (path, query) = match &parts.path_and_query {
        Some(pq) => (pq.path(), pq.query().unwrap_or("")),
        None => ("/", ""),
    };
    let mut joined = String::with_capacity(path.len() + query.len() + name.len() + 12);
    joined.push_str(path);
    let mut sep = '?';
    for pair in query.split('&') {
        if pair.is_empty() || param_name(pair) == name {
            continue;
        }
        joined.push(sep);
        joined.push_str(pair);
        sep = '&';
    }
    if let Some(value) = value {
        let _ = write!(joined, "{sep}{name}={value}");
    }
    parts.path_and_query = Some(http::uri::PathAndQuery::try_from(joined).ok()?);
    http::Uri::from_parts(parts).ok()
}

/// The [`CallOptions`] field of a batch item that a batch cannot honour
/// per item (its own `timeout`, `retry` or `session`): `None` when it sets
/// none of them.
fn not_in_a_batch(request: &http::Request<Bytes>) -> Option<&'static str> {
    let options = request.extensions().get::<CallOptions>()?;
    if options.timeout.is_some() {
        Some("timeout")
    } else if options.retry.is_some() {
        Some("retry")
    } else if options.session.is_some() {
        Some("session")
    } else {
        None
    }
}

/// Why a batch item whose [`CallOptions`] set its own `timeout` or `retry`
/// ends `InvalidRequest` without being sent: a batch runs every item under
/// its one deadline and the client's retry rules, and silently ignoring
/// the item's would run it under rules it did not ask for.
#[derive(Debug)]
struct NotInABatch(&'static str);

impl std::fmt::Display for NotInABatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 == "session" {
            return f.write_str(
                "the request's CallOptions set a `session`, which a batch cannot honour per \
                 item: end a batch with the session by cancelling it (`batch_cancellable`), \
                 or send the request with `send`",
            );
        }
        write!(
            f,
            "the request's CallOptions set its own `{}`, which a batch cannot honour: \
             every item runs under the batch's one deadline and the client's retry rules \
             (Config::timeout, Config::retry); send it with `send`, or batch it with a \
             client configured so",
            self.0
        )
    }
}

impl std::error::Error for NotInABatch {}

/// A fresh copy of a request (bodies are `Bytes`: cheap to clone).
///
/// ```
/// let r = http::Request::get("http://127.0.0.1/x").header("a", "1")
///     .body(bytes::Bytes::from_static(b"b")).unwrap();
/// let c = polite_client::copy_request(&r);
/// assert_eq!((c.method(), c.uri(), c.headers(), c.body()), (r.method(), r.uri(), r.headers(), r.body()));
/// ```
#[must_use]
pub fn copy_request(r: &http::Request<Bytes>) -> http::Request<Bytes> {
    let mut out = http::Request::new(r.body().clone());
    *out.method_mut() = r.method().clone();
    *out.uri_mut() = r.uri().clone();
    *out.version_mut() = r.version();
    // A request without headers keeps the new request's empty map: a
    // clone of an empty map still copies (and later drops) its two
    // vectors.
    if !r.headers().is_empty() {
        *out.headers_mut() = r.headers().clone();
    }
    out
}

/// What one call keeps per item (only items in progress, for a streaming
/// batch): what its sends left behind, and a streaming batch's request.
#[derive(Debug, Default)]
struct PerItem {
    /// How many sends, and the transport error of the item's latest send
    /// when it got no answer.
    failure: Failure,
    /// A streaming batch: the item's request (each attempt sends a copy;
    /// a redirect chain starts from it).
    request: Option<http::Request<Bytes>>,
}

/// Inline for a call of one item (`send`, `wait`): no table allocated.
type Failures = ItemSlots<usize, PerItem>;

/// What a call's sends leave, kept by the caller for
/// [`HttpIo::with_slots`].
#[derive(Debug, Default)]
pub(crate) struct SendSlots(Mutex<Failures>);

/// Where a call keeps what its sends leave, shared by its `Io` and its
/// sends: its own, or lent by the caller (nothing allocated).
#[derive(Debug)]
enum Shared<'a> {
    Own(Arc<Mutex<Failures>>),
    Lent(&'a SendSlots),
}

impl<'a> Shared<'a> {
    fn share(&self) -> Shared<'a> {
        match self {
            Shared::Own(own) => Shared::Own(Arc::clone(own)),
            Shared::Lent(slots) => Shared::Lent(slots),
        }
    }
}

fn failures<'s>(shared: &'s Shared<'_>) -> std::sync::MutexGuard<'s, Failures> {
    let slots = match shared {
        Shared::Own(own) => &**own,
        Shared::Lent(slots) => &slots.0,
    };
    slots.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One send in progress: the transport's attempt, and the redirects polite
/// follows itself ([`RedirectPolicy`]) inside the same `abort_at`.
/// Resolves with the answer, or with the error's kind for the machines (the
/// error itself is kept for the call's [`Error`](crate::Error)).
pub struct Sending<'a, T: Transport> {
    transport: &'a T,
    state: State<T::Sending>,
    chain: Hops<'a>,
    abort_at: Instant,
    shared: Shared<'a>,
    item: usize,
}

enum State<F> {
    Flying(F),
    Failed(Option<TransportError>),
}

/// An attempt's redirects: none followed, or the chain, made at the first
/// redirect (most attempts get none, and making it copies the request).
enum Hops<'a> {
    Off,
    /// The chain is made from this request (the caller's, which outlives
    /// the call) at the first redirect.
    Later(&'a http::Request<Bytes>, RedirectPolicy),
    /// A long poll of the caller's request: as `Later`, with the wait
    /// parameter (name, seconds) put in its URL only at the first redirect.
    LaterPoll(&'a http::Request<Bytes>, RedirectPolicy, &'a str, u32),
    /// The chain is made at the first redirect from the item's request as
    /// the call keeps it (a streaming batch's).
    Kept(RedirectPolicy),
    Chain(Box<Chain>),
}

impl Hops<'_> {
    fn start<'b>(request: &http::Request<Bytes>, policy: RedirectPolicy) -> Hops<'b> {
        Chain::start(request, policy).map_or(Hops::Off, |c| Hops::Chain(Box::new(c)))
    }

    /// What follows `response` to item `item`'s attempt: `None` when it
    /// is the attempt's answer.
    fn next(
        &mut self,
        response: &http::Response<Bytes>,
        shared: &Shared<'_>,
        item: usize,
    ) -> Option<Next> {
        let later = matches!(self, Hops::Later(..) | Hops::LaterPoll(..) | Hops::Kept(_));
        if later && !response.status().is_redirection() {
            return None;
        }
        match *self {
            Hops::Later(request, policy) => *self = Hops::start(request, policy),
            Hops::LaterPoll(request, policy, name, secs) => {
                let mut sent = copy_request(request);
                *sent.uri_mut() = with_query_param(request.uri(), name, secs);
                *self = Hops::start(&sent, policy);
            }
            Hops::Kept(policy) => {
                *self = failures(shared)
                    .get(&item)
                    .and_then(|f| f.request.as_ref())
                    .map_or(Hops::Off, |request| Hops::start(request, policy));
            }
            Hops::Off | Hops::Chain(_) => {}
        }
        match self {
            Hops::Chain(chain) => Some(chain.next(response)),
            _ => None,
        }
    }
}

impl<T: Transport> std::fmt::Debug for Sending<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sending")
            .field("item", &self.item)
            .field("abort_at", &self.abort_at)
            .finish_non_exhaustive()
    }
}

impl<T: Transport> Sending<'_, T> {
    fn fail(&mut self, error: TransportError) -> Poll<Result<HttpAnswer, TransportErrorKind>> {
        let kind = error.kind();
        failures(&self.shared)
            .get_or_insert_with(self.item, PerItem::default)
            .failure
            .error = Some(error);
        Poll::Ready(Err(kind))
    }
}

impl<T> std::future::Future for Sending<'_, T>
where
    T: Transport,
    T::Sending: Unpin,
{
    type Output = Result<HttpAnswer, TransportErrorKind>;
    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            let flying = match &mut this.state {
                State::Failed(e) => {
                    let e = e
                        .take()
                        .unwrap_or_else(|| TransportError::new(TransportErrorKind::Other));
                    return this.fail(e);
                }
                State::Flying(f) => f,
            };
            let response = match std::pin::Pin::new(flying).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return this.fail(e),
                Poll::Ready(Ok(r)) => r,
            };
            match this.chain.next(&response, &this.shared, this.item) {
                Some(Next::Follow(next)) => {
                    this.state =
                        State::Flying(this.transport.send_supervised(*next, this.abort_at));
                }
                Some(Next::Fail(e)) => return this.fail(e),
                Some(Next::Done) | None => {
                    if let Some(f) = failures(&this.shared).get_mut(&this.item) {
                        f.failure.error = None; // an answer supersedes an earlier error
                    }
                    return Poll::Ready(Ok(HttpAnswer(response)));
                }
            }
        }
    }
}

impl<'a, T, K, C> Io for HttpIo<'a, T, K, C>
where
    T: Transport,
    T::Sending: Unpin,
    K: Clock,
    C: Cancel,
{
    type Answer = HttpAnswer;
    type Sending = Sending<'a, T>;

    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn wall_clock(&self) -> SystemTime {
        self.clock.wall()
    }

    fn keep(&mut self, answer: &mut HttpAnswer) {
        self.transport.keep(&mut answer.0);
    }

    fn send(&mut self, plan: &SendPlan) -> Self::Sending {
        if let Some(meter) = &self.meter {
            meter.sent(plan, || self.clock.now());
        }
        let item = plan.id.item as usize;
        let mut sending = Sending {
            transport: self.transport,
            state: State::Failed(Some(TransportError::new(
                TransportErrorKind::InvalidRequest,
            ))),
            chain: Hops::Off,
            abort_at: plan.abort_at,
            shared: self.shared.share(),
            item,
        };
        let mut items = failures(&self.shared);
        let entry = items.get_or_insert_with(item, PerItem::default);
        entry.failure.sends = entry.failure.sends.saturating_add(1);
        // No such item: a machine asked for a request that does not exist.
        let (template, lasting) = match &self.requests {
            Requests::Slice(r) => (r.get(item), r.get(item)),
            Requests::Pulled(_) => (entry.request.as_ref(), None),
        };
        let Some(template) = template else {
            return sending;
        };
        let pulled = matches!(self.requests, Requests::Pulled(_));
        if pulled && let Some(field) = not_in_a_batch(template) {
            sending.state = State::Failed(Some(
                TransportError::new(TransportErrorKind::InvalidRequest)
                    .with_source(NotInABatch(field)),
            ));
            return sending;
        }
        let mut request = copy_request(template);
        drop(items);
        if let Some(secs) = plan.long_poll {
            *request.uri_mut() = with_query_param(request.uri(), self.wait_param, secs);
        }
        sending.chain = match lasting {
            _ if self.redirects.max_hops == 0 => Hops::Off,
            // The caller's request: the chain is made from it at the first
            // redirect (a long poll's, with the wait parameter put back).
            Some(lasting) => match plan.long_poll {
                None => Hops::Later(lasting, self.redirects),
                Some(secs) => Hops::LaterPoll(lasting, self.redirects, self.wait_param, secs),
            },
            // A streaming batch's item (never a long poll): from the request
            // the call keeps, at the first redirect.
            None if pulled && plan.long_poll.is_none() => Hops::Kept(self.redirects),
            None => Hops::start(&request, self.redirects),
        };
        sending.state = State::Flying(self.transport.send_supervised(request, plan.abort_at));
        sending
    }

    fn poll_sleep(&mut self, cx: &mut Context<'_>, until: Instant) -> Poll<()> {
        self.clock.poll_sleep(cx, until)
    }

    fn poll_cancel(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.cancel.poll_cancelled(cx)
    }

    fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    fn generation(&self) -> Option<u64> {
        self.session.as_ref().map(Session::generation)
    }

    fn pull(&mut self) -> Pull {
        let Requests::Pulled(p) = &mut self.requests else {
            return Pull::Done;
        };
        if !p.gate.open(p.next) {
            return Pull::Later;
        }
        // A stream with nothing yet is polled again, with the drive's own
        // waker, by `poll_pull` while the drive waits.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let Poll::Ready(next) = p.source.poll_next(&mut cx) else {
            return Pull::Later;
        };
        let Some((request, slot)) = next else {
            return Pull::Done;
        };
        let item = p.next;
        p.next = p.next.saturating_add(1);
        let mut info =
            crate::client::request_info(p.first_id.wrapping_add(u64::from(item)), &request)
                .with_pace_slot(slot);
        if request
            .extensions()
            .get::<CallOptions>()
            .is_some_and(|o| o.one_shot_body)
        {
            info = info.with_one_shot_body();
        }
        failures(&self.shared).insert(
            item as usize,
            PerItem {
                failure: Failure::default(),
                request: Some(request),
            },
        );
        Pull::Item(info)
    }

    fn caller_behind(&self) -> bool {
        matches!(&self.requests, Requests::Pulled(p) if p.gate.behind())
    }

    fn poll_pull(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        // Polled while the drive waits after a `Later`: the gate opens when
        // the caller takes results (it polls the drive again then), a
        // stream source when it has the next request (it wakes `cx`).
        match &mut self.requests {
            Requests::Pulled(p) if p.gate.open(p.next) => p.source.poll_ready(cx),
            _ => Poll::Pending,
        }
    }

    fn ended(
        &mut self,
        item: u32,
        outcome: Outcome,
        answer: Option<HttpAnswer>,
    ) -> Option<HttpAnswer> {
        let Requests::Pulled(p) = &mut self.requests else {
            return answer;
        };
        if let Some(meter) = &self.meter {
            meter.ended(item, &outcome, || self.clock.now());
        }
        let kept = failures(&self.shared)
            .remove(&(item as usize))
            .unwrap_or_default();
        (p.sink)(item, outcome, answer, kept.failure);
        None
    }
}
