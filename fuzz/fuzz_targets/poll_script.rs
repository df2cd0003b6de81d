//! Fuzz target `poll_script`: PollMachine over event scripts, checked by polite_testing::PollChecker.
//! Decoding and checks live in `polite_testing::fuzz`, shared with
//! the corpus replay test `core/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polite_testing::fuzz::Target;

fuzz_target!(|data: &[u8]| {
    if let Err(failure) = Target::Poll.check(data) {
        panic!("{failure}");
    }
});
