//! [`AsyncIo`]: polite's [`Runtime`] on async-io (smol, async-std), and
//! [`Client`], its client.

use std::future::Future;

use polite_client::{CancelToken, Runtime};

use crate::clock::AsyncIoClock;

/// The async-io reactor as a polite [`Runtime`]: calls are futures
/// (`.await` them on smol, async-std, or any executor whose reactor is
/// async-io's) on async-io time ([`AsyncIoClock`]), cancelled through a
/// [`CancelToken`] (its `cancel` wakes a pending call at once, from any
/// thread or task).
///
/// ```
/// use polite_client::{Cancel, Runtime};
/// let token = polite_async_io::CancelToken::new();
/// polite_async_io::AsyncIo::cancel(&token);
/// assert!(token.is_cancelled());
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct AsyncIo;

impl Runtime for AsyncIo {
    type Clock = AsyncIoClock;
    type Token = CancelToken;
    type Cancel = CancelToken;
    type Call<F: Future> = F;
    #[cfg(feature = "http1")]
    type Ready = crate::Http1Transport;
    #[cfg(not(feature = "http1"))]
    type Ready = ();

    fn clock() -> AsyncIoClock {
        AsyncIoClock::new()
    }
    fn watch(token: &CancelToken) -> CancelToken {
        token.clone()
    }
    fn cancel(token: &CancelToken) {
        token.cancel();
    }
    fn call<F: Future>(call: F) -> F {
        call
    }
    fn settle<F: Future>(call: F) -> impl Future<Output = F::Output> {
        call
    }
}

/// polite on async-io: `send`, `wait` and `batch` (and their
/// `*_cancellable` forms taking `&CancelToken`) return futures to
/// `.await` on smol, async-std or any async-io executor. Every call runs
/// the core machines through the one drive loop over the transport `T`
/// ([`Http1Transport`](crate::Http1Transport) by default). Cheap to clone;
/// clones share the transport, the configuration and the pace. See
/// [`polite_client::Client`] for every method.
///
/// ```
/// use bytes::Bytes;
/// use polite_lab::{Lab, LabConfig};
///
/// let lab = Lab::start(LabConfig::default()).unwrap();
/// let client = polite_async_io::Client::new();
/// let req = http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap();
/// let resp = smol::block_on(client.send(req)).unwrap();
/// assert_eq!(resp.status(), 200);
/// ```
#[cfg(feature = "http1")]
pub type Client<T = crate::Http1Transport> = polite_client::Client<AsyncIo, T>;
/// polite on async-io, over the transport `T` (see the `http1` feature for
/// a ready one).
#[cfg(not(feature = "http1"))]
pub type Client<T> = polite_client::Client<AsyncIo, T>;

/// Cancels `token` on the first Ctrl-C (SIGINT; Ctrl-C and Ctrl-Break on
/// Windows) and returns it; a second Ctrl-C exits with status 130. Once
/// per process; needs no executor. See [`polite_client::cancel_on_ctrl_c`].
///
/// ```no_run
/// use polite_async_io::{CancelToken, cancel_on_ctrl_c};
/// let token = cancel_on_ctrl_c(CancelToken::new())?;
/// // smol::block_on(client.send_cancellable(request, &token)) ...
/// # Ok::<(), polite_async_io::CtrlCError>(())
/// ```
///
/// # Errors
///
/// [`CtrlCError::AlreadyInstalled`](polite_client::CtrlCError::AlreadyInstalled)
/// for a second installation,
/// [`CtrlCError::System`](polite_client::CtrlCError::System) when the
/// operating system refuses.
#[cfg(feature = "ctrl-c")]
pub fn cancel_on_ctrl_c(token: CancelToken) -> Result<CancelToken, polite_client::CtrlCError> {
    polite_client::cancel_on_ctrl_c::<AsyncIo>(token)
}
