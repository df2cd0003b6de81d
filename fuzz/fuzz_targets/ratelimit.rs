//! Fuzz target `ratelimit`: the `RateLimit`, `RateLimit-Policy` and
//! `X-RateLimit-*` parsers of `polite_core::ratelimit`, against an
//! independent reading with `sfv`'s parsed types and the soundness of the
//! folded quota.
//! Decoding and checks live in `polite_testing::fuzz`, shared with
//! the corpus replay test `core/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polite_testing::fuzz::Target;

fuzz_target!(|data: &[u8]| {
    if let Err(failure) = Target::RateLimit.check(data) {
        panic!("{failure}");
    }
});
