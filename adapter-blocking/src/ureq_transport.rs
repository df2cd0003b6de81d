//! [`UreqTransport`]: the ready transport on ureq 3, one worker thread per
//! attempt in flight (threads are reused from attempt to attempt).

use std::future::Future;
use std::io::Read;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_client::{Transport, TransportError};
use polite_core::TransportErrorKind;
use ureq::config::ConfigBuilder;
use ureq::typestate::HttpCrateScope;

use crate::block_on::{InlineTicket, wake_at};
// One attempt, packaged for a worker thread (or a crew member): returns
// the waker of the caller waiting for it, which the worker wakes once it
// is idle again.
use crate::crew::Job;
use crate::resolver::{DNS, LastIp, LiteralResolver, port_of};
use polite_client::recycle::Recycler;

/// What one attempt produces.
type Outcome = Result<http::Response<Bytes>, TransportError>;

/// Sends attempts with a `ureq::Agent`: on a worker thread, or on the
/// calling thread when nothing else could need it meanwhile.
///
/// ureq blocks, so an attempt that must not hold the caller runs on a
/// worker thread that completes the attempt's future (a one-shot slot and
/// a waker) when it is done. That is what lets a cancel return at once
/// while a request is in flight, and lets a batch have up to `concurrency`
/// attempts in flight. Worker threads are reused: a worker that has
/// delivered its answer waits up to [`WORKER_IDLE`](Self::WORKER_IDLE) for
/// the next attempt of this transport (or a clone of it) before it exits,
/// so a run of calls does not pay for a new thread per attempt.
///
/// **On the calling thread** instead (no hand-off, no wake-up: two
/// context switches fewer per request, see BENCHMARKS.md 8.4) runs an attempt
/// of a call that nobody can cancel and that keeps one attempt in flight —
/// [`send`](polite_client::Client::send) and
/// [`wait`](polite_client::Client::wait), not their `*_cancellable` forms,
/// not a batch ([`Runtime::call_sequential`](polite_client::Runtime::call_sequential))
/// — when this is the [`Default`] transport (its agent is
/// [`default_agent`](Self::default_agent)'s, whose resolver answers an IP
/// address without a lookup and reuses a host name's addresses for 30 s)
/// and the URL's host is an IP address or a host name that resolver looked
/// up less than 30 s ago (`http` or `https`, no proxy configured). A host
/// name not looked up yet keeps the worker for that attempt: ureq resolves
/// it under a timeout on a thread it spawns for the lookup. A
/// transport over an agent of your own ([`new`](Self::new)) always uses
/// workers. [`worker_attempts`](Self::worker_attempts) counts the attempts
/// handed to workers. A transport of your own that wraps the default
/// `UreqTransport` and sends several of its attempts at once gets workers
/// for them: a sequential call that ever has two attempts waiting to run
/// on its thread keeps all its attempts on workers. (One that starts a
/// second attempt only once the first is running, a hedge after a delay,
/// would wait for the first to end: wrap
/// `UreqTransport::new(UreqTransport::default_agent())` for that.)
/// Attempts run on the calling thread on Unix only: the default agent's
/// TCP connections wait on their sockets with `poll(2)`, whose timer ends
/// a wait on time, where a socket timeout (ureq's own connections) fires
/// on the kernel's coarse timer, up to 32 ms late (BENCHMARKS.md 8.4 and
/// 8.13); elsewhere every attempt runs on a worker.
///
/// **On a batch's crew** runs an attempt that a batch handed out through
/// [`for_each_result`](polite_client::BatchStream::for_each_result) starts
/// (`Threads::call_crew`), when this is the [`Default`] transport and the
/// host is an IP address or a host name looked up less than 30 s ago
/// (a lookup cannot be interrupted: such an attempt takes a worker): the
/// crew's thread that polled the batch runs it, then polls the batch
/// again. Bounded as on a worker (each phase by `abort_at`); when the
/// batch ends first, the attempt's waits on its socket are interrupted at
/// once and it fails (nobody is waiting for it any more).
///
/// * **Timeouts.** On a worker, the future resolves `Aborted` by itself at
///   `abort_at`, whatever the worker is doing, so a hanging server can
///   never hold the caller past the call's deadline plus the transport
///   cushion. The worker sets each phase of the exchange (connect, sending
///   the request, the answer's head, its body) ureq's phase timeout of the
///   whole time left, `abort_at - now`, so each phase's timeout fires at or
///   after `abort_at`. Not ureq's end-to-end `timeout_global`: with it, ureq
///   resolves the host name on a thread of its own, spawned for every
///   request, even one sent on a pooled connection (a thread spawn per
///   attempt cost a batch of 10 KiB answers 4× the time of plain ureq); the
///   name is resolved on the worker instead, which is already off the
///   caller's thread. On the calling thread, ureq's `timeout_global` bounds
///   the whole exchange, body included, by the call's deadline (the instant
///   the call's timer is armed for while an attempt is in flight; an answer
///   after it would be discarded), never later than `abort_at`: a hanging
///   server or a stalled body ends the call at its deadline (within a
///   millisecond: every wait on the socket is a `poll` bounded by the time
///   left).
/// * **Bodies** are read whole, up to [`body_limit`](Self::body_limit)
///   bytes after decoding (default 16 MiB): a larger body (or a
///   `Content-Length` above the limit) ends the attempt at once with a
///   permanent `BodyTooLarge` (never an out-of-memory, never retried; the
///   rest of the body is not downloaded). A body with a `Content-Length`
///   is read into one buffer of that size (never regrown or copied): the
///   allocation of a body the caller has dropped when one of the last 8
///   handed out fits (between its size and twice that, up to 2 MiB
///   each), else a fresh one. Those 8 handles are dropped once a worker
///   has idled [`WORKER_IDLE`](Self::WORKER_IDLE): a transport no longer
///   used pins no body memory the caller has let go.
/// * **Redirects** are not followed by ureq (`max_redirects(0)` is set on
///   every request, whatever the agent's setting): polite follows them
///   itself by the client's [`RedirectPolicy`](polite_client::RedirectPolicy),
///   dropping every header the caller set on a cross-origin hop.
/// * **Status codes** are answers, not errors: 4xx and 5xx come back as
///   responses for the machines to classify (`http_status_as_error(false)` is
///   set on every request, whatever the agent's own setting).
/// * **Methods**: any method is sent as given, extension methods
///   (`PURGE`, `PROPFIND`, and `get`, which is not `GET`: methods are
///   case-sensitive) too (`allow_non_standard_methods(true)` is set on
///   every request; ureq refuses them by default), over HTTP/1.1 or 1.0
///   (a request of another version is a permanent `InvalidRequest`, never
///   sent).
/// * **Errors** map to the kinds the machines decide by: connection refused →
///   `Refused`; reset, aborted, broken pipe, early EOF → `Reset`; host not
///   found → `Dns`; a ureq timeout → `Timeout` (`Aborted` when it fires at
///   or after `abort_at`); a rejected certificate → `Certificate`
///   (permanent); other TLS failures → `Tls`; a bad URL or request →
///   `InvalidRequest` (permanent); too many redirects → `TooManyRedirects`
///   (permanent); an answer head (status line and headers) over ureq's
///   limit (`max_response_header_size`, 64 KiB by default, or more than 128
///   headers) → `HeadTooLarge` (permanent, with the limit); anything else
///   → `Other`, an answer that is not valid HTTP among them (a control byte
///   in a header value, a garbage status line: retried as a transport
///   error, as on every adapter). The ureq error is kept as the
///   [`TransportError`]'s `source()`.
///
/// ## Threads, and what a cancel does to a request in flight
///
/// Workers running an attempt at once are at most the attempts the machines
/// keep in flight (1 for `send` and `wait` on a worker, `concurrency` for
/// `batch`: never one per item) plus attempts abandoned by a cancel, each only until its own
/// `abort_at`; besides them, idle workers wait for reuse, each for at most
/// [`WORKER_IDLE`](Self::WORKER_IDLE) after its last attempt. ureq cannot
/// abort a read from another thread, so when a call is cancelled (or ends)
/// with an attempt in flight:
///
/// 1. the call returns at once (`Cancelled`); the attempt's result will be
///    thrown away;
/// 2. the worker thread and its socket live on until the attempt ends by
///    itself: when the server answers, or when the phase it is in times
///    out — a phase that has already begun when `abort_at` (the call's
///    deadline plus the cushion) passes runs at most until its own
///    timeout, `abort_at - start` after the phase began (a hanging server
///    is dropped at `abort_at`); then the connection is closed and the
///    thread goes idle (and exits when it is not reused);
/// 3. the request may well have reached the server, and the server may act
///    on it: a cancel never promises otherwise.
///
/// [`live_workers`](Self::live_workers) counts the workers still running
/// an attempt (for tests and diagnostics; clones of a transport share the
/// count). A worker stops counting once it has delivered its result; its
/// thread then only wakes the caller and goes idle.
///
/// ```
/// let t = polite_blocking::UreqTransport::default().max_body(1 << 20);
/// assert_eq!(t.body_limit(), 1 << 20);
/// assert_eq!(t.live_workers(), 0);
/// ```
#[derive(Clone, Debug)]
pub struct UreqTransport {
    agent: ureq::Agent,
    max_body: usize,
    live: Arc<AtomicUsize>,
    pool: Arc<Pool>,
    /// Counted attempts handed to a worker thread.
    handed: Arc<AtomicU64>,
    /// The agent is [`default_agent`](Self::default_agent)'s: attempts of
    /// sequential calls to an IP address (or a host name looked up less
    /// than 30 s ago) may run on the calling thread.
    inline: bool,
    /// The last authority whose host was an IP address (for `inline`).
    last_ip: Arc<LastIp>,
}

