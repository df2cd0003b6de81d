//! What a pace hears back from the answers, the same for
//! [`Paced`](crate::Paced) and [`BatchMachine`](crate::BatchMachine): the
//! rate-limit headers ([`observe_rate_limit`]), a rate-limited answer's
//! `Retry-After` as a shared cool-down ([`cool_down_after`]), and how each
//! answered attempt was classed ([`after_answer`]).

use std::time::Instant;

use crate::adaptive::Answered;
use crate::input::{Response, RetryClass};
use crate::policy::RetryAfterLimits;
use crate::ratelimit::{RateLimitHeaders, RateLimitInfo};
use crate::record::AttemptRecord;
use crate::retry_after;

use super::Pace;

/// Reads the rate-limit headers of `response` that `headers` enables and
/// hands what they say to `pace`. Costs a few `Option` checks when the
/// answer has none. Returns whether the pace was told anything (a caller
/// caching a refusal then asks again).
pub(crate) fn observe_rate_limit<P: Pace + ?Sized>(
    pace: &mut P,
    headers: &RateLimitHeaders,
    now: Instant,
    response: &Response<'_>,
) -> bool {
    if response.rate_limit.is_empty() {
        return false;
    }
    let info = RateLimitInfo::read(response, headers);
    if info.quota.is_none() && info.pause.is_none() {
        return false;
    }
    pace.observe(now, &info);
    true
}

/// The shared cool-down after a rate-limited answer: when `rate_limited`
/// and the answer carries a valid `Retry-After`, every request sharing
/// `pace` waits until `now + delay`, the delay clamped to
/// `[limits.min, limits.max]` (a hostile `Retry-After: 86400` must not
/// stall everyone for a day).
pub(crate) fn cool_down_after<P: Pace + ?Sized>(
    pace: &mut P,
    limits: &RetryAfterLimits,
    now: Instant,
    rate_limited: bool,
    response: &Response<'_>,
) -> bool {
    if !rate_limited {
        return false;
    }
    let Some(value) = response.retry_after else {
        return false;
    };
    if let Ok(d) = retry_after::server_delay(value, response.date, response.wall_clock)
        && let Some(until) = now.checked_add(d.clamp(limits.min, limits.max))
    {
        pace.cool_down(until);
        return true;
    }
    false
}

/// What a pace learns from one answered attempt, the same for [`Paced`]
/// and [`BatchMachine`](crate::BatchMachine) (SPEC §4.1), decided by the
/// attempt's class — the retry policy's or the caller's classifier's, not
/// a fixed status:
///
/// * a rate-limited answer with a valid `Retry-After` cools the pace down
///   until the server's time (clamped to `limits`): the server said when,
///   and that is obeyed, not guessed at;
/// * a rate-limited answer **without** a server time cools it down until
///   the item's own computed backoff ends (`record.next`), so everything
///   sharing the pace slows down, not only the refused item, and feeds
///   [`Pace::on_answer`] as a throttle (the adaptive rate is cut);
/// * every other answer feeds [`Pace::on_answer`] as a success.
pub(crate) fn after_answer<P: Pace + ?Sized>(
    pace: &mut P,
    limits: &RetryAfterLimits,
    sent: Instant,
    now: Instant,
    response: Option<&Response<'_>>,
    record: &AttemptRecord,
) {
    if record.class != Some(RetryClass::RateLimited) {
        pace.on_answer(Answered::new(sent, now, false));
        return;
    }
    if let Some(r) = response
        && cool_down_after(pace, limits, now, true, r)
    {
        return;
    }
    pace.on_answer(Answered::new(sent, now, true));
    if let Some(next) = record.next
        && next.send_at > now
    {
        pace.cool_down(next.send_at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RateThrottle;
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    /// An arbitrary start for virtual time, read once (unit tests inside
    /// the crate cannot use `polite_testing::origin`: that crate sees
    /// another copy of this one).
    fn t0() -> Instant {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        #[allow(clippy::disallowed_methods)] // the one clock read: an arbitrary origin
        *ORIGIN.get_or_init(Instant::now)
    }

    fn throttle(limit: u32, window_ms: u32) -> RateThrottle {
        RateThrottle::new(limit, window_ms * MS).unwrap()
    }

    #[test]
    fn cool_down_clamps_the_server_delay() {
        let t0 = t0();
        let wall = std::time::UNIX_EPOCH;
        let limits = RetryAfterLimits::default();
        let mut t = throttle(10, 1000);
        let r = Response::new(crate::SendId::default(), 429, wall).retry_after(b"86400");
        cool_down_after(&mut t, &limits, t0, true, &r);
        assert_eq!(t.cooling_until(), Some(t0 + limits.max));
        let mut t = throttle(10, 1000);
        let r = Response::new(crate::SendId::default(), 429, wall).retry_after(b"0");
        cool_down_after(&mut t, &limits, t0, true, &r);
        assert_eq!(t.cooling_until(), Some(t0 + limits.min));
        // Invalid header, or not rate limited: no cool-down.
        let mut t = throttle(10, 1000);
        let r = Response::new(crate::SendId::default(), 429, wall).retry_after(b"1.5");
        cool_down_after(&mut t, &limits, t0, true, &r);
        let r = Response::new(crate::SendId::default(), 503, wall).retry_after(b"5");
        cool_down_after(&mut t, &limits, t0, false, &r);
        assert_eq!(t.cooling_until(), None);
    }
}
