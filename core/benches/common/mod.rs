//! What `decisions` (criterion, time) and `decision_instructions`
//! (callgrind, instructions) both measure: the machines in flight, the
//! events they take, and the hand-written floor (issue 22).
#![allow(dead_code)] // each bench binary uses its own part

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use polite_core::poll::JobReport;
use polite_core::{
    Action, Event, Method, PollMachine, PollPolicy, RequestId, RequestInfo, Response, RetryMachine,
    RetryPolicy, SendPlan, SplitMix64,
};

/// The wall clock every answer carries.
pub(crate) fn wall() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// A `RetryMachine` with its first attempt in flight.
pub(crate) fn in_flight(policy: RetryPolicy, t0: Instant) -> (RetryMachine<SplitMix64>, SendPlan) {
    let mut m = RetryMachine::new(
        policy,
        RequestInfo::new(RequestId(1), Method::Get),
        SplitMix64::new(7),
        t0,
        Duration::from_secs(60),
    )
    .expect("valid policy");
    let Action::Send(plan) = m.poll_action() else {
        unreachable!("a new machine sends first")
    };
    (m, plan)
}

/// A `PollMachine` with a poll in flight; `long_poll_first` picks the mode.
pub(crate) fn poll_in_flight(
    long_poll_first: bool,
    t0: Instant,
) -> (PollMachine<SplitMix64>, SendPlan) {
    let policy = PollPolicy {
        long_poll_first,
        ..PollPolicy::default()
    };
    let mut m = PollMachine::new(
        policy,
        RequestInfo::new(RequestId(1), Method::Get),
        SplitMix64::new(7),
        t0,
        Duration::from_secs(600),
    )
    .expect("valid policy");
    let Action::Send(plan) = m.poll_action() else {
        unreachable!("a new machine polls first")
    };
    (m, plan)
}

/// One retry decision: an answer with `status` (and `Retry-After: 2` when
/// `retry_after`) in, the next action out.
#[inline]
pub(crate) fn retry_decision(
    (m, plan): &mut (RetryMachine<SplitMix64>, SendPlan),
    now: Instant,
    wall: SystemTime,
    status: u16,
    retry_after: bool,
) -> Action {
    let mut r = Response::new(plan.id, status, wall);
    if retry_after {
        r = r.retry_after(b"2");
    }
    // Opaque, as an answer off the network is (and as the floor's status
    // is): no field of it folds into the decision at compile time.
    m.handle(now, black_box(Event::Response(r)));
    black_box(m.poll_action())
}

/// One poll decision: a pending answer in, the next action out.
#[inline]
pub(crate) fn poll_decision(
    (m, plan): &mut (PollMachine<SplitMix64>, SendPlan),
    now: Instant,
    wall: SystemTime,
) -> Action {
    let pending = JobReport::State("running");
    m.handle(
        now,
        black_box(Event::Response(
            Response::new(plan.id, 200, wall).job(pending),
        )),
    );
    black_box(m.poll_action())
}

/// The hand-written floor of a retry decision: what any retry decision
/// must do at least, by hand — match the status, bump the attempt count,
/// draw one random number, scale the capped delay by it (a widening
/// multiply), add it to an `Instant` (plus the digits of `Retry-After`).
pub(crate) struct Floor {
    attempts: u32,
    rng: SplitMix64,
}

impl Floor {
    pub(crate) fn new() -> Floor {
        Floor {
            attempts: 1,
            rng: SplitMix64::new(7),
        }
    }

    /// The instant of the next send, or `None` to stop.
    #[inline]
    pub(crate) fn decide(
        &mut self,
        now: Instant,
        status: u16,
        retry_after: Option<&[u8]>,
    ) -> Option<Instant> {
        use rand_core::Rng;
        if !matches!(status, 429 | 500 | 502 | 503 | 504) || self.attempts >= 4 {
            return None;
        }
        self.attempts += 1;
        if let Some(digits) = retry_after {
            let mut secs: u64 = 0;
            for &d in digits {
                if !d.is_ascii_digit() {
                    return None;
                }
                secs = secs.saturating_mul(10).saturating_add(u64::from(d - b'0'));
            }
            return now.checked_add(Duration::from_secs(secs));
        }
        // Full jitter over 250 ms doubling, capped at 4 s, in nanoseconds.
        let cap: u64 = (250_000_000u64 << (self.attempts - 1)).min(4_000_000_000);
        let nanos = ((u128::from(self.rng.next_u64()) * u128::from(cap)) >> 64) as u64;
        now.checked_add(Duration::from_nanos(nanos))
    }
}

/// One floor decision, as the benches call it.
#[inline]
pub(crate) fn floor_decision(f: &mut Floor, now: Instant, retry_after: bool) -> Option<Instant> {
    let ra: Option<&[u8]> = if retry_after {
        Some(black_box(b"2"))
    } else {
        None
    };
    black_box(f.decide(now, black_box(if retry_after { 429 } else { 503 }), ra))
}
