//! Attempt records as `tracing` events (target `polite`).
//!
//! Records hold ids, statuses, error kinds, durations and reasons — never a
//! header value, a URL, a query string or a body. A batch's events also
//! name their item's server (`server.address`, `server.port`: its host and
//! port only), as a call's span does.

use polite_core::record::AttemptRecord;

/// Emits one event for an attempt record: `INFO` when it failed or ended the
/// request without success, `DEBUG` for a plain success. Its `attempt`
/// counts from 1 (the first send is attempt 1, as the CLI's logs say);
/// `http.request.resend_count` counts the sends before it (0 for the first).
///
/// ```
/// use polite_core::{Reply, RequestId, SendId};
/// use polite_core::record::{AttemptRecord, RetryAfterNote};
/// use std::sync::{Arc, Mutex};
/// # struct Sink(Arc<Mutex<Vec<u8>>>);
/// # impl std::io::Write for Sink {
/// #     fn write(&mut self, b: &[u8]) -> std::io::Result<usize> { self.0.lock().unwrap().extend_from_slice(b); Ok(b.len()) }
/// #     fn flush(&mut self) -> std::io::Result<()> { Ok(()) }
/// # }
/// let ok = AttemptRecord {
///     request: RequestId(1), id: SendId::default(), reply: Reply::Status(200), class: None,
///     retry_after: RetryAfterNote::Absent, next: None, outcome: None,
/// };
/// // Captured by a subscriber that writes events to `out` (no ANSI colours).
/// let out = Arc::new(Mutex::new(Vec::new()));
/// let sink = Arc::clone(&out);
/// let subscriber = tracing_subscriber::fmt()
///     .with_max_level(tracing::Level::DEBUG)
///     .with_ansi(false)
///     .with_writer(move || Sink(Arc::clone(&sink)))
///     .finish();
/// tracing::subscriber::with_default(subscriber, || polite_client::trace_record(&ok));
/// let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
/// // A plain success is one DEBUG event of target `polite`.
/// assert!(text.contains("DEBUG polite:"), "{text}");
/// assert_eq!(text.lines().count(), 1, "{text}");
/// // The first send: attempt 1, no resend before it.
/// assert!(text.contains("attempt=1 http.request.resend_count=0"), "{text}");
/// ```
pub fn trace_record(r: &AttemptRecord) {
    trace_attempt(r, || None);
}

/// Where an attempt went, for its event: its request's host and port
/// (never user info, a path or a query; SPEC §5.1). Made only when the
/// event is written.
pub(crate) struct Server {
    /// The request's authority (a reference-counted copy); only its host
    /// is written.
    authority: http::uri::Authority,
    port: Option<u16>,
}

impl Server {
    /// `uri`'s server: `None` without an authority.
    pub(crate) fn of(uri: &http::Uri) -> Option<Server> {
        Some(Server {
            authority: uri.authority()?.clone(),
            port: port_of(uri),
        })
    }
}

/// `uri`'s port: its own, or its scheme's default.
fn port_of(uri: &http::Uri) -> Option<u16> {
    uri.port_u16().or(match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    })
}

