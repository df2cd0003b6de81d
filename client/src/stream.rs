//! [`BatchStream`]: a batch whose results come out as its items end, with
//! its requests pulled as capacity frees — memory bounded by the batch's
//! window, not by its size (SPEC §4.4).

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use polite_core::Outcome;

use crate::answer::HttpAnswer;
use crate::client::Ended;
use crate::error::{Error, Limits};
use crate::io::Failure;
use crate::runtime::Runtime;
use crate::transport::Clock;

/// In which order a [`BatchStream`] hands its results out.
///
/// ```
/// use polite_client::BatchOrder;
/// assert_eq!(BatchOrder::default(), BatchOrder::Input);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum BatchOrder {
    /// In input order. An item is started only while fewer than
    /// [`window`](BatchOrder::window) items lie between it and the oldest
    /// item not yet ended, so fewer than that many results wait for an
    /// earlier one, and none while `concurrency` results wait for the
    /// caller. Besides the results the caller holds, at most
    /// `window + 2 × concurrency − 1` answer bodies are kept at once (the
    /// results not handed out, and the attempts in flight: a retried
    /// item's kept answer and its new attempt's): memory is bounded by
    /// that many × body size. The default.
    #[default]
    Input,
    /// As the items end: no result waits for an earlier one; memory is
    /// bounded by the items in progress (the batch machine keeps the state
    /// of the items not yet ended only, at most `window` of them, SPEC
    /// §4.4). An item that hangs holds its own concurrency slot until it
    /// ends (by its answer or the deadline), not the items after it: new
    /// items go on being pulled and sent while other slots are free
    /// (unlike input order, whose reorder window waits for it).
    Completion,
}

impl BatchOrder {
    /// The reorder window of input order at concurrency `c`: `4 × c` items.
    ///
    /// ```
    /// assert_eq!(polite_client::BatchOrder::window(4), 16);
    /// ```
    #[must_use]
    pub const fn window(concurrency: u32) -> u32 {
        concurrency.saturating_mul(4)
    }
}

/// One result of a [`BatchStream`]: the item's index in the input, and its
/// answer or error.
pub type Item = (usize, Result<http::Response<Bytes>, Error>);

/// What the drive hands out and the consumer takes.
#[derive(Debug, Default)]
pub(crate) struct Out {
    /// Completion order: the results not yet taken, as their items ended.
    done: VecDeque<Item>,
    /// Input order: from item `next` on, each item's result once it has
    /// ended (`None` until then); the first `ready` of them are handed out
    /// next. A ring, never longer than the window plus the results the
    /// caller has not taken: no allocation per item once it has grown.
    window: VecDeque<Option<Result<http::Response<Bytes>, Error>>>,
    ready: usize,
    ordered: bool,
    /// Input order: the index of the front of `window`.
    next: u32,
    /// The batch's own end (why items still in progress ended).
    end: Option<Outcome>,
}

impl Out {
    /// The next result to hand out, if there is one.
    fn pop(&mut self) -> Option<Item> {
        if !self.ordered {
            return self.done.pop_front();
        }
        if self.ready == 0 {
            return None;
        }
        let result = self.window.pop_front().flatten()?;
        self.ready -= 1;
        let item = self.next;
        self.next = self.next.saturating_add(1);
        Some((item as usize, result))
    }

    fn has_ready(&self) -> bool {
        if self.ordered {
            self.ready > 0
        } else {
            !self.done.is_empty()
        }
    }
}

/// The results of a streaming batch, as its items end (see
/// [`Client::batch_stream`](crate::Client::batch_stream)).
///
/// [`next_result`](Self::next_result) is the same method on every runtime: a future to
/// `.await` on tokio and async-io, a blocking call on threads. On async
/// runtimes the type is also a [`futures_core::Stream`].
///
/// Items never pulled from the input (the batch was cancelled, timed out or
/// starved first) are not reported: [`end`](Self::end) says why the batch
/// ended. Dropping the stream cancels the batch.
pub struct BatchStream<R, F> {
    out: Arc<Mutex<Out>>,
    gate: Arc<Gate>,
    drive: Option<Pin<Box<F>>>,
    runtime: PhantomData<fn() -> R>,
}

impl<R, F> std::fmt::Debug for BatchStream<R, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchStream")
            .field("out", &self.out)
            .field("running", &self.drive.is_some())
            .finish()
    }
}

