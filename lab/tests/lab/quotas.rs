//! Quotas refuse exactly as configured; Retry-After styles; rate-limit headers.

use std::time::{Duration, SystemTime};

use polite_lab::{Lab, LabConfig, LabHandle, LogStats, PathMatch, Quota, RetryAfterStyle};

use crate::common::{Reply, get, ms, secs, sleep_until};

fn burst(lab: &LabHandle, path: &str, n: usize) -> Vec<u16> {
    (0..n).map(|_| get(&lab.url(path)).status).collect()
}

#[test]
fn fixed_window_refuses_over_the_limit_and_resets_at_the_boundary() {
    let lab = Lab::start(LabConfig::default().quota(Quota::fixed(3, secs(1)))).unwrap();
    assert_eq!(burst(&lab, "/items/a", 5), [200, 200, 200, 429, 429]);
    // The burst must have stayed inside the first window for the check to mean anything.
    assert!(lab.log()[4].arrived_offset < ms(1000));
    sleep_until(lab.started_at() + ms(1020));
    assert_eq!(burst(&lab, "/items/a", 4), [200, 200, 200, 429]);
    assert!(lab.log()[8].arrived_offset < ms(2000));
    assert_eq!(lab.log().count_429(), 3);
}

#[test]
fn sliding_window_frees_only_as_requests_age_out() {
    let lab = Lab::start(LabConfig::default().quota(Quota::sliding(2, ms(600)))).unwrap();
    assert_eq!(burst(&lab, "/items/a", 1), [200]);
    let first = lab.log()[0].arrived;
    sleep_until(first + ms(300));
    assert_eq!(burst(&lab, "/items/a", 2), [200, 429]);
    let second = lab.log()[1].arrived;
    // After the first ages out but before the second does: room for exactly one.
    // (A fixed window would have reset here and allowed both.)
    sleep_until(first + ms(620));
    assert_eq!(burst(&lab, "/items/a", 2), [200, 429]);
    assert!(
        lab.log()[4].arrived < second + ms(600),
        "too slow to be meaningful"
    );
}

#[test]
fn refused_requests_count_only_when_configured() {
    let run = |count: bool| {
        let lab = Lab::start(
            LabConfig::default()
                .quota(Quota::sliding(1, ms(500)))
                .count_refused(count),
        )
        .unwrap();
        let mut statuses = burst(&lab, "/items/a", 1);
        let first = lab.log()[0].arrived;
        sleep_until(first + ms(250));
        statuses.extend(burst(&lab, "/items/a", 1));
        sleep_until(first + ms(520));
        statuses.extend(burst(&lab, "/items/a", 1));
        assert!(lab.log()[2].arrived < lab.log()[1].arrived + ms(500));
        statuses
    };
    let not_counted = std::thread::spawn(move || run(false));
    assert_eq!(run(true), [200, 429, 429]);
    assert_eq!(not_counted.join().unwrap(), [200, 429, 200]);
}

#[test]
fn quota_scope_is_by_path() {
    let lab = Lab::start(
        LabConfig::default()
            .quota(Quota::fixed(1, secs(60)).on(PathMatch::prefix("/items/")))
            .quota(Quota::fixed(1, secs(60)).on(PathMatch::exact("/runs"))),
    )
    .unwrap();
    // One budget shared by every item.
    assert_eq!(burst(&lab, "/items/a", 1), [200]);
    assert_eq!(burst(&lab, "/items/b", 1), [429]);
    // Other paths are not limited by it.
    assert_eq!(burst(&lab, "/runs/none", 3), [404, 404, 404]);
}

/// A lab with a 1-per-3 s quota and `style`; returns the 429.
fn refused_with(style: RetryAfterStyle) -> Reply {
    let lab = Lab::start(
        LabConfig::default()
            .quota(Quota::fixed(1, secs(3)))
            .retry_after_style(style),
    )
    .unwrap();
    assert_eq!(get(&lab.url("/items/a")).status, 200);
    let refused = get(&lab.url("/items/a"));
    assert_eq!(refused.status, 429);
    assert_eq!(refused.json()["code"], "RATE_LIMITED");
    assert!(
        lab.log()[1].arrived_offset < ms(900),
        "too slow to be meaningful"
    );
    refused
}

/// Retry-After as a date, minus the response's own Date.
fn date_delay(reply: &Reply) -> Duration {
    let date = httpdate::parse_http_date(reply.header("date").unwrap()).unwrap();
    let at = httpdate::parse_http_date(reply.header("retry-after").unwrap()).unwrap();
    at.duration_since(date).unwrap()
}

