//! Value-level tests of the retry kernel's arithmetic, written from SPEC §2
//! and §2.1 (issue 23): exact jitter values, no draw from the random source
//! when the jitter needs none, the 64-byte limit of a `Retry-After` that is
//! not delta-seconds, and the kernel's decisions at each boundary. They
//! kill the mutants `cargo mutants` found surviving in `backoff.rs`,
//! `retry_after.rs` and the decision kernel (see `.ci/mutants.sh`).

use std::convert::Infallible;
use std::time::{Duration, Instant, UNIX_EPOCH};

use polite_core::backoff::{exponential, jitter};
use polite_core::policy::{Backoff, Jitter};
use polite_core::retry_after::{RetryAfter, RetryAfterError, server_delay};
use polite_core::{
    Action, Event, Method, Outcome, RequestId, RequestInfo, Response, RetryMachine, RetryPolicy,
};
use polite_testing::origin;

const NS: Duration = Duration::from_nanos(1);

/// SPEC §2: ±percent jitter spreads the delay over `[d(1-p), d(1+p))`:
/// at `u = 0` the low end, at `u = 1/2` the delay itself, at the largest
/// draw one nanosecond under the high end.
#[test]
fn percent_jitter_spans_minus_to_plus_p() {
    let d = Duration::from_secs(2);
    let cases = [
        (20, 0, Duration::from_millis(1600)),
        (20, 1 << 63, d),
        (20, u64::MAX, Duration::from_millis(2400) - NS),
        (50, 0, Duration::from_secs(1)),
        (50, 1 << 63, d),
        (50, u64::MAX, Duration::from_secs(3) - NS),
        (100, u64::MAX, Duration::from_secs(4) - NS),
        (0, u64::MAX, d),
        (1, u64::MAX, Duration::from_millis(2020) - NS),
    ];
    for (p, x, want) in cases {
        assert_eq!(jitter(d, Jitter::Percent(p), x), want, "±{p} %, x = {x}");
    }
    // Full and equal jitter at the same draws.
    assert_eq!(jitter(d, Jitter::Full, u64::MAX), d - NS);
    assert_eq!(jitter(d, Jitter::Equal, u64::MAX), d - NS);
    assert_eq!(jitter(d, Jitter::Equal, 0), Duration::from_secs(1));
    // An odd number of nanoseconds: equal jitter keeps the larger half.
    assert_eq!(jitter(3 * NS, Jitter::Equal, 0), 2 * NS);
}

/// SPEC §2: base × multiplier^n, capped; saturating.
#[test]
fn exponential_backoff_values() {
    let b = Backoff {
        base: Duration::from_millis(100),
        multiplier: 3,
        cap: Duration::from_secs(2),
        jitter: Jitter::None,
    };
    let got: Vec<_> = (0..5).map(|n| exponential(&b, n).as_millis()).collect();
    assert_eq!(got, [100, 300, 900, 2000, 2000]);
}

/// A random source that must never be drawn from.
struct NoDraws;

impl rand_core::TryRng for NoDraws {
    type Error = Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        panic!("drew from the random source")
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        panic!("drew from the random source")
    }
    fn try_fill_bytes(&mut self, _: &mut [u8]) -> Result<(), Infallible> {
        panic!("drew from the random source")
    }
}

/// SPEC §6: jitter that needs no randomness (none, ±0 %) draws nothing,
/// so that a caller's seeded sequence is not consumed for nothing; the
/// delay is then exact.
#[test]
fn no_jitter_draws_nothing() {
    for j in [Jitter::None, Jitter::Percent(0)] {
        let mut policy = RetryPolicy::default();
        policy.backoff.jitter = j;
        let t0 = origin();
        let mut m = RetryMachine::new(
            policy,
            RequestInfo::new(RequestId(1), Method::Get),
            NoDraws,
            t0,
            Duration::from_secs(30),
        )
        .unwrap();
        let mut now = t0;
        let mut sleeps = Vec::new();
        for _ in 0..3 {
            let Action::Send(p) = m.poll_action() else {
                panic!("{j:?}: no send")
            };
            now += Duration::from_millis(10);
            m.handle(now, Event::Response(Response::new(p.id, 503, UNIX_EPOCH)));
            let Action::SleepUntil(t) = m.poll_action() else {
                panic!("{j:?}: no sleep")
            };
            sleeps.push(t - now);
            now = t;
            m.handle(now, Event::Tick);
        }
        let ms = Duration::from_millis;
        assert_eq!(sleeps, [ms(250), ms(500), ms(1000)], "{j:?}");
    }
}

