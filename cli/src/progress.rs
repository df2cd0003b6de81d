//! `batch`'s live progress line on stderr, on a terminal only (never when
//! stderr is piped, never with `--log-format json`):
//!
//! ```text
//! ⠒ 16/30 done · 13.5/s · 6 × 429 · pace 12.0/s · ETA 1s
//! ```
//!
//! `done/total` when the total is known — stdin redirected from a file,
//! whose requests are counted on the side without moving the batch's read
//! position — else `done`; the requests that ended per second; the 429s
//! so far; the rate the pace settled on (`pace unlimited` while nothing
//! limits it; with `--redis`, `fleet pace 20.0/s on Redis` while Redis
//! answers, and this process's share, `pace 10.0/s alone: ...`, while it
//! does not); the ETA once there is a total.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use polite_core::RetryClass;
use polite_core::record::AttemptRecord;

/// Says the current pace ("pace 12.0/s", "fleet pace 20.0/s on Redis").
type PaceFn = Box<dyn Fn() -> String + Send + Sync>;

/// The progress line, shared with the client's observer.
#[derive(Clone)]
pub(crate) struct Progress(Arc<Inner>);

struct Inner {
    bar: ProgressBar,
    throttled: AtomicU64,
    pace: OnceLock<PaceFn>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("done", &self.0.bar.position())
            .field("total", &self.0.bar.length())
            .finish_non_exhaustive()
    }
}

/// Without a total: what is done, and how fast.
const OPEN: &str = "{spinner} {pos} done · {msg} · {elapsed}";
/// With one: done/total and the ETA.
const COUNTED: &str = "{spinner} {pos}/{len} done · {msg} · ETA {eta}";

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner())
}

impl Progress {
    /// The line, when `show` (stderr is a terminal and the log is text);
    /// `None` otherwise. Counts the requests of stdin on the side when it
    /// is a file.
    pub(crate) fn start(show: bool) -> Option<Progress> {
        if !show {
            return None;
        }
        let bar = ProgressBar::no_length();
        bar.set_style(style(OPEN));
        bar.enable_steady_tick(Duration::from_millis(200));
        let progress = Progress(Arc::new(Inner {
            bar,
            throttled: AtomicU64::new(0),
            pace: OnceLock::new(),
        }));
        progress.update();
        let counting = progress.clone();
        // Detached: a huge file is counted while the batch runs; the
        // thread ends with the count or with the process.
        let _ = std::thread::Builder::new()
            .name("polite-count".into())
            .spawn(move || {
                if let Some(total) = stdin_requests() {
                    counting.set_total(total);
                }
            });
        Some(progress)
    }

    /// Where the current pace comes from (the client, once built).
    pub(crate) fn pace_from(&self, pace: impl Fn() -> String + Send + Sync + 'static) {
        let _ = self.0.pace.set(Box::new(pace));
        self.update();
    }

    /// Counts one attempt record: a request that ended, a 429.
    pub(crate) fn record(&self, r: &AttemptRecord) {
        if r.class == Some(RetryClass::RateLimited) {
            self.0.throttled.fetch_add(1, Ordering::Relaxed);
        }
        if r.outcome.is_some() {
            self.0.bar.inc(1);
        }
        self.update();
    }

    /// Runs `f` (which writes to stderr) with the line out of the way.
    pub(crate) fn suspend<T>(&self, f: impl FnOnce() -> T) -> T {
        self.0.bar.suspend(f)
    }

    /// Clears the line for good.
    pub(crate) fn finish(&self) {
        self.0.bar.finish_and_clear();
    }

    fn set_total(&self, total: u64) {
        let bar = &self.0.bar;
        if bar.is_finished() {
            return;
        }
        bar.set_length(total);
        bar.set_style(style(COUNTED));
    }

    fn update(&self) {
        let pace = self.0.pace.get().map(|f| f());
        let bar = &self.0.bar;
        bar.set_message(message(
            bar.per_sec(),
            self.0.throttled.load(Ordering::Relaxed),
            pace.as_deref().unwrap_or("pace unlimited"),
        ));
    }
}

/// The line's middle part: requests ended per second, 429s so far and the
/// pace (see [`crate::tally::Tally::pace_now`]).
fn message(done_per_sec: f64, throttled: u64, pace: &str) -> String {
    format!(
        "{} · {throttled} × 429 · {pace}",
        crate::tally::per_sec(done_per_sec)
    )
}

/// Whether a line of the batch's input is a request (what `batch` skips:
/// blank lines and `#` comments).
pub(crate) fn is_request_line(line: &[u8]) -> bool {
    let line = line.trim_ascii();
    !line.is_empty() && !line.starts_with(b"#")
}

/// The requests in stdin when it is a regular file, counted with
/// positional reads of a duplicate of its descriptor, so that the batch's
/// own reading position does not move. `None` for a pipe or a terminal
/// (and off unix).
fn stdin_requests() -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        use std::os::unix::fs::FileExt;
        let file = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned().ok()?);
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        let mut buf = vec![0u8; 64 * 1024];
        let (mut at, mut line, mut count) = (0u64, Vec::new(), 0u64);
        loop {
            let n = file.read_at(&mut buf, at).ok()?;
            if n == 0 {
                break;
            }
            at += n as u64;
            for part in buf[..n].split_inclusive(|b| *b == b'\n') {
                line.extend_from_slice(part);
                if part.ends_with(b"\n") {
                    count += u64::from(is_request_line(&line));
                    line.clear();
                }
            }
        }
        count += u64::from(is_request_line(&line));
        Some(count)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_shows_429s_and_the_pace() {
        assert_eq!(
            message(13.4899, 3, "pace 4.3/s"),
            "13.5/s · 3 × 429 · pace 4.3/s"
        );
    }

    #[test]
    fn blank_lines_and_comments_are_no_requests() {
        assert!(is_request_line(b"http://a/1\n"));
        assert!(is_request_line(b"  http://a/1"));
        assert!(!is_request_line(b"   \n"));
        assert!(!is_request_line(b" # later\n"));
    }
}
