//! The certificate authority: loads or creates its keys, then signs leaves, TLS identities and CRLs.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use acme_core::identifier::Identifier;
use acme_core::ids::Serial;
use acme_core::status::RevocationReason;
use rcgen::CertificateRevocationListParams;
use rcgen::CrlDistributionPoint;
use rcgen::CrlIssuingDistributionPoint;
use rcgen::CrlScope;
use rcgen::Issuer;
use rcgen::KeyIdMethod;
use rcgen::RevokedCertParams;
use rcgen::SanType;
use rcgen::SerialNumber;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::PrivatePkcs8KeyDer;
use time::Duration;
use time::OffsetDateTime;

use crate::alternate_chains;
use crate::alternate_chains::AlternateChains;
use crate::ca_key::CaKey;
use crate::crl_distribution::CrlDistribution;
use crate::csr::CheckedCsr;
use crate::error::Error;
use crate::files;
use crate::generate;
use crate::generate::CaPaths;
use crate::issuers;
use crate::issuers::IssuerName;
use crate::issuers::IssuerSettings;
use crate::issuers::LoadedIssuer;
use crate::issuers::RetiredIssuer;
use crate::key_algorithm::KeyAlgorithm;
use crate::loader;
use crate::loader::LoadedCa;
use crate::pem;
use crate::profile;
use crate::profile::LISTENER_USAGES;
use crate::profile::Usages;
use crate::profiles::Profile;
use crate::serial;
use crate::settings::CaSettings;
use crate::settings::KeySource;

/// How far Certeasy's own TLS certificate is backdated against client clock skew.
const SERVER_TLS_BACKDATE: Duration = Duration::minutes(5);

/// A loaded issuing CA. Immutable after loading, so it is shared in an `Arc` without locks; a
/// reload of `ca.issuers` builds a new one ([`Ca::with_reloaded_issuers`]) that shares the
/// implicit issuer's key, and swaps it in through a [`crate::CaHandle`].
#[derive(Debug)]
pub struct Ca {
    /// Shared with the sets a reload builds: the implicit issuer's key is loaded once (a
    /// PKCS#11 login, a PIN) and never again while the server runs.
    issuer: Arc<Issuer<'static, CaKey>>,
    issuing_ski: Option<Vec<u8>>,
    issuing_not_after: OffsetDateTime,
    /// Shared with every [`IssuedCertificate`], which names it instead of copying it.
    chain_pem: Arc<str>,
    root_pem: String,
    root_path: Option<PathBuf>,
    may_sign_crls: bool,
    crl: Option<CrlDistribution>,
    /// Subscriber certificates signed since loading ([`Ca::leaves_signed`]), counted across
    /// reloads that kept this issuer.
    leaves_signed: Arc<AtomicU64>,
    /// What signs the listener's own certificate, or why nothing can.
    listener: Result<Arc<ListenerIssuer>, String>,
    /// Alternate chains (RFC 8555 §7.4.2) per issuing certificate that has any.
    alternate_chains: Arc<Vec<AlternateChains>>,
    /// This issuing CA's configured name: "default" for the implicit one (`issuers` module).
    name: IssuerName,
    /// The further issuers (`ca.issuers`) beside the implicit one, each an issuing CA of its
    /// own with no listener and no further issuers; empty in each of them.
    others: BTreeMap<IssuerName, Ca>,
    /// Configured issuers whose certificate had expired at loading: listed, never used.
    retired: Vec<RetiredIssuer>,
}

/// The intermediate that signs Certeasy's own listener certificate, apart from the issuing CA:
/// the listener's certificates are not recorded in the database, and the issuing CA signs only
/// certificates that are.
#[derive(Debug)]
struct ListenerIssuer {
    issuer: Issuer<'static, CaKey>,
    not_after: OffsetDateTime,
    /// The listener intermediate and any CA certificates above it except the root.
    chain_der: Vec<Vec<u8>>,
    chain_pem: String,
}

