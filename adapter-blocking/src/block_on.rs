//! [`block_on`]: runs the drive loop on the calling thread, parking between
//! polls, and the wake-up registry that [`ThreadClock`](crate::ThreadClock)
//! and [`UreqTransport`](crate::UreqTransport) use.
//!
//! How a sleep ends without polling in small steps: while `block_on` polls
//! its future, a pending timer records the instant it wants to be woken at
//! ([`wake_at`]); after the poll, `block_on` parks the thread with
//! `park_timeout(earliest - now)`. Anything else that can end the wait
//! (a [`CancelToken::cancel`](polite_client::CancelToken::cancel) from
//! another thread, a worker thread delivering an answer) wakes the task's
//! waker, which unparks the thread at once.
//!
//! A timer polled anywhere else (under another executor, or with a waker
//! that is not `block_on`'s own, e.g. inside a `FuturesUnordered`) falls back
//! to one process-wide timer thread that wakes the waker at the instant, so
//! the clock and the transport work under any executor.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

/// What the current `block_on` poll collects: its waker, and the earliest
/// instant a timer asked to be woken at; and what it tells an attempt that
/// may run on this thread (see [`inline_bound`]).
struct Slot {
    waker: Waker,
    wake_at: Option<Instant>,
    /// This `block_on` runs a sequential call ([`block_on_sequential`]).
    #[cfg_attr(not(feature = "ureq"), allow(dead_code))]
    sequential: bool,
    /// The earliest instant the previous poll of this `block_on` asked to
    /// be woken at.
    #[cfg_attr(not(feature = "ureq"), allow(dead_code))]
    before: Option<Instant>,
}

thread_local! {
    static SLOT: RefCell<Option<Slot>> = const { RefCell::new(None) };
    /// One waker per thread, reused by every `block_on` on it: a
    /// [`CancelToken`](polite_client::CancelToken) used for many calls then
    /// keeps one waker for this thread instead of one per call.
    static WAKER: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
}

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Puts the previous slot back when a poll ends, even by a panic.
struct Restore(Option<Slot>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        SLOT.with(|s| *s.borrow_mut() = previous);
    }
}

/// Runs `future` to completion on the calling thread and returns its output.
///
/// Between polls the thread parks: until the earliest instant a
/// [`ThreadClock`](crate::ThreadClock) sleep or an attempt's `abort_at`
/// asked for (`park_timeout`), or until the task is woken (a cancel, an
/// answer from a worker thread). No busy loop and no polling in small steps:
/// a cancel from another thread ends a 30 s sleep within microseconds.
///
/// Nested calls (a `block_on` inside a future run by `block_on`) work; each
/// has its own wake-ups.
///
/// ```
/// use polite_blocking::{ThreadClock, block_on};
/// use polite_client::Clock;
/// use std::future::poll_fn;
/// use std::time::{Duration, Instant};
///
/// let mut clock = ThreadClock::new();
/// let until = clock.now() + Duration::from_millis(20);
/// block_on(poll_fn(|cx| clock.poll_sleep(cx, until)));
/// assert!(Instant::now() >= until);
/// assert_eq!(block_on(async { 40 + 2 }), 42);
/// ```
#[inline(always)]
pub fn block_on<F: Future>(future: F) -> F::Output {
    run(pin!(future), false)
}

/// [`block_on`] for a call that cannot be cancelled and keeps at most one
/// attempt in flight at a time
/// ([`Runtime::call_sequential`](polite_client::Runtime::call_sequential)):
/// an attempt of the [default `UreqTransport`](crate::UreqTransport) may
/// then run on this thread (see [`inline_bound`]).
///
/// Inlined, with `run` taking the future pinned where the caller made it: a
/// call's future (1–2 KiB) is then not copied on its way in (a `memcpy`
/// per move, about 1 k instructions per `send` measured, BENCHMARKS.md
/// 8.13).
#[inline(always)]
pub(crate) fn block_on_sequential<F: Future>(future: F) -> F::Output {
    run(pin!(future), true)
}

fn run<F: Future>(mut future: Pin<&mut F>, sequential: bool) -> F::Output {
    // Inside a crew's poll (nested in it), this call's attempts are not
    // the crew's.
    let _hidden = crate::crew::Hide::new();
    // A sequential call counts its own attempts waiting to run here (a
    // nested one starts from zero and gives the count back after).
    let _count = sequential.then(|| Count(INLINE.replace(0), CROWDED.replace(false)));
    let waker = WAKER.with(Waker::clone);
    let mut cx = Context::from_waker(&waker);
    let mut before = None;
    loop {
        let mine = Slot {
            waker: waker.clone(),
            wake_at: None,
            sequential,
            before,
        };
        let restore = Restore(SLOT.with(|s| s.borrow_mut().replace(mine)));
        let polled = future.as_mut().poll(&mut cx);
        let wanted = SLOT.with(|s| s.borrow_mut().take()).and_then(|s| s.wake_at);
        before = wanted;
        let nested = restore.0.is_some();
        drop(restore);
        if let Poll::Ready(out) = polled {
            if nested {
                // This thread's wake-ups meant for the enclosing `block_on`
                // may have been consumed here: make it poll once more.
                std::thread::current().unpark();
            }
            return out;
        }
        match wanted {
            Some(at) => {
                let now = Instant::now();
                if at > now {
                    std::thread::park_timeout(at - now);
                }
            }
            None => std::thread::park(),
        }
    }
}