impl Default for UreqTransport {
    /// A transport over [`default_agent`](UreqTransport::default_agent),
    /// whose sequential calls to IP addresses (and host names looked up
    /// less than 30 s ago) run their attempts on the
    /// calling thread (see above).
    fn default() -> Self {
        UreqTransport {
            inline: cfg!(unix),
            ..UreqTransport::new(UreqTransport::default_agent())
        }
    }
}

impl UreqTransport {
    /// Idle connections the [default agent](Self::default_agent) keeps per
    /// host: 32 (128 in all).
    pub const IDLE_PER_HOST: usize = 32;

    /// How long an idle worker thread waits for the next attempt before it
    /// exits: 5 s.
    pub const WORKER_IDLE: Duration = Duration::from_secs(5);

    /// Wraps a `ureq::Agent` (configure TLS, proxies, the connection pool
    /// there). The agent's status-as-error setting is overridden per request
    /// and its timeouts replaced by each attempt's `abort_at`. Every attempt
    /// runs on a worker thread (an agent's resolver and connector are its
    /// own: only the [`Default`] transport runs attempts on the calling
    /// thread).
    ///
    /// ```
    /// let agent = ureq::Agent::new_with_defaults();
    /// let t = polite_blocking::UreqTransport::new(agent);
    /// assert_eq!(t.body_limit(), polite_blocking::DEFAULT_MAX_BODY);
    /// ```
    #[must_use]
    pub fn new(agent: ureq::Agent) -> UreqTransport {
        UreqTransport {
            agent,
            max_body: polite_client::DEFAULT_MAX_BODY,
            live: Arc::default(),
            pool: Arc::default(),
            handed: Arc::default(),
            inline: false,
            last_ip: Arc::default(),
        }
    }

    /// The agent [`Client::new`](crate::Client::new) uses: ureq's defaults
    /// (rustls with web PKI roots, gzip, a connection pool; redirects are
    /// followed by polite, not ureq, see above) with HTTP error statuses
    /// returned as responses, and a pool that keeps up to
    /// [`IDLE_PER_HOST`](Self::IDLE_PER_HOST) idle connections per host
    /// (ureq's default keeps 3, so a batch at concurrency 4 reopened a
    /// connection every few requests: 50 connections for 1,000 items; now
    /// 4). All workers share the agent, so they share its pool. A batch
    /// above 32 in flight against one host, or an agent of your own,
    /// needs `max_idle_connections_per_host` at least its concurrency.
    ///
    /// Its resolver answers an IP address itself, with no lookup and no
    /// thread (ureq with an end-to-end timeout, `timeout_global`, otherwise
    /// spawns a thread per request to resolve even `127.0.0.1`), and hands
    /// a host name to ureq's `DefaultResolver`, then reuses the answer for
    /// 30 s across every default agent of the process (at most 64 names;
    /// an attempt that fails before an answer drops its host's, so the
    /// retry looks it up again). ureq resolves before it looks in its
    /// pool: without the reuse, every request, even one on a kept-alive
    /// connection, cost a lookup (on Linux, `/etc/hosts` read again, or a
    /// query to the DNS server: glibc keeps no answers), where hyper (so
    /// reqwest) resolves only to open a connection.
    ///
    /// ```
    /// let agent = polite_blocking::UreqTransport::default_agent();
    /// assert!(!agent.config().http_status_as_error());
    /// assert_eq!(agent.config().max_idle_connections_per_host(), 32);
    /// ```
    #[must_use]
    pub fn default_agent() -> ureq::Agent {
        let config = ureq::Agent::config_builder()
            .max_idle_connections_per_host(Self::IDLE_PER_HOST)
            .max_idle_connections(4 * Self::IDLE_PER_HOST)
            .http_status_as_error(false)
            .build();
        ureq::Agent::with_parts(config, connector(), LiteralResolver::new())
    }

