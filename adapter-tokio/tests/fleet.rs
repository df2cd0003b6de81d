//! polite-tokio with a fleet-wide pace (SPEC §4.3, `polite-redis`) on a
//! real redis-server and the lab, on loopback. Each client has a
//! `RedisFleet` of its own: a separate process as far as Redis knows.
//! Clients share one lab quota and get no 429 (quota configured, and learnt
//! from `RateLimit` headers); Redis killed, paused (SIGSTOP) and restarted
//! empty mid-batch: every item ends exactly once, inside the deadline, and
//! the observer hears once; a call's deadline bounds a Redis that does not
//! answer. Several tests run on a current-thread runtime: the fleet's
//! worker is a thread of its own, so nothing here may wait on the runtime.
//! Under `CI=true` a missing redis-server fails; elsewhere the tests skip.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_client::SharedFleet;
use polite_lab::redis::Redis;
use polite_lab::{Lab, LabConfig, LabHandle, LogStats, Quota};
use polite_redis::{FleetOptions, RedisFleet};
use polite_tokio::{Client, Config, Notice, Observed, Outcome, ReqwestTransport, Throttle};

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

/// A "process": its own fleet on the Redis at `url`, sized `size`.
fn fleet(url: &str, size: u32) -> Arc<RedisFleet> {
    fleet_timing_out(url, size, FleetOptions::default().timeout)
}

/// The fleet's margin in these tests: 150 ms, not the default 50 ms. A
/// grant is held for the window + lease + margin, and a send reaches the
/// lab up to the lease after its grant plus however long this process
/// takes to write it; the margin must cover that second part. On a loaded
/// 2-core CI runner (every test binary at once, three clients on one
/// thread) one CI run got one 429 on the learnt quota with 50 ms. The
/// tests check that the fleet shares the quota, not how fast this machine
/// schedules; a real deployment sets the margin for its own latency to
/// the server.
const MARGIN: Duration = Duration::from_millis(150);

/// A fleet whose Redis calls time out after `timeout`.
fn fleet_timing_out(url: &str, size: u32, timeout: Duration) -> Arc<RedisFleet> {
    Arc::new(
        RedisFleet::new(
            url,
            FleetOptions {
                prefix: "tokio:".into(),
                size,
                timeout,
                margin: MARGIN,
                ..FleetOptions::default()
            },
        )
        .unwrap(),
    )
}

type Notices = Arc<Mutex<Vec<Notice>>>;

/// A client sharing its pace through `fleet`; its notices go to `notices`.
fn client(config: Config, fleet: &Arc<RedisFleet>, notices: &Notices) -> Client<ReqwestTransport> {
    let seen = Arc::clone(notices);
    let fleet = SharedFleet::from_arc(Arc::clone(fleet) as Arc<dyn polite_client::Fleet>);
    let config = Config {
        fleet: Some(fleet),
        ..config
    };
    Client::with_transport(ReqwestTransport::new(reqwest::Client::new()), config)
        .unwrap()
        .observe(move |o| {
            if let Observed::Notice(n) = o {
                seen.lock().unwrap().push(n);
            }
        })
}

fn base() -> Config {
    Config {
        timeout: Duration::from_secs(20),
        concurrency: 4,
        ..Config::default()
    }
}

/// Runs every client's batch of `items` (paths `/items/c{c}-{i}`) at once
/// on this runtime; returns the items that succeeded and the time taken.
async fn run(
    lab: &LabHandle,
    clients: Vec<Client<ReqwestTransport>>,
    items: usize,
) -> (usize, Duration) {
    let started = Instant::now();
    let batches = clients.into_iter().enumerate().map(|(c, client)| {
        let urls: Vec<_> = (0..items)
            .map(|i| get(lab.url(&format!("/items/c{c}-{i}"))))
            .collect();
        tokio::spawn(async move {
            let r = client.batch(urls).await.unwrap();
            r.iter().filter(|r| r.is_ok()).count()
        })
    });
    let mut ok = 0;
    for b in batches.collect::<Vec<_>>() {
        ok += b.await.unwrap();
    }
    (ok, started.elapsed())
}