/// SPEC §2.1 and the error kinds the records carry: a value that is not
/// all digits is looked at up to 64 bytes (longer than any date) and
/// rejected unread beyond; an all-digit value is never too long.
#[test]
fn the_64_byte_limit() {
    let x = |n| vec![b'x'; n];
    assert_eq!(RetryAfter::parse(&x(63)), Err(RetryAfterError::Malformed));
    assert_eq!(RetryAfter::parse(&x(64)), Err(RetryAfterError::Malformed));
    assert_eq!(RetryAfter::parse(&x(65)), Err(RetryAfterError::TooLong));
    // A date padded with inner spaces to 64 and 65 bytes: malformed, then
    // too long.
    let date = |n: usize| {
        let mut v = b"Sun, 06 Nov 1994 08:49:37 GMT".to_vec();
        v.splice(4..4, std::iter::repeat_n(b' ', n - v.len()));
        v
    };
    assert_eq!(
        RetryAfter::parse(&date(64)),
        Err(RetryAfterError::Malformed)
    );
    assert_eq!(RetryAfter::parse(&date(65)), Err(RetryAfterError::TooLong));
    for n in [63, 64, 65, 200] {
        let mut v = vec![b'0'; n - 1];
        v.push(b'7');
        assert_eq!(
            RetryAfter::parse(&v),
            Ok(RetryAfter::Delay(Duration::from_secs(7))),
            "{n} digits"
        );
    }
}

/// A date's delay: zero in the past and at the instant itself, the
/// difference after it; against `Date` when valid.
#[test]
fn date_delays_at_the_boundary() {
    let t = UNIX_EPOCH + Duration::from_secs(784_111_777); // 08:49:37
    let v = b"Sun, 06 Nov 1994 08:49:37 GMT";
    let secs = |s| Ok(Duration::from_secs(s));
    assert_eq!(server_delay(v, None, t), secs(0));
    assert_eq!(server_delay(v, None, t + Duration::from_secs(1)), secs(0));
    assert_eq!(server_delay(v, None, t - Duration::from_secs(1)), secs(1));
    assert_eq!(
        server_delay(
            v,
            Some(b"Sun, 06 Nov 1994 08:49:36 GMT"),
            t + Duration::from_secs(99)
        ),
        secs(1)
    );
    assert_eq!(
        server_delay(
            v,
            Some(b"Sun, 06 Nov 1994 08:49:38 GMT"),
            t - Duration::from_secs(99)
        ),
        secs(0)
    );
}

/// Drives a `RetryMachine` (2 min budget, no draws) through `answers`,
/// each 10 ms after its send, waking when it asks; returns the actions
/// after each answer.
fn run(policy: RetryPolicy, answers: &[(u16, Option<&str>)]) -> Vec<(Duration, Action)> {
    let t0: Instant = origin();
    let mut m = RetryMachine::new(
        policy,
        RequestInfo::new(RequestId(1), Method::Get),
        NoDraws,
        t0,
        Duration::from_secs(120),
    )
    .unwrap();
    let mut now = t0;
    let mut out = Vec::new();
    for (status, ra) in answers {
        let a = m.poll_action();
        let Action::Send(p) = a else {
            out.push((now - t0, a));
            return out;
        };
        now += Duration::from_millis(10);
        let mut r = Response::new(p.id, *status, UNIX_EPOCH);
        if let Some(v) = ra {
            r = r.retry_after(v.as_bytes());
        }
        m.handle(now, Event::Response(r));
        let a = m.poll_action();
        out.push((now - t0, a));
        if let Action::SleepUntil(t) = a {
            now = t;
            m.handle(now, Event::Tick);
        }
    }
    out
}

/// SPEC §2.1 at the caps: a server delay of exactly the automatic wait cap
/// is waited out; one second more stops `RateLimited` with the server's
/// instant; below the minimum is raised to it; `max(backoff, server)`.
#[test]
fn retry_after_at_the_caps() {
    let mut policy = RetryPolicy::default();
    policy.backoff.jitter = Jitter::None;
    let t = |ms| origin() + Duration::from_millis(ms);
    let at_cap = run(policy, &[(429, Some("60")), (200, None)]);
    assert_eq!(at_cap[0].1, Action::SleepUntil(t(60_010)));
    let over = run(policy, &[(429, Some("61"))]);
    assert_eq!(
        over[0].1,
        Action::Stop(Outcome::RateLimited {
            retry_at: Some(t(61_010))
        })
    );
    let zero = run(policy, &[(503, Some("0"))]);
    assert_eq!(zero[0].1, Action::SleepUntil(t(1_010)), "raised to 1 s");
    // max(backoff, server): the backoff (250 ms, 500 ms, 1 s, 2 s) is
    // shorter than the server's 1 s three times, then longer.
    let mut five = vec![(503, Some("1")); 4];
    five.push((200, None));
    let waits: Vec<_> = run(policy, &five)
        .iter()
        .filter_map(|(at, a)| match a {
            Action::SleepUntil(t) => Some(*t - origin() - *at),
            _ => None,
        })
        .collect();
    let ms = Duration::from_millis;
    assert_eq!(waits, [ms(1000), ms(1000), ms(1000), ms(2000)]);
}

