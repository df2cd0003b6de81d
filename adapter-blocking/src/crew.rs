//! The crew: a batch's future polled by the threads that run its attempts
//! ([`Threads::call_crew`](crate::Threads), behind
//! [`BatchStream::for_each_result`](polite_client::BatchStream::for_each_result)).
//!
//! Under [`block_on`](crate::block_on), a batch's drive loop runs on the
//! calling thread and each attempt on a worker: a worker that ends an
//! attempt wakes the caller, which polls the drive, which hands the next
//! attempt to the worker, which had gone to sleep meanwhile. Two thread
//! wake-ups per attempt beyond the wait on the socket (BENCHMARKS.md 12.4);
//! plain ureq threads, each looping over its own requests, pay none.
//!
//! A crew instead is up to `size` scoped threads (started as attempts need
//! them) that share the future behind a mutex. An attempt of the default
//! [`UreqTransport`](crate::UreqTransport) started while a member polls is
//! queued on the crew, not handed to a pool worker: the member that polled
//! runs it itself (the others go to idle members). A member that ends an
//! attempt polls the future itself, which takes the answer and starts the
//! next attempt, which the member then runs: one wait per attempt, on the
//! socket, as for ureq's own threads. The calling thread is the keeper: it
//! runs no attempt; it wakes for the future's timers (the pace, the
//! deadline) and for wake-ups that find no member idle (a cancel while
//! every member is in an attempt), polls, and returns the output.
//!
//! The scope ends when the future has: members still in an attempt then
//! (the batch was cancelled, or its deadline passed) are interrupted at
//! once — every wait of the default agent's connections also polls the
//! crew's pipe, written to when the future is done — so the call returns
//! when a `block_on` would, not when the abandoned attempts end.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Wake, Waker};
use std::thread::Scope;
use std::time::Instant;

use crate::block_on::poll_once;

/// An attempt for a thread to run: returns the waker of the task waiting
/// for its result (woken by whoever ran it).
pub(crate) type Job = Box<dyn FnOnce() -> Option<Waker> + Send>;

thread_local! {
    /// The attempts started by the crew poll running on this thread
    /// (`None` outside one).
    static QUEUE: RefCell<Option<Vec<Job>>> = const { RefCell::new(None) };
    /// While a member wakes the task of the attempt it has just run: its
    /// crew (the address of its shared part), and whether that wake-up
    /// reached the crew's future (through a waker of the send's own that
    /// wakes the future's: the drive loop gives each send of a batch one).
    static RAN: Cell<(usize, bool)> = const { Cell::new((0, false)) };
    /// The shared part of the last crew this thread ran (to look into).
    #[cfg(test)]
    static LAST: RefCell<Option<Arc<Shared>>> = const { RefCell::new(None) };
}

/// Whether this thread is inside a crew's poll (an attempt started now may
/// be queued on the crew with [`queue`]).
pub(crate) fn polling() -> bool {
    QUEUE.with(|q| q.borrow().is_some())
}

/// Queues `job` on the crew polling on this thread; gives it back when
/// there is none.
pub(crate) fn queue(job: Job) -> Result<(), Job> {
    QUEUE.with(|q| match q.borrow_mut().as_mut() {
        Some(jobs) => {
            jobs.push(job);
            Ok(())
        }
        None => Err(job),
    })
}

/// Hides the crew poll of this thread, if any, until dropped: a
/// [`block_on`](crate::block_on) nested in it (a blocking call made by the
/// closure a batch hands its results to) waits for its own attempts,
/// which must not be queued on the crew (they would run only after the
/// crew's poll, which waits for them).
pub(crate) struct Hide(Option<Vec<Job>>);

impl Hide {
    pub(crate) fn new() -> Hide {
        Hide(QUEUE.with(|q| q.borrow_mut().take()))
    }
}

impl Drop for Hide {
    fn drop(&mut self) {
        if let Some(jobs) = self.0.take() {
            QUEUE.with(|q| *q.borrow_mut() = Some(jobs));
        }
    }
}

