//! Everything a lab can be told to do: [`LabConfig`] and the knobs it is built from.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::LabError;

/// The final state a job reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum JobState {
    /// `"passed"`.
    #[default]
    Passed,
    /// `"failed"`.
    Failed,
    /// `"cancelled"`.
    Cancelled,
}

impl JobState {
    /// The state's name as it appears in JSON bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Passed => "passed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = String;

    /// Parses `passed`, `failed` or `cancelled` (also `canceled`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "passed" => Ok(JobState::Passed),
            "failed" => Ok(JobState::Failed),
            "cancelled" | "canceled" => Ok(JobState::Cancelled),
            other => Err(format!(
                "unknown job state `{other}` (expected passed, failed or cancelled)"
            )),
        }
    }
}

/// When the clock of a job that was declared in the config
/// ([`LabConfig::job`]) starts.
///
/// Jobs created with `POST /runs` always start at their creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum JobClock {
    /// At the arrival of the first request whose path is `/runs/{id}`
    /// (whatever the lab then answers: a quota 429 or a scripted fault still
    /// starts the clock). The default: the time a test spends between
    /// `Lab::start` and its first request does not eat into the job.
    #[default]
    FirstRequest,
    /// At [`Lab::start`](crate::Lab::start).
    LabStart,
}

/// A job declared up front, so that a test can poll a known id without `POST /runs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSpec {
    /// The id, polled at `/runs/{id}`.
    pub id: String,
    /// How long after its clock starts ([`JobClock`]) the job turns terminal.
    pub finishes_after: Duration,
    /// The terminal state it then reports.
    pub final_state: JobState,
}

/// Which request paths a quota or a fault applies to. The query is never part of the path.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum PathMatch {
    /// Every path.
    #[default]
    Any,
    /// Exactly this path, e.g. `/items/a`.
    Exact(String),
    /// Every path that starts with this text, e.g. `/items/`.
    Prefix(String),
}

impl PathMatch {
    /// Exactly `path`.
    pub fn exact(path: impl Into<String>) -> Self {
        PathMatch::Exact(path.into())
    }

    /// Every path starting with `prefix`.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        PathMatch::Prefix(prefix.into())
    }

    /// Whether `path` (without query) is matched.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Any => true,
            PathMatch::Exact(p) => path == p,
            PathMatch::Prefix(p) => path.starts_with(p.as_str()),
        }
    }
}

impl fmt::Display for PathMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathMatch::Any => f.write_str("*"),
            PathMatch::Exact(p) => f.write_str(p),
            PathMatch::Prefix(p) => write!(f, "{p}*"),
        }
    }
}

/// How a quota counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WindowKind {
    /// Windows of fixed length laid end to end from the lab's start
    /// (`[0, W)`, `[W, 2W)`, ...); the count resets at each boundary.
    #[default]
    Fixed,
    /// A request is allowed when fewer than `limit` counted requests arrived
    /// in the `window` just before it.
    Sliding,
}

/// A server-side quota: `limit` requests per `window`.
///
/// One counter per quota, shared by every request its [`PathMatch`] matches
/// (so a `Prefix("/items/")` quota is one budget for all items).
///
/// ```
/// use std::time::Duration;
/// use polite_lab::{PathMatch, Quota};
/// let q = Quota::fixed(3, Duration::from_millis(500)).on(PathMatch::prefix("/items/"));
/// assert_eq!(q.limit, 3);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Requests allowed per window.
    pub limit: u32,
    /// The window's length (must not be zero).
    pub window: Duration,
    /// Fixed or sliding window.
    pub kind: WindowKind,
    /// Which paths share this quota.
    pub scope: PathMatch,
    /// The policy name used in `RateLimit` / `RateLimit-Policy` (default `"default"`).
    pub name: String,
}

impl Quota {
    /// A fixed-window quota on every path.
    pub fn fixed(limit: u32, window: Duration) -> Self {
        Quota {
            limit,
            window,
            kind: WindowKind::Fixed,
            scope: PathMatch::Any,
            name: "default".to_owned(),
        }
    }

