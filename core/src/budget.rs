//! A retry budget shared across logical requests, so that an outage does
//! not multiply traffic: [`RetryBudget`], the token bucket [`RetryBucket`]
//! (in the style of the AWS SDKs' standard retry quota and gRPC retry
//! throttling), and [`NoBudget`], the default, which never refuses.
//!
//! Per-request budgets ([`MaxRetries`](crate::policy::MaxRetries)) bound what one
//! logical request may do; they do not bound what a thousand of them do
//! together when the server is down: each retries its full share. A shared
//! bucket does: every retry withdraws tokens, every success puts some back,
//! and when the bucket is empty no request retries — each ends with
//! [`Outcome::RetryBudgetExhausted`](crate::Outcome::RetryBudgetExhausted)
//! after its first failure — until successes refill it.
//!
//! The budget is **off by default**: [`RetryMachine::new`](crate::RetryMachine::new)
//! and [`BatchMachine::new`](crate::BatchMachine::new) use [`NoBudget`], a
//! zero-sized type whose calls compile to nothing. Turn it on with
//! [`RetryMachine::with_budget`](crate::RetryMachine::with_budget) /
//! [`BatchMachine::with_budget`](crate::BatchMachine::with_budget), sharing
//! one bucket between machines like a [`Pace`](crate::Pace): `&mut`,
//! `Arc<Mutex<_>>` across tasks and threads, `Rc<RefCell<_>>` on one thread.
//! The [`aws`](crate::aws) profile turns it on with the AWS numbers.
//!
//! Like the throttle, a bucket is **in-process**: separate processes do not
//! share it.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};

use crate::input::{Reply, RetryClass, TransportErrorKind};

/// Something that decides whether a retry may happen at all, across every
/// logical request that shares it.
///
/// A machine calls [`withdraw`](Self::withdraw) once per retry it is about
/// to plan — after its own rules (class budget, `Retry-After`, deadline)
/// allowed it — and [`deposit`](Self::deposit) once when its logical
/// request succeeds. Contract for implementors: never panic, never block
/// for long, read no clock.
///
/// Implemented for [`RetryBucket`], [`NoBudget`], and for shared handles:
/// `&mut B`, `Box<B>`, `Arc<Mutex<B>>` (a poisoned mutex is recovered) and
/// `Rc<RefCell<B>>`.
///
/// ```
/// use polite_core::{Reply, RetryClass};
/// use polite_core::budget::{RetryBucket, RetryBudget};
/// use std::sync::{Arc, Mutex};
/// let shared = Arc::new(Mutex::new(RetryBucket::default())); // 500 tokens
/// let (mut a, mut b) = (Arc::clone(&shared), Arc::clone(&shared));
/// assert_eq!(a.withdraw(RetryClass::ServerError, Reply::Status(503)), Some(14));
/// assert_eq!(b.withdraw(RetryClass::RateLimited, Reply::Status(429)), Some(5));
/// assert_eq!(shared.lock().unwrap().tokens(), 481);
/// a.deposit(Some(14)); // a's request then succeeded: its last retry's cost comes back
/// assert_eq!(shared.lock().unwrap().tokens(), 495);
/// ```
pub trait RetryBudget {
    /// Takes the price of one retry after `last` (of class `class`):
    /// `Some(cost)` when granted (the cost is taken; it may be 0), `None`
    /// when refused (nothing is taken; the request stops with
    /// `RetryBudgetExhausted`).
    ///
    /// ```
    /// use polite_core::{Reply, RetryClass};
    /// use polite_core::budget::{RetryBucket, RetryBudget, RetryCosts};
    /// let mut b = RetryBucket::new(10, RetryCosts::default());
    /// assert_eq!(b.withdraw(RetryClass::ServerError, Reply::Status(500)), None); // costs 14
    /// assert_eq!(b.withdraw(RetryClass::RateLimited, Reply::Status(429)), Some(5));
    /// ```
    fn withdraw(&mut self, class: RetryClass, last: Reply) -> Option<u32>;

