//! Server-informed pacing through the public API: the IETF `RateLimit` /
//! `RateLimit-Policy` fields and `X-RateLimit-*` (well-formed, the draft's
//! own examples, and malformed: garbage, duplicated members, huge and
//! negative numbers), each with the pacing decision it leads to; the
//! learning throttle; the headers reaching the pace through `Paced`,
//! `BatchMachine` and the drive loop; and a virtual-time server that
//! advertises its quota only through these headers.
#![allow(clippy::field_reassign_with_default)] // policies are spelled as deltas from the default

use std::cell::{Cell, RefCell};
use std::future::{Ready, ready};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use polite_core::drive::{self, Answer, Io, NoJobs};
use polite_core::pace::Unpaced;
use polite_core::ratelimit::{
    Quota, RateLimitFields, RateLimitHeaders, RateLimitInfo, parse_policy, parse_ratelimit,
};
use polite_core::{
    Action, BatchMachine, BatchPolicy, Event, Method, Outcome, Pace, Paced, RateThrottle,
    RequestId, RequestInfo, Response, RetryMachine, RetryPolicy, SendId, SendPlan, SplitMix64,
    TransportErrorKind,
};
use polite_testing::{BatchChecker, Scripted, Simulator, origin};
use proptest::prelude::*;

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);
const WALL: SystemTime = UNIX_EPOCH;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ---------------------------------------------------------------------------
// From header values to a pacing decision
// ---------------------------------------------------------------------------

/// What a fresh throttle does at `t0` right after observing an answer with
/// these headers at `t0` (margin zero, so the numbers are the server's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pacing {
    /// Sends go at once, without limit (nothing learnt).
    Unlimited,
    /// Every send held until `t0 + d` (no quota left until then).
    Paused(Duration),
    /// `burst` sends at once, then held until `t0 + then`.
    Limited { burst: u32, then: Duration },
}

fn info_of(headers: &[(&str, &str)], rules: &RateLimitHeaders) -> RateLimitInfo {
    let mut r = Response::new(SendId::default(), 200, WALL);
    for (name, value) in headers {
        r = r.header(name, value.as_bytes());
    }
    RateLimitInfo::read(&r, rules)
}

/// The decision of a learning throttle (at most 1000 per window).
fn pacing(info: &RateLimitInfo) -> Pacing {
    let t0 = origin();
    let mut t = RateThrottle::learning(1000)
        .unwrap()
        .with_margin(Duration::ZERO);
    t.observe(t0, info);
    let mut burst = 0;
    loop {
        match t.acquire(t0) {
            Ok(()) if burst >= 1000 => return Pacing::Unlimited,
            Ok(()) => burst += 1,
            Err(at) if burst == 0 => return Pacing::Paused(at - t0),
            Err(at) => {
                return Pacing::Limited {
                    burst,
                    then: at - t0,
                };
            }
        }
    }
}

fn limited(burst: u32, then: u64) -> Pacing {
    Pacing::Limited {
        burst,
        then: secs(then),
    }
}

