//! The request log: one [`LogEntry`] per request, in arrival order.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What became of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// Still being handled (a long poll, a slow answer) when the snapshot was taken.
    InFlight,
    /// Answered with [`LogEntry::status`].
    Answered,
    /// The connection was reset on purpose ([`Fault::Reset`](crate::Fault::Reset) or a scripted reset).
    Reset,
    /// Hanging on purpose: it is never answered. [`LogEntry::completed`] stays
    /// `None` until the client closes the connection (then it is that moment).
    Hung,
    /// The client closed the connection before the answer (e.g. it gave up
    /// on a long poll or a slow answer).
    Abandoned,
}

/// One request as the lab saw it. Header *values* are never stored (credentials
/// live there): only which header names were present.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// Position in the lab's life, from 0 (not reset by [`LabHandle::clear_log`](crate::LabHandle::clear_log)).
    pub seq: u64,
    /// The method, e.g. `GET`.
    pub method: String,
    /// The path, without query.
    pub path: String,
    /// The raw query (after `?`), if any.
    pub query: Option<String>,
    /// Names of the request headers present, lowercase, sorted, without duplicates.
    pub header_names: Vec<String>,
    /// When the request's head had been read.
    pub arrived: Instant,
    /// `arrived` as an offset from the lab's start.
    pub arrived_offset: Duration,
    /// When the lab handed over the response head, reset the connection, or
    /// saw the client close it; `None` while in flight (or hanging with the
    /// client still connected).
    pub completed: Option<Instant>,
    /// `completed` as an offset from the lab's start.
    pub completed_offset: Option<Duration>,
    /// The status sent; `None` for a reset, a hang, or a request still in flight.
    pub status: Option<u16>,
    /// What became of the request.
    pub disposition: Disposition,
    /// Requests in flight at this one's arrival, **counting itself** (so a
    /// lone request shows 1, and the maximum over a log is the peak concurrency).
    pub in_flight_at_arrival: usize,
}

impl LogEntry {
    /// The first value of query parameter `name`, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        let query = self.query.as_deref()?;
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    /// Whether the query has parameter `name` (with any value).
    pub fn has_query_param(&self, name: &str) -> bool {
        self.query_param(name).is_some()
    }

    /// Whether a header of this name (case-insensitive) was present.
    pub fn has_header(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        self.header_names.contains(&name)
    }

    /// Time from arrival to completion, if completed.
    pub fn duration(&self) -> Option<Duration> {
        self.completed
            .map(|c| c.saturating_duration_since(self.arrived))
    }

    /// One line: `#3 +1.204s GET /runs/j1?waitSeconds=5 -> 200 (in flight 1)`.
    pub fn summary(&self) -> String {
        let query = self
            .query
            .as_deref()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        let status = match (self.status, self.disposition) {
            (Some(s), _) => s.to_string(),
            (None, Disposition::Reset) => "reset".to_owned(),
            (None, Disposition::Hung) => "hang".to_owned(),
            (None, Disposition::InFlight) => "in flight".to_owned(),
            (None, _) => "abandoned".to_owned(),
        };
        format!(
            "#{} +{:.3}s {} {}{} -> {} (in flight {})",
            self.seq,
            self.arrived_offset.as_secs_f64(),
            self.method,
            self.path,
            query,
            status,
            self.in_flight_at_arrival
        )
    }
}

/// Questions a test asks of a log snapshot; implemented for `[LogEntry]`, so
/// it works on `handle.log()` directly.
///
/// ```
/// use polite_lab::{Lab, LabConfig, LogStats};
/// let lab = Lab::start(LabConfig::default()).unwrap();
/// let log = lab.log();
/// assert_eq!(log.count_status(429), 0);
/// assert_eq!(log.peak_in_flight(), 0);
/// ```
pub trait LogStats {
    /// How many requests were answered with `status`.
    fn count_status(&self, status: u16) -> usize;
    /// How many 429s were sent.
    fn count_429(&self) -> usize {
        self.count_status(429)
    }
    /// The statuses in arrival order (`None`: reset, hang, in flight, abandoned).
    fn statuses(&self) -> Vec<Option<u16>>;
    /// The peak number of requests in flight at once.
    fn peak_in_flight(&self) -> usize;
    /// The requests to exactly `path`.
    fn to_path(&self, path: &str) -> Vec<&LogEntry>;
    /// The requests whose path starts with `prefix`.
    fn under(&self, prefix: &str) -> Vec<&LogEntry>;
    /// The requests that read or wait for job `id` (`/runs/{id}`).
    fn for_job(&self, id: &str) -> Vec<&LogEntry> {
        self.to_path(&format!("/runs/{id}"))
    }
    /// Arrival offsets from the lab's start, in arrival order.
    fn arrival_offsets(&self) -> Vec<Duration>;
    /// The most arrivals inside any window of length `window` (a sliding count):
    /// what a server with a sliding quota of that window would have seen.
    fn max_arrivals_within(&self, window: Duration) -> usize;
    /// A readable multi-line rendering, one [`LogEntry::summary`] per line.
    fn render(&self) -> String;
}

impl LogStats for [LogEntry] {
    fn count_status(&self, status: u16) -> usize {
        self.iter().filter(|e| e.status == Some(status)).count()
    }

