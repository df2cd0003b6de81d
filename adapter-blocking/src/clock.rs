//! [`ThreadClock`]: the monotonic clock, with sleeps that park the thread.

use std::task::{Context, Poll};
use std::time::Instant;

use polite_client::Clock;

use crate::block_on::wake_at;

/// `std::time::Instant` as a polite [`Clock`], for threads.
///
/// A pending sleep records the instant it wants to be woken at; the
/// enclosing [`block_on`](crate::block_on) parks the thread with
/// `park_timeout` until then. A cancel or an answer wakes the thread at
/// once, so nothing waits out a sleep that no longer matters. Polled under
/// another executor, the sleep is woken by a process-wide timer thread
/// instead (see [`block_on`](crate::block_on)).
///
/// ```
/// use polite_blocking::ThreadClock;
/// use polite_client::Clock;
/// use std::future::poll_fn;
/// use std::time::Duration;
///
/// let mut clock = ThreadClock::new();
/// let until = clock.now() + Duration::from_millis(10);
/// polite_blocking::block_on(poll_fn(|cx| clock.poll_sleep(cx, until)));
/// assert!(clock.now() >= until);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadClock;

impl ThreadClock {
    /// The clock (it holds no state: every sleep is armed when polled).
    ///
    /// ```
    /// use polite_client::Clock;
    /// let clock = polite_blocking::ThreadClock::new();
    /// assert!(clock.now() <= std::time::Instant::now());
    /// ```
    #[must_use]
    pub fn new() -> ThreadClock {
        ThreadClock
    }
}

impl Clock for ThreadClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn poll_sleep(&mut self, cx: &mut Context<'_>, until: Instant) -> Poll<()> {
        if Instant::now() >= until {
            Poll::Ready(())
        } else {
            wake_at(until, cx);
            Poll::Pending
        }
    }
}
