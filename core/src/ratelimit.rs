//! Server-advertised quotas: the IETF `RateLimit` and `RateLimit-Policy`
//! fields (draft-ietf-httpapi-ratelimit-headers) and, when a caller opts
//! in, the common `X-RateLimit-Limit` / `X-RateLimit-Remaining` /
//! `X-RateLimit-Reset` headers.
//!
//! The raw values travel with an answer in [`Response::rate_limit`]
//! ([`RateLimitFields`]); [`RateLimitInfo::read`] turns them into what
//! pacing needs, and [`Paced`](crate::Paced) and
//! [`BatchMachine`](crate::BatchMachine) hand that to their
//! [`Pace`](crate::Pace) through [`Pace::observe`](crate::Pace::observe):
//!
//! * `RateLimit-Policy: "default";q=100;w=10` → a [`Quota`] of 100
//!   requests per 10 s. A [`RateThrottle::learning`](crate::RateThrottle::learning)
//!   throttle sizes itself to it; a throttle the caller sized keeps its size.
//! * `RateLimit: "default";r=0;t=50` → a **pause** of 50 s: every machine
//!   sharing the pace holds its sends until then (a cool-down).
//!
//! # How the fields are read
//!
//! * Both fields are Structured Field **Lists** (RFC 9651), parsed with the
//!   `sfv` crate. A field that is not a valid List is ignored as a whole
//!   ("malformed RateLimit header fields MUST be ignored"); so is a field
//!   longer than 4 KiB.
//! * A member counts when its value is a String or a Token (the policy
//!   name) and its parameters are valid: `q` (required for a policy) a
//!   non-negative Integer, `w` a positive Integer, `qu` a String, `r`
//!   (required for a service limit) and `t` non-negative Integers. Any
//!   other member — an inner list, a number as the value (the older draft's
//!   `10;w=1`), a negative, decimal or missing `q`/`r`, a zero window —
//!   is ignored on its own. Unknown parameters are comments. A repeated
//!   parameter takes its last value (RFC 9651).
//! * Several policies (`"permin";q=50;w=60,"perhr";q=1000;w=3600`) become
//!   **one** sliding window that honours all of them: the shortest window
//!   `W`, and for each policy `floor(q / ceil(w / W))` requests per `W`,
//!   the smallest of those (here 16 per 60 s: never more than 50 in a
//!   minute nor 960 in an hour). When that is zero (a policy grants fewer
//!   requests than it has short windows), one request per
//!   `ceil(max(w / q))` seconds. Only request quotas size a throttle: a
//!   policy whose `qu` is `"content-bytes"` or `"concurrent-requests"`, or
//!   whose `q` is 0, or without a `w`, is not a rate.
//! * Several service limits: the lowest `r` is the remaining quota; every
//!   member with `r=0` and a `t` pauses, for the longest such `t`.
//! * `pk` (partition keys) is not interpreted: all members are taken to
//!   apply to the requests that share the pace.
//! * **`Retry-After` wins**: when the answer carries a valid `Retry-After`,
//!   the `RateLimit` reset is not used as a pause (the draft: "the
//!   Retry-After field MUST take precedence"); the policy still sizes.
//! * A pause is clamped to [`RateLimitHeaders::max_pause`] (default 300 s,
//!   the same sanity clamp as `Retry-After`): a hostile `t=86400` must not
//!   stall a client for a day.
//! * Only the first field line of each name is seen (adapters' `header`
//!   returns the first); a list split over several lines is read from its
//!   first line.
//!
//! # `X-RateLimit-*` (opt-in: [`RateLimitHeaders::x_ratelimit`])
//!
//! `X-RateLimit-Remaining: 0` with an `X-RateLimit-Reset` pauses until the
//! reset. The reset is read **by magnitude**: below 10^9 it is a number of
//! seconds from now; from 10^9 up to 10^12 a Unix time in seconds (10^9 s
//! is September 2001; as a delay it would be 31 years); from 10^12 a Unix
//! time in milliseconds. A fraction (`1700000000.250`) is accepted. A Unix
//! time is turned into a delay against the answer's `Date` header when it
//! is valid (cancelling clock skew, as for `Retry-After`), else against
//! [`Response::wall_clock`]; a time in the past means no pause.
//! `X-RateLimit-Limit` carries no window, so it never sizes a throttle; it
//! is reported in [`RateLimitInfo::limit`].
//!
//! # Cost
//!
//! When an answer carries none of these headers, reading is a handful of
//! `Option` checks ([`RateLimitFields::is_empty`]). When it does, `sfv`
//! parses the values in place through its visitor interface and allocates
//! nothing — except for the rare escaped string (`"a\"b"`), byte sequence
//! (`pk=:…:`, decoded from base64) or display string, which `sfv` copies.
//! Parsing never panics, whatever the bytes (property-tested).