fn lock(out: &Mutex<Out>) -> std::sync::MutexGuard<'_, Out> {
    out.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The shared output of a stream and the sink its drive writes to.
pub(crate) fn channel(order: BatchOrder, concurrency: u32) -> (Arc<Mutex<Out>>, Arc<Gate>, Sink) {
    let ordered = order == BatchOrder::Input;
    let limit = concurrency.max(1) as usize;
    let out = Arc::new(Mutex::new(Out {
        ordered,
        // Room for the window and the results the caller may leave.
        window: if ordered {
            VecDeque::with_capacity(BatchOrder::window(concurrency) as usize + limit)
        } else {
            VecDeque::new()
        },
        ..Out::default()
    }));
    let gate = Arc::new(Gate {
        taken: AtomicU32::new(0),
        unconsumed: AtomicUsize::new(0),
        window: (order == BatchOrder::Input).then(|| BatchOrder::window(concurrency)),
        limit,
    });
    let sink = Sink {
        out: Arc::clone(&out),
        gate: Arc::clone(&gate),
    };
    (out, gate, sink)
}

/// Records why the batch ended (the drive's last act).
pub(crate) fn set_end(out: &Mutex<Out>, outcome: Outcome) {
    lock(out).end = Some(outcome);
}

impl<R: Runtime, F: Future<Output = ()>> BatchStream<R, F> {
    /// A stream over `drive`, which writes to the sink of `out`.
    pub(crate) fn new(out: Arc<Mutex<Out>>, gate: Arc<Gate>, drive: F) -> Self {
        BatchStream {
            out,
            gate,
            drive: Some(Box::pin(drive)),
            runtime: PhantomData,
        }
    }

    /// The next result, as soon as an item ends; `None` once every item
    /// pulled has been handed out.
    pub fn next_result(&mut self) -> R::Call<impl Future<Output = Option<Item>> + '_> {
        R::call(poll_fn(move |cx| self.poll_item(cx)))
    }

    /// Hands every remaining result to `each` as its item ends (in the
    /// stream's order), until the batch is over: a loop over
    /// [`next_result`](Self::next_result), as one call. `each` runs on
    /// whichever thread polls the batch.
    ///
    /// On threads (polite-blocking) this is the fastest form of a batch:
    /// the threads that run the attempts drive the batch themselves, so the
    /// thread that ends an attempt takes its answer and starts the next
    /// attempt without waking another (`Runtime::call_crew`; a loop over
    /// `next_result` hands every attempt from the calling thread to a
    /// worker and back). Elsewhere it is that loop.
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
    /// use polite_client::BatchOrder;
    /// // Tiny's calls block (see `Runtime`); Hi answers 200 "hi" at once.
    /// let client: Client<Tiny, Hi> = Client::with_transport(Hi, Config::default())?;
    /// let requests = (0..3).map(|i| {
    ///     http::Request::get(format!("http://127.0.0.1/items/{i}")).body(Bytes::new()).unwrap()
    /// });
    /// let mut seen = Vec::new();
    /// client
    ///     .batch_stream(requests, BatchOrder::Input)?
    ///     .for_each_result(|(i, r)| seen.push((i, r.map(|r| r.status().as_u16()).ok())));
    /// assert_eq!(seen, [(0, Some(200)), (1, Some(200)), (2, Some(200))]);
    /// # Ok::<(), polite_client::Error>(())
    /// ```
    pub fn for_each_result<'s, G>(
        &'s mut self,
        mut each: G,
    ) -> R::Call<impl Future<Output = ()> + 's>
    where
        F: Send,
        G: FnMut(Item) + Send + 's,
    {
        let concurrency = self.gate.limit;
        R::call_crew(
            poll_fn(move |cx| {
                loop {
                    match self.poll_item(cx) {
                        Poll::Ready(Some(item)) => each(item),
                        Poll::Ready(None) => return Poll::Ready(()),
                        Poll::Pending => return Poll::Pending,
                    }
                }
            }),
            concurrency,
        )
    }

    /// Why the batch ended, once it has (`None` while it runs, and for a
    /// batch whose every item succeeded or ended on its own).
    #[must_use]
    pub fn end(&self) -> Option<Outcome> {
        lock(&self.out).end
    }

    pub(crate) fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        loop {
            if let Some(item) = lock(&self.out).pop() {
                self.gate.unconsumed.fetch_sub(1, Ordering::AcqRel);
                return Poll::Ready(Some(item));
            }
            let Some(drive) = self.drive.as_mut() else {
                return Poll::Ready(None);
            };
            match drive.as_mut().poll(cx) {
                Poll::Ready(()) => self.drive = None,
                Poll::Pending => {
                    if !lock(&self.out).has_ready() {
                        return Poll::Pending;
                    }
                }
            }
        }
    }
}

