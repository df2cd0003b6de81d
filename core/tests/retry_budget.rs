//! The shared retry budget through the public API: an outage does not
//! multiply traffic, the bucket's accounting, machines sharing one bucket,
//! batches, the wait before stopping (`backoff_when_budget_empty`), and
//! properties (proptest): the bucket never goes below zero nor above its
//! capacity, and N machines sharing it never retry more than it allows.
#![allow(clippy::field_reassign_with_default)] // policies are spelled as deltas from the default

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use polite_core::budget::{RetryBucket, RetryBudget, RetryCosts};
use polite_core::pace::Unpaced;
use polite_core::policy::Jitter;
use polite_core::{
    Action, BatchMachine, BatchPolicy, Event, Method, Outcome, Reply, RequestId, RequestInfo,
    Response, RetryClass, RetryMachine, RetryPolicy, SplitMix64, TransportErrorKind, aws,
};
use polite_testing::{BatchChecker, Scripted, Simulator, origin};
use proptest::prelude::*;

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

fn gets(n: u64) -> Vec<RequestInfo> {
    (0..n)
        .map(|i| RequestInfo::new(RequestId(i), Method::Get))
        .collect()
}

/// 100 logical requests against a server that is down (always 503), at
/// concurrency 8, with and without a shared bucket: the sends it gets.
fn outage(budget: Option<RetryBucket>) -> (u32, Vec<Option<Outcome>>) {
    let t0 = origin();
    let mut policy = BatchPolicy {
        concurrency: 8,
        ..BatchPolicy::default()
    };
    policy.retry.backoff.cap = Duration::from_millis(500);
    let requests = gets(100);
    let batch = BatchMachine::new(
        policy,
        requests.clone(),
        SplitMix64::new(3),
        Unpaced,
        t0,
        Duration::from_secs(600),
    )
    .unwrap();
    let checker = BatchChecker::new(&policy, &requests, batch.deadline());
    let sim = Simulator::new(t0)
        .server(|_, _| Scripted::status(503))
        .check_batch(checker);
    match budget {
        None => {
            let mut b = batch;
            let trace = sim.run(&mut b).unwrap();
            (trace.sends().count() as u32, b.outcomes().to_vec())
        }
        Some(bucket) => {
            let mut b = batch.with_budget(bucket);
            let trace = sim.run(&mut b).unwrap();
            (trace.sends().count() as u32, b.outcomes().to_vec())
        }
    }
}

#[test]
fn an_outage_does_not_multiply_traffic() {
    // Without a budget every request spends its 4 server-error retries.
    let (plain, _) = outage(None);
    assert_eq!(plain, 100 * 5);
    // With 500 tokens at 14 a retry: 35 retries in all, then every request
    // stops after its first failure.
    let (budgeted, outcomes) = outage(Some(RetryBucket::default()));
    println!("outage: {plain} sends without a budget, {budgeted} with one");
    assert_eq!(budgeted, 100 + 35);
    let refused = outcomes
        .iter()
        .filter(|o| matches!(o, Some(Outcome::RetryBudgetExhausted { .. })))
        .count();
    assert!(refused >= 100 - 35 / 4, "{refused}");
}

#[test]
fn successes_refill_the_bucket() {
    let t0 = origin();
    let bucket = Rc::new(RefCell::new(RetryBucket::new(14, RetryCosts::default())));
    // Each request runs in the simulator (the drive loop), answered at once.
    let run = |statuses: &[u16], id: u64| {
        let request = RequestInfo::new(RequestId(id), Method::Get);
        let m = RetryMachine::new(
            RetryPolicy::default(),
            request,
            SplitMix64::new(id),
            t0,
            Duration::from_secs(60),
        )
        .unwrap()
        .with_budget(Rc::clone(&bucket));
        let answers = statuses
            .iter()
            .map(|&s| Scripted::status(s).after(Duration::ZERO));
        let trace = Simulator::new(t0)
            .replies(answers)
            .check_retry(&RetryPolicy::default(), &request)
            .run(m)
            .unwrap();
        assert_eq!(trace.sends().count(), statuses.len(), "{statuses:?}");
        trace.outcome
    };
    // One retry drains the bucket; its success gives the 14 back.
    assert_eq!(run(&[503, 200], 1), Outcome::Succeeded { status: 200 });
    assert_eq!(bucket.borrow().tokens(), 14);
    assert_eq!(
        run(&[503, 503], 2).to_string(),
        "retry budget exhausted, not retried (last: HTTP 503)"
    );
    assert_eq!(bucket.borrow().tokens(), 0);
    // Empty: no retry at all…
    assert_eq!(
        run(&[500], 3),
        Outcome::RetryBudgetExhausted {
            class: RetryClass::ServerError,
            last: Reply::Status(500)
        }
    );
    // …until first-try successes add 1 each.
    for id in 4..18 {
        assert_eq!(run(&[200], id), Outcome::Succeeded { status: 200 });
    }
    assert_eq!(bucket.borrow().tokens(), 14);
    assert!(matches!(
        run(&[503, 204], 18),
        Outcome::Succeeded { status: 204 }
    ));
}

