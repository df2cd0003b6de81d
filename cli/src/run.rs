//! `get`, `wait` and `batch`: flags → a configured polite client → stdout,
//! stderr and an exit code.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use indicatif::{ProgressBar, ProgressStyle};
use polite_blocking::{BatchOrder, CancelToken, Client, Config, JsonJob, Observed, Throttle};
use polite_core::Outcome;
use polite_core::pace::PaceLimit;
use polite_core::policy::MaxRetries;
use polite_core::poll::{StateName, TerminalStates};

use crate::args::{BatchArgs, Common, GetArgs, Rate, WaitArgs};
use crate::exit;
use crate::log;
use crate::redact::{Input, echo};
use crate::request::{self, Usage};
use crate::tally::Tally;

/// The terminal states that mean success when `--success` is not given.
const DEFAULT_SUCCESS: [&str; 7] = [
    "passed",
    "done",
    "succeeded",
    "success",
    "completed",
    "complete",
    "finished",
];

/// `get` and `wait`: 30 s unless `--timeout` says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// `batch`: 10 minutes for the whole batch, so that a no-flag batch of a
/// thousand URLs against a server that throttles still finishes.
const BATCH_TIMEOUT: Duration = Duration::from_secs(600);

/// The command's configuration, and its fleet (`--redis`) if it has one.
fn config(
    common: &Common,
    default_timeout: Duration,
) -> (Config, Option<Arc<polite_redis::RedisFleet>>) {
    let mut config = Config {
        timeout: common.timeout.unwrap_or(default_timeout),
        ..Config::default()
    };
    config.retry.max_retries = MaxRetries {
        rate_limited: common.max_retries_429,
        server_error: common.max_retries_5xx,
        transport: common.max_retries_transport,
    };
    config.redirects = if common.same_origin_redirects {
        polite_client::RedirectPolicy::same_origin(common.max_redirects)
    } else {
        polite_client::RedirectPolicy::up_to(common.max_redirects)
    };
    let fleet = crate::fleet::apply(&common.fleet, &mut config);
    (config, fleet)
}

/// The tally of a command configured with `config` (final) and `fleet`.
fn tally(config: &Config, fleet: Option<Arc<polite_redis::RedisFleet>>) -> Arc<Tally> {
    let watch = fleet.map(|f| crate::fleet::Watch::new(f, config));
    Arc::new(Tally::new(watch))
}

/// The command's client: records go to `observe` and to `tally` (for the
/// summary line).
fn client(
    config: Config,
    tally: &Arc<Tally>,
    observe: impl Fn(Observed<'_>) + Send + Sync + 'static,
) -> Result<Client, Usage> {
    let tally = Arc::clone(tally);
    Ok(Client::with_config(config)
        .map_err(|e| Usage(e.to_string()))?
        .observe(move |e| {
            tally.observe(e);
            observe(e);
        }))
}

/// Ctrl-C cancels the token (exit 130).
fn ctrl_c() -> CancelToken {
    let token = CancelToken::new();
    // Installing the handler fails only if one is installed already, which
    // cannot happen in this process; without it Ctrl-C still ends the
    // process (by the default signal action).
    let _ = polite_blocking::cancel_on_ctrl_c(token.clone());
    token
}

/// Writes `bytes` to stdout; an error is the command's (see [`Stdout`]).
fn write_stdout(bytes: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()
}

/// The exit code of a command whose output could not be written: `code`
/// when it was; else 1, and a line on stderr unless the reader went away
/// (a closed pipe, e.g. `| head`: nothing to say, nobody reads it).
fn written(result: std::io::Result<()>, code: u8) -> u8 {
    match result {
        Ok(()) => code,
        Err(e) => {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                say(&format!("cannot write to stdout: {e}"));
            }
            exit::FAILED
        }
    }
}

/// A batch's result lines on stdout: the first write that fails is kept
/// (and nothing more is written), so the batch can stop and say so.
#[derive(Default)]
struct Stdout {
    failed: Option<std::io::Error>,
}

impl Stdout {
    /// Writes one whole line; `false` once a write has failed.
    fn line(&mut self, out: &mut impl Write, line: &str) -> bool {
        if self.failed.is_none()
            && let Err(e) = writeln!(out, "{line}")
        {
            self.failed = Some(e);
        }
        self.failed.is_none()
    }
}

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "polite: {line}");
}

