//! Scenario tests for `RetryMachine` through the public API, in virtual time.
#![allow(clippy::field_reassign_with_default)] // policies are spelled as deltas from the default

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use polite_core::policy::{Jitter, PolicyError, StatusSet};
use polite_core::record::{DelaySource, RetryAfterNote};
use polite_core::retry_after::RetryAfterError;
use polite_core::{
    Action, Event, Method, Outcome, Reply, RequestId, RequestInfo, Response, RetryClass,
    RetryMachine, RetryPolicy, SendPlan, SplitMix64, TransportErrorKind,
};
use polite_testing::{Fixed, Scripted, Simulator, origin};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

fn get() -> RequestInfo {
    RequestInfo::new(RequestId(1), Method::Get)
}

fn no_jitter() -> RetryPolicy {
    let mut p = RetryPolicy::default();
    p.backoff.jitter = Jitter::None;
    p
}

fn machine(
    policy: RetryPolicy,
    request: RequestInfo,
    t0: Instant,
    timeout: Duration,
) -> RetryMachine<SplitMix64> {
    RetryMachine::new(policy, request, SplitMix64::new(1), t0, timeout).unwrap()
}

fn send<R: polite_core::rand_core::Rng>(m: &mut RetryMachine<R>) -> SendPlan {
    match m.poll_action() {
        Action::Send(p) => p,
        other => panic!("expected a send, got {other:?}"),
    }
}

fn answer(status: u16, plan: &SendPlan) -> Response<'static> {
    Response::new(
        plan.id,
        status,
        UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    )
}

#[test]
fn scripted_503_429_200_gives_the_hand_computed_delays() {
    let t0 = origin();
    let policy = no_jitter();
    let trace = Simulator::new(t0)
        .replies([
            Scripted::status(503),
            Scripted::status(429).retry_after("2"),
            Scripted::status(200),
        ])
        .check_retry(&policy, &get())
        .run(machine(policy, get(), t0, 30 * S))
        .unwrap();
    assert_eq!(trace.outcome, Outcome::Succeeded { status: 200 });
    // Latency 10 ms each. 503 at 10 ms → backoff 250 ms (server class, first
    // retry) → send at 260 ms. 429 at 270 ms → max(250 ms backoff, 2 s) → send
    // at 2270 ms. 200 at 2280 ms.
    let at: Vec<Duration> = trace.sends().map(|(t, _)| t - t0).collect();
    assert_eq!(at, vec![Duration::ZERO, 260 * MS, 2270 * MS]);
    assert_eq!(trace.ended_at - t0, 2280 * MS);
    let planned: Vec<_> = trace
        .records
        .iter()
        .filter_map(|r| r.next.map(|n| (n.delay, n.source)))
        .collect();
    assert_eq!(
        planned,
        vec![
            (250 * MS, DelaySource::Backoff),
            (2 * S, DelaySource::RetryAfter)
        ]
    );
    assert_eq!(trace.records.len(), 3);
    assert_eq!(
        trace.records[2].outcome,
        Some(Outcome::Succeeded { status: 200 })
    );
    assert_eq!(trace.records[1].retry_after, RetryAfterNote::Valid(2 * S));
    assert_eq!(trace.records[1].class, Some(RetryClass::RateLimited));
}

#[test]
fn backoff_doubles_to_the_cap_per_class() {
    let t0 = origin();
    let mut policy = no_jitter();
    policy.max_retries.server_error = 6;
    let trace = Simulator::new(t0)
        .replies((0..7).map(|_| Scripted::status(502).after(Duration::ZERO)))
        .check_retry(&policy, &get())
        .run(machine(policy, get(), t0, 60 * S))
        .unwrap();
    assert_eq!(
        trace.gaps(),
        vec![250 * MS, 500 * MS, S, 2 * S, 4 * S, 4 * S]
    );
    assert_eq!(
        trace.outcome,
        Outcome::RetriesExhausted {
            class: RetryClass::ServerError,
            last: Reply::Status(502)
        }
    );
}

#[test]
fn each_class_counts_its_own_retries() {
    let t0 = origin();
    let mut policy = no_jitter();
    policy.max_retries = polite_core::policy::MaxRetries {
        rate_limited: 1,
        server_error: 1,
        transport: 1,
    };
    // One of each class is retried; the second 503 exhausts the server class.
    let trace = Simulator::new(t0)
        .replies([
            Scripted::status(429),
            Scripted::status(503),
            Scripted::transport(TransportErrorKind::Reset),
            Scripted::status(503),
        ])
        .check_retry(&policy, &get())
        .run(machine(policy, get(), t0, 60 * S))
        .unwrap();
    assert_eq!(trace.sends().count(), 4);
    // Each class's first retry waits the base delay: the counters are separate.
    assert_eq!(trace.gaps(), vec![260 * MS, 260 * MS, 260 * MS]);
    assert!(matches!(
        trace.outcome,
        Outcome::RetriesExhausted {
            class: RetryClass::ServerError,
            ..
        }
    ));
}

