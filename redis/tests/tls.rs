//! `rediss://` (feature `tls`): two clients share a quota through a
//! redis-server that speaks TLS on loopback, with a self-signed certificate
//! made for the test and trusted through `RedisFleet::with_tls_root`; the
//! same server is not trusted with the system's roots (the fleet then
//! paces locally and says so). `cargo test -p polite-redis --features tls`.
#![cfg(feature = "tls")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{Client, Config, Observed, Throttle, UreqTransport};
use polite_client::SharedFleet;
use polite_core::Notice;
use polite_lab::redis::Redis;
use polite_lab::{Lab, LabConfig, LogStats, Quota};
use polite_redis::{FleetOptions, RedisFleet};

fn options() -> FleetOptions {
    FleetOptions {
        prefix: "tls:".into(),
        size: 2,
        // A TLS handshake in a debug build on a busy machine may take more
        // than the default 200 ms: this test is about TLS, not fallbacks.
        timeout: Duration::from_secs(2),
        ..FleetOptions::default()
    }
}

/// A self-signed certificate for 127.0.0.1 (PEM certificate, PEM key).
fn self_signed() -> (String, String) {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    (made.cert.pem(), made.signing_key.serialize_pem())
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

#[test]
fn two_processes_share_a_quota_through_redis_over_tls() {
    let Some(binary) = Redis::find_or_skip() else {
        return;
    };
    let (cert, key) = self_signed();
    let redis = Redis::start_tls(&binary, &cert, &key);
    let url = redis.tls_url().unwrap();
    assert!(url.starts_with("rediss://127.0.0.1:"));
    let lab =
        Lab::start(LabConfig::default().quota(Quota::sliding(10, Duration::from_millis(500))))
            .unwrap();
    let notices = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let threads: Vec<_> = (0..2)
        .map(|c| {
            let fleet = RedisFleet::with_tls_root(&url, options(), cert.as_bytes()).unwrap();
            let client = client(fleet, &notices);
            let urls: Vec<_> = (0..10)
                .map(|i| {
                    http::Request::get(lab.url(&format!("/items/c{c}-{i}")))
                        .body(Bytes::new())
                        .unwrap()
                })
                .collect();
            std::thread::spawn(move || {
                let r = client.batch(urls).unwrap();
                r.iter().filter(|r| r.is_ok()).count()
            })
        })
        .collect();
    let ok: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let took = started.elapsed();
    let n429 = lab.log().count_429();
    eprintln!(
        "TLS: 2 processes x 10 items, quota 10/500ms: {n429} x 429 in {took:?} (ideal 1 s), notices {:?}",
        notices.lock().unwrap()
    );
    assert_eq!(ok, 20);
    assert_eq!(n429, 0);
    assert!(notices.lock().unwrap().is_empty(), "{notices:?}");
    // The fleet's state is on the server (read over the plain port).
    let key = format!("tls:{{{}}}:st", lab.url("/").trim_end_matches('/'));
    assert_eq!(redis.command(&["EXISTS", &key]), ":1");
}

#[test]
fn a_server_the_roots_do_not_vouch_for_is_not_used() {
    let Some(binary) = Redis::find_or_skip() else {
        return;
    };
    let (cert, key) = self_signed();
    let redis = Redis::start_tls(&binary, &cert, &key);
    let url = redis.tls_url().unwrap();
    // The system's roots: a self-signed certificate fails verification.
    let system = RedisFleet::new(&url, options()).unwrap();
    // Another certificate as the only root: fails too.
    let (other, _) = self_signed();
    let wrong = RedisFleet::with_tls_root(&url, options(), other.as_bytes()).unwrap();
    for fleet in [system, wrong] {
        let key = polite_client::PaceKey::new("http://127.0.0.1:1");
        let mut pace =
            polite_client::Fleet::join(&fleet, &key, &polite_client::FleetTerms::default());
        let _ = pace.acquire(Instant::now());
        let started = Instant::now();
        while fleet.is_up() {
            assert!(started.elapsed() < Duration::from_secs(5), "it was trusted");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(fleet.stats().steps, 0);
        assert!(fleet.stats().failures >= 1);
        assert_eq!(
            polite_client::Fleet::take_notice(&fleet),
            Some(Notice::FleetUnavailable)
        );
    }
    // And a plain redis:// client is not a TLS one.
    assert!(RedisFleet::with_tls_root(&redis.url(), options(), cert.as_bytes()).is_err());
}
