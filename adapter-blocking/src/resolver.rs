//! The [default agent](crate::UreqTransport::default_agent)'s resolver:
//! IP addresses answered without a lookup or a thread, a host name's
//! addresses reused for [`DNS_TTL`].

use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use ureq::config::IpFamily;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

/// The IP address a URI's host names (`127.0.0.1`, `[::1]`), if it is one.
pub(crate) fn ip_literal(host: &str) -> Option<IpAddr> {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.parse().ok()
}

/// The last authority whose host was an IP address, with that address:
/// a request to the same authority (compared byte for byte) is answered
/// without finding its host in it and parsing the address again
/// ([`ip_literal`]), which the transport (to know whether an attempt
/// needs a thread) and the resolver each did for every attempt.
#[derive(Default)]
pub(crate) struct LastIp(Mutex<Option<(http::uri::Authority, IpAddr)>>);

/// Names nothing of the authority: it may hold a user name and password
/// (SPEC §5.1), and the transport is printed in a client's `Debug`.
impl std::fmt::Debug for LastIp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LastIp").finish_non_exhaustive()
    }
}

impl LastIp {
    /// `uri.host().and_then(ip_literal)`, from the last authority when
    /// `uri` has the same (never waits for another thread: parses then).
    pub(crate) fn of(&self, uri: &http::Uri) -> Option<IpAddr> {
        let authority = uri.authority()?;
        let mut last = self.0.try_lock().ok();
        if let Some(Some((a, ip))) = last.as_deref()
            && a.as_str() == authority.as_str()
        {
            return Some(*ip);
        }
        let ip = ip_literal(authority.host())?;
        if let Some(last) = &mut last {
            **last = Some((authority.clone(), ip));
        }
        Some(ip)
    }
}

/// How long the [default agent](crate::UreqTransport::default_agent)'s
/// resolver reuses a host name's addresses: 30 s (Java's default for a
/// successful lookup). hyper resolves only to open a connection, so
/// reqwest reuses an address as long as its connection lives; ureq
/// resolves before it looks in its pool, for every request, even one that
/// then goes out on a kept-alive connection.
pub(crate) const DNS_TTL: Duration = Duration::from_secs(30);

/// How many host names the cache keeps (the oldest answer goes first).
const DNS_ENTRIES: usize = 64;

/// One host name's addresses for one port and address family.
#[derive(Debug)]
struct Entry {
    /// Unique in the process ([`answered`]).
    id: u64,
    host: Box<str>,
    port: u16,
    family: IpFamily,
    addrs: ResolvedSocketAddrs,
    at: Instant,
}

/// Recent lookups of host names: a successful answer is reused for
/// [`DNS_TTL`]; a failure is not kept, and an attempt that fails on the
/// way to a host drops its answer ([`forget`](DnsCache::forget)), so the
/// retry looks the name up again.
#[derive(Debug)]
pub(crate) struct DnsCache {
    entries: Mutex<Vec<Entry>>,
    ids: std::sync::atomic::AtomicU64,
}

