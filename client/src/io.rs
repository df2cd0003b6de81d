//! [`HttpIo`]: the drive loop's `Io`, assembled from an adapter's
//! [`Transport`], [`Clock`] and [`Cancel`].

use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use polite_core::drive::Io;
use polite_core::{SendPlan, TransportErrorKind};

use crate::answer::HttpAnswer;
use crate::error::TransportError;
use crate::redirect::{Chain, Next, RedirectPolicy};
use crate::transport::{Cancel, Clock, Transport};

/// One call's `Io`: the requests it may send (indexed by `SendId::item`),
/// the name of the long-poll parameter, and the adapter's parts.
#[derive(Debug)]
pub struct HttpIo<'a, T, K, C> {
    transport: &'a T,
    clock: K,
    cancel: C,
    requests: &'a [http::Request<Bytes>],
    wait_param: &'a str,
    redirects: RedirectPolicy,
    shared: Shared,
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
        HttpIo {
            transport,
            clock,
            cancel,
            requests,
            wait_param,
            redirects: RedirectPolicy::NONE,
            shared: Shared::default(),
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

    /// How many sends item `item` has had so far.
    #[must_use]
    pub fn sends(&self, item: usize) -> u32 {
        failures(&self.shared).sends.get(item).copied().unwrap_or(0)
    }

    /// Takes the transport error of item `item`'s latest send, when that
    /// send got no answer.
    pub fn take_error(&self, item: usize) -> Option<TransportError> {
        failures(&self.shared)
            .errors
            .get_mut(item)
            .and_then(Option::take)
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

/// `uri` with `name=value` appended to its query.
///
/// ```
/// let u: http::Uri = "http://127.0.0.1:8/runs/1?x=1".parse().unwrap();
/// assert_eq!(polite_client::with_query_param(&u, "waitSeconds", 25).to_string(),
///            "http://127.0.0.1:8/runs/1?x=1&waitSeconds=25");
/// let u: http::Uri = "http://127.0.0.1:8/runs/1".parse().unwrap();
/// assert_eq!(polite_client::with_query_param(&u, "waitSeconds", 7).to_string(),
///            "http://127.0.0.1:8/runs/1?waitSeconds=7");
/// ```
#[must_use]
pub fn with_query_param(uri: &http::Uri, name: &str, value: u32) -> http::Uri {
    let mut parts = uri.clone().into_parts();
    let (path, query) = match &parts.path_and_query {
        Some(pq) => (pq.path(), pq.query()),
        None => ("/", None),
    };
    let joined = match query {
        Some(q) if !q.is_empty() => format!("{path}?{q}&{name}={value}"),
        _ => format!("{path}?{name}={value}"),
    };
    match http::uri::PathAndQuery::try_from(joined) {
        Ok(pq) => {
            parts.path_and_query = Some(pq);
            http::Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
        }
        // Unreachable for a valid name (checked at client construction).
        Err(_) => uri.clone(),
    }
}

/// A fresh copy of a request (bodies are `Bytes`: cheap to clone).
#[must_use]
pub fn copy_request(r: &http::Request<Bytes>) -> http::Request<Bytes> {
    let mut out = http::Request::new(r.body().clone());
    *out.method_mut() = r.method().clone();
    *out.uri_mut() = r.uri().clone();
    *out.version_mut() = r.version();
    *out.headers_mut() = r.headers().clone();
    out
}

/// What one call's sends left behind, per item: how many sends, and the
/// transport error of the item's latest send when it got no answer.
#[derive(Debug, Default)]
pub(crate) struct Failures {
    pub(crate) sends: Vec<u32>,
    pub(crate) errors: Vec<Option<TransportError>>,
}

type Shared = Arc<Mutex<Failures>>;

fn failures(shared: &Shared) -> std::sync::MutexGuard<'_, Failures> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One send in progress: the transport's attempt, and the redirects polite
/// follows itself ([`RedirectPolicy`]) inside the same `abort_at`.
/// Resolves with the answer, or with the error's kind for the machines (the
/// error itself is kept for the call's [`Error`](crate::Error)).
pub struct Sending<'a, T: Transport> {
    transport: &'a T,
    state: State<T::Sending>,
    chain: Option<Chain>,
    abort_at: Instant,
    shared: Shared,
    item: usize,
}

enum State<F> {
    Flying(F),
    Failed(Option<TransportError>),
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
        let mut f = failures(&self.shared);
        if f.errors.len() <= self.item {
            f.errors.resize_with(self.item + 1, || None);
        }
        f.errors[self.item] = Some(error);
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
            match this.chain.as_mut().map(|c| c.next(&response)) {
                Some(Next::Follow(next)) => {
                    this.state = State::Flying(this.transport.send(*next, this.abort_at));
                }
                Some(Next::Fail(e)) => return this.fail(e),
                Some(Next::Done) | None => {
                    let mut f = failures(&this.shared);
                    if let Some(slot) = f.errors.get_mut(this.item) {
                        *slot = None; // an answer supersedes an earlier error
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

    fn send(&mut self, plan: &SendPlan) -> Self::Sending {
        let item = plan.id.item as usize;
        {
            let mut f = failures(&self.shared);
            if f.sends.len() <= item {
                f.sends.resize(item + 1, 0);
            }
            f.sends[item] = f.sends[item].saturating_add(1);
        }
        let mut sending = Sending {
            transport: self.transport,
            state: State::Failed(Some(TransportError::new(
                TransportErrorKind::InvalidRequest,
            ))),
            chain: None,
            abort_at: plan.abort_at,
            shared: Arc::clone(&self.shared),
            item,
        };
        // No such item: a machine asked for a request that does not exist.
        let Some(template) = self.requests.get(item) else {
            return sending;
        };
        let mut request = copy_request(template);
        if let Some(secs) = plan.long_poll {
            *request.uri_mut() = with_query_param(request.uri(), self.wait_param, secs);
        }
        sending.chain = Chain::start(&request, self.redirects);
        sending.state = State::Flying(self.transport.send(request, plan.abort_at));
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
}
