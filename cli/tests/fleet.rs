//! The fleet evidence (issue 20, SPEC §4.3): N = 8 real `polite batch`
//! processes against one lab quota of R per second, sharing the pace
//! through a real redis-server (`--redis`), against the same 8 processes
//! without it. Three quotas: configured (`--rate`), learnt from the
//! `RateLimit` headers, and bare 429s (the adaptive rate). The lab counts
//! the 429s; every item must succeed exactly once. Each test prints its
//! numbers and its time against the ideal (items ÷ R).

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use polite_lab::redis::Redis;
use polite_lab::{Lab, LabConfig, LabHandle, LogStats, Quota, RetryAfterStyle};

const PROCESSES: usize = 8;
const ITEMS: usize = 10;
/// The lab's quota: R requests per second.
const R: u32 = 40;

/// Starts `polite batch ARGS` with its URLs on stdin.
fn spawn(args: &[String], urls: &str) -> std::process::Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_polite"))
        .arg("batch")
        .args(args)
        .env_remove("POLITE_REDIS_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(urls.as_bytes())
        .expect("urls written");
    child
}

fn ok_lines(o: &Output) -> usize {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains(r#""ok":true"#))
        .count()
}

/// What one fleet run did.
struct Run {
    refused: usize,
    took: Duration,
    /// Every process's stderr, one after the other.
    stderr: String,
    /// Each process's stderr.
    stderrs: Vec<String>,
}

impl Run {
    /// Each process told of an outage once and of the recovery once, in
    /// turn (never twice in a row, never a recovery first), and at most
    /// `outages` outages (SPEC §4.3's notices: one per change, not one
    /// per failed step). A process may see more outages than the fault
    /// done to Redis: on a loaded machine a step slower than the fleet's
    /// timeout is one too ("does not answer in time"), and is told as one.
    fn notices_alternate(&self, outages: usize) {
        for err in &self.stderrs {
            let mut down = 0;
            let mut last = None;
            for line in err.lines() {
                let now = if line.contains("does not answer") {
                    down += 1;
                    "down"
                } else if line.contains("answers again") {
                    "up"
                } else {
                    continue;
                };
                assert_ne!(last.unwrap_or("up"), now, "told twice: {err}");
                last = Some(now);
            }
            assert!(down <= outages, "{down} outages told: {err}");
        }
    }
}

/// Runs the 8 processes at once against a fresh lab made by `lab`, each
/// with `args` (and `--redis` when `redis` is given).
fn fleet(lab: &LabConfig, args: &[&str], redis: Option<(&Redis, &str)>) -> Run {
    let redis = redis.map(|(r, prefix)| (r.url(), prefix));
    fleet_with(lab, args, redis, |_| {})
}

/// [`fleet`], with `fault` run on a thread of its own meanwhile (given the
/// lab, e.g. to wait for some requests), and Redis given by its URL.
fn fleet_with(
    lab: &LabConfig,
    args: &[&str],
    redis: Option<(String, &str)>,
    fault: impl FnOnce(&LabHandle) + Send,
) -> Run {
    let lab = Lab::start(lab.clone()).unwrap();
    let mut common: Vec<String> = ["--timeout", "60s"]
        .iter()
        .chain(args)
        .map(ToString::to_string)
        .collect();
    if let Some((url, prefix)) = redis {
        common.extend([
            "--redis".into(),
            url,
            "--redis-key-prefix".into(),
            prefix.into(),
            "--fleet-size".into(),
            PROCESSES.to_string(),
        ]);
    }
    let started = Instant::now();
    let children: Vec<_> = (0..PROCESSES)
        .map(|p| {
            let urls: String = (0..ITEMS)
                .map(|i| lab.url(&format!("/items/p{p}-{i}")) + "\n")
                .collect();
            spawn(&common, &urls)
        })
        .collect();
    let outputs: Vec<Output> = std::thread::scope(|s| {
        s.spawn(|| fault(&lab));
        children
            .into_iter()
            .map(|c| c.wait_with_output().expect("it ends"))
            .collect()
    });
    let took = started.elapsed();
    let mut stderrs = Vec::new();
    for o in &outputs {
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert_eq!(ok_lines(o), ITEMS, "{err}");
        stderrs.push(err);
    }
    let log = lab.log();
    assert_eq!(log.count_status(200), PROCESSES * ITEMS, "each item once");
    Run {
        refused: log.count_429(),
        took,
        stderr: stderrs.concat(),
        stderrs,
    }
}

/// Both runs, printed; returns (shared, alone).
fn compare(name: &str, lab: &LabConfig, args: &[&str]) -> Option<(Run, Run)> {
    let binary = Redis::find_or_skip()?;
    let redis = Redis::start(&binary);
    let alone = fleet(lab, args, None);
    let shared = fleet(lab, args, Some((&redis, name)));
    let ideal = (PROCESSES * ITEMS) as f64 / f64::from(R);
    eprintln!(
        "{PROCESSES} processes x {ITEMS} items, lab quota {R}/s, {name}: \
         without Redis {} x 429 in {:.2?} ({:.2}x ideal); \
         with Redis {} x 429 in {:.2?} ({:.2}x ideal {ideal} s)",
        alone.refused,
        alone.took,
        alone.took.as_secs_f64() / ideal,
        shared.refused,
        shared.took,
        shared.took.as_secs_f64() / ideal,
    );
    assert!(
        !shared.stderr.contains("does not answer"),
        "{}",
        shared.stderr
    );
    Some((shared, alone))
}

#[test]
fn eight_processes_share_a_configured_quota() {
    let lab = LabConfig::default().quota(Quota::fixed(R, Duration::from_secs(1)));
    let rate = format!("{R}/1s");
    let Some((shared, alone)) = compare("configured", &lab, &["--rate", &rate]) else {
        return;
    };
    assert_eq!(shared.refused, 0);
    assert!(alone.refused > 0, "8 processes at {R}/s each overran {R}/s");
}

#[test]
fn eight_processes_share_a_learnt_quota() {
    let lab = LabConfig::default()
        .quota(Quota::fixed(R, Duration::from_secs(1)))
        .ratelimit_headers(true);
    let Some((shared, alone)) = compare("learnt", &lab, &[]) else {
        return;
    };
    assert_eq!(shared.refused, 0);
    assert!(alone.refused > 0);
}

#[test]
fn eight_processes_adapt_together_to_bare_429s() {
    let lab = LabConfig::default()
        .quota(Quota::fixed(R, Duration::from_secs(1)))
        .retry_after_style(RetryAfterStyle::Omitted);
    let Some((shared, _alone)) = compare("bare 429s (adaptive)", &lab, &[]) else {
        return;
    };
    // At most one burst: what the fleet sends in one window of the quota
    // before the first 429 reaches it.
    assert!(
        shared.refused <= R as usize,
        "{} x 429 with a shared adaptive rate",
        shared.refused
    );
}

/// Waits (bounded: 20 s) until the lab has seen `n` requests.
fn after_requests(lab: &LabHandle, n: usize) {
    let started = Instant::now();
    while lab.log().len() < n {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the fleet stalled"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The 8 processes with `--rate R/1s` through Redis, `fault` done to it
/// after 24 requests; prints and returns the 429s and the notices heard.
fn failover(name: &str, fault: impl FnOnce(&mut Redis, &LabHandle) + Send) -> Option<Run> {
    let binary = Redis::find_or_skip()?;
    let mut redis = Redis::start(&binary);
    let lab = LabConfig::default().quota(Quota::fixed(R, Duration::from_secs(1)));
    let rate = format!("{R}/1s");
    let url = redis.url();
    let run = fleet_with(&lab, &["--rate", &rate], Some((url, name)), |lab| {
        after_requests(lab, 24);
        fault(&mut redis, lab);
    });
    let ideal = (PROCESSES * ITEMS) as f64 / f64::from(R);
    let unavailable = run.stderr.matches("does not answer").count();
    eprintln!(
        "{PROCESSES} processes x {ITEMS} items, lab quota {R}/s, --rate {R}/1s, Redis {name} \
         mid-batch: {} x 429 in {:.2?} ({:.2}x ideal); {unavailable} processes said Redis \
         does not answer",
        run.refused,
        run.took,
        run.took.as_secs_f64() / ideal,
    );
    Some(run)
}

#[test]
fn eight_processes_ride_out_a_redis_restarted_empty() {
    let Some(run) = failover("restarted", |redis, _| redis.restart()) else {
        return;
    };
    // Each process says so once per outage: once for the restart, and
    // (seen once under heavy load) once more for a step that outlasted
    // the fleet's timeout before it.
    run.notices_alternate(2);
    // At most one burst (SPEC §4.3: the fleet's quota for one window),
    // the bound of the bare-429 run above. The seeding that keeps it lower
    // (0 in 6 quiet runs; 10-14 before it) is checked exactly by
    // polite-redis's step and client tests; here, with 8 processes on a
    // loaded CI machine, 12 was seen once.
    assert!(
        run.refused <= R as usize,
        "{} x 429 after a restart",
        run.refused
    );
}

#[test]
fn eight_processes_ride_out_a_redis_paused() {
    let Some(run) = failover("paused", |redis, lab| {
        let pid = redis.pid().to_string();
        let stop = Command::new("kill").args(["-STOP", &pid]).status();
        assert!(stop.unwrap().success());
        // Paused until 12 more items went on the local paces (no fixed sleep).
        let seen = lab.log().len();
        after_requests(lab, seen + 12);
        let cont = Command::new("kill").args(["-CONT", &pid]).status();
        assert!(cont.unwrap().success());
    }) else {
        return;
    };
    run.notices_alternate(2);
    // At most one burst, as above (measured 0-5 on a quiet machine; a
    // process that had more than its share just before the pause does not
    // lend it to the others).
    assert!(
        run.refused <= R as usize,
        "{} x 429 after a pause",
        run.refused
    );
}

/// `polite get URL --redis REDIS_URL EXTRA...`: its exit code and stderr.
fn get_through(redis_url: &str, lab: &LabHandle, extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_polite"))
        .args([
            "get",
            &lab.url("/items/one"),
            "--timeout",
            "10s",
            "--redis",
            redis_url,
        ])
        .args(extra)
        .env_remove("POLITE_REDIS_URL")
        .env_remove("POLITE_REDIS_CA_CERT")
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A Redis URL polite cannot take says which part is wrong (user trial
/// 3: "invalid Redis URL" alone), and never echoes its password.
#[test]
fn a_bad_redis_url_says_what_is_wrong_and_hides_its_password() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    for (url, cause) in [
        (
            "redis://:pw-SECRET@127.0.0.1:6379/abc",
            "Invalid database number",
        ),
        ("redis://", "Missing hostname"),
    ] {
        let (code, err) = get_through(url, &lab, &[]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains(cause), "{err}");
        assert!(!err.contains("SECRET"), "{err}");
    }
    assert_eq!(lab.log().len(), 0);
}

/// A Redis that refuses the process (a wrong password) is told as such,
/// not as an outage; the command still completes on its local pace.
#[test]
fn a_wrong_redis_password_is_told_as_a_refusal() {
    let Some(binary) = Redis::find_or_skip() else {
        return;
    };
    let redis = Redis::start(&binary);
    assert_eq!(
        redis.command(&["CONFIG", "SET", "requirepass", "right-pass"]),
        "+OK"
    );
    let lab = Lab::start(LabConfig::default()).unwrap();
    let url = format!("redis://:wrong-SECRET@127.0.0.1:{}/", redis.port());
    let (code, err) = get_through(&url, &lab, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("refuses this process"), "{err}");
    assert!(!err.contains("SECRET"), "{err}");
    assert_eq!(lab.log().len(), 1);
}

#[cfg(not(feature = "redis-tls"))]
#[test]
fn a_rediss_url_needs_the_redis_tls_feature() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let (code, err) = get_through("rediss://127.0.0.1:1/", &lab, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("redis-tls"), "{err}");
    assert_eq!(lab.log().len(), 0);
}

#[cfg(feature = "redis-tls")]
#[test]
fn a_get_shares_its_pace_through_redis_over_tls() {
    let Some(binary) = Redis::find_or_skip() else {
        return;
    };
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let (cert, key) = (made.cert.pem(), made.signing_key.serialize_pem());
    let redis = Redis::start_tls(&binary, &cert, &key);
    let url = redis.tls_url().unwrap();
    let dir = std::env::temp_dir().join(format!("polite-cli-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &cert).unwrap();
    let lab = Lab::start(LabConfig::default()).unwrap();
    let ca_arg = ca.to_string_lossy().into_owned();
    let (code, err) = get_through(&url, &lab, &["--redis-ca-cert", &ca_arg]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("does not answer"), "{err}");
    // The fleet's state for the lab's origin is on the server.
    let key = format!("polite:{{{}}}:st", lab.url("/").trim_end_matches('/'));
    assert_eq!(redis.command(&["EXISTS", &key]), ":1", "{err}");
}

/// `--fleet-size` means nothing without a Redis to share: a usage error
/// that names `--redis`, not a flag silently ignored (user trial 3).
#[test]
fn a_fleet_size_without_redis_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_polite"))
        .args(["get", "http://127.0.0.1:9/", "--fleet-size", "4"])
        .env_remove("POLITE_REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--redis"), "{err}");
}

/// `polite batch --rate 20/1s --fleet-size 2 --redis REDIS` of 4 items
/// against a fresh lab: its stderr (it succeeded).
fn batch_of_a_fleet_of_two(redis_url: &str, prefix: &str) -> String {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let args: Vec<String> = [
        "--rate",
        "20/1s",
        "--timeout",
        "10s",
        "--redis",
        redis_url,
        "--redis-key-prefix",
        prefix,
        "--fleet-size",
        "2",
    ]
    .map(String::from)
    .to_vec();
    let urls: String = (0..4)
        .map(|i| lab.url(&format!("/items/s{i}")) + "\n")
        .collect();
    let out = spawn(&args, &urls).wait_with_output().expect("it ends");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(ok_lines(&out), 4, "{err}");
    err
}

/// The summary of a batch on a fleet's pace names the fleet's rate, the
/// one in force while Redis answers, not this process's fallback share
/// (it said "pace settled at 10.0/s" for --rate 20/1s in a fleet of 2: a
/// user read that the batch ran at half the rate asked for).
#[test]
fn a_fleet_batch_s_summary_names_the_fleet_s_pace_not_its_fallback_share() {
    let Some(binary) = Redis::find_or_skip() else {
        return;
    };
    let redis = Redis::start(&binary);
    let err = batch_of_a_fleet_of_two(&redis.url(), "summary:");
    assert!(!err.contains("pace settled at 10.0/s"), "{err}");
    assert!(err.contains("; fleet pace 20.0/s on Redis"), "{err}");
    // (A step slower than the fleet's timeout on a loaded machine makes
    // some sends go alone, and the summary says so instead.)
    if !err.contains("does not answer") {
        assert!(
            err.contains("; fleet pace 20.0/s on Redis (10.0/s here without Redis);"),
            "{err}"
        );
    }
}

/// A batch whose Redis never answers says that every send went alone, at
/// this process's share, and why.
#[test]
fn a_fleet_batch_without_its_redis_says_its_sends_went_alone() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let err = batch_of_a_fleet_of_two(&format!("redis://127.0.0.1:{port}/"), "polite:");
    assert!(
        err.contains(
            "; fleet pace 20.0/s on Redis, but Redis did not answer: 4 sends paced alone at 10.0/s;"
        ),
        "{err}"
    );
}
