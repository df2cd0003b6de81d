//! Cancellation through `tokio_util::sync::CancellationToken`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use polite_client::Cancel;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// A `CancellationToken` as a polite [`Cancel`] signal.
#[derive(Debug)]
pub struct TokioCancel {
    token: CancellationToken,
    wait: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
}

impl TokioCancel {
    /// Watches `token`.
    #[must_use]
    pub fn new(token: CancellationToken) -> TokioCancel {
        TokioCancel { token, wait: None }
    }
}

impl Cancel for TokioCancel {
    fn poll_cancelled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.token.is_cancelled() {
            return Poll::Ready(());
        }
        let token = &self.token;
        self.wait
            .get_or_insert_with(|| Box::pin(token.clone().cancelled_owned()))
            .as_mut()
            .poll(cx)
    }
    fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }
}