    /// Sets the largest body read; a larger one fails the attempt with a
    /// permanent `BodyTooLarge` (never an out-of-memory, never retried).
    ///
    /// ```
    /// let t = polite_blocking::UreqTransport::default().max_body(4096);
    /// assert_eq!(t.body_limit(), 4096);
    /// ```
    #[must_use]
    pub fn max_body(mut self, bytes: usize) -> UreqTransport {
        self.max_body = bytes;
        self
    }

    /// The body limit.
    ///
    /// ```
    /// assert_eq!(polite_blocking::UreqTransport::default().body_limit(), 16 << 20);
    /// ```
    #[must_use]
    pub fn body_limit(&self) -> usize {
        self.max_body
    }

    /// How many worker threads (or batch crew members) of this transport
    /// (and its clones) are still running an attempt, including attempts
    /// whose call was cancelled and that now run out their time until
    /// `abort_at`.
    ///
    /// ```
    /// assert_eq!(polite_blocking::UreqTransport::default().live_workers(), 0);
    /// ```
    #[must_use]
    pub fn live_workers(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// How many attempts this transport (and its clones) has handed to a
    /// worker thread (or a batch's crew member) so far; an attempt run on
    /// the calling thread (see above) does not count.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use polite_blocking::{CancelToken, Client, Config, UreqTransport};
    ///
    /// let lab = polite_lab::Lab::start(polite_lab::LabConfig::default()).unwrap();
    /// let client = Client::with_transport(UreqTransport::default(), Config::default())?;
    /// let get = || http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap();
    /// client.send(get())?; // 127.0.0.1, no token: on this thread
    /// assert_eq!(client.transport().worker_attempts(), 0);
    /// client.send_cancellable(get(), &CancelToken::new())?; // a token: on a worker
    /// assert_eq!(client.transport().worker_attempts(), 1);
    /// # Ok::<(), polite_blocking::Error>(())
    /// ```
    #[must_use]
    pub fn worker_attempts(&self) -> u64 {
        self.handed.load(Ordering::SeqCst)
    }

    /// The agent.
    ///
    /// ```
    /// let t = polite_blocking::UreqTransport::default();
    /// assert!(!t.agent().config().http_status_as_error());
    /// ```
    #[must_use]
    pub fn agent(&self) -> &ureq::Agent {
        &self.agent
    }
}

/// The default agent's connectors: ureq's `DefaultConnector` (a `CONNECT`
/// proxy, TCP, rustls) with TCP connections whose waits end on time
/// ([`PollTcpConnector`](crate::poll_tcp::PollTcpConnector)).
#[cfg(unix)]
fn connector() -> impl ureq::unversioned::transport::Connector {
    use ureq::unversioned::transport::{ConnectProxyConnector, Connector, RustlsConnector};
    ().chain(ConnectProxyConnector::default())
        .chain(crate::poll_tcp::PollTcpConnector)
        .chain(RustlsConnector::default())
}

/// The default agent's connectors: ureq's own.
#[cfg(not(unix))]
fn connector() -> ureq::unversioned::transport::DefaultConnector {
    ureq::unversioned::transport::DefaultConnector::default()
}

/// The slot a worker fills and the waker it wakes.
#[derive(Debug, Default)]
struct Slot {
    result: Option<Outcome>,
    waker: Option<Waker>,
}

fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One attempt of a [`UreqTransport`]: on a worker thread, or, for a
/// sequential call to an IP address (or a host name looked up less than
/// 30 s ago) over the default agent, on the calling
/// thread at its second poll (see [`UreqTransport`]).
///
/// On a worker, it resolves with the worker's result, or `Aborted` at
/// `abort_at` if the worker has not answered by then; dropping it abandons
/// the attempt: the worker runs on until its own timeout (at `abort_at`)
/// and its result is thrown away.
///
/// ```
/// use bytes::Bytes;
/// use polite_blocking::{Transport, UreqTransport, block_on};
/// use std::time::{Duration, Instant};
///
/// let lab = polite_lab::Lab::start(polite_lab::LabConfig::default()).unwrap();
/// let t = UreqTransport::default();
/// let req = http::Request::get(lab.url("/items/1")).body(Bytes::new()).unwrap();
/// let sending = t.send(req, Instant::now() + Duration::from_secs(5)); // a worker starts
/// let resp = block_on(sending).unwrap();
/// assert_eq!(resp.status(), 200);
/// assert_eq!(t.worker_attempts(), 1);
/// ```
#[derive(Debug)]
pub struct UreqSending {
    state: State,
    abort_at: Instant,
}

// The inline request is kept in place: the drive loop boxes each attempt's
// future once already; boxing the request would allocate once more.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum State {
    /// On a worker: the slot it fills.
    Worker(Arc<Mutex<Slot>>),
    /// To run on the calling thread; `primed` once polled (the first poll
    /// only lets the rest of the call arm its timer).
    Inline {
        transport: UreqTransport,
        request: Option<http::Request<Bytes>>,
        primed: bool,
        ticket: InlineTicket,
    },
}

impl Future for UreqSending {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let this = self.get_mut();
        let abort_at = this.abort_at;
        let slot = match &mut this.state {
            State::Worker(slot) => slot,
            State::Inline {
                transport,
                request,
                primed,
                ticket,
            } => {
                let Some(req) = request.take() else {
                    // Polled again after it resolved.
                    return Poll::Ready(Err(TransportErrorKind::Other.into()));
                };
                let before = crate::block_on::inline_bound(cx);
                let Some(before) = before.filter(|_| ticket.alone()) else {
                    // Polled outside its sequential call (moved, or under
                    // another executor), or another attempt of the call
                    // waits to run too: a worker runs it after all.
                    let slot = transport.start(req, abort_at);
                    this.state = State::Worker(slot);
                    return Pin::new(this).poll(cx);
                };
                if !*primed {
                    // Back at once: the rest of the call arms its timer
                    // (the deadline) in this poll, so the next poll of
                    // `block_on` knows until when this may hold the thread.
                    *primed = true;
                    *request = Some(req);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                // Until abort_at, or until the rest of the call wants the
                // thread back: the deadline, since "while a send is in
                // flight the machine answers SleepUntil(deadline)" (the
                // rules in polite-core's crate docs), and an answer after
                // it is discarded anyway (TimedOut).
                let until = before.map_or(abort_at, |t| t.min(abort_at));
                if until < abort_at && until <= Instant::now() {
                    // The call's timer is due: let it act first.
                    *request = Some(req);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                let bound = Bound::Global(until);
                return Poll::Ready(attempt(
                    &transport.agent,
                    &transport.pool.recycler,
                    req,
                    bound,
                    transport.max_body,
                ));
            }
        };
        let mut slot = lock(slot);
        if let Some(result) = slot.result.take() {
            return Poll::Ready(result);
        }
        if Instant::now() >= abort_at {
            return Poll::Ready(Err(TransportErrorKind::Aborted.into()));
        }
        match &mut slot.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            other => *other = Some(cx.waker().clone()),
        }
        drop(slot);
        wake_at(abort_at, cx);
        Poll::Pending
    }
}

