//! Secrets kept outside the configuration file: `database.url-file` and `redis.shards-file` name
//! files (Docker secrets, systemd credentials) holding what `database.url` and `redis.shards`
//! would hold, passwords included, so the configuration itself holds no secret and can be
//! world-readable, versioned and shown in a bug report.
//!
//! Each file is read when the configuration is loaded (and again on every reload), its trailing
//! newline trimmed, and its value put under the key it stands for; the rest of the server never
//! sees the difference. Setting a key and its `-file` both is refused: which one wins would be a
//! guess. What the semantic checks then find in a value read from a file is reported at the
//! `-file` key, naming the file, never quoting the secret.

use std::path::{Path, PathBuf};

use super::model::Config;
use super::validate::Issue;

const DATABASE_URL: &str = "database.url";
const DATABASE_URL_FILE: &str = "database.url-file";
const REDIS_SHARDS: &str = "redis.shards";
const REDIS_SHARDS_FILE: &str = "redis.shards-file";

/// Where the values read from files came from, to report later problems at the `-file` key.
#[derive(Debug, Default)]
pub(super) struct Origins {
    database_url: Option<PathBuf>,
    redis_shards: Option<PathBuf>,
}

/// Reads every `-file` key of `config` into the key it stands for, and clears it. Returns where
/// values came from, and the problems: a key set twice, a file that cannot be read or is empty.
pub(super) fn resolve(config: &mut Config) -> (Origins, Vec<Issue>) {
    let mut origins = Origins::default();
    let mut issues = Vec::new();
    if let Some(path) = config.database.url_file.take() {
        if !config.database.url.trim().is_empty() {
            issues.push(both_set(DATABASE_URL, DATABASE_URL_FILE));
        } else {
            match read(&path) {
                Ok(url) => {
                    config.database.url = url;
                    origins.database_url = Some(path);
                }
                Err(message) => issues.push(issue(DATABASE_URL_FILE, message)),
            }
        }
    }
    if let Some(path) = config.redis.shards_file.take() {
        if !config.redis.shards.is_empty() {
            issues.push(both_set(REDIS_SHARDS, REDIS_SHARDS_FILE));
        } else {
            match read(&path) {
                Ok(text) => {
                    config.redis.shards = text
                        .lines()
                        .map(str::trim)
                        .filter(|line| !line.is_empty() && !line.starts_with('#'))
                        .map(str::to_owned)
                        .collect();
                    origins.redis_shards = Some(path);
                }
                Err(message) => issues.push(issue(REDIS_SHARDS_FILE, message)),
            }
        }
    }
    (origins, issues)
}

impl Origins {
    /// Moves a problem found in a value read from a file to the `-file` key, which is what the
    /// file shows, naming the file.
    pub(super) fn relocate(&self, mut issue: Issue) -> Issue {
        if let Some(path) = &self.database_url
            && issue.path == DATABASE_URL
        {
            issue.path = DATABASE_URL_FILE.to_owned();
            issue.message = format!("the URL in {}: {}", path.display(), issue.message);
        } else if let Some(path) = &self.redis_shards
            && let Some(index) = issue
                .path
                .strip_prefix(REDIS_SHARDS)
                .and_then(|rest| rest.strip_prefix('['))
                .and_then(|rest| rest.strip_suffix(']'))
                .and_then(|n| n.parse::<usize>().ok())
        {
            issue.path = REDIS_SHARDS_FILE.to_owned();
            issue.message = format!("URL {} in {}: {}", index + 1, path.display(), issue.message);
        }
        issue
    }
}

/// The file's text without its trailing newline; the error names the file.
fn read(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let value = text.trim_end_matches(['\n', '\r']);
    if value.trim().is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(value.to_owned())
}

fn both_set(key: &str, file_key: &str) -> Issue {
    Issue {
        path: file_key.to_owned(),
        related: Some(key.to_owned()),
        message: format!(
            "{key} and {file_key} are both set: keep one ({file_key} keeps the secret out of this file)"
        ),
    }
}

fn issue(path: &str, message: String) -> Issue {
    Issue {
        path: path.to_owned(),
        related: None,
        message,
    }
}
