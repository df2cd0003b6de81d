//! [`Http1Transport`]: the ready transport, HTTP/1.1 over
//! `async_io::Async<TcpStream>` with the protocol done by `ureq-proto`.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Instant;

use async_io::{Async, Timer};
use bytes::Bytes;
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use polite_client::{BoxSending, Transport, TransportError};
use polite_core::TransportErrorKind;
use ureq_proto::BodyMode;
use ureq_proto::client::state::{RecvBody, RecvResponse};
use ureq_proto::client::{Await100Result, Call, RecvResponseResult, SendRequestResult};

/// How much of a response head (status line and headers) is read at most.
const MAX_HEAD: usize = 64 << 10;
/// The size of the read buffer and of the encoding buffer.
const CHUNK: usize = 16 << 10;

/// Sends attempts over HTTP/1.1 on async-io sockets: resolves the host (on
/// the `blocking` thread pool, or not at all for an IP address), connects an
/// `async_io::Async<TcpStream>`, writes the request and reads the answer
/// with `ureq-proto` (the sans-IO protocol of ureq 3: content-length and
/// chunked bodies, 1xx answers, `Connection` rules), and aborts the whole
/// attempt at its `abort_at` by racing it against an `async_io::Timer`.
///
/// * **One connection per attempt**, closed when the attempt ends (the
///   request goes out with `Connection: close` unless it has a `Connection`
///   header): no pooling yet.
/// * **`http://` only**: there is no TLS yet. An `https://` URL (or one
///   without scheme or host) fails the attempt with a permanent
///   `InvalidRequest` without touching the network.
/// * The transport follows no redirect: a 3xx is handed back, and polite
///   follows it by the client's [`RedirectPolicy`](polite_client::RedirectPolicy)
///   (a cross-origin hop drops every header the caller set).
/// * The body is read whole, up to [`body_limit`](Self::body_limit)
///   (16 MiB by default); a larger one (by `Content-Length` or by what
///   arrives) ends the attempt at once with a permanent `BodyTooLarge`
///   (never an out-of-memory, never retried; the connection is closed, the
///   rest never read). The response head is limited to 64 KiB (`Other`).
/// * The request gets `Host` (from the URL), `Content-Length` (from the
///   body, when it has one or the method expects one) and
///   `Connection: close`, each unless it already has one; nothing else is
///   added.
///
/// Errors map to [`TransportErrorKind`]: connection refused → `Refused`;
/// reset, aborted, broken pipe, or closed before a complete answer →
/// `Reset`; name resolution failed or found nothing → `Dns`; an OS timeout
/// → `Timeout`; the attempt still running at `abort_at` → `Aborted`; a
/// request that cannot be written (unsupported URL, bad header) →
/// `InvalidRequest`; a body too large → `BodyTooLarge`; anything else (a
/// malformed answer) → `Other`. The I/O or protocol error is kept as the
/// [`TransportError`]'s `source()`.
///
/// ```
/// use polite_async_std::Http1Transport;
/// let t = Http1Transport::new().max_body(1 << 20);
/// assert_eq!(t.body_limit(), 1 << 20);
/// assert_eq!(Http1Transport::default().body_limit(), polite_async_std::DEFAULT_MAX_BODY);
/// ```
#[derive(Clone, Debug)]
pub struct Http1Transport {
    max_body: usize,
}

impl Default for Http1Transport {
    fn default() -> Self {
        Http1Transport::new()
    }
}

impl Http1Transport {
    /// A transport with the default body limit.
    ///
    /// ```
    /// let t = polite_async_std::Http1Transport::new();
    /// assert_eq!(t.body_limit(), 16 << 20);
    /// ```
    #[must_use]
    pub fn new() -> Http1Transport {
        Http1Transport {
            max_body: polite_client::DEFAULT_MAX_BODY,
        }
    }

    /// Sets the largest body read; a larger one fails the attempt with a
    /// permanent `BodyTooLarge`.
    ///
    /// ```
    /// let t = polite_async_std::Http1Transport::new().max_body(4096);
    /// assert_eq!(t.body_limit(), 4096);
    /// ```
    #[must_use]
    pub fn max_body(mut self, bytes: usize) -> Http1Transport {
        self.max_body = bytes;
        self
    }

