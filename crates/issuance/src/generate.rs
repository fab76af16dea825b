//! Generation of a root, the ACME issuing intermediate and the listener's intermediate into
//! the CA directory: by a first start of `certeasy serve` ([`create`]) and by the key ceremony
//! (`certeasy ca init`, [`crate::ceremony`]), which share [`create_hierarchy`]; and of the
//! listener's intermediate alone in a CA directory made before it existed.
//!
//! The root's private key never goes into the CA directory. Nothing Certeasy runs signs with
//! the root again once the intermediates are signed, so a key beside the issuing key would only
//! double what a stolen data directory gives away (a root key mints intermediates without any
//! name constraint or record). The ceremony writes it where the operator says; a first start
//! with no ceremony writes it to [`GeneratedRootKey`]'s place (by default beside the data
//! directory, `<data-dir>.root-offline/root.key`) and [`root_key_warnings`] asks on every start
//! to take it offline. A CA directory made by an older Certeasy may still hold `root.key`: it
//! keeps working (it is read only to make a missing listener intermediate) and is warned about.

use std::path::Path;
use std::path::PathBuf;

use rcgen::Issuer;
use rcgen::KeyPair;
use rcgen::NameConstraints;
use rcgen::SigningKey;
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
use crate::settings::GeneratedRootKey;

/// How far CA certificates are backdated, so clients with a slow clock accept them at once.
pub(crate) const BACKDATE: Duration = Duration::hours(1);
/// File names of the listener's intermediate, in a generated CA's directory and beside an
/// operator's issuing certificate (`ca.existing.certificate`).
pub(crate) const LISTENER_CERT: &str = "listener.pem";
pub(crate) const LISTENER_KEY: &str = "listener.key";
/// The root key's file name where an older Certeasy wrote it: inside the CA directory.
pub(crate) const LEGACY_ROOT_KEY: &str = "root.key";

/// The files of a generated CA.
pub(crate) struct CaPaths {
    pub(crate) root_cert: PathBuf,
    /// Where an older Certeasy kept the root key (`<ca-dir>/root.key`); never written now.
    pub(crate) legacy_root_key: PathBuf,
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
            legacy_root_key: dir.join(LEGACY_ROOT_KEY),
            intermediate_cert: dir.join("intermediate.pem"),
            intermediate_key: dir.join("intermediate.key"),
            listener_cert: dir.join(LISTENER_CERT),
            listener_key: dir.join(LISTENER_KEY),
        }
    }

    /// Every file of the set, for refusing to overwrite one.
    pub(crate) fn all(&self) -> [&Path; 6] {
        [
            &self.root_cert,
            &self.legacy_root_key,
            &self.intermediate_cert,
            &self.intermediate_key,
            &self.listener_cert,
            &self.listener_key,
        ]
    }
}

/// What [`create_hierarchy`] made.
pub(crate) struct Hierarchy {
    pub(crate) root_der: Vec<u8>,
    pub(crate) root_not_after: OffsetDateTime,
    pub(crate) intermediate_not_after: OffsetDateTime,
}

/// First start of a generated CA: the whole hierarchy, the root key where `settings` says (never
/// in the CA directory), and a warning saying where it went and what to do with it.
pub(crate) fn create(
    settings: &CaSettings,
    paths: &CaPaths,
    now: OffsetDateTime,
) -> Result<(), Error> {
    let root_key_out = match &settings.generated_root_key {
        GeneratedRootKey::KeepAt(path) => {
            if path.starts_with(&settings.dir) {
                return Err(Error::InvalidRequest(format!(
                    "the generated root key would be written to {}, inside the CA directory {}; it must be kept outside",
                    path.display(),
                    settings.dir.display()
                )));
            }
            Some(path.as_path())
        }
        GeneratedRootKey::Discard => None,
    };
    create_hierarchy::<KeyPair>(settings, paths, root_key_out, None, None, now)?;
    match root_key_out {
        Some(path) => tracing::warn!(
            dir = %settings.dir.display(),
            root_key = %path.display(),
            key_algorithm = settings.key_algorithm.as_str(),
            "generated a new root, the ACME issuing intermediate and the listener's intermediate. The root's private key is NOT in the data directory: it was written to {}. Certeasy never needs it to run; keep it offline for signing the next intermediate: `certeasy ca move-root-key --to /offline/media/root.key`. Distribute root.pem to clients. (For a CA made on purpose, with name constraints or an HSM, use `certeasy ca init`.)",
            path.display()
        ),
        None => tracing::info!(
            dir = %settings.dir.display(),
            key_algorithm = settings.key_algorithm.as_str(),
            "generated a throw-away root, issuing intermediate and listener intermediate; the root's private key was not kept"
        ),
    }
    Ok(())
}

