//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) through the
//! same decoding and checks as the cargo-fuzz targets
//! (`polite_testing::fuzz`), so that a stable `cargo test` exercises
//! every target on every run; and feeds each target some seeded random
//! bytes besides.

use std::path::{Path, PathBuf};

use polite_core::SplitMix64;
use polite_core::rand_core::Rng;
use polite_testing::fuzz::Target;

fn corpus(target: Target) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target.name());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(target: Target) {
    let files = corpus(target);
    assert!(
        files.len() >= 10,
        "{}: only {} seed files",
        target.name(),
        files.len()
    );
    for f in &files {
        let data = std::fs::read(f).unwrap();
        if let Err(failure) = target.check(&data) {
            panic!("{}: {failure}", f.display());
        }
    }
    eprintln!(
        "fuzz corpus: {}: {} files replayed",
        target.name(),
        files.len()
    );
}

#[test]
fn replay_retry_after() {
    replay(Target::RetryAfter);
}

#[test]
fn replay_retry_script() {
    replay(Target::Retry);
}

#[test]
fn replay_poll_script() {
    replay(Target::Poll);
}

#[test]
fn replay_pace_throttle() {
    replay(Target::Throttle);
}

#[test]
fn replay_pace_batch() {
    replay(Target::PaceBatch);
}

#[test]
fn replay_paced_retry() {
    replay(Target::PacedRetry);
}

#[test]
fn replay_ratelimit() {
    replay(Target::RateLimit);
}

#[test]
fn replay_keyed_batch() {
    replay(Target::Keyed);
}

#[test]
fn every_target_has_a_corpus_and_a_fuzz_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    for target in Target::ALL {
        let src = root
            .join("fuzz_targets")
            .join(format!("{}.rs", target.name()));
        let text =
            std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        assert!(
            text.contains(&format!("Target::{target:?}")),
            "{}",
            src.display()
        );
        assert!(!corpus(target).is_empty());
    }
}

/// Seeded random bytes of every length up to 300, through every target:
/// decoding is total and every case keeps its invariants.
#[test]
fn random_bytes_through_every_target() {
    let mut rng = SplitMix64::new(0x5eed);
    for target in Target::ALL {
        for len in 0..300usize {
            let mut data = vec![0u8; len];
            rng.fill_bytes(&mut data);
            if let Err(failure) = target.check(&data) {
                panic!("{} on {:02x?}: {failure}", target.name(), data);
            }
        }
    }
}

/// Issue 16 (hostile servers): what the widened fuzz targets found on the
/// old code within seconds — `Retry-After` values that overflow 64 bits or
/// are zero-padded past 64 bytes (resent at backoff instead of ending
/// `RateLimited`), leap-second dates (refused), `Retry-After` ignored on the
/// long-poll rejection and over the cap, and a wait that gave up with
/// budget left; and, after the fix, one mismatch in the checker itself
/// (`checker-tail-schedule`: it spaced a plain poll sent in long-poll mode
/// under a second before the deadline by the backoff schedule instead of
/// the long-poll interval). Kept in the corpus as
/// `regression-issue16-<what>-<hash>`;
/// this test replays them by name, so that none is lost from the corpus.
/// (`pace_script`'s one is in `paced_retry` since that target was split:
/// see `pace_script_regressions_moved`.)
#[test]
fn issue16_regressions_replay() {
    let mut counts = Vec::new();
    for target in [
        Target::RetryAfter,
        Target::Retry,
        Target::Poll,
        Target::PacedRetry,
    ] {
        let found: Vec<PathBuf> = corpus(target)
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("regression-issue16-"))
            })
            .collect();
        for f in &found {
            let data = std::fs::read(f).unwrap();
            if let Err(failure) = target.check(&data) {
                panic!("{}: {failure}", f.display());
            }
        }
        counts.push((target.name(), found.len()));
    }
    assert_eq!(
        counts,
        [
            ("retry_after", 1),
            ("retry_script", 5),
            ("poll_script", 10),
            ("paced_retry", 1)
        ]
    );
}

/// `pace_script` ran a throttle, a batch and a paced retry machine on every
/// input; it was split into `pace_throttle`, `pace_batch` and
/// `paced_retry` (one machine per input: less coverage per execution, so
/// less libFuzzer work per execution). Its inputs were carried over field
/// for field (the new layouts are the old one without the other machines'
/// fields, so each spliced input decodes to the same throttle, policy,
/// requests, seed, budget and script), its regression inputs under their
/// names, into the target that ran their script.
#[test]
fn pace_script_regressions_moved() {
    let moved = [
        (Target::PaceBatch, "regression-adaptive-cool-down-96b44e65"),
        (
            Target::PacedRetry,
            "regression-batch-checker-ignored-retry-class",
        ),
        (
            Target::PacedRetry,
            "regression-issue16-retry-after-undercut-61738cbfd433",
        ),
        (
            Target::PacedRetry,
            "regression-paced-accepted-an-answer-for-a-held-send",
        ),
    ];
    for (target, name) in moved {
        let f = corpus(target)
            .into_iter()
            .find(|p| p.file_name().and_then(|n| n.to_str()) == Some(name))
            .unwrap_or_else(|| panic!("{}: {name} missing", target.name()));
        let data = std::fs::read(&f).unwrap();
        if let Err(failure) = target.check(&data) {
            panic!("{}: {failure}", f.display());
        }
    }
}