use std::convert::Infallible;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sfv::visitor::{
    EntryVisitor, Ignored, InnerListVisitor, ItemVisitor, ListVisitor, ParameterVisitor,
};
use sfv::{BareItemFromInput, KeyRef, Parser};

pub use crate::input::RateLimitFields;
use crate::input::Response;
use crate::retry_after::RetryAfter;

/// Longest field value looked at; longer values are ignored unread.
const MAX_FIELD_LEN: usize = 4096;

/// Which rate-limit headers are read, and how far a pause may reach.
/// Given to [`Paced::rate_limit_headers`](crate::Paced::rate_limit_headers)
/// and [`BatchMachine::rate_limit_headers`](crate::BatchMachine::rate_limit_headers).
///
/// Default: the IETF fields on, `X-RateLimit-*` off (their meaning varies
/// between servers, so a caller opts in), pauses clamped to 300 s.
///
/// ```
/// use polite_core::ratelimit::RateLimitHeaders;
/// use std::time::Duration;
/// let h = RateLimitHeaders::default();
/// assert!(h.ietf && !h.x_ratelimit);
/// assert_eq!(h.max_pause, Duration::from_secs(300));
/// assert!(RateLimitHeaders::default().with_x_ratelimit().x_ratelimit);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitHeaders {
    /// Read `RateLimit` and `RateLimit-Policy`. Default on.
    pub ietf: bool,
    /// Read `X-RateLimit-Limit`, `-Remaining` and `-Reset`. Default off.
    pub x_ratelimit: bool,
    /// The longest pause a server can ask for through these headers.
    /// Default 300 s (as [`RetryAfterLimits::max`](crate::policy::RetryAfterLimits::max)).
    pub max_pause: Duration,
}

impl Default for RateLimitHeaders {
    fn default() -> Self {
        RateLimitHeaders {
            ietf: true,
            x_ratelimit: false,
            max_pause: Duration::from_secs(300),
        }
    }
}

impl RateLimitHeaders {
    /// Reads nothing: answers' rate-limit headers are ignored.
    ///
    /// ```
    /// use polite_core::ratelimit::RateLimitHeaders;
    /// assert!(!RateLimitHeaders::OFF.ietf && !RateLimitHeaders::OFF.x_ratelimit);
    /// ```
    pub const OFF: RateLimitHeaders = RateLimitHeaders {
        ietf: false,
        x_ratelimit: false,
        max_pause: Duration::from_secs(300),
    };

    /// The same, with `X-RateLimit-*` read too.
    ///
    /// ```
    /// use polite_core::ratelimit::RateLimitHeaders;
    /// assert!(RateLimitHeaders::OFF.with_x_ratelimit().x_ratelimit);
    /// ```
    #[must_use]
    pub const fn with_x_ratelimit(mut self) -> Self {
        self.x_ratelimit = true;
        self
    }
}

/// A request quota: at most `limit` requests in any `window`.
///
/// ```
/// use polite_core::ratelimit::{Quota, parse_policy};
/// use std::time::Duration;
/// assert_eq!(parse_policy(br#""default";q=100;w=10"#),
///            Some(Quota { limit: 100, window: Duration::from_secs(10) }));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    /// Requests per window (at least 1).
    pub limit: u64,
    /// The window (at least 1 s).
    pub window: Duration,
}

