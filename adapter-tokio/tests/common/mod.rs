//! Test support shared by the tokio adapter's test binaries: a scripted,
//! in-memory transport on tokio time.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_core::TransportErrorKind;
use polite_tokio::{BoxSending, Transport};

pub(crate) mod scenarios;

/// Answers from a script after a fixed latency (tokio time), and records
/// every request it saw with the instant it saw it.
pub(crate) type Step = (u16, Option<&'static str>);
pub(crate) type Seen = Vec<(Instant, http::Request<Bytes>)>;

#[derive(Clone, Default)]
pub(crate) struct Fake {
    pub(crate) script: Arc<Mutex<VecDeque<Step>>>,
    pub(crate) seen: Arc<Mutex<Seen>>,
    pub(crate) latency: Duration,
}

impl Fake {
    pub(crate) fn new(script: &[(u16, Option<&'static str>)], latency: Duration) -> Fake {
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
                return Err(TransportErrorKind::Aborted.into());
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

impl Fake {
    /// The instants of every send.
    pub(crate) fn sends(&self) -> Vec<Instant> {
        self.seen.lock().unwrap().iter().map(|(t, _)| *t).collect()
    }
}
