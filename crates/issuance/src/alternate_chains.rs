//! Alternate chains (RFC 8555 §7.4.2): the same leaf offered under another root.
//!
//! An issuing key may be certified more than once: cross-signed by a second root, or certified
//! under both an RSA and an ECDSA root. A leaf it signed then chains to either root through the
//! matching copy of the issuing certificate, and clients that trust only one of the roots
//! (`certbot --preferred-chain`, `lego --preferred-chain`) pick the chain ending at it.
//!
//! Each alternate chain file holds first a certificate with exactly the issuing certificate's
//! subject (bytes) and public key, then its issuers, each signed by the next, optionally up to a
//! self-signed root. A self-signed root is not served, as for the primary chain: clients must
//! already trust it. Everything is checked at start-up so that a wrong file stops the server
//! with its name rather than giving clients a chain that does not verify.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;

use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;

use crate::error::Error;
use crate::files;
use crate::loader;
use crate::loader::LoadedCa;
use crate::pem;

/// The alternate chains of one issuing certificate, PEM, each to append after a leaf it signed.
#[derive(Debug)]
pub(crate) struct AlternateChains {
    /// The issuing certificate, DER: a leaf is served these chains only when it names this
    /// certificate's subject as its issuer and its signature verifies under this key.
    issuing_der: Vec<u8>,
    chains: Vec<Arc<str>>,
}

impl AlternateChains {
    /// Loads and checks the alternate chains in `paths` of the issuing certificate
    /// `issuing_der`; errors name the file.
    pub(crate) fn load(
        issuing_der: &[u8],
        paths: &[PathBuf],
        now: OffsetDateTime,
    ) -> Result<Self, Error> {
        let (_, issuing) = x509_parser::parse_x509_certificate(issuing_der).map_err(|e| {
            Error::InvalidCa(format!("the issuing certificate cannot be parsed: {e}"))
        })?;
        let mut chains = Vec::with_capacity(paths.len());
        for path in paths {
            chains.push(load_one(&issuing, path, now)?);
        }
        Ok(Self {
            issuing_der: issuing_der.to_vec(),
            chains,
        })
    }

    /// The alternate chains in `paths` of the issuing certificate of `loaded`, as the one set of
    /// [`for_leaf`]'s list; no set without paths.
    pub(crate) fn of_loaded(
        loaded: &LoadedCa,
        paths: &[PathBuf],
        now: OffsetDateTime,
    ) -> Result<Vec<Self>, Error> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        // A self-signed issuing certificate is not in `chain_der`: it is the root.
        let issuing = loaded.chain_der.first().unwrap_or(&loaded.root_der);
        Ok(vec![Self::load(issuing, paths, now)?])
    }

    /// The chains, in the configured order; empty when none were configured.
    pub(crate) fn chains(&self) -> &[Arc<str>] {
        &self.chains
    }

    /// Whether `leaf` was signed by this issuing certificate's key under its name.
    pub(crate) fn signed(&self, leaf: &X509Certificate<'_>) -> bool {
        let Ok((_, issuing)) = x509_parser::parse_x509_certificate(&self.issuing_der) else {
            // Parsed once already when loading; it cannot fail now.
            return false;
        };
        leaf.issuer().as_raw() == issuing.subject().as_raw()
            && leaf.verify_signature(Some(issuing.public_key())).is_ok()
    }
}

/// The alternate chains among `sets` that `leaf_der` can be served with: those of the issuing
/// certificate that signed it. Empty when none apply (or the leaf cannot be parsed). The leaf
/// is parsed only when some issuer has alternate chains.
pub(crate) fn for_leaf<'a>(
    sets: impl Iterator<Item = &'a AlternateChains>,
    leaf_der: &[u8],
) -> &'a [Arc<str>] {
    let mut sets = sets.filter(|set| !set.chains.is_empty()).peekable();
    if sets.peek().is_none() {
        return &[];
    }
    let Ok((_, leaf)) = x509_parser::parse_x509_certificate(leaf_der) else {
        return &[];
    };
    sets.find(|set| set.signed(&leaf))
        .map_or(&[], |set| set.chains())
}

/// The download of a leaf with one of its alternate chains: the leaf's PEM, then `chain_pem`.
pub fn download_pem(leaf_der: &[u8], chain_pem: &str) -> String {
    format!("{}{chain_pem}", pem::encode_certificate(leaf_der))
}

