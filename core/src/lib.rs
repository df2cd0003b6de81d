//! # polite-core
//!
//! Sans-IO state machines that let a program retry HTTP calls and wait for
//! remote results **without hammering the server and without ever overrunning
//! the caller's time budget**.
//!
//! The machines never read a clock, sleep, open a socket or draw entropy on
//! their own. They take [`Event`]s (an answer arrived, a transport error
//! happened, time passed, the caller cancelled) with the current time, and
//! answer [`Action`]s (send now, sleep until an instant, stop with an
//! [`Outcome`]). Adapters (`polite-tokio`, `polite-async-io`,
//! `polite-blocking`) do the real IO; tests drive the machines with virtual
//! time (the [`polite-testing`](https://docs.rs/polite-testing) crate).
//!
//! ## The promise
//!
//! * **One budget, never overrun.** The deadline is fixed when a machine is
//!   created (`now + timeout`). No `SleepUntil` is ever after it; every send
//!   carries `abort_at = deadline + cushion` so the adapter can abort a
//!   hanging attempt; an answer at or after the deadline is discarded
//!   (`TimedOut`, even a success); when the next permitted send would fall at
//!   or after the deadline the machine stops *at once* with
//!   `TimedOut { needed }` instead of sleeping for nothing.
//! * **Never before the server's time.** The delay used is
//!   `max(backoff, Retry-After)`; a server that asks for longer than the
//!   automatic wait cap ends the request with `RateLimited { retry_at }` —
//!   it is never truncated and resent early.
//! * **Never resend a non-replayable request** (a POST without idempotency
//!   key, or a body that cannot be produced again).
//! * **Exactly one outcome** per logical request; `Stop` is sticky.
//! * **Cancel ends a wait at once**: after [`Event::Cancel`] the next action
//!   is `Stop(Cancelled)`. Nothing promises that a request already in flight
//!   did not reach the server.
//!
//! ## The run loop
//!
//! 1. Create a machine with a policy, a request, a random source and `now`.
//! 2. Call `poll_action()` until it answers `SleepUntil` or `Stop`:
//!    perform each `Send` (start the request, abort it at `abort_at`).
//! 3. Wait until the instant, an answer, or a cancel — whichever is first.
//! 4. Feed it back with `handle(now, event)` using your monotonic clock, and
//!    go to 2. On `Stop(outcome)`, hand back the last answer per the outcome.
//!
//! Right before each send, check cancellation again (a cancel may have raced
//! the end of a sleep). The `drive` loop in the adapters does all of this
//! once for every machine; here it is by hand against a fake server:
//!
//! ```
//! use polite_core::{Action, Event, Method, Outcome, RequestId, RequestInfo, Response,
//!                   RetryMachine, RetryPolicy};
//! use polite_core::SplitMix64;
//! use std::time::{Duration, Instant, UNIX_EPOCH};
//!
//! // A fake server: 503, then 429 with Retry-After: 1, then 200.
//! let mut answers = [(503, None), (429, Some(&b"1"[..])), (200, None)].into_iter();
//!
//! let mut now = Instant::now(); // a real adapter reads its monotonic clock
//! let mut machine = RetryMachine::new(
//!     RetryPolicy::default(),
//!     RequestInfo::new(RequestId(1), Method::Get),
//!     SplitMix64::new(7), // any rand_core::Rng; seeded here for reproducibility
//!     now,
//!     Duration::from_secs(10),
//! ).unwrap();
//!
//! let outcome = loop {
//!     match machine.poll_action() {
//!         Action::Send(plan) => {
//!             // "Send" and get the answer 20 ms later.
//!             let (status, retry_after) = answers.next().unwrap();
//!             now += Duration::from_millis(20);
//!             let mut r = Response::new(plan.id, status, UNIX_EPOCH);
//!             r.retry_after = retry_after;
//!             machine.handle(now, Event::Response(r));
//!         }
//!         Action::SleepUntil(t) => {
//!             now = now.max(t); // a real adapter sleeps, racing answers and cancel
//!             machine.handle(now, Event::Tick);
//!         }
//!         Action::Stop(outcome) => break outcome,
//!     }
//! };
//! assert_eq!(outcome, Outcome::Succeeded { status: 200 });
//! ```
//!
//! ## Where things are
//!
//! The root holds what a reader needs first: the machines
//! ([`RetryMachine`], [`PollMachine`], [`BatchMachine`], [`Paced`]) and
//! their policies ([`RetryPolicy`], [`PollPolicy`], [`BatchPolicy`]); the
//! [`Machine`] interface, with what goes in ([`Event`], [`Response`],
//! [`SendId`]) and what comes out ([`Action`], [`SendPlan`], [`Notice`],
//! [`Outcome`] with its [`Reply`], [`RetryClass`] and
//! [`TransportErrorKind`]); the request ([`RequestInfo`], [`RequestId`],
//! [`Method`]); pacing ([`Pace`], [`RateThrottle`]); [`SplitMix64`] and
//! [`deadline_after`]. The rest is in modules named for what they hold:
//!
//! | Module | What it holds |
//! |---|---|
//! | [`policy`] | what policies are made of: [`Backoff`](policy::Backoff), [`Jitter`](policy::Jitter), [`MaxRetries`](policy::MaxRetries), [`StatusSet`](policy::StatusSet), [`RetryAfterLimits`](policy::RetryAfterLimits), and [`PolicyError`](policy::PolicyError) |
//! | [`poll`] | the words of a job wait: [`JobReport`](poll::JobReport), [`TerminalStates`](poll::TerminalStates), [`StateName`](poll::StateName), [`PollMode`](poll::PollMode) |
//! | [`pace`] | [`Unpaced`](pace::Unpaced), and [`PaceLimit`](pace::PaceLimit) (which limit starved a request) |
//! | [`budget`] | retry budgets shared by many machines: [`RetryBudget`](budget::RetryBudget), [`RetryBucket`](budget::RetryBucket), [`RetryCosts`](budget::RetryCosts), [`NoBudget`](budget::NoBudget) |
//! | [`record`] | one [`AttemptRecord`](record::AttemptRecord) per attempt, for logs and traces |
//! | [`retry_after`] | reading `Retry-After` (delta-seconds and HTTP-dates) |
//! | [`ratelimit`] | reading `RateLimit`, `RateLimit-Policy` and `X-RateLimit-*` |
//! | [`adaptive`] | the AWS SDKs' adaptive rate (CUBIC), behind [`RateThrottle::adaptive`] |
//! | [`backoff`] | the backoff and jitter arithmetic |
//! | [`aws`] | policies and budgets that retry as the AWS SDKs do |
//! | [`drive`] | the one drive loop, over an adapter's [`Io`](drive::Io) |
//!
//! ## Time
//!
//! `std::time::Instant` values are passed in; the machines only compare and
//! add them. Time going backwards is clamped to the latest `now` seen. A wall
//! clock ([`std::time::SystemTime`]) is used only to turn an HTTP-date
//! `Retry-After` into a delay, and only when the answer has no valid `Date`
//! header (the `Date` header cancels clock skew). `core/clippy.toml` forbids
//! `Instant::now`, `SystemTime::now` and `thread::sleep` in this crate.
//!
//! ## Randomness
//!
//! Jitter comes from the `rand_core::Rng` the machine owns. A seeded
//! generator (e.g. [`SplitMix64`]) makes every decision
//! reproducible. The arithmetic maps a `u64` onto the delay range with a
//! widening multiply; the crate does not depend on `rand`.
//!
//! ## Errors versus panics
//!
//! `handle` and `poll_action` never fail: network results are data in
//! `Stop(Outcome)`, and unexpected input (a late answer for an old attempt,
//! an event after the end, garbage headers) is ignored or recorded. The only
//! error is an invalid policy at construction ([`PolicyError`](policy::PolicyError), naming the
//! field). Nothing here panics on input.
//!
//! ## Pacing many requests
//!
//! Concurrency and rate are different limits, and both are needed (SPEC §4).
//! [`RateThrottle`] is a sliding-window log (default 50 sends per 60 s, a
//! 50 ms margin on refusals) with a shared cool-down after a 429; the
//! [`Pace`] trait lets several machines share one (`Arc<Mutex<_>>` across
//! tasks, `Rc<RefCell<_>>` on one thread). [`Paced`] passes every send of a
//! single machine through a pace — retries are requests too.
//! [`BatchMachine`] runs N logical requests under one deadline with a
//! concurrency limit and a pace, restarts items that end `RateLimited`
//! within that deadline (bounded, without refilling their budgets), and
//! ends with [`Outcome::BatchDone`], `TimedOut` or `Cancelled`; each item's
//! outcome is in [`BatchMachine::outcomes`]. **The throttle is in-process:
//! separate processes do not coordinate through it.**
//!
//! ## When the server gives no hints
//!
//! Most rate limiters answer a bare 429 (SPEC §4.1). A rate-limited answer
//! — by the policy's class or a classifier's, never a fixed status — cools
//! down everything sharing the pace until the server's `Retry-After`, or
//! without one until the refused request's own backoff ends; and
//! [`RateThrottle::adaptive`] adds the AWS SDKs' adaptive rate
//! ([`adaptive::AdaptiveRate`]: cut to 0.7 × the measured send rate on
//! each throttle, regrown along a CUBIC curve) under the configured window,
//! off until the first throttle and replaced by a learnt quota. When a pace
//! cannot grant a send before the deadline, the machine stops at once with
//! [`Outcome::Starved`]`{ until, by }`, naming the [`PaceLimit`](pace::PaceLimit) — starving
//! is not timing out.
//!
//! ## Server-informed pacing and a shared retry budget
//!
//! * **Quota headers.** [`Paced`] and [`BatchMachine`] read each answer's
//!   IETF `RateLimit` / `RateLimit-Policy` fields (and, on request,
//!   `X-RateLimit-*`; see [`ratelimit`]) and hand them to the pace with
//!   [`Pace::observe`]: "no quota left for 30 s" pauses every machine
//!   sharing the pace, and a [`RateThrottle::learning`] throttle sizes
//!   itself to the advertised quota — a client never told the quota stops
//!   earning 429s after the first answer that carries it.
//! * **Retry budget.** A [`RetryBucket`](budget::RetryBucket) shared by many machines
//!   ([`RetryMachine::with_budget`], [`BatchMachine::with_budget`]) caps
//!   retry storms across logical requests: every retry withdraws tokens,
//!   successes return them, and when it is empty nobody retries
//!   ([`Outcome::RetryBudgetExhausted`]). Off by default ([`NoBudget`](budget::NoBudget)).
//! * **AWS profile.** [`aws`] holds policies and buckets that behave like
//!   the AWS SDKs' standard retry mode, checked against their conformance
//!   scenarios.
//!
//! ## Testing your policies
//!
//! The test toolkit is its own crate, [`polite-testing`](https://docs.rs/polite-testing)
//! (a dev-dependency, as `tokio-test` is to tokio): a virtual-time
//! simulator that runs any [`Machine`] through the same [`drive`] loop as
//! the adapters, against a scripted server; the invariant checkers polite's
//! own tests use (no sleep past the deadline, budgets, `Retry-After`,
//! replayability, cancel, one outcome); machine-independent event scripts
//! with an exhaustive explorer; proptest strategies and fuzz decoders.
//!
//! ## Choices where SPEC.md is silent
//!
//! * Statuses `100..=399` are successes; statuses outside `100..=599` are
//!   final (`NotRetryable`).
//! * A `Retry-After` over the automatic wait cap ends the request with
//!   `RateLimited` whatever the class (a 503 too), so the caller decides.
//! * A `Retry-After` below the minimum (default 1 s; `0` or a past date) is
//!   raised to it; the record says `Clamp`.
//! * Transport errors are retried only for replayable requests, even a
//!   refused connection: the machine does not guess what reached the server.
//! * While a send is in flight the machine answers `SleepUntil(deadline)`;
//!   at the deadline it stops with `TimedOut` and the adapter drops the
//!   attempt. An adapter that cannot interrupt an attempt is still bounded by
//!   `abort_at`.
//! * `Retry-After` delta-seconds of any length are valid: leading zeros are
//!   digits, and a value too large for 64 bits saturates (so it exceeds the
//!   cap and ends the request `RateLimited`); a leap second (`23:59:60`) is
//!   a valid HTTP-date, in `Retry-After` and in `Date`. A server instant too
//!   far to represent is taken as a century away: `RateLimited { retry_at }`
//!   then names that instant (`None` stays "the server named no time", which
//!   a batch may restart after a backoff).
//! * [`PollMachine`] (waiting for a remote job) lists its own choices on its
//!   type docs: it uses the budget to its end — under one whole second left
//!   for a long poll it sends a final plain poll (a `waitSeconds=0` long
//!   poll would be a busy loop), and when the schedule's next poll would
//!   come back after the deadline it polls once at the last useful instant,
//!   `deadline - max(2 × latency, 10 ms)`; it honours `Retry-After` on every
//!   answer it acts on, the rejection of the wait parameter included; retry
//!   budgets bound *consecutive* failed polls (they reset after every proper
//!   answer), a success without a job report ends with `NotRetryable`, and
//!   long polls that come back early are spaced at least 1 s apart.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