#[test]
fn a_refusal_can_wait_out_the_backoff_and_a_cancel_ends_the_wait() {
    let t0 = origin();
    let mut policy = RetryPolicy::default();
    policy.backoff.jitter = Jitter::None;
    policy.backoff_when_budget_empty = true;
    let new = || {
        RetryMachine::new(
            policy,
            RequestInfo::new(RequestId(1), Method::Get),
            SplitMix64::new(1),
            t0,
            Duration::from_secs(10),
        )
        .unwrap()
        .with_budget(RetryBucket::new(0, RetryCosts::default()))
    };
    let refused = Outcome::RetryBudgetExhausted {
        class: RetryClass::Transport,
        last: Reply::Transport(TransportErrorKind::Timeout),
    };
    // Waits the 250 ms the retry would have waited, then stops.
    let mut m = new();
    let Action::Send(p) = m.poll_action() else {
        panic!()
    };
    m.handle(t0, Event::TransportError(p.id, TransportErrorKind::Timeout));
    let record = m.take_record().unwrap();
    assert_eq!((record.outcome, record.next), (Some(refused), None));
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 250 * MS));
    m.handle(t0 + 100 * MS, Event::Tick); // early tick: still waiting
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 250 * MS));
    m.handle(t0 + 250 * MS, Event::Tick);
    assert_eq!(m.poll_action(), Action::Stop(refused));
    // A cancel ends the wait at once.
    let mut m = new();
    let Action::Send(p) = m.poll_action() else {
        panic!()
    };
    m.handle(t0, Event::TransportError(p.id, TransportErrorKind::Timeout));
    m.handle(t0 + MS, Event::Cancel);
    assert_eq!(m.poll_action(), Action::Stop(Outcome::Cancelled));
    // A wait that would pass the deadline is not taken: `TimedOut` at once.
    let mut m = new();
    let Action::Send(p) = m.poll_action() else {
        panic!()
    };
    m.handle(
        t0 + 9900 * MS,
        Event::TransportError(p.id, TransportErrorKind::Timeout),
    );
    assert!(matches!(
        m.poll_action(),
        Action::Stop(Outcome::TimedOut { .. })
    ));
}

#[test]
fn batch_restarts_draw_from_the_budget() {
    let t0 = origin();
    let policy = BatchPolicy {
        concurrency: 1,
        max_restarts: 2,
        retry: RetryPolicy {
            max_retries: polite_core::policy::MaxRetries {
                rate_limited: 0,
                server_error: 0,
                transport: 0,
            },
            ..RetryPolicy::default()
        },
    };
    // Room for one restart (cost 5), then none.
    let mut b = BatchMachine::new(
        policy,
        gets(1),
        SplitMix64::new(1),
        Unpaced,
        t0,
        Duration::from_secs(60),
    )
    .unwrap()
    .with_budget(RetryBucket::new(9, RetryCosts::default()));
    let trace = Simulator::new(t0)
        .replies([
            Scripted::status(429).retry_after("1"),
            Scripted::status(429).retry_after("1"),
        ])
        .run(&mut b)
        .unwrap();
    assert_eq!(trace.sends().count(), 2);
    assert_eq!(b.restarts(0), 1);
    assert!(matches!(b.outcomes()[0], Some(Outcome::RateLimited { .. })));
    assert_eq!(b.budget().tokens(), 4);
}

