//! Scenario tests for pacing through the public API, in virtual time:
//! the SPEC §4 reference experiment, `Paced<RetryMachine>` with a shared
//! throttle, and `BatchMachine` (restarts, cancel, deadline, order).
#![allow(clippy::field_reassign_with_default)] // policies are spelled as deltas from the default

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use polite_core::adaptive::Answered;
use polite_core::pace::{PaceLimit, Unpaced};
use polite_core::policy::{Jitter, MaxRetries, StatusSet};
use polite_core::{
    Action, BatchMachine, BatchPolicy, Event, Method, Outcome, Pace, Paced, RateThrottle,
    RequestId, RequestInfo, Response, RetryClass, RetryMachine, RetryPolicy, SendPlan, SplitMix64,
};
use polite_testing::{BatchChecker, Scripted, Simulator, Trace, origin};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

fn gets(n: u64) -> Vec<RequestInfo> {
    (0..n)
        .map(|i| RequestInfo::new(RequestId(i), Method::Get))
        .collect()
}

fn no_jitter() -> RetryPolicy {
    let mut p = RetryPolicy::default();
    p.backoff.jitter = Jitter::None;
    p
}

fn batch<P: Pace>(
    policy: BatchPolicy,
    n: u64,
    pace: P,
    timeout: Duration,
) -> BatchMachine<SplitMix64, P> {
    BatchMachine::new(policy, gets(n), SplitMix64::new(5), pace, origin(), timeout).unwrap()
}

fn checker<P: Pace>(b: &BatchMachine<SplitMix64, P>, n: u64) -> BatchChecker {
    BatchChecker::new(b.policy(), &gets(n), b.deadline())
}

/// Runs the batch in the simulator with the checker, then checks the item
/// outcomes against the batch's own outcome.
fn run_checked<P: Pace>(
    sim: Simulator,
    b: &mut BatchMachine<SplitMix64, P>,
    checker: BatchChecker,
) -> Trace {
    run_checked_cancel(sim, b, checker, false)
}

fn run_checked_cancel<P: Pace>(
    sim: Simulator,
    b: &mut BatchMachine<SplitMix64, P>,
    checker: BatchChecker,
    cancelled: bool,
) -> Trace {
    let mut after = checker.clone();
    let trace = sim.check_batch(checker).run(&mut *b).unwrap();
    // The simulator owns the stepping checker; a copy learns the Stop (and
    // whether the caller cancelled) and checks the item outcomes against it.
    if cancelled {
        after.input(trace.ended_at, &Event::Cancel);
    }
    after
        .output(trace.ended_at, &Action::Stop(trace.outcome))
        .unwrap();
    after.outcomes(b.outcomes()).unwrap();
    trace
}

// ---------------------------------------------------------------------------
// The reference experiment (SPEC §4)
// ---------------------------------------------------------------------------

/// What the simulated server saw: (arrival, item, status answered).
#[derive(Default, Debug)]
struct ServerLog {
    arrivals: Vec<(Instant, u32, u16)>,
}

impl ServerLog {
    fn count(&self, status: u16) -> usize {
        self.arrivals.iter().filter(|a| a.2 == status).count()
    }