impl ListenerIssuer {
    fn from_loaded(loaded: LoadedCa) -> Self {
        let chain_pem = loaded
            .chain_der
            .iter()
            .map(|der| pem::encode_certificate(der))
            .collect();
        Self {
            issuer: loaded.issuer,
            not_after: loaded.issuing_not_after,
            chain_der: loaded.chain_der,
            chain_pem,
        }
    }
}

/// A subscriber certificate as decided before it is signed ([`Ca::prepare`]): recorded first,
/// then signed exactly ([`Ca::issue`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    /// The certificate's serial number.
    pub serial: Serial,
    /// Validity start as it will be written (whole seconds).
    pub not_before: OffsetDateTime,
    /// Validity end as it will be written (whole seconds).
    pub not_after: OffsetDateTime,
    /// The CRL shard its distribution point will name; `None` when no CRLs are published.
    pub crl_shard: Option<u16>,
}

/// A signed subscriber certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCertificate {
    /// The certificate's serial number.
    pub serial: Serial,
    /// The leaf certificate, DER.
    pub der: Vec<u8>,
    /// The CA certificates that follow the leaf in its download (without the root), PEM.
    pub issuer_chain_pem: Arc<str>,
    /// Validity start as written (whole seconds).
    pub not_before: OffsetDateTime,
    /// Validity end as written (whole seconds).
    pub not_after: OffsetDateTime,
    /// The CRL shard named in the certificate's distribution point; `None` when no CRLs are
    /// published (the certificate then names none).
    pub crl_shard: Option<u16>,
}

impl IssuedCertificate {
    /// The leaf certificate, PEM.
    pub fn pem(&self) -> String {
        pem::encode_certificate(&self.der)
    }

    /// The leaf followed by the CA chain (without the root): the ACME certificate download.
    pub fn chain_pem(&self) -> String {
        format!("{}{}", self.pem(), self.issuer_chain_pem)
    }
}

/// Certificate and key for Certeasy's own HTTPS listener.
#[derive(Debug)]
pub struct TlsIdentity {
    /// Leaf followed by the CA chain (without the root), DER, ready for rustls.
    pub cert_chain: Vec<CertificateDer<'static>>,
    /// The leaf's fresh ECDSA P-256 key, PKCS#8 DER.
    pub key: PrivatePkcs8KeyDer<'static>,
    /// `cert_chain` as PEM.
    pub cert_chain_pem: String,
    /// `key` as PEM.
    pub key_pem: String,
    /// When the leaf expires: renew before then.
    pub not_after: OffsetDateTime,
}

/// One revoked certificate to list in a CRL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokedEntry {
    /// Serial of the revoked certificate.
    pub serial: Serial,
    /// When the revocation was processed.
    pub revoked_at: OffsetDateTime,
    /// The reason given; `Unspecified` leaves the reason code out, as RFC 5280 §5.3.1 asks.
    pub reason: RevocationReason,
}

