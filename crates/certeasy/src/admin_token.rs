//! The bearer token of the admin API (`/admin/*`).
//!
//! The server creates it on first start, so an admin listener that is reachable by mistake is
//! not an open door, and the CLI reads the same file. It is created under a temporary name with
//! O_EXCL and mode 0600, written and synced, then hard-linked to its name: the file is never
//! readable by others, and a reader never sees it half written. Two servers starting at once
//! both end up with the one token that was linked first.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use aws_lc_rs::rand::SecureRandom;
use aws_lc_rs::rand::SystemRandom;

/// The file name under the data directory when `server.admin-token-file` is empty.
pub const DEFAULT_FILE_NAME: &str = "admin.token";

/// Shorter tokens are refused: they could be guessed.
const MIN_LEN: usize = 32;

/// The admin API's shared secret.
#[derive(Clone)]
pub struct AdminToken(String);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(***)")
    }
}

impl AdminToken {
    /// The token text, for the `Authorization` header.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// How the audit log names this token: a short fingerprint
    /// (`storage::audit::admin_token_identity`), never the token.
    pub fn identity(&self) -> String {
        storage::audit::admin_token_identity(&self.0)
    }

    /// Compares in constant time, so response timing does not reveal a prefix.
    pub fn matches(&self, presented: &str) -> bool {
        aws_lc_rs::constant_time::verify_slices_are_equal(self.0.as_bytes(), presented.as_bytes())
            .is_ok()
    }
}

#[cfg(test)]
impl AdminToken {
    /// A token without a file, for unit tests of its users.
    pub(crate) fn for_tests(text: &str) -> Self {
        Self(text.to_owned())
    }
}

/// Reads the token at `path`, creating a random one (32 bytes, hex) when the file is missing.
pub fn load_or_create(path: &Path) -> anyhow::Result<AdminToken> {
    match read(path) {
        Ok(token) => return Ok(token),
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) => {}
        Err(e) => return Err(e),
    }
    let rng = SystemRandom::new();
    let mut bytes = [0_u8; 32];
    rng.fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("the system random number generator failed"))?;
    let mut suffix = [0_u8; 8];
    rng.fill(&mut suffix)
        .map_err(|_| anyhow::anyhow!("the system random number generator failed"))?;
    let token = hex::encode(bytes);
    let file_name = path
        .file_name()
        .map_or_else(|| DEFAULT_FILE_NAME.into(), |n| n.to_string_lossy());
    let temp = path.with_file_name(format!(".{file_name}.{}.tmp", hex::encode(suffix)));
    let written = write_private(&temp, &token);
    let linked = written.and_then(|()| {
        std::fs::hard_link(&temp, path).or_else(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                // Another process won the race: its token is the one.
                Ok(())
            } else {
                Err(e)
            }
        })
    });
    let _ = std::fs::remove_file(&temp);
    linked.with_context(|| format!("creating the admin token {}", path.display()))?;
    read(path)
}

/// Reads an existing token (the CLI, and servers after the first start).
pub fn read(path: &Path) -> anyhow::Result<AdminToken> {
    let text = std::fs::read_to_string(path)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("reading the admin token {}", path.display()))?;
    let token = text.trim();
    if token.len() < MIN_LEN || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        anyhow::bail!(
            "the admin token {} must be one line of at least {MIN_LEN} characters",
            path.display()
        );
    }
    check_private(path)?;
    Ok(AdminToken(token.to_owned()))
}

fn write_private(path: &Path, token: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(token.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

/// A token every local user can read would let any of them drive the admin API, which is what
/// the token is there to prevent: such a file is refused. Group access is allowed (an operators'
/// group may share it) but warned about.
fn check_private(path: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .with_context(|| format!("reading the admin token {}", path.display()))?
            .permissions()
            .mode();
        if mode & 0o007 != 0 {
            anyhow::bail!(
                "the admin token {} is accessible to every user (mode {:o}); chmod 600 it",
                path.display(),
                mode & 0o777
            );
        }
        if mode & 0o070 != 0 {
            tracing::warn!(file = %path.display(), "the admin token is readable by its group (chmod 600 it unless that is intended)");
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_token_every_user_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.token");
        load_or_create(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = format!("{:#}", read(&path).unwrap_err());
        assert!(error.contains("chmod 600"), "{error}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(read(&path).is_ok(), "group access is only warned about");
    }

    #[test]
    fn created_once_private_and_stable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.token");
        let first = load_or_create(&path).unwrap();
        assert_eq!(first.as_str().len(), 64);
        assert!(first.matches(first.as_str()));
        assert!(!first.matches(""));
        assert!(!first.matches(&first.as_str()[..63]));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let again = load_or_create(&path).unwrap();
        assert_eq!(again.as_str(), first.as_str());
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn short_tokens_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "secret\n").unwrap();
        assert!(load_or_create(&path).is_err());
    }
}
