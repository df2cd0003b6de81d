//! The checkers' own reading of `Retry-After` and `Date` (SPEC §2.1),
//! written apart from `crate::retry_after` on purpose: an oracle must not be
//! the code it checks. Plain code, straight from the SPEC's words:
//!
//! * surrounding whitespace is trimmed;
//! * delta-seconds are ASCII digits, any number of them (leading zeros are
//!   digits); a value too large for 64 bits saturates (valid and huge);
//! * otherwise an HTTP-date in one of the three forms, read by `httpdate`
//!   (a reference parser, not polite's), where a seconds field of `60` (a
//!   leap second) is second 59 plus one second;
//! * a date is measured against a valid `Date` header, else the wall clock;
//!   a date in the past is zero.
//!
//! Anything else is invalid (`None`), never zero.

use std::time::{Duration, Instant, SystemTime};

/// Surrounding whitespace, as HTTP field values are trimmed.
pub(crate) fn trim(mut v: &[u8]) -> &[u8] {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'\x0c');
    while let [first, rest @ ..] = v
        && ws(first)
    {
        v = rest;
    }
    while let [rest @ .., last] = v
        && ws(last)
    {
        v = rest;
    }
    v
}

/// delta-seconds by hand: every byte a digit, saturating at `u64::MAX`.
pub(crate) fn delta_seconds(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.saturating_mul(10).saturating_add(u64::from(b - b'0'));
    }
    Some(n)
}

/// An HTTP-date: split into words, find the `hh:mm:ss` word; a second of
/// `60` is read as `59` and one second added.
pub(crate) fn http_date(v: &[u8]) -> Option<SystemTime> {
    let text = std::str::from_utf8(v).ok()?;
    let mut leap = false;
    let mut rebuilt = String::with_capacity(text.len());
    for (i, piece) in text.split(' ').enumerate() {
        if i > 0 {
            rebuilt.push(' ');
        }
        let b = piece.as_bytes();
        if b.len() == 8 && b[2] == b':' && b[5] == b':' && &b[6..] == b"60" {
            leap = true;
            rebuilt.push_str(&piece[..6]);
            rebuilt.push_str("59");
        } else {
            rebuilt.push_str(piece);
        }
    }
    let at = httpdate::parse_http_date(&rebuilt).ok()?;
    if leap {
        at.checked_add(Duration::from_secs(1))
    } else {
        Some(at)
    }
}

/// What a raw `Retry-After` value asks, as a delay from the answer's
/// arrival: `None` when the value is invalid.
pub(crate) fn asked(value: &[u8], date: Option<&[u8]>, wall: SystemTime) -> Option<Duration> {
    let v = trim(value);
    if let Some(secs) = delta_seconds(v) {
        return Some(Duration::from_secs(secs));
    }
    let at = http_date(v)?;
    let base = date.map(trim).and_then(http_date).unwrap_or(wall);
    Some(at.duration_since(base).unwrap_or(Duration::ZERO))
}

/// When the server allows the next send: at an instant, or never (an
/// instant too far to represent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotBefore {
    /// Not before this instant.
    At(Instant),
    /// Not within any representable time.
    Never,
}

impl NotBefore {
    /// `now + max(delay, min)`.
    pub(crate) fn after(now: Instant, delay: Duration, min: Duration) -> NotBefore {
        now.checked_add(delay.max(min))
            .map_or(NotBefore::Never, NotBefore::At)
    }

    /// Whether a send at `t` comes too soon.
    pub(crate) fn forbids(self, t: Instant) -> bool {
        match self {
            NotBefore::At(at) => t < at,
            NotBefore::Never => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn own_reading() {
        let wall = UNIX_EPOCH;
        let s = |n| Some(Duration::from_secs(n));
        assert_eq!(asked(b" 42 ", None, wall), s(42));
        assert_eq!(asked(b"99999999999999999999", None, wall), s(u64::MAX));
        let padded = format!("{}7", "0".repeat(80));
        assert_eq!(asked(padded.as_bytes(), None, wall), s(7));
        assert_eq!(asked(b"-1", None, wall), None);
        assert_eq!(asked(b"", None, wall), None);
        let server = b"Wed, 31 Dec 2008 23:59:30 GMT";
        assert_eq!(
            asked(b"Wed, 31 Dec 2008 23:59:60 GMT", Some(server), wall),
            s(30)
        );
        let leap_now = b"Wed, 31 Dec 2008 23:59:60 GMT";
        assert_eq!(
            asked(b"Thu, 01 Jan 2009 00:00:20 GMT", Some(leap_now), wall),
            s(20)
        );
        assert_eq!(
            asked(b"Wednesday, 31-Dec-08 23:59:60 GMT", Some(server), wall),
            s(30)
        );
        assert_eq!(
            asked(b"Wed Dec 31 23:59:60 2008", Some(server), wall),
            s(30)
        );
    }
}