impl Ca {
    /// Loads the CA described by `settings`, generating root and intermediate on first start.
    ///
    /// With `settings.existing` the operator's files are loaded instead. In either case the
    /// issuing certificate must be a CA, its key must match, the chain must link, and a probe
    /// signature must verify, so a broken CA stops the server at start-up.
    pub fn load_or_create(settings: &CaSettings, now: OffsetDateTime) -> Result<Ca, Error> {
        if let Some(existing) = &settings.existing {
            let loaded = loader::load(
                &existing.certificate,
                &existing.private_key,
                existing.chain.as_deref(),
                now,
            )?;
            let beside = existing
                .certificate
                .parent()
                .unwrap_or_else(|| Path::new("."));
            let listener = Self::existing_listener(beside, existing.chain.as_deref(), now)?;
            let alternate_chains =
                AlternateChains::of_loaded(&loaded, &settings.alternate_chains, now)?;
            return Ok(Self {
                listener: listener.map(Arc::new),
                ..Self::from_loaded(loaded).with_alternate_chains(alternate_chains)
            });
        }
        files::ensure_dir(&settings.dir)?;
        let paths = CaPaths::in_dir(&settings.dir);
        if !exists(&paths.root_cert)? {
            generate::create(settings, &paths, now)?;
        }
        for path in [&paths.intermediate_cert, &paths.intermediate_key] {
            if !exists(path)? {
                return Err(Error::InvalidCa(format!(
                    "{} is missing although {} exists; restore it, or empty {} to generate a new CA",
                    path.display(),
                    paths.root_cert.display(),
                    settings.dir.display()
                )));
            }
        }
        let loaded = loader::load(
            &paths.intermediate_cert,
            &KeySource::File(paths.intermediate_key.clone()),
            Some(&paths.root_cert),
            now,
        )?;
        if loaded.key_is_rsa != settings.key_algorithm.is_rsa() {
            tracing::warn!(
                configured = settings.key_algorithm.as_str(),
                dir = %settings.dir.display(),
                "the CA in this directory was generated with another key algorithm; it is used as it is"
            );
        }
        let listener = Self::generated_listener(settings, &paths, now)?;
        for warning in generate::root_key_warnings(settings) {
            tracing::warn!("{warning}");
        }
        Ok(Self {
            listener: listener.map(Arc::new),
            ..Self::from_loaded(loaded)
        })
    }

    /// The listener's intermediate of a generated CA: loaded, or created with the root key when
    /// the directory predates it. Without `listener.pem` and without `root.key` there is none,
    /// which refuses only a self-issued listener certificate (`Err` holds why, for that
    /// refusal). A listener intermediate that is there but unusable stops the start.
    fn generated_listener(
        settings: &CaSettings,
        paths: &CaPaths,
        now: OffsetDateTime,
    ) -> Result<Result<ListenerIssuer, String>, Error> {
        if !exists(&paths.listener_cert)? {
            if !generate::create_listener(settings, paths, now)? {
                return Ok(Err(format!(
                    "{} is missing, and {} is not there to create it: the issuing intermediate signs only certificates the database records, so it does not sign the listener's; put root.key back for one start (Certeasy then creates the listener's intermediate), or give the listener a certificate of its own (server.tls-certificate and server.tls-private-key)",
                    paths.listener_cert.display(),
                    paths.legacy_root_key.display()
                )));
            }
            tracing::info!(
                certificate = %paths.listener_cert.display(),
                key = %paths.listener_key.display(),
                "created the listener's intermediate under the root: the listener's own certificate is signed by it from now on, never by the issuing intermediate"
            );
        }
        let loaded = loader::load(
            &paths.listener_cert,
            &KeySource::File(paths.listener_key.clone()),
            Some(&paths.root_cert),
            now,
        )?;
        Ok(Ok(ListenerIssuer::from_loaded(loaded)))
    }

    /// The listener's intermediate of an operator's CA: `listener.pem` and `listener.key` beside
    /// the issuing certificate, made by the operator under the same root, with `chain` above it.
    /// Without them there is none (`Err` holds why).
    fn existing_listener(
        beside: &Path,
        chain: Option<&Path>,
        now: OffsetDateTime,
    ) -> Result<Result<ListenerIssuer, String>, Error> {
        let certificate = beside.join(generate::LISTENER_CERT);
        let key = beside.join(generate::LISTENER_KEY);
        if !exists(&certificate)? {
            return Ok(Err(format!(
                "{} is missing: with ca.existing the issuing intermediate signs only certificates the database records, so the listener's certificate needs an intermediate of its own, {} with its key {}, under the same root (see docs/operations.md), or a certificate of its own (server.tls-certificate and server.tls-private-key)",
                certificate.display(),
                generate::LISTENER_CERT,
                generate::LISTENER_KEY
            )));
        }
        let loaded = loader::load(&certificate, &KeySource::File(key), chain, now)?;
        Ok(Ok(ListenerIssuer::from_loaded(loaded)))
    }