/// What the crew's threads share besides the future: behind one lock, and
/// the waker of the future (a `Wake` needs a `'static` owner).
struct Shared {
    state: Mutex<State>,
    /// Idle members wait here.
    members: Condvar,
    /// The keeper waits here (for a wake-up no member takes, a timer, the
    /// end).
    keeper: Condvar,
}

#[derive(Default)]
struct State {
    /// The future was woken since its last poll began.
    woken: bool,
    /// A thread is polling the future.
    polling: bool,
    /// The future is done (or a poll panicked): every thread leaves.
    done: bool,
    /// Attempts waiting for a member.
    jobs: VecDeque<Job>,
    /// Members waiting on `members`.
    idle: usize,
    /// Idle members told to wake and not yet awake (each takes one).
    calls: usize,
    /// Members started.
    started: usize,
    /// The earliest instant the last poll asked to be woken at.
    timer: Option<Instant>,
    /// What the keeper waits for, while it waits: `Some(None)` a wake-up,
    /// `Some(Some(t))` a wake-up or `t`.
    keeper_waits: Option<Option<Instant>>,
    /// Wake-ups that took the lock (not marked by the member that ran the
    /// attempt).
    #[cfg(test)]
    locked_wakes: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes one idle member not already told to wake; `false` if there is
    /// none.
    fn call(&self, state: &mut State) -> bool {
        if state.idle > state.calls {
            state.calls += 1;
            self.members.notify_one();
            true
        } else {
            false
        }
    }
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let (crew, _) = RAN.get();
        if crew == Arc::as_ptr(self) as usize {
            // The member that ran the attempt looks at the future next.
            RAN.set((crew, true));
            return;
        }
        let mut state = self.lock();
        state.woken = true;
        #[cfg(test)]
        {
            state.locked_wakes += 1;
        }
        // The thread polling now polls again. (A member that has just run
        // an attempt of the future does not come here: it marks the future
        // woken itself, under the lock it takes next.)
        if state.polling || state.done {
            return;
        }
        if !self.call(&mut state) {
            self.keeper.notify_one();
        }
    }
}

/// The crew of one call: the shared part, the future, its output, and the
/// pipe that interrupts the members' waits once it is done.
struct Crew<'f, F: Future> {
    shared: Arc<Shared>,
    waker: Waker,
    size: usize,
    future: Mutex<Pin<&'f mut F>>,
    output: Mutex<Option<F::Output>>,
    stop: Stop,
}

/// Runs `future` to completion with a crew of up to `size` threads besides
/// the calling one (see the module's docs) and returns its output.
pub(crate) fn run<F>(future: F, size: usize) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    let mut future = pin!(future);
    let Ok(stop) = Stop::new() else {
        // No pipe to interrupt the members with: on the calling thread.
        return crate::block_on::block_on(future);
    };
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            woken: true,
            ..State::default()
        }),
        members: Condvar::new(),
        keeper: Condvar::new(),
    });
    #[cfg(test)]
    LAST.with(|last| *last.borrow_mut() = Some(Arc::clone(&shared)));
    let crew = Crew {
        waker: Waker::from(Arc::clone(&shared)),
        shared,
        size: size.max(1),
        future: Mutex::new(future.as_mut()),
        output: Mutex::new(None),
        stop,
    };
    std::thread::scope(|s| crew.keep(s));
    let output = crew
        .output
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    match output {
        Some(output) => output,
        // A poll panicked on a member: the scope has re-raised it already;
        // this is only reached if the future panicked on the keeper.
        None => unreachable_output(),
    }
}

#[cold]
fn unreachable_output() -> ! {
    panic!("the crew's future ended without an output (a poll panicked)")
}

impl<F: Future> Crew<'_, F> {
    /// The future is done: interrupt the members' waits, wake everyone.
    fn end(&self) {
        self.stop.raise();
        self.shared.members.notify_all();
        self.shared.keeper.notify_all();
    }
}

/// Ends the crew when dropped: by a normal end, or by a panic in a poll
/// (every thread then leaves and the scope re-raises the panic).
struct Finish<'a, 'f, F: Future>(&'a Crew<'f, F>);

