//! `Retry-After` and `Date` parsing (RFC 9110 §10.2.3 and §5.6.7).
//!
//! * delta-seconds: ASCII digits only, after trimming surrounding whitespace,
//!   any number of them: leading zeros are digits, and a value too large
//!   for 64 bits (more digits than fit, or zero-padded past any length
//!   limit) is *valid and huge*: it saturates at `u64::MAX` seconds, as RFC
//!   9111 §1.2.2 does for caches, so that it exceeds the automatic wait cap
//!   and ends the request `RateLimited`. A sign, a decimal point, an empty
//!   value and a non-ASCII digit are *invalid*, never zero.
//! * HTTP-date: IMF-fixdate and the obsolete RFC 850 and asctime forms, via
//!   the `httpdate` crate (locale-independent). A seconds field of `60` (a
//!   leap second, which RFC 9110's grammar allows and `httpdate` refuses) is
//!   read as second 59 plus one second, in all three forms. A date in the
//!   past means "now" (a zero delay, which the machine then raises to its
//!   minimum).
//! * A date is turned into a delay against the response's own `Date` header
//!   when that is present and valid (cancelling clock skew between client and
//!   server), else against the wall-clock time the caller passes in.
//!
//! Parsing never allocates and never panics, whatever the bytes, and takes
//! time linear in the value's length (digits are scanned once; anything
//! else longer than 64 bytes is rejected unread).

use std::time::{Duration, SystemTime};

/// Longest HTTP-date looked at; a longer value that is not all digits is
/// rejected unread.
const MAX_LEN: usize = 64;

/// Why a `Retry-After` value was rejected. The machine then falls back to its
/// computed backoff and notes the reason in the attempt record.
///
/// ```
/// use polite_core::retry_after::{RetryAfter, RetryAfterError};
/// assert_eq!(RetryAfter::parse(b"-1"), Err(RetryAfterError::Malformed));
/// assert_eq!(RetryAfter::parse(b"  "), Err(RetryAfterError::Empty));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum RetryAfterError {
    /// Nothing but whitespace.
    #[error("Retry-After is empty")]
    Empty,
    /// Not all digits, and longer than any valid HTTP-date (64 bytes). An
    /// all-digit value is never too long.
    #[error("Retry-After is too long to be valid")]
    TooLong,
    /// Never returned any more: delta-seconds too large for 64 bits are
    /// valid and saturate (SPEC §2.1). Kept so that matches on this enum
    /// keep compiling.
    #[error("Retry-After delta-seconds overflow")]
    Overflow,
    /// Neither ASCII digits nor an HTTP-date (a sign, a decimal point,
    /// non-ASCII bytes, a broken date...).
    #[error("Retry-After is neither delta-seconds nor an HTTP-date")]
    Malformed,
}

/// A parsed `Retry-After` value.
///
/// ```
/// use polite_core::retry_after::RetryAfter;
/// use std::time::{Duration, UNIX_EPOCH};
///
/// assert_eq!(RetryAfter::parse(b" 120 "), Ok(RetryAfter::Delay(Duration::from_secs(120))));
/// let date = RetryAfter::parse(b"Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
/// assert_eq!(date, RetryAfter::At(UNIX_EPOCH + Duration::from_secs(784111777)));
/// // Too large for 64 bits: valid and huge (it saturates).
/// assert_eq!(RetryAfter::parse(b"99999999999999999999"),
///            Ok(RetryAfter::Delay(Duration::from_secs(u64::MAX))));
/// // Zero-padded past any length limit: still delta-seconds.
/// let padded = format!("{}38", "0".repeat(100));
/// assert_eq!(RetryAfter::parse(padded.as_bytes()), Ok(RetryAfter::Delay(Duration::from_secs(38))));
/// // A leap second is one second after second 59.
/// let leap = RetryAfter::parse(b"Wed, 31 Dec 2008 23:59:60 GMT").unwrap();
/// assert_eq!(leap, RetryAfter::At(UNIX_EPOCH + Duration::from_secs(1_230_768_000)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// delta-seconds: wait this long from the response's arrival.
    Delay(Duration),
    /// HTTP-date: wait until this wall-clock time.
    At(SystemTime),
}

