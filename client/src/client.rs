//! [`Client`]: `send` (and, with the pacing and poll machines, `wait` and
//! `batch`) written once over the drive loop, for every adapter.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use polite_core::AttemptRecord;
use polite_core::drive::{self, Classify, NoJobs, Observe};
use polite_core::ratelimit::RateLimitHeaders;
use polite_core::{
    BatchMachine, BatchPolicy, Method, Notice, Outcome, Paced, PollMachine, PollPolicy,
    RateThrottle, RequestId, RequestInfo, RetryMachine, RetryPolicy, SplitMix64,
};
use std::sync::{Arc, Mutex};

use crate::pace::ClientPace;

use crate::answer::HttpAnswer;

use crate::error::Error;
use crate::io::HttpIo;
use crate::redirect::RedirectPolicy;
use crate::trace::trace_record;
use crate::transport::{Cancel, Clock, Transport};

/// What a [`Client`] applies to every call.
///
/// ```
/// use polite_client::Config;
/// use std::time::Duration;
/// let c = Config { timeout: Duration::from_secs(10), ..Config::default() };
/// assert_eq!(c.poll.wait_param, "waitSeconds");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The retry rules for every attempt.
    pub retry: RetryPolicy,
    /// The budget of each call: its deadline is fixed when the call starts.
    /// Default 30 s.
    pub timeout: Duration,
    /// Whether and how far redirects are followed, inside each attempt
    /// (default: up to 10, a cross-origin hop drops every header the caller
    /// set); see [`RedirectPolicy`].
    pub redirects: RedirectPolicy,
    /// How `wait` polls a job (long poll first, then backoff; terminal
    /// states; the long-poll query parameter, default `waitSeconds`). Its
    /// `retry` field is ignored: `retry` above applies to every call.
    pub poll: PollPolicy,
    /// A fixed seed for jitter (reproducible runs); default: process entropy.
    pub seed: Option<u64>,
    /// A client-side sliding-window throttle shared by every call of the
    /// client: at most `limit` sends per `window`. Default: none (only the
    /// server's cool-downs pace the calls).
    pub throttle: Option<(u32, Duration)>,
    /// How many requests of one `batch` are in flight at once. Default 4.
    pub concurrency: u32,
    /// How often a batch restarts an item that ended `RateLimited` (inside
    /// the same deadline, after the server's time). Default 2.
    pub max_restarts: u32,
    /// Which rate-limit headers inform the pace (default: the IETF
    /// `RateLimit` / `RateLimit-Policy` fields; `X-RateLimit-*` opt-in).
    pub rate_limit_headers: RateLimitHeaders,
    /// With no `throttle` configured: learn one from the server's
    /// `RateLimit-Policy`, up to this many sends per window (the throttle's
    /// log is allocated once at this size). `None`: never learn. Default
    /// `Some(1000)`.
    pub learn_quota: Option<u32>,
    /// Adapt the send rate to rate-limited answers when the server gives
    /// no quota (SPEC §4.1; the AWS SDKs' adaptive mode, see
    /// [`polite_core::adaptive`]): a 429 without hints cuts the rate every
    /// call of the client may use, successes grow it back. A configured
    /// `throttle` stays the ceiling; a quota learnt from `RateLimit-Policy`
    /// replaces the guess; a server that never answers 429 never sees the
    /// client slow down. Default `true`.
    pub adaptive: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(30),
            redirects: RedirectPolicy::default(),
            poll: PollPolicy::default(),
            seed: None,
            throttle: None,
            concurrency: 4,
            max_restarts: 2,
            rate_limit_headers: RateLimitHeaders::default(),
            learn_quota: Some(1000),
            adaptive: true,
        }
    }
}

/// The client logic, runtime-neutral: adapters wrap it with their transport,
/// clock and cancel signal.
///
/// Every attempt of every call (first sends and retries, of `send`, `wait`
/// and `batch`) passes one shared [`ClientPace`]: the optional throttle, and
/// the cool-down that a 429 with `Retry-After` seen by any call imposes on
/// all. The pace is in-process: separate processes do not coordinate.
pub struct Client<T> {
    transport: T,
    config: Config,
    observer: Option<RecordObserver>,
    pace: Arc<Mutex<ClientPace>>,
    ids: AtomicU64,
    entropy: u64,
}