/// Counts a worker as live from before its spawn until it has delivered its
/// result (also if the spawn fails, or the attempt panics); the thread then
/// only wakes the caller and returns.
struct Live(Arc<AtomicUsize>);

impl Live {
    fn new(count: &Arc<AtomicUsize>) -> Live {
        count.fetch_add(1, Ordering::SeqCst);
        Live(Arc::clone(count))
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Transport for UreqTransport {
    type Sending = UreqSending;

    fn send(&self, request: http::Request<Bytes>, abort_at: Instant) -> UreqSending {
        let state = if self.inline && crate::block_on::sequential() && self.thread_free(&request) {
            State::Inline {
                transport: self.clone(),
                request: Some(request),
                primed: false,
                ticket: InlineTicket::new(),
            }
        } else {
            State::Worker(self.start(request, abort_at))
        };
        UreqSending { state, abort_at }
    }
}

impl UreqTransport {
    /// Whether `request` can be sent without a thread of ureq's own: over
    /// http or https, through no proxy, to an IP address or to a host name
    /// the default agent's resolver looked up less than 30 s ago (ureq
    /// resolves a host name under a timeout on a thread it spawns for the
    /// lookup).
    fn thread_free(&self, request: &http::Request<Bytes>) -> bool {
        let uri = request.uri();
        self.agent.config().proxy().is_none()
            && matches!(uri.scheme_str(), Some("http" | "https"))
            && (self.last_ip.of(uri).is_some()
                || uri.host().is_some_and(|host| {
                    port_of(uri).is_some_and(|port| DNS.fresh(host, port, Instant::now()))
                }))
    }

    /// Hands the attempt to a worker; returns the slot it fills.
    fn start(&self, request: http::Request<Bytes>, abort_at: Instant) -> Arc<Mutex<Slot>> {
        // Started by a crew's poll, an attempt that needs no thread of
        // ureq's own runs on a member of that crew (see `crew`): the member
        // that ends it polls the batch itself.
        let on_crew = self.inline && crate::crew::polling() && self.thread_free(&request);
        self.handed.fetch_add(1, Ordering::SeqCst);
        let slot = Arc::new(Mutex::new(Slot::default()));
        let filled = Arc::clone(&slot);
        let agent = self.agent.clone();
        let pool = Arc::clone(&self.pool);
        let max_body = self.max_body;
        let live = Live::new(&self.live);
        let job: Job = Box::new(move || {
            let result = attempt(
                &agent,
                &pool.recycler,
                request,
                Bound::Phases(abort_at),
                max_body,
            );
            let waker = {
                let mut slot = lock(&filled);
                slot.result = Some(result);
                slot.waker.take()
            };
            // Uncounted before the caller can start the next attempt, so
            // the count never shows the next attempt and this one together.
            drop(live);
            // The worker wakes the caller once it is idle again (see
            // `Pool::work`), so that the caller's next attempt finds it.
            waker
        });
        let job = if on_crew {
            match crate::crew::queue(job) {
                Ok(()) => return slot,
                Err(job) => job,
            }
        } else {
            job
        };
        if Pool::run(&self.pool, job).is_err() {
            // No thread to run it on (the job, and its `Live`, are gone).
            lock(&slot).result = Some(Err(TransportErrorKind::Other.into()));
        }
        slot
    }
}

/// Idle worker threads, shared by the clones of a transport: each waits
/// [`UreqTransport::WORKER_IDLE`] for a job on its channel, then leaves.
#[derive(Debug, Default)]
struct Pool {
    /// Idle workers (an id, and the sender of the worker's job channel).
    idle: Mutex<Vec<(u64, mpsc::Sender<Job>)>>,
    next_id: AtomicU64,
    /// The handles on the last bodies handed out, for the workers' reads.
    recycler: Recycler,
}

impl Pool {
    fn idle(&self) -> MutexGuard<'_, Vec<(u64, mpsc::Sender<Job>)>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `job` on an idle worker, or on a new one. `Err` only when no
    /// thread could be started (the job is then dropped).
    fn run(pool: &Arc<Pool>, mut job: Job) -> std::io::Result<()> {
        loop {
            let Some((_, tx)) = pool.idle().pop() else {
                break;
            };
            // A worker taken off the list always receives (see `work`); the
            // error case is a worker that died (a panicking attempt).
            match tx.send(job) {
                Ok(()) => return Ok(()),
                Err(mpsc::SendError(back)) => job = back,
            }
        }
        let pool = Arc::clone(pool);
        std::thread::Builder::new()
            .name("polite-ureq".into())
            .spawn(move || pool.work(job))
            .map(drop)
    }

    /// A worker's life: run a job, go idle, take the next or leave.
    fn work(&self, first: Job) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel::<Job>();
        let mut job = first;
        loop {
            let waker = job();
            // Listed as idle *before* the caller is woken: a caller that
            // sends its next attempt at once (a batch, a retry without
            // delay) hands it to this thread instead of spawning another
            // (waking first cost a thread spawn per attempt: 4.2× the wall
            // time of plain ureq threads in the scale-batch suite).
            self.idle().push((id, tx.clone()));
            if let Some(w) = waker {
                w.wake();
            }
            job = match rx.recv_timeout(UreqTransport::WORKER_IDLE) {
                Ok(next) => next,
                Err(_) => {
                    let mut idle = self.idle();
                    if let Some(at) = idle.iter().position(|(w, _)| *w == id) {
                        // Still listed: nobody will send; leave. The
                        // handles on bodies kept as long as this worker
                        // idled go too (the last worker to leave finds
                        // them all that old), so an unused transport
                        // pins no body memory.
                        idle.swap_remove(at);
                        drop(idle);
                        self.recycler
                            .expire(Instant::now(), UreqTransport::WORKER_IDLE);
                        return;
                    }
                    drop(idle);
                    // Taken off the list just now: its job is on the way
                    // (the sender sends right after taking; this worker
                    // holds a sender, so `recv` cannot fail).
                    match rx.recv() {
                        Ok(next) => next,
                        Err(_) => return,
                    }
                }
            };
        }
    }
}

/// Methods that carry no body unless one is given (the others send
/// `Content-Length: 0` for an empty body).
fn bodiless(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET
            | http::Method::HEAD
            | http::Method::OPTIONS
            | http::Method::TRACE
            | http::Method::CONNECT
    )
}