// The layers point one way: what comes in (input.rs) <- how a machine ends
// and what it answers (outcome.rs, output.rs) <- what policies, budgets,
// records and the header parsers say <- the decision kernel (decide.rs: the
// retry rules every machine shares) <- the machines (retry/, poll/, batch/,
// pace/) <- the drive loop (drive.rs). Modules holding root names are
// private (or pub(crate) inside a public module), so that every public
// item has exactly one path.

pub mod adaptive;
pub mod aws;
pub mod backoff;
mod batch;
pub mod budget;
mod decide;
pub mod drive;
mod input;
pub mod item_map;
mod machine;
mod outcome;
mod output;
pub mod pace;
pub mod policy;
pub mod poll;
pub mod ratelimit;
pub mod record;
mod request;
mod retry;
pub mod retry_after;
mod rng;

pub use batch::{BatchMachine, BatchPolicy, BudgetSet};
pub use decide::deadline_after;
pub use input::{Event, Reply, Response, RetryClass, SendId, TransportErrorKind};
pub use machine::Machine;
pub use outcome::Outcome;
pub use output::{Action, Notice, SendPlan};
pub use pace::interface::Pace;
pub use pace::paced::Paced;
pub use pace::set::PaceSet;
pub use pace::throttle::RateThrottle;
pub use policy::retry::RetryPolicy;
pub use poll::machine::PollMachine;
pub use poll::policy::PollPolicy;
pub use rand_core;
pub use request::{Method, RequestId, RequestInfo};
pub use retry::{CheckedRetryPolicy, RetryMachine};
pub use rng::SplitMix64;
