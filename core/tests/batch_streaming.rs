//! A streaming batch (SPEC §4.4) past items that hang: an item whose
//! attempt is never answered (until the batch's deadline) must not stop
//! the batch from pulling and sending new items while concurrency slots
//! are free. Memory stays bounded by the items not yet ended
//! ([`BatchMachine::STREAM_WINDOW`] × concurrency), not by how far the
//! batch got past the hanging one.
//!
//! The driver below feeds items as the batch asks (as the drive loop
//! does), answers every send at once except those of the hanging items,
//! and checks at every step: at most `concurrency` sends in flight, at
//! most a window of items held (fed and not yet handed out).

use std::collections::HashSet;
use std::time::{Duration, UNIX_EPOCH};

use polite_core::pace::{PaceSet, Unpaced};
use polite_core::{
    Action, BatchMachine, BatchPolicy, Event, Machine, Method, Outcome, RequestId, RequestInfo,
    Response, SplitMix64,
};
use polite_testing::origin;
use proptest::prelude::*;

const TIMEOUT: Duration = Duration::from_secs(600);

/// What a run saw.
#[derive(Debug)]
struct Run {
    /// Items in the order of their first send.
    sent: Vec<u32>,
    /// Each item's outcome as handed out.
    outcomes: Vec<Option<Outcome>>,
    /// Whether each item was first sent before any time passed (while
    /// the hanging items were in flight).
    sent_at_t0: Vec<bool>,
    outcome: Outcome,
}

/// Runs a streaming batch of `n` items at `concurrency` over `pace`:
/// items in `hanging` are never answered; every other send is answered
/// at once with `status(item)`. Time stands still until nothing but the
/// hanging items is left; then it jumps to the deadline.
fn run<P: PaceSet>(
    concurrency: u32,
    n: u32,
    hanging: &HashSet<u32>,
    pace: P,
    status: impl Fn(u32) -> u16,
) -> Result<Run, String> {
    let t0 = origin();
    let policy = BatchPolicy {
        concurrency,
        ..BatchPolicy::default()
    };
    let mut b = BatchMachine::streaming(policy, SplitMix64::new(7), pace, t0, TIMEOUT).unwrap();
    let window = (BatchMachine::<SplitMix64, P>::STREAM_WINDOW * concurrency) as usize;
    let mut fed = 0u32;
    let mut handed = 0usize;
    let mut in_flight = 0u32;
    let mut now = t0;
    let mut sent = Vec::new();
    let mut sent_at_t0 = vec![false; n as usize];
    let mut outcomes: Vec<Option<Outcome>> = vec![None; n as usize];
    let item_slot = |i: u32| i % 2;
    for _step in 0..100_000 {
        while fed < n && b.wants_items() > 0 {
            b.push_item(
                RequestInfo::new(RequestId(u64::from(fed)), Method::Get)
                    .with_pace_slot(item_slot(fed)),
            );
            fed += 1;
        }
        if fed == n {
            b.close_items();
        }
        let held = fed as usize - handed;
        if held > window {
            return Err(format!("{held} items held, window {window}"));
        }
        let action = b.poll_action();
        gather(&mut b, &mut outcomes, &mut handed)?;
        match action {
            Action::Send(plan) => {
                in_flight += 1;
                if in_flight > concurrency {
                    return Err(format!(
                        "{in_flight} in flight at concurrency {concurrency}"
                    ));
                }
                let k = plan.id.item;
                if !sent.contains(&k) {
                    sent.push(k);
                    sent_at_t0[k as usize] = now == t0;
                }
                if !hanging.contains(&k) {
                    in_flight -= 1;
                    let r = Response::new(plan.id, status(k), UNIX_EPOCH);
                    b.handle(now, Event::Response(r));
                    gather(&mut b, &mut outcomes, &mut handed)?;
                }
            }
            Action::SleepUntil(t) => {
                // Items still to feed while the batch wants them: feed first.
                if fed < n && b.wants_items() > 0 {
                    continue;
                }
                if t <= now {
                    return Err(format!("asleep until {t:?}, not after now"));
                }
                now = t;
                b.handle(now, Event::Tick);
                gather(&mut b, &mut outcomes, &mut handed)?;
                if now >= b.deadline() {
                    in_flight = 0;
                }
            }
            Action::Stop(outcome) => {
                return Ok(Run {
                    sent,
                    outcomes,
                    sent_at_t0,
                    outcome,
                });
            }
        }
    }
    Err("no stop after 100000 steps".into())
}

/// Hands out what ended into `outcomes`, each item once.
fn gather<P: PaceSet>(
    b: &mut BatchMachine<SplitMix64, P>,
    outcomes: &mut [Option<Outcome>],
    handed: &mut usize,
) -> Result<(), String> {
    while let Some((item, o)) = b.take_ended() {
        let slot = &mut outcomes[item as usize];
        if slot.is_some() {
            return Err(format!("item {item} handed out twice"));
        }
        *slot = Some(o);
        *handed += 1;
    }
    Ok(())
}

/// The user trial's case: concurrency 2, item 0 sent and never answered,
/// every other item answered at once. Every other item is sent (and ends)
/// while item 0 is still in flight; item 0 times out at the deadline.
#[test]
fn one_hanging_item_does_not_stop_the_pulling() {
    let n = 100;
    let hanging: HashSet<u32> = [0].into();
    let r = run(2, n, &hanging, Unpaced, |_| 200).unwrap();
    // Every item, past the window of 4 × 2 = 8 items too, is sent before
    // any time passed (item 0 still in flight).
    assert_eq!(BatchMachine::<SplitMix64, Unpaced>::STREAM_WINDOW * 2, 8);
    for k in 1..n {
        assert!(
            r.sent_at_t0[k as usize],
            "item {k} not sent while item 0 hung"
        );
    }
    assert_eq!(r.sent.len(), n as usize);
    assert_eq!(r.outcomes[0], Some(Outcome::TimedOut { needed: None }));
    for k in 1..n {
        assert_eq!(
            r.outcomes[k as usize],
            Some(Outcome::Succeeded { status: 200 })
        );
    }
    assert_eq!(r.outcome, Outcome::TimedOut { needed: None });
}