    /// The most requests in service at once (each lasts `service`).
    fn peak_in_service(&self, service: Duration) -> usize {
        self.arrivals
            .iter()
            .map(|(t, _, _)| {
                self.arrivals
                    .iter()
                    .filter(|(u, _, _)| u <= t && *t < *u + service)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }
}

/// A server with a FIXED-window quota: `limit` requests per `window`,
/// windows aligned at `t0`, `t0 + window`, ...; over quota → 429 (no
/// Retry-After). Every answer takes `service`.
fn quota_server(
    log: Rc<RefCell<ServerLog>>,
    t0: Instant,
    limit: usize,
    window: Duration,
    service: Duration,
) -> impl FnMut(Instant, &SendPlan) -> Scripted + 'static {
    move |now, plan| {
        let mut log = log.borrow_mut();
        let slot = |t: Instant| (t - t0).as_nanos() / window.as_nanos();
        let used = log
            .arrivals
            .iter()
            .filter(|(t, _, s)| *s == 200 && slot(*t) == slot(now))
            .count();
        let status = if used < limit { 200 } else { 429 };
        log.arrivals.push((now, plan.id.item, status));
        Scripted::status(status).after(service)
    }
}

/// The experiment: 8 GETs at concurrency 2 against 3 per 500 ms (fixed
/// windows), 15 ms service time. Returns the trace, the server's log, the
/// batch, and the peak in flight (as the server saw it; the checker's
/// `concurrency` rule checks the client's side).
fn reference_run<P: Pace>(
    policy: BatchPolicy,
    pace: P,
    throttled: Option<(u32, Duration)>,
) -> (
    Trace,
    Rc<RefCell<ServerLog>>,
    BatchMachine<SplitMix64, P>,
    usize,
) {
    let t0 = origin();
    let log = Rc::new(RefCell::new(ServerLog::default()));
    let mut b = batch(policy, 8, pace, 6 * S);
    let mut c = checker(&b, 8);
    if let Some((limit, window)) = throttled {
        c = c.throttled(limit, window);
    }
    let sim = Simulator::new(t0).server(quota_server(Rc::clone(&log), t0, 3, 500 * MS, 15 * MS));
    let trace = run_checked(sim, &mut b, c);
    let peak = log.borrow().peak_in_service(15 * MS);
    (trace, log, b, peak)
}

#[test]
fn reference_experiment_concurrency_only_earns_five_429s() {
    // Concurrency 2, no pacing by time, retries disabled: SPEC §4 says
    // 3 × 200 and 5 × 429.
    let mut policy = BatchPolicy {
        concurrency: 2,
        max_restarts: 0,
        ..BatchPolicy::default()
    };
    policy.retry.max_retries = MaxRetries {
        rate_limited: 0,
        server_error: 0,
        transport: 0,
    };
    let (trace, log, b, peak) = reference_run(policy, Unpaced, None);
    let log = log.borrow();
    assert_eq!((log.count(200), log.count(429)), (3, 5));
    assert_eq!(log.arrivals.len(), 8);
    assert_eq!(peak, 2);
    assert_eq!(
        trace.outcome,
        Outcome::BatchDone {
            succeeded: 3,
            failed: 5
        }
    );
    let limited = b
        .outcomes()
        .iter()
        .filter(|o| matches!(o, Some(Outcome::RateLimited { .. })))
        .count();
    assert_eq!(limited, 5);
    // All eight went out within 45 ms: 0, 0, 15, 15, 30, 30, 45, 45.
    let at: Vec<_> = trace
        .sends()
        .map(|(t, _)| (t - origin()).as_millis())
        .collect();
    assert_eq!(at, vec![0, 0, 15, 15, 30, 30, 45, 45]);
}

#[test]
fn reference_experiment_concurrency_only_with_retries_still_earns_429s() {
    // The same, with the default retry budgets and restarts (every retry
    // counted): retries spread the requests out but still trip the quota.
    let policy = BatchPolicy {
        concurrency: 2,
        ..BatchPolicy::default()
    };
    let (trace, log, _b, peak) = reference_run(policy, Unpaced, None);
    let log = log.borrow();
    // Seeded jitter, so exact: all eight get through in the end, at the
    // price of fourteen 429s (every retry counted as a request).
    assert_eq!((log.count(200), log.count(429)), (8, 14));
    assert_eq!(peak, 2);
    assert_eq!(log.arrivals.len(), trace.sends().count());
}

#[test]
fn reference_experiment_throttled_gets_eight_200s_and_no_429() {
    // Concurrency 2 *and* a throttle of 3 per 650 ms: 8 × 200, 0 × 429.
    let policy = BatchPolicy {
        concurrency: 2,
        ..BatchPolicy::default()
    };
    let throttle = RateThrottle::new(3, 650 * MS).unwrap();
    let (trace, log, b, peak) = reference_run(policy, throttle, Some((3, 650 * MS)));
    let log = log.borrow();
    assert_eq!((log.count(200), log.count(429)), (8, 0));
    assert_eq!(peak, 2);
    assert_eq!(
        trace.outcome,
        Outcome::BatchDone {
            succeeded: 8,
            failed: 0
        }
    );
    assert!(
        b.outcomes()
            .iter()
            .all(|o| *o == Some(Outcome::Succeeded { status: 200 }))
    );
    // Hand-computed: 3 sends in the first window (0, 0, 15 ms); the 4th
    // waits until the first slots age out at 650 ms + 50 ms margin; ...
    let at: Vec<_> = trace
        .sends()
        .map(|(t, _)| (t - origin()).as_millis())
        .collect();
    assert_eq!(at, vec![0, 0, 15, 700, 700, 715, 1400, 1400]);
    assert_eq!(trace.ended_at - origin(), 1415 * MS);
}

// ---------------------------------------------------------------------------
// Paced<RetryMachine>
// ---------------------------------------------------------------------------

fn retry_machine(id: u64, policy: RetryPolicy, timeout: Duration) -> RetryMachine<SplitMix64> {
    RetryMachine::new(
        policy,
        RequestInfo::new(RequestId(id), Method::Get),
        SplitMix64::new(id),
        origin(),
        timeout,
    )
    .unwrap()
}

fn answer(plan: &SendPlan, status: u16) -> Response<'static> {
    Response::new(plan.id, status, UNIX_EPOCH + 1_700_000_000 * S)
}

