//! The HTTP side: hyper connection handling and the request handler.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::config::{Fault, JobClock, JobState, LabConfig, RetryAfter, Step};
use crate::log::Log;
use crate::quota::{self, QuotaState, QuotaView};
use crate::rng::SplitMix64;
use crate::wire;

/// Request bodies are read (so that keep-alive works) up to this size.
const MAX_BODY: usize = 1 << 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
struct Job {
    finishes_after: Duration,
    final_state: JobState,
    /// `None` until the clock starts ([`JobClock::FirstRequest`]).
    started: Option<Instant>,
}

impl Job {
    fn terminal_at(&self) -> Option<Instant> {
        self.started.map(|s| s + self.finishes_after)
    }

    fn status(&self, now: Instant) -> &'static str {
        match self.terminal_at() {
            Some(t) if now >= t => self.final_state.as_str(),
            _ => "running",
        }
    }
}

/// State shared by every connection of one lab.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: LabConfig,
    pub(crate) started: Instant,
    pub(crate) log: Arc<Log>,
    jobs: Mutex<HashMap<String, Job>>,
    quotas: Mutex<Vec<QuotaState>>,
    /// Script counters, per (rule index, path).
    scripts: Mutex<HashMap<(usize, String), usize>>,
    rng: Mutex<SplitMix64>,
    next_run: AtomicU64,
    /// TCP connections accepted so far.
    pub(crate) connections: AtomicU64,
}

impl Shared {
    pub(crate) fn new(config: LabConfig, started: Instant) -> Self {
        let jobs = config
            .jobs
            .iter()
            .map(|j| {
                let job = Job {
                    finishes_after: j.finishes_after,
                    final_state: j.final_state,
                    started: match config.job_clock {
                        JobClock::LabStart => Some(started),
                        JobClock::FirstRequest => None,
                    },
                };
                (j.id.clone(), job)
            })
            .collect();
        let quotas = config.quotas.iter().cloned().map(QuotaState::new).collect();
        Shared {
            rng: Mutex::new(SplitMix64::new(config.seed)),
            config,
            started,
            log: Arc::new(Log::new(started)),
            jobs: Mutex::new(jobs),
            quotas: Mutex::new(quotas),
            scripts: Mutex::new(HashMap::new()),
            next_run: AtomicU64::new(1),
            connections: AtomicU64::new(0),
        }
    }

    /// The server's (skewed) wall clock.
    fn server_now(&self) -> SystemTime {
        wire::skewed(SystemTime::now(), self.config.date_skew_secs)
    }

    /// Starts the clock of a declared job on its first request.
    fn touch_job(&self, path: &str, at: Instant) {
        let mut jobs = lock(&self.jobs);
        if let Some(job) = job_id(path).and_then(|id| jobs.get_mut(id)) {
            job.started.get_or_insert(at);
        }
    }

    /// The Retry-After value for a wait of `secs` in the configured style.
    fn retry_after(&self, server_now: SystemTime, secs: u64) -> Option<String> {
        wire::format_retry_after(self.config.retry_after_style, server_now, secs)
    }

    /// Runs the fault rules for `path`, in order.
    async fn faults(&self, path: &str) -> Decision {
        for (i, rule) in self.config.faults.iter().enumerate() {
            if !rule.on.matches(path) {
                continue;
            }
            match &rule.fault {
                Fault::Slow(delay) => tokio::time::sleep(*delay).await,
                Fault::Reset => return Decision::Reset,
                Fault::Hang => return Decision::Hang,
                Fault::FailRandomly {
                    probability,
                    status,
                } => {
                    let draw = lock(&self.rng).next_f64();
                    if draw < *probability {
                        return Decision::Answer {
                            status: *status,
                            retry_after: None,
                            code: "INJECTED_FAULT",
                        };
                    }
                }
                Fault::Script(steps) => {
                    let n = {
                        let mut scripts = lock(&self.scripts);
                        let counter = scripts.entry((i, path.to_owned())).or_insert(0);
                        let n = *counter;
                        *counter += 1;
                        n
                    };
                    match steps.get(n) {
                        None | Some(Step::Normal) => {}
                        Some(Step::Reset) => return Decision::Reset,
                        Some(Step::Hang) => return Decision::Hang,
                        Some(Step::Status {
                            status,
                            retry_after,
                        }) => {
                            return Decision::Answer {
                                status: *status,
                                retry_after: retry_after.clone(),
                                code: "SCRIPTED",
                            };
                        }
                    }
                }
            }
        }
        Decision::Continue
    }

