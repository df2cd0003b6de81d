//! `polite-bench`: the macro benchmarks of BENCHMARKS.md.
//!
//! ```text
//! cargo run --release -p polite-bench -- <suite> [--smoke]
//! suites: poll quota nohints deadline cancel scale scale-batch sizes overhead tls fleet instructions all
//! ```
//!
//! What observing costs (tracing subscribers, a `metrics` recorder) is the
//! crate `polite-bench-observe` (`cargo run --release -p
//! polite-bench-observe`): it builds polite with feature `metrics`, and
//! this crate measures polite as a user builds it by default, without.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use polite_bench::{
    Size, batch_scale, cancel, deadline, nohints, overhead, poll, quota, scale, stats::Table, tls,
};

const SUITES: &[&str] = &[
    "poll",
    "quota",
    "nohints",
    "deadline",
    "cancel",
    "scale",
    "scale-batch",
    "sizes",
    "overhead",
    "tls",
    "fleet",
    "instructions",
    "all",
];

fn usage() -> ExitCode {
    eprintln!(
        "usage: polite-bench <suite> [--smoke]\n  suites: {}\n  --smoke: tiny sizes (checks the harness, measures nothing)\n  what observing costs: cargo run --release -p polite-bench-observe",
        SUITES.join(" ")
    );
    ExitCode::from(2)
}

fn run_suite(name: &str, size: Size) -> Vec<Table> {
    match name {
        "poll" => poll::run(size),
        "quota" => quota::run(size),
        "nohints" => nohints::run(size),
        "deadline" => deadline::run(size),
        "cancel" => cancel::run(size),
        "scale" => scale::run(size),
        "scale-batch" => batch_scale::run(size),
        "sizes" => vec![scale::sizes_table(size)],
        "overhead" => overhead::run(size),
        "tls" => tls::run(size),
        "fleet" => polite_bench::fleet::run(size),
        "instructions" => polite_bench::instructions::run(size),
        _ => Vec::new(),
    }
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize) -> Option<T> {
    args.get(i)?.parse().ok()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        // Hidden helper of the instructions suite (run under callgrind).
        Some("calls") => {
            let (Some(variant), Some(n)) = (args.get(1), arg::<usize>(&args, 2)) else {
                return usage();
            };
            let variants = polite_bench::instructions::VARIANTS;
            if !variants.iter().any(|(v, _, _)| v == variant) {
                let names: Vec<&str> = variants.iter().map(|(v, _, _)| *v).collect();
                eprintln!(
                    "usage: polite-bench calls <variant> <n>\n  variants: {}",
                    names.join(" ")
                );
                return ExitCode::from(2);
            }
            let ok = polite_bench::instructions::calls(variant, n);
            if ok == n {
                ExitCode::SUCCESS
            } else {
                eprintln!("{ok} of {n} calls answered 200");
                ExitCode::FAILURE
            }
        }
        // Hidden helper of the tls suite (run under callgrind).
        Some("tls-calls") => {
            let (Some(variant), Some(n)) = (args.get(1), arg::<usize>(&args, 2)) else {
                return usage();
            };
            let ok = tls::calls(variant, n);
            if ok == n {
                ExitCode::SUCCESS
            } else {
                eprintln!("{ok} of {n} calls answered 200");
                ExitCode::FAILURE
            }
        }
        // Hidden helpers of the scale suite (separate processes).
        Some("serve-lab") => {
            let (Some(n), Some(job), Some(wait)) = (
                arg::<usize>(&args, 1),
                arg::<u64>(&args, 2),
                arg::<u64>(&args, 3),
            ) else {
                return usage();
            };
            scale::serve_lab(n, Duration::from_millis(job), Duration::from_millis(wait));
            ExitCode::SUCCESS
        }
        Some("scale-client") => {
            let (Some(addr), Some(n), Some(variant)) =
                (args.get(1), arg::<usize>(&args, 2), args.get(3))
            else {
                return usage();
            };
            scale::scale_client(addr, n, variant);
            ExitCode::SUCCESS
        }
        // Hidden helper of the scale-batch suite (one process per run).
        Some("batch-client") => {
            let (Some(url), Some(n), Some(size), Some(client)) = (
                args.get(1),
                arg::<usize>(&args, 2),
                arg::<usize>(&args, 3),
                args.get(4),
            ) else {
                return usage();
            };
            batch_scale::batch_client(url, n, size, client);
            ExitCode::SUCCESS
        }
        Some(suite) if SUITES.contains(&suite) => {
            let size = if args.iter().any(|a| a == "--smoke") {
                Size::Smoke
            } else {
                Size::Full
            };
            let names: Vec<&str> = if suite == "all" {
                vec![
                    "overhead",
                    "deadline",
                    "cancel",
                    "poll",
                    "quota",
                    "nohints",
                    "scale",
                    "scale-batch",
                    "tls",
                    "fleet",
                    "instructions",
                ]
            } else {
                vec![suite]
            };
            for name in names {
                let started = Instant::now();
                println!("## {name}\n");
                for table in run_suite(name, size) {
                    println!("{}", table.render());
                }
                println!(
                    "_(suite `{name}` took {:.1} s; `cargo run --release -p polite-bench -- {name}`)_\n",
                    started.elapsed().as_secs_f64()
                );
            }
            ExitCode::SUCCESS
        }
        _ => usage(),
    }
}
