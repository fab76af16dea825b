//! The `certeasy` configuration file: one YAML document, every key optional.
//!
//! Loading is two passes. serde-saphyr deserializes the typed tree, refusing unknown keys,
//! duplicate keys and wrongly typed values; it stops at the first such error. Then a semantic pass
//! ([`validate`]) checks values that have the right type but cannot work, and reports all of them
//! at once. Both kinds of problem name the file, the line and column, and the key path, which a
//! schema-free pass over the same text ([`locations`]) supplies. The reference,
//! `docs/configuration.md`, and `config/certeasy.yaml`, which lists every key with its default,
//! are generated from the model (`reference.rs`).

mod entries;
mod error;
pub mod issuers;
mod locations;
mod model;
pub mod pkcs11;
#[cfg(test)]
mod reference;
mod schema;
mod secrets;
mod test_instance;
mod test_mode;
#[cfg(test)]
mod tests;
mod validate;

use std::path::Path;

use serde_saphyr::{DuplicateKeyPolicy, MessageFormatter, Options, UserMessageFormatter};

use self::locations::{LocationMap, Position};

pub use self::error::{ConfigError, ConfigProblem};
pub use self::model::{
    AcmeConfig, CaConfig, Config, DatabaseConfig, ExistingCaConfig, IdentifiersConfig,
    IssuanceConfig, KeyAlgorithm, LogFormat, LoggingConfig, ProfileConfig, RedisConfig,
    ServerConfig, SqliteSynchronous, ValidationConfig, ZombiePausingConfig,
};
pub use self::test_instance::TestModeRefusal;
pub use self::test_mode::{TEST_HTTP_PORT, TEST_TLS_ALPN_PORT, TestModeConfig, test_rate_limits};

/// The longest piece of offending source text quoted in a message.
const MAX_QUOTED_CHARS: usize = 60;

/// Reads and checks the configuration file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    from_str(&text, &path.display().to_string())
}

/// Parses and checks configuration text; `source_name` is the file name used in error reports.
pub fn from_str(text: &str, source_name: &str) -> Result<Config, ConfigError> {
    let report = Report {
        text,
        source_name,
        locations: LocationMap::parse(text),
    };
    let mut config: Config = match serde_saphyr::from_str_with_options(text, parse_options()) {
        Ok(config) => config,
        Err(error) => return Err(report.invalid(vec![report.parse_problem(&error)])),
    };
    // Secrets from `*-file` keys first, so the checks see the values the server will use.
    let (origins, mut issues) = secrets::resolve(&mut config);
    issues.extend(
        validate::check(&config)
            .into_iter()
            .map(|issue| origins.relocate(issue)),
    );
    issues.extend(report.misplaced_keys());
    if issues.is_empty() {
        Ok(config)
    } else {
        Err(report.invalid(
            issues
                .iter()
                .map(|issue| report.issue_problem(issue))
                .collect(),
        ))
    }
}

/// Checks a configuration built or changed outside a file (defaults plus command-line flags,
/// such as those of `certeasy serve --test-mode`); each problem is `key: message`.
pub fn check(config: &Config) -> Result<(), Vec<String>> {
    let issues = validate::check(config);
    if issues.is_empty() {
        Ok(())
    } else {
        Err(issues
            .iter()
            .map(|issue| format!("{}: {}", issue.path, issue.message))
            .collect())
    }
}

/// Parses a resolver address as the configuration writes it (`192.0.2.53:53`, or a bare
/// address for port 53), for command-line flags.
pub fn parse_resolver(text: &str) -> Result<std::net::SocketAddr, String> {
    entries::parse_resolver(text)
}

fn parse_options() -> Options {
    let mut options = Options::default();
    // The same key twice is almost always a bad merge of two edits; which one should win is a
    // guess we refuse to make.
    options.duplicate_keys = DuplicateKeyPolicy::Error;
    // `yes`/`no`/`on`/`off` as booleans surprise people (the "Norway problem").
    options.strict_booleans = true;
    // We quote the offending line ourselves, with the key path.
    options.with_snippet = false;
    options
}

/// Turns parse errors and semantic issues into located problems for one file.
struct Report<'a> {
    text: &'a str,
    source_name: &'a str,
    locations: LocationMap,
}

