//! The drive loop polls only the sends that were woken: with several in
//! flight, each send has a waker of its own (`core/src/drive/flights.rs`).
//! Driven by hand, with sends that count their polls and answer only when
//! the test says so.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use polite_core::drive::{self, Answer, Io, NoJobs};
use polite_core::{
    BatchMachine, BatchPolicy, Method, RateThrottle, RequestId, RequestInfo, SendPlan, SplitMix64,
    TransportErrorKind,
};
use polite_testing::origin;

struct Ans(u16);

impl Answer for Ans {
    fn status(&self) -> u16 {
        self.0
    }
    fn header(&self, _: &str) -> Option<&[u8]> {
        None
    }
}

/// One send as the test sees it: how often the loop polled it, the answer
/// the test gave it (taken by its next poll), the waker it was last
/// polled with.
#[derive(Default)]
struct Slot {
    polls: u32,
    answer: Option<u16>,
    waker: Option<Waker>,
    done: bool,
}

type Slots = Rc<RefCell<Vec<Slot>>>;

/// A send that answers once the test has put an answer in its slot.
struct Held(Slots, usize);

impl Future for Held {
    type Output = Result<Ans, TransportErrorKind>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slots = self.0.borrow_mut();
        let slot = &mut slots[self.1];
        slot.polls += 1;
        match slot.answer.take() {
            Some(status) => {
                slot.done = true;
                Poll::Ready(Ok(Ans(status)))
            }
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Sends are held until answered; sleeping jumps the clock.
struct Hand {
    now: Cell<Instant>,
    slots: Slots,
}

impl Io for Hand {
    type Answer = Ans;
    type Sending = Held;
    fn now(&self) -> Instant {
        self.now.get()
    }
    fn wall_clock(&self) -> SystemTime {
        UNIX_EPOCH
    }
    fn send(&mut self, _: &SendPlan) -> Held {
        let mut slots = self.slots.borrow_mut();
        slots.push(Slot::default());
        Held(Rc::clone(&self.slots), slots.len() - 1)
    }
    fn poll_sleep(&mut self, _: &mut Context<'_>, until: Instant) -> Poll<()> {
        if until > self.now.get() + Duration::from_secs(1) {
            // The machine's deadline or a send's `abort_at`: the sends are
            // left in flight for the test to answer.
            return Poll::Pending;
        }
        self.now.set(self.now.get().max(until));
        Poll::Ready(())
    }
    fn poll_cancel(&mut self, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
    fn is_cancelled(&self) -> bool {
        false
    }
}

/// The task's waker: counts its wake-ups.
#[derive(Default)]
struct Count(AtomicU32);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A batch of `items` at `concurrency`, `per_ms` sends a millisecond,
/// over a `Hand` from `t0`.
fn batch(
    items: u64,
    concurrency: u32,
    per_ms: u32,
    t0: Instant,
) -> (BatchMachine<SplitMix64, RateThrottle>, Hand, Slots) {
    let requests = (0..items)
        .map(|i| RequestInfo::new(RequestId(i), Method::Get))
        .collect();
    let policy = BatchPolicy {
        concurrency,
        ..BatchPolicy::default()
    };
    let pace = RateThrottle::new(per_ms, Duration::from_millis(1)).unwrap();
    let rng = SplitMix64::new(7);
    let m = BatchMachine::new(policy, requests, rng, pace, t0, Duration::from_secs(3600));
    let slots: Slots = Rc::default();
    let io = Hand {
        now: Cell::new(t0),
        slots: Rc::clone(&slots),
    };
    (m.unwrap(), io, slots)
}

/// The sends in flight, by number (started, not yet answered).
fn in_flight(slots: &Slots) -> Vec<usize> {
    let slots = slots.borrow();
    (0..slots.len()).filter(|&i| !slots[i].done).collect()
}

#[test]
fn with_several_in_flight_only_the_send_that_woke_is_polled_again() {
    let (mut m, mut io, slots) = batch(9, 3, 1000, origin());
    let (mut jobs, mut observe) = (NoJobs, ());
    let mut run = pin!(drive::drive(&mut m, &mut io, &mut jobs, &mut observe));
    let count = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&count));
    let mut cx = Context::from_waker(&waker);
    let polls = |slots: &Slots| slots.borrow().iter().map(|s| s.polls).collect::<Vec<_>>();
    // Each poll of the loop polls the send answered before it (if any)
    // once, every send it starts once, and no other.
    let check = |before: &[u32], woke: Option<usize>, slots: &Slots| {
        let after = polls(slots);
        for (i, b) in before.iter().enumerate() {
            let want = b + u32::from(woke == Some(i));
            assert_eq!(
                after[i], want,
                "send {i} polled {} times, not {want}",
                after[i]
            );
        }
        for (i, a) in after.iter().enumerate().skip(before.len()) {
            assert_eq!(*a, 1, "new send {i}");
        }
    };
    let mut woke = None;
    let mut answered = 0;
    let done = loop {
        let before = polls(&slots);
        let polled = run.as_mut().poll(&mut cx);
        check(&before, woke, &slots);
        if let Poll::Ready(done) = polled {
            break done;
        }
        let flying = in_flight(&slots);
        assert!(flying.len() <= 3, "{flying:?} in flight at concurrency 3");
        let (oldest, newest) = (flying[0], *flying.last().unwrap());
        // The newest send is woken with no answer (once): polled again,
        // still pending, and no other send is polled.
        if newest != oldest && slots.borrow()[newest].polls == 1 {
            let wakes = count.0.load(Ordering::SeqCst);
            let w = slots.borrow()[newest].waker.clone().unwrap();
            w.wake();
            assert_eq!(count.0.load(Ordering::SeqCst), wakes + 1);
            let before = polls(&slots);
            assert!(run.as_mut().poll(&mut cx).is_pending());
            check(&before, Some(newest), &slots);
        }
        // The oldest answers (the order does not matter to the loop),
        // woken twice before the task polls: the task is woken once.
        let wakes = count.0.load(Ordering::SeqCst);
        let w = {
            let mut s = slots.borrow_mut();
            s[oldest].answer = Some(200);
            s[oldest].waker.clone().unwrap()
        };
        w.wake_by_ref();
        w.wake();
        assert_eq!(count.0.load(Ordering::SeqCst), wakes + 1);
        woke = Some(oldest);
        answered += 1;
        assert!(answered <= 9, "more answers than items");
    };
    assert_eq!(done.sends, 9);
    assert_eq!(answered, 9);
    let slots = slots.borrow();
    for (i, slot) in slots.iter().enumerate() {
        // Started (1), answered (1), and at most one wake-up without an
        // answer (1): never polled for another send's wake-up.
        assert!(
            slot.done && (2..=3).contains(&slot.polls),
            "send {i}: {} polls",
            slot.polls
        );
    }
    let spurious = slots.iter().filter(|s| s.polls == 3).count();
    assert!(
        spurious >= 3,
        "the test woke {spurious} sends without an answer"
    );
}

#[test]
fn a_lone_send_is_polled_with_the_tasks_waker_until_a_second_flies() {
    // Concurrency 2, but the pace lets the second item go only 1 ms after
    // the first: the first send is polled alone first.
    let (mut m, mut io, slots) = batch(2, 2, 1, origin());
    let (mut jobs, mut observe) = (NoJobs, ());
    let mut run = pin!(drive::drive(&mut m, &mut io, &mut jobs, &mut observe));
    let count = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&count));
    let mut cx = Context::from_waker(&waker);
    assert!(run.as_mut().poll(&mut cx).is_pending());
    // Both started; the first was polled with the task's waker, then once
    // more with its own when the second one flew.
    assert_eq!(slots.borrow().len(), 2);
    let first = slots.borrow()[0].waker.clone().unwrap();
    assert!(
        !first.will_wake(&waker),
        "the first send keeps the task's waker"
    );
    assert_eq!(slots.borrow()[0].polls, 2);
    assert_eq!(slots.borrow()[1].polls, 1);
    // Its own waker wakes the task, and only it is polled.
    slots.borrow_mut()[0].answer = Some(200);
    first.wake();
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert!(run.as_mut().poll(&mut cx).is_pending());
    assert_eq!(slots.borrow()[1].polls, 1);
    let second = slots.borrow()[1].waker.clone().unwrap();
    slots.borrow_mut()[1].answer = Some(200);
    second.wake();
    let Poll::Ready(done) = run.as_mut().poll(&mut cx) else {
        panic!("the batch ends with its last answer");
    };
    assert_eq!(done.sends, 2);
    assert_eq!(slots.borrow()[0].polls, 3);
    assert_eq!(slots.borrow()[1].polls, 2);
}
