//! First-start generation of a root and an intermediate into the CA directory.

use std::path::Path;
use std::path::PathBuf;

use rcgen::Issuer;
use time::Duration;
use time::OffsetDateTime;

use crate::error::Error;
use crate::files;
use crate::profile;
use crate::serial;
use crate::settings::CaSettings;

/// How far CA certificates are backdated, so clients with a slow clock accept them at once.
const BACKDATE: Duration = Duration::hours(1);

/// The files of a generated CA.
pub(crate) struct CaPaths {
    pub(crate) root_cert: PathBuf,
    pub(crate) root_key: PathBuf,
    pub(crate) intermediate_cert: PathBuf,
    pub(crate) intermediate_key: PathBuf,
}

impl CaPaths {
    pub(crate) fn in_dir(dir: &Path) -> Self {
        Self {
            root_cert: dir.join("root.pem"),
            root_key: dir.join("root.key"),
            intermediate_cert: dir.join("intermediate.pem"),
            intermediate_key: dir.join("intermediate.key"),
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
    files::write_atomically(
        &paths.root_cert,
        root_cert.pem().as_bytes(),
        files::CERT_MODE,
    )?;
    files::sync_dir(&settings.dir)?;
    tracing::info!(
        dir = %settings.dir.display(),
        key_algorithm = alg.as_str(),
        "generated a new root and intermediate CA; distribute root.pem to clients and consider moving root.key offline"
    );
    Ok(())
}
