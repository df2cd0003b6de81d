//! proptest strategies (feature `proptest`) for event scripts and policies,
//! the ones polite's own property tests use.
//!
//! A property test of *your* policy, in ten lines: whatever the server
//! answers, whenever, and whatever the caller does, your policy keeps every
//! promise the [`Checker`](crate::Checker) knows (no sleep past the
//! deadline, budgets, `Retry-After`, replayability, cancel, one outcome).
//! Put it in a test file with `#[test]` above the `fn`:
//!
//! ```
//! use polite_testing::{Checker, origin, run_script, strategies};
//! use polite_core::SplitMix64;
//! use polite_core::{Method, RequestId, RequestInfo, RetryMachine, RetryPolicy};
//! use proptest::prelude::*;
//! use std::time::Duration;
//!
//! fn my_policy() -> RetryPolicy {
//!     let mut p = RetryPolicy::default();
//!     p.max_retries.rate_limited = 5;
//!     p.retry_after.auto_wait_cap = Duration::from_secs(20);
//!     p
//! }
//!
//! proptest! {
//!     fn my_policy_keeps_its_promises(script in strategies::script(0..40), seed in any::<u64>()) {
//!         let request = RequestInfo::new(RequestId(1), Method::Put);
//!         let m = RetryMachine::new(my_policy(), request, SplitMix64::new(seed), origin(),
//!                                   Duration::from_secs(30)).unwrap();
//!         let checker = Checker::for_machine(&m);
//!         let run = run_script(m, checker, &script);
//!         prop_assert!(run.is_ok(), "{}", run.unwrap_err());
//!     }
//! }
//! # fn main() { my_policy_keeps_its_promises(); }
//! ```
//!
//! The same for a [`PollMachine`](polite_core::PollMachine) uses
//! [`poll_script`] and a [`PollChecker`](crate::PollChecker); for a
//! [`BatchMachine`](polite_core::BatchMachine), [`batch_script`] and a
//! [`BatchChecker`](crate::BatchChecker).

use std::time::Duration;

use proptest::collection::SizeRange;
use proptest::prelude::*;

use crate::script::{Answer, Input, Job};
use polite_core::policy::{Backoff, BackoffExponent, Jitter, MaxRetries, TransportKinds};
use polite_core::{
    Method, PollPolicy, RequestId, RequestInfo, RetryClass, RetryPolicy, TransportErrorKind,
};

/// HTTP statuses, weighted towards the ones the machines treat specially
/// (200, 429, 503), with a few final ones and any value at all.
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let status = strategies::status().new_tree(&mut TestRunner::default()).unwrap().current();
/// assert!(status < 1000);
/// ```
pub fn status() -> impl Strategy<Value = u16> {
    prop_oneof![
        3 => Just(200u16),
        1 => Just(204u16),
        1 => Just(404u16),
        1 => Just(400u16),
        4 => Just(429u16),
        4 => Just(503u16),
        2 => Just(500u16),
        1 => Just(502u16),
        1 => Just(501u16),
        1 => 0u16..1000,
    ]
}

