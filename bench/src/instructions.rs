//! Instructions per call: what one polite call costs over its bare HTTP
//! client, counted by valgrind's callgrind rather than timed. A count does
//! not move with the machine's load (this VM's loopback latency moves
//! fivefold with it, and it has no hardware counters), so it shows a
//! change of a few hundred instructions that a timed run cannot.
//!
//! Each variant runs `n` sequential loopback GETs against a lab in this
//! same process (`polite-bench calls <variant> <n>`), under
//! `valgrind --tool=callgrind`, twice (`n` and `2n`); the difference,
//! divided by `n`, is the cost of one more call — setup (runtime, lab,
//! clients) cancels out. The lab's own work per request is included on
//! both sides of every ratio.

use std::process::Command;
use std::time::{Duration, Instant};

use polite_client::Transport as _;
use polite_lab::LabConfig;

use crate::stats::Table;
use crate::{Size, get, lab};

const TIMEOUT: Duration = Duration::from_secs(5);

/// The variants, in the order of their rows: (name, the bare client it is
/// compared with, or `None` for a bare client).
pub const VARIANTS: &[(&str, Option<&str>)] = &[
    ("reqwest", None),
    ("tokio-transport", Some("reqwest")),
    ("tokio-send", Some("reqwest")),
    ("middleware", Some("reqwest")),
    ("hyper", None),
    ("layer", Some("hyper")),
];

/// Runs `n` sequential GETs of `variant` against a fresh lab; returns how
/// many were answered 200 (the `calls` helper, run under callgrind).
///
/// # Panics
///
/// On an unknown variant, or when a client cannot be built.
#[must_use]
pub fn calls(variant: &str, n: usize) -> usize {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use tower::ServiceExt;
    type Upstream = hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        polite_tokio::PoliteBody<Full<Bytes>>,
    >;
    type Bare = hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Full<Bytes>,
    >;
    assert!(
        VARIANTS.iter().any(|(v, _)| *v == variant),
        "unknown variant {variant}"
    );
    let lab = lab(LabConfig::default());
    let url = lab.url("/items/a");
    let rt = crate::tokio_current_thread();
    rt.block_on(async {
        let config = polite_tokio::Config {
            timeout: TIMEOUT,
            ..polite_tokio::Config::default()
        };
        let raw = crate::reqwest_client();
        let transport = polite_tokio::ReqwestTransport::new(crate::reqwest_client());
        let polite = polite_tokio::Client::with_transport(
            polite_tokio::ReqwestTransport::new(crate::reqwest_client()),
            config.clone(),
        )
        .expect("valid config");
        let middleware = reqwest_middleware::ClientBuilder::new(crate::reqwest_client())
            .with(polite_tokio::PoliteMiddleware::new(config.clone()).expect("valid config"))
            .build();
        let executor = hyper_util::rt::TokioExecutor::new();
        let hyper: Bare =
            hyper_util::client::legacy::Client::builder(executor.clone()).build_http();
        let upstream: Upstream = hyper_util::client::legacy::Client::builder(executor).build_http();
        let layered = tower::ServiceBuilder::new()
            .layer(polite_tokio::PoliteLayer::new(config).expect("valid config"))
            .service(upstream);
        let uri: http::Uri = url.parse().expect("a lab URL");
        let request = || {
            let mut r = http::Request::new(Full::new(Bytes::new()));
            *r.uri_mut() = uri.clone();
            r
        };
        let mut ok = 0;
        for _ in 0..n {
            let good = match variant {
                "tokio-transport" => transport
                    .send(get(&url), Instant::now() + TIMEOUT)
                    .await
                    .is_ok_and(|r| r.status() == 200),
                "tokio-send" => polite
                    .send(get(&url))
                    .await
                    .is_ok_and(|r| r.status() == 200),
                "middleware" => match middleware.get(&url).timeout(TIMEOUT).send().await {
                    Ok(r) => r.status() == 200 && r.bytes().await.is_ok(),
                    Err(_) => false,
                },
                "hyper" => match tokio::time::timeout(TIMEOUT, async {
                    let r = hyper.request(request()).await.ok()?;
                    let ok = r.status() == 200;
                    r.into_body().collect().await.ok().map(|_| ok)
                })
                .await
                {
                    Ok(Some(ok)) => ok,
                    _ => false,
                },
                "layer" => match layered.clone().oneshot(request()).await {
                    Ok(r) => r.status() == 200 && r.into_body().collect().await.is_ok(),
                    Err(_) => false,
                },
                _ => match raw.get(&url).timeout(TIMEOUT).send().await {
                    Ok(r) => r.status() == 200 && r.bytes().await.is_ok(),
                    Err(_) => false,
                },
            };
            ok += usize::from(good);
        }
        ok
    })
}