    /// A logical request succeeded. `last_cost` is what its latest retry
    /// withdrew, or `None` when it succeeded at its first send.
    ///
    /// ```
    /// use polite_core::budget::{RetryBucket, RetryBudget, RetryCosts};
    /// let mut b = RetryBucket::new(500, RetryCosts::default()).with_tokens(100);
    /// b.deposit(None); // success at the first try: + 1
    /// b.deposit(Some(14)); // success after a retry that cost 14: + 14
    /// assert_eq!(b.tokens(), 115);
    /// ```
    fn deposit(&mut self, last_cost: Option<u32>);
}

/// No budget: every retry is granted at no cost, deposits are dropped. The
/// default of every machine; zero-sized, so it costs nothing.
///
/// ```
/// use polite_core::{Reply, RetryClass};
/// use polite_core::budget::{NoBudget, RetryBudget};
/// let mut b = NoBudget;
/// assert_eq!(b.withdraw(RetryClass::ServerError, Reply::Status(503)), Some(0));
/// b.deposit(None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NoBudget;

impl RetryBudget for NoBudget {
    #[inline(always)]
    fn withdraw(&mut self, _class: RetryClass, _last: Reply) -> Option<u32> {
        Some(0)
    }
    #[inline(always)]
    fn deposit(&mut self, _last_cost: Option<u32>) {}
}

/// What each kind of retry costs a [`RetryBucket`], and what a first-try
/// success gives back.
///
/// The default is the AWS SDKs' standard retry mode (2026 revision): a
/// throttling retry costs 5, any other 14, a first-try success adds 1.
/// (The earlier AWS numbers — 5 for every retry, 10 for a timeout — are
/// [`aws::legacy_bucket`](crate::aws::legacy_bucket).)
///
/// ```
/// use polite_core::{Reply, RetryClass, TransportErrorKind};
/// use polite_core::budget::RetryCosts;
/// let c = RetryCosts::default();
/// assert_eq!(c.of(RetryClass::RateLimited, Reply::Status(429)), 5);
/// assert_eq!(c.of(RetryClass::ServerError, Reply::Status(503)), 14);
/// assert_eq!(c.of(RetryClass::Transport, Reply::Transport(TransportErrorKind::Timeout)), 14);
/// assert_eq!(c.first_try_success, 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RetryCosts {
    /// A retry after a rate-limited (throttling) answer. Default 5.
    pub rate_limited: u32,
    /// A retry after a server error (a transient failure). Default 14.
    pub server_error: u32,
    /// A retry after a transport error other than a timeout. Default 14.
    pub transport: u32,
    /// A retry after a transport timeout ([`TransportErrorKind::Timeout`]).
    /// Default 14.
    pub timeout: u32,
    /// Added when a logical request succeeds at its first send (a request
    /// that succeeds after retries gives back its last retry's cost
    /// instead). Default 1.
    pub first_try_success: u32,
}

impl Default for RetryCosts {
    fn default() -> Self {
        RetryCosts {
            rate_limited: 5,
            server_error: 14,
            transport: 14,
            timeout: 14,
            first_try_success: 1,
        }
    }
}

impl RetryCosts {
    /// The cost of a retry after `last`, of class `class`.
    ///
    /// ```
    /// use polite_core::{Reply, RetryClass, TransportErrorKind};
    /// use polite_core::budget::RetryCosts;
    /// let c = RetryCosts { timeout: 10, ..RetryCosts::default() };
    /// assert_eq!(c.of(RetryClass::Transport, Reply::Transport(TransportErrorKind::Timeout)), 10);
    /// assert_eq!(c.of(RetryClass::Transport, Reply::Transport(TransportErrorKind::Reset)), 14);
    /// ```
    #[must_use]
    #[inline]
    pub const fn of(&self, class: RetryClass, last: Reply) -> u32 {
        match (class, last) {
            (_, Reply::Transport(TransportErrorKind::Timeout)) => self.timeout,
            (RetryClass::RateLimited, _) => self.rate_limited,
            (RetryClass::ServerError, _) => self.server_error,
            (RetryClass::Transport, _) => self.transport,
        }
    }
}