/// SPEC §2 (a classifier marks an answer retryable): a 200 the caller
/// classes as a server error is retried as one, by `RetryMachine` and by
/// `PollMachine` (not taken as a success, nor as a pending job).
#[test]
fn a_success_classed_as_a_failure_is_retried() {
    let t0 = origin();
    let mut policy = RetryPolicy::default();
    policy.backoff.jitter = Jitter::None;
    let mut m = RetryMachine::new(
        policy,
        RequestInfo::new(RequestId(1), Method::Get),
        NoDraws,
        t0,
        Duration::from_secs(30),
    )
    .unwrap();
    let Action::Send(p) = m.poll_action() else {
        panic!("no send")
    };
    let busy =
        Response::new(p.id, 200, UNIX_EPOCH).retry_class(polite_core::RetryClass::ServerError);
    m.handle(t0, Event::Response(busy));
    assert_eq!(
        m.poll_action(),
        Action::SleepUntil(t0 + Duration::from_millis(250))
    );
    let rec = m.take_record().unwrap();
    assert_eq!(rec.class, Some(polite_core::RetryClass::ServerError));

    let mut poll = polite_core::PollPolicy::default();
    poll.retry.backoff.jitter = Jitter::None;
    let mut m = polite_core::PollMachine::new(
        poll,
        RequestInfo::new(RequestId(2), Method::Get),
        NoDraws,
        t0,
        Duration::from_secs(60),
    )
    .unwrap();
    let Action::Send(p) = m.poll_action() else {
        panic!("no poll")
    };
    let busy = Response::new(p.id, 200, UNIX_EPOCH)
        .job(polite_core::poll::JobReport::State("running"))
        .retry_class(polite_core::RetryClass::ServerError);
    m.handle(t0, Event::Response(busy));
    assert_eq!(
        m.poll_action(),
        Action::SleepUntil(t0 + Duration::from_millis(250))
    );
    assert_eq!(
        m.take_record().unwrap().class,
        Some(polite_core::RetryClass::ServerError)
    );
}

/// The AWS SDKs' total budget (`max_total_retries`) counts every class
/// together, and `BackoffExponent::AllRetries` grows the backoff with
/// every retry, whatever its class.
#[test]
fn total_retries_count_every_class() {
    let mut policy = RetryPolicy::default();
    policy.backoff.jitter = Jitter::None;
    policy.max_total_retries = Some(2);
    // A 503, a 429, a 503: the third failure finds the total spent.
    let got = run(policy, &[(503, None), (429, None), (503, None)]);
    assert!(
        matches!(got[2].1, Action::Stop(Outcome::RetriesExhausted { .. })),
        "{got:?}"
    );
    // Without the total, the same answers are retried.
    policy.max_total_retries = None;
    let got = run(policy, &[(503, None), (429, None), (503, None)]);
    assert!(matches!(got[2].1, Action::SleepUntil(_)), "{got:?}");
    // AllRetries: the second 503 waits 2 × base (one retry before it, of
    // another class); ClassRetries: 2 × base too (one 503 before it), but
    // the 429 waits 2 × base only under AllRetries.
    let waits = |p: RetryPolicy| -> Vec<Duration> {
        run(p, &[(503, None), (429, None), (503, None), (200, None)])
            .iter()
            .filter_map(|(at, a)| match a {
                Action::SleepUntil(t) => Some(*t - origin() - *at),
                _ => None,
            })
            .collect()
    };
    let ms = Duration::from_millis;
    assert_eq!(waits(policy), [ms(250), ms(250), ms(500)]);
    policy.backoff_exponent = polite_core::policy::BackoffExponent::AllRetries;
    assert_eq!(waits(policy), [ms(250), ms(500), ms(1000)]);
}