/// The same with keys (each item paced by its own key's pace).
#[test]
fn one_hanging_item_does_not_stop_a_keyed_batch() {
    let n = 100;
    let hanging: HashSet<u32> = [0].into();
    let r = run(2, n, &hanging, [Unpaced, Unpaced], |_| 200).unwrap();
    for k in 1..n {
        assert!(
            r.sent_at_t0[k as usize],
            "item {k} not sent while item 0 hung"
        );
        assert_eq!(
            r.outcomes[k as usize],
            Some(Outcome::Succeeded { status: 200 })
        );
    }
    assert_eq!(r.outcomes[0], Some(Outcome::TimedOut { needed: None }));
}

fn setup() -> impl Strategy<Value = (u32, u32, HashSet<u32>, bool, u64)> {
    (1u32..6, 0u32..80, any::<bool>(), any::<u64>()).prop_flat_map(|(c, n, keyed, seed)| {
        // Fewer hanging items than the concurrency: a slot stays free.
        let hanging = proptest::collection::hash_set(0..n.max(1), 0..c as usize)
            .prop_map(move |h| h.into_iter().filter(|&k| k < n).collect::<HashSet<u32>>());
        (Just(c), Just(n), hanging, Just(keyed), Just(seed))
    })
}

proptest! {
    /// Whatever items hang (fewer than the concurrency), every other item
    /// is sent and ends before any time passes, with at most
    /// `concurrency` in flight and at most a window of items held; the
    /// hanging ones time out at the deadline.
    #[test]
    fn hanging_items_hold_back_no_other_item((c, n, hanging, keyed, seed) in setup()) {
        // 404s end an item as surely as 200s: a mix, by a seeded draw.
        let status = |k: u32| {
            if (u64::from(k).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seed) % 3 == 0 { 404 } else { 200 }
        };
        let r = if keyed {
            run(c, n, &hanging, [Unpaced, Unpaced], status)
        } else {
            run(c, n, &hanging, Unpaced, status)
        };
        let r = r.map_err(TestCaseError::fail)?;
        prop_assert_eq!(r.sent.len(), n as usize);
        for k in 0..n {
            let o = r.outcomes[k as usize];
            if hanging.contains(&k) {
                prop_assert_eq!(o, Some(Outcome::TimedOut { needed: None }));
            } else {
                prop_assert!(r.sent_at_t0[k as usize], "item {} sent only after time passed", k);
                prop_assert!(o.is_some() && o != Some(Outcome::TimedOut { needed: None }), "item {}: {:?}", k, o);
            }
        }
    }
}

/// A streaming batch whose input has not ended when the deadline comes
/// ends `TimedOut`, even with no item in progress then (one fed from a
/// stream may be waiting for its next request): the deadline cut the
/// input short, which `BatchDone` would hide. The items that did end keep
/// their outcomes. Both machines: a single-key and a keyed batch.
#[test]
fn the_deadline_before_the_input_ends_is_a_timeout_even_with_nothing_in_progress() {
    fn check<P: PaceSet>(pace: P) {
        let t0 = origin();
        let timeout = Duration::from_secs(10);
        let mut b = BatchMachine::streaming(
            BatchPolicy::default(),
            SplitMix64::new(7),
            pace,
            t0,
            timeout,
        )
        .unwrap();
        b.push_item(RequestInfo::new(RequestId(1), Method::Get));
        let Action::Send(plan) = b.poll_action() else {
            panic!("the item goes at once");
        };
        b.handle(t0, Event::Response(Response::new(plan.id, 200, UNIX_EPOCH)));
        assert_eq!(
            b.take_ended(),
            Some((0, Outcome::Succeeded { status: 200 }))
        );
        // Nothing in progress, the input still open: the batch waits for
        // it until the deadline, and no longer.
        assert_eq!(b.poll_action(), Action::SleepUntil(t0 + timeout));
        b.handle(t0 + timeout, Event::Tick);
        assert_eq!(
            b.poll_action(),
            Action::Stop(Outcome::TimedOut { needed: None })
        );
        assert_eq!(b.take_ended(), None);
    }
    check(Unpaced);
    check(vec![
        polite_core::RateThrottle::new(
            1000,
            Duration::from_secs(1)
        )
        .unwrap();
        2
    ]);
}

/// The input's end before the deadline is a `BatchDone`, as before.
#[test]
fn the_input_ending_before_the_deadline_is_a_batch_done() {
    let t0 = origin();
    let mut b = BatchMachine::streaming(
        BatchPolicy::default(),
        SplitMix64::new(7),
        Unpaced,
        t0,
        Duration::from_secs(10),
    )
    .unwrap();
    b.push_item(RequestInfo::new(RequestId(1), Method::Get));
    let Action::Send(plan) = b.poll_action() else {
        panic!("the item goes at once");
    };
    b.handle(t0, Event::Response(Response::new(plan.id, 200, UNIX_EPOCH)));
    b.close_items();
    assert_eq!(
        b.poll_action(),
        Action::Stop(Outcome::BatchDone {
            succeeded: 1,
            failed: 0
        })
    );
}