/// What one `RateLimit` field says: the service limits, folded.
///
/// ```
/// use polite_core::ratelimit::{ServiceLimit, parse_ratelimit};
/// use std::time::Duration;
/// let s = parse_ratelimit(br#""default";r=0;t=50"#).unwrap();
/// assert_eq!(s, ServiceLimit { remaining: 0, reset: Some(Duration::from_secs(50)),
///                              pause: Some(Duration::from_secs(50)) });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ServiceLimit {
    /// The lowest available quota (`r`) among the members.
    pub remaining: u64,
    /// The effective window (`t`) of that member, if it gave one.
    pub reset: Option<Duration>,
    /// The longest `t` among the members with `r=0` (and `t > 0`): no
    /// quota is left until then.
    pub pause: Option<Duration>,
}

/// What an answer's rate-limit headers mean for pacing, as handed to
/// [`Pace::observe`](crate::Pace::observe). Read with [`RateLimitInfo::read`].
///
/// ```
/// use polite_core::Response;
/// use polite_core::ratelimit::{Quota, RateLimitHeaders, RateLimitInfo};
/// use std::time::{Duration, UNIX_EPOCH};
/// let r = Response::new(Default::default(), 200, UNIX_EPOCH)
///     .header("RateLimit-Policy", br#""default";q=10;w=1"#)
///     .header("RateLimit", br#""default";r=0;t=1"#);
/// let info = RateLimitInfo::read(&r, &RateLimitHeaders::default());
/// assert_eq!(info.quota, Some(Quota { limit: 10, window: Duration::from_secs(1) }));
/// assert_eq!(info.pause, Some(Duration::from_secs(1)));
/// assert_eq!(info.remaining, Some(0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RateLimitInfo {
    /// The request quota to size a throttle with (`RateLimit-Policy`).
    pub quota: Option<Quota>,
    /// The lowest remaining quota reported (`RateLimit` `r`, or
    /// `X-RateLimit-Remaining`).
    pub remaining: Option<u64>,
    /// `X-RateLimit-Limit`: a limit without a window; informative only.
    pub limit: Option<u64>,
    /// Hold every send for this long from the answer's arrival: no quota
    /// left until then. Clamped to [`RateLimitHeaders::max_pause`]; `None`
    /// when the answer's `Retry-After` is valid (it takes precedence).
    pub pause: Option<Duration>,
}

impl RateLimitInfo {
    /// Whether the headers said nothing usable.
    ///
    /// ```
    /// use polite_core::ratelimit::RateLimitInfo;
    /// assert!(RateLimitInfo::default().is_empty());
    /// ```
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.quota.is_none()
            && self.remaining.is_none()
            && self.limit.is_none()
            && self.pause.is_none()
    }

    /// Reads the rate-limit headers of `response` that `headers` enables
    /// (see the [module docs](self) for the rules). Never fails: what cannot
    /// be read is ignored.
    ///
    /// ```
    /// use polite_core::Response;
    /// use polite_core::ratelimit::{RateLimitHeaders, RateLimitInfo};
    /// use std::time::{Duration, UNIX_EPOCH};
    /// let wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    /// let r = Response::new(Default::default(), 200, wall)
    ///     .header("X-RateLimit-Remaining", b"0")
    ///     .header("X-RateLimit-Reset", b"1700000030"); // a Unix time: in 30 s
    /// // Off by default; on when the caller opts in.
    /// assert_eq!(RateLimitInfo::read(&r, &RateLimitHeaders::default()).pause, None);
    /// let on = RateLimitHeaders::default().with_x_ratelimit();
    /// assert_eq!(RateLimitInfo::read(&r, &on).pause, Some(Duration::from_secs(30)));
    /// ```
    #[must_use]
    pub fn read(response: &Response<'_>, headers: &RateLimitHeaders) -> RateLimitInfo {
        let f = &response.rate_limit;
        let mut info = RateLimitInfo::default();
        if f.is_empty() {
            return info;
        }
        if headers.ietf {
            info.quota = f.ratelimit_policy.and_then(parse_policy);
            if let Some(s) = f.ratelimit.and_then(parse_ratelimit) {
                info.remaining = Some(s.remaining);
                info.pause = s.pause;
            }
        }
        if headers.x_ratelimit {
            info.limit = f.x_ratelimit_limit.and_then(parse_count);
            let remaining = f.x_ratelimit_remaining.and_then(parse_count);
            if let Some(r) = remaining {
                info.remaining = Some(info.remaining.map_or(r, |x| x.min(r)));
            }
            if remaining == Some(0)
                && let Some(reset) = f
                    .x_ratelimit_reset
                    .and_then(|v| parse_x_reset(v, response.date, response.wall_clock))
                && !reset.is_zero()
            {
                info.pause = Some(info.pause.map_or(reset, |p| p.max(reset)));
            }
        }
        if info.pause.is_some()
            && response
                .retry_after
                .is_some_and(|v| RetryAfter::parse(v).is_ok())
        {
            info.pause = None;
        }
        info.pause = info.pause.map(|p| p.min(headers.max_pause));
        info
    }
}