#[test]
fn the_aws_profile_classifies_by_error_code_through_the_simulator() {
    // A 400 whose error code says "Throttling" is retried as throttling
    // (1 s base), costs 5, and its success gives the 5 back.
    let t0 = origin();
    let bucket = Rc::new(RefCell::new(aws::standard_bucket()));
    let mut m = RetryMachine::new(
        aws::standard(),
        RequestInfo::new(RequestId(1), Method::Get),
        polite_testing::Fixed(u64::MAX),
        t0,
        Duration::from_secs(60),
    )
    .unwrap()
    .with_budget(Rc::clone(&bucket));
    let Action::Send(p) = m.poll_action() else {
        panic!()
    };
    let class = aws::error_class(b"ThrottlingException").unwrap();
    m.handle(
        t0,
        Event::Response(Response::new(p.id, 400, UNIX_EPOCH).retry_class(class)),
    );
    let Action::SleepUntil(at) = m.poll_action() else {
        panic!()
    };
    assert!(at - t0 > 999 * MS && at - t0 <= S);
    assert_eq!(bucket.borrow().tokens(), 495);
    m.handle(at, Event::Tick);
    let Action::Send(p) = m.poll_action() else {
        panic!()
    };
    m.handle(at, Event::Response(Response::new(p.id, 200, UNIX_EPOCH)));
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::Succeeded { status: 200 })
    );
    assert_eq!(bucket.borrow().tokens(), 500);
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Op {
    Withdraw(RetryClass, Reply),
    Deposit(Option<u32>),
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        (400u16..600).prop_map(Reply::Status),
        Just(Reply::Transport(TransportErrorKind::Timeout)),
        Just(Reply::Transport(TransportErrorKind::Reset)),
    ]
}

fn class() -> impl Strategy<Value = RetryClass> {
    prop_oneof![
        Just(RetryClass::RateLimited),
        Just(RetryClass::ServerError),
        Just(RetryClass::Transport),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (class(), reply()).prop_map(|(c, r)| Op::Withdraw(c, r)),
        proptest::option::of(0u32..40).prop_map(Op::Deposit),
        Just(Op::Deposit(Some(u32::MAX))),
    ]
}

fn costs() -> impl Strategy<Value = RetryCosts> {
    (0u32..20, 0u32..20, 0u32..20, 0u32..20, 0u32..5).prop_map(|(a, b, c, d, e)| RetryCosts {
        rate_limited: a,
        server_error: b,
        transport: c,
        timeout: d,
        first_try_success: e,
    })
}

/// What one scripted answer is, for the machines sharing a bucket.
#[derive(Clone, Copy, Debug)]
enum Ans {
    Status(u16),
    Transport(TransportErrorKind),
}