/// How an attempt is bounded in time.
#[derive(Clone, Copy, Debug)]
enum Bound {
    /// On a worker: every phase of the exchange gets the whole time left
    /// until `abort_at`, so each phase's timeout fires at or after it (not
    /// ureq's global timeout: with it ureq resolves a host name on a thread
    /// spawned per request); the caller is released at `abort_at` by the
    /// future itself.
    Phases(Instant),
    /// On the calling thread: ureq's end-to-end timeout ends the whole
    /// exchange, body included, at this instant (at most `abort_at`).
    Global(Instant),
}

/// One attempt: the whole exchange and the body read, bounded by `bound`.
fn attempt(
    agent: &ureq::Agent,
    recycler: &Recycler,
    request: http::Request<Bytes>,
    bound: Bound,
    max_body: usize,
) -> Outcome {
    let until = match bound {
        Bound::Phases(at) | Bound::Global(at) => at,
    };
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(TransportErrorKind::Aborted.into());
    }
    // `http://h:99999/`: ureq and the resolver would read "no port" and
    // send it to the scheme's default port.
    if polite_client::names_no_port(request.uri()) {
        return Err(TransportErrorKind::InvalidRequest.into());
    }
    // ureq writes the version as given (`HTTP/2.0` too) once its check of
    // methods against versions is off (see `timeouts`): only HTTP/1.x is
    // sent. Never sent, so never retried.
    let version = request.version();
    if version != http::Version::HTTP_11 && version != http::Version::HTTP_10 {
        return Err(TransportError::new(TransportErrorKind::InvalidRequest)
            .with_source(ureq_proto::Error::UnsupportedVersion));
    }
    // What the resolver answers for this attempt from the cache, if it
    // does (see `DnsCache`).
    crate::resolver::answered(None);
    let (parts, body) = request.into_parts();
    let head = parts.method == http::Method::HEAD;
    let sent = if body.is_empty() && bodiless(&parts.method) {
        let request = agent.configure_request(http::Request::from_parts(parts, ()));
        agent.run(timeouts(request, bound, left).build())
    } else {
        let request = agent.configure_request(http::Request::from_parts(parts, &body[..]));
        agent.run(timeouts(request, bound, left).build())
    };
    // A timeout that fires at or after `until` is the attempt's end-to-end
    // abort (on a worker each phase has the whole time left).
    let timed_out = |e: ureq::Error| match e {
        ureq::Error::Timeout(_) if Instant::now() >= until => {
            TransportError::new(TransportErrorKind::Aborted).with_source(e)
        }
        e => error(e),
    };
    let mut response = match sent {
        Ok(response) => response,
        Err(e) => {
            // A host name whose attempt fails before an answer is looked
            // up again by the next attempt.
            crate::resolver::forget_answered();
            return Err(timed_out(e));
        }
    };
    let limit = u64::try_from(max_body).unwrap_or(u64::MAX);
    let declared = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(TransportError::body_too_large(limit));
    }
    let room = body_capacity(declared, head, response.status());
    let reader = response.body_mut().with_config().limit(limit).reader();
    let bytes = read_body(reader, room, recycler).map_err(|e| match ureq::Error::from(e) {
        ureq::Error::BodyExceedsLimit(_) => TransportError::body_too_large(limit),
        e => timed_out(e),
    })?;
    let (parts, _) = response.into_parts();
    Ok(http::Response::from_parts(parts, bytes))
}