/// Raw `Retry-After` values: absent, small and large delta-seconds (over
/// the default automatic wait cap of 60 s too, and at each cap's
/// boundary), zero, hostile ones (more digits than fit in 64 bits, around
/// `u64::MAX`, zero-padded past 64 bytes: valid and huge, or valid and
/// small), surrounding whitespace, invalid values (a sign, a decimal point,
/// empty, a date in UTC), HTTP-dates in all three forms (with a leap second
/// too), or any bytes.
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let values: Vec<_> = (0..400)
///     .map(|_| strategies::retry_after().new_tree(&mut runner).unwrap().current())
///     .collect();
/// assert!(values.contains(&None));
/// // Zero-padded past 64 bytes, and more digits than fit in 64 bits.
/// assert!(values.iter().flatten().any(|v| v.len() > 64 && v.iter().all(u8::is_ascii_digit)));
/// assert!(values.iter().flatten().any(|v| v.starts_with(b" ") || v.starts_with(b"\t")));
/// ```
pub fn retry_after() -> impl Strategy<Value = Option<Vec<u8>>> {
    let fixed = |s: &'static str| Just(Some(s.as_bytes().to_vec()));
    prop_oneof![
        8 => Just(None),
        4 => fixed("1"),
        4 => fixed("3"),
        2 => fixed("0"),
        2 => fixed("30"),
        2 => fixed("61"),
        2 => fixed("86400"),
        1 => fixed("-1"),
        1 => fixed("1.5"),
        1 => fixed("99999999999999999999999"),
        2 => fixed("99999999999999999999"),
        2 => (65usize..200, 0u64..100).prop_map(|(n, v)| Some(format!("{}{v}", "0".repeat(n)).into_bytes())),
        1 => (0usize..100).prop_map(|n| Some(format!("{}18446744073709551616", "0".repeat(n)).into_bytes())),
        2 => fixed("Sun, 06 Nov 1994 08:49:37 GMT"),
        1 => fixed("Sun, 06 Nov 1994 08:48:60 GMT"),
        1 => fixed("Sunday, 06-Nov-94 08:49:37 GMT"),
        1 => fixed("Sun Nov  6 08:49:37 1994"),
        1 => fixed("Sun, 06 Nov 1994 08:49:37 UTC"),
        // Not dates, though `httpdate` alone reads them as dates (issue 23).
        1 => fixed("Sunday, 06-Nov-94x08:49:37 GMT"),
        1 => fixed("\x0bSun, 06 Nov 1994 08:49:37 GMT"),
        // Around u64::MAX, the caps' boundaries (min 1 s, automatic wait cap
        // 60 s, clamp 300 s), short zero-padding, and whitespace.
        1 => fixed("18446744073709551615"),
        1 => fixed("18446744073709551614"),
        1 => fixed("1844674407370955161"),
        2 => prop_oneof![Just("59"), Just("60"), Just("61"), Just("299"), Just("300"), Just("301")]
            .prop_map(|v| Some(v.as_bytes().to_vec())),
        1 => (1usize..60, 0u64..100).prop_map(|(n, v)| Some(format!("{}{v}", "0".repeat(n)).into_bytes())),
        2 => (prop_oneof![Just(" "), Just("\t"), Just(" \t ")], 0u64..100)
            .prop_map(|(ws, v)| Some(format!("{ws}{v}{ws}").into_bytes())),
        1 => fixed(" Sun, 06 Nov 1994 08:49:37 GMT\t"),
        1 => fixed("Sunday, 06-Nov-94 08:48:60 GMT"),
        1 => fixed("Sun Nov  6 08:48:60 1994"),
        1 => fixed(""),
        1 => (0u64..400).prop_map(|s| Some(s.to_string().into_bytes())),
        1 => prop::collection::vec(any::<u8>(), 0..70).prop_map(Some),
    ]
}

/// Raw `Date` values: mostly absent; the server's clock near the default
/// virtual wall clock (1994-11-06 08:48:20), skewed an hour either way, a
/// leap second (`08:47:60`, i.e. 08:48:00), an impossible date, or garbage.
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let dates: Vec<_> = (0..300).map(|_| strategies::date().new_tree(&mut runner).unwrap().current()).collect();
/// assert!(dates.contains(&None));
/// assert!(dates.contains(&Some(b"Sun, 06 Nov 1994 09:48:20 GMT".to_vec()))); // an hour ahead
/// ```
pub fn date() -> impl Strategy<Value = Option<Vec<u8>>> {
    let fixed = |s: &'static str| Just(Some(s.as_bytes().to_vec()));
    prop_oneof![
        12 => Just(None),
        1 => fixed("Sun, 06 Nov 1994 08:48:20 GMT"),
        1 => fixed("Sun, 06 Nov 1994 08:47:60 GMT"),
        1 => fixed("Sunday, 06-Nov-94 08:47:60 GMT"),
        1 => fixed("Sun Nov  6 08:47:60 1994"),
        1 => fixed("Sun, 06 Nov 1994 09:48:20 GMT"),
        1 => fixed("Sun, 06 Nov 1994 07:48:20 GMT"),
        1 => fixed("Sun, 31 Nov 1994 08:48:20 GMT"),
        1 => fixed("yesterday"),
    ]
}

/// Transport error kinds: mostly the seven retried by default, sometimes
/// one of the six permanent ones (SPEC §2.2).
///
/// ```
/// use polite_testing::strategies;
/// use polite_core::TransportErrorKind;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let kinds: std::collections::HashSet<_> = (0..400)
///     .map(|_| strategies::transport_kind().new_tree(&mut runner).unwrap().current())
///     .collect();
/// assert_eq!(kinds.len(), TransportErrorKind::ALL.len());
/// ```
pub fn transport_kind() -> impl Strategy<Value = TransportErrorKind> {
    let retried = TransportErrorKind::ALL[..7].to_vec();
    let permanent = TransportErrorKind::ALL[7..].to_vec();
    prop_oneof![
        4 => prop::sample::select(retried),
        1 => prop::sample::select(permanent),
    ]
}

