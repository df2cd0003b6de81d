//! The adapter conformance suite: scenarios written once, run by every
//! adapter's tests (tokio, async-std/smol, blocking) with its own client.
//!
//! The lab does not depend on `polite-core`: a [`Scenario`] says in plain
//! types what the client must do ([`Work`]) and what must be seen ([`Expect`]).
//! The client runs with polite's **default policy** (429 retried up to 3
//! times, 5xx up to 4, transport errors up to 4; backoff 250 ms doubling,
//! capped at 4 s; Retry-After clamped to [1 s, 300 s]; automatic wait cap
//! 60 s; transport cushion 2 s; long poll first, fallback to backoff on a 400
//! `VALIDATION_ERROR`).
//!
//! An adapter's test loops like this (blocking shown; nothing here needs tokio):
//!
//! ```no_run
//! use std::time::Instant;
//! use polite_lab::{Lab, conformance::{self, ExpectedOutcome, Observed, Work}};
//!
//! # fn run_with_my_client(_: &Work, _: &polite_lab::LabHandle) -> ExpectedOutcome { ExpectedOutcome::Succeeded }
//! let mut failures = Vec::new();
//! for scenario in conformance::scenarios() {
//!     let lab = Lab::start(scenario.lab.clone()).expect("lab starts");
//!     let start = Instant::now();
//!     // Build the request(s) from `scenario.work` against `lab.url(path)`,
//!     // with `work.timeout()` as the deadline and, if set, a cancel after
//!     // `work.cancel_after()`; map the client's outcome onto ExpectedOutcome.
//!     let outcome = run_with_my_client(&scenario.work, &lab);
//!     let observed = Observed::new(outcome, start.elapsed());
//!     if let Err(message) = scenario.check(&observed, &lab.log()) {
//!         failures.push(message);
//!     }
//! }
//! assert!(failures.is_empty(), "{}", failures.join("\n\n"));
//! ```
//!
//! For a [`Work::Batch`], build the observation with [`Observed::batch`] (one
//! outcome per path, in the order of `paths`).
//!
//! Notes for adapter authors:
//! * Start the lab *before* starting the clock: `elapsed` runs from the
//!   call's start (when the deadline is fixed) to its return.
//! * Take the log after the call returned; a hanging request stays in it.
//! * `POST`/`PUT` may carry any small body (the lab ignores bodies);
//!   `replayable: false` means the client must treat the request as not
//!   replayable (no idempotency key, a body it cannot produce again).
//! * A `Work::Wait` polls `GET path`, adding `?waitSeconds=N` while long
//!   polling; the job body is `{"id":..,"status":..}`.
//! * `hostile_retry_after` uses a 400 s timeout so that only the auto-wait
//!   cap rule applies (a conforming client returns in milliseconds; a broken
//!   one may sleep up to the 300 s clamp, so guard the loop with your own
//!   watchdog if that matters to you).
//!
//! Every scenario's own time stays under about 6 s with a conforming client;
//! [`Expect::max_elapsed`] is the bound. Scenarios are independent: run them
//! one after another or in parallel, each with its own lab.

use std::fmt;
use std::time::Duration;

use crate::config::{Fault, JobState, LabConfig, PathMatch, Quota, RetryAfterStyle, Step};
use crate::log::{LogEntry, LogStats};

/// The query parameter of a long poll.
pub const WAIT_PARAM: &str = "waitSeconds";

/// One conformance case.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Unique, snake_case.
    pub name: &'static str,
    /// What it shows, in one sentence.
    pub description: &'static str,
    /// The lab to start for it.
    pub lab: LabConfig,
    /// What the client does.
    pub work: Work,
    /// What must be observed.
    pub expect: Expect,
}

