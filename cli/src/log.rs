//! The attempt log on stderr: one line per retry (text), or one JSON object
//! per attempt record. Records hold no header values, URLs or bodies.

use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use polite_client::Observed;
use polite_core::record::{AttemptRecord, DelaySource, RetryAfterNote};
use polite_core::{Outcome, Reply, TransportErrorKind};

use crate::args::LogFormat;

/// The attempt log of one call (`get`, `wait`): every event as [`emit`]
/// writes it, and — in text mode without `-v`, where most records print
/// nothing — one warning line the first time the server's `Retry-After`
/// was rejected as invalid (the computed backoff was used instead).
#[derive(Debug)]
pub(crate) struct Log {
    format: LogFormat,
    verbose: bool,
    warned: AtomicBool,
}

impl Log {
    pub(crate) fn new(format: LogFormat, verbose: bool) -> Log {
        Log {
            format,
            verbose,
            warned: AtomicBool::new(false),
        }
    }

    /// Writes one observed event (and the one-time warning) to stderr.
    pub(crate) fn emit(&self, event: Observed<'_>) {
        if let Some(line) = self.warning(event) {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        emit(self.format, self.verbose, event);
    }

    /// The one-time warning for a rejected `Retry-After`, if this event is
    /// the first to carry one (text mode without `-v` only).
    fn warning(&self, event: Observed<'_>) -> Option<String> {
        let Observed::Record(r) = event else {
            return None;
        };
        let RetryAfterNote::Rejected(e) = r.retry_after else {
            return None;
        };
        if self.format != LogFormat::Text
            || self.verbose
            || self.warned.swap(true, Ordering::Relaxed)
        {
            return None;
        }
        Some(format!(
            "polite: warning: the server sent an invalid Retry-After ({e}); the computed backoff was used instead"
        ))
    }
}

/// Whose attempt a record is, as the log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    /// One call (`get`, `wait`): its attempts.
    Call,
    /// An item of `polite batch`: the 1-based input line it was read from,
    /// as its result line names it (`None` once the line is forgotten:
    /// the item's result was written).
    Line(Option<usize>),
}

/// Writes one observed event to stderr in the chosen format.
pub(crate) fn emit(format: LogFormat, verbose: bool, event: Observed<'_>) {
    emit_as(format, verbose, event, Who::Call);
}

/// Writes one observed event of `polite batch` to stderr: a record names
/// its item by the input line `line_of` gives for the item's index (the
/// `line` of its result), in text as `line N attempt K` and in JSON as a
/// `line` field next to `item`.
pub(crate) fn emit_in_batch(
    format: LogFormat,
    verbose: bool,
    event: Observed<'_>,
    line_of: impl FnOnce(usize) -> Option<usize>,
) {
    let who = match event {
        Observed::Record(r) => Who::Line(usize::try_from(r.id.item).ok().and_then(line_of)),
        _ => Who::Line(None),
    };
    emit_as(format, verbose, event, who);
}