fn expect_send(a: Action) -> SendPlan {
    match a {
        Action::Send(p) => p,
        other => panic!("expected a send, got {other:?}"),
    }
}

#[test]
fn paced_holds_a_send_until_the_throttle_grants_it() {
    let t0 = origin();
    let mut throttle = RateThrottle::new(1, S).unwrap();
    // Someone else used the only slot at t0.
    assert_eq!(throttle.acquire(t0), Ok(()));
    let policy = no_jitter();
    let paced = Paced::new(retry_machine(1, policy, 10 * S), throttle, t0);
    let trace = Simulator::new(t0)
        .replies([Scripted::status(200)])
        .check_retry(&policy, &RequestInfo::new(RequestId(1), Method::Get))
        .run(paced)
        .unwrap();
    assert_eq!(trace.steps[0].action, Action::SleepUntil(t0 + 1050 * MS));
    let sends: Vec<_> = trace.sends().map(|(t, _)| t - t0).collect();
    assert_eq!(sends, vec![1050 * MS]);
    assert_eq!(trace.outcome, Outcome::Succeeded { status: 200 });
}

#[test]
fn paced_retries_are_requests_too() {
    // 2 sends per second; 503, 503, 200 with 250 ms / 500 ms backoff: the
    // third send (due at 760 ms) waits for the first slot to age out.
    let t0 = origin();
    let policy = no_jitter();
    let paced = Paced::new(
        retry_machine(1, policy, 10 * S),
        RateThrottle::new(2, S).unwrap(),
        t0,
    );
    let trace = Simulator::new(t0)
        .replies([
            Scripted::status(503),
            Scripted::status(503),
            Scripted::status(200),
        ])
        .check_retry(&policy, &RequestInfo::new(RequestId(1), Method::Get))
        .run(paced)
        .unwrap();
    let sends: Vec<_> = trace.sends().map(|(t, _)| t - t0).collect();
    assert_eq!(sends, vec![Duration::ZERO, 260 * MS, 1050 * MS]);
    assert_eq!(trace.outcome, Outcome::Succeeded { status: 200 });
}

#[test]
fn a_429_cools_down_every_machine_sharing_the_throttle() {
    let t0 = origin();
    let shared = Arc::new(Mutex::new(RateThrottle::new(10, S).unwrap()));
    let policy = no_jitter();
    let mut a = Paced::new(retry_machine(1, policy, 30 * S), Arc::clone(&shared), t0);
    let mut b = Paced::new(retry_machine(2, policy, 30 * S), Arc::clone(&shared), t0);
    let pa = expect_send(a.poll_action());
    let pb = expect_send(b.poll_action());

    // A: 429 with Retry-After: 2 at 10 ms → everyone cools down until 2010 ms.
    let t1 = t0 + 10 * MS;
    a.handle(t1, Event::Response(answer(&pa, 429).retry_after(b"2")));
    assert_eq!(a.poll_action(), Action::SleepUntil(t1 + 2 * S));
    // B: 503 at 20 ms → its own backoff is 250 ms, but the cool-down holds it.
    let t2 = t0 + 20 * MS;
    b.handle(t2, Event::Response(answer(&pb, 503)));
    assert_eq!(b.poll_action(), Action::SleepUntil(t2 + 250 * MS));
    b.handle(t2 + 250 * MS, Event::Tick);
    assert_eq!(b.poll_action(), Action::SleepUntil(t1 + 2 * S));
    assert!(b.is_holding());
    // A third machine joining now is held too: it did not see the 429.
    let mut c = Paced::new(retry_machine(3, policy, 30 * S), Arc::clone(&shared), t0);
    c.handle(t2 + 300 * MS, Event::Tick);
    assert_eq!(c.poll_action(), Action::SleepUntil(t1 + 2 * S));
    // At the end of the cool-down all three go.
    let t3 = t1 + 2 * S;
    for m in [&mut a, &mut b, &mut c] {
        m.handle(t3, Event::Tick);
    }
    let (ra, rb, rc) = (
        expect_send(a.poll_action()),
        expect_send(b.poll_action()),
        expect_send(c.poll_action()),
    );
    assert_eq!((ra.id.attempt, rb.id.attempt, rc.id.attempt), (1, 1, 0));
}

