//! Command-line arguments (clap derive).

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::redact::{Input, echo};

/// Wait for remote results and retry failed HTTP calls without hammering the
/// server and without ever overrunning --timeout.
#[derive(Debug, Parser)]
#[command(name = "polite", version, about, after_help = crate::exit::HELP)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// One logical request with retries; the body goes to stdout.
    ///
    /// Retried: 429 (honouring Retry-After), 500/502/503/504 and transport
    /// errors. Non-idempotent methods (POST, PATCH) are NOT retried unless an
    /// --idempotency-key is given: a failed write is handed back, never re-sent.
    #[command(after_help = crate::exit::HELP)]
    Get(GetArgs),
    /// Wait for a remote job: long poll first, permanent fallback to backoff.
    ///
    /// Prints the final JSON answer on stdout. Exit 0 when the final state is
    /// one of --success, 1 for another terminal state.
    #[command(after_help = crate::exit::HELP)]
    Wait(WaitArgs),
    /// A paced batch: one URL per line on stdin, results as JSON lines in
    /// input order, all under one --timeout (default 10m for the batch).
    ///
    /// Each result line: `line` (the URL's line number on stdin, from 1),
    /// `url` (user-info, query values and fragment shown as ***), `ok`,
    /// `status`, and `body` or `error` (a body that is not UTF-8 is base64,
    /// with `"body_encoding":"base64"`). Blank lines and lines starting with
    /// `#` are skipped; a line that is no URL, not UTF-8 or longer than
    /// 64 KiB gets an error line of its own (exit 2), and the lines after
    /// it are still read.
    ///
    /// With no flags the pace is `--rate auto`: no fixed client-side limit,
    /// the server's quota learnt from its RateLimit headers, and a rate that
    /// adapts to 429s without hints (cut to 0.7x the measured rate, once per
    /// burst of 429s, grown back on success: the AWS SDKs' adaptive mode). A healthy
    /// server is never slowed down; a rate-limited one gets few 429s.
    /// Every 429 also holds back all items until the server's Retry-After
    /// (or, without one, the refused item's backoff).
    #[command(after_help = crate::exit::HELP)]
    Batch(BatchArgs),
    /// Start a loopback lab server and compare a naive client with polite.
    Demo(DemoArgs),
}

