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
