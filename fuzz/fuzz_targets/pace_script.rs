//! Fuzz target `pace_script`: RateThrottle calls (testing::ThrottleChecker), BatchMachine (testing::BatchChecker) and Paced<RetryMachine> (testing::Checker) over event scripts.
//! Decoding and checks live in `polite_core::testing::fuzz`, shared with
//! the corpus replay test `core/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polite_core::testing::fuzz::Target;

fuzz_target!(|data: &[u8]| {
    if let Err(failure) = Target::Pace.check(data) {
        panic!("{failure}");
    }
});