    pub(crate) fn from_loaded(loaded: LoadedCa) -> Self {
        let chain_pem: String = loaded
            .chain_der
            .iter()
            .map(|der| pem::encode_certificate(der))
            .collect();
        Self {
            issuer: Arc::new(loaded.issuer),
            issuing_ski: loaded.issuing_ski,
            issuing_not_after: loaded.issuing_not_after,
            chain_pem: chain_pem.into(),
            root_pem: pem::encode_certificate(&loaded.root_der),
            root_path: loaded.root_path,
            may_sign_crls: loaded.may_sign_crls,
            crl: None,
            leaves_signed: Arc::new(AtomicU64::new(0)),
            listener: Err("no listener CA was loaded".to_owned()),
            alternate_chains: Arc::new(Vec::new()),
            name: IssuerName::implicit(),
            others: BTreeMap::new(),
            retired: Vec::new(),
        }
    }

    /// Makes every subscriber certificate signed from now on name its CRL shard in a CRL
    /// distribution point (RFC 5280 §4.2.1.13).
    #[must_use]
    pub fn with_crl_distribution(mut self, crl: CrlDistribution) -> Self {
        if !self.may_sign_crls {
            // An operator's CA whose keyUsage lacks cRLSign: relying parties reject its CRLs,
            // and a revoked certificate would look good to them. Publishing still helps those
            // that do not check the key usage; the operator must know.
            tracing::warn!(
                "the issuing CA certificate's keyUsage lacks cRLSign: relying parties that check it will reject the CRLs; reissue the intermediate with cRLSign, or set crl.enabled: false"
            );
        }
        // Every further issuer publishes its own shards under `<base>/<name>/`, named in its
        // certificates and in its CRLs' issuing distribution point; the implicit issuer keeps
        // `<base>/`, which the certificates it signed before rotation name.
        self.others = std::mem::take(&mut self.others)
            .into_iter()
            .map(|(name, other)| {
                let own = CrlDistribution {
                    base_url: format!("{}/{name}", crl.base_url.trim_end_matches('/')),
                    shards: crl.shards,
                };
                (name, other.with_crl_distribution(own))
            })
            .collect();
        self.crl = Some(crl);
        self
    }

    /// Whether the issuing certificate allows CRL signing (no keyUsage, or one with cRLSign).
    pub fn may_sign_crls(&self) -> bool {
        self.may_sign_crls
    }

    /// The CRL shards certificates are spread over, when CRLs are published.
    pub fn crl_distribution(&self) -> Option<&CrlDistribution> {
        self.crl.as_ref()
    }

    /// PEM of the certificate clients must trust.
    pub fn root_pem(&self) -> &str {
        &self.root_pem
    }

    /// The file holding exactly the root certificate, when there is one.
    pub fn root_path(&self) -> Option<&Path> {
        self.root_path.as_deref()
    }

    /// PEM of the issuing CA and any CA certificates above it except the root, to append after
    /// a leaf.
    pub fn chain_pem(&self) -> &str {
        &self.chain_pem
    }

    /// The alternate chains (RFC 8555 §7.4.2) a leaf can be downloaded with besides its own,
    /// PEM without the root, each to append after the leaf: those configured for the issuing
    /// certificate whose key signed it under its name, whichever issuer ([`Ca::issuers`]) that
    /// is. Empty for a leaf of an issuer without alternate chains.
    pub fn alternate_chains_for(&self, leaf_der: &[u8]) -> &[Arc<str>] {
        let sets = self.issuers().flat_map(|ca| ca.alternate_chains.iter());
        alternate_chains::for_leaf(sets, leaf_der)
    }

