//! [`HttpIo`]: the drive loop's `Io`, assembled from an adapter's
//! [`Transport`], [`Clock`] and [`Cancel`].

use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use polite_core::drive::Io;
use polite_core::{SendPlan, TransportErrorKind};

use crate::answer::HttpAnswer;
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
        }
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

/// A send that has no request to send (a machine asked for an item that does
/// not exist): fails at once.
#[derive(Debug)]
pub enum Sending<F> {
    /// The transport's attempt.
    Real(F),
    /// No such item.
    Missing,
}

impl<F> std::future::Future for Sending<F>
where
    F: std::future::Future<Output = Result<http::Response<Bytes>, TransportErrorKind>> + Unpin,
{
    type Output = Result<HttpAnswer, TransportErrorKind>;
    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Sending::Real(f) => std::pin::Pin::new(f).poll(cx).map(|r| r.map(HttpAnswer)),
            Sending::Missing => Poll::Ready(Err(TransportErrorKind::Other)),
        }
    }
}

impl<T, K, C> Io for HttpIo<'_, T, K, C>
where
    T: Transport,
    T::Sending: Unpin,
    K: Clock,
    C: Cancel,
{
    type Answer = HttpAnswer;
    type Sending = Sending<T::Sending>;

    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn wall_clock(&self) -> SystemTime {
        SystemTime::now()
    }

    fn send(&mut self, plan: &SendPlan) -> Self::Sending {
        let Some(template) = self.requests.get(plan.id.item as usize) else {
            return Sending::Missing;
        };
        let mut request = copy_request(template);
        if let Some(secs) = plan.long_poll {
            *request.uri_mut() = with_query_param(request.uri(), self.wait_param, secs);
        }
        Sending::Real(self.transport.send(request, plan.abort_at))
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