impl RetryAfter {
    /// Parses a raw header value (bytes as received; need not be UTF-8).
    ///
    /// Any all-digit value is delta-seconds, whatever its length,
    /// saturating at `u64::MAX` seconds; it is scanned once, without
    /// allocating.
    ///
    /// # Errors
    ///
    /// [`RetryAfterError`] saying why the value is invalid.
    pub fn parse(value: &[u8]) -> Result<RetryAfter, RetryAfterError> {
        // The common form first, untrimmed (`Retry-After: 2`): all digits
        // need no trimming; anything else is trimmed and read as before.
        if let Some(secs) = delta_seconds(value) {
            return Ok(RetryAfter::Delay(Duration::from_secs(secs)));
        }
        let v = value.trim_ascii();
        if v.is_empty() {
            return Err(RetryAfterError::Empty);
        }
        if let Some(secs) = delta_seconds(v) {
            return Ok(RetryAfter::Delay(Duration::from_secs(secs)));
        }
        if v.len() > MAX_LEN {
            return Err(RetryAfterError::TooLong);
        }
        parse_date(v)
            .map(RetryAfter::At)
            .ok_or(RetryAfterError::Malformed)
    }

    /// The delay this value asks for, for a response whose `Date` header is
    /// `date` (raw bytes, if any) and which arrived at wall-clock time `wall`.
    ///
    /// An HTTP-date is measured against a valid `Date` header when there is
    /// one, else against `wall`. A time in the past gives zero.
    ///
    /// ```
    /// use polite_core::retry_after::RetryAfter;
    /// use std::time::{Duration, UNIX_EPOCH};
    /// let at = RetryAfter::parse(b"Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
    /// // The server's clock says 08:49:07: 30 s, whatever our own clock says.
    /// let wall = UNIX_EPOCH + Duration::from_secs(784111777 + 3600);
    /// assert_eq!(at.delay(Some(b"Sun, 06 Nov 1994 08:49:07 GMT"), wall), Duration::from_secs(30));
    /// // No Date header: against our wall clock, which is an hour later: past, so zero.
    /// assert_eq!(at.delay(None, wall), Duration::ZERO);
    /// ```
    #[must_use]
    pub fn delay(self, date: Option<&[u8]>, wall: SystemTime) -> Duration {
        match self {
            RetryAfter::Delay(d) => d,
            RetryAfter::At(at) => {
                let base = date
                    .and_then(|d| parse_date(d.trim_ascii()))
                    .unwrap_or(wall);
                at.duration_since(base).unwrap_or(Duration::ZERO)
            }
        }
    }
}

/// delta-seconds: `Some` when every byte is an ASCII digit (and there is at
/// least one), saturating at `u64::MAX`; one pass, no allocation.
#[inline]
pub(crate) fn delta_seconds(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |secs, &b| {
        b.is_ascii_digit()
            .then(|| secs.saturating_mul(10).saturating_add(u64::from(b - b'0')))
    })
}

/// [`delta_seconds`] for a value of at most 19 digits (which cannot
/// overflow 64 bits, so nothing saturates): `None` for anything else,
/// longer values included. What `RetryMachine`'s fast path reads (issue
/// 22); it leaves every other value to the general path.
#[inline(always)]
pub(crate) fn short_delta_seconds(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    let mut secs = 0u64;
    for &b in v {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        secs = secs * 10 + u64::from(d);
    }
    Some(secs)
}

/// An HTTP-date (at most [`MAX_LEN`] bytes, already trimmed), with a leap
/// second read as second 59 plus one second. No allocation: a leap date is
/// rewritten in a buffer on the stack.
fn parse_date(v: &[u8]) -> Option<SystemTime> {
    if v.len() > MAX_LEN || !framed(v) {
        return None;
    }
    let s = std::str::from_utf8(v).ok()?;
    if let Ok(t) = httpdate::parse_http_date(s) {
        return Some(t);
    }
    // All three forms write the time as `hh:mm:ss` followed by a space:
    // find `:60 ` after `dd:dd`, read it as `:59`, and add one second.
    let i = leap_second_at(v)?;
    let mut buf = [0u8; MAX_LEN];
    let buf = buf.get_mut(..v.len())?;
    buf.copy_from_slice(v);
    buf[i + 1] = b'5';
    buf[i + 2] = b'9';
    let s = std::str::from_utf8(buf).ok()?;
    httpdate::parse_http_date(s)
        .ok()?
        .checked_add(Duration::from_secs(1))
}