    /// This issuing CA's own alternate chains, for [`crate::CaHandle::alternate_chains_for`].
    pub(crate) fn alternate_chain_sets(&self) -> std::slice::Iter<'_, AlternateChains> {
        self.alternate_chains.iter()
    }

    /// Gives this issuing CA the alternate chains `sets` (loaded for its certificate).
    #[must_use]
    pub(crate) fn with_alternate_chains(mut self, sets: Vec<AlternateChains>) -> Self {
        self.alternate_chains = Arc::new(sets);
        self
    }

    /// When the issuing CA certificate expires; no certificate may outlive it.
    pub fn issuing_not_after(&self) -> OffsetDateTime {
        self.issuing_not_after
    }

    /// Everything about a subscriber certificate that is decided before it is signed, checked:
    /// `identifiers` are the set the CSR was checked against, the CSR's key is a type `profile`
    /// certifies ([`Error::BadCsr`] otherwise), the identifiers make certificate names, and the
    /// window (truncated to whole seconds) is not empty and ends no later than the issuing CA
    /// (refused rather than silently shortened). Then a fresh serial and its CRL shard.
    ///
    /// Nothing is signed here: the caller records the [`Intent`] first, then has exactly it
    /// signed with [`Ca::issue`], so that no certificate exists that the records do not name.
    pub fn prepare(
        &self,
        csr: &CheckedCsr,
        identifiers: &[Identifier],
        profile: &Profile,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<Intent, Error> {
        let intent = Intent {
            serial: Serial::from_bytes(serial::random_serial()?.to_vec()),
            not_before: whole_seconds(not_before),
            not_after: whole_seconds(not_after),
            crl_shard: None,
        };
        let crl_shard = self.crl.as_ref().map(|crl| crl.shard_of(&intent.serial));
        let intent = Intent {
            crl_shard,
            ..intent
        };
        self.check(csr, identifiers, profile, &intent)?;
        Ok(intent)
    }

    /// Signs the subscriber certificate `intent` describes (made by [`Ca::prepare`], and
    /// recorded since): for exactly `identifiers`, with the CSR's public key and the key usages
    /// and extended key usages of `profile`, with the intent's serial, window and CRL shard.
    /// Signing the same intent again (a job resumed after a crash) gives a certificate that
    /// differs only in its signature. Every check of [`Ca::prepare`] is made again first.
    pub fn issue(
        &self,
        csr: &CheckedCsr,
        identifiers: &[Identifier],
        profile: &Profile,
        intent: &Intent,
    ) -> Result<IssuedCertificate, Error> {
        let sans = self.check(csr, identifiers, profile, intent)?;
        let usages = Usages {
            key_usages: profile.key_usages(),
            extended_key_usages: profile.extended_key_usages(),
        };
        let mut params = profile::leaf(
            &sans,
            intent.serial.as_bytes(),
            intent.not_before,
            intent.not_after,
            usages,
            csr.key_algorithm.is_rsa(),
        );
        if let Some(shard) = intent.crl_shard {
            let crl = self.crl.as_ref().ok_or_else(|| {
                Error::InvalidRequest(
                    "the certificate was reserved with a CRL shard, and CRLs are no longer published"
                        .to_owned(),
                )
            })?;
            params.crl_distribution_points = vec![CrlDistributionPoint {
                uris: vec![crl.url(shard)],
            }];
        }
        let cert = params
            .signed_by(&csr.key, self.issuer.as_ref())
            .map_err(Error::signing)?;
        self.leaves_signed.fetch_add(1, Ordering::Relaxed);
        // The PEM texts are made when asked for (`IssuedCertificate::pem`): the server stores
        // the DER and the chain, and assembles the download when it is read.
        Ok(IssuedCertificate {
            serial: intent.serial.clone(),
            der: cert.der().to_vec(),
            issuer_chain_pem: Arc::clone(&self.chain_pem),
            not_before: intent.not_before,
            not_after: intent.not_after,
            crl_shard: intent.crl_shard,
        })
    }

    /// How many subscriber certificates this CA has signed since it was loaded: every one of
    /// them was recorded before it was signed.
    pub fn leaves_signed(&self) -> u64 {
        self.leaves_signed.load(Ordering::Relaxed)
    }

    /// The checks of [`Ca::prepare`]; the certificate's names when they pass.
    fn check(
        &self,
        csr: &CheckedCsr,
        identifiers: &[Identifier],
        profile: &Profile,
        intent: &Intent,
    ) -> Result<Vec<SanType>, Error> {
        let requested: BTreeSet<&Identifier> = identifiers.iter().collect();
        if requested != csr.names.iter().collect() {
            return Err(Error::InvalidRequest(
                "the identifiers differ from those the CSR was checked against".to_owned(),
            ));
        }
        let (not_before, not_after) = (intent.not_before, intent.not_after);
        if not_after <= not_before {
            return Err(Error::InvalidRequest(format!(
                "the validity window {not_before} .. {not_after} is empty"
            )));
        }
        if not_after > self.issuing_not_after {
            return Err(Error::InvalidRequest(format!(
                "a certificate valid until {not_after} would outlive the issuing CA, which expires at {}",
                self.issuing_not_after
            )));
        }
        profile.check_key(csr)?;
        profile::identifier_sans(identifiers)
    }

    /// A certificate for Certeasy's own HTTPS listener with a fresh ECDSA P-256 key, signed by
    /// the listener's intermediate, never by the issuing CA (whose every certificate the
    /// database records). [`Error::InvalidCa`] saying why when there is no listener
    /// intermediate.
    ///
    /// Backdated by five minutes against client clock skew; the end is cut to the listener
    /// intermediate's.
    pub fn issue_server_tls(
        &self,
        dns_names: &[String],
        ips: &[IpAddr],
        now: OffsetDateTime,
        validity: Duration,
    ) -> Result<TlsIdentity, Error> {
        let listener = self
            .listener
            .as_ref()
            .map_err(|why| Error::InvalidCa(why.clone()))?;
        let sans = profile::server_sans(dns_names, ips)?;
        let not_before = whole_seconds(now - SERVER_TLS_BACKDATE);
        let not_after = whole_seconds((now + validity).min(listener.not_after));
        if not_after <= not_before {
            return Err(Error::InvalidRequest(
                "the server certificate's validity window is empty".to_owned(),
            ));
        }
        let key = KeyAlgorithm::EcdsaP256.generate()?;
        let serial = serial::random_serial()?;
        let params = profile::leaf(
            &sans,
            &serial,
            not_before,
            not_after,
            LISTENER_USAGES,
            false,
        );
        let cert = params
            .signed_by(&key, &listener.issuer)
            .map_err(Error::signing)?;
        let leaf_pem = pem::encode_certificate(cert.der());
        let mut cert_chain = vec![cert.der().clone()];
        cert_chain.extend(
            listener
                .chain_der
                .iter()
                .map(|der| CertificateDer::from(der.clone())),
        );
        Ok(TlsIdentity {
            cert_chain,
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
            cert_chain_pem: format!("{leaf_pem}{}", listener.chain_pem),
            key_pem: key.serialize_pem(),
            not_after,
        })
    }

    /// A DER CRL (RFC 5280 §5) of shard `shard`, signed by the issuing CA, listing `revoked`.
    ///
    /// `number` must grow with every CRL the caller publishes. The authority key identifier is
    /// the issuing certificate's own subject key identifier, so clients match CRL to CA even
    /// for an operator CA whose identifiers were made with another method.
    ///
    /// The CRL carries a critical issuing distribution point (RFC 5280 §5.2.5) naming exactly
    /// the URL the shard's certificates name in their CRL distribution point, and limiting it to
    /// end-entity certificates. Without it each shard would claim to be the issuer's complete
    /// CRL, and a relying party that caches CRLs per issuer could check a revoked certificate
    /// against another shard and accept it. Refused when no CRL distribution is configured
    /// ([`Ca::with_crl_distribution`]): there would be no URL to name.
    pub fn crl(
        &self,
        shard: u16,
        revoked: &[RevokedEntry],
        number: u64,
        now: OffsetDateTime,
        next_update: OffsetDateTime,
    ) -> Result<Vec<u8>, Error> {
        let Some(distribution) = &self.crl else {
            return Err(Error::InvalidRequest(
                "CRLs are not published: there is no distribution point to name".to_owned(),
            ));
        };
        let this_update = whole_seconds(now);
        let next_update = whole_seconds(next_update);
        if next_update <= this_update {
            return Err(Error::InvalidRequest(
                "a CRL's nextUpdate must be after its thisUpdate".to_owned(),
            ));
        }
        let number_bytes = number.to_be_bytes();
        let first = number_bytes
            .iter()
            .position(|b| *b != 0)
            .unwrap_or(number_bytes.len() - 1);
        let params = CertificateRevocationListParams {
            this_update,
            next_update,
            crl_number: SerialNumber::from_slice(&number_bytes[first..]),
            // rcgen writes this extension critical, as RFC 5280 §5.2.5 requires.
            issuing_distribution_point: Some(CrlIssuingDistributionPoint {
                distribution_point: CrlDistributionPoint {
                    uris: vec![distribution.url(shard)],
                },
                scope: Some(CrlScope::UserCertsOnly),
            }),
            revoked_certs: revoked.iter().map(revoked_params).collect(),
            key_identifier_method: match &self.issuing_ski {
                Some(ski) => KeyIdMethod::PreSpecified(ski.clone()),
                None => KeyIdMethod::Sha256,
            },
        };
        let crl = params
            .signed_by(self.issuer.as_ref())
            .map_err(Error::signing)?;
        Ok(crl.der().to_vec())
    }
}

