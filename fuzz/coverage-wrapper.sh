#!/bin/sh
# rustc wrapper for the fuzz build (.ci/fuzz.sh sets RUSTC_WRAPPER to it):
# builds polite-testing's own code without coverage instrumentation
# (cargo-fuzz's RUSTFLAGS ask for level 4 for every crate; a later
# `-sanitizer-coverage-level=0` wins), and the decoding library `arbitrary`
# and libfuzzer-sys's Rust glue too (their counters only told how many
# values a case decoded; README.md, "Fourth pass"). Every other crate, and
# the machines' generic code the fuzz targets instantiate, stay
# instrumented. Why: see README.md, "Speed".
rustc="$1"
shift
case " $* " in
*" --crate-name polite_testing "* | *" --crate-name arbitrary "* | *" --crate-name libfuzzer_sys "*)
    exec "$rustc" "$@" -Cllvm-args=-sanitizer-coverage-level=0
    ;;
esac
exec "$rustc" "$@"
