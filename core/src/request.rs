//! What a machine knows about the request it governs: an id for records,
//! and whether it may be sent again.

/// Identifies one logical request in attempt records and send plans.
///
/// ```
/// use polite_core::RequestId;
/// assert_eq!(RequestId(7).to_string(), "req-7");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RequestId(pub u64);

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "req-{}", self.0)
    }
}

/// An HTTP method, as far as retrying cares: whether it is idempotent.
///
/// ```
/// use polite_core::Method;
/// assert_eq!(Method::parse(b"GET"), Method::Get);
/// assert!(Method::parse(b"DELETE").is_idempotent());
/// assert!(!Method::parse(b"POST").is_idempotent());
/// assert_eq!(Method::parse(b"get"), Method::Other); // methods are case-sensitive
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method {
    /// GET (idempotent)
    Get,
    /// HEAD (idempotent)
    Head,
    /// OPTIONS (idempotent)
    Options,
    /// TRACE (idempotent)
    Trace,
    /// PUT (idempotent)
    Put,
    /// DELETE (idempotent)
    Delete,
    /// POST
    Post,
    /// PATCH
    Patch,
    /// CONNECT
    Connect,
    /// Any other method; treated as not idempotent.
    Other,
}

impl Method {
    /// Maps a method token (case-sensitive, RFC 9110 §9.1) to a `Method`.
    #[must_use]
    pub fn parse(token: &[u8]) -> Method {
        match token {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"OPTIONS" => Method::Options,
            b"TRACE" => Method::Trace,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"POST" => Method::Post,
            b"PATCH" => Method::Patch,
            b"CONNECT" => Method::Connect,
            _ => Method::Other,
        }
    }

    /// Idempotent per RFC 9110 §9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE.
    #[must_use]
    pub const fn is_idempotent(self) -> bool {
        matches!(
            self,
            Method::Get
                | Method::Head
                | Method::Options
                | Method::Trace
                | Method::Put
                | Method::Delete
        )
    }
}

/// The request a machine governs: its id, its method, and what makes it
/// replayable.
///
/// A request is re-sent only if it is **replayable**: its method is
/// idempotent or it carries an idempotency key, *and* its body can be
/// produced again. Otherwise its first failure is final.
///
/// ```
/// use polite_core::{Method, RequestId, RequestInfo};
/// let get = RequestInfo::new(RequestId(1), Method::Get);
/// assert!(get.is_replayable());
/// let post = RequestInfo::new(RequestId(2), Method::Post);
/// assert!(!post.is_replayable());
/// assert!(post.with_idempotency_key().is_replayable());
/// // A streamed body that cannot be produced again is never replayable.
/// assert!(!get.with_one_shot_body().is_replayable());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestInfo {
    /// Id for records and plans.
    pub id: RequestId,
    /// The method.
    pub method: Method,
    /// Whether the request carries an idempotency key.
    pub idempotency_key: bool,
    /// Whether the body (if any) can be produced again. `true` for no body.
    pub body_replayable: bool,
    /// The session generation the request belongs to, if the caller tracks
    /// one (bumped on logout/login or account switch). A response that
    /// arrives when the session is at another generation ends the request as
    /// [`Outcome::Stale`](crate::Outcome::Stale) and is not delivered.
    pub generation: Option<u64>,
    /// Which pace of a [`PaceSet`](crate::PaceSet) paces this request in a
    /// [`BatchMachine`](crate::BatchMachine) (its origin's, its API key's:
    /// the caller numbers its keys). 0 by default; other machines ignore it.
    pub pace_slot: u32,
}

impl RequestInfo {
    /// A request with no body, no idempotency key and no session generation.
    #[must_use]
    pub const fn new(id: RequestId, method: Method) -> RequestInfo {
        RequestInfo {
            id,
            method,
            idempotency_key: false,
            body_replayable: true,
            generation: None,
            pace_slot: 0,
        }
    }

    /// Marks the request as carrying an idempotency key.
    #[must_use]
    pub const fn with_idempotency_key(mut self) -> RequestInfo {
        self.idempotency_key = true;
        self
    }

    /// Marks the body as one that cannot be produced again (a stream).
    #[must_use]
    pub const fn with_one_shot_body(mut self) -> RequestInfo {
        self.body_replayable = false;
        self
    }

    /// Attaches a session generation.
    #[must_use]
    pub const fn with_generation(mut self, generation: u64) -> RequestInfo {
        self.generation = Some(generation);
        self
    }

    /// Puts the request under pace slot `slot` (see
    /// [`pace_slot`](Self::pace_slot)).
    ///
    /// ```
    /// use polite_core::{Method, RequestId, RequestInfo};
    /// let r = RequestInfo::new(RequestId(1), Method::Get).with_pace_slot(2);
    /// assert_eq!(r.pace_slot, 2);
    /// ```
    #[must_use]
    pub const fn with_pace_slot(mut self, slot: u32) -> RequestInfo {
        self.pace_slot = slot;
        self
    }

    /// Whether the request may be sent more than once.
    #[must_use]
    pub const fn is_replayable(&self) -> bool {
        (self.method.is_idempotent() || self.idempotency_key) && self.body_replayable
    }
}
