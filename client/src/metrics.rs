//! Metrics through the [`metrics`](https://docs.rs/metrics) facade
//! (feature `metrics`): install any recorder — a Prometheus exporter, an
//! OpenTelemetry bridge, StatsD — and every call of every client reports
//! to it. Without an installed recorder the metrics go nowhere; without
//! the feature the code is not compiled at all.
//!
//! | Name | Type | Unit | Labels | What |
//! |---|---|---|---|---|
//! | `polite_attempts_total` | counter | attempts | `call`, `origin`, `class` | attempts that got an answer or a transport error; `class` is the attempt's retry class: `rate_limited`, `server_error`, `transport`, or `none` (a success or a final answer) |
//! | `polite_retries_total` | counter | sends | `call`, `origin` | sends after an item's first (retries and restarts) |
//! | `polite_outcomes_total` | counter | requests | `call`, `origin`, `outcome` | logical requests ended (a batch counts each item): `succeeded`, `terminal` (a job reached a terminal state), or the `error.type` of the span (`retries_exhausted`, `rate_limited`, `timed_out`, `cancelled`, `starved`, ...) |
//! | `polite_call_duration_seconds` | histogram | seconds | `call`, `origin` | a call's end-to-end time (a batch: the whole batch) |
//! | `polite_wait_seconds` | histogram | seconds | `call`, `origin`, `cause` | time a call spent waiting before a send, one value per wait and cause: `backoff` and `retry_after` (the machine's planned delay, as much of it as passed), `schedule` (a job poll's interval), `pace` (the client's throttle or adaptive rate held the send) and `cool_down` (a server's `Retry-After` or `RateLimit` pause, seen by any call sharing the pace) |
//! | `polite_calls_in_flight` | gauge | calls | `call`, `origin` | calls started and not yet ended (a batch fed from a stream: from its first request on, see below) |
//! | `polite_pace_requests_per_second` | gauge | sends/s | `origin` | the rate the pace settled on: its throttle's limit per window, or the adaptive rate once a 429 enabled it (whichever is lower); not set while the pace is unlimited |
//!
//! Labels are bounded: `call` is `send`, `wait` or `batch`; `origin` is
//! the call's pace key ([`PaceKey`](crate::PaceKey): scheme, host and port
//! by default; never a path, a query or a credential — with
//! [`PaceBy::Header`](crate::PaceBy::Header) it carries a hash of the
//! header's value, one value per key, as does a key made with
//! [`PaceKey::hashed`](crate::PaceKey::hashed); a key made with
//! [`PaceKey::new`](crate::PaceKey::new) is shown as given); `class`, `outcome` and `cause` take
//! the values above. A batch paces each item by its own key (SPEC §4.2), and
//! labels each item's attempts, retries, waits and outcome with that key;
//! its call-wide `polite_call_duration_seconds` and
//! `polite_calls_in_flight` carry its first item's key. A batch whose first
//! request is not there when it starts (fed from a stream,
//! [`Client::batch_from_stream`](crate::Client::batch_from_stream), or over
//! an empty iterator) takes that key when its first request arrives, and is
//! counted in flight from then; one that ends without any request is never
//! counted in flight, and records its duration under `origin=""` (it has no
//! origin). A batch's pace waits are the time a key's next send was held.
//!
//! The waits by cause come from two places: a planned delay is in every
//! attempt record, and is counted when the next send goes out (or, if the
//! call ends first, as far as it went); a pace wait is measured where the
//! call asks its pace, from the first refusal to the grant, and the limit
//! that refused ([`Pace::refusal`](polite_core::Pace::refusal)) names the
//! cause.
//!
//! ```
//! // Optional: units and descriptions for the recorder (e.g. a Prometheus
//! // exporter's `# HELP` lines).
//! polite_client::metrics::describe();
//! assert_eq!(polite_client::metrics::WAIT_SECONDS, "polite_wait_seconds");
//! ```

use metrics::Unit;

/// Counter: attempts by `class`.
pub const ATTEMPTS_TOTAL: &str = "polite_attempts_total";
/// Counter: sends after an item's first.
pub const RETRIES_TOTAL: &str = "polite_retries_total";
/// Counter: logical requests ended, by `outcome`.
pub const OUTCOMES_TOTAL: &str = "polite_outcomes_total";
/// Histogram: a call's end-to-end seconds.
pub const CALL_DURATION_SECONDS: &str = "polite_call_duration_seconds";
/// Histogram: seconds waited before a send, by `cause`.
pub const WAIT_SECONDS: &str = "polite_wait_seconds";
/// Gauge: calls in flight.
pub const CALLS_IN_FLIGHT: &str = "polite_calls_in_flight";
/// Gauge: the rate a pace settled on, sends per second, by `origin`.
pub const PACE_REQUESTS_PER_SECOND: &str = "polite_pace_requests_per_second";

/// Describes every metric of the table above (unit and help text) to the
/// installed recorder. Optional; call it once after installing one.
///
/// ```
/// use metrics_util::debugging::DebuggingRecorder;
/// use polite_client::metrics::{ATTEMPTS_TOTAL, describe};
/// describe(); // no recorder installed: goes nowhere
///
/// let recorder = DebuggingRecorder::new();
/// let snapshot = recorder.snapshotter();
/// metrics::with_local_recorder(&recorder, || {
///     describe();
///     metrics::counter!(ATTEMPTS_TOTAL).increment(1);
/// });
/// let (_, unit, help, _) = snapshot.snapshot().into_vec().pop().unwrap();
/// assert_eq!(unit, Some(metrics::Unit::Count));
/// assert!(help.unwrap().starts_with("Attempts that got an answer"));
/// ```
pub fn describe() {
    metrics::describe_counter!(
        ATTEMPTS_TOTAL,
        Unit::Count,
        "Attempts that got an answer or a transport error, by retry class"
    );
    metrics::describe_counter!(RETRIES_TOTAL, Unit::Count, "Sends after a request's first");
    metrics::describe_counter!(
        OUTCOMES_TOTAL,
        Unit::Count,
        "Logical requests ended, by outcome"
    );
    metrics::describe_histogram!(
        CALL_DURATION_SECONDS,
        Unit::Seconds,
        "End-to-end time of a send, wait or batch"
    );
    metrics::describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "Time waited before a send, by cause (backoff, retry_after, schedule, pace, cool_down)"
    );
    metrics::describe_gauge!(
        CALLS_IN_FLIGHT,
        Unit::Count,
        "Calls started and not yet ended"
    );
    metrics::describe_gauge!(
        PACE_REQUESTS_PER_SECOND,
        "The rate the pace settled on, sends per second"
    );
}