/// The request quota a `RateLimit-Policy` value advertises, folded into one
/// sliding window (see the [module docs](self)); `None` when the field is
/// malformed or has no request quota with a window.
///
/// ```
/// use polite_core::ratelimit::{Quota, parse_policy};
/// use std::time::Duration;
/// let q = |limit, secs| Some(Quota { limit, window: Duration::from_secs(secs) });
/// assert_eq!(parse_policy(br#""permin";q=50;w=60,"perhr";q=1000;w=3600"#), q(16, 60));
/// assert_eq!(parse_policy(br#""peruser";q=65535;qu="content-bytes";w=10"#), None);
/// assert_eq!(parse_policy(b"garbage;;"), None);
/// ```
#[must_use]
pub fn parse_policy(value: &[u8]) -> Option<Quota> {
    // Pass 1: the shortest window.
    let mut shortest: Option<u64> = None;
    for_each_member(value, |m| {
        if let Some((_, w)) = m.request_quota() {
            shortest = Some(shortest.map_or(w, |s| s.min(w)));
        }
    })?;
    let base = shortest?;
    // Pass 2: the requests per `base` that keep within every policy, and
    // the slowest policy (the largest seconds per request) for the fallback.
    let mut limit = u64::MAX;
    let mut slowest: Option<(u64, u64)> = None;
    for_each_member(value, |m| {
        if let Some((q, w)) = m.request_quota() {
            limit = limit.min(q / w.div_ceil(base));
            // w/q > sw/sq  <=>  w*sq > sw*q
            if slowest.is_none_or(|(sq, sw)| {
                u128::from(w) * u128::from(sq) > u128::from(sw) * u128::from(q)
            }) {
                slowest = Some((q, w));
            }
        }
    })?;
    if limit >= 1 {
        return Some(Quota {
            limit,
            window: Duration::from_secs(base),
        });
    }
    let (q, w) = slowest?;
    Some(Quota {
        limit: 1,
        window: Duration::from_secs(w.div_ceil(q)),
    })
}

/// The service limits a `RateLimit` value reports, folded (see
/// [`ServiceLimit`]); `None` when the field is malformed or has no valid
/// member.
///
/// ```
/// use polite_core::ratelimit::parse_ratelimit;
/// use std::time::Duration;
/// let s = parse_ratelimit(br#""default";r=50;t=30"#).unwrap();
/// assert_eq!((s.remaining, s.reset, s.pause), (50, Some(Duration::from_secs(30)), None));
/// assert_eq!(parse_ratelimit(br#""default";r=-1;t=30"#), None);
/// ```
#[must_use]
pub fn parse_ratelimit(value: &[u8]) -> Option<ServiceLimit> {
    let mut out: Option<ServiceLimit> = None;
    for_each_member(value, |m| {
        if !m.named {
            return;
        }
        let Param::Value(r) = m.r else { return };
        let t = match m.t {
            Param::Absent => None,
            Param::Value(t) => Some(Duration::from_secs(t)),
            Param::Bad => return,
        };
        let s = out.get_or_insert(ServiceLimit {
            remaining: r,
            reset: t,
            pause: None,
        });
        if r < s.remaining {
            s.remaining = r;
            s.reset = t;
        }
        if r == 0
            && let Some(t) = t
            && !t.is_zero()
        {
            s.pause = Some(s.pause.map_or(t, |p| p.max(t)));
        }
    })?;
    out
}