/// SPEC §2.2, reproduced by configuration.
fn table_policy() -> RetryPolicy {
    let mut p = RetryPolicy::default();
    p.rate_limited_statuses = StatusSet::of(&[429]);
    p.server_error_statuses = StatusSet::of(&[503]);
    p.max_retries.rate_limited = 3;
    p.max_retries.server_error = 3;
    p.backoff.base = S;
    p.backoff.multiplier = 2;
    p.backoff.cap = Duration::from_secs(3600);
    p.backoff.jitter = Jitter::Equal;
    p.retry_after.auto_wait_cap = 30 * S;
    p
}

/// Drives `index` earlier failures of the same status, then the row's answer;
/// returns the action and the instant the answer arrived.
fn table_row(
    status: u16,
    replayable: bool,
    index: u32,
    server: Option<&'static [u8]>,
    u: u64,
) -> (Action, Instant) {
    let t0 = origin();
    let req = if replayable {
        get()
    } else {
        RequestInfo::new(RequestId(1), Method::Post)
    };
    let mut m =
        RetryMachine::new(table_policy(), req, Fixed(u), t0, Duration::from_secs(3600)).unwrap();
    let mut now = t0;
    for _ in 0..index {
        let p = send(&mut m);
        m.handle(now, Event::Response(answer(status, &p)));
        let Action::SleepUntil(t) = m.poll_action() else {
            panic!("earlier failure did not retry")
        };
        now = t;
        m.handle(now, Event::Tick);
    }
    let p = send(&mut m);
    let mut r = answer(status, &p);
    r.retry_after = server;
    m.handle(now, Event::Response(r));
    (m.poll_action(), now)
}

#[test]
fn spec_2_2_reference_decision_table() {
    // 503 | yes | 0 | none | 0 | retry after 0.5 s
    let (a, t) = table_row(503, true, 0, None, 0);
    assert_eq!(a, Action::SleepUntil(t + 500 * MS));
    // 429 | yes | 1 | 10 s | 1 | retry after 10 s
    let (a, t) = table_row(429, true, 1, Some(b"10"), u64::MAX);
    assert_eq!(a, Action::SleepUntil(t + 10 * S));
    // 429 | yes | 0 | 60 s | 0 | deferred (over the cap; do not retry)
    let (a, t) = table_row(429, true, 0, Some(b"60"), 0);
    assert_eq!(
        a,
        Action::Stop(Outcome::RateLimited {
            retry_at: Some(t + 60 * S)
        })
    );
    // 503 | yes | 3 | none | 1 | stop (budget spent)
    let (a, _) = table_row(503, true, 3, None, u64::MAX);
    assert_eq!(
        a,
        Action::Stop(Outcome::RetriesExhausted {
            class: RetryClass::ServerError,
            last: Reply::Status(503)
        })
    );
    // 503 | no | 0 | none | 1 | stop (not replayable)
    let (a, _) = table_row(503, false, 0, None, u64::MAX);
    assert_eq!(
        a,
        Action::Stop(Outcome::NotReplayable {
            last: Reply::Status(503)
        })
    );
}

#[test]
fn spec_2_2_policy_only_retries_429_and_503() {
    for (status, retried) in [
        (429, true),
        (503, true),
        (500, false),
        (502, false),
        (504, false),
    ] {
        let (a, _) = table_row(status, true, 0, None, 0);
        assert_eq!(matches!(a, Action::SleepUntil(_)), retried, "{status}");
        if !retried {
            assert_eq!(a, Action::Stop(Outcome::NotRetryable { status }));
        }
    }
}

/// A server delay past the automatic wait cap stops the request
/// `RateLimited` at once, without resending: on the default policy's 429,
/// and on statuses a policy adds to a class (SPEC §2.1: any status a
/// policy marks retryable).
#[test]
fn retry_after_over_the_cap_stops_rate_limited_without_resending() {
    let t0 = origin();
    for (policy, statuses) in [
        (RetryPolicy::default(), &[429][..]),
        (widened(), &[429, 420, 599][..]),
    ] {
        for &status in statuses {
            for hostile in ["120", "86400"] {
                let trace = Simulator::new(t0)
                    .replies([
                        Scripted::status(status).retry_after(hostile),
                        Scripted::status(200),
                    ])
                    .check_retry(&policy, &get())
                    .run(machine(policy, get(), t0, Duration::from_secs(3600)))
                    .unwrap();
                let secs: u64 = hostile.parse().unwrap();
                assert_eq!(
                    trace.outcome,
                    Outcome::RateLimited {
                        retry_at: Some(t0 + 10 * MS + Duration::from_secs(secs))
                    },
                    "{status} {hostile}"
                );
                assert_eq!(trace.sends().count(), 1, "{status} {hostile}");
                // It stops at once, not at the deadline.
                assert_eq!(trace.ended_at, t0 + 10 * MS, "{status} {hostile}");
                assert_eq!(
                    trace.records[0].retry_after,
                    RetryAfterNote::Valid(Duration::from_secs(secs)),
                    "{status} {hostile}"
                );
            }
        }
    }
}