    /// The normal answer of the lab's endpoints.
    async fn route(&self, method: &Method, path: &str, query: Option<&str>) -> Answer {
        if path == "/" {
            return if method == Method::GET {
                Answer::json(
                    200,
                    json!({
                        "lab": "polite-lab",
                        "endpoints": ["POST /runs", "GET /runs/{id}[?waitSeconds=N]", "GET|PUT|POST|DELETE /items/{k}", "GET /bytes/{n}", "* /redirect?to=URL[&status=N]"],
                    }),
                )
            } else {
                Answer::method_not_allowed("GET")
            };
        }
        if path == "/redirect" {
            return redirect(query);
        }
        if path == "/runs" {
            return if method == Method::POST {
                self.create_run()
            } else {
                Answer::method_not_allowed("POST")
            };
        }
        if let Some(id) = job_id(path) {
            return if method == Method::GET {
                self.get_run(id, query).await
            } else {
                Answer::method_not_allowed("GET")
            };
        }
        if let Some(n) = path.strip_prefix("/bytes/") {
            return match (method, parse_bytes(n)) {
                (&Method::GET, Some(n)) => Answer::bytes(n),
                (&Method::GET, None) => Answer::validation_error(
                    "invalid size: expected /bytes/{n}, n a whole number of bytes up to 16777216",
                ),
                _ => Answer::method_not_allowed("GET"),
            };
        }
        if let Some(key) = path.strip_prefix("/items/").filter(|k| !k.is_empty()) {
            return match *method {
                Method::GET | Method::PUT | Method::DELETE => {
                    Answer::json(200, json!({ "item": key }))
                }
                Method::POST => Answer::json(201, json!({ "item": key })),
                _ => Answer::method_not_allowed("GET, PUT, POST, DELETE"),
            };
        }
        Answer::json(
            404,
            json!({ "code": "NOT_FOUND", "message": format!("no resource at {path}") }),
        )
    }

    fn create_run(&self) -> Answer {
        let n = self.next_run.fetch_add(1, Ordering::Relaxed);
        let id = format!("run-{n}");
        let now = Instant::now();
        let job = Job {
            finishes_after: self.config.run_duration,
            final_state: self.config.run_final_state,
            started: Some(now),
        };
        let status = job.status(now);
        lock(&self.jobs).insert(id.clone(), job);
        let mut answer = Answer::json(201, json!({ "id": id, "status": status }));
        answer
            .headers
            .push((header::LOCATION, format!("/runs/{id}")));
        answer
    }

    async fn get_run(&self, id: &str, query: Option<&str>) -> Answer {
        let wait_param = query.and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "waitSeconds")
                .map(|(_, v)| v.into_owned())
        });
        let wait = match wait_param {
            None => None,
            Some(_) if !self.config.long_poll => {
                return Answer::validation_error("unknown parameter waitSeconds");
            }
            Some(text) => match parse_wait_seconds(&text) {
                Some(secs) => Some(Duration::from_secs(secs).min(self.config.max_wait)),
                None => {
                    return Answer::validation_error(
                        "invalid waitSeconds: expected whole seconds (0 or more)",
                    );
                }
            },
        };
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        loop {
            let now = Instant::now();
            let (status, terminal_at) = match lock(&self.jobs).get(id) {
                Some(job) => (job.status(now), job.terminal_at()),
                None => {
                    return Answer::json(
                        404,
                        json!({ "code": "NOT_FOUND", "message": format!("no run {id}") }),
                    );
                }
            };
            let until = match (deadline, terminal_at) {
                _ if status != "running" => None,
                (Some(d), Some(t)) => Some(d.min(t)),
                (Some(d), None) => Some(d),
                (None, _) => None,
            };
            match until {
                Some(until) if until > now => {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
                }
                _ => return Answer::json(200, json!({ "id": id, "status": status })),
            }
        }
    }
}

