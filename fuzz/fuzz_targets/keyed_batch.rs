//! Fuzz target `keyed_batch`: a BatchMachine over several keys, one RateThrottle (and optionally one retry budget) per key, checked by polite_testing::BatchChecker::throttled_per_key over event scripts.
//! Decoding and checks live in `polite_testing::fuzz`, shared with
//! the corpus replay test `core/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polite_testing::fuzz::Target;

fuzz_target!(|data: &[u8]| {
    if let Err(failure) = Target::Keyed.check(data) {
        panic!("{failure}");
    }
});
