//! The key ceremony: making a CA hierarchy whose root stays offline (`certeasy ca init`),
//! making the next intermediate under that root or a CSR for it (`certeasy ca new-intermediate`),
//! moving a root key off the server (`certeasy ca move-root-key`), and the name constraints an
//! intermediate can carry.
//!
//! Why this shape: `certeasy serve` signs with the issuing intermediate only, so the root's key
//! is needed only when an intermediate is made. Keeping it where the operator says (removable
//! media, a safe) and never in the CA directory means a stolen data directory gives away an
//! intermediate, which can be revoked and replaced under the same root, and not the root, which
//! every client trusts. Name constraints bound what even a stolen intermediate can do: clients
//! that check them (OpenSSL, Go, browsers, rustls' webpki) refuse a certificate for a name
//! outside the organisation's domains and networks, whoever signed it.
//!
//! Every function here writes keys with mode 0600 atomically (a crash leaves the old state or
//! the new, never half a key) and refuses to overwrite a key or a certificate: a ceremony that
//! replaced an existing root key by mistake could not be undone.

use std::net::IpAddr;
use std::path::Path;
use std::path::PathBuf;

use acme_core::identifier::IdentifierPolicy;
use rcgen::CidrSubnet;
use rcgen::CustomExtension;
use rcgen::GeneralSubtree;
use rcgen::Issuer;
use rcgen::KeyPair;
use rcgen::PublicKeyData;
use rcgen::SigningKey;
use rustls_pki_types::CertificateDer;
use time::Duration;
use time::OffsetDateTime;

use crate::error::Error;
use crate::files;
use crate::generate;
use crate::generate::CaPaths;
use crate::key_algorithm::KeyAlgorithm;
use crate::loader;
use crate::pem;
use crate::profile;
use crate::serial;
use crate::settings::CaSettings;

pub use crate::generate::root_key_warnings;

/// OID of the nameConstraints extension (RFC 5280 §4.2.1.10).
const NAME_CONSTRAINTS_OID: &[u64] = &[2, 5, 29, 30];

/// The names an intermediate may certify, taken from the identifier policy (`identifiers:`):
/// its allowed domains and networks become permitted subtrees, its denied ones excluded
/// subtrees. A name form with no permitted subtree is not limited, exactly as the policy
/// allows any IP address when `allow-cidrs` is empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameConstraints {
    /// DNS subtrees certificates may name: the domain and every name below it.
    pub permitted_dns: Vec<String>,
    /// DNS subtrees certificates must not name.
    pub excluded_dns: Vec<String>,
    /// Networks (address, prefix length) certificates' IP addresses must lie in.
    pub permitted_ip: Vec<(IpAddr, u8)>,
    /// Networks certificates' IP addresses must not lie in.
    pub excluded_ip: Vec<(IpAddr, u8)>,
}

impl NameConstraints {
    /// The constraints of `policy`. Refused when the policy limits nothing (there would be no
    /// constraint to write) and for a domain that is not ASCII (a dNSName is an IA5String: give
    /// the `xn--` form).
    pub fn from_policy(policy: &IdentifierPolicy) -> Result<Self, Error> {
        let domains = |list: &[String]| -> Result<Vec<String>, Error> {
            let mut out: Vec<String> = Vec::with_capacity(list.len());
            for entry in list {
                let domain = entry
                    .trim()
                    .trim_end_matches('.')
                    .trim_start_matches("*.")
                    .to_ascii_lowercase();
                if domain.is_empty() || !domain.is_ascii() {
                    return Err(Error::InvalidRequest(format!(
                        "{entry:?} cannot be a name constraint: give a domain in ASCII (the xn-- form of an internationalised name)"
                    )));
                }
                if !out.contains(&domain) {
                    out.push(domain);
                }
            }
            Ok(out)
        };
        let constraints = Self {
            permitted_dns: domains(&policy.allow_domains)?,
            excluded_dns: domains(&policy.deny_domains)?,
            permitted_ip: policy
                .allow_cidrs
                .iter()
                .map(|net| (net.network(), net.prefix_len()))
                .collect(),
            excluded_ip: policy
                .deny_cidrs
                .iter()
                .map(|net| (net.network(), net.prefix_len()))
                .collect(),
        };
        if constraints.permitted_dns.is_empty()
            && constraints.excluded_dns.is_empty()
            && constraints.permitted_ip.is_empty()
            && constraints.excluded_ip.is_empty()
        {
            return Err(Error::InvalidRequest(
                "the identifier policy limits nothing (identifiers.allow-domains, allow-cidrs, deny-domains and deny-cidrs are all empty): there are no name constraints to put on the intermediate".to_owned(),
            ));
        }
        Ok(constraints)
    }