/// Polls `future` once with `waker` as [`block_on`] does (timers polled
/// with that waker record their instants instead of using the timer
/// thread); returns the poll and the earliest instant a timer asked to be
/// woken at. For the [crew](crate::crew), whose threads take turns polling.
pub(crate) fn poll_once<F: Future + ?Sized>(
    future: Pin<&mut F>,
    waker: &Waker,
) -> (Poll<F::Output>, Option<Instant>) {
    let mine = Slot {
        waker: waker.clone(),
        wake_at: None,
        sequential: false,
        before: None,
    };
    let restore = Restore(SLOT.with(|s| s.borrow_mut().replace(mine)));
    let polled = future.poll(&mut Context::from_waker(waker));
    let wanted = SLOT.with(|s| s.borrow_mut().take()).and_then(|s| s.wake_at);
    drop(restore);
    (polled, wanted)
}

thread_local! {
    /// Attempts of the innermost sequential call on this thread that may
    /// still run on it ([`InlineTicket`]s alive).
    static INLINE: Cell<usize> = const { Cell::new(0) };
    /// The innermost sequential call on this thread has had two such
    /// attempts at once: its attempts stay on workers from then on.
    static CROWDED: Cell<bool> = const { Cell::new(false) };
}

/// Gives the enclosing sequential call its count back.
struct Count(usize, bool);

impl Drop for Count {
    fn drop(&mut self) {
        INLINE.with(|c| c.set(self.0));
        CROWDED.with(|c| c.set(self.1));
    }
}

/// An attempt of a sequential call that may run on this thread, counted
/// from its send until it is dropped: it runs here only when it is the
/// call's only such attempt and the call never had two at once
/// ([`alone`](InlineTicket::alone)), so a transport that keeps several
/// attempts of the default `UreqTransport` in flight at once (sent before
/// either is polled to its end) gets workers for them instead of running
/// them one after another.
#[cfg(feature = "ureq")]
#[derive(Debug)]
pub(crate) struct InlineTicket(());

#[cfg(feature = "ureq")]
impl InlineTicket {
    pub(crate) fn new() -> InlineTicket {
        INLINE.with(|c| c.set(c.get() + 1));
        InlineTicket(())
    }

    /// No other attempt of this call is waiting to run on this thread,
    /// and none ever waited together with another (that marks the call).
    pub(crate) fn alone(&self) -> bool {
        let alone = INLINE.with(Cell::get) == 1 && !CROWDED.with(Cell::get);
        if !alone {
            CROWDED.with(|c| c.set(true));
        }
        alone
    }
}