    /// A sliding-window quota on every path.
    pub fn sliding(limit: u32, window: Duration) -> Self {
        Quota {
            kind: WindowKind::Sliding,
            ..Quota::fixed(limit, window)
        }
    }

    /// Restricts the quota to the paths `scope` matches.
    pub fn on(mut self, scope: PathMatch) -> Self {
        self.scope = scope;
        self
    }

    /// Names the policy (used in the IETF `RateLimit` headers).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
}

/// How the lab writes a `Retry-After` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RetryAfterStyle {
    /// Delta seconds, e.g. `Retry-After: 2`.
    #[default]
    DeltaSeconds,
    /// IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    ImfFixdate,
    /// The obsolete RFC 850 form, e.g. `Sunday, 06-Nov-94 08:49:37 GMT`.
    Rfc850,
    /// The obsolete asctime form, e.g. `Sun Nov  6 08:49:37 1994`.
    Asctime,
    /// Text that is no valid Retry-After: `soon`.
    Invalid,
    /// A hostile value: always `86400` (one day), whatever the true wait.
    Hostile,
    /// No Retry-After header at all.
    Omitted,
}

impl RetryAfterStyle {
    /// Every style, in declaration order.
    pub const ALL: [RetryAfterStyle; 7] = [
        RetryAfterStyle::DeltaSeconds,
        RetryAfterStyle::ImfFixdate,
        RetryAfterStyle::Rfc850,
        RetryAfterStyle::Asctime,
        RetryAfterStyle::Invalid,
        RetryAfterStyle::Hostile,
        RetryAfterStyle::Omitted,
    ];

    /// The name accepted by [`FromStr`] (and the binary's `--retry-after`).
    pub fn name(self) -> &'static str {
        match self {
            RetryAfterStyle::DeltaSeconds => "seconds",
            RetryAfterStyle::ImfFixdate => "imf-fixdate",
            RetryAfterStyle::Rfc850 => "rfc850",
            RetryAfterStyle::Asctime => "asctime",
            RetryAfterStyle::Invalid => "invalid",
            RetryAfterStyle::Hostile => "hostile",
            RetryAfterStyle::Omitted => "none",
        }
    }
}

impl fmt::Display for RetryAfterStyle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for RetryAfterStyle {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        RetryAfterStyle::ALL
            .into_iter()
            .find(|style| style.name() == s)
            .or(match s.as_str() {
                "delta" | "delta-seconds" => Some(RetryAfterStyle::DeltaSeconds),
                "imf" | "http-date" => Some(RetryAfterStyle::ImfFixdate),
                "rfc-850" => Some(RetryAfterStyle::Rfc850),
                "omitted" => Some(RetryAfterStyle::Omitted),
                _ => None,
            })
            .ok_or_else(|| {
                format!(
                    "unknown Retry-After style `{s}` (expected seconds, imf-fixdate, rfc850, asctime, invalid, hostile or none)"
                )
            })
    }
}

/// The Retry-After of one scripted [`Step`], overriding the lab's default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// This delay, written in the lab's [`RetryAfterStyle`] (dates count from
    /// the response's own, possibly skewed, `Date`).
    In(Duration),
    /// This exact header text (must be a valid header value).
    Raw(String),
    /// No Retry-After on this step.
    Omit,
}

/// One step of a scripted sequence ([`Fault::Script`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The normal answer of the endpoint.
    Normal,
    /// Answer with this status and a small JSON body
    /// `{"code":"SCRIPTED","status":N}`.
    ///
    /// `retry_after: None` means: a 429 or 503 carries the lab's default
    /// ([`LabConfig::scripted_retry_after`] in the lab's style), other statuses carry none.
    Status {
        /// The HTTP status (200..=599).
        status: u16,
        /// An explicit Retry-After for this step.
        retry_after: Option<RetryAfter>,
    },
    /// Close the connection with a TCP reset, without an answer.
    Reset,
    /// Never answer (until the lab is dropped).
    Hang,
}