/// Generates the root and both intermediates and writes them: the root key first, to
/// `root_key_out` (its directory created 0700; refused when the file exists, since it may be the
/// key of an earlier root that clients trust), `None` dropping it; then the intermediates, and
/// `root.pem` last, so its presence means the set is complete. `intermediate_key` is a key made
/// elsewhere (on a token): then no `intermediate.key` is written. `name_constraints` go on the
/// issuing intermediate only: the listener's is held to TLS by its extended key usages and
/// signs only Certeasy's own names, which need not be in the policy.
pub(crate) fn create_hierarchy<K: SigningKey>(
    settings: &CaSettings,
    paths: &CaPaths,
    root_key_out: Option<&Path>,
    intermediate_key: Option<&K>,
    name_constraints: Option<NameConstraints>,
    now: OffsetDateTime,
) -> Result<Hierarchy, Error> {
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

    let intermediate_params = profile::intermediate(
        &settings.organization,
        &settings.intermediate_common_name,
        &serial::random_serial()?,
        not_before,
        intermediate_not_after,
        name_constraints,
    );
    let (intermediate_cert, generated_key) = match intermediate_key {
        Some(key) => (
            intermediate_params
                .signed_by(key, &root_issuer)
                .map_err(Error::signing)?,
            None,
        ),
        None => {
            let key = alg.generate()?;
            let cert = intermediate_params
                .signed_by(&key, &root_issuer)
                .map_err(Error::signing)?;
            (cert, Some(key))
        }
    };
    let (listener_key, listener_cert) =
        listener_intermediate(settings, &root_issuer, not_before, intermediate_not_after)?;

    if let Some(out) = root_key_out {
        write_new_root_key(out, root_key.serialize_pem().as_bytes())?;
    }
    if let Some(key) = &generated_key {
        files::write_atomically(
            &paths.intermediate_key,
            key.serialize_pem().as_bytes(),
            files::KEY_MODE,
        )?;
    }
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
    Ok(Hierarchy {
        root_der: root_cert.der().to_vec(),
        root_not_after,
        intermediate_not_after,
    })
}

/// Writes a root key to a file that must not exist yet, in a directory created 0700 if missing.
pub(crate) fn write_new_root_key(path: &Path, pem: &[u8]) -> Result<(), Error> {
    if exists(path)? {
        return Err(Error::InvalidRequest(format!(
            "{} already exists; it may be the key of an earlier root that clients trust, so it is not overwritten: move it away first",
            path.display()
        )));
    }
    let parent = parent_of(path);
    files::ensure_dir(parent)?;
    files::write_atomically(path, pem, files::KEY_MODE)?;
    files::sync_dir(parent)
}

/// Where the root key of the CA in `settings.dir` is, if it is still on this machine: the CA
/// directory (an older Certeasy's), or the place a first start writes it to.
pub(crate) fn root_key_on_disk(
    settings: &CaSettings,
    paths: &CaPaths,
) -> Result<Option<PathBuf>, Error> {
    if exists(&paths.legacy_root_key)? {
        return Ok(Some(paths.legacy_root_key.clone()));
    }
    if let GeneratedRootKey::KeepAt(path) = &settings.generated_root_key
        && exists(path)?
    {
        return Ok(Some(path.clone()));
    }
    Ok(None)
}

/// What a start of a generated CA says about its root key while it is still on this machine.
/// Warnings only: a key that is still there keeps the CA working, and moving it is the
/// operator's act (`certeasy ca move-root-key`).
pub fn root_key_warnings(settings: &CaSettings) -> Vec<String> {
    if settings.existing.is_some() {
        return Vec::new();
    }
    let paths = CaPaths::in_dir(&settings.dir);
    let mut warnings = Vec::new();
    if paths.legacy_root_key.is_file() {
        warnings.push(format!(
            "the root's private key is in the data directory, {}: Certeasy never needs it to run, and anyone who copies the data directory could mint intermediates with it. Move it offline: `certeasy ca move-root-key --to /offline/media/root.key` (with the same --config), then keep it for `certeasy ca new-intermediate`",
            paths.legacy_root_key.display()
        ));
    }
    if let GeneratedRootKey::KeepAt(path) = &settings.generated_root_key
        && path.is_file()
    {
        warnings.push(format!(
            "the root's private key generated at first start is still on this machine, at {}: Certeasy never needs it to run. Move it offline: `certeasy ca move-root-key --to /offline/media/root.key` (with the same --config), then keep it for `certeasy ca new-intermediate`",
            path.display()
        ));
    }
    warnings
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn exists(path: &Path) -> Result<bool, Error> {
    path.try_exists().map_err(|e| Error::io(path, e))
}

/// Creates the listener's intermediate in a CA directory generated before it existed, signed by
/// the root whose key is still on this machine ([`root_key_on_disk`]). `Ok(false)` when it is
/// not (moved offline, as recommended): nothing is created then.
pub(crate) fn create_listener(
    settings: &CaSettings,
    paths: &CaPaths,
    now: OffsetDateTime,
) -> Result<bool, Error> {
    let Some(root_key_path) = root_key_on_disk(settings, paths)? else {
        return Ok(false);
    };
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
    let root_key = loader::load_key(&root_key_path)?;
    let root_issuer =
        Issuer::from_ca_cert_der(&CertificateDer::from(root_der.as_slice()), root_key).map_err(
            |e| {
                Error::InvalidCa(format!(
                    "{}: the root cannot sign with {}: {e}",
                    paths.root_cert.display(),
                    root_key_path.display()
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
fn listener_intermediate<S: SigningKey>(
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
