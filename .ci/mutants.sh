#!/usr/bin/env bash
# Mutation testing of the retry kernel (issue 23): cargo-mutants changes
# one thing at a time in the files below (an operator, a constant, a
# function body replaced by a default) and runs the tests that should
# notice; a mutant the tests do not notice ("missed") is a gap in the
# tests, or an equivalent mutant explained in the list below.
#
#   .ci/mutants.sh                 # the kernel files, the fast test set
#   MUTANTS_FILES="core/src/backoff.rs" .ci/mutants.sh
#   MUTANTS_JOBS=2 .ci/mutants.sh  # parallel builds (needs RAM and cores)
#
# Files: core/src/retry_after.rs, core/src/backoff.rs, core/src/decide.rs
# and core/src/retry/ (the decision kernel every machine shares and the
# RetryMachine around it).
#
# Tests run per mutant: polite-core's unit tests and the integration tests
# that pin the kernel's values (kernel_values, retry_scenarios,
# hostile_servers, retry_budget, poll_scenarios); not the
# exhaustive exploration nor the 1,000-case properties, which take minutes
# per mutant in a debug build.
#
# Needs cargo-mutants (`cargo install cargo-mutants --locked`; installed
# when missing). Output: mutants.out/ (missed.txt, caught.txt, timeout.txt,
# unviable.txt). Exits non-zero when a mutant is missed.
#
# Time (measured 2026-11-30 on this shared 2-core machine at load ~13,
# files retry_after.rs + backoff.rs + decide.rs, 110 mutants): 467 s to
# build the copy once, 42 s for the unmutated test run, then about 35-45 s
# per mutant (most of it compiling and linking the test binaries): over an
# hour for those three files, more with core/src/retry/. Run it by hand or
# nightly, not in .ci/run.
#
# Results of that run, and the mutants that cannot be killed (equivalent:
# no input tells them apart), are in the issue 23 report; the survivors it
# found in decide.rs are killed by core/tests/kernel_values.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo mutants --version >/dev/null 2>&1; then
    echo "mutants: installing cargo-mutants (cargo install cargo-mutants --locked)"
    cargo install cargo-mutants --locked
fi

files="${MUTANTS_FILES:-core/src/retry_after.rs core/src/backoff.rs core/src/decide.rs core/src/retry/mod.rs core/src/retry/state.rs}"
args=()
for f in $files; do
    args+=(--file "$f")
done

# Its own target dir: cargo-mutants builds a copy of the tree.
export CARGO_TARGET_DIR="${MUTANTS_TARGET_DIR:-target/mutants}"
cargo mutants -p polite-core "${args[@]}" --jobs "${MUTANTS_JOBS:-1}" --timeout 300 -- \
    --lib --test kernel_values --test retry_scenarios --test hostile_servers \
    --test retry_budget --test poll_scenarios
