//! The `polite` command: `get`, `wait`, `batch` and `demo`.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod args;
mod demo;
mod exit;
mod fleet;
mod log;
mod progress;
mod redact;
mod request;
mod run;
mod tally;
mod traceparent;

use std::process::ExitCode;

use clap::Parser;
use clap::error::{ContextKind, ContextValue, ErrorKind};

use std::error::Error as _;

fn main() -> ExitCode {
    // The JSON log's `elapsed_ms` counts from here.
    log::started();
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(&e),
    };
    let common = match &cli.command {
        args::Command::Get(a) => Some(&a.common),
        args::Command::Wait(a) => Some(&a.common),
        args::Command::Batch(a) => Some(&a.common),
        args::Command::Demo(_) => None,
    };
    if let Some(Err(usage)) = common.map(|c| traceparent::init(c.traceparent.as_deref())) {
        eprintln!("polite: {usage}");
        return exit::code(exit::USAGE);
    }
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

/// A clap error: help and version print as clap prints them; every usage
/// error is one line, `polite: ...`, with what the user typed echoed
/// through the one redaction function (exit 2).
fn clap_error(e: &clap::Error) -> ExitCode {
    use redact::{Input, echo};
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return exit::code(if e.use_stderr() {
            exit::USAGE
        } else {
            exit::OK
        });
    }
    let text = |k: ContextKind| match e.get(k) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => Some(v.join(", ")),
        _ => None,
    };
    let arg = text(ContextKind::InvalidArg);
    let value = text(ContextKind::InvalidValue);
    let line = match (e.kind(), arg, value) {
        (ErrorKind::InvalidValue | ErrorKind::ValueValidation, Some(arg), Some(value)) => {
            // The validator's own message (ours never quote the value raw).
            let why = e
                .source()
                .map(|s| format!(": {}", redact::plain(&s.to_string())))
                .unwrap_or_default();
            format!(
                "invalid value {} for {}{why}",
                echo(Input::Text, &value),
                echo(Input::Text, &arg)
            )
        }
        (ErrorKind::UnknownArgument, Some(arg), _) => {
            format!("unexpected argument {}", echo(Input::Arg, &arg))
        }
        (ErrorKind::InvalidSubcommand, Some(arg), _) => {
            format!("unknown command {}", echo(Input::Arg, &arg))
        }
        (ErrorKind::MissingRequiredArgument, Some(arg), _) => {
            format!("missing {}", echo(Input::Text, &arg))
        }
        (kind, arg, _) => match arg {
            Some(arg) => format!("{kind} ({})", echo(Input::Arg, &arg)),
            None => kind.to_string(),
        },
    };
    eprintln!("polite: {line} (see --help)");
    exit::code(exit::USAGE)
}
