//! polite as a tower layer over hyper-util's legacy client (what an axum
//! proxy calls its upstream with), against a loopback lab that answers 429
//! with `Retry-After: 1` once, then 200: polite waits the server's second
//! and the call succeeds; a 404 is an answer like any other; a call with
//! its own 1 s budget against a `Retry-After: 5` ends at once with the
//! error.
//!
//! `cargo run -p polite-tokio --example tower`

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as Hyper;
use hyper_util::rt::TokioExecutor;
use polite_lab::{Lab, LabConfig, Step};
use polite_tokio::{CallOptions, Config, Outcome, PoliteBody, PoliteLayer};
use tower::{ServiceBuilder, ServiceExt};

fn get(url: String) -> http::Request<Full<Bytes>> {
    let mut request = http::Request::new(Full::new(Bytes::new()));
    *request.uri_mut() = url.parse().expect("a lab URL");
    request
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let lab = Lab::start(
        LabConfig::default()
            .script(
                "/items/1",
                vec![
                    Step::with_retry_after(429, Duration::from_secs(1)),
                    Step::Normal,
                ],
            )
            .script("/missing", vec![Step::status(404)])
            .script(
                "/busy",
                vec![Step::with_retry_after(503, Duration::from_secs(5))],
            ),
    )?;

    // The inner service takes polite's body (the buffered bytes, or a body
    // too large to replay, streamed through once).
    let upstream = Hyper::builder(TokioExecutor::new()).build_http::<PoliteBody<Full<Bytes>>>();
    let service = ServiceBuilder::new()
        .layer(PoliteLayer::new(Config::default())?)
        .service(upstream);

    let started = Instant::now();
    let response = service.clone().oneshot(get(lab.url("/items/1"))).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    println!(
        "{status} after {:.1?}: {}",
        started.elapsed(),
        String::from_utf8_lossy(&body)
    );

    let missing = service.clone().oneshot(get(lab.url("/missing"))).await?;
    println!(
        "{} (polite's outcome: {})",
        missing.status(),
        missing
            .extensions()
            .get::<Outcome>()
            .map_or("-".into(), ToString::to_string)
    );

    let mut busy = get(lab.url("/busy"));
    busy.extensions_mut()
        .insert(CallOptions::new().timeout(Duration::from_secs(1)));
    let started = Instant::now();
    match service.oneshot(busy).await {
        Ok(r) => println!("{}", r.status()),
        Err(e) => println!("gave up after {:.1?}: {e}", started.elapsed()),
    }
    println!("the lab saw {} requests", lab.log().len());
    Ok(())
}
