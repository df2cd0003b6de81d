//! Scale: many concurrent waits on the tokio adapter against the lab (long
//! poll), and what each machine weighs.
//!
//! The lab and the clients run in **separate processes** (this binary
//! re-executed as `serve-lab` and `scale-client`), so that each side's
//! memory and CPU are its own and each stays under the open-files limit
//! (10,000 waits need 10,000 sockets on each side). Per variant, a fresh lab
//! declares N jobs that turn `passed` 8 s after their first request and holds
//! a long poll at most 2 s (so each wait polls about five times); the client
//! process starts N waits at once on a 2-worker tokio runtime, one task per
//! wait, and reports its resident memory before (`VmRSS`) and its peak after
//! (`VmHWM`), and its CPU time (`/proc/self/stat` utime + stime).
//!
//! Variants: polite-tokio `wait` (one shared `Client`), and the same long
//! poll written by hand on reqwest (loop: `GET ?waitSeconds=N` until the
//! state is not `running`) as the peer.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use polite_client::ClientPace;
use polite_core::pace::Unpaced;
use polite_core::{
    BatchMachine, BatchPolicy, Method, Paced, PollMachine, RateThrottle, RequestId, RequestInfo,
    RetryMachine, SplitMix64,
};
use polite_lab::{JobClock, JobState, LabConfig, LogStats as _};
use polite_tokio::{Client, Config, JsonJob, ReqwestTransport};

use crate::proc::{clk_tck, cpu_seconds, hwm_kib, open_files_limit, rss_kib};
use crate::stats::{Table, median, num, ratio};
use crate::{Size, get, lab};

/// The call timeout of the scale runs.
const TIMEOUT: Duration = Duration::from_secs(30);

/// `key=value` pairs of a result line.
fn field(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The hidden `serve-lab` command: serves `n` jobs on 127.0.0.1, prints
/// `ADDR host:port`, and on end of stdin prints what the lab saw and exits.
pub fn serve_lab(n: usize, job: Duration, max_wait: Duration) {
    let mut config = LabConfig::default()
        .job_clock(JobClock::FirstRequest)
        .max_wait(max_wait);
    for i in 0..n {
        config = config.job(format!("j{i}"), job, JobState::Passed);
    }
    let lab = lab(config);
    println!("ADDR {}", lab.addr());
    let _ = std::io::stdout().flush();
    let cpu0 = cpu_seconds().unwrap_or(f64::NAN);
    // Bounded: the parent closes stdin when its client is done (or dies).
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    let log = lab.log();
    println!(
        "LAB requests={} peak={} ok200={} cpu_s={:.3} hwm_kib={}",
        log.len(),
        log.peak_in_flight(),
        log.count_status(200),
        cpu_seconds().unwrap_or(f64::NAN) - cpu0,
        hwm_kib().unwrap_or(0)
    );
    let _ = std::io::stdout().flush();
}

/// The peer: a hand-written long-poll loop on reqwest, bounded in polls and time.
async fn raw_long_poll(http: reqwest::Client, url: String) -> bool {
    let deadline = Instant::now() + TIMEOUT;
    for _ in 0..100 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left < Duration::from_secs(1) {
            break;
        }
        let wait = left.as_secs().min(25);
        let sent = http
            .get(format!("{url}?waitSeconds={wait}"))
            .timeout(left + Duration::from_secs(2))
            .send()
            .await;
        let Ok(resp) = sent else { return false };
        let Ok(body) = resp.bytes().await else {
            return false;
        };
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        match v.get("status").and_then(serde_json::Value::as_str) {
            Some("running") => {}
            Some(state) => return state == "passed",
            None => return false,
        }
    }
    false
}

