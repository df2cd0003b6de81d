//! Cancellation through `tokio_util::sync::CancellationToken`, and a helper
//! that cancels on Ctrl-C.

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

/// Spawns a task that cancels `token` on the first Ctrl-C (SIGINT), and
/// returns the token for convenience. On Unix the handler is installed
/// before this returns, so a Ctrl-C right after the call is not missed.
/// Must be called inside a tokio runtime.
///
/// ```no_run
/// # async fn f() {
/// let token = polite_tokio::cancel_on_ctrl_c(tokio_util::sync::CancellationToken::new());
/// // pass token.clone() to Client::send_cancellable, ...
/// # }
/// ```
pub fn cancel_on_ctrl_c(token: CancellationToken) -> CancellationToken {
    let t = token.clone();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut sigint) = signal(SignalKind::interrupt()) {
            tokio::spawn(async move {
                if sigint.recv().await.is_some() {
                    t.cancel();
                }
            });
            return token;
        }
    }
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            t.cancel();
        }
    });
    token
}