#[test]
fn rate_limit_budget_spent_is_rate_limited() {
    let t0 = origin();
    let policy = no_jitter();
    let trace = Simulator::new(t0)
        .replies((0..4).map(|_| Scripted::status(429).retry_after("1")))
        .check_retry(&policy, &get())
        .run(machine(policy, get(), t0, 60 * S))
        .unwrap();
    assert_eq!(trace.sends().count(), 4);
    assert_eq!(
        trace.outcome,
        Outcome::RateLimited {
            retry_at: Some(trace.ended_at + S)
        }
    );
}

#[test]
fn non_replayable_post_is_never_resent() {
    let t0 = origin();
    let policy = RetryPolicy::default();
    let post = RequestInfo::new(RequestId(2), Method::Post);
    for first in [
        Scripted::status(503),
        Scripted::status(429).retry_after("1"),
        Scripted::transport(TransportErrorKind::Timeout),
        Scripted::transport(TransportErrorKind::Refused),
    ] {
        let trace = Simulator::new(t0)
            .replies([first.clone(), Scripted::status(200)])
            .check_retry(&policy, &post)
            .run(machine(policy, post, t0, 60 * S))
            .unwrap();
        assert_eq!(trace.sends().count(), 1, "{first:?}");
        assert!(
            matches!(trace.outcome, Outcome::NotReplayable { .. }),
            "{first:?}: {:?}",
            trace.outcome
        );
    }
    // With an idempotency key the same POST is retried.
    let keyed = post.with_idempotency_key();
    let trace = Simulator::new(t0)
        .replies([Scripted::status(503), Scripted::status(201)])
        .run(machine(policy, keyed, t0, 60 * S))
        .unwrap();
    assert_eq!(trace.outcome, Outcome::Succeeded { status: 201 });
    // A GET whose body is a one-shot stream is not.
    let stream = get().with_one_shot_body();
    let trace = Simulator::new(t0)
        .replies([Scripted::status(503), Scripted::status(200)])
        .run(machine(policy, stream, t0, 60 * S))
        .unwrap();
    assert_eq!(trace.sends().count(), 1);
}

#[test]
fn cancel_during_a_sleep_stops_at_once() {
    let t0 = origin();
    let mut policy = no_jitter();
    policy.backoff.base = 30 * S;
    policy.backoff.cap = 30 * S;
    let cancel = t0 + 5 * S;
    let trace = Simulator::new(t0)
        .replies([Scripted::status(503), Scripted::status(200)])
        .cancel_at(cancel)
        .check_retry(&policy, &get())
        .run(machine(policy, get(), t0, 120 * S))
        .unwrap();
    assert_eq!(trace.outcome, Outcome::Cancelled);
    assert_eq!(trace.ended_at, cancel);
    assert_eq!(trace.sends().count(), 1);
}

#[test]
fn cancel_before_the_first_send_sends_nothing() {
    let t0 = origin();
    let mut m = machine(RetryPolicy::default(), get(), t0, 10 * S);
    m.handle(t0, Event::Cancel);
    assert_eq!(m.poll_action(), Action::Stop(Outcome::Cancelled));
    assert_eq!(m.sends(), 0);
}

#[test]
fn cancel_while_in_flight_stops_and_ignores_the_answer() {
    let t0 = origin();
    let mut m = machine(RetryPolicy::default(), get(), t0, 10 * S);
    let p = send(&mut m);
    m.handle(t0 + MS, Event::Cancel);
    m.handle(t0 + 2 * MS, Event::Response(answer(200, &p)));
    assert_eq!(m.poll_action(), Action::Stop(Outcome::Cancelled));
}

#[test]
fn a_success_after_the_deadline_is_timed_out() {
    let t0 = origin();
    let mut m = machine(RetryPolicy::default(), get(), t0, 2 * S);
    let p = send(&mut m);
    assert_eq!(p.abort_at, t0 + 4 * S);
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 2 * S));
    // The answer arrives inside the cushion, after the deadline.
    m.handle(t0 + 2 * S + 300 * MS, Event::Response(answer(200, &p)));
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::TimedOut { needed: None })
    );
    let rec = m.take_record().unwrap();
    assert_eq!(rec.reply, Reply::Status(200));
    assert_eq!(rec.outcome, Some(Outcome::TimedOut { needed: None }));
}

#[test]
fn a_hanging_attempt_times_out_at_the_deadline() {
    let t0 = origin();
    let policy = RetryPolicy::default();
    let trace = Simulator::new(t0)
        .replies([Scripted::hang()])
        .check_retry(&policy, &get())
        .run(machine(policy, get(), t0, 3 * S))
        .unwrap();
    assert_eq!(trace.outcome, Outcome::TimedOut { needed: None });
    assert_eq!(trace.ended_at, t0 + 3 * S);
}

#[test]
fn a_wait_past_the_deadline_stops_at_once_with_the_instant_needed() {
    let t0 = origin();
    let policy = RetryPolicy::default();
    let trace = Simulator::new(t0)
        .replies([
            Scripted::status(429).retry_after("10"),
            Scripted::status(200),
        ])
        .check_retry(&policy, &get())
        .run(machine(policy, get(), t0, 5 * S))
        .unwrap();
    assert_eq!(
        trace.outcome,
        Outcome::TimedOut {
            needed: Some(t0 + 10 * MS + 10 * S)
        }
    );
    assert_eq!(
        trace.ended_at,
        t0 + 10 * MS,
        "stopped at once, not at the deadline"
    );
    assert_eq!(trace.sends().count(), 1);
}

