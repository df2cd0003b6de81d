//! [`Threads`]: polite's [`Runtime`] for synchronous programs, and
//! [`Client`], its client.

use std::future::{Future, ready};

use polite_client::{CancelToken, Runtime};

use crate::block_on::block_on;
use crate::clock::ThreadClock;

/// Plain threads as a polite [`Runtime`]: each call blocks the calling
/// thread ([`block_on`] with a [`ThreadClock`]) and returns its result;
/// a [`CancelToken`] cancelled from any thread ends it at once.
///
/// ```
/// use polite_client::{Cancel, Runtime};
/// let token = polite_blocking::CancelToken::new();
/// polite_blocking::Threads::cancel(&token);
/// assert!(token.is_cancelled());
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Threads;

impl Runtime for Threads {
    type Clock = ThreadClock;
    type Token = CancelToken;
    type Cancel = CancelToken;
    type Call<F: Future> = F::Output;
    #[cfg(feature = "ureq")]
    type Ready = crate::UreqTransport;
    #[cfg(not(feature = "ureq"))]
    type Ready = ();

    fn clock() -> ThreadClock {
        ThreadClock
    }
    fn watch(token: &CancelToken) -> CancelToken {
        token.clone()
    }
    fn cancel(token: &CancelToken) {
        token.cancel();
    }
    #[inline(always)]
    fn call<F: Future>(call: F) -> F::Output {
        block_on(call)
    }
    /// `send` and `wait` without a token: an attempt of the default
    /// [`UreqTransport`](crate::UreqTransport) to an IP address (or a host
    /// name looked up less than 30 s ago) runs on the calling thread (see
    /// there).
    #[inline(always)]
    fn call_sequential<F: Future>(call: F) -> F::Output {
        crate::block_on::block_on_sequential(call)
    }
    /// A batch's [`for_each_result`](polite_client::BatchStream::for_each_result):
    /// polled by a crew of up to `concurrency` threads that run its
    /// attempts of the default [`UreqTransport`](crate::UreqTransport)
    /// themselves (to IP addresses and host names looked up less than
    /// 30 s ago), the calling thread keeping its timers. An attempt still
    /// in flight when the batch ends (cancelled, or at its deadline) is
    /// interrupted: the call returns as `call`'s does.
    fn call_crew<F>(call: F, concurrency: usize) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        crate::crew::run(call, concurrency)
    }
    fn settle<F: Future>(output: F::Output) -> impl Future<Output = F::Output> {
        ready(output)
    }
}

/// polite for threads: `send`, `wait` and `batch` (and their
/// `*_cancellable` forms taking `&CancelToken`) block the calling thread
/// and return the result. Every call runs the core machines through the
/// one drive loop over the transport `T` ([`UreqTransport`](crate::UreqTransport)
/// by default).
///
/// `Clone + Send + Sync` and cheap to clone: clones share the transport,
/// the configuration and the pace (the throttle, the adaptive rate and the
/// cool-down after a 429), so threads sharing a client stay under one pace
/// together. The pace is in-process: separate processes do not coordinate.
/// See [`polite_client::Client`] for every method.
///
/// ```
/// use bytes::Bytes;
/// use polite_blocking::{Client, Config, Throttle};
/// use polite_lab::{Lab, LabConfig};
///
/// let lab = Lab::start(LabConfig::default()).unwrap();
/// let client = Client::with_config(Config { throttle: Some(Throttle::per_second(20)), ..Config::default() })?;
/// let threads: Vec<_> = (0..2)
///     .map(|i| {
///         let (client, url) = (client.clone(), lab.url(&format!("/items/{i}")));
///         std::thread::spawn(move || client.send(http::Request::get(url).body(Bytes::new()).unwrap()))
///     })
///     .collect();
/// for t in threads {
///     assert_eq!(t.join().unwrap()?.status(), 200);
/// }
/// # Ok::<(), polite_blocking::Error>(())
/// ```
#[cfg(feature = "ureq")]
pub type Client<T = crate::UreqTransport> = polite_client::Client<Threads, T>;
/// polite for threads, over the transport `T` (see the `ureq` feature for
/// a ready one).
#[cfg(not(feature = "ureq"))]
pub type Client<T> = polite_client::Client<Threads, T>;

/// Cancels `token` on the first Ctrl-C (SIGINT; Ctrl-C and Ctrl-Break on
/// Windows) and returns it; a second Ctrl-C exits with status 130. Once
/// per process. See [`polite_client::cancel_on_ctrl_c`].
///
/// ```no_run
/// use polite_blocking::{CancelToken, cancel_on_ctrl_c};
/// let token = cancel_on_ctrl_c(CancelToken::new())?;
/// // client.send_cancellable(request, &token) ...
/// // A second installation is refused, not a panic:
/// assert!(cancel_on_ctrl_c(CancelToken::new()).is_err());
/// # Ok::<(), polite_blocking::CtrlCError>(())
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
    polite_client::cancel_on_ctrl_c::<Threads>(token)
}
