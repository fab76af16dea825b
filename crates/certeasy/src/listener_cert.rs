//! The ACME listener's certificate, swapped while the server runs.
//!
//! A self-issued certificate is signed by the CA's listener intermediate
//! ([`Ca::issue_server_tls`]), never by the issuing intermediate: the database records every
//! certificate the issuing key signs, and these are not recorded. A CA without a listener
//! intermediate (an old `ca/` whose `root.key` is offline, or `ca.existing` without
//! `listener.pem` beside it) makes [`ListenerCert::load`] fail, naming what to do, unless the
//! operator's certificate files are configured.
//!
//! A server lives for years and its self-issued certificate for weeks, so the certificate is
//! renewed after two thirds of its lifetime; an operator's certificate files are read again on
//! reload (SIGHUP, `certeasy admin reload`). rustls asks [`ListenerCert`] for the certificate at
//! every handshake, so a swap reaches every new connection at once, and connections already open
//! keep the certificate they were made with. The injected clock dates each certificate, but the
//! wait until renewal is wall-clock time: clients check the certificate against their own
//! clocks, so renewal must follow the wall clock even when a test moves a fake one.

use std::net::IpAddr;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use std::time::SystemTime;

use acme_core::clock::SharedClock;
use anyhow::Context;
use arc_swap::ArcSwap;
use issuance::CaHandle;
use rustls::crypto::CryptoProvider;
use rustls::server::ClientHello;
use rustls::server::ResolvesServerCert;
use rustls::sign::CertifiedKey;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;
use tokio_util::sync::CancellationToken;

use crate::config::ServerConfig;
use crate::listener_sessions::ListenerSessions;

/// Shortest wait between two renewals, so a certificate cut short by the CA's own expiry cannot
/// make renewal spin.
const MIN_RENEWAL_WAIT: Duration = Duration::from_secs(1);

/// Longest wait before a failed renewal is tried again.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);
/// Longest single timer of the renewal wait, so a suspended host catches up within this.
const MAX_SLEEP_STEP: Duration = Duration::from_secs(600);

/// Where the certificate comes from.
enum Source {
    /// Issued by our CA's listener intermediate for `server.tls-names`, renewed in the background.
    SelfIssued {
        /// The set in force: its implicit issuer's listener intermediate, which a reload of
        /// `ca.issuers` keeps.
        ca: CaHandle,
        names: Vec<String>,
        ips: Vec<IpAddr>,
        lifetime: time::Duration,
        clock: SharedClock,
    },
    /// `server.tls-certificate` and `server.tls-private-key`, read again on reload.
    Files {
        certificate: PathBuf,
        private_key: PathBuf,
    },
}

/// The certificate rustls serves, and how to replace it.
pub struct ListenerCert {
    current: ArcSwap<CertifiedKey>,
    /// TLS sessions made under `current`, forgotten when it changes.
    sessions: Arc<ListenerSessions>,
    source: Source,
    provider: Arc<CryptoProvider>,
    /// How long the first self-issued certificate is served before it is renewed.
    first_renewal: Option<Duration>,
}

impl std::fmt::Debug for ListenerCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match &self.source {
            Source::SelfIssued { .. } => "self-issued".to_owned(),
            Source::Files { certificate, .. } => certificate.display().to_string(),
        };
        f.debug_struct("ListenerCert")
            .field("source", &source)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for ListenerCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

impl ListenerCert {
    /// The operator's files when `server.tls-certificate` is set, else a certificate from `ca`.
    pub fn load(
        server: &ServerConfig,
        ca: impl Into<CaHandle>,
        clock: SharedClock,
        provider: Arc<CryptoProvider>,
    ) -> anyhow::Result<Arc<Self>> {
        if let (Some(certificate), Some(private_key)) =
            (&server.tls_certificate, &server.tls_private_key)
        {
            let key = read_files(certificate, private_key, &provider)?;
            return Ok(Arc::new(Self {
                current: ArcSwap::from_pointee(key),
                sessions: Arc::default(),
                source: Source::Files {
                    certificate: certificate.clone(),
                    private_key: private_key.clone(),
                },
                provider,
                first_renewal: None,
            }));
        }
        let mut names = Vec::new();
        let mut ips = Vec::new();
        for n in &server.tls_names {
            match n.parse::<IpAddr>() {
                Ok(ip) => ips.push(ip),
                Err(_) => names.push(n.clone()),
            }
        }
        let source = Source::SelfIssued {
            ca: ca.into(),
            names,
            ips,
            lifetime: server.tls_certificate_lifetime.time(),
            clock,
        };
        let (key, renew_in) = issue(&source, &provider)?;
        Ok(Arc::new(Self {
            current: ArcSwap::from_pointee(key),
            sessions: Arc::default(),
            source,
            provider,
            first_renewal: Some(renew_in),
        }))
    }

