//! # polite-redis
//!
//! A fleet-wide pace for polite (SPEC §4.3): many processes — pods, CI
//! jobs, queue workers — share one server quota through **Redis**. Per pace
//! key (the origin by default, the same [`PaceKey`](polite_client::PaceKey)
//! the client uses, under a prefix of yours) Redis holds:
//!
//! * the **send log** of the window in force (a sorted set of grants
//!   stamped with the server's clock), configured
//!   ([`Config::throttle`](polite_client::Config::throttle), for the whole
//!   fleet) or **learnt** from `RateLimit-Policy`;
//! * the **cool-down** instant (a `Retry-After`, a `RateLimit` pause);
//! * the **adaptive rate** (the AWS SDKs' CUBIC, fleet-wide: a bare 429 seen
//!   by one process slows every process; the fleet's measured send rate is
//!   what is cut);
//! * the **retry budget**'s tokens.
//!
//! Every decision is **one Lua script** ([`Step`], `EVALSHA`, `EVAL` after a
//! restart's `NOSCRIPT`), atomic on the server, so two processes never
//! both take the last slot. Instants are the server's `TIME`; each process
//! maps them onto its monotonic clock with the offset measured on every
//! round trip (the server read its clock at about the trip's midpoint).
//! Keys expire when idle ([`FleetOptions::ttl`]).
//!
//! ## The seam: the core stays sans-IO
//!
//! The machines only ever ask a synchronous [`Pace`](polite_core::Pace).
//! The client's [`ClientPace`](polite_client::ClientPace) asks the
//! [`RedisPace`] first, which answers at once from this process's
//! **lease** — permits Redis granted, each usable until its lease ends
//! ([`FleetOptions::lease`]) — and leaves the talking to one **worker
//! thread** per [`RedisFleet`], on redis-rs's synchronous connection with
//! connect, read and write timeouts. So nothing blocks an executor thread,
//! and the same fleet works under tokio, async-io and plain threads.
//!
//! ```text
//!  machines (sans-IO)        this process                               Redis
//!  ──────────────────        ────────────                               ─────
//!  Paced::acquire(now) ──► ClientPace ──► RedisPace.acquire(now)
//!                                          │ a leased permit? ── Granted
//!                                          │ none: wanted += 1, wake ─┐
//!       ◄── Err(now + poll) ───────────────┘                          │
//!                                                                     ▼
//!                                         worker thread ── EVALSHA step.lua ──► TIME; drop expired
//!                                          (one per fleet)   want, returns,      grants; grant ≤ free
//!                                                            cool-down, quota,   slots; cool-down;
//!                                                            answers, budget Δ   CUBIC; budget
//!                                          lease ◄── ids, server time, next ◄──┘
//!  Paced::acquire(now+poll) ──► RedisPace: Granted (or Refused until the
//!                               instant Redis named, mapped to Instant)
//!  429 / Retry-After / RateLimit ──► cool_down / observe / on_answer:
//!                               noted at once, shared by the next step
//!                               (a cool-down, a new quota or a throttle
//!                               wakes the worker at once)
//! ```
//!
//! **Cost**: a round trip leases up to [`FleetOptions::max_lease`] permits
//! (as many as were used since the last one), and answers, returns and
//! budget changes ride along, so a busy process makes at most one round
//! trip per send, usually fewer. So does one the window refuses: a
//! refusal names the instant by which the permits the process wants are
//! free — at least as many as it used in the last hold, its demand per
//! window — up to a lease after the first slot frees (a burst's slots free
//! a few ms apart: asked for one by one, each was refused as often as
//! granted); the sends refused meanwhile wait for that instant without a
//! round trip, and the first ask then leases them all. A window then
//! costs about three round trips: that lease, one for a slot it did not
//! cover, and its answers shared alone while every send waits (they go
//! within [`FleetOptions::flush_every`], as always). A permit is held in
//! the log for the window plus its lease plus a margin, because it may be
//! used up to a lease after its grant: that keeps *every* window of real
//! sends within the limit, at the cost of `lease / window` of the quota (10 % of a 1 s
//! window by default). Unused permits are given back (dropped handles,
//! expired leases) or age out.
//!
//! ## TLS
//!
//! With feature **`tls`** (off by default), `rediss://` URLs connect
//! over TLS: redis-rs's rustls, trusting the system's roots, or only a
//! root of yours with `RedisFleet::with_tls_root`. Without it a
//! `rediss://` URL is refused by [`RedisFleet::new`]. polite never turns
//! TLS on for you.
//!
//! ## Redis Cluster
//!
//! With feature **`cluster`** (off by default), `RedisFleet::cluster`
//! speaks to a Redis Cluster through redis-rs's synchronous cluster
//! connection. A pace key's two Redis keys share the hash tag
//! `{<pace key>}`, so each step is still one atomic script on the one node
//! of its slot; each call is bounded by the fleet's timeout, without
//! redis-rs's own retries. A node down makes the fleet pace locally, as
//! one Redis down does.
//!
//! ## When Redis fails
//!
//! Every call is bounded by [`FleetOptions::timeout`] (connect, read,
//! write), and an ask that Redis has not answered for that long is
//! answered locally: the caller never waits on Redis longer than that, so
//! its deadline (SPEC §1) holds. A failed call (down, slow, restarted) makes
//! every key answer [`FleetGrant::Unavailable`](polite_client::FleetGrant::Unavailable):
//! the [`ClientPace`](polite_client::ClientPace) paces locally with the
//! quota divided by [`FleetOptions::size`], and the client's observer gets
//! [`Notice::FleetUnavailable`](polite_core::Notice::FleetUnavailable)
//! once; the worker tries again every [`FleetOptions::retry_every`] and,
//! when Redis answers, [`Notice::FleetRestored`](polite_core::Notice::FleetRestored).
//! A Redis that answers but refuses the process (a wrong password or user,
//! no permission, a database number it does not have) is a setting to
//! fix, not an outage: the notice is then
//! [`Notice::FleetRefused`](polite_core::Notice::FleetRefused), and the
//! process paces locally the same way meanwhile.
//! A restarted Redis (scripts and data gone) gets the script again.
//! Redis only ever decides *when* a send may go: nothing is sent twice or
//! lost because of it.
//!
//! **No burst at a failover.** Each process keeps the instants of its own
//! recent sends per key (a window and its hold). Falling back, its share
//! counts the sends the fleet granted it just before (else every process
//! would start a fresh local window on top of the fleet's). Coming back,
//! the first step *seeds* the log with the sends made locally meanwhile,
//! as grants made when they were sent; and if the log was lost (Redis
//! restarted empty, the key evicted: the key's epoch, its state's birth
//! instant, changed), with the process's earlier grants too, so the
//! window is whole again before anything more is granted. Permits leased
//! from a lost log are dropped, and their ids are never returned to the
//! new one.
//!
//! ```no_run
//! use polite_client::{Config, SharedFleet, Throttle};
//! use polite_redis::{FleetOptions, RedisFleet};
//! let fleet = RedisFleet::new("redis://127.0.0.1:6379/", FleetOptions {
//!     prefix: "myapp:".into(),
//!     size: 8, // Redis down: each of 8 processes sends 1/8 of the quota
//!     ..FleetOptions::default()
//! })?;
//! let config = Config {
//!     throttle: Some(Throttle::per_second(50)), // 50/s for the whole fleet
//!     fleet: Some(SharedFleet::new(fleet)),
//!     ..Config::default()
//! };
//! let client = polite_blocking::Client::with_config(config);
//! # drop(client);
//! # Ok::<(), polite_redis::FleetError>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod backend;
mod fleet;
mod pace;
mod state;
mod step;
#[cfg(feature = "tls")]
mod tls;
mod worker;

pub use fleet::{FleetError, FleetOptions, RedisFleet};
pub use pace::{RedisBudget, RedisPace};
pub use state::FleetStats;
pub use step::{Step, StepReply};