/// An `X-RateLimit-Limit` / `X-RateLimit-Remaining` value: ASCII digits
/// (surrounding whitespace trimmed); `None` otherwise or on overflow.
///
/// ```
/// use polite_core::ratelimit::parse_count;
/// assert_eq!(parse_count(b" 42 "), Some(42));
/// assert_eq!(parse_count(b"-1"), None);
/// assert_eq!(parse_count(b"99999999999999999999999"), None);
/// ```
#[must_use]
pub fn parse_count(value: &[u8]) -> Option<u64> {
    digits(value.trim_ascii())
}

/// An `X-RateLimit-Reset` value as a delay from the answer's arrival,
/// deciding by magnitude between seconds from now (below 10^9), a Unix
/// time in seconds (below 10^12) and a Unix time in milliseconds; see the
/// [module docs](self). A Unix time is measured against the `date` header
/// when valid, else against `wall`; a past time gives zero.
///
/// ```
/// use polite_core::ratelimit::parse_x_reset;
/// use std::time::{Duration, UNIX_EPOCH};
/// let wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// assert_eq!(parse_x_reset(b"30", None, wall), Some(Duration::from_secs(30)));
/// assert_eq!(parse_x_reset(b"1700000030", None, wall), Some(Duration::from_secs(30)));
/// assert_eq!(parse_x_reset(b"1700000030500", None, wall), Some(Duration::from_millis(30_500)));
/// assert_eq!(parse_x_reset(b"1.5", None, wall), Some(Duration::from_millis(1500)));
/// assert_eq!(parse_x_reset(b"1600000000", None, wall), Some(Duration::ZERO)); // past
/// assert_eq!(parse_x_reset(b"soon", None, wall), None);
/// ```
#[must_use]
pub fn parse_x_reset(value: &[u8], date: Option<&[u8]>, wall: SystemTime) -> Option<Duration> {
    const UNIX_SECONDS: u64 = 1_000_000_000;
    const UNIX_MILLIS: u64 = 1_000_000_000_000;
    let v = value.trim_ascii();
    let (whole, frac) = match v.iter().position(|&b| b == b'.') {
        Some(i) => (&v[..i], Some(&v[i + 1..])),
        None => (v, None),
    };
    let secs = digits(whole)?;
    let nanos = match frac {
        None => 0,
        Some(f) if f.is_empty() || f.len() > 9 => return None,
        Some(f) => {
            let n = u32::try_from(digits(f)?).ok()?;
            n * 10u32.pow(9 - f.len() as u32)
        }
    };
    let at = if secs < UNIX_SECONDS {
        return Some(Duration::new(secs, nanos));
    } else if secs < UNIX_MILLIS {
        UNIX_EPOCH.checked_add(Duration::new(secs, nanos))?
    } else {
        UNIX_EPOCH.checked_add(Duration::from_millis(secs))?
    };
    Some(RetryAfter::At(at).delay(date, wall))
}

/// ASCII digits to `u64`: `None` when empty, longer than 20 digits, not
/// all digits, or overflowing.
pub(crate) fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

/// A parameter as read: absent, present but invalid, or a valid value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Param {
    #[default]
    Absent,
    Bad,
    Value(u64),
}

/// The quota unit (`qu`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Unit {
    #[default]
    Absent,
    Requests,
    Other,
}

/// One List member, reduced to the parameters we read.
#[derive(Clone, Copy, Debug, Default)]
struct Member {
    /// The value is a String or Token (a policy name).
    named: bool,
    q: Param,
    w: Param,
    r: Param,
    t: Param,
    unit: Unit,
}

