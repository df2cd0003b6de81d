//! Fuzzing (feature `arbitrary`): cases decoded from raw bytes, and the
//! checks every fuzz target runs.
//!
//! The cargo-fuzz targets in `fuzz/` are one line each: they call
//! [`Target::check`] with libFuzzer's bytes and panic on a [`Failure`]. The
//! corpus replay test calls the same function with the committed seed
//! files, so a stable `cargo test` decodes and checks every byte string
//! exactly as the fuzzer does.
//!
//! Each case decodes with [`arbitrary::Unstructured`] into a structured
//! value (a policy, a request, a seed, a budget and an event script of
//! [`Input`]s), biased towards the values the machines treat specially
//! (429 and 503, short and over-the-cap `Retry-After`, HTTP-dates near the
//! virtual wall clock, wake-ups). Decoding is total: every byte string is a
//! case. The checks are the same invariant checkers as the property tests,
//! not only "does not panic".
//!
//! ```
//! use polite_testing::fuzz::Target;
//! for target in Target::ALL {
//!     // Any bytes at all make a case, and the machines keep every promise.
//!     target.check(b"\x07\x2a\x00\xff\x10 any bytes at all 429 503").unwrap();
//! }
//! assert_eq!(Target::Retry.name(), "retry_script");
//! ```

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arbitrary::Unstructured;

mod batch_run;
mod keyed;
mod spare;
pub use keyed::{KeyedBudget, KeyedCase};

use crate::script::{Answer, Input, Invariants, Job, ScriptRunner, Settle, default_wall_clock};
use crate::server_time;
use crate::{
    BatchChecker, Checker, PollChecker, ThrottleChecker, Trace, Violation, origin, violation,
};
use polite_core::budget::{RetryBucket, RetryCosts};
use polite_core::pace::Unpaced;
use polite_core::policy::{BackoffExponent, Jitter, MaxRetries, StatusSet, TransportKinds};
use polite_core::{
    Action, BatchMachine, BatchPolicy, Event, Method, Paced, PollMachine, PollPolicy, RateThrottle,
    RequestId, RequestInfo, Response, RetryClass, RetryMachine, RetryPolicy, SplitMix64,
    TransportErrorKind,
    ratelimit::{self, RateLimitHeaders, RateLimitInfo},
    retry_after::{self, RetryAfter, RetryAfterError},
};

/// The fuzz targets, by the name of their file in `fuzz/fuzz_targets/` and
/// of their corpus folder in `fuzz/corpus/`.
///
/// ```
/// use polite_testing::fuzz::Target;
/// assert_eq!(Target::from_name("poll_script"), Some(Target::Poll));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Target {
    /// `Retry-After` and `Date` parsing against `httpdate`: [`HeaderCase`].
    RetryAfter,
    /// A `RetryMachine` over an event script: [`RetryCase`].
    Retry,
    /// A `PollMachine` over an event script: [`PollCase`].
    Poll,
    /// A `RateThrottle` over a sequence of calls: [`ThrottleCase`].
    Throttle,
    /// A `BatchMachine` through a `RateThrottle` (or unpaced, or a learning
    /// throttle) over an event script: [`PaceBatchCase`].
    PaceBatch,
    /// A `Paced<RetryMachine>` over an event script: [`PacedRetryCase`].
    PacedRetry,
    /// `RateLimit`, `RateLimit-Policy` and `X-RateLimit-*` parsing, against
    /// an independent reading with `sfv`'s parsed types: [`RateLimitCase`].
    RateLimit,
    /// A keyed `BatchMachine` (one pace and optionally one retry budget per
    /// key) over an event script: [`KeyedCase`].
    Keyed,
}

impl Target {
    /// Every target.
    pub const ALL: [Target; 8] = [
        Target::RetryAfter,
        Target::Retry,
        Target::Poll,
        Target::Throttle,
        Target::PaceBatch,
        Target::PacedRetry,
        Target::RateLimit,
        Target::Keyed,
    ];

    /// The target's name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Target::RetryAfter => "retry_after",
            Target::Retry => "retry_script",
            Target::Poll => "poll_script",
            Target::Throttle => "pace_throttle",
            Target::PaceBatch => "pace_batch",
            Target::PacedRetry => "paced_retry",
            Target::RateLimit => "ratelimit",
            Target::Keyed => "keyed_batch",
        }
    }

    /// The target named `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Decodes `data` as this target's case and checks it.
    ///
    /// # Errors
    ///
    /// A [`Failure`]: the decoded case and the invariant it broke.
    // `#[inline]` (and on the `Case::check` paths below): the machines'
    // generic code is then instantiated, with coverage counters, in each
    // fuzz target, while polite-testing's own code is built without them
    // for fuzzing (fuzz/coverage-wrapper.sh; fuzz/README.md, "Speed").
    #[inline]
    pub fn check(self, data: &[u8]) -> Result<(), Failure> {
        match self {
            Target::RetryAfter => run::<HeaderCase>(data),
            Target::Retry => run::<RetryCase>(data),
            Target::Poll => run::<PollCase>(data),
            Target::Throttle => run::<ThrottleCase>(data),
            Target::PaceBatch => run::<PaceBatchCase>(data),
            Target::PacedRetry => run::<PacedRetryCase>(data),
            Target::RateLimit => run::<RateLimitCase>(data),
            Target::Keyed => run::<KeyedCase>(data),
        }
    }
}

/// A case that broke an invariant: what it decoded to, and what broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{violation}\n  case: {case}")]
pub struct Failure {
    /// The decoded case, as `{:?}`.
    pub case: String,
    /// The broken invariant.
    pub violation: Violation,
}

/// A fuzz case: decoded from any bytes, then checked.
pub trait Case: Sized + std::fmt::Debug {
    /// Decodes `data` (never fails: missing bytes read as zeros).
    fn decode(data: &[u8]) -> Self;
    /// Runs the case under its invariant checker.
    ///
    /// # Errors
    ///
    /// The first [`Violation`].
    fn check(&self) -> Result<(), Violation>;
    /// Drops the case once checked. By default where [`Target::check`] is
    /// compiled (for fuzzing, in the fuzz target, with coverage counters);
    /// a case whose drop is long (a script of inputs, each with its own
    /// allocations) drops itself in this crate instead, out of line, so
    /// that its drop glue counts no counters per execution (fuzz/README.md,
    /// "Speed").
    ///
    /// ```
    /// use polite_testing::fuzz::{Case, KeyedCase};
    /// let case = KeyedCase::decode(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    /// assert!(case.check().is_ok());
    /// case.dispose();
    /// ```
    #[inline]
    fn dispose(self) {
        drop(self);
    }
}

#[inline]
fn run<C: Case>(data: &[u8]) -> Result<(), Failure> {
    let case = C::decode(data);
    match case.check() {
        Ok(()) => {
            case.dispose();
            Ok(())
        }
        Err(violation) => Err(Failure {
            case: format!("{case:?}"),
            violation,
        }),
    }
}

// ---------------------------------------------------------------------------
// Decoding helpers. `Unstructured` answers the low end of a range once the
// data runs out, so none of these fail.
// ---------------------------------------------------------------------------

type U<'a, 'b> = &'b mut Unstructured<'a>;

fn int(u: U<'_, '_>, range: std::ops::RangeInclusive<u64>) -> u64 {
    let (start, end) = (*range.start(), *range.end());
    // `int_in_range` over `u64` reads one byte per 8 bits of `end - start`
    // (at most as many as there are) and takes their big-endian value
    // modulo the range's size: over `u8` or `u16` when the range fits
    // them, it reads the same bytes and makes the same number, with less
    // work (`int_reads_as_u64` checks it).
    match end.checked_sub(start) {
        Some(d @ 1..=0xff) => start + u64::from(u.int_in_range(0..=d as u8).unwrap_or(0)),
        Some(d @ 0x100..=0xffff) => start + u64::from(u.int_in_range(0..=d as u16).unwrap_or(0)),
        _ => u.int_in_range(range).unwrap_or(start),
    }
}

fn pick<T: Copy>(u: U<'_, '_>, choices: &[T]) -> T {
    choices[int(u, 0..=choices.len() as u64 - 1) as usize]
}

fn flag(u: U<'_, '_>) -> bool {
    int(u, 0..=1) == 1
}

fn bytes(u: U<'_, '_>, max: usize) -> Vec<u8> {
    let n = (int(u, 0..=max as u64) as usize).min(u.len());
    u.bytes(n).map(spare::bytes_of).unwrap_or_default()
}

fn millis(u: U<'_, '_>) -> Duration {
    let ms = match int(u, 0..=9) {
        0 => 0,
        1 => 1,
        2 => 10,
        3 => 250,
        4 => 1_000,
        5 => 2_500,
        6 => 30_000,
        _ => int(u, 0..=60_000),
    };
    Duration::from_millis(ms)
}

