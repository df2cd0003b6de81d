//! The three things an adapter supplies: a [`Transport`] (its HTTP client), a
//! [`Clock`] (its timer), and a [`Cancel`] signal. [`CancelToken`] is a
//! runtime-neutral cancel signal any adapter can use.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
#[cfg(doc)]
use polite_core::TransportErrorKind;

use crate::error::TransportError;

/// An HTTP client that performs one attempt.
///
/// Contract: the future resolves by `abort_at` at the latest — a transport
/// that cannot interrupt an attempt must at least set its timeouts so that it
/// gives up by then — with [`TransportErrorKind::Aborted`] if it had to abort.
/// The body is read whole (adapters cap its size: a larger body fails with
/// [`TransportError::body_too_large`]). A transport follows no redirect of
/// its own: it hands back the 3xx, and polite follows it by the client's
/// [`RedirectPolicy`](crate::RedirectPolicy). An error keeps the client's
/// own error as its `source()` ([`TransportError::with_source`]); a
/// [`TransportErrorKind`] converts into a `TransportError` with `into()`.
///
/// A transport of your own that sends through a stack which itself holds a
/// polite layer or middleware (a tower service under `PoliteLayer`, a
/// reqwest-middleware client with `PoliteMiddleware`) must put
/// [`PoliteAttempt`](crate::PoliteAttempt) in the extensions of each
/// request it sends: that layer then passes the attempt through instead
/// of retrying it with budgets of its own (SPEC §2: a layer inside another
/// does not multiply its budgets). polite's own transports do not (their
/// clients have no polite layer inside), and nothing marks a request for
/// you: marking costs an allocation per attempt.
///
/// ```
/// use bytes::Bytes;
/// use polite_client::{Transport, TransportError};
/// use std::future::{Ready, ready};
/// use std::time::Instant;
///
/// /// Answers 204 to everything.
/// struct NoContent;
/// impl Transport for NoContent {
///     type Sending = Ready<Result<http::Response<Bytes>, TransportError>>;
///     fn send(&self, _: http::Request<Bytes>, _: Instant) -> Self::Sending {
///         let mut r = http::Response::new(Bytes::new());
///         *r.status_mut() = http::StatusCode::NO_CONTENT;
///         ready(Ok(r))
///     }
/// }
///
/// let sending = NoContent.send(http::Request::new(Bytes::new()), Instant::now());
/// let answer = sending.into_inner().unwrap();
/// assert_eq!(answer.status(), 204);
/// ```
pub trait Transport {
    /// One attempt in progress.
    type Sending: Future<Output = Result<http::Response<Bytes>, TransportError>>;
    /// Starts an attempt that must be over by `abort_at`.
    fn send(&self, request: http::Request<Bytes>, abort_at: Instant) -> Self::Sending;
    /// Starts an attempt for polite's drive loop, which drops the future
    /// at `abort_at` if it has not ended by then (and reports
    /// [`TransportErrorKind::Aborted`] itself): a transport may leave out
    /// its own timer for `abort_at` here, one timer fewer per attempt. By
    /// default, [`send`](Transport::send).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_client::{NoTransport, Transport};
    /// use std::time::Instant;
    /// let sent = NoTransport.send_supervised(http::Request::new(Bytes::new()), Instant::now());
    /// assert!(sent.into_inner().is_err()); // the same as `send`
    /// ```
    fn send_supervised(&self, request: http::Request<Bytes>, abort_at: Instant) -> Self::Sending {
        self.send(request, abort_at)
    }

    /// `answer`, which this transport sent back, stays with polite while
    /// another attempt starts (a long poll's answer during the next poll, a
    /// retried answer during the retry), to be handed back when its call or
    /// item ends. A transport whose answers borrow memory that a later read
    /// would otherwise reuse (hyper's read buffer, under reqwest) copies
    /// them out here, so that a kept answer does not make the connection
    /// allocate another buffer. The answer a call hands back at once never
    /// comes here. Nothing by default.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_client::{NoTransport, Transport};
    /// let mut answer = http::Response::new(Bytes::from_static(b"kept"));
    /// NoTransport.keep(&mut answer);
    /// assert_eq!(answer.body(), "kept");
    /// ```
    fn keep(&self, answer: &mut http::Response<Bytes>) {
        let _ = answer;
    }
}

/// The transport of a client that is only ever called through
/// [`Client::send_via`](crate::Client::send_via): the reqwest-middleware
/// and tower integrations, which are handed the next layer per call. It has
/// no HTTP client of its own: an attempt sent through it fails at once with
/// a permanent [`TransportErrorKind::InvalidRequest`].
///
/// ```
/// use polite_client::{NoTransport, Transport};
/// use polite_core::TransportErrorKind;
/// let sent = NoTransport.send(http::Request::new(bytes::Bytes::new()), std::time::Instant::now());
/// assert_eq!(sent.into_inner().unwrap_err().kind(), TransportErrorKind::InvalidRequest);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTransport;

impl Transport for NoTransport {
    type Sending = std::future::Ready<Result<http::Response<Bytes>, TransportError>>;
    fn send(&self, _: http::Request<Bytes>, _: Instant) -> Self::Sending {
        std::future::ready(Err(TransportError::new(
            polite_core::TransportErrorKind::InvalidRequest,
        )))
    }
}