/// One alternate chain file, checked, as the PEM to serve after a leaf.
fn load_one(
    issuing: &X509Certificate<'_>,
    path: &Path,
    now: OffsetDateTime,
) -> Result<Arc<str>, Error> {
    let text = files::read(path)?;
    let ders = pem::decode_certificates(&text, path)?;
    let mut parsed = Vec::with_capacity(ders.len());
    for der in &ders {
        let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| {
            Error::InvalidCa(format!(
                "{}: a certificate cannot be parsed: {e}",
                path.display()
            ))
        })?;
        loader::check_is_ca(&cert, path)?;
        parsed.push(cert);
    }
    let first = &parsed[0];
    if first.subject().as_raw() != issuing.subject().as_raw() {
        return Err(Error::InvalidCa(format!(
            "{}: an alternate chain must start with a certificate of the issuing CA's exact subject {:?}, not {:?}",
            path.display(),
            issuing.subject().to_string(),
            first.subject().to_string()
        )));
    }
    if first.public_key().raw != issuing.public_key().raw {
        return Err(Error::InvalidCa(format!(
            "{}: the first certificate ({:?}, issued by {:?}) certifies another key than the issuing CA's: an alternate chain must start with a certificate of the issuing key",
            path.display(),
            first.subject().to_string(),
            first.issuer().to_string()
        )));
    }
    let not_after = first.validity().not_after.to_datetime();
    if not_after <= now {
        return Err(Error::InvalidCa(format!(
            "{}: the first certificate (issued by {:?}) expired at {not_after}",
            path.display(),
            first.issuer().to_string()
        )));
    }
    for pair in parsed.windows(2) {
        if pair[0]
            .verify_signature(Some(pair[1].public_key()))
            .is_err()
        {
            return Err(Error::InvalidCa(format!(
                "{}: certificate {:?} (issued by {:?}) is not signed by the next certificate of the file, {:?}; list the chain from the copy of the issuing CA up to the root",
                path.display(),
                pair[0].subject().to_string(),
                pair[0].issuer().to_string(),
                pair[1].subject().to_string()
            )));
        }
    }
    let top = &parsed[parsed.len() - 1];
    let top_self_signed = parsed.len() > 1
        && top.subject().as_raw() == top.issuer().as_raw()
        && top.verify_signature(None).is_ok();
    let served = if top_self_signed {
        &ders[..ders.len() - 1]
    } else {
        &ders[..]
    };
    let pem: String = served
        .iter()
        .map(|der| pem::encode_certificate(der))
        .collect();
    Ok(pem.into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;
    use std::path::PathBuf;

    use rcgen::BasicConstraints;
    use rcgen::CertificateParams;
    use rcgen::DnType;
    use rcgen::IsCa;
    use rcgen::Issuer;
    use rcgen::KeyPair;
    use rustls_pki_types::CertificateDer;
    use time::Duration;
    use time::OffsetDateTime;

    use super::AlternateChains;
    use super::for_leaf;
    use crate::error::Error;
    use crate::pem;

    fn ca_params(cn: &str) -> CertificateParams {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::days(1);
        params.not_after = now + Duration::days(3650);
        params
    }

    /// Root E1 (P-256) and root R1 (RSA-2048), the issuing key certified by both under one
    /// subject, and a stranger key certified by E1 under the same subject.
    struct Fixture {
        dir: tempfile::TempDir,
        root_e1: Vec<u8>,
        root_r1: Vec<u8>,
        issuing_e1: Vec<u8>,
        issuing_r1: Vec<u8>,
        issuing_key: KeyPair,
        stranger_e1: Vec<u8>,
    }

    impl Fixture {
        fn new() -> Self {
            let e1_key = KeyPair::generate().unwrap();
            let e1 = ca_params("Certeasy Root E1").self_signed(&e1_key).unwrap();
            let r1_key =
                KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048)
                    .unwrap();
            let r1 = ca_params("Certeasy Root R1").self_signed(&r1_key).unwrap();
            let e1_issuer = Issuer::from_ca_cert_der(e1.der(), e1_key).unwrap();
            let r1_issuer = Issuer::from_ca_cert_der(r1.der(), r1_key).unwrap();
            let issuing_key = KeyPair::generate().unwrap();
            let issuing_e1 = ca_params("Certeasy Issuing")
                .signed_by(&issuing_key, &e1_issuer)
                .unwrap();
            let issuing_r1 = ca_params("Certeasy Issuing")
                .signed_by(&issuing_key, &r1_issuer)
                .unwrap();
            let stranger = KeyPair::generate().unwrap();
            let stranger_e1 = ca_params("Certeasy Issuing")
                .signed_by(&stranger, &e1_issuer)
                .unwrap();
            Self {
                dir: tempfile::tempdir().unwrap(),
                root_e1: e1.der().to_vec(),
                root_r1: r1.der().to_vec(),
                issuing_e1: issuing_e1.der().to_vec(),
                issuing_r1: issuing_r1.der().to_vec(),
                issuing_key,
                stranger_e1: stranger_e1.der().to_vec(),
            }
        }

        fn write(&self, name: &str, ders: &[&[u8]]) -> PathBuf {
            let path = self.dir.path().join(name);
            let text: String = ders.iter().map(|d| pem::encode_certificate(d)).collect();
            std::fs::write(&path, text).unwrap();
            path
        }

        fn leaf_signed_by(&self, issuing_der: &[u8], key: &KeyPair) -> Vec<u8> {
            let issuer = Issuer::from_ca_cert_der(&CertificateDer::from(issuing_der), key).unwrap();
            let leaf_key = KeyPair::generate().unwrap();
            CertificateParams::new(vec!["leaf.example".to_owned()])
                .unwrap()
                .signed_by(&leaf_key, &issuer)
                .unwrap()
                .der()
                .to_vec()
        }
    }

    fn refused(result: Result<AlternateChains, Error>) -> String {
        match result {
            Err(Error::InvalidCa(message)) => message,
            other => panic!("expected InvalidCa, got {other:?}"),
        }
    }

    /// The cross-certified copy and the issuers above it are served, without the self-signed
    /// root; a leaf of the issuing key gets them whichever copy of the certificate signed it.
    #[test]
    fn a_cross_certified_issuing_key_gets_its_chain_without_the_root() {
        let f = Fixture::new();
        let path = f.write("cross.pem", &[&f.issuing_r1, &f.root_r1]);
        let now = OffsetDateTime::now_utc();
        let sets = [AlternateChains::load(&f.issuing_e1, &[path], now).unwrap()];
        assert_eq!(
            sets[0].chains()[0].as_ref(),
            pem::encode_certificate(&f.issuing_r1)
        );

        let leaf = f.leaf_signed_by(&f.issuing_e1, &f.issuing_key);
        assert_eq!(for_leaf(sets.iter(), &leaf).len(), 1);
        let other_key = KeyPair::generate().unwrap();
        let foreign = f.leaf_signed_by(&f.stranger_e1, &other_key);
        assert!(
            for_leaf(sets.iter(), &foreign).is_empty(),
            "same name, other key"
        );
        assert!(for_leaf(sets.iter(), b"not a certificate").is_empty());
    }

    /// A file holding only the cross-certified copy (no root) is served as it is.
    #[test]
    fn a_chain_without_a_root_is_served_whole() {
        let f = Fixture::new();
        let path = f.write("cross.pem", &[&f.issuing_r1]);
        let set = AlternateChains::load(&f.issuing_e1, &[path], OffsetDateTime::now_utc()).unwrap();
        assert_eq!(
            set.chains()[0].as_ref(),
            pem::encode_certificate(&f.issuing_r1)
        );
    }

    #[test]
    fn a_chain_of_another_key_or_name_or_broken_is_refused_naming_the_file() {
        let f = Fixture::new();
        let now = OffsetDateTime::now_utc();

        let other_key = f.write("other-key.pem", &[&f.stranger_e1, &f.root_e1]);
        let message = refused(AlternateChains::load(&f.issuing_e1, &[other_key], now));
        assert!(message.contains("other-key.pem"), "{message}");
        assert!(message.contains("another key"), "{message}");

        let other_name = f.write("other-name.pem", &[&f.root_r1]);
        let message = refused(AlternateChains::load(&f.issuing_e1, &[other_name], now));
        assert!(message.contains("other-name.pem"), "{message}");
        assert!(message.contains("exact subject"), "{message}");

        let broken = f.write("broken.pem", &[&f.issuing_r1, &f.root_e1]);
        let message = refused(AlternateChains::load(&f.issuing_e1, &[broken], now));
        assert!(message.contains("broken.pem"), "{message}");
        assert!(message.contains("not signed by the next"), "{message}");

        let later = now + Duration::days(20 * 366);
        let cross = f.write("cross.pem", &[&f.issuing_r1]);
        let message = refused(AlternateChains::load(&f.issuing_e1, &[cross], later));
        assert!(message.contains("expired"), "{message}");

        let missing =
            AlternateChains::load(&f.issuing_e1, &[Path::new("/nonexistent.pem").into()], now);
        assert!(
            matches!(&missing, Err(Error::Io { path, .. }) if path == Path::new("/nonexistent.pem")),
            "{missing:?}"
        );
    }
}
