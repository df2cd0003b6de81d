//! The tokio clients the overhead suites compare, built once: bare reqwest,
//! polite-tokio (its transport alone and `send`), a reqwest-middleware stack
//! without and with `PoliteMiddleware`, and hyper-util's legacy client bare
//! and under `PoliteLayer`. Each does one GET and reads the body; every
//! side sets the same 5 s budget.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use polite_client::Transport as _;
use tower::ServiceExt;

use crate::get;

/// Each side's budget per call.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// Which client a GET goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// `reqwest::Client`.
    Reqwest,
    /// polite-tokio's `ReqwestTransport`, called directly.
    TokioTransport,
    /// polite-tokio's `Client::send`.
    TokioSend,
    /// A reqwest-middleware stack with no middleware.
    EmptyStack,
    /// The same stack with `PoliteMiddleware`.
    Middleware,
    /// hyper-util's legacy client.
    Hyper,
    /// hyper-util's legacy client under `PoliteLayer`.
    Layer,
}

type Upstream = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    polite_tokio::PoliteBody<Full<Bytes>>,
>;
type Bare = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;
type Layered = polite_tokio::PoliteService<Upstream>;

/// Every client, aimed at one URL.
pub struct Stacks {
    url: String,
    uri: http::Uri,
    raw: reqwest::Client,
    transport: polite_tokio::ReqwestTransport,
    polite: polite_tokio::Client,
    empty: reqwest_middleware::ClientWithMiddleware,
    middleware: reqwest_middleware::ClientWithMiddleware,
    hyper: Bare,
    layered: Layered,
}

impl std::fmt::Debug for Stacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stacks")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Stacks {
    /// The clients for `url` (inside a tokio runtime: hyper-util's
    /// executor spawns on it).
    ///
    /// # Panics
    ///
    /// When a client cannot be built or `url` is not one.
    #[must_use]
    pub fn new(url: &str) -> Stacks {
        let config = polite_tokio::Config {
            timeout: TIMEOUT,
            ..polite_tokio::Config::default()
        };
        let executor = hyper_util::rt::TokioExecutor::new();
        let upstream: Upstream =
            hyper_util::client::legacy::Client::builder(executor.clone()).build_http();
        Stacks {
            url: url.to_owned(),
            uri: url.parse().expect("a URL"),
            raw: crate::reqwest_client(),
            transport: polite_tokio::ReqwestTransport::new(crate::reqwest_client()),
            polite: polite_tokio::Client::with_transport(
                polite_tokio::ReqwestTransport::new(crate::reqwest_client()),
                config.clone(),
            )
            .expect("valid config"),
            empty: reqwest_middleware::ClientBuilder::new(crate::reqwest_client()).build(),
            middleware: reqwest_middleware::ClientBuilder::new(crate::reqwest_client())
                .with(polite_tokio::PoliteMiddleware::new(config.clone()).expect("valid config"))
                .build(),
            hyper: hyper_util::client::legacy::Client::builder(executor).build_http(),
            layered: tower::ServiceBuilder::new()
                .layer(polite_tokio::PoliteLayer::new(config).expect("valid config"))
                .service(upstream),
        }
    }

    fn request(&self) -> http::Request<Full<Bytes>> {
        let mut r = http::Request::new(Full::new(Bytes::new()));
        *r.uri_mut() = self.uri.clone();
        r
    }

    /// One GET through `via`, its body read: whether it was a 200.
    pub async fn get(&self, via: Via) -> bool {
        let url = self.url.as_str();
        match via {
            Via::Reqwest => match self.raw.get(url).timeout(TIMEOUT).send().await {
                Ok(r) => r.status() == 200 && r.bytes().await.is_ok(),
                Err(_) => false,
            },
            Via::TokioTransport => self
                .transport
                .send(get(url), Instant::now() + TIMEOUT)
                .await
                .is_ok_and(|r| r.status() == 200),
            Via::TokioSend => self
                .polite
                .send(get(url))
                .await
                .is_ok_and(|r| r.status() == 200),
            Via::EmptyStack | Via::Middleware => {
                let client = if via == Via::Middleware {
                    &self.middleware
                } else {
                    &self.empty
                };
                match client.get(url).timeout(TIMEOUT).send().await {
                    Ok(r) => r.status() == 200 && r.bytes().await.is_ok(),
                    Err(_) => false,
                }
            }
            Via::Hyper => match tokio::time::timeout(TIMEOUT, async {
                let r = self.hyper.request(self.request()).await.ok()?;
                let ok = r.status() == 200;
                r.into_body().collect().await.ok().map(|_| ok)
            })
            .await
            {
                Ok(Some(ok)) => ok,
                _ => false,
            },
            Via::Layer => match self.layered.clone().oneshot(self.request()).await {
                Ok(r) => r.status() == 200 && r.into_body().collect().await.is_ok(),
                Err(_) => false,
            },
        }
    }
}