#[test]
fn retry_after_dates_use_the_date_header() {
    let t0 = origin();
    let policy = no_jitter();
    // Server clock says 08:49:32; it asks for 08:49:37 → 5 s, although our
    // wall clock is an hour ahead (the date would look like the past).
    let ours = UNIX_EPOCH + Duration::from_secs(784_111_772 + 3600);
    for form in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
    ] {
        let trace = Simulator::new(t0)
            .wall_clock(ours)
            .replies([
                Scripted::status(503)
                    .retry_after(form)
                    .date("Sun, 06 Nov 1994 08:49:32 GMT")
                    .after(Duration::ZERO),
                Scripted::status(200),
            ])
            .check_retry(&policy, &get())
            .run(machine(policy, get(), t0, 60 * S))
            .unwrap();
        assert_eq!(trace.gaps(), vec![5 * S], "{form}");
    }
    // Without a Date header, the wall clock given with the answer is used.
    let trace = Simulator::new(t0)
        .wall_clock(UNIX_EPOCH + Duration::from_secs(784_111_770))
        .replies([
            Scripted::status(503)
                .retry_after("Sun, 06 Nov 1994 08:49:37 GMT")
                .after(Duration::ZERO),
            Scripted::status(200),
        ])
        .run(machine(policy, get(), t0, 60 * S))
        .unwrap();
    assert_eq!(trace.gaps(), vec![7 * S]);
}

#[test]
fn invalid_retry_after_falls_back_to_backoff_and_is_recorded() {
    let t0 = origin();
    let policy = no_jitter();
    let trace = Simulator::new(t0)
        .replies([
            Scripted::status(429)
                .retry_after("1.5")
                .after(Duration::ZERO),
            Scripted::status(200),
        ])
        .run(machine(policy, get(), t0, 60 * S))
        .unwrap();
    assert_eq!(trace.gaps(), vec![250 * MS]);
    let rec = trace.records[0];
    assert_eq!(
        rec.retry_after,
        RetryAfterNote::Rejected(RetryAfterError::Malformed)
    );
    assert_eq!(rec.next.unwrap().source, DelaySource::Backoff);
}

#[test]
fn a_zero_retry_after_is_raised_to_the_minimum() {
    let t0 = origin();
    let policy = no_jitter();
    let trace = Simulator::new(t0)
        .replies([
            Scripted::status(429).retry_after("0").after(Duration::ZERO),
            Scripted::status(200),
        ])
        .run(machine(policy, get(), t0, 60 * S))
        .unwrap();
    assert_eq!(trace.gaps(), vec![S]);
    assert_eq!(trace.records[0].next.unwrap().source, DelaySource::Clamp);
}

#[test]
fn local_backoff_wins_when_longer_than_the_server_delay() {
    let t0 = origin();
    let mut policy = no_jitter();
    policy.backoff.base = 3 * S;
    let trace = Simulator::new(t0)
        .replies([
            Scripted::status(503).retry_after("1").after(Duration::ZERO),
            Scripted::status(200),
        ])
        .run(machine(policy, get(), t0, 60 * S))
        .unwrap();
    assert_eq!(trace.gaps(), vec![3 * S]);
    assert_eq!(trace.records[0].next.unwrap().source, DelaySource::Backoff);
}

#[test]
fn a_response_for_an_old_session_generation_is_stale() {
    let t0 = origin();
    let req = get().with_generation(4);
    let mut m = machine(RetryPolicy::default(), req, t0, 10 * S);
    let p = send(&mut m);
    m.handle(t0 + MS, Event::Response(answer(200, &p).generation(5)));
    assert_eq!(m.poll_action(), Action::Stop(Outcome::Stale));
    // Same generation: delivered.
    let mut m = machine(RetryPolicy::default(), req, t0, 10 * S);
    let p = send(&mut m);
    m.handle(t0 + MS, Event::Response(answer(200, &p).generation(4)));
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::Succeeded { status: 200 })
    );
}

#[test]
fn late_answers_for_old_attempts_are_ignored() {
    let t0 = origin();
    let mut m = machine(no_jitter(), get(), t0, 10 * S);
    let first = send(&mut m);
    m.handle(
        t0,
        Event::TransportError(first.id, TransportErrorKind::Timeout),
    );
    let Action::SleepUntil(t) = m.poll_action() else {
        panic!()
    };
    m.handle(t, Event::Tick);
    let second = send(&mut m);
    // The first attempt's answer shows up late: ignored, no record.
    m.handle(t + MS, Event::Response(answer(200, &first)));
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 10 * S));
    assert!(m.take_record().is_some_and(|r| r.id == first.id)); // the transport error's record
    m.handle(t + 2 * MS, Event::Response(answer(500, &second)));
    assert!(matches!(m.poll_action(), Action::SleepUntil(_)));
}

