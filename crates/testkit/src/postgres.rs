//! A throw-away PostgreSQL database for one test, on the server the tests share
//! (`CERTEASY_TEST_POSTGRES_URL`, trust authentication for `postgres` on loopback by default).
//!
//! Each test gets a database of its own, named from a prefix, the process id and a counter, so
//! tests running at once never see each other's rows; it is dropped (`WITH (FORCE)`, closing
//! whatever connections the test left) with the value. `psql` creates and drops it, so a
//! test needs no driver of its own for this.

use std::process::Command;
use std::process::Stdio;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use anyhow::Context as _;
use anyhow::bail;

/// The shared server's maintenance database when `CERTEASY_TEST_POSTGRES_URL` is unset: the
/// address `scripts/test.sh` makes sure answers.
pub const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The shared server's maintenance database: `CERTEASY_TEST_POSTGRES_URL`, or
/// [`DEFAULT_ADMIN_URL`]. A test that has a script create its databases passes it on.
pub fn admin_url() -> String {
    std::env::var("CERTEASY_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_owned())
}

/// The admin URL with its database path replaced by `name`; a query (`?sslmode=...`) is kept.
pub fn database_url(admin_url: &str, name: &str) -> String {
    let (base, query) = match admin_url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (admin_url, None),
    };
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let server = match base[authority_end..].find('/') {
        Some(slash) => &base[..authority_end + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{server}/{name}?{query}"),
        None => format!("{server}/{name}"),
    }
}

/// Runs `statement` with `psql` on `url` (stopping at the first error); its output, unaligned,
/// without headers, trimmed. For looking at a database beside the code under test.
pub fn psql(url: &str, statement: &str) -> anyhow::Result<String> {
    let output = Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-qAtc", statement])
        .stdin(Stdio::null())
        .output()
        .context("running psql")?;
    if !output.status.success() {
        bail!(
            "psql {statement:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// A fresh database, dropped with the value.
pub struct PgDatabase {
    admin: String,
    name: String,
    url: String,
}

impl PgDatabase {
    /// Creates a database whose name starts with `prefix` (letters, digits and `_`).
    pub fn create(prefix: &str) -> anyhow::Result<Self> {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let admin = admin_url();
        let name = format!(
            "{prefix}{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        psql(&admin, &format!("CREATE DATABASE {name}")).with_context(|| {
            format!(
                "creating {name}: PostgreSQL must be reachable at {admin} \
                 (scripts/test.sh installs psql)"
            )
        })?;
        let url = database_url(&admin, &name);
        Ok(Self { admin, name, url })
    }

    /// The database's URL, to connect to it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        // Nothing to do with a failure in a drop: the database is left for the next cleanup.
        let _ = psql(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::database_url;

    #[test]
    fn database_url_replaces_the_path() {
        assert_eq!(
            database_url("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            database_url("postgres://u@h/db?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
        assert_eq!(database_url("postgres://u@h", "x"), "postgres://u@h/x");
    }
}
