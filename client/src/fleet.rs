//! The seam for a fleet-wide pace (SPEC §4.3): many processes share one
//! quota through a store such as Redis, without this crate depending on it.
//!
//! A [`Fleet`] (e.g. `polite_redis::RedisFleet`) hands each pace key a
//! [`FleetPace`] and, optionally, a [`FleetBudget`]. Both answer at once
//! from state the fleet keeps in the process (a lease of permits, the last
//! known refusal instant, a view of the shared retry budget) and do their
//! network IO elsewhere, so the machines keep seeing a synchronous
//! [`Pace`](polite_core::Pace). When the fleet cannot answer
//! ([`FleetGrant::Unavailable`]) the [`ClientPace`](crate::ClientPace)
//! paces locally with the quota divided by [`Fleet::size`], and the fleet
//! says so once through [`Fleet::take_notice`], which the client hands to
//! its observer.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use polite_core::Notice;
use polite_core::adaptive::Answered;
use polite_core::budget::{RetryBucket, RetryBudget};
use polite_core::pace::PaceLimit;
use polite_core::ratelimit::RateLimitInfo;

use crate::config::Throttle;
use crate::paces::PaceKey;

/// Many processes sharing one pace per key: the pace, cool-down, learnt
/// quota, adaptive rate and retry budget live in a shared store.
///
/// ```
/// use polite_client::{Fleet, FleetGrant, FleetPace, FleetTerms, PaceKey};
/// use polite_core::{Notice, adaptive::Answered, ratelimit::RateLimitInfo};
/// use std::time::Instant;
///
/// /// A fleet whose store never answers: every pace falls back to local.
/// #[derive(Debug)]
/// struct Down;
/// #[derive(Debug)]
/// struct DownPace;
/// impl FleetPace for DownPace {
///     fn acquire(&mut self, _: Instant) -> FleetGrant { FleetGrant::Unavailable }
///     fn cool_down(&mut self, _: Instant) {}
///     fn observe(&mut self, _: Instant, _: &RateLimitInfo) {}
///     fn on_answer(&mut self, _: Answered) {}
/// }
/// impl Fleet for Down {
///     fn join(&self, _: &PaceKey, _: &FleetTerms) -> Box<dyn FleetPace> { Box::new(DownPace) }
///     fn size(&self) -> u32 { 4 }
///     fn take_notice(&self) -> Option<Notice> { None }
/// }
/// let mut p = Down.join(&PaceKey::new("k"), &FleetTerms::default());
/// assert_eq!(p.acquire(Instant::now()), FleetGrant::Unavailable);
/// ```
pub trait Fleet: Send + Sync + fmt::Debug {
    /// The shared pace of `key` for a client configured with `terms`.
    fn join(&self, key: &PaceKey, terms: &FleetTerms) -> Box<dyn FleetPace>;

    /// The shared retry budget of `key`, starting from `bucket` (capacity
    /// and costs); `None` (the default): the budget stays per process.
    fn budget(&self, key: &PaceKey, bucket: RetryBucket) -> Option<Box<dyn FleetBudget>> {
        let _ = (key, bucket);
        None
    }

    /// How many processes share the quota: when the store does not answer,
    /// each paces locally at `1 / size` of the quota (at least 1).
    fn size(&self) -> u32;

    /// A one-time notice for the user (the store stopped answering, or
    /// answers again), once per change.
    fn take_notice(&self) -> Option<Notice>;
}

/// What a client asks of a key's shared pace: its configuration.
///
/// ```
/// let t = polite_client::FleetTerms::default();
/// assert_eq!((t.throttle, t.learn_quota, t.adaptive), (None, None, false));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetTerms {
    /// The configured throttle ([`Config::throttle`](crate::Config::throttle)), for the whole fleet.
    pub throttle: Option<Throttle>,
    /// Learn a quota from `RateLimit-Policy`, up to this many per window.
    pub learn_quota: Option<u32>,
    /// Adapt the fleet's send rate to rate-limited answers.
    pub adaptive: bool,
}

