//! `Retry-After` and `Date` parsing (RFC 9110 §10.2.3 and §5.6.7).
//!
//! * delta-seconds: ASCII digits only, after trimming surrounding whitespace.
//!   A sign, a decimal point, an empty value, a non-ASCII digit and a value
//!   that overflows `u64` are *invalid*, never zero.
//! * HTTP-date: IMF-fixdate and the obsolete RFC 850 and asctime forms, via
//!   the `httpdate` crate (locale-independent). A date in the past means
//!   "now" (a zero delay, which the machine then raises to its minimum).
//! * A date is turned into a delay against the response's own `Date` header
//!   when that is present and valid (cancelling clock skew between client and
//!   server), else against the wall-clock time the caller passes in.
//!
//! Parsing never allocates and never panics, whatever the bytes.

use std::time::{Duration, SystemTime};

/// Longest header value looked at; anything longer is rejected unread.
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
pub enum RetryAfterError {
    /// Nothing but whitespace.
    #[error("Retry-After is empty")]
    Empty,
    /// Longer than any valid value (64 bytes).
    #[error("Retry-After is too long to be valid")]
    TooLong,
    /// delta-seconds that do not fit in 64 bits.
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
    /// # Errors
    ///
    /// [`RetryAfterError`] saying why the value is invalid.
    pub fn parse(value: &[u8]) -> Result<RetryAfter, RetryAfterError> {
        let v = value.trim_ascii();
        if v.is_empty() {
            return Err(RetryAfterError::Empty);
        }
        if v.len() > MAX_LEN {
            return Err(RetryAfterError::TooLong);
        }
        if v.iter().all(u8::is_ascii_digit) {
            let mut secs: u64 = 0;
            for &b in v {
                secs = secs
                    .checked_mul(10)
                    .and_then(|s| s.checked_add(u64::from(b - b'0')))
                    .ok_or(RetryAfterError::Overflow)?;
            }
            return Ok(RetryAfter::Delay(Duration::from_secs(secs)));
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
                    .and_then(|d| {
                        let d = d.trim_ascii();
                        if d.len() > MAX_LEN {
                            None
                        } else {
                            parse_date(d)
                        }
                    })
                    .unwrap_or(wall);
                at.duration_since(base).unwrap_or(Duration::ZERO)
            }
        }
    }
}

fn parse_date(v: &[u8]) -> Option<SystemTime> {
    let s = std::str::from_utf8(v).ok()?;
    httpdate::parse_http_date(s).ok()
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

    #[test]
    fn invalid_values_are_invalid_not_zero() {
        use RetryAfterError::*;
        let cases: [(&[u8], RetryAfterError); 12] = [
            (b"-1", Malformed),
            (b"+1", Malformed),
            (b"1.0", Malformed),
            (b"1e3", Malformed),
            (b"", Empty),
            (b"   ", Empty),
            (b"99999999999999999999999", Overflow),
            (b"18446744073709551616", Overflow),
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
        assert_eq!(RetryAfter::parse(&big), Err(RetryAfterError::TooLong));
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