#[test]
fn time_going_backwards_is_clamped() {
    let t0 = origin() + Duration::from_secs(100);
    let mut m = machine(no_jitter(), get(), t0, 10 * S);
    let p = send(&mut m);
    m.handle(t0 + S, Event::Response(answer(503, &p)));
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + S + 250 * MS));
    // A tick from the past does not fire the wait, nor corrupt anything.
    m.handle(t0 - 50 * S, Event::Tick);
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + S + 250 * MS));
    m.handle(t0 + S + 250 * MS, Event::Tick);
    assert!(matches!(m.poll_action(), Action::Send(_)));
}

#[test]
fn final_statuses_are_handed_back() {
    let t0 = origin();
    for status in [400, 401, 404, 409, 501, 505, 600, 0] {
        let mut m = machine(RetryPolicy::default(), get(), t0, 10 * S);
        let p = send(&mut m);
        m.handle(t0, Event::Response(answer(status, &p)));
        assert_eq!(
            m.poll_action(),
            Action::Stop(Outcome::NotRetryable { status })
        );
    }
    for status in [200, 201, 204, 304] {
        let mut m = machine(RetryPolicy::default(), get(), t0, 10 * S);
        let p = send(&mut m);
        m.handle(t0, Event::Response(answer(status, &p)));
        assert_eq!(m.poll_action(), Action::Stop(Outcome::Succeeded { status }));
    }
}

#[test]
fn stop_is_sticky() {
    let t0 = origin();
    let mut m = machine(RetryPolicy::default(), get(), t0, 10 * S);
    let p = send(&mut m);
    m.handle(t0, Event::Response(answer(404, &p)));
    for _ in 0..3 {
        assert_eq!(
            m.poll_action(),
            Action::Stop(Outcome::NotRetryable { status: 404 })
        );
        m.handle(t0 + S, Event::Response(answer(200, &p)));
        m.handle(t0 + S, Event::Cancel);
        m.handle(t0 + 20 * S, Event::Tick);
    }
    assert_eq!(m.outcome(), Some(Outcome::NotRetryable { status: 404 }));
}

#[test]
fn a_zero_timeout_sends_nothing() {
    let t0 = origin();
    let mut m = machine(RetryPolicy::default(), get(), t0, Duration::ZERO);
    assert_eq!(
        m.poll_action(),
        Action::Stop(Outcome::TimedOut { needed: None })
    );
}

#[test]
fn a_huge_timeout_does_not_panic() {
    let t0 = origin();
    let mut m = machine(RetryPolicy::default(), get(), t0, Duration::MAX);
    assert!(matches!(m.poll_action(), Action::Send(_)));
}

#[test]
fn an_invalid_policy_is_rejected_at_construction() {
    let mut p = RetryPolicy::default();
    p.backoff.cap = Duration::ZERO;
    let err = RetryMachine::new(p, get(), SplitMix64::new(1), origin(), S).unwrap_err();
    assert_eq!(
        err,
        PolicyError::Invalid {
            field: "backoff.cap",
            reason: "must be at least backoff.base"
        }
    );
    assert!(err.to_string().contains("backoff.cap"));
}

#[test]
fn jitter_is_reproducible_and_within_bounds() {
    let t0 = origin();
    let mut p = RetryPolicy::default();
    p.backoff.jitter = Jitter::Full;
    let run = |seed| {
        let m = RetryMachine::new(p, get(), SplitMix64::new(seed), t0, 60 * S).unwrap();
        Simulator::new(t0)
            .replies((0..5).map(|_| Scripted::status(503).after(Duration::ZERO)))
            .run(m)
            .unwrap()
    };
    let (a, b, c) = (run(5), run(5), run(6));
    assert_eq!(a, b);
    assert_ne!(a.gaps(), c.gaps());
    for (i, g) in a.gaps().iter().enumerate() {
        let cap = (250 * MS * 2u32.pow(i as u32)).min(4 * S);
        assert!(*g < cap, "gap {i}: {g:?}");
    }
}

#[test]
fn records_never_hold_header_values() {
    // The record type has no field that could carry text; this test pins it
    // by formatting a record of an answer whose headers carry a secret.
    let t0 = origin();
    let mut m = machine(RetryPolicy::default(), get(), t0, 10 * S);
    let p = send(&mut m);
    let secret: &[u8] = b"Bearer SECRET-TOKEN";
    let wall: SystemTime = UNIX_EPOCH;
    m.handle(
        t0,
        Event::Response(
            Response::new(p.id, 503, wall)
                .retry_after(secret)
                .date(secret),
        ),
    );
    let rec = m.take_record().unwrap();
    let text = format!("{rec:?}");
    assert!(!text.contains("SECRET"), "{text}");
    assert_eq!(
        rec.retry_after,
        RetryAfterNote::Rejected(RetryAfterError::Malformed)
    );
}