/// What `httpdate` leaves unchecked (issue 23, found by the fuzz oracle):
/// all three forms begin and end with a letter or a digit (`httpdate` trims
/// any Unicode whitespace itself, a vertical tab too, which HTTP does not
/// count as whitespace), and put a space before the `hh:mm:ss` time
/// (`httpdate`'s RFC 850 reader skips that byte, so
/// `Sunday, 06-Nov-94x08:49:37 GMT` passed as a date).
fn framed(v: &[u8]) -> bool {
    let edge = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    let spaced = v
        .iter()
        .position(|b| *b == b':')
        .is_some_and(|i| i >= 3 && v[i - 3] == b' ');
    edge(v.first()) && edge(v.last()) && spaced
}

/// Where the `:60` of a `hh:mm:60 ` time is (the index of its colon).
fn leap_second_at(v: &[u8]) -> Option<usize> {
    v.windows(9)
        .position(|w| {
            w[0].is_ascii_digit()
                && w[1].is_ascii_digit()
                && w[2] == b':'
                && w[3].is_ascii_digit()
                && w[4].is_ascii_digit()
                && w[5..9] == *b":60 "
        })
        .map(|p| p + 5)
}

/// [`server_delay`] as the machines call it: the common form
/// (`Retry-After: 2`, all digits) inline, where the machine decides, as
/// [`RetryAfter::parse`] reads it first; anything else through
/// `server_delay` (issue 22: the call and its frame cost more than the
/// digits).
#[inline]
pub(crate) fn server_delay_inline(
    retry_after: &[u8],
    date: Option<&[u8]>,
    wall: SystemTime,
) -> Result<Duration, RetryAfterError> {
    match delta_seconds(retry_after) {
        Some(secs) => Ok(Duration::from_secs(secs)),
        None => server_delay(retry_after, date, wall),
    }
}

