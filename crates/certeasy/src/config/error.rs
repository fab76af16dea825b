//! What went wrong with a configuration file, in the words an operator needs to fix it.

use std::error::Error;
use std::fmt;
use std::io;
use std::path::PathBuf;

/// The configuration could not be used. `Display` renders a multi-line report.
#[derive(Debug)]
pub enum ConfigError {
    /// The file could not be read at all.
    Read { path: PathBuf, source: io::Error },
    /// The file was read but is malformed or holds impossible values; every problem found is
    /// listed so that one edit-and-restart cycle can fix them all.
    Invalid {
        source_name: String,
        problems: Vec<ConfigProblem>,
    },
}

impl ConfigError {
    /// The individual problems (empty for [`ConfigError::Read`]).
    pub fn problems(&self) -> &[ConfigProblem] {
        match self {
            Self::Read { .. } => &[],
            Self::Invalid { problems, .. } => problems,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, source } => {
                write!(
                    f,
                    "cannot read configuration file {}: {source}",
                    path.display()
                )
            }
            Self::Invalid {
                source_name,
                problems,
            } => {
                let count = problems.len();
                let noun = if count == 1 { "problem" } else { "problems" };
                write!(f, "invalid configuration {source_name} ({count} {noun}):")?;
                for problem in problems {
                    write!(f, "\n  {problem}")?;
                    if let (Some(line), Some(text)) = (problem.line, &problem.source_line) {
                        write!(f, "\n  {line:>6} | {text}")?;
                    }
                }
                Ok(())
            }
        }
    }
}

impl Error for ConfigError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Read { source, .. } => Some(source),
            Self::Invalid { .. } => None,
        }
    }
}

/// One problem, located as precisely as the file allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The file name as given to the loader.
    pub source_name: String,
    /// 1-based line, when the offending key is written in the file (a check on a value left at
    /// its default has no line).
    pub line: Option<u64>,
    /// 1-based column, with `line`.
    pub column: Option<u64>,
    /// Dotted key path such as `validation.http-port` or `redis.shards[0]`; empty for the
    /// document itself.
    pub key_path: String,
    pub message: String,
    /// The text of the offending line, shown under the problem.
    pub source_line: Option<String>,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source_name)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        let key = if self.key_path.is_empty() {
            "(document)"
        } else {
            &self.key_path
        };
        write!(f, ": {key}: {}", self.message)
    }
}
