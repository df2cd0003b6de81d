//! Fuzz target `pace_batch`: a `BatchMachine` through a `RateThrottle` (or unpaced, or a learning throttle), with or without a shared retry budget, over event scripts, checked by polite_testing::BatchChecker.
//! Decoding and checks live in `polite_testing::fuzz`, shared with
//! the corpus replay test `core/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polite_testing::fuzz::Target;

fuzz_target!(|data: &[u8]| {
    if let Err(failure) = Target::PaceBatch.check(data) {
        panic!("{failure}");
    }
});
