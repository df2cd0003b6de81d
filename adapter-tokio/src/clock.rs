//! [`TokioClock`]: tokio's clock and timer (so `start_paused` tests run an
//! hour of backoff instantly).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

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