impl FleetTerms {
    /// The terms of a client configured with these settings.
    ///
    /// ```
    /// use polite_client::{FleetTerms, Throttle};
    /// let t = FleetTerms::new(Some(Throttle::per_second(5)), None, true);
    /// assert!(t.adaptive);
    /// ```
    #[must_use]
    pub const fn new(throttle: Option<Throttle>, learn_quota: Option<u32>, adaptive: bool) -> Self {
        FleetTerms {
            throttle,
            learn_quota,
            adaptive,
        }
    }
}

/// A shared pace's answer to one ask.
///
/// ```
/// use polite_client::FleetGrant;
/// assert_ne!(FleetGrant::Granted, FleetGrant::Unavailable);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FleetGrant {
    /// Send now (the permit is counted fleet-wide).
    Granted,
    /// No grant before `until` (`> now`), because of `by`.
    Refused {
        /// The earliest instant a grant may come.
        until: Instant,
        /// Which limit refused.
        by: PaceLimit,
    },
    /// The store does not answer: pace locally.
    Unavailable,
}

/// One key's shared pace, as a process sees it. Every method answers at
/// once (no IO, no blocking beyond a short lock): the fleet does its IO
/// elsewhere.
pub trait FleetPace: Send + fmt::Debug {
    /// Asks for one send at `now`. A [`FleetGrant::Refused`] promises no
    /// grant before its instant.
    fn acquire(&mut self, now: Instant) -> FleetGrant;
    /// Every process refuses until `until` (a server said so).
    fn cool_down(&mut self, until: Instant);
    /// What an answer said about the server's quota.
    fn observe(&mut self, now: Instant, info: &RateLimitInfo);
    /// An answer to a send this pace granted (see [`Pace::on_answer`](polite_core::Pace::on_answer)).
    fn on_answer(&mut self, answer: Answered);
}

/// One key's shared retry budget, as a process sees it: a [`RetryBudget`]
/// answering from a local view of the shared bucket.
pub trait FleetBudget: RetryBudget + Send + fmt::Debug {
    /// The tokens left, as this process last saw them.
    fn tokens(&self) -> u32;
}

/// A [`Fleet`] to put in [`Config::fleet`](crate::Config::fleet): a shared
/// handle, equal to its clones.
///
/// ```
/// # use polite_client::{Fleet, FleetGrant, FleetPace, FleetTerms, PaceKey, SharedFleet};
/// # use polite_core::{adaptive::Answered, ratelimit::RateLimitInfo};
/// # use std::time::Instant;
/// // A fleet whose store never answers: every process paces locally.
/// # #[derive(Debug)] struct Down;
/// # impl FleetPace for Down {
/// #     fn acquire(&mut self, _: Instant) -> FleetGrant { FleetGrant::Unavailable }
/// #     fn cool_down(&mut self, _: Instant) {}
/// #     fn observe(&mut self, _: Instant, _: &RateLimitInfo) {}
/// #     fn on_answer(&mut self, _: Answered) {}
/// # }
/// # impl Fleet for Down {
/// #     fn join(&self, _: &PaceKey, _: &FleetTerms) -> Box<dyn FleetPace> { Box::new(Down) }
/// #     fn size(&self) -> u32 { 2 }
/// #     fn take_notice(&self) -> Option<polite_core::Notice> { None }
/// # }
/// let fleet = SharedFleet::new(Down);
/// assert_eq!(fleet.clone(), fleet);
/// assert_eq!(fleet.size(), 2);
/// let key = PaceKey::new("https://api.example.com");
/// let mut pace = fleet.join(&key, &FleetTerms::new(None, None, false));
/// assert_eq!(pace.acquire(Instant::now()), FleetGrant::Unavailable);
/// ```
#[derive(Clone, Debug)]
pub struct SharedFleet(Arc<dyn Fleet>);

impl SharedFleet {
    /// Shares `fleet`.
    #[must_use]
    pub fn new(fleet: impl Fleet + 'static) -> SharedFleet {
        SharedFleet(Arc::new(fleet))
    }

    /// Shares a fleet already in an `Arc`.
    #[must_use]
    pub fn from_arc(fleet: Arc<dyn Fleet>) -> SharedFleet {
        SharedFleet(fleet)
    }
}

impl std::ops::Deref for SharedFleet {
    type Target = dyn Fleet;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl PartialEq for SharedFleet {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedFleet {}