impl<F: Future> Drop for Finish<'_, '_, F> {
    fn drop(&mut self) {
        let mut state = self.0.shared.lock();
        if !state.done {
            state.done = true;
            drop(state);
            self.0.end();
        }
    }
}

impl<'f, F> Crew<'f, F>
where
    F: Future + Send,
    F::Output: Send,
{
    /// The keeper's loop (the calling thread).
    fn keep<'s>(&'s self, s: &'s Scope<'s, '_>) {
        let _finish = Finish(self);
        let mut state = self.shared.lock();
        loop {
            if state.done {
                return;
            }
            if state.woken && !state.polling {
                let jobs = self.poll(state);
                state = self.shared.lock();
                state = self.dispatch(s, state, jobs, 0);
                continue;
            }
            if state.started == 0 && !state.jobs.is_empty() {
                // No member could be started: the attempts run here.
                if let Some(job) = state.jobs.pop_front() {
                    drop(state);
                    let ours = self.run_job(job);
                    state = self.shared.lock();
                    state.woken |= ours;
                }
                continue;
            }
            let until = state.timer;
            if until.is_some_and(|at| at <= Instant::now()) {
                state.timer = None;
                state.woken = true;
                continue;
            }
            state.keeper_waits = Some(until);
            state = match until {
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    self.shared
                        .keeper
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .shared
                    .keeper
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
            state.keeper_waits = None;
        }
    }

    /// A member's loop: poll when woken (first: the poll takes answers and
    /// may start attempts), run the attempts queued, else idle.
    fn member<'s>(&'s self, s: &'s Scope<'s, '_>) {
        let _finish = Finish(self);
        let _stop = self.stop.watch();
        let mut state = self.shared.lock();
        loop {
            if state.done {
                return;
            }
            if state.woken && !state.polling {
                let jobs = self.poll(state);
                state = self.shared.lock();
                // This member takes the first job queued itself.
                state = self.dispatch(s, state, jobs, 1);
                continue;
            }
            if let Some(job) = state.jobs.pop_front() {
                drop(state);
                let ours = self.run_job(job);
                state = self.shared.lock();
                state.woken |= ours;
                continue;
            }
            state.idle += 1;
            while state.calls == 0 && !state.done {
                state = self
                    .shared
                    .members
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            state.calls = state.calls.saturating_sub(1);
            state.idle -= 1;
        }
    }

    /// Polls the future once (`state` says nobody else is polling and it
    /// was woken); returns the attempts the poll started.
    fn poll(&self, mut state: MutexGuard<'_, State>) -> Vec<Job> {
        state.woken = false;
        state.polling = true;
        drop(state);
        let previous = QUEUE.with(|q| q.borrow_mut().replace(Vec::new()));
        let (polled, timer) = {
            let mut future = self.future.lock().unwrap_or_else(PoisonError::into_inner);
            poll_once(future.as_mut(), &self.waker)
        };
        let jobs = QUEUE
            .with(|q| std::mem::replace(&mut *q.borrow_mut(), previous))
            .unwrap_or_default();
        let done = if let Poll::Ready(output) = polled {
            *self.output.lock().unwrap_or_else(PoisonError::into_inner) = Some(output);
            true
        } else {
            false
        };
        let mut state = self.shared.lock();
        state.polling = false;
        state.timer = timer;
        if done {
            state.done = true;
            drop(state);
            self.end();
            return Vec::new();
        }
        // A timer earlier than what the keeper waits for must reach it.
        if let (Some(at), Some(waits)) = (timer, state.keeper_waits)
            && waits.is_none_or(|w| at < w)
        {
            self.shared.keeper.notify_one();
        }
        jobs
    }

    /// Queues `jobs` for the members, `taking` of the queue's jobs to be
    /// taken by the calling thread itself (1 for a member, 0 for the
    /// keeper): wakes an idle member for each of the others, and starts a
    /// new member for each left while fewer than `size` run.
    fn dispatch<'s>(
        &'s self,
        s: &'s Scope<'s, '_>,
        mut state: MutexGuard<'s, State>,
        jobs: Vec<Job>,
        taking: usize,
    ) -> MutexGuard<'s, State> {
        if jobs.is_empty() {
            return state;
        }
        state.jobs.extend(jobs);
        // Jobs that no thread will look at unless told: those beyond the
        // caller's own, the members already told to wake, and the members
        // busy in an attempt (they look at the queue when it ends) — the
        // busy ones are not counted on: a long attempt would hold a job.
        let mut unseen = state.jobs.len().saturating_sub(taking + state.calls);
        while unseen > 0 && self.shared.call(&mut state) {
            unseen -= 1;
        }
        while unseen > 0 && state.started < self.size {
            let spawned = std::thread::Builder::new()
                .name("polite-crew".into())
                .spawn_scoped(s, move || self.member(s));
            if spawned.is_err() {
                break;
            }
            state.started += 1;
            unseen -= 1;
        }
        state
    }

    /// Runs one attempt on this thread and wakes its task, unless that is
    /// the crew's future (directly, or through the send's own waker): then
    /// `true`, and the caller marks it woken under the lock it takes next
    /// (one lock fewer per attempt, and no other thread told to poll what
    /// this one polls next).
    fn run_job(&self, job: Job) -> bool {
        match job() {
            Some(waker) if waker.will_wake(&self.waker) => true,
            Some(waker) => {
                // A send's own waker wakes the future's in turn (see
                // `RAN`): that wake-up is counted here instead.
                RAN.set((Arc::as_ptr(&self.shared) as usize, false));
                waker.wake();
                let (_, ours) = RAN.replace((0, false));
                ours
            }
            None => false,
        }
    }
}

