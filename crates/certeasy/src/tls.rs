//! The ACME listener's TLS configuration (rustls on aws-lc-rs). Its connections are accepted and
//! bounded by `listener.rs`, like those of every listener.

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::ResolvesServerCert;
use rustls::server::StoresServerSessions;

/// A rustls server config on `provider`, HTTP/1.1 and HTTP/2, asking `certificates` for the
/// certificate at every handshake so it can be swapped while the server runs, and keeping resumable
/// sessions in `sessions`, which forgets them when the certificate is swapped.
pub fn server_config(
    provider: Arc<CryptoProvider>,
    certificates: Arc<dyn ResolvesServerCert>,
    sessions: Arc<dyn StoresServerSessions>,
) -> anyhow::Result<Arc<ServerConfig>> {
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(certificates);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config.session_storage = sessions;
    Ok(Arc::new(config))
}