impl Step {
    /// `status` with the default Retry-After rule.
    pub fn status(status: u16) -> Self {
        Step::Status {
            status,
            retry_after: None,
        }
    }

    /// `status` with a Retry-After of `after`, in the lab's style.
    pub fn with_retry_after(status: u16, after: Duration) -> Self {
        Step::Status {
            status,
            retry_after: Some(RetryAfter::In(after)),
        }
    }

    /// `status` without any Retry-After header.
    pub fn without_retry_after(status: u16) -> Self {
        Step::Status {
            status,
            retry_after: Some(RetryAfter::Omit),
        }
    }
}

impl FromStr for Step {
    type Err = String;

    /// Parses one step: `ok` (or `normal`), `reset`, `hang`, `STATUS`, or
    /// `STATUS:SECONDS` (a Retry-After in the lab's style), or `STATUS:-` (no Retry-After).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        match s.to_ascii_lowercase().as_str() {
            "ok" | "normal" => return Ok(Step::Normal),
            "reset" => return Ok(Step::Reset),
            "hang" => return Ok(Step::Hang),
            _ => {}
        }
        let (status, after) = match s.split_once(':') {
            Some((status, after)) => (status, Some(after.trim())),
            None => (s, None),
        };
        let status: u16 = status.trim().parse().map_err(|_| {
            format!("bad step `{s}`: expected ok, reset, hang, STATUS or STATUS:SECONDS")
        })?;
        if !(200..=599).contains(&status) {
            return Err(format!("bad step `{s}`: status must be 200..=599"));
        }
        let retry_after = match after {
            None => None,
            Some("-") => Some(RetryAfter::Omit),
            Some(secs) => Some(RetryAfter::In(Duration::from_secs(secs.parse().map_err(
                |_| format!("bad step `{s}`: Retry-After must be whole seconds"),
            )?))),
        };
        Ok(Step::Status {
            status,
            retry_after,
        })
    }
}

/// Parses a comma-separated script such as `503,429:1,ok` (see [`Step`]'s `FromStr`).
///
/// ```
/// use polite_lab::{parse_script, Step};
/// let steps = parse_script("503, 429:1, ok").unwrap();
/// assert_eq!(steps[0], Step::status(503));
/// assert_eq!(steps[2], Step::Normal);
/// assert!(parse_script("5o3").is_err());
/// ```
pub fn parse_script(text: &str) -> Result<Vec<Step>, String> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(Step::from_str)
        .collect()
}

/// A fault injected on the paths of a [`FaultRule`].
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// The nth request to a path gets the nth step, then the normal answer.
    /// Each distinct path the rule matches has its own counter.
    Script(Vec<Step>),
    /// Each request fails with `status` with this probability (drawn from
    /// the lab's seeded SplitMix64, in arrival order).
    FailRandomly {
        /// Probability in `[0, 1]`.
        probability: f64,
        /// The status sent (429 and 503 carry the default Retry-After).
        status: u16,
    },
    /// Every request: close the connection with a TCP reset, no answer.
    Reset,
    /// Every request: never answer until the lab is dropped.
    Hang,
    /// Every request: wait this long before the headers (a service time).
    Slow(Duration),
}

/// A [`Fault`] and the paths it applies to.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRule {
    /// The paths.
    pub on: PathMatch,
    /// The fault.
    pub fault: Fault,
}