#[test]
fn cancel_while_held_stops_without_sending() {
    let t0 = origin();
    let mut throttle = RateThrottle::new(1, S).unwrap();
    throttle.acquire(t0).unwrap();
    let mut m = Paced::new(retry_machine(1, no_jitter(), 10 * S), throttle, t0);
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 1050 * MS));
    m.handle(t0 + 500 * MS, Event::Cancel);
    assert_eq!(m.poll_action(), Action::Stop(Outcome::Cancelled));
    // Sticky, and the held send never goes out, even once the slot frees.
    m.handle(t0 + 2 * S, Event::Tick);
    assert_eq!(m.poll_action(), Action::Stop(Outcome::Cancelled));
    assert!(!m.is_holding());
    assert_eq!(m.inner().outcome(), Some(Outcome::Cancelled));
}

#[test]
fn a_grant_after_the_deadline_stops_at_once() {
    let t0 = origin();
    let mut throttle = RateThrottle::new(1, 5 * S).unwrap();
    throttle.acquire(t0).unwrap();
    // Deadline 2 s; the throttle frees at 5.05 s: do not sleep for nothing.
    let mut m = Paced::new(retry_machine(1, no_jitter(), 2 * S), throttle, t0);
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::Starved {
            until: t0 + 5050 * MS,
            by: PaceLimit::Window {
                limit: 1,
                window: 5 * S,
                learned: false
            }
        })
    );
    assert_eq!(m.inner().sends(), 1, "the inner machine asked once");
}

#[test]
fn the_deadline_coming_while_held_times_the_inner_machine_out() {
    let t0 = origin();
    let mut throttle = RateThrottle::new(1, S).unwrap();
    throttle.acquire(t0).unwrap();
    let mut m = Paced::new(retry_machine(1, no_jitter(), 2 * S), throttle, t0);
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 1050 * MS));
    // The adapter overslept: its Tick comes at the deadline.
    m.handle(t0 + 2 * S, Event::Tick);
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::TimedOut { needed: None })
    );
    assert_eq!(
        m.inner().outcome(),
        Some(Outcome::TimedOut { needed: None })
    );
}

#[test]
fn a_slot_taken_by_a_sharer_pushes_the_grant_past_the_deadline() {
    let t0 = origin();
    let shared = Rc::new(RefCell::new(RateThrottle::new(1, S).unwrap()));
    shared.borrow_mut().acquire(t0).unwrap();
    let mut m = Paced::new(
        retry_machine(1, no_jitter(), 1500 * MS),
        Rc::clone(&shared),
        t0,
    );
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 1050 * MS));
    // Another task takes the freed slot first; the next one frees at 2.1 s.
    shared.borrow_mut().acquire(t0 + 1050 * MS).unwrap();
    m.handle(t0 + 1050 * MS, Event::Tick);
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::Starved {
            until: t0 + 2100 * MS,
            by: PaceLimit::Window {
                limit: 1,
                window: S,
                learned: false
            }
        })
    );
}

#[test]
fn paced_never_sleeps_past_the_deadline() {
    // A cool-down holds the first send until 300 ms; its 503 (at 310 ms)
    // asks for a retry at 560 ms, but the throttle's only slot frees at
    // 10.3 s, long after the 1 s deadline: stop at once, no sleep past it.
    let t0 = origin();
    let policy = no_jitter();
    let mut throttle = RateThrottle::new(1, 10 * S)
        .unwrap()
        .with_margin(Duration::ZERO);
    throttle.cool_down(t0 + 300 * MS);
    let paced = Paced::new(retry_machine(1, policy, S), throttle, t0);
    let trace = Simulator::new(t0)
        .replies([Scripted::status(503)])
        .check_retry(&policy, &RequestInfo::new(RequestId(1), Method::Get))
        .run(paced)
        .unwrap();
    assert_eq!(trace.steps[0].action, Action::SleepUntil(t0 + 300 * MS));
    assert_eq!(
        trace.outcome,
        Outcome::Starved {
            until: t0 + 10 * S + 300 * MS,
            by: PaceLimit::Window {
                limit: 1,
                window: 10 * S,
                learned: false
            }
        }
    );
}

// ---------------------------------------------------------------------------
// BatchMachine
// ---------------------------------------------------------------------------