/// What a `RetryMachine` says about itself, directly and through the
/// `Machine` trait the drive loop uses (found missing by cargo-mutants:
/// `policy`, `in_flight`, `Machine::deadline` and `Machine::class_of`
/// could each return a constant and no test of the fast set noticed).
#[test]
fn the_machine_reports_its_policy_flight_deadline_and_classes() {
    use polite_core::Machine;
    let t0 = origin();
    let mut policy = no_jitter();
    policy.max_retries.server_error = 7;
    policy.rate_limited_statuses = StatusSet::of(&[429, 420]);
    let mut m = machine(policy, get(), t0, 30 * S);
    assert_eq!(m.policy().max_retries.server_error, 7);
    assert_eq!(m.policy(), &policy);
    assert_eq!(Machine::deadline(&m), Some(t0 + 30 * S));
    assert_eq!(m.deadline(), t0 + 30 * S);

    assert!(!m.in_flight(), "nothing sent yet");
    let plan = send(&mut m);
    assert!(m.in_flight(), "the first attempt is out");
    let wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let classes: Vec<Option<RetryClass>> = [420, 503, 200, 404]
        .map(|s| Machine::class_of(&m, &Response::new(plan.id, s, wall)))
        .to_vec();
    assert_eq!(
        classes,
        [
            Some(RetryClass::RateLimited),
            Some(RetryClass::ServerError),
            None,
            None
        ]
    );
    m.handle(t0 + 10 * MS, Event::Response(answer(503, &plan)));
    assert!(!m.in_flight(), "answered: waiting for the backoff");
    m.handle(t0 + 10 * S, Event::Tick);
    send(&mut m);
    assert!(m.in_flight(), "the retry is out");
    assert_eq!(m.sends(), 2);
}

/// A tick while the attempt is in flight, before the deadline, changes
/// nothing: the answer that follows still counts (found missing by
/// cargo-mutants: the in-flight timeout's guard `now >= deadline` could be
/// `true` with no test of the fast set failing).
#[test]
fn a_tick_in_flight_before_the_deadline_keeps_waiting_for_the_answer() {
    let t0 = origin();
    let mut m = machine(no_jitter(), get(), t0, 30 * S);
    let plan = send(&mut m);
    m.handle(t0 + S, Event::Tick);
    assert!(m.in_flight());
    assert_eq!(m.outcome(), None);
    assert_eq!(m.poll_action(), Action::SleepUntil(t0 + 30 * S));
    m.handle(t0 + 2 * S, Event::Response(answer(200, &plan)));
    assert_eq!(m.outcome(), Some(Outcome::Succeeded { status: 200 }));
    // At the deadline itself the tick ends a call still in flight.
    let mut late = machine(no_jitter(), get(), t0, 30 * S);
    send(&mut late);
    late.handle(t0 + 30 * S, Event::Tick);
    assert_eq!(late.outcome(), Some(Outcome::TimedOut { needed: None }));
    // So does a tick at the deadline while waiting to retry (the outcome
    // is known at once, not only at the next poll).
    let mut waiting = machine(no_jitter(), get(), t0, 30 * S);
    let plan = send(&mut waiting);
    waiting.handle(t0 + 29 * S, Event::Response(answer(503, &plan)));
    assert_eq!(waiting.outcome(), None);
    waiting.handle(t0 + 30 * S, Event::Tick);
    assert_eq!(waiting.outcome(), Some(Outcome::TimedOut { needed: None }));
}

/// The default policy widened: 420 (Twitter's old "Enhance Your Calm")
/// rate limited, 599 (a proxy's network timeout) a server error.
fn widened() -> RetryPolicy {
    let mut p = no_jitter();
    assert!(p.rate_limited_statuses.insert(420));
    assert!(p.server_error_statuses.insert(599));
    p
}

/// SPEC §2.1: Retry-After is honoured on any status the policy marks
/// retryable, not only on 429 and 503: a 420 the policy adds to the
/// rate-limited statuses, a 599 it adds to the server errors. (420 is
/// decided on the machine's fast path, 599 on the general one.)
#[test]
fn retry_after_is_honoured_on_statuses_the_policy_adds_to_a_class() {
    let t0 = origin();
    let policy = widened();
    for (status, class) in [
        (420, RetryClass::RateLimited),
        (599, RetryClass::ServerError),
    ] {
        let mut m = machine(policy, get(), t0, 60 * S);
        let plan = send(&mut m);
        let t = t0 + 10 * MS;
        let mut r = answer(status, &plan);
        r.retry_after = Some(b"7");
        m.handle(t, Event::Response(r));
        // The server's 7 s, not the 250 ms backoff.
        assert_eq!(m.poll_action(), Action::SleepUntil(t + 7 * S), "{status}");
        let rec = m.take_record().unwrap();
        assert_eq!(rec.reply, Reply::Status(status));
        assert_eq!(rec.class, Some(class), "{status}");
        assert_eq!(rec.retry_after, RetryAfterNote::Valid(7 * S), "{status}");
        let next = rec.next.unwrap();
        assert_eq!(
            (next.delay, next.source, next.send_at),
            (7 * S, DelaySource::RetryAfter, t + 7 * S),
            "{status}"
        );
        assert_eq!(rec.outcome, None);
    }
}

