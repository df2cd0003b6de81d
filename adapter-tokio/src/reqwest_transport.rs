//! [`ReqwestTransport`]: the ready transport on `reqwest`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use polite_client::{BoxSending, DEFAULT_MAX_BODY, Transport, TransportError};
use polite_core::TransportErrorKind;

/// Sends attempts with a `reqwest::Client`, aborting each at its `abort_at`
/// (`tokio::time::timeout_at`) and reading the body whole up to a limit.
///
/// * **Redirects**: polite follows redirects itself, by the client's
///   [`RedirectPolicy`](polite_client::RedirectPolicy) (a cross-origin hop
///   drops every header the caller set). For that, the `reqwest::Client`
///   must follow none of its own: build it with
///   `.redirect(reqwest::redirect::Policy::none())`, as
///   [`default_client`](Self::default_client) does. A client that follows
///   redirects itself does so by reqwest's rules (which drop only
///   `Authorization`, `Cookie` and `Proxy-Authorization` across hosts).
/// * **Bodies** larger than [`body_limit`](Self::body_limit) (by
///   `Content-Length` or by what arrives) end the attempt at once with a
///   permanent [`BodyTooLarge`](TransportErrorKind::BodyTooLarge): the
///   rest is never downloaded, and the request is not retried.
/// * **Memory.** An answer comes back as reqwest's `bytes()` would give
///   it: a body that arrived as one chunk, and the header values, are
///   slices of the connection's read buffer (no copy). An answer polite
///   keeps while another attempt goes out (a long poll's answer during the
///   next poll, a retried answer during the retry) has those copied out
///   first ([`Transport::keep`]: the header values, and a shared body of
///   at most 16 KiB), so that it pins no connection's buffer.
/// * **Errors** are classified by walking the error's `source()` chain
///   (`std::io::Error` kinds, reqwest's DNS, redirect and builder errors,
///   hyper's "message head is too large", and with feature `rustls` a
///   rejected certificate, which is permanent), never by its text, and
///   kept (without their URL) as the [`TransportError`]'s source.
/// * **Answers that are not valid HTTP** (a control byte in a header
///   value, a garbage status line: any hyper parse error but a head too
///   large) are [`Other`](TransportErrorKind::Other), as the other
///   adapters' parsers report them, never `Reset` (the server answered;
///   the connection was not cut). `Other` is retried as a transport
///   error; hyper's error is in the source chain.
/// * **Answer heads** (status line and headers) are limited by hyper: its
///   read buffer (408 KiB: 8 KiB + 100 × 4 KiB, not configurable through
///   reqwest) and 100 headers (reqwest's `http1_max_headers`). A larger
///   head ends the attempt with a permanent
///   [`HeadTooLarge`](TransportErrorKind::HeadTooLarge) (never retried;
///   hyper's error, which says not which limit, is the source).
/// * **Methods** are sent as given, extension methods (`PURGE`,
///   `PROPFIND`, `get`) too.
///
/// ```
/// let t = polite_tokio::ReqwestTransport::new(reqwest::Client::new()).max_body(1 << 20);
/// assert_eq!(t.body_limit(), 1 << 20);
/// ```
#[derive(Clone, Debug)]
pub struct ReqwestTransport {
    client: reqwest::Client,
    max_body: usize,
    /// The last origin sent to, parsed (shared by clones).
    origin: Arc<LastOrigin>,
}

/// The URL of the last origin (scheme and authority) an attempt went to,
/// parsed once: an attempt to the same origin starts from a copy of it
/// and parses only its own path and query ([`ReqwestTransport::url_of`]).
/// Parsing the host (IDNA processing, an IP address parsed and printed
/// again) was most of the cost of turning a request's URI into reqwest's
/// `Url`, and most calls go to the origin of the call before.
#[derive(Default)]
struct LastOrigin(Mutex<Option<(http::uri::Scheme, http::uri::Authority, reqwest::Url)>>);

/// Names nothing of the origin: its authority may hold a user name and
/// password (SPEC §5.1), and the transport is printed in a client's
/// `Debug`.
impl std::fmt::Debug for LastOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LastOrigin").finish_non_exhaustive()
    }
}

