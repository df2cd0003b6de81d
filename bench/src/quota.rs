//! Staying under a server's quota: 429s received and total time for a batch
//! of GETs against a fixed-window quota, seven clients side by side (each
//! against its own lab with the same configuration, all running at once;
//! the `nohints` suite runs four of them through the same harness against
//! labs that answer bare 429s):
//!
//! * **semaphore only**: tokio + reqwest + `tokio::sync::Semaphore`, no retry
//!   (what "limit concurrency" gives; a 429 is a failed item);
//! * **backon**: the same, each request retried on 429 with `backon`'s
//!   exponential backoff (250 ms doubling to 4 s, jitter, up to 10 retries;
//!   `Retry-After` not read, as in backon's default use);
//! * **polite, configured throttle**: polite-tokio `batch` with
//!   `Config::throttle = Some((limit, window))`, the server's quota as
//!   documented;
//!   (also against a lab that sends no `RateLimit` headers, to show what
//!   honouring the server's header costs when its `t` is rounded up to whole
//!   seconds);
//! * **polite, defaults**: polite-tokio `batch` with `Config::default()`,
//!   told nothing about the quota: it learns it from the answers'
//!   `RateLimit-Policy` / `RateLimit` headers (a learning throttle);
//! * **polite, defaults, server without `RateLimit` headers**: the same
//!   against a lab that sends none: only 429s + `Retry-After` and the
//!   client's shared cool-down pace it;
//! * **polite-core learning throttle**: `BatchMachine` with a
//!   `RateThrottle::learning` pace, run by the same drive loop and reqwest
//!   transport as polite-tokio (the machine-level feature without the
//!   client's wiring, as a cross-check).
//!
//! Every lab but one sends `RateLimit` / `RateLimit-Policy` headers. The
//! limit: 0 × 429 and the quota's rate.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable as _};
use bytes::Bytes;
use polite_client::{Clock as _, HttpIo, NeverCancel};
use polite_core::drive::{self, NoJobs};
use polite_core::{BatchMachine, BatchPolicy, Outcome, RateThrottle, SplitMix64};
use polite_lab::{Fault, LabConfig, LogStats as _, PathMatch, Quota, RetryAfterStyle};
use polite_tokio::{Client, Config, ReqwestTransport, TokioClock};

use crate::stats::{Table, median, num, ratio};
use crate::{Size, get, lab, ms};

/// One experiment: a quota, a service time, a batch, the clients to compare.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scenario {
    pub(crate) title: &'static str,
    pub(crate) limit: u32,
    pub(crate) window: Duration,
    pub(crate) slow: Option<Duration>,
    pub(crate) n: usize,
    pub(crate) concurrency: u32,
    pub(crate) reps: usize,
    pub(crate) timeout: Duration,
    /// Whether the labs give hints: `Retry-After` on every 429 and (unless
    /// the variant says otherwise) `RateLimit` headers. Without hints a 429
    /// is bare (the "no hints" suite).
    pub(crate) hints: bool,
    /// The clients, one lab each, all running at once.
    pub(crate) variants: &'static [Variant],
    /// Also show the time ÷ n/limit windows (the steady-rate ideal).
    pub(crate) vs_rate: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Variant {
    Semaphore,
    Backon,
    PoliteThrottle,
    PoliteThrottleNoHeaders,
    PoliteDefault,
    PoliteNoHeaders,
    CoreLearning,
}

impl Variant {
    const ALL: [Variant; 7] = [
        Variant::Semaphore,
        Variant::Backon,
        Variant::PoliteThrottle,
        Variant::PoliteThrottleNoHeaders,
        Variant::PoliteDefault,
        Variant::PoliteNoHeaders,
        Variant::CoreLearning,
    ];