    /// The body limit.
    ///
    /// ```
    /// assert_eq!(polite_async_std::Http1Transport::new().body_limit(), 16 << 20);
    /// ```
    #[must_use]
    pub fn body_limit(&self) -> usize {
        self.max_body
    }
}

impl Transport for Http1Transport {
    type Sending = BoxSending;

    fn send(&self, request: http::Request<Bytes>, abort_at: Instant) -> BoxSending {
        let max_body = self.max_body;
        Box::pin(futures_lite::future::or(
            attempt(request, max_body),
            async move {
                Timer::at(abort_at).await;
                Err(TransportErrorKind::Aborted.into())
            },
        ))
    }
}

/// An I/O error as a [`TransportError`], keeping it as the source.
fn io_error(e: io::Error) -> TransportError {
    TransportError::new(io_kind(&e)).with_source(e)
}

/// The kind an I/O error is retried as.
fn io_kind(e: &io::Error) -> TransportErrorKind {
    use io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => TransportErrorKind::Refused,
        K::ConnectionReset
        | K::ConnectionAborted
        | K::BrokenPipe
        | K::UnexpectedEof
        | K::NotConnected => TransportErrorKind::Reset,
        K::TimedOut => TransportErrorKind::Timeout,
        _ => TransportErrorKind::Other,
    }
}

/// A protocol error reading the answer (a malformed answer).
fn protocol(e: ureq_proto::Error) -> TransportError {
    TransportError::new(TransportErrorKind::Other).with_source(e)
}

/// A protocol error writing the request (it cannot be sent as it is).
fn invalid(e: ureq_proto::Error) -> TransportError {
    TransportError::new(TransportErrorKind::InvalidRequest).with_source(e)
}

/// A request that cannot be written, with no more to say.
fn unsendable() -> TransportError {
    TransportError::new(TransportErrorKind::InvalidRequest)
}

/// One attempt, from name resolution to the last byte of the body.
async fn attempt(
    request: http::Request<Bytes>,
    max_body: usize,
) -> Result<http::Response<Bytes>, TransportError> {
    let uri = request.uri();
    if uri.scheme_str() != Some("http") {
        // No TLS yet (and a URL without a scheme cannot be sent).
        return Err(unsendable());
    }
    let host = uri.host().ok_or_else(unsendable)?;
    let port = uri.port_u16().unwrap_or(80);
    let addrs = resolve(host, port).await?;
    let (wire, call) = encode(request)?;
    let mut stream = connect(&addrs).await?;
    stream.write_all(&wire).await.map_err(io_error)?;
    stream.flush().await.map_err(io_error)?;
    receive(&mut Input::new(stream), call, max_body).await
}

/// The socket addresses of `host:port`; an IP address is used as is.
async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, TransportError> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let name = bare.to_owned();
    let found = blocking::unblock(move || {
        (name.as_str(), port)
            .to_socket_addrs()
            .map(Iterator::collect::<Vec<_>>)
    })
    .await;
    match found {
        Ok(addrs) if !addrs.is_empty() => Ok(addrs),
        Ok(_) => Err(TransportErrorKind::Dns.into()),
        Err(e) => Err(TransportError::new(TransportErrorKind::Dns).with_source(e)),
    }
}

