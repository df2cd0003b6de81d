//! Instructions per decision, for the decisions of `decisions.rs` and their
//! floor: the count does not depend on the machine's load (the shared VM
//! has no hardware counters, so callgrind counts them).
//!
//! ```text
//! cargo bench -p polite-core --bench decision_instructions --no-run
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     --toggle-collect='*measured*' <the bench binary> <case>
//! ```
//!
//! `Collected` in valgrind's summary / 10,000 is the count per decision
//! (handle + poll_action, or the floor's `decide`), plus the loop's couple
//! of instructions, the same for every case. Cases: `retry_503`,
//! `retry_429_retry_after`, `retry_200`, `floor`, `floor_retry_after`,
//! `poll_long`, `poll_backoff`. Without valgrind, the binary just runs.

mod common;

use std::hint::black_box;
use std::time::Duration;

use common::{Floor, floor_decision, in_flight, poll_decision, poll_in_flight, retry_decision};
use polite_core::RetryPolicy;

/// Decisions per run (a second argument overrides it, e.g. for `perf record`).
const N: usize = 10_000;

/// The only collected function: `N` decisions over fresh inputs.
#[inline(never)]
fn measured<I, O>(inputs: &mut [I], mut decide: impl FnMut(&mut I) -> O) {
    for input in inputs {
        black_box(decide(input));
    }
}

fn run<I, O>(setup: impl FnMut(usize) -> I, decide: impl FnMut(&mut I) -> O) {
    let n = std::env::args()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or(N);
    let mut inputs: Vec<I> = (0..n).map(setup).collect();
    measured(&mut inputs, decide);
    black_box(inputs);
}

fn main() {
    let t0 = polite_testing::origin();
    let case = std::env::args().nth(1).unwrap_or_default();
    let retry_now = t0 + Duration::from_millis(10);
    let poll_now = t0 + Duration::from_secs(25);
    let policy = RetryPolicy::default();
    let wall = common::wall();
    let retry = |_| in_flight(policy, t0);
    match case.as_str() {
        "retry_503" => run(retry, |m| retry_decision(m, retry_now, wall, 503, false)),
        "retry_429_retry_after" => run(retry, |m| retry_decision(m, retry_now, wall, 429, true)),
        "retry_200" => run(retry, |m| retry_decision(m, retry_now, wall, 200, false)),
        "floor" => run(|_| Floor::new(), |f| floor_decision(f, retry_now, false)),
        "floor_retry_after" => run(|_| Floor::new(), |f| floor_decision(f, retry_now, true)),
        "poll_long" => run(
            |_| poll_in_flight(true, t0),
            |m| poll_decision(m, poll_now, wall),
        ),
        "poll_backoff" => run(
            |_| poll_in_flight(false, t0),
            |m| poll_decision(m, poll_now, wall),
        ),
        other => {
            eprintln!("unknown case {other:?}; see the module docs");
            std::process::exit(2);
        }
    }
}