/// Reads a whole body. A body of declared length (`room` bytes, see
/// [`body_capacity`]) is read into one buffer of that size, taken from a
/// body its caller has dropped when one fits ([`Recycler`]: its stale
/// bytes are read over, never zeroed again) or made fresh and zeroed only
/// a step ahead of the reads; it is never regrown or copied, and a body
/// shorter than declared is copied out so that it pins no more than its
/// length. A body of unknown length (chunked, or decompressed: ureq then
/// drops the header) grows as it is read.
fn read_body(mut reader: impl Read, room: usize, recycler: &Recycler) -> std::io::Result<Bytes> {
    /// How far ahead of the reads a fresh buffer is zeroed.
    const STEP: usize = 64 << 10;
    if room == 0 {
        let mut bytes = Vec::new();
        reader.read_to_end(&mut bytes)?;
        return Ok(Bytes::from(bytes));
    }
    let now = Instant::now();
    let mut body = recycler.buffer(room, now, UreqTransport::WORKER_IDLE);
    let mut len = 0;
    loop {
        if len == body.len() && len < room {
            body.resize(room.min(len + STEP), 0);
        }
        let read = if len < body.len() {
            reader.read(&mut body[len..])
        } else {
            // Full: only the end of the body (or more than declared,
            // which ureq's framing does not let through) is left.
            let mut probe = [0u8; 64];
            let read = reader.read(&mut probe);
            if let Ok(n) = read {
                body.truncate(len);
                body.extend_from_slice(&probe[..n]);
            }
            read
        };
        match read {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if len < room {
        return Ok(Bytes::copy_from_slice(&body[..len]));
    }
    body.truncate(len);
    let body = body.freeze();
    recycler.keep(&body, now);
    Ok(body)
}

/// The room to read a body into at once: its declared `Content-Length`
/// (already checked against the limit), when the answer has a body at all
/// (not to a `HEAD`, not a 1xx, 204 or 304). Read into a `Vec` of exactly
/// that size, a body is neither copied by regrowing nor re-allocated when
/// it becomes `Bytes`; without a length (chunked, or decompressed: ureq
/// then drops the header) the `Vec` grows as it reads.
fn body_capacity(declared: Option<u64>, head: bool, status: http::StatusCode) -> usize {
    let bodiless = head
        || status.is_informational()
        || status == http::StatusCode::NO_CONTENT
        || status == http::StatusCode::NOT_MODIFIED;
    match declared {
        Some(n) if !bodiless => usize::try_from(n).unwrap_or(0),
        _ => 0,
    }
}

/// One attempt's configuration: every status an answer, no redirect
/// followed by ureq, any method sent, and the timeouts of `bound`
/// (`left`: the time until its end).
///
/// Any method: ureq sends by default only the methods it knows for the
/// request's HTTP version (GET, HEAD, POST; for HTTP/1.1 also PUT, DELETE,
/// CONNECT, OPTIONS, TRACE, PATCH) and refuses any other, `PURGE`,
/// `PROPFIND` or `get` (methods are case-sensitive), before sending
/// (`Protocol(MethodVersionMismatch)`). With
/// `allow_non_standard_methods(true)` it sends them as given; it then
/// skips its version check too, which [`attempt`] does instead.
fn timeouts<S: ureq::AsSendBody>(
    request: ConfigBuilder<HttpCrateScope<S>>,
    bound: Bound,
    left: Duration,
) -> ConfigBuilder<HttpCrateScope<S>> {
    let request = request
        .http_status_as_error(false)
        .max_redirects(0)
        .allow_non_standard_methods(true);
    match bound {
        Bound::Phases(_) => request
            .timeout_global(None)
            .timeout_connect(Some(left))
            .timeout_send_request(Some(left))
            .timeout_send_body(Some(left))
            .timeout_recv_response(Some(left))
            .timeout_recv_body(Some(left)),
        // The default agent sets no phase timeout.
        Bound::Global(_) => request.timeout_global(Some(left)),
    }
}

/// A ureq error as a [`TransportError`]: its kind, and itself as the
/// source (except a bad URI, whose text is the URL: it may hold
/// credentials); an answer head over ureq's limit says the limit.
fn error(e: ureq::Error) -> TransportError {
    let k = kind(&e);
    match e {
        ureq::Error::BadUri(_) => TransportError::new(k),
        ureq::Error::LargeResponseHeader(_, limit) => {
            TransportError::head_too_large(u64::try_from(limit).unwrap_or(u64::MAX)).with_source(e)
        }
        e => TransportError::new(k).with_source(e),
    }
}

/// A ureq-proto error: one only a request can cause (it was not sent as
/// it is) is `InvalidRequest`; an answer with more headers than ureq
/// parses (128) is `HeadTooLarge`; an answer that does not parse (its
/// status line or headers, or a chunk of its body) is `InvalidAnswer`;
/// any other is `Other` (`Content-Length` errors are raised for answers
/// and requests alike, so they stay `Other`).
fn protocol_kind(e: &ureq_proto::Error) -> TransportErrorKind {
    use ureq_proto::Error as P;
    match e {
        P::BadHeader(_)
        | P::UnsupportedVersion
        | P::MethodVersionMismatch(..)
        | P::TooManyHostHeaders
        | P::BadHostHeader
        | P::BadAuthorizationHeader
        | P::BodyLargerThanContentLength
        | P::BodyNotAllowed => TransportErrorKind::InvalidRequest,
        P::HttpParseTooManyHeaders => TransportErrorKind::HeadTooLarge,
        P::HttpParseFail(_)
        | P::ChunkLenNotAscii
        | P::ChunkLenNotANumber
        | P::ChunkExpectedCrLf => TransportErrorKind::InvalidAnswer,
        _ => TransportErrorKind::Other,
    }
}

/// Maps a ureq error to the kind the machines decide by.
fn kind(e: &ureq::Error) -> TransportErrorKind {
    match e {
        ureq::Error::Timeout(ureq::Timeout::Global) => TransportErrorKind::Aborted,
        ureq::Error::Timeout(_) => TransportErrorKind::Timeout,
        ureq::Error::HostNotFound => TransportErrorKind::Dns,
        // ureq's rustls handshake reports rustls's error inside an I/O
        // error (`InvalidData`), not as `Error::Rustls`.
        ureq::Error::Io(io) => match io.get_ref() {
            Some(inner) if inner.is::<crate::resolver::LookupFailed>() => TransportErrorKind::Dns,
            Some(inner) => inner.downcast_ref().map_or_else(|| io_kind(io), tls_kind),
            None => io_kind(io),
        },
        ureq::Error::Rustls(tls) => tls_kind(tls),
        ureq::Error::Tls(_) | ureq::Error::TlsRequired => TransportErrorKind::Tls,
        ureq::Error::BadUri(_) | ureq::Error::Http(_) | ureq::Error::InvalidProxyUrl => {
            TransportErrorKind::InvalidRequest
        }
        ureq::Error::TooManyRedirects => TransportErrorKind::TooManyRedirects,
        ureq::Error::RedirectFailed => TransportErrorKind::RedirectNotReplayable,
        ureq::Error::BodyExceedsLimit(_) => TransportErrorKind::BodyTooLarge,
        ureq::Error::LargeResponseHeader(..) => TransportErrorKind::HeadTooLarge,
        ureq::Error::Protocol(p) => protocol_kind(p),
        _ => TransportErrorKind::Other,
    }
}

/// A rustls error: a certificate refused is permanent, any other TLS
/// failure is `Tls`.
fn tls_kind(e: &rustls::Error) -> TransportErrorKind {
    match e {
        rustls::Error::InvalidCertificate(_)
        | rustls::Error::NoCertificatesPresented
        | rustls::Error::InvalidCertRevocationList(_) => TransportErrorKind::Certificate,
        _ => TransportErrorKind::Tls,
    }
}

/// The kind an I/O error is retried as: the mapping every adapter shares,
/// plus `WouldBlock`, which ureq reports for a socket read timeout.
fn io_kind(e: &std::io::Error) -> TransportErrorKind {
    match e.kind() {
        std::io::ErrorKind::WouldBlock => TransportErrorKind::Timeout,
        _ => polite_client::io_error_kind(e).unwrap_or(TransportErrorKind::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_head_over_ureqs_limit_is_head_too_large_with_the_limit() {
        let e = error(ureq::Error::LargeResponseHeader(70_121, 65_536));
        assert_eq!(e.kind(), TransportErrorKind::HeadTooLarge);
        assert!(e.kind().is_permanent());
        assert_eq!(e.limit(), Some(65_536));
        assert!(e.to_string().contains("64 KiB limit"), "{e}");
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(
            source.as_deref(),
            Some("response header is too big: 70121 > 65536")
        );
    }

    #[test]
    fn protocol_errors_about_the_request_are_invalid_too_many_headers_too_large() {
        use ureq_proto::Error as P;
        let purge = http::Method::from_bytes(b"PURGE").unwrap();
        for (p, want) in [
            (
                P::MethodVersionMismatch(purge, http::Version::HTTP_11),
                TransportErrorKind::InvalidRequest,
            ),
            (P::UnsupportedVersion, TransportErrorKind::InvalidRequest),
            (P::TooManyHostHeaders, TransportErrorKind::InvalidRequest),
            (P::BadContentLengthHeader, TransportErrorKind::Other),
            (P::HttpParseTooManyHeaders, TransportErrorKind::HeadTooLarge),
            (
                P::HttpParseFail("invalid HTTP version".into()),
                TransportErrorKind::InvalidAnswer,
            ),
            (P::ChunkLenNotANumber, TransportErrorKind::InvalidAnswer),
        ] {
            let text = p.to_string();
            let e = error(ureq::Error::Protocol(p));
            assert_eq!(e.kind(), want, "{text}");
            assert!(std::error::Error::source(&e).is_some(), "{text}");
        }
    }

    #[test]
    fn workers_are_reused_one_after_another_and_added_when_busy() {
        let pool = Arc::new(Pool::default());
        let run = |pool: &Arc<Pool>| {
            let (tx, rx) = mpsc::channel();
            Pool::run(
                pool,
                Box::new(move || {
                    tx.send(std::thread::current().id()).unwrap();
                    None
                }),
            )
            .unwrap();
            rx.recv_timeout(Duration::from_secs(5)).unwrap()
        };
        let first = run(&pool);
        // Let the worker list itself as idle.
        let listed = Instant::now();
        while pool.idle().is_empty() && listed.elapsed() < Duration::from_secs(5) {
            std::thread::yield_now();
        }
        assert_eq!(
            run(&pool),
            first,
            "a sequential attempt reuses the idle worker"
        );

        // Two jobs at once: the second gets a worker of its own.
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let (id_tx, id_rx) = mpsc::channel();
        let id_tx2 = id_tx.clone();
        Pool::run(
            &pool,
            Box::new(move || {
                id_tx.send(std::thread::current().id()).unwrap();
                let _ = gate_rx.recv_timeout(Duration::from_secs(5));
                None
            }),
        )
        .unwrap();
        Pool::run(
            &pool,
            Box::new(move || {
                id_tx2.send(std::thread::current().id()).unwrap();
                None
            }),
        )
        .unwrap();
        let a = id_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let b = id_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_ne!(a, b);
        drop(gate_tx);
    }

    /// The caller is woken only once the worker is listed idle again, so a
    /// caller that sends its next attempt at once reuses the worker instead
    /// of spawning a thread per attempt.
    #[test]
    fn the_caller_is_woken_after_the_worker_is_idle_again() {
        struct Report(Arc<Pool>, Mutex<mpsc::Sender<usize>>);
        impl std::task::Wake for Report {
            fn wake(self: Arc<Self>) {
                let idle = self.0.idle().len();
                let _ = lock_sender(&self.1).send(idle);
            }
        }
        fn lock_sender<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
            m.lock().unwrap_or_else(PoisonError::into_inner)
        }
        let pool = Arc::new(Pool::default());
        let (tx, rx) = mpsc::channel();
        let mut threads = std::collections::HashSet::new();
        for _ in 0..20 {
            let waker = Waker::from(Arc::new(Report(Arc::clone(&pool), Mutex::new(tx.clone()))));
            let (id_tx, id_rx) = mpsc::channel();
            Pool::run(
                &pool,
                Box::new(move || {
                    id_tx.send(std::thread::current().id()).unwrap();
                    Some(waker)
                }),
            )
            .unwrap();
            threads.insert(id_rx.recv_timeout(Duration::from_secs(5)).unwrap());
            // At the wake, the worker is already back on the idle list.
            assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 1);
        }
        assert_eq!(threads.len(), 1, "20 sequential jobs, one worker thread");
    }

    /// Hands out at most `chunk` bytes per read, as a socket does.
    struct Chunks<'a>(&'a [u8], usize);
    impl Read for Chunks<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(self.1).min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_body_is_read_into_one_buffer_reused_once_its_caller_dropped_it() {
        let recycler = Recycler::default();
        let a: Vec<u8> = (0..10_240u32).map(|i| i as u8).collect();
        let b: Vec<u8> = (0..10_240u32).map(|i| (i / 7) as u8).collect();
        // Declared: read in socket-sized reads into one buffer.
        let first = read_body(Chunks(&a, 1000), a.len(), &recycler).unwrap();
        assert_eq!(first, a);
        let at = first.as_ptr();
        // Still held: the next body gets a buffer of its own.
        let second = read_body(Chunks(&b, 1000), b.len(), &recycler).unwrap();
        assert_eq!(second, b);
        assert_ne!(second.as_ptr(), at);
        // Dropped: its allocation takes the next body, over its stale bytes.
        drop(first);
        let third = read_body(Chunks(&b, 1000), b.len(), &recycler).unwrap();
        assert_eq!(third, b);
        assert_eq!(third.as_ptr(), at, "the dropped body's allocation");
        // Shorter than declared: exactly what came, in a copy of its own.
        drop(second);
        let short = read_body(Chunks(&a[..100], 1000), a.len(), &recycler).unwrap();
        assert_eq!(short, &a[..100]);
        // Not declared (chunked, decompressed): grown as it is read.
        let grown = read_body(Chunks(&a, 1000), 0, &recycler).unwrap();
        assert_eq!(grown, a);
        // A body longer than declared is not cut (ureq's framing does not
        // let one through; kept correct anyway).
        let long = read_body(Chunks(&a, 1000), 5000, &recycler).unwrap();
        assert_eq!(long, a);
    }

    #[test]
    fn the_room_for_a_body_is_its_declared_length_when_it_has_one() {
        use http::StatusCode as S;
        assert_eq!(body_capacity(Some(10_240), false, S::OK), 10_240);
        assert_eq!(body_capacity(Some(7), false, S::NOT_FOUND), 7);
        assert_eq!(body_capacity(None, false, S::OK), 0);
        // No body follows, whatever the header says.
        assert_eq!(body_capacity(Some(10_240), true, S::OK), 0);
        assert_eq!(body_capacity(Some(10_240), false, S::NO_CONTENT), 0);
        assert_eq!(body_capacity(Some(10_240), false, S::NOT_MODIFIED), 0);
        assert_eq!(body_capacity(Some(10_240), false, S::CONTINUE), 0);
    }

    #[test]
    fn io_errors_map_to_kinds() {
        use std::io::{Error, ErrorKind as K};
        for (k, want) in [
            (K::ConnectionRefused, TransportErrorKind::Refused),
            (K::ConnectionReset, TransportErrorKind::Reset),
            (K::UnexpectedEof, TransportErrorKind::Reset),
            (K::TimedOut, TransportErrorKind::Timeout),
            (K::PermissionDenied, TransportErrorKind::Other),
        ] {
            assert_eq!(kind(&ureq::Error::Io(Error::from(k))), want, "{k:?}");
        }
        assert_eq!(kind(&ureq::Error::HostNotFound), TransportErrorKind::Dns);
        assert_eq!(
            kind(&ureq::Error::Timeout(ureq::Timeout::Global)),
            TransportErrorKind::Aborted
        );
        assert_eq!(
            kind(&ureq::Error::Timeout(ureq::Timeout::Connect)),
            TransportErrorKind::Timeout
        );
        assert_eq!(
            kind(&ureq::Error::BodyExceedsLimit(1)),
            TransportErrorKind::BodyTooLarge
        );
        assert_eq!(
            kind(&ureq::Error::TooManyRedirects),
            TransportErrorKind::TooManyRedirects
        );
        assert_eq!(
            kind(&ureq::Error::BadUri("x".into())),
            TransportErrorKind::InvalidRequest
        );
        assert_eq!(
            kind(&ureq::Error::Rustls(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))),
            TransportErrorKind::Certificate
        );
        assert_eq!(
            kind(&ureq::Error::Rustls(rustls::Error::HandshakeNotComplete)),
            TransportErrorKind::Tls
        );
        // As ureq's handshake reports them: rustls's error inside an I/O one.
        let in_io = |e: rustls::Error| {
            kind(&ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                e,
            )))
        };
        assert_eq!(
            in_io(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            )),
            TransportErrorKind::Certificate
        );
        assert_eq!(
            in_io(rustls::Error::NoCertificatesPresented),
            TransportErrorKind::Certificate
        );
        assert_eq!(
            in_io(rustls::Error::HandshakeNotComplete),
            TransportErrorKind::Tls
        );
        // A failed lookup of a host name (the default agent's resolver
        // wraps the system's error): a DNS failure.
        let lookup = std::io::Error::other("failed to lookup address information");
        let failed = crate::resolver::LookupFailed(lookup);
        let wrapped = std::io::Error::other(failed);
        assert_eq!(kind(&ureq::Error::Io(wrapped)), TransportErrorKind::Dns);
        // Any other error inside an I/O one: by its I/O kind.
        let other = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "x");
        assert_eq!(kind(&ureq::Error::Io(other)), TransportErrorKind::Reset);
    }
}

