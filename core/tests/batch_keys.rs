//! A batch whose items go to several origins paces each item by its own
//! key (SPEC §4.2): a `PaceSet` addressed by each request's `pace_slot`.
//! A 429 with `Retry-After` from origin A cools A only; B's items go at
//! once (no head-of-line blocking across keys); a key that cannot grant
//! before the deadline starves its own items only, naming its own limit;
//! a quota learnt from A's answers paces A only; retries draw from their
//! own key's budget. Virtual time: the test is the clock.

use std::time::{Duration, Instant, UNIX_EPOCH};

use polite_core::budget::{RetryBucket, RetryCosts};
use polite_core::pace::PaceLimit;
use polite_core::{
    Action, BatchMachine, BatchPolicy, Event, Machine, Method, Outcome, RateThrottle, RequestId,
    RequestInfo, Response, SendPlan, SplitMix64,
};
use polite_testing::origin;

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

/// Requests with these pace slots, in order.
fn requests(slots: &[u32]) -> Vec<RequestInfo> {
    slots
        .iter()
        .zip(0..)
        .map(|(&s, i)| RequestInfo::new(RequestId(i), Method::Get).with_pace_slot(s))
        .collect()
}

/// Every action up to the next wait: the sends, and the wait.
fn sends<M: Machine>(m: &mut M) -> (Vec<SendPlan>, Action) {
    let mut out = Vec::new();
    loop {
        match m.poll_action() {
            Action::Send(p) => out.push(p),
            other => return (out, other),
        }
    }
}

fn items(plans: &[SendPlan]) -> Vec<u32> {
    plans.iter().map(|p| p.id.item).collect()
}

fn ok(plan: &SendPlan) -> Response<'static> {
    Response::new(plan.id, 200, UNIX_EPOCH)
}

fn throttle() -> RateThrottle {
    RateThrottle::new(100, S).unwrap()
}

#[test]
fn a_cool_down_of_one_key_never_holds_back_another() {
    let t0 = origin();
    // A A B B B B: concurrency 2, so A's two items go first.
    let policy = BatchPolicy {
        concurrency: 2,
        ..BatchPolicy::default()
    };
    let mut b = BatchMachine::new(
        policy,
        requests(&[0, 0, 1, 1, 1, 1]),
        SplitMix64::new(7),
        [throttle(), throttle()],
        t0,
        60 * S,
    )
    .unwrap();
    let (first, _) = sends(&mut b);
    assert_eq!(items(&first), [0, 1]);
    // A answers both with 429 + Retry-After: 5.
    let t1 = t0 + 10 * MS;
    for p in &first {
        b.handle(
            t1,
            Event::Response(Response::new(p.id, 429, UNIX_EPOCH).retry_after(b"5")),
        );
    }
    // B's items go at once, two by two, while A cools down.
    let mut now = t1;
    let mut b_items = Vec::new();
    loop {
        let (plans, wait) = sends(&mut b);
        assert!(plans.iter().all(|p| p.id.item >= 2), "{plans:?} at {now:?}");
        if plans.is_empty() {
            // Nothing of B left: the batch waits for A's time.
            assert_eq!(wait, Action::SleepUntil(t1 + 5 * S));
            break;
        }
        now += 20 * MS;
        for p in &plans {
            b_items.push(p.id.item);
            b.handle(now, Event::Response(ok(p)));
        }
    }
    assert_eq!(b_items, [2, 3, 4, 5]);
    assert!(now < t0 + S, "B finished at {:?}", now - t0);
    // At A's time, A's items are retried.
    let (retries, _) = sends(&mut b);
    assert!(retries.is_empty());
    b.handle(t1 + 5 * S, Event::Tick);
    let (retries, _) = sends(&mut b);
    assert_eq!(items(&retries), [0, 1]);
    for p in &retries {
        b.handle(t1 + 5 * S + 10 * MS, Event::Response(ok(p)));
    }
    assert_eq!(
        b.poll_action(),
        Action::Stop(Outcome::BatchDone {
            succeeded: 6,
            failed: 0
        })
    );
}

#[test]
fn a_starving_key_ends_its_own_items_only() {
    let t0 = origin();
    // A's pace is cooling down until long after the deadline.
    let mut a = throttle();
    a.cool_down(t0 + 100 * S);
    let mut b = BatchMachine::new(
        BatchPolicy::default(),
        requests(&[0, 1, 0, 1]),
        SplitMix64::new(1),
        vec![a, throttle()],
        t0,
        30 * S,
    )
    .unwrap();
    let (plans, _) = sends(&mut b);
    assert_eq!(items(&plans), [1, 3]);
    let starved = Outcome::Starved {
        until: t0 + 100 * S,
        by: PaceLimit::CoolDown,
    };
    assert_eq!(b.outcomes()[0], Some(starved));
    assert_eq!(b.outcomes()[2], Some(starved));
    for p in &plans {
        b.handle(t0 + 10 * MS, Event::Response(ok(p)));
    }
    assert_eq!(b.outcomes()[1], Some(Outcome::Succeeded { status: 200 }));
    assert_eq!(b.outcomes()[3], Some(Outcome::Succeeded { status: 200 }));
    // The batch says what starved it.
    assert_eq!(b.poll_action(), Action::Stop(starved));
}