impl Default for ReqwestTransport {
    /// Over [`default_client`](Self::default_client) (reqwest's defaults,
    /// no redirects of its own), with the default body limit
    /// ([`DEFAULT_MAX_BODY`], 16 MiB). What `polite_tokio::Client::new()`
    /// uses.
    ///
    /// # Panics
    ///
    /// As `reqwest::Client::new()` does, when reqwest cannot start its TLS
    /// backend or read the system's resolver configuration. To handle that
    /// as an error, build the client with
    /// [`default_client`](Self::default_client) and use [`new`](Self::new).
    fn default() -> Self {
        #[allow(clippy::expect_used)] // reqwest::Client::new()'s own contract
        let client = ReqwestTransport::default_client().expect("reqwest cannot build a client");
        ReqwestTransport::new(client)
    }
}

impl ReqwestTransport {
    /// Wraps a `reqwest::Client` (configure TLS, proxies, pools there; and
    /// no redirects, see above).
    #[must_use]
    pub fn new(client: reqwest::Client) -> ReqwestTransport {
        ReqwestTransport {
            client,
            max_body: DEFAULT_MAX_BODY,
            origin: Arc::default(),
        }
    }

    /// A `reqwest::Client` with reqwest's defaults except that it follows
    /// no redirect (polite follows them, by its own policy).
    ///
    /// # Errors
    ///
    /// When reqwest cannot build a client (its TLS backend failed to start).
    ///
    /// ```
    /// let http = polite_tokio::ReqwestTransport::default_client().unwrap();
    /// let t = polite_tokio::ReqwestTransport::new(http);
    /// assert_eq!(t.body_limit(), polite_client::DEFAULT_MAX_BODY); // 16 MiB
    /// ```
    pub fn default_client() -> Result<reqwest::Client, reqwest::Error> {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
    }

    /// Sets the largest body read; a larger one fails the attempt with a
    /// permanent `BodyTooLarge` (never an out-of-memory, never retried).
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

/// The kind a rustls error is (a rejected certificate is permanent).
#[cfg(feature = "rustls")]
fn tls_kind(e: &rustls::Error) -> TransportErrorKind {
    match e {
        rustls::Error::InvalidCertificate(_)
        | rustls::Error::NoCertificatesPresented
        | rustls::Error::InvalidCertRevocationList(_) => TransportErrorKind::Certificate,
        _ => TransportErrorKind::Tls,
    }
}

/// A TLS failure in `err` (a rustls error, itself or inside an I/O error),
/// with feature `rustls`; without it, nothing is recognised here.
#[cfg(feature = "rustls")]
fn tls_in(err: &(dyn std::error::Error + 'static)) -> Option<TransportErrorKind> {
    let tls = err.downcast_ref::<rustls::Error>().or_else(|| {
        err.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    });
    tls.map(tls_kind)
}

#[cfg(not(feature = "rustls"))]
fn tls_in(_: &(dyn std::error::Error + 'static)) -> Option<TransportErrorKind> {
    None
}

/// Maps a reqwest error to the kind the machines decide by, by walking its
/// `source()` chain (typed errors, never the text).
pub(crate) fn kind(e: &reqwest::Error) -> TransportErrorKind {
    if e.is_builder() {
        return TransportErrorKind::InvalidRequest;
    }
    if e.is_redirect() {
        return TransportErrorKind::TooManyRedirects;
    }
    if e.is_timeout() {
        return TransportErrorKind::Timeout;
    }
    if e.is_dns() {
        return TransportErrorKind::Dns;
    }
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(k) = tls_in(err) {
            return k;
        }
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            // hyper's "message head is too large": the answer's head over
            // hyper's read buffer (about 400 KiB) or more than its header
            // count (100, reqwest's `http1_max_headers`).
            if h.is_parse_too_large() {
                return TransportErrorKind::HeadTooLarge;
            }
            // Any other parse error: the answer is not valid HTTP (a
            // control byte in a header value, a garbage status line). The
            // server answered, so not a `Reset` (the connection was not
            // cut): `InvalidAnswer` (permanent), as the other adapters'
            // parsers report it.
            if h.is_parse() {
                return TransportErrorKind::InvalidAnswer;
            }
        }
        if let Some(k) = err
            .downcast_ref::<std::io::Error>()
            .and_then(polite_client::io_error_kind)
        {
            return k;
        }
        next = err.source();
    }
    if e.is_connect() {
        TransportErrorKind::Other
    } else if e.is_request() || e.is_body() || e.is_decode() {
        TransportErrorKind::Reset
    } else {
        TransportErrorKind::Other
    }
}

/// A reqwest error as a [`TransportError`]: its kind, and itself (without
/// the URL, which may hold credentials) as the source.
pub(crate) fn error(e: reqwest::Error) -> TransportError {
    TransportError::new(kind(&e)).with_source(e.without_url())
}

/// An attempt's request as a `reqwest::Request` (its extensions kept: a
/// per-request timeout rides there); a URL reqwest cannot take is a
/// permanent `InvalidRequest`.
pub(crate) fn to_reqwest(
    request: http::Request<Bytes>,
) -> Result<reqwest::Request, TransportError> {
    reqwest::Request::try_from(request).map_err(|e| {
        TransportError::new(TransportErrorKind::InvalidRequest).with_source(e.without_url())
    })
}

impl ReqwestTransport {
    /// An attempt's request as a `reqwest::Request`, as [`to_reqwest`]
    /// makes it, its URL parsed from the last origin's
    /// ([`LastOrigin`]) when it has none of the extensions that only
    /// reqwest's own conversion can carry over (polite's attempts have
    /// none).
    fn convert(&self, request: http::Request<Bytes>) -> Result<reqwest::Request, TransportError> {
        let url = if request.extensions().is_empty() {
            self.url_of(request.uri())
        } else {
            None
        };
        let Some(url) = url else {
            return to_reqwest(request);
        };
        let (parts, body) = request.into_parts();
        let mut out = reqwest::Request::new(parts.method, url);
        *out.headers_mut() = parts.headers;
        *out.body_mut() = Some(body.into());
        *out.version_mut() = parts.version;
        Ok(out)
    }

