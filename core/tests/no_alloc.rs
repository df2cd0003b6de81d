//! Hot paths allocate nothing: a counting global allocator (per thread)
//! around full decision cycles of every machine, after construction:
//! `RetryMachine`, `PollMachine` (long poll and backoff mode),
//! `RateThrottle::acquire` (granted and refused), `Paced<RetryMachine>`
//! and `BatchMachine`.
//!
//! The only `unsafe` in the workspace: a `GlobalAlloc` impl must be
//! `unsafe impl`. It forwards to the system allocator and counts.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, UNIX_EPOCH};

use polite_core::pace::Unpaced;
use polite_core::policy::MaxRetries;
use polite_core::poll::JobReport;
use polite_core::{
    Action, BatchMachine, BatchPolicy, Event, Machine, Method, Paced, PollMachine, PollPolicy,
    RateThrottle, RequestId, RequestInfo, Response, RetryMachine, RetryPolicy, SendId, SplitMix64,
    TransportErrorKind,
};
use polite_testing::origin;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call unchanged to `System`; the counter is a
// thread-local `Cell` with const initialisation, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = ALLOCS.with(Cell::get);
    let out = f();
    (ALLOCS.with(Cell::get) - before, out)
}

#[test]
fn the_counter_counts() {
    let (n, v) = allocations(|| vec![1u8; 16]);
    assert!(n >= 1);
    drop(v);
}

#[test]
fn retry_decisions_allocate_nothing() {
    let t0 = origin();
    let wall = UNIX_EPOCH + Duration::from_secs(784_111_767);
    let mut policy = RetryPolicy::default();
    policy.max_retries.server_error = 1000;
    policy.max_retries.rate_limited = 1000;
    policy.max_retries.transport = 1000;
    let mut m = RetryMachine::new(
        policy,
        RequestInfo::new(RequestId(1), Method::Get),
        SplitMix64::new(1),
        t0,
        Duration::from_secs(100_000),
    )
    .unwrap();
    // Hostile values too (issue 16): zero-padded past 64 bytes, and a
    // leap-second date (rewritten on the stack, not the heap).
    let headers: [(u16, Option<&[u8]>); 7] = [
        (503, None),
        (429, Some(b"2")),
        (429, Some(b"Sun, 06 Nov 1994 08:49:37 GMT")),
        (500, Some(b"garbage value")),
        (
            502,
            Some(b"000000000000000000000000000000000000000000000000000000000000000000000003"),
        ),
        (503, Some(b"Sun, 06 Nov 1994 08:49:60 GMT")),
        (503, Some(b"1.5")),
    ];
    let (n, decisions) = allocations(|| {
        let mut now = t0;
        let mut decisions = 0u32;
        for i in 0..250 {
            let Action::Send(plan) = m.poll_action() else {
                panic!("expected a send")
            };
            now += Duration::from_millis(5);
            let event = if i % 6 == 5 {
                Event::TransportError(plan.id, TransportErrorKind::Reset)
            } else {
                let (status, ra) = headers[i % headers.len()];
                let mut r = Response::new(plan.id, status, wall);
                r.retry_after = ra;
                Event::Response(r)
            };
            m.handle(now, event);
            let _ = m.take_record();
            let Action::SleepUntil(t) = m.poll_action() else {
                panic!("expected a wait at {i}: {:?}", m.outcome())
            };
            now = t;
            m.handle(now, Event::Tick);
            decisions += 2;
        }
        decisions
    });
    assert_eq!(n, 0, "{n} allocations over {decisions} decisions");
}

/// Budgets large enough that no machine stops for lack of retries.
fn roomy() -> RetryPolicy {
    RetryPolicy {
        max_retries: MaxRetries {
            rate_limited: 1000,
            server_error: 1000,
            transport: 1000,
        },
        ..RetryPolicy::default()
    }
}

