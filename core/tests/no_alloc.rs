//! Hot paths allocate nothing: a counting global allocator (per thread)
//! around full decision cycles.
//!
//! The only `unsafe` in the workspace: a `GlobalAlloc` impl must be
//! `unsafe impl`. It forwards to the system allocator and counts.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, UNIX_EPOCH};

use polite_core::testing::{SplitMix64, origin};
use polite_core::{
    Action, Event, Method, RequestId, RequestInfo, Response, RetryMachine, RetryPolicy,
    TransportErrorKind,
};

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
    let headers: [(u16, Option<&[u8]>); 5] = [
        (503, None),
        (429, Some(b"2")),
        (429, Some(b"Sun, 06 Nov 1994 08:49:37 GMT")),
        (500, Some(b"garbage value")),
        (502, Some(b"99999999999999999999999")),
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