#[test]
fn outcomes_come_back_in_input_order() {
    let t0 = origin();
    let policy = BatchPolicy {
        retry: no_jitter(),
        concurrency: 4,
        max_restarts: 0,
    };
    let mut b = batch(policy, 4, Unpaced, 30 * S);
    let c = checker(&b, 4);
    // Item 0 is slow and ends 404; item 1 is fast; item 2 fails once; item 3
    // is not retryable by policy (501).
    let sim = Simulator::new(t0).server(|_, plan| match (plan.id.item, plan.id.attempt) {
        (0, _) => Scripted::status(404).after(900 * MS),
        (1, _) => Scripted::status(201).after(5 * MS),
        (2, 0) => Scripted::status(503),
        (2, _) => Scripted::status(200),
        _ => Scripted::status(501).after(40 * MS),
    });
    let trace = run_checked(sim, &mut b, c);
    assert_eq!(
        b.outcomes(),
        &[
            Some(Outcome::NotRetryable { status: 404 }),
            Some(Outcome::Succeeded { status: 201 }),
            Some(Outcome::Succeeded { status: 200 }),
            Some(Outcome::NotRetryable { status: 501 }),
        ]
    );
    assert_eq!(
        trace.outcome,
        Outcome::BatchDone {
            succeeded: 2,
            failed: 2
        }
    );
    // Records name their item; one per answered attempt.
    let items: Vec<u32> = trace.records.iter().map(|r| r.id.item).collect();
    assert_eq!(items, vec![1, 2, 3, 2, 0]);
}

#[test]
fn a_rate_limited_item_is_restarted_after_the_servers_time() {
    // Retry-After: 90 is over the 60 s automatic wait cap: the item ends
    // RateLimited { retry_at: +90 s }. The batch has 5 minutes: it restarts
    // the item at the server's time, inside the same deadline.
    let t0 = origin();
    let policy = BatchPolicy {
        retry: no_jitter(),
        concurrency: 2,
        max_restarts: 2,
    };
    let mut b = batch(policy, 2, RateThrottle::default(), 300 * S);
    let c = checker(&b, 2);
    let sim = Simulator::new(t0).server(|_, plan| match (plan.id.item, plan.id.attempt) {
        (0, 0) => Scripted::status(429).retry_after("90"),
        _ => Scripted::status(200),
    });
    let trace = run_checked(sim, &mut b, c);
    assert_eq!(b.outcomes(), &[Some(Outcome::Succeeded { status: 200 }); 2]);
    assert_eq!(b.restarts(0), 1);
    let item0: Vec<_> = trace
        .sends()
        .filter(|(_, p)| p.id.item == 0)
        .map(|(t, p)| (t - t0, p.id.attempt))
        .collect();
    // Attempt numbers carry over across the restart.
    assert_eq!(item0, vec![(Duration::ZERO, 0), (90 * S + 10 * MS, 1)]);
}

#[test]
fn a_restart_that_would_miss_the_deadline_keeps_the_rate_limited_outcome() {
    let t0 = origin();
    let policy = BatchPolicy {
        retry: no_jitter(),
        ..BatchPolicy::default()
    };
    let mut b = batch(policy, 1, Unpaced, 60 * S);
    let c = checker(&b, 1);
    let sim = Simulator::new(t0).server(|_, _| Scripted::status(429).retry_after("90"));
    let trace = run_checked(sim, &mut b, c);
    assert_eq!(
        b.outcomes(),
        &[Some(Outcome::RateLimited {
            retry_at: Some(t0 + 90 * S + 10 * MS)
        })]
    );
    assert_eq!(b.restarts(0), 0);
    assert_eq!(trace.sends().count(), 1);
    // Not cut short by the deadline: the batch ended on its own, at once.
    assert_eq!(
        trace.outcome,
        Outcome::BatchDone {
            succeeded: 0,
            failed: 1
        }
    );
    assert_eq!(trace.ended_at, t0 + 10 * MS);
}

#[test]
fn restarts_do_not_multiply_budgets() {
    // Always 429 with Retry-After: 1. The item's own budget is 3 retries;
    // each batch restart keeps the spent counters, so it adds one send:
    // 1 + 3 + max_restarts sends in all, never (1 + 3) × (1 + restarts).
    let t0 = origin();
    for restarts in [0u32, 1, 2, 5] {
        let policy = BatchPolicy {
            retry: no_jitter(),
            concurrency: 1,
            max_restarts: restarts,
        };
        let mut b = batch(policy, 1, Unpaced, 600 * S);
        let c = checker(&b, 1);
        let sim = Simulator::new(t0).server(|_, _| Scripted::status(429).retry_after("1"));
        let trace = run_checked(sim, &mut b, c);
        assert_eq!(trace.sends().count() as u32, 1 + 3 + restarts);
        assert_eq!(b.restarts(0), restarts);
        assert!(matches!(
            b.outcomes()[0],
            Some(Outcome::RateLimited { retry_at: Some(_) })
        ));
    }
}