fn status(u: U<'_, '_>) -> u16 {
    match int(u, 0..=19) {
        0..=3 => 200,
        4 => 204,
        5 => 202,
        6 => 404,
        7 => 400,
        8..=10 => 429,
        11..=13 => 503,
        14 => 500,
        15 => 502,
        16 => 501,
        17 => 301,
        _ => int(u, 0..=u64::from(u16::MAX)) as u16,
    }
}

/// An IMF-fixdate `secs` after the epoch (clamped below the year 10000).
fn imf(secs: u64) -> Vec<u8> {
    form(secs, 0).bytes().to_vec()
}

/// The last second `httpdate` can format: 9999-12-31 23:59:59.
const MAX_DATE_SECS: u64 = 253_402_300_799;

fn wall_secs() -> u64 {
    default_wall_clock()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One HTTP-date form of an instant, in a buffer on the stack: the fuzz
/// targets build dates for every input, and a heap `String` per form (three
/// forms, three times per input) was a measurable share of their time.
#[derive(Clone, Copy)]
struct Form {
    buf: [u8; 40],
    len: usize,
}

impl Form {
    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn push(&mut self, part: &[u8]) {
        self.buf[self.len..self.len + part.len()].copy_from_slice(part);
        self.len += part.len();
    }

    fn of(parts: &[&[u8]]) -> Form {
        let mut f = Form {
            buf: [0; 40],
            len: 0,
        };
        for p in parts {
            f.push(p);
        }
        f
    }

    /// The same instant's seconds field set to `60`: the leap second after
    /// `hh:mm:59` of that minute (the three forms end their `hh:mm:ss` with
    /// a space).
    fn leap(mut self) -> Form {
        if let Some(i) = self.bytes().iter().position(|b| *b == b':')
            && self.len >= i + 6
        {
            self.buf[i + 4..i + 6].copy_from_slice(b"60");
        }
        self
    }

    /// The same value wrapped in whitespace (` \t{form} `).
    fn padded(self) -> Form {
        Form::of(&[b" \t", self.bytes(), b" "])
    }
}

impl std::fmt::Debug for Form {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.bytes()))
    }
}

/// Form `i` (0: IMF-fixdate, 1: RFC 850, 2: asctime) of an instant.
fn form(secs: u64, i: usize) -> Form {
    forms(secs)[i.min(2)]
}

/// The IMF-fixdate, RFC 850 and asctime forms of an instant: `httpdate`
/// writes the IMF-fixdate (an independent writer: the oracle reads dates
/// with its own code), the other two are its fields rearranged.
fn forms(secs: u64) -> [Form; 3] {
    use std::io::Write as _;
    let at = UNIX_EPOCH + Duration::from_secs(secs.min(MAX_DATE_SECS));
    let mut fixdate = Form {
        buf: [0; 40],
        len: 0,
    };
    let mut w = &mut fixdate.buf[..];
    // 29 bytes always fit in 40.
    let _ = write!(w, "{}", httpdate::HttpDate::from(at));
    fixdate.len = 40 - w.len();
    // "Sun, 06 Nov 1994 08:49:37 GMT"
    let b = fixdate.bytes();
    let (wd, day, mon, year, time) = (&b[0..3], &b[5..7], &b[8..11], &b[12..16], &b[17..25]);
    let long: &[u8] = match wd {
        b"Mon" => b"Monday",
        b"Tue" => b"Tuesday",
        b"Wed" => b"Wednesday",
        b"Thu" => b"Thursday",
        b"Fri" => b"Friday",
        b"Sat" => b"Saturday",
        _ => b"Sunday",
    };
    let rfc850 = Form::of(&[
        long,
        b", ",
        day,
        b"-",
        mon,
        b"-",
        &year[2..],
        b" ",
        time,
        b" GMT",
    ]);
    let day_sp: [u8; 2] = if day[0] == b'0' {
        [b' ', day[1]]
    } else {
        [day[0], day[1]]
    };
    let asctime = Form::of(&[wd, b" ", mon, b" ", &day_sp, b" ", time, b" ", year]);
    [fixdate, rfc850, asctime]
}

/// The dates [`header`] writes: `wall_secs() - 100 + k` for `k` in
/// `0..=NEAR_SPAN`.
const NEAR_SPAN: u64 = 400;

/// [`form`]`(wall_secs() - 100 + k, i)`, each of the 401 instants' forms
/// written once per process (a header value was a date in a sixth of the
/// answers, and writing its three forms was 2 % of `keyed_batch`'s
/// decoding and checking).
fn near_form(k: usize, i: usize) -> Form {
    static NEAR: std::sync::OnceLock<Vec<[Form; 3]>> = std::sync::OnceLock::new();
    let near = NEAR.get_or_init(|| {
        (0..=NEAR_SPAN)
            .map(|k| forms(wall_secs() + k - 100))
            .collect()
    });
    near[k][i.min(2)]
}

/// Hostile delta-seconds: overflowing 64 bits, zero-padded past any length
/// limit, or both.
fn hostile_digits(u: U<'_, '_>) -> Vec<u8> {
    let pad = int(u, 0..=200) as usize;
    let mut out = spare::bytes();
    let padded = |out: &mut Vec<u8>, digits: &[u8]| {
        out.resize(pad, b'0');
        out.extend_from_slice(digits);
    };
    match int(u, 0..=3) {
        0 => {
            out.resize(pad, b'0');
            spare::push_decimal(&mut out, int(u, 0..=120));
        }
        1 => padded(&mut out, b"99999999999999999999"),
        2 => out.resize(int(u, 20..=300) as usize, b'9'),
        _ => padded(&mut out, b"18446744073709551616"),
    }
    out
}

/// A raw header value: delta-seconds (small, around the caps, huge,
/// overflowing, zero-padded), HTTP-dates near the virtual wall clock (with
/// a leap second too), known-invalid values, or any bytes.
fn header(u: U<'_, '_>) -> Vec<u8> {
    let near = |u: U<'_, '_>| int(u, 0..=NEAR_SPAN) as usize;
    match int(u, 0..=13) {
        12 => hostile_digits(u),
        13 => spare::bytes_of(near_form(near(u), int(u, 0..=2) as usize).leap().bytes()),
        0 | 1 => spare::decimal(int(u, 0..=5)),
        2 => spare::decimal(int(u, 0..=400)),
        3 => spare::bytes_of(pick(u, &["59", "60", "61", "300", "301", "86400"]).as_bytes()),
        // Any of the three date forms (RFC 850 and asctime too), some
        // wrapped in whitespace.
        4 | 5 => {
            let d = near_form(near(u), int(u, 0..=2) as usize);
            match int(u, 0..=3) {
                0 => spare::bytes_of(d.padded().bytes()),
                _ => spare::bytes_of(d.bytes()),
            }
        }
        6 => spare::bytes_of(
            pick(
                u,
                &[
                    "-1",
                    "+1",
                    "1.5",
                    "",
                    " ",
                    " 2 ",
                    "99999999999999999999999",
                    "99999999999999999999",
                    "18446744073709551615",
                    "0000000000000000000000000000000000000000000000000000000000000000000000038",
                    "Wed, 31 Dec 2008 23:59:60 GMT",
                    "Sun, 06 Nov 1994 08:49:37 GMT",
                    "Sunday, 06-Nov-94 08:49:37 GMT",
                    "Sun Nov  6 08:49:37 1994",
                    "Sun, 06 Nov 1994 08:49:37 UTC",
                ],
            )
            .as_bytes(),
        ),
        7 => spare::decimal(u64::from(u.arbitrary::<u32>().unwrap_or(0))),
        _ => bytes(u, 80),
    }
}

/// Values of the `RateLimit` and `RateLimit-Policy` fields: typical ones,
/// edge cases, and any bytes.
fn sf_value(u: U<'_, '_>) -> Vec<u8> {
    match int(u, 0..=3) {
        0 => bytes(u, 60),
        _ => spare::bytes_of(
            pick(
                u,
                &[
                    r#""default";r=0;t=2"#,
                    r#""default";r=5;t=30"#,
                    r#""default";r=0;t=86400"#,
                    r#""default";q=10;w=1"#,
                    r#""default";q=100;w=60"#,
                    r#""permin";q=50;w=60,"perhr";q=1000;w=3600"#,
                    r#"a;q=1;w=3600"#,
                    r#""a";q=0;w=10"#,
                    r#""a";r=-1;t=3"#,
                    r#""a";q=10;w=0"#,
                    r#"("a" "b");q=1;w=1"#,
                    r#""pk";q=5;w=2;pk=:cGsx:"#,
                    "garbage;;",
                    "",
                ],
            )
            .as_bytes(),
        ),
    }
}