/// The pipe that interrupts the members' waits on their sockets (Unix with
/// the default agent's connections; nothing to interrupt elsewhere).
struct Stop {
    #[cfg(all(unix, feature = "ureq"))]
    pipe: (Arc<std::io::PipeReader>, Mutex<std::io::PipeWriter>),
}

impl Stop {
    fn new() -> std::io::Result<Stop> {
        Ok(Stop {
            #[cfg(all(unix, feature = "ureq"))]
            pipe: {
                let (reader, writer) = std::io::pipe()?;
                (Arc::new(reader), Mutex::new(writer))
            },
        })
    }

    /// Every wait of this thread's connections also watches the pipe, until
    /// the guard is dropped.
    fn watch(&self) -> Watch {
        #[cfg(all(unix, feature = "ureq"))]
        return crate::poll_tcp::watch(Arc::clone(&self.pipe.0));
        #[cfg(not(all(unix, feature = "ureq")))]
        return Watch;
    }

    /// Makes the pipe readable for good: every wait watching it ends.
    fn raise(&self) {
        #[cfg(all(unix, feature = "ureq"))]
        {
            use std::io::Write;
            let mut writer = self.pipe.1.lock().unwrap_or_else(PoisonError::into_inner);
            // A full pipe is readable already; nothing else can fail here
            // that a wait would not notice anyway.
            let _ = writer.write(&[1]);
        }
    }
}

#[cfg(all(unix, feature = "ureq"))]
use crate::poll_tcp::Watch;