thread_local! {
    /// The entry the resolver last answered from on this thread, for the
    /// attempt running on it (an attempt and its lookup run on one thread).
    static ANSWERED: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Notes the entry an answer on this thread came from (`None`: none, an
/// IP address or a failed lookup); an attempt clears it when it starts.
pub(crate) fn answered(id: Option<u64>) {
    ANSWERED.with(|a| a.set(id));
}

/// Drops the entry this thread's attempt was answered from, if any: the
/// attempt failed before an answer, so the next one looks the name up
/// again.
pub(crate) fn forget_answered() {
    if let Some(id) = ANSWERED.with(std::cell::Cell::take) {
        DNS.forget_id(id);
    }
}

/// The process's cache, for every default agent.
pub(crate) static DNS: DnsCache = DnsCache::new();

impl DnsCache {
    pub(crate) const fn new() -> DnsCache {
        DnsCache {
            entries: Mutex::new(Vec::new()),
            ids: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The addresses of `host:port` in `family` looked up less than
    /// [`DNS_TTL`] before `now`.
    /// (With the entry's id.)
    fn get(
        &self,
        host: &str,
        port: u16,
        family: IpFamily,
        now: Instant,
    ) -> Option<(ResolvedSocketAddrs, u64)> {
        self.lock()
            .iter()
            .find(|e| e.port == port && e.family == family && e.host.eq_ignore_ascii_case(host))
            .filter(|e| now.saturating_duration_since(e.at) < DNS_TTL)
            .map(|e| (e.addrs.clone(), e.id))
    }

    /// Whether `host:port` has fresh addresses in any family (an attempt
    /// to it then needs no lookup).
    pub(crate) fn fresh(&self, host: &str, port: u16, now: Instant) -> bool {
        self.lock().iter().any(|e| {
            e.port == port
                && e.host.eq_ignore_ascii_case(host)
                && now.saturating_duration_since(e.at) < DNS_TTL
        })
    }

    /// Keeps `addrs` as `host:port`'s in `family`, looked up at `now`;
    /// returns the entry's id.
    fn put(
        &self,
        host: &str,
        port: u16,
        family: IpFamily,
        addrs: &ResolvedSocketAddrs,
        now: Instant,
    ) -> u64 {
        let id = self.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut entries = self.lock();
        entries.retain(|e| {
            now.saturating_duration_since(e.at) < DNS_TTL
                && !(e.port == port && e.family == family && e.host.eq_ignore_ascii_case(host))
        });
        if entries.len() >= DNS_ENTRIES
            && let Some(oldest) = entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.at)
                .map(|(i, _)| i)
        {
            entries.swap_remove(oldest);
        }
        entries.push(Entry {
            id,
            host: host.to_ascii_lowercase().into(),
            port,
            family,
            addrs: addrs.clone(),
            at: now,
        });
        id
    }

    /// Drops entry `id`, if it is still kept.
    fn forget_id(&self, id: u64) {
        self.lock().retain(|e| e.id != id);
    }

    /// Drops what is kept for `host:port` (every family).
    #[cfg(test)]
    fn forget(&self, host: &str, port: u16) {
        self.lock()
            .retain(|e| !(e.port == port && e.host.eq_ignore_ascii_case(host)));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// A host name's lookup failed (the system's reason is the source). ureq
/// reports it as a bare I/O error, which read as "other transport error";
/// the default agent's resolver wraps it in this, which
/// [`UreqTransport`](crate::UreqTransport) reports as a DNS failure.
#[derive(Debug)]
pub(crate) struct LookupFailed(pub(crate) std::io::Error);

impl std::fmt::Display for LookupFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The system's reason names no host: "failed to lookup address
        // information: Name or service not known".
        write!(f, "the host name's lookup failed: {}", self.0)
    }
}

impl std::error::Error for LookupFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// The port a request to `uri` goes to: its own, or its scheme's.
/// (`port_u16` parses the authority: once.)
pub(crate) fn port_of(uri: &http::Uri) -> Option<u16> {
    uri.port_u16().or_else(|| match uri.scheme_str() {
        Some("http") => Some(80),
        Some("https") => Some(443),
        _ => None,
    })
}

/// The [default agent](crate::UreqTransport::default_agent)'s resolver: an IP
/// address is its own answer (no lookup, no thread); a host name's
/// addresses come from the process's [`DnsCache`] while fresh, and
/// otherwise from ureq's `DefaultResolver` (which, under a timeout,
/// resolves it on a thread spawned for the lookup), then are kept there.
///
/// `ureq::unversioned` is outside ureq's semver promise (it may change in
/// a minor version): the ureq requirement is capped at the versions this
/// was checked against (see Cargo.toml).
#[derive(Debug)]
pub(crate) struct LiteralResolver<R = DefaultResolver>(R, LastIp);

impl LiteralResolver {
    /// Over ureq's `DefaultResolver`.
    pub(crate) fn new() -> LiteralResolver {
        LiteralResolver(DefaultResolver::default(), LastIp::default())
    }
}

impl<R: Resolver> Resolver for LiteralResolver<R> {
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let port = port_of(uri);
        let wanted = |ip: &IpAddr| match config.ip_family() {
            IpFamily::Any => true,
            IpFamily::Ipv4Only => ip.is_ipv4(),
            IpFamily::Ipv6Only => ip.is_ipv6(),
        };
        match (self.1.of(uri), port) {
            (Some(ip), Some(port)) if wanted(&ip) => {
                let mut addrs = self.empty();
                addrs.push(SocketAddr::new(ip, port));
                Ok(addrs)
            }
            (None, Some(port)) => {
                let host = uri.host().unwrap_or_default();
                let family = config.ip_family();
                let now = Instant::now();
                if let Some((addrs, id)) = DNS.get(host, port, family, now) {
                    answered(Some(id));
                    return Ok(addrs);
                }
                let addrs = self.0.resolve(uri, config, timeout).map_err(|e| match e {
                    // The lookup itself failed (ureq's resolver does no
                    // other I/O).
                    ureq::Error::Io(io) => {
                        ureq::Error::Io(std::io::Error::new(io.kind(), LookupFailed(io)))
                    }
                    e => e,
                })?;
                answered(Some(DNS.put(host, port, family, &addrs, now)));
                Ok(addrs)
            }
            _ => self.0.resolve(uri, config, timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_goes_to_its_own_port_or_its_scheme_s() {
        let port = |uri: &str| port_of(&uri.parse().unwrap());
        assert_eq!(port("http://h/x"), Some(80));
        assert_eq!(port("https://h"), Some(443));
        assert_eq!(port("http://h:8/x"), Some(8));
        assert_eq!(port("https://[::1]:8443/"), Some(8443));
        assert_eq!(port("ftp://h/x"), None);
        assert_eq!(port("ftp://h:21/x"), Some(21));
    }

    fn addrs(list: &[&str]) -> ResolvedSocketAddrs {
        let mut out = LiteralResolver::new().empty();
        for a in list {
            out.push(a.parse().unwrap());
        }
        out
    }

    /// The cache on its own, with the instants passed in.
    #[test]
    fn a_host_name_s_addresses_are_reused_for_the_ttl_then_looked_up_again() {
        let cache = DnsCache::new();
        let t0 = Instant::now();
        let v4 = addrs(&["10.0.0.1:443", "10.0.0.2:443"]);
        let any = IpFamily::Any;
        assert!(cache.get("api.example", 443, any, t0).is_none());
        cache.put("API.Example", 443, any, &v4, t0);
        // Host names are case-insensitive; the port and family are part of
        // the key.
        let hit = cache.get(
            "api.EXAMPLE",
            443,
            any,
            t0 + DNS_TTL - Duration::from_nanos(1),
        );
        assert_eq!(hit.map(|(a, _)| a.to_vec()), Some(v4.to_vec()));
        assert!(cache.fresh("api.example", 443, t0));
        assert!(cache.get("api.example", 80, any, t0).is_none());
        assert!(!cache.fresh("api.example", 80, t0));
        assert!(
            cache
                .get("api.example", 443, IpFamily::Ipv4Only, t0)
                .is_none()
        );
        // At the TTL it is stale: looked up again.
        assert!(cache.get("api.example", 443, any, t0 + DNS_TTL).is_none());
        assert!(!cache.fresh("api.example", 443, t0 + DNS_TTL));
        // A new answer replaces the old one.
        let moved = addrs(&["10.0.0.9:443"]);
        cache.put("api.example", 443, any, &moved, t0 + DNS_TTL);
        let hit = cache.get("api.example", 443, any, t0 + DNS_TTL);
        assert_eq!(hit.map(|(a, _)| a.to_vec()), Some(moved.to_vec()));
        assert_eq!(cache.len(), 1);
        // A failed attempt forgets the host's answer in every family.
        cache.put(
            "api.example",
            443,
            IpFamily::Ipv6Only,
            &addrs(&["[::1]:443"]),
            t0 + DNS_TTL,
        );
        cache.forget("Api.Example", 443);
        assert_eq!(cache.len(), 0);
        assert!(!cache.fresh("api.example", 443, t0 + DNS_TTL));
    }

    /// A resolver whose every lookup fails as the system's does.
    #[derive(Debug)]
    struct Failing;

    impl Resolver for Failing {
        fn resolve(
            &self,
            _: &http::Uri,
            _: &ureq::config::Config,
            _: NextTimeout,
        ) -> Result<ResolvedSocketAddrs, ureq::Error> {
            Err(ureq::Error::Io(std::io::Error::other(
                "failed to lookup address information: Name or service not known",
            )))
        }
    }

    /// A failed lookup is told apart from other I/O errors (it read as
    /// "other transport error"), the system's reason kept as its source,
    /// and nothing is kept for the name.
    #[test]
    fn a_failed_lookup_says_so_and_keeps_the_reason() {
        let resolver = LiteralResolver(Failing, LastIp::default());
        let uri: http::Uri = "http://lookup-fails.test:8080/".parse().unwrap();
        let config = ureq::config::Config::default();
        let Err(ureq::Error::Io(io)) = resolver.resolve(&uri, &config, NextTimeout::default())
        else {
            panic!("the lookup failed");
        };
        let failed = io.get_ref().and_then(|e| e.downcast_ref::<LookupFailed>());
        let reason = failed
            .and_then(std::error::Error::source)
            .map(ToString::to_string);
        assert_eq!(
            reason.as_deref(),
            Some("failed to lookup address information: Name or service not known")
        );
        assert!(!DNS.fresh("lookup-fails.test", 8080, Instant::now()));
    }

    /// The attempt that failed forgets the entry its own lookup used (on
    /// its thread), not another one.
    #[test]
    fn a_failed_attempt_forgets_the_entry_it_was_answered_from() {
        let now = Instant::now();
        let one = addrs(&["10.0.0.1:80"]);
        let id = DNS.put("answered.test", 80, IpFamily::Any, &one, now);
        let other = DNS.put("other.test", 80, IpFamily::Any, &one, now);
        answered(Some(id));
        forget_answered();
        assert!(!DNS.fresh("answered.test", 80, now));
        assert!(DNS.fresh("other.test", 80, now));
        // Nothing noted (an IP address): nothing forgotten.
        answered(None);
        forget_answered();
        assert!(DNS.fresh("other.test", 80, now));
        DNS.forget_id(other);
    }

    #[test]
    fn the_cache_keeps_at_most_its_bound_dropping_stale_then_oldest_answers() {
        let cache = DnsCache::new();
        let t0 = Instant::now();
        let one = addrs(&["10.0.0.1:80"]);
        for i in 0..DNS_ENTRIES {
            let at = t0 + Duration::from_millis(i as u64);
            cache.put(&format!("h{i}"), 80, IpFamily::Any, &one, at);
        }
        assert_eq!(cache.len(), DNS_ENTRIES);
        // Full: the oldest answer (h0) makes room.
        let later = t0 + Duration::from_secs(1);
        cache.put("new", 80, IpFamily::Any, &one, later);
        assert_eq!(cache.len(), DNS_ENTRIES);
        assert!(cache.get("h0", 80, IpFamily::Any, later).is_none());
        assert!(cache.get("h1", 80, IpFamily::Any, later).is_some());
        assert!(cache.get("new", 80, IpFamily::Any, later).is_some());
        // Stale answers go first, all of them.
        let stale = t0 + DNS_TTL + Duration::from_secs(2);
        cache.put("fresh", 80, IpFamily::Any, &one, stale);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_default_agent_s_resolver_answers_ip_addresses_itself() {
        let resolver = LiteralResolver::new();
        let resolve = |uri: &str, config: &ureq::config::Config| {
            let uri: http::Uri = uri.parse().unwrap();
            resolver
                .resolve(&uri, config, NextTimeout::default())
                .map(|addrs| addrs.to_vec())
        };
        let any = ureq::config::Config::default();
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            resolve("http://127.0.0.1:8080/x", &any).unwrap(),
            [addr("127.0.0.1:8080")]
        );
        assert_eq!(
            resolve("http://10.1.2.3/", &any).unwrap(),
            [addr("10.1.2.3:80")]
        );
        assert_eq!(
            resolve("https://[::1]/", &any).unwrap(),
            [addr("[::1]:443")]
        );
        // A family the agent does not want: ureq's own answer (none).
        let v4 = ureq::Agent::config_builder()
            .ip_family(IpFamily::Ipv4Only)
            .build();
        assert!(matches!(
            resolve("http://[::1]:80/", &v4),
            Err(ureq::Error::HostNotFound)
        ));
        // Not an address: ureq's resolver decides (an unknown scheme here).
        assert!(matches!(
            resolve("ftp://127.0.0.1/", &any),
            Err(ureq::Error::BadUri(_))
        ));
        assert_eq!(ip_literal("[::1]"), Some("::1".parse().unwrap()));
        assert_eq!(ip_literal("localhost"), None);
        assert_eq!(ip_literal("example.com"), None);
    }

    /// The last IP authority answers as parsing the host would, request
    /// after request, whatever came between.
    #[test]
    fn the_last_ip_authority_answers_as_its_host_parsed_would() {
        let last = LastIp::default();
        let uris = [
            "http://127.0.0.1:8080/a",
            "http://127.0.0.1:8080/b?x=1",
            "http://127.0.0.1:8081/a",
            "http://127.0.0.1:8080/a",
            "http://user@127.0.0.1:8080/a",
            "http://User@127.0.0.1:8080/a",
            "https://[::1]:8443/",
            "https://[::1]:8443/again",
            "http://localhost:8080/a",
            "http://127.0.0.1:8080/a",
            "http://example.com/",
            "/relative",
            "http://10.0.0.1/",
        ];
        for text in uris {
            let uri: http::Uri = text.parse().unwrap();
            let parsed = uri.host().and_then(ip_literal);
            assert_eq!(last.of(&uri), parsed, "{text}");
            assert_eq!(last.of(&uri), parsed, "{text}, again");
        }
        // A user name and password are never printed.
        let secret: http::Uri = "http://user:hunter2@127.0.0.1:8080/".parse().unwrap();
        assert!(last.of(&secret).is_some());
        let printed = format!("{last:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
    }
}