    /// `uri` as the `Url` that `Url::parse(&uri.to_string())` (reqwest's
    /// conversion) makes of it, from the last origin's parsed URL: its
    /// path and query are set on a copy, which runs the same parser on
    /// them as a whole parse does after the host. `None` (parse it whole)
    /// for a URI that is not absolute http or https, for a path that does
    /// not start with one `/` (kept to the plainest case), and when
    /// another thread holds the last origin (never waits for it).
    fn url_of(&self, uri: &http::Uri) -> Option<reqwest::Url> {
        let (scheme, authority) = (uri.scheme()?, uri.authority()?);
        let path = uri.path();
        if !matches!(scheme.as_str(), "http" | "https")
            || !path.starts_with('/')
            || path.starts_with("//")
        {
            return None;
        }
        let mut url = {
            let mut last = self.origin.0.try_lock().ok()?;
            match &*last {
                // Byte for byte: `Authority`'s `==` ignores case, which
                // the user name and password do not.
                Some((s, a, url))
                    if s.as_str() == scheme.as_str() && a.as_str() == authority.as_str() =>
                {
                    url.clone()
                }
                _ => {
                    let url = reqwest::Url::parse(&format!("{scheme}://{authority}/")).ok()?;
                    *last = Some((scheme.clone(), authority.clone(), url.clone()));
                    url
                }
            }
        };
        url.set_path(path);
        url.set_query(uri.query());
        Some(url)
    }
}

async fn attempt(
    client: reqwest::Client,
    request: Result<reqwest::Request, TransportError>,
    max_body: usize,
) -> Result<http::Response<Bytes>, TransportError> {
    let response = client.execute(request?).await.map_err(error)?;
    read_whole(response, max_body).await
}

/// The largest one-chunk body [`detach`] copies out of hyper's read
/// buffer (its initial size is 8 KiB; a 16 KiB body there is most of it).
const COPIED_BODY: usize = 16 << 10;

/// A reqwest answer as an `http::Response<Bytes>`, its body read whole up
/// to `max_body` bytes (more, by `Content-Length` or by what arrives: a
/// permanent `BodyTooLarge`, the rest never downloaded). Like reqwest's
/// own `bytes()`, a body that came as one chunk and the header values are
/// slices of the connection's read buffer: [`detach`] copies them out when
/// polite keeps the answer while the connection reads on.
pub(crate) async fn read_whole(
    mut response: reqwest::Response,
    max_body: usize,
) -> Result<http::Response<Bytes>, TransportError> {
    let limit = u64::try_from(max_body).unwrap_or(u64::MAX);
    if response.content_length().is_some_and(|n| n > limit) {
        return Err(TransportError::body_too_large(limit));
    }
    let mut out = http::Response::new(Bytes::new());
    *out.status_mut() = response.status();
    *out.version_mut() = response.version();
    *out.headers_mut() = std::mem::take(response.headers_mut());
    // Sized once from Content-Length (bounded by the limit): a large body
    // is copied once, never regrown; a large body that arrives as one chunk
    // is not copied at all.
    let expected = response
        .content_length()
        .map_or(0, |n| usize::try_from(n).unwrap_or(max_body).min(max_body));
    let mut first: Option<Bytes> = None;
    let mut body = BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(error)? {
        let so_far = first.as_ref().map_or(0, Bytes::len) + body.len();
        if so_far.saturating_add(chunk.len()) > max_body {
            // Dropping the response closes the connection: the rest is
            // never downloaded.
            return Err(TransportError::body_too_large(limit));
        }
        if so_far == 0 && body.capacity() == 0 {
            first = Some(chunk);
            continue;
        }
        if let Some(head) = first.take() {
            body.reserve(expected.max(head.len() + chunk.len()));
            body.extend_from_slice(&head);
        }
        body.extend_from_slice(&chunk);
    }
    *out.body_mut() = match first {
        Some(only) => only,
        None => body.freeze(),
    };
    Ok(out)
}

/// Copies what a kept answer may share with the connection's read buffer
/// out of it ([`Transport::keep`]): the header values, and a body of at
/// most [`COPIED_BODY`] bytes (a one-chunk body is a slice of that buffer,
/// 8 KiB or more). Kept as they were, they would pin the buffer, and the
/// connection would allocate another for its next read: about 8 KiB per
/// waiting call during every long poll (BENCHMARKS.md section 8.6). Even a
/// body that no longer shares its buffer (`Bytes::is_unique`: hyper has
/// already moved to a fresh buffer) pins the whole allocation it is a
/// slice of, so every small body is copied. A larger one (most of its
/// buffer) stays as it is.
pub(crate) fn detach(answer: &mut http::Response<Bytes>) {
    detach_values(answer.headers_mut());
    let body = answer.body_mut();
    if !body.is_empty() && body.len() <= COPIED_BODY {
        *body = Bytes::copy_from_slice(body);
    }
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
        let request = self.convert(request);
        Box::pin(async move {
            let at = tokio::time::Instant::from_std(abort_at);
            match tokio::time::timeout_at(at, attempt(client, request, max_body)).await {
                Ok(r) => r,
                Err(_) => Err(TransportErrorKind::Aborted.into()),
            }
        })
    }