/// A token bucket of retries shared by many logical requests (AWS
/// "retry quota", gRPC "retry throttling").
///
/// * Starts full, at `capacity` tokens (or at
///   [`with_tokens`](Self::with_tokens)).
/// * A retry withdraws its cost ([`RetryCosts::of`]) if that many tokens
///   are left; otherwise it is refused and nothing is taken.
/// * A success deposits the cost of the request's last retry, or
///   [`RetryCosts::first_try_success`] when it needed none.
/// * Tokens never go below zero nor above `capacity` (property-tested).
///
/// Time plays no part: the bucket refills only through successes, so a
/// server that is down for good drains it and then sees one attempt per
/// logical request.
///
/// ```
/// use polite_core::{Reply, RetryClass};
/// use polite_core::budget::{RetryBucket, RetryBudget, RetryCosts};
/// let mut bucket = RetryBucket::new(30, RetryCosts::default());
/// assert_eq!(bucket.withdraw(RetryClass::ServerError, Reply::Status(500)), Some(14)); // 16 left
/// assert_eq!(bucket.withdraw(RetryClass::ServerError, Reply::Status(502)), Some(14)); // 2 left
/// assert_eq!(bucket.withdraw(RetryClass::ServerError, Reply::Status(503)), None);     // refused
/// bucket.deposit(Some(14)); // that request succeeded after all
/// assert_eq!(bucket.tokens(), 16);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RetryBucket {
    capacity: u32,
    tokens: u32,
    costs: RetryCosts,
}

impl Default for RetryBucket {
    /// 500 tokens, the default costs (the AWS standard numbers).
    fn default() -> Self {
        RetryBucket::new(500, RetryCosts::default())
    }
}

impl RetryBucket {
    /// A full bucket of `capacity` tokens with these costs. A capacity of 0
    /// allows no retry at all.
    ///
    /// ```
    /// use polite_core::budget::{RetryBucket, RetryCosts};
    /// let b = RetryBucket::new(500, RetryCosts::default());
    /// assert_eq!((b.tokens(), b.capacity()), (500, 500));
    /// ```
    #[must_use]
    pub const fn new(capacity: u32, costs: RetryCosts) -> RetryBucket {
        RetryBucket {
            capacity,
            tokens: capacity,
            costs,
        }
    }

    /// The same bucket holding `tokens` now (at most its capacity).
    ///
    /// ```
    /// use polite_core::budget::RetryBucket;
    /// assert_eq!(RetryBucket::default().with_tokens(7).tokens(), 7);
    /// assert_eq!(RetryBucket::default().with_tokens(9999).tokens(), 500);
    /// ```
    #[must_use]
    pub const fn with_tokens(mut self, tokens: u32) -> RetryBucket {
        self.tokens = if tokens < self.capacity {
            tokens
        } else {
            self.capacity
        };
        self
    }

    /// Tokens left.
    ///
    /// ```
    /// use polite_core::budget::RetryBucket;
    /// assert_eq!(RetryBucket::default().tokens(), 500);
    /// ```
    #[must_use]
    pub const fn tokens(&self) -> u32 {
        self.tokens
    }

    /// The most tokens the bucket holds.
    ///
    /// ```
    /// use polite_core::budget::RetryBucket;
    /// assert_eq!(RetryBucket::default().capacity(), 500);
    /// ```
    #[must_use]
    pub const fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The costs.
    ///
    /// ```
    /// use polite_core::budget::{RetryBucket, RetryCosts};
    /// assert_eq!(*RetryBucket::default().costs(), RetryCosts::default());
    /// ```
    #[must_use]
    pub const fn costs(&self) -> &RetryCosts {
        &self.costs
    }

    /// Takes `cost` tokens if there are that many (`true`), else takes
    /// nothing (`false`).
    ///
    /// ```
    /// use polite_core::budget::RetryBucket;
    /// let mut b = RetryBucket::default().with_tokens(10);
    /// assert!(b.take(10));
    /// assert!(!b.take(1));
    /// assert_eq!(b.tokens(), 0);
    /// ```
    pub const fn take(&mut self, cost: u32) -> bool {
        if self.tokens >= cost {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }

    /// Adds `tokens`, up to the capacity.
    ///
    /// ```
    /// use polite_core::budget::RetryBucket;
    /// let mut b = RetryBucket::default().with_tokens(498);
    /// b.give(5);
    /// assert_eq!(b.tokens(), 500);
    /// ```
    pub const fn give(&mut self, tokens: u32) {
        let t = self.tokens.saturating_add(tokens);
        self.tokens = if t < self.capacity { t } else { self.capacity };
    }
}

impl RetryBudget for RetryBucket {
    #[inline]
    fn withdraw(&mut self, class: RetryClass, last: Reply) -> Option<u32> {
        let cost = self.costs.of(class, last);
        self.take(cost).then_some(cost)
    }