/// The whole configuration of a lab. Build it from [`Default`] with the
/// builder methods; every knob is deterministic under [`LabConfig::seed`].
///
/// ```
/// use std::time::Duration;
/// use polite_lab::{Fault, JobState, LabConfig, PathMatch, Quota, RetryAfterStyle, Step};
/// let config = LabConfig::default()
///     .seed(7)
///     .quota(Quota::sliding(10, Duration::from_secs(1)))
///     .retry_after_style(RetryAfterStyle::ImfFixdate)
///     .ratelimit_headers(true)
///     .job("j1", Duration::from_secs(3), JobState::Failed)
///     .script("/items/a", vec![Step::status(503), Step::Normal])
///     .fault(PathMatch::Any, Fault::Slow(Duration::from_millis(15)))
///     .date_skew_secs(-30);
/// assert_eq!(config.jobs().len(), 1);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LabConfig {
    pub(crate) port: u16,
    pub(crate) seed: u64,
    pub(crate) long_poll: bool,
    pub(crate) max_wait: Duration,
    pub(crate) run_duration: Duration,
    pub(crate) run_final_state: JobState,
    pub(crate) jobs: Vec<JobSpec>,
    pub(crate) job_clock: JobClock,
    pub(crate) quotas: Vec<Quota>,
    pub(crate) retry_after_style: RetryAfterStyle,
    pub(crate) fixed_retry_after: Option<Duration>,
    pub(crate) scripted_retry_after: Duration,
    pub(crate) ratelimit_headers: bool,
    pub(crate) x_ratelimit_headers: bool,
    pub(crate) count_refused: bool,
    pub(crate) faults: Vec<FaultRule>,
    pub(crate) date_skew_secs: i64,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<crate::tls::Identity>,
}

