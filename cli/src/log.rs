//! The attempt log on stderr: one line per retry (text), or one JSON object
//! per attempt record. Records hold no header values, URLs or bodies.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Writes one observed event to stderr in the chosen format.
pub(crate) fn emit(format: LogFormat, verbose: bool, event: Observed<'_>) {
    let line = match (format, event) {
        (LogFormat::Json, Observed::Record(r)) => Some(json(r).to_string()),
        (LogFormat::Json, Observed::Notice(n)) => {
            Some(traced(serde_json::json!({ "notice": n.to_string() })).to_string())
        }
        (LogFormat::Text, Observed::Record(r)) => text(r, verbose),
        (LogFormat::Text, Observed::Notice(n)) => Some(format!("polite: {n}")),
    };
    if let Some(line) = line {
        // A closed stderr must not turn into a panic.
        let _ = writeln!(std::io::stderr(), "{line}");
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

/// The JSON form of a record.
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
        "attempt": r.id.attempt,
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
fn text(r: &AttemptRecord, verbose: bool) -> Option<String> {
    let who = if r.id.item > 0 || verbose {
        format!("item {} attempt {}", r.id.item, r.id.attempt + 1)
    } else {
        format!("attempt {}", r.id.attempt + 1)
    };
    let mut note = String::new();
    if let RetryAfterNote::Rejected(e) = r.retry_after {
        note = format!(" (ignored Retry-After: {e})");
    }
    match (r.next, r.outcome) {
        // A job poll that simply comes again on schedule is not a retry.
        (Some(n), _) if n.source == DelaySource::Schedule && !verbose => None,
        (Some(n), _) => Some(format!(
            "polite: {who}: {} — retry in {:.3?} ({}){note}",
            r.reply, n.delay, n.source
        )),
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
            text(&dropped, false).as_deref(),
            Some("polite: item 3 attempt 1: in flight — gave up: cancelled")
        );
        let aborted = AttemptRecord {
            outcome: Some(Outcome::TimedOut { needed: None }),
            ..dropped
        };
        assert_eq!(
            text(&aborted, false).as_deref(),
            Some(
                "polite: item 3 attempt 1: transport error: aborted: no answer in time — gave up: timed out"
            )
        );
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