/// Drives `m` for `rounds` rounds without allocating: every send is
/// answered by `answer(n, id)` (the `n`-th answer overall) 5 ms later,
/// up to 64 sends in flight (a fixed array, no heap); every wait is
/// waited out. Returns the number of decisions (`handle` + `poll_action`
/// pairs), and panics if the machine stops.
fn drive<M: Machine>(
    m: &mut M,
    rounds: u32,
    answer: impl Fn(u32, SendId) -> Event<'static>,
) -> u32 {
    let t0 = origin();
    let mut now = t0;
    let mut flying = [None::<SendId>; 64];
    let mut answers = 0u32;
    let mut decisions = 0u32;
    for _ in 0..rounds {
        loop {
            decisions += 1;
            match m.poll_action() {
                Action::Send(plan) => {
                    let slot = flying
                        .iter_mut()
                        .find(|f| f.is_none())
                        .expect("64 in flight");
                    *slot = Some(plan.id);
                }
                Action::SleepUntil(t) => {
                    if let Some(id) = flying.iter_mut().find_map(Option::take) {
                        now += Duration::from_millis(5);
                        m.handle(now, answer(answers, id));
                        answers += 1;
                    } else {
                        now = now.max(t);
                        m.handle(now, Event::Tick);
                    }
                    let _ = m.take_record();
                    let _ = m.take_notice();
                    break;
                }
                Action::Stop(o) => panic!("stopped after {decisions} decisions: {o:?}"),
            }
        }
    }
    decisions
}

const WALL: std::time::SystemTime = UNIX_EPOCH;

#[test]
fn poll_decisions_allocate_nothing() {
    let t0 = origin();
    let mut policy = PollPolicy {
        retry: roomy(),
        ..PollPolicy::default()
    };
    policy.min_long_poll_interval = Duration::ZERO;
    let request = RequestInfo::new(RequestId(1), Method::Get);
    // Long-poll mode: pending answers, 503s and 429s with Retry-After.
    let mut m = PollMachine::new(
        policy,
        request,
        SplitMix64::new(1),
        t0,
        Duration::from_secs(1_000_000),
    )
    .unwrap();
    let long = |n: u32, id| {
        let r = Response::new(id, 200, WALL);
        Event::Response(match n % 5 {
            0 => Response::new(id, 503, WALL),
            1 => Response::new(id, 429, WALL).retry_after(b"1"),
            2 => r.job(JobReport::State("queued")),
            _ => r.job(JobReport::State("running")),
        })
    };
    let (n, decisions) = allocations(|| drive(&mut m, 300, long));
    assert_eq!(
        n, 0,
        "long poll: {n} allocations over {decisions} decisions"
    );

    // Backoff mode: the server rejects the wait parameter (a notice, once),
    // then pending answers on the schedule, and transport errors.
    let mut m = PollMachine::new(
        policy,
        request,
        SplitMix64::new(2),
        t0,
        Duration::from_secs(1_000_000),
    )
    .unwrap();
    // Hostile Retry-After values too (issue 16): zero-padded past 64 bytes
    // on the rejection, a leap-second date on a pending answer.
    let backoff = |n: u32, id| match n {
        0 => Event::Response(
            Response::new(id, 400, WALL)
                .job(JobReport::LongPollUnsupported)
                .retry_after(
                    b"000000000000000000000000000000000000000000000000000000000000000000000002",
                ),
        ),
        n if n % 4 == 3 => Event::TransportError(id, TransportErrorKind::Reset),
        n if n % 4 == 1 => Event::Response(
            Response::new(id, 202, WALL)
                .job(JobReport::State("running"))
                .retry_after(b"Thu, 01 Jan 1970 00:00:60 GMT"),
        ),
        _ => Event::Response(Response::new(id, 200, WALL).job(JobReport::State("running"))),
    };
    let (n, decisions) = allocations(|| drive(&mut m, 300, backoff));
    assert_eq!(n, 0, "backoff: {n} allocations over {decisions} decisions");
    assert_eq!(m.mode(), polite_core::poll::PollMode::Backoff);

    // The end of the budget (issue 16): a server that ignores the wait
    // parameter, polled to the last useful instant, then a stop. The
    // machine is made inside the count from a shared policy, as a client
    // makes its waits: that allocates nothing either (from a `PollPolicy`
    // value, `new` puts it in an `Arc` first, one allocation).
    let shared = std::sync::Arc::new(PollPolicy::default());
    let (n, polls) = allocations(|| {
        let mut m = PollMachine::new(
            std::sync::Arc::clone(&shared),
            request,
            SplitMix64::new(3),
            t0,
            Duration::from_secs(5),
        )
        .unwrap();
        let mut now = t0;
        let mut polls = 0u32;
        loop {
            match m.poll_action() {
                Action::Send(plan) => {
                    polls += 1;
                    now += Duration::from_millis(17);
                    m.handle(
                        now,
                        Event::Response(
                            Response::new(plan.id, 200, WALL).job(JobReport::State("running")),
                        ),
                    );
                    let _ = m.take_record();
                }
                Action::SleepUntil(t) => {
                    now = now.max(t);
                    m.handle(now, Event::Tick);
                }
                Action::Stop(_) => break polls,
            }
        }
    });
    assert_eq!(n, 0, "tail: {n} allocations over {polls} polls");
    assert_eq!(polls, 6);
}

