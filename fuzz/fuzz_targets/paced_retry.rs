//! Fuzz target `paced_retry`: a `Paced<RetryMachine>` (through a `RateThrottle` or a learning throttle) over event scripts, checked by polite_testing::Checker and at most `limit` sends per window.
//! Decoding and checks live in `polite_testing::fuzz`, shared with
//! the corpus replay test `core/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polite_testing::fuzz::Target;

fuzz_target!(|data: &[u8]| {
    if let Err(failure) = Target::PacedRetry.check(data) {
        panic!("{failure}");
    }
});