/// Host names through the default agent: looked up once, then their
/// attempts need no thread of their own.
#[cfg(all(test, unix))]
mod dns_tests {
    use super::*;
    use crate::{Client, Config};

    fn get(url: &str) -> http::Request<Bytes> {
        http::Request::get(url).body(Bytes::new()).unwrap()
    }

    #[test]
    fn a_host_name_looked_up_once_then_sends_run_on_the_calling_thread() {
        let lab = polite_lab::Lab::start(polite_lab::LabConfig::default()).unwrap();
        let port = lab.addr().port();
        let url = format!("http://localhost:{port}/items/1");
        let client = Client::with_transport(UreqTransport::default(), Config::default()).unwrap();
        // Not looked up yet: the first attempt goes to a worker (the
        // lookup runs under the attempt's timeout, on a thread of ureq's).
        assert!(!DNS.fresh("localhost", port, Instant::now()));
        assert_eq!(client.send(get(&url)).unwrap().status(), 200);
        assert_eq!(client.transport().worker_attempts(), 1);
        assert!(DNS.fresh("localhost", port, Instant::now()));
        // Looked up: the next ones run on this thread.
        for _ in 0..3 {
            assert_eq!(client.send(get(&url)).unwrap().status(), 200);
        }
        assert_eq!(client.transport().worker_attempts(), 1);
        assert_eq!(lab.log().len(), 4);
        assert_eq!(lab.connections(), 1, "one connection kept alive");
    }