/// A batch restart is a retry of the same logical request: when the
/// restarted item then succeeds, the bucket gets back what the restart
/// cost (5 for a 429), not the first-try deposit (1).
#[test]
fn a_restart_that_succeeds_refunds_its_cost() {
    use polite_core::budget::{RetryBucket, RetryCosts};
    use polite_core::pace::Unpaced;
    use polite_core::{BatchMachine, BatchPolicy, SplitMix64};
    use polite_testing::{Scripted, Simulator};
    let t0 = origin();
    let mut policy = BatchPolicy {
        concurrency: 1,
        max_restarts: 2,
        ..BatchPolicy::default()
    };
    policy.retry.max_retries.rate_limited = 0;
    let mut b = BatchMachine::new(
        policy,
        vec![RequestInfo::new(RequestId(1), Method::Get)],
        SplitMix64::new(1),
        Unpaced,
        t0,
        Duration::from_secs(60),
    )
    .unwrap()
    .with_budget(RetryBucket::new(100, RetryCosts::default()).with_tokens(50));
    let trace = Simulator::new(t0)
        .replies([
            Scripted::status(429).retry_after("1"),
            Scripted::status(200),
        ])
        .run(&mut b)
        .unwrap();
    assert_eq!(trace.sends().count(), 2);
    assert_eq!(b.restarts(0), 1);
    assert!(matches!(b.outcomes()[0], Some(Outcome::Succeeded { .. })));
    // 50 - 5 (the restart) + 5 (its cost back on success).
    assert_eq!(b.budget().tokens(), 50);
}

/// The AWS millisecond hint (`x-amz-retry-after`, `retry_after_ms`): the
/// delay is the hint clamped to `[backoff, backoff + extra]`, and the
/// record says where it came from.
#[test]
fn the_millisecond_hint_is_clamped_to_the_backoff_window() {
    use polite_core::record::DelaySource;
    let t0 = origin();
    let mut policy = RetryPolicy::default();
    policy.backoff.jitter = Jitter::None;
    policy.retry_after_ms = Some(Duration::from_secs(5));
    let ms = Duration::from_millis;
    for (hint, want, source) in [
        ("2000", ms(2000), DelaySource::RetryAfter),
        ("9000", ms(5250), DelaySource::Clamp),
        ("100", ms(250), DelaySource::Backoff),
        ("x", ms(250), DelaySource::Backoff),
    ] {
        let mut m = RetryMachine::new(
            policy,
            RequestInfo::new(RequestId(1), Method::Get),
            NoDraws,
            t0,
            Duration::from_secs(30),
        )
        .unwrap();
        let Action::Send(p) = m.poll_action() else {
            panic!("no send")
        };
        let r = Response::new(p.id, 503, UNIX_EPOCH).retry_after_ms(hint.as_bytes());
        m.handle(t0, Event::Response(r));
        assert_eq!(
            m.poll_action(),
            Action::SleepUntil(t0 + want),
            "hint {hint}"
        );
        let next = m.take_record().unwrap().next.unwrap();
        assert_eq!((next.delay, next.source), (want, source), "hint {hint}");
    }
}

/// `max(backoff, server delay)` with a tie: the delay is the same either
/// way, and the record names the backoff (the server asked for nothing
/// longer); one millisecond more and it names Retry-After, below the
/// minimum it names the clamp.
#[test]
fn a_tie_between_backoff_and_retry_after_is_the_backoff() {
    use polite_core::record::DelaySource;
    let t0 = origin();
    let mut policy = RetryPolicy::default();
    policy.backoff.jitter = Jitter::None;
    policy.backoff.base = Duration::from_secs(2);
    let secs = Duration::from_secs;
    for (ra, want, source) in [
        ("2", secs(2), DelaySource::Backoff),
        ("3", secs(3), DelaySource::RetryAfter),
        ("1", secs(2), DelaySource::Backoff),
    ] {
        let mut m = RetryMachine::new(
            policy,
            RequestInfo::new(RequestId(1), Method::Get),
            NoDraws,
            t0,
            Duration::from_secs(30),
        )
        .unwrap();
        let Action::Send(p) = m.poll_action() else {
            panic!("no send")
        };
        m.handle(
            t0,
            Event::Response(Response::new(p.id, 503, UNIX_EPOCH).retry_after(ra.as_bytes())),
        );
        assert_eq!(
            m.poll_action(),
            Action::SleepUntil(t0 + want),
            "Retry-After {ra}"
        );
        let next = m.take_record().unwrap().next.unwrap();
        assert_eq!(
            (next.delay, next.source),
            (want, source),
            "Retry-After {ra}"
        );
    }
    // Below the minimum (1 s) with a shorter backoff: the clamp.
    policy.backoff.base = Duration::from_millis(100);
    let mut m = RetryMachine::new(
        policy,
        RequestInfo::new(RequestId(1), Method::Get),
        NoDraws,
        t0,
        Duration::from_secs(30),
    )
    .unwrap();
    let Action::Send(p) = m.poll_action() else {
        panic!("no send")
    };
    m.handle(
        t0,
        Event::Response(Response::new(p.id, 503, UNIX_EPOCH).retry_after(b"0")),
    );
    let next = m.take_record().unwrap().next.unwrap();
    assert_eq!((next.delay, next.source), (secs(1), DelaySource::Clamp));
}