#[cfg(feature = "ureq")]
impl Drop for InlineTicket {
    fn drop(&mut self) {
        INLINE.with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// Whether this thread is inside the poll of a sequential call's
/// [`block_on_sequential`] (not a `block_on` nested in it).
#[cfg(feature = "ureq")]
pub(crate) fn sequential() -> bool {
    SLOT.with(|s| s.borrow().as_ref().is_some_and(|slot| slot.sequential))
}

/// For an attempt polled with `cx` inside a sequential call's
/// [`block_on_sequential`] (its own waker, not a `block_on` nested in it):
/// `Some` of the earliest instant the rest of the call asked to be woken
/// at in the previous poll (`Some(None)`: nothing), until which the
/// attempt may hold the thread. `None` anywhere else.
///
/// A sequential call keeps one attempt in flight and nothing else but its
/// timer, so the attempt, polled once without blocking (it wakes its task
/// and returns `Pending`), lets the rest of the call arm its timer: the
/// machines' deadline while an attempt is in flight.
#[cfg(feature = "ureq")]
pub(crate) fn inline_bound(cx: &Context<'_>) -> Option<Option<Instant>> {
    SLOT.with(|s| match s.borrow().as_ref() {
        Some(slot) if slot.sequential && slot.waker.will_wake(cx.waker()) => Some(slot.before),
        _ => None,
    })
}

/// Arranges for `cx`'s task to be woken at `at`: through the enclosing
/// [`block_on`]'s `park_timeout` when `cx` is its waker, otherwise through
/// the process-wide timer thread.
pub(crate) fn wake_at(at: Instant, cx: &Context<'_>) {
    let recorded = SLOT.with(|s| match s.borrow_mut().as_mut() {
        Some(slot) if slot.waker.will_wake(cx.waker()) => {
            slot.wake_at = Some(slot.wake_at.map_or(at, |t| t.min(at)));
            true
        }
        _ => false,
    });
    if !recorded {
        timer().add(at, cx.waker());
    }
}

/// The fallback: one thread for the whole process, started on first use,
/// waking wakers at their instants (a condition variable waits for the
/// earliest; a new earlier entry notifies it).
struct Timer {
    entries: Mutex<Vec<(Instant, Waker)>>,
    changed: Condvar,
    /// Whether the thread could be started (set on first use).
    running: OnceLock<bool>,
}

static TIMER: Timer = Timer {
    entries: Mutex::new(Vec::new()),
    changed: Condvar::new(),
    running: OnceLock::new(),
};

fn timer() -> &'static Timer {
    &TIMER
}

impl Timer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Instant, Waker)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&'static self, at: Instant, waker: &Waker) {
        let running = *self.running.get_or_init(|| {
            std::thread::Builder::new()
                .name("polite-timer".into())
                .spawn(move || self.run())
                .is_ok()
        });
        if !running {
            // No thread could be started: wake at once instead (the poller
            // re-checks its instant, so this degrades to a busy wait, never
            // to a hang).
            waker.wake_by_ref();
            return;
        }
        let mut entries = self.lock();
        if entries.iter().any(|(t, w)| *t == at && w.will_wake(waker)) {
            return;
        }
        let earliest = entries.iter().all(|(t, _)| at < *t);
        entries.push((at, waker.clone()));
        drop(entries);
        if earliest {
            self.changed.notify_one();
        }
    }

    fn run(&self) {
        let mut entries = self.lock();
        loop {
            let now = Instant::now();
            let due: Vec<_> = entries.extract_if(.., |(t, _)| *t <= now).collect();
            if !due.is_empty() {
                drop(entries);
                for (_, w) in due {
                    w.wake();
                }
                entries = self.lock();
                continue;
            }
            entries = match entries.iter().map(|(t, _)| *t).min() {
                Some(next) => {
                    self.changed
                        .wait_timeout(entries, next - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .changed
                    .wait(entries)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::time::Duration;

    fn sleep_until(at: Instant) -> impl Future<Output = ()> {
        poll_fn(move |cx| {
            if Instant::now() >= at {
                Poll::Ready(())
            } else {
                wake_at(at, cx);
                Poll::Pending
            }
        })
    }

    #[test]
    fn a_sleep_under_block_on_ends_on_time() {
        let at = Instant::now() + Duration::from_millis(30);
        block_on(sleep_until(at));
        let late = Instant::now() - at;
        // Real time on a shared machine: ≥ 500 ms of slack (issue 23); a
        // wake-up lost to the timer would miss it by far more.
        assert!(late < Duration::from_millis(500), "{late:?}");
    }

    #[test]
    fn a_sleep_under_another_executor_uses_the_timer_thread() {
        let at = Instant::now() + Duration::from_millis(30);
        polite_testing::block_on(sleep_until(at));
        assert!(Instant::now() >= at);
        let late = Instant::now() - at;
        // Real time on a shared machine: ≥ 500 ms of slack (issue 23); a
        // wake-up lost to the timer would miss it by far more.
        assert!(late < Duration::from_millis(500), "{late:?}");
    }

    /// A wake that comes while the future is being polled (the thread is
    /// not parked), or from another thread while it parks, is not lost:
    /// `block_on` polls again. The futures here have no timer, so a lost
    /// wake would park the thread for good (the watchdog then fails it).
    #[test]
    fn a_wake_during_a_poll_is_not_lost() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut polls = 0;
            block_on(poll_fn(|cx| {
                polls += 1;
                if polls == 1000 {
                    Poll::Ready(())
                } else {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            }));
            let (wtx, wrx) = std::sync::mpsc::channel::<Waker>();
            let waker_thread = std::thread::spawn(move || {
                if let Ok(w) = wrx.recv_timeout(Duration::from_secs(5)) {
                    w.wake();
                }
            });
            let mut sent = false;
            block_on(poll_fn(|cx| {
                if sent {
                    Poll::Ready(())
                } else {
                    sent = true;
                    let _ = wtx.send(cx.waker().clone());
                    Poll::Pending
                }
            }));
            let _ = waker_thread.join();
            let _ = tx.send(polls);
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(1000));
    }

    #[test]
    fn nested_block_on_keeps_each_level_s_wake_ups() {
        let outer = Instant::now() + Duration::from_millis(40);
        block_on(async {
            block_on(sleep_until(Instant::now() + Duration::from_millis(10)));
            sleep_until(outer).await;
        });
        assert!(Instant::now() >= outer);
    }
}