impl Default for LabConfig {
    /// Port 0 (any free port), seed 0, long poll on (waits capped at 60 s),
    /// `POST /runs` jobs pass after 2 s, no declared jobs, job clock
    /// [`JobClock::FirstRequest`], no quota, Retry-After as delta seconds,
    /// scripted 429/503 ask for 1 s, no rate-limit headers, refused requests
    /// not counted, no faults, no date skew.
    fn default() -> Self {
        LabConfig {
            port: 0,
            seed: 0,
            long_poll: true,
            max_wait: Duration::from_secs(60),
            run_duration: Duration::from_secs(2),
            run_final_state: JobState::Passed,
            jobs: Vec::new(),
            job_clock: JobClock::FirstRequest,
            quotas: Vec::new(),
            retry_after_style: RetryAfterStyle::DeltaSeconds,
            fixed_retry_after: None,
            scripted_retry_after: Duration::from_secs(1),
            ratelimit_headers: false,
            x_ratelimit_headers: false,
            count_refused: false,
            faults: Vec::new(),
            date_skew_secs: 0,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

/// Dates must stay formattable (httpdate covers 1970..=9999): skew is bounded.
const MAX_SKEW_SECS: i64 = 10 * 366 * 24 * 3600;

impl LabConfig {
    /// The port to bind on 127.0.0.1 (0, the default, picks a free one).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// The seed of the lab's random source (used by [`Fault::FailRandomly`]).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Whether `GET /runs/{id}?waitSeconds=N` long polls (default `true`).
    /// When off, any `waitSeconds` gets `400 {"code":"VALIDATION_ERROR",...}`.
    pub fn long_poll(mut self, on: bool) -> Self {
        self.long_poll = on;
        self
    }

    /// The longest a long poll is held, whatever `waitSeconds` asks (default 60 s).
    pub fn max_wait(mut self, max: Duration) -> Self {
        self.max_wait = max;
        self
    }

    /// How long a job created by `POST /runs` runs (default 2 s).
    pub fn run_duration(mut self, duration: Duration) -> Self {
        self.run_duration = duration;
        self
    }

    /// The terminal state of jobs created by `POST /runs` (default `passed`).
    pub fn run_final_state(mut self, state: JobState) -> Self {
        self.run_final_state = state;
        self
    }

    /// Declares a job `id` that turns `final_state` after `finishes_after`
    /// (counted per [`JobClock`]). Declaring the same id twice keeps the last.
    pub fn job(
        mut self,
        id: impl Into<String>,
        finishes_after: Duration,
        final_state: JobState,
    ) -> Self {
        let id = id.into();
        self.jobs.retain(|j| j.id != id);
        self.jobs.push(JobSpec {
            id,
            finishes_after,
            final_state,
        });
        self
    }

    /// When declared jobs start their clock (default [`JobClock::FirstRequest`]).
    pub fn job_clock(mut self, clock: JobClock) -> Self {
        self.job_clock = clock;
        self
    }

    /// Adds a quota. A request must fit every quota that matches its path;
    /// quotas are checked before any fault.
    pub fn quota(mut self, quota: Quota) -> Self {
        self.quotas.push(quota);
        self
    }

    /// How 429s and scripted 429/503s write Retry-After (default delta seconds).
    pub fn retry_after_style(mut self, style: RetryAfterStyle) -> Self {
        self.retry_after_style = style;
        self
    }

    /// Makes quota 429s announce this fixed delay instead of the true time
    /// until the window frees.
    pub fn fixed_retry_after(mut self, after: Duration) -> Self {
        self.fixed_retry_after = Some(after);
        self
    }

    /// The Retry-After delay of scripted (and random) 429/503 answers that
    /// have no explicit one (default 1 s).
    pub fn scripted_retry_after(mut self, after: Duration) -> Self {
        self.scripted_retry_after = after;
        self
    }

    /// Adds the IETF draft `RateLimit-Policy` / `RateLimit` headers to every
    /// response on a quota'd path.
    pub fn ratelimit_headers(mut self, on: bool) -> Self {
        self.ratelimit_headers = on;
        self
    }

    /// Adds `X-RateLimit-Limit` / `-Remaining` / `-Reset` (seconds until the
    /// window frees) to every response on a quota'd path.
    pub fn x_ratelimit_headers(mut self, on: bool) -> Self {
        self.x_ratelimit_headers = on;
        self
    }

    /// Whether requests refused with 429 count against the quota (default `false`).
    pub fn count_refused(mut self, on: bool) -> Self {
        self.count_refused = on;
        self
    }

    /// Adds a fault. Rules apply in the order added: each [`Fault::Slow`]
    /// delays, the first rule that answers (a script step other than
    /// [`Step::Normal`], a random failure, reset, hang) decides.
    pub fn fault(mut self, on: PathMatch, fault: Fault) -> Self {
        self.faults.push(FaultRule { on, fault });
        self
    }

    /// Shorthand: a [`Fault::Script`] on exactly `path`.
    pub fn script(self, path: impl Into<String>, steps: Vec<Step>) -> Self {
        self.fault(PathMatch::Exact(path.into()), Fault::Script(steps))
    }

    /// Skews the `Date` header (and HTTP-date Retry-After values, which are
    /// computed on the same skewed clock) by this many seconds, positive
    /// (server clock ahead) or negative. At most about ten years either way.
    pub fn date_skew_secs(mut self, secs: i64) -> Self {
        self.date_skew_secs = secs;
        self
    }

    /// Serves HTTP/1.1 over TLS (feature `tls`) with this certificate chain
    /// (PEM, leaf first) and its private key (PEM: PKCS#8, PKCS#1 or SEC1):
    /// [`LabHandle::url`](crate::LabHandle::url) then says `https://`, and
    /// everything else (quotas, faults, jobs, the log, connection counts) is
    /// as over plain HTTP. rustls with the `ring` provider, TLS 1.2 and 1.3,
    /// ALPN `http/1.1`; a handshake that fails or takes over 10 s closes the
    /// connection (it still counts in [`LabHandle::connections`](crate::LabHandle::connections)).
    /// [`Lab::start`](crate::Lab::start) fails with [`LabError::Config`] when the PEM
    /// cannot be read or the key does not fit the certificate.
    ///
    /// The lab makes no certificate: a test makes one (here with `rcgen`)
    /// and trusts it in its client.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use std::sync::Arc;
    /// use tokio_rustls::rustls;
    ///
    /// let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])?;
    /// let config = polite_lab::LabConfig::default().tls(cert.cert.pem(), cert.signing_key.serialize_pem());
    /// let lab = polite_lab::Lab::start(config)?;
    /// assert!(lab.url("/items/a").starts_with("https://127.0.0.1:"));
    ///
    /// // A client that trusts that one certificate.
    /// let mut roots = rustls::RootCertStore::empty();
    /// roots.add(cert.cert.der().clone())?;
    /// let client = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
    ///     .with_safe_default_protocol_versions()?
    ///     .with_root_certificates(roots)
    ///     .with_no_client_auth();
    /// let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    /// let tls = rustls::ClientConnection::new(Arc::new(client), name)?;
    /// let mut stream = rustls::StreamOwned::new(tls, std::net::TcpStream::connect(lab.addr())?);
    /// stream.write_all(b"GET /items/a HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n")?;
    /// let mut answer = Vec::new();
    /// let _ = stream.read_to_end(&mut answer); // a close without close_notify is fine here
    /// assert!(answer.starts_with(b"HTTP/1.1 200 OK"));
    /// assert_eq!(lab.log().len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls(mut self, cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        self.tls = Some(crate::tls::Identity {
            cert_pem: cert_pem.into(),
            key_pem: key_pem.into(),
        });
        self
    }