/// The hidden `scale-client` command: `n` concurrent waits against the lab
/// at `addr`; prints one `RESULT` line.
pub fn scale_client(addr: &str, n: usize, variant: &str) {
    let rt = crate::tokio_runtime();
    let http = crate::reqwest_client();
    let client = Client::with_transport(
        ReqwestTransport::new(http.clone()),
        Config {
            timeout: TIMEOUT,
            ..Config::default()
        },
    )
    .expect("valid config");
    let polite = variant == "polite";
    let rss0 = rss_kib().unwrap_or(0);
    let cpu0 = cpu_seconds().unwrap_or(f64::NAN);
    let start = Instant::now();
    let ok = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..n {
            let url = format!("http://{addr}/runs/j{i}");
            if polite {
                let c = client.clone();
                set.spawn(async move {
                    c.wait(get(&url), &mut JsonJob::new("status"))
                        .await
                        .is_ok_and(|d| d.state == "passed")
                });
            } else {
                set.spawn(raw_long_poll(http.clone(), url));
            }
        }
        let all = async {
            let mut ok = 0usize;
            while let Some(r) = set.join_next().await {
                ok += usize::from(r.unwrap_or(false));
            }
            ok
        };
        tokio::time::timeout(TIMEOUT + Duration::from_secs(30), all)
            .await
            .unwrap_or(0)
    });
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds().unwrap_or(f64::NAN) - cpu0;
    println!(
        "RESULT ok={ok} n={n} wall_s={wall:.3} rss_before_kib={rss0} hwm_after_kib={} rss_after_kib={} cpu_s={cpu:.3}",
        hwm_kib().unwrap_or(0),
        rss_kib().unwrap_or(0)
    );
    let _ = std::io::stdout().flush();
}

