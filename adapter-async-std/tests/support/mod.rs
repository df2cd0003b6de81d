//! What the TLS tests share: self-signed certificates made at test time
//! with rcgen, a rustls client configuration trusting chosen ones, and a
//! TLS lab.

#![allow(dead_code, unreachable_pub)] // each test file uses its own part

use std::sync::{Arc, OnceLock};

use polite_async_io::{Http1Transport, rustls};
use polite_lab::{Lab, LabConfig, LabHandle};

/// A self-signed certificate and its key.
pub struct TestCert {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: rustls::pki_types::CertificateDer<'static>,
}

impl TestCert {
    /// A self-signed certificate valid for `names` (DNS names or IP addresses).
    pub fn new(names: &[&str]) -> TestCert {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let made = rcgen::generate_simple_self_signed(names).unwrap();
        TestCert {
            cert_pem: made.cert.pem(),
            key_pem: made.signing_key.serialize_pem(),
            der: made.cert.der().clone(),
        }
    }

    /// One certificate for `127.0.0.1` and `localhost`, made once per test binary.
    pub fn loopback() -> &'static TestCert {
        static CERT: OnceLock<TestCert> = OnceLock::new();
        CERT.get_or_init(|| TestCert::new(&["127.0.0.1", "localhost"]))
    }

    /// A lab in TLS mode serving this certificate.
    pub fn lab(&self, config: LabConfig) -> LabHandle {
        Lab::start(config.tls(self.cert_pem.clone(), self.key_pem.clone())).unwrap()
    }
}

/// A rustls client configuration whose only roots are `certs`.
pub fn trusting(certs: &[&TestCert]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert.der.clone()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// The transport trusting `cert` only.
pub fn transport(cert: &TestCert) -> Http1Transport {
    Http1Transport::with_tls(trusting(&[cert]))
}

/// The rustls error somewhere in `err`'s source chain.
pub fn rustls_cause<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = e.source();
    }
    None
}