/// Instructions callgrind counts for `polite-bench calls <variant> <n>`.
fn counted(variant: &str, n: usize) -> Result<u64, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(me)
        .args(["calls", variant, &n.to_string()])
        .output()
        .map_err(|e| format!("valgrind: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("valgrind failed: {}", stderr.trim()));
    }
    // "==123== Collected : 170795553"
    stderr
        .lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no instruction count in: {}", stderr.trim()))
}

/// The suite: instructions per call of every variant, and each polite
/// variant's ratio to its bare client. Without valgrind (and at smoke
/// size) it runs each variant in this process instead and says so.
#[must_use]
pub fn run(size: Size) -> Vec<Table> {
    let n = match size {
        Size::Full => 1000,
        Size::Smoke => 5,
    };
    let mut t = Table::new(
        "Instructions per call (callgrind, sequential loopback GETs)",
        &[
            "variant",
            "instructions per call",
            "over its bare client",
            "ratio",
        ],
    );
    let valgrind = size == Size::Full
        && Command::new("valgrind")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if !valgrind {
        for (variant, _) in VARIANTS {
            let ok = calls(variant, n);
            t.row(vec![
                (*variant).to_owned(),
                format!("not counted ({ok}/{n} answered 200)"),
                "-".to_owned(),
                "-".to_owned(),
            ]);
        }
        t.notes.push(match size {
            Size::Smoke => {
                "Smoke size: each variant ran in this process, nothing counted.".to_owned()
            }
            Size::Full => {
                "valgrind not found (Debian: `apt-get install valgrind`): nothing counted."
                    .to_owned()
            }
        });
        return vec![t];
    }
    let mut per_call: Vec<(&str, Result<u64, String>)> = Vec::new();
    for (variant, _) in VARIANTS {
        let cost = counted(variant, n)
            .and_then(|one| counted(variant, 2 * n).map(|two| two.saturating_sub(one) / n as u64));
        per_call.push((variant, cost));
    }
    let cost_of = |name: &str| {
        per_call
            .iter()
            .find(|(v, _)| *v == name)
            .and_then(|(_, c)| c.as_ref().ok().copied())
    };
    for ((variant, peer), (_, cost)) in VARIANTS.iter().zip(&per_call) {
        let (count, over, ratio) = match (cost, peer.and_then(cost_of)) {
            (Ok(c), Some(p)) => (
                c.to_string(),
                format!("+{}", c.saturating_sub(p)),
                format!("**{:.2}×**", *c as f64 / p as f64),
            ),
            (Ok(c), None) => (c.to_string(), "-".to_owned(), "-".to_owned()),
            (Err(e), _) => (format!("failed: {e}"), "-".to_owned(), "-".to_owned()),
        };
        t.row(vec![(*variant).to_owned(), count, over, ratio]);
    }
    t.notes.push(format!(
        "(I({}) - I({n})) / {n} per variant under `valgrind --tool=callgrind`; the lab's work per request is on both sides. `cargo run --release -p polite-bench -- instructions`.",
        2 * n
    ));
    vec![t]
}
