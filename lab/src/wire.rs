//! Header values the lab writes: HTTP dates in three forms, Retry-After, and
//! the rate-limit headers. Pure functions of their inputs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::RetryAfterStyle;

/// The value of a `Retry-After` for a wait of `delay_secs` whole seconds,
/// written in `style`; `server_now` is the (possibly skewed) time also sent as
/// `Date`. `None` for [`RetryAfterStyle::Omitted`].
///
/// Dates are `server_now + delay_secs` truncated to the second, as is the
/// `Date` header, so a client that subtracts `Date` gets `delay_secs` exactly.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use polite_lab::{format_retry_after, RetryAfterStyle};
/// let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
/// let at = |s| format_retry_after(s, now, 0).unwrap();
/// assert_eq!(at(RetryAfterStyle::ImfFixdate), "Sun, 06 Nov 1994 08:49:37 GMT");
/// assert_eq!(at(RetryAfterStyle::Rfc850), "Sunday, 06-Nov-94 08:49:37 GMT");
/// assert_eq!(at(RetryAfterStyle::Asctime), "Sun Nov  6 08:49:37 1994");
/// assert_eq!(format_retry_after(RetryAfterStyle::DeltaSeconds, now, 2).unwrap(), "2");
/// assert_eq!(format_retry_after(RetryAfterStyle::Hostile, now, 2).unwrap(), "86400");
/// assert_eq!(format_retry_after(RetryAfterStyle::Omitted, now, 2), None);
/// ```
pub fn format_retry_after(
    style: RetryAfterStyle,
    server_now: SystemTime,
    delay_secs: u64,
) -> Option<String> {
    let at = server_now
        .checked_add(Duration::from_secs(delay_secs))
        .unwrap_or(server_now);
    match style {
        RetryAfterStyle::DeltaSeconds => Some(delay_secs.to_string()),
        RetryAfterStyle::ImfFixdate => Some(imf_fixdate(at)),
        RetryAfterStyle::Rfc850 => Some(rfc850(at)),
        RetryAfterStyle::Asctime => Some(asctime(at)),
        RetryAfterStyle::Invalid => Some("soon".to_owned()),
        RetryAfterStyle::Hostile => Some("86400".to_owned()),
        RetryAfterStyle::Omitted => None,
    }
}

/// Keeps a time inside what `httpdate` can format (1970..=9999).
fn clamp(t: SystemTime) -> SystemTime {
    // 9999-12-31T23:59:59Z
    let max = UNIX_EPOCH + Duration::from_secs(253_402_300_799);
    if t < UNIX_EPOCH {
        UNIX_EPOCH
    } else if t > max {
        max
    } else {
        t
    }
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`.
pub(crate) fn imf_fixdate(t: SystemTime) -> String {
    httpdate::fmt_http_date(clamp(t))
}

/// The fields of an IMF-fixdate: (weekday abbrev, day "06", month abbrev, year "1994", time).
fn fields(imf: &str) -> Option<(&str, &str, &str, &str, &str)> {
    let mut it = imf.split(' ');
    let wd = it.next()?.strip_suffix(',')?;
    let day = it.next()?;
    let mon = it.next()?;
    let year = it.next()?;
    let time = it.next()?;
    (it.next()? == "GMT" && day.len() == 2 && year.len() == 4).then_some((wd, day, mon, year, time))
}

/// `Sunday, 06-Nov-94 08:49:37 GMT` (two-digit year; recipients read 00-69 as 20xx).
pub(crate) fn rfc850(t: SystemTime) -> String {
    let imf = imf_fixdate(t);
    let Some((wd, day, mon, year, time)) = fields(&imf) else {
        return imf;
    };
    let weekday = match wd {
        "Mon" => "Monday",
        "Tue" => "Tuesday",
        "Wed" => "Wednesday",
        "Thu" => "Thursday",
        "Fri" => "Friday",
        "Sat" => "Saturday",
        _ => "Sunday",
    };
    format!("{weekday}, {day}-{mon}-{} {time} GMT", &year[2..])
}

/// `Sun Nov  6 08:49:37 1994` (day padded with a space).
pub(crate) fn asctime(t: SystemTime) -> String {
    let imf = imf_fixdate(t);
    let Some((wd, day, mon, year, time)) = fields(&imf) else {
        return imf;
    };
    let day = day.strip_prefix('0').unwrap_or(day);
    format!("{wd} {mon} {day:>2} {time} {year}")
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The time `skew_secs` away from `now`.
pub(crate) fn skewed(now: SystemTime, skew_secs: i64) -> SystemTime {
    let by = Duration::from_secs(skew_secs.unsigned_abs());
    let t = if skew_secs >= 0 {
        now.checked_add(by)
    } else {
        now.checked_sub(by)
    };
    clamp(t.unwrap_or(now))
}

/// An sf-string (RFC 8941) for a policy name; names are validated to need no escapes.
pub(crate) fn sf_string(s: &str) -> String {
    format!("\"{s}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn obsolete_forms_round_trip_through_httpdate() {
        // A spread of times, including single-digit days and 20xx years
        // (RFC 850's two-digit years cover 1970..=2069, so stay inside).
        for secs in [
            0u64,
            784_111_777,
            946_684_800,
            1_700_000_000,
            2_000_000_000,
            3_000_000_000,
        ] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            for s in [imf_fixdate(t), rfc850(t), asctime(t)] {
                assert_eq!(httpdate::parse_http_date(&s).ok(), Some(t), "{s}");
            }
        }
    }

    #[test]
    fn ceil_rounds_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1000)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
    }

    #[test]
    fn skew_both_ways() {
        let t = UNIX_EPOCH + Duration::from_secs(1000);
        assert_eq!(skewed(t, 10), t + Duration::from_secs(10));
        assert_eq!(skewed(t, -10), t - Duration::from_secs(10));
        assert_eq!(skewed(t, -5000), UNIX_EPOCH);
    }
}