/// Parses `Retry-After` and turns it into a delay in one step.
///
/// ```
/// use polite_core::retry_after::server_delay;
/// use std::time::{Duration, UNIX_EPOCH};
/// assert_eq!(server_delay(b"2", None, UNIX_EPOCH), Ok(Duration::from_secs(2)));
/// assert!(server_delay(b"1.0", None, UNIX_EPOCH).is_err());
/// ```
///
/// # Errors
///
/// [`RetryAfterError`] when the value is invalid.
pub fn server_delay(
    retry_after: &[u8],
    date: Option<&[u8]>,
    wall: SystemTime,
) -> Result<Duration, RetryAfterError> {
    RetryAfter::parse(retry_after).map(|r| r.delay(date, wall))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    const T: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn delta_seconds() {
        assert_eq!(
            RetryAfter::parse(b"0"),
            Ok(RetryAfter::Delay(Duration::ZERO))
        );
        assert_eq!(
            RetryAfter::parse(b"\t 7\r\n"),
            Ok(RetryAfter::Delay(Duration::from_secs(7)))
        );
        assert_eq!(
            RetryAfter::parse(b"18446744073709551615"),
            Ok(RetryAfter::Delay(Duration::from_secs(u64::MAX)))
        );
        assert_eq!(
            RetryAfter::parse(b"000000000000000000000000042"),
            Ok(RetryAfter::Delay(Duration::from_secs(42)))
        );
    }

    /// `short_delta_seconds` is `delta_seconds` up to 19 bytes, and `None`
    /// beyond.
    #[test]
    fn short_delta_seconds_is_delta_seconds_up_to_19_bytes() {
        let values: [&[u8]; 14] = [
            b"",
            b"0",
            b"2",
            b"60",
            b"007",
            b" 2",
            b"2 ",
            b"1.5",
            b"/",
            b":",
            b"9999999999999999999",
            b"0000000000000000042",
            b"18446744073709551615",
            b"00000000000000000042",
        ];
        for v in values {
            let want = if v.len() <= 19 {
                super::delta_seconds(v)
            } else {
                None
            };
            assert_eq!(super::short_delta_seconds(v), want, "{v:?}");
        }
        assert_eq!(
            super::short_delta_seconds(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
    }

    /// Issue 16: values too large for 64 bits, or zero-padded past the
    /// length limit, are valid: huge (saturated) or what their digits say.
    #[test]
    fn overflowing_and_padded_delta_seconds_are_valid() {
        let max = Ok(RetryAfter::Delay(Duration::from_secs(u64::MAX)));
        assert_eq!(RetryAfter::parse(b"99999999999999999999"), max);
        assert_eq!(RetryAfter::parse(b"18446744073709551616"), max);
        assert_eq!(RetryAfter::parse(b" 99999999999999999999999 "), max);
        let padded = format!("{}38", "0".repeat(70));
        assert_eq!(
            RetryAfter::parse(padded.as_bytes()),
            Ok(RetryAfter::Delay(Duration::from_secs(38)))
        );
        let padded_huge = format!("{}99999999999999999999", "0".repeat(70));
        assert_eq!(RetryAfter::parse(padded_huge.as_bytes()), max);
        // Any length at all: one pass, saturating.
        assert_eq!(RetryAfter::parse(&vec![b'9'; 1 << 20]), max);
        assert_eq!(
            RetryAfter::parse(&vec![b'0'; 1 << 20]),
            Ok(RetryAfter::Delay(Duration::ZERO))
        );
    }

    /// Issue 16: second 60 (a leap second) in all three forms, for
    /// Retry-After and for Date.
    #[test]
    fn leap_second_dates() {
        // 2008-12-31 23:59:60 is one second after 23:59:59 (1230767999).
        let want = Ok(RetryAfter::At(at(1_230_768_000)));
        for form in [
            &b"Wed, 31 Dec 2008 23:59:60 GMT"[..],
            b"Wednesday, 31-Dec-08 23:59:60 GMT",
            b"Wed Dec 31 23:59:60 2008",
            b" Wed, 31 Dec 2008 23:59:60 GMT\t",
        ] {
            assert_eq!(RetryAfter::parse(form), want, "{:?}", form.escape_ascii());
        }
        // As the server's Date: Retry-After 00:00:20 the next day is 20 s on.
        let ra = RetryAfter::parse(b"Thu, 01 Jan 2009 00:00:20 GMT").unwrap();
        assert_eq!(
            ra.delay(Some(b"Wed, 31 Dec 2008 23:59:60 GMT"), at(0)),
            Duration::from_secs(20)
        );
        // Second 61 and a broken leap date stay invalid.
        for bad in [
            &b"Wed, 31 Dec 2008 23:59:61 GMT"[..],
            b"Thu, 31 Dec 2008 23:59:60 GMT", // wrong weekday
            b"Wed, 31 Dec 2008 23:60:60 GMT",
            b"Wed, 31 Dec 2008 23:59:60 UTC",
        ] {
            assert_eq!(
                RetryAfter::parse(bad),
                Err(RetryAfterError::Malformed),
                "{:?}",
                bad.escape_ascii()
            );
        }
    }

    /// The machines' inline form answers what `server_delay` answers.
    #[test]
    fn server_delay_inline_is_server_delay() {
        let date: &[u8] = b"Sun, 06 Nov 1994 08:49:07 GMT";
        let padded = format!("{}38", "0".repeat(70));
        for value in [
            &b"2"[..],
            b"0",
            b"007",
            b"99999999999999999999",
            padded.as_bytes(),
            b" 3 ",
            b"",
            b"-1",
            b"1.0",
            b"Sun, 06 Nov 1994 08:49:37 GMT",
            b"Wed, 31 Dec 2008 23:59:60 GMT",
        ] {
            for d in [None, Some(date)] {
                assert_eq!(
                    server_delay_inline(value, d, at(T)),
                    server_delay(value, d, at(T)),
                    "{:?}",
                    value.escape_ascii()
                );
            }
        }
    }

    #[test]
    fn invalid_values_are_invalid_not_zero() {
        use RetryAfterError::*;
        let cases: [(&[u8], RetryAfterError); 10] = [
            (b"-1", Malformed),
            (b"+1", Malformed),
            (b"1.0", Malformed),
            (b"1e3", Malformed),
            (b"", Empty),
            (b"   ", Empty),
            ("\u{0661}".as_bytes(), Malformed), // ARABIC-INDIC DIGIT ONE
            ("１".as_bytes(), Malformed),       // FULLWIDTH DIGIT ONE
            (b"\xff\xfe1", Malformed),
            (b"1 2", Malformed),
        ];
        for (v, want) in cases {
            assert_eq!(RetryAfter::parse(v), Err(want), "{:?}", v.escape_ascii());
        }
    }

    #[test]
    fn huge_and_binary_values_never_panic() {
        let big = vec![b'9'; 10 * 1024];
        assert_eq!(
            RetryAfter::parse(&big),
            Ok(RetryAfter::Delay(Duration::from_secs(u64::MAX)))
        );
        let mut long = big.clone();
        long[5] = b'x';
        assert_eq!(RetryAfter::parse(&long), Err(RetryAfterError::TooLong));
        let junk: Vec<u8> = (0..10 * 1024).map(|i| (i * 7 + 3) as u8).collect();
        assert!(RetryAfter::parse(&junk).is_err());
        let d = RetryAfter::At(at(T));
        assert_eq!(d.delay(Some(&junk), at(T - 5)), Duration::from_secs(5));
        assert_eq!(d.delay(Some(&big), at(T - 5)), Duration::from_secs(5));
    }

    #[test]
    fn three_date_forms() {
        for form in [
            &b"Sun, 06 Nov 1994 08:49:37 GMT"[..],
            b"Sunday, 06-Nov-94 08:49:37 GMT",
            b"Sun Nov  6 08:49:37 1994",
            b"  Sun, 06 Nov 1994 08:49:37 GMT  ",
        ] {
            assert_eq!(
                RetryAfter::parse(form),
                Ok(RetryAfter::At(at(T))),
                "{:?}",
                form.escape_ascii()
            );
        }
    }

    #[test]
    fn broken_dates_are_malformed() {
        for form in [
            &b"Sun, 06 Nov 1994 08:49:37 UTC"[..],
            b"Sun, 32 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"06 Nov 1994",
            b"Sun, 06 Nov 1994 08:49:37 GMT GMT",
            // httpdate's leniences (issue 23): any byte before an RFC 850
            // time, Unicode whitespace around a date.
            b"Sunday, 06-Nov-94x08:49:37 GMT",
            b"Monday, 24-Jul-95o17:37:54 GMT",
            b"\x0bSun, 06 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 GMT\x0b",
            b"\x0bSun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(
                RetryAfter::parse(form),
                Err(RetryAfterError::Malformed),
                "{:?}",
                form.escape_ascii()
            );
        }
    }

    #[test]
    fn date_in_the_past_is_now() {
        let ra = RetryAfter::At(at(T));
        assert_eq!(ra.delay(None, at(T + 10)), Duration::ZERO);
        assert_eq!(ra.delay(None, at(T - 10)), Duration::from_secs(10));
    }

    #[test]
    fn date_header_cancels_skew() {
        // Our clock is an hour behind the server's: measured against our wall
        // clock the delay would be an hour too long; against Date it is 5 s.
        let ra = RetryAfter::At(at(T));
        let server_now = b"Sun, 06 Nov 1994 08:49:32 GMT";
        assert_eq!(
            ra.delay(Some(server_now), at(T - 5 - 3600)),
            Duration::from_secs(5)
        );
        // Our clock is an hour ahead: the date would look past; Date says 5 s.
        assert_eq!(
            ra.delay(Some(server_now), at(T - 5 + 3600)),
            Duration::from_secs(5)
        );
        // An invalid Date falls back to the wall clock.
        assert_eq!(
            ra.delay(Some(b"yesterday"), at(T - 8)),
            Duration::from_secs(8)
        );
        // Date is ignored for delta-seconds.
        assert_eq!(
            RetryAfter::Delay(Duration::from_secs(3)).delay(Some(server_now), at(0)),
            Duration::from_secs(3)
        );
    }
}