/// Options every command shares.
#[derive(Debug, Args)]
pub(crate) struct Common {
    /// The whole budget: retries, waits and sleeps all spend it; longer
    /// than zero [default: 30s for get and wait; 10m for batch, the whole
    /// batch].
    #[arg(long, value_parser = timeout, allow_hyphen_values = true)]
    pub(crate) timeout: Option<Duration>,
    /// Redirects followed per attempt (301, 302, 303, 307, 308); 0: none, a
    /// 3xx is the answer. A redirect to another origin (scheme, host, port)
    /// drops every -H header; a redirect loop ends the call at once.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub(crate) max_redirects: u32,
    /// Follow redirects only within the origin of the URL given (a
    /// redirect elsewhere is the answer).
    #[arg(long)]
    pub(crate) same_origin_redirects: bool,
    /// Request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub(crate) headers: Vec<String>,
    /// Retries allowed after 429 answers.
    #[arg(long, default_value_t = 3)]
    pub(crate) max_retries_429: u32,
    /// Retries allowed after 5xx answers.
    #[arg(long, default_value_t = 4)]
    pub(crate) max_retries_5xx: u32,
    /// Retries allowed after transport errors.
    #[arg(long, default_value_t = 4)]
    pub(crate) max_retries_transport: u32,
    /// More detail on stderr (every attempt, not only retries).
    #[arg(short, long)]
    pub(crate) verbose: bool,
    /// Attempt log format on stderr. json: one object per attempt with
    /// request, item, attempt (1-based), elapsed_ms (since the command
    /// started), status or transport_error, class, retry_after,
    /// next_delay_ms, next_source and outcome (null when not known), and
    /// one {"notice": ...} per notice.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// A W3C traceparent (00-TRACEID-PARENTID-FLAGS) to join: every
    /// --log-format json record then carries trace_id, span_id (this
    /// command's) and parent_span_id [default: $TRACEPARENT].
    #[arg(long, value_name = "TRACEPARENT")]
    pub(crate) traceparent: Option<String>,
    #[command(flatten)]
    pub(crate) fleet: crate::fleet::FleetArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// One line per retry.
    Text,
    /// One JSON object per attempt record.
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct GetArgs {
    /// The URL.
    pub(crate) url: String,
    /// The method.
    #[arg(short = 'X', long = "request", default_value = "GET")]
    pub(crate) method: String,
    /// The body: literal text, `@file`, or `-` for stdin; at most 64 MiB
    /// (polite keeps the body in memory to send it again).
    #[arg(short = 'd', long = "data")]
    pub(crate) data: Option<String>,
    /// Sends `Idempotency-Key: K`, which makes a POST or PATCH safe to retry.
    #[arg(long, value_name = "K")]
    pub(crate) idempotency_key: Option<String>,
    #[command(flatten)]
    pub(crate) common: Common,
}

#[derive(Debug, Args)]
pub(crate) struct WaitArgs {
    /// The job resource, e.g. http://127.0.0.1:8080/runs/42.
    pub(crate) url: String,
    /// The JSON field holding the job state (dots for nesting: data.state).
    #[arg(long, default_value = "status", value_parser = field)]
    pub(crate) field: String,
    /// Terminal states, comma-separated [default: passed, failed, cancelled,
    /// canceled, done, succeeded, success, completed, complete, finished,
    /// error, errored, failure, aborted].
    #[arg(long, value_delimiter = ',', value_parser = state)]
    pub(crate) terminal: Vec<String>,
    /// Terminal states that mean success (exit 0), comma-separated
    /// [default: those of passed, done, succeeded, success, completed,
    /// complete, finished that are terminal].
    #[arg(long, value_delimiter = ',', value_parser = state)]
    pub(crate) success: Vec<String>,
    /// The long-poll query parameter.
    #[arg(long, default_value = "waitSeconds")]
    pub(crate) wait_param: String,
    /// Start in backoff mode (for servers known not to long-poll).
    #[arg(long)]
    pub(crate) no_long_poll: bool,
    #[command(flatten)]
    pub(crate) common: Common,
}

#[derive(Debug, Args)]
pub(crate) struct BatchArgs {
    /// Client-side pace: `auto` (learn the server's quota from its RateLimit
    /// headers and adapt to 429s), `N/DURATION` (at most N sends per
    /// DURATION, e.g. 50/60s, N at most 1048576, and adapt below that to
    /// 429s), or `none` (no client-side limit; Retry-After is still
    /// honoured).
    #[arg(long, value_parser = rate, default_value = "auto")]
    pub(crate) rate: Rate,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) concurrency: u32,
    /// The method of every request.
    #[arg(short = 'X', long = "request", default_value = "GET")]
    pub(crate) method: String,
    /// Print each result as soon as its request ends (default: in input
    /// order, each line as soon as every earlier one is out; at most
    /// 4 × concurrency results wait for an earlier one, so a request that
    /// hangs holds the batch back until it ends; with --unordered it holds
    /// only its own slot).
    #[arg(long)]
    pub(crate) unordered: bool,
    #[command(flatten)]
    pub(crate) common: Common,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Only the named part: pacing, nohints, wait or hang.
    #[arg(long)]
    pub(crate) only: Option<String>,
}

/// `90s`, `10m`, `1h30m`, `250ms`.
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => {
            "too long a duration (try 30s, 10m, 250ms)".to_owned()
        }
        e => format!("{e} (try 30s, 10m, 250ms)"),
    })
}

/// A `--timeout`: a duration longer than zero (a zero budget could send
/// nothing).
/// A JSON field path for `wait --field`: names joined by dots, none empty
/// (an empty name matches no field, so the wait would only time out).
pub(crate) fn field(s: &str) -> Result<String, String> {
    if s.split('.').any(str::is_empty) {
        return Err(
            "a field is one or more names joined by dots, none empty (e.g. status, data.state)"
                .into(),
        );
    }
    Ok(s.to_owned())
}