/// `polite get`.
pub(crate) fn get(args: &GetArgs) -> Result<u8, Usage> {
    let body = request::body(args.data.as_deref())?;
    let req = request::build(
        &args.method,
        &args.url,
        &args.common.headers,
        body,
        args.idempotency_key.as_deref(),
    )?;
    let (format, verbose) = (args.common.log_format, args.common.verbose);
    let log = log::Log::new(format, verbose);
    let (config, fleet) = config(&args.common, DEFAULT_TIMEOUT);
    let tally = tally(&config, fleet);
    let client = client(config, &tally, move |e| {
        log.emit(e);
    })?;
    let token = ctrl_c();
    let start = Instant::now();
    let code = match client.send_cancellable(req, &token) {
        Ok(resp) => {
            if resp.status().is_redirection() {
                say(&unfollowed(&resp, &args.common));
            }
            written(write_stdout(resp.body()), exit::OK)
        }
        Err(e) => {
            // A final answer (404, the last 503, ...) is handed back too.
            let shown = e
                .response()
                .map_or(Ok(()), |resp| write_stdout(resp.body()));
            say(&explain(&e));
            written(shown, exit::for_error(&e))
        }
    };
    if verbose {
        say(&tally.line(start.elapsed(), &crate::tally::rates(&client)));
    }
    Ok(code)
}

/// The wait's live state, fed by the observer.
#[derive(Debug, Default)]
struct Progress {
    requests: u64,
    backoff: bool,
}