/// A rate-limit header: name and raw value.
fn rate_header(u: U<'_, '_>) -> (String, Vec<u8>) {
    let name = pick(
        u,
        &[
            "RateLimit",
            "RateLimit-Policy",
            "X-RateLimit-Limit",
            "X-RateLimit-Remaining",
            "X-RateLimit-Reset",
            "x-amz-retry-after",
        ],
    );
    let value = match name {
        "RateLimit" | "RateLimit-Policy" => sf_value(u),
        "X-RateLimit-Reset" => match int(u, 0..=2) {
            0 => spare::decimal(int(u, 0..=120)),
            1 => spare::decimal(wall_secs() + int(u, 0..=120)),
            _ => header(u),
        },
        _ => match int(u, 0..=2) {
            0 => spare::bytes_of(b"0"),
            1 => spare::decimal(int(u, 0..=5_000)),
            _ => header(u),
        },
    };
    (spare::name_of(name), value)
}

/// A transport error kind: mostly the seven that are retried by default,
/// sometimes a permanent one (a script for a batch: only the former).
fn transport_kind(u: U<'_, '_>, flavour: Flavour) -> TransportErrorKind {
    let all = TransportErrorKind::ALL;
    if flavour != Flavour::Batch && int(u, 0..=3) == 0 {
        pick(u, &all)
    } else {
        pick(u, &all[..7])
    }
}

/// The policy's `retried_transport`: mostly the default, sometimes none,
/// sometimes any subset of every kind (permanent ones included: putting
/// them in the set must not make them retried).
fn transport_kinds(u: U<'_, '_>) -> TransportKinds {
    match int(u, 0..=3) {
        0 => TransportKinds::NONE,
        1 => {
            let bits = int(u, 0..=(1 << TransportErrorKind::ALL.len()) - 1);
            let mut set = TransportKinds::NONE;
            for (i, k) in TransportErrorKind::ALL.into_iter().enumerate() {
                if bits & (1 << i) != 0 {
                    set = set.with(k);
                }
            }
            set
        }
        _ => TransportKinds::RETRYABLE,
    }
}

/// Which machine a script is for: what its answers carry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavour {
    Retry,
    Poll,
    Batch,
}

fn job(u: U<'_, '_>) -> Option<Job> {
    let state = |s: &str| Some(Job::State(s.to_owned()));
    match int(u, 0..=15) {
        0 => None,
        1..=6 => state("running"),
        7 | 8 => state("queued"),
        9 => state("passed"),
        10 => state("failed"),
        11 => state("cancelled"),
        12 => Some(Job::LongPollUnsupported),
        13 => state("a-state-name-far-longer-than-thirty-one-bytes"),
        _ => Some(Job::State(
            String::from_utf8_lossy(&bytes(u, 40)).into_owned(),
        )),
    }
}

fn answer(u: U<'_, '_>, flavour: Flavour, late: bool) -> Input {
    let status = status(u);
    let retry_after = (int(u, 0..=2) > 0).then(|| header(u));
    let date = (int(u, 0..=5) == 0).then(|| header(u));
    let job = if flavour == Flavour::Poll {
        job(u)
    } else {
        None
    };
    let generation = match int(u, 0..=15) {
        0 => Some(7),
        1 => Some(8),
        _ => None,
    };
    let pick = if flavour == Flavour::Batch {
        int(u, 0..=15) as u32
    } else {
        0
    };
    let mut headers = Vec::new();
    while headers.len() < 3 && int(u, 0..=3) == 0 {
        if headers.capacity() == 0 {
            headers = spare::headers();
        }
        headers.push(rate_header(u));
    }
    let retry_class = match int(u, 0..=15) {
        0 => Some(RetryClass::RateLimited),
        1 => Some(RetryClass::ServerError),
        2 => Some(RetryClass::Transport),
        _ => None,
    };
    Input::Answer(Answer {
        status,
        retry_after,
        date,
        job,
        generation,
        headers,
        retry_class,
        late,
        pick,
        after: millis(u),
    })
}

fn input(u: U<'_, '_>, flavour: Flavour) -> Input {
    match int(u, 0..=31) {
        0..=13 => answer(u, flavour, false),
        14 | 15 => answer(u, flavour, true),
        16..=18 => Input::Transport {
            kind: transport_kind(u, flavour),
            pick: int(u, 0..=15) as u32,
            after: millis(u),
        },
        19 => Input::Stray {
            item: int(u, 0..=12) as u32,
            attempt: int(u, 0..=6) as u32,
            status: status(u),
        },
        20..=22 => Input::Tick(millis(u)),
        23..=25 => Input::Wake,
        26..=28 => Input::WakeIfIdle,
        29 => Input::Cancel,
        30 => Input::Backwards(millis(u)),
        // The wall clock jumps, the monotonic one does not: up to two hours
        // either way.
        _ => {
            let by = Duration::from_millis(int(u, 0..=7_200_000));
            if flag(u) {
                Input::WallForward(by)
            } else {
                Input::WallBack(by)
            }
        }
    }
}

/// At most this many inputs per script.
const MAX_SCRIPT: usize = 64;

fn script(u: U<'_, '_>, flavour: Flavour) -> Vec<Input> {
    // Sized once (an input takes at least one byte): no reallocation and
    // copying of inputs as the script grows. A spare script from an earlier
    // case (`spare`) grows only when this one is longer than any before.
    let mut script = spare::script(u.len().min(MAX_SCRIPT));
    while !u.is_empty() && script.len() < MAX_SCRIPT {
        script.push(input(u, flavour));
    }
    script
}

fn jitter(u: U<'_, '_>) -> Jitter {
    match int(u, 0..=3) {
        0 => Jitter::None,
        1 => Jitter::Full,
        2 => Jitter::Equal,
        _ => Jitter::Percent(int(u, 0..=100) as u8),
    }
}

fn retry_policy(u: U<'_, '_>) -> RetryPolicy {
    let mut p = RetryPolicy {
        max_retries: MaxRetries {
            rate_limited: int(u, 0..=5) as u32,
            server_error: int(u, 0..=5) as u32,
            transport: int(u, 0..=5) as u32,
        },
        ..RetryPolicy::default()
    };
    if flag(u) {
        // SPEC §2.2: only 429 and 503 are retried.
        p.server_error_statuses = StatusSet::of(&[503]);
    }
    p.backoff.jitter = jitter(u);
    p.backoff.base = Duration::from_millis(int(u, 1..=2_000));
    p.backoff.multiplier = int(u, 1..=4) as u32;
    p.backoff.cap = p
        .backoff
        .base
        .max(Duration::from_secs(pick(u, &[4, 1, 30])));
    p.retry_after.min = Duration::from_millis(pick(u, &[1_000, 1, 100, 3_000]));
    p.retry_after.auto_wait_cap = Duration::from_secs(pick(u, &[60, 1, 5, 30, 300]));
    p.retry_after.min = p.retry_after.min.min(p.retry_after.auto_wait_cap);
    p.transport_cushion = Duration::from_millis(pick(u, &[2_000, 0, 100]));
    // The AWS-style knobs.
    if int(u, 0..=3) == 0 {
        p.max_total_retries = Some(int(u, 0..=4) as u32);
    }
    if int(u, 0..=3) == 0 {
        let mut b = p.backoff;
        b.base = Duration::from_millis(int(u, 1..=2_000));
        b.cap = b.base.max(Duration::from_secs(pick(u, &[20, 1, 5])));
        b.jitter = jitter(u);
        p.rate_limited_backoff = Some(b);
    }
    if flag(u) {
        p.backoff_exponent = BackoffExponent::AllRetries;
    }
    if int(u, 0..=3) == 0 {
        p.retry_after_ms = Some(Duration::from_millis(pick(u, &[5_000, 0, 100, 20_000])));
    }
    p.backoff_when_budget_empty = int(u, 0..=3) == 0;
    p
}

/// A shared retry budget: none, or a token bucket of some capacity and
/// fill (default costs: 5 per rate-limited retry, 14 per other retry).
fn bucket(u: U<'_, '_>) -> Option<(u32, u32)> {
    (int(u, 0..=2) == 0).then(|| {
        let capacity = pick(u, &[500, 0, 10, 20, 50]);
        (capacity, int(u, 0..=u64::from(capacity)) as u32)
    })
}

