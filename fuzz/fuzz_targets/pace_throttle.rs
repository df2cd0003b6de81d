//! Fuzz target `pace_throttle`: a `RateThrottle` over a sequence of calls (acquire with the clock moving either way, cool-downs), checked call by call by polite_testing::ThrottleChecker's reference.
//! Decoding and checks live in `polite_testing::fuzz`, shared with
//! the corpus replay test `core/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polite_testing::fuzz::Target;

fuzz_target!(|data: &[u8]| {
    if let Err(failure) = Target::Throttle.check(data) {
        panic!("{failure}");
    }
});