/// Connects to the first address that accepts.
async fn connect(addrs: &[SocketAddr]) -> Result<Async<TcpStream>, TransportError> {
    let mut last = TransportError::new(TransportErrorKind::Dns);
    for addr in addrs {
        match Async::<TcpStream>::connect(*addr).await {
            Ok(stream) => {
                // The request goes out in one write; no reason to wait for
                // an ACK before anything else.
                let _ = stream.get_ref().set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = io_error(e),
        }
    }
    Err(last)
}

/// The whole request on the wire (head and body, framed), and the call
/// ready to read the answer.
fn encode(request: http::Request<Bytes>) -> Result<(Vec<u8>, Call<RecvResponse>), TransportError> {
    let (parts, body) = request.into_parts();
    let mut call = Call::new(http::Request::from_parts(parts, ())).map_err(invalid)?;
    let headers = call.headers();
    let framed = headers.contains_key(http::header::CONTENT_LENGTH)
        || headers.contains_key(http::header::TRANSFER_ENCODING);
    let has_connection = headers.contains_key(http::header::CONNECTION);
    let wants_body = matches!(call.method().as_str(), "POST" | "PUT" | "PATCH");
    if !framed && (wants_body || !body.is_empty()) {
        call.header(http::header::CONTENT_LENGTH, body.len())
            .map_err(invalid)?;
    }
    if !has_connection {
        call.header(http::header::CONNECTION, "close")
            .map_err(invalid)?;
    }

    let mut wire = Vec::with_capacity(512 + body.len());
    let mut scratch = vec![0u8; CHUNK];
    let mut call = call.proceed();
    while !call.can_proceed() {
        let n = call.write(&mut scratch).map_err(invalid)?;
        if n == 0 {
            // A header line longer than the buffer: never sent.
            return Err(unsendable());
        }
        wire.extend_from_slice(&scratch[..n]);
    }
    let mut call = match call.proceed().map_err(invalid)? {
        Some(SendRequestResult::RecvResponse(call)) => return Ok((wire, call)),
        Some(SendRequestResult::SendBody(call)) => call,
        // `Expect: 100-continue`: the body is sent without waiting (allowed;
        // a late `100 Continue` is skipped when the answer is read).
        Some(SendRequestResult::Await100(call)) => match call.proceed().map_err(invalid)? {
            Await100Result::SendBody(call) => call,
            Await100Result::RecvResponse(call) => return Ok((wire, call)),
        },
        None => return Err(unsendable()),
    };
    let mut rest: &[u8] = &body;
    while !call.can_proceed() {
        let take = rest.len().min(call.calculate_max_input(scratch.len()));
        let (used, n) = call.write(&rest[..take], &mut scratch).map_err(invalid)?;
        wire.extend_from_slice(&scratch[..n]);
        if rest.is_empty() && n == 0 && !call.can_proceed() {
            // The framing asks for more body than there is.
            return Err(unsendable());
        }
        rest = &rest[used..];
    }
    if !rest.is_empty() {
        // More body than its Content-Length says.
        return Err(unsendable());
    }
    let call = call.proceed().ok_or_else(unsendable)?;
    Ok((wire, call))
}

/// Bytes read from the socket and not yet used.
struct Input {
    stream: Async<TcpStream>,
    buffered: Vec<u8>,
    scratch: Vec<u8>,
}

impl Input {
    fn new(stream: Async<TcpStream>) -> Input {
        Input {
            stream,
            buffered: Vec::new(),
            scratch: vec![0u8; CHUNK],
        }
    }

    /// Reads once more from the socket; `Ok(0)` at the end of the stream.
    async fn fill(&mut self) -> Result<usize, TransportError> {
        let n = self
            .stream
            .read(&mut self.scratch)
            .await
            .map_err(io_error)?;
        self.buffered.extend_from_slice(&self.scratch[..n]);
        Ok(n)
    }

    fn consume(&mut self, n: usize) {
        self.buffered.drain(..n.min(self.buffered.len()));
    }
}

/// Reads the answer: the head, then the body whole (up to `max_body`).
async fn receive(
    input: &mut Input,
    mut call: Call<RecvResponse>,
    max_body: usize,
) -> Result<http::Response<Bytes>, TransportError> {
    let head = loop {
        let (used, head) = call
            .try_response(&input.buffered, false)
            .map_err(protocol)?;
        input.consume(used);
        if let Some(head) = head {
            break head;
        }
        if used > 0 {
            continue; // a 1xx answer was skipped; the real one may be buffered
        }
        if input.buffered.len() > MAX_HEAD {
            return Err(TransportErrorKind::Other.into());
        }
        if input.fill().await? == 0 {
            return Err(TransportErrorKind::Reset.into()); // closed before an answer
        }
    };
    let declared = head
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let limit = u64::try_from(max_body).unwrap_or(u64::MAX);
    if declared.is_some_and(|n| n > limit) {
        return Err(TransportError::body_too_large(limit));
    }
    let body = match call.proceed() {
        Some(RecvResponseResult::RecvBody(call)) => read_body(input, call, max_body).await?,
        Some(RecvResponseResult::Redirect(_) | RecvResponseResult::Cleanup(_)) => Bytes::new(),
        None => return Err(TransportErrorKind::Other.into()),
    };
    let (parts, ()) = head.into_parts();
    Ok(http::Response::from_parts(parts, body))
}

/// Reads a body whole, decoding its framing.
async fn read_body(
    input: &mut Input,
    mut call: Call<RecvBody>,
    max_body: usize,
) -> Result<Bytes, TransportError> {
    let close_delimited = matches!(call.body_mode(), BodyMode::CloseDelimited);
    let mut body = Vec::new();
    let mut out = vec![0u8; CHUNK];
    loop {
        if !close_delimited && call.can_proceed() {
            return Ok(Bytes::from(body));
        }
        if !input.buffered.is_empty() {
            let (used, n) = call.read(&input.buffered, &mut out).map_err(protocol)?;
            input.consume(used);
            if body.len().saturating_add(n) > max_body {
                return Err(TransportError::body_too_large(
                    u64::try_from(max_body).unwrap_or(u64::MAX),
                ));
            }
            body.extend_from_slice(&out[..n]);
            if used > 0 || n > 0 {
                continue;
            }
        }
        if input.fill().await? == 0 {
            // The end of the stream ends a close-delimited body, and a
            // chunked one whose last chunk came (a server that closed
            // right after `0\r\n`); anything else was cut short.
            return if close_delimited || call.is_ended_chunked() {
                Ok(Bytes::from(body))
            } else {
                Err(TransportErrorKind::Reset.into())
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(request: http::Request<Bytes>) -> String {
        let (wire, _) = encode(request).unwrap();
        String::from_utf8(wire).unwrap()
    }

    #[test]
    fn a_get_goes_out_in_origin_form_with_host_and_close() {
        let get = http::Request::get("http://127.0.0.1:8080/runs/1?waitSeconds=5")
            .header("authorization", "Bearer x")
            .body(Bytes::new())
            .unwrap();
        let text = wire(get);
        assert!(
            text.starts_with("GET /runs/1?waitSeconds=5 HTTP/1.1\r\n"),
            "{text}"
        );
        assert!(text.contains("host: 127.0.0.1:8080\r\n"), "{text}");
        assert!(text.contains("connection: close\r\n"), "{text}");
        assert!(!text.contains("content-length"), "{text}");
        assert!(text.ends_with("\r\n\r\n"), "{text}");
    }

    #[test]
    fn bodies_are_framed_by_length_or_chunks() {
        let post = http::Request::post("http://h.test/items")
            .body(Bytes::from_static(b"{\"a\":1}"))
            .unwrap();
        let text = wire(post);
        assert!(text.contains("content-length: 7\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n{\"a\":1}"), "{text}");

        let empty = http::Request::post("http://h.test/items")
            .body(Bytes::new())
            .unwrap();
        assert!(wire(empty).contains("content-length: 0\r\n"));

        let chunked = http::Request::put("http://h.test/items/1")
            .header("transfer-encoding", "chunked")
            .body(Bytes::from_static(b"hello"))
            .unwrap();
        assert!(wire(chunked).ends_with("5\r\nhello\r\n0\r\n\r\n"));

        let big = vec![b'x'; 3 * CHUNK + 17];
        let post = http::Request::post("http://h.test/items")
            .body(Bytes::from(big.clone()))
            .unwrap();
        let (bytes, _) = encode(post).unwrap();
        assert!(bytes.ends_with(&big));
    }

    #[test]
    fn a_body_that_contradicts_its_length_is_not_sent() {
        let long = http::Request::post("http://h.test/items")
            .header("content-length", "2")
            .body(Bytes::from_static(b"hello"))
            .unwrap();
        assert_eq!(
            encode(long).err().map(|e| e.kind()),
            Some(TransportErrorKind::InvalidRequest)
        );
        let short = http::Request::post("http://h.test/items")
            .header("content-length", "9")
            .body(Bytes::from_static(b"hello"))
            .unwrap();
        assert_eq!(
            encode(short).err().map(|e| e.kind()),
            Some(TransportErrorKind::InvalidRequest)
        );
    }

    #[test]
    fn io_errors_map_to_kinds() {
        use io::ErrorKind as K;
        for (kind, expected) in [
            (K::ConnectionRefused, TransportErrorKind::Refused),
            (K::ConnectionReset, TransportErrorKind::Reset),
            (K::UnexpectedEof, TransportErrorKind::Reset),
            (K::BrokenPipe, TransportErrorKind::Reset),
            (K::TimedOut, TransportErrorKind::Timeout),
            (K::PermissionDenied, TransportErrorKind::Other),
        ] {
            assert_eq!(io_kind(&io::Error::from(kind)), expected, "{kind:?}");
        }
    }
}
