//! Cancelling a [`CancelToken`] on Ctrl-C.

use std::sync::atomic::{AtomicBool, Ordering};

use polite_client::CancelToken;

/// Why [`cancel_on_ctrl_c`] could not install its handler.
///
/// ```
/// let e = polite_blocking::CtrlCError::AlreadyInstalled;
/// assert_eq!(e.to_string(), "a Ctrl-C handler is already installed in this process");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum CtrlCError {
    /// A Ctrl-C handler is installed already: by an earlier
    /// [`cancel_on_ctrl_c`], or by other code through the `ctrlc` crate.
    /// A process has one; clone the token you got the first time instead.
    AlreadyInstalled,
    /// The operating system refused (the message says why).
    System(String),
}

impl std::fmt::Display for CtrlCError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CtrlCError::AlreadyInstalled => {
                f.write_str("a Ctrl-C handler is already installed in this process")
            }
            CtrlCError::System(why) => write!(f, "cannot install a Ctrl-C handler: {why}"),
        }
    }
}

impl std::error::Error for CtrlCError {}

static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Installs a process-wide Ctrl-C handler (SIGINT on Unix; Ctrl-C and
/// Ctrl-Break on Windows) that cancels `token`, and returns the token for
/// convenience: pass clones of it to
/// [`Client::send_cancellable`](crate::Client::send_cancellable) and the
/// other cancellable calls. A call waiting on it returns `Cancelled` at once.
///
/// * **Once per process.** A process has one Ctrl-C handler: a second call
///   (or a call after other code installed one through the `ctrlc` crate)
///   returns [`CtrlCError::AlreadyInstalled`] and changes nothing. It never
///   panics. Keep the first token and clone it.
/// * The handler replaces the default action of SIGINT: the first Ctrl-C
///   only cancels, so the program must return on its own (polite's calls do,
///   at once). A **second** Ctrl-C exits the process with status 130 (the
///   shell's code for "interrupted"), so a program stuck elsewhere can still
///   be stopped.
/// * The handler runs on a thread of its own (the `ctrlc` crate's), where
///   cancelling a token is safe.
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
/// [`CtrlCError::AlreadyInstalled`] for a second installation,
/// [`CtrlCError::System`] when the operating system refuses.
pub fn cancel_on_ctrl_c(token: CancelToken) -> Result<CancelToken, CtrlCError> {
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Err(CtrlCError::AlreadyInstalled);
    }
    let for_handler = token.clone();
    let mut seen = false;
    let installed = ctrlc::set_handler(move || {
        if seen {
            std::process::exit(130);
        }
        seen = true;
        for_handler.cancel();
    });
    match installed {
        Ok(()) => Ok(token),
        Err(ctrlc::Error::MultipleHandlers) => Err(CtrlCError::AlreadyInstalled),
        Err(e) => {
            // Nothing was installed: a later call may try again.
            INSTALLED.store(false, Ordering::SeqCst);
            Err(CtrlCError::System(e.to_string()))
        }
    }
}