/// Several issuers (the `issuers` module): the implicit one is the `Ca` itself, the further
/// ones are held in it by name.
impl Ca {
    /// Loads `issuers` (`ca.issuers`) beside this, the implicit issuer. An expired one is kept
    /// as retired; any other failure stops the start, naming the file.
    pub fn with_issuers(
        mut self,
        issuers: &[IssuerSettings],
        now: OffsetDateTime,
    ) -> Result<Self, Error> {
        for settings in issuers {
            if settings.name == self.name || self.others.contains_key(&settings.name) {
                return Err(Error::InvalidCa(format!(
                    "issuer {} is configured twice",
                    settings.name
                )));
            }
            // Named here: a reload's refusal must say which entry of `ca.issuers` failed, and
            // the loader's own messages name only the file.
            let loaded = issuers::load(settings, now).map_err(|e| {
                Error::InvalidCa(format!("ca.issuers entry {}: {e}", settings.name))
            })?;
            match loaded {
                LoadedIssuer::Usable {
                    loaded,
                    alternate_chains,
                } => {
                    let mut ca = Ca::from_loaded(*loaded)
                        .named(settings.name.clone())
                        .with_alternate_chains(alternate_chains);
                    if let Some(crl) = &self.crl {
                        let own = CrlDistribution {
                            base_url: format!(
                                "{}/{}",
                                crl.base_url.trim_end_matches('/'),
                                settings.name
                            ),
                            shards: crl.shards,
                        };
                        ca = ca.with_crl_distribution(own);
                    }
                    self.others.insert(settings.name.clone(), ca);
                }
                LoadedIssuer::Retired(retired) => self.retired.push(retired),
            }
        }
        Ok(self)
    }