    /// One line per constrained name form, for people.
    pub fn describe(&self) -> Vec<String> {
        let nets = |list: &[(IpAddr, u8)]| {
            list.iter()
                .map(|(addr, prefix)| format!("{addr}/{prefix}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut lines = Vec::new();
        if self.permitted_dns.is_empty() {
            lines.push("DNS names: any (identifiers.allow-domains is empty)".to_owned());
        } else {
            lines.push(format!(
                "DNS names: only in {}",
                self.permitted_dns.join(", ")
            ));
        }
        if !self.excluded_dns.is_empty() {
            lines.push(format!(
                "DNS names: never in {}",
                self.excluded_dns.join(", ")
            ));
        }
        if self.permitted_ip.is_empty() {
            lines.push("IP addresses: any (identifiers.allow-cidrs is empty)".to_owned());
        } else {
            lines.push(format!(
                "IP addresses: only in {}",
                nets(&self.permitted_ip)
            ));
        }
        if !self.excluded_ip.is_empty() {
            lines.push(format!(
                "IP addresses: never in {}",
                nets(&self.excluded_ip)
            ));
        }
        lines
    }

    pub(crate) fn to_rcgen(&self) -> rcgen::NameConstraints {
        let subtrees = |dns: &[String], ips: &[(IpAddr, u8)]| -> Vec<GeneralSubtree> {
            dns.iter()
                .map(|d| GeneralSubtree::DnsName(d.clone()))
                .chain(ips.iter().map(|(addr, prefix)| {
                    GeneralSubtree::IpAddress(CidrSubnet::from_addr_prefix(*addr, *prefix))
                }))
                .collect()
        };
        rcgen::NameConstraints {
            permitted_subtrees: subtrees(&self.permitted_dns, &self.permitted_ip),
            excluded_subtrees: subtrees(&self.excluded_dns, &self.excluded_ip),
        }
    }
}

/// `certeasy ca init`: what to make.
#[derive(Debug)]
pub struct InitRequest<'a> {
    /// The CA's names, key algorithm and lifetimes; `dir` is the CA directory to fill. Its
    /// `generated_root_key` is not used: the root key goes to `root_key_out`.
    pub settings: &'a CaSettings,
    /// Where the root's private key is written; must not exist, must not be in `settings.dir`.
    pub root_key_out: &'a Path,
    /// Constraints for the issuing intermediate.
    pub name_constraints: Option<&'a NameConstraints>,
    /// Accept a `root_key_out` inside the CA directory (the operator said so).
    pub root_key_in_ca_dir_allowed: bool,
}

/// What `certeasy ca init` made, and where.
#[derive(Debug, Clone)]
pub struct InitOutcome {
    /// The root certificate: distribute it to clients.
    pub root_certificate: PathBuf,
    /// The root's private key: take it offline.
    pub root_key: PathBuf,
    /// SHA-256 of the root certificate's DER, colon-separated upper-case hex (as `openssl x509
    /// -fingerprint -sha256` prints it), for clients to check what they were given.
    pub root_sha256: String,
    /// When the root expires.
    pub root_not_after: OffsetDateTime,
    /// The issuing intermediate: stays on the server.
    pub intermediate_certificate: PathBuf,
    /// Its key file; `None` when the key was made on a token.
    pub intermediate_key: Option<PathBuf>,
    /// When the intermediates expire.
    pub intermediate_not_after: OffsetDateTime,
    /// The listener's intermediate and its key: stay on the server.
    pub listener_certificate: PathBuf,
    /// See `listener_certificate`.
    pub listener_key: PathBuf,
}

/// `certeasy ca init`: a new root, the issuing intermediate (its key generated into the CA
/// directory, or made on a token by the caller: [`init_with_key`]) and the listener's
/// intermediate, as a first start of `certeasy serve` would make them, but with the root's key
/// written only to `root_key_out` and the issuing intermediate optionally name-constrained.
/// Refused when the CA directory already holds any file of a CA.
pub fn init(request: &InitRequest<'_>, now: OffsetDateTime) -> Result<InitOutcome, Error> {
    init_inner::<KeyPair>(request, None, now)
}

/// [`init`] with the issuing intermediate's key made elsewhere (on a token): no
/// `intermediate.key` is written.
pub fn init_with_key<K: SigningKey>(
    request: &InitRequest<'_>,
    intermediate_key: &K,
    now: OffsetDateTime,
) -> Result<InitOutcome, Error> {
    init_inner(request, Some(intermediate_key), now)
}

/// The refusals of [`init`], made before anything is created: for a caller that makes the
/// intermediate's key on a token first, so that a refused ceremony leaves no key there.
pub fn check_init(request: &InitRequest<'_>) -> Result<(), Error> {
    let settings = request.settings;
    if !request.root_key_in_ca_dir_allowed && is_inside(request.root_key_out, &settings.dir) {
        return Err(Error::InvalidRequest(format!(
            "{} is inside the CA directory {}: the root key must be kept elsewhere (offline)",
            request.root_key_out.display(),
            settings.dir.display()
        )));
    }
    let paths = CaPaths::in_dir(&settings.dir);
    for path in paths.all() {
        if exists(path)? {
            return Err(Error::InvalidRequest(format!(
                "{} already exists: {} already holds a CA, which `ca init` does not overwrite (use `certeasy ca new-intermediate` to add an intermediate under its root, or give an empty directory)",
                path.display(),
                settings.dir.display()
            )));
        }
    }
    if exists(request.root_key_out)? {
        return Err(Error::InvalidRequest(format!(
            "{} already exists; it may be the key of an earlier root that clients trust, so it is not overwritten: move it away first",
            request.root_key_out.display()
        )));
    }
    Ok(())
}

fn init_inner<K: SigningKey>(
    request: &InitRequest<'_>,
    intermediate_key: Option<&K>,
    now: OffsetDateTime,
) -> Result<InitOutcome, Error> {
    check_init(request)?;
    let settings = request.settings;
    let paths = CaPaths::in_dir(&settings.dir);
    files::ensure_dir(&settings.dir)?;
    let made = generate::create_hierarchy(
        settings,
        &paths,
        Some(request.root_key_out),
        intermediate_key,
        request.name_constraints.map(NameConstraints::to_rcgen),
        now,
    )?;
    Ok(InitOutcome {
        root_certificate: paths.root_cert,
        root_key: request.root_key_out.to_path_buf(),
        root_sha256: fingerprint(&made.root_der),
        root_not_after: made.root_not_after,
        intermediate_certificate: paths.intermediate_cert,
        intermediate_key: intermediate_key.is_none().then_some(paths.intermediate_key),
        intermediate_not_after: made.intermediate_not_after,
        listener_certificate: paths.listener_cert,
        listener_key: paths.listener_key,
    })
}

/// `certeasy ca new-intermediate`: what to make.
#[derive(Debug)]
pub struct IntermediateRequest<'a> {
    /// The issuer's name in `ca.issuers` (`[a-z0-9-]{1,32}`, not `default`); the files are
    /// `<name>.pem` and `<name>.key`.
    pub name: &'a str,
    /// `O=` of the subject; empty for none.
    pub organization: &'a str,
    /// `CN=` of the subject.
    pub common_name: &'a str,
    /// Algorithm of a key generated here (not of a key made on a token).
    pub key_algorithm: KeyAlgorithm,
    /// Lifetime, cut to the root's when signed here.
    pub validity: Duration,
    /// Where `<name>.pem` and `<name>.key` are written (created 0700 if missing).
    pub out_dir: &'a Path,
    /// Constraints for the intermediate.
    pub name_constraints: Option<&'a NameConstraints>,
}

/// Who signs the new intermediate.
#[derive(Debug, Clone, Copy)]
pub enum IntermediateSigner<'a> {
    /// Nobody here: a PKCS#10 request is written to this file, for an external or offline root
    /// to sign. Name constraints are asked for in it as a requested extension (`openssl x509
    /// -req -copy_extensions copy` keeps them).
    Csr(&'a Path),
    /// The offline root, brought to this machine for the ceremony.
    Root {
        /// Its certificate (PEM).
        certificate: &'a Path,
        /// Its private key (PEM).
        key: &'a Path,
    },
}

/// What `certeasy ca new-intermediate` made.
#[derive(Debug, Clone)]
pub struct IntermediateOutcome {
    /// `<out-dir>/<name>.pem`, when the root signed here.
    pub certificate: Option<PathBuf>,
    /// `<out-dir>/<name>.key`; `None` when the key is on a token.
    pub key: Option<PathBuf>,
    /// The request written, with [`IntermediateSigner::Csr`].
    pub csr: Option<PathBuf>,
    /// The chain above the intermediate (the root's certificate), when the root signed here.
    pub chain: Option<PathBuf>,
    /// When the intermediate expires, when the root signed here.
    pub not_after: Option<OffsetDateTime>,
}

/// `certeasy ca new-intermediate`: a key (generated into `out_dir`, or made on a token by the
/// caller: [`new_intermediate_with_key`]) and either a CSR for it or its certificate signed by the offline root. The
/// certificate is the issuing-intermediate profile of a first start (pathLen 0, keyCertSign and
/// cRLSign), optionally name-constrained. Refuses to overwrite any file.
pub fn new_intermediate(
    request: &IntermediateRequest<'_>,
    signer: IntermediateSigner<'_>,
    now: OffsetDateTime,
) -> Result<IntermediateOutcome, Error> {
    new_intermediate_inner::<KeyPair>(request, signer, None, now)
}

/// [`new_intermediate`] with the key made elsewhere (on a token): no `<name>.key` is written.
pub fn new_intermediate_with_key<K: SigningKey>(
    request: &IntermediateRequest<'_>,
    signer: IntermediateSigner<'_>,
    key: &K,
    now: OffsetDateTime,
) -> Result<IntermediateOutcome, Error> {
    new_intermediate_inner(request, signer, Some(key), now)
}

/// The refusals of [`new_intermediate`] (`key_on_token`: of [`new_intermediate_with_key`]),
/// made before anything is created: for a caller that makes the key on a token first, so that
/// a refused ceremony leaves no key there.
pub fn check_new_intermediate(
    request: &IntermediateRequest<'_>,
    signer: IntermediateSigner<'_>,
    key_on_token: bool,
    now: OffsetDateTime,
) -> Result<(), Error> {
    preflight(request, signer, key_on_token, now).map(|_| ())
}

/// The checks of a new intermediate, and the offline root loaded when it signs.
fn preflight(
    request: &IntermediateRequest<'_>,
    signer: IntermediateSigner<'_>,
    key_on_token: bool,
    now: OffsetDateTime,
) -> Result<Option<OfflineRoot>, Error> {
    check_issuer_name(request.name)?;
    if !request.validity.is_positive() {
        return Err(Error::InvalidRequest(
            "the intermediate's validity must be positive".to_owned(),
        ));
    }
    let cert_path = request.out_dir.join(format!("{}.pem", request.name));
    let key_path = request.out_dir.join(format!("{}.key", request.name));
    let mut must_not_exist = vec![cert_path.as_path()];
    if !key_on_token {
        must_not_exist.push(&key_path);
    }
    if let IntermediateSigner::Csr(csr) = signer {
        must_not_exist.push(csr);
    }
    for path in must_not_exist {
        if exists(path)? {
            return Err(Error::InvalidRequest(format!(
                "{} already exists and is not overwritten",
                path.display()
            )));
        }
    }
    match signer {
        IntermediateSigner::Root { certificate, key } => {
            OfflineRoot::load(certificate, key, now).map(Some)
        }
        IntermediateSigner::Csr(_) => Ok(None),
    }
}

fn new_intermediate_inner<K: SigningKey>(
    request: &IntermediateRequest<'_>,
    signer: IntermediateSigner<'_>,
    key: Option<&K>,
    now: OffsetDateTime,
) -> Result<IntermediateOutcome, Error> {
    // Everything that can be refused is checked before a key is generated or written.
    let root = preflight(request, signer, key.is_some(), now)?;
    let cert_path = request.out_dir.join(format!("{}.pem", request.name));
    let key_path = request.out_dir.join(format!("{}.key", request.name));
    let new_key = match key {
        Some(key) => NewKey::Given(key),
        None => NewKey::Generated(request.key_algorithm.generate()?),
    };
    let generated = match &new_key {
        NewKey::Generated(key) => Some(key),
        NewKey::Given(_) => None,
    };
    let mut params = profile::intermediate(
        request.organization,
        request.common_name,
        &serial::random_serial()?,
        now - generate::BACKDATE,
        now + request.validity,
        request.name_constraints.map(NameConstraints::to_rcgen),
    );
    let outcome = match (signer, root) {
        (IntermediateSigner::Root { certificate, .. }, Some(root)) => {
            params.not_after = params.not_after.min(root.not_after);
            let cert = params
                .signed_by(&new_key, &root.issuer)
                .map_err(Error::signing)?;
            root.check_signed(cert.der())?;
            if let Some(k) = generated {
                write_key(&key_path, k)?;
            }
            files::ensure_dir(request.out_dir)?;
            files::write_atomically(&cert_path, cert.pem().as_bytes(), files::CERT_MODE)?;
            IntermediateOutcome {
                certificate: Some(cert_path),
                key: generated.is_some().then_some(key_path),
                csr: None,
                chain: Some(certificate.to_path_buf()),
                not_after: Some(params.not_after),
            }
        }
        (IntermediateSigner::Csr(csr_path), _) => {
            // A CSR carries neither serial, validity nor authority key identifier, and rcgen
            // refuses name constraints in one: they go in as a requested extension.
            params.serial_number = None;
            params.use_authority_key_identifier_extension = false;
            if let Some(constraints) = params.name_constraints.take() {
                params
                    .custom_extensions
                    .push(name_constraints_extension(constraints)?);
            }
            let csr = params.serialize_request(&new_key).map_err(Error::signing)?;
            if let Some(k) = generated {
                write_key(&key_path, k)?;
            }
            let csr_pem = pem::encode("CERTIFICATE REQUEST", csr.der());
            files::write_atomically(csr_path, csr_pem.as_bytes(), files::CERT_MODE)?;
            IntermediateOutcome {
                certificate: None,
                key: generated.is_some().then_some(key_path),
                csr: Some(csr_path.to_path_buf()),
                chain: None,
                not_after: None,
            }
        }
        (IntermediateSigner::Root { .. }, None) => {
            return Err(Error::InvalidRequest(
                "no root was loaded to sign with".to_owned(),
            ));
        }
    };
    Ok(outcome)
}

/// The new intermediate's key: the caller's (on a token), or generated here (and then written).
enum NewKey<'a, K> {
    Given(&'a K),
    Generated(KeyPair),
}

impl<K: PublicKeyData> PublicKeyData for NewKey<'_, K> {
    fn der_bytes(&self) -> &[u8] {
        match self {
            Self::Given(key) => key.der_bytes(),
            Self::Generated(key) => key.der_bytes(),
        }
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        match self {
            Self::Given(key) => key.algorithm(),
            Self::Generated(key) => key.algorithm(),
        }
    }
}