#[test]
fn a_429_cools_down_the_whole_batch() {
    // Item 0's 429 says Retry-After: 2; items 1..3 wait for the cool-down
    // instead of each discovering the limit.
    let t0 = origin();
    let policy = BatchPolicy {
        retry: no_jitter(),
        concurrency: 1,
        max_restarts: 0,
    };
    let mut b = batch(policy, 4, RateThrottle::new(10, S).unwrap(), 30 * S);
    let c = checker(&b, 4).throttled(10, S);
    let sim = Simulator::new(t0).server(|_, plan| match (plan.id.item, plan.id.attempt) {
        (0, 0) => Scripted::status(429).retry_after("2"),
        _ => Scripted::status(200),
    });
    let trace = run_checked(sim, &mut b, c);
    let at: Vec<_> = trace
        .sends()
        .map(|(t, p)| (p.id.item, (t - t0).as_millis()))
        .collect();
    // Item 0's retry goes first (retries before fresh items), then the rest.
    assert_eq!(at, vec![(0, 0), (0, 2010), (1, 2020), (2, 2030), (3, 2040)]);
    assert_eq!(
        trace.outcome,
        Outcome::BatchDone {
            succeeded: 4,
            failed: 0
        }
    );
}

#[test]
fn cancel_ends_the_batch_and_every_unfinished_item() {
    let t0 = origin();
    let policy = BatchPolicy {
        concurrency: 2,
        ..BatchPolicy::default()
    };
    let mut b = batch(policy, 5, Unpaced, 30 * S);
    let c = checker(&b, 5);
    let sim = Simulator::new(t0)
        .server(|_, _| Scripted::status(200).after(100 * MS))
        .cancel_at(t0 + 150 * MS);
    let trace = run_checked_cancel(sim, &mut b, c, true);
    assert_eq!(trace.outcome, Outcome::Cancelled);
    assert_eq!(trace.ended_at, t0 + 150 * MS);
    assert_eq!(
        b.outcomes(),
        &[
            Some(Outcome::Succeeded { status: 200 }),
            Some(Outcome::Succeeded { status: 200 }),
            Some(Outcome::Cancelled),
            Some(Outcome::Cancelled),
            Some(Outcome::Cancelled),
        ]
    );
    assert_eq!(trace.sends().count(), 4);
}

#[test]
fn the_deadline_ends_the_batch_timed_out() {
    let t0 = origin();
    let policy = BatchPolicy {
        concurrency: 2,
        ..BatchPolicy::default()
    };
    let mut b = batch(policy, 3, Unpaced, 2 * S);
    let c = checker(&b, 3);
    // The first answer comes at 1.5 s, the others would come at 3 s.
    let sim = Simulator::new(t0).server(|_, plan| {
        Scripted::status(200).after(if plan.id.item == 0 { 1500 * MS } else { 3 * S })
    });
    let trace = run_checked(sim, &mut b, c);
    assert_eq!(trace.outcome, Outcome::TimedOut { needed: None });
    assert_eq!(trace.ended_at, t0 + 2 * S);
    assert_eq!(
        b.outcomes(),
        &[
            Some(Outcome::Succeeded { status: 200 }),
            Some(Outcome::TimedOut { needed: None }),
            Some(Outcome::TimedOut { needed: None }),
        ]
    );
    // Every sleep was within the deadline (checked), and the last one was it.
    assert!(
        trace
            .steps
            .iter()
            .any(|s| s.action == Action::SleepUntil(t0 + 2 * S))
    );
}

#[test]
fn items_the_pace_cannot_serve_in_time_stop_at_once() {
    // One send per 10 s, deadline 5 s: item 0 goes; items 1 and 2 could
    // only go at 10.05 s, so they end Starved (not a plain TimedOut: the
    // client's own throttle is the cause) with that instant, right away.
    let t0 = origin();
    let policy = BatchPolicy {
        concurrency: 3,
        ..BatchPolicy::default()
    };
    let mut b = batch(policy, 3, RateThrottle::new(1, 10 * S).unwrap(), 5 * S);
    let c = checker(&b, 3).throttled(1, 10 * S);
    let sim = Simulator::new(t0).server(|_, _| Scripted::status(200));
    let trace = run_checked(sim, &mut b, c);
    let starved = Outcome::Starved {
        until: t0 + 10 * S + 50 * MS,
        by: PaceLimit::Window {
            limit: 1,
            window: 10 * S,
            learned: false,
        },
    };
    assert_eq!(
        b.outcomes(),
        &[
            Some(Outcome::Succeeded { status: 200 }),
            Some(starved),
            Some(starved),
        ]
    );
    assert_eq!(trace.outcome, starved);
    assert_eq!(trace.ended_at, t0 + 10 * MS);
}

