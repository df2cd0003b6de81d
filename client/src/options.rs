//! [`CallOptions`]: what one call may change without a new client, carried
//! in the request's extensions (so it passes through middleware and tower
//! stacks untouched).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use polite_core::RetryPolicy;

use crate::paces::PaceKey;

/// Per-call settings, put in the request's extensions: a handler passing
/// down the budget it has left, a call with its own retry rules, a call
/// paced under its own key (a tenant, an account). Unset fields fall back
/// to the client's [`Config`](crate::Config). A batch item may not set its
/// own `timeout`, `retry` or `session` (the batch has one deadline and the
/// client's rules): such an item ends `InvalidRequest` unsent, saying why.
///
/// ```
/// use bytes::Bytes;
/// use polite_client::{CallOptions, PaceKey};
/// use std::time::Duration;
///
/// let mut request = http::Request::get("https://api.example.com/x").body(Bytes::new()).unwrap();
/// request.extensions_mut().insert(
///     CallOptions::new().timeout(Duration::from_millis(800)).pace_key(PaceKey::new("tenant-7")),
/// );
/// assert_eq!(CallOptions::of(&request).timeout, Some(Duration::from_millis(800)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallOptions {
    /// This call's budget instead of [`Config::timeout`](crate::Config::timeout)
    /// (its deadline is fixed when the call starts).
    pub timeout: Option<Duration>,
    /// This call's retry rules instead of [`Config::retry`](crate::Config::retry).
    pub retry: Option<RetryPolicy>,
    /// The pace this call shares, instead of the one its
    /// [`PaceBy`](crate::PaceBy) picks.
    pub pace_key: Option<PaceKey>,
    /// A label of yours on the call's span (`polite.label`), to find it
    /// among your own (the caller's current span is its parent anyway).
    pub label: Option<String>,
    /// The request's body cannot be produced again (SPEC §2): the call
    /// sends it once, and a failure ends
    /// [`Outcome::NotReplayable`](polite_core::Outcome::NotReplayable)
    /// with the answer handed back, never a retry. The integrations set it
    /// for a body they could not buffer (a stream, a body over the replay
    /// limit).
    pub one_shot_body: bool,
    /// The caller's session (SPEC §2.3): the call belongs to its generation
    /// when the call starts, and an answer that arrives after the session
    /// has moved on ([`Session::bump`]: a logout, an account switch) is
    /// dropped, not delivered, even a success: the call ends
    /// [`Outcome::Stale`](polite_core::Outcome::Stale).
    pub session: Option<Session>,
}

impl CallOptions {
    /// No overrides.
    #[must_use]
    pub fn new() -> CallOptions {
        CallOptions::default()
    }

    /// This call's budget.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> CallOptions {
        self.timeout = Some(timeout);
        self
    }

    /// This call's retry rules (checked when the call starts: a policy
    /// that makes no sense is the call's [`Error::Policy`](crate::Error::Policy)).
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> CallOptions {
        self.retry = Some(retry);
        self
    }

    /// The pace this call shares.
    #[must_use]
    pub fn pace_key(mut self, key: PaceKey) -> CallOptions {
        self.pace_key = Some(key);
        self
    }

    /// A label on the call's span.
    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> CallOptions {
        self.label = Some(label.into());
        self
    }

    /// The request's body is sent once: never re-sent, whatever the
    /// method (see [`one_shot_body`](Self::one_shot_body)).
    ///
    /// ```
    /// use polite_client::CallOptions;
    /// assert!(CallOptions::new().sent_once().one_shot_body);
    /// ```
    #[must_use]
    pub fn sent_once(mut self) -> CallOptions {
        self.one_shot_body = true;
        self
    }

    /// The call belongs to `session`'s generation when it starts (see
    /// [`session`](Self::session)).
    #[must_use]
    pub fn session(mut self, session: &Session) -> CallOptions {
        self.session = Some(session.clone());
        self
    }

    /// The options `request` carries (none: the defaults).
    #[must_use]
    pub fn of<B>(request: &http::Request<B>) -> CallOptions {
        request
            .extensions()
            .get::<CallOptions>()
            .cloned()
            .unwrap_or_default()
    }
}

/// Put by polite's integrations (the tower `PoliteLayer` of feature
/// `tower`, polite-tokio's `PoliteMiddleware`) into the extensions of every attempt
/// they send: a polite layer that finds it is inside another polite call,
/// and passes the request straight through to what it wraps — no retries,
/// no pace, no deadline of its own. SPEC §1 and §2: budgets belong to the
/// logical request, so a layer stacked on another must not multiply them
/// (two layers of 3 retries each would make 16 sends), nor start a fresh
/// timeout.
///
/// ```
/// use bytes::Bytes;
/// use polite_client::PoliteAttempt;
///
/// let mut request = http::Request::get("http://127.0.0.1/").body(Bytes::new()).unwrap();
/// assert!(!PoliteAttempt::is_in(request.extensions()));
/// request.extensions_mut().insert(PoliteAttempt);
/// assert!(PoliteAttempt::is_in(request.extensions()));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoliteAttempt;

impl PoliteAttempt {
    /// Whether `extensions` come from an attempt of a polite call.
    #[must_use]
    pub fn is_in(extensions: &http::Extensions) -> bool {
        extensions.get::<PoliteAttempt>().is_some()
    }
}

/// A caller's session generation (SPEC §2.3), shared by the calls made
/// under it: [`bump`](Self::bump) it on logout, login or an account switch,
/// and every call started before — through [`CallOptions::session`] — drops
/// the answers that arrive after, successes too, and ends
/// [`Outcome::Stale`](polite_core::Outcome::Stale), so a response meant for
/// the old session never reaches the new one. Clones share the generation.
///
/// ```
/// use polite_client::Session;
/// let session = Session::new();
/// let seen_by_a_task = session.clone();
/// assert_eq!(session.generation(), 0);
/// assert_eq!(session.bump(), 1); // logged out
/// assert_eq!(seen_by_a_task.generation(), 1);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Session(Arc<AtomicU64>);

impl Session {
    /// A session at generation 0.
    #[must_use]
    pub fn new() -> Session {
        Session::default()
    }

    /// The generation now.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Moves the session to its next generation and returns it: answers for
    /// calls of earlier generations are dropped from now on.
    pub fn bump(&self) -> u64 {
        self.0.fetch_add(1, Ordering::AcqRel).wrapping_add(1)
    }
}

/// Two handles are equal when they are the same session.
impl PartialEq for Session {
    fn eq(&self, other: &Session) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Session {}