/// A policy's `retried_transport` set: mostly the default (every kind that
/// is not permanent), sometimes none, sometimes any subset of all thirteen
/// kinds (permanent ones included, which must stay unretried).
///
/// ```
/// use polite_testing::strategies;
/// use polite_core::policy::TransportKinds;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let sets: Vec<_> = (0..200)
///     .map(|_| strategies::transport_kinds().new_tree(&mut runner).unwrap().current())
///     .collect();
/// assert!(sets.contains(&TransportKinds::RETRYABLE) && sets.contains(&TransportKinds::NONE));
/// assert!(sets.iter().any(|s| *s != TransportKinds::RETRYABLE && *s != TransportKinds::NONE));
/// ```
pub fn transport_kinds() -> impl Strategy<Value = TransportKinds> {
    prop_oneof![
        2 => Just(TransportKinds::RETRYABLE),
        1 => Just(TransportKinds::NONE),
        2 => (0u32..1 << TransportErrorKind::ALL.len()).prop_map(|bits| {
            let mut set = TransportKinds::NONE;
            for (i, k) in TransportErrorKind::ALL.into_iter().enumerate() {
                if bits & (1 << i) != 0 {
                    set = set.with(k);
                }
            }
            set
        }),
    ]
}

/// The caller's classification of an answer: mostly none, sometimes each
/// class (it counts for statuses 400..=599 only).
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let classes: Vec<_> = (0..300).map(|_| strategies::retry_class().new_tree(&mut runner).unwrap().current()).collect();
/// assert!(classes.contains(&None) && classes.contains(&Some(polite_core::RetryClass::RateLimited)));
/// ```
pub fn retry_class() -> impl Strategy<Value = Option<RetryClass>> {
    prop_oneof![
        12 => Just(None),
        1 => Just(Some(RetryClass::RateLimited)),
        1 => Just(Some(RetryClass::ServerError)),
        1 => Just(Some(RetryClass::Transport)),
    ]
}

