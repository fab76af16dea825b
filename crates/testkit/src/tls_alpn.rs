//! A tls-alpn-01 responder (RFC 8737) on 127.0.0.1: a rustls server that, per SNI, presents a
//! self-signed certificate carrying the `acmeIdentifier` extension.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use aws_lc_rs::digest;
use parking_lot::Mutex;
use rcgen::{CertificateParams, CustomExtension, KeyPair, SanType};
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// The ALPN protocol id of RFC 8737 §6.2.
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Certificates by lower-cased SNI name.
#[derive(Debug, Default)]
struct CertStore {
    by_sni: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let sni = client_hello.server_name()?.to_ascii_lowercase();
        self.by_sni.lock().get(&sni).cloned()
    }
}

/// A TLS server that only speaks `acme-tls/1` and answers each SNI with its validation certificate.
///
/// A handshake for an unknown SNI is aborted. Stops when dropped.
#[derive(Debug)]
pub struct TlsAlpnResponder {
    store: Arc<CertStore>,
    provider: Arc<CryptoProvider>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl TlsAlpnResponder {
    /// Starts the responder on 127.0.0.1 and a random port. Must be called inside a tokio runtime.
    pub async fn start() -> io::Result<Self> {
        Self::start_with_versions(rustls::DEFAULT_VERSIONS).await
    }

    /// Like [`TlsAlpnResponder::start`] but speaking only TLS 1.2, to exercise validators' TLS 1.2
    /// signature checks.
    pub async fn start_tls12_only() -> io::Result<Self> {
        Self::start_with_versions(&[&rustls::version::TLS12]).await
    }

    async fn start_with_versions(
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> io::Result<Self> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let store = Arc::new(CertStore::default());
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(versions)
            .map_err(io::Error::other)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&store) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));

        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(accept_loop(listener, acceptor));
        Ok(Self {
            store,
            provider,
            addr,
            task,
        })
    }

    /// The port to configure as the validator's tls-alpn-01 port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The bound address (always on 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves, for SNI `name`, a certificate whose only SAN is the dNSName `name` and whose
    /// `acmeIdentifier` holds SHA-256(`key_authorization`).
    pub fn add(&self, name: &str, key_authorization: &str) -> anyhow::Result<()> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let san = SanType::DnsName(name.clone().try_into().context("SAN dNSName")?);
        self.install(name, san, key_authorization)
    }

    /// Serves, for the reverse-DNS SNI of `ip` (RFC 8738 §6), a certificate whose only SAN is the
    /// iPAddress `ip`.
    pub fn add_ip(&self, ip: IpAddr, key_authorization: &str) -> anyhow::Result<()> {
        self.install(
            reverse_dns_name(ip),
            SanType::IpAddress(ip),
            key_authorization,
        )
    }

    /// Answers SNI `name` with the certificate already added for `existing`, to test validators
    /// against a certificate for the wrong name. Returns false when `existing` is unknown.
    pub fn add_alias(&self, name: &str, existing: &str) -> bool {
        let mut by_sni = self.store.by_sni.lock();
        let Some(certified) = by_sni
            .get(&existing.trim_end_matches('.').to_ascii_lowercase())
            .cloned()
        else {
            return false;
        };
        by_sni.insert(name.trim_end_matches('.').to_ascii_lowercase(), certified);
        true
    }

    /// Stops serving `name` (a DNS name or an IP address in text form).
    pub fn remove(&self, name: &str) {
        let sni = match name.parse::<IpAddr>() {
            Ok(ip) => reverse_dns_name(ip),
            Err(_) => name.trim_end_matches('.').to_ascii_lowercase(),
        };
        self.store.by_sni.lock().remove(&sni);
    }

    /// Like [`TlsAlpnResponder::add`], but the server signs the handshake with a key that does not
    /// match the certificate, to test that validators verify handshake signatures.
    pub fn add_with_mismatched_key(
        &self,
        name: &str,
        key_authorization: &str,
    ) -> anyhow::Result<()> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let san = SanType::DnsName(name.clone().try_into().context("SAN dNSName")?);
        self.install_with(name, san, key_authorization, true)
    }

    fn install(&self, sni: String, san: SanType, key_authorization: &str) -> anyhow::Result<()> {
        self.install_with(sni, san, key_authorization, false)
    }

    fn install_with(
        &self,
        sni: String,
        san: SanType,
        key_authorization: &str,
        mismatched_key: bool,
    ) -> anyhow::Result<()> {
        let digest = digest::digest(&digest::SHA256, key_authorization.as_bytes());
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![san];
        params.custom_extensions = vec![CustomExtension::new_acme_identifier(digest.as_ref())];
        let key = KeyPair::generate().context("generating the tls-alpn-01 key")?;
        let cert = params
            .self_signed(&key)
            .context("signing the tls-alpn-01 certificate")?;
        let signing = if mismatched_key {
            KeyPair::generate().context("generating the wrong key")?
        } else {
            key
        };
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing.serialize_der()));
        // Not `CertifiedKey::from_der`: its key/certificate consistency check parses the certificate
        // with webpki, which rejects the critical acmeIdentifier extension.
        let signing_key = self
            .provider
            .key_provider
            .load_private_key(key_der)
            .context("loading the tls-alpn-01 key into rustls")?;
        let certified = CertifiedKey::new(vec![cert.der().clone()], signing_key);
        self.store.by_sni.lock().insert(sni, Arc::new(certified));
        Ok(())
    }
}

impl Drop for TlsAlpnResponder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, acceptor: TlsAcceptor) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Typically fd exhaustion: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let handshake =
                tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await;
            if let Ok(Ok(mut tls)) = handshake {
                // The validator only needs the handshake; close politely.
                let _ = tls.shutdown().await;
            }
        });
    }
}

/// The reverse-DNS name used as SNI for an IP identifier (RFC 8738 §6), e.g. `4.3.2.1.in-addr.arpa`.
pub fn reverse_dns_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa")
        }
        IpAddr::V6(v6) => {
            let mut labels: Vec<String> = Vec::with_capacity(33);
            for byte in v6.octets().iter().rev() {
                labels.push(format!("{:x}", byte & 0x0f));
                labels.push(format!("{:x}", byte >> 4));
            }
            labels.push("ip6.arpa".to_owned());
            labels.join(".")
        }
    }
}