    /// The same implicit issuer (key, listener, CRL distribution, counters shared, nothing
    /// loaded again) with `issuers` loaded afresh from their files beside it: what a reload of
    /// `ca.issuers` swaps in. Fails as [`Ca::with_issuers`] does, naming the entry; then `self`
    /// is untouched and stays in force.
    pub fn with_reloaded_issuers(
        &self,
        issuers: &[IssuerSettings],
        now: OffsetDateTime,
    ) -> Result<Ca, Error> {
        let implicit = Ca {
            issuer: Arc::clone(&self.issuer),
            issuing_ski: self.issuing_ski.clone(),
            issuing_not_after: self.issuing_not_after,
            chain_pem: Arc::clone(&self.chain_pem),
            root_pem: self.root_pem.clone(),
            root_path: self.root_path.clone(),
            may_sign_crls: self.may_sign_crls,
            crl: self.crl.clone(),
            leaves_signed: Arc::clone(&self.leaves_signed),
            listener: self.listener.clone(),
            alternate_chains: Arc::clone(&self.alternate_chains),
            name: self.name.clone(),
            others: BTreeMap::new(),
            retired: Vec::new(),
        };
        implicit.with_issuers(issuers, now)
    }

    /// The names of every configured issuer, usable or retired, the implicit one first: what a
    /// reload compares to tell which issuers it adds and removes.
    pub fn configured_names(&self) -> Vec<IssuerName> {
        self.issuers()
            .map(|ca| ca.name.clone())
            .chain(self.retired.iter().map(|r| r.name.clone()))
            .collect()
    }

