//! HTTP clients for instant-acme that behave like real ACME clients.
//!
//! instant-acme's default client leaves Nagle's algorithm on, so a request written in two
//! segments waits for the server's delayed ACK: 40 ms a request on loopback, whatever the server
//! does (every request of the tests and benchmarks took 44 ms). It is also built per account, so a
//! new account would be a new TLS connection. The clients here set `TCP_NODELAY`, as Go's
//! net/http (lego), urllib3 (certbot) and curl do, and can share one connection pool.

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

/// A cheaply cloned client: clones share the pool (the load generator gives one to each lane).
pub type LaneClient = Client<HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>;

/// The TLS settings every lane uses: only `ca_root` is trusted.
pub fn tls_config(ca_root: &Path) -> anyhow::Result<rustls::ClientConfig> {
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
pub fn lane_client(tls: rustls::ClientConfig, http1: bool) -> LaneClient {
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

/// A client for one account (or a few) that trusts only the root in the PEM file `ca_root`,
/// HTTP/2 when the server offers it.
pub fn nodelay_client(ca_root: &Path) -> anyhow::Result<Box<dyn instant_acme::HttpClient>> {
    Ok(Box::new(lane_client(tls_config(ca_root)?, false)))
}
