//! The HTTP client of one lane: one connection pool that all the lane's accounts share.
//!
//! instant-acme's default client is built per account, so a new account per flow would also be
//! a new TLS connection per flow; a real client keeps its connection. One pool per lane keeps
//! the number of connections equal to the concurrency, for every server alike.

use std::path::Path;

use anyhow::Context;
use bytes::Bytes;
use hyper_rustls::HttpsConnector;
use hyper_rustls::HttpsConnectorBuilder;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use instant_acme::BodyWrapper;
use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// A cheaply cloned client: clones share the pool.
pub(crate) type LaneClient = Client<HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>;

/// The TLS settings every lane uses: only `ca_root` is trusted.
pub(crate) fn tls_config(ca_root: &Path) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_root)
        .with_context(|| format!("reading {}", ca_root.display()))?
    {
        roots.add(cert.with_context(|| format!("parsing {}", ca_root.display()))?)?;
    }
    Ok(rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A new pool; `http1` leaves HTTP/2 out of ALPN (otherwise the server picks, h2 first).
pub(crate) fn lane_client(tls: rustls::ClientConfig, http1: bool) -> LaneClient {
    // Without TCP_NODELAY a request written in two segments (HTTP/2 HEADERS then DATA, or a
    // split TLS record) waits for the server's delayed ACK: 40 ms a request, whatever the
    // server does. Real clients (Go, curl, browsers) disable Nagle too.
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(true);
    tcp.enforce_http(false);
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only();
    let connector = if http1 {
        builder.enable_http1().wrap_connector(tcp)
    } else {
        builder.enable_all_versions().wrap_connector(tcp)
    };
    Client::builder(TokioExecutor::new()).build(connector)
}