    /// Names this issuing CA (a further issuer's).
    #[must_use]
    pub(crate) fn named(mut self, name: IssuerName) -> Self {
        self.name = name;
        self
    }

    /// This issuing CA's configured name.
    pub fn name(&self) -> &IssuerName {
        &self.name
    }

    /// The issuing CA named `name` that can sign: this one, or a further issuer. `None` for a
    /// name not configured, or retired.
    pub fn issuer(&self, name: &IssuerName) -> Option<&Ca> {
        if name == &self.name {
            Some(self)
        } else {
            self.others.get(name)
        }
    }

    /// Every issuing CA that can sign, the implicit one first.
    pub fn issuers(&self) -> impl Iterator<Item = &Ca> {
        std::iter::once(self).chain(self.others.values())
    }

    /// The configured issuers that had expired when they were loaded.
    pub fn retired_issuers(&self) -> &[RetiredIssuer] {
        &self.retired
    }

    /// Whether this issuing CA still publishes CRLs at `now`: until its own certificate
    /// expires, since no certificate it signed outlives it ([`Ca::prepare`] refuses one that
    /// would), so its last certificate has expired by then.
    pub fn publishes_crls_at(&self, now: OffsetDateTime) -> bool {
        self.crl.is_some() && now < self.issuing_not_after
    }
}

fn revoked_params(entry: &RevokedEntry) -> RevokedCertParams {
    let reason = match entry.reason {
        RevocationReason::Unspecified => rcgen::RevocationReason::Unspecified,
        RevocationReason::KeyCompromise => rcgen::RevocationReason::KeyCompromise,
        RevocationReason::AffiliationChanged => rcgen::RevocationReason::AffiliationChanged,
        RevocationReason::Superseded => rcgen::RevocationReason::Superseded,
        RevocationReason::CessationOfOperation => rcgen::RevocationReason::CessationOfOperation,
    };
    RevokedCertParams {
        serial_number: SerialNumber::from_slice(entry.serial.as_bytes()),
        revocation_time: whole_seconds(entry.revoked_at),
        // RFC 5280 §5.3.1: reasonCode unspecified SHOULD be absent.
        reason_code: (entry.reason != RevocationReason::Unspecified).then_some(reason),
        invalidity_date: None,
    }
}

/// X.509 times have whole seconds; truncating here makes the returned times equal the written ones.
fn whole_seconds(t: OffsetDateTime) -> OffsetDateTime {
    t.replace_nanosecond(0).unwrap_or(t)
}

fn exists(path: &Path) -> Result<bool, Error> {
    path.try_exists().map_err(|e| Error::io(path, e))
}