/// A server delay within the cap but past the deadline, on a status the
/// policy adds to a class, stops the request at once as the same delay on
/// a 429 does (`a_wait_past_the_deadline_stops_at_once_with_the_instant_needed`);
/// past the cap: `retry_after_over_the_cap_stops_rate_limited_without_resending`.
#[test]
fn retry_after_past_the_deadline_stops_a_widened_status_as_a_429() {
    let t0 = origin();
    let policy = widened();
    for status in [429, 420, 599] {
        // Within the cap but past a 5 s deadline: stops at once, saying
        // when it could have sent.
        let trace = Simulator::new(t0)
            .replies([
                Scripted::status(status).retry_after("10"),
                Scripted::status(200),
            ])
            .check_retry(&policy, &get())
            .run(machine(policy, get(), t0, 5 * S))
            .unwrap();
        assert_eq!(
            trace.outcome,
            Outcome::TimedOut {
                needed: Some(t0 + 10 * MS + 10 * S)
            },
            "{status}"
        );
        assert_eq!(trace.ended_at, t0 + 10 * MS, "{status}");
        assert_eq!(trace.sends().count(), 1, "{status}");
    }
}

/// What happens to the send in flight (or at all) at one instant.
type Step = fn(SendPlan) -> Event<'static>;

/// Plays `events` (each at its instant) against a fresh machine for
/// `request`, with the independent checker beside it (deadline `t0 +
/// timeout`, the test's own arithmetic); returns the actions after each
/// event, and the sends made.
fn play(
    policy: RetryPolicy,
    request: RequestInfo,
    timeout: Duration,
    events: &[(Duration, Step)],
) -> (Vec<Action>, u32) {
    let t0 = origin();
    let mut m = machine(policy, request, t0, timeout);
    let mut checker = polite_testing::Checker::for_retry(&policy, &request).deadline(t0 + timeout);
    let mut plan = None;
    let mut actions = Vec::new();
    let mut drain = |m: &mut RetryMachine<SplitMix64>,
                     checker: &mut polite_testing::Checker,
                     plan: &mut Option<SendPlan>,
                     now: Instant| {
        loop {
            let a = m.poll_action();
            checker.output(now, &a).unwrap_or_else(|v| panic!("{v}"));
            actions.push(a);
            match a {
                Action::Send(p) => *plan = Some(p),
                _ => break,
            }
        }
    };
    drain(&mut m, &mut checker, &mut plan, t0);
    for (at, event) in events {
        let now = t0 + *at;
        let e = event(plan.expect("a send to answer"));
        checker.input(now, &e);
        m.handle(now, e);
        drain(&mut m, &mut checker, &mut plan, now);
    }
    (actions, m.sends())
}

/// SPEC §2.3: an answer for an older session generation is dropped, not
/// delivered, *whatever it says*: a 503, a 500, a 429 with a short
/// `Retry-After`, a 404 all end the request `Stale` at once, with one send,
/// where the same answers at the request's own generation are retried (or
/// handed back).
#[test]
fn a_failure_for_an_old_session_generation_is_stale_not_retried() {
    let req = get().with_generation(4);
    let stale: [(&str, Step); 4] = [
        ("503", |p| Event::Response(answer(503, &p).generation(5))),
        ("500", |p| Event::Response(answer(500, &p).generation(5))),
        ("429 Retry-After: 1", |p| {
            Event::Response(answer(429, &p).retry_after(b"1").generation(5))
        }),
        ("404", |p| Event::Response(answer(404, &p).generation(5))),
    ];
    for (name, event) in stale {
        let (actions, sends) = play(RetryPolicy::default(), req, 10 * S, &[(MS, event)]);
        assert_eq!(
            actions.last(),
            Some(&Action::Stop(Outcome::Stale)),
            "{name}: {actions:?}"
        );
        assert_eq!(sends, 1, "{name}");
    }
    // The same failures at the request's own generation are retried.
    let current: [(&str, Step); 2] = [
        ("503", |p| Event::Response(answer(503, &p).generation(4))),
        ("429 Retry-After: 1", |p| {
            Event::Response(answer(429, &p).retry_after(b"1").generation(4))
        }),
    ];
    for (name, event) in current {
        let (actions, sends) = play(RetryPolicy::default(), req, 10 * S, &[(MS, event)]);
        assert!(
            matches!(actions.last(), Some(Action::SleepUntil(_))),
            "{name}: {actions:?}"
        );
        assert_eq!(sends, 1, "{name}");
    }
}

/// A transport error carries no session generation (`Event::TransportError`
/// has none: nothing came back to be stale), so it is retried as usual; the
/// answer to the retry, at a newer generation, is then dropped as `Stale`.
#[test]
fn a_transport_error_is_retried_and_the_retrys_stale_answer_dropped() {
    let req = get().with_generation(4);
    let (actions, sends) = play(
        no_jitter(),
        req,
        10 * S,
        &[
            (MS, |p| {
                Event::TransportError(p.id, TransportErrorKind::Reset)
            }),
            // The backoff: 250 ms after the error.
            (251 * MS, |_| Event::Tick),
            (300 * MS, |p| Event::Response(answer(503, &p).generation(5))),
        ],
    );
    assert_eq!(
        actions.last(),
        Some(&Action::Stop(Outcome::Stale)),
        "{actions:?}"
    );
    assert_eq!(sends, 2);
}

