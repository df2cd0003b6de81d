//! [`Tally`]: where a command's time went, for its summary line (always
//! after `batch`, after `get` and `wait` with `-v`).

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use polite_blocking::Observed;
use polite_core::record::{AttemptRecord, DelaySource};
use polite_core::{Notice, RetryClass};

use crate::fleet::Watch;

/// Counts of one command's attempts, retries by class and planned waits by
/// cause, from the attempt records; and its fleet (`--redis`), if any.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    counts: Mutex<Counts>,
    fleet: Option<Watch>,
}

#[derive(Debug, Default)]
struct Counts {
    sent: u64,
    retries: [u64; 3],
    waited: [Duration; 3],
    /// The last time this process paced alone, Redis refused it (the
    /// fleet's last notice of a fall-back was `FleetRefused`).
    refused: bool,
}

/// What a command's fleet (`--redis`) was asked to keep, and what it did:
/// the pace part of the summary when there is one.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct FleetRun {
    /// The configured rate (`--rate N/W`): the whole fleet's.
    pub(crate) rate: Option<(u32, Duration)>,
    /// Whether the fleet learns its pace from the server's answers (a
    /// quota from RateLimit headers, the adaptive rate).
    pub(crate) learns: bool,
    /// How many processes share the quota (`--fleet-size`).
    pub(crate) size: u32,
    /// Sends made on the fleet's pace (permits Redis granted).
    pub(crate) shared: u64,
    /// Sends paced alone, at this process's share, while Redis did not
    /// answer or refused it.
    pub(crate) alone: u64,
    /// Why it last paced alone: Redis refused it (else did not answer).
    pub(crate) refused: bool,
}

fn class_index(class: RetryClass) -> usize {
    match class {
        RetryClass::RateLimited => 0,
        RetryClass::ServerError => 1,
        _ => 2,
    }
}

