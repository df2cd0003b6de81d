//! Attempt records reach `tracing` without credentials. Alone in its test
//! binary: tracing caches per-callsite interest process-wide, and tests on
//! other threads without a subscriber could make it skip events here.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::Fake;
use polite_tokio::{Client, Config};

/// A writer that collects everything the tracing subscriber prints.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn attempt_records_reach_tracing_without_credentials() {
    let capture = Capture::default();
    let sink = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let fake = Fake::new(&[(503, Some("1")), (200, None)], Duration::from_millis(5));
    let client = Client::with_transport(fake.clone(), Config::default()).unwrap();
    let req = http::Request::get("http://127.0.0.1:9/items/1?token=SECRET-QUERY")
        .header("Authorization", "Bearer SECRET")
        .body(Bytes::from_static(b"SECRET-BODY"))
        .unwrap();
    client.send(req).await.unwrap();
    // The transport did get the credentials (so the test means something).
    let seen = fake.seen.lock().unwrap();
    assert_eq!(seen[0].1.headers()["authorization"], "Bearer SECRET");
    drop(seen);

    let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("attempt"), "no attempt events: {text}");
    assert!(text.contains("503"), "{text}");
    assert!(!text.contains("SECRET"), "credentials leaked: {text}");
}