impl<K: SigningKey> SigningKey for NewKey<'_, K> {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        match self {
            Self::Given(key) => key.sign(msg),
            Self::Generated(key) => key.sign(msg),
        }
    }
}

/// The offline root, loaded for signing one intermediate.
struct OfflineRoot {
    issuer: Issuer<'static, KeyPair>,
    der: Vec<u8>,
    not_after: OffsetDateTime,
}

impl OfflineRoot {
    fn load(certificate: &Path, key: &Path, now: OffsetDateTime) -> Result<Self, Error> {
        let der = first_certificate(certificate)?;
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).map_err(|e| {
            Error::InvalidCa(format!(
                "{}: the root certificate cannot be parsed: {e}",
                certificate.display()
            ))
        })?;
        let is_ca = parsed
            .basic_constraints()
            .ok()
            .flatten()
            .is_some_and(|bc| bc.value.ca);
        if !is_ca {
            return Err(Error::InvalidCa(format!(
                "{}: not a CA certificate",
                certificate.display()
            )));
        }
        let not_after = parsed.validity().not_after.to_datetime();
        if not_after <= now {
            return Err(Error::InvalidCa(format!(
                "{}: the root expired at {not_after}",
                certificate.display()
            )));
        }
        let key_pair = loader::load_key(key)?;
        if key_pair.der_bytes() != parsed.public_key().subject_public_key.data.as_ref() {
            return Err(Error::InvalidCa(format!(
                "{}: this private key does not belong to the root certificate {}",
                key.display(),
                certificate.display()
            )));
        }
        let issuer = Issuer::from_ca_cert_der(&CertificateDer::from(der.as_slice()), key_pair)
            .map_err(|e| {
                Error::InvalidCa(format!(
                    "{}: the root cannot sign: {e}",
                    certificate.display()
                ))
            })?;
        Ok(Self {
            issuer,
            der,
            not_after,
        })
    }

    /// The signature verifies under the root's key: what clients will check, checked first.
    fn check_signed(&self, der: &[u8]) -> Result<(), Error> {
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| Error::Signing(format!("the new intermediate cannot be parsed: {e}")))?;
        let (_, root) = x509_parser::parse_x509_certificate(&self.der)
            .map_err(|e| Error::Signing(format!("the root cannot be parsed: {e}")))?;
        cert.verify_signature(Some(root.public_key())).map_err(|e| {
            Error::Signing(format!(
                "the new intermediate does not verify under the root: {e}"
            ))
        })
    }
}

