//! First-start generation of a root, the ACME issuing intermediate and the listener's
//! intermediate into the CA directory; and of the listener's intermediate alone in a CA
//! directory made before it existed.

use std::path::Path;
use std::path::PathBuf;

use rcgen::Issuer;
use rcgen::KeyPair;
use rustls_pki_types::CertificateDer;
use time::Duration;
use time::OffsetDateTime;

use crate::error::Error;
use crate::files;
use crate::loader;
use crate::pem;
use crate::profile;
use crate::serial;
use crate::settings::CaSettings;

/// How far CA certificates are backdated, so clients with a slow clock accept them at once.
const BACKDATE: Duration = Duration::hours(1);
/// File names of the listener's intermediate, in a generated CA's directory and beside an
/// operator's issuing certificate (`ca.existing.certificate`).
pub(crate) const LISTENER_CERT: &str = "listener.pem";
pub(crate) const LISTENER_KEY: &str = "listener.key";

/// The files of a generated CA.
pub(crate) struct CaPaths {
    pub(crate) root_cert: PathBuf,
    pub(crate) root_key: PathBuf,
    pub(crate) intermediate_cert: PathBuf,
    pub(crate) intermediate_key: PathBuf,
    /// The intermediate that signs only the listener's own certificate.
    pub(crate) listener_cert: PathBuf,
    pub(crate) listener_key: PathBuf,
}

impl CaPaths {
    pub(crate) fn in_dir(dir: &Path) -> Self {
        Self {
            root_cert: dir.join("root.pem"),
            root_key: dir.join("root.key"),
            intermediate_cert: dir.join("intermediate.pem"),
            intermediate_key: dir.join("intermediate.key"),
            listener_cert: dir.join(LISTENER_CERT),
            listener_key: dir.join(LISTENER_KEY),
        }
    }
}

/// Generates both CA certificates and writes them; `root.pem` is written last, so its presence
/// means the set is complete (an interrupted run is simply redone).
pub(crate) fn create(
    settings: &CaSettings,
    paths: &CaPaths,
    now: OffsetDateTime,
) -> Result<(), Error> {
    if !settings.root_validity.is_positive() || !settings.intermediate_validity.is_positive() {
        return Err(Error::InvalidRequest(
            "CA validity periods must be positive".to_owned(),
        ));
    }
    let alg = settings.key_algorithm;
    let not_before = now - BACKDATE;
    let root_not_after = now + settings.root_validity;
    let intermediate_not_after = (now + settings.intermediate_validity).min(root_not_after);

    let root_key = alg.generate()?;
    let root_params = profile::root(
        &settings.organization,
        &settings.root_common_name,
        &serial::random_serial()?,
        not_before,
        root_not_after,
    );
    let root_cert = root_params.self_signed(&root_key).map_err(Error::signing)?;
    let root_issuer = Issuer::from_params(&root_params, &root_key);

    let intermediate_key = alg.generate()?;
    let intermediate_cert = profile::intermediate(
        &settings.organization,
        &settings.intermediate_common_name,
        &serial::random_serial()?,
        not_before,
        intermediate_not_after,
    )
    .signed_by(&intermediate_key, &root_issuer)
    .map_err(Error::signing)?;
    let (listener_key, listener_cert) =
        listener_intermediate(settings, &root_issuer, not_before, intermediate_not_after)?;

    files::write_atomically(
        &paths.root_key,
        root_key.serialize_pem().as_bytes(),
        files::KEY_MODE,
    )?;
    files::write_atomically(
        &paths.intermediate_key,
        intermediate_key.serialize_pem().as_bytes(),
        files::KEY_MODE,
    )?;
    files::write_atomically(
        &paths.intermediate_cert,
        intermediate_cert.pem().as_bytes(),
        files::CERT_MODE,
    )?;
    write_listener(paths, &listener_key, &listener_cert)?;
    files::write_atomically(
        &paths.root_cert,
        root_cert.pem().as_bytes(),
        files::CERT_MODE,
    )?;
    files::sync_dir(&settings.dir)?;
    tracing::info!(
        dir = %settings.dir.display(),
        key_algorithm = alg.as_str(),
        "generated a new root, the ACME issuing intermediate and the listener's intermediate; distribute root.pem to clients and consider moving root.key offline"
    );
    Ok(())
}

/// Creates the listener's intermediate in a CA directory generated before it existed, signed by
/// the root whose key is still in the directory. `Ok(false)` when `root.key` is not there (moved
/// offline, as recommended): nothing is created then.
pub(crate) fn create_listener(
    settings: &CaSettings,
    paths: &CaPaths,
    now: OffsetDateTime,
) -> Result<bool, Error> {
    if !paths
        .root_key
        .try_exists()
        .map_err(|e| Error::io(&paths.root_key, e))?
    {
        return Ok(false);
    }
    let root_text = files::read(&paths.root_cert)?;
    let root_der = pem::decode_certificates(&root_text, &paths.root_cert)?
        .into_iter()
        .next()
        .ok_or_else(|| {
            Error::InvalidCa(format!(
                "{} holds no certificate",
                paths.root_cert.display()
            ))
        })?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&root_der).map_err(|e| {
        Error::InvalidCa(format!(
            "{}: the root certificate cannot be parsed: {e}",
            paths.root_cert.display()
        ))
    })?;
    let root_not_after = parsed.validity().not_after.to_datetime();
    let root_key = loader::load_key(&paths.root_key)?;
    let root_issuer =
        Issuer::from_ca_cert_der(&CertificateDer::from(root_der.as_slice()), root_key).map_err(
            |e| {
                Error::InvalidCa(format!(
                    "{}: the root cannot sign with {}: {e}",
                    paths.root_cert.display(),
                    paths.root_key.display()
                ))
            },
        )?;
    let not_after = (now + settings.intermediate_validity).min(root_not_after);
    let (key, cert) = listener_intermediate(settings, &root_issuer, now - BACKDATE, not_after)?;
    write_listener(paths, &key, &cert)?;
    files::sync_dir(&settings.dir)?;
    Ok(true)
}

/// A fresh key and the listener's intermediate for it, signed by `root`.
fn listener_intermediate<S: rcgen::SigningKey>(
    settings: &CaSettings,
    root: &Issuer<'_, S>,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<(KeyPair, rcgen::Certificate), Error> {
    let key = settings.key_algorithm.generate()?;
    let name = if settings.organization.is_empty() {
        "Certeasy Listener CA".to_owned()
    } else {
        format!("{} Listener CA", settings.organization)
    };
    let cert = profile::listener_intermediate(
        &settings.organization,
        &name,
        &serial::random_serial()?,
        not_before,
        not_after,
    )
    .signed_by(&key, root)
    .map_err(Error::signing)?;
    Ok((key, cert))
}

/// The key first, then the certificate: `listener.pem` present means the pair is complete.
fn write_listener(paths: &CaPaths, key: &KeyPair, cert: &rcgen::Certificate) -> Result<(), Error> {
    files::write_atomically(
        &paths.listener_key,
        key.serialize_pem().as_bytes(),
        files::KEY_MODE,
    )?;
    files::write_atomically(
        &paths.listener_cert,
        cert.pem().as_bytes(),
        files::CERT_MODE,
    )
}