/// One lab process and one client process; returns (client line, lab line).
fn one_run(
    n: usize,
    variant: &str,
    job: Duration,
    max_wait: Duration,
) -> Result<(String, String), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut lab = Command::new(&exe)
        .args([
            "serve-lab",
            &n.to_string(),
            &job.as_millis().to_string(),
            &max_wait.as_millis().to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the lab process: {e}"))?;
    let mut lab_out = BufReader::new(lab.stdout.take().ok_or("no lab stdout")?);
    let mut line = String::new();
    lab_out
        .read_line(&mut line)
        .map_err(|e| format!("lab: {e}"))?;
    let addr = line
        .trim()
        .strip_prefix("ADDR ")
        .ok_or_else(|| format!("lab said {line:?}"))?
        .to_owned();
    let client = Command::new(&exe)
        .args(["scale-client", &addr, &n.to_string(), variant])
        .stdout(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run the client process: {e}"))?;
    let out = String::from_utf8_lossy(&client.stdout).into_owned();
    let result = out
        .lines()
        .find(|l| l.starts_with("RESULT"))
        .unwrap_or("RESULT")
        .to_owned();
    drop(lab.stdin.take()); // end of stdin: the lab reports and exits
    let mut rest = String::new();
    let _ = lab_out.read_to_string(&mut rest);
    let _ = lab.wait();
    let lab_line = rest
        .lines()
        .find(|l| l.starts_with("LAB"))
        .unwrap_or("LAB")
        .to_owned();
    if !client.status.success() {
        return Err(format!(
            "client process failed ({}): {}",
            client.status,
            String::from_utf8_lossy(&client.stderr)
        ));
    }
    Ok((result, lab_line))
}

fn waits_table(size: Size) -> Table {
    let n = size.pick(10_000, 40);
    let reps = size.pick(2, 1);
    let job = size.pick(Duration::from_secs(8), Duration::from_secs(1));
    let max_wait = size.pick(Duration::from_secs(2), Duration::from_secs(1));
    let mut t = Table::new(
        &format!("{n} concurrent waits (tokio, long poll, one task per wait)"),
        &[
            "client",
            "waits ok",
            "lab peak in flight",
            "polls",
            "wall s",
            "peak RSS MiB",
            "RSS per wait KiB",
            "CPU s per 1,000 polls",
            "RSS/wait vs peer",
            "CPU/poll vs peer",
        ],
    );
    let mut results: Vec<(&str, String, String)> = Vec::new();
    let mut errors = Vec::new();
    for _ in 0..reps {
        for variant in ["reqwest", "polite"] {
            match one_run(n, variant, job, max_wait) {
                Ok((r, l)) => results.push((variant, r, l)),
                Err(e) => errors.push(format!("{variant}: {e}")),
            }
        }
    }
    let stat = |variant: &str, f: &dyn Fn(&str, &str) -> f64| {
        median(
            results
                .iter()
                .filter(|r| r.0 == variant)
                .map(|r| f(&r.1, &r.2)),
        )
    };
    let per_wait =
        |r: &str, _: &str| (field(r, "hwm_after_kib") - field(r, "rss_before_kib")) / field(r, "n");
    let per_k = |r: &str, l: &str| field(r, "cpu_s") / field(l, "requests") * 1000.0;
    let peer_wait = stat("reqwest", &per_wait);
    let peer_k = stat("reqwest", &per_k);
    for (variant, name) in [
        ("reqwest", "hand-written long poll on reqwest (peer)"),
        ("polite", "polite-tokio `wait`"),
    ] {
        let w = stat(variant, &per_wait);
        let k = stat(variant, &per_k);
        t.row(vec![
            name.into(),
            format!(
                "{}/{n}",
                num(stat(variant, &|r: &str, _: &str| field(r, "ok")), 0)
            ),
            num(stat(variant, &|_: &str, l: &str| field(l, "peak")), 0),
            num(stat(variant, &|_: &str, l: &str| field(l, "requests")), 0),
            num(stat(variant, &|r: &str, _: &str| field(r, "wall_s")), 1),
            num(
                stat(variant, &|r: &str, _: &str| field(r, "hwm_after_kib")) / 1024.0,
                1,
            ),
            num(w, 1),
            num(k, 3),
            ratio(w, peer_wait),
            ratio(k, peer_k),
        ]);
    }
    let lab_cpu = stat("polite", &|_: &str, l: &str| {
        field(l, "cpu_s") / field(l, "requests") * 1000.0
    });
    t.note(format!(
        "Jobs turn `passed` {} s after their first request; the lab holds a long poll at most \
         {} s; call timeout {} s. Lab and clients in separate processes (open-files limit {}; \
         CPU ticks {}/s); {reps} run(s) per client, alternating, medians. RSS per wait = (peak \
         RSS − RSS before the waits) / waits. The lab process spent {} CPU s per 1,000 polls.",
        job.as_secs(),
        max_wait.as_secs(),
        TIMEOUT.as_secs(),
        open_files_limit().map_or("?".to_owned(), |n| n.to_string()),
        clk_tck(),
        num(lab_cpu, 3),
    ));
    for e in errors {
        t.note(format!("**Failed run** — {e}"));
    }
    t
}

/// What the machines weigh: `size_of` each, a batch's heap per item, and
/// the futures a call allocates per task.
#[must_use]
pub fn sizes_table(size: Size) -> Table {
    type Shared = Arc<Mutex<ClientPace>>;
    let mut t = Table::new("What a wait weighs (bytes)", &["item", "bytes", "note"]);
    let mut row = |item: &str, bytes: usize, note: &str| {
        t.row(vec![item.into(), bytes.to_string(), note.into()]);
    };
    row(
        "`RetryMachine<SplitMix64>`",
        size_of::<RetryMachine<SplitMix64>>(),
        "inline, no heap",
    );
    row(
        "`PollMachine<SplitMix64>`",
        size_of::<PollMachine<SplitMix64>>(),
        "inline, no heap",
    );
    row(
        "`Paced<RetryMachine<SplitMix64>, Arc<Mutex<ClientPace>>>`",
        size_of::<Paced<RetryMachine<SplitMix64>, Shared>>(),
        "what polite-client's `send` drives",
    );
    row(
        "`Paced<PollMachine<SplitMix64>, Arc<Mutex<ClientPace>>>`",
        size_of::<Paced<PollMachine<SplitMix64>, Shared>>(),
        "what polite-client's `wait` drives",
    );
    row(
        "`RateThrottle`",
        size_of::<RateThrottle>(),
        &format!(
            "+ {} B per slot (`limit` slots, allocated once)",
            size_of::<Instant>()
        ),
    );
    row(
        "`BatchMachine<SplitMix64, Arc<Mutex<ClientPace>>>`",
        size_of::<BatchMachine<SplitMix64, Shared>>(),
        "fixed part; per item see below",
    );
    // A batch's heap per item, from the resident-set growth of a big batch.
    let items = size.pick(1_000_000u64, 10_000);
    let before = rss_kib().unwrap_or(0);
    let infos: Vec<RequestInfo> = (0..items)
        .map(|i| RequestInfo::new(RequestId(i), Method::Get))
        .collect();
    let batch = BatchMachine::new(
        BatchPolicy::default(),
        infos,
        SplitMix64::new(1),
        Unpaced,
        Instant::now(),
        Duration::from_secs(60),
    )
    .expect("valid policy");
    let after = rss_kib().unwrap_or(0);
    let per_item = after.saturating_sub(before) as f64 * 1024.0 / items as f64;
    drop(batch);
    t.row(vec![
        "`BatchMachine` heap per item".into(),
        format!("≈ {per_item:.0}"),
        format!("resident-set growth of a {items}-item batch ÷ items"),
    ]);
    // Futures: what one call costs a task before it does anything.
    let http = crate::reqwest_client();
    let client = Client::with_transport(ReqwestTransport::new(http.clone()), Config::default())
        .expect("valid config");
    let url = "http://127.0.0.1:9/runs/j";
    let mut job = JsonJob::new("status");
    let send = client.send(get(url));
    let wait = client.wait(get(url), &mut job);
    let raw = http.get(url).send();
    let (s, w, r) = (
        std::mem::size_of_val(&send),
        std::mem::size_of_val(&wait),
        std::mem::size_of_val(&raw),
    );
    drop((send, wait, raw));
    t.row(vec![
        "polite-tokio `Client::send` future".into(),
        s.to_string(),
        "the drive loop, machine and request inline; each attempt is boxed separately".into(),
    ]);
    t.row(vec![
        "polite-tokio `Client::wait` future".into(),
        w.to_string(),
        String::new(),
    ]);
    t.row(vec![
        "reqwest `RequestBuilder::send` future (peer)".into(),
        r.to_string(),
        "one attempt; reqwest keeps its state on the heap behind this handle".into(),
    ]);
    let (middleware, layer) = integration_boxes(url);
    t.row(vec![
        "`PoliteMiddleware::handle` future".into(),
        middleware.to_string(),
        "boxed by async-trait, one per call".into(),
    ]);
    t.row(vec![
        "`PoliteService::call` future (over hyper-util)".into(),
        layer.to_string(),
        "boxed, one per call".into(),
    ]);
    t
}

/// The sizes of the boxed call futures of `PoliteMiddleware` (read by a
/// middleware in front of it) and of `PoliteService` over hyper-util.
fn integration_boxes(url: &str) -> (usize, usize) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::Service as _;

    type Handled<'a> = std::pin::Pin<
        Box<
            dyn std::future::Future<Output = reqwest_middleware::Result<reqwest::Response>>
                + Send
                + 'a,
        >,
    >;
    /// Creates the next middleware's future, notes its size, drops it.
    struct Probe(Arc<AtomicUsize>);
    impl reqwest_middleware::Middleware for Probe {
        fn handle<'s, 'e, 'n, 'f>(
            &'s self,
            req: reqwest::Request,
            extensions: &'e mut http::Extensions,
            next: reqwest_middleware::Next<'n>,
        ) -> Handled<'f>
        where
            's: 'f,
            'e: 'f,
            'n: 'f,
            Self: 'f,
        {
            let next_call = next.run(req, extensions);
            self.0
                .store(std::mem::size_of_val(&*next_call), Ordering::Relaxed);
            drop(next_call);
            Box::pin(std::future::ready(Err(
                reqwest_middleware::Error::middleware(std::io::Error::other("probe")),
            )))
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let seen = Arc::new(AtomicUsize::new(0));
        let stack = reqwest_middleware::ClientBuilder::new(crate::reqwest_client())
            .with(Probe(seen.clone()))
            .with(polite_tokio::PoliteMiddleware::new(Config::default()).expect("valid config"))
            .build();
        let _ = stack.get(url).send().await;
        let executor = hyper_util::rt::TokioExecutor::new();
        let upstream: hyper_util::client::legacy::Client<
            hyper_util::client::legacy::connect::HttpConnector,
            polite_tokio::PoliteBody<http_body_util::Full<bytes::Bytes>>,
        > = hyper_util::client::legacy::Client::builder(executor).build_http();
        let mut layered = tower::ServiceBuilder::new()
            .layer(polite_tokio::PoliteLayer::new(Config::default()).expect("valid config"))
            .service(upstream);
        let call = layered.call(http::Request::new(http_body_util::Full::new(
            bytes::Bytes::new(),
        )));
        let layer = std::mem::size_of_val(&*call);
        drop(call);
        (seen.load(Ordering::Relaxed), layer)
    })
}

/// Runs the suite.
#[must_use]
pub fn run(size: Size) -> Vec<Table> {
    vec![sizes_table(size), waits_table(size)]
}
