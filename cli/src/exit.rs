//! Exit codes, one place: documented in `--help` and the README.

use std::process::ExitCode;

use polite_client::Error;
use polite_core::Outcome;

/// Success.
pub(crate) const OK: u8 = 0;
/// A final non-success answer (404, a job that ended `failed`, retries
/// exhausted on 5xx or transport errors, a non-replayable failure, a send
/// that cannot succeed: a body over the limit, too many redirects...).
pub(crate) const FAILED: u8 = 1;
/// A usage error (bad flag, malformed URL, unreadable body file, bad duration).
pub(crate) const USAGE: u8 = 2;
/// Rate limited: the 429 budget was spent, or the server asked for longer
/// than the automatic wait cap.
pub(crate) const RATE_LIMITED: u8 = 11;
/// Timed out: `--timeout` reached, or the next permitted send (by the
/// server's time or the client's own pace) would be after it.
pub(crate) const TIMED_OUT: u8 = 124;
/// Cancelled by Ctrl-C.
pub(crate) const CANCELLED: u8 = 130;

/// The help text's table of exit codes.
pub(crate) const HELP: &str = "\
Exit codes:
  0    success
  1    a final non-success answer (e.g. 404, or a job that ended failed,
       retries exhausted), or stdout could not be written
  2    usage error (bad flag, malformed URL, unreadable body file, bad duration)
  11   rate limited (the 429 budget was spent, or the server asked for longer
       than the automatic wait cap)
  124  timed out (--timeout reached, or the next permitted send would be after
       it: by the server's time, or by the client's own pace, and then a
       line on stderr names the limit and the flag to change)
  130  cancelled by Ctrl-C
A batch exits with the most telling code of its items: 130, 124, 11, 1, 2.";

/// The exit code for an outcome.
pub(crate) fn for_outcome(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Succeeded { .. } | Outcome::Terminal { .. } => OK,
        Outcome::RateLimited { .. } => RATE_LIMITED,
        Outcome::TimedOut { .. } | Outcome::Starved { .. } => TIMED_OUT,
        Outcome::Cancelled => CANCELLED,
        Outcome::BatchDone { failed: 0, .. } => OK,
        _ => FAILED,
    }
}

/// The exit code for a call's error.
pub(crate) fn for_error(e: &Error) -> u8 {
    match e.outcome() {
        Some(outcome) => for_outcome(outcome),
        None => USAGE, // a policy or configuration error
    }
}

/// The most telling code among many (a batch): cancel, then timeout, then
/// rate limit, then failure.
pub(crate) fn worst(codes: impl IntoIterator<Item = u8>) -> u8 {
    let rank = |c: u8| match c {
        CANCELLED => 5,
        TIMED_OUT => 4,
        RATE_LIMITED => 3,
        FAILED => 2,
        USAGE => 1,
        _ => 0,
    };
    codes.into_iter().max_by_key(|c| rank(*c)).unwrap_or(OK)
}

pub(crate) fn code(c: u8) -> ExitCode {
    ExitCode::from(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_prefers_cancel_then_timeout_then_rate_limit() {
        assert_eq!(worst([OK, FAILED, RATE_LIMITED]), RATE_LIMITED);
        assert_eq!(worst([TIMED_OUT, RATE_LIMITED]), TIMED_OUT);
        assert_eq!(worst([CANCELLED, TIMED_OUT]), CANCELLED);
        assert_eq!(worst([OK, OK]), OK);
        assert_eq!(worst([]), OK);
    }
}