#[test]
fn throttle_acquire_allocates_nothing_granted_or_refused() {
    let t0 = origin();
    let mut t = RateThrottle::new(8, Duration::from_secs(1)).unwrap();
    let (n, (granted, refused)) = allocations(|| {
        let (mut granted, mut refused) = (0u32, 0u32);
        let mut now = t0;
        for i in 0..20_000u64 {
            // Bursts of calls 1 ms apart, with a gap now and then; a
            // cool-down and a step backwards once in a while.
            now += Duration::from_millis(if i % 50 == 0 { 700 } else { 1 });
            if i % 997 == 0 {
                t.cool_down(now + Duration::from_millis(300));
            }
            let at = if i % 333 == 0 {
                now - Duration::from_millis(50)
            } else {
                now
            };
            match t.acquire(at) {
                Ok(()) => granted += 1,
                Err(_) => refused += 1,
            }
        }
        (granted, refused)
    });
    assert!(
        granted > 1000 && refused > 1000,
        "{granted} granted, {refused} refused"
    );
    assert_eq!(n, 0, "{n} allocations over {} calls", granted + refused);
}

#[test]
fn paced_retry_decisions_allocate_nothing() {
    let t0 = origin();
    let inner = RetryMachine::new(
        roomy(),
        RequestInfo::new(RequestId(1), Method::Get),
        SplitMix64::new(3),
        t0,
        Duration::from_secs(1_000_000),
    )
    .unwrap();
    // Two sends per second: most retries (250 ms backoff) wait for the throttle.
    let throttle = RateThrottle::new(2, Duration::from_secs(1)).unwrap();
    let mut m = Paced::new(inner, throttle, t0).retry_after_limits(roomy().retry_after);
    let answer = |n: u32, id| match n % 4 {
        0 => Event::Response(Response::new(id, 429, WALL).retry_after(b"1")),
        1 => Event::TransportError(id, TransportErrorKind::Timeout),
        _ => Event::Response(Response::new(id, 503, WALL)),
    };
    let (n, decisions) = allocations(|| drive(&mut m, 400, answer));
    assert_eq!(n, 0, "{n} allocations over {decisions} decisions");
    assert!(m.inner().sends() > 100);
}

#[test]
fn batch_steps_allocate_nothing() {
    let t0 = origin();
    let requests: Vec<_> = (0..32)
        .map(|i| RequestInfo::new(RequestId(i), Method::Get))
        .collect();
    let policy = BatchPolicy {
        retry: roomy(),
        concurrency: 6,
        max_restarts: 2,
    };
    let throttle = RateThrottle::new(10, Duration::from_secs(1)).unwrap();
    let mut b = BatchMachine::new(
        policy,
        requests,
        SplitMix64::new(4),
        throttle,
        t0,
        Duration::from_secs(1_000_000),
    )
    .unwrap();
    // Failures and rate limits keep every item going for the whole run.
    let answer = |n: u32, id| match n % 3 {
        0 => Event::Response(Response::new(id, 429, WALL).retry_after(b"1")),
        1 => Event::Response(Response::new(id, 503, WALL)),
        _ => Event::TransportError(id, TransportErrorKind::Reset),
    };
    let (n, decisions) = allocations(|| drive(&mut b, 1000, answer));
    assert_eq!(n, 0, "{n} allocations over {decisions} decisions");
    assert!(
        decisions > 1000 && b.outcome().is_none(),
        "{decisions} decisions"
    );
}