/// [`trace_record`] with the attempt's `server.address` and `server.port`
/// from `server` (a batch's events: its span is one for all its items, and
/// names no server). `server` is called only when the event is enabled,
/// and at most once: with tracing off, nothing is looked up.
pub(crate) fn trace_attempt(r: &AttemptRecord, server: impl FnOnce() -> Option<Server>) {
    let server = std::cell::Cell::new(Some(server));
    let cell = std::cell::OnceCell::new();
    let found = || {
        cell.get_or_init(|| server.take().and_then(|f| f()))
            .as_ref()
    };
    let next_ms = r
        .next
        .map(|n| u64::try_from(n.delay.as_millis()).unwrap_or(u64::MAX));
    let source = r.next.map(|n| n.source);
    let failed = r.class.is_some() || r.outcome.is_some_and(|o| !o.is_success());
    macro_rules! ev {
        ($lvl:expr) => {
            tracing::event!(
                target: "polite",
                $lvl,
                request = r.request.0,
                item = r.id.item,
                server.address = found().map(|s| s.authority.host()),
                server.port = found().and_then(|s| s.port),
                // Counted from 1, as the CLI's logs count attempts; the
                // OpenTelemetry field counts the sends before this one.
                attempt = u64::from(r.id.attempt) + 1,
                http.request.resend_count = r.id.attempt,
                reply = %r.reply,
                class = r.class.map(tracing::field::display),
                retry_after = ?r.retry_after,
                next_delay_ms = next_ms,
                next_source = source.map(tracing::field::display),
                // Written only when the event is enabled (the macro
                // evaluates its fields after asking the subscriber).
                outcome = r.outcome.map(|o| o.to_string()).as_deref(),
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

/// The span of one call, after the OpenTelemetry HTTP client semantic
/// conventions: name `polite.send` / `polite.wait` (exported as the method,
/// `otel.name`), `otel.kind = "client"`, `http.request.method`,
/// `server.address`, `server.port`, `url.full` without user info and with
/// every query value `REDACTED` (SPEC §5.1), and, once the call is over,
/// `http.response.status_code`, `http.request.resend_count` (sends after the
/// first) and `error.type` (why it did not succeed). The caller's current
/// span is its parent; [`CallOptions::label`](crate::CallOptions::label)
/// adds `polite.label`.
pub(crate) fn call_span(
    call: &'static str,
    request: &http::Request<bytes::Bytes>,
    label: Option<&str>,
) -> tracing::Span {
    let uri = request.uri();
    let method = request.method().as_str();
    // The fields below are computed only when the span is enabled (the
    // macro asks the subscriber first): with no subscriber, no port is
    // parsed and no URL written.
    let port = || port_of(uri);
    macro_rules! span {
        ($name:literal) => {
            tracing::info_span!(
                target: "polite",
                $name,
                otel.name = method,
                otel.kind = "client",
                http.request.method = method,
                server.address = uri.host().unwrap_or(""),
                server.port = port(),
                url.full = %redacted_url(uri),
                polite.label = label,
                http.response.status_code = tracing::field::Empty,
                http.request.resend_count = tracing::field::Empty,
                error.type = tracing::field::Empty,
            )
        };
    }
    match call {
        "wait" => span!("polite.wait"),
        _ => span!("polite.send"),
    }
}

/// Records how a call ended on its span.
pub(crate) fn end_span(span: &tracing::Span, status: Option<u16>, sends: u32, error: Option<&str>) {
    if let Some(s) = status {
        span.record("http.response.status_code", s);
    }
    if sends > 1 {
        span.record("http.request.resend_count", sends - 1);
    }
    if let Some(e) = error {
        span.record("error.type", e);
    }
}

/// `url.full` as the conventions want it: scheme, host, port and path;
/// no user info; every query value replaced by `REDACTED` (names stay);
/// no fragment.
///
/// ```
/// let uri: http::Uri = "https://alice:pw@api.test:8443/v1/x?token=SECRET&page=2".parse().unwrap();
/// assert_eq!(polite_client::redacted_url(&uri), "https://api.test:8443/v1/x?token=REDACTED&page=REDACTED");
/// ```
#[must_use]
pub fn redacted_url(uri: &http::Uri) -> String {
    let mut out = String::new();
    if let Some(scheme) = uri.scheme_str() {
        out.push_str(scheme);
        out.push_str("://");
    }
    out.push_str(uri.host().unwrap_or(""));
    if let Some(port) = uri.port_u16() {
        out.push(':');
        out.push_str(&port.to_string());
    }
    out.push_str(uri.path());
    if let Some(query) = uri.query() {
        out.push('?');
        for (i, pair) in query.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match pair.split_once('=') {
                Some((name, _)) => {
                    out.push_str(name);
                    out.push_str("=REDACTED");
                }
                None => out.push_str("REDACTED"),
            }
        }
    }
    out
}

/// The `error.type` of an outcome that is not a success (`None` for one).
pub(crate) fn error_type(outcome: &polite_core::Outcome) -> Option<&'static str> {
    use polite_core::Outcome as O;
    Some(match outcome {
        O::Succeeded { .. } | O::Terminal { .. } => return None,
        O::NotRetryable { .. } => "not_retryable",
        O::RetriesExhausted { .. } => "retries_exhausted",
        O::RetryBudgetExhausted { .. } => "retry_budget_exhausted",
        O::RateLimited { .. } => "rate_limited",
        O::NotReplayable { .. } => "not_replayable",
        O::TimedOut { .. } => "timed_out",
        O::Cancelled => "cancelled",
        O::Permanent { .. } => "permanent",
        O::Starved { .. } => "starved",
        O::Stale => "stale",
        _ => "other",
    })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use polite_core::record::{AttemptRecord, RetryAfterNote};
    use polite_core::{Reply, RequestId, SendId};

    use super::{Server, trace_attempt};

    /// With the event off (no subscriber, or its level filtered out) the
    /// server is not looked up; with it on, once for both fields.
    #[test]
    fn the_server_is_looked_up_only_for_an_event_written_and_once() {
        let ok = AttemptRecord {
            request: RequestId(1),
            id: SendId::default(),
            reply: Reply::Status(200),
            class: None,
            retry_after: RetryAfterNote::Absent,
            next: None,
            outcome: None,
        };
        let uri: http::Uri = "http://u:pw@h.test:81/p?q=1".parse().unwrap();
        let looked = Cell::new(0);
        let lookup = || {
            looked.set(looked.get() + 1);
            Server::of(&uri)
        };
        trace_attempt(&ok, lookup);
        assert_eq!(looked.get(), 0, "no subscriber");
        let info = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(info, || trace_attempt(&ok, lookup));
        assert_eq!(looked.get(), 0, "a DEBUG event under an INFO subscriber");
        let debug = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(debug, || trace_attempt(&ok, lookup));
        assert_eq!(looked.get(), 1, "once for address and port");
    }
}
