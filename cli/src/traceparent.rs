//! The W3C trace context a command runs in (`--traceparent`, else the
//! `TRACEPARENT` environment variable): with one, every `--log-format json`
//! record carries `trace_id`, the command's own `span_id` (a child of the
//! given parent) and `parent_span_id`, so the log joins the caller's trace.
//!
//! An invalid value is a usage error (exit 2) that names the expected form
//! and never echoes the value (a mistyped flag may hold anything).

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use crate::request::Usage;

/// The command's place in a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TraceContext {
    /// 16 bytes, not all zero.
    pub(crate) trace_id: u128,
    /// The caller's span: 8 bytes, not all zero.
    pub(crate) parent_id: u64,
    /// This command's span: 8 random bytes, not all zero.
    pub(crate) span_id: u64,
}

static CONTEXT: OnceLock<Option<TraceContext>> = OnceLock::new();

/// Reads the flag (or, without it, `TRACEPARENT`) once for the process.
///
/// # Errors
///
/// [`Usage`] for a value that is no W3C traceparent.
pub(crate) fn init(flag: Option<&str>) -> Result<(), Usage> {
    let (value, source) = match flag {
        Some(v) => (Some(v.to_owned()), "--traceparent"),
        None => (
            std::env::var("TRACEPARENT").ok().filter(|v| !v.is_empty()),
            "TRACEPARENT",
        ),
    };
    let context = match value {
        None => None,
        Some(v) => Some(parse(&v, new_span_id()).ok_or_else(|| {
            Usage(format!(
                "{source}: not a W3C traceparent (expected 00-<32 hex digits>-<16 hex digits>-<2 hex digits>, lowercase, ids not all zero; the value is not shown)"
            ))
        })?),
    };
    let _ = CONTEXT.set(context);
    Ok(())
}

/// The process's trace context, if one was given.
pub(crate) fn current() -> Option<TraceContext> {
    CONTEXT.get().copied().flatten()
}

/// A fresh span id (the standard library's random hasher keys; not zero).
fn new_span_id() -> u64 {
    let id = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    if id == 0 { 1 } else { id }
}

/// Lowercase hex digits only, exactly `n` of them.
fn hex(s: &str, n: usize) -> Option<&str> {
    (s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(s)
}

/// A traceparent by the W3C Trace Context rules: `version-trace-parent-flags`;
/// version `ff` is invalid; version `00` has exactly those four fields; a
/// later version may add fields after a `-`; trace and parent ids are not
/// all zero.
fn parse(value: &str, span_id: u64) -> Option<TraceContext> {
    let value = value.trim();
    let mut parts = value.splitn(5, '-');
    let version = hex(parts.next()?, 2)?;
    let trace = hex(parts.next()?, 32)?;
    let parent = hex(parts.next()?, 16)?;
    let flags = parts.next()?;
    let rest = parts.next();
    if version == "ff" || hex(flags, 2).is_none() {
        return None;
    }
    if version == "00" && rest.is_some() {
        return None;
    }
    let trace_id = u128::from_str_radix(trace, 16).ok().filter(|t| *t != 0)?;
    let parent_id = u64::from_str_radix(parent, 16).ok().filter(|p| *p != 0)?;
    Some(TraceContext {
        trace_id,
        parent_id,
        span_id,
    })
}

/// The ids as a JSON record carries them.
pub(crate) fn fields(c: &TraceContext) -> [(&'static str, String); 3] {
    [
        ("trace_id", format!("{:032x}", c.trace_id)),
        ("span_id", format!("{:016x}", c.span_id)),
        ("parent_span_id", format!("{:016x}", c.parent_id)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_w3c_traceparent_is_read() {
        let c = parse(GOOD, 7).unwrap();
        assert_eq!(c.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!((c.parent_id, c.span_id), (0x00f067aa0ba902b7, 7));
        let f = fields(&c);
        assert_eq!(f[0].1, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(f[1].1, "0000000000000007");
        assert_eq!(f[2].1, "00f067aa0ba902b7");
        // A later version may carry more fields.
        assert!(parse(&format!("01{}-more", &GOOD[2..]), 7).is_some());
        assert!(parse(&format!(" {GOOD}\n"), 7).is_some());
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            "",
            "00",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse(bad, 7), None, "{bad}");
        }
    }

    #[test]
    fn span_ids_are_never_zero_and_differ() {
        let (a, b) = (new_span_id(), new_span_id());
        assert!(a != 0 && b != 0);
        assert_ne!(a, b);
    }
}
