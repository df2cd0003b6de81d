//! [`TokioClock`]: tokio's clock and timer (so `start_paused` tests run an
//! hour of backoff instantly).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use polite_client::Clock;

/// tokio time as a polite [`Clock`]: `now` is `tokio::time::Instant::now()`,
/// sleeping is one reusable `tokio::time::Sleep`.
#[derive(Debug, Default)]
pub struct TokioClock {
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl TokioClock {
    /// A clock with no timer armed yet.
    #[must_use]
    pub fn new() -> TokioClock {
        TokioClock::default()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    /// The system clock moved by how far tokio's clock is ahead of (or
    /// behind) the monotonic one: the system clock itself in real time; in
    /// a paused-time test, the system clock at the pause plus the virtual
    /// time advanced since, so an HTTP-date `Retry-After` is measured in
    /// the test's time.
    fn wall(&self) -> SystemTime {
        let virtual_now = tokio::time::Instant::now().into_std();
        let real_now = Instant::now();
        let wall = SystemTime::now();
        let moved = match virtual_now.checked_duration_since(real_now) {
            Some(ahead) => wall.checked_add(ahead),
            None => wall.checked_sub(real_now.saturating_duration_since(virtual_now)),
        };
        moved.unwrap_or(wall)
    }

    fn poll_sleep(&mut self, cx: &mut Context<'_>, until: Instant) -> Poll<()> {
        let at = tokio::time::Instant::from_std(until);
        let sleep = match &mut self.sleep {
            Some(s) => {
                if s.deadline() != at {
                    s.as_mut().reset(at);
                }
                s
            }
            None => self.sleep.insert(Box::pin(tokio::time::sleep_until(at))),
        };
        sleep.as_mut().poll(cx)
    }
}