/// `/redirect?to=URL[&status=N]`: `N` (301, 302, 303, 307 or 308; 302 by
/// default) with `Location: URL`, whatever the method; 400
/// `VALIDATION_ERROR` without a usable `to` or with another status.
fn redirect(query: Option<&str>) -> Answer {
    let mut to = None;
    let mut status = 302;
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*key {
            "to" if to.is_none() => to = Some(value.into_owned()),
            "status" => match value.parse() {
                Ok(n @ (301 | 302 | 303 | 307 | 308)) => status = n,
                _ => {
                    return Answer::validation_error("status must be 301, 302, 303, 307 or 308");
                }
            },
            _ => {}
        }
    }
    let Some(to) = to.filter(|t| !t.is_empty() && HeaderValue::from_str(t).is_ok()) else {
        return Answer::validation_error("redirect needs ?to=URL");
    };
    let mut answer = Answer::json(status, json!({ "location": to }));
    answer.headers.push((header::LOCATION, to));
    answer
}

/// `/runs/{id}` → `id` (non-empty, no further `/`).
fn job_id(path: &str) -> Option<&str> {
    path.strip_prefix("/runs/")
        .filter(|id| !id.is_empty() && !id.contains('/'))
}

/// `waitSeconds` must be 1 to 9 ASCII digits (no sign, no fraction, no spaces).
fn parse_wait_seconds(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 9 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// What the fault rules decided.
#[derive(Debug)]
enum Decision {
    Continue,
    Answer {
        status: u16,
        retry_after: Option<RetryAfter>,
        code: &'static str,
    },
    Reset,
    Hang,
}

/// A response before the common headers are added.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: Bytes,
    /// `application/json` unless it says otherwise.
    content_type: &'static str,
    headers: Vec<(HeaderName, String)>,
}

impl Answer {
    fn json(status: u16, body: serde_json::Value) -> Self {
        Answer {
            status,
            body: Bytes::from(body.to_string()),
            content_type: "application/json",
            headers: Vec::new(),
        }
    }

    /// `n` bytes of `application/octet-stream` (`GET /bytes/{n}`): a slice
    /// of one shared buffer, so serving a large body copies nothing.
    fn bytes(n: usize) -> Self {
        static BUFFER: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
        let buffer = BUFFER.get_or_init(|| Bytes::from(vec![b'x'; MAX_BYTES]));
        Answer {
            status: 200,
            body: buffer.slice(..n.min(MAX_BYTES)),
            content_type: "application/octet-stream",
            headers: Vec::new(),
        }
    }

    fn validation_error(message: &str) -> Self {
        Answer::json(
            400,
            json!({ "code": "VALIDATION_ERROR", "message": message }),
        )
    }

    fn method_not_allowed(allow: &str) -> Self {
        let mut a = Answer::json(
            405,
            json!({ "code": "METHOD_NOT_ALLOWED", "message": format!("allowed: {allow}") }),
        );
        a.headers.push((header::ALLOW, allow.to_owned()));
        a
    }
}

/// The largest body `GET /bytes/{n}` serves: 16 MiB.
const MAX_BYTES: usize = 16 << 20;

/// `n` of `/bytes/{n}`: ASCII digits, at most [`MAX_BYTES`].
fn parse_bytes(text: &str) -> Option<usize> {
    if text.is_empty() || text.len() > 9 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|&n| n <= MAX_BYTES)
}

/// The error a handler returns to make hyper drop the connection unanswered.
#[derive(Debug)]
pub(crate) struct Unanswered;

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped on purpose")
    }
}

impl std::error::Error for Unanswered {}