fn request(u: U<'_, '_>) -> RequestInfo {
    let (id, m) = (RequestId(1), Method::Get);
    match int(u, 0..=7) {
        0 => RequestInfo::new(id, Method::Post),
        1 => RequestInfo::new(id, Method::Post).with_idempotency_key(),
        2 => RequestInfo::new(id, Method::Put).with_one_shot_body(),
        3 => RequestInfo::new(id, m).with_generation(7),
        4 => RequestInfo::new(id, Method::Delete),
        _ => RequestInfo::new(id, m),
    }
}

fn timeout(u: U<'_, '_>) -> Duration {
    match int(u, 0..=7) {
        0 => Duration::from_millis(int(u, 0..=2_000)),
        1 => Duration::from_secs(600),
        _ => Duration::from_millis(int(u, 0..=120_000)),
    }
}

/// A settling mode: nothing answers any more, or everything answers 200.
fn settle(u: U<'_, '_>) -> Settle {
    if flag(u) {
        Settle::Answer(200)
    } else {
        Settle::Hang
    }
}

// ---------------------------------------------------------------------------
// retry_script
// ---------------------------------------------------------------------------

/// A `RetryMachine` with a policy, a request, a seed and a budget, over an
/// event script, checked by [`Checker`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryCase {
    /// The policy.
    pub policy: RetryPolicy,
    /// The request.
    pub request: RequestInfo,
    /// The jitter seed.
    pub seed: u64,
    /// The budget.
    pub timeout: Duration,
    /// A shared retry budget (token bucket capacity, tokens), if any.
    pub bucket: Option<(u32, u32)>,
    /// How the machine is brought to its end after the script.
    pub settle: Settle,
    /// The script.
    pub script: Vec<Input>,
}

impl Case for RetryCase {
    fn decode(data: &[u8]) -> RetryCase {
        let u = &mut Unstructured::new(data);
        let mut policy = retry_policy(u);
        policy.retried_transport = transport_kinds(u);
        RetryCase {
            policy,
            request: request(u),
            seed: u.arbitrary().unwrap_or(0),
            timeout: timeout(u),
            bucket: bucket(u),
            settle: settle(u),
            script: script(u, Flavour::Retry),
        }
    }

    #[inline]
    fn check(&self) -> Result<(), Violation> {
        self.run(false).map(drop)
    }
}

impl RetryCase {
    /// Runs the case under its checker and returns its trace (what
    /// [`Case::check`] checks).
    ///
    /// # Errors
    ///
    /// The first [`Violation`].
    ///
    /// ```
    /// use polite_testing::fuzz::{Case, RetryCase};
    /// let case = RetryCase::decode(&[7; 64]);
    /// let trace = case.trace().unwrap();
    /// assert!(trace.steps.last().is_some());
    /// ```
    pub fn trace(&self) -> Result<Trace, Violation> {
        self.run(true).map(|(trace, _)| trace)
    }

    /// Plays the case (recording the trace or not: the fuzz target does
    /// not, to spend no allocation per step) and checks it; the trace and
    /// the number of sends.
    #[inline]
    fn run(&self, recording: bool) -> Result<(Trace, u64), Violation> {
        let t0 = origin();
        let m = RetryMachine::new(
            self.policy,
            self.request,
            SplitMix64::new(self.seed),
            t0,
            self.timeout,
        )
        .map_err(|e| Violation {
            rule: "valid-policy",
            detail: e.to_string(),
        })?;
        // The checker's deadline is the case's own `t0 + timeout`, never the
        // machine's word for it.
        let checker = Checker::for_retry(&self.policy, &self.request).deadline(t0 + self.timeout);
        let (trace, _, sends) = match self.bucket {
            None => {
                let mut run = ScriptRunner::new(t0, m, checker)
                    .settle(self.settle)
                    .recording(recording);
                run.play(&self.script)?;
                run.finish_full()?
            }
            Some((capacity, tokens)) => {
                let bucket = RetryBucket::new(capacity, RetryCosts::default()).with_tokens(tokens);
                let m = m.with_budget(bucket);
                let mut run = ScriptRunner::new(t0, m, checker)
                    .settle(self.settle)
                    .recording(recording);
                run.play(&self.script)?;
                run.finish_full()?
            }
        };
        let b = self.policy.max_retries;
        if sends > 1 + u64::from(b.rate_limited + b.server_error + b.transport) {
            violation("retry-budget", format!("{sends} sends in all"))?;
        }
        Ok((trace, sends))
    }
}

// ---------------------------------------------------------------------------
// poll_script
// ---------------------------------------------------------------------------

/// A `PollMachine` with a policy, a request, a seed and a budget, over an
/// event script, checked by [`PollChecker`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PollCase {
    /// The policy.
    pub policy: PollPolicy,
    /// The request.
    pub request: RequestInfo,
    /// The jitter seed.
    pub seed: u64,
    /// The budget.
    pub timeout: Duration,
    /// How the machine is brought to its end after the script.
    pub settle: Settle,
    /// The script.
    pub script: Vec<Input>,
}

/// `PollPolicy::default()`, built once: its terminal-state set is filled
/// name by name, 2 % of the `poll_script` target's time when built per
/// input.
fn default_poll_policy() -> PollPolicy {
    static DEFAULT: std::sync::OnceLock<PollPolicy> = std::sync::OnceLock::new();
    *DEFAULT.get_or_init(PollPolicy::default)
}

impl Case for PollCase {
    fn decode(data: &[u8]) -> PollCase {
        let u = &mut Unstructured::new(data);
        let mut policy = PollPolicy {
            retry: retry_policy(u),
            long_poll_first: int(u, 0..=4) > 0,
            max_long_poll: Duration::from_secs(int(u, 1..=40)),
            min_long_poll_interval: Duration::from_millis(pick(u, &[1_000, 0, 10, 2_000])),
            ..default_poll_policy()
        };
        policy.backoff.jitter = jitter(u);
        policy.backoff.base = Duration::from_millis(int(u, 1..=3_000));
        policy.backoff.multiplier = int(u, 1..=3) as u32;
        policy.backoff.cap = policy.backoff.base.max(Duration::from_secs(15));
        policy.retry.retried_transport = transport_kinds(u);
        PollCase {
            policy,
            request: request(u),
            seed: u.arbitrary().unwrap_or(0),
            timeout: match int(u, 0..=3) {
                0 => timeout(u),
                _ => Duration::from_millis(int(u, 0..=600_000)),
            },
            settle: settle(u),
            script: script(u, Flavour::Poll),
        }
    }

    #[inline]
    fn check(&self) -> Result<(), Violation> {
        self.play(false).map(drop)
    }
}

impl PollCase {
    /// Runs the case under its checker and returns its trace (what
    /// [`Case::check`] checks).
    ///
    /// # Errors
    ///
    /// The first [`Violation`].
    ///
    /// ```
    /// use polite_testing::fuzz::{Case, PollCase};
    /// let case = PollCase::decode(&[3; 64]);
    /// let trace = case.trace().unwrap();
    /// assert!(trace.steps.last().is_some());
    /// ```
    pub fn trace(&self) -> Result<Trace, Violation> {
        self.play(true)
    }

    /// Plays the case, recording the trace or not (the fuzz target does
    /// not: no allocation per step).
    #[inline]
    fn play(&self, recording: bool) -> Result<Trace, Violation> {
        let t0 = origin();
        let m = PollMachine::new(
            self.policy,
            self.request,
            SplitMix64::new(self.seed),
            t0,
            self.timeout,
        )
        .map_err(|e| Violation {
            rule: "valid-policy",
            detail: e.to_string(),
        })?;
        let checker = PollChecker::new(&self.policy, &self.request, t0 + self.timeout);
        let mut run = ScriptRunner::new(t0, m, checker)
            .settle(self.settle)
            .recording(recording);
        run.play(&self.script)?;
        run.finish()
    }
}

// ---------------------------------------------------------------------------
// pace_throttle, pace_batch, paced_retry
// ---------------------------------------------------------------------------

// Pacing is fuzzed by three focused targets rather than one that ran the
// throttle, a batch and a paced retry machine on every input: libFuzzer's
// work after each execution grows with the number of code edges the
// execution covered, and one machine per input covers less.

/// One call on a throttle, after the caller's clock moved by `step_ms`
/// (negative: backwards).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThrottleOp {
    /// `acquire(now)`.
    Acquire {
        /// Clock step before the call, in ms.
        step_ms: i64,
    },
    /// `cool_down(now + for_ms)`.
    CoolDown {
        /// Clock step before the call, in ms.
        step_ms: i64,
        /// How long the cool-down lasts from now.
        for_ms: u64,
    },
}

/// A throttle's limit, window and margin: the first bytes of every pacing
/// case.
fn throttle_shape(u: U<'_, '_>) -> (u32, Duration, Duration) {
    let limit = int(u, 1..=6) as u32;
    let window = Duration::from_millis(int(u, 1..=3_000));
    let margin = Duration::from_millis(pick(u, &[50, 0, 1, 100]));
    (limit, window, margin)
}

