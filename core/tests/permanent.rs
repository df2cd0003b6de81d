//! Transport errors that repeating cannot cure (SPEC §5): never retried,
//! whatever the replayability, by every machine that shares the kernel
//! (retry, poll, batch); the outcome names the cause.

use std::time::Duration;

use polite_core::pace::Unpaced;
use polite_core::{
    Action, BatchMachine, BatchPolicy, Event, Method, Outcome, PollMachine, PollPolicy, RequestId,
    RequestInfo, RetryMachine, RetryPolicy, SplitMix64, TransportErrorKind as K,
};
use polite_testing::origin;

const PERMANENT: [K; 7] = [
    K::BodyTooLarge,
    K::TooManyRedirects,
    K::RedirectNotReplayable,
    K::Certificate,
    K::InvalidRequest,
    K::HeadTooLarge,
    K::InvalidAnswer,
];
const BLIPS: [K; 7] = [
    K::Refused,
    K::Reset,
    K::Dns,
    K::Timeout,
    K::Aborted,
    K::Tls,
    K::Other,
];

fn requests() -> [RequestInfo; 3] {
    [
        RequestInfo::new(RequestId(1), Method::Get),
        RequestInfo::new(RequestId(2), Method::Put),
        RequestInfo::new(RequestId(3), Method::Post).with_idempotency_key(),
    ]
}

#[test]
fn the_permanent_kinds_are_exactly_these() {
    // Every kind is in one list or the other: a new kind must be placed.
    for k in K::ALL {
        assert!(PERMANENT.contains(&k) != BLIPS.contains(&k), "{k:?}");
    }
    for k in PERMANENT {
        assert!(k.is_permanent(), "{k:?}");
    }
    for k in BLIPS {
        assert!(!k.is_permanent(), "{k:?}");
    }
}

#[test]
fn retry_machine_stops_at_once_with_the_cause() {
    let t0 = origin();
    for kind in PERMANENT {
        for request in requests() {
            let mut m = RetryMachine::new(
                RetryPolicy::default(),
                request,
                SplitMix64::new(7),
                t0,
                Duration::from_secs(30),
            )
            .unwrap();
            let Action::Send(plan) = m.poll_action() else {
                panic!("first action is a send")
            };
            m.handle(
                t0 + Duration::from_millis(5),
                Event::TransportError(plan.id, kind),
            );
            let want = Outcome::Permanent { cause: kind };
            assert_eq!(m.poll_action(), Action::Stop(want), "{kind:?} {request:?}");
            // Sticky, and no second send.
            assert_eq!(m.poll_action(), Action::Stop(want));
            let text = want.to_string();
            assert!(
                text.contains(&kind.to_string()) && text.contains("not retried"),
                "{text}"
            );
        }
    }
}

#[test]
fn a_blip_on_the_same_request_is_still_retried() {
    let t0 = origin();
    for kind in BLIPS {
        let mut m = RetryMachine::new(
            RetryPolicy::default(),
            RequestInfo::new(RequestId(1), Method::Get),
            SplitMix64::new(7),
            t0,
            Duration::from_secs(30),
        )
        .unwrap();
        let Action::Send(plan) = m.poll_action() else {
            panic!("first action is a send")
        };
        m.handle(t0, Event::TransportError(plan.id, kind));
        assert!(matches!(m.poll_action(), Action::SleepUntil(_)), "{kind:?}");
    }
}

#[test]
fn poll_machine_stops_at_once_with_the_cause() {
    let t0 = origin();
    for kind in PERMANENT {
        let mut m = PollMachine::new(
            PollPolicy::default(),
            RequestInfo::new(RequestId(1), Method::Get),
            SplitMix64::new(7),
            t0,
            Duration::from_secs(60),
        )
        .unwrap();
        let Action::Send(plan) = m.poll_action() else {
            panic!("first action is a send")
        };
        m.handle(t0, Event::TransportError(plan.id, kind));
        assert_eq!(
            m.poll_action(),
            Action::Stop(Outcome::Permanent { cause: kind }),
            "{kind:?}"
        );
    }
}

#[test]
fn batch_items_stop_at_once_with_the_cause_and_the_others_go_on() {
    let t0 = origin();
    let mut m = BatchMachine::new(
        BatchPolicy::default(),
        vec![RequestInfo::new(RequestId(1), Method::Get); 2],
        SplitMix64::new(7),
        Unpaced,
        t0,
        Duration::from_secs(30),
    )
    .unwrap();
    let mut plans = Vec::new();
    while let Action::Send(p) = m.poll_action() {
        plans.push(p);
    }
    assert_eq!(plans.len(), 2);
    m.handle(t0, Event::TransportError(plans[0].id, K::BodyTooLarge));
    let answer = polite_core::Response::new(plans[1].id, 200, std::time::UNIX_EPOCH);
    m.handle(t0, Event::Response(answer));
    assert!(matches!(m.poll_action(), Action::Stop(_)));
    assert_eq!(
        m.outcomes(),
        [
            Some(Outcome::Permanent {
                cause: K::BodyTooLarge
            }),
            Some(Outcome::Succeeded { status: 200 })
        ]
    );
}

/// The action after the machine's first send fails with `kind` at `t0`.
fn after_first_send_fails(
    m: &mut impl polite_core::Machine,
    t0: std::time::Instant,
    kind: K,
) -> Action {
    let Action::Send(plan) = m.poll_action() else {
        panic!("first action is a send")
    };
    m.handle(t0, Event::TransportError(plan.id, kind));
    m.poll_action()
}

/// `RetryPolicy::retried_transport`: a kind the user leaves out is
/// treated like a permanent one — one send, `Permanent { cause }` — by the
/// retry and poll machines, while the kinds left in are still retried; a
/// permanent kind put in the set is still never retried.
#[test]
fn kinds_left_out_of_the_policy_are_not_retried() {
    use polite_core::policy::TransportKinds;
    let t0 = origin();
    let get = || RequestInfo::new(RequestId(1), Method::Get);
    let retry = RetryPolicy {
        retried_transport: TransportKinds::RETRYABLE
            .without(K::Timeout)
            .with(K::Certificate),
        ..RetryPolicy::default()
    };
    let poll = PollPolicy {
        retry,
        ..PollPolicy::default()
    };
    for kind in [K::Timeout, K::Certificate, K::Reset] {
        let mut m = RetryMachine::new(
            retry,
            get(),
            SplitMix64::new(7),
            t0,
            Duration::from_secs(30),
        )
        .unwrap();
        let mut p =
            PollMachine::new(poll, get(), SplitMix64::new(7), t0, Duration::from_secs(60)).unwrap();
        for action in [
            after_first_send_fails(&mut m, t0, kind),
            after_first_send_fails(&mut p, t0, kind),
        ] {
            if kind == K::Reset {
                assert!(matches!(action, Action::SleepUntil(_)), "{action:?}");
            } else {
                assert_eq!(action, Action::Stop(Outcome::Permanent { cause: kind }));
            }
        }
    }
    // Nothing retried at all.
    let none = RetryPolicy {
        retried_transport: TransportKinds::NONE,
        ..RetryPolicy::default()
    };
    for kind in BLIPS {
        let mut m = RetryMachine::new(none, get(), SplitMix64::new(7), t0, Duration::from_secs(30))
            .unwrap();
        assert_eq!(
            after_first_send_fails(&mut m, t0, kind),
            Action::Stop(Outcome::Permanent { cause: kind })
        );
    }
}
