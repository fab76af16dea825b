//! Keeping the SQLite database private to the server's user, whatever the umask.

use std::fs::OpenOptions;
use std::path::Path;
use std::path::PathBuf;

use crate::Result;
use crate::error::Error;

/// The file a `sqlite:` URL names; `None` for in-memory databases.
pub(crate) fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    // sqlx percent-decodes the path; such rare names are left to SQLite (and the umask).
    if path.is_empty() || path == ":memory:" || path.contains('%') || url.contains("mode=memory") {
        return None;
    }
    Some(PathBuf::from(path))
}

/// Creates `path` empty with mode 0600 (an empty file is an empty SQLite database) unless it
/// exists. `create_new` opens with O_EXCL and the mode is set at creation, so the file is never
/// readable by others, not even for a moment.
pub(crate) fn create_private(path: &Path) -> Result<()> {
    match create_new_private(path) {
        Err(Error::File { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(())
        }
        other => other,
    }
}

/// Creates `path` empty with mode 0600; an existing file is an error (`File`, AlreadyExists), so
/// nothing is ever overwritten.
pub(crate) fn create_new_private(path: &Path) -> Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path).map(drop).map_err(|source| Error::File {
        path: path.display().to_string(),
        source,
    })
}

/// Sets 0600 on the database and its -wal and -shm files, also when an older version created
/// them with the umask's mode. Failures are logged: the server still works, less privately.
pub(crate) fn restrict_sqlite_files(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for suffix in ["", "-wal", "-shm"] {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            let file = PathBuf::from(name);
            let Ok(meta) = std::fs::metadata(&file) else {
                continue;
            };
            if meta.permissions().mode() & 0o077 == 0 {
                continue;
            }
            if let Err(e) = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
            {
                tracing::warn!(file = %file.display(), error = %e, "cannot make the database file private");
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_file_of_a_sqlite_url() {
        assert_eq!(
            sqlite_path("sqlite:///tmp/x.db?mode=rwc"),
            Some(PathBuf::from("/tmp/x.db"))
        );
        assert_eq!(
            sqlite_path("sqlite:data/x.db"),
            Some(PathBuf::from("data/x.db"))
        );
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(sqlite_path("sqlite://file?mode=memory"), None);
        assert_eq!(sqlite_path("postgres://h/db"), None);
    }
}