#[test]
fn an_empty_batch_is_done_at_once() {
    let mut b = batch(BatchPolicy::default(), 0, Unpaced, S);
    assert!(b.is_empty());
    assert_eq!(
        b.poll_action(),
        Action::Stop(Outcome::BatchDone {
            succeeded: 0,
            failed: 0
        })
    );
}

#[test]
fn batch_policy_is_validated() {
    let t0 = origin();
    let mut p = BatchPolicy {
        concurrency: 0,
        ..BatchPolicy::default()
    };
    let err = BatchMachine::new(p, gets(1), SplitMix64::new(1), Unpaced, t0, S).unwrap_err();
    assert!(err.to_string().contains("concurrency"), "{err}");
    p.concurrency = 1;
    p.retry.backoff.base = Duration::ZERO;
    let err = BatchMachine::new(p, gets(1), SplitMix64::new(1), Unpaced, t0, S).unwrap_err();
    assert!(err.to_string().contains("backoff.base"), "{err}");
}

#[test]
fn stop_is_sticky_and_late_answers_are_ignored() {
    let t0 = origin();
    let mut b = batch(BatchPolicy::default(), 1, Unpaced, 10 * S);
    let p = expect_send(b.poll_action());
    b.handle(t0 + MS, Event::Response(answer(&p, 200)));
    let stop = b.poll_action();
    assert_eq!(
        stop,
        Action::Stop(Outcome::BatchDone {
            succeeded: 1,
            failed: 0
        })
    );
    for e in [Event::Cancel, Event::Tick, Event::Response(answer(&p, 500))] {
        b.handle(t0 + 2 * MS, e);
        assert_eq!(b.poll_action(), stop);
    }
    assert_eq!(b.outcomes(), &[Some(Outcome::Succeeded { status: 200 })]);
}

#[test]
fn paced_keeps_every_send_of_a_machine_with_several_outstanding() {
    // Paced is meant for one-send-at-a-time machines, but a machine that
    // asks for several sends at once loses none: they go out in order, each
    // when the pace grants it.
    let t0 = origin();
    let inner = batch(
        BatchPolicy {
            concurrency: 3,
            ..BatchPolicy::default()
        },
        3,
        Unpaced,
        30 * S,
    );
    let mut m = Paced::new(inner, RateThrottle::new(1, S).unwrap(), t0);
    let first = expect_send(m.poll_action());
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 1050 * MS));
    m.handle(t0 + 1050 * MS, Event::Tick);
    let second = expect_send(m.poll_action());
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 2100 * MS));
    m.handle(t0 + 2100 * MS, Event::Tick);
    let third = expect_send(m.poll_action());
    assert_eq!((first.id.item, second.id.item, third.id.item), (0, 1, 2));
    assert!(!m.is_holding());
    for (i, p) in [first, second, third].iter().enumerate() {
        m.handle(t0 + 2200 * MS, Event::Response(answer(p, 200)));
        if i < 2 {
            assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 30 * S));
        }
    }
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::BatchDone {
            succeeded: 3,
            failed: 0
        })
    );
}

// ---------------------------------------------------------------------------
// Servers without hints (SPEC §4.1): the shared slow-down, by class
// ---------------------------------------------------------------------------

/// Two machines sharing one pace; `a` sends first and gets `answer` at
/// 10 ms. Returns `a`'s next send instant (its own backoff) and what `b`
/// is told when it first asks, at the same instant.
fn sharer_after(
    policy: RetryPolicy,
    answer_of: impl Fn(&SendPlan) -> Response<'static>,
) -> (Instant, Action) {
    let t0 = origin();
    let shared = Rc::new(RefCell::new(RateThrottle::new(100, S).unwrap()));
    let mut a = Paced::new(retry_machine(1, policy, 30 * S), Rc::clone(&shared), t0);
    let mut b = Paced::new(retry_machine(2, policy, 30 * S), Rc::clone(&shared), t0);
    let Action::Send(plan) = a.poll_action() else {
        panic!("a sends first")
    };
    let t1 = t0 + 10 * MS;
    a.handle(t1, Event::Response(answer_of(&plan)));
    let Action::SleepUntil(a_next) = a.poll_action() else {
        panic!("a backs off")
    };
    b.handle(t1, Event::Tick);
    (a_next, b.poll_action())
}