#[test]
fn a_quota_learnt_from_one_key_paces_that_key_only() {
    let t0 = origin();
    let learning = || {
        RateThrottle::learning(1000)
            .unwrap()
            .with_margin(Duration::ZERO)
    };
    let policy = BatchPolicy {
        concurrency: 1,
        ..BatchPolicy::default()
    };
    let mut b = BatchMachine::new(
        policy,
        requests(&[0, 0, 1, 1]),
        SplitMix64::new(1),
        [learning(), learning()],
        t0,
        120 * S,
    )
    .unwrap();
    let (plans, _) = sends(&mut b);
    assert_eq!(items(&plans), [0]);
    // A says: 1 request per 60 s.
    let t1 = t0 + 10 * MS;
    b.handle(
        t1,
        Event::Response(ok(&plans[0]).header("RateLimit-Policy", br#""a";q=1;w=60"#)),
    );
    // A's next item waits for A's window; B's go meanwhile.
    let (plans, _) = sends(&mut b);
    assert_eq!(items(&plans), [2]);
    b.handle(t1 + 10 * MS, Event::Response(ok(&plans[0])));
    let (plans, wait) = sends(&mut b);
    assert_eq!(items(&plans), [3]);
    b.handle(t1 + 20 * MS, Event::Response(ok(&plans[0])));
    let (plans, wait2) = sends(&mut b);
    assert!(plans.is_empty(), "{plans:?} after {wait:?}");
    assert_eq!(wait2, Action::SleepUntil(t0 + 60 * S));
}

#[test]
fn retries_draw_from_their_own_keys_budget() {
    let t0 = origin();
    // Room for one server-error retry per key (cost 14).
    let budgets = vec![RetryBucket::new(14, RetryCosts::default()); 2];
    let mut b = BatchMachine::new(
        BatchPolicy::default(),
        requests(&[0, 0, 1]),
        SplitMix64::new(1),
        [throttle(), throttle()],
        t0,
        30 * S,
    )
    .unwrap()
    .with_budget(budgets);
    let (plans, _) = sends(&mut b);
    assert_eq!(items(&plans), [0, 1, 2]);
    for p in &plans {
        b.handle(
            t0 + 10 * MS,
            Event::Response(Response::new(p.id, 503, UNIX_EPOCH)),
        );
    }
    // A's budget paid for item 0's retry only; B's for item 2's.
    assert!(b.outcomes()[0].is_none());
    assert!(matches!(
        b.outcomes()[1],
        Some(Outcome::RetryBudgetExhausted { .. })
    ));
    assert!(b.outcomes()[2].is_none());
    assert_eq!(
        b.budget()
            .iter()
            .map(RetryBucket::tokens)
            .collect::<Vec<_>>(),
        [0, 0]
    );
}

#[test]
fn a_single_pace_ignores_the_slots() {
    // One pace for every slot: the batch is one key, as before sets existed
    // (a refusal holds every item, whatever its slot).
    let t0 = origin();
    let policy = BatchPolicy {
        concurrency: 4,
        ..BatchPolicy::default()
    };
    let mut b = BatchMachine::new(
        policy,
        requests(&[0, 1, 2]),
        SplitMix64::new(1),
        RateThrottle::new(1, S).unwrap(),
        t0,
        30 * S,
    )
    .unwrap();
    let (plans, wait) = sends(&mut b);
    assert_eq!(items(&plans), [0]);
    assert_eq!(wait, Action::SleepUntil(t0 + 1050 * MS));
}

#[test]
fn a_streaming_keyed_batch_pulls_past_a_cooling_key() {
    // Streaming: items of a key that is refused do not count as waiting to
    // start, so the batch takes more items, up to its window.
    let t0 = origin();
    let policy = BatchPolicy {
        concurrency: 1,
        ..BatchPolicy::default()
    };
    let mut a = throttle();
    a.cool_down(t0 + 5 * S);
    let mut b =
        BatchMachine::streaming(policy, SplitMix64::new(1), [a, throttle()], t0, 30 * S).unwrap();
    let get = |i: u64, slot: u32| RequestInfo::new(RequestId(i), Method::Get).with_pace_slot(slot);
    assert_eq!(b.wants_items(), 1);
    b.push_item(get(0, 0));
    assert_eq!(b.wants_items(), 0);
    // A is cooling: item 0 waits, and no longer counts as about to start.
    assert_eq!(b.poll_action(), Action::SleepUntil(t0 + 5 * S));
    assert_eq!(b.wants_items(), 1);
    b.push_item(get(1, 1));
    let Action::Send(p) = b.poll_action() else {
        panic!("B's item should go")
    };
    assert_eq!(p.id.item, 1);
    let at: Instant = t0 + 10 * MS;
    b.handle(at, Event::Response(ok(&p)));
    assert_eq!(
        b.take_ended(),
        Some((1, Outcome::Succeeded { status: 200 }))
    );
}
