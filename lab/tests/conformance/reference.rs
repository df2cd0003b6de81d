//! A small reference client written from the spec's default policy (blocking,
//! ureq, no jitter), to show that every scenario can be met by a conforming
//! client. It is not polite itself.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use polite_lab::Lab;
use polite_lab::conformance::{ExpectedOutcome, Observed, Scenario, WAIT_PARAM, Work};

use crate::common::{agent, request, sleep_until};

const MAX_RETRIES: [u32; 3] = [3, 4, 4]; // 429, 5xx, transport
const BASE: Duration = Duration::from_millis(250);
const BACKOFF_CAP: Duration = Duration::from_secs(4);
const RETRY_AFTER_MIN: Duration = Duration::from_secs(1);
const RETRY_AFTER_MAX: Duration = Duration::from_secs(300);
const AUTO_WAIT_CAP: Duration = Duration::from_secs(60);
const CUSHION: Duration = Duration::from_secs(2);
const POLL_DELAYS: [u64; 4] = [2, 4, 8, 15];
const THROTTLE_MARGIN: Duration = Duration::from_millis(50);

/// Runs `scenario` against its own lab with the reference client and checks it.
pub(crate) fn run(scenario: &Scenario) -> Result<(), String> {
    let lab = Lab::start(scenario.lab.clone()).map_err(|e| format!("{}: {e}", scenario.name))?;
    let start = Instant::now();
    let ctx = |timeout: Duration, cancel_after: Option<Duration>| Ctx {
        deadline: start + timeout,
        cancel_at: cancel_after.map(|c| start + c),
    };
    let observed = match &scenario.work {
        Work::Send {
            method,
            path,
            replayable,
            timeout,
            cancel_after,
        } => {
            let (outcome, _) = send(
                &ctx(*timeout, *cancel_after),
                method,
                &lab.url(path),
                *replayable,
            );
            Observed::new(outcome, start.elapsed())
        }
        Work::Wait {
            path,
            long_poll,
            timeout,
            cancel_after,
        } => {
            let outcome = wait(&ctx(*timeout, *cancel_after), &lab.url(path), *long_poll);
            Observed::new(outcome, start.elapsed())
        }
        Work::Batch {
            method,
            paths,
            concurrency,
            throttle,
            timeout,
        } => {
            let urls: Vec<String> = paths.iter().map(|p| lab.url(p)).collect();
            let items = batch(&ctx(*timeout, None), method, &urls, *concurrency, *throttle);
            Observed::batch(items, start.elapsed())
        }
    };
    scenario.check(&observed, &lab.log())
}

struct Ctx {
    deadline: Instant,
    cancel_at: Option<Instant>,
}

impl Ctx {
    fn cancelled(&self) -> bool {
        self.cancel_at.is_some_and(|c| Instant::now() >= c)
    }

    /// Sleeps until `until`, ending at once at a cancel.
    fn sleep_until(&self, until: Instant) -> Result<(), ExpectedOutcome> {
        sleep_until(self.cancel_at.map_or(until, |c| c.min(until)));
        if self.cancelled() {
            Err(ExpectedOutcome::Cancelled)
        } else {
            Ok(())
        }
    }
}

struct Answer {
    status: u16,
    date: Option<SystemTime>,
    retry_after: Option<String>,
    body: String,
}

/// The server's delay: delta seconds, or an HTTP date against the response's Date.
fn server_delay(a: &Answer) -> Option<Duration> {
    let text = a.retry_after.as_deref()?.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok().map(Duration::from_secs);
    }
    let at = httpdate::parse_http_date(text).ok()?;
    let now = a.date.unwrap_or_else(SystemTime::now);
    Some(at.duration_since(now).unwrap_or_default())
}

/// One logical request with the default retry policy.
fn send(ctx: &Ctx, method: &str, url: &str, replayable: bool) -> (ExpectedOutcome, Option<Answer>) {
    use ExpectedOutcome::*;
    let mut retries = [0u32; 3];
    loop {
        if ctx.cancelled() {
            return (Cancelled, None);
        }
        let now = Instant::now();
        if now >= ctx.deadline {
            return (TimedOut, None);
        }
        let abort_at = ctx.deadline + CUSHION;
        let result = request(&agent(abort_at - now), method, url);
        if Instant::now() > ctx.deadline {
            return (TimedOut, None);
        }
        let (class, answer) = match result {
            Ok(r) => {
                let answer = Answer {
                    status: r.status,
                    date: r
                        .header("date")
                        .and_then(|d| httpdate::parse_http_date(d).ok()),
                    retry_after: r.header("retry-after").map(str::to_owned),
                    body: r.body,
                };
                match answer.status {
                    200..=299 => return (Succeeded, Some(answer)),
                    429 => (0, Some(answer)),
                    500 | 502 | 503 | 504 => (1, Some(answer)),
                    _ => return (NotRetryable, Some(answer)),
                }
            }
            Err(_) => (2, None),
        };
        if !replayable {
            return (NotReplayable, answer);
        }
        let spent = if class == 0 {
            RateLimited
        } else {
            RetriesExhausted
        };
        if retries[class] >= MAX_RETRIES[class] {
            return (spent, answer);
        }
        retries[class] += 1;
        let backoff = (BASE * 2u32.pow(retries[class] - 1)).min(BACKOFF_CAP);
        let server = answer
            .as_ref()
            .and_then(server_delay)
            .map(|d| d.clamp(RETRY_AFTER_MIN, RETRY_AFTER_MAX));
        if class == 0 && server.is_some_and(|d| d > AUTO_WAIT_CAP) {
            return (RateLimited, answer);
        }
        let at = Instant::now() + backoff.max(server.unwrap_or_default());
        if at > ctx.deadline {
            return (TimedOut, answer);
        }
        if let Err(o) = ctx.sleep_until(at) {
            return (o, answer);
        }
    }
}

