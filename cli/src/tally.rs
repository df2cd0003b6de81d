//! [`Tally`]: where a command's time went, for its summary line (always
//! after `batch`, after `get` and `wait` with `-v`).

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use polite_core::RetryClass;
use polite_core::record::{AttemptRecord, DelaySource};

/// Counts of one command's attempts, retries by class and planned waits by
/// cause, from the attempt records.
#[derive(Debug, Default)]
pub(crate) struct Tally(Mutex<Counts>);

#[derive(Debug, Default)]
struct Counts {
    sent: u64,
    retries: [u64; 3],
    waited: [Duration; 3],
}

fn class_index(class: RetryClass) -> usize {
    match class {
        RetryClass::RateLimited => 0,
        RetryClass::ServerError => 1,
        _ => 2,
    }
}

impl Tally {
    /// Counts one attempt record.
    pub(crate) fn record(&self, r: &AttemptRecord) {
        let mut c = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        c.sent += 1;
        // A retry is a failed attempt with a next send; a planned wait is
        // every record's, a retry's or a pending poll's (whose source is
        // the poll schedule, the server's Retry-After or the backoff).
        if let (Some(class), Some(_)) = (r.class, r.next) {
            c.retries[class_index(class)] += 1;
        }
        if let Some(next) = r.next {
            let cause = match next.source {
                DelaySource::RetryAfter | DelaySource::Clamp => 1,
                DelaySource::Schedule => 2,
                _ => 0,
            };
            c.waited[cause] += next.delay;
        }
    }

    /// The summary line: requests sent, retries by class, waits by cause,
    /// the rate the pace settled on (`rates`: one per pace key that has
    /// one; the slowest is shown) and the command's time.
    pub(crate) fn line(&self, took: Duration, rates: &[f64]) -> String {
        let c = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let secs = |d: Duration| format!("{:.1}s", d.as_secs_f64());
        let [rl, se, tr] = c.retries;
        let [backoff, server, schedule] = c.waited;
        let mut line = format!(
            "{} request{} sent, {} retr{} ({rl} rate-limited, {se} server error, {tr} transport)",
            c.sent,
            if c.sent == 1 { "" } else { "s" },
            rl + se + tr,
            if rl + se + tr == 1 { "y" } else { "ies" },
        );
        line.push_str(&format!(
            "; planned waits: backoff {}, Retry-After {}",
            secs(backoff),
            secs(server)
        ));
        if !schedule.is_zero() {
            line.push_str(&format!(", poll schedule {}", secs(schedule)));
        }
        match rates.iter().copied().reduce(f64::min) {
            None => line.push_str("; pace unlimited"),
            Some(r) if rates.len() == 1 => {
                line.push_str(&format!("; pace settled at {}", per_sec(r)));
            }
            Some(r) => line.push_str(&format!(
                "; pace settled at {} (the slowest of {} paces)",
                per_sec(r),
                rates.len()
            )),
        }
        line.push_str(&format!("; {} in all", secs(took)));
        line
    }
}

/// The rates `client`'s paces settled on, sends per second.
pub(crate) fn rates(client: &polite_blocking::Client) -> Vec<f64> {
    client.pace_rates().into_iter().map(|(_, r)| r).collect()
}

/// A rate for people: `4.2/s`, `0.05/s`, `0.0/s`.
pub(crate) fn per_sec(rate: f64) -> String {
    if rate >= 0.1 || rate == 0.0 {
        format!("{rate:.1}/s")
    } else {
        format!("{rate:.2}/s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polite_core::record::{PlannedDelay, RetryAfterNote};
    use polite_core::{Reply, RequestId, SendId};
    use std::time::Instant;

    fn rec(class: Option<RetryClass>, next: Option<(Duration, DelaySource)>) -> AttemptRecord {
        AttemptRecord {
            request: RequestId(1),
            id: SendId::default(),
            reply: Reply::Status(503),
            class,
            retry_after: RetryAfterNote::Absent,
            next: next.map(|(delay, source)| PlannedDelay {
                delay,
                source,
                send_at: Instant::now(),
            }),
            outcome: None,
        }
    }

    #[test]
    fn the_line_counts_sends_retries_by_class_and_waits_by_cause() {
        let t = Tally::default();
        t.record(&rec(
            Some(RetryClass::RateLimited),
            Some((Duration::from_secs(2), DelaySource::RetryAfter)),
        ));
        t.record(&rec(
            Some(RetryClass::ServerError),
            Some((Duration::from_millis(500), DelaySource::Backoff)),
        ));
        t.record(&rec(None, None));
        assert_eq!(
            t.line(Duration::from_millis(2600), &[2.5]),
            "3 requests sent, 2 retries (1 rate-limited, 1 server error, 0 transport); \
             planned waits: backoff 0.5s, Retry-After 2.0s; pace settled at 2.5/s; 2.6s in all"
        );
        // Pending polls (no class: not retries) wait too, by their source.
        t.record(&rec(
            None,
            Some((Duration::from_secs(3), DelaySource::RetryAfter)),
        ));
        t.record(&rec(
            None,
            Some((Duration::from_millis(1500), DelaySource::Schedule)),
        ));
        t.record(&rec(
            None,
            Some((Duration::from_millis(300), DelaySource::Backoff)),
        ));
        assert!(
            t.line(Duration::ZERO, &[]).starts_with(
                "6 requests sent, 2 retries (1 rate-limited, 1 server error, 0 transport); \
                 planned waits: backoff 0.8s, Retry-After 5.0s, poll schedule 1.5s;"
            ),
            "{}",
            t.line(Duration::ZERO, &[])
        );
        assert!(t.line(Duration::ZERO, &[]).contains("; pace unlimited;"));
        assert!(
            t.line(Duration::ZERO, &[3.0, 0.04])
                .contains("; pace settled at 0.04/s (the slowest of 2 paces);")
        );
    }
}
