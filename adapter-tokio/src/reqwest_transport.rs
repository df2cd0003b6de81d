//! [`ReqwestTransport`]: the ready transport on `reqwest`.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use polite_client::Transport;
use polite_core::TransportErrorKind;

/// A boxed attempt (so the drive loop can hold many).
pub type BoxSending =
    Pin<Box<dyn Future<Output = Result<http::Response<Bytes>, TransportErrorKind>> + Send>>;

/// Sends attempts with a `reqwest::Client`, aborting each at its `abort_at`
/// (`tokio::time::timeout_at`) and reading the body whole up to a limit.
///
/// ```
/// let t = polite_tokio::ReqwestTransport::new(reqwest::Client::new()).max_body(1 << 20);
/// assert_eq!(t.body_limit(), 1 << 20);
/// ```
#[derive(Clone, Debug)]
pub struct ReqwestTransport {
    client: reqwest::Client,
    max_body: usize,
}

impl ReqwestTransport {
    /// Default body limit: 16 MiB.
    pub const DEFAULT_MAX_BODY: usize = 16 << 20;

    /// Wraps a `reqwest::Client` (configure TLS, proxies, pools there).
    #[must_use]
    pub fn new(client: reqwest::Client) -> ReqwestTransport {
        ReqwestTransport {
            client,
            max_body: Self::DEFAULT_MAX_BODY,
        }
    }

    /// Sets the largest body read; a larger one fails the attempt as a
    /// transport error (`Other`), never an out-of-memory.
    #[must_use]
    pub fn max_body(mut self, bytes: usize) -> ReqwestTransport {
        self.max_body = bytes;
        self
    }

    /// The body limit.
    #[must_use]
    pub fn body_limit(&self) -> usize {
        self.max_body
    }
}

/// Maps a reqwest error to the kind the machines retry by.
fn kind(e: &reqwest::Error) -> TransportErrorKind {
    if e.is_timeout() {
        TransportErrorKind::Timeout
    } else if e.is_connect() {
        let text = format!("{e:?}");
        if text.contains("dns") || text.contains("resolve") {
            TransportErrorKind::Dns
        } else if text.contains("ConnectionRefused") || text.contains("refused") {
            TransportErrorKind::Refused
        } else {
            TransportErrorKind::Other
        }
    } else if e.is_request() || e.is_body() || e.is_decode() {
        TransportErrorKind::Reset
    } else {
        TransportErrorKind::Other
    }
}

async fn attempt(
    client: reqwest::Client,
    request: http::Request<Bytes>,
    max_body: usize,
) -> Result<http::Response<Bytes>, TransportErrorKind> {
    let request = reqwest::Request::try_from(request).map_err(|_| TransportErrorKind::Other)?;
    let mut response = client.execute(request).await.map_err(|e| kind(&e))?;
    if response
        .content_length()
        .is_some_and(|n| n > max_body as u64)
    {
        return Err(TransportErrorKind::Other);
    }
    let mut out = http::Response::new(Bytes::new());
    *out.status_mut() = response.status();
    *out.version_mut() = response.version();
    *out.headers_mut() = std::mem::take(response.headers_mut());
    detach_values(out.headers_mut());
    let mut body = BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| kind(&e))? {
        if body.len() + chunk.len() > max_body {
            return Err(TransportErrorKind::Other);
        }
        body.extend_from_slice(&chunk);
    }
    *out.body_mut() = body.freeze();
    Ok(out)
}

/// Copies the header values into one small buffer of their own.
///
/// hyper hands header values over as slices of the connection's read buffer
/// (8 KiB or more). An answer that is kept (the drive loop keeps each
/// item's last answer, to hand it back at the end) would keep that whole
/// buffer alive, and the connection would allocate a fresh one for its next
/// read: about 8 KiB per waiting call during every long poll. One copy of
/// the values (typically ~100 bytes) lets the connection reuse its buffer.
fn detach_values(headers: &mut http::HeaderMap) {
    let total: usize = headers.values_mut().map(|v| v.len()).sum();
    if total == 0 {
        return;
    }
    let mut buf = BytesMut::with_capacity(total);
    for v in headers.values_mut() {
        buf.extend_from_slice(v.as_bytes());
    }
    let buf = buf.freeze();
    let mut at = 0;
    for v in headers.values_mut() {
        let end = at + v.len();
        // The bytes were a valid value a moment ago: this cannot fail.
        if let Ok(mut copy) = http::HeaderValue::from_maybe_shared(buf.slice(at..end)) {
            copy.set_sensitive(v.is_sensitive());
            *v = copy;
        }
        at = end;
    }
}

impl Transport for ReqwestTransport {
    type Sending = BoxSending;

    fn send(&self, request: http::Request<Bytes>, abort_at: Instant) -> BoxSending {
        let client = self.client.clone();
        let max_body = self.max_body;
        Box::pin(async move {
            let at = tokio::time::Instant::from_std(abort_at);
            match tokio::time::timeout_at(at, attempt(client, request, max_body)).await {
                Ok(r) => r,
                Err(_) => Err(TransportErrorKind::Aborted),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detached_values_keep_their_bytes_but_not_the_read_buffer() {
        // Values as hyper makes them: slices of one big read buffer.
        let read = Bytes::from(b"Sat, 29 Nov 2025 17:00:00 GMT|3|secret".repeat(200));
        let range = read.as_ptr() as usize..read.as_ptr() as usize + read.len();
        let mut h = http::HeaderMap::new();
        let value = |a: usize, b: usize| http::HeaderValue::from_maybe_shared(read.slice(a..b));
        h.insert("date", value(0, 29).unwrap());
        h.append("retry-after", value(30, 31).unwrap());
        h.append("retry-after", value(30, 31).unwrap());
        let mut secret = value(32, 38).unwrap();
        secret.set_sensitive(true);
        h.insert("authorization", secret);

        detach_values(&mut h);

        assert_eq!(h["date"], "Sat, 29 Nov 2025 17:00:00 GMT");
        assert_eq!(h.get_all("retry-after").iter().count(), 2);
        assert_eq!(h["retry-after"], "3");
        assert_eq!(h["authorization"], "secret");
        assert!(h["authorization"].is_sensitive());
        for v in h.values() {
            assert!(!range.contains(&(v.as_bytes().as_ptr() as usize)));
        }
        let mut empty = http::HeaderMap::new();
        detach_values(&mut empty);
        assert!(empty.is_empty());
    }
}