/// Every path answered 200 exactly once.
fn each_once(lab: &LabHandle, clients: usize, items: usize) {
    let log = lab.log();
    for c in 0..clients {
        for i in 0..items {
            let path = format!("/items/c{c}-{i}");
            let ok = log
                .iter()
                .filter(|e| e.path == path && e.status == Some(200))
                .count();
            assert_eq!(ok, 1, "{path} succeeded {ok} times");
        }
    }
}

/// Polls `done` (bounded: 10 s) on a plain thread.
fn until(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_share_a_configured_quota_and_get_no_429() {
    let Some(binary) = Redis::find_or_skip() else {
        return;
    };
    let redis = Redis::start(&binary);
    let lab =
        Lab::start(LabConfig::default().quota(Quota::sliding(20, Duration::from_millis(500))))
            .unwrap();
    let notices = Notices::default();
    let config = Config {
        throttle: Some(Throttle::new(20, Duration::from_millis(500))),
        ..base()
    };
    let fleets: Vec<_> = (0..3).map(|_| fleet(&redis.url(), 3)).collect();
    let clients = fleets
        .iter()
        .map(|f| client(config.clone(), f, &notices))
        .collect();
    let (ok, took) = run(&lab, clients, 20).await;
    let n429 = lab.log().count_429();
    eprintln!(
        "tokio: 3 processes x 20 items, quota 20/500ms: {n429} x 429 in {took:?} (ideal 1.5 s)"
    );
    assert_eq!(ok, 60);
    each_once(&lab, 3, 20);
    assert_eq!(n429, 0);
    assert!(notices.lock().unwrap().is_empty(), "{notices:?}");
    // Every send went through Redis: the three fleets' grants cover them.
    let used: u64 = fleets.iter().map(|f| f.stats().used).sum();
    assert_eq!(used, 60);
}

#[tokio::test(flavor = "current_thread")]
async fn three_processes_share_a_learnt_quota_on_one_thread() {
    let Some(binary) = Redis::find_or_skip() else {
        return;
    };
    let redis = Redis::start(&binary);
    let lab = Lab::start(
        LabConfig::default()
            .quota(Quota::sliding(15, Duration::from_secs(1)))
            .ratelimit_headers(true),
    )
    .unwrap();
    let notices = Notices::default();
    let clients = (0..3)
        .map(|_| client(base(), &fleet(&redis.url(), 3), &notices))
        .collect();
    let (ok, took) = run(&lab, clients, 10).await;
    let n429 = lab.log().count_429();
    eprintln!(
        "tokio: 3 processes x 10 items, learnt quota 15/1s: {n429} x 429 in {took:?} (ideal 2 s)"
    );
    assert_eq!(ok, 30);
    each_once(&lab, 3, 10);
    assert_eq!(n429, 0);
    assert!(notices.lock().unwrap().is_empty(), "{notices:?}");
}

/// One client (a fleet of 2: Redis down, half the quota) batches 30 items
/// over a 20-per-500 ms quota; after 8 requests `fault` is done to Redis
/// on a thread of its own. Every item ends once, inside the deadline.
/// Returns the notices.
async fn batch_through(
    fault: impl FnOnce(&mut Redis, &RedisFleet, &LabHandle) + Send + 'static,
) -> Option<Vec<Notice>> {
    let binary = Redis::find_or_skip()?;
    let redis = Redis::start(&binary);
    let lab = Arc::new(
        Lab::start(LabConfig::default().quota(Quota::sliding(20, Duration::from_millis(500))))
            .unwrap(),
    );
    let notices = Notices::default();
    let timeout = Duration::from_secs(10);
    let config = Config {
        throttle: Some(Throttle::new(20, Duration::from_millis(500))),
        timeout,
        ..base()
    };
    let f = fleet(&redis.url(), 2);
    let c = client(config, &f, &notices);
    let faulty = {
        let (lab, f) = (Arc::clone(&lab), Arc::clone(&f));
        let mut redis = redis;
        std::thread::spawn(move || {
            until("8 requests", || lab.log().len() >= 8);
            fault(&mut redis, &f, &lab);
            redis
        })
    };
    let (ok, took) = run(&lab, vec![c], 30).await;
    let redis = faulty.join().unwrap();
    assert_eq!(ok, 30);
    each_once(&lab, 1, 30);
    assert!(took < timeout, "deadline: {took:?}");
    let n = notices.lock().unwrap().clone();
    eprintln!(
        "tokio: {took:?}, {} x 429, notices {n:?}, {:?}",
        lab.log().count_429(),
        f.stats()
    );
    drop(redis);
    Some(n)
}

#[tokio::test(flavor = "current_thread")]
async fn redis_killed_mid_batch_falls_back_and_says_so_once() {
    let Some(notices) = batch_through(|redis, fleet, _| {
        let port = redis.port();
        let stand_in = Redis::start(&Redis::find().unwrap());
        drop(std::mem::replace(redis, stand_in));
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
        until("the fleet falls back", || !fleet.is_up());
    })
    .await
    else {
        return;
    };
    assert_eq!(notices, vec![Notice::FleetUnavailable]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_paused_mid_batch_falls_back_and_returns() {
    let Some(notices) = batch_through(|redis, fleet, lab| {
        signal(redis.pid(), "-STOP");
        // Paused until the fleet has fallen back and 4 more items were
        // sent on the local pace (no fixed sleep).
        until("the fleet falls back", || !fleet.is_up());
        let sent = lab.log().len();
        until("4 sends on the local pace", || lab.log().len() >= sent + 4);
        signal(redis.pid(), "-CONT");
    })
    .await
    else {
        return;
    };
    assert_eq!(
        notices.first(),
        Some(&Notice::FleetUnavailable),
        "{notices:?}"
    );
    let unavailable = notices
        .iter()
        .filter(|n| **n == Notice::FleetUnavailable)
        .count();
    assert_eq!(unavailable, 1, "{notices:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn redis_restarted_empty_mid_batch_is_used_again() {
    let Some(notices) = batch_through(|redis, fleet, _| {
        let before = fleet.stats().steps;
        redis.restart();
        until("a step on the new Redis", || {
            fleet.stats().steps > before && fleet.is_up()
        });
    })
    .await
    else {
        return;
    };
    // The restart costs one failed call at most, and then Redis answers.
    assert!(
        notices.is_empty() || notices == vec![Notice::FleetUnavailable, Notice::FleetRestored],
        "{notices:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_calls_deadline_bounds_a_redis_that_does_not_answer() {
    let Some(binary) = Redis::find_or_skip() else {
        return;
    };
    let redis = Redis::start(&binary);
    let lab = Lab::start(LabConfig::default()).unwrap();
    signal(redis.pid(), "-STOP");
    let notices = Notices::default();
    // Redis calls time out after 1 s: the bounds below keep 500 ms or more
    // of slack for a loaded machine and still fail if a call waits for
    // that timeout.
    let f = fleet_timing_out(&redis.url(), 2, Duration::from_secs(1));
    let config = Config {
        throttle: Some(Throttle::new(20, Duration::from_secs(1))),
        ..base()
    };
    let c = client(config, &f, &notices);

    // A budget shorter than the fleet's Redis timeout (1 s): the call
    // ends at its deadline, the pace named as the cause, nothing sent.
    let short = Duration::from_millis(100);
    let started = Instant::now();
    let mut request = get(lab.url("/items/short"));
    request
        .extensions_mut()
        .insert(polite_tokio::CallOptions::new().timeout(short));
    let r = c.send(request).await;
    let took = started.elapsed();
    let err = r.unwrap_err();
    assert!(
        matches!(
            err.outcome(),
            Some(Outcome::Starved { .. } | Outcome::TimedOut { .. })
        ),
        "{err}"
    );
    assert!(took < short + Duration::from_millis(600), "{took:?}");
    assert_eq!(lab.log().len(), 0);

    // A longer one is sent on the local pace once the fleet's timeout has
    // passed, and the observer hears once.
    let started = Instant::now();
    let r = c.send(get(lab.url("/items/long"))).await;
    let took = started.elapsed();
    assert!(r.is_ok(), "{r:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(lab.log().len(), 1);
    assert_eq!(*notices.lock().unwrap(), vec![Notice::FleetUnavailable]);

    // Dropping the last handle on a fleet whose Redis is still paused
    // does not hold this (only) runtime thread beyond the fleet's timeout.
    drop(c);
    let started = Instant::now();
    drop(f);
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1500), "drop took {took:?}");
    signal(redis.pid(), "-CONT");
}
