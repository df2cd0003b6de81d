//! `polite-bench-observe`: what observing polite costs (BENCHMARKS.md,
//! section 10) — tracing subscribers and a `metrics` recorder around
//! polite-blocking's `send`.
//!
//! ```text
//! cargo run --release -p polite-bench-observe [-- --smoke]
//! ```
//!
//! A crate of its own because it builds polite with feature `metrics`;
//! `polite-bench`'s suites measure polite as a user builds it by default,
//! without the feature.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Instant;

use polite_bench::Size;

mod observe;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => Size::Full,
        ["--smoke"] => Size::Smoke,
        _ => {
            eprintln!(
                "usage: polite-bench-observe [--smoke]\n  --smoke: tiny sizes (checks the harness, measures nothing)"
            );
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    println!("## observe\n");
    for table in observe::run(size) {
        println!("{}", table.render());
    }
    println!(
        "_(suite `observe` took {:.1} s; `cargo run --release -p polite-bench-observe`)_\n",
        started.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}