    #[inline]
    fn deposit(&mut self, last_cost: Option<u32>) {
        self.give(last_cost.unwrap_or(self.costs.first_try_success));
    }
}

impl<B: RetryBudget + ?Sized> RetryBudget for &mut B {
    #[inline]
    fn withdraw(&mut self, class: RetryClass, last: Reply) -> Option<u32> {
        (**self).withdraw(class, last)
    }
    #[inline]
    fn deposit(&mut self, last_cost: Option<u32>) {
        (**self).deposit(last_cost);
    }
}

impl<B: RetryBudget + ?Sized> RetryBudget for Box<B> {
    #[inline]
    fn withdraw(&mut self, class: RetryClass, last: Reply) -> Option<u32> {
        (**self).withdraw(class, last)
    }
    #[inline]
    fn deposit(&mut self, last_cost: Option<u32>) {
        (**self).deposit(last_cost);
    }
}

/// Shared across tasks and threads; the lock is held only for the call. A
/// poisoned mutex is recovered (the bucket is two counters, valid after any
/// call).
impl<B: RetryBudget + ?Sized> RetryBudget for Arc<Mutex<B>> {
    #[inline]
    fn withdraw(&mut self, class: RetryClass, last: Reply) -> Option<u32> {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .withdraw(class, last)
    }
    #[inline]
    fn deposit(&mut self, last_cost: Option<u32>) {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .deposit(last_cost);
    }
}

/// Shared between machines driven on one thread.
impl<B: RetryBudget + ?Sized> RetryBudget for Rc<RefCell<B>> {
    #[inline]
    fn withdraw(&mut self, class: RetryClass, last: Reply) -> Option<u32> {
        self.borrow_mut().withdraw(class, last)
    }
    #[inline]
    fn deposit(&mut self, last_cost: Option<u32>) {
        self.borrow_mut().deposit(last_cost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_unit_cases_from_botocore() {
        // RetryQuota(50): acquire 5 -> 45; release 5 -> 50; release 10 from
        // 45 -> 50 (capped); acquire 49 -> 1, acquire 10 fails and leaves 1.
        let mut b = RetryBucket::new(50, RetryCosts::default());
        assert!(b.take(5));
        assert_eq!(b.tokens(), 45);
        b.give(5);
        assert_eq!(b.tokens(), 50);
        assert!(b.take(5));
        b.give(10);
        assert_eq!(b.tokens(), 50);
        assert!(b.take(49));
        assert!(!b.take(10));
        assert_eq!(b.tokens(), 1);
    }

    #[test]
    fn shared_handles_share_one_bucket() {
        let rc = Rc::new(RefCell::new(RetryBucket::new(20, RetryCosts::default())));
        let (mut a, mut b) = (Rc::clone(&rc), Rc::clone(&rc));
        let e = Reply::Status(500);
        assert_eq!(a.withdraw(RetryClass::ServerError, e), Some(14));
        assert_eq!(b.withdraw(RetryClass::ServerError, e), None);
        b.deposit(None);
        assert_eq!(rc.borrow().tokens(), 7);
        let mut owned = RetryBucket::new(5, RetryCosts::default());
        let mut by_ref = &mut owned;
        assert_eq!(
            RetryBudget::withdraw(&mut by_ref, RetryClass::RateLimited, e),
            Some(5)
        );
        let mut boxed: Box<dyn RetryBudget> = Box::new(RetryBucket::new(4, RetryCosts::default()));
        assert_eq!(boxed.withdraw(RetryClass::RateLimited, e), None);
    }

    #[test]
    fn poisoned_mutex_is_recovered() {
        let shared = Arc::new(Mutex::new(RetryBucket::default()));
        let poisoner = Arc::clone(&shared);
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.lock().unwrap();
            panic!("poison the lock");
        })
        .join();
        let mut handle = Arc::clone(&shared);
        assert_eq!(
            handle.withdraw(RetryClass::RateLimited, Reply::Status(429)),
            Some(5)
        );
        handle.deposit(Some(5));
        assert_eq!(
            shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .tokens(),
            500
        );
    }
}