#[test]
fn a_bare_429_holds_back_every_sharer_for_the_items_backoff() {
    // No Retry-After: `a` backs off 250 ms (no jitter); `b`, sharing the
    // pace, may not send before then either.
    let (a_next, b_first) = sharer_after(no_jitter(), |p| answer(p, 429));
    assert_eq!(a_next, origin() + 260 * MS);
    assert_eq!(b_first, Action::SleepUntil(a_next));
}

#[test]
fn a_status_the_policy_calls_rate_limited_cools_down_send_and_wait_too() {
    // 420 (a custom "enhance your calm") is rate-limited by this policy:
    // `Paced` decides by the policy's class, not by the number 429.
    let mut policy = no_jitter();
    policy.rate_limited_statuses = StatusSet::of(&[420, 429]);
    let (a_next, b_first) = sharer_after(policy, |p| answer(p, 420));
    assert_eq!(b_first, Action::SleepUntil(a_next));
    // A classifier's verdict (an AWS `Throttling` code on a 400) too.
    let (a_next, b_first) = sharer_after(no_jitter(), |p| {
        let mut r = answer(p, 400);
        r.retry_class = Some(RetryClass::RateLimited);
        r
    });
    assert_eq!(b_first, Action::SleepUntil(a_next));
    // A server error is not a rate limit: `b` goes at once.
    let (_, b_first) = sharer_after(no_jitter(), |p| answer(p, 503));
    assert!(matches!(b_first, Action::Send(_)), "{b_first:?}");
}

#[test]
fn a_bare_429_in_a_batch_holds_back_the_other_items() {
    // Concurrency 2: items 0 and 1 go at once; item 0 gets a bare 429 and
    // backs off 250 ms; item 1's 200 frees a slot, but item 2 waits for the
    // shared cool-down too.
    let t0 = origin();
    let policy = BatchPolicy {
        retry: no_jitter(),
        concurrency: 2,
        ..BatchPolicy::default()
    };
    let mut b = batch(policy, 3, RateThrottle::new(100, S).unwrap(), 30 * S);
    let Action::Send(p0) = b.poll_action() else {
        panic!()
    };
    let Action::Send(p1) = b.poll_action() else {
        panic!()
    };
    let t1 = t0 + 10 * MS;
    b.handle(t1, Event::Response(answer(&p0, 429)));
    b.handle(t1, Event::Response(answer(&p1, 200)));
    assert_eq!(b.poll_action(), Action::SleepUntil(t1 + 250 * MS));
    b.handle(t1 + 250 * MS, Event::Tick);
    let sent: Vec<u32> = std::iter::from_fn(|| match b.poll_action() {
        Action::Send(p) => Some(p.id.item),
        _ => None,
    })
    .collect();
    assert_eq!(
        sent,
        vec![0, 2],
        "the retry and the waiting item, after the cool-down"
    );
}

#[test]
fn an_adaptive_pace_slows_every_sharer_after_bare_429s() {
    // Ten machines at 100 sends/s share an adaptive throttle whose window
    // allows 1000/s; bare 429s cut the rate for all, not only the refused.
    let t0 = origin();
    let shared = Rc::new(RefCell::new(RateThrottle::new(1000, S).unwrap().adaptive()));
    let mut now = t0;
    // One second of successes at 100/s: nothing slows down.
    for i in 0..100u64 {
        assert_eq!(shared.borrow_mut().acquire(now), Ok(()), "send {i}");
        shared
            .borrow_mut()
            .on_answer(Answered::new(now, now, false));
        now += 10 * MS;
    }
    // A burst of rate-limited answers.
    for _ in 0..3 {
        shared.borrow_mut().on_answer(Answered::new(now, now, true));
    }
    let fill = shared.borrow().adaptive_rate().unwrap().fill_rate();
    // Cut from ~100/s, but not below 0.7 × the 90 answers the server
    // accepted in the last second (slots of 100 ms): 63/s.
    assert!((fill - 63.0).abs() < 1e-6, "cut from ~100/s to {fill}");
    // Whatever tokens are left go; then the bucket refuses until the next.
    let next = loop {
        match shared.borrow_mut().acquire(now) {
            Ok(()) => {}
            Err(t) => break t,
        }
    };
    assert!(next > now);
    // A machine that never saw a 429 is held by the cut rate, told why.
    let mut m = Paced::new(
        retry_machine(9, no_jitter(), 30 * S),
        Rc::clone(&shared),
        now,
    );
    assert_eq!(m.poll_action(), Action::SleepUntil(next));
    assert!(matches!(
        shared.borrow().refusal(),
        PaceLimit::Adaptive { .. }
    ));
}
