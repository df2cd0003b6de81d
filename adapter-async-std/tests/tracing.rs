//! Attempt records reach `tracing` and carry no credentials. Alone in its
//! binary: `tracing` caches each callsite's interest process-wide, and
//! events from tests on other threads (no subscriber there) racing the
//! thread-local subscriber of this one can make it miss an event.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use polite_async_io::{Client, Config, Http1Transport};
use polite_lab::{Lab, LabConfig, LogStats, Step};

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

#[test]
fn attempt_records_reach_tracing_without_credentials() {
    let capture = Capture::default();
    let sink = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let lab = Lab::start(LabConfig::default().script(
        "/items/1",
        vec![
            Step::with_retry_after(503, Duration::from_secs(1)),
            Step::Normal,
        ],
    ))
    .unwrap();
    let config = Config {
        timeout: Duration::from_secs(10),
        ..Config::default()
    };
    let c = Client::with_transport(Http1Transport::new(), config).unwrap();
    let req = http::Request::put(lab.url("/items/1?token=SECRET-QUERY"))
        .header("Authorization", "Bearer SECRET")
        .body(Bytes::from_static(b"SECRET-BODY"))
        .unwrap();
    // Polled on this thread, so the thread-local subscriber sees the records.
    let resp = async_std::task::block_on(c.send(req)).unwrap();
    assert_eq!(resp.status(), 200);

    // The server did get the credentials (so the test means something).
    let log = lab.log();
    assert_eq!(log.statuses(), [Some(503), Some(200)]);
    assert!(log.iter().all(|e| e.has_header("authorization")));
    assert!(log.iter().all(|e| e.has_header("content-length")));
    assert!(log.iter().all(|e| e.query_param("token").is_some()));

    let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("attempt"), "no attempt events: {text}");
    assert!(text.contains("503"), "{text}");
    assert!(!text.contains("SECRET"), "credentials leaked: {text}");
    // The call's span names its URL as the OpenTelemetry conventions want
    // it: query values redacted, no user info.
    assert!(text.contains("url.full=http://127.0.0.1:"), "{text}");
    assert!(text.contains("/items/1?token=REDACTED"), "{text}");
    // The call's span carries `url.full` (the OpenTelemetry convention, query
    // values redacted, checked above by SECRET); the attempt records
    // themselves carry no URL.
    for line in text.lines() {
        if let Some((_, record)) = line.split_once("polite: attempt") {
            assert!(!record.contains("/items/1"), "a URL in a record: {line}");
        }
    }
}
