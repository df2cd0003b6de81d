//! The fuzz decoders' reused buffers (`polite_testing::fuzz`, module
//! `spare`; fuzz/README.md, "Speed"): every committed corpus input decodes
//! to the same case whether its buffers are new (a fresh thread, as in
//! the corpus replay of core/tests/fuzz_corpus.rs) or spare ones given
//! back by earlier cases (as in a fuzzing run), and the batch targets'
//! decoding, once warm, allocates nothing per answer.
//!
//! `unsafe`: a `GlobalAlloc` impl must be `unsafe impl`; it forwards to the
//! system allocator and counts, as in no_alloc_checkers.rs.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;

use polite_testing::Input;
use polite_testing::fuzz::{
    Case, HeaderCase, KeyedCase, PaceBatchCase, PacedRetryCase, PollCase, RateLimitCase, RetryCase,
    Target, ThrottleCase,
};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to `System` unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

fn corpus(target: Target) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target.name());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a corpus entry").path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let data = std::fs::read(&f).expect("a corpus file");
            (f, data)
        })
        .collect()
}

/// Every corpus input of `C`'s target decodes, as `{:?}`, to the same case
/// in a fresh thread (no spare buffers) and here after the whole corpus
/// was decoded and disposed of twice (spare buffers from other cases).
fn same_with_spares<C: Case>(target: Target) {
    let files = corpus(target);
    assert!(!files.is_empty(), "{}: no corpus", target.name());
    let fresh: Vec<String> = std::thread::spawn({
        let files = files.clone();
        move || {
            files
                .iter()
                .map(|(_, data)| format!("{:?}", C::decode(data)))
                .collect()
        }
    })
    .join()
    .expect("the fresh decoding thread");
    for _ in 0..2 {
        for (_, data) in &files {
            C::decode(data).dispose();
        }
    }
    // In reverse too, so that each case gets other cases' buffers.
    for ((f, data), want) in files.iter().zip(&fresh).rev() {
        let case = C::decode(data);
        assert_eq!(&format!("{case:?}"), want, "{}", f.display());
        case.dispose();
    }
}

#[test]
fn every_corpus_input_decodes_the_same_with_spare_buffers() {
    same_with_spares::<HeaderCase>(Target::RetryAfter);
    same_with_spares::<RetryCase>(Target::Retry);
    same_with_spares::<PollCase>(Target::Poll);
    same_with_spares::<ThrottleCase>(Target::Throttle);
    same_with_spares::<PaceBatchCase>(Target::PaceBatch);
    same_with_spares::<PacedRetryCase>(Target::PacedRetry);
    same_with_spares::<RateLimitCase>(Target::RateLimit);
    same_with_spares::<KeyedCase>(Target::Keyed);
}

/// Header values longer than a new spare buffer holds (64 bytes), which
/// may make a spare buffer grow once.
fn long_values(script: &[Input]) -> u64 {
    let long = |v: &Option<Vec<u8>>| v.as_ref().is_some_and(|v| v.len() > 64);
    script
        .iter()
        .map(|i| match i {
            Input::Answer(a) => {
                u64::from(long(&a.retry_after))
                    + u64::from(long(&a.date))
                    + a.headers.iter().filter(|(_, v)| v.len() > 64).count() as u64
            }
            _ => 0,
        })
        .sum()
}

/// Once a case was decoded and disposed of, decoding it again allocates
/// only the request list (and grows a spare buffer for a header value
/// longer than 64 bytes), however many answers its script has.
#[test]
fn batch_decoding_allocates_nothing_per_answer_once_warm() {
    let mut answers = 0;
    for (f, data) in corpus(Target::Keyed) {
        KeyedCase::decode(&data).dispose();
        let before = allocs();
        let case = KeyedCase::decode(&data);
        let n = allocs() - before;
        let allowed = u64::from(!case.requests.is_empty()) + long_values(&case.script);
        answers += case
            .script
            .iter()
            .filter(|i| matches!(i, Input::Answer(_)))
            .count();
        assert!(
            n <= allowed,
            "{}: {n} allocations, {allowed} allowed",
            f.display()
        );
        case.dispose();
    }
    for (f, data) in corpus(Target::PaceBatch) {
        PaceBatchCase::decode(&data).dispose();
        let before = allocs();
        let case = PaceBatchCase::decode(&data);
        let n = allocs() - before;
        let allowed = u64::from(!case.requests.is_empty()) + long_values(&case.script);
        answers += case
            .script
            .iter()
            .filter(|i| matches!(i, Input::Answer(_)))
            .count();
        assert!(
            n <= allowed,
            "{}: {n} allocations, {allowed} allowed",
            f.display()
        );
        case.dispose();
    }
    // The corpus has answers to decode (else this asserts nothing).
    assert!(answers > 100, "{answers} answers");
}
