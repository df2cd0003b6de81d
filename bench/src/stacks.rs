//! The tokio clients the overhead suites compare, built once: bare reqwest,
//! polite-tokio (its transport alone and `send`), a reqwest-middleware stack
//! without and with `PoliteMiddleware`, and hyper-util's legacy client bare
//! and under `PoliteLayer`; and the retry stacks a user of each client
//! would adopt instead of polite: reqwest in a `backon` retry, the
//! reqwest-middleware stack with reqwest-retry's `RetryTransientMiddleware`,
//! hyper-util under tower's `retry` and `timeout` layers. Each does one GET
//! and reads the body; every side sets the same 5 s budget, and every retry
//! stack retries 429, 5xx and transport errors up to [`RETRIES`] times,
//! waiting from 250 ms doubling up to 4 s (polite's defaults).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use polite_client::Transport as _;
use tower::ServiceExt;

use crate::get;

/// Each side's budget per call.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The retry stacks' retries per call (polite's default budget).
pub const RETRIES: u32 = 3;

/// The retry stacks' first wait and cap (polite's default backoff).
const BACKOFF: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(4));

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
    /// Peer of `TokioSend`: reqwest in a `backon` exponential retry, under
    /// one `tokio::time::timeout`.
    ReqwestBackon,
    /// Peer of `Middleware`: the reqwest-middleware stack with
    /// reqwest-retry's `RetryTransientMiddleware`.
    RetryMiddleware,
    /// Peer of `Layer`: hyper-util's legacy client under tower's
    /// `TimeoutLayer` and `RetryLayer` (a policy that clones the request,
    /// with tower's `TpsBudget` and `ExponentialBackoff`).
    TowerRetry,
}

impl Via {
    /// Whether this is one of the retry stacks polite is compared with.
    #[must_use]
    pub fn is_retry_peer(self) -> bool {
        matches!(
            self,
            Via::ReqwestBackon | Via::RetryMiddleware | Via::TowerRetry
        )
    }
}

/// Whether a status is worth retrying, by the retry stacks' rule (429, 5xx).
fn transient(status: http::StatusCode) -> bool {
    status == http::StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// tower's `retry::Policy` as a tower user writes it for an HTTP client:
/// the request cloned for a retry (a `Full` body clones cheaply), 429, 5xx
/// and errors retried up to [`RETRIES`] times, each retry paid from a
/// shared `TpsBudget` (tower's defaults: 10 s, 10 per second, 20 %) and
/// waited out with tower's `ExponentialBackoff`.
#[derive(Clone, Debug)]
pub struct TowerPolicy {
    retries: u32,
    budget: std::sync::Arc<tower::retry::budget::TpsBudget>,
    backoff: tower::retry::backoff::ExponentialBackoff,
}

impl TowerPolicy {
    fn new() -> TowerPolicy {
        use tower::retry::backoff::{ExponentialBackoffMaker, MakeBackoff as _};
        let mut maker = ExponentialBackoffMaker::new(
            BACKOFF.0,
            BACKOFF.1,
            1.0,
            tower::util::rng::HasherRng::default(),
        )
        .expect("valid backoff");
        TowerPolicy {
            retries: 0,
            budget: std::sync::Arc::new(tower::retry::budget::TpsBudget::default()),
            backoff: maker.make_backoff(),
        }
    }
}

impl<B: Clone, Res, E> tower::retry::Policy<http::Request<B>, http::Response<Res>, E>
    for TowerPolicy
{
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _request: &mut http::Request<B>,
        result: &mut Result<http::Response<Res>, E>,
    ) -> Option<Self::Future> {
        use tower::retry::backoff::Backoff as _;
        use tower::retry::budget::Budget as _;
        let again = match result {
            Ok(r) => transient(r.status()),
            Err(_) => true,
        };
        if !again {
            self.budget.deposit();
            return None;
        }
        if self.retries >= RETRIES || !self.budget.withdraw() {
            return None;
        }
        self.retries += 1;
        Some(self.backoff.next_backoff())
    }

    fn clone_request(&mut self, request: &http::Request<B>) -> Option<http::Request<B>> {
        Some(request.clone())
    }
}

type TowerRetried = tower::timeout::Timeout<tower::retry::Retry<TowerPolicy, Bare>>;

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
    retry_middleware: reqwest_middleware::ClientWithMiddleware,
    tower_retry: TowerRetried,
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
            retry_middleware: reqwest_middleware::ClientBuilder::new(crate::reqwest_client())
                .with(reqwest_retry::RetryTransientMiddleware::new_with_policy(
                    reqwest_retry::policies::ExponentialBackoff::builder()
                        .retry_bounds(BACKOFF.0, BACKOFF.1)
                        .build_with_max_retries(RETRIES),
                ))
                .build(),
            tower_retry: tower::ServiceBuilder::new()
                .timeout(TIMEOUT)
                .retry(TowerPolicy::new())
                .service(
                    hyper_util::client::legacy::Client::builder(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .build_http(),
                ),
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
            Via::EmptyStack | Via::Middleware | Via::RetryMiddleware => {
                let client = match via {
                    Via::Middleware => &self.middleware,
                    Via::RetryMiddleware => &self.retry_middleware,
                    _ => &self.empty,
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
            Via::TowerRetry => match self.tower_retry.clone().oneshot(self.request()).await {
                Ok(r) => r.status() == 200 && r.into_body().collect().await.is_ok(),
                Err(_) => false,
            },
            Via::ReqwestBackon => {
                use backon::{ExponentialBuilder, Retryable as _};
                let attempt = || async {
                    let r = self.raw.get(url).send().await?;
                    if transient(r.status()) {
                        return Err(Transient);
                    }
                    Ok(r)
                };
                let backoff = ExponentialBuilder::default()
                    .with_min_delay(BACKOFF.0)
                    .with_max_delay(BACKOFF.1)
                    .with_max_times(RETRIES as usize)
                    .with_jitter();
                let call = async {
                    let r = attempt.retry(backoff).await.ok()?;
                    let ok = r.status() == 200;
                    r.bytes().await.ok().map(|_| ok)
                };
                matches!(tokio::time::timeout(TIMEOUT, call).await, Ok(Some(true)))
            }
        }
    }
}

/// A `backon` attempt to retry: a 429 or 5xx, or no answer.
#[derive(Debug)]
struct Transient;

impl From<reqwest::Error> for Transient {
    fn from(_: reqwest::Error) -> Self {
        Transient
    }
}

/// The blocking retry stack a ureq user writes instead of polite-blocking:
/// ureq in a `backon` blocking exponential retry (429, 5xx and errors, up
/// to [`RETRIES`] times; a global timeout per attempt), the body read.
#[must_use]
pub fn ureq_backon(agent: &ureq::Agent, url: &str) -> bool {
    use backon::{BlockingRetryable as _, ExponentialBuilder};
    let attempt = || -> Result<u16, Option<ureq::Error>> {
        let mut r = agent
            .get(url)
            .config()
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .build()
            .call()
            .map_err(Some)?;
        if transient(r.status()) {
            return Err(None);
        }
        r.body_mut().read_to_vec().map_err(Some)?;
        Ok(r.status().as_u16())
    };
    let backoff = ExponentialBuilder::default()
        .with_min_delay(BACKOFF.0)
        .with_max_delay(BACKOFF.1)
        .with_max_times(RETRIES as usize)
        .with_jitter();
    attempt
        .retry(backoff)
        .sleep(std::thread::sleep)
        .call()
        .is_ok_and(|status| status == 200)
}