    fn name(self, hints: bool) -> &'static str {
        match self {
            Variant::PoliteThrottle if !hints => {
                "polite, configured throttle (`Config::throttle` = the quota)"
            }
            Variant::PoliteDefault if !hints => {
                "polite, defaults (`Config::default()`: adaptive rate, told nothing)"
            }
            Variant::Semaphore => "semaphore only (tokio + reqwest + Semaphore)",
            Variant::Backon => "backon exponential retry on 429 (tokio + reqwest)",
            Variant::PoliteThrottle => "polite, configured throttle (the documented quota)",
            Variant::PoliteThrottleNoHeaders => {
                "polite, configured throttle, server sends no `RateLimit` headers"
            }
            Variant::PoliteDefault => "polite, defaults: learns the quota from `RateLimit` headers",
            Variant::PoliteNoHeaders => {
                "polite, defaults, server sends no `RateLimit` headers (429 + Retry-After only)"
            }
            Variant::CoreLearning => {
                "(polite-core `RateThrottle::learning` in a `BatchMachine`, same drive loop)"
            }
        }
    }

    /// Whether its lab sends `RateLimit` / `RateLimit-Policy`.
    fn headers(self) -> bool {
        !matches!(
            self,
            Variant::PoliteNoHeaders | Variant::PoliteThrottleNoHeaders
        )
    }
}

/// What one run of one variant gave.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    n429: usize,
    ok: usize,
    requests: usize,
    peak: usize,
    secs: f64,
}

async fn raw_get(http: &reqwest::Client, url: &str) -> Result<u16, ()> {
    let r = http
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|_| ())?;
    let status = r.status().as_u16();
    r.bytes().await.map_err(|_| ())?;
    Ok(status)
}

#[derive(Debug)]
enum PeerError {
    TooMany,
    Other,
}

/// Semaphore-limited tasks; `retry` adds backon's exponential retry on 429.
async fn peer(http: reqwest::Client, urls: Vec<String>, concurrency: u32, retry: bool) -> usize {
    let permits = Arc::new(tokio::sync::Semaphore::new(concurrency as usize));
    let mut set = tokio::task::JoinSet::new();
    for url in urls {
        let (http, permits) = (http.clone(), Arc::clone(&permits));
        set.spawn(async move {
            let Ok(_permit) = permits.acquire_owned().await else {
                return false;
            };
            if retry {
                let once = || {
                    let (http, url) = (http.clone(), url.clone());
                    async move {
                        match raw_get(&http, &url).await {
                            Ok(200) => Ok(()),
                            Ok(429) => Err(PeerError::TooMany),
                            _ => Err(PeerError::Other),
                        }
                    }
                };
                once.retry(
                    ExponentialBuilder::default()
                        .with_min_delay(Duration::from_millis(250))
                        .with_factor(2.0)
                        .with_max_delay(Duration::from_secs(4))
                        .with_jitter()
                        .with_max_times(10),
                )
                .when(|e| matches!(e, PeerError::TooMany))
                .await
                .is_ok()
            } else {
                raw_get(&http, &url).await == Ok(200)
            }
        });
    }
    let mut ok = 0;
    while let Some(r) = set.join_next().await {
        ok += usize::from(r.unwrap_or(false));
    }
    ok
}

async fn polite_client_batch(
    http: reqwest::Client,
    urls: Vec<String>,
    concurrency: u32,
    throttle: Option<(u32, Duration)>,
    timeout: Duration,
) -> usize {
    let config = Config {
        timeout,
        concurrency,
        throttle: throttle.map(|(limit, window)| polite_tokio::Throttle::new(limit, window)),
        seed: Some(7),
        ..Config::default()
    };
    let client = Client::with_transport(ReqwestTransport::new(http), config).expect("valid config");
    let requests = urls.iter().map(|u| get(u)).collect();
    match client.batch(requests).await {
        Ok(results) => results
            .iter()
            .filter(|r| r.as_ref().is_ok_and(|r| r.status() == 200))
            .count(),
        Err(_) => 0,
    }
}

