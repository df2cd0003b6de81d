//! The sends in flight of [`drive`](super::drive), and which of them to
//! poll.
//!
//! A call with one send in flight at a time (`send`, `wait`) keeps it in
//! the caller's future and polls it with the task's own waker: nothing is
//! allocated for it. Once a second send flies beside the first (a batch),
//! every send gets a waker of its own, which marks it woken before it
//! wakes the task; the loop then polls only the sends marked woken (as
//! `FuturesUnordered` does), not every send in flight each time any one of
//! them wakes. With 4 in flight that was about 7.7 polls per answer
//! (each a lock and a clock read in the blocking adapter); now about 2
//! (the send that answered, and the send started in its place).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use crate::input::SendId;

/// The task's waker, shared by the sends' own wakers (registered anew
/// when the task polls with another one, which is rare: read-locked
/// otherwise, so that sends waking on other threads never wait for each
/// other or for the task).
#[derive(Default)]
struct Task(RwLock<Option<Waker>>);

impl Task {
    fn register(&self, waker: &Waker) {
        let task = self.0.read().unwrap_or_else(PoisonError::into_inner);
        if task.as_ref().is_some_and(|w| w.will_wake(waker)) {
            return;
        }
        drop(task);
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Some(waker.clone());
    }
}

/// One place's own wake-up: marks the place woken, then wakes the task
/// (once until the loop polls the place again).
struct Mark {
    woken: AtomicBool,
    task: Arc<Task>,
}

impl Wake for Mark {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Already marked: the task was woken then and has not polled this
        // place since (it clears the mark before polling).
        if self.woken.swap(true, Ordering::AcqRel) {
            return;
        }
        let task = self.task.0.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(waker) = task.as_ref() {
            waker.wake_by_ref();
        }
    }
}

/// A place's mark and the waker that sets it.
struct Own {
    mark: Arc<Mark>,
    waker: Waker,
}

impl Own {
    fn new(task: &Arc<Task>) -> Own {
        let mark = Arc::new(Mark {
            // A place is made for a send to poll.
            woken: AtomicBool::new(true),
            task: Arc::clone(task),
        });
        Own {
            waker: Waker::from(Arc::clone(&mark)),
            mark,
        }
    }

    /// The place is to be polled: takes the mark.
    fn take(&self) -> bool {
        // Relaxed first: most places are not marked, and the load does
        // not take the cache line from the thread that marks it.
        self.mark.woken.load(Ordering::Relaxed) && self.mark.woken.swap(false, Ordering::AcqRel)
    }

    fn set(&self) {
        self.mark.woken.store(true, Ordering::Relaxed);
    }
}

/// A send in flight beside the first: its id, its `abort_at`, its future
/// (in a box that is kept for a later send once this one has ended: `None`
/// then, and the id and `abort_at` are stale until that send), its own
/// waker.
struct Flying<S> {
    id: SendId,
    abort_at: Instant,
    sending: Pin<Box<Option<S>>>,
    own: Own,
}

/// The sends in flight, numbered from 0: the first place in the caller's
/// future (`first_sending`, its id and `abort_at` in `first` while it
/// holds a send), the others in `more` (number `i` is `more[i - 1]`).
pub(super) struct Flights<'p, S> {
    first: Option<(SendId, Instant)>,
    first_sending: Pin<&'p mut Option<S>>,
    more: Vec<Flying<S>>,
    /// Once a second send has flown: the task's waker, and the first
    /// place's own waker (boxed: a call that never has two sends in
    /// flight keeps 8 bytes for them in its future, not 32).
    own: Option<Box<(Arc<Task>, Own)>>,
}

impl<'p, S: Future> Flights<'p, S> {
    pub(super) fn new(first_sending: Pin<&'p mut Option<S>>) -> Self {
        Flights {
            first: None,
            first_sending,
            more: Vec::new(),
            own: None,
        }
    }

    /// Puts `sending` in the first free place (marked to be polled).
    pub(super) fn start(&mut self, id: SendId, abort_at: Instant, sending: S) {
        if self.first.is_none() {
            self.first = Some((id, abort_at));
            self.first_sending.set(Some(sending));
            if let Some((_, own)) = self.own.as_deref() {
                own.set();
            }
            return;
        }
        if let Some(slot) = self.more.iter_mut().find(|f| f.sending.is_none()) {
            slot.id = id;
            slot.abort_at = abort_at;
            slot.sending.set(Some(sending));
            slot.own.set();
            return;
        }
        // The first place was polled with the task's waker until now: it
        // is polled once more with its own.
        let (task, _) = &**self.own.get_or_insert_with(|| {
            let task = Arc::default();
            let first = Own::new(&task);
            Box::new((task, first))
        });
        let own = Own::new(task);
        self.more.push(Flying {
            id,
            abort_at,
            sending: Box::pin(Some(sending)),
            own,
        });
    }

    /// The first send (by number) that is ready, with its output: of the
    /// sends woken since they were last polled, once there is more than
    /// one place; else the one send.
    pub(super) fn poll_any(&mut self, cx: &mut Context<'_>) -> Option<(usize, S::Output)> {
        let Some((task, first)) = self.own.as_deref() else {
            let f = self.first_sending.as_mut().as_pin_mut()?;
            return match f.poll(cx) {
                Poll::Ready(r) => Some((0, r)),
                Poll::Pending => None,
            };
        };
        // Registered before the marks are read: a send that wakes after
        // its mark was read wakes this waker.
        task.register(cx.waker());
        if let Some(f) = self.first_sending.as_mut().as_pin_mut()
            && first.take()
            && let Poll::Ready(r) = f.poll(&mut Context::from_waker(&first.waker))
        {
            return Some((0, r));
        }
        for (i, flying) in self.more.iter_mut().enumerate() {
            if let Some(f) = flying.sending.as_mut().as_pin_mut()
                && flying.own.take()
                && let Poll::Ready(r) = f.poll(&mut Context::from_waker(&flying.own.waker))
            {
                return Some((i + 1, r));
            }
        }
        None
    }

    /// The `abort_at` of every send in flight.
    pub(super) fn abort_ats(&self) -> impl Iterator<Item = Instant> + '_ {
        let more = self.more.iter().filter(|f| f.sending.is_some());
        self.first
            .map(|(_, at)| at)
            .into_iter()
            .chain(more.map(|f| f.abort_at))
    }

    /// The first send (by number) in flight past its `abort_at`.
    pub(super) fn past(&self, now: Instant) -> Option<usize> {
        if self.first.is_some_and(|(_, at)| at <= now) {
            return Some(0);
        }
        self.more
            .iter()
            .position(|f| f.sending.is_some() && f.abort_at <= now)
            .map(|i| i + 1)
    }

    /// Drops send `i` (it ended); its id.
    pub(super) fn end(&mut self, i: usize) -> SendId {
        if i == 0 {
            self.first_sending.set(None);
            // Only a send in flight ends.
            return self.first.take().map_or_else(SendId::default, |(id, _)| id);
        }
        let flying = &mut self.more[i - 1];
        flying.sending.set(None);
        flying.id
    }
}
