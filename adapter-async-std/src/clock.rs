//! [`AsyncIoClock`]: the monotonic clock and one reusable `async_io::Timer`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use async_io::Timer;
use polite_client::Clock;

/// async-io time as a polite [`Clock`]: `now` is `std::time::Instant::now()`,
/// sleeping is one `async_io::Timer`, re-armed with `set_at` only when the
/// instant to wake at changes.
///
/// It works on every executor whose reactor is async-io's: async-std, smol,
/// `async_io::block_on`, `futures_lite::future::block_on` (async-io then
/// drives its timers from its own fallback thread).
///
/// ```
/// use polite_async_io::AsyncIoClock;
/// use polite_async_io::Clock;
/// use std::time::Duration;
///
/// let mut clock = AsyncIoClock::new();
/// let until = clock.now() + Duration::from_millis(20);
/// smol::block_on(std::future::poll_fn(|cx| clock.poll_sleep(cx, until)));
/// assert!(clock.now() >= until);
/// ```
#[derive(Debug, Default)]
pub struct AsyncIoClock {
    /// The armed timer and the instant it is armed for.
    timer: Option<(Instant, Timer)>,
}

impl AsyncIoClock {
    /// A clock with no timer armed yet.
    ///
    /// ```
    /// use polite_client::Clock;
    /// let before = std::time::Instant::now();
    /// let clock = polite_async_io::AsyncIoClock::new();
    /// assert!(clock.now() >= before); // the monotonic clock, read as it is
    /// ```
    #[must_use]
    pub fn new() -> AsyncIoClock {
        AsyncIoClock::default()
    }
}

impl Clock for AsyncIoClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn poll_sleep(&mut self, cx: &mut Context<'_>, until: Instant) -> Poll<()> {
        if Instant::now() >= until {
            return Poll::Ready(());
        }
        let timer = match &mut self.timer {
            Some((armed, timer)) => {
                if *armed != until {
                    timer.set_at(until);
                    *armed = until;
                }
                timer
            }
            None => &mut self.timer.insert((until, Timer::at(until))).1,
        };
        Pin::new(timer).poll(cx).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_timer_follows_a_moving_instant() {
        let mut clock = AsyncIoClock::new();
        let t0 = clock.now();
        // Armed far away first, then moved closer: the closer instant wins.
        let far = t0 + Duration::from_secs(30);
        let near = t0 + Duration::from_millis(30);
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(clock.poll_sleep(&mut cx, far).is_pending());
        smol::block_on(std::future::poll_fn(|cx| clock.poll_sleep(cx, near)));
        let waited = clock.now() - t0;
        assert!(waited >= Duration::from_millis(30), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        // An instant in the past is ready at once, without the timer.
        assert!(clock.poll_sleep(&mut cx, t0).is_ready());
    }
}
