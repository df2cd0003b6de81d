//! `polite-lab`: serve the lab on 127.0.0.1 for manual trials, until Ctrl-C.
//!
//! ```text
//! cargo run -p polite-lab --features cli -- --port 8080 --quota 3/500ms --retry-after imf-fixdate --ratelimit-headers
//! ```
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use polite_lab::{
    Disposition, Fault, JobClock, JobState, Lab, LabConfig, LabHandle, PathMatch, Quota,
    RetryAfterStyle, Step, parse_script,
};

/// Serve the polite lab (a test HTTP/1.1 server) on 127.0.0.1 until Ctrl-C.
///
/// Endpoints: POST /runs; GET /runs/{id}[?waitSeconds=N] (long poll);
/// GET|PUT|POST|DELETE /items/{k}; GET /bytes/{n} (n bytes). Durations are
/// like 500ms, 2s, 1.5s, 1m (a bare number is seconds).
#[derive(Debug, Parser)]
#[command(name = "polite-lab", version)]
struct Args {
    /// Port to bind on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 8080)]
    port: u16,

    /// Seed of the random source (used by --fail).
    #[arg(long, default_value_t = 0)]
    seed: u64,

    /// Quota as LIMIT/WINDOW, e.g. 3/500ms or 60/1m (429 when exceeded).
    #[arg(long, value_parser = parse_quota)]
    quota: Option<(u32, Duration)>,

    /// How the quota counts.
    #[arg(long, value_enum, default_value_t = WindowArg::Fixed)]
    quota_window: WindowArg,

    /// Apply the quota only to paths starting with this prefix (default: one quota for all paths).
    #[arg(long, value_name = "PREFIX")]
    quota_path: Option<String>,

    /// Count requests refused with 429 against the quota.
    #[arg(long)]
    count_refused: bool,

    /// Retry-After style: seconds, imf-fixdate, rfc850, asctime, invalid, hostile (86400) or none.
    #[arg(long, default_value = "seconds", value_name = "STYLE")]
    retry_after: RetryAfterStyle,

    /// Announce this fixed Retry-After (seconds) on quota 429s instead of the true wait.
    #[arg(long, value_name = "SECONDS")]
    retry_after_fixed: Option<u64>,

    /// Retry-After (seconds) of scripted and random 429/503 answers without an explicit one.
    #[arg(long, default_value_t = 1, value_name = "SECONDS")]
    scripted_retry_after: u64,

    /// Send the IETF draft RateLimit / RateLimit-Policy headers on quota'd paths.
    #[arg(long)]
    ratelimit_headers: bool,

    /// Send X-RateLimit-Limit / -Remaining / -Reset on quota'd paths.
    #[arg(long)]
    x_ratelimit_headers: bool,

    /// Switch long polling off: any waitSeconds then gets 400 VALIDATION_ERROR.
    #[arg(long)]
    no_long_poll: bool,

    /// The longest a long poll is held.
    #[arg(long, value_parser = parse_duration, default_value = "60s", value_name = "DURATION")]
    max_wait: Duration,

    /// How long jobs created by POST /runs run.
    #[arg(long, value_parser = parse_duration, default_value = "5s", value_name = "DURATION")]
    run_duration: Duration,

    /// Final state of jobs created by POST /runs: passed, failed or cancelled.
    #[arg(long, default_value = "passed", value_name = "STATE")]
    run_state: JobState,

    /// Declare a job to poll without POST: ID=DURATION[:STATE], e.g. j1=3s:failed (repeatable).
    #[arg(long = "job", value_parser = parse_job, value_name = "ID=DURATION[:STATE]")]
    jobs: Vec<(String, Duration, JobState)>,

    /// When declared jobs start their clock.
    #[arg(long, value_enum, default_value_t = ClockArg::FirstRequest)]
    job_clock: ClockArg,