/// A job state name for `--terminal` / `--success`: not empty (`a,,b` or
/// `''` is a typo, and no job reports an empty state).
pub(crate) fn state(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("a state name must not be empty (e.g. done,failed)".into());
    }
    Ok(s.to_owned())
}

pub(crate) fn timeout(s: &str) -> Result<Duration, String> {
    if s.trim_start().starts_with('-') {
        return Err("the timeout must be longer than zero (try 30s, 10m, 250ms)".into());
    }
    let d = duration(s)?;
    if d.is_zero() {
        return Err("the timeout must be longer than zero (try 30s, 10m, 250ms)".into());
    }
    Ok(d)
}

/// A client-side pace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rate {
    /// Learn the quota, adapt to 429s; no fixed limit.
    Auto,
    /// No client-side limit at all.
    None,
    /// At most `.0` sends per `.1`, adapting below that.
    Fixed(u32, Duration),
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rate::Auto => f.write_str("auto"),
            Rate::None => f.write_str("none"),
            Rate::Fixed(n, w) if w.subsec_nanos() == 0 => write!(f, "{n}/{}s", w.as_secs()),
            Rate::Fixed(n, w) => write!(f, "{n}/{}ms", w.as_millis()),
        }
    }
}

/// `50/60s` → 50 per 60 s; `auto`; `none` → no throttle.
pub(crate) fn rate(s: &str) -> Result<Rate, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(Rate::None);
    }
    if s.eq_ignore_ascii_case("auto") {
        return Ok(Rate::Auto);
    }
    let (n, w) = s.split_once('/').ok_or_else(|| {
        format!(
            "{}: expected auto, none or N/DURATION, e.g. 50/60s",
            echo(Input::Text, s)
        )
    })?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("{}: not a whole number of requests", echo(Input::Text, n)))?;
    if n == 0 {
        return Err("the rate must allow at least 1 request".into());
    }
    if n > polite_core::RateThrottle::MAX_LIMIT {
        return Err(format!(
            "the rate allows at most {} requests per window (e.g. 1000/1s)",
            polite_core::RateThrottle::MAX_LIMIT
        ));
    }
    let w = duration(w.trim())?;
    if w.is_zero() {
        return Err("the rate window must be longer than zero".into());
    }
    Ok(Rate::Fixed(n, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_durations() {
        assert_eq!(rate("50/60s"), Ok(Rate::Fixed(50, Duration::from_secs(60))));
        assert_eq!(rate("none"), Ok(Rate::None));
        assert_eq!(rate("AUTO"), Ok(Rate::Auto));
        assert_eq!(rate("50/1m").map(|r| r.to_string()), Ok("50/60s".into()));
        assert_eq!(rate("3/500ms").map(|r| r.to_string()), Ok("3/500ms".into()));
        assert!(rate("50").is_err());
        assert!(rate("0/1s").is_err());
        assert_eq!(
            rate("1048576/1s"),
            Ok(Rate::Fixed(1_048_576, Duration::from_secs(1)))
        );
        assert!(rate("1048577/1s").is_err_and(|e| e.contains("at most 1048576")));
        assert!(rate("4294967295/1s").is_err_and(|e| e.contains("at most 1048576")));
        assert!(rate("5/0s").is_err());
        assert!(rate("x/1s").is_err());
        assert_eq!(duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(duration("soon").is_err());
        assert!(timeout("0").is_err() && timeout("0s").is_err() && timeout("0ms").is_err());
        // A negative or overflowing one says what is wrong, in words.
        assert!(timeout("-1s").is_err_and(|e| e.contains("longer than zero")));
        assert!(timeout("99999999999999999999s").is_err_and(|e| e.starts_with("too long")));
        assert_eq!(timeout("1ms"), Ok(Duration::from_millis(1)));
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