fn ans() -> impl Strategy<Value = Ans> {
    prop_oneof![
        3 => prop_oneof![Just(500u16), Just(502), Just(503), Just(429)].prop_map(Ans::Status),
        1 => Just(Ans::Status(200)),
        1 => Just(Ans::Status(404)),
        1 => Just(Ans::Transport(TransportErrorKind::Timeout)),
        1 => Just(Ans::Transport(TransportErrorKind::Refused)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// The bucket never goes below zero (a withdrawal it cannot cover is
    /// refused and takes nothing) nor above its capacity, and its count is
    /// exactly what a plain model says.
    #[test]
    fn bucket_stays_within_zero_and_capacity(
        capacity in 0u32..200,
        start in 0u32..300,
        costs in costs(),
        ops in proptest::collection::vec(op(), 0..200),
    ) {
        let mut b = RetryBucket::new(capacity, costs).with_tokens(start);
        let mut model = i64::from(start.min(capacity));
        for op in ops {
            match op {
                Op::Withdraw(c, r) => {
                    let cost = i64::from(costs.of(c, r));
                    let got = b.withdraw(c, r);
                    if model >= cost {
                        prop_assert_eq!(got, Some(costs.of(c, r)));
                        model -= cost;
                    } else {
                        prop_assert_eq!(got, None);
                    }
                }
                Op::Deposit(last) => {
                    b.deposit(last);
                    let add = i64::from(last.unwrap_or(costs.first_try_success));
                    model = (model + add).min(i64::from(capacity));
                }
            }
            prop_assert_eq!(i64::from(b.tokens()), model);
            prop_assert!(b.tokens() <= capacity, "{} tokens over the capacity {capacity}", b.tokens());
        }
    }

    /// N machines sharing one bucket, answered in any interleaving: the
    /// retries granted never cost more than the bucket held plus what
    /// successes gave back; with no success, no more than it held. Every
    /// refusal ends a request `RetryBudgetExhausted`.
    #[test]
    fn shared_bucket_bounds_retries_across_machines(
        n in 2usize..8,
        capacity in 0u32..120,
        answers in proptest::collection::vec(ans(), 1..120),
        order in proptest::collection::vec(0usize..8, 120),
    ) {
        let t0 = origin();
        let costs = RetryCosts::default();
        let bucket = Rc::new(RefCell::new(RetryBucket::new(capacity, costs)));
        let mut policy = RetryPolicy::default();
        policy.max_retries.rate_limited = 50;
        policy.max_retries.server_error = 50;
        policy.max_retries.transport = 50;
        let mut machines: Vec<_> = (0..n)
            .map(|i| {
                RetryMachine::new(
                    policy,
                    RequestInfo::new(RequestId(i as u64), Method::Get),
                    SplitMix64::new(i as u64),
                    t0,
                    Duration::from_secs(100_000),
                )
                .unwrap()
                .with_budget(Rc::clone(&bucket))
            })
            .collect();
        // Per machine: the send awaiting an answer, the cost of its last
        // retry (from the failures we gave it), its time.
        let mut pending = vec![None; n];
        let mut last_cost: Vec<Option<u32>> = vec![None; n];
        let mut clock: Vec<Instant> = vec![t0; n];
        let mut cost_of_retries = 0u64;
        let mut given_back = 0u64;
        let mut failure: Vec<Option<(RetryClass, Reply)>> = vec![None; n];
        let mut answers = answers.into_iter();
        for &k in &order {
            let i = k % n;
            let m = &mut machines[i];
            // Step the machine to its next send (sleeping when it must).
            if pending[i].is_none() {
                loop {
                    match m.poll_action() {
                        Action::Send(p) => {
                            if let Some((c, r)) = failure[i].take() {
                                // A retry: it was granted its cost.
                                let cost = costs.of(c, r);
                                cost_of_retries += u64::from(cost);
                                last_cost[i] = Some(cost);
                            }
                            pending[i] = Some(p);
                            break;
                        }
                        Action::SleepUntil(t) => {
                            clock[i] = t;
                            m.handle(t, Event::Tick);
                        }
                        Action::Stop(_) => break,
                    }
                }
            }
            let Some(p) = pending[i].take() else { continue };
            let Some(a) = answers.next() else { break };
            let now = clock[i];
            let before = bucket.borrow().tokens();
            match a {
                Ans::Status(s) => {
                    m.handle(now, Event::Response(Response::new(p.id, s, UNIX_EPOCH)));
                    if (200..400).contains(&s) {
                        given_back += u64::from(last_cost[i].unwrap_or(costs.first_try_success));
                    } else if let Some(c) = policy.class_of(s) {
                        failure[i] = Some((c, Reply::Status(s)));
                    }
                }
                Ans::Transport(kind) => {
                    m.handle(now, Event::TransportError(p.id, kind));
                    failure[i] = Some((RetryClass::Transport, Reply::Transport(kind)));
                }
            }
            let after = bucket.borrow().tokens();
            prop_assert!(after <= capacity);
            if let Some(Outcome::RetryBudgetExhausted { class, last }) = m.outcome() {
                // Refused only when the bucket could not cover the cost.
                prop_assert!(before < costs.of(class, last), "refused with {before} tokens");
                failure[i] = None;
            }
        }
        prop_assert!(
            cost_of_retries <= u64::from(capacity) + given_back,
            "{cost_of_retries} spent on retries, capacity {capacity}, {given_back} given back"
        );
        if given_back == 0 {
            prop_assert!(cost_of_retries <= u64::from(capacity));
        }
    }
}