    /// Scripted answers for one path: PATH=STEPS, steps ok|reset|hang|STATUS|STATUS:SECONDS,
    /// e.g. /items/a=503,429:1,ok (repeatable).
    #[arg(long = "script", value_parser = parse_script_arg, value_name = "PATH=STEPS")]
    scripts: Vec<(String, Vec<Step>)>,

    /// Random failures on paths starting with PREFIX: PREFIX=PROBABILITY[:STATUS], e.g. /items/=0.2:503 (repeatable).
    #[arg(long = "fail", value_parser = parse_fail, value_name = "PREFIX=P[:STATUS]")]
    fails: Vec<(String, f64, u16)>,

    /// Reset the connection (no answer) on paths starting with PREFIX (repeatable).
    #[arg(long = "reset", value_name = "PREFIX")]
    resets: Vec<String>,

    /// Never answer on paths starting with PREFIX (repeatable).
    #[arg(long = "hang", value_name = "PREFIX")]
    hangs: Vec<String>,

    /// Wait before the headers on paths starting with PREFIX: PREFIX=DURATION, e.g. /=15ms (repeatable).
    #[arg(long = "slow", value_parser = parse_slow, value_name = "PREFIX=DURATION")]
    slows: Vec<(String, Duration)>,

    /// Skew the Date header by this many seconds (negative: the server clock is behind).
    #[arg(
        long,
        default_value_t = 0,
        allow_negative_numbers = true,
        value_name = "SECONDS"
    )]
    date_skew: i64,

    /// Do not print each request.
    #[arg(long)]
    quiet: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum WindowArg {
    Fixed,
    Sliding,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ClockArg {
    FirstRequest,
    LabStart,
}

/// `500ms`, `2s`, `1.5s`, `1m`, or a bare number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("bad duration `{text}` (e.g. 500ms, 2s, 1m)"))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        _ => return Err(format!("bad duration unit in `{text}` (ms, s or m)")),
    };
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("bad duration `{text}`"))
}

fn parse_quota(text: &str) -> Result<(u32, Duration), String> {
    let (limit, window) = text
        .split_once('/')
        .ok_or_else(|| format!("bad quota `{text}`: expected LIMIT/WINDOW, e.g. 3/500ms"))?;
    let limit = limit
        .trim()
        .parse()
        .map_err(|_| format!("bad quota limit in `{text}`"))?;
    Ok((limit, parse_duration(window)?))
}

fn split_pair(text: &str) -> Result<(String, &str), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got `{text}`"))?;
    Ok((key.trim().to_owned(), value))
}

fn parse_job(text: &str) -> Result<(String, Duration, JobState), String> {
    let (id, rest) = split_pair(text)?;
    let (duration, state) = match rest.split_once(':') {
        Some((d, s)) => (d, s.parse()?),
        None => (rest, JobState::Passed),
    };
    Ok((id, parse_duration(duration)?, state))
}

fn parse_script_arg(text: &str) -> Result<(String, Vec<Step>), String> {
    let (path, steps) = split_pair(text)?;
    Ok((path, parse_script(steps)?))
}

fn parse_fail(text: &str) -> Result<(String, f64, u16), String> {
    let (prefix, rest) = split_pair(text)?;
    let (p, status) = match rest.split_once(':') {
        Some((p, s)) => (
            p,
            s.trim()
                .parse()
                .map_err(|_| format!("bad status in `{text}`"))?,
        ),
        None => (rest, 503),
    };
    let p: f64 = p
        .trim()
        .parse()
        .map_err(|_| format!("bad probability in `{text}`"))?;
    Ok((prefix, p, status))
}

fn parse_slow(text: &str) -> Result<(String, Duration), String> {
    let (prefix, d) = split_pair(text)?;
    Ok((prefix, parse_duration(d)?))
}

