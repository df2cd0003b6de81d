//! The lab's TLS mode (feature `tls`): [`LabConfig::tls`](crate::LabConfig::tls)
//! takes a certificate chain and its key in PEM, and the lab then serves
//! HTTP/1.1 over TLS (rustls through `tokio-rustls`, the `ring` provider,
//! ALPN `http/1.1`) on the same loopback port, so the whole lab — quotas,
//! faults, jobs, the log and [`LabHandle::connections`](crate::LabHandle::connections)
//! — works for `https://` clients too.
//!
//! The lab makes no certificate of its own: a test makes one (e.g. with
//! `rcgen`) and gives its client the same certificate to trust.

use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

/// A certificate chain and its private key, in PEM. The key never appears
/// in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .field("key_pem", &format_args!("REDACTED"))
            .finish()
    }
}

/// The acceptor serving `identity`, or why it cannot be built (no
/// certificate in the PEM, an unreadable key, a key that does not match).
pub(crate) fn acceptor(identity: &Identity) -> Result<TlsAcceptor, String> {
    let certs = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("TLS certificate PEM: {e}"))?;
    if certs.is_empty() {
        return Err("TLS certificate PEM holds no certificate".to_owned());
    }
    let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes())
        .map_err(|e| format!("TLS key PEM: {e}"))?;
    // The provider is named, not taken from the process default, so that
    // a build where another crate also enables rustls' aws-lc-rs works.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("TLS certificate and key: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