    /// Whether the lab serves over TLS (`LabConfig::tls`, feature `tls`;
    /// always `false` without it).
    ///
    /// ```
    /// assert!(!polite_lab::LabConfig::default().is_tls());
    /// ```
    pub fn is_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        {
            self.tls.is_some()
        }
        #[cfg(not(feature = "tls"))]
        {
            false
        }
    }

    /// The declared jobs.
    pub fn jobs(&self) -> &[JobSpec] {
        &self.jobs
    }

    /// The quotas.
    pub fn quotas(&self) -> &[Quota] {
        &self.quotas
    }

    /// The fault rules, in order.
    pub fn faults(&self) -> &[FaultRule] {
        &self.faults
    }

    /// Whether long polling is on.
    pub fn long_poll_enabled(&self) -> bool {
        self.long_poll
    }

    /// The configured port (0: any).
    pub fn configured_port(&self) -> u16 {
        self.port
    }

    /// Checks the config; [`Lab::start`](crate::Lab::start) calls this first.
    pub fn validate(&self) -> Result<(), LabError> {
        let bad = |msg: String| Err(LabError::Config(msg));
        for q in &self.quotas {
            if q.window.is_zero() {
                return bad(format!("quota `{}` has a zero window", q.name));
            }
            if q.name.is_empty()
                || q.name
                    .chars()
                    .any(|c| !c.is_ascii_graphic() || c == '"' || c == '\\')
            {
                return bad(format!(
                    "quota name `{}` must be printable ASCII without quotes or backslashes",
                    q.name
                ));
            }
        }
        if !(-MAX_SKEW_SECS..=MAX_SKEW_SECS).contains(&self.date_skew_secs) {
            return bad(format!(
                "date skew {} s is out of range",
                self.date_skew_secs
            ));
        }
        let check_status = |status: u16| {
            if (200..=599).contains(&status) {
                Ok(())
            } else {
                Err(LabError::Config(format!(
                    "status {status} is not in 200..=599"
                )))
            }
        };
        for rule in &self.faults {
            match &rule.fault {
                Fault::Script(steps) => {
                    for step in steps {
                        if let Step::Status {
                            status,
                            retry_after,
                        } = step
                        {
                            check_status(*status)?;
                            match retry_after {
                                Some(RetryAfter::Raw(text))
                                    if hyper::header::HeaderValue::from_str(text).is_err() =>
                                {
                                    return bad(format!(
                                        "Retry-After `{text}` is not a valid header value"
                                    ));
                                }
                                _ => {}
                            }
                        }
                    }
                }
                Fault::FailRandomly {
                    probability,
                    status,
                } => {
                    check_status(*status)?;
                    if !(0.0..=1.0).contains(probability) {
                        return bad(format!("probability {probability} is not in [0, 1]"));
                    }
                }
                Fault::Reset | Fault::Hang | Fault::Slow(_) => {}
            }
        }
        Ok(())
    }
}