fn throttle(limit: u32, window: Duration, margin: Duration) -> Result<RateThrottle, Violation> {
    Ok(RateThrottle::new(limit, window)
        .map_err(invalid_policy)?
        .with_margin(margin))
}

fn invalid_policy(e: polite_core::policy::PolicyError) -> Violation {
    Violation {
        rule: "valid-policy",
        detail: e.to_string(),
    }
}

/// `pace_throttle`: a `RateThrottle` over a sequence of calls, checked
/// against [`ThrottleChecker`]'s reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThrottleCase {
    /// Throttle limit.
    pub limit: u32,
    /// Throttle window.
    pub window: Duration,
    /// Throttle margin.
    pub margin: Duration,
    /// The calls.
    pub ops: Vec<ThrottleOp>,
}

impl Case for ThrottleCase {
    fn decode(data: &[u8]) -> ThrottleCase {
        let u = &mut Unstructured::new(data);
        let (limit, window, margin) = throttle_shape(u);
        let n = int(u, 0..=48) as usize;
        let mut ops = Vec::with_capacity(n);
        for _ in 0..n {
            let step_ms = int(u, 0..=1_800) as i64 - 300;
            ops.push(if int(u, 0..=9) == 0 {
                ThrottleOp::CoolDown {
                    step_ms,
                    for_ms: int(u, 0..=3_000),
                }
            } else {
                ThrottleOp::Acquire { step_ms }
            });
        }
        ThrottleCase {
            limit,
            window,
            margin,
            ops,
        }
    }

    #[inline]
    fn check(&self) -> Result<(), Violation> {
        let t0 = origin();
        let mut t = throttle(self.limit, self.window, self.margin)?;
        let mut checker = ThrottleChecker::for_throttle(&t);
        let mut clock = t0;
        let step = |clock: Instant, ms: i64| {
            if ms >= 0 {
                clock + Duration::from_millis(ms.unsigned_abs())
            } else {
                clock
                    .checked_sub(Duration::from_millis(ms.unsigned_abs()))
                    .unwrap_or(t0)
                    .max(t0)
            }
        };
        for op in &self.ops {
            match *op {
                ThrottleOp::Acquire { step_ms } => {
                    clock = step(clock, step_ms);
                    checker.acquire(clock, t.acquire(clock))?;
                }
                ThrottleOp::CoolDown { step_ms, for_ms } => {
                    clock = step(clock, step_ms);
                    let until = clock + Duration::from_millis(for_ms);
                    t.cool_down(until);
                    checker.cool_down(until);
                }
            }
        }
        Ok(())
    }
}

/// Which pace a batch or a paced machine goes through.
fn rate_headers(x_ratelimit: bool) -> RateLimitHeaders {
    if x_ratelimit {
        RateLimitHeaders::default().with_x_ratelimit()
    } else {
        RateLimitHeaders::default()
    }
}

/// A learning throttle (sized by `RateLimit-Policy`), starting at ten
/// times the case's limit.
fn learner(limit: u32) -> Result<RateThrottle, Violation> {
    RateThrottle::learning(limit.max(1) * 10).map_err(invalid_policy)
}

/// `pace_batch`: a `BatchMachine` through a `RateThrottle` (or unpaced, or
/// a learning throttle), with or without a shared retry budget, over an
/// event script, checked by [`BatchChecker`] (with the `rate` and
/// `cool-down` rules when the throttle is its own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaceBatchCase {
    /// Throttle limit.
    pub limit: u32,
    /// Throttle window.
    pub window: Duration,
    /// Throttle margin.
    pub margin: Duration,
    /// The batch's policy.
    pub batch: BatchPolicy,
    /// The batch's requests.
    pub requests: Vec<RequestInfo>,
    /// Whether the batch goes through the throttle (else unpaced).
    pub throttled: bool,
    /// Whether the batch goes through a *learning* throttle instead (sized
    /// by `RateLimit-Policy`; no `rate` check).
    pub learning: bool,
    /// Whether `X-RateLimit-*` headers are read too.
    pub x_ratelimit: bool,
    /// The jitter seed.
    pub seed: u64,
    /// The budget.
    pub timeout: Duration,
    /// A retry budget shared by the batch's items (token bucket capacity,
    /// tokens), if any.
    pub bucket: Option<(u32, u32)>,
    /// How the batch is brought to its end after its script.
    pub settle: Settle,
    /// The script.
    pub script: Vec<Input>,
}

fn timeout_paced(u: U<'_, '_>) -> Duration {
    Duration::from_millis(match int(u, 0..=1) {
        0 => int(u, 0..=20_000),
        _ => int(u, 20_000..=200_000),
    })
}

impl Case for PaceBatchCase {
    fn decode(data: &[u8]) -> PaceBatchCase {
        let u = &mut Unstructured::new(data);
        let (limit, window, margin) = throttle_shape(u);
        let batch = BatchPolicy {
            retry: retry_policy(u),
            concurrency: int(u, 1..=5) as u32,
            max_restarts: int(u, 0..=3) as u32,
        };
        let requests = (0..int(u, 0..=9))
            .map(|i| {
                let method = if int(u, 0..=4) == 0 {
                    Method::Post
                } else {
                    Method::Get
                };
                RequestInfo::new(RequestId(i), method)
            })
            .collect();
        let throttled = int(u, 0..=3) > 0;
        let learning = int(u, 0..=3) == 0;
        let x_ratelimit = flag(u);
        let seed = u.arbitrary().unwrap_or(0);
        let timeout = timeout_paced(u);
        let bucket = bucket(u);
        let settle = settle(u);
        let script = script(u, Flavour::Batch);
        PaceBatchCase {
            limit,
            window,
            margin,
            batch,
            requests,
            throttled,
            learning,
            x_ratelimit,
            seed,
            timeout,
            bucket,
            settle,
            script,
        }
    }

    #[inline]
    fn check(&self) -> Result<(), Violation> {
        let t0 = origin();
        let headers = rate_headers(self.x_ratelimit);
        let rng = SplitMix64::new(self.seed);
        let requests = self.requests.clone();
        let (policy, timeout) = (self.batch, self.timeout);
        if self.learning {
            let b = BatchMachine::new(policy, requests, rng, learner(self.limit)?, t0, timeout)
                .map_err(invalid_policy)?
                .rate_limit_headers(headers);
            let c = BatchChecker::for_machine(&b);
            budgeted(t0, b, c, self.bucket, self.settle, &self.script)
        } else if self.throttled {
            let throttle = throttle(self.limit, self.window, self.margin)?;
            let b = BatchMachine::new(policy, requests, rng, throttle, t0, timeout)
                .map_err(invalid_policy)?
                .rate_limit_headers(headers);
            let c = BatchChecker::for_machine(&b).throttled(self.limit, self.window);
            budgeted(t0, b, c, self.bucket, self.settle, &self.script)
        } else {
            let b = BatchMachine::new(policy, requests, rng, Unpaced, t0, timeout)
                .map_err(invalid_policy)?
                .rate_limit_headers(headers);
            let c = BatchChecker::for_machine(&b);
            budgeted(t0, b, c, self.bucket, self.settle, &self.script)
        }
    }

    /// Out of line, here (see [`Case::dispose`]); the script's buffers
    /// go back to [`spare`] for the next cases.
    #[inline(never)]
    fn dispose(self) {
        spare::recycle_script(self.script);
    }
}

/// `paced_retry`: a `Paced<RetryMachine>` (through a `RateThrottle`, or a
/// learning throttle) over an event script, checked by [`Checker`] and,
/// with a throttle of its own, at most `limit` sends per window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacedRetryCase {
    /// Throttle limit.
    pub limit: u32,
    /// Throttle window.
    pub window: Duration,
    /// Throttle margin.
    pub margin: Duration,
    /// The retry policy.
    pub policy: RetryPolicy,
    /// Whether the machine goes through a *learning* throttle instead
    /// (sized by `RateLimit-Policy`; no `rate` check).
    pub learning: bool,
    /// Whether `X-RateLimit-*` headers are read too.
    pub x_ratelimit: bool,
    /// The jitter seed.
    pub seed: u64,
    /// The budget.
    pub timeout: Duration,
    /// The script.
    pub script: Vec<Input>,
}

