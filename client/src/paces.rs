//! [`Paces`]: one [`ClientPace`] per key (SPEC §4.2) — by default per
//! origin, so a 429 from one API never holds back calls to another — with
//! idle keys dropped so memory stays bounded with many hosts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use polite_core::budget::{RetryBucket, RetryBudget};
use polite_core::{RateThrottle, Reply, RetryClass};

use crate::config::{Config, Throttle};
use crate::error::Error;
use crate::fleet::{FleetBudget, FleetTerms, SharedFleet};
use crate::pace::ClientPace;

/// Which calls of a client share one pace (throttle, cool-down, learnt
/// quota, adaptive rate). A call can name its own key instead
/// ([`CallOptions::pace_key`](crate::CallOptions::pace_key)).
///
/// ```
/// use polite_client::{Config, PaceBy};
/// let per_token = Config { pace_by: PaceBy::Header("authorization"), ..Config::default() };
/// assert_eq!(Config::default().pace_by, PaceBy::Origin);
/// # drop(per_token);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PaceBy {
    /// One pace per origin (scheme, host, port). The default.
    #[default]
    Origin,
    /// One pace per value of this request header (an API key, a tenant id)
    /// and origin. The value is kept only as a hash ([`PaceKey::hashed`]'s,
    /// after the origin), never as is: the same in every process, so that
    /// processes sharing a fleet pace (SPEC §4.3) share the key. A request
    /// without the header shares its origin's pace.
    Header(&'static str),
    /// One pace for every call of the client, whatever the host.
    Client,
}

/// The key a call's pace is looked up by.
///
/// ```
/// use polite_client::PaceKey;
/// let uri: http::Uri = "https://api.example.com/v1/items?x=1".parse().unwrap();
/// assert_eq!(PaceKey::origin(&uri), PaceKey::new("https://api.example.com:443"));
/// let other: http::Uri = "http://api.example.com/".parse().unwrap();
/// assert_ne!(PaceKey::origin(&uri), PaceKey::origin(&other));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PaceKey(Arc<str>);

impl PaceKey {
    /// A key of your own (a tenant, an account): calls with equal keys
    /// share one pace. The text is shown as it is, in metrics labels
    /// (`origin`) and in a fleet's Redis key names: never a credential —
    /// for an API token, use [`hashed`](Self::hashed).
    #[must_use]
    pub fn new(key: impl Into<Arc<str>>) -> PaceKey {
        PaceKey(key.into())
    }

    /// A key for a secret (an API token, a credential): calls with equal
    /// secrets share one pace, and the key's text is `#` and 32 hex digits
    /// (the first 128 bits of a SHA-256 of the secret), never the secret.
    /// The same in every process and version, so a fleet on Redis shares
    /// it.
    ///
    /// ```
    /// use polite_client::PaceKey;
    /// let key = PaceKey::hashed("sk_live_4eC39HqLyjWDarjtT1zdp7dc");
    /// assert_eq!(key, PaceKey::hashed("sk_live_4eC39HqLyjWDarjtT1zdp7dc"));
    /// assert_ne!(key, PaceKey::hashed("sk_live_another"));
    /// assert!(!key.as_str().contains("sk_live"));
    /// assert_eq!(key.as_str().len(), 33);
    /// ```
    #[must_use]
    pub fn hashed(secret: impl AsRef<[u8]>) -> PaceKey {
        PaceKey(format!("#{}", digest_hex(secret.as_ref())).into())
    }

    /// The origin of `uri`: scheme, host and port (the scheme's default
    /// port when none is given). No path, query or user info.
    #[must_use]
    pub fn origin(uri: &http::Uri) -> PaceKey {
        let (scheme, host, port) = origin_of(uri);
        PaceKey(format!("{scheme}://{host}:{port}").into())
    }

    /// The key as text (an origin, `origin#hash` for a header, or your own).
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key's text, shared (a metrics label without a copy).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn shared(&self) -> Arc<str> {
        Arc::clone(&self.0)
    }
}

/// The scheme, host and port a [`PaceKey::origin`] spells.
fn origin_of(uri: &http::Uri) -> (&str, &str, u16) {
    let scheme = uri.scheme_str().unwrap_or("http");
    let host = uri.host().unwrap_or("");
    let port = uri.port_u16().unwrap_or(match scheme {
        "https" => 443,
        _ => 80,
    });
    (scheme, host, port)
}