/// Builds the final response: status, body, `Date` (skewed), content type,
/// rate-limit headers.
fn respond(
    shared: &Shared,
    answer: Answer,
    quota: Option<&QuotaView>,
    server_now: SystemTime,
) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(answer.body));
    *resp.status_mut() =
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    let mut put = |name: HeaderName, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.append(name, v);
        }
    };
    put(header::DATE, wire::imf_fixdate(server_now));
    put(header::CONTENT_TYPE, answer.content_type.to_owned());
    for (name, value) in answer.headers {
        put(name, value);
    }
    if let Some(q) = quota {
        let reset = wire::ceil_secs(q.reset);
        if shared.config.ratelimit_headers {
            let name = wire::sf_string(&q.name);
            let w = wire::ceil_secs(q.window).max(1);
            put(
                HeaderName::from_static("ratelimit-policy"),
                format!("{name};q={};w={w}", q.limit),
            );
            put(
                HeaderName::from_static("ratelimit"),
                format!("{name};r={};t={reset}", q.remaining),
            );
        }
        if shared.config.x_ratelimit_headers {
            put(
                HeaderName::from_static("x-ratelimit-limit"),
                q.limit.to_string(),
            );
            put(
                HeaderName::from_static("x-ratelimit-remaining"),
                q.remaining.to_string(),
            );
            put(
                HeaderName::from_static("x-ratelimit-reset"),
                reset.to_string(),
            );
        }
    }
    resp
}

/// Handles one request: log, read body, quota, faults, route.
async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    reset: Arc<AtomicBool>,
) -> Result<Response<Full<Bytes>>, Unanswered> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().map(str::to_owned);
    let mut names: Vec<String> = parts
        .headers
        .keys()
        .map(|k| k.as_str().to_owned())
        .collect();
    names.sort();
    names.dedup();
    let mut guard = shared
        .log
        .arrive(parts.method.to_string(), path.clone(), query.clone(), names);
    shared.touch_job(&path, guard.arrived());

    if Limited::new(body, MAX_BODY).collect().await.is_err() {
        let answer = Answer::json(
            400,
            json!({ "code": "BAD_BODY", "message": "request body unreadable or over 1 MiB" }),
        );
        let resp = respond(&shared, answer, None, shared.server_now());
        guard.finish(400);
        return Ok(resp);
    }

    let admission = {
        let mut quotas = lock(&shared.quotas);
        quota::admit(
            &mut quotas,
            &path,
            Instant::now(),
            shared.started,
            shared.config.count_refused,
        )
    };
    if let Some(wait) = admission.refused_for {
        let server_now = shared.server_now();
        let secs = match shared.config.fixed_retry_after {
            Some(fixed) => wire::ceil_secs(fixed),
            None => wire::ceil_secs(wait).max(1),
        };
        let mut answer = Answer::json(
            429,
            json!({ "code": "RATE_LIMITED", "message": "quota exceeded" }),
        );
        if let Some(v) = shared.retry_after(server_now, secs) {
            answer.headers.push((header::RETRY_AFTER, v));
        }
        let resp = respond(&shared, answer, admission.binding.as_ref(), server_now);
        guard.finish(429);
        return Ok(resp);
    }

    let answer = match shared.faults(&path).await {
        Decision::Continue => shared.route(&parts.method, &path, query.as_deref()).await,
        Decision::Reset => {
            reset.store(true, Ordering::SeqCst);
            guard.reset();
            return Err(Unanswered);
        }
        Decision::Hang => {
            guard.hang();
            std::future::pending::<()>().await;
            return Err(Unanswered);
        }
        Decision::Answer {
            status,
            retry_after,
            code,
        } => {
            let mut answer = Answer::json(status, json!({ "code": code, "status": status }));
            let value = match retry_after {
                Some(RetryAfter::In(d)) => {
                    shared.retry_after(shared.server_now(), wire::ceil_secs(d))
                }
                Some(RetryAfter::Raw(text)) => Some(text),
                Some(RetryAfter::Omit) => None,
                None if status == 429 || status == 503 => shared.retry_after(
                    shared.server_now(),
                    wire::ceil_secs(shared.config.scripted_retry_after),
                ),
                None => None,
            };
            if let Some(v) = value {
                answer.headers.push((header::RETRY_AFTER, v));
            }
            answer
        }
    };
    let status = answer.status;
    let resp = respond(
        &shared,
        answer,
        admission.binding.as_ref(),
        shared.server_now(),
    );
    guard.finish(status);
    Ok(resp)
}

