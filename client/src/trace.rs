//! Attempt records as `tracing` events (target `polite`).
//!
//! Records hold ids, statuses, error kinds, durations and reasons — never a
//! header value, a URL, a query string or a body.

use polite_core::record::AttemptRecord;

/// Emits one event for an attempt record: `INFO` when it failed or ended the
/// request without success, `DEBUG` for a plain success.
///
/// ```
/// use polite_core::{Reply, RequestId, SendId};
/// use polite_core::record::{AttemptRecord, RetryAfterNote};
/// polite_client::trace_record(&AttemptRecord {
///     request: RequestId(1), id: SendId::default(), reply: Reply::Status(200), class: None,
///     retry_after: RetryAfterNote::Absent, next: None, outcome: None,
/// });
/// ```
pub fn trace_record(r: &AttemptRecord) {
    let next_ms = r
        .next
        .map(|n| u64::try_from(n.delay.as_millis()).unwrap_or(u64::MAX));
    let source = r.next.map(|n| n.source);
    let ended = r.outcome.map(|o| o.to_string());
    let failed = r.class.is_some() || r.outcome.is_some_and(|o| !o.is_success());
    macro_rules! ev {
        ($lvl:expr) => {
            tracing::event!(
                target: "polite",
                $lvl,
                request = r.request.0,
                item = r.id.item,
                attempt = r.id.attempt,
                reply = %r.reply,
                class = r.class.map(tracing::field::display),
                retry_after = ?r.retry_after,
                next_delay_ms = next_ms,
                next_source = source.map(tracing::field::display),
                outcome = ended.as_deref(),
                "attempt"
            )
        };
    }
    if failed {
        ev!(tracing::Level::INFO);
    } else {
        ev!(tracing::Level::DEBUG);
    }
}
