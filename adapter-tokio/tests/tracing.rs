//! Attempt records reach `tracing` without credentials. Alone in its test
//! binary: tracing caches per-callsite interest process-wide, and tests on
//! other threads without a subscriber could make it skip events here.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_core::TransportErrorKind;
use polite_tokio::{BoxSending, Client, Config, Transport};

/// Answers from a script after a fixed latency (tokio time), and records
/// every request it saw with the instant it saw it.
type Step = (u16, Option<&'static str>);
type Seen = Vec<(Instant, http::Request<Bytes>)>;

#[derive(Clone, Default)]
struct Fake {
    script: Arc<Mutex<VecDeque<Step>>>,
    seen: Arc<Mutex<Seen>>,
    latency: Duration,
}

impl Fake {
    fn new(script: &[(u16, Option<&'static str>)], latency: Duration) -> Fake {
        Fake {
            script: Arc::new(Mutex::new(script.iter().copied().collect())),
            seen: Arc::default(),
            latency,
        }
    }
}

impl Transport for Fake {
    type Sending = BoxSending;
    fn send(&self, request: http::Request<Bytes>, abort_at: Instant) -> BoxSending {
        let now = tokio::time::Instant::now().into_std();
        self.seen.lock().unwrap().push((now, request));
        let next = self.script.lock().unwrap().pop_front();
        let latency = self.latency;
        Box::pin(async move {
            let Some((status, retry_after)) = next else {
                // Out of script: hang until aborted.
                tokio::time::sleep_until(tokio::time::Instant::from_std(abort_at)).await;
                return Err(TransportErrorKind::Aborted);
            };
            tokio::time::sleep(latency).await;
            let mut r = http::Response::new(Bytes::from_static(b"body"));
            *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
            if let Some(v) = retry_after {
                r.headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static(v));
            }
            Ok(r)
        })
    }
}

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