/// The nameConstraints extension as rcgen writes it into a certificate (critical), taken from
/// a throw-away certificate, to be asked for in a CSR (which rcgen will not write it into).
fn name_constraints_extension(
    constraints: rcgen::NameConstraints,
) -> Result<CustomExtension, Error> {
    let mut params = rcgen::CertificateParams::default();
    params.name_constraints = Some(constraints);
    let scratch_key = KeyAlgorithm::EcdsaP256.generate()?;
    let scratch = params.self_signed(&scratch_key).map_err(Error::signing)?;
    let (_, parsed) = x509_parser::parse_x509_certificate(scratch.der())
        .map_err(|e| Error::Signing(format!("name constraints: {e}")))?;
    let oid = x509_parser::oid_registry::OID_X509_EXT_NAME_CONSTRAINTS;
    let value = parsed
        .extensions()
        .iter()
        .find(|ext| ext.oid == oid)
        .map(|ext| ext.value.to_vec())
        .ok_or_else(|| Error::Signing("name constraints: no extension was written".to_owned()))?;
    let mut extension = CustomExtension::from_oid_content(NAME_CONSTRAINTS_OID, value);
    extension.set_criticality(true);
    Ok(extension)
}

/// `certeasy ca move-root-key`: copies the root key at `from` to `to` (which must not exist;
/// its directory is created 0700 if missing) with mode 0600, atomically (written beside `to`,
/// synced, renamed), reads the copy back and compares it byte for byte, and checks it is the
/// key of `root_certificate` when given; only then removes `from`, and its directory when that
/// was the `.root-offline` directory a first start made and is now empty. A copy rather than a
/// rename, so that removable media on another file system work too.
pub fn move_root_key(from: &Path, to: &Path, root_certificate: Option<&Path>) -> Result<(), Error> {
    if exists(to)? {
        return Err(Error::InvalidRequest(format!(
            "{} already exists and is not overwritten",
            to.display()
        )));
    }
    let bytes = files::read(from)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| Error::InvalidCa(format!("{}: not a PEM private key", from.display())))?;
    let key = KeyPair::from_pem(text).map_err(|e| {
        Error::InvalidCa(format!("{}: not a usable private key: {e}", from.display()))
    })?;
    if let Some(cert_path) = root_certificate {
        let der = first_certificate(cert_path)?;
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).map_err(|e| {
            Error::InvalidCa(format!("{}: cannot be parsed: {e}", cert_path.display()))
        })?;
        if key.der_bytes() != parsed.public_key().subject_public_key.data.as_ref() {
            return Err(Error::InvalidCa(format!(
                "{} is not the key of the root certificate {}; nothing was moved",
                from.display(),
                cert_path.display()
            )));
        }
    }
    generate::write_new_root_key(to, &bytes)?;
    let copy = files::read(to)?;
    if copy != bytes {
        // The copy is wrong (failing media): remove it, keep the original.
        let _ = std::fs::remove_file(to);
        return Err(Error::InvalidCa(format!(
            "the copy at {} differs from {} when read back; the original is kept",
            to.display(),
            from.display()
        )));
    }
    std::fs::remove_file(from).map_err(|e| Error::io(from, e))?;
    if let Some(dir) = from.parent().filter(|d| !d.as_os_str().is_empty()) {
        files::sync_dir(dir)?;
        let made_by_first_start = dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".root-offline"));
        if made_by_first_start {
            // Only when empty: remove_dir refuses otherwise, which is what is wanted.
            let _ = std::fs::remove_dir(dir);
        }
    }
    Ok(())
}