/// What the client under test must do. Paths are relative to the lab
/// ([`LabHandle::url`](crate::LabHandle::url)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    /// One logical request through the retry machine.
    Send {
        /// `GET`, `POST`, ...
        method: &'static str,
        /// e.g. `/items/a`.
        path: String,
        /// Whether the request may be re-sent (idempotent method or an
        /// idempotency key, and a body that can be produced again). `false`:
        /// the client must treat it as non-replayable.
        replayable: bool,
        /// The caller's budget: the deadline is the call's start + this.
        timeout: Duration,
        /// If set, cancel the call this long after its start.
        cancel_after: Option<Duration>,
    },
    /// A wait for a job through the poll machine (`GET path`, terminal states
    /// `passed` / `failed` / `cancelled`).
    Wait {
        /// e.g. `/runs/j1`.
        path: String,
        /// Whether the client starts with long polling (`?waitSeconds=N`).
        long_poll: bool,
        /// The caller's budget.
        timeout: Duration,
        /// If set, cancel the wait this long after its start.
        cancel_after: Option<Duration>,
    },
    /// Many logical requests paced together under one shared deadline.
    Batch {
        /// The method of every request.
        method: &'static str,
        /// One logical request per path.
        paths: Vec<String>,
        /// At most this many in flight.
        concurrency: usize,
        /// A client-side sliding-window throttle: `(limit, window)`; `None`: no throttle.
        throttle: Option<(u32, Duration)>,
        /// The shared budget of the whole batch.
        timeout: Duration,
    },
}

impl Work {
    /// The caller's budget.
    pub fn timeout(&self) -> Duration {
        match self {
            Work::Send { timeout, .. }
            | Work::Wait { timeout, .. }
            | Work::Batch { timeout, .. } => *timeout,
        }
    }

    /// When to cancel, counted from the call's start.
    pub fn cancel_after(&self) -> Option<Duration> {
        match self {
            Work::Send { cancel_after, .. } | Work::Wait { cancel_after, .. } => *cancel_after,
            Work::Batch { .. } => None,
        }
    }
}

/// How a call ended, in plain terms (what the client's outcome maps onto).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ExpectedOutcome {
    /// A successful response was handed back.
    Succeeded,
    /// A response that is final by policy (e.g. 404) was handed back.
    NotRetryable,
    /// A class's retry budget ran out (for any class).
    RetriesExhausted,
    /// The 429 budget ran out, or the server asked for longer than the auto-wait cap.
    RateLimited,
    /// A failure on a request that must not be re-sent.
    NotReplayable,
    /// The deadline was reached, or the next permitted send would be after it.
    TimedOut,
    /// The caller cancelled.
    Cancelled,
    /// A wait ended with this terminal job state.
    Terminal(String),
    /// A batch: every item [`Succeeded`](Self::Succeeded).
    AllSucceeded,
    /// A batch: at least one item did not succeed.
    NotAllSucceeded,
    /// The call failed with an error that carries no outcome (a bad
    /// configuration or policy, a request that could not be built): never
    /// a success. The text is the error's message.
    Error(String),
}

impl ExpectedOutcome {
    /// `Terminal(state)`.
    pub fn terminal(state: impl Into<String>) -> Self {
        ExpectedOutcome::Terminal(state.into())
    }
}

impl fmt::Display for ExpectedOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpectedOutcome::Terminal(s) => write!(f, "Terminal({s:?})"),
            ExpectedOutcome::Error(e) => write!(f, "Error({e:?})"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// A check on the request log beyond the counts in [`Expect`]. Request
/// indexes are positions in the log (arrival order, from 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogCheck {
    /// Request `request` got `status`.
    StatusAt {
        /// Index in the log.
        request: usize,
        /// The status it must have got.
        status: u16,
    },
    /// Request `request` carries query parameter `param`.
    QueryHas {
        /// Index in the log.
        request: usize,
        /// The parameter name.
        param: &'static str,
    },
    /// No request from index `from` on carries query parameter `param`.
    QueryLacksFrom {
        /// First index concerned.
        from: usize,
        /// The parameter name.
        param: &'static str,
    },
    /// Request `after + 1` arrived at least `at_least` after request `after`
    /// (a server delay was honoured).
    GapAtLeast {
        /// Index of the earlier request.
        after: usize,
        /// The least gap between the two arrivals.
        at_least: Duration,
    },
    /// No window of `window` saw more than `max` arrivals.
    ArrivalsWithin {
        /// The window length.
        window: Duration,
        /// The most arrivals allowed in it.
        max: usize,
    },
}