impl Case for PacedRetryCase {
    fn decode(data: &[u8]) -> PacedRetryCase {
        let u = &mut Unstructured::new(data);
        let (limit, window, margin) = throttle_shape(u);
        let policy = retry_policy(u);
        let learning = int(u, 0..=3) == 0;
        let x_ratelimit = flag(u);
        let seed = u.arbitrary().unwrap_or(0);
        let timeout = timeout_paced(u);
        // Batch-flavoured answers (a `pick` each, the seven transport kinds
        // retried by default): the scripts `pace_script` had, whose
        // regression inputs this target replays.
        let script = script(u, Flavour::Batch);
        PacedRetryCase {
            limit,
            window,
            margin,
            policy,
            learning,
            x_ratelimit,
            seed,
            timeout,
            script,
        }
    }

    #[inline]
    fn check(&self) -> Result<(), Violation> {
        let t0 = origin();
        let headers = rate_headers(self.x_ratelimit);
        let request = RequestInfo::new(RequestId(1), Method::Get);
        let m = RetryMachine::new(
            self.policy,
            request,
            SplitMix64::new(self.seed),
            t0,
            self.timeout,
        )
        .map_err(invalid_policy)?;
        // The checker's deadline is the case's own `t0 + timeout`.
        let own = Checker::for_retry(&self.policy, &request).deadline(t0 + self.timeout);
        if self.learning {
            let paced = Paced::new(m, learner(self.limit)?, t0)
                .retry_after_limits(self.policy.retry_after)
                .rate_limit_headers(headers);
            batch(t0, paced, own, Settle::Hang, &self.script)
        } else {
            let checker = (own, SendRate::new(self.limit, self.window));
            let throttle = throttle(self.limit, self.window, self.margin)?;
            let paced = Paced::new(m, throttle, t0)
                .retry_after_limits(self.policy.retry_after)
                .rate_limit_headers(headers);
            batch(t0, paced, checker, Settle::Hang, &self.script)
        }
    }
}

/// Runs a batch with the shared retry budget, if any.
/// `pace_batch`'s run: the machine (created at `t0`, [`origin()`]) with or
/// without its budget, through `batch_run::play` (the runner compiled once
/// in this crate, the machine's code in the fuzz target: see there).
#[inline]
fn budgeted<P: polite_core::Pace>(
    t0: Instant,
    b: BatchMachine<SplitMix64, P>,
    c: BatchChecker,
    bucket: Option<(u32, u32)>,
    settle: Settle,
    script: &[Input],
) -> Result<(), Violation> {
    debug_assert_eq!(t0, origin());
    match bucket {
        None => batch_run::play(&mut { b }, c, settle, script),
        Some((capacity, tokens)) => {
            let bucket = RetryBucket::new(capacity, RetryCosts::default()).with_tokens(tokens);
            batch_run::play(&mut b.with_budget(bucket), c, settle, script)
        }
    }
}

fn batch<M, C>(t0: Instant, b: M, c: C, settle: Settle, script: &[Input]) -> Result<(), Violation>
where
    M: polite_core::Machine,
    C: Invariants<M>,
{
    let mut run = ScriptRunner::new(t0, b, c).settle(settle).recording(false);
    run.play(script)?;
    run.finish().map(drop)
}

/// At most `limit` sends in any half-open window (`rate`), for a machine
/// that sends through a throttle of its own.
#[derive(Clone, Debug)]
struct SendRate {
    limit: usize,
    window: Duration,
    sends: Vec<Instant>,
}

impl SendRate {
    fn new(limit: u32, window: Duration) -> SendRate {
        SendRate {
            limit: limit as usize,
            window,
            // At most `limit` live sends: sized once.
            sends: Vec::with_capacity((limit as usize).min(4096)),
        }
    }
}

