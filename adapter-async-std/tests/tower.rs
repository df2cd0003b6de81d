//! `PoliteLayer` on async-io (smol and async-std), over an inner service
//! that sends with this crate's own `Http1Transport`, against labs on
//! loopback (real time, generous bounds; the lab counts and timestamps
//! every request). The layer's waits sleep on async-io timers: no tokio.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use polite_async_io::{
    CallOptions, Config, Http1Transport, Outcome, PoliteBody, PoliteLayer, Transport,
};
use polite_lab::{Lab, LabConfig, Step};
use tower::{Service, ServiceBuilder, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The inner service: the request's body collected, sent once by
/// `Http1Transport` (the layer decides every retry).
fn upstream() -> impl Service<
    http::Request<PoliteBody<Full<Bytes>>>,
    Response = http::Response<Full<Bytes>>,
    Error = BoxError,
    Future = impl Send,
> + Clone
+ Send
+ 'static {
    let transport = Http1Transport::new();
    tower::service_fn(move |request: http::Request<PoliteBody<Full<Bytes>>>| {
        let transport = transport.clone();
        async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await?.to_bytes();
            let abort_at = Instant::now() + Duration::from_secs(30);
            let answer = transport
                .send(http::Request::from_parts(parts, body), abort_at)
                .await?;
            Ok::<_, BoxError>(answer.map(Full::new))
        }
    })
}

fn get(url: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(url)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

#[test]
fn retry_after_is_honoured_on_smol_and_the_deadline_ends_a_call_before_it() {
    smol::block_on(async {
        let lab = Lab::start(
            LabConfig::default()
                .script(
                    "/items/1",
                    vec![
                        Step::with_retry_after(503, Duration::from_secs(1)),
                        Step::Normal,
                    ],
                )
                .script(
                    "/items/2",
                    vec![Step::with_retry_after(503, Duration::from_secs(5))],
                ),
        )
        .unwrap();
        let layer = PoliteLayer::new(Config::default()).unwrap();
        let service = ServiceBuilder::new().layer(layer).service(upstream());

        let started = Instant::now();
        let answer = service
            .clone()
            .oneshot(get(&lab.url("/items/1")))
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        assert!(!body.is_empty());
        let log = lab.log();
        assert_eq!(log.len(), 2, "{log:?}");
        let gap = log[1].arrived - log[0].arrived;
        assert!(gap >= Duration::from_secs(1), "sent again after {gap:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );

        // A 1 s budget and a 5 s Retry-After: the call ends at once with
        // the deadline, never cutting the server's wait short.
        let mut request = get(&lab.url("/items/2"));
        request
            .extensions_mut()
            .insert(CallOptions::new().timeout(Duration::from_secs(1)));
        let started = Instant::now();
        let e = service.oneshot(request).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "{:?}",
            started.elapsed()
        );
        assert!(matches!(e.outcome(), Some(Outcome::TimedOut { .. })), "{e}");
        let sent = lab.log().iter().filter(|l| l.path == "/items/2").count();
        assert_eq!(sent, 1, "never resent before the server's time");
    });
}

#[test]
fn a_429_from_one_origin_does_not_slow_another_on_async_std() {
    async_std::task::block_on(async {
        let busy = Lab::start(LabConfig::default().script(
            "/items/1",
            vec![
                Step::with_retry_after(429, Duration::from_secs(5)),
                Step::Normal,
            ],
        ))
        .unwrap();
        let healthy = Lab::start(LabConfig::default()).unwrap();
        let layer = PoliteLayer::new(Config {
            timeout: Duration::from_secs(2),
            ..Config::default()
        })
        .unwrap();
        let service = ServiceBuilder::new().layer(layer).service(upstream());

        // The busy origin's 429 asks for 5 s, more than the 2 s budget:
        // the call ends at once (timed out, the 429 kept), and the origin's
        // cool-down begins.
        let started = Instant::now();
        let e = service
            .clone()
            .oneshot(get(&busy.url("/items/1")))
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert!(matches!(e.outcome(), Some(Outcome::TimedOut { .. })), "{e}");
        // The healthy origin is not held back by the busy one's cool-down.
        let started = Instant::now();
        let answer = service
            .clone()
            .oneshot(get(&healthy.url("/items/2")))
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "held back {:?}",
            started.elapsed()
        );
        // The busy origin's own next call waits for its cool-down (it
        // cannot fit in the budget: it ends at once, not sent).
        let started = Instant::now();
        let e = service
            .oneshot(get(&busy.url("/items/1")))
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert!(e.outcome().is_some(), "{e}");
        assert_eq!(busy.log().len(), 1, "sent inside the cool-down");
    });
}