/// polite's batch with a learning throttle: the polite-tokio pieces (reqwest
/// transport, tokio clock, the one drive loop), a `RateThrottle::learning`
/// pace instead of the client's configured one.
async fn polite_learning(
    http: reqwest::Client,
    urls: Vec<String>,
    concurrency: u32,
    timeout: Duration,
) -> usize {
    let transport = ReqwestTransport::new(http);
    let requests: Vec<http::Request<Bytes>> = urls.iter().map(|u| get(u)).collect();
    let infos = requests
        .iter()
        .zip(1u64..)
        .map(|(r, id)| polite_client::request_info(id, r))
        .collect();
    let pace = Arc::new(Mutex::new(
        RateThrottle::learning(1024).expect("valid max_limit"),
    ));
    let policy = BatchPolicy {
        concurrency,
        ..BatchPolicy::default()
    };
    let clock = TokioClock::new();
    let mut machine = BatchMachine::new(
        policy,
        infos,
        SplitMix64::new(7),
        pace,
        clock.now(),
        timeout,
    )
    .expect("valid policy");
    let mut io = HttpIo::new(&transport, clock, NeverCancel, &requests, "waitSeconds");
    let _ = drive::drive(&mut machine, &mut io, &mut NoJobs, &mut ()).await;
    machine
        .outcomes()
        .iter()
        .filter(|o| matches!(o, Some(Outcome::Succeeded { status: 200 })))
        .count()
}

fn lab_config(s: &Scenario, headers: bool) -> LabConfig {
    let mut c = LabConfig::default()
        .quota(Quota::fixed(s.limit, s.window))
        .ratelimit_headers(headers && s.hints);
    if !s.hints {
        c = c.retry_after_style(RetryAfterStyle::Omitted);
    }
    if let Some(slow) = s.slow {
        c = c.fault(PathMatch::Any, Fault::Slow(slow));
    }
    c
}

fn one_rep(s: &Scenario) -> Vec<(Variant, Run)> {
    let labs: Vec<_> = s
        .variants
        .iter()
        .map(|&v| (v, lab(lab_config(s, v.headers()))))
        .collect();
    let rt = crate::tokio_runtime();
    let runs: Vec<(Variant, usize, f64)> = rt.block_on(async {
        let http = crate::reqwest_client();
        let mut set = tokio::task::JoinSet::new();
        for (v, lab) in &labs {
            let urls: Vec<String> = (0..s.n).map(|i| lab.url(&format!("/items/{i}"))).collect();
            let (v, http, s) = (*v, http.clone(), *s);
            set.spawn(async move {
                let start = Instant::now();
                let work = async {
                    match v {
                        Variant::Semaphore => peer(http, urls, s.concurrency, false).await,
                        Variant::Backon => peer(http, urls, s.concurrency, true).await,
                        Variant::PoliteThrottle | Variant::PoliteThrottleNoHeaders => {
                            let throttle = Some((s.limit, s.window));
                            polite_client_batch(http, urls, s.concurrency, throttle, s.timeout)
                                .await
                        }
                        Variant::PoliteDefault | Variant::PoliteNoHeaders => {
                            polite_client_batch(http, urls, s.concurrency, None, s.timeout).await
                        }
                        Variant::CoreLearning => {
                            polite_learning(http, urls, s.concurrency, s.timeout).await
                        }
                    }
                };
                let bound = s.timeout + Duration::from_secs(30);
                let ok = tokio::time::timeout(bound, work).await.unwrap_or(0);
                (v, ok, ms(start.elapsed()) / 1e3)
            });
        }
        let mut runs = Vec::new();
        while let Some(r) = set.join_next().await {
            runs.push(r.expect("task"));
        }
        runs
    });
    labs.iter()
        .map(|(v, lab)| {
            let log = lab.log();
            let (_, ok, secs) =
                runs.iter()
                    .find(|r| r.0 == *v)
                    .copied()
                    .unwrap_or((*v, 0, f64::NAN));
            (
                *v,
                Run {
                    n429: log.count_429(),
                    ok,
                    requests: log.len(),
                    peak: log.peak_in_flight(),
                    secs,
                },
            )
        })
        .collect()
}