impl Report<'_> {
    fn invalid(&self, problems: Vec<ConfigProblem>) -> ConfigError {
        ConfigError::Invalid {
            source_name: self.source_name.to_owned(),
            problems,
        }
    }

    fn problem(&self, at: Option<Position>, key_path: String, message: String) -> ConfigProblem {
        ConfigProblem {
            source_name: self.source_name.to_owned(),
            line: at.map(|p| p.line),
            column: at.map(|p| p.column),
            key_path,
            message,
            source_line: at.and_then(|p| self.line_text(p.line)),
        }
    }

    fn parse_problem(&self, error: &serde_saphyr::Error) -> ConfigProblem {
        let error = error.without_snippet();
        let at = error.location().and_then(Position::from_location);
        let key_path = at
            .and_then(|p| self.locations.path_at(p))
            .unwrap_or_default();
        let mut message = plain_words(&sanitize(&UserMessageFormatter.format_message(error)));
        // serde-saphyr's value messages ("invalid u16") do not say what was found; errors about
        // keys already name the key, and a missing field's position is a neighbouring key.
        let about_a_value = !matches!(
            error,
            serde_saphyr::Error::SerdeMissingField { .. }
                | serde_saphyr::Error::SerdeUnknownField { .. }
                | serde_saphyr::Error::DuplicateMappingKey { .. }
        );
        if about_a_value
            && let Some(found) = error.location().and_then(|l| self.quoted(l.span()))
            && !message.contains(found.as_str())
        {
            message = format!("{message}, found {found}");
        }
        self.problem(at, key_path, message)
    }

    fn issue_problem(&self, issue: &validate::Issue) -> ConfigProblem {
        let located = std::iter::once(&issue.path)
            .chain(issue.related.as_ref())
            .find_map(|path| self.locations.position_of(path).map(|at| (path, at)));
        match located {
            Some((path, at)) if *path == issue.path => {
                self.problem(Some(at), issue.path.clone(), issue.message.clone())
            }
            // The key is left at its default; point at the key it conflicts with.
            Some((_, at)) => self.problem(
                Some(at),
                issue.path.clone(),
                format!(
                    "{} ({} is not set in the file: its default applies)",
                    issue.message, issue.path
                ),
            ),
            None => self.problem(None, issue.path.clone(), issue.message.clone()),
        }
    }

    /// Keys the `rate-limiting` type accepts but this file keeps at another place; accepting both
    /// would leave two settings of which one silently loses.
    fn misplaced_keys(&self) -> Vec<validate::Issue> {
        const MOVED: [(&str, &str); 3] = [
            ("rate-limiting.redis", "the top-level redis: section"),
            (
                "rate-limiting.ipv6-prefix-length",
                "server.ipv6-prefix-length",
            ),
            (
                "rate-limiting.overrides-file",
                "the top-level rate-limit-overrides key",
            ),
        ];
        MOVED
            .iter()
            .filter(|(path, _)| self.locations.position_of(path).is_some())
            .map(|(path, instead)| validate::Issue {
                path: (*path).to_owned(),
                related: None,
                message: format!("is not read from here: use {instead}"),
            })
            .collect()
    }

    fn line_text(&self, line: u64) -> Option<String> {
        let index = usize::try_from(line.checked_sub(1)?).ok()?;
        let text = self.text.lines().nth(index)?;
        Some(sanitize(text.trim_end()))
    }

    /// The source text at a byte span, backquoted, when it is short and on one line.
    fn quoted(&self, span: serde_saphyr::Span) -> Option<String> {
        let offset = usize::try_from(span.byte_offset()?).ok()?;
        let len = usize::try_from(span.byte_len()?).ok()?;
        let text = self.text.get(offset..offset.checked_add(len)?)?.trim();
        if text.is_empty() || text.contains('\n') || text.chars().count() > MAX_QUOTED_CHARS {
            return None;
        }
        Some(format!("`{}`", sanitize(text)))
    }
}

/// Control characters from the file must not reach the operator's terminal.
fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\t' {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}

/// Replaces parser vocabulary with the words an operator editing the file uses.
fn plain_words(message: &str) -> String {
    const WORDS: [(&str, &str); 3] = [
        (
            "expected mapping start",
            "expected a section of indented `key: value` lines",
        ),
        ("expected sequence start", "expected a list"),
        ("expected string scalar", "expected a single value"),
    ];
    WORDS
        .iter()
        .fold(message.to_owned(), |text, (parser, plain)| {
            text.replace(parser, plain)
        })
}

/// The configuration at `path`, or the built-in defaults without one, for the commands: a bad
/// file is reported (file, line, key) and becomes exit code 2, as for `config check`.
pub fn load_or_default(path: Option<&Path>) -> Result<Config, std::process::ExitCode> {
    match path {
        Some(p) => load(p).map_err(|e| {
            eprintln!("{e}");
            std::process::ExitCode::from(2)
        }),
        None => Ok(Config::default()),
    }
}
