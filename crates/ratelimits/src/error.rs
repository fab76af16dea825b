//! The crate's one error type.
//!
//! Configuration errors are reported when a file is loaded, so an operator learns about them at
//! startup or on reload rather than when a request happens to hit the bad limit. Store errors are
//! separate so callers can fail open on them and only on them.

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A limit whose numbers cannot describe a bucket.
    #[error("limit {limit}: {reason}")]
    InvalidLimit { limit: String, reason: String },
    /// A request costs more than the bucket can ever hold, so it could never pass.
    #[error("limit {limit}: cost {cost} exceeds the burst {burst}")]
    CostAboveBurst {
        limit: String,
        cost: u64,
        burst: u64,
    },
    /// A bucket id of the wrong kind for its limit (an IP for an account limit, ...).
    #[error("limit {limit}: invalid id {id:?}: {reason}")]
    InvalidId {
        limit: String,
        id: String,
        reason: String,
    },
    /// An unknown limit name.
    #[error("unknown rate limit {0:?}")]
    UnknownLimit(String),
    /// The same bucket twice in one batch would be decided twice against the same stored state.
    #[error("bucket {0:?} appears twice in one batch")]
    DuplicateKey(String),
    /// The overrides file could not be read or parsed as YAML.
    #[error("overrides file: {0}")]
    OverridesSyntax(String),
    /// One overrides entry is invalid.
    #[error("overrides entry #{index} (limit {limit}){}: {reason}", line.map(|l| format!(" at line {l}")).unwrap_or_default())]
    OverrideEntry {
        index: usize,
        limit: String,
        line: Option<u64>,
        reason: String,
    },
    /// The overrides file could not be read.
    #[error("reading overrides file {path}: {source}")]
    OverridesIo {
        path: String,
        source: std::io::Error,
    },
    /// Redis answered with an error or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis did not answer in time.
    #[error("redis call timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// Redis answered something our script never returns.
    #[error("unexpected redis reply: {0}")]
    UnexpectedReply(String),
    /// The store configuration is unusable.
    #[error("rate limit store: {0}")]
    StoreConfig(String),
}

impl Error {
    /// Store failures are the ones a request path should fail open on.
    pub fn is_store_failure(&self) -> bool {
        matches!(
            self,
            Self::Redis(_) | Self::Timeout(_) | Self::UnexpectedReply(_)
        )
    }
}

/// Result with this crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