/// Runs `s.reps` repetitions of `s` and tabulates the medians against the
/// limit (0 × 429, the quota's rate).
pub(crate) fn scenario_table(s: &Scenario) -> Table {
    let mut all: Vec<(Variant, Run)> = Vec::new();
    for _ in 0..s.reps {
        all.extend(one_rep(s));
    }
    let windows = s.n.div_ceil(s.limit as usize).saturating_sub(1) as f64;
    let ideal = windows * s.window.as_secs_f64();
    // n sends at exactly the quota's rate, with no burst at the start.
    let steady = s.n as f64 / f64::from(s.limit) * s.window.as_secs_f64();
    let mut head = vec![
        "client",
        "429s p50",
        "429s max",
        "items ok p50",
        "requests p50",
        "peak in flight",
        "total time p50 s",
    ];
    if s.vs_rate {
        head.push("time ÷ n/rate");
    }
    head.push("time vs limit");
    let mut t = Table::new(s.title, &head);
    let mut limit_row = vec![
        "**limit**".into(),
        "0".into(),
        "0".into(),
        s.n.to_string(),
        s.n.to_string(),
        s.concurrency.to_string(),
        format!("≈ {}", num(ideal, 2)),
    ];
    if s.vs_rate {
        limit_row.push(ratio(ideal, steady));
    }
    limit_row.push("1.00×".into());
    t.row(limit_row);
    for &v in s.variants {
        let runs: Vec<Run> = all.iter().filter(|r| r.0 == v).map(|r| r.1).collect();
        let f = |g: fn(&Run) -> f64| median(runs.iter().map(g));
        let max429 = runs.iter().map(|r| r.n429).max().unwrap_or(0);
        let secs = f(|r| r.secs);
        let mut row = vec![
            v.name(s.hints).into(),
            num(f(|r| r.n429 as f64), 0),
            max429.to_string(),
            format!("{}/{}", num(f(|r| r.ok as f64), 0), s.n),
            num(f(|r| r.requests as f64), 0),
            num(f(|r| r.peak as f64), 0),
            num(secs, 2),
        ];
        if s.vs_rate {
            row.push(ratio(secs, steady));
        }
        row.push(ratio(secs, ideal));
        t.row(row);
    }
    t.note(format!(
        "Quota {} per {} ms (fixed windows from the lab's start){}{}, {} GETs, concurrency {}, \
         {} reps (medians), batch timeout {} s. \"time vs limit\": total time ÷ the \
         (⌈n/limit⌉ − 1) windows that n requests need at the quota's rate{}.",
        s.limit,
        s.window.as_millis(),
        s.slow
            .map(|d| format!(", {} ms service time", d.as_millis()))
            .unwrap_or_default(),
        if s.hints {
            ""
        } else {
            ", bare 429s (no `Retry-After`, no `RateLimit` headers)"
        },
        s.n,
        s.concurrency,
        s.reps,
        s.timeout.as_secs(),
        if s.vs_rate {
            format!(
                " (≈ {} s); \"time ÷ n/rate\": total time ÷ n/limit windows (≈ {} s, \
                 every send at the quota's steady rate)",
                num(ideal, 2),
                num(steady, 2)
            )
        } else {
            String::new()
        }
    ));
    t
}

/// Runs the suite.
#[must_use]
pub fn run(size: Size) -> Vec<Table> {
    let pacing = Scenario {
        title: "The pacing experiment (SPEC §4): 8 requests, quota 3 per 500 ms",
        limit: 3,
        window: Duration::from_millis(500),
        slow: Some(Duration::from_millis(15)),
        n: 8,
        concurrency: 2,
        reps: size.pick(5, 1),
        timeout: Duration::from_secs(20),
        hints: true,
        variants: &Variant::ALL,
        vs_rate: false,
    };
    let batch = Scenario {
        title: "A 200-request batch against 20 requests per second",
        limit: 20,
        window: Duration::from_secs(1),
        slow: None,
        n: size.pick(200, 24),
        concurrency: 4,
        reps: size.pick(3, 1),
        timeout: Duration::from_secs(60),
        hints: true,
        variants: &Variant::ALL,
        vs_rate: false,
    };
    vec![scenario_table(&pacing), scenario_table(&batch)]
}