impl Member {
    fn set(&mut self, key: &str, value: &BareItemFromInput<'_>) {
        let int = |min: i64| match value {
            BareItemFromInput::Integer(i) => {
                let i = i64::from(*i);
                if i >= min {
                    Param::Value(i.unsigned_abs())
                } else {
                    Param::Bad
                }
            }
            _ => Param::Bad,
        };
        match key {
            "q" => self.q = int(0),
            "w" => self.w = int(1),
            "r" => self.r = int(0),
            "t" => self.t = int(0),
            "qu" => {
                self.unit = match value {
                    BareItemFromInput::String(s)
                        if matches!(s.as_str(), "requests" | "request") =>
                    {
                        Unit::Requests
                    }
                    _ => Unit::Other,
                };
            }
            _ => {}
        }
    }

    /// `(q, w)` when this member is a usable request quota.
    fn request_quota(&self) -> Option<(u64, u64)> {
        match (self.named, self.q, self.w, self.unit) {
            (true, Param::Value(q), Param::Value(w), Unit::Absent | Unit::Requests) if q >= 1 => {
                Some((q, w))
            }
            _ => None,
        }
    }
}

/// Calls `f` for every Item member of the List `value`; `None` when the
/// value is not a valid List (then what `f` saw must be discarded: the
/// visitor runs before the whole input is validated) or too long.
fn for_each_member(value: &[u8], f: impl FnMut(&Member)) -> Option<()> {
    if value.len() > MAX_FIELD_LEN {
        return None;
    }
    Parser::new(value).parse_list_with_visitor(Members(f)).ok()
}

struct Members<F>(F);

impl<'de, F: FnMut(&Member)> ListVisitor<'de> for Members<F> {
    type Out = ();
    type Error = Infallible;

    fn entry(&mut self) -> Result<impl EntryVisitor<'de>, Self::Error> {
        Ok(Entry(&mut self.0))
    }

    fn finish(self) -> Result<Self::Out, Self::Error> {
        Ok(())
    }
}

struct Entry<'f, F>(&'f mut F);

impl<'de, F: FnMut(&Member)> EntryVisitor<'de> for Entry<'_, F> {
    type Error = Infallible;

    fn item(self) -> Result<impl ItemVisitor<'de>, Self::Error> {
        Ok(ItemOf(self.0))
    }

    fn inner_list(self) -> Result<impl InnerListVisitor<'de>, Self::Error> {
        // Not a policy or a service limit; still validated by the parser.
        Ok(Ignored)
    }
}

struct ItemOf<'f, F>(&'f mut F);

impl<'de, F: FnMut(&Member)> ItemVisitor<'de> for ItemOf<'_, F> {
    type Out = ();
    type Error = Infallible;

    fn bare_item(
        self,
        bare_item: BareItemFromInput<'de>,
    ) -> Result<impl ParameterVisitor<'de, Out = Self::Out>, Self::Error> {
        let named = matches!(
            bare_item,
            BareItemFromInput::String(_) | BareItemFromInput::Token(_)
        );
        Ok(Params {
            f: self.0,
            member: Member {
                named,
                ..Member::default()
            },
        })
    }
}

struct Params<'f, F> {
    f: &'f mut F,
    member: Member,
}