// ---------------------------------------------------------------------------
// Regressions: what the fuzzers found, each pinned by a test named after it
// (the inputs are also in the corpus, as `regression-*`).
// ---------------------------------------------------------------------------

mod regressions {
    use std::time::Duration;

    use polite_core::SplitMix64;
    use polite_core::policy::{Jitter, StatusSet};
    use polite_core::{
        BatchMachine, BatchPolicy, Method, Outcome, Paced, PollMachine, PollPolicy, RateThrottle,
        RequestId, RequestInfo, RetryClass, RetryMachine, RetryPolicy,
    };
    use polite_testing::{
        BatchChecker, Checker, Input, PollChecker, ScriptRunner, origin, run_script,
    };

    /// `pace_script` found: `BatchChecker` judged answers by their status
    /// alone, so a batch that retried a `400` the caller classified as
    /// rate-limited (`Response::retry_class`, e.g. an AWS `Throttling`
    /// error) was reported as "a resend without a retried failure". The
    /// checker now classifies answers as the machines do
    /// (`RetryPolicy::class_of_response`).
    #[test]
    fn batch_checker_honours_the_callers_retry_class() {
        let t0 = origin();
        let requests = vec![RequestInfo::new(RequestId(0), Method::Get)];
        let throttle = RateThrottle::new(5, Duration::from_millis(63)).unwrap();
        let b = BatchMachine::new(
            BatchPolicy::default(),
            requests,
            SplitMix64::new(1),
            throttle,
            t0,
            Duration::from_secs(60),
        )
        .unwrap();
        let checker = BatchChecker::for_machine(&b).throttled(5, Duration::from_millis(63));
        let script = [
            Input::status(400).retry_class(RetryClass::RateLimited),
            Input::Wake,
            Input::status(200),
        ];
        let mut run = ScriptRunner::new(t0, b, checker);
        run.play(&script).unwrap();
        let trace = run.finish().unwrap();
        assert_eq!(trace.sends().count(), 2, "the 400 was retried");
        assert_eq!(
            trace.outcome,
            Outcome::BatchDone {
                succeeded: 1,
                failed: 0
            }
        );
    }

    /// `poll_script` found: `PollChecker` expected `NotRetryable` for a
    /// `502` outside the policy's server-error statuses even when the
    /// caller classified it (`Response::retry_class`); the machine rightly
    /// retried it.
    #[test]
    fn poll_checker_honours_the_callers_retry_class() {
        let mut policy = PollPolicy {
            long_poll_first: false,
            ..PollPolicy::default()
        };
        policy.retry.server_error_statuses = StatusSet::of(&[503]);
        let m = PollMachine::new(
            policy,
            RequestInfo::new(RequestId(1), Method::Get),
            SplitMix64::new(1),
            origin(),
            Duration::from_secs(600),
        )
        .unwrap();
        let checker = PollChecker::new(
            &policy,
            &RequestInfo::new(RequestId(1), Method::Get),
            origin() + Duration::from_secs(600),
        );
        let script = [
            Input::status(502).retry_class(RetryClass::RateLimited),
            Input::Wake,
            Input::status(200).state("passed"),
        ];
        let trace = run_script(m, checker, &script).unwrap();
        assert_eq!(trace.sends().count(), 2, "the 502 was retried");
        assert!(matches!(trace.outcome, Outcome::Terminal { .. }));
    }

    /// `pace_script` found: `Paced` forwarded an answer for a send it still
    /// held (the pace had not granted it yet, so it was never sent) to the
    /// inner machine, which already counts a held send as in flight and took
    /// the answer as real: a stray `503` for the held attempt made it retry,
    /// the held attempt went out anyway, and the server's real `200` to it
    /// was then ignored as late — an extra send and a lost success. Fixed
    /// in `Paced::handle` (core/src/pace.rs): answers for held sends are
    /// ignored, like every answer for a send the machine does not wait for.
    #[test]
    fn paced_ignores_an_answer_for_a_send_it_still_holds() {
        let t0 = origin();
        let mut policy = RetryPolicy::default();
        policy.backoff.jitter = Jitter::None; // the retry is due after 250 ms
        let m = RetryMachine::new(
            policy,
            RequestInfo::new(RequestId(1), Method::Get),
            SplitMix64::new(1),
            t0,
            Duration::from_secs(10),
        )
        .unwrap();
        let checker = Checker::for_retry(&policy, &RequestInfo::new(RequestId(1), Method::Get))
            .deadline(t0 + Duration::from_secs(10));
        // One send per second: the retry is held until 1.05 s.
        let throttle = RateThrottle::new(1, Duration::from_secs(1)).unwrap();
        let paced = Paced::new(m, throttle, t0).retry_after_limits(policy.retry_after);
        let script = [
            Input::status(503),
            Input::Wake, // 250 ms: the retry is due, and held by the pace
            Input::Stray {
                item: 0,
                attempt: 1,
                status: 503,
            }, // an answer for the held attempt, which was never sent
            Input::Wake, // 1.05 s: the pace grants; attempt 1 goes out
            Input::status(200),
        ];
        let mut run = ScriptRunner::new(t0, paced, checker);
        run.play(&script).unwrap();
        let trace = run.finish().unwrap();
        assert_eq!(trace.outcome, Outcome::Succeeded { status: 200 });
        assert_eq!(trace.sends().count(), 2);
    }
}