/// Nothing to watch.
#[cfg(not(all(unix, feature = "ureq")))]
struct Watch;

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn on_member() -> bool {
        std::thread::current().name() == Some("polite-crew")
    }

    /// Attempts queued in a poll run on members; each one's wake-up gets
    /// the future polled again (by the member that ran it: the batch's
    /// results then come from member threads), until it is done.
    #[test]
    fn jobs_run_on_members_whose_wake_ups_poll_again() {
        let answered = Arc::new(Mutex::new(Vec::new()));
        let mut queued = false;
        let polls_on_members = AtomicUsize::new(0);
        let out = run(
            poll_fn(|cx| {
                assert!(polling(), "inside a crew poll");
                if on_member() {
                    polls_on_members.fetch_add(1, Ordering::Relaxed);
                }
                if !queued {
                    queued = true;
                    for k in 0..6 {
                        let (answered, waker) = (Arc::clone(&answered), cx.waker().clone());
                        let job: Job = Box::new(move || {
                            let member = on_member();
                            answered
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .push((k, member));
                            Some(waker)
                        });
                        assert!(queue(job).is_ok());
                    }
                }
                let done = answered
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len();
                if done == 6 {
                    Poll::Ready(done)
                } else {
                    Poll::Pending
                }
            }),
            3,
        );
        assert_eq!(out, 6);
        assert!(!polling(), "outside a crew poll");
        let mut answered = answered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        answered.sort_unstable();
        assert_eq!(answered, (0..6).map(|k| (k, true)).collect::<Vec<_>>());
        assert!(polls_on_members.load(Ordering::Relaxed) >= 1);
        assert!(queue(Box::new(|| None)).is_err(), "no crew polls here");
    }

    /// Wakes the crew's future through a waker of its own, as the drive
    /// loop's per-send wakers do.
    struct Relay(Waker);

    impl Wake for Relay {
        fn wake(self: Arc<Self>) {
            self.0.wake_by_ref();
        }
    }

    /// An attempt whose waker wakes the crew's future through another
    /// waker (a batch's sends each have their own) is still marked woken
    /// by the member that ran it, under the lock it takes next: no
    /// wake-up takes the lock or tells another thread.
    #[test]
    fn a_relayed_wake_up_is_marked_by_the_member_that_ran_the_attempt() {
        let answered = Arc::new(AtomicUsize::new(0));
        let mut queued = 0;
        let out = run(
            poll_fn(|cx| {
                let done = answered.load(Ordering::SeqCst);
                if done == 8 {
                    return Poll::Ready(done);
                }
                // One attempt at a time: each is queued by the poll its
                // predecessor's wake-up caused.
                if queued == done {
                    queued += 1;
                    let (answered, waker) = (Arc::clone(&answered), cx.waker().clone());
                    let job: Job = Box::new(move || {
                        answered.fetch_add(1, Ordering::SeqCst);
                        Some(Waker::from(Arc::new(Relay(waker))))
                    });
                    assert!(queue(job).is_ok());
                }
                Poll::Pending
            }),
            2,
        );
        assert_eq!(out, 8);
        let shared = LAST.with(|last| last.borrow_mut().take());
        let locked = shared.map(|s| s.lock().locked_wakes);
        assert_eq!(locked, Some(0), "wake-ups that took the lock");
    }

    /// A timer of the future (recorded through `wake_at`, as the clock
    /// does) wakes it; so does a waker cloned to another thread.
    #[test]
    fn timers_and_wakes_from_other_threads_are_served() {
        let at = Instant::now() + Duration::from_millis(30);
        let mut sent = None;
        let (tx, rx) = std::sync::mpsc::channel::<Waker>();
        let waker_thread = std::thread::spawn(move || {
            if let Ok(w) = rx.recv_timeout(Duration::from_secs(10)) {
                w.wake();
            }
        });
        run(
            poll_fn(|cx| {
                if Instant::now() < at {
                    crate::block_on::wake_at(at, cx);
                    return Poll::Pending;
                }
                match sent {
                    None => {
                        sent = Some(());
                        let _ = tx.send(cx.waker().clone());
                        Poll::Pending
                    }
                    Some(()) => Poll::Ready(()),
                }
            }),
            2,
        );
        assert!(Instant::now() >= at);
        waker_thread.join().unwrap();
    }

    /// A poll that panics on a member ends the crew (no thread waits on)
    /// and the panic reaches the caller.
    #[test]
    fn a_panic_in_a_poll_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| {
            let mut first = true;
            run(
                poll_fn(|cx| -> Poll<()> {
                    if first {
                        first = false;
                        let waker = cx.waker().clone();
                        let job: Job = Box::new(move || Some(waker));
                        assert!(queue(job).is_ok());
                        return Poll::Pending;
                    }
                    panic!("a poll on {:?} fails", std::thread::current().name());
                }),
                1,
            )
        });
        assert!(caught.is_err());
    }
}
