//! The data directory: SQLite database, CA keys, unpause key, admin token. Only the server's
//! user may enter it.

use std::path::Path;

use anyhow::Context;

/// Creates `dir` (and missing parents) with mode 0700, whatever the umask. An existing
/// directory is left as the operator made it, with a warning when others can enter it.
pub fn create_private(dir: &Path) -> anyhow::Result<()> {
    let existed = dir.is_dir();
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        use std::os::unix::fs::PermissionsExt;
        builder.mode(0o700);
        builder
            .create(dir)
            .with_context(|| format!("creating data directory {}", dir.display()))?;
        if existed {
            let mode = std::fs::metadata(dir)
                .with_context(|| format!("reading data directory {}", dir.display()))?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                tracing::warn!(
                    dir = %dir.display(),
                    mode = %format!("{:o}", mode & 0o777),
                    "the data directory is accessible to other users; it holds keys (chmod 700 it)"
                );
            }
        } else {
            // The umask may have removed bits from 0700; set exactly 0700.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("making data directory {} private", dir.display()))?;
        }
    }
    #[cfg(not(unix))]
    {
        let _ = existed;
        builder
            .create(dir)
            .with_context(|| format!("creating data directory {}", dir.display()))?;
    }
    Ok(())
}

/// The file test mode writes in every state directory it creates or adopts
/// (`certeasy serve --test-mode`). A directory without it may be a production data directory,
/// whose CA a test instance would load and sign with unchecked; test mode refuses it.
pub const TEST_MODE_MARKER: &str = ".certeasy-test-mode";

/// Whether test mode may keep its state in `dir`: when it does not exist yet (test mode creates
/// it), is empty, or holds [`TEST_MODE_MARKER`]. Otherwise the reason, naming the directory.
/// Only reads.
pub fn test_mode_refusal(dir: &Path) -> Result<(), String> {
    let shown = dir.display();
    let mut entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(format!("{shown} exists and is not a directory"));
        }
        Err(e) => return Err(format!("cannot read {shown}: {e}")),
    };
    if entries.next().is_none() || dir.join(TEST_MODE_MARKER).is_file() {
        return Ok(());
    }
    Err(format!(
        "{shown} was not created by test mode (it has no {TEST_MODE_MARKER} file) and may hold a \
         production CA: give a new or empty directory, or none for a temporary one"
    ))
}

/// Makes `dir` test mode's state directory: created (0700) when missing, and marked with
/// [`TEST_MODE_MARKER`] so that a later start of test mode accepts it again. The caller has
/// checked [`test_mode_refusal`] first.
pub fn create_test_mode(dir: &Path) -> anyhow::Result<()> {
    create_private(dir)?;
    let marker = dir.join(TEST_MODE_MARKER);
    if !marker.is_file() {
        std::fs::write(
            &marker,
            "Created by `certeasy serve --test-mode`: a throw-away test CA and its state.\n",
        )
        .with_context(|| format!("writing {}", marker.display()))?;
    }
    Ok(())
}
