//! The [default agent](crate::UreqTransport::default_agent)'s resolver:
//! IP addresses answered without a lookup or a thread.

use std::net::{IpAddr, SocketAddr};

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

/// The [default agent](crate::UreqTransport::default_agent)'s resolver: an IP
/// address is its own answer (no lookup, no thread); a host name goes to
/// ureq's `DefaultResolver` (which, under a timeout, resolves it on a
/// thread spawned for the request).
///
/// `ureq::unversioned` is outside ureq's semver promise (it may change in
/// a minor version): the ureq requirement is capped at the versions this
/// was checked against (see Cargo.toml).
#[derive(Debug, Default)]
pub(crate) struct LiteralResolver(DefaultResolver);

impl Resolver for LiteralResolver {
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let port = match uri.scheme_str() {
            _ if uri.port_u16().is_some() => uri.port_u16(),
            Some("http") => Some(80),
            Some("https") => Some(443),
            _ => None,
        };
        let wanted = |ip: &IpAddr| match config.ip_family() {
            IpFamily::Any => true,
            IpFamily::Ipv4Only => ip.is_ipv4(),
            IpFamily::Ipv6Only => ip.is_ipv6(),
        };
        match (uri.host().and_then(ip_literal), port) {
            (Some(ip), Some(port)) if wanted(&ip) => {
                let mut addrs = self.empty();
                addrs.push(SocketAddr::new(ip, port));
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
    fn the_default_agent_s_resolver_answers_ip_addresses_itself() {
        let resolver = LiteralResolver::default();
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
}