/// What polite knows about a request from its method and headers: a request
/// with an `Idempotency-Key` header may be re-sent whatever its method; the
/// body is `Bytes`, which can always be produced again.
///
/// ```
/// let post = http::Request::post("http://127.0.0.1/x").body(bytes::Bytes::new()).unwrap();
/// assert!(!polite_client::request_info(1, &post).is_replayable());
/// let keyed = http::Request::post("http://127.0.0.1/x").header("Idempotency-Key", "k1")
///     .body(bytes::Bytes::new()).unwrap();
/// assert!(polite_client::request_info(2, &keyed).is_replayable());
/// ```
#[must_use]
pub fn request_info(id: u64, request: &http::Request<Bytes>) -> RequestInfo {
    let info = RequestInfo::new(
        RequestId(id),
        Method::parse(request.method().as_str().as_bytes()),
    );
    if request.headers().contains_key("idempotency-key") {
        info.with_idempotency_key()
    } else {
        info
    }
}

impl<T: Transport> Client<T>
where
    T::Sending: Unpin,
{
    /// A client over `transport`.
    ///
    /// # Errors
    ///
    /// [`Error::Policy`] for a policy that makes no sense,
    /// [`Error::Config`] for a bad long-poll parameter name.
    pub fn new(transport: T, config: Config) -> Result<Client<T>, Error> {
        config.retry.validate()?;
        config.poll_policy().validate()?;
        if !crate::io::valid_param_name(config.poll.wait_param) {
            return Err(Error::Config(
                "wait_param must be 1 to 64 ASCII letters, digits, '_', '-' or '.'",
            ));
        }
        config.batch_policy().validate()?;
        let throttle = match (config.throttle, config.learn_quota) {
            (Some((limit, window)), _) => Some(RateThrottle::new(limit, window)?),
            (None, Some(max)) => Some(RateThrottle::learning(max)?),
            (None, None) => None,
        };
        let entropy = RandomState::new().build_hasher().finish();
        let mut pace = ClientPace::new(throttle);
        if config.adaptive {
            pace = pace.adaptive();
        }
        Ok(Client {
            transport,
            config,
            pace: Arc::new(Mutex::new(pace)),
            observer: None,
            ids: AtomicU64::new(1),
            entropy,
        })
    }

    /// Also hands every attempt record and notice of every call to
    /// `observer` (records always go to `tracing` too). For progress
    /// displays and logs of your own; records never hold credentials.
    ///
    /// ```
    /// use polite_client::{Client, Config, NeverCancel, Transport};
    /// # use bytes::Bytes; use std::future::{Ready, ready}; use std::time::Instant;
    /// # struct Hi;
    /// # impl Transport for Hi {
    /// #     type Sending = Ready<Result<http::Response<Bytes>, polite_client::TransportError>>;
    /// #     fn send(&self, _: http::Request<Bytes>, _: Instant) -> Self::Sending { ready(Ok(http::Response::new(Bytes::new()))) }
    /// # }
    /// let client = Client::new(Hi, Config::default()).unwrap()
    ///     .observe(|event: polite_client::Observed<'_>| eprintln!("{event:?}"));
    /// # drop(client);
    /// ```
    #[must_use]
    pub fn observe(mut self, observer: impl Fn(Observed<'_>) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    fn rng(&self, id: u64) -> SplitMix64 {
        let seed = self.config.seed.unwrap_or(self.entropy);
        SplitMix64::new(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// Runs one single-request machine to its end: paced through the
    /// client's shared pace, driven by the one drive loop over this call's
    /// `Io`, records and notices to `tracing` and the observer. Returns the
    /// outcome and the last answer.
    #[allow(clippy::too_many_arguments)]
    async fn drive_one<M, K, C, J, N>(
        &self,
        machine: M,
        request: &http::Request<Bytes>,
        now: std::time::Instant,
        clock: K,
        cancel: C,
        classify: &mut J,
        on_notice: N,
    ) -> Ended
    where
        M: polite_core::Machine,
        K: Clock,
        C: Cancel,
        J: Classify<HttpAnswer> + ?Sized,
        N: FnMut(Notice),
    {
        let mut machine = Paced::new(machine, Arc::clone(&self.pace), now)
            .retry_after_limits(self.config.retry.retry_after)
            .rate_limit_headers(self.config.rate_limit_headers);
        let mut io = HttpIo::new(
            &self.transport,
            clock,
            cancel,
            std::slice::from_ref(request),
            self.config.poll.wait_param,
        )
        .redirects(self.config.redirects);
        let mut observer = Tracing {
            on_notice,
            observer: self.observer.as_deref(),
        };
        let done = drive::drive(&mut machine, &mut io, classify, &mut observer).await;
        Ended {
            outcome: done.outcome,
            last: done.answers.into_iter().next().flatten().map(|a| a.0),
            error: io.take_error(0),
            attempts: io.sends(0),
            elapsed: drive::Io::now(&io).saturating_duration_since(now),
        }
    }

    /// One logical request with retries, inside the configured timeout.
    ///
    /// Returns the answer when it is a success (below 400); otherwise an
    /// [`Error::Outcome`] with the outcome and the last answer.
    ///
    /// # Errors
    ///
    /// [`Error::Outcome`] for every end but success.
    pub async fn send_with<K: Clock, C: Cancel>(
        &self,
        request: http::Request<Bytes>,
        clock: K,
        cancel: C,
    ) -> Result<http::Response<Bytes>, Error> {
        let id = self.next_id();
        let now = clock.now();
        let machine = RetryMachine::new(
            self.config.retry,
            request_info(id, &request),
            self.rng(id),
            now,
            self.config.timeout,
        )?;
        self.drive_one(machine, &request, now, clock, cancel, &mut NoJobs, |_| {})
            .await
            .finish()
    }

    /// Waits for a remote job: polls `request` (normally a `GET` of the job
    /// resource) with `PollMachine` — long polls first, a permanent fallback
    /// to backoff when the server rejects the wait parameter — until the job
    /// reaches a terminal state, inside the configured timeout. `classify`
    /// reads each answer ([`JsonJob`](crate::JsonJob) for JSON status
    /// bodies); `on_notice` hears the one-time fallback notice.
    ///
    /// # Errors
    ///
    /// [`Error::Outcome`] for every end but a terminal state (a job that
    /// ended `failed` is *not* an error here: the state is handed back).
    pub async fn wait_with<J, K, C, N>(
        &self,
        request: http::Request<Bytes>,
        classify: &mut J,
        clock: K,
        cancel: C,
        on_notice: N,
    ) -> Result<JobDone, Error>
    where
        J: Classify<HttpAnswer>,
        K: Clock,
        C: Cancel,
        N: FnMut(Notice),
    {
        let id = self.next_id();
        let now = clock.now();
        let machine = PollMachine::new(
            self.config.poll_policy(),
            request_info(id, &request),
            self.rng(id),
            now,
            self.config.timeout,
        )?;
        let ended = self
            .drive_one(machine, &request, now, clock, cancel, classify, on_notice)
            .await;
        match (ended.outcome, ended.last) {
            (Outcome::Terminal { state }, Some(response)) => Ok(JobDone {
                state: state.as_str().to_owned(),
                response,
            }),
            (outcome, last) => Err(Ended {
                outcome,
                last,
                ..ended
            }
            .into_error()),
        }
    }

    /// Many logical requests under one shared deadline (the configured
    /// timeout), at most `concurrency` in flight, every attempt through the
    /// client's shared pace; an item that ends `RateLimited` is restarted
    /// after the server's time while the deadline allows. Results come back
    /// in input order, one per request.
    ///
    /// # Errors
    ///
    /// The outer `Err` only for an invalid configuration; each item's own
    /// failure is an [`Error::Outcome`] in its slot.
    pub async fn batch_with<K: Clock, C: Cancel>(
        &self,
        requests: Vec<http::Request<Bytes>>,
        clock: K,
        cancel: C,
    ) -> Result<Vec<Result<http::Response<Bytes>, Error>>, Error> {
        let first = self.ids.fetch_add(requests.len() as u64, Ordering::Relaxed);
        let infos: Vec<RequestInfo> = requests
            .iter()
            .zip(first..)
            .map(|(r, id)| request_info(id, r))
            .collect();
        let now = clock.now();
        let mut machine = BatchMachine::new(
            self.config.batch_policy(),
            infos,
            self.rng(first),
            Arc::clone(&self.pace),
            now,
            self.config.timeout,
        )?
        .rate_limit_headers(self.config.rate_limit_headers);
        let mut io = HttpIo::new(
            &self.transport,
            clock,
            cancel,
            &requests,
            self.config.poll.wait_param,
        )
        .redirects(self.config.redirects);
        let done = drive::drive(
            &mut machine,
            &mut io,
            &mut NoJobs,
            &mut Tracing {
                on_notice: |_| {},
                observer: self.observer.as_deref(),
            },
        )
        .await;
        let elapsed = drive::Io::now(&io).saturating_duration_since(now);
        let mut answers = done.answers.into_iter();
        Ok(machine
            .outcomes()
            .iter()
            .enumerate()
            .map(|(item, o)| {
                Ended {
                    // An item without an outcome was cut short by the batch's end.
                    outcome: o.unwrap_or(done.outcome),
                    last: answers.next().flatten().map(|a| a.0),
                    error: io.take_error(item),
                    attempts: io.sends(item),
                    elapsed,
                }
                .finish()
            })
            .collect())
    }
}

impl Config {
    /// The batch policy `batch` runs.
    #[must_use]
    pub fn batch_policy(&self) -> BatchPolicy {
        BatchPolicy {
            retry: self.retry,
            concurrency: self.concurrency,
            max_restarts: self.max_restarts,
        }
    }

    /// The poll policy `wait` runs: `poll` with `retry` as its retry rules.
    #[must_use]
    pub fn poll_policy(&self) -> PollPolicy {
        PollPolicy {
            retry: self.retry,
            ..self.poll
        }
    }
}

/// A job that reached a terminal state.
#[derive(Debug)]
pub struct JobDone {
    /// The terminal state (`passed`, `failed`, `cancelled`, ...).
    pub state: String,
    /// The answer that reported it.
    pub response: http::Response<Bytes>,
}

impl<T: std::fmt::Debug> std::fmt::Debug for Client<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("transport", &self.transport)
            .field("config", &self.config)
            .field("pace", &self.pace)
            .field("observer", &self.observer.as_ref().map(|_| "Fn"))
            .finish_non_exhaustive()
    }
}

/// What a client's observer sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed<'a> {
    /// An attempt record.
    Record(&'a AttemptRecord),
    /// A one-time notice (e.g. the long-poll fallback).
    Notice(Notice),
}

/// A client-wide observer.
type RecordObserver = Arc<dyn Fn(Observed<'_>) + Send + Sync>;

/// Records to `tracing` and the client's observer, notices to `tracing`,
/// the observer and the caller.
struct Tracing<'o, N> {
    on_notice: N,
    observer: Option<&'o (dyn Fn(Observed<'_>) + Send + Sync)>,
}

