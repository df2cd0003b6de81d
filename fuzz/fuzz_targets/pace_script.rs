//! Fuzz target `pace_script`: RateThrottle calls (polite_testing::ThrottleChecker), BatchMachine (polite_testing::BatchChecker) and Paced<RetryMachine> (polite_testing::Checker) over event scripts.
//! Decoding and checks live in `polite_testing::fuzz`, shared with
//! the corpus replay test `core/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polite_testing::fuzz::Target;

fuzz_target!(|data: &[u8]| {
    if let Err(failure) = Target::Pace.check(data) {
        panic!("{failure}");
    }
});
