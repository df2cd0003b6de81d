//! [`Runtime`]: what an adapter supplies so that [`Client`](crate::Client)
//! runs on its runtime — a clock, a cancel token, and whether a call is a
//! future or blocks.

use bytes::Bytes;
use std::future::Future;

use crate::error::TransportError;
use crate::transport::{Cancel, Clock};

/// A runtime for [`Client`](crate::Client): one type per adapter
/// (`polite_tokio::Tokio`, `polite_async_io::AsyncIo`,
/// `polite_blocking::Threads`), holding no state.
///
/// * [`Clock`](Runtime::Clock): the timer every call sleeps on (one per
///   call, from [`clock`](Runtime::clock)); it also gives the wall clock
///   that turns an HTTP-date `Retry-After` into a delay.
/// * [`Token`](Runtime::Token): what the user holds to cancel, passed by
///   reference to the `*_cancellable` calls; [`watch`](Runtime::watch)
///   turns it into the [`Cancel`] signal a call polls.
/// * [`Call`](Runtime::Call): what a call returns. On an async runtime the
///   future itself (`type Call<F> = F`, the caller `.await`s it); for
///   threads its output (`type Call<F> = F::Output`: [`call`](Runtime::call)
///   blocks the calling thread until the future is done). So every adapter
///   has the same methods with the same names and parameters.
/// * [`Ready`](Runtime::Ready): the transport `Client::new()` builds (the
///   adapter's default HTTP client), or `()` when the adapter is built
///   without one.
///
/// A runtime of your own (for a test, or another executor):
///
/// ```
/// use bytes::Bytes;
/// use polite_client::{CancelToken, Client, Clock, Config, Runtime, Transport, TransportError};
/// use std::future::{Future, Ready, ready};
/// use std::task::{Context, Poll, Waker};
/// use std::time::Instant;
///
/// /// Time that never passes: fine for a transport that never fails.
/// struct Frozen(Instant);
/// impl Clock for Frozen {
///     fn now(&self) -> Instant { self.0 }
///     fn poll_sleep(&mut self, _: &mut Context<'_>, _: Instant) -> Poll<()> { Poll::Ready(()) }
/// }
/// /// Polls a future that never waits (every part here answers at once).
/// fn run<F: Future>(call: F) -> F::Output {
///     let mut call = std::pin::pin!(call);
///     match call.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
///         Poll::Ready(out) => out,
///         Poll::Pending => unreachable!("nothing here waits"),
///     }
/// }
/// /// Calls block (here: on `run`).
/// struct Tiny;
/// impl Runtime for Tiny {
///     type Clock = Frozen;
///     type Token = CancelToken;
///     type Cancel = CancelToken;
///     type Call<F: Future> = F::Output;
///     type Ready = ();
///     fn clock() -> Frozen { Frozen(Instant::now()) }
///     fn watch(token: &CancelToken) -> CancelToken { token.clone() }
///     fn cancel(token: &CancelToken) { token.cancel() }
///     fn call<F: Future>(call: F) -> F::Output { run(call) }
///     fn settle<F: Future>(output: F::Output) -> impl Future<Output = F::Output> { ready(output) }
/// }
/// /// Answers 200 "hi".
/// struct Hi;
/// impl Transport for Hi {
///     type Sending = Ready<Result<http::Response<Bytes>, TransportError>>;
///     fn send(&self, _: http::Request<Bytes>, _: Instant) -> Self::Sending {
///         ready(Ok(http::Response::new(Bytes::from_static(b"hi"))))
///     }
/// }
///
/// let client: Client<Tiny, Hi> = Client::with_transport(Hi, Config::default())?;
/// let req = http::Request::get("http://127.0.0.1/").body(Bytes::new()).unwrap();
/// let resp = client.send(req)?; // Tiny's calls block: no .await
/// assert_eq!(resp.body().as_ref(), b"hi");
/// # Ok::<(), polite_client::Error>(())
/// ```
pub trait Runtime: 'static {
    /// The clock and timer of one call.
    type Clock: Clock;
    /// The cancel token users hold (clone it, cancel it from anywhere).
    type Token: Clone + Default + Send + Sync + std::fmt::Debug + 'static;
    /// What a call polls to learn that its token was cancelled.
    type Cancel: Cancel;
    /// What a call returns: `F` on an async runtime, `F::Output` where
    /// calls block.
    type Call<F: Future>;
    /// The transport `Client::new()` builds; `()` for none.
    type Ready;

    /// A clock for one call.
    fn clock() -> Self::Clock;
    /// The signal a call polls for `token`.
    fn watch(token: &Self::Token) -> Self::Cancel;
    /// Cancels `token` (and every clone of it), waking what waits on it.
    fn cancel(token: &Self::Token);
    /// Turns a call's future into what the call returns.
    fn call<F: Future>(call: F) -> Self::Call<F>;
    /// Like [`call`](Runtime::call), for a call that cannot be cancelled
    /// and keeps at most one attempt of its transport in flight at a time
    /// (`send` and `wait`, not their `*_cancellable` forms, not `batch`):
    /// where calls block, the runtime may let such an attempt run on the
    /// calling thread. The default is [`call`](Runtime::call).
    ///
    /// ```
    /// use polite_client::{CancelToken, Clock, Runtime};
    /// use std::future::{Future, ready};
    /// use std::task::{Context, Poll, Waker};
    /// # struct Frozen;
    /// # impl Clock for Frozen {
    /// #     fn now(&self) -> std::time::Instant { std::time::Instant::now() }
    /// #     fn poll_sleep(&mut self, _: &mut Context<'_>, _: std::time::Instant) -> Poll<()> { Poll::Ready(()) }
    /// # }
    /// /// Calls block on a poll that never waits; `call_sequential` is not
    /// /// overridden, so it is `call`.
    /// struct Tiny;
    /// impl Runtime for Tiny {
    ///     type Clock = Frozen;
    ///     type Token = CancelToken;
    ///     type Cancel = CancelToken;
    ///     type Call<F: Future> = F::Output;
    ///     type Ready = ();
    ///     fn clock() -> Frozen { Frozen }
    ///     fn watch(token: &CancelToken) -> CancelToken { token.clone() }
    ///     fn cancel(token: &CancelToken) { token.cancel() }
    ///     fn call<F: Future>(call: F) -> F::Output {
    ///         match std::pin::pin!(call).poll(&mut Context::from_waker(Waker::noop())) {
    ///             Poll::Ready(out) => out,
    ///             Poll::Pending => unreachable!("nothing here waits"),
    ///         }
    ///     }
    ///     fn settle<F: Future>(output: F::Output) -> impl Future<Output = F::Output> { ready(output) }
    /// }
    /// assert_eq!(Tiny::call_sequential(ready(7)), 7);
    /// ```
    fn call_sequential<F: Future>(call: F) -> Self::Call<F> {
        Self::call(call)
    }
    /// Like [`call`](Runtime::call), for a batch's call whose future may be
    /// polled from other threads (`Send`) and keeps at most `concurrency`
    /// attempts in flight
    /// ([`BatchStream::for_each_result`](crate::BatchStream::for_each_result)):
    /// where calls block, the runtime may let the threads that run the
    /// attempts poll the future too, so that the thread that ends an
    /// attempt starts the next one without a hand-off (polite-blocking's
    /// crew). The default is [`call`](Runtime::call).
    ///
    /// ```
    /// # use polite_client::{CancelToken, Clock, Runtime};
    /// # use std::future::{Future, ready};
    /// # use std::task::{Context, Poll, Waker};
    /// # struct Frozen;
    /// # impl Clock for Frozen {
    /// #     fn now(&self) -> std::time::Instant { std::time::Instant::now() }
    /// #     fn poll_sleep(&mut self, _: &mut Context<'_>, _: std::time::Instant) -> Poll<()> { Poll::Ready(()) }
    /// # }
    /// # struct Tiny;
    /// # impl Runtime for Tiny {
    /// #     type Clock = Frozen;
    /// #     type Token = CancelToken;
    /// #     type Cancel = CancelToken;
    /// #     type Call<F: Future> = F::Output;
    /// #     type Ready = ();
    /// #     fn clock() -> Frozen { Frozen }
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
    /// // A runtime that does not override it (Tiny, as above): `call`.
    /// assert_eq!(Tiny::call_crew(ready(7), 4), 7);
    /// ```
    fn call_crew<F>(call: F, concurrency: usize) -> Self::Call<F>
    where
        F: Future + Send,
        F::Output: Send,
    {
        let _ = concurrency;
        Self::call(call)
    }
    /// The other way round, for code written once for every runtime (the
    /// lab's conformance suite): a future of what [`call`](Runtime::call)
    /// returned. Where calls block, the call has already run and this is
    /// ready at once.
    fn settle<F: Future>(call: Self::Call<F>) -> impl Future<Output = F::Output>;
}