/// A monotonic clock with a timer, and the wall clock that goes with it.
pub trait Clock {
    /// The monotonic time now.
    fn now(&self) -> Instant;
    /// The wall clock now, only to turn an HTTP-date (`Retry-After` without
    /// a `Date` to measure from) into a delay; the drive loop asks for it
    /// only for an answer that carries such a header (or an
    /// `X-RateLimit-Reset`). Default `SystemTime::now()`;
    /// a clock whose time can be paused or run ahead (tokio's test clock)
    /// moves its wall clock with it, so that such a test controls HTTP-dates
    /// too.
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
    /// Ready once `now() >= until`; otherwise arranges a wake-up at `until`.
    fn poll_sleep(&mut self, cx: &mut Context<'_>, until: Instant) -> Poll<()>;
}

/// A cancellation signal.
pub trait Cancel {
    /// Ready once cancelled (and from then on); wakes the task at once when
    /// the caller cancels.
    fn poll_cancelled(&mut self, cx: &mut Context<'_>) -> Poll<()>;
    /// Whether the caller has cancelled.
    fn is_cancelled(&self) -> bool;
}

/// Never cancelled.
#[derive(Clone, Copy, Debug, Default)]
pub struct NeverCancel;

impl Cancel for NeverCancel {
    fn poll_cancelled(&mut self, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
    fn is_cancelled(&self) -> bool {
        false
    }
}

/// The most wakers a token keeps before it flushes them (see `poll_cancelled`).
const MAX_WAKERS: usize = 32;

#[derive(Debug, Default)]
struct Shared {
    cancelled: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

/// A runtime-neutral cancellation token: clone it, hand a clone to the work,
/// call [`cancel`](CancelToken::cancel) from anywhere (another thread, a
/// signal handler thread); every pending wait on it wakes at once.
///
/// ```
/// use polite_client::{Cancel, CancelToken};
/// let token = CancelToken::new();
/// let for_work = token.clone();
/// assert!(!for_work.is_cancelled());
/// token.cancel();
/// assert!(for_work.is_cancelled());
/// ```
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<Shared>);

impl CancelToken {
    /// A token that is not cancelled.
    #[must_use]
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels, waking every task waiting on this token or a clone of it.
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::SeqCst);
        let wakers =
            std::mem::take(&mut *self.0.wakers.lock().unwrap_or_else(PoisonError::into_inner));
        for w in wakers {
            w.wake();
        }
    }
}

impl Cancel for CancelToken {
    fn poll_cancelled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_cancelled() {
            return Poll::Ready(());
        }
        {
            let mut wakers = self.0.wakers.lock().unwrap_or_else(PoisonError::into_inner);
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                // A token reused across many calls would keep every finished
                // call's waker. Past a few, wake them all and start over:
                // a spurious wake is harmless (a task still waiting polls
                // again and re-registers), and the list stays bounded.
                if wakers.len() >= MAX_WAKERS {
                    for w in wakers.drain(..) {
                        w.wake();
                    }
                }
                wakers.push(cx.waker().clone());
            }
        }
        // A cancel between the first check and the registration must not be lost.
        if self.is_cancelled() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
    fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::SeqCst)
    }
}

impl<C: Cancel + ?Sized> Cancel for &mut C {
    fn poll_cancelled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        (**self).poll_cancelled(cx)
    }
    fn is_cancelled(&self) -> bool {
        (**self).is_cancelled()
    }
}

/// Whether `uri`'s authority names a port that is no port: digits past
/// 65535 (`http://h:99999/`) or anything but digits (`http://h:8a/`,
/// `http://h:-1/`). `http::Uri` accepts such an authority and its
/// `port_u16` says `None`, which read as "no port, the scheme's default"
/// would send the request to port 80 (or 443). A transport that works out
/// the port itself refuses such a URL as a permanent
/// [`InvalidRequest`](polite_core::TransportErrorKind::InvalidRequest). An
/// empty port (`http://h:/`) is the scheme's default (RFC 3986).
///
/// ```
/// use polite_client::names_no_port;
/// let uri = |s: &str| s.parse::<http::Uri>().unwrap();
/// assert!(names_no_port(&uri("http://127.0.0.1:99999/x")));
/// assert!(names_no_port(&uri("http://[::1]:8a/")));
/// assert!(!names_no_port(&uri("http://user:pw@h:8080/")));
/// assert!(!names_no_port(&uri("http://[::1]/")));
/// assert!(!names_no_port(&uri("https://h:/")));
/// ```
#[must_use]
pub fn names_no_port(uri: &http::Uri) -> bool {
    let Some(authority) = uri.authority() else {
        return false;
    };
    let s = authority.as_str();
    // The host starts after any user info; an IPv6 literal's colons are
    // inside its brackets.
    let host = s.rfind('@').map_or(0, |at| at + 1);
    let start = s[host..].rfind(']').map_or(host, |end| host + end + 1);
    match s[start..].rfind(':') {
        None => false,
        Some(colon) => {
            let port = &s[start + colon + 1..];
            !port.is_empty()
                && (!port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err())
        }
    }
}
