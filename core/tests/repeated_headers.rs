//! An answer with more than one `Retry-After` (user trial 4, F4: a 429
//! with `Retry-After: 1` then `Retry-After: 120` was resent every second,
//! because the first value filed was kept; in the other order it ended at
//! once). SPEC §2.1: never resend before the server's time — with two
//! values, the later one. The property walks arbitrary header lists
//! through `Response::file_header` (what every adapter does with an
//! answer's headers, in order); the scenario runs the machine on one.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use polite_core::retry_after::RetryAfter;
use polite_core::{
    Action, Event, Method, Outcome, RequestId, RequestInfo, Response, RetryMachine, RetryPolicy,
    SendId, SplitMix64,
};
use polite_testing::origin;
use proptest::prelude::*;

/// Delta-seconds, dates (around the `Date` below) and invalid values.
const VALUES: [&str; 12] = [
    "0",
    "1",
    "2",
    "120",
    "86400",
    "99999999999999999999999",
    "Sun, 06 Nov 1994 08:49:40 GMT",
    "Sun, 06 Nov 1994 08:51:37 GMT",
    "Sun, 06 Nov 1994 08:49:30 GMT",
    "-1",
    "soon",
    "",
];

/// The answer's `Date` (08:49:37), and an invalid one.
const DATES: [&str; 2] = ["Sun, 06 Nov 1994 08:49:37 GMT", "yesterday"];

/// The wall clock the answer arrived at (a minute after its `Date`).
fn wall() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(784_111_777 + 60)
}

fn delay(value: &[u8], date: Option<&[u8]>) -> Option<Duration> {
    RetryAfter::parse(value).ok().map(|v| v.delay(date, wall()))
}

fn is_date(value: &[u8]) -> bool {
    matches!(RetryAfter::parse(value), Ok(RetryAfter::At(_)))
}

proptest! {
    /// Whatever the order of an answer's `Retry-After` values (with or
    /// without a `Date` before them), the one filed asks for a time no
    /// earlier than any valid value it can be compared with: two
    /// delta-seconds, two dates, or a date and delta-seconds when a valid
    /// `Date` was filed first (without one, the wall clock would be needed,
    /// which filing does not read: the first of those stays). An invalid
    /// value never displaces a valid one.
    #[test]
    fn the_retry_after_kept_is_the_latest_of_an_answer_s_values(
        date in proptest::option::of(0..DATES.len()),
        values in proptest::collection::vec(0..VALUES.len(), 1..6),
        names in proptest::collection::vec(0..3usize, 6),
    ) {
        let spelled = ["Retry-After", "retry-after", "RETRY-AFTER"];
        let mut r = Response::new(SendId::default(), 429, wall());
        if let Some(d) = date {
            r.file_header("Date", DATES[d].as_bytes());
        }
        for (i, &v) in values.iter().enumerate() {
            prop_assert!(r.file_header(spelled[names[i]], VALUES[v].as_bytes()));
        }
        let date_valid = date == Some(0);
        let kept = r.retry_after.expect("a value is filed");
        let any_valid = values.iter().any(|&v| delay(VALUES[v].as_bytes(), None).is_some());
        let kept_delay = delay(kept, r.date);
        prop_assert_eq!(kept_delay.is_some(), any_valid, "kept {:?}", std::str::from_utf8(kept));
        for &v in &values {
            let value = VALUES[v].as_bytes();
            let Some(d) = delay(value, r.date) else { continue };
            let comparable = date_valid || is_date(value) == is_date(kept);
            if comparable {
                prop_assert!(
                    kept_delay >= Some(d),
                    "kept {:?} ({:?}) before {:?} ({:?})",
                    std::str::from_utf8(kept), kept_delay, VALUES[v], d
                );
            }
        }
    }
}

/// The trial's answer, in both orders: a 429 with `Retry-After: 1` and
/// `Retry-After: 120` ends `RateLimited` at once (120 s is over the 60 s
/// automatic wait cap), never resent after 1 s.
#[test]
fn a_429_with_two_retry_afters_waits_for_the_later_in_either_order() {
    for values in [["1", "120"], ["120", "1"]] {
        let t0: Instant = origin();
        let mut m = RetryMachine::new(
            RetryPolicy::default(),
            RequestInfo::new(RequestId(1), Method::Get),
            SplitMix64::new(1),
            t0,
            Duration::from_secs(30),
        )
        .unwrap();
        let Action::Send(plan) = m.poll_action() else {
            panic!("the first send goes at once");
        };
        let mut answer = Response::new(plan.id, 429, wall());
        for v in values {
            answer.file_header("Retry-After", v.as_bytes());
        }
        let at = t0 + Duration::from_millis(20);
        m.handle(at, Event::Response(answer));
        assert_eq!(
            m.poll_action(),
            Action::Stop(Outcome::RateLimited {
                retry_at: Some(at + Duration::from_secs(120))
            }),
            "{values:?}"
        );
        assert_eq!(m.sends(), 1, "{values:?}: never resent");
    }
}