/// Whether `key` is `{scheme}://{host}:{port}`, as [`PaceKey::origin`]
/// writes it, without writing it.
fn spells_origin(key: &str, scheme: &str, host: &str, port: u16) -> bool {
    let Some(digits) = key
        .strip_prefix(scheme)
        .and_then(|k| k.strip_prefix("://"))
        .and_then(|k| k.strip_prefix(host))
        .and_then(|k| k.strip_prefix(':'))
    else {
        return false;
    };
    // `origin` writes the port without leading zeros.
    !(digits.len() > 1 && digits.starts_with('0')) && digits.parse() == Ok(port)
}

/// Unused keys idle this long (and not cooling down) are dropped.
const IDLE: Duration = Duration::from_secs(600);
/// A sweep runs when a new key would make the map this large.
const SWEEP_AT: usize = 64;
/// The most keys kept: past it, the least recently used unused keys go.
const MAX_KEYS: usize = 1024;

/// The first 128 bits of the SHA-256 of `value` (after a tag naming this
/// use), in lower-case hex: a pace key's text for a secret. Stable across
/// processes, platforms and versions (a fleet's processes must agree on
/// it), and one-way (the text goes to metrics labels and Redis key names).
fn digest_hex(value: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let digest = Sha256::new()
        .chain_update(b"polite pace key\0")
        .chain_update(value)
        .finalize();
    let mut hex = String::with_capacity(32);
    for byte in &digest[..16] {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// One [`ClientPace`] per [`PaceKey`], made on first use from the client's
/// configuration; the entries no call holds and that have been idle for
/// ten minutes (and are not cooling down) are dropped when new keys
/// arrive, and never more than 1,024 keys are kept.
#[derive(Debug)]
pub struct Paces {
    by: PaceBy,
    budget: Option<RetryBucket>,
    throttle: Option<Throttle>,
    learn_quota: Option<u32>,
    adaptive: bool,
    fleet: Option<SharedFleet>,
    map: Mutex<HashMap<PaceKey, Entry>>,
    /// The origin key made last, handed out again while calls go to the
    /// same origin (the common case): a call then costs no formatting and
    /// no allocation for its key.
    last_origin: Mutex<Option<LastOrigin>>,
}

/// The origin key made last, with the scheme and authority it was made
/// from as the request spelled them.
#[derive(Debug)]
struct LastOrigin {
    scheme: Option<Box<str>>,
    /// `None` when there was none, or it held user info: then only the
    /// origin is compared.
    authority: Option<Box<str>>,
    key: PaceKey,
}

impl LastOrigin {
    fn of(uri: &http::Uri, key: PaceKey) -> LastOrigin {
        let authority = uri.authority().map(http::uri::Authority::as_str);
        LastOrigin {
            scheme: uri.scheme_str().map(Box::from),
            // Never a copy of user info (a password): such a URI is
            // matched by its origin only.
            authority: authority.filter(|a| !a.contains('@')).map(Box::from),
            key,
        }
    }
}

#[derive(Debug)]
struct Entry {
    pace: Arc<Mutex<ClientPace>>,
    budget: ClientBudget,
    used: Instant,
}

/// A key's retry budget: the [`RetryBucket`] its calls share
/// ([`Config::retry_budget`]), the fleet's ([`Config::fleet`]), or none
/// (every retry the policy allows).
///
/// ```
/// use polite_client::ClientBudget;
/// use polite_core::budget::{RetryBucket, RetryBudget, RetryCosts};
/// use polite_core::{Reply, RetryClass};
/// let mut none = ClientBudget::default();
/// assert_eq!(none.withdraw(RetryClass::ServerError, Reply::Status(503)), Some(0));
/// let mut tiny = ClientBudget::new(Some(RetryBucket::new(14, RetryCosts::default())));
/// assert_eq!(tiny.withdraw(RetryClass::ServerError, Reply::Status(503)), Some(14));
/// assert_eq!(tiny.withdraw(RetryClass::ServerError, Reply::Status(503)), None);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ClientBudget(Option<Arc<Mutex<Bucket>>>);

/// Where a budget's tokens are kept.
#[derive(Debug)]
enum Bucket {
    Local(RetryBucket),
    Fleet(Box<dyn FleetBudget>),
}

impl ClientBudget {
    /// A budget over `bucket` (`None`: no budget).
    #[must_use]
    pub fn new(bucket: Option<RetryBucket>) -> ClientBudget {
        ClientBudget(bucket.map(|b| Arc::new(Mutex::new(Bucket::Local(b)))))
    }

    /// A budget shared with other processes (SPEC §4.3).
    #[must_use]
    pub fn fleet(budget: Box<dyn FleetBudget>) -> ClientBudget {
        ClientBudget(Some(Arc::new(Mutex::new(Bucket::Fleet(budget)))))
    }

    /// The tokens left (`None` without a budget).
    #[must_use]
    pub fn tokens(&self) -> Option<u32> {
        self.0.as_ref().map(
            |b| match &*b.lock().unwrap_or_else(PoisonError::into_inner) {
                Bucket::Local(b) => b.tokens(),
                Bucket::Fleet(b) => b.tokens(),
            },
        )
    }
}

impl RetryBudget for ClientBudget {
    fn withdraw(&mut self, class: RetryClass, last: Reply) -> Option<u32> {
        match &mut self.0 {
            Some(b) => match &mut *b.lock().unwrap_or_else(PoisonError::into_inner) {
                Bucket::Local(b) => b.withdraw(class, last),
                Bucket::Fleet(b) => b.withdraw(class, last),
            },
            None => Some(0),
        }
    }
    fn deposit(&mut self, last_cost: Option<u32>) {
        if let Some(b) = &mut self.0 {
            match &mut *b.lock().unwrap_or_else(PoisonError::into_inner) {
                Bucket::Local(b) => b.deposit(last_cost),
                Bucket::Fleet(b) => b.deposit(last_cost),
            }
        }
    }
}

impl Paces {
    /// The paces `config` asks for (none made yet).
    ///
    /// # Errors
    ///
    /// [`Error::Policy`] for a throttle or quota that makes no sense.
    pub fn new(config: &Config) -> Result<Paces, Error> {
        let paces = Paces {
            by: config.pace_by,
            budget: config.retry_budget,
            throttle: config.throttle,
            learn_quota: config.learn_quota,
            adaptive: config.adaptive,
            fleet: config.fleet.clone(),
            map: Mutex::new(HashMap::new()),
            last_origin: Mutex::new(None),
        };
        paces.make()?; // reject a bad configuration now, not at the first call
        Ok(paces)
    }

    fn make(&self) -> Result<ClientPace, Error> {
        // With a fleet, the local throttle is the fallback: this process's
        // share of the fleet's quota.
        let share = self.fleet.as_ref().map_or(1, |f| f.size().max(1));
        let throttle = match (self.throttle, self.learn_quota) {
            (Some(Throttle { limit, window }), _) => {
                Some(RateThrottle::new(limit.div_ceil(share), window)?)
            }
            (None, Some(max)) => Some(RateThrottle::learning(max)?),
            (None, None) => None,
        };
        let pace = ClientPace::new(throttle);
        Ok(if self.adaptive { pace.adaptive() } else { pace })
    }

    /// The key of `request` by the client's [`PaceBy`].
    pub fn key_of(&self, request: &http::Request<bytes::Bytes>) -> PaceKey {
        match self.by {
            PaceBy::Client => PaceKey::new(""),
            PaceBy::Origin => self.origin_key(request.uri()),
            PaceBy::Header(name) => {
                let origin = self.origin_key(request.uri());
                match request.headers().get(name) {
                    Some(value) => {
                        PaceKey(format!("{}#{}", origin.0, digest_hex(value.as_bytes())).into())
                    }
                    None => origin,
                }
            }
        }
    }

    /// [`PaceKey::origin`] of `uri`, the last one again when it is the same.
    fn origin_key(&self, uri: &http::Uri) -> PaceKey {
        let mut last = self
            .last_origin
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(last) = &mut *last {
            // Spelled exactly as last time: the same key, nothing parsed.
            if let Some(authority) = &last.authority
                && uri.authority().map(http::uri::Authority::as_str) == Some(&**authority)
                && uri.scheme_str() == last.scheme.as_deref()
            {
                return last.key.clone();
            }
            let (scheme, host, port) = origin_of(uri);
            if spells_origin(last.key.as_str(), scheme, host, port) {
                if last.authority.is_none() {
                    *last = LastOrigin::of(uri, last.key.clone());
                }
                return last.key.clone();
            }
        }
        let key = PaceKey::origin(uri);
        *last = Some(LastOrigin::of(uri, key.clone()));
        key
    }

    /// The pace of `key` at `now`, made if new.
    pub fn get(&self, key: &PaceKey, now: Instant) -> Arc<Mutex<ClientPace>> {
        self.entry(key, now).0
    }

    /// The retry budget of `key` at `now`, made if new (with its pace).
    pub fn budget(&self, key: &PaceKey, now: Instant) -> ClientBudget {
        self.entry(key, now).1
    }

    pub(crate) fn entry(
        &self,
        key: &PaceKey,
        now: Instant,
    ) -> (Arc<Mutex<ClientPace>>, ClientBudget) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = map.get_mut(key) {
            e.used = e.used.max(now);
            return (Arc::clone(&e.pace), e.budget.clone());
        }
        if map.len() >= SWEEP_AT {
            sweep(&mut map, now);
        }
        let mut pace = match self.make() {
            Ok(p) => p,
            // Checked in `new` with the same settings.
            Err(_) => ClientPace::new(None),
        };
        let mut budget = None;
        if let Some(fleet) = &self.fleet {
            let terms = FleetTerms::new(self.throttle, self.learn_quota, self.adaptive);
            pace = pace.with_fleet(fleet.join(key, &terms), fleet.size());
            budget = self
                .budget
                .and_then(|b| fleet.budget(key, b))
                .map(ClientBudget::fleet);
        }
        let pace = Arc::new(Mutex::new(pace));
        let budget = budget.unwrap_or_else(|| ClientBudget::new(self.budget));
        map.insert(
            key.clone(),
            Entry {
                pace: Arc::clone(&pace),
                budget: budget.clone(),
                used: now,
            },
        );
        (pace, budget)
    }

    /// The rate each key's pace has settled on, sends per second
    /// ([`ClientPace::rate`]), sorted by key; keys whose pace limits
    /// nothing are left out.
    ///
    /// ```
    /// use polite_client::{Config, PaceKey, Paces, Throttle};
    /// use std::time::{Duration, Instant};
    /// let config = Config { throttle: Some(Throttle::new(30, Duration::from_secs(60))), ..Config::default() };
    /// let paces = Paces::new(&config).unwrap();
    /// let _ = paces.get(&PaceKey::new("http://a:80"), Instant::now());
    /// assert_eq!(paces.rates(), vec![(PaceKey::new("http://a:80"), 0.5)]);
    /// ```
    #[must_use]
    pub fn rates(&self) -> Vec<(PaceKey, f64)> {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let mut rates: Vec<(PaceKey, f64)> = map
            .iter()
            .filter_map(|(k, e)| {
                let rate = e.pace.lock().unwrap_or_else(PoisonError::into_inner).rate();
                rate.map(|r| (k.clone(), r))
            })
            .collect();
        rates.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        rates
    }

    /// How many keys are held now.
    ///
    /// ```
    /// let paces = polite_client::Paces::new(&polite_client::Config::default()).unwrap();
    /// assert_eq!(paces.len(), 0);
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no key is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Drops the unused idle entries; past [`MAX_KEYS`], the least recently
/// used unused ones too.
fn sweep(map: &mut HashMap<PaceKey, Entry>, now: Instant) {
    let unused = |e: &Entry| {
        Arc::strong_count(&e.pace) == 1
            && e.budget
                .0
                .as_ref()
                .is_none_or(|b| Arc::strong_count(b) == 1)
    };
    let quiet = |e: &Entry| {
        e.pace
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .quiet_at(now)
    };
    map.retain(|_, e| !(unused(e) && now.saturating_duration_since(e.used) >= IDLE && quiet(e)));
    if map.len() >= MAX_KEYS {
        let mut idle: Vec<(Instant, PaceKey)> = map
            .iter()
            .filter(|(_, e)| unused(e) && quiet(e))
            .map(|(k, e)| (e.used, k.clone()))
            .collect();
        idle.sort_unstable_by_key(|(used, _)| *used);
        for (_, k) in idle.into_iter().take(map.len() + 1 - MAX_KEYS) {
            map.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polite_core::Pace;

    fn req(url: &str) -> http::Request<bytes::Bytes> {
        http::Request::get(url).body(bytes::Bytes::new()).unwrap()
    }

    #[test]
    fn the_last_origin_key_is_reused_only_for_the_same_origin() {
        let paces = Paces::new(&Config::default()).unwrap();
        let urls = [
            "http://127.0.0.1:1/x",
            "http://127.0.0.1:1/other?q", // same origin
            "http://127.0.0.1:10/x",      // port 10, not 1
            "http://127.0.0.1:1/x",
            "https://127.0.0.1:1/x",
            "http://127.0.0.10:1/x",
            "http://127.0.0.1/x", // default port 80
            "http://127.0.0.1:80/x",
            "https://h.test/",
            "https://h.test:443/",
            "http://h.test:443/",
            "http://H.test:443/", // another spelling of the host: its own key
            "http://user:pw@h.test:443/",
            "http://other:pw@h.test:443/", // the same origin, other user info
            "http://h.test:443/",
        ];
        let mut last: Option<PaceKey> = None;
        for url in urls {
            let key = paces.key_of(&req(url));
            // Always the key `origin` writes, whatever was cached before.
            assert_eq!(key, PaceKey::origin(&req(url).uri().clone()), "{url}");
            if let Some(prev) = &last
                && prev == &key
            {
                assert!(Arc::ptr_eq(&prev.0, &key.0), "{url}: made again");
            }
            last = Some(key);
        }
        let cached = paces.last_origin.lock().unwrap();
        assert_eq!(
            cached.as_ref().unwrap().authority.as_deref(),
            Some("h.test:443")
        );
        drop(cached);
        drop(paces.key_of(&req("http://user:pw@h.test:1/")));
        let kept = paces.last_origin.lock().unwrap();
        assert!(kept.as_ref().unwrap().authority.is_none(), "user info kept");
        drop(kept);
        assert!(spells_origin("http://h:8", "http", "h", 8));
        assert!(!spells_origin("http://h:08", "http", "h", 8));
        assert!(!spells_origin("http://h:8", "http", "h", 80));
        assert!(!spells_origin("http://h:80", "http", "h", 8));
        assert!(!spells_origin("http://hh:8", "http", "h", 8));
        assert!(!spells_origin("https://h:8", "http", "h", 8));
        assert!(!spells_origin("http://h:", "http", "h", 0));
    }

    #[test]
    fn origins_have_paces_of_their_own() {
        let paces = Paces::new(&Config::default()).unwrap();
        let t0 = Instant::now();
        let a = paces.get(&paces.key_of(&req("http://127.0.0.1:1/x")), t0);
        let b = paces.get(&paces.key_of(&req("http://127.0.0.1:2/x")), t0);
        let a2 = paces.get(&paces.key_of(&req("http://127.0.0.1:1/other?q")), t0);
        a.lock().unwrap().cool_down(t0 + Duration::from_secs(5));
        assert!(
            a2.lock().unwrap().acquire(t0).is_err(),
            "same origin, same pace"
        );
        assert_eq!(
            b.lock().unwrap().acquire(t0),
            Ok(()),
            "another origin is not held back"
        );
    }

    /// SPEC §4.2: the adaptive rate is the origin's too. Bare 429s (no
    /// server time) from origin A cut A's rate until A refuses a send;
    /// origin B, in the same `Paces`, still sends at once — with adaptive
    /// pacing alone (no throttle) and with the default learning throttle
    /// made adaptive.
    #[test]
    fn an_adaptive_rate_cut_by_one_origin_never_holds_back_another() {
        use polite_core::adaptive::Answered;
        use polite_core::pace::PaceLimit;
        let adaptive_only = Config {
            throttle: None,
            learn_quota: None,
            adaptive: true,
            ..Config::default()
        };
        for (what, config) in [
            ("adaptive, no throttle", adaptive_only),
            (
                "the default: a learning throttle, adaptive",
                Config::default(),
            ),
        ] {
            let paces = Paces::new(&config).unwrap();
            let t0 = Instant::now();
            let a = paces.get(&paces.key_of(&req("http://127.0.0.1:1/x")), t0);
            let b = paces.get(&paces.key_of(&req("http://127.0.0.1:2/x")), t0);
            // Three sends to A, each answered 10 ms later by a bare 429.
            let mut now = t0;
            for _ in 0..3 {
                let mut a = a.lock().unwrap();
                now = match a.acquire(now) {
                    Ok(()) => now,
                    Err(at) => {
                        a.acquire(at).unwrap();
                        at
                    }
                };
                now += Duration::from_millis(10);
                a.on_answer(Answered::new(now - Duration::from_millis(10), now, true));
            }
            let mut held = a.lock().unwrap();
            assert!(held.acquire(now).is_err(), "{what}: A's rate was cut");
            assert!(
                matches!(held.refusal(), PaceLimit::Adaptive { .. }),
                "{what}: {:?}",
                held.refusal()
            );
            drop(held);
            assert_eq!(
                b.lock().unwrap().acquire(now),
                Ok(()),
                "{what}: another origin is not held back"
            );
            let other = paces.get(&paces.key_of(&req("http://127.0.0.1:1/other")), now);
            assert!(
                other.lock().unwrap().acquire(now).is_err(),
                "{what}: same origin, same rate"
            );
        }
    }

    #[test]
    fn a_header_keyed_pace_never_keeps_the_value() {
        let paces = Paces::new(&Config {
            pace_by: PaceBy::Header("authorization"),
            ..Config::default()
        })
        .unwrap();
        let mut r = req("https://api.example.com/x");
        r.headers_mut().insert(
            "authorization",
            http::HeaderValue::from_static("Bearer SECRET"),
        );
        let key = paces.key_of(&r);
        assert!(!key.as_str().contains("SECRET"), "{key:?}");
        assert!(key.as_str().starts_with("https://api.example.com:443#"));
        assert_eq!(
            paces.key_of(&req("https://api.example.com/x")),
            PaceKey::origin(r.uri())
        );
    }

    /// Two clients (two processes of a fleet) key the same header value
    /// alike, and different values apart: the key is a hash of the value
    /// alone, fixed by this test (a per-process hash gave each process a
    /// Redis key of its own, so the fleet shared nothing).
    #[test]
    fn a_header_keyed_pace_is_the_same_in_every_client() {
        let config = Config {
            pace_by: PaceBy::Header("authorization"),
            ..Config::default()
        };
        let (a, b) = (Paces::new(&config).unwrap(), Paces::new(&config).unwrap());
        let with = |value: &'static str| {
            let mut r = req("https://api.example.com/x");
            r.headers_mut()
                .insert("authorization", http::HeaderValue::from_static(value));
            r
        };
        assert_eq!(a.key_of(&with("Bearer T1")), b.key_of(&with("Bearer T1")));
        assert_ne!(a.key_of(&with("Bearer T1")), b.key_of(&with("Bearer T2")));
        // The first 16 bytes of the SHA-256 of "polite pace key\0" and the
        // value, as Python's hashlib computes them: fixed, so that
        // processes of different builds agree.
        assert_eq!(
            a.key_of(&with("Bearer T1")).as_str(),
            "https://api.example.com:443#1d50769a10d31a937e60a707aef935c1"
        );
        assert_eq!(digest_hex(b""), "96d9800a9d78e59368f410b2a5667854");
        assert_eq!(
            PaceKey::hashed("Bearer T1").as_str(),
            "#1d50769a10d31a937e60a707aef935c1"
        );
    }

    #[test]
    fn idle_keys_go_and_the_map_stays_bounded() {
        let paces = Paces::new(&Config::default()).unwrap();
        let t0 = Instant::now();
        let held = paces.get(&PaceKey::new("held"), t0);
        let cooling = paces.get(&PaceKey::new("cooling"), t0);
        cooling
            .lock()
            .unwrap()
            .cool_down(t0 + Duration::from_secs(3600));
        drop(cooling);
        for i in 0..3000 {
            let at = t0 + Duration::from_millis(i);
            drop(paces.get(&PaceKey::new(format!("host-{i}")), at));
        }
        assert!(paces.len() <= MAX_KEYS, "{}", paces.len());
        // Ten minutes later every unused quiet key goes at the next sweep.
        let later = t0 + IDLE + Duration::from_secs(5);
        for i in 0..SWEEP_AT {
            drop(paces.get(&PaceKey::new(format!("late-{i}")), later));
        }
        assert!(paces.len() <= 2 * SWEEP_AT + 2, "{}", paces.len());
        let map = paces.map.lock().unwrap();
        assert!(
            map.contains_key(&PaceKey::new("held")),
            "a pace in use stays"
        );
        assert!(
            map.contains_key(&PaceKey::new("cooling")),
            "a pace cooling down stays"
        );
        drop(held);
    }
}