/// An answer at exactly the deadline is discarded: `TimedOut { needed:
/// None }`, even a success (core's contract: "an answer at or after the
/// deadline"); a 503 there is not judged for a retry either (which would
/// say `TimedOut` with the instant it needed), and a stale one is timed out
/// all the same (the deadline comes first).
#[test]
fn an_answer_exactly_at_the_deadline_is_timed_out_even_a_success() {
    let timed_out = Action::Stop(Outcome::TimedOut { needed: None });
    for (name, event) in [
        ("200", (|p| Event::Response(answer(200, &p))) as Step),
        ("204", |p| Event::Response(answer(204, &p))),
        ("503", |p| Event::Response(answer(503, &p))),
        ("429", |p| {
            Event::Response(answer(429, &p).retry_after(b"1"))
        }),
        ("reset", |p| {
            Event::TransportError(p.id, TransportErrorKind::Reset)
        }),
    ] {
        let (actions, _) = play(RetryPolicy::default(), get(), 2 * S, &[(2 * S, event)]);
        assert_eq!(actions.last(), Some(&timed_out), "{name}: {actions:?}");
        // One nanosecond earlier, the 200 is delivered.
        if name == "200" {
            let early = 2 * S - Duration::from_nanos(1);
            let (actions, _) = play(RetryPolicy::default(), get(), 2 * S, &[(early, event)]);
            assert_eq!(
                actions.last(),
                Some(&Action::Stop(Outcome::Succeeded { status: 200 })),
            );
        }
    }
    // With a session generation (the machine's general path), stale or not.
    let req = get().with_generation(4);
    for event in [
        (|p| Event::Response(answer(200, &p).generation(4))) as Step,
        |p| Event::Response(answer(200, &p).generation(5)),
    ] {
        let (actions, _) = play(RetryPolicy::default(), req, 2 * S, &[(2 * S, event)]);
        assert_eq!(actions.last(), Some(&timed_out), "{actions:?}");
    }
}

/// SPEC §2's list, written out: the methods `Method::parse` knows, whether
/// each is idempotent, and whether a request with it is replayable without
/// a key, with a key, and with a one-shot body.
#[test]
fn method_parse_and_replayability_follow_spec_2() {
    let table: [(&[u8], Method, bool); 11] = [
        (b"GET", Method::Get, true),
        (b"HEAD", Method::Head, true),
        (b"OPTIONS", Method::Options, true),
        (b"TRACE", Method::Trace, true),
        (b"PUT", Method::Put, true),
        (b"DELETE", Method::Delete, true),
        (b"POST", Method::Post, false),
        (b"PATCH", Method::Patch, false),
        (b"CONNECT", Method::Connect, false),
        (b"PROPFIND", Method::Other, false),
        // Methods are case-sensitive (RFC 9110 §9.1): an extension method.
        (b"head", Method::Other, false),
    ];
    for (token, method, idempotent) in table {
        let name = String::from_utf8_lossy(token);
        assert_eq!(Method::parse(token), method, "{name}");
        assert_eq!(method.is_idempotent(), idempotent, "{name}");
        let r = RequestInfo::new(RequestId(1), method);
        assert_eq!(r.is_replayable(), idempotent, "{name}");
        assert!(
            r.with_idempotency_key().is_replayable(),
            "{name} with a key"
        );
        assert!(
            !r.with_one_shot_body().is_replayable(),
            "{name}, one-shot body"
        );
        assert!(
            !r.with_idempotency_key()
                .with_one_shot_body()
                .is_replayable(),
            "{name} with a key, one-shot body"
        );
    }
}

/// A 503 then a 200: every idempotent method is retried (two sends, the
/// 200 delivered); POST, PATCH, CONNECT and an extension method without an
/// idempotency key are sent once and end `NotReplayable`; with a key they
/// are retried.
#[test]
fn a_503_is_retried_for_each_idempotent_method_and_not_for_post_or_patch() {
    let t0 = origin();
    let policy = RetryPolicy::default();
    let run = |request: RequestInfo| {
        Simulator::new(t0)
            .replies([Scripted::status(503), Scripted::status(200)])
            .check_retry(&policy, &request)
            .run(machine(policy, request, t0, 30 * S))
            .unwrap()
    };
    for token in [
        &b"GET"[..],
        b"HEAD",
        b"OPTIONS",
        b"TRACE",
        b"PUT",
        b"DELETE",
    ] {
        let name = String::from_utf8_lossy(token);
        let trace = run(RequestInfo::new(RequestId(1), Method::parse(token)));
        assert_eq!(trace.sends().count(), 2, "{name}");
        assert_eq!(trace.outcome, Outcome::Succeeded { status: 200 }, "{name}");
    }
    for token in [&b"POST"[..], b"PATCH", b"CONNECT", b"PROPFIND"] {
        let name = String::from_utf8_lossy(token);
        let request = RequestInfo::new(RequestId(1), Method::parse(token));
        let trace = run(request);
        assert_eq!(trace.sends().count(), 1, "{name}");
        assert!(
            matches!(trace.outcome, Outcome::NotReplayable { .. }),
            "{name}: {:?}",
            trace.outcome
        );
        let trace = run(request.with_idempotency_key());
        assert_eq!(trace.sends().count(), 2, "{name} with a key");
        assert_eq!(
            trace.outcome,
            Outcome::Succeeded { status: 200 },
            "{name} with a key"
        );
    }
}
