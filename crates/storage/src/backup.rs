//! Online backup of the SQLite database (`certeasy admin backup`).

use crate::Result;
use crate::Storage;
use crate::error::Error;
use crate::private_file;
use crate::sql::Db;

impl Storage {
    /// Writes a consistent, compacted copy of the SQLite database to `dest`, which must not
    /// exist: it is created 0600, since it holds account and EAB keys. Runs while the server
    /// serves (the copy reads one snapshot, writers go on), off the runtime's threads. Returns
    /// the copy's size in bytes. The copy is written to `<dest>.partial` and linked to `dest`
    /// only once complete, so a file under `dest` is always a whole backup: a failed copy
    /// leaves nothing, and one cut short by a crash leaves only the `.partial` file. The
    /// blocking task finishes (or cleans up) even when the caller stops waiting.
    /// `Error::Unsupported` on PostgreSQL, which `pg_dump` backs up.
    pub async fn backup_into(&self, dest: &std::path::Path) -> Result<u64> {
        let Db::Sqlite(lite) = &*self.db else {
            return Err(Error::Unsupported(
                "a PostgreSQL database is backed up with pg_dump (docs/operations.md)",
            ));
        };
        if dest.exists() {
            // Told before copying; `hard_link` below still refuses one that appears meanwhile.
            return Err(Error::File {
                path: dest.display().to_string(),
                source: std::io::ErrorKind::AlreadyExists.into(),
            });
        }
        let mut partial = dest.as_os_str().to_owned();
        partial.push(".partial");
        let partial = std::path::PathBuf::from(partial);
        private_file::create_new_private(&partial)?;
        let (lite, dest_owned) = (std::sync::Arc::clone(lite), dest.to_owned());
        let file_error = |path: &std::path::Path| {
            let path = path.display().to_string();
            move |source| Error::File { path, source }
        };
        tokio::task::spawn_blocking(move || {
            let done = lite.copy_into(&partial).and_then(|()| {
                // `hard_link` refuses an existing `dest`: a backup is never overwritten.
                std::fs::hard_link(&partial, &dest_owned).map_err(file_error(&dest_owned))?;
                std::fs::metadata(&dest_owned)
                    .map(|m| m.len())
                    .map_err(file_error(&dest_owned))
            });
            let _ = std::fs::remove_file(&partial);
            done
        })
        .await
        .map_err(|e| Error::File {
            path: dest.display().to_string(),
            source: std::io::Error::other(format!("the copying task failed: {e}")),
        })?
    }
}