impl<'de, F: FnMut(&Member)> ParameterVisitor<'de> for Params<'_, F> {
    type Out = ();
    type Error = Infallible;

    fn parameter(
        &mut self,
        key: &'de KeyRef,
        value: BareItemFromInput<'de>,
    ) -> Result<(), Self::Error> {
        self.member.set(key.as_str(), &value);
        Ok(())
    }

    fn finish(self) -> Result<Self::Out, Self::Error> {
        (self.f)(&self.member);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn quota(limit: u64, secs: u64) -> Option<Quota> {
        Some(Quota {
            limit,
            window: Duration::from_secs(secs),
        })
    }

    #[test]
    fn policy_folding() {
        assert_eq!(parse_policy(br#""default";q=100;w=10"#), quota(100, 10));
        // Token names (draft -08) are accepted too.
        assert_eq!(parse_policy(b"default;q=100;w=10"), quota(100, 10));
        // 50/min and 1000/h: 16 per minute keeps both.
        assert_eq!(
            parse_policy(br#""permin";q=50;w=60,"perhr";q=1000;w=3600"#),
            quota(16, 60)
        );
        // A window that is not a multiple: 90 per 90 s over a 60 s base
        // counts two base windows: 45 per 60 s.
        assert_eq!(parse_policy(br#"a;q=100;w=60, b;q=90;w=90"#), quota(45, 60));
        // 1 per hour with 10 per minute: the fallback, 1 per 3600 s.
        assert_eq!(
            parse_policy(br#"a;q=10;w=60, b;q=1;w=3600"#),
            quota(1, 3600)
        );
        // 7 per 20 s and 1 per 60 s (fewer than its 3 short windows):
        // 1 per 60 s.
        assert_eq!(parse_policy(br#"a;q=7;w=20, b;q=1;w=60"#), quota(1, 60));
        // 3 per 10 s alone: 3 per 10 s (not the fallback).
        assert_eq!(parse_policy(br#"a;q=3;w=10"#), quota(3, 10));
    }

    #[test]
    fn unusable_policy_members() {
        for v in [
            &br#""a";q=0;w=10"#[..],
            br#""a";q=10"#,
            br#""a";w=10"#,
            br#""a";q=10;w=0"#,
            br#""a";q=-10;w=10"#,
            br#""a";q=10.5;w=10"#,
            br#""a";q=10;w=10;qu="concurrent-requests""#,
            br#""a";q=10;w=10;qu=requests"#, // a token, not a String
            br#"10;w=1"#,                    // draft -07 form
            br#"("a" "b");q=10;w=1"#,
            br#"?1;q=10;w=1"#,
        ] {
            assert_eq!(parse_policy(v), None, "{}", String::from_utf8_lossy(v));
        }
        // A bad member does not spoil a good one.
        assert_eq!(parse_policy(br#""a";q=-1;w=1, "b";q=5;w=1"#), quota(5, 1));
        // A repeated parameter takes its last value.
        assert_eq!(parse_policy(br#""a";q=-1;q=20;w=1"#), quota(20, 1));
        assert_eq!(parse_policy(br#""a";q=20;q=-1;w=1"#), None);
    }

    #[test]
    fn service_limits() {
        let s = parse_ratelimit(br#""a";r=5;t=9, "b";r=0;t=3, "c";r=0;t=7, "d";r=0"#).unwrap();
        assert_eq!(
            s,
            ServiceLimit {
                remaining: 0,
                reset: Some(3 * S),
                pause: Some(7 * S)
            }
        );
        assert_eq!(parse_ratelimit(br#""a";r=0;t=0"#).unwrap().pause, None);
        assert_eq!(parse_ratelimit(br#""a";t=5"#), None);
        assert_eq!(parse_ratelimit(br#""a";r=0;t=-5"#), None);
        assert_eq!(parse_ratelimit(b""), None);
    }

    #[test]
    fn x_reset_magnitudes() {
        let wall = UNIX_EPOCH + 1_700_000_000 * S;
        assert_eq!(
            parse_x_reset(b"999999999", None, wall),
            Some(999_999_999 * S)
        );
        assert_eq!(
            parse_x_reset(b"1000000000", None, wall),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_x_reset(b"1700000001.25", None, wall),
            Some(Duration::from_millis(1250))
        );
        assert_eq!(parse_x_reset(b"1.", None, wall), None);
        assert_eq!(parse_x_reset(b".5", None, wall), None);
        assert_eq!(parse_x_reset(b"1.1234567890", None, wall), None);
        // u64::MAX milliseconds since 1970: far in the future (the pause is
        // clamped later, by `RateLimitInfo::read`).
        assert!(parse_x_reset(b"18446744073709551615", None, wall).unwrap() > 1_000_000_000 * S);
        // Against the Date header: 1700000000 is Tue, 14 Nov 2023 22:13:20 GMT.
        let date = b"Tue, 14 Nov 2023 22:13:10 GMT";
        assert_eq!(parse_x_reset(b"1700000000", Some(date), wall), Some(10 * S));
    }
}