    /// When the certificate served now expires (its leaf's notAfter); `None` if it cannot be
    /// parsed, which rustls would not have accepted in the first place.
    pub fn not_after(&self) -> Option<time::OffsetDateTime> {
        let key = self.current.load();
        let leaf = key.cert.first()?;
        let (_, cert) = x509_parser::parse_x509_certificate(leaf).ok()?;
        Some(cert.validity().not_after.to_datetime())
    }

    /// The TLS session store to give rustls alongside this certificate resolver.
    pub fn sessions(&self) -> Arc<ListenerSessions> {
        Arc::clone(&self.sessions)
    }

    /// Serves `key` to new connections, which must not resume a session made under the old one.
    fn swap(&self, key: CertifiedKey) {
        self.current.store(Arc::new(key));
        self.sessions.forget_all();
    }

    /// Reads the operator's files again and serves them to new connections. On any error the
    /// certificate in use stays. A self-issued certificate renews itself; this leaves it alone.
    pub fn reload(&self) -> anyhow::Result<()> {
        let Source::Files {
            certificate,
            private_key,
        } = &self.source
        else {
            return Ok(());
        };
        let key = read_files(certificate, private_key, &self.provider)?;
        self.swap(key);
        tracing::info!(certificate = %certificate.display(), "listener certificate reloaded");
        Ok(())
    }

    /// Renews a self-issued certificate after two thirds of its lifetime, again and again, until
    /// `shutdown`. Returns at once for an operator's certificate.
    pub async fn renew_until(self: Arc<Self>, shutdown: CancellationToken) {
        let (Some(mut wait), Source::SelfIssued { lifetime, .. }) =
            (self.first_renewal, &self.source)
        else {
            return;
        };
        let retry =
            Duration::try_from(*lifetime / 3_i32).map_or(MAX_RETRY_WAIT, |d| d.min(MAX_RETRY_WAIT));
        loop {
            if !sleep_by_wall_clock(wait, &shutdown).await {
                return;
            }
            match issue(&self.source, &self.provider) {
                Ok((key, renew_in)) => {
                    self.swap(key);
                    tracing::info!(
                        next_renewal_in = ?renew_in,
                        "listener certificate renewed"
                    );
                    wait = renew_in;
                }
                Err(e) => {
                    tracing::error!(
                        error = %format!("{e:#}"),
                        retry_in = ?retry,
                        "renewing the listener certificate failed; the current one stays"
                    );
                    wait = retry.max(MIN_RENEWAL_WAIT);
                }
            }
        }
    }
}

/// Waits `wait` of wall-clock time, in steps of at most [`MAX_SLEEP_STEP`]: tokio's timers run
/// on the monotonic clock, which stands still while a host is suspended or a VM paused, so one
/// long sleep could end after the certificate expired. `false` when `shutdown` fired first.
async fn sleep_by_wall_clock(wait: Duration, shutdown: &CancellationToken) -> bool {
    let due = SystemTime::now() + wait;
    loop {
        let remaining = due
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        if remaining.is_zero() {
            return true;
        }
        tokio::select! {
            () = tokio::time::sleep(remaining.min(MAX_SLEEP_STEP)) => {}
            () = shutdown.cancelled() => return false,
        }
    }
}