/// `polite wait`.
pub(crate) fn wait(args: &WaitArgs) -> Result<u8, Usage> {
    let req = request::build("GET", &args.url, &args.common.headers, Bytes::new(), None)?;
    let (mut config, fleet) = config(&args.common, DEFAULT_TIMEOUT);
    let mut terminal = TerminalStates::EMPTY;
    let named: Vec<&str> = if args.terminal.is_empty() {
        TerminalStates::DEFAULT_NAMES.to_vec()
    } else {
        args.terminal.iter().map(String::as_str).collect()
    };
    for s in named {
        if StateName::new(s).is_none() || !terminal.insert(s) {
            return Err(Usage(format!(
                "--terminal: {} is too long or there are more than {} states",
                echo(Input::Text, s),
                TerminalStates::CAPACITY
            )));
        }
    }
    let success: Vec<String> = if args.success.is_empty() {
        let defaults: Vec<String> = DEFAULT_SUCCESS
            .iter()
            .filter(|s| terminal.contains(s))
            .map(|s| (*s).to_string())
            .collect();
        if defaults.is_empty() {
            return Err(Usage(format!(
                "--success: none of the default success states ({}) is one of --terminal; name them with --success",
                DEFAULT_SUCCESS.join(", ")
            )));
        }
        defaults
    } else {
        args.success.clone()
    };
    for s in &success {
        if !terminal.contains(s) {
            return Err(Usage(format!(
                "--success: {} is not one of --terminal",
                echo(Input::Text, s)
            )));
        }
    }
    config.wait.terminal_states = terminal;
    config.wait.long_poll_first = !args.no_long_poll;
    if !polite_client::valid_param_name(&args.wait_param) {
        return Err(Usage(format!(
            "--wait-param {}: not a valid query parameter name",
            echo(Input::Text, &args.wait_param)
        )));
    }
    // Leaked once per process: the policy holds the name as &'static str.
    config.wait.wait_param = Box::leak(args.wait_param.clone().into_boxed_str());

    let tty = std::io::stderr().is_terminal();
    let progress = Arc::new(Mutex::new(Progress::default()));
    let (format, verbose) = (args.common.log_format, args.common.verbose);
    // On a terminal: a live status line; log lines print above it.
    let spinner = tty.then(|| {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let seen = Arc::clone(&progress);
    let line = spinner.clone();
    let log = log::Log::new(format, verbose);
    let tally = tally(&config, fleet);
    let client = client(config, &tally, move |e| {
        {
            let mut p = seen.lock().unwrap_or_else(PoisonError::into_inner);
            match e {
                Observed::Record(_) => p.requests += 1,
                Observed::Notice(polite_core::Notice::LongPollUnsupported) => {
                    p.backoff = true;
                }
                Observed::Notice(_) => {}
            }
        }
        match &line {
            Some(bar) => bar.suspend(|| log.emit(e)),
            None => log.emit(e),
        }
    })?;
    let token = ctrl_c();
    let start = Instant::now();
    let timeout = args.common.timeout.unwrap_or(DEFAULT_TIMEOUT);
    let result = std::thread::scope(|scope| {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if let Some(bar) = &spinner {
            let (bar, done, progress) = (bar.clone(), Arc::clone(&done), Arc::clone(&progress));
            scope.spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let p = progress
                        .lock()
                        .map(|p| (p.requests, p.backoff))
                        .unwrap_or((0, false));
                    let elapsed = start.elapsed();
                    bar.set_message(format!(
                        "waiting {}s / {}s left · {} · {} request{}",
                        elapsed.as_secs(),
                        timeout.saturating_sub(elapsed).as_secs(),
                        if p.1 { "backoff" } else { "long-poll" },
                        p.0,
                        if p.0 == 1 { "" } else { "s" },
                    ));
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
        let r = client.wait_cancellable(req, &mut JsonJob::new(&args.field), &token);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    });
    if let Some(bar) = spinner {
        bar.finish_and_clear();
    }
    if verbose {
        say(&tally.line(start.elapsed(), &crate::tally::rates(&client)));
    }
    match result {
        Ok(done) => {
            let mut shown = write_stdout(done.response.body());
            if shown.is_ok() && !done.response.body().ends_with(b"\n") {
                shown = write_stdout(b"\n");
            }
            if success.contains(&done.state) {
                Ok(written(shown, exit::OK))
            } else {
                say(&format!("job ended {}", done.state));
                Ok(written(shown, exit::FAILED))
            }
        }
        Err(e) => {
            // The answer the wait ended on (a 400 and its message, the
            // last 503, ...) is written out, as `get` does: the server's
            // own words are often the explanation.
            let mut shown = Ok(());
            if let Some(resp) = e.response() {
                shown = write_stdout(resp.body());
                if shown.is_ok() && !resp.body().is_empty() && !resp.body().ends_with(b"\n") {
                    shown = write_stdout(b"\n");
                }
            }
            let mut line = explain(&e);
            if let Some(why) = unreadable_job(&e, &args.field) {
                line.push_str(": ");
                line.push_str(&why);
            }
            say(&line);
            Ok(written(shown, exit::for_error(&e)))
        }
    }
}

/// Why a redirect came back as the answer (not followed): the flags, or
/// its `Location` (shown without user-info or query values).
fn unfollowed(resp: &http::Response<Bytes>, common: &Common) -> String {
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get(http::header::LOCATION)
        .and_then(|l| l.to_str().ok());
    let why = match location {
        _ if common.max_redirects == 0 => "--max-redirects 0".to_owned(),
        None => "it has no Location".to_owned(),
        Some(l) => format!(
            "to {}: not an http(s) URL on an origin it may follow (--same-origin-redirects, --max-redirects)",
            echo(Input::Url, l)
        ),
    };
    format!("HTTP {status} not followed: {why}")
}

/// Why a job's success answer could not be read as a state, for a wait
/// that stopped on it (`NotRetryable` on a 2xx: the body is no JSON, or
/// has no string at `--field`). The body itself is never shown.
fn unreadable_job(e: &polite_client::Error, field: &str) -> Option<String> {
    let Some(Outcome::NotRetryable { .. }) = e.outcome() else {
        return None;
    };
    let answer = e.response().filter(|r| r.status().is_success())?;
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(answer.body()) else {
        return Some("the answer's body is not JSON".to_owned());
    };
    let found = field.split('.').try_fold(&body, |v, key| v.get(key));
    let field = echo(Input::Text, field);
    Some(match found {
        None => format!("the answer's JSON has no field {field} (--field)"),
        Some(_) => format!("the answer's JSON field {field} is not a string (--field)"),
    })
}

/// `polite batch`: URLs on stdin, one per line (blank lines and `#` comments
/// skipped).
pub(crate) fn batch(args: &BatchArgs) -> Result<u8, Usage> {
    let (mut config, fleet) = config(&args.common, BATCH_TIMEOUT);
    let timeout = config.timeout;
    config.concurrency = args.concurrency;
    match args.rate {
        Rate::Auto => {}
        Rate::None => {
            config.learn_quota = None;
            config.adaptive = false;
        }
        Rate::Fixed(n, w) => config.throttle = Some(Throttle::new(n, w)),
    }
    let (format, verbose) = (args.common.log_format, args.common.verbose);
    // On a terminal, in text mode: a live progress line (progress.rs).
    let bar = crate::progress::Progress::start(
        std::io::stderr().is_terminal() && format == crate::args::LogFormat::Text,
    );
    let tick = bar.clone();
    let tally = tally(&config, fleet);
    // What the output knows of the input, shared with the log: an attempt
    // is named by its input line, as its result line is.
    let book = Arc::new(Book::default());
    let lines_of = Arc::clone(&book);
    let emit = move |e: Observed<'_>| {
        log::emit_in_batch(format, verbose, e, |item| lines_of.line_of(item));
    };
    let client = client(config, &tally, move |e| match (&tick, e) {
        (Some(bar), Observed::Record(r)) => {
            bar.record(r);
            if verbose {
                bar.suspend(|| emit(e));
            }
        }
        (Some(bar), Observed::Notice(_)) => bar.suspend(|| emit(e)),
        (None, _) => emit(e),
    })?;
    if let Some(bar) = &bar {
        let (paces, tally) = (client.clone(), Arc::clone(&tally));
        bar.pace_from(move || tally.pace_now(&crate::tally::rates(&paces)));
    }
    // The flags are checked before anything is read or sent: a bad method
    // or header is a usage error, not one error line per URL.
    request::build(
        &args.method,
        "http://127.0.0.1/",
        &args.common.headers,
        Bytes::new(),
        None,
    )?;
    let token = ctrl_c();
    let start = Instant::now();
    // The URLs are read on a thread of their own, at most READ_AHEAD lines
    // ahead of the batch: memory stays flat however long the input, and an
    // input with nothing new holds nothing back. The URL of each item in
    // progress is kept for its line; a line that is no request is
    // reported in its place.
    let lines = Lines::new(args, std::io::BufReader::new(std::io::stdin()));
    let feed =
        read_on_a_thread(lines, &book).map_err(|e| Usage(format!("cannot read stdin: {e}")))?;
    let order = if args.unordered {
        BatchOrder::Completion
    } else {
        BatchOrder::Input
    };
    let mut stream = client
        .batch_from_stream_cancellable(feed, order, &token)
        .map_err(|e| Usage(e.to_string()))?;
    let mut worst = exit::OK;
    let mut starved: Option<(usize, Instant, PaceLimit)> = None;
    let mut stdout = Stdout::default();
    // Each result as its item ends, from whichever thread drives the batch
    // (`for_each_result`: the threads that run the attempts; stdout is
    // locked for each line).
    stream.for_each_result(|(item, result)| {
        let mut out = std::io::stdout().lock();
        worst = exit::worst([worst, book.flush_bad(&mut stdout, &mut out, item, order)]);
        // The input line and the URL as it may be printed (SPEC §5.1:
        // user-info, query values and fragment hidden); the line number is
        // what joins a result to its input.
        let (line_no, url) = book.take_url(item).unzip();
        let line = match &result {
            Ok(resp) => {
                let mut line = serde_json::json!({
                    "line": line_no,
                    "url": url,
                    "ok": true,
                    "status": resp.status().as_u16(),
                });
                body_fields(&mut line, resp.body());
                line
            }
            Err(e) => serde_json::json!({
                "line": line_no,
                "url": url,
                "ok": false,
                "status": e.response().map(|r| r.status().as_u16()),
                "error": explain(e),
            }),
        };
        // One whole line at a time (stdout is line-buffered): a consumer
        // sees each result as soon as it is written, and a Ctrl-C never
        // leaves half a line. Output that cannot be written stops the
        // batch: its results would be lost.
        if !stdout.line(&mut out, &line.to_string()) {
            token.cancel();
        }
        worst = exit::worst([
            worst,
            result.as_ref().map_or_else(exit::for_error, |_| exit::OK),
        ]);
        if let Some(Outcome::Starved { until, by }) = result
            .as_ref()
            .err()
            .and_then(polite_client::Error::outcome)
        {
            let (n, first, _) = starved.get_or_insert((0, until, by));
            *n += 1;
            *first = (*first).min(until);
        }
    });
    let mut out = std::io::stdout().lock();
    worst = exit::worst([
        worst,
        book.flush_bad(&mut stdout, &mut out, usize::MAX, BatchOrder::Input),
    ]);
    // A batch cancelled or timed out while it waited for input (no item
    // in progress to say so): its own end says it.
    if let Some(end @ (Outcome::Cancelled | Outcome::TimedOut { .. })) = stream.end() {
        worst = exit::worst([worst, exit::for_outcome(end)]);
    }
    drop(out);
    if let Some(bar) = bar {
        bar.finish();
    }
    let read_error = book.read_error();
    if let Some(error) = &read_error {
        say(&format!("stopped reading URLs from stdin: {error}"));
        worst = exit::worst([worst, exit::FAILED]);
    }
    say(&tally.line(start.elapsed(), &crate::tally::rates(&client)));
    if let Some((n, until, by)) = starved {
        say(&starved_line(
            n,
            by,
            until.saturating_duration_since(start),
            timeout,
            args.rate,
        ));
    }
    if let Some(e) = stdout.failed {
        // Not "cancelled": the results could not be written.
        worst = written(Err(e), exit::OK);
    } else if let (None, Some(last)) = (&read_error, book.unread_after()) {
        say(&format!(
            "the batch ended before reading all of stdin: it was not read past line {last}, and any line after it has no result"
        ));
    }
    Ok(worst)
}

/// A result line's `body`: the text of a UTF-8 body; any other body
/// base64-encoded (standard alphabet, padded) with `"body_encoding":
/// "base64"`, so no byte is lost (a lossy conversion would turn binary
/// into replacement characters).
fn body_fields(line: &mut serde_json::Value, body: &[u8]) {
    use base64::Engine as _;
    let Some(map) = line.as_object_mut() else {
        return;
    };
    match std::str::from_utf8(body) {
        Ok(text) => {
            map.insert("body".to_owned(), text.into());
        }
        Err(_) => {
            let encoded = base64::engine::general_purpose::STANDARD.encode(body);
            map.insert("body".to_owned(), encoded.into());
            map.insert("body_encoding".to_owned(), "base64".into());
        }
    }
}

/// The URLs of a batch, read from stdin by a thread of their own and taken
/// by the batch as it wants them ([`Taken`]): a pipe held open with nothing
/// new in it (`tail -f`, a slow producer) holds back no send, answer,
/// timer or Ctrl-C of the items already read.
struct Lines<R> {
    input: R,
    /// The line being read (its bytes: a line that is not UTF-8 is that
    /// line's error, not the end of the input).
    buf: Vec<u8>,
    method: String,
    headers: Vec<String>,
    /// Lines read so far (the last one's 1-based number).
    line_no: usize,
}

/// What the reader hands the batch for each line that is not blank or a
/// comment, and at the end of the input. (Most entries are requests: the
/// others are no smaller for being boxed.)
#[allow(clippy::large_enum_variant)]
enum Entry {
    /// A request, its line and its URL as it may be printed.
    Request(http::Request<Bytes>, usize, String),
    /// A line that is no request: its line and its result line.
    Bad(usize, String),
    /// The input ended.
    End,
    /// Reading failed (the input ends there).
    Failed(String),
}

/// What the output needs to know about the input: the line number and the
/// redacted URL of every item in progress (the secrets in a URL are never
/// kept for the output), the lines that were no request (by the index of
/// the item after them), and a read error.
#[derive(Default)]
struct Book {
    urls: Mutex<std::collections::HashMap<usize, (usize, String)>>,
    bad: Mutex<std::collections::BTreeMap<usize, Vec<String>>>,
    read_error: Mutex<Option<String>>,
    /// The last line the batch took, and whether it took the input's end
    /// (`None` until the first line).
    read: Mutex<(usize, bool)>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<R: std::io::BufRead> Lines<R> {
    fn new(args: &BatchArgs, input: R) -> Self {
        Lines {
            input,
            buf: Vec::new(),
            method: args.method.clone(),
            headers: args.common.headers.clone(),
            line_no: 0,
        }
    }

    /// Reads lines until one that is a request or no request (blank lines
    /// and comments are skipped), or the end.
    fn next_entry(&mut self) -> Entry {
        loop {
            let too_long = match read_line(&mut self.input, &mut self.buf) {
                Ok(None) => return Entry::End,
                Ok(Some(too_long)) => too_long,
                Err(e) => return Entry::Failed(e.to_string()),
            };
            self.line_no += 1;
            // A UTF-8 byte-order mark (files saved by Windows tools) is no
            // part of the first URL.
            if self.line_no == 1 && self.buf.starts_with(b"\xEF\xBB\xBF") {
                self.buf.drain(..3);
            }
            let built = match std::str::from_utf8(&self.buf) {
                _ if too_long => Err(Usage(format!(
                    "line longer than {MAX_LINE} bytes (not read further)"
                ))),
                Ok(line) => {
                    let url = line.trim();
                    if url.is_empty() || url.starts_with('#') {
                        continue;
                    }
                    request::build(&self.method, url, &self.headers, Bytes::new(), None)
                        .map(|req| (req, url))
                }
                // Reported as this line's error (its valid parts shown,
                // redacted like any URL); the next lines are still read.
                Err(e) => Err(Usage(format!(
                    "line is not UTF-8 (invalid byte at offset {})",
                    e.valid_up_to()
                ))),
            };
            return match built {
                Ok((req, url)) => Entry::Request(req, self.line_no, crate::redact::url_plain(url)),
                Err(Usage(why)) => {
                    // A line too long is shown by its start only.
                    let shown =
                        &self.buf[..self.buf.len().min(if too_long { 256 } else { MAX_LINE })];
                    let text = String::from_utf8_lossy(shown);
                    let mut url = crate::redact::url_plain(text.trim());
                    if too_long {
                        url.push('…');
                    }
                    let line = serde_json::json!({
                        "line": self.line_no,
                        "url": url,
                        "ok": false,
                        "status": null,
                        "error": why,
                    });
                    Entry::Bad(self.line_no, line.to_string())
                }
            };
        }
    }
}

/// How many entries the reader may be ahead of the batch: memory stays
/// flat however long the input, and a Ctrl-C loses at most these lines'
/// reading (never a line the batch took: those are reported).
const READ_AHEAD: usize = 64;

/// Starts the thread that reads `lines` into the batch's feed; the batch
/// takes them through the returned stream. The thread ends at the input's
/// end, or when the batch no longer takes entries; a thread still waiting
/// for input when the command ends goes with the process.
fn read_on_a_thread<R>(mut lines: Lines<R>, book: &Arc<Book>) -> std::io::Result<Taken>
where
    R: std::io::BufRead + Send + 'static,
{
    let (mut tx, rx) = futures_channel::mpsc::channel(READ_AHEAD);
    std::thread::Builder::new()
        .name("polite-stdin".into())
        .spawn(move || {
            loop {
                let entry = lines.next_entry();
                let last = matches!(entry, Entry::End | Entry::Failed(_));
                // Room in the feed (or the batch is gone: stop reading).
                let room = polite_blocking::block_on(std::future::poll_fn(|cx| tx.poll_ready(cx)));
                if room.is_err() || tx.start_send(entry).is_err() || last {
                    return;
                }
            }
        })?;
    Ok(Taken {
        rx,
        next: 0,
        book: Arc::clone(book),
    })
}

/// The batch's side of the feed: each request as the batch takes it, its
/// line and URL booked for its result (and the lines that were no request
/// before it), so that what the book says was read is what the batch took.
struct Taken {
    rx: futures_channel::mpsc::Receiver<Entry>,
    /// The index of the next item.
    next: usize,
    book: Arc<Book>,
}

impl futures_core::Stream for Taken {
    type Item = http::Request<Bytes>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<http::Request<Bytes>>> {
        use std::task::Poll;
        loop {
            let entry = match std::pin::Pin::new(&mut self.rx).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(entry) => entry,
            };
            let this = &mut *self;
            match entry {
                Some(Entry::Request(req, line_no, shown)) => {
                    locked(&this.book.urls).insert(this.next, (line_no, shown));
                    locked(&this.book.read).0 = line_no;
                    this.next += 1;
                    return Poll::Ready(Some(req));
                }
                Some(Entry::Bad(line_no, line)) => {
                    locked(&this.book.read).0 = line_no;
                    locked(&this.book.bad)
                        .entry(this.next)
                        .or_default()
                        .push(line);
                }
                Some(Entry::End) => {
                    locked(&this.book.read).1 = true;
                    return Poll::Ready(None);
                }
                Some(Entry::Failed(e)) => {
                    *locked(&this.book.read_error) = Some(e);
                    return Poll::Ready(None);
                }
                // The reader is gone without saying why (it cannot panic
                // short of a bug): the input ends here.
                None => return Poll::Ready(None),
            }
        }
    }
}

/// The longest input line a batch reads (a URL is far shorter): a longer
/// one is that line's error, and the bytes after the limit are skipped up
/// to the next newline without being kept, so no input grows memory.
const MAX_LINE: usize = 64 * 1024;

/// Reads the next line of `input` into `buf` (without its `\n`), at most
/// [`MAX_LINE`] bytes of it: `Some(true)` when the line was longer (the
/// rest of it is skipped), `None` at the end of the input.
fn read_line(
    input: &mut impl std::io::BufRead,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<bool>> {
    use std::io::{BufRead as _, Read as _};
    buf.clear();
    let limit = u64::try_from(MAX_LINE).unwrap_or(u64::MAX) + 1;
    // (`read_until` retries an interrupted read itself.)
    let n = input.by_ref().take(limit).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok(Some(false));
    }
    if buf.len() <= MAX_LINE {
        // The last line, without a newline.
        return Ok(Some(false));
    }
    // Longer than the limit: skip to the end of the line, keeping nothing.
    buf.truncate(MAX_LINE);
    loop {
        let chunk = match input.fill_buf() {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            chunk => chunk?,
        };
        if chunk.is_empty() {
            break;
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => {
                input.consume(at + 1);
                break;
            }
            None => {
                let len = chunk.len();
                input.consume(len);
            }
        }
    }
    Ok(Some(true))
}

impl Book {
    /// The input line number and the redacted URL of item `item` (its
    /// result is being written).
    fn take_url(&self, item: usize) -> Option<(usize, String)> {
        locked(&self.urls).remove(&item)
    }

    /// The input line number of item `item`, while it is in progress.
    fn line_of(&self, item: usize) -> Option<usize> {
        locked(&self.urls).get(&item).map(|&(line, _)| line)
    }

    /// Writes the lines that were no request and came before item `item`
    /// (in input order; as soon as seen otherwise); their exit code.
    fn flush_bad(
        &self,
        stdout: &mut Stdout,
        out: &mut impl Write,
        item: usize,
        order: BatchOrder,
    ) -> u8 {
        let mut bad = locked(&self.bad);
        let due: Vec<usize> = match order {
            BatchOrder::Completion => bad.keys().copied().collect(),
            _ => bad.range(..=item).map(|(k, _)| *k).collect(),
        };
        let mut code = exit::OK;
        for k in due {
            for line in bad.remove(&k).unwrap_or_default() {
                stdout.line(out, &line);
                code = exit::USAGE;
            }
        }
        code
    }

    fn read_error(&self) -> Option<String> {
        locked(&self.read_error).take()
    }

    /// The last line read when the input was not read to its end (the
    /// batch ended first: cancelled, timed out, starved); `None` when it
    /// was.
    fn unread_after(&self) -> Option<usize> {
        let (last, ended) = *locked(&self.read);
        (!ended).then_some(last)
    }
}

/// One line naming the limit that starved `n` items and the flag that
/// would help (SPEC §4.1: starving is not timing out).
fn starved_line(n: usize, by: PaceLimit, next: Duration, timeout: Duration, rate: Rate) -> String {
    let items = if n == 1 {
        "1 item"
    } else {
        &format!("{n} items")
    };
    let secs = |d: Duration| format!("{:.1}s", d.as_secs_f64());
    let (limit, fix) = match by {
        PaceLimit::Window { learned: false, .. } => (
            format!("{by} (--rate {rate})"),
            format!(
                "raise --timeout to more than {} or allow more with --rate",
                secs(next)
            ),
        ),
        PaceLimit::Window { learned: true, .. } => (
            by.to_string(),
            format!(
                "the server allows no more; raise --timeout to more than {}",
                secs(next)
            ),
        ),
        PaceLimit::Adaptive { .. } => (
            format!("{by} (--rate {rate})"),
            "raise --timeout, or send fewer items at once".to_string(),
        ),
        _ => (by.to_string(), "raise --timeout".to_string()),
    };
    format!(
        "{items} not sent: {limit} allows the next send only at +{}, after the --timeout of {}; {fix}",
        secs(next),
        secs(timeout)
    )
}

/// An error's line: its own words, and for a failed lookup the system's
/// reason (which names no URL, only why: "Name or service not known").
/// Other transport errors' sources are left out: a library's message may
/// quote the URL, which can hold credentials (SPEC §5.1).
fn explain(e: &polite_client::Error) -> String {
    let mut line = e.to_string();
    // When the server's time (or the next backoff) is the reason: how far
    // off the next send was.
    let wait = |at: Instant| at.saturating_duration_since(Instant::now());
    // An `Error::Limit` says it already (how far off, and why).
    let said = matches!(e, polite_client::Error::Limit(_));
    match e.outcome().filter(|_| !said) {
        Some(Outcome::TimedOut { needed: Some(at) }) if !wait(at).is_zero() => {
            line.push_str(&format!(
                ": the next attempt could go only in {:.1?}, after the --timeout",
                wait(at)
            ));
        }
        Some(Outcome::RateLimited { retry_at: Some(at) }) if !wait(at).is_zero() => {
            line.push_str(&format!(
                ": the server asks to wait {:.1?} more, longer than polite waits by itself (60s)",
                wait(at)
            ));
        }
        _ => {}
    }
    // A failed lookup, or an error polite has no kind for (a server that
    // does not speak HTTP: "invalid HTTP version"): the innermost cause's
    // words, unless they could quote a URL (and with it a credential).
    if let polite_client::Error::Transport { error, .. } = e
        && matches!(
            error.kind(),
            polite_core::TransportErrorKind::Dns | polite_core::TransportErrorKind::Other
        )
    {
        let mut cause: Option<&(dyn std::error::Error + 'static)> =
            std::error::Error::source(error);
        let mut last = None;
        while let Some(c) = cause {
            last = Some(c);
            cause = c.source();
        }
        if let Some(reason) = last
            .map(ToString::to_string)
            .filter(|r| !r.is_empty() && !r.contains("://") && !r.contains('@'))
        {
            // ureq's prefix for an I/O error says nothing more.
            let reason = reason.strip_prefix("io: ").unwrap_or(&reason);
            line.push_str(": ");
            line.push_str(reason.lines().next().unwrap_or_default());
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::{explain, starved_line};
    use crate::args::Rate;
    use polite_client::{Error, TransportError};
    use polite_core::pace::PaceLimit;
    use polite_core::{Outcome, Reply, RetryClass, TransportErrorKind};
    use std::time::Duration;

    fn transport(kind: TransportErrorKind, source: std::io::Error) -> Error {
        Error::Transport {
            outcome: Outcome::RetriesExhausted {
                class: RetryClass::Transport,
                last: Reply::Transport(kind),
            },
            error: TransportError::new(kind).with_source(source),
            attempts: 5,
            elapsed: Duration::from_millis(1500),
        }
    }

    /// SPEC §4.1: the starved line names the limit that refused and what
    /// to change, for each kind of limit.
    #[test]
    fn a_starved_batch_names_its_limit_and_what_to_change() {
        let (next, timeout) = (Duration::from_secs(61), Duration::from_secs(2));
        let line = |by| starved_line(3, by, next, timeout, Rate::Auto);
        let learned = line(PaceLimit::Window {
            limit: 5,
            window: Duration::from_secs(60),
            learned: true,
        });
        assert_eq!(
            learned,
            "3 items not sent: the server's quota of 5 per 60s (from its RateLimit-Policy) allows the next send only at +61.0s, after the --timeout of 2.0s; the server allows no more; raise --timeout to more than 61.0s"
        );
        let adaptive = line(PaceLimit::Adaptive {
            interval: Duration::from_secs(4),
        });
        assert!(
            adaptive.contains("the adaptive rate (one send every 4s")
                && adaptive.contains("(--rate auto)")
                && adaptive.ends_with("raise --timeout, or send fewer items at once"),
            "{adaptive}"
        );
        let cool = line(PaceLimit::CoolDown);
        assert!(
            cool.starts_with("3 items not sent: a cool-down the server asked for allows")
                && cool.ends_with("; raise --timeout"),
            "{cool}"
        );
        let one = starved_line(1, PaceLimit::CoolDown, next, timeout, Rate::Auto);
        assert!(one.starts_with("1 item not sent"), "{one}");
    }

    /// A timeout or a rate limit caused by a time too far off says how far.
    #[test]
    fn a_wait_too_long_says_how_long() {
        let at = std::time::Instant::now() + Duration::from_secs(30);
        let late = Error::Outcome {
            outcome: Outcome::TimedOut { needed: Some(at) },
            response: None,
        };
        let line = explain(&late);
        assert!(
            line.starts_with("timed out: the next attempt could go only in "),
            "{line}"
        );
        assert!(line.ends_with("s, after the --timeout"), "{line}");
        let capped = Error::Outcome {
            outcome: Outcome::RateLimited { retry_at: Some(at) },
            response: None,
        };
        let line = explain(&capped);
        assert!(
            line.starts_with("rate limited: the server asks to wait "),
            "{line}"
        );
        let plain = Error::Outcome {
            outcome: Outcome::TimedOut { needed: None },
            response: None,
        };
        assert_eq!(explain(&plain), "timed out");
    }

    /// A failed lookup says the system's reason (the innermost source);
    /// other transport errors keep to their own words (a library's message
    /// could quote a URL with credentials).
    #[test]
    fn a_failed_lookup_says_the_system_s_reason_and_nothing_else_does() {
        let dns = transport(
            TransportErrorKind::Dns,
            std::io::Error::other(std::io::Error::other("Name or service not known")),
        );
        let line = explain(&dns);
        assert!(line.starts_with(&dns.to_string()), "{line}");
        assert!(line.ends_with(": Name or service not known"), "{line}");
        let refused = transport(
            TransportErrorKind::Refused,
            std::io::Error::other("http://user:secret@host/ refused"),
        );
        assert_eq!(explain(&refused), refused.to_string());
        assert!(!explain(&refused).contains("secret"));
        // An error of no known kind (a server that does not speak HTTP)
        // says the reason too, unless it could quote a URL.
        let garbage = transport(
            TransportErrorKind::Other,
            std::io::Error::other(std::io::Error::other(
                "http parse fail: invalid HTTP version",
            )),
        );
        assert!(
            explain(&garbage).ends_with(": http parse fail: invalid HTTP version"),
            "{}",
            explain(&garbage)
        );
        let quoted = transport(
            TransportErrorKind::Other,
            std::io::Error::other("bad uri http://user:secret@host/"),
        );
        assert_eq!(explain(&quoted), quoted.to_string());
    }
}