/// Rate-limit headers of an answer: mostly none; sometimes a `RateLimit`
/// that says no quota is left for a while, a `RateLimit-Policy`, or
/// garbage.
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let all: Vec<_> = (0..300).map(|_| strategies::rate_limit_headers().new_tree(&mut runner).unwrap().current()).collect();
/// assert!(all.iter().any(Vec::is_empty));
/// assert!(all.iter().flatten().any(|(name, _)| name == "RateLimit-Policy"));
/// ```
pub fn rate_limit_headers() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    let h = |name: &'static str, value: &'static str| {
        Just(vec![(name.to_owned(), value.as_bytes().to_vec())])
    };
    prop_oneof![
        16 => Just(Vec::new()),
        1 => h("RateLimit", r#""default";r=0;t=2"#),
        1 => h("RateLimit", r#""default";r=0;t=90"#),
        1 => h("RateLimit", r#""default";r=3;t=10"#),
        1 => h("RateLimit-Policy", r#""default";q=2;w=1"#),
        1 => h("RateLimit", "garbage;;"),
    ]
}

fn ms(range: std::ops::Range<u64>) -> impl Strategy<Value = Duration> {
    range.prop_map(Duration::from_millis)
}

/// A time step of 1 to 3 whole seconds. With a budget of whole seconds
/// ([`timeout`]'s, or a test's own) steps like these land an answer
/// *exactly* on the deadline (an answer at the deadline is discarded:
/// `TimedOut`, even a success), which steps of any millisecond almost
/// never do.
fn whole_seconds() -> impl Strategy<Value = Duration> {
    (1u64..=3).prop_map(Duration::from_secs)
}

/// The session generation current when an answer arrives: mostly none
/// (the caller tracks none), sometimes 7 (the generation of the requests
/// that carry one) or 8 (a later one: the answer is stale).
fn generation() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![20 => Just(None), 1 => Just(Some(7u64)), 1 => Just(Some(8u64))]
}

/// One input for a single request ([`RetryMachine`](polite_core::RetryMachine),
/// [`Paced`](polite_core::Paced)): answers with any status and `Retry-After`
/// (one in ten for an earlier attempt; some at another session generation,
/// 7 or 8), transport errors, ticks of up to 20 s, wake-ups, cancels, and
/// the clock stepping back. Some answers, transport errors and ticks come
/// after whole seconds, so that with a budget of whole seconds an answer
/// can land exactly on the deadline.
///
/// ```
/// use polite_testing::strategies;
/// use polite_testing::Input;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let inputs: Vec<_> = (0..300).map(|_| strategies::input().new_tree(&mut runner).unwrap().current()).collect();
/// assert!(inputs.iter().any(|i| matches!(i, Input::Answer(_))));
/// assert!(inputs.iter().any(|i| matches!(i, Input::WallBack(_) | Input::WallForward(_))));
/// // Answers of another session generation, and after whole seconds.
/// assert!(inputs.iter().any(|i| matches!(i, Input::Answer(a) if a.generation == Some(8))));
/// assert!(inputs.iter().any(|i| matches!(i, Input::Answer(a) if a.after == std::time::Duration::from_secs(2))));
/// ```
pub fn input() -> impl Strategy<Value = Input> {
    let answer = (
        status(),
        retry_after(),
        date(),
        prop::bool::weighted(0.1),
        prop_oneof![3 => ms(0..3_000), 1 => whole_seconds()],
        retry_class(),
        generation(),
    )
        .prop_map(
            |(status, retry_after, date, late, after, retry_class, generation)| {
                Input::Answer(Answer {
                    status,
                    retry_after,
                    date,
                    job: None,
                    generation,
                    headers: Vec::new(),
                    retry_class,
                    late,
                    pick: 0,
                    after,
                })
            },
        );
    prop_oneof![
        6 => answer,
        2 => (transport_kind(), prop_oneof![3 => ms(0..3_000), 1 => whole_seconds()])
            .prop_map(|(kind, after)| Input::Transport { kind, pick: 0, after }),
        2 => prop_oneof![3 => ms(0..20_000), 1 => whole_seconds()].prop_map(Input::Tick),
        4 => Just(Input::Wake),
        1 => Just(Input::Cancel),
        1 => ms(0..5_000).prop_map(Input::Backwards),
        1 => ms(0..7_200_000).prop_map(Input::WallForward),
        1 => ms(0..7_200_000).prop_map(Input::WallBack),
    ]
}

/// A script of [`input`]s with a length in `size`.
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let script = strategies::script(5..6).new_tree(&mut runner).unwrap().current();
/// assert_eq!(script.len(), 5);
/// ```
pub fn script(size: impl Into<SizeRange>) -> impl Strategy<Value = Vec<Input>> {
    prop::collection::vec(input(), size)
}

/// What a job-status answer's body says: mostly pending states, sometimes
/// a terminal one, nothing, a name longer than any state, or the rejection
/// of the wait parameter.
///
/// ```
/// use polite_testing::strategies;
/// use polite_testing::Job;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let jobs: Vec<_> = (0..300).map(|_| strategies::job().new_tree(&mut runner).unwrap().current()).collect();
/// assert!(jobs.contains(&Some(Job::LongPollUnsupported)));
/// assert!(jobs.contains(&Some(Job::State("running".into()))));
/// ```
pub fn job() -> impl Strategy<Value = Option<Job>> {
    let state = |s: &'static str| Just(Some(Job::State(s.to_owned())));
    prop_oneof![
        1 => Just(None),
        24 => state("running"),
        4 => state("queued"),
        1 => state("passed"),
        1 => state("failed"),
        1 => state("a-state-name-far-longer-than-thirty-one-bytes"),
        1 => state(""),
        2 => Just(Some(Job::LongPollUnsupported)),
    ]
}

/// One input for a [`PollMachine`](polite_core::PollMachine): answers (mostly
/// `200` with a job report, sometimes with a `Retry-After` and a `Date`
/// whatever the answer, the rejection of the wait parameter too, another
/// session generation, or for an earlier poll), transport errors, ticks,
/// wake-ups (mostly only when no poll is in flight), cancels, and the
/// clock stepping back.
///
/// ```
/// use polite_testing::strategies;
/// use polite_testing::{Input, Job};
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let inputs: Vec<_> = (0..3000).map(|_| strategies::poll_input().new_tree(&mut runner).unwrap().current()).collect();
/// // The rejection of the wait parameter comes with a Retry-After too.
/// assert!(inputs.iter().any(|i| matches!(i, Input::Answer(a)
///     if a.job == Some(Job::LongPollUnsupported) && a.retry_after.is_some())));
/// ```
pub fn poll_input() -> impl Strategy<Value = Input> {
    let status = prop_oneof![
        60 => Just(200u16),
        4 => Just(202u16),
        1 => Just(204u16),
        1 => Just(400u16),
        1 => Just(404u16),
        3 => Just(429u16),
        3 => Just(503u16),
        1 => Just(500u16),
        1 => Just(502u16),
        1 => Just(501u16),
        1 => 0u16..1000,
    ];
    // A Retry-After on any answer: pending, terminal, the rejection of the
    // wait parameter, failures.
    let retry_after = prop_oneof![
        6 => Just(None),
        1 => retry_after(),
    ];
    let answer = (
        status,
        job(),
        (retry_after, date()),
        generation(),
        prop::bool::weighted(0.1),
        prop_oneof![4 => ms(0..3_000), 1 => ms(0..30_000), 1 => whole_seconds()],
    )
        .prop_map(
            |(status, job, (retry_after, date), generation, late, after)| {
                Input::Answer(Answer {
                    status,
                    retry_after,
                    date,
                    job,
                    generation,
                    headers: Vec::new(),
                    retry_class: None,
                    late,
                    pick: 0,
                    after,
                })
            },
        );
    prop_oneof![
        30 => answer,
        3 => (transport_kind(), ms(0..5_000))
            .prop_map(|(kind, after)| Input::Transport { kind, pick: 0, after }),
        6 => prop_oneof![3 => ms(0..20_000), 1 => whole_seconds()].prop_map(Input::Tick),
        12 => Just(Input::WakeIfIdle),
        1 => Just(Input::Wake),
        1 => Just(Input::Cancel),
        3 => ms(0..5_000).prop_map(Input::Backwards),
        1 => ms(0..7_200_000).prop_map(Input::WallForward),
        1 => ms(0..7_200_000).prop_map(Input::WallBack),
    ]
}

/// A script of [`poll_input`]s with a length in `size`.
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let script = strategies::poll_script(0..80).new_tree(&mut runner).unwrap().current();
/// assert!(script.len() < 80);
/// ```
pub fn poll_script(size: impl Into<SizeRange>) -> impl Strategy<Value = Vec<Input>> {
    prop::collection::vec(poll_input(), size)
}

/// One input for a [`BatchMachine`](polite_core::BatchMachine): answers and
/// transport errors for any of the sends in flight, answers for sends
/// never made, ticks, wake-ups, cancels, and the clock stepping back.
///
/// ```
/// use polite_testing::strategies;
/// use polite_testing::Input;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let inputs: Vec<_> = (0..300).map(|_| strategies::batch_input().new_tree(&mut runner).unwrap().current()).collect();
/// assert!(inputs.iter().any(|i| matches!(i, Input::Answer(a) if a.status == 429)));
/// ```
pub fn batch_input() -> impl Strategy<Value = Input> {
    let status = prop_oneof![
        6 => Just(200u16),
        1 => Just(404u16),
        6 => Just(429u16),
        3 => Just(503u16),
        1 => Just(501u16),
    ];
    let answer = (
        any::<u32>(),
        status,
        (retry_after(), date()),
        ms(0..2_000),
        rate_limit_headers(),
    )
        .prop_map(|(pick, status, (retry_after, date), after, headers)| {
            Input::Answer(Answer {
                status,
                retry_after,
                date,
                job: None,
                generation: None,
                headers,
                retry_class: None,
                late: false,
                pick,
                after,
            })
        });
    prop_oneof![
        10 => answer,
        2 => (any::<u32>(), prop_oneof![Just(TransportErrorKind::Reset), Just(TransportErrorKind::Aborted)], ms(0..2_000))
            .prop_map(|(pick, kind, after)| Input::Transport { kind, pick, after }),
        1 => (0u32..12, 0u32..4).prop_map(|(item, attempt)| Input::Stray { item, attempt, status: 200 }),
        3 => ms(0..10_000).prop_map(Input::Tick),
        6 => Just(Input::Wake),
        1 => Just(Input::Cancel),
        1 => ms(0..3_000).prop_map(Input::Backwards),
        1 => ms(0..7_200_000).prop_map(Input::WallForward),
    ]
}

/// A script of [`batch_input`]s with a length in `size`.
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let script = strategies::batch_script(3..4).new_tree(&mut runner).unwrap().current();
/// assert_eq!(script.len(), 3);
/// ```
pub fn batch_script(size: impl Into<SizeRange>) -> impl Strategy<Value = Vec<Input>> {
    prop::collection::vec(batch_input(), size)
}

/// Jitter kinds, `Percent` with any value from 0 to 100.
///
/// ```
/// use polite_testing::strategies;
/// use polite_core::policy::Jitter;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let all: Vec<_> = (0..200).map(|_| strategies::jitter().new_tree(&mut runner).unwrap().current()).collect();
/// assert!(all.contains(&Jitter::None) && all.contains(&Jitter::Full));
/// assert!(all.iter().all(|j| !matches!(j, Jitter::Percent(p) if *p > 100)));
/// ```
pub fn jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![
        Just(Jitter::None),
        Just(Jitter::Full),
        Just(Jitter::Equal),
        (0u8..=100).prop_map(Jitter::Percent),
    ]
}

/// Valid retry policies: budgets of 0 to 4 per class, any jitter, a base
/// of 1 ms to 2 s, a multiplier of 1 to 3, a cap of at least 4 s, and the
/// AWS SDKs' options (a total retry budget, a separate throttling backoff,
/// the exponent counting all retries, a millisecond retry hint, waiting
/// when a shared budget refuses), and any set of retried transport error
/// kinds ([`transport_kinds`]); the `Retry-After` limits are the
/// defaults.
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let all: Vec<_> = (0..200).map(|_| strategies::retry_policy().new_tree(&mut runner).unwrap().current()).collect();
/// assert!(all.iter().all(|p| p.validate().is_ok()));
/// // The AWS SDKs' options too.
/// assert!(all.iter().any(|p| p.max_total_retries.is_some()));
/// assert!(all.iter().any(|p| p.rate_limited_backoff.is_some()));
/// assert!(all.iter().any(|p| p.retry_after_ms.is_some()));
/// assert!(all.iter().any(|p| p.retried_transport != Default::default()));
/// ```
pub fn retry_policy() -> impl Strategy<Value = RetryPolicy> {
    (
        (0u32..5, 0u32..5, 0u32..5, jitter(), 1u64..2_000, 1u32..4),
        aws_options(),
        transport_kinds(),
    )
        .prop_map(|(basic, aws, kinds)| {
            let mut p = basic_retry_policy(basic);
            aws.apply(&mut p);
            p.retried_transport = kinds;
            p
        })
}

/// The AWS SDKs' options of a retry policy (SPEC §4.1's adaptive mode and
/// the standard retry mode's knobs): a total retry budget, a separate
/// backoff for throttling, the backoff exponent counting all retries, a
/// millisecond retry hint, and waiting out the backoff when a shared budget
/// refuses.
#[derive(Clone, Copy, Debug)]
struct AwsOptions {
    max_total_retries: Option<u32>,
    rate_limited_backoff: Option<(u64, Jitter)>,
    all_retries: bool,
    retry_after_ms: Option<u64>,
    backoff_when_budget_empty: bool,
}

impl AwsOptions {
    fn apply(self, p: &mut RetryPolicy) {
        p.max_total_retries = self.max_total_retries;
        p.rate_limited_backoff = self.rate_limited_backoff.map(|(base_ms, jitter)| Backoff {
            base: Duration::from_millis(base_ms),
            multiplier: 2,
            cap: Duration::from_secs(20).max(Duration::from_millis(base_ms)),
            jitter,
        });
        if self.all_retries {
            p.backoff_exponent = BackoffExponent::AllRetries;
        }
        p.retry_after_ms = self.retry_after_ms.map(Duration::from_millis);
        p.backoff_when_budget_empty = self.backoff_when_budget_empty;
    }
}

fn aws_options() -> impl Strategy<Value = AwsOptions> {
    (
        prop_oneof![3 => Just(None), 1 => (0u32..6).prop_map(Some)],
        prop_oneof![3 => Just(None), 1 => (1u64..2_000, jitter()).prop_map(Some)],
        prop::bool::weighted(0.25),
        prop_oneof![3 => Just(None), 1 => (0u64..5_000).prop_map(Some)],
        prop::bool::weighted(0.2),
    )
        .prop_map(|(total, rl, all, ms, wait)| AwsOptions {
            max_total_retries: total,
            rate_limited_backoff: rl,
            all_retries: all,
            retry_after_ms: ms,
            backoff_when_budget_empty: wait,
        })
}

fn basic_retry_policy(
    (rl, se, tr, jitter, base_ms, mult): (u32, u32, u32, Jitter, u64, u32),
) -> RetryPolicy {
    {
        {
            let mut p = RetryPolicy {
                max_retries: MaxRetries {
                    rate_limited: rl,
                    server_error: se,
                    transport: tr,
                },
                ..RetryPolicy::default()
            };
            p.backoff.jitter = jitter;
            p.backoff.base = Duration::from_millis(base_ms);
            p.backoff.multiplier = mult;
            p.backoff.cap = p.backoff.base.max(Duration::from_secs(4));
            p
        }
    }
}

/// Requests: mostly a `GET`; a `GET` of session generation 7 (answers of
/// generation 8 are stale); a `POST` without and with an idempotency key;
/// a `PUT` with a body that cannot be produced again; a `HEAD`, an
/// `OPTIONS`, a `TRACE` and a `DELETE` (idempotent); a `PATCH`, a
/// `CONNECT` and an extension method (not).
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let all: Vec<_> = (0..200).map(|_| strategies::request().new_tree(&mut runner).unwrap().current()).collect();
/// assert!(all.iter().any(|r| r.is_replayable()) && all.iter().any(|r| !r.is_replayable()));
/// assert!(all.iter().any(|r| r.generation == Some(7)));
/// ```
pub fn request() -> impl Strategy<Value = RequestInfo> {
    // The variants, not `Method::parse`: a generator built on the parser
    // would hide a parser that gets a method wrong.
    let method = |m: Method| Just(RequestInfo::new(RequestId(5), m));
    prop_oneof![
        6 => Just(RequestInfo::new(RequestId(1), Method::Get)),
        2 => Just(RequestInfo::new(RequestId(6), Method::Get).with_generation(7)),
        2 => Just(RequestInfo::new(RequestId(2), Method::Post)),
        2 => Just(RequestInfo::new(RequestId(3), Method::Post).with_idempotency_key()),
        2 => Just(RequestInfo::new(RequestId(4), Method::Put).with_one_shot_body()),
        1 => method(Method::Head),
        1 => method(Method::Options),
        1 => method(Method::Trace),
        1 => method(Method::Delete),
        1 => method(Method::Patch),
        1 => method(Method::Connect),
        1 => method(Method::Other),
    ]
}

/// Valid poll policies: long poll first (mostly) or not, a longest long
/// poll of 1 to 39 s, a floor between long polls of 0 to 2 s, any
/// schedule jitter, retry budgets of 0 to 4 per class, and any set of
/// retried transport error kinds ([`transport_kinds`]).
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let all: Vec<_> = (0..200).map(|_| strategies::poll_policy().new_tree(&mut runner).unwrap().current()).collect();
/// assert!(all.iter().all(|p| p.validate().is_ok()));
/// assert!(all.iter().any(|p| p.long_poll_first) && all.iter().any(|p| !p.long_poll_first));
/// ```
pub fn poll_policy() -> impl Strategy<Value = PollPolicy> {
    (
        prop::bool::weighted(0.8),
        1u64..40,
        0u64..2_000,
        (jitter(), 100u64..3_000, 1u32..4),
        (0u32..5, 0u32..5, 0u32..5),
        transport_kinds(),
    )
        .prop_map(
            |(first, max_lp, floor_ms, (jitter, base_ms, mult), (rl, se, tr), kinds)| {
                let mut p = PollPolicy {
                    long_poll_first: first,
                    max_long_poll: Duration::from_secs(max_lp),
                    min_long_poll_interval: Duration::from_millis(floor_ms),
                    ..PollPolicy::default()
                };
                p.backoff.jitter = jitter;
                p.backoff.base = Duration::from_millis(base_ms);
                p.backoff.multiplier = mult;
                p.backoff.cap = p.backoff.base.max(Duration::from_secs(15));
                p.retry.max_retries = MaxRetries {
                    rate_limited: rl,
                    server_error: se,
                    transport: tr,
                };
                p.retry.retried_transport = kinds;
                p
            },
        )
}

/// Job-status requests: mostly a `GET`; a `POST` (not replayable); a `GET`
/// of session generation 7 (answers of generation 8 are stale).
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let all: Vec<_> = (0..200).map(|_| strategies::poll_request().new_tree(&mut runner).unwrap().current()).collect();
/// assert!(all.iter().any(|r| r.generation == Some(7)));
/// ```
pub fn poll_request() -> impl Strategy<Value = RequestInfo> {
    prop_oneof![
        4 => Just(RequestInfo::new(RequestId(1), Method::Get)),
        1 => Just(RequestInfo::new(RequestId(2), Method::Post)),
        1 => Just(RequestInfo::new(RequestId(3), Method::Get).with_generation(7)),
    ]
}

/// Budgets: mostly long enough for many attempts (up to 10 min),
/// sometimes under 2 s, sometimes 1 to 3 whole seconds (which the scripts'
/// whole-second steps can land an answer exactly on).
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// use std::time::Duration;
/// let mut runner = TestRunner::deterministic();
/// let all: Vec<_> = (0..200).map(|_| strategies::timeout().new_tree(&mut runner).unwrap().current()).collect();
/// assert!(all.iter().all(|t| *t < Duration::from_secs(600)));
/// assert!(all.iter().any(|t| *t < Duration::from_secs(2)));
/// ```
pub fn timeout() -> impl Strategy<Value = Duration> {
    prop_oneof![
        1 => 0u64..2_000,
        7 => 0u64..600_000,
        2 => (1u64..=3).prop_map(|s| s * 1_000),
    ]
    .prop_map(Duration::from_millis)
}

// ---------------------------------------------------------------------------
// Keyed batches (SPEC §4.2): items paced by their own key's pace.
// ---------------------------------------------------------------------------

/// Requests for a batch whose items go to `keys` keys (origins): ids
/// `0..len` in order, each a GET (4 in 5) or a POST, with a
/// [`pace_slot`](RequestInfo::pace_slot) in `0..keys` — runs of one key
/// and mixes alike. Pair with a [`PaceSet`](polite_core::PaceSet) of
/// `keys` paces and
/// [`BatchChecker::throttled_per_key`](crate::BatchChecker::throttled_per_key).
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let requests = strategies::keyed_requests(8..9, 3).new_tree(&mut runner).unwrap().current();
/// assert_eq!(requests.len(), 8);
/// assert!(requests.iter().all(|r| r.pace_slot < 3));
/// assert!(requests.iter().enumerate().all(|(i, r)| r.id.0 == i as u64));
/// ```
pub fn keyed_requests(
    len: impl Into<SizeRange>,
    keys: u32,
) -> impl Strategy<Value = Vec<RequestInfo>> {
    let keys = keys.max(1);
    let one = (
        prop_oneof![4 => Just(Method::Get), 1 => Just(Method::Post)],
        0..keys,
    );
    prop::collection::vec(one, len).prop_map(|items| {
        items
            .into_iter()
            .zip(0u64..)
            .map(|((method, slot), i)| RequestInfo::new(RequestId(i), method).with_pace_slot(slot))
            .collect()
    })
}

/// One input for a keyed batch: as [`batch_input`], with more rate-limited
/// answers carrying a `Retry-After` (so that some keys cool down while
/// others stay free) and answers that pick among all sends in flight.
///
/// ```
/// use polite_testing::{Input, strategies};
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let inputs: Vec<_> = (0..300)
///     .map(|_| strategies::keyed_batch_input().new_tree(&mut runner).unwrap().current())
///     .collect();
/// assert!(inputs.iter().any(|i| matches!(i, Input::Answer(a) if a.status == 429 && a.retry_after.is_some())));
/// assert!(inputs.iter().any(|i| matches!(i, Input::Answer(a) if a.status == 200)));
/// ```
pub fn keyed_batch_input() -> impl Strategy<Value = Input> {
    let cool = (any::<u32>(), 1u64..8, ms(0..500)).prop_map(|(pick, secs, after)| {
        Input::status(429)
            .retry_after(secs.to_string())
            .pick(pick)
            .after(after)
    });
    let fine = (any::<u32>(), ms(0..500))
        .prop_map(|(pick, after)| Input::status(200).pick(pick).after(after));
    prop_oneof![
        6 => batch_input(),
        3 => cool,
        4 => fine,
        2 => Just(Input::WakeIfIdle),
    ]
}

/// A script of [`keyed_batch_input`]s with a length in `size`.
///
/// ```
/// use polite_testing::strategies;
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
/// let mut runner = TestRunner::deterministic();
/// let script = strategies::keyed_batch_script(5..6).new_tree(&mut runner).unwrap().current();
/// assert_eq!(script.len(), 5);
/// ```
pub fn keyed_batch_script(size: impl Into<SizeRange>) -> impl Strategy<Value = Vec<Input>> {
    prop::collection::vec(keyed_batch_input(), size)
}