#[test]
fn retry_after_is_the_true_wait_in_every_style() {
    let styles = RetryAfterStyle::ALL;
    let replies: Vec<(RetryAfterStyle, Reply)> = std::thread::scope(|s| {
        let handles: Vec<_> = styles
            .iter()
            .map(|&style| s.spawn(move || (style, refused_with(style))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (style, reply) in &replies {
        let value = reply.header("retry-after");
        match style {
            // 3 s window, refused well inside its first second: ceil(> 2 s) = 3.
            RetryAfterStyle::DeltaSeconds => assert_eq!(value, Some("3")),
            RetryAfterStyle::ImfFixdate => {
                let v = value.unwrap();
                assert!(
                    v.ends_with(" GMT") && v.len() == 29 && v.as_bytes()[3] == b',',
                    "{v}"
                );
                assert_eq!(date_delay(reply), secs(3), "{v}");
            }
            RetryAfterStyle::Rfc850 => {
                let v = value.unwrap();
                let (weekday, rest) = v.split_once(", ").unwrap();
                assert!(
                    weekday.ends_with("day")
                        && rest.as_bytes()[2] == b'-'
                        && rest.ends_with(" GMT"),
                    "{v}"
                );
                assert_eq!(date_delay(reply), secs(3), "{v}");
            }
            RetryAfterStyle::Asctime => {
                let v = value.unwrap();
                assert!(
                    !v.contains("GMT") && !v.contains(',') && v.len() == 24,
                    "{v}"
                );
                assert_eq!(date_delay(reply), secs(3), "{v}");
            }
            RetryAfterStyle::Invalid => {
                let v = value.unwrap();
                assert!(
                    v.parse::<u64>().is_err() && httpdate::parse_http_date(v).is_err(),
                    "{v}"
                );
            }
            RetryAfterStyle::Hostile => assert_eq!(value, Some("86400")),
            RetryAfterStyle::Omitted => assert_eq!(value, None),
        }
    }
}

#[test]
fn retry_after_date_is_close_to_the_real_clock_without_skew() {
    let reply = refused_with(RetryAfterStyle::ImfFixdate);
    let at = httpdate::parse_http_date(reply.header("retry-after").unwrap()).unwrap();
    let ahead = at.duration_since(SystemTime::now()).unwrap_or_default();
    assert!(ahead > ms(1000) && ahead <= secs(3), "{ahead:?}");
}

#[test]
fn a_fixed_retry_after_overrides_the_true_wait() {
    let lab = Lab::start(
        LabConfig::default()
            .quota(Quota::fixed(1, secs(60)))
            .fixed_retry_after(secs(7)),
    )
    .unwrap();
    get(&lab.url("/items/a"));
    assert_eq!(get(&lab.url("/items/a")).header("retry-after"), Some("7"));
}

#[test]
fn retry_after_is_at_least_one_second() {
    let lab = Lab::start(LabConfig::default().quota(Quota::sliding(1, ms(200)))).unwrap();
    get(&lab.url("/items/a"));
    let refused = get(&lab.url("/items/a"));
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("retry-after"), Some("1"));
}

#[test]
fn rate_limit_headers_are_on_every_response_of_a_quotad_path() {
    let lab = Lab::start(
        LabConfig::default()
            .quota(
                Quota::fixed(2, secs(10))
                    .on(PathMatch::prefix("/items/"))
                    .named("api"),
            )
            .ratelimit_headers(true)
            .x_ratelimit_headers(true),
    )
    .unwrap();
    let replies: Vec<Reply> = (0..3).map(|_| get(&lab.url("/items/a"))).collect();
    assert!(
        lab.log()[2].arrived_offset < ms(900),
        "too slow to be meaningful"
    );
    for (i, (reply, remaining)) in replies.iter().zip([1, 0, 0]).enumerate() {
        assert_eq!(reply.status, if i < 2 { 200 } else { 429 });
        assert_eq!(reply.header("ratelimit-policy"), Some("\"api\";q=2;w=10"));
        assert_eq!(
            reply.header("ratelimit"),
            Some(format!("\"api\";r={remaining};t=10").as_str())
        );
        assert_eq!(reply.header("x-ratelimit-limit"), Some("2"));
        assert_eq!(
            reply.header("x-ratelimit-remaining"),
            Some(remaining.to_string().as_str())
        );
        assert_eq!(reply.header("x-ratelimit-reset"), Some("10"));
    }
    assert_eq!(replies[2].header("retry-after"), Some("10"));
    // A path outside the quota carries none.
    let other = get(&lab.url("/runs/none"));
    assert!(other.header("ratelimit").is_none() && other.header("x-ratelimit-limit").is_none());
}

#[test]
fn rate_limit_headers_are_off_by_default() {
    let lab = Lab::start(LabConfig::default().quota(Quota::fixed(2, secs(10)))).unwrap();
    let reply = get(&lab.url("/items/a"));
    assert!(reply.header("ratelimit").is_none() && reply.header("x-ratelimit-remaining").is_none());
}