/// Whether `path` is `dir` or lies below it, after resolving symbolic links and `..` of the
/// parts that exist (the file itself usually does not yet).
pub fn is_inside(path: &Path, dir: &Path) -> bool {
    let resolve = |p: &Path| -> PathBuf {
        let absolute = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let mut existing = absolute.as_path();
        let mut rest = Vec::new();
        loop {
            if let Ok(real) = existing.canonicalize() {
                let mut out = real;
                for part in rest.iter().rev() {
                    out.push(part);
                }
                return out;
            }
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    existing = parent;
                }
                _ => return absolute,
            }
        }
    };
    resolve(path).starts_with(resolve(dir))
}

fn check_issuer_name(name: &str) -> Result<(), Error> {
    let valid = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid || name == "default" {
        return Err(Error::InvalidRequest(format!(
            "{name:?} cannot name an issuer: use 1 to 32 of a-z, 0-9 and -, and not \"default\" (the implicit issuer)"
        )));
    }
    Ok(())
}

fn write_key(path: &Path, key: &KeyPair) -> Result<(), Error> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    files::ensure_dir(dir)?;
    files::write_atomically(path, key.serialize_pem().as_bytes(), files::KEY_MODE)
}

fn first_certificate(path: &Path) -> Result<Vec<u8>, Error> {
    let text = files::read(path)?;
    pem::decode_certificates(&text, path)?
        .into_iter()
        .next()
        .ok_or_else(|| Error::InvalidCa(format!("{} holds no certificate", path.display())))
}

