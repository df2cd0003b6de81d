//! TLS for [`Http1Transport`](crate::Http1Transport) (feature `tls`):
//! rustls through `futures-rustls` on async-io sockets, the default client
//! configuration (roots from `webpki-roots` or the platform verifier), and
//! what a rustls error means for the retry machines.

use std::io;
use std::net::TcpStream;
use std::sync::{Arc, OnceLock};

use async_io::Async;
use polite_client::TransportError;
use polite_core::TransportErrorKind;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;

use crate::pool::Conn;

/// The one protocol this transport speaks, offered by ALPN.
const HTTP_1_1: &[u8] = b"http/1.1";

/// The crypto provider: rustls' `ring`, named explicitly so that a build
/// where another crate also enables rustls' `aws-lc-rs` cannot make
/// rustls' process-default provider ambiguous.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `config` offering exactly ALPN `http/1.1` (this transport speaks
/// nothing else; a server that picked `h2` would not be understood).
pub(crate) fn http1_only(config: Arc<ClientConfig>) -> Arc<ClientConfig> {
    if config.alpn_protocols == [HTTP_1_1] {
        return config;
    }
    let mut config = Arc::unwrap_or_clone(config);
    config.alpn_protocols = vec![HTTP_1_1.to_vec()];
    Arc::new(config)
}

/// The configuration used when the caller gave none, built once per
/// process (parsing the roots is not free) and shared.
pub(crate) fn default_config() -> Result<Arc<ClientConfig>, TransportError> {
    static DEFAULT: OnceLock<Result<Arc<ClientConfig>, rustls::Error>> = OnceLock::new();
    DEFAULT
        .get_or_init(|| build_default().map(|c| http1_only(Arc::new(c))))
        .clone()
        // No certificate can be verified without a verifier: permanent.
        .map_err(|e| TransportError::new(TransportErrorKind::Certificate).with_source(e))
}

/// The platform verifier (feature `platform-verifier`, which wins when
/// both are on), else Mozilla's roots from `webpki-roots` (feature
/// `webpki-roots`), else no root at all (every certificate is rejected
/// until the caller passes a configuration of their own).
fn build_default() -> Result<ClientConfig, rustls::Error> {
    let builder =
        ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    #[cfg(feature = "platform-verifier")]
    let config = {
        use rustls_platform_verifier::BuilderVerifierExt as _;
        builder.with_platform_verifier()?.with_no_client_auth()
    };
    #[cfg(all(feature = "webpki-roots", not(feature = "platform-verifier")))]
    let config = builder
        .with_root_certificates(rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        })
        .with_no_client_auth();
    #[cfg(not(any(feature = "webpki-roots", feature = "platform-verifier")))]
    let config = builder
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    Ok(config)
}

/// The TLS handshake over a connected socket, verifying the certificate
/// for `host` (a DNS name, sent as SNI, or an IP address, checked against
/// the certificate's IP addresses and not sent).
pub(crate) async fn handshake(
    config: Arc<ClientConfig>,
    host: &str,
    tcp: Async<TcpStream>,
) -> Result<Conn, TransportError> {
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| TransportError::new(TransportErrorKind::InvalidRequest).with_source(e))?;
    let stream = futures_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(crate::http1::io_error)?;
    Ok(Conn::Tls(Box::new(stream)))
}

/// The kind a rustls error is retried as: a rejected certificate (or none
/// at all, or a bad revocation list) is permanent; any other TLS failure
/// may be a blip.
pub(crate) fn kind(e: &rustls::Error) -> TransportErrorKind {
    match e {
        rustls::Error::InvalidCertificate(_)
        | rustls::Error::NoCertificatesPresented
        | rustls::Error::InvalidCertRevocationList(_) => TransportErrorKind::Certificate,
        _ => TransportErrorKind::Tls,
    }
}

/// The rustls error inside an I/O error (futures-rustls wraps them), as a
/// [`TransportError`] whose `source()` is the rustls error itself; the
/// I/O error back when it holds none.
pub(crate) fn from_io(e: io::Error) -> Result<TransportError, io::Error> {
    if !e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) {
        return Err(e);
    }
    let kind_of_io = e.kind();
    match e
        .into_inner()
        .map(|inner| inner.downcast::<rustls::Error>())
    {
        Some(Ok(tls)) => Ok(TransportError::new(kind(&tls)).with_source(*tls)),
        // Checked above; rebuilt rather than lost if it ever is not so.
        Some(Err(inner)) => Err(io::Error::new(kind_of_io, inner)),
        None => Err(io::Error::from(kind_of_io)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_errors_are_permanent_other_tls_errors_are_not() {
        let cert = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        assert_eq!(kind(&cert), TransportErrorKind::Certificate);
        assert_eq!(
            kind(&rustls::Error::NoCertificatesPresented),
            TransportErrorKind::Certificate
        );
        assert_eq!(kind(&rustls::Error::DecryptError), TransportErrorKind::Tls);
        let wrapped = io::Error::new(io::ErrorKind::InvalidData, cert);
        let e = from_io(wrapped).unwrap();
        assert_eq!(e.kind(), TransportErrorKind::Certificate);
        let source = std::error::Error::source(&e).unwrap();
        assert!(source.is::<rustls::Error>(), "{source:?}");
        assert!(from_io(io::Error::from(io::ErrorKind::ConnectionReset)).is_err());
    }

    #[test]
    fn the_default_configuration_offers_http_1_1_only() {
        let config = default_config().unwrap();
        assert_eq!(config.alpn_protocols, [HTTP_1_1]);
        let h2 = {
            let mut c = Arc::unwrap_or_clone(config);
            c.alpn_protocols = vec![b"h2".to_vec(), HTTP_1_1.to_vec()];
            Arc::new(c)
        };
        assert_eq!(http1_only(h2).alpn_protocols, [HTTP_1_1]);
    }
}
