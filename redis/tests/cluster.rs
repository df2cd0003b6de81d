//! A fleet on a real Redis Cluster (feature `cluster`): three masters on
//! loopback (`polite_lab::redis::RedisCluster`), two fleets (two
//! "processes") share the quotas of two labs through it with no 429, each
//! pace key's state on the one node of its hash slot; a node killed makes
//! the fleet pace locally and say so once.
//! `cargo test -p polite-redis --features cluster --test cluster`.
#![cfg(feature = "cluster")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{Client, Config, Observed, Throttle, UreqTransport};
use polite_client::SharedFleet;
use polite_core::Notice;
use polite_lab::redis::{Redis, RedisCluster};
use polite_lab::{Lab, LabConfig, LabHandle, LogStats, Quota};
use polite_redis::{FleetOptions, RedisFleet};

fn fleet(cluster: &RedisCluster) -> RedisFleet {
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    RedisFleet::cluster(
        &nodes,
        FleetOptions {
            prefix: "cluster:".into(),
            size: 2,
            ..FleetOptions::default()
        },
    )
    .unwrap()
}

fn client(fleet: RedisFleet, notices: &Arc<Mutex<Vec<Notice>>>) -> Client<UreqTransport> {
    let seen = Arc::clone(notices);
    let config = Config {
        throttle: Some(Throttle::new(10, Duration::from_millis(500))),
        timeout: Duration::from_secs(20),
        concurrency: 4,
        fleet: Some(SharedFleet::new(fleet)),
        ..Config::default()
    };
    Client::with_transport(UreqTransport::default(), config)
        .unwrap()
        .observe(move |o| {
            if let Observed::Notice(n) = o {
                seen.lock().unwrap().push(n);
            }
        })
}

/// Every client batches `items` on each lab at once (one batch per lab:
/// a batch's items share one pace, that of its first item's origin).
fn run(labs: &[&LabHandle], clients: Vec<Client<UreqTransport>>, items: usize) -> usize {
    let mut threads = Vec::new();
    for (c, client) in clients.into_iter().enumerate() {
        for lab in labs {
            let urls: Vec<_> = (0..items)
                .map(|i| lab.url(&format!("/items/c{c}-{i}")))
                .map(|u| http::Request::get(u).body(Bytes::new()).unwrap())
                .collect();
            let client = client.clone();
            threads.push(std::thread::spawn(move || {
                let r = client.batch(urls).unwrap();
                r.iter().filter(|r| r.is_ok()).count()
            }));
        }
    }
    threads.into_iter().map(|t| t.join().unwrap()).sum()
}

/// The node holding `key`, by asking each whether it exists there.
fn node_of(cluster: &RedisCluster, key: &str) -> Option<usize> {
    let on: Vec<usize> = (0..cluster.nodes().len())
        .filter(|i| cluster.nodes()[*i].command(&["EXISTS", key]) == ":1")
        .collect();
    assert!(on.len() <= 1, "{key} on {on:?}");
    on.first().copied()
}

#[test]
fn two_processes_share_two_quotas_through_a_cluster() {
    let Some(binary) = Redis::find_or_skip() else {
        return;
    };
    let cluster = RedisCluster::start(&binary, 3);
    let quota = || LabConfig::default().quota(Quota::sliding(10, Duration::from_millis(500)));
    let (a, b) = (Lab::start(quota()).unwrap(), Lab::start(quota()).unwrap());
    let notices = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let clients = vec![
        client(fleet(&cluster), &notices),
        client(fleet(&cluster), &notices),
    ];
    let ok = run(&[&a, &b], clients, 10);
    let took = started.elapsed();
    let (na, nb) = (a.log().count_429(), b.log().count_429());
    eprintln!(
        "cluster: 2 processes x 2 origins x 10 items, quota 10/500ms each: {na} + {nb} x 429 in {took:?} (ideal 1 s)"
    );
    assert_eq!(ok, 40);
    assert_eq!((na, nb), (0, 0));
    assert!(notices.lock().unwrap().is_empty(), "{notices:?}");
    // Each origin's log and state: on one node, the same one.
    for lab in [&a, &b] {
        let base = format!("cluster:{{{}}}", lab.url("/").trim_end_matches('/'));
        let st = node_of(&cluster, &format!("{base}:st"));
        assert!(st.is_some(), "{base}:st is nowhere");
        assert_eq!(node_of(&cluster, &format!("{base}:log")), st, "{base}");
    }
}

#[test]
fn a_node_down_makes_the_fleet_pace_locally_once() {
    let Some(binary) = Redis::find_or_skip() else {
        return;
    };
    let mut cluster = RedisCluster::start(&binary, 3);
    let lab = Lab::start(LabConfig::default()).unwrap();
    let fleet = Arc::new(fleet(&cluster));
    let key = polite_client::PaceKey::new(lab.url("/").trim_end_matches('/'));
    let terms = polite_client::FleetTerms::new(
        Some(Throttle::new(10, Duration::from_secs(1))),
        None,
        false,
    );
    let mut pace = polite_client::Fleet::join(&*fleet, &key, &terms);
    let started = Instant::now();
    while pace.acquire(Instant::now()) != polite_client::FleetGrant::Granted {
        assert!(started.elapsed() < Duration::from_secs(5), "no grant");
        std::thread::sleep(Duration::from_millis(1));
    }
    let base = fleet.redis_key(&key);
    let node = node_of(&cluster, &format!("{base}:st")).expect("the key's node");
    cluster.kill(node);
    let started = Instant::now();
    while fleet.is_up() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "never fell back"
        );
        let _ = pace.acquire(Instant::now());
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        polite_client::Fleet::take_notice(&*fleet),
        Some(Notice::FleetUnavailable)
    );
    assert_eq!(polite_client::Fleet::take_notice(&*fleet), None);
}