impl<N: FnMut(Notice)> Observe for Tracing<'_, N> {
    fn record(&mut self, record: &AttemptRecord) {
        trace_record(record);
        if let Some(o) = self.observer {
            o(Observed::Record(record));
        }
    }
    fn notice(&mut self, notice: Notice) {
        tracing::warn!(target: "polite", %notice);
        if let Some(o) = self.observer {
            o(Observed::Notice(notice));
        }
        (self.on_notice)(notice);
    }
}

/// How one logical request ended: the outcome, its last answer, the
/// transport error of its last send when that got no answer, its sends and
/// the call's time.
struct Ended {
    outcome: Outcome,
    last: Option<http::Response<Bytes>>,
    error: Option<crate::error::TransportError>,
    attempts: u32,
    elapsed: Duration,
}

impl Ended {
    /// The call's result: the answer for a success, else the error.
    fn finish(self) -> Result<http::Response<Bytes>, Error> {
        match (self.outcome, self.last) {
            (Outcome::Succeeded { .. }, Some(response)) => Ok(response),
            (outcome, last) => Err(Ended {
                outcome,
                last,
                ..self
            }
            .into_error()),
        }
    }

    /// The error: `Error::Transport` when the outcome was decided by a
    /// transport error (permanent, or the last one of a spent budget or a
    /// request that may not be re-sent), else `Error::Outcome`.
    fn into_error(self) -> Error {
        let by_transport = match self.outcome {
            Outcome::Permanent { .. } => true,
            Outcome::RetriesExhausted { last, .. }
            | Outcome::RetryBudgetExhausted { last, .. }
            | Outcome::NotReplayable { last } => matches!(last, polite_core::Reply::Transport(_)),
            _ => false,
        };
        match self.error {
            Some(error) if by_transport => Error::Transport {
                outcome: self.outcome,
                error,
                attempts: self.attempts,
                elapsed: self.elapsed,
            },
            _ => Error::Outcome {
                outcome: self.outcome,
                response: self.last.map(Box::new),
            },
        }
    }
}
