//! The `polite` command: `get`, `wait`, `batch` and `demo`.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod args;
mod demo;
mod exit;
mod log;
mod request;
mod run;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = args::Cli::parse(); // usage errors: clap prints them, exit 2
    let result = match &cli.command {
        args::Command::Get(a) => run::get(a),
        args::Command::Wait(a) => run::wait(a),
        args::Command::Batch(a) => run::batch(a),
        args::Command::Demo(a) => demo::run(a.only.as_deref()),
    };
    match result {
        Ok(code) => exit::code(code),
        Err(usage) => {
            eprintln!("polite: {usage}");
            exit::code(exit::USAGE)
        }
    }
}