/// What must be observed for a scenario to pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    /// The call's outcome.
    pub outcome: ExpectedOutcome,
    /// The fewest requests the lab may have seen.
    pub min_requests: usize,
    /// The most requests the lab may have seen.
    pub max_requests: usize,
    /// The most 429s the lab may have sent.
    pub max_429: usize,
    /// The call took at least this long (from its start to its return).
    pub min_elapsed: Duration,
    /// The call took at most this long.
    pub max_elapsed: Duration,
    /// If set: the exact statuses in arrival order (`None` for a reset or a hang).
    pub statuses: Option<Vec<Option<u16>>>,
    /// If set: the peak of requests in flight at once.
    pub max_in_flight: Option<usize>,
    /// Further checks on the log.
    pub checks: Vec<LogCheck>,
}

impl Expect {
    /// `outcome` after exactly `requests` requests, within `[min_elapsed,
    /// max_elapsed]`, no 429 allowed (raise [`Expect::max_429`] with [`Expect::allow_429`]).
    pub fn new(
        outcome: ExpectedOutcome,
        requests: usize,
        min_elapsed: Duration,
        max_elapsed: Duration,
    ) -> Self {
        Expect {
            outcome,
            min_requests: requests,
            max_requests: requests,
            max_429: 0,
            min_elapsed,
            max_elapsed,
            statuses: None,
            max_in_flight: None,
            checks: Vec::new(),
        }
    }

    /// Allows between `min` and `max` requests.
    pub fn requests(mut self, min: usize, max: usize) -> Self {
        self.min_requests = min;
        self.max_requests = max;
        self
    }

    /// Allows up to `n` 429s.
    pub fn allow_429(mut self, n: usize) -> Self {
        self.max_429 = n;
        self
    }

    /// Requires exactly these statuses, in arrival order.
    pub fn expect_statuses(mut self, statuses: &[Option<u16>]) -> Self {
        self.statuses = Some(statuses.to_vec());
        self
    }

    /// Requires at most `n` requests in flight at once.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = Some(n);
        self
    }

    /// Adds a check on the log.
    pub fn with_check(mut self, check: LogCheck) -> Self {
        self.checks.push(check);
        self
    }
}

/// What the adapter's test saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The call's outcome (for a batch, see [`Observed::batch`]).
    pub outcome: ExpectedOutcome,
    /// From the call's start to its return.
    pub elapsed: Duration,
    /// A batch: one outcome per path, in the order of `paths`.
    pub per_item: Option<Vec<ExpectedOutcome>>,
}

impl Observed {
    /// A single call's observation.
    pub fn new(outcome: ExpectedOutcome, elapsed: Duration) -> Self {
        Observed {
            outcome,
            elapsed,
            per_item: None,
        }
    }

