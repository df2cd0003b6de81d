//! Fuzz target `retry_after`: Retry-After and Date parsing, against httpdate and SPEC §2.1.
//! Decoding and checks live in `polite_testing::fuzz`, shared with
//! the corpus replay test `core/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polite_testing::fuzz::Target;

fuzz_target!(|data: &[u8]| {
    if let Err(failure) = Target::RetryAfter.check(data) {
        panic!("{failure}");
    }
});
