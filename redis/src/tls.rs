//! `rediss://` (feature `tls`): redis-rs's rustls TLS, with the crypto
//! provider this crate names.

/// Makes `ring` the process's rustls provider if there is none yet:
/// redis-rs builds its configuration from the process default, which
/// rustls cannot pick alone when a tree enables both providers. A provider
/// the application installed is kept.
pub(crate) fn provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Lost a race with another installer: theirs is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A client for the `rediss://` `url` trusting only `root_pem`.
pub(crate) fn client(url: &str, root_pem: &[u8]) -> redis::RedisResult<redis::Client> {
    if !url.starts_with("rediss:") {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "a root certificate needs a rediss:// URL",
        )));
    }
    redis::Client::build_with_tls(
        url,
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root_pem.to_vec()),
        },
    )
}