    fn statuses(&self) -> Vec<Option<u16>> {
        self.iter().map(|e| e.status).collect()
    }

    fn peak_in_flight(&self) -> usize {
        self.iter()
            .map(|e| e.in_flight_at_arrival)
            .max()
            .unwrap_or(0)
    }

    fn to_path(&self, path: &str) -> Vec<&LogEntry> {
        self.iter().filter(|e| e.path == path).collect()
    }

    fn under(&self, prefix: &str) -> Vec<&LogEntry> {
        self.iter().filter(|e| e.path.starts_with(prefix)).collect()
    }

    fn arrival_offsets(&self) -> Vec<Duration> {
        self.iter().map(|e| e.arrived_offset).collect()
    }

    fn max_arrivals_within(&self, window: Duration) -> usize {
        let mut arrivals = self.arrival_offsets();
        arrivals.sort();
        let mut best = 0;
        let mut start = 0;
        for end in 0..arrivals.len() {
            while start <= end && arrivals[end].saturating_sub(arrivals[start]) >= window {
                start += 1;
            }
            best = best.max(end + 1 - start);
        }
        best
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for e in self {
            let _ = writeln!(out, "  {}", e.summary());
        }
        if out.is_empty() {
            out.push_str("  (no requests)\n");
        }
        out
    }
}

/// The shared log; in-flight accounting lives under the same lock so that
/// `in_flight_at_arrival` is exact.
#[derive(Debug)]
pub(crate) struct Log {
    started: Instant,
    inner: Mutex<LogInner>,
}

#[derive(Debug)]
struct LogInner {
    entries: Vec<LogEntry>,
    /// Bumped by `clear`: guards of older requests must not touch new entries.
    epoch: u64,
    next_seq: u64,
    in_flight: usize,
}

impl Log {
    pub(crate) fn new(started: Instant) -> Self {
        Log {
            started,
            inner: Mutex::new(LogInner {
                entries: Vec::new(),
                epoch: 0,
                next_seq: 0,
                in_flight: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner> {
        // A panic elsewhere must not make the log unreadable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn snapshot(&self) -> Vec<LogEntry> {
        self.lock().entries.clone()
    }

    pub(crate) fn clear(&self) {
        let mut inner = self.lock();
        inner.entries.clear();
        inner.epoch += 1;
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// Records an arrival and returns the guard that completes the entry.
    pub(crate) fn arrive(
        self: &Arc<Self>,
        method: String,
        path: String,
        query: Option<String>,
        header_names: Vec<String>,
    ) -> EntryGuard {
        let arrived = Instant::now();
        let mut inner = self.lock();
        inner.in_flight += 1;
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let entry = LogEntry {
            seq,
            method,
            path,
            query,
            header_names,
            arrived,
            arrived_offset: arrived.saturating_duration_since(self.started),
            completed: None,
            completed_offset: None,
            status: None,
            disposition: Disposition::InFlight,
            in_flight_at_arrival: inner.in_flight,
        };
        inner.entries.push(entry);
        EntryGuard {
            log: Arc::clone(self),
            epoch: inner.epoch,
            index: inner.entries.len() - 1,
            arrived,
            finished: false,
        }
    }
}

/// Completes a log entry: explicitly with [`EntryGuard::finish`] /
/// [`EntryGuard::hang`], or on drop (reset or abandoned).
#[derive(Debug)]
pub(crate) struct EntryGuard {
    log: Arc<Log>,
    epoch: u64,
    index: usize,
    arrived: Instant,
    finished: bool,
}

impl EntryGuard {
    pub(crate) fn arrived(&self) -> Instant {
        self.arrived
    }

    fn complete(&mut self, status: Option<u16>, disposition: Disposition, done: bool) {
        let now = Instant::now();
        let mut inner = self.log.lock();
        if done && !self.finished {
            inner.in_flight = inner.in_flight.saturating_sub(1);
        }
        let same_epoch = inner.epoch == self.epoch;
        if let Some(e) = inner.entries.get_mut(self.index).filter(|_| same_epoch) {
            e.status = status;
            e.disposition = disposition;
            if done {
                e.completed = Some(now);
                e.completed_offset = Some(now.saturating_duration_since(self.log.started));
            }
        }
        if done {
            self.finished = true;
        }
    }

    /// The response head is handed over with `status`.
    pub(crate) fn finish(mut self, status: u16) {
        self.complete(Some(status), Disposition::Answered, true);
    }

    /// The request hangs on purpose: it stays in flight, marked [`Disposition::Hung`].
    pub(crate) fn hang(&mut self) {
        self.complete(None, Disposition::Hung, false);
    }

    /// The connection is about to be reset on purpose.
    pub(crate) fn reset(mut self) {
        self.complete(None, Disposition::Reset, true);
    }
}

impl Drop for EntryGuard {
    fn drop(&mut self) {
        if !self.finished {
            // A hung request dropped at shutdown stays `Hung`; others were abandoned.
            let disposition = {
                let inner = self.log.lock();
                match inner.entries.get(self.index) {
                    Some(e) if inner.epoch == self.epoch && e.disposition == Disposition::Hung => {
                        Disposition::Hung
                    }
                    _ => Disposition::Abandoned,
                }
            };
            self.complete(None, disposition, true);
        }
    }
}
