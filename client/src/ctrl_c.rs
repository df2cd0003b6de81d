//! [`cancel_on_ctrl_c`]: one Ctrl-C helper for every runtime (feature
//! `ctrl-c`).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::runtime::Runtime;

/// Why [`cancel_on_ctrl_c`] could not install its handler.
///
/// ```
/// let e = polite_client::CtrlCError::AlreadyInstalled;
/// assert_eq!(e.to_string(), "a Ctrl-C handler is already installed in this process");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CtrlCError {
    /// A Ctrl-C handler is installed already: by an earlier
    /// [`cancel_on_ctrl_c`], or by other code through the `ctrlc` crate.
    /// A process has one; clone the token you got the first time instead.
    #[error("a Ctrl-C handler is already installed in this process")]
    AlreadyInstalled,
    /// The operating system refused.
    #[error("cannot install a Ctrl-C handler")]
    System(#[source] ctrlc::Error),
}

static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Installs a process-wide Ctrl-C handler (SIGINT on Unix; Ctrl-C and
/// Ctrl-Break on Windows) that cancels `token`, the runtime `R`'s cancel
/// token, and returns the token for convenience: pass it to the
/// `*_cancellable` calls. A call waiting on it returns `Cancelled` at once.
/// Each adapter re-exports this as its own `cancel_on_ctrl_c` for its token.
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
/// * The handler runs on a thread of its own (the `ctrlc` crate's), so it
///   needs no runtime and works the same under tokio, smol and threads.
///
/// # Errors
///
/// [`CtrlCError::AlreadyInstalled`] for a second installation,
/// [`CtrlCError::System`] when the operating system refuses.
pub fn cancel_on_ctrl_c<R: Runtime>(token: R::Token) -> Result<R::Token, CtrlCError> {
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
        R::cancel(&for_handler);
    });
    match installed {
        Ok(()) => Ok(token),
        Err(ctrlc::Error::MultipleHandlers) => Err(CtrlCError::AlreadyInstalled),
        Err(e) => {
            // Nothing was installed: a later call may try again.
            INSTALLED.store(false, Ordering::SeqCst);
            Err(CtrlCError::System(e))
        }
    }
}