#[test]
fn keyed_batch_steps_allocate_nothing() {
    // Items over three keys, each with its own throttle (SPEC §4.2): the
    // per-key refusals live in room reserved at construction.
    let t0 = origin();
    let requests: Vec<_> = (0..32)
        .map(|i| RequestInfo::new(RequestId(i), Method::Get).with_pace_slot((i % 3) as u32))
        .collect();
    let policy = BatchPolicy {
        retry: roomy(),
        concurrency: 6,
        max_restarts: 2,
    };
    let throttle = || RateThrottle::new(4, Duration::from_secs(1)).unwrap();
    let mut b = BatchMachine::new(
        policy,
        requests,
        SplitMix64::new(4),
        [throttle(), throttle(), throttle()],
        t0,
        Duration::from_secs(1_000_000),
    )
    .unwrap();
    let answer = |n: u32, id| match n % 3 {
        0 => Event::Response(Response::new(id, 429, WALL).retry_after(b"1")),
        1 => Event::Response(Response::new(id, 503, WALL)),
        _ => Event::TransportError(id, TransportErrorKind::Reset),
    };
    let (n, decisions) = allocations(|| drive(&mut b, 1000, answer));
    assert_eq!(n, 0, "{n} allocations over {decisions} decisions");
    assert!(
        decisions > 1000 && b.outcome().is_none(),
        "{decisions} decisions"
    );
}

/// Drives a streaming batch until `fed` reaches `total` and every item but
/// item 0 has ended: feeds items while it wants them (over three keys),
/// answers each send 5 ms later with `answer(n, id)` but never item 0's
/// (it hangs), and takes what ended. How many items ended meanwhile.
fn drive_streaming<M: Machine + ?Sized>(
    m: &mut M,
    now: &mut std::time::Instant,
    fed: &mut u64,
    total: u64,
    answer: impl Fn(u32, SendId) -> Event<'static>,
) -> u64 {
    let mut flying = [None::<SendId>; 64];
    let mut answers = 0u32;
    let mut ended = 0u64;
    loop {
        while *fed < total && m.wants_items() > 0 {
            let slot = (*fed % 3) as u32;
            m.push_item(RequestInfo::new(RequestId(*fed), Method::Get).with_pace_slot(slot));
            *fed += 1;
        }
        match m.poll_action() {
            Action::Send(plan) if plan.id.item == 0 => {}
            Action::Send(plan) => {
                let slot = flying
                    .iter_mut()
                    .find(|f| f.is_none())
                    .expect("64 in flight");
                *slot = Some(plan.id);
            }
            Action::SleepUntil(_) if *fed < total && m.wants_items() > 0 => {}
            Action::SleepUntil(t) => {
                if let Some(id) = flying.iter_mut().find_map(Option::take) {
                    *now += Duration::from_millis(5);
                    m.handle(*now, answer(answers, id));
                    answers += 1;
                } else if *fed < total || Some(t) < m.deadline() {
                    *now = (*now).max(t);
                    m.handle(*now, Event::Tick);
                } else {
                    // Only item 0 is left, hanging.
                    return ended;
                }
                let _ = m.take_record();
                let _ = m.take_notice();
            }
            Action::Stop(o) => panic!("stopped: {o:?}"),
        }
        while m.take_ended().is_some() {
            ended += 1;
        }
    }
}

/// A streaming batch past an item that hangs: once its window has been
/// reserved and grown, thousands more items come, retry and end without
/// an allocation (items are released where they end: nothing grows with
/// how far the batch got past the hanging one).
#[test]
fn streaming_batch_items_allocate_nothing_once_warm() {
    let answer = |n: u32, id| match n % 4 {
        0 => Event::Response(Response::new(id, 503, WALL)),
        1 => Event::Response(Response::new(id, 404, WALL)),
        _ => Event::Response(Response::new(id, 200, WALL)),
    };
    let policy = BatchPolicy {
        retry: roomy(),
        concurrency: 6,
        max_restarts: 2,
    };
    let t0 = origin();
    let timeout = Duration::from_secs(1_000_000);
    // One pace, then one pace per key.
    let mut single =
        BatchMachine::streaming(policy, SplitMix64::new(4), Unpaced, t0, timeout).unwrap();
    let throttle = || RateThrottle::new(1_000, Duration::from_secs(1)).unwrap();
    let mut keyed = BatchMachine::streaming(
        policy,
        SplitMix64::new(4),
        [throttle(), throttle(), throttle()],
        t0,
        timeout,
    )
    .unwrap();
    for m in [&mut single as &mut dyn Machine, &mut keyed] {
        let (mut now, mut fed) = (t0, 0);
        let warm = drive_streaming(m, &mut now, &mut fed, 500, answer);
        assert_eq!(warm, 499);
        let (n, ended) = allocations(|| drive_streaming(m, &mut now, &mut fed, 5_000, answer));
        assert_eq!(n, 0, "{n} allocations over {ended} items");
        assert_eq!(ended, 4_500, "every item but item 0 ended");
    }
}