impl<M: ?Sized> Invariants<M> for SendRate {
    fn input(&mut self, _now: Instant, _event: &Event<'_>) {}
    fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        if let Action::Send(_) = action {
            let window = self.window;
            self.sends
                .retain(|s| s.checked_add(window).is_none_or(|end| end > now));
            if self.sends.len() >= self.limit {
                return violation(
                    "rate",
                    format!("{} sends within {window:?}", self.sends.len() + 1),
                );
            }
            self.sends.push(now);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// retry_after
// ---------------------------------------------------------------------------

/// A `Retry-After` value, a `Date` value and a wall-clock time, checked
/// against the rules of SPEC §2.1 and against `httpdate`; and an instant
/// formatted in the three HTTP-date forms, which must parse back to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderCase {
    /// The raw `Retry-After` value.
    pub value: Vec<u8>,
    /// The raw `Date` value.
    pub date: Option<Vec<u8>>,
    /// The wall clock, in seconds after the epoch.
    pub wall_secs: u64,
    /// An instant, in seconds after the epoch (up to the year 9999), for
    /// the round trip.
    pub round_trip_secs: u64,
}

impl Case for HeaderCase {
    fn decode(data: &[u8]) -> HeaderCase {
        let u = &mut Unstructured::new(data);
        let round_trip_secs = int(u, 0..=MAX_DATE_SECS);
        let wall_secs = match int(u, 0..=3) {
            0 => int(u, 0..=MAX_DATE_SECS),
            _ => round_trip_secs
                .saturating_add(int(u, 0..=600))
                .saturating_sub(300),
        };
        let date = match int(u, 0..=3) {
            0 => None,
            1 => Some(imf(wall_secs)),
            2 => Some(imf(round_trip_secs.saturating_sub(int(u, 0..=400)))),
            _ => Some(
                String::from_utf8_lossy(&bytes(u, 40))
                    .into_owned()
                    .into_bytes(),
            ),
        };
        let value = match int(u, 0..=9) {
            8 => hostile_digits(u),
            9 => form(round_trip_secs, int(u, 0..=2) as usize)
                .leap()
                .bytes()
                .to_vec(),
            0 => imf(round_trip_secs),
            1 => form(round_trip_secs, 1).bytes().to_vec(),
            2 => form(round_trip_secs, 2).bytes().to_vec(),
            3 => {
                // A date with one byte changed.
                let mut v = form(round_trip_secs, int(u, 0..=2) as usize)
                    .bytes()
                    .to_vec();
                let i = int(u, 0..=v.len() as u64 - 1) as usize;
                v[i] = u.arbitrary().unwrap_or(b' ');
                v
            }
            _ => {
                let n = u.len();
                u.bytes(n).map(<[u8]>::to_vec).unwrap_or_default()
            }
        };
        HeaderCase {
            value,
            date,
            wall_secs,
            round_trip_secs,
        }
    }

    #[inline]
    fn check(&self) -> Result<(), Violation> {
        let wall = UNIX_EPOCH + Duration::from_secs(self.wall_secs);
        let mut reading = Reading::new(self.date.as_deref(), wall);
        let _ = check_retry_after(&self.value, &mut reading)?;
        // Round trip: every form of the instant parses back to it, with or
        // without surrounding whitespace. The forms are built once (and
        // the leap-second forms from them: the same minute, seconds `60`).
        let at = UNIX_EPOCH + Duration::from_secs(self.round_trip_secs.min(MAX_DATE_SECS));
        let forms = forms(self.round_trip_secs);
        let year = httpdate_year(forms[0].bytes());
        for (i, form) in forms.iter().enumerate() {
            if i == 1 && !(1970..=2069).contains(&year) {
                continue; // two-digit years name 1970..=2069 only
            }
            for v in [*form, form.padded()] {
                let got = check_retry_after(v.bytes(), &mut reading)?;
                if got != Ok(RetryAfter::At(at)) {
                    return violation("date-round-trip", format!("{v:?} parsed as {got:?}"));
                }
            }
        }
        // A leap second: `hh:mm:60` is one second after `hh:mm:59`, in
        // every form, as a Retry-After and as a Date.
        let s59 = self.round_trip_secs.min(MAX_DATE_SECS - 1) / 60 * 60 + 59;
        let after = UNIX_EPOCH + Duration::from_secs(s59 + 1);
        for (i, form) in forms.iter().enumerate() {
            if i == 1 && !(1970..=2069).contains(&year) {
                continue;
            }
            let v = form.leap();
            let mut as_date = Reading::new(Some(v.bytes()), wall);
            let got = check_retry_after(v.bytes(), &mut as_date)?;
            if got != Ok(RetryAfter::At(after)) {
                return violation("leap-second", format!("{v:?} parsed as {got:?}"));
            }
            let d = RetryAfter::At(after + Duration::from_secs(5)).delay(Some(v.bytes()), wall);
            if d != Duration::from_secs(5) {
                return violation(
                    "leap-second",
                    format!("Date {v:?}: delay {d:?}, expected 5s"),
                );
            }
        }
        Ok(())
    }
}

/// The year of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
#[inline]
fn httpdate_year(imf: &[u8]) -> u32 {
    imf.get(12..16)
        .and_then(|y| std::str::from_utf8(y).ok())
        .and_then(|y| y.parse().ok())
        .unwrap_or_default()
}

/// The context a `Retry-After` value is judged in: the raw `Date` header
/// and the wall clock, with the oracle's reading of the `Date` done once
/// (`server_time`, the checkers' own HTTP-date reader), and the last delay
/// the implementation gave for a parsed value under this context.
struct Reading<'a> {
    date: Option<&'a [u8]>,
    wall: SystemTime,
    /// What the oracle measures a date against: the valid `Date`, else the
    /// wall clock.
    base: SystemTime,
    /// `RetryAfter::delay(date, wall)` for one parsed value, already
    /// checked against the oracle: the same pure call with the same
    /// arguments (the round trip parses six spellings of one instant) is
    /// not checked again.
    checked: Option<(RetryAfter, Duration)>,
}

impl<'a> Reading<'a> {
    #[inline]
    fn new(date: Option<&'a [u8]>, wall: SystemTime) -> Reading<'a> {
        let base = date
            .map(server_time::trim)
            .and_then(server_time::http_date)
            .unwrap_or(wall);
        Reading {
            date,
            wall,
            base,
            checked: None,
        }
    }
}

/// The rules of SPEC §2.1 for one value, against an independent reading
/// (the checkers' own digit scanner and HTTP-date reader, `server_time`,
/// which shares no code with `polite_core::retry_after` nor uses `httpdate`).
/// Returns what `RetryAfter::parse` made of the value.
#[inline]
fn check_retry_after(
    value: &[u8],
    reading: &mut Reading<'_>,
) -> Result<Result<RetryAfter, RetryAfterError>, Violation> {
    let (date, wall) = (reading.date, reading.wall);
    let parsed = RetryAfter::parse(value);
    let t = server_time::trim(value);
    let fail = |rule, detail: String| {
        violation(
            rule,
            format!("{:?}: {detail}", String::from_utf8_lossy(value)),
        )
    };
    let digits = server_time::delta_seconds(t);
    // SPEC §2.1: any all-digit value is valid delta-seconds, saturating
    // when it overflows (leading zeros are digits, of any length); only a
    // value that is not all digits can be too long.
    let want = if t.is_empty() {
        Err(RetryAfterError::Empty)
    } else if let Some(n) = digits {
        Ok(RetryAfter::Delay(Duration::from_secs(n)))
    } else if t.len() > 64 {
        Err(RetryAfterError::TooLong)
    } else if let Some(at) = server_time::http_date(t) {
        Ok(RetryAfter::At(at))
    } else {
        Err(RetryAfterError::Malformed)
    };
    if parsed != want {
        fail(
            "retry-after-parse",
            format!("{parsed:?}, expected {want:?}"),
        )?;
    }
    if let Ok(RetryAfter::Delay(d)) = parsed
        && (digits.is_none() || d.subsec_nanos() != 0)
    {
        fail("retry-after-invalid-not-zero", format!("{parsed:?}"))?;
    }
    // The delay: a date against a valid Date header, else the wall clock;
    // a date in the past is zero.
    let delay = match (parsed, reading.checked) {
        (Ok(ra), Some((seen, d))) if seen == ra => Some(d),
        (Ok(ra), _) => {
            let got = ra.delay(date, wall);
            let want = match ra {
                RetryAfter::Delay(d) => d,
                RetryAfter::At(at) => at.duration_since(reading.base).unwrap_or_default(),
            };
            if got != want {
                fail("retry-after-delay", format!("{got:?}, expected {want:?}"))?;
            }
            reading.checked = Some((ra, got));
            Some(got)
        }
        (Err(_), _) => None,
    };
    let sd = retry_after::server_delay(value, date, wall);
    if sd != parsed.map(|_| delay.unwrap_or_default()) {
        fail("server-delay", format!("{sd:?} for {parsed:?}"))?;
    }
    Ok(parsed)
}

// ---------------------------------------------------------------------------
// ratelimit
// ---------------------------------------------------------------------------

/// The rate-limit headers of one answer (`RateLimit`, `RateLimit-Policy`,
/// `X-RateLimit-*`, with a `Retry-After` and a `Date`), checked against an
/// independent reading of the Structured Field Lists with `sfv`'s parsed
/// types, the folding rules of the `ratelimit` module docs, and the
/// promise behind them: the folded sliding window never lets through more
/// than any advertised request quota allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitCase {
    /// `RateLimit`.
    pub ratelimit: Option<Vec<u8>>,
    /// `RateLimit-Policy`.
    pub policy: Option<Vec<u8>>,
    /// `X-RateLimit-Limit`.
    pub x_limit: Option<Vec<u8>>,
    /// `X-RateLimit-Remaining`.
    pub x_remaining: Option<Vec<u8>>,
    /// `X-RateLimit-Reset`.
    pub x_reset: Option<Vec<u8>>,
    /// `Retry-After`.
    pub retry_after: Option<Vec<u8>>,
    /// `Date`.
    pub date: Option<Vec<u8>>,
    /// The wall clock, in seconds after the epoch.
    pub wall_secs: u64,
}

/// A structured field value built from parts: members with names and
/// parameters, so that valid Lists are common.
fn sf_list(u: U<'_, '_>) -> Vec<u8> {
    if int(u, 0..=3) == 0 {
        return sf_value(u);
    }
    let mut out = String::new();
    for i in 0..int(u, 1..=3) {
        if i > 0 {
            out.push_str(pick(u, &[",", ", ", " ,", ",,"]));
        }
        out.push_str(pick(
            u,
            &[
                "\"default\"",
                "a",
                "\"p\"",
                "(a b)",
                "1",
                "?1",
                "\"x\\\"y\"",
            ],
        ));
        for _ in 0..int(u, 0..=4) {
            let key = pick(u, &["q", "w", "r", "t", "qu", "pk", "x"]);
            let value = match int(u, 0..=9) {
                0 => "-1".to_owned(),
                1 => "0".to_owned(),
                2 => "1.5".to_owned(),
                3 => "\"requests\"".to_owned(),
                4 => "\"content-bytes\"".to_owned(),
                5 => "requests".to_owned(),
                6 => "999999999999999".to_owned(),
                7 => ":cGsx:".to_owned(),
                _ => int(u, 0..=4_000).to_string(),
            };
            out.push(';');
            out.push_str(key);
            if int(u, 0..=7) > 0 {
                out.push('=');
                out.push_str(&value);
            }
        }
    }
    out.into_bytes()
}

impl Case for RateLimitCase {
    fn decode(data: &[u8]) -> RateLimitCase {
        let u = &mut Unstructured::new(data);
        let opt = |u: U<'_, '_>, f: fn(U<'_, '_>) -> Vec<u8>| (int(u, 0..=3) > 0).then(|| f(u));
        let ratelimit = opt(u, sf_list);
        let policy = opt(u, sf_list);
        let count = |u: U<'_, '_>| match int(u, 0..=3) {
            0 => header(u),
            _ => int(u, 0..=100).to_string().into_bytes(),
        };
        let x_limit = opt(u, count);
        let x_remaining = opt(u, count);
        let x_reset = opt(u, |u| rate_header(u).1);
        let retry_after = (int(u, 0..=3) == 0).then(|| header(u));
        let date = (int(u, 0..=3) == 0).then(|| header(u));
        let wall_secs = match int(u, 0..=3) {
            0 => int(u, 0..=MAX_DATE_SECS),
            _ => wall_secs(),
        };
        RateLimitCase {
            ratelimit,
            policy,
            x_limit,
            x_remaining,
            x_reset,
            retry_after,
            date,
            wall_secs,
        }
    }