fn emit_as(format: LogFormat, verbose: bool, event: Observed<'_>, who: Who) {
    if let Some(line) = render(format, verbose, event, who) {
        // A closed stderr must not turn into a panic.
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}

/// The line `event` writes to the log, if any.
fn render(format: LogFormat, verbose: bool, event: Observed<'_>, who: Who) -> Option<String> {
    match (format, event) {
        (LogFormat::Json, Observed::Record(r)) => {
            let mut record = json(r);
            if let (Who::Line(Some(line)), Some(map)) = (who, record.as_object_mut()) {
                map.insert("line".to_owned(), line.into());
            }
            Some(record.to_string())
        }
        (LogFormat::Json, Observed::Notice(n)) => {
            Some(traced(serde_json::json!({ "notice": n.to_string() })).to_string())
        }
        (LogFormat::Text, Observed::Record(r)) => text(r, verbose, who),
        (LogFormat::Text, Observed::Notice(n)) => Some(format!("polite: {n}")),
    }
}

/// `record` with the trace ids of the command, when a traceparent was
/// given (see [`crate::traceparent`]).
fn traced(mut record: serde_json::Value) -> serde_json::Value {
    if let (Some(c), Some(map)) = (crate::traceparent::current(), record.as_object_mut()) {
        for (name, id) in crate::traceparent::fields(&c) {
            map.insert(name.to_owned(), id.into());
        }
    }
    record
}

/// When the command started, for the JSON records' `elapsed_ms`: the first
/// call of [`started`] (made by `main` before anything is sent) fixes it.
static STARTED: OnceLock<Instant> = OnceLock::new();

/// The instant the command started (fixed at the first call).
pub(crate) fn started() -> Instant {
    *STARTED.get_or_init(Instant::now)
}

/// The JSON form of a record. `attempt` is 1-based, as the text log and
/// the result lines count attempts (the record's own `SendId` counts from
/// 0); `elapsed_ms` is when the record was written, in milliseconds since
/// the command started (a monotonic clock: it never goes back).
pub(crate) fn json(r: &AttemptRecord) -> serde_json::Value {
    let (status, transport) = match r.reply {
        Reply::Status(s) => (Some(s), None),
        Reply::Transport(k) => (None, Some(k.to_string())),
        // A kind of reply this CLI does not know yet: say what it is.
        other => (None, Some(other.to_string())),
    };
    let retry_after = match r.retry_after {
        RetryAfterNote::Absent => serde_json::Value::Null,
        RetryAfterNote::Valid(d) => serde_json::json!({ "valid_ms": d.as_millis() as u64 }),
        RetryAfterNote::Rejected(e) => serde_json::json!({ "rejected": e.to_string() }),
    };
    traced(serde_json::json!({
        "request": r.request.0,
        "item": r.id.item,
        "attempt": u64::from(r.id.attempt) + 1,
        "elapsed_ms": started().elapsed().as_millis() as u64,
        "status": status,
        "transport_error": transport,
        "class": r.class.map(|c| c.to_string()),
        "retry_after": retry_after,
        "next_delay_ms": r.next.map(|n| n.delay.as_millis() as u64),
        "next_source": r.next.map(|n| n.source.to_string()),
        "outcome": r.outcome.map(|o| o.to_string()),
    }))
}

/// The text form: retries always, everything with `-v`.
fn text(r: &AttemptRecord, verbose: bool, who: Who) -> Option<String> {
    let attempt = r.id.attempt + 1;
    let who = match who {
        Who::Line(Some(line)) => format!("line {line} attempt {attempt}"),
        Who::Line(None) => format!("item {} attempt {attempt}", r.id.item),
        // A call's one item needs no number (get -v said "item 0").
        Who::Call if r.id.item > 0 => format!("item {} attempt {attempt}", r.id.item),
        Who::Call => format!("attempt {attempt}"),
    };
    let mut note = String::new();
    if let RetryAfterNote::Rejected(e) = r.retry_after {
        note = format!(" (ignored Retry-After: {e})");
    }
    match (r.next, r.outcome) {
        // A job poll that simply comes again on schedule is not a retry.
        (Some(n), _) if n.source == DelaySource::Schedule && !verbose => None,
        (Some(n), _) => {
            // A job poll comes again on its schedule (not a retry), and a
            // long poll answered pending at once (`0ns` said nothing).
            let verb = if n.source == DelaySource::Schedule {
                "polls again"
            } else {
                "retry"
            };
            let when = if n.delay.is_zero() {
                "at once".to_owned()
            } else {
                format!("in {:.3?}", n.delay)
            };
            Some(format!(
                "polite: {who}: {} — {verb} {when} ({}){note}",
                r.reply, n.source
            ))
        }
        // An attempt still in flight when the caller cancelled: no
        // answer, and no abort of its own.
        (None, Some(o @ Outcome::Cancelled))
            if r.reply == Reply::Transport(TransportErrorKind::Aborted) =>
        {
            Some(format!("polite: {who}: in flight — gave up: {o}"))
        }
        (None, Some(o)) if !o.is_success() => {
            Some(format!("polite: {who}: {} — gave up: {o}{note}", r.reply))
        }
        _ if verbose => Some(format!("polite: {who}: {}", r.reply)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polite_core::retry_after::RetryAfterError;
    use polite_core::{RequestId, SendId};

    fn record(note: RetryAfterNote) -> AttemptRecord {
        AttemptRecord {
            request: RequestId(1),
            id: SendId::default(),
            reply: Reply::Status(200),
            class: None,
            retry_after: note,
            next: None,
            outcome: None,
        }
    }

    /// The JSON log counts attempts as the text log does (the first is
    /// attempt 1) and says when each record was written.
    #[test]
    fn a_json_record_counts_attempts_from_one_and_says_when() {
        let first = started();
        let second = AttemptRecord {
            id: SendId {
                item: 0,
                attempt: 1,
            },
            ..record(RetryAfterNote::Absent)
        };
        let text_line = text(&second, true, Who::Call).unwrap_or_default();
        assert!(text_line.contains("attempt 2"), "{text_line}");
        let j = json(&second);
        assert_eq!(j["attempt"], 2, "{j}");
        assert_eq!(j["item"], 0, "{j}");
        let elapsed = j["elapsed_ms"].as_u64().expect("elapsed_ms");
        assert!(u128::from(elapsed) <= first.elapsed().as_millis(), "{j}");
        assert_eq!(started(), first, "fixed at the first call");
    }

    /// An attempt dropped in flight by a cancel says so, not "no answer in
    /// time" (its own end, which it never reached).
    #[test]
    fn an_attempt_in_flight_at_a_cancel_says_so() {
        let dropped = AttemptRecord {
            id: SendId {
                item: 3,
                attempt: 0,
            },
            reply: Reply::Transport(TransportErrorKind::Aborted),
            outcome: Some(Outcome::Cancelled),
            ..record(RetryAfterNote::Absent)
        };
        assert_eq!(
            text(&dropped, false, Who::Call).as_deref(),
            Some("polite: item 3 attempt 1: in flight — gave up: cancelled")
        );
        let aborted = AttemptRecord {
            outcome: Some(Outcome::TimedOut { needed: None }),
            ..dropped
        };
        assert_eq!(
            text(&aborted, false, Who::Call).as_deref(),
            Some(
                "polite: item 3 attempt 1: transport error: aborted: no answer in time — gave up: timed out"
            )
        );
    }

    /// A job poll's next poll is on its schedule, not a retry; one that
    /// comes at once says so (user trial 4: `retry in 0.000ns (schedule)`).
    #[test]
    fn a_job_poll_polls_again_on_its_schedule_or_at_once() {
        let polled = |ms| AttemptRecord {
            reply: Reply::Status(200),
            next: Some(polite_core::record::PlannedDelay {
                delay: std::time::Duration::from_millis(ms),
                source: DelaySource::Schedule,
                send_at: std::time::Instant::now(),
            }),
            ..record(RetryAfterNote::Absent)
        };
        let line = |ms| {
            render(
                LogFormat::Text,
                true,
                Observed::Record(&polled(ms)),
                Who::Call,
            )
        };
        assert_eq!(
            line(0).as_deref(),
            Some("polite: attempt 1: HTTP 200 — polls again at once (schedule)")
        );
        assert_eq!(
            line(968).as_deref(),
            Some("polite: attempt 1: HTTP 200 — polls again in 968.000ms (schedule)")
        );
        // Without -v a poll on schedule is not logged at all.
        let quiet = render(
            LogFormat::Text,
            false,
            Observed::Record(&polled(0)),
            Who::Call,
        );
        assert_eq!(quiet, None);
    }

    /// A batch's attempt is named by its input line, as its result line
    /// is (`"line"`), also for the first item and without `-v`.
    #[test]
    fn a_batch_attempt_is_named_by_its_input_line() {
        let retried = AttemptRecord {
            reply: Reply::Status(503),
            next: Some(polite_core::record::PlannedDelay {
                delay: std::time::Duration::from_millis(250),
                source: DelaySource::Backoff,
                send_at: std::time::Instant::now(),
            }),
            ..record(RetryAfterNote::Absent)
        };
        let event = Observed::Record(&retried);
        let text_line = render(LogFormat::Text, false, event, Who::Line(Some(3)));
        assert_eq!(
            text_line.as_deref(),
            Some("polite: line 3 attempt 1: HTTP 503 — retry in 250.000ms (backoff)")
        );
        let json_line = render(LogFormat::Json, false, event, Who::Line(Some(3))).expect("json");
        let json: serde_json::Value = serde_json::from_str(&json_line).expect("valid JSON");
        assert_eq!(
            (json["line"].as_u64(), json["item"].as_u64()),
            (Some(3), Some(0))
        );
        // A single call keeps its short form, and no `line`.
        assert_eq!(
            render(LogFormat::Text, false, event, Who::Call).as_deref(),
            Some("polite: attempt 1: HTTP 503 — retry in 250.000ms (backoff)")
        );
        // With -v too: a call's one item has no number.
        let verbose = render(LogFormat::Text, true, event, Who::Call).expect("text");
        assert!(
            verbose.starts_with("polite: attempt 1: HTTP 503"),
            "{verbose}"
        );
        let call = render(LogFormat::Json, false, event, Who::Call).expect("json");
        assert!(!call.contains("\"line\""), "{call}");
    }

    #[test]
    fn a_rejected_retry_after_warns_once_per_call_in_text_without_verbose() {
        let log = Log::new(LogFormat::Text, false);
        let bad = record(RetryAfterNote::Rejected(RetryAfterError::Malformed));
        let w = log.warning(Observed::Record(&bad)).expect("warned");
        assert!(
            w.starts_with("polite: warning:") && w.contains("Retry-After"),
            "{w}"
        );
        assert!(!w.contains('\n'));
        assert_eq!(log.warning(Observed::Record(&bad)), None, "once per call");
        let fine = record(RetryAfterNote::Absent);
        assert_eq!(
            Log::new(LogFormat::Text, false).warning(Observed::Record(&fine)),
            None
        );
        // -v and JSON already show the note on every record.
        assert_eq!(
            Log::new(LogFormat::Text, true).warning(Observed::Record(&bad)),
            None
        );
        assert_eq!(
            Log::new(LogFormat::Json, false).warning(Observed::Record(&bad)),
            None
        );
    }
}
