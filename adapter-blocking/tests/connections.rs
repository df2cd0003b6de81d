//! Connections are reused (SPEC §4.4): sequential calls ride one kept-alive
//! connection, and a batch at concurrency C keeps about C open — counted at
//! the server.

use bytes::Bytes;
use polite_blocking::{Client, Config};
use polite_lab::{Lab, LabConfig};

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

#[test]
fn sequential_calls_reuse_one_connection() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let client = Client::new();
    for i in 0..200 {
        client.send(get(lab.url(&format!("/items/{i}")))).unwrap();
    }
    eprintln!(
        "blocking: 200 sequential sends, {} connections",
        lab.connections()
    );
    assert!(lab.connections() <= 2, "{} connections", lab.connections());
}

#[test]
fn a_batch_keeps_about_concurrency_connections() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let client = Client::with_config(Config {
        concurrency: 4,
        ..Config::default()
    })
    .unwrap();
    let requests = (0..1000)
        .map(|i| get(lab.url(&format!("/items/{i}"))))
        .collect();
    let results = client.batch(requests).unwrap();
    assert!(results.iter().all(Result::is_ok));
    eprintln!(
        "blocking: 1000 items at concurrency 4, {} connections",
        lab.connections()
    );
    assert!(lab.connections() <= 8, "{} connections", lab.connections());
}