impl<R: Runtime, F: Future<Output = ()>> futures_core::Stream for BatchStream<R, F> {
    type Item = Item;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        self.get_mut().poll_item(cx)
    }
}

/// When the drive may pull another request: while the caller keeps up
/// (fewer than `limit` results wait for it) and, in input order, while the
/// item is within `window` of the oldest one not yet handed out.
#[derive(Debug)]
pub(crate) struct Gate {
    taken: AtomicU32,
    unconsumed: AtomicUsize,
    window: Option<u32>,
    limit: usize,
}

impl Gate {
    /// Whether results wait for the caller (more may not be pulled).
    pub(crate) fn behind(&self) -> bool {
        self.unconsumed.load(Ordering::Acquire) >= self.limit
    }

    /// Whether item `next` may be pulled now.
    pub(crate) fn open(&self, next: u32) -> bool {
        self.unconsumed.load(Ordering::Acquire) < self.limit
            && self
                .window
                .is_none_or(|w| next < self.taken.load(Ordering::Acquire).saturating_add(w))
    }
}

/// Where the drive's `Io` puts each ended item.
pub(crate) struct Sink {
    out: Arc<Mutex<Out>>,
    gate: Arc<Gate>,
}

impl Sink {
    /// The gate the `Io` pulls through.
    pub(crate) fn gate(&self) -> Arc<Gate> {
        Arc::clone(&self.gate)
    }

    /// A closure for the `Io`: builds each ended item's result and hands it
    /// out (in input order through the reorder buffer, when asked).
    pub(crate) fn into_fn<R: Runtime>(
        self,
        started: std::time::Instant,
        timeout: std::time::Duration,
        wait_cap: std::time::Duration,
    ) -> Box<dyn FnMut(u32, Outcome, Option<HttpAnswer>, Failure) + Send> {
        Box::new(move |item, outcome, answer, failure| {
            // The time taken goes into a transport error or a limit only.
            let limit = matches!(
                outcome,
                Outcome::TimedOut { .. } | Outcome::RateLimited { .. }
            );
            let (elapsed, limits) = if failure.error.is_some() || limit {
                let end = R::clock().now();
                (
                    end.saturating_duration_since(started),
                    Limits::at(&outcome, end, timeout, wait_cap),
                )
            } else {
                (std::time::Duration::ZERO, Limits::default())
            };
            let result = Ended {
                limits,
                outcome,
                last: answer.map(|a| a.0),
                error: failure.error,
                attempts: failure.sends,
                elapsed,
            }
            .finish();
            let mut out = lock(&self.out);
            if !out.ordered {
                out.done.push_back((item as usize, result));
                self.gate.unconsumed.fetch_add(1, Ordering::AcqRel);
                return;
            }
            // An item not yet handed out is at or after `next`.
            let Some(at) = item.checked_sub(out.next).map(|d| d as usize) else {
                return;
            };
            if out.window.len() <= at {
                out.window.resize_with(at + 1, || None);
            }
            out.window[at] = Some(result);
            // The items that now follow the ready ones without a gap are
            // ready too.
            let before = out.ready;
            while out.window.get(out.ready).is_some_and(Option::is_some) {
                out.ready += 1;
            }
            let more = out.ready - before;
            if more > 0 {
                self.gate.unconsumed.fetch_add(more, Ordering::AcqRel);
            }
            let taken = out.next.saturating_add(out.ready as u32);
            self.gate.taken.store(taken, Ordering::Release);
        })
    }
}

/// Ids for a streaming batch: a block of 2^32 from the client's counter,
/// item `k` taking `first + k`.
pub(crate) fn reserve_ids(ids: &AtomicU64) -> u64 {
    ids.fetch_add(1 << 32, Ordering::Relaxed)
}
