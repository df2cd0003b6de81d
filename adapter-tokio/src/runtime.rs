//! [`Tokio`]: polite's [`Runtime`] on tokio, and [`Client`], its client.

use std::future::Future;

use polite_client::Runtime;
use tokio_util::sync::CancellationToken;

use crate::cancel::TokioCancel;
use crate::clock::TokioClock;

/// tokio as a polite [`Runtime`]: calls are futures (`.await` them) on
/// tokio time ([`TokioClock`], so `start_paused` tests run an hour of
/// backoff at once), cancelled through a `CancellationToken`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use polite_client::Runtime;
/// let token = tokio_util::sync::CancellationToken::new();
/// polite_tokio::Tokio::cancel(&token);
/// assert!(token.is_cancelled());
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Tokio;

impl Runtime for Tokio {
    type Clock = TokioClock;
    type Token = CancellationToken;
    type Cancel = TokioCancel;
    type Call<F: Future> = F;
    #[cfg(feature = "reqwest")]
    type Ready = crate::ReqwestTransport;
    #[cfg(not(feature = "reqwest"))]
    type Ready = ();

    fn clock() -> TokioClock {
        TokioClock::new()
    }
    fn watch(token: &CancellationToken) -> TokioCancel {
        TokioCancel::new(token.clone())
    }
    fn cancel(token: &CancellationToken) {
        token.cancel();
    }
    fn call<F: Future>(call: F) -> F {
        call
    }
    fn settle<F: Future>(call: F) -> impl Future<Output = F::Output> {
        call
    }
}

/// polite on tokio: `send`, `wait` and `batch` (and their `*_cancellable`
/// forms taking `&CancellationToken`) return futures to `.await`. Every
/// call runs the core machines through the one drive loop, on tokio time,
/// over the transport `T` ([`ReqwestTransport`](crate::ReqwestTransport)
/// by default). Cheap to clone; clones share the transport, the
/// configuration and the pace. See [`polite_client::Client`] for every
/// method.
///
/// ```
/// use bytes::Bytes;
/// use polite_lab::{Lab, LabConfig, Step};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), polite_tokio::Error> {
/// let lab = Lab::start(LabConfig::default().script("/items/1", vec![Step::without_retry_after(503), Step::Normal])).unwrap();
/// let client = polite_tokio::Client::new();
/// let req = http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap();
/// assert_eq!(client.send(req).await?.status(), 200);
/// # Ok(()) }
/// ```
#[cfg(feature = "reqwest")]
pub type Client<T = crate::ReqwestTransport> = polite_client::Client<Tokio, T>;
/// polite on tokio, over the transport `T` (see the `reqwest` feature for
/// a ready one).
#[cfg(not(feature = "reqwest"))]
pub type Client<T> = polite_client::Client<Tokio, T>;

/// Cancels `token` on the first Ctrl-C (SIGINT) and returns it; a second
/// Ctrl-C exits with status 130. Once per process; needs no runtime. See
/// [`polite_client::cancel_on_ctrl_c`].
///
/// ```no_run
/// # async fn f() -> Result<(), polite_tokio::CtrlCError> {
/// let token = polite_tokio::cancel_on_ctrl_c(tokio_util::sync::CancellationToken::new())?;
/// // client.send_cancellable(request, &token).await ...
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`CtrlCError::AlreadyInstalled`](polite_client::CtrlCError::AlreadyInstalled) for a second installation,
/// [`CtrlCError::System`](polite_client::CtrlCError::System) when the operating system refuses.
#[cfg(feature = "ctrl-c")]
pub fn cancel_on_ctrl_c(
    token: CancellationToken,
) -> Result<CancellationToken, polite_client::CtrlCError> {
    polite_client::cancel_on_ctrl_c::<Tokio>(token)
}
