//! The fleet-wide pace on Redis (`polite-redis`, SPEC §4.3), on loopback
//! against a real redis-server (started and stopped here; without one the
//! suite says why and measures nothing):
//!
//! * **round trip**: one Lua step (`EVALSHA`) on a synchronous redis-rs
//!   connection, and one ask of a [`FleetPace`](polite_client::FleetPace) without a lease until it is
//!   granted (the worker thread's wake-up, the step, the lease), p50/p99;
//! * **scale**: N = 1, 2, 4, 8, 16 "processes" (each a thread with a
//!   `RedisFleet` and a blocking client of its own, as separate processes
//!   would have), each a batch of GETs at concurrency 4 against one fast lab
//!   (no quota): sends/s per process and fleet-wide, Redis round trips per
//!   send, against the same clients with the local pace.
//!
//! The machine has two cores shared by the lab, Redis and every client:
//! the scale rows measure contention as much as polite.

use std::sync::Arc;
use std::time::{Duration, Instant};

use polite_blocking::{Client, Config, UreqTransport};
use polite_client::{Fleet, FleetGrant, FleetTerms, PaceKey, SharedFleet};
use polite_lab::LabConfig;
use polite_lab::redis::Redis;
use polite_redis::{FleetOptions, RedisFleet, Step};

use crate::stats::{Dist, Table, num, ratio};
use crate::{Size, get, lab};

/// The suite's tables.
///
/// # Panics
///
/// When Redis or the lab cannot start, or a Redis call fails (a benchmark
/// without its servers has nothing to say).
#[must_use]
pub fn run(size: Size) -> Vec<Table> {
    let Some(binary) = Redis::find_or_skip() else {
        let mut t = Table::new("fleet (skipped)", &["why"]);
        t.row(vec!["redis-server not found".into()]);
        return vec![t];
    };
    let redis = Redis::start(&binary);
    vec![round_trip(&redis, size), scale(&redis, size)]
}

fn fleet(redis: &Redis, prefix: &str) -> RedisFleet {
    match RedisFleet::new(
        &redis.url(),
        FleetOptions {
            prefix: prefix.into(),
            ..FleetOptions::default()
        },
    ) {
        Ok(f) => f,
        Err(e) => panic!("cannot make a fleet: {e}"),
    }
}

fn round_trip(redis: &Redis, size: Size) -> Table {
    let n = size.pick(5000, 50);
    let client = match redis::Client::open(redis.url()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let mut conn = match client.get_connection() {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let step = Step {
        want: 1,
        limit: 1_000_000,
        window: Duration::from_secs(1),
        ttl: Duration::from_secs(60),
        ..Step::default()
    };
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        if let Err(e) = step.invoke(&mut conn, "bench:{rt}") {
            panic!("{e}");
        }
        steps.push(t.elapsed().as_secs_f64() * 1e6);
    }
    // An ask without a lease: refused for the poll interval while the worker
    // leases; asked again in a tight loop until granted.
    let f = fleet(redis, "bench-ask:");
    let mut asks = Vec::with_capacity(n);
    for i in 0..n {
        // A fresh key each time: no lease in stock.
        let mut pace = f.join(&PaceKey::new(format!("k{i}")), &FleetTerms::default());
        let t = Instant::now();
        let deadline = t + Duration::from_secs(1);
        while !matches!(pace.acquire(Instant::now()), FleetGrant::Granted) {
            assert!(Instant::now() < deadline, "no grant within 1 s");
            std::thread::yield_now();
        }
        asks.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let mut t = Table::new(
        "fleet: one decision on loopback Redis (µs)",
        &["what", "n", "p50", "p90", "p99", "max"],
    );
    for (what, samples) in [
        ("Lua step (EVALSHA), sync connection", steps),
        ("FleetPace ask → grant (worker wake + step)", asks),
    ] {
        let d = Dist::of(samples);
        t.row(vec![
            what.into(),
            d.n.to_string(),
            num(d.p50, 0),
            num(d.p90, 0),
            num(d.p99, 0),
            num(d.max, 0),
        ]);
    }
    t.note("A machine never waits for this: it is refused for the poll interval (2 ms) and asks again; a process with a lease answers from it at once.");
    t
}

/// One run of `n` clients: (sends/s per client median, fleet-wide sends/s,
/// Redis round trips per send).
fn clients(
    redis: Option<&Redis>,
    n: usize,
    items: usize,
    url: &str,
    run: usize,
) -> (f64, f64, f64) {
    let fleets: Vec<Option<Arc<RedisFleet>>> = (0..n)
        .map(|_| redis.map(|r| Arc::new(fleet(r, &format!("bench-scale-{run}:")))))
        .collect();
    let started = Instant::now();
    let threads: Vec<_> = fleets
        .iter()
        .cloned()
        .enumerate()
        .map(|(c, f)| {
            let urls: Vec<_> = (0..items)
                .map(|i| get(&format!("{url}items/c{c}-{i}")))
                .collect();
            std::thread::spawn(move || {
                let config = Config {
                    fleet: f.map(|f| SharedFleet::from_arc(f as Arc<dyn Fleet>)),
                    timeout: Duration::from_secs(60),
                    ..Config::default()
                };
                let client = match Client::with_transport(UreqTransport::default(), config) {
                    Ok(c) => c,
                    Err(e) => panic!("{e}"),
                };
                let t = Instant::now();
                let ok = match client.batch(urls) {
                    Ok(r) => r.iter().filter(|r| r.is_ok()).count(),
                    Err(e) => panic!("{e}"),
                };
                (ok, t.elapsed())
            })
        })
        .collect();
    let mut per = Vec::new();
    let mut sent = 0;
    for t in threads {
        let (ok, took) = match t.join() {
            Ok(r) => r,
            Err(_) => panic!("a client panicked"),
        };
        sent += ok;
        per.push(ok as f64 / took.as_secs_f64());
    }
    let all = sent as f64 / started.elapsed().as_secs_f64();
    let steps: u64 = fleets.iter().flatten().map(|f| f.stats().steps).sum();
    let per_send = if redis.is_some() {
        steps as f64 / sent.max(1) as f64
    } else {
        f64::NAN
    };
    (crate::stats::median(per), all, per_send)
}

fn scale(redis: &Redis, size: Size) -> Table {
    let items = size.pick(400, 8);
    let ns: Vec<usize> = size.pick(vec![1, 2, 4, 8, 16], vec![1, 2]);
    let lab = lab(LabConfig::default());
    let url = lab.url("/");
    let mut t = Table::new(
        &format!("fleet: N processes x {items} GETs (concurrency 4, fast lab, no quota)"),
        &[
            "N",
            "local pace: sends/s per process",
            "fleet: sends/s per process",
            "local: fleet-wide sends/s",
            "fleet: fleet-wide sends/s",
            "fleet ÷ local",
            "Redis round trips per send",
        ],
    );
    for (run, n) in ns.into_iter().enumerate() {
        let (lp, la, _) = clients(None, n, items, &url, run);
        let (fp, fa, per_send) = clients(Some(redis), n, items, &url, run);
        t.row(vec![
            n.to_string(),
            num(lp, 0),
            num(fp, 0),
            num(la, 0),
            num(fa, 0),
            ratio(fa, la),
            num(per_send, 2),
        ]);
    }
    t.note("Each process is a thread with its own RedisFleet (its own worker and connection) and its own blocking client, as separate processes would have; the local pace is the same client without a fleet.");
    t
}