    /// A batch's observation; the overall outcome is
    /// [`AllSucceeded`](ExpectedOutcome::AllSucceeded) when every item
    /// [`Succeeded`](ExpectedOutcome::Succeeded), else
    /// [`NotAllSucceeded`](ExpectedOutcome::NotAllSucceeded).
    pub fn batch(per_item: Vec<ExpectedOutcome>, elapsed: Duration) -> Self {
        let all = per_item.iter().all(|o| *o == ExpectedOutcome::Succeeded);
        Observed {
            outcome: if all {
                ExpectedOutcome::AllSucceeded
            } else {
                ExpectedOutcome::NotAllSucceeded
            },
            elapsed,
            per_item: Some(per_item),
        }
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn send(method: &'static str, path: &str, replayable: bool, timeout: Duration) -> Work {
    Work::Send {
        method,
        path: path.to_owned(),
        replayable,
        timeout,
        cancel_after: None,
    }
}

/// A scenario whose only request answers 429 with a Retry-After date `after`
/// from the (skewed) server clock, then succeeds.
fn date_retry_after(
    name: &'static str,
    description: &'static str,
    style: RetryAfterStyle,
    skew: i64,
) -> Scenario {
    Scenario {
        name,
        description,
        lab: LabConfig::default()
            .retry_after_style(style)
            .date_skew_secs(skew)
            .script(
                "/items/d",
                vec![Step::with_retry_after(429, secs(2)), Step::Normal],
            ),
        work: send("GET", "/items/d", true, secs(10)),
        expect: Expect::new(ExpectedOutcome::Succeeded, 2, secs(1), ms(3500))
            .allow_429(1)
            .expect_statuses(&[Some(429), Some(200)])
            .with_check(LogCheck::GapAtLeast {
                after: 0,
                at_least: ms(990),
            }),
    }
}

/// Every conformance scenario, in a stable order. Names are unique.
pub fn scenarios() -> Vec<Scenario> {
    let wait_job = |path: &str, timeout: Duration| Work::Wait {
        path: path.to_owned(),
        long_poll: true,
        timeout,
        cancel_after: None,
    };
    vec![
        Scenario {
            name: "retry_then_success",
            description: "503 then 429 (Retry-After: 1) then 200: retried past both, the 429's delay honoured",
            lab: LabConfig::default().script(
                "/items/a",
                vec![
                    Step::without_retry_after(503),
                    Step::with_retry_after(429, secs(1)),
                    Step::Normal,
                ],
            ),
            work: send("GET", "/items/a", true, secs(10)),
            expect: Expect::new(ExpectedOutcome::Succeeded, 3, secs(1), secs(3))
                .allow_429(1)
                .expect_statuses(&[Some(503), Some(429), Some(200)])
                .with_check(LogCheck::GapAtLeast {
                    after: 1,
                    at_least: ms(990),
                }),
        },
        date_retry_after(
            "retry_after_imf_fixdate",
            "a 429 whose Retry-After is an IMF-fixdate 2 s ahead is honoured (at least the 1 s floor)",
            RetryAfterStyle::ImfFixdate,
            0,
        ),
        date_retry_after(
            "retry_after_rfc850",
            "a 429 whose Retry-After is an RFC 850 date 2 s ahead is honoured",
            RetryAfterStyle::Rfc850,
            0,
        ),
        date_retry_after(
            "retry_after_asctime",
            "a 429 whose Retry-After is an asctime date 2 s ahead is honoured",
            RetryAfterStyle::Asctime,
            0,
        ),
        date_retry_after(
            "retry_after_date_against_skewed_server_date",
            "the server clock is an hour ahead: a Retry-After date 2 s after the response's own Date means 2 s, not an hour",
            RetryAfterStyle::ImfFixdate,
            3600,
        ),
        Scenario {
            name: "hostile_retry_after",
            description: "Retry-After: 86400 is clamped to 300 s, over the 60 s auto-wait cap: stop with RateLimited at once, no resend \
                          (the timeout is above 300 s so that the deadline rule cannot apply instead)",
            lab: LabConfig::default()
                .retry_after_style(RetryAfterStyle::Hostile)
                .script("/items/h", vec![Step::status(429), Step::Normal]),
            work: send("GET", "/items/h", true, secs(400)),
            expect: Expect::new(ExpectedOutcome::RateLimited, 1, Duration::ZERO, ms(750))
                .allow_429(1)
                .expect_statuses(&[Some(429)]),
        },
        Scenario {
            name: "invalid_retry_after_falls_back_to_backoff",
            description: "Retry-After: soon is invalid: the client falls back to its backoff and retries \
                          (a 429 without a valid server time also cuts an adaptive pace, whose \
                          next token comes at most 2 s later, at its 0.5/s floor)",
            lab: LabConfig::default()
                .retry_after_style(RetryAfterStyle::Invalid)
                .script("/items/i", vec![Step::status(429), Step::Normal]),
            work: send("GET", "/items/i", true, secs(10)),
            expect: Expect::new(ExpectedOutcome::Succeeded, 2, Duration::ZERO, ms(2500))
                .allow_429(1)
                .expect_statuses(&[Some(429), Some(200)]),
        },
        Scenario {
            name: "non_replayable_post_503",
            description: "a non-replayable POST answered 503 is not re-sent",
            lab: LabConfig::default().script("/items/p", vec![Step::without_retry_after(503)]),
            work: send("POST", "/items/p", false, secs(5)),
            expect: Expect::new(ExpectedOutcome::NotReplayable, 1, Duration::ZERO, ms(750))
                .expect_statuses(&[Some(503)]),
        },
        Scenario {
            name: "not_retryable_404",
            description: "a 404 is final by policy: handed back after one request",
            lab: LabConfig::default(),
            work: send("GET", "/nowhere", true, secs(5)),
            expect: Expect::new(ExpectedOutcome::NotRetryable, 1, Duration::ZERO, ms(750))
                .expect_statuses(&[Some(404)]),
        },
        Scenario {
            name: "server_errors_exhaust_budget",
            description: "five 503s without Retry-After: 1 send + 4 retries on the backoff schedule, then RetriesExhausted",
            lab: LabConfig::default().script("/items/e", vec![Step::without_retry_after(503); 5]),
            work: send("GET", "/items/e", true, secs(20)),
            expect: Expect::new(
                ExpectedOutcome::RetriesExhausted,
                5,
                Duration::ZERO,
                secs(6),
            )
            .expect_statuses(&[Some(503); 5]),
        },
        Scenario {
            name: "rate_limit_budget_spent",
            description: "four 429s with Retry-After: 1: 1 send + 3 retries a second apart, then RateLimited",
            lab: LabConfig::default()
                .script("/items/r", vec![Step::with_retry_after(429, secs(1)); 4]),
            work: send("GET", "/items/r", true, secs(20)),
            expect: Expect::new(ExpectedOutcome::RateLimited, 4, ms(2990), ms(5500))
                .allow_429(4)
                .expect_statuses(&[Some(429); 4]),
        },
        Scenario {
            name: "retry_after_beyond_deadline_stops_at_once",
            description: "a 503 asking for 5 s under a 2 s budget: stop at once with TimedOut instead of sleeping to the deadline",
            lab: LabConfig::default().script(
                "/items/t",
                vec![Step::with_retry_after(503, secs(5)), Step::Normal],
            ),
            work: send("GET", "/items/t", true, secs(2)),
            expect: Expect::new(ExpectedOutcome::TimedOut, 1, Duration::ZERO, ms(750))
                .expect_statuses(&[Some(503)]),
        },
        Scenario {
            name: "reset_then_success",
            description: "a connection reset without an answer is a transport error: retried, then 200",
            lab: LabConfig::default().script("/items/x", vec![Step::Reset, Step::Normal]),
            work: send("GET", "/items/x", true, secs(10)),
            expect: Expect::new(ExpectedOutcome::Succeeded, 2, Duration::ZERO, secs(2))
                .expect_statuses(&[None, Some(200)]),
        },
        Scenario {
            name: "hang_times_out_within_cushion",
            description: "a request that never gets an answer, timeout 1 s, cushion 2 s: TimedOut no later than 3 s plus slack",
            lab: LabConfig::default().fault(PathMatch::exact("/items/hang"), Fault::Hang),
            work: send("GET", "/items/hang", true, secs(1)),
            expect: Expect::new(ExpectedOutcome::TimedOut, 1, ms(950), ms(3500))
                .expect_statuses(&[None]),
        },
        Scenario {
            name: "cancel_during_backoff",
            description: "cancel 500 ms into a 3 s Retry-After wait: the wait ends at once with Cancelled, nothing re-sent",
            lab: LabConfig::default().script(
                "/items/c",
                vec![Step::with_retry_after(503, secs(3)), Step::Normal],
            ),
            work: Work::Send {
                method: "GET",
                path: "/items/c".to_owned(),
                replayable: true,
                timeout: secs(10),
                cancel_after: Some(ms(500)),
            },
            expect: Expect::new(ExpectedOutcome::Cancelled, 1, ms(500), ms(900))
                .expect_statuses(&[Some(503)]),
        },
        Scenario {
            name: "long_poll_sees_result_at_once",
            description: "a job finishing 3 s after its first poll, waited with long polling: seen within 300 ms of 3 s, in at most 2 requests",
            lab: LabConfig::default().job("j-long", secs(3), JobState::Passed),
            work: wait_job("/runs/j-long", secs(8)),
            expect: Expect::new(ExpectedOutcome::terminal("passed"), 1, ms(2950), ms(3300))
                .requests(1, 2)
                .with_check(LogCheck::QueryHas {
                    request: 0,
                    param: WAIT_PARAM,
                }),
        },
        Scenario {
            name: "long_poll_fallback_to_backoff",
            description: "the server rejects waitSeconds (400 VALIDATION_ERROR): the client switches to plain polls with backoff for good",
            lab: LabConfig::default().long_poll(false).job(
                "j-fallback",
                ms(1500),
                JobState::Passed,
            ),
            work: wait_job("/runs/j-fallback", secs(8)),
            expect: Expect::new(ExpectedOutcome::terminal("passed"), 2, ms(1500), secs(4))
                .requests(2, 3)
                .with_check(LogCheck::StatusAt {
                    request: 0,
                    status: 400,
                })
                .with_check(LogCheck::QueryHas {
                    request: 0,
                    param: WAIT_PARAM,
                })
                .with_check(LogCheck::QueryLacksFrom {
                    from: 1,
                    param: WAIT_PARAM,
                }),
        },
        Scenario {
            name: "long_poll_failed_job",
            description: "a job that ends failed: the wait ends with Terminal(\"failed\") (a terminal state, not an error)",
            lab: LabConfig::default().job("j-failed", ms(500), JobState::Failed),
            work: wait_job("/runs/j-failed", secs(5)),
            expect: Expect::new(ExpectedOutcome::terminal("failed"), 1, ms(450), ms(1000))
                .requests(1, 2),
        },
        Scenario {
            name: "pacing_reference_experiment",
            description: "quota 3 per 500 ms (fixed), 15 ms service time, 8 GETs at concurrency 2 with a client throttle of 3 per 650 ms: \
                          8 x 200, no 429, peak 2 in flight",
            lab: LabConfig::default()
                .quota(Quota::fixed(3, ms(500)))
                .fault(PathMatch::Any, Fault::Slow(ms(15))),
            work: Work::Batch {
                method: "GET",
                paths: (1..=8).map(|i| format!("/items/{i}")).collect(),
                concurrency: 2,
                throttle: Some((3, ms(650))),
                timeout: secs(6),
            },
            expect: Expect::new(ExpectedOutcome::AllSucceeded, 8, ms(1300), secs(4))
                .expect_statuses(&[Some(200); 8])
                .max_in_flight(2)
                .with_check(LogCheck::ArrivalsWithin {
                    window: ms(500),
                    max: 3,
                }),
        },
    ]
}

/// The scenario called `name`, if any.
pub fn scenario(name: &str) -> Option<Scenario> {
    scenarios().into_iter().find(|s| s.name == name)
}

impl Scenario {
    /// Compares what the adapter observed (and the lab's log, taken after the
    /// call returned) with [`Scenario::expect`]. `Err` names the scenario,
    /// every difference, and the log.
    pub fn check(&self, observed: &Observed, log: &[LogEntry]) -> Result<(), String> {
        let e = &self.expect;
        let mut problems: Vec<String> = Vec::new();

        if observed.outcome != e.outcome {
            problems.push(format!(
                "outcome: expected {}, observed {}",
                e.outcome, observed.outcome
            ));
        }
        if let Work::Batch { paths, .. } = &self.work {
            match &observed.per_item {
                None => {
                    problems.push("per_item: a batch must report one outcome per path".to_owned())
                }
                Some(items) if items.len() != paths.len() => problems.push(format!(
                    "per_item: {} outcomes for {} paths",
                    items.len(),
                    paths.len()
                )),
                Some(items) => {
                    if e.outcome == ExpectedOutcome::AllSucceeded {
                        for (path, item) in paths.iter().zip(items) {
                            if *item != ExpectedOutcome::Succeeded {
                                problems.push(format!(
                                    "item {path}: expected Succeeded, observed {item}"
                                ));
                            }
                        }
                    }
                }
            }
        }
        let n = log.len();
        if n < e.min_requests || n > e.max_requests {
            let want = if e.min_requests == e.max_requests {
                e.min_requests.to_string()
            } else {
                format!("{}..={}", e.min_requests, e.max_requests)
            };
            problems.push(format!("requests: expected {want}, the lab saw {n}"));
        }
        let n429 = log.count_429();
        if n429 > e.max_429 {
            problems.push(format!(
                "429s: at most {} allowed, the lab sent {n429}",
                e.max_429
            ));
        }
        if observed.elapsed < e.min_elapsed || observed.elapsed > e.max_elapsed {
            problems.push(format!(
                "elapsed: expected {:?}..={:?}, observed {:?}",
                e.min_elapsed, e.max_elapsed, observed.elapsed
            ));
        }
        if let Some(want) = &e.statuses {
            let got = log.statuses();
            if got != *want {
                problems.push(format!("statuses: expected {want:?}, the lab sent {got:?}"));
            }
        }
        if let Some(max) = e.max_in_flight {
            let peak = log.peak_in_flight();
            if peak > max {
                problems.push(format!("in flight: at most {max} allowed, peak was {peak}"));
            }
        }
        for check in &e.checks {
            if let Err(p) = run_check(check, log) {
                problems.push(p);
            }
        }

        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "scenario `{}` ({}):\n  - {}\nrequest log:\n{}",
                self.name,
                self.description,
                problems.join("\n  - "),
                log.render()
            ))
        }
    }
}