fn config(args: &Args) -> LabConfig {
    let mut c = LabConfig::default()
        .port(args.port)
        .seed(args.seed)
        .long_poll(!args.no_long_poll)
        .max_wait(args.max_wait)
        .run_duration(args.run_duration)
        .run_final_state(args.run_state)
        .job_clock(match args.job_clock {
            ClockArg::FirstRequest => JobClock::FirstRequest,
            ClockArg::LabStart => JobClock::LabStart,
        })
        .retry_after_style(args.retry_after)
        .scripted_retry_after(Duration::from_secs(args.scripted_retry_after))
        .ratelimit_headers(args.ratelimit_headers)
        .x_ratelimit_headers(args.x_ratelimit_headers)
        .count_refused(args.count_refused)
        .date_skew_secs(args.date_skew);
    if let Some((limit, window)) = args.quota {
        let q = match args.quota_window {
            WindowArg::Fixed => Quota::fixed(limit, window),
            WindowArg::Sliding => Quota::sliding(limit, window),
        };
        let scope = args
            .quota_path
            .clone()
            .map_or(PathMatch::Any, PathMatch::Prefix);
        c = c.quota(q.on(scope));
    }
    if let Some(secs) = args.retry_after_fixed {
        c = c.fixed_retry_after(Duration::from_secs(secs));
    }
    for (id, d, state) in &args.jobs {
        c = c.job(id.clone(), *d, *state);
    }
    for (prefix, d) in &args.slows {
        c = c.fault(PathMatch::prefix(prefix.clone()), Fault::Slow(*d));
    }
    for (path, steps) in &args.scripts {
        c = c.script(path.clone(), steps.clone());
    }
    for (prefix, probability, status) in &args.fails {
        c = c.fault(
            PathMatch::prefix(prefix.clone()),
            Fault::FailRandomly {
                probability: *probability,
                status: *status,
            },
        );
    }
    for prefix in &args.resets {
        c = c.fault(PathMatch::prefix(prefix.clone()), Fault::Reset);
    }
    for prefix in &args.hangs {
        c = c.fault(PathMatch::prefix(prefix.clone()), Fault::Hang);
    }
    c
}

/// Prints the requests that completed (or started hanging) since the last call.
fn print_new(lab: &LabHandle, printed: &mut HashSet<u64>) {
    for entry in lab.log() {
        if entry.disposition != Disposition::InFlight && printed.insert(entry.seq) {
            println!("{}", entry.summary());
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let lab = match Lab::start(config(&args)) {
        Ok(lab) => lab,
        Err(e) => {
            eprintln!("polite-lab: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("polite-lab listening on {}", lab.url("/"));
    println!("  POST {}", lab.url("/runs"));
    println!("  GET  {}?waitSeconds=N", lab.url("/runs/{id}"));
    println!("  GET|PUT|POST|DELETE {}", lab.url("/items/{k}"));
    println!("  GET  {}", lab.url("/bytes/{n}"));
    println!("Ctrl-C to stop.");
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("polite-lab: {e}");
            return ExitCode::FAILURE;
        }
    };
    let quiet = args.quiet;
    runtime.block_on(async {
        let mut printed = HashSet::new();
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        loop {
            tokio::select! {
                _ = &mut ctrl_c => break,
                _ = tick.tick() => if !quiet { print_new(&lab, &mut printed) },
            }
        }
    });
    let served = lab.log().len();
    drop(lab);
    println!("polite-lab stopped after {served} requests.");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1h").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn args_build_a_valid_config() {
        let args = Args::try_parse_from([
            "polite-lab",
            "--port",
            "0",
            "--quota",
            "3/500ms",
            "--quota-window",
            "sliding",
            "--retry-after",
            "rfc850",
            "--job",
            "j1=3s:failed",
            "--script",
            "/items/a=503,429:1,ok",
            "--fail",
            "/items/=0.5:500",
            "--slow",
            "/=15ms",
            "--date-skew",
            "-30",
        ])
        .expect("args parse");
        let c = config(&args);
        assert!(c.validate().is_ok());
        assert_eq!(c.jobs()[0].final_state, JobState::Failed);
        assert_eq!(c.quotas()[0].limit, 3);
        assert_eq!(c.faults().len(), 3);
    }
}