    fn check(&self) -> Result<(), Violation> {
        if let Some(v) = &self.policy {
            check_policy(v)?;
        }
        if let Some(v) = &self.ratelimit {
            check_service_limit(v)?;
        }
        for v in [&self.x_limit, &self.x_remaining].into_iter().flatten() {
            let want = std::str::from_utf8(v.trim_ascii())
                .ok()
                .filter(|s| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok());
            let got = ratelimit::parse_count(v);
            if got != want {
                return violation(
                    "x-ratelimit-count",
                    format!(
                        "{:?}: {got:?}, expected {want:?}",
                        String::from_utf8_lossy(v)
                    ),
                );
            }
        }
        let wall = UNIX_EPOCH + Duration::from_secs(self.wall_secs);
        if let Some(v) = &self.x_reset {
            // Never panics; plain seconds below 10^9 are a delay.
            let got = ratelimit::parse_x_reset(v, self.date.as_deref(), wall);
            let t = v.trim_ascii();
            if !t.is_empty()
                && t.len() < 10
                && t.iter().all(u8::is_ascii_digit)
                && got
                    != std::str::from_utf8(t)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .map(Duration::from_secs)
            {
                return violation(
                    "x-ratelimit-reset",
                    format!("{:?}: {got:?}", String::from_utf8_lossy(v)),
                );
            }
        }
        // The whole answer, both ways of reading it.
        let mut r = Response::new(polite_core::SendId::default(), 200, wall);
        let named = [
            ("RateLimit", &self.ratelimit),
            ("RateLimit-Policy", &self.policy),
            ("X-RateLimit-Limit", &self.x_limit),
            ("X-RateLimit-Remaining", &self.x_remaining),
            ("X-RateLimit-Reset", &self.x_reset),
            ("Retry-After", &self.retry_after),
            ("Date", &self.date),
        ];
        for (name, value) in named {
            if let Some(v) = value {
                r = r.header(name, v);
            }
        }
        for headers in [
            RateLimitHeaders::default(),
            RateLimitHeaders::default().with_x_ratelimit(),
        ] {
            let info = RateLimitInfo::read(&r, &headers);
            if let Some(p) = info.pause {
                if p > headers.max_pause {
                    return violation(
                        "ratelimit-pause",
                        format!("{info:?} over {:?}", headers.max_pause),
                    );
                }
                if r.retry_after
                    .is_some_and(|v| server_time::asked(v, r.date, r.wall_clock).is_some())
                {
                    return violation(
                        "ratelimit-pause",
                        format!("{info:?} despite a valid Retry-After"),
                    );
                }
            }
            let quota = self.policy.as_deref().and_then(ratelimit::parse_policy);
            if info.quota != quota {
                return violation(
                    "ratelimit-quota",
                    format!("{info:?}, policy says {quota:?}"),
                );
            }
        }
        Ok(())
    }
}

/// One List member as the reference reads it.
#[derive(Clone, Copy, Debug, Default)]
struct RefMember {
    named: bool,
    /// `None`: absent; `Some(None)`: present but invalid.
    q: Option<Option<u64>>,
    w: Option<Option<u64>>,
    r: Option<Option<u64>>,
    t: Option<Option<u64>>,
    /// `None`: absent; `Some(true)`: requests.
    requests: Option<bool>,
}

/// The Item members of a List, read with `sfv`'s parsed types (an
/// independent path from the visitor the library uses); `None` when the
/// value is not a valid List or longer than 4 KiB.
fn reference_members(value: &[u8]) -> Option<Vec<RefMember>> {
    if value.len() > 4096 {
        return None;
    }
    let list: sfv::List = sfv::Parser::new(value).parse().ok()?;
    let int = |b: &sfv::BareItem, min: i64| {
        b.as_integer()
            .map(i64::from)
            .filter(|i| *i >= min)
            .map(i64::unsigned_abs)
    };
    Some(
        list.iter()
            .filter_map(|e| match e {
                sfv::ListEntry::Item(item) => Some(item),
                sfv::ListEntry::InnerList(_) => None,
            })
            .map(|item| {
                let mut m = RefMember {
                    named: matches!(
                        item.bare_item,
                        sfv::BareItem::String(_) | sfv::BareItem::Token(_)
                    ),
                    ..RefMember::default()
                };
                for (k, v) in &item.params {
                    match k.as_str() {
                        "q" => m.q = Some(int(v, 0)),
                        "w" => m.w = Some(int(v, 1)),
                        "r" => m.r = Some(int(v, 0)),
                        "t" => m.t = Some(int(v, 0)),
                        "qu" => {
                            m.requests = Some(
                                v.as_string()
                                    .is_some_and(|s| matches!(s.as_str(), "requests" | "request")),
                            );
                        }
                        _ => {}
                    }
                }
                m
            })
            .collect(),
    )
}

/// `RateLimit-Policy`: the documented fold, from the reference reading,
/// and soundness: the sliding window `limit` per `window` lets at most
/// `limit * ceil(w / window)` requests into any span of `w`, which must
/// not exceed `q` for any request quota `q` per `w` advertised.
fn check_policy(value: &[u8]) -> Result<(), Violation> {
    let got = ratelimit::parse_policy(value);
    let show = String::from_utf8_lossy(value);
    let quotas: Vec<(u64, u64)> = reference_members(value)
        .unwrap_or_default()
        .iter()
        .filter(|m| m.named && m.requests != Some(false))
        .filter_map(|m| match (m.q, m.w) {
            (Some(Some(q)), Some(Some(w))) if q >= 1 => Some((q, w)),
            _ => None,
        })
        .collect();
    let want = quotas.iter().map(|&(_, w)| w).min().map(|base| {
        let limit = quotas
            .iter()
            .map(|&(q, w)| q / w.div_ceil(base))
            .min()
            .unwrap_or(0);
        if limit >= 1 {
            polite_core::ratelimit::Quota {
                limit,
                window: Duration::from_secs(base),
            }
        } else {
            // The slowest policy: the largest w / q (the first of equals).
            let mut slowest = quotas[0];
            for &(q, w) in &quotas[1..] {
                if u128::from(w) * u128::from(slowest.0) > u128::from(slowest.1) * u128::from(q) {
                    slowest = (q, w);
                }
            }
            polite_core::ratelimit::Quota {
                limit: 1,
                window: Duration::from_secs(slowest.1.div_ceil(slowest.0)),
            }
        }
    });
    if got != want {
        return violation(
            "ratelimit-policy",
            format!("{show:?}: {got:?}, expected {want:?}"),
        );
    }
    if let Some(quota) = got {
        let window = quota.window.as_secs();
        if quota.limit == 0 || window == 0 || quota.window.subsec_nanos() != 0 {
            return violation(
                "ratelimit-policy",
                format!("{show:?}: {quota:?} is no rate"),
            );
        }
        for &(q, w) in &quotas {
            let most = u128::from(quota.limit) * u128::from(w.div_ceil(window));
            if most > u128::from(q) {
                return violation(
                    "ratelimit-policy-sound",
                    format!("{show:?}: {quota:?} allows {most} in {w} s, the server {q}"),
                );
            }
        }
    }
    Ok(())
}

/// `RateLimit`: the lowest `r` (with the `t` of the first member that has
/// it), and the longest `t > 0` among the members with `r = 0`.
fn check_service_limit(value: &[u8]) -> Result<(), Violation> {
    let got = ratelimit::parse_ratelimit(value);
    let mut want: Option<ratelimit::ServiceLimit> = None;
    for m in reference_members(value).unwrap_or_default() {
        let (true, Some(Some(r))) = (m.named, m.r) else {
            continue;
        };
        let t = match m.t {
            None => None,
            Some(Some(t)) => Some(Duration::from_secs(t)),
            Some(None) => continue,
        };
        let s = want.get_or_insert(ratelimit::ServiceLimit {
            remaining: r,
            reset: t,
            pause: None,
        });
        if r < s.remaining {
            s.remaining = r;
            s.reset = t;
        }
        if r == 0
            && let Some(t) = t.filter(|t| !t.is_zero())
        {
            s.pause = Some(s.pause.map_or(t, |p| p.max(t)));
        }
    }
    if got != want {
        return violation(
            "ratelimit-service-limit",
            format!(
                "{:?}: {got:?}, expected {want:?}",
                String::from_utf8_lossy(value)
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dates written once are those `form` writes.
    #[test]
    fn near_form_is_form() {
        for k in 0..=NEAR_SPAN {
            for i in 0..4 {
                let secs = wall_secs() + k - 100;
                assert_eq!(near_form(k as usize, i).bytes(), form(secs, i).bytes());
            }
        }
    }

    /// `int` decodes every range exactly as `int_in_range::<u64>` does:
    /// the same value and the same bytes consumed, with enough data, too
    /// little, and none (the decoding of every committed corpus input
    /// depends on it).
    #[test]
    fn int_reads_as_u64() {
        let ranges = [
            0..=0,
            5..=5,
            0..=1,
            0..=3,
            1..=4,
            0..=12,
            0..=255,
            1..=256,
            0..=256,
            0..=400,
            20..=300,
            1..=3_000,
            0..=60_000,
            0..=65_535,
            0..=65_536,
            20_000..=200_000,
            0..=7_200_000,
            0..=(1 << 12) - 1,
            0..=u64::MAX,
            u64::MAX - 1..=u64::MAX,
        ];
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut compared = 0;
        for len in 0..12 {
            for _ in 0..200 {
                let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                for range in ranges.clone() {
                    let (mut a, mut b) = (Unstructured::new(&data), Unstructured::new(&data));
                    let want = b.int_in_range(range.clone()).unwrap_or(*range.start());
                    assert_eq!(int(&mut a, range.clone()), want, "{range:?} {data:?}");
                    assert_eq!(a.len(), b.len(), "{range:?} {data:?}");
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 12 * 200 * ranges.len());
    }
}