/// A TCP stream that, when asked, closes with a reset (SO_LINGER 0) instead of a FIN.
#[derive(Debug)]
struct ResettableStream {
    inner: TcpStream,
    reset: Arc<AtomicBool>,
}

impl Drop for ResettableStream {
    fn drop(&mut self) {
        if self.reset.load(Ordering::SeqCst) {
            // Zero linger: the close sends RST at once and never blocks.
            let _ = self.inner.set_zero_linger();
        }
    }
}

impl AsyncRead for ResettableStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResettableStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The TLS acceptor of a lab in TLS mode (`None`: plain HTTP).
#[cfg(feature = "tls")]
pub(crate) type Tls = Option<tokio_rustls::TlsAcceptor>;
/// Without feature `tls` a lab is always plain HTTP.
#[cfg(not(feature = "tls"))]
pub(crate) type Tls = Option<NoTls>;

/// No TLS acceptor can exist without feature `tls`.
#[cfg(not(feature = "tls"))]
#[derive(Clone, Debug)]
pub(crate) enum NoTls {}

/// How long a TLS handshake may take before the connection is dropped.
#[cfg(feature = "tls")]
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>, tls: Tls) {
    let reset = Arc::new(AtomicBool::new(false));
    let stream = ResettableStream {
        inner: stream,
        reset: Arc::clone(&reset),
    };
    match tls {
        None => serve_http(TokioIo::new(stream), shared, reset).await,
        #[cfg(feature = "tls")]
        Some(acceptor) => {
            // A failed or endless handshake ends this connection only.
            if let Ok(Ok(stream)) =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
            {
                serve_http(TokioIo::new(stream), shared, reset).await;
            }
        }
        #[cfg(not(feature = "tls"))]
        Some(never) => match never {},
    }
}

/// Serves HTTP/1.1 (keep-alive) on one connection, plain or TLS.
async fn serve_http<I>(io: TokioIo<I>, shared: Arc<Shared>, reset: Arc<AtomicBool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| handle(Arc::clone(&shared), req, Arc::clone(&reset)));
    // Errors end this connection only (a reset on purpose is one of them).
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .auto_date_header(false)
        .serve_connection(io, service)
        .await;
}

/// Accepts connections until `stop` fires (or its sender is dropped).
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
    tls: Tls,
) {
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    shared.connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve_connection(stream, Arc::clone(&shared), tls.clone()));
                }
                // E.g. out of file descriptors: back off briefly instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_seconds_is_strict() {
        assert_eq!(parse_wait_seconds("0"), Some(0));
        assert_eq!(parse_wait_seconds("25"), Some(25));
        for bad in ["", "-1", "+1", "1.5", " 1", "1 ", "abc", "9999999999", "１"] {
            assert_eq!(parse_wait_seconds(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn byte_sizes_are_strict() {
        assert_eq!(parse_bytes("0"), Some(0));
        assert_eq!(parse_bytes("1048576"), Some(1 << 20));
        assert_eq!(parse_bytes("16777216"), Some(MAX_BYTES));
        for bad in [
            "",
            "16777217",
            "999999999",
            "1234567890",
            "-1",
            "1k",
            " 1",
            "１",
        ] {
            assert_eq!(parse_bytes(bad), None, "{bad:?}");
        }
        let answer = Answer::bytes(10);
        assert_eq!((answer.status, &answer.body[..]), (200, &b"xxxxxxxxxx"[..]));
        assert_eq!(answer.content_type, "application/octet-stream");
    }

    #[test]
    fn job_ids() {
        assert_eq!(job_id("/runs/j1"), Some("j1"));
        assert_eq!(job_id("/runs/"), None);
        assert_eq!(job_id("/runs/a/b"), None);
        assert_eq!(job_id("/items/a"), None);
    }
}
