//! Reading CA files and writing them so that a crash never leaves a half-written CA behind.

use std::fs;
use std::fs::File;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;

use crate::error::Error;

/// Mode of private key files: owner read/write only.
pub(crate) const KEY_MODE: u32 = 0o600;
/// Mode of certificate files: public information.
pub(crate) const CERT_MODE: u32 = 0o644;
/// Mode of a CA directory Certeasy creates.
const DIR_MODE: u32 = 0o700;

/// Creates `dir` (and parents) with mode 0700 if it does not exist; an existing directory keeps
/// the mode the operator gave it.
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), Error> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder.create(dir).map_err(|e| Error::io(dir, e))
}

pub(crate) fn read(path: &Path) -> Result<Vec<u8>, Error> {
    fs::read(path).map_err(|e| Error::io(path, e))
}

pub(crate) fn read_to_string(path: &Path) -> Result<String, Error> {
    fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

/// Writes `contents` to a fresh temporary file created with `mode` (so a key is never readable
/// by others, not even for a moment), syncs it, and renames it over `path`.
pub(crate) fn write_atomically(path: &Path, contents: &[u8], mode: u32) -> Result<(), Error> {
    let tmp = temp_path(path);
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&tmp, e)),
    }
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(&tmp).map_err(|e| Error::io(&tmp, e))?;
    file.write_all(contents).map_err(|e| Error::io(&tmp, e))?;
    file.sync_all().map_err(|e| Error::io(&tmp, e))?;
    drop(file);
    fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// Makes the renames in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// Warns when a key file can be read by anyone but its owner.
pub(crate) fn warn_if_exposed(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = fs::metadata(path) {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(path = %path.display(), mode = format!("{mode:o}"), "CA private key file is accessible to other users; chmod 600 it");
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

#[cfg(all(test, unix))]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::KEY_MODE;
    use super::ensure_dir;
    use super::write_atomically;

    #[test]
    fn atomic_write_sets_mode_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.key");
        write_atomically(&path, b"one", KEY_MODE).unwrap();
        write_atomically(&path, b"two", KEY_MODE).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(!dir.path().join("a.key.tmp").exists());
    }

    #[test]
    fn new_dirs_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("x/ca");
        ensure_dir(&ca).unwrap();
        assert_eq!(
            fs::metadata(&ca).unwrap().permissions().mode() & 0o777,
            0o700
        );
        ensure_dir(&ca).unwrap();
    }
}