#[test]
fn the_drafts_own_examples() {
    let ietf = RateLimitHeaders::default();
    // (headers, quota, remaining, pause, decision)
    type Row = (
        &'static [(&'static str, &'static str)],
        Option<(u64, u64)>,
        Option<u64>,
        Option<u64>,
        Pacing,
    );
    let rows: &[Row] = &[
        // §3: "burst";q=100;w=60,"daily";q=1000;w=86400: 1000 a day over
        // 1440 minutes is under one a minute: one per 87 s.
        (
            &[(
                "RateLimit-Policy",
                r#""burst";q=100;w=60,"daily";q=1000;w=86400"#,
            )],
            Some((1, 87)),
            None,
            None,
            limited(1, 87),
        ),
        // §3.2
        (
            &[("RateLimit-Policy", r#""default";q=100;w=10"#)],
            Some((100, 10)),
            None,
            None,
            limited(100, 10),
        ),
        (
            &[(
                "RateLimit-Policy",
                r#""permin";q=50;w=60,"perhr";q=1000;w=3600"#,
            )],
            Some((16, 60)),
            None,
            None,
            limited(16, 60),
        ),
        (
            &[(
                "RateLimit-Policy",
                r#""peruser";q=100;w=60;pk=:cHsdsRa894==:"#,
            )],
            Some((100, 60)),
            None,
            None,
            limited(100, 60),
        ),
        // Bytes, not requests: not a request rate.
        (
            &[(
                "RateLimit-Policy",
                r#""peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:"#,
            )],
            None,
            None,
            None,
            Pacing::Unlimited,
        ),
        // §4.2
        (
            &[("RateLimit", r#""default";r=50;t=30"#)],
            None,
            Some(50),
            None,
            Pacing::Unlimited,
        ),
        (
            &[("RateLimit", r#""default";r=999;pk=:dHJpYWwxMjEzMjM=:"#)],
            None,
            Some(999),
            None,
            Pacing::Unlimited,
        ),
        (
            &[(
                "RateLimit",
                r#""default";r=300000000;t=60;pk=:QXBwLTk5OQ==:"#,
            )],
            None,
            Some(300_000_000),
            None,
            Pacing::Unlimited,
        ),
        // §6: a redirect saying "nothing left for 10 s".
        (
            &[("RateLimit", r#""problemPolicy";r=0;t=10"#)],
            None,
            Some(0),
            Some(10),
            Pacing::Paused(secs(10)),
        ),
        // §7
        (
            &[("RateLimit", r#""default";r=1;t=7"#)],
            None,
            Some(1),
            None,
            Pacing::Unlimited,
        ),
        // §8.5: the policy rules the rate, not r/t.
        (
            &[
                ("RateLimit-Policy", r#""somepolicy";q=10000;w=1000"#),
                ("RateLimit", r#""somepolicy";r=10000;t=10"#),
            ],
            Some((10_000, 1000)),
            Some(10_000),
            None,
            limited(1000, 1000), // the learning throttle's ring holds 1000
        ),
        // B.1.1: quota exhausted for the next 50 seconds.
        (
            &[("RateLimit", r#""default";r=0;t=50"#)],
            None,
            Some(0),
            Some(50),
            Pacing::Paused(secs(50)),
        ),
        // B.1.2
        (
            &[("RateLimit", r#""dayLimit";r=100;t=36000"#)],
            None,
            Some(100),
            None,
            Pacing::Unlimited,
        ),
        // B.1.3
        (
            &[
                ("RateLimit-Policy", r#""basic";q=100;w=60"#),
                ("RateLimit", r#""basic";r=20;t=56"#),
            ],
            Some((100, 60)),
            Some(20),
            None,
            limited(100, 60),
        ),
        // B.2.1 (fields in the other order)
        (
            &[
                ("RateLimit", r#""fixedwindow";r=99;t=50"#),
                ("RateLimit-Policy", r#""fixedwindow";q=100;w=60"#),
            ],
            Some((100, 60)),
            Some(99),
            None,
            limited(100, 60),
        ),
        // B.2.3: pushed back for 20 s, then 15 per 20 s.
        (
            &[
                ("RateLimit-Policy", r#""dynamic";q=15;w=20"#),
                ("RateLimit", r#""dynamic";r=0;t=20"#),
            ],
            Some((15, 20)),
            Some(0),
            Some(20),
            Pacing::Paused(secs(20)),
        ),
        // B.3.1: 1000 an hour and 5000 a day: 208 an hour keeps both
        // (208 × 24 = 4992).
        (
            &[
                (
                    "RateLimit-Policy",
                    r#""hour";q=1000;w=3600, "day";q=5000;w=86400"#,
                ),
                ("RateLimit", r#""day";r=100;t=36000"#),
            ],
            Some((208, 3600)),
            Some(100),
            None,
            limited(208, 3600),
        ),
        // FAQ: the simplest form.
        (
            &[("RateLimit", r#""default";r=50;t=60"#)],
            None,
            Some(50),
            None,
            Pacing::Unlimited,
        ),
        // "RateLimit header fields currently used on the web": q on a
        // service limit is a comment there.
        (
            &[
                ("RateLimit-Policy", r#""sliding";q=12;w=1"#),
                ("RateLimit", r#""sliding";q=12;r=6;t=1"#),
            ],
            Some((12, 1)),
            Some(6),
            None,
            limited(12, 1),
        ),
    ];
    for (i, (headers, quota, remaining, pause, decision)) in rows.iter().enumerate() {
        let info = info_of(headers, &ietf);
        let want_quota = quota.map(|(limit, w)| Quota {
            limit,
            window: secs(w),
        });
        assert_eq!(info.quota, want_quota, "row {i}: {headers:?}");
        assert_eq!(info.remaining, *remaining, "row {i}: {headers:?}");
        assert_eq!(info.pause, pause.map(secs), "row {i}: {headers:?}");
        assert_eq!(pacing(&info), *decision, "row {i}: {headers:?}");
    }
}

#[test]
fn malformed_fields_are_ignored() {
    let ietf = RateLimitHeaders::default();
    let cases: &[(&str, &str)] = &[
        // garbage
        ("RateLimit", ""),
        ("RateLimit", "   "),
        ("RateLimit", "garbage;;"),
        ("RateLimit", "\u{1F600}"),
        ("RateLimit", r#""unterminated;r=0;t=5"#),
        ("RateLimit", r#""a";r=0;t=5,"#), // trailing comma
        ("RateLimit", r#""a";r=0;t=5 junk"#),
        ("RateLimit", r#""a";r=0;t=5;"#),
        ("RateLimit-Policy", r#""a";q=10;w=1;"#),
        ("RateLimit-Policy", "limit=10, remaining=0, reset=5"), // draft -07 dictionary
        ("RateLimit", "limit=10, remaining=0, reset=5"),
        // the older Integer-valued form
        ("RateLimit-Policy", "10;w=1"),
        ("RateLimit", "0;t=5"),
        // an inner list as a member
        ("RateLimit", r#"("a" "b");r=0;t=5"#),
        // negative and decimal numbers, wrong types
        ("RateLimit", r#""a";r=-1;t=5"#),
        ("RateLimit", r#""a";r=0;t=-5"#),
        ("RateLimit", r#""a";r=0.5;t=5"#),
        ("RateLimit", r#""a";r=0;t=5.0"#),
        ("RateLimit", r#""a";r="0";t=5"#),
        ("RateLimit", r#""a";r=?0;t=5"#),
        ("RateLimit-Policy", r#""a";q=-10;w=1"#),
        ("RateLimit-Policy", r#""a";q=10;w=-1"#),
        ("RateLimit-Policy", r#""a";q=10;w=0"#),
        ("RateLimit-Policy", r#""a";q=10;qu=5;w=1"#),
        // missing required parameters
        ("RateLimit", r#""a";t=5"#),
        ("RateLimit-Policy", r#""a";w=1"#),
        // numbers past the 15 digits of an SF Integer
        ("RateLimit", r#""a";r=0;t=1000000000000000"#),
        ("RateLimit-Policy", r#""a";q=99999999999999999999;w=1"#),
        // not ASCII
        ("RateLimit", "\"a\";r=0;t=5\u{00e9}"),
    ];
    for (name, value) in cases {
        let info = info_of(&[(name, value)], &ietf);
        assert_eq!(info.pause, None, "{name}: {value}");
        assert_eq!(info.quota, None, "{name}: {value}");
        assert_eq!(pacing(&info), Pacing::Unlimited, "{name}: {value}");
    }
    // Longer than 4 KiB: ignored unread.
    let long = format!(r#""a";r=0;t=5{}"#, ",\"b\";r=1".repeat(1000));
    assert_eq!(info_of(&[("RateLimit", &long)], &ietf).pause, None);
    // Non-UTF-8 bytes.
    let r = Response::new(SendId::default(), 200, WALL).ratelimit(b"\"a\";r=0;t=5\xff");
    assert_eq!(RateLimitInfo::read(&r, &ietf), RateLimitInfo::default());
}

#[test]
fn duplicates_huge_numbers_and_mixed_members() {
    let ietf = RateLimitHeaders::default();
    // Duplicated members: each counts; the strictest wins.
    let info = info_of(
        &[("RateLimit-Policy", r#""a";q=10;w=1, "a";q=5;w=1"#)],
        &ietf,
    );
    assert_eq!(pacing(&info), limited(5, 1));
    let info = info_of(&[("RateLimit", r#""a";r=3;t=1, "a";r=0;t=4"#)], &ietf);
    assert_eq!((info.remaining, info.pause), (Some(0), Some(secs(4))));
    // Duplicated parameters: the last one counts (RFC 9651).
    let info = info_of(&[("RateLimit", r#""a";r=0;t=9;t=2"#)], &ietf);
    assert_eq!(pacing(&info), Pacing::Paused(secs(2)));
    let info = info_of(&[("RateLimit", r#""a";r=-1;r=0;t=2"#)], &ietf);
    assert_eq!(pacing(&info), Pacing::Paused(secs(2)));
    // A bad member beside a good one: the good one counts.
    let info = info_of(&[("RateLimit", r#""a";r=-1;t=9, "b";r=0;t=3"#)], &ietf);
    assert_eq!(pacing(&info), Pacing::Paused(secs(3)));
    // The largest SF Integer: a quota capped to the learning ring; a pause
    // clamped to 300 s (a hostile `t` must not stall a client for ages).
    let info = info_of(
        &[("RateLimit-Policy", r#""a";q=999999999999999;w=1"#)],
        &ietf,
    );
    assert_eq!(
        info.quota,
        Some(Quota {
            limit: 999_999_999_999_999,
            window: S
        })
    );
    assert_eq!(pacing(&info), limited(1000, 1));
    let info = info_of(&[("RateLimit", r#""a";r=0;t=999999999999999"#)], &ietf);
    assert_eq!(pacing(&info), Pacing::Paused(secs(300)));
    let short = RateLimitHeaders {
        max_pause: secs(30),
        ..RateLimitHeaders::default()
    };
    assert_eq!(
        info_of(&[("RateLimit", r#""a";r=0;t=86400"#)], &short).pause,
        Some(secs(30))
    );
    // A huge window: one request per that window (it would outlive any
    // deadline, so the machines stop with `TimedOut` rather than wait).
    let info = info_of(
        &[("RateLimit-Policy", r#""a";q=1;w=999999999999999"#)],
        &ietf,
    );
    assert_eq!(pacing(&info), limited(1, 999_999_999_999_999));
    // r=0 without t, or t=0: nothing to wait for.
    assert_eq!(
        pacing(&info_of(&[("RateLimit", r#""a";r=0"#)], &ietf)),
        Pacing::Unlimited
    );
    assert_eq!(
        pacing(&info_of(&[("RateLimit", r#""a";r=0;t=0"#)], &ietf)),
        Pacing::Unlimited
    );
    // Unknown parameters are comments; Token names are fine.
    assert_eq!(
        pacing(&info_of(
            &[("RateLimit-Policy", "a;q=3;w=2;burst=1000;acme-x=?1")],
            &ietf
        )),
        limited(3, 2)
    );
    // Case-insensitive names.
    assert_eq!(
        pacing(&info_of(&[("ratelimit", r#""a";r=0;t=1"#)], &ietf)),
        Pacing::Paused(S)
    );
}

#[test]
fn retry_after_wins_over_the_reset() {
    let ietf = RateLimitHeaders::default();
    // B.3: Retry-After: 20 with RateLimit r=15;t=40 — and with r=0: the
    // reset is not a pause (Retry-After governs), the policy still sizes.
    let info = info_of(
        &[
            ("Retry-After", "20"),
            ("RateLimit-Policy", r#""dynamic";q=100;w=60"#),
            ("RateLimit", r#""dynamic";r=0;t=40"#),
        ],
        &ietf,
    );
    assert_eq!(info.pause, None);
    assert_eq!(pacing(&info), limited(100, 60));
    // An invalid Retry-After does not win.
    let info = info_of(
        &[("Retry-After", "soon"), ("RateLimit", r#""d";r=0;t=40"#)],
        &ietf,
    );
    assert_eq!(info.pause, Some(secs(40)));
    // B.1.4 through a paced machine: a 429 with an HTTP-date Retry-After
    // and RateLimit r=0;t=5 pauses the shared throttle until the server's
    // Retry-After (5 s after its Date), not twice.
    let t0 = origin();
    let throttle = Rc::new(RefCell::new(
        RateThrottle::learning(100)
            .unwrap()
            .with_margin(Duration::ZERO),
    ));
    let m = RetryMachine::new(
        RetryPolicy::default(),
        RequestInfo::new(RequestId(1), Method::Get),
        SplitMix64::new(1),
        t0,
        secs(60),
    )
    .unwrap();
    let mut paced = Paced::new(m, Rc::clone(&throttle), t0);
    let Action::Send(p) = paced.poll_action() else {
        panic!()
    };
    let r = Response::new(p.id, 429, WALL)
        .date(b"Mon, 05 Aug 2019 09:27:00 GMT")
        .retry_after(b"Mon, 05 Aug 2019 09:27:05 GMT")
        .ratelimit(br#""default";r=0;t=5"#);
    paced.handle(t0, Event::Response(r));
    assert_eq!(throttle.borrow().cooling_until(), Some(t0 + secs(5)));
}

#[test]
fn x_ratelimit_headers_are_opt_in() {
    let wall = UNIX_EPOCH + secs(1_700_000_000);
    let read = |headers: &[(&str, &str)], rules: &RateLimitHeaders| {
        let mut r = Response::new(SendId::default(), 200, wall);
        for (name, value) in headers {
            r = r.header(name, value.as_bytes());
        }
        RateLimitInfo::read(&r, rules)
    };
    let on = RateLimitHeaders::default().with_x_ratelimit();
    let off = RateLimitHeaders::default();
    let exhausted = [
        ("X-RateLimit-Limit", "60"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", "12"),
    ];
    assert_eq!(read(&exhausted, &off), RateLimitInfo::default());
    let info = read(&exhausted, &on);
    assert_eq!(
        (info.limit, info.remaining, info.pause, info.quota),
        (Some(60), Some(0), Some(secs(12)), None)
    );
    assert_eq!(pacing(&info), Pacing::Paused(secs(12)));
    // Seconds or a Unix time, by magnitude; Unix time against the Date
    // header when present, else the answer's wall clock.
    let at = |reset: &str, date: Option<&str>| {
        let mut h = vec![("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", reset)];
        if let Some(d) = date {
            h.push(("Date", d));
        }
        read(&h, &on).pause
    };
    assert_eq!(at("999999999", None), Some(secs(300))); // seconds, clamped
    assert_eq!(at("1700000045", None), Some(secs(45)));
    assert_eq!(
        at("1700000045250", None),
        Some(Duration::from_millis(45_250))
    );
    assert_eq!(
        at("1700000045", Some("Tue, 14 Nov 2023 22:13:40 GMT")),
        Some(secs(25))
    );
    assert_eq!(at("1699999999", None), None); // in the past: no pause
    assert_eq!(at("0", None), None);
    assert_eq!(at("-5", None), None);
    assert_eq!(at("12s", None), None);
    assert_eq!(at("", None), None);
    // Quota left, or no reset: no pause.
    assert_eq!(
        read(
            &[("X-RateLimit-Remaining", "3"), ("X-RateLimit-Reset", "12")],
            &on
        )
        .pause,
        None
    );
    assert_eq!(read(&[("X-RateLimit-Remaining", "0")], &on).pause, None);
    // With both kinds: the lowest remaining, the longest pause.
    let info = read(
        &[
            ("RateLimit", r#""a";r=0;t=3"#),
            ("X-RateLimit-Remaining", "0"),
            ("X-RateLimit-Reset", "7"),
        ],
        &on,
    );
    assert_eq!((info.remaining, info.pause), (Some(0), Some(secs(7))));
    // IETF fields can be turned off too.
    assert_eq!(
        read(&[("RateLimit", r#""a";r=0;t=3"#)], &RateLimitHeaders::OFF),
        RateLimitInfo::default()
    );
}

// ---------------------------------------------------------------------------
// The learning throttle
// ---------------------------------------------------------------------------

fn quota_info(limit: u64, window: Duration) -> RateLimitInfo {
    RateLimitInfo {
        quota: Some(Quota { limit, window }),
        ..RateLimitInfo::default()
    }
}

#[test]
fn learning_counts_the_sends_made_before_it_knew() {
    let t0 = origin();
    let mut t = RateThrottle::learning(100).unwrap();
    assert_eq!(
        (t.quota(), t.limit(), t.window()),
        (None, u32::MAX, Duration::MAX)
    );
    for i in 0..8 {
        assert_eq!(t.acquire(t0 + i * MS), Ok(()));
    }
    t.observe(t0 + 10 * MS, &quota_info(5, S));
    // 8 already sent in this window: nothing until 4 of them age out (the
    // 4th oldest was at 3 ms), plus the 50 ms margin.
    assert_eq!(t.acquire(t0 + 10 * MS), Err(t0 + 1053 * MS));
    assert_eq!(t.acquire(t0 + 1003 * MS), Ok(()));
    assert_eq!(t.acquire(t0 + 1003 * MS), Err(t0 + 1054 * MS));
    // A larger quota: granted at once.
    t.observe(t0 + 1003 * MS, &quota_info(7, S));
    assert_eq!(t.acquire(t0 + 1003 * MS), Ok(()));
    assert_eq!(t.acquire(t0 + 1003 * MS), Ok(()));
    assert!(t.acquire(t0 + 1003 * MS).is_err());
    // A quota above the ring is capped to it.
    t.observe(t0 + 1003 * MS, &quota_info(u64::MAX, S));
    assert_eq!(t.limit(), 100);
}

#[test]
fn learning_keeps_the_latest_sends_while_unlimited() {
    let t0 = origin();
    let mut t = RateThrottle::learning(4).unwrap();
    for i in 0..10 {
        assert_eq!(t.acquire(t0 + i * MS), Ok(()));
    }
    // The ring kept the latest 4 (6..=9 ms); learnt 4 per second: full
    // until the one at 6 ms ages out.
    t.observe(t0 + 10 * MS, &quota_info(4, S));
    assert_eq!(t.acquire(t0 + 10 * MS), Err(t0 + 1056 * MS));
    assert!(RateThrottle::learning(0).is_err());
    assert!(RateThrottle::learning(RateThrottle::MAX_LIMIT + 1).is_err());
}

#[test]
fn a_fixed_throttle_pauses_but_keeps_its_size() {
    let t0 = origin();
    let mut t = RateThrottle::new(3, S).unwrap();
    t.observe(
        t0,
        &RateLimitInfo {
            quota: Some(Quota {
                limit: 1,
                window: S,
            }),
            pause: Some(2 * S),
            ..RateLimitInfo::default()
        },
    );
    assert_eq!(t.limit(), 3);
    assert_eq!(t.acquire(t0), Err(t0 + 2050 * MS));
    for _ in 0..3 {
        assert_eq!(t.acquire(t0 + 2050 * MS), Ok(()));
    }
    // `Pace::observe` defaults to nothing, and shared handles forward it.
    let mut u = Unpaced;
    Pace::observe(&mut u, t0, &quota_info(1, S));
    assert_eq!(u.acquire(t0), Ok(()));
    let shared = Arc::new(Mutex::new(RateThrottle::learning(10).unwrap()));
    let mut handle = Arc::clone(&shared);
    Pace::observe(&mut handle, t0, &quota_info(2, S));
    assert_eq!(shared.lock().unwrap().limit(), 2);
    let mut boxed: Box<dyn Pace> = Box::new(RateThrottle::learning(10).unwrap());
    boxed.observe(t0, &quota_info(1, S));
    assert_eq!(boxed.acquire(t0), Ok(()));
    assert!(boxed.acquire(t0).is_err());
}

// ---------------------------------------------------------------------------
// The headers reach the pace: Paced, BatchMachine, the drive loop
// ---------------------------------------------------------------------------

#[test]
fn paced_machines_share_a_pause() {
    let t0 = origin();
    let throttle = Rc::new(RefCell::new(RateThrottle::learning(100).unwrap()));
    let make = |id| {
        let m = RetryMachine::new(
            RetryPolicy::default(),
            RequestInfo::new(RequestId(id), Method::Get),
            SplitMix64::new(id),
            t0,
            secs(60),
        )
        .unwrap();
        Paced::new(m, Rc::clone(&throttle), t0)
    };
    let (mut a, mut b) = (make(1), make(2));
    let Action::Send(pa) = a.poll_action() else {
        panic!()
    };
    // a's answer: a success, but the quota is spent for 3 s.
    a.handle(
        t0 + 10 * MS,
        Event::Response(Response::new(pa.id, 200, WALL).ratelimit(br#""q";r=0;t=3"#)),
    );
    assert_eq!(
        a.poll_action(),
        Action::Stop(Outcome::Succeeded { status: 200 })
    );
    // b has not sent yet: it is held until the pause ends (+ 50 ms).
    let pause_end = t0 + 3060 * MS;
    b.handle(t0 + 10 * MS, Event::Tick);
    assert_eq!(b.poll_action(), Action::SleepUntil(pause_end));
    b.handle(pause_end, Event::Tick);
    assert!(matches!(b.poll_action(), Action::Send(_)));
}

#[test]
fn x_ratelimit_reaches_the_pace_only_when_enabled() {
    let t0 = origin();
    for (rules, paused) in [
        (RateLimitHeaders::default(), false),
        (RateLimitHeaders::default().with_x_ratelimit(), true),
    ] {
        let throttle = Rc::new(RefCell::new(RateThrottle::default()));
        let m = RetryMachine::new(
            RetryPolicy::default(),
            RequestInfo::new(RequestId(1), Method::Get),
            SplitMix64::new(1),
            t0,
            secs(60),
        )
        .unwrap();
        let mut paced = Paced::new(m, Rc::clone(&throttle), t0).rate_limit_headers(rules);
        let Action::Send(p) = paced.poll_action() else {
            panic!()
        };
        let r = Response::new(p.id, 200, WALL)
            .header("X-RateLimit-Remaining", b"0")
            .header("X-RateLimit-Reset", b"9");
        paced.handle(t0, Event::Response(r));
        assert_eq!(
            throttle.borrow().cooling_until().is_some(),
            paused,
            "{rules:?}"
        );
    }
}

/// A virtual-time `Io` whose server advertises 2 per second and answers
/// at once; records when each send went out.
struct QuotaIo {
    now: Cell<Instant>,
    sent: Vec<Instant>,
}

struct Ans(u16);

impl Answer for Ans {
    fn status(&self) -> u16 {
        self.0
    }
    fn header(&self, name: &str) -> Option<&[u8]> {
        match name {
            "ratelimit-policy" => Some(br#""p";q=2;w=1"#),
            _ => None,
        }
    }
}

impl Io for QuotaIo {
    type Answer = Ans;
    type Sending = Ready<Result<Ans, TransportErrorKind>>;
    fn now(&self) -> Instant {
        self.now.get()
    }
    fn wall_clock(&self) -> SystemTime {
        WALL
    }
    fn send(&mut self, _plan: &SendPlan) -> Self::Sending {
        self.sent.push(self.now.get());
        ready(Ok(Ans(200)))
    }
    fn poll_sleep(&mut self, _: &mut Context<'_>, until: Instant) -> Poll<()> {
        self.now.set(self.now.get().max(until));
        Poll::Ready(())
    }
    fn poll_cancel(&mut self, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
    fn is_cancelled(&self) -> bool {
        false
    }
}

#[test]
fn the_drive_loop_files_the_headers() {
    let t0 = origin();
    let mut io = QuotaIo {
        now: Cell::new(t0),
        sent: Vec::new(),
    };
    let requests = (0..6)
        .map(|i| RequestInfo::new(RequestId(i), Method::Get))
        .collect();
    // One at a time, so that the first answer comes before the second send.
    let policy = BatchPolicy {
        concurrency: 1,
        ..BatchPolicy::default()
    };
    let mut batch = BatchMachine::new(
        policy,
        requests,
        SplitMix64::new(1),
        RateThrottle::learning(100)
            .unwrap()
            .with_margin(Duration::ZERO),
        t0,
        secs(60),
    )
    .unwrap();
    let done = polite_testing::block_on(drive::drive(&mut batch, &mut io, &mut NoJobs, &mut ()));
    assert_eq!(
        done.outcome,
        Outcome::BatchDone {
            succeeded: 6,
            failed: 0
        }
    );
    // The first answer taught 2 per second: two sends a second from then on.
    let offsets: Vec<Duration> = io.sent.iter().map(|t| *t - t0).collect();
    assert_eq!(
        offsets,
        [Duration::ZERO, Duration::ZERO, S, S, 2 * S, 2 * S]
    );
    assert_eq!(
        batch.pace().quota(),
        Some(Quota {
            limit: 2,
            window: S
        })
    );
}

// ---------------------------------------------------------------------------
// A server that tells its quota only through RateLimit headers
// ---------------------------------------------------------------------------

/// 10 requests per fixed one-second window, counted at arrival; every
/// answer (200, or 429 over quota) carries `RateLimit-Policy` and
/// `RateLimit`, never `Retry-After`.
#[derive(Debug, Default)]
struct QuotaServer {
    quota: u32,
    window: u64,
    used: u32,
    ok: u32,
    refused: u32,
}

fn quota_server(
    t0: Instant,
    quota: u32,
) -> (
    Rc<RefCell<QuotaServer>>,
    impl FnMut(Instant, &SendPlan) -> Scripted + 'static,
) {
    let state = Rc::new(RefCell::new(QuotaServer {
        quota,
        ..QuotaServer::default()
    }));
    let s = Rc::clone(&state);
    let serve = move |now: Instant, _plan: &SendPlan| {
        let mut s = s.borrow_mut();
        let elapsed = now - t0;
        let window = elapsed.as_secs();
        if window != s.window {
            s.window = window;
            s.used = 0;
        }
        // Seconds until the window resets, rounded up.
        let left = (window + 1) * 1_000_000_000 - u64::try_from(elapsed.as_nanos()).unwrap();
        let t = left.div_ceil(1_000_000_000);
        let status = if s.used < s.quota {
            s.used += 1;
            s.ok += 1;
            200
        } else {
            s.refused += 1;
            429
        };
        let r = s.quota - s.used;
        Scripted::status(status)
            .header(
                "RateLimit-Policy",
                format!(r#""default";q={};w=1"#, s.quota),
            )
            .header("RateLimit", format!(r#""default";r={r};t={t}"#))
    };
    (state, serve)
}

/// 100 requests at concurrency 8 against the quota server (10 a second),
/// checked step by step by `BatchChecker` (at most 8 in flight, no sleep
/// past the deadline, one outcome per item): the server's state, the
/// batch's outcome, the items that succeeded, and how long it took.
fn hundred_at_concurrency_8<P: Pace>(
    pace: P,
) -> (Rc<RefCell<QuotaServer>>, Outcome, u32, Duration) {
    let t0 = origin();
    let requests: Vec<RequestInfo> = (0..100)
        .map(|i| RequestInfo::new(RequestId(i), Method::Get))
        .collect();
    let policy = BatchPolicy {
        concurrency: 8,
        ..BatchPolicy::default()
    };
    let mut batch = BatchMachine::new(
        policy,
        requests.clone(),
        SplitMix64::new(9),
        pace,
        t0,
        secs(120),
    )
    .unwrap();
    let checker = BatchChecker::new(&policy, &requests, batch.deadline());
    let (state, serve) = quota_server(t0, 10);
    let trace = Simulator::new(t0)
        .server(serve)
        .check_batch(checker)
        .run(&mut batch)
        .unwrap();
    let succeeded = batch
        .outcomes()
        .iter()
        .filter(|o| matches!(o, Some(Outcome::Succeeded { .. })))
        .count() as u32;
    (state, trace.outcome, succeeded, trace.ended_at - t0)
}

#[test]
fn a_client_never_told_the_quota_stops_getting_429s() {
    // No throttle configured: a learning one, unlimited until the first
    // answer says "10 per second".
    let (server, outcome, succeeded, took) =
        hundred_at_concurrency_8(RateThrottle::learning(1000).unwrap());
    let s = server.borrow();
    println!(
        "learning: {} × 200, {} × 429, {succeeded} succeeded in {took:?}",
        s.ok, s.refused
    );
    assert!(s.refused <= 1, "{} × 429", s.refused);
    assert_eq!(succeeded, 100);
    assert_eq!(
        outcome,
        Outcome::BatchDone {
            succeeded: 100,
            failed: 0
        }
    );
    // 100 at 10 a second: about 10 s, not much more.
    assert!(took < secs(12), "{took:?}");
}

#[test]
fn without_the_headers_the_same_client_hammers() {
    // The same batch, unpaced: concurrency alone earns a storm of 429s.
    let (server, _, _, _) = hundred_at_concurrency_8(Unpaced);
    let s = server.borrow();
    println!("unpaced: {} × 200, {} × 429", s.ok, s.refused);
    assert!(s.refused > 50, "{} × 429", s.refused);
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

/// Bytes shaped like the fields: fragments of valid and invalid syntax.
fn fieldish() -> impl Strategy<Value = Vec<u8>> {
    let frag = prop_oneof![
        Just(b"\"default\"".to_vec()),
        Just(b"tok".to_vec()),
        Just(b";q=".to_vec()),
        Just(b";w=".to_vec()),
        Just(b";r=".to_vec()),
        Just(b";t=".to_vec()),
        Just(b";qu=\"requests\"".to_vec()),
        Just(b";pk=:cHsdsRa894==:".to_vec()),
        Just(b", ".to_vec()),
        Just(b"(a b)".to_vec()),
        Just(b"-".to_vec()),
        Just(b"\\\"".to_vec()),
        (0u64..2_000_000_000_000_000).prop_map(|n| n.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..4),
    ];
    proptest::collection::vec(frag, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Parsing never panics, whatever the bytes, and what it yields is sane.
    #[test]
    fn parsing_never_panics(
        a in proptest::collection::vec(any::<u8>(), 0..64),
        b in fieldish(),
        c in fieldish(),
        x in proptest::collection::vec(any::<u8>(), 0..24),
        date in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let rules = RateLimitHeaders::default().with_x_ratelimit();
        for (p, l) in [(&a, &b), (&b, &c), (&c, &a)] {
            let fields = RateLimitFields::EMPTY
                .ratelimit_policy(p)
                .ratelimit(l)
                .x_ratelimit(Some(&x), Some(&x), Some(&x));
            let r = Response::new(SendId::default(), 429, WALL)
                .rate_limit(fields)
                .date(&date)
                .retry_after(&x);
            let info = RateLimitInfo::read(&r, &rules);
            prop_assert!(info.pause.is_none_or(|d| d <= rules.max_pause));
            if let Some(q) = info.quota {
                prop_assert!(q.limit >= 1 && q.window >= S);
            }
            let _ = parse_policy(p);
            let _ = parse_ratelimit(l);
            // And a throttle fed with it stays usable.
            let mut t = RateThrottle::learning(64).unwrap();
            t.observe(origin(), &info);
            let _ = t.acquire(origin());
        }
    }

    /// A learning throttle never grants more than its current quota in any
    /// window, counting every grant since the quota was learnt, however the
    /// quota changes and time moves.
    #[test]
    fn learning_throttle_keeps_each_learnt_quota(
        ops in proptest::collection::vec((0u8..10, 0u64..400, 1u64..6, 1u64..4), 1..200),
    ) {
        let t0 = origin();
        let mut t = RateThrottle::learning(8).unwrap();
        let mut now = t0;
        // Grants since the last change of quota, and that quota.
        let mut grants: Vec<Instant> = Vec::new();
        let mut quota: Option<(usize, Duration)> = None;
        for (op, step, q, w) in ops {
            now += Duration::from_millis(step);
            if op == 0 {
                let limit = q as usize;
                let window = Duration::from_secs(w);
                t.observe(now, &quota_info(q, window));
                if quota != Some((limit, window)) {
                    quota = Some((limit, window));
                    grants.clear();
                }
            } else if t.acquire(now).is_ok() {
                grants.push(now);
                if let Some((limit, window)) = quota {
                    let inside = grants.iter().filter(|g| **g + window > now).count();
                    prop_assert!(inside <= limit, "{inside} grants within {window:?}, quota {limit}");
                }
            }
        }
    }
}
