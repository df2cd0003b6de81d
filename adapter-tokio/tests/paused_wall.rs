//! The runtime's clock gives the wall clock too: on paused tokio time an
//! HTTP-date `Retry-After` (without a `Date` to measure from) is measured
//! against the test's virtual wall clock, not the real one.

mod common;

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use common::Fake;
use polite_lab::{RetryAfterStyle, format_retry_after};
use polite_tokio::{Client, Config, Jitter, RetryPolicy};

#[tokio::test(start_paused = true)]
async fn an_http_date_retry_after_is_measured_in_paused_time() {
    // The first answer asks for 50 s; the second names an instant 80 s after
    // the start as an HTTP-date. After 50 virtual seconds that is 30 s away:
    // the third send is due at 80 s. Measured against the real clock (which
    // has not moved) it would be 80 s away, past the 60 s automatic wait cap.
    let wall0 = SystemTime::now();
    let date = format_retry_after(RetryAfterStyle::ImfFixdate, wall0, 80).expect("a date");
    let date: &'static str = Box::leak(date.into_boxed_str());
    let fake = Fake::new(
        &[(503, Some("50")), (503, Some(date)), (200, None)],
        Duration::ZERO,
    );
    let mut retry = RetryPolicy::default();
    retry.backoff.jitter = Jitter::None;
    let config = Config {
        retry,
        timeout: Duration::from_secs(600),
        ..Config::default()
    };
    let client = Client::with_transport(fake.clone(), config).unwrap();
    let t0 = tokio::time::Instant::now().into_std();
    let started = std::time::Instant::now();
    let resp = client
        .send(
            http::Request::get("http://127.0.0.1:9/x")
                .body(Bytes::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "paused time runs instantly"
    );
    let at: Vec<Duration> = fake.sends().iter().map(|t| *t - t0).collect();
    assert_eq!(at.len(), 3, "{at:?}");
    assert_eq!(at[1], Duration::from_secs(50), "{at:?}");
    // The date has whole seconds: the wait ends within the second before 80 s.
    assert!(
        at[2] > Duration::from_secs(78) && at[2] <= Duration::from_secs(80),
        "third send at {:?}, want about 80 s",
        at[2]
    );
}