    #[test]
    fn an_attempt_that_fails_before_an_answer_forgets_the_host_s_addresses() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let t = UreqTransport::default();
        let url = format!("http://localhost:{port}/");
        let err = crate::block_on(t.send(get(&url), Instant::now() + Duration::from_secs(5)))
            .unwrap_err();
        assert_eq!(err.kind(), TransportErrorKind::Refused, "{err:?}");
        // It was looked up (the refusal came from an address), and the
        // failure dropped the answer: the retry looks the name up again.
        assert!(!DNS.fresh("localhost", port, Instant::now()));
    }
}

/// HTTPS over the default agent's connector chain, where TLS runs over a
/// connection whose waits are polls ([`connector`]).
#[cfg(all(test, unix))]
mod https_tests {
    use super::*;
    use crate::{Client, Config, block_on};

    fn get(url: &str) -> http::Request<Bytes> {
        http::Request::get(url).body(Bytes::new()).unwrap()
    }

    #[test]
    fn https_runs_over_the_default_agent_s_connections() {
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        let config =
            polite_lab::LabConfig::default().tls(cert.cert.pem(), cert.signing_key.serialize_pem());
        let lab = polite_lab::Lab::start(config).unwrap();
        let url = lab.url("/items/a");
        // The default agent trusts web PKI roots only: the handshake, run
        // over the poll connection, rejects the self-signed certificate,
        // which is permanent: one attempt (ureq reports it inside an I/O
        // error; it was once taken for `Other`, and retried).
        let t = UreqTransport::default();
        let err =
            block_on(t.send(get(&url), Instant::now() + Duration::from_secs(10))).unwrap_err();
        assert_eq!(err.kind(), TransportErrorKind::Certificate, "{err:?}");
        let config = Config {
            timeout: Duration::from_secs(10),
            ..Config::default()
        };
        let err = Client::with_config(config.clone())
            .unwrap()
            .send(get(&url))
            .unwrap_err();
        assert_eq!(
            err.outcome(),
            Some(crate::Outcome::Permanent {
                cause: TransportErrorKind::Certificate
            }),
            "{err:?}"
        );
        assert_eq!(
            lab.connections(),
            2,
            "one handshake per call, never retried"
        );
        // The same connectors over an agent that trusts it: answered, on the
        // calling thread (a sequential call, an IP address), over one
        // connection kept alive.
        let root = ureq::tls::Certificate::from_der(cert.cert.der()).to_owned();
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::Specific(Arc::new(vec![root])))
            .build();
        let agent_config = ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .build();
        let agent = ureq::Agent::with_parts(agent_config, connector(), LiteralResolver::new());
        let transport = UreqTransport {
            inline: true,
            ..UreqTransport::new(agent)
        };
        let client = Client::with_transport(transport, config).unwrap();
        for _ in 0..3 {
            assert_eq!(client.send(get(&url)).unwrap().status(), 200);
        }
        assert_eq!(client.transport().worker_attempts(), 0);
        assert_eq!(lab.log().len(), 3);
        assert_eq!(lab.connections(), 3, "then one kept-alive connection");
    }
}