fn run_check(check: &LogCheck, log: &[LogEntry]) -> Result<(), String> {
    let at = |i: usize| {
        log.get(i)
            .ok_or_else(|| format!("{check:?}: there is no request #{i}"))
    };
    match check {
        LogCheck::StatusAt { request, status } => {
            let got = at(*request)?.status;
            if got != Some(*status) {
                return Err(format!(
                    "request #{request}: expected status {status}, got {got:?}"
                ));
            }
        }
        LogCheck::QueryHas { request, param } => {
            if !at(*request)?.has_query_param(param) {
                return Err(format!(
                    "request #{request}: expected query parameter {param}"
                ));
            }
        }
        LogCheck::QueryLacksFrom { from, param } => {
            for (i, entry) in log.iter().enumerate().skip(*from) {
                if entry.has_query_param(param) {
                    return Err(format!(
                        "request #{i}: must not carry query parameter {param}"
                    ));
                }
            }
        }
        LogCheck::GapAtLeast { after, at_least } => {
            let gap = at(*after + 1)?
                .arrived
                .saturating_duration_since(at(*after)?.arrived);
            if gap < *at_least {
                return Err(format!(
                    "request #{} came {gap:?} after #{after}, expected at least {at_least:?}",
                    after + 1
                ));
            }
        }
        LogCheck::ArrivalsWithin { window, max } => {
            let most = log.max_arrivals_within(*window);
            if most > *max {
                return Err(format!(
                    "{most} requests arrived within {window:?}, at most {max} allowed"
                ));
            }
        }
    }
    Ok(())
}
