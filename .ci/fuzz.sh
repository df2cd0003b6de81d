#!/usr/bin/env bash
# Fuzz smoke for CI: builds every cargo-fuzz target in fuzz/ and runs each
# for FUZZ_SECONDS (default 20) seconds, starting from the committed seed
# corpus (fuzz/corpus/<target>/, read only: new inputs go to a temporary
# folder). Fails on any crash, i.e. any invariant a target's checker finds
# broken, and prints the crashing input (base64) to reproduce it with
#   base64 -d > crash && cargo +nightly fuzz run <target> crash
# Prints one line per target with its executions.
#
# Needs nightly (`cargo +nightly`) and cargo-fuzz (installed with
# `cargo install cargo-fuzz --locked` when missing). Without them it says
# why and exits 0: the stable replay of the same corpus
# (core/tests/fuzz_corpus.rs) still runs with `cargo test`.
#
# Budget: about 1.5 min to build, 20 s per target; about 3.5 min in all
# with 5 targets (plus about 1 min once to install cargo-fuzz).
set -uo pipefail
cd "$(dirname "$0")/.."

secs="${FUZZ_SECONDS:-20}"

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: skipped: no nightly toolchain (cargo +nightly); the corpus replay test still runs on stable"
    exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz missing; installing it (cargo install cargo-fuzz --locked)"
    if ! timeout 900 cargo install cargo-fuzz --locked >/tmp/cargo-fuzz-install.log 2>&1; then
        echo "fuzz: skipped: could not install cargo-fuzz (see /tmp/cargo-fuzz-install.log); the corpus replay test still runs on stable"
        tail -5 /tmp/cargo-fuzz-install.log
        exit 0
    fi
fi

cd fuzz
echo "fuzz: building the targets ($(cargo fuzz --version))"
if ! cargo +nightly fuzz build >build.log 2>&1; then
    cat build.log
    rm -f build.log
    echo "fuzz: FAILED to build"
    exit 1
fi
rm -f build.log

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=0
for target in $(cargo +nightly fuzz list); do
    mkdir -p "$work/$target" "corpus/$target"
    log="$work/$target.log"
    cargo +nightly fuzz run "$target" "$work/$target" "corpus/$target" -- \
        -max_total_time="$secs" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$work/$target-" >"$log" 2>&1
    rc=$?
    execs="$(awk '/stat::number_of_executed_units/ { print $2 }' "$log" | tail -1)"
    rate="$(awk '/stat::average_exec_per_sec/ { print $2 }' "$log" | tail -1)"
    if [ "$rc" -eq 0 ]; then
        echo "fuzz: $target: ok, ${execs:-?} executions in ${secs} s (${rate:-?}/s), $(ls "corpus/$target" | wc -l) seeds"
    else
        echo "fuzz: $target: FAILED (exit $rc) after ${execs:-?} executions"
        grep -E -A3 "panicked at|invariant|ERROR: libFuzzer" "$log" | head -40
        for crash in "$work/$target"-*; do
            [ -f "$crash" ] || continue
            echo "fuzz: $target: crashing input $(basename "$crash") (base64): $(base64 -w0 "$crash")"
        done
        failed=1
    fi
done
exit "$failed"