impl Tally {
    /// A tally for a command whose pace is shared by `fleet`, if any.
    pub(crate) fn new(fleet: Option<Watch>) -> Tally {
        Tally {
            counts: Mutex::default(),
            fleet,
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one observed event: an attempt record, or the fleet's notice
    /// of why this process paces alone.
    pub(crate) fn observe(&self, e: Observed<'_>) {
        match e {
            Observed::Record(r) => self.record(r),
            Observed::Notice(Notice::FleetRefused) => self.counts().refused = true,
            Observed::Notice(Notice::FleetUnavailable) => self.counts().refused = false,
            Observed::Notice(_) => {}
        }
    }

    /// Counts one attempt record.
    pub(crate) fn record(&self, r: &AttemptRecord) {
        let mut c = self.counts();
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

    /// What the fleet did so far, if the command has one.
    fn fleet_run(&self) -> Option<FleetRun> {
        let refused = self.counts().refused;
        self.fleet.as_ref().map(|f| f.run(refused))
    }

    /// The progress line's pace part: the rate the pace settled on, or
    /// the fleet's while Redis answers and this process's share while it
    /// does not.
    pub(crate) fn pace_now(&self, rates: &[f64]) -> String {
        let slowest = rates.iter().copied().reduce(f64::min);
        let plain = || match slowest {
            Some(r) => format!("pace {}", per_sec(r)),
            None => "pace unlimited".to_owned(),
        };
        let Some(fleet) = &self.fleet else {
            return plain();
        };
        let run = fleet.run(self.counts().refused);
        match fleet_pace(slowest, &run, true) {
            None => plain(),
            Some(shared) if fleet.up() => shared,
            Some(_) => format!(
                "{} alone: {}",
                plain(),
                if run.refused {
                    "Redis refuses this process"
                } else {
                    "Redis not answering"
                }
            ),
        }
    }

    /// The summary line: requests sent, retries by class, waits by cause,
    /// the rate the pace settled on (`rates`: one per pace key that has
    /// one; the slowest is shown; with a fleet, see [`pace_words`]) and the
    /// command's time.
    pub(crate) fn line(&self, took: Duration, rates: &[f64]) -> String {
        let fleet = self.fleet_run();
        let c = self.counts();
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
        line.push_str("; ");
        line.push_str(&pace_words(rates, fleet.as_ref()));
        line.push_str(&format!("; {} in all", secs(took)));
        line
    }
}

/// The summary's pace part. Alone: the rate the pace settled on
/// (`rates`: one per pace key that has one; the slowest is shown). With a
/// fleet (`fleet`): the fleet's pace, which is in force while Redis
/// answers (`rates` are then this process's local fallback, its share),
/// and the sends made alone, if any, and why.
pub(crate) fn pace_words(rates: &[f64], fleet: Option<&FleetRun>) -> String {
    let slowest = rates.iter().copied().reduce(f64::min);
    let of_paces = if rates.len() > 1 {
        format!(" (the slowest of {} paces)", rates.len())
    } else {
        String::new()
    };
    let Some((fleet, shared)) = fleet.and_then(|f| Some((f, fleet_pace(slowest, f, false)?)))
    else {
        return match slowest {
            None => "pace unlimited".to_owned(),
            Some(r) => format!("pace settled at {}{of_paces}", per_sec(r)),
        };
    };
    let why = if fleet.refused {
        "Redis refused this process"
    } else {
        "Redis did not answer"
    };
    let alone = match slowest {
        Some(r) => format!("at {}{of_paces}", per_sec(r)),
        None => "with no limit".to_owned(),
    };
    let sends = |n: u64| format!("{n} send{}", if n == 1 { "" } else { "s" });
    match (fleet.shared, fleet.alone) {
        (_, 0) => format!(
            "{shared} ({} here without Redis{})",
            slowest.map_or_else(|| "unlimited".to_owned(), per_sec),
            if rates.len() > 1 {
                format!("; the slowest of {} paces", rates.len())
            } else {
                String::new()
            }
        ),
        (0, n) => format!("{shared}, but {why}: {} paced alone {alone}", sends(n)),
        (s, n) => format!(
            "{shared} for {}, {n} paced alone {alone} while {why}",
            sends(s)
        ),
    }
}

/// The fleet's pace, as the summary and the progress line name it: the
/// configured rate, the whole fleet's (`at most` once this process's share
/// was cut by 429s, `slowest`: the adaptive rate, which the fleet keeps
/// too), or a pace the fleet learns (said `short`ly on the progress line).
/// `None` when the fleet paces nothing.
fn fleet_pace(slowest: Option<f64>, fleet: &FleetRun, short: bool) -> Option<String> {
    match fleet.rate {
        Some((n, window)) => {
            let secs = window.as_secs_f64();
            let share = f64::from(n.div_ceil(fleet.size.max(1))) / secs;
            let cut = slowest.is_some_and(|r| r < share * (1.0 - 1e-9));
            Some(format!(
                "fleet pace {}{} on Redis",
                if cut { "at most " } else { "" },
                per_sec(f64::from(n) / secs)
            ))
        }
        None if fleet.learns && short => Some("fleet pace on Redis".to_owned()),
        None if fleet.learns => {
            Some("fleet pace on Redis, learnt from the server's answers".to_owned())
        }
        None => None,
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

    /// With a fleet (`--redis`), the summary names the fleet's pace, in
    /// force while Redis answers, not this process's local fallback share
    /// (which it once called "pace settled at 10.0/s" for a fleet of 2 at
    /// --rate 20/1s), and says how many sends went alone, and why.
    #[test]
    fn with_a_fleet_the_line_names_the_fleet_s_pace_and_the_sends_made_alone() {
        let run = FleetRun {
            rate: Some((20, Duration::from_secs(1))),
            learns: true,
            size: 2,
            shared: 6,
            alone: 0,
            refused: false,
        };
        let share = [10.0];
        assert_eq!(
            pace_words(&share, Some(&run)),
            "fleet pace 20.0/s on Redis (10.0/s here without Redis)"
        );
        // Some sends alone: how many, at what, and why.
        let fell = FleetRun { alone: 4, ..run };
        assert_eq!(
            pace_words(&share, Some(&fell)),
            "fleet pace 20.0/s on Redis for 6 sends, 4 paced alone at 10.0/s while Redis did not answer"
        );
        let never = FleetRun {
            shared: 0,
            alone: 1,
            refused: true,
            ..run
        };
        assert_eq!(
            pace_words(&share, Some(&never)),
            "fleet pace 20.0/s on Redis, but Redis refused this process: 1 send paced alone at 10.0/s"
        );
        // 429s cut the share: the fleet's rate is then a ceiling.
        assert_eq!(
            pace_words(&[7.0, 9.5], Some(&run)),
            "fleet pace at most 20.0/s on Redis (7.0/s here without Redis; the slowest of 2 paces)"
        );
        // A share rounded up (5 for 3 processes: 2 each) is no cut.
        let odd = FleetRun {
            rate: Some((5, Duration::from_secs(1))),
            size: 3,
            ..run
        };
        assert!(pace_words(&[2.0], Some(&odd)).starts_with("fleet pace 5.0/s on Redis ("));
        // No --rate: the fleet learns its pace; the CLI knows only its share.
        let learnt = FleetRun { rate: None, ..run };
        assert_eq!(
            pace_words(&[], Some(&learnt)),
            "fleet pace on Redis, learnt from the server's answers (unlimited here without Redis)"
        );
        // --rate none: the fleet paces nothing either.
        let none = FleetRun {
            learns: false,
            ..learnt
        };
        assert_eq!(pace_words(&[], Some(&none)), "pace unlimited");
        // Without a fleet, as before.
        assert_eq!(pace_words(&share, None), "pace settled at 10.0/s");
    }
}