/// A fresh certificate from our CA's listener intermediate, and how long to serve it before
/// renewing.
fn issue(source: &Source, provider: &CryptoProvider) -> anyhow::Result<(CertifiedKey, Duration)> {
    let Source::SelfIssued {
        ca,
        names,
        ips,
        lifetime,
        clock,
    } = source
    else {
        anyhow::bail!("the listener certificate is the operator's, not ours to issue");
    };
    let now = clock.now();
    let identity = ca
        .current()
        .issue_server_tls(names, ips, now, *lifetime)
        .context("issuing the listener's TLS certificate")?;
    // Renewal is timed from now, not from notBefore, which is backdated for clock skew.
    let valid_for = Duration::try_from(identity.not_after - now).unwrap_or(Duration::ZERO);
    let key = CertifiedKey::from_der(
        identity.cert_chain,
        PrivateKeyDer::Pkcs8(identity.key),
        provider,
    )
    .context("loading the listener's TLS key")?;
    Ok((key, (valid_for * 2 / 3).max(MIN_RENEWAL_WAIT)))
}

/// The operator's chain and key, checked to belong together.
fn read_files(
    certificate: &Path,
    private_key: &Path,
    provider: &CryptoProvider,
) -> anyhow::Result<CertifiedKey> {
    let chain = CertificateDer::pem_file_iter(certificate)
        .with_context(|| format!("reading server.tls-certificate {}", certificate.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing server.tls-certificate {}", certificate.display()))?;
    if chain.is_empty() {
        anyhow::bail!(
            "server.tls-certificate {} holds no PEM certificate",
            certificate.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(private_key)
        .with_context(|| format!("reading server.tls-private-key {}", private_key.display()))?;
    CertifiedKey::from_der(chain, key, provider).with_context(|| {
        format!(
            "server.tls-private-key {} does not fit server.tls-certificate {}",
            private_key.display(),
            certificate.display()
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use acme_core::clock::SystemClock;
    use issuance::Ca;
    use issuance::CaSettings;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    use super::ListenerCert;
    use crate::config::ServerConfig;

    fn server() -> ServerConfig {
        ServerConfig {
            tls_names: vec!["localhost".to_owned()],
            ..ServerConfig::default()
        }
    }

    fn first_pem(path: &std::path::Path) -> Vec<u8> {
        CertificateDer::pem_file_iter(path)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .to_vec()
    }

    /// The listener's chain is its leaf and the listener intermediate, never the issuing one.
    #[test]
    fn the_listener_is_signed_by_its_own_intermediate() {
        let dir = tempfile::tempdir().unwrap();
        let settings = CaSettings::new(dir.path().join("ca"));
        let ca = Arc::new(Ca::load_or_create(&settings, time::OffsetDateTime::now_utc()).unwrap());
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let cert = ListenerCert::load(&server(), ca, Arc::new(SystemClock), provider).unwrap();
        let served = cert.current.load_full();
        assert_eq!(served.cert.len(), 2);
        let listener = first_pem(&settings.dir.join("listener.pem"));
        let intermediate = first_pem(&settings.dir.join("intermediate.pem"));
        assert_eq!(served.cert[1].as_ref(), listener.as_slice());
        assert!(
            !served
                .cert
                .iter()
                .any(|c| c.as_ref() == intermediate.as_slice())
        );
    }

    /// Without a listener intermediate the issuing one is not used instead: a self-issued
    /// listener refuses to start, saying what to do.
    #[test]
    fn without_a_listener_intermediate_a_self_issued_listener_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let settings = CaSettings::new(dir.path().join("ca"));
        let now = time::OffsetDateTime::now_utc();
        Ca::load_or_create(&settings, now).unwrap();
        // The root key taken offline (a first start keeps it beside the CA directory).
        let issuance::GeneratedRootKey::KeepAt(root_key) = &settings.generated_root_key else {
            panic!("the default keeps the root key");
        };
        std::fs::remove_file(root_key).unwrap();
        for name in ["listener.pem", "listener.key"] {
            std::fs::remove_file(settings.dir.join(name)).unwrap();
        }
        let ca = Arc::new(Ca::load_or_create(&settings, now).unwrap());
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let err = ListenerCert::load(&server(), ca, Arc::new(SystemClock), provider).unwrap_err();
        let message = format!("{err:#}");
        assert!(
            message.contains("listener.pem") && message.contains("server.tls-certificate"),
            "{message}"
        );
    }
}