/// A wait for a job: long poll first, backoff polls after a VALIDATION_ERROR.
fn wait(ctx: &Ctx, url: &str, long_poll: bool) -> ExpectedOutcome {
    let mut long = long_poll;
    let mut backoff_polls = 0;
    loop {
        let now = Instant::now();
        if ctx.cancelled() {
            return ExpectedOutcome::Cancelled;
        }
        let target = if long {
            let secs = ctx
                .deadline
                .saturating_duration_since(now)
                .as_secs()
                .min(25);
            if secs == 0 {
                return ExpectedOutcome::TimedOut;
            }
            format!("{url}?{WAIT_PARAM}={secs}")
        } else {
            url.to_owned()
        };
        let (outcome, answer) = send(ctx, "GET", &target, true);
        let body: serde_json::Value = answer
            .as_ref()
            .and_then(|a| serde_json::from_str(&a.body).ok())
            .unwrap_or_default();
        match outcome {
            ExpectedOutcome::Succeeded => {
                if let Some(state @ ("passed" | "failed" | "cancelled")) = body["status"].as_str() {
                    return ExpectedOutcome::terminal(state);
                }
            }
            ExpectedOutcome::NotRetryable
                if long
                    && answer.as_ref().is_some_and(|a| a.status == 400)
                    && body["code"] == "VALIDATION_ERROR" =>
            {
                // Fall back for good, and poll again at once without the parameter.
                long = false;
                continue;
            }
            other => return other,
        }
        if long {
            continue;
        }
        let delay = Duration::from_secs(POLL_DELAYS[backoff_polls.min(POLL_DELAYS.len() - 1)]);
        backoff_polls += 1;
        let at = Instant::now() + delay;
        if at > ctx.deadline {
            return ExpectedOutcome::TimedOut;
        }
        if let Err(o) = ctx.sleep_until(at) {
            return o;
        }
    }
}

/// Many requests: `concurrency` workers, a shared sliding-window throttle, one deadline.
///
/// The throttle counts a send in its window from the moment it is granted
/// until `window` after its answer came back: the server saw the request
/// at some instant between the two, so the next send that window allows
/// reaches the server at least `window` after it, however late the threads
/// of this (shared, loaded) machine ran. Timing the window from the grant
/// instead left only the margin between a late first send and an early
/// fourth one.
fn batch(
    ctx: &Ctx,
    method: &str,
    urls: &[String],
    concurrency: usize,
    throttle: Option<(u32, Duration)>,
) -> Vec<ExpectedOutcome> {
    let next = Mutex::new(0usize);
    let results = Mutex::new(vec![ExpectedOutcome::TimedOut; urls.len()]);
    // Answers' instants, oldest first, and the sends granted but not yet answered.
    let window_log = Mutex::new((VecDeque::<Instant>::new(), 0u32));
    let acquire = || -> bool {
        let Some((limit, window)) = throttle else {
            return true;
        };
        loop {
            let wait = {
                let mut log = window_log.lock().unwrap();
                let (answered, in_flight) = &mut *log;
                let now = Instant::now();
                while answered.front().is_some_and(|t| *t + window <= now) {
                    answered.pop_front();
                }
                if answered.len() + (*in_flight as usize) < limit as usize {
                    *in_flight += 1;
                    return true;
                }
                match answered.front() {
                    Some(t) => *t + window + THROTTLE_MARGIN,
                    // Every slot is a send still in flight: look again soon.
                    None => now + Duration::from_millis(5),
                }
            };
            if wait > ctx.deadline {
                return false;
            }
            sleep_until(wait);
        }
    };
    let answered = || {
        if throttle.is_some() {
            let mut log = window_log.lock().unwrap();
            log.1 -= 1;
            log.0.push_back(Instant::now());
        }
    };
    std::thread::scope(|s| {
        for _ in 0..concurrency {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    let Some(url) = urls.get(i) else { break };
                    let outcome = loop {
                        if !acquire() {
                            break ExpectedOutcome::TimedOut;
                        }
                        let sent = send(ctx, method, url, true).0;
                        answered();
                        match sent {
                            // The batch retries a rate-limited item inside the deadline.
                            ExpectedOutcome::RateLimited
                                if Instant::now() + Duration::from_millis(100) < ctx.deadline =>
                            {
                                std::thread::sleep(Duration::from_millis(100));
                            }
                            other => break other,
                        }
                    };
                    results.lock().unwrap()[i] = outcome;
                }
            });
        }
    });
    results.into_inner().unwrap()
}