/// A boxed attempt, so that one type can name any transport's attempt
/// future (the `Sending` of the adapters' own transports).
///
/// ```
/// use bytes::Bytes;
/// use polite_client::{BoxSending, Transport};
/// use std::time::Instant;
///
/// /// Answers 204 to everything.
/// struct NoContent;
/// impl Transport for NoContent {
///     type Sending = BoxSending;
///     fn send(&self, _: http::Request<Bytes>, _abort_at: Instant) -> BoxSending {
///         Box::pin(async {
///             let mut r = http::Response::new(Bytes::new());
///             *r.status_mut() = http::StatusCode::NO_CONTENT;
///             Ok(r)
///         })
///     }
/// }
///
/// let mut sending = NoContent.send(http::Request::new(Bytes::new()), Instant::now());
/// let polled = sending.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
/// assert!(matches!(polled, std::task::Poll::Ready(Ok(r)) if r.status() == 204));
/// ```
pub type BoxSending = std::pin::Pin<
    Box<dyn Future<Output = Result<http::Response<Bytes>, TransportError>> + Send + 'static>,
>;

/// The body limit the adapters' own transports apply by default: 16 MiB.
/// A larger body fails the attempt with a permanent `BodyTooLarge` (sent
/// once, never retried).
///
/// ```
/// assert_eq!(polite_client::DEFAULT_MAX_BODY, 16 * 1024 * 1024);
/// ```
pub const DEFAULT_MAX_BODY: usize = 16 << 20;

/// The future `make` gives, written into a box allocated before it is
/// made: `Box::pin(make())` builds a large future on the stack and copies
/// it into the box (a `memcpy` of its whole size per call). For the call
/// futures of adapters and integrations.
///
/// ```
/// use std::future::Future;
/// let boxed = polite_client::in_box(|| async { 7 });
/// let polled = std::pin::pin!(boxed).poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
/// assert_eq!(polled, std::task::Poll::Ready(7));
/// ```
#[inline(always)]
pub fn in_box<F>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}