    /// No timer of its own: polite's drive loop ends the attempt at
    /// `abort_at`.
    fn send_supervised(&self, request: http::Request<Bytes>, _: Instant) -> BoxSending {
        let request = self.convert(request);
        Box::pin(attempt(self.client.clone(), request, self.max_body))
    }

    /// Copies the header values and a small body that shares the
    /// connection's read buffer out of it (see [`ReqwestTransport`]).
    fn keep(&self, answer: &mut http::Response<Bytes>) {
        detach(answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-chunk body is handed on as it came (as reqwest's `bytes()`
    /// does); once kept, one of at most [`COPIED_BODY`] bytes is copied out
    /// (hyper's chunk is a slice of the connection's read buffer), a
    /// larger one is not.
    #[tokio::test]
    async fn a_kept_small_body_is_copied_a_large_one_is_not() {
        for (len, copied) in [(1, true), (COPIED_BODY, true), (COPIED_BODY + 1, false)] {
            let buffer = Bytes::from(vec![7u8; len + 8]);
            let chunk = buffer.slice(8..);
            let response = reqwest::Response::from(http::Response::new(chunk.clone()));
            let mut out = read_whole(response, 1 << 20).await.expect("read");
            assert_eq!(
                out.body().as_ptr(),
                chunk.as_ptr(),
                "{len} B: read as it came"
            );
            ReqwestTransport::new(reqwest::Client::new()).keep(&mut out);
            assert_eq!(out.body(), &chunk, "{len} B");
            assert_eq!(
                out.body().as_ptr() != chunk.as_ptr(),
                copied,
                "{len} B: copied should be {copied}"
            );
        }
        // A small slice that alone holds its allocation is copied too: it
        // would pin all of it.
        let mut alone = http::Response::new(Bytes::from(vec![1u8; 8 << 10]).slice(..100));
        let at = alone.body().as_ptr();
        assert!(alone.body().is_unique());
        detach(&mut alone);
        assert_ne!(alone.body().as_ptr(), at);
        assert_eq!(alone.body(), &vec![1u8; 100]);
    }

    /// A URL made from the last origin's is the one reqwest's own
    /// conversion (`Url::parse(&uri.to_string())`) makes, origin after
    /// origin; what it does not take is parsed whole.
    #[test]
    fn a_url_from_the_last_origin_is_the_one_a_whole_parse_makes() {
        let t = ReqwestTransport::new(reqwest::Client::new());
        let uris = [
            "http://127.0.0.1:8080/items/a",
            "http://127.0.0.1:8080/items/b?x=1&y=%20z",
            "http://127.0.0.1:8080/",
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/a/../b/./c?",
            "http://127.0.0.1:8080/%7Euser/%2e%2E/x?q='a'&r=b",
            "http://127.0.0.1:8080/a%zz/{x}|^\"[]\\b?{y}|^`\\",
            "http://127.0.0.1:8080/\\back\\slash",
            "http://127.0.0.1:8080/caf\u{e9}?q=\u{e9}",
            "http://127.0.0.1:80/default-port",
            "https://Example.COM/Path?Query=1",
            "https://example.com:443/x",
            "https://user:Secret@example.com/x",
            "https://User:secret@example.com/x",
            "https://xn--bcher-kva.example/x",
            "http://[::1]:9/v6?w=1",
            "http://[0:0:0:0:0:0:0:1]/v6",
            "http://0x7f.1/hex-ip",
            "http://127.0.0.1:8080//double",
            "http://127.0.0.1:8080/items/a;p=1,2@:!$&()*+",
            "HTTP://127.0.0.1:8080/upper-scheme",
        ];
        for text in uris {
            let uri: http::Uri = text.parse().expect(text);
            let whole = reqwest::Url::parse(&uri.to_string()).expect(text);
            // Twice: the first may set the last origin, the second reads it.
            for _ in 0..2 {
                let plain = !uri.path().starts_with("//");
                assert_eq!(t.url_of(&uri).is_some(), plain, "{text}");
                if let Some(url) = t.url_of(&uri) {
                    assert_eq!(url.as_str(), whole.as_str(), "{text}");
                    assert_eq!(url, whole, "{text}");
                }
                let request = http::Request::get(uri.clone()).body(Bytes::new()).unwrap();
                let converted = t.convert(request).expect(text);
                assert_eq!(converted.url(), &whole, "{text}");
            }
        }
        // Not absolute http(s): parsed whole (and refused as reqwest does).
        let relative = http::Request::get("/items/a").body(Bytes::new()).unwrap();
        let refused = t.convert(relative).expect_err("relative");
        assert_eq!(refused.kind(), TransportErrorKind::InvalidRequest);
        assert!(t.url_of(&"ftp://h/x".parse().unwrap()).is_none());
        // Method, headers, body, version and extensions carried over.
        let post = || {
            http::Request::post("http://127.0.0.1:8080/p")
                .header("x-a", "1")
                .version(http::Version::HTTP_11)
                .body(Bytes::from_static(b"body"))
                .unwrap()
        };
        let converted = t.convert(post()).expect("post");
        assert_eq!(converted.method(), http::Method::POST);
        assert_eq!(converted.headers()["x-a"], "1");
        assert_eq!(converted.version(), http::Version::HTTP_11);
        let body = converted.body().and_then(reqwest::Body::as_bytes);
        assert_eq!(body, Some(&b"body"[..]));
        let mut request = post();
        request
            .extensions_mut()
            .insert(std::time::Duration::from_secs(1));
        let kept = t.convert(request).expect("with extensions");
        assert_eq!(kept.url().as_str(), "http://127.0.0.1:8080/p");
        // The last origin's user name and password are never printed.
        let secret: http::Uri = "https://user:hunter2@example.com/x".parse().unwrap();
        assert!(t.url_of(&secret).is_some());
        let printed = format!("{t:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
    }

    #[cfg(feature = "rustls")]
    #[test]
    fn a_rejected_certificate_is_permanent_other_tls_failures_are_not() {
        let cert = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        assert_eq!(tls_kind(&cert), TransportErrorKind::Certificate);
        assert!(tls_kind(&cert).is_permanent());
        let other = rustls::Error::HandshakeNotComplete;
        assert_eq!(tls_kind(&other), TransportErrorKind::Tls);
        let wrapped = std::io::Error::new(std::io::ErrorKind::InvalidData, cert);
        assert_eq!(tls_in(&wrapped), Some(TransportErrorKind::Certificate));
    }

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
