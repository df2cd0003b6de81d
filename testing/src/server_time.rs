//! The checkers' own reading of `Retry-After` and `Date` (SPEC §2.1),
//! written apart from `crate::retry_after` on purpose: an oracle must not be
//! the code it checks. Plain code, straight from the SPEC's words:
//!
//! * surrounding whitespace is trimmed;
//! * delta-seconds are ASCII digits, any number of them (leading zeros are
//!   digits); a value too large for 64 bits saturates (valid and huge);
//! * otherwise an HTTP-date in one of the three forms, read by this
//!   module's own word-by-word reader (not `httpdate`, which polite-core
//!   uses), where a seconds field of `60` (a leap second) is one second
//!   after second 59;
//! * a date is measured against a valid `Date` header, else the wall clock;
//!   a date in the past is zero.
//!
//! Anything else is invalid (`None`), never zero.

use std::time::{Duration, Instant, SystemTime};

/// Surrounding whitespace, as HTTP field values are trimmed.
// `#[inline]` on this reader: the `retry_after` fuzz target compiles it in
// with its coverage counters (polite-testing itself is built without them
// for fuzzing; fuzz/README.md, "Speed").
#[inline]
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
#[inline]
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

/// An HTTP-date in one of the three forms of RFC 9110 §5.6.7, read by hand
/// (no `httpdate`, no code shared with polite-core): the value is split
/// into its space-separated words and each form is matched word by word.
///
/// * IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`
/// * RFC 850 `Sunday, 06-Nov-94 08:49:37 GMT` (two-digit year: `70..=99`
///   is 19xx, `00..=69` is 20xx, the reading of the `httpdate` crate that
///   SPEC §2.1 names)
/// * asctime `Sun Nov  6 08:49:37 1994` (day padded with a space)
///
/// The weekday must be the date's, the day must exist in its month, the
/// year is `1970..=9999` (what SPEC's named parser represents), and a
/// seconds field of `60` (a leap second) is simply second 60 of the minute:
/// one second after second 59.
#[inline]
pub(crate) fn http_date(v: &[u8]) -> Option<SystemTime> {
    // Names matched as byte arrays (compiled to byte compares: a lookup
    // through a table of slices called `bcmp` per candidate, which the
    // fuzzer's memcmp hook then recorded, a tenth of the `retry_after`
    // target's time).
    let short = |w: &[u8]| match w {
        [b'M', b'o', b'n'] => Some(0),
        [b'T', b'u', b'e'] => Some(1),
        [b'W', b'e', b'd'] => Some(2),
        [b'T', b'h', b'u'] => Some(3),
        [b'F', b'r', b'i'] => Some(4),
        [b'S', b'a', b't'] => Some(5),
        [b'S', b'u', b'n'] => Some(6),
        _ => None,
    };
    let long = |w: &[u8]| {
        let day = short(w.get(..3)?)?;
        let rest: &[u8] = match day {
            0 => b"day",
            1 => b"sday",
            2 => b"nesday",
            3 => b"rsday",
            4 => b"day",
            5 => b"urday",
            _ => b"day",
        };
        (w.len() == 3 + rest.len() && w[3..].iter().zip(rest).all(|(a, b)| a == b)).then_some(day)
    };
    let month = |w: &[u8]| match w {
        [b'J', b'a', b'n'] => Some(1),
        [b'F', b'e', b'b'] => Some(2),
        [b'M', b'a', b'r'] => Some(3),
        [b'A', b'p', b'r'] => Some(4),
        [b'M', b'a', b'y'] => Some(5),
        [b'J', b'u', b'n'] => Some(6),
        [b'J', b'u', b'l'] => Some(7),
        [b'A', b'u', b'g'] => Some(8),
        [b'S', b'e', b'p'] => Some(9),
        [b'O', b'c', b't'] => Some(10),
        [b'N', b'o', b'v'] => Some(11),
        [b'D', b'e', b'c'] => Some(12),
        _ => None,
    };
    // At most six words (no allocation: the fuzz oracle runs this often).
    let mut words: [&[u8]; 6] = [&[]; 6];
    let mut n = 0;
    for w in v.split(|b| *b == b' ') {
        *words.get_mut(n)? = w;
        n += 1;
    }
    // (weekday 0 = Monday, day, month 1..=12, year, hh:mm:ss)
    let fields = match &words[..n] {
        // IMF-fixdate: six words, the weekday ends in a comma.
        [wd, day, mon, year, time, [b'G', b'M', b'T']] if day.len() == 2 && year.len() == 4 => {
            let wd = short(wd.strip_suffix(b",")?)?;
            (wd, number(day)?, month(mon)?, number(year)?, time)
        }
        // RFC 850: four words, `dd-Mon-yy` in the middle.
        [wd, dmy, time, [b'G', b'M', b'T']] => {
            let wd = long(wd.strip_suffix(b",")?)?;
            let [day, mon, yy] = split3(dmy, b'-')?;
            if day.len() != 2 || yy.len() != 2 {
                return None;
            }
            let yy = number(yy)?;
            let year = if yy >= 70 { 1900 + yy } else { 2000 + yy };
            (wd, number(day)?, month(mon)?, year, time)
        }
        // asctime: a one-digit day is padded with a space, which splits
        // into an empty word.
        [wd, mon, [], day, time, year] if day.len() == 1 && year.len() == 4 => {
            let (wd, mon) = (short(wd)?, month(mon)?);
            (wd, number(day)?, mon, number(year)?, time)
        }
        [wd, mon, day, time, year] if day.len() == 2 && year.len() == 4 => {
            let (wd, mon) = (short(wd)?, month(mon)?);
            (wd, number(day)?, mon, number(year)?, time)
        }
        _ => return None,
    };
    let (wd, day, month, year, time) = fields;
    let [hh, mm, ss] = split3(time, b':')?;
    if hh.len() != 2 || mm.len() != 2 || ss.len() != 2 {
        return None;
    }
    let (hh, mm, ss) = (number(hh)?, number(mm)?, number(ss)?);
    if !(1970..=9999).contains(&year) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let leap_year = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap_year { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if day == 0 || day > month_days[month - 1] {
        return None;
    }
    // Days since 1970-01-01: whole years (365 each, plus one per leap year
    // before this one, counted by the Gregorian rule), then whole months of
    // this year, then days. (Counted in closed form, not a loop over the
    // years: a loop made each year-9999 date cost ~8,000 steps, a third of
    // the `retry_after` fuzz target's time.)
    let leaps_through = |y: u64| y / 4 - y / 100 + y / 400;
    let mut days: u64 = 365 * (year - 1970) + leaps_through(year - 1) - leaps_through(1969);
    days += month_days[..month - 1].iter().sum::<u64>();
    days += day - 1;
    // 1970-01-01 was a Thursday (weekday 3 with Monday 0).
    if (days + 3) % 7 != wd as u64 {
        return None;
    }
    let secs = days * 86_400 + hh * 3_600 + mm * 60 + ss;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// A field of ASCII digits (at most four here), as a number.
#[inline]
fn number(w: &[u8]) -> Option<u64> {
    if w.is_empty() || w.len() > 4 {
        return None;
    }
    delta_seconds(w)
}

/// Exactly three pieces around `sep`.
#[inline]
fn split3(w: &[u8], sep: u8) -> Option<[&[u8]; 3]> {
    let mut it = w.split(|b| *b == sep);
    let out = [it.next()?, it.next()?, it.next()?];
    it.next().is_none().then_some(out)
}

/// What a raw `Retry-After` value asks, as a delay from the answer's
/// arrival: `None` when the value is invalid.
#[inline]
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

    /// The three forms of RFC 9110 §5.6.7, SPEC §2.1's table of what is a
    /// date and what is not.
    #[test]
    fn date_table() {
        let t = |secs| Some(UNIX_EPOCH + Duration::from_secs(secs));
        let cases: [(&str, Option<SystemTime>); 22] = [
            ("Sun, 06 Nov 1994 08:49:37 GMT", t(784_111_777)),
            ("Sunday, 06-Nov-94 08:49:37 GMT", t(784_111_777)),
            ("Sun Nov  6 08:49:37 1994", t(784_111_777)),
            ("Sun Nov 06 08:49:37 1994", t(784_111_777)),
            ("Thu, 01 Jan 1970 00:00:00 GMT", t(0)),
            ("Thursday, 01-Jan-70 00:00:00 GMT", t(0)),
            ("Tuesday, 31-Dec-69 23:59:59 GMT", t(3_155_759_999)), // 2069
            ("Tue, 29 Feb 2000 12:00:00 GMT", t(951_825_600)),
            ("Fri, 31 Dec 9999 23:59:59 GMT", t(253_402_300_799)),
            ("Wed, 31 Dec 2008 23:59:60 GMT", t(1_230_768_000)),
            // Not dates.
            ("Mon, 06 Nov 1994 08:49:37 GMT", None), // wrong weekday
            ("Sun, 06 Nov 1994 08:49:37 UTC", None),
            ("Sun, 06 Nov 1994 08:49:61 GMT", None),
            ("Sun, 06 Nov 1994 24:00:00 GMT", None),
            ("Sun, 6 Nov 1994 08:49:37 GMT", None),
            ("Sun,  06 Nov 1994 08:49:37 GMT", None),
            ("Sat, 29 Feb 1900 00:00:00 GMT", None), // before 1970, and no such day
            ("Thu, 29 Feb 2001 00:00:00 GMT", None),
            ("Wed, 31 Dec 1969 23:59:59 GMT", None), // before what SPEC's parser represents
            ("Sun Nov  6 08:49:37 1994 GMT", None),
            ("Sun Nov 6 08:49:37 1994", None),
            ("sun, 06 nov 1994 08:49:37 gmt", None),
        ];
        for (v, want) in cases {
            assert_eq!(http_date(v.as_bytes()), want, "{v}");
        }
    }

    /// Every day from 1970 to 2100 (and a sweep of times of day), in all
    /// three forms as `httpdate` writes them, reads back to its instant.
    #[test]
    fn dates_read_back() {
        let mut secs = 0u64;
        while secs < 4_102_444_800 {
            let at = UNIX_EPOCH + Duration::from_secs(secs);
            let imf = httpdate::fmt_http_date(at);
            assert_eq!(http_date(imf.as_bytes()), Some(at), "{imf}");
            secs += 86_400 + 3_607;
        }
    }
}