/// Colon-separated upper-case hex of the SHA-256 of `der`.
fn fingerprint(der: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
    digest
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn exists(path: &Path) -> Result<bool, Error> {
    path.try_exists().map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use acme_core::identifier::IdentifierPolicy;
    use time::Duration;
    use time::OffsetDateTime;
    use x509_parser::extensions::GeneralName;
    use x509_parser::extensions::ParsedExtension;
    use x509_parser::prelude::FromDer;

    use super::InitRequest;
    use super::IntermediateRequest;
    use super::IntermediateSigner;
    use super::NameConstraints;
    use super::init;
    use super::move_root_key;
    use super::new_intermediate;
    use super::root_key_warnings;
    use crate::error::Error;
    use crate::key_algorithm::KeyAlgorithm;
    use crate::settings::CaSettings;
    use crate::settings::GeneratedRootKey;

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    fn policy() -> IdentifierPolicy {
        IdentifierPolicy {
            allow_domains: vec!["Corp.Example.".to_owned(), "lab.test".to_owned()],
            deny_domains: vec!["secret.corp.example".to_owned()],
            allow_cidrs: vec!["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()],
            deny_cidrs: vec!["10.66.0.0/16".parse().unwrap()],
        }
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    /// The critical nameConstraints of a DER certificate, as (permitted, excluded) texts.
    fn constraints_of(der: &[u8]) -> (bool, Vec<String>, Vec<String>) {
        let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
        let ext = cert
            .extensions()
            .iter()
            .find(|e| e.oid == x509_parser::oid_registry::OID_X509_EXT_NAME_CONSTRAINTS)
            .expect("a nameConstraints extension");
        let ParsedExtension::NameConstraints(nc) = ext.parsed_extension() else {
            panic!("not parsed as name constraints");
        };
        let text = |subtrees: &Option<Vec<x509_parser::extensions::GeneralSubtree<'_>>>| {
            subtrees
                .iter()
                .flatten()
                .map(|s| match &s.base {
                    GeneralName::DNSName(d) => (*d).to_owned(),
                    GeneralName::IPAddress(bytes) => format!("ip:{bytes:?}"),
                    other => format!("{other:?}"),
                })
                .collect()
        };
        (
            ext.critical,
            text(&nc.permitted_subtrees),
            text(&nc.excluded_subtrees),
        )
    }

    fn pem_der(path: &Path) -> Vec<u8> {
        pem::parse(fs::read(path).unwrap()).unwrap().into_contents()
    }

    #[test]
    fn constraints_follow_the_identifier_policy() {
        let nc = NameConstraints::from_policy(&policy()).unwrap();
        assert_eq!(nc.permitted_dns, ["corp.example", "lab.test"]);
        assert_eq!(nc.excluded_dns, ["secret.corp.example"]);
        assert_eq!(nc.permitted_ip.len(), 2);
        assert_eq!(nc.excluded_ip, [("10.66.0.0".parse().unwrap(), 16)]);
        assert!(nc.describe()[0].contains("corp.example"));
        // A policy that limits nothing has nothing to constrain.
        assert!(matches!(
            NameConstraints::from_policy(&IdentifierPolicy::default()),
            Err(Error::InvalidRequest(m)) if m.contains("limits nothing")
        ));
        let unicode = IdentifierPolicy {
            allow_domains: vec!["bücher.example".to_owned()],
            ..IdentifierPolicy::default()
        };
        assert!(NameConstraints::from_policy(&unicode).is_err());
    }

    #[test]
    fn init_keeps_the_root_key_out_and_constrains_the_intermediate() {
        let tmp = tempfile::tempdir().unwrap();
        let settings = CaSettings::new(tmp.path().join("data/ca"));
        let root_key = tmp.path().join("offline/root.key");
        let nc = NameConstraints::from_policy(&policy()).unwrap();
        let request = InitRequest {
            settings: &settings,
            root_key_out: &root_key,
            name_constraints: Some(&nc),
            root_key_in_ca_dir_allowed: false,
        };
        let made = init(&request, now()).unwrap();
        assert_eq!(mode(&root_key), 0o600);
        assert_eq!(made.root_key, root_key);
        assert!(!settings.dir.join("root.key").exists());
        for name in ["root.pem", "intermediate.pem", "listener.pem"] {
            assert!(settings.dir.join(name).is_file(), "{name}");
        }
        for name in ["intermediate.key", "listener.key"] {
            assert_eq!(mode(&settings.dir.join(name)), 0o600, "{name}");
        }
        assert_eq!(made.root_sha256.len(), 32 * 3 - 1);
        let (critical, permitted, excluded) =
            constraints_of(&pem_der(&made.intermediate_certificate));
        assert!(critical);
        assert!(
            permitted.contains(&"corp.example".to_owned()),
            "{permitted:?}"
        );
        assert!(
            permitted.contains(&"ip:[10, 0, 0, 0, 255, 0, 0, 0]".to_owned()),
            "{permitted:?}"
        );
        assert!(
            excluded.contains(&"secret.corp.example".to_owned()),
            "{excluded:?}"
        );
        // The listener's intermediate is not constrained (it signs Certeasy's own names).
        let listener_der = pem_der(&made.listener_certificate);
        let (_, listener) = x509_parser::parse_x509_certificate(&listener_der).unwrap();
        assert!(listener.name_constraints().unwrap().is_none());
        // A CA is never overwritten, whatever the root key's place.
        let again = InitRequest {
            root_key_out: &tmp.path().join("other/root.key"),
            ..request
        };
        assert!(
            matches!(init(&again, now()), Err(Error::InvalidRequest(m)) if m.contains("already"))
        );
    }

    #[test]
    fn init_refuses_a_root_key_inside_the_ca_directory_or_an_existing_one() {
        let tmp = tempfile::tempdir().unwrap();
        let settings = CaSettings::new(tmp.path().join("ca"));
        let inside = tmp.path().join("ca/../ca/keys/root.key");
        let request = InitRequest {
            settings: &settings,
            root_key_out: &inside,
            name_constraints: None,
            root_key_in_ca_dir_allowed: false,
        };
        assert!(
            matches!(init(&request, now()), Err(Error::InvalidRequest(m)) if m.contains("inside"))
        );
        assert!(!settings.dir.join("root.pem").exists());
        let existing = tmp.path().join("root.key");
        fs::write(&existing, "an earlier root").unwrap();
        let request = InitRequest {
            root_key_out: &existing,
            ..request
        };
        assert!(init(&request, now()).is_err());
        assert_eq!(fs::read_to_string(&existing).unwrap(), "an earlier root");
        assert!(!settings.dir.join("root.pem").exists());
    }

    fn ceremony_ca(tmp: &Path) -> (CaSettings, std::path::PathBuf) {
        let settings = CaSettings::new(tmp.join("ca"));
        let root_key = tmp.join("offline/root.key");
        let request = InitRequest {
            settings: &settings,
            root_key_out: &root_key,
            name_constraints: None,
            root_key_in_ca_dir_allowed: false,
        };
        init(&request, now()).unwrap();
        (settings, root_key)
    }

    fn intermediate_request<'a>(
        out: &'a Path,
        nc: Option<&'a NameConstraints>,
    ) -> IntermediateRequest<'a> {
        IntermediateRequest {
            name: "int-2027",
            organization: "Certeasy",
            common_name: "Certeasy Intermediate CA int-2027",
            key_algorithm: KeyAlgorithm::EcdsaP256,
            validity: Duration::days(100_000),
            out_dir: out,
            name_constraints: nc,
        }
    }

    #[test]
    fn the_offline_root_signs_the_next_intermediate() {
        let tmp = tempfile::tempdir().unwrap();
        let (settings, root_key) = ceremony_ca(tmp.path());
        let root_cert = settings.dir.join("root.pem");
        let nc = NameConstraints::from_policy(&policy()).unwrap();
        let out = tmp.path().join("next");
        let signer = IntermediateSigner::Root {
            certificate: &root_cert,
            key: &root_key,
        };
        let made = new_intermediate(&intermediate_request(&out, Some(&nc)), signer, now()).unwrap();
        let cert_path = made.certificate.unwrap();
        assert_eq!(cert_path, out.join("int-2027.pem"));
        assert_eq!(mode(&out.join("int-2027.key")), 0o600);
        let root_der = pem_der(&root_cert);
        let (_, root) = x509_parser::parse_x509_certificate(&root_der).unwrap();
        let der = pem_der(&cert_path);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        cert.verify_signature(Some(root.public_key())).unwrap();
        // Cut to the root's lifetime.
        assert!(cert.validity().not_after.to_datetime() <= root.validity().not_after.to_datetime());
        assert!(constraints_of(&der).0);
        // Not again over the same files; not with a key that is not the root's.
        assert!(new_intermediate(&intermediate_request(&out, None), signer, now()).is_err());
        let wrong = IntermediateSigner::Root {
            certificate: &root_cert,
            key: &settings.dir.join("intermediate.key"),
        };
        let other = tmp.path().join("other");
        assert!(matches!(
            new_intermediate(&intermediate_request(&other, None), wrong, now()),
            Err(Error::InvalidCa(m)) if m.contains("does not belong")
        ));
        assert!(!other.join("int-2027.key").exists());
        let bad_name = IntermediateRequest {
            name: "default",
            ..intermediate_request(&other, None)
        };
        assert!(new_intermediate(&bad_name, signer, now()).is_err());
    }

    #[test]
    fn a_csr_asks_for_the_name_constraints() {
        let tmp = tempfile::tempdir().unwrap();
        let nc = NameConstraints::from_policy(&policy()).unwrap();
        let out = tmp.path().join("next");
        let csr_path = tmp.path().join("int.csr");
        let made = new_intermediate(
            &intermediate_request(&out, Some(&nc)),
            IntermediateSigner::Csr(&csr_path),
            now(),
        )
        .unwrap();
        assert!(made.certificate.is_none());
        assert_eq!(mode(&out.join("int-2027.key")), 0o600);
        let der = pem_der(&csr_path);
        let (_, csr) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&der).unwrap();
        csr.verify_signature().unwrap();
        let requested: Vec<_> = csr.requested_extensions().unwrap().collect();
        assert!(
            requested
                .iter()
                .any(|e| matches!(e, ParsedExtension::NameConstraints(_))),
            "{requested:?}"
        );
        assert!(
            requested
                .iter()
                .any(|e| matches!(e, ParsedExtension::BasicConstraints(bc) if bc.ca))
        );
    }

    #[test]
    fn a_root_key_left_on_the_server_is_warned_about_and_moved() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let mut settings = CaSettings::new(data.join("ca"));
        settings.generated_root_key = GeneratedRootKey::beside(&data);
        let GeneratedRootKey::KeepAt(beside) = settings.generated_root_key.clone() else {
            panic!("kept");
        };
        assert_eq!(
            beside,
            std::path::absolute(tmp.path().join("data.root-offline/root.key")).unwrap()
        );
        crate::ca::Ca::load_or_create(&settings, now()).unwrap();
        assert_eq!(mode(&beside), 0o600);
        let warnings = root_key_warnings(&settings);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("move-root-key"), "{}", warnings[0]);
        // A wrong root certificate stops the move before anything changes.
        let target = tmp.path().join("usb/root.key");
        let err = move_root_key(&beside, &target, Some(&settings.dir.join("listener.pem")));
        assert!(err.is_err());
        assert!(beside.is_file() && !target.exists());
        move_root_key(&beside, &target, Some(&settings.dir.join("root.pem"))).unwrap();
        assert_eq!(mode(&target), 0o600);
        assert!(!beside.exists() && !beside.parent().unwrap().exists());
        assert!(root_key_warnings(&settings).is_empty());
        // A root key left in the CA directory by an older Certeasy is warned about too.
        fs::copy(&target, settings.dir.join("root.key")).unwrap();
        let warnings = root_key_warnings(&settings);
        assert!(
            warnings.len() == 1 && warnings[0].contains("in the data directory"),
            "{warnings:?}"
        );
        // Not over an existing file.
        assert!(move_root_key(&settings.dir.join("root.key"), &target, None).is_err());
    }
}
