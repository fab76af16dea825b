//! Rate-limit overrides that operators manage without a redeploy (`certeasy admin overrides`),
//! kept in the database beside the overrides file (`rate-limit-overrides`), the way Boulder now
//! keeps its overrides.
//!
//! - What an override may say is what a file entry may say, checked by the same parser
//!   ([`ratelimits::overrides::OverrideEntry::single`]): a known limit, an id of that limit's kind
//!   (an address or range, or an account), a burst, count or period, none zero. It may raise or
//!   lower the limit. A comment is required (it is the only answer to "why is this customer
//!   different" a year later); an expiry is optional.
//! - One override per (limit, bucket) in the database; a second is refused until the first is
//!   removed or has expired. Where the file names the same bucket, the database's applies and the
//!   file's is listed as `shadowed`: the database is the operator's change of the moment.
//! - Every instance applies them within `rate-limiting.overrides-refresh`
//!   ([`run_refresh`]): it asks storage for the table's change marker and reads the rows only
//!   when it moved, then puts those not expired in force
//!   ([`ratelimits::Limiter::set_database_overrides`]). An expired override stops applying at the
//!   first refresh after its expiry and is listed as `expired` until removed; adding one for the
//!   same bucket replaces it.
//! - Each add and remove is recorded (`limits_changed`, with who asked) by the storage function
//!   that makes it, in its transaction. Only the database's overrides can be removed here; the
//!   file's are changed by editing the file and reloading.

use std::future::Future;
use std::time::Duration;

use ratelimits::Limit;
use ratelimits::LimitName;
use ratelimits::overrides::OverrideEntry;
use ratelimits::overrides::OverrideId;
use ratelimits::overrides::Overrides;
use storage::overrides::NewOverride;
use storage::overrides::OverridesVersion;
use storage::overrides::StoredOverride;
use time::OffsetDateTime;

use crate::Ra;
use crate::audit::Actor;
use crate::audit::AuditKind;
use crate::audit::Requester;
use crate::audit::rfc3339;
use crate::error::Error;
use crate::error::Refusal;

/// Where an override is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The overrides file (`rate-limit-overrides`), changed by editing it and reloading.
    File,
    /// The database (`certeasy admin overrides add`).
    Database,
}

impl Source {
    /// `file` or `database`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Database => "database",
        }
    }
}

/// Whether an override applies now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It applies (to its limit's buckets when the limit is enabled).
    Active,
    /// A database override past its expiry: it no longer applies.
    Expired,
    /// A file override of a bucket a database override in force names: that one applies.
    Shadowed,
}

impl Status {
    /// `active`, `expired` or `shadowed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Expired => "expired",
            Self::Shadowed => "shadowed",
        }
    }
}

/// One override of one bucket, as `certeasy admin overrides list|show` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedOverride {
    pub source: Source,
    pub status: Status,
    pub limit: LimitName,
    /// The bucket id's canonical text.
    pub id: String,
    /// The numbers the override sets itself (the others are the default's).
    pub burst: Option<u64>,
    pub count: Option<u64>,
    pub period: Option<Duration>,
    /// The numbers it puts in force under the limits of now; `None` when they describe no bucket.
    pub effective: Option<Limit>,
    /// The limit's default, for comparison (raised or lowered).
    pub default: Option<Limit>,
    /// The database's record of it; `None` for the file's.
    pub stored: Option<StoredOverride>,
    /// Its line in the overrides file, for the file's.
    pub file_line: Option<u64>,
}

/// When an override asked for stops applying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// At this time.
    At(OffsetDateTime),
    /// This long after the server receives the request (its clock, not the client's).
    In(Duration),
}

impl Expiry {
    /// `2026-12-01T00:00:00Z` (RFC 3339) or a duration from now (`30m`, `7d`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Ok(d) = text.parse::<acme_core::duration::ConfigDuration>() {
            return Ok(Self::In(d.std()));
        }
        OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
            .map(Self::At)
            .map_err(|_| {
                format!(
                    "expiry {text:?} is neither a time (RFC 3339, 2026-12-01T00:00:00Z) nor a duration from now (30m, 7d)"
                )
            })
    }
}

/// An override as asked for, not yet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverrideRequest {
    pub limit: String,
    pub id: String,
    pub burst: Option<u64>,
    pub count: Option<u64>,
    pub period: Option<Duration>,
    pub comment: String,
    pub expires: Option<Expiry>,
}

/// An override checked by [`Ra::check_override`], ready for [`Ra::add_override`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedOverride {
    entry: OverrideEntry,
    id: String,
    comment: String,
    expires_at: Option<OffsetDateTime>,
}

/// The longest comment kept: a sentence and a ticket number, not a document.
pub const MAX_COMMENT_LEN: usize = 500;

/// The limit and bucket an override names, checked as the overrides file checks them; the
/// error says what is wrong, for a `400`.
pub fn parse_bucket(limit: &str, id: &str) -> Result<(LimitName, OverrideId), String> {
    let name: LimitName = limit.trim().parse().map_err(|_| {
        let known: Vec<&str> = LimitName::ALL.iter().map(|n| n.as_str()).collect();
        format!(
            "unknown limit {:?}; known limits: {}",
            limit.trim(),
            known.join(", ")
        )
    })?;
    let id = OverrideId::parse(name, id.trim()).map_err(|e| format!("id {id:?}: {e}"))?;
    Ok((name, id))
}

/// Who made a change, as the table's `created_by` keeps it: the operator's name as claimed and
/// the admin token's identity (what was authenticated).
fn created_by(who: &Requester) -> String {
    match &who.actor {
        Actor::Admin {
            token,
            operator: Some(operator),
        } => format!("{operator} (admin token {token})"),
        Actor::Admin {
            token,
            operator: None,
        } => format!("admin token {token}"),
        Actor::Operator(name) => name.clone(),
        _ => who.who().to_owned(),
    }
}

/// The entry of a stored override, checked again with the parser of the file: a row written by
/// another version, or by hand, that no longer parses is left out with a warning.
fn entry_of(stored: &StoredOverride) -> Option<OverrideEntry> {
    match OverrideEntry::single(
        &stored.limit,
        &stored.bucket,
        stored.burst,
        stored.count,
        stored.period,
    ) {
        Ok(entry) => Some(entry),
        Err(e) => {
            tracing::warn!(id = stored.id, error = %e, "a stored rate-limit override does not parse; it does not apply");
            None
        }
    }
}

fn period_secs(period: Option<Duration>) -> Option<f64> {
    period.map(|p| p.as_secs_f64())
}

impl Ra {
    /// Checks an override asked for: the parser of the overrides file for the limit, id and
    /// numbers; the numbers under the limits in force (they must describe a bucket); a comment;
    /// an expiry in the future. The error is for the operator, as a `400`.
    pub fn check_override(&self, request: &OverrideRequest) -> Result<CheckedOverride, String> {
        let comment = request.comment.trim();
        if comment.is_empty() {
            return Err(
                "a comment is required: say why this bucket differs (a ticket, a customer)"
                    .to_owned(),
            );
        }
        if comment.chars().count() > MAX_COMMENT_LEN {
            return Err(format!(
                "the comment is longer than {MAX_COMMENT_LEN} characters"
            ));
        }
        let (name, id) = parse_bucket(&request.limit, &request.id)?;
        let entry = OverrideEntry::single(
            name.as_str(),
            &id.to_string(),
            request.burst,
            request.count,
            request.period,
        )
        .map_err(|e| e.to_string())?;
        entry
            .resolve(&self.inner.limits.config())
            .map_err(|e| e.to_string())?;
        let now = self.now();
        let expires_at = match request.expires {
            None => None,
            Some(Expiry::At(at)) => Some(at),
            Some(Expiry::In(d)) => Some(now + d),
        };
        if let Some(at) = expires_at
            && at <= now
        {
            return Err(format!("the expiry {} is not in the future", rfc3339(at)));
        }
        Ok(CheckedOverride {
            entry,
            id: id.to_string(),
            comment: comment.to_owned(),
            expires_at,
        })
    }

    /// Stores a checked override, recorded as added by `who`, and puts it in force on this
    /// instance at once (the others within their refresh). `conflict` when the database holds an
    /// override of the same bucket in force.
    pub async fn add_override(
        &self,
        checked: CheckedOverride,
        who: &Requester,
    ) -> Result<ListedOverride, Error> {
        let limit = checked.entry.limit;
        let new = NewOverride {
            limit: limit.as_str().to_owned(),
            bucket: checked.id.clone(),
            burst: checked.entry.burst,
            count: checked.entry.count,
            period: checked.entry.period,
            comment: checked.comment.clone(),
            expires_at: checked.expires_at,
            created_by: created_by(who),
        };
        let shadows_file = self.file_names(limit, &checked.id);
        let mut audit = who.event(
            AuditKind::LimitsChanged,
            format!(
                "rate-limit override of {limit} for {} added by {}: {}",
                checked.id,
                who.who(),
                checked.comment
            ),
        );
        audit.detail = serde_json::json!({
            "action": "override_added",
            "limit": limit.as_str(),
            "id": checked.id,
            "burst": new.burst,
            "count": new.count,
            "period_secs": period_secs(new.period),
            "comment": new.comment,
            "expires_at": new.expires_at.map(rfc3339),
            "created_by": new.created_by,
            "shadows_file_override": shadows_file,
        });
        let stored = match self
            .inner
            .storage
            .add_override(&new, self.now(), &audit)
            .await?
        {
            Ok(stored) => stored,
            Err(existing) => {
                return Err(Refusal::Conflict(format!(
                    "the database already overrides {limit} for {} (added {} by {}: {}); remove it first",
                    existing.bucket,
                    rfc3339(existing.created_at),
                    existing.created_by,
                    existing.comment
                ))
                .into());
            }
        };
        tracing::warn!(limit = %limit, id = %stored.bucket, by = %stored.created_by, "rate-limit override added");
        self.reload_overrides().await?;
        Ok(self.listed_stored(&stored))
    }

    /// Removes the database's override of (limit, id), recorded as removed by `who`, and takes it
    /// out of force on this instance at once. A bucket only the file overrides is a `conflict`
    /// that says to edit the file; one overridden nowhere is `not found`.
    pub async fn remove_override(
        &self,
        limit: &str,
        id: &str,
        who: &Requester,
    ) -> Result<ListedOverride, Error> {
        let (name, id) = parse_bucket(limit, id).map_err(Refusal::Conflict)?;
        let id = id.to_string();
        let mut audit = who.event(
            AuditKind::LimitsChanged,
            format!(
                "rate-limit override of {name} for {id} removed by {}",
                who.who()
            ),
        );
        audit.detail = serde_json::json!({
            "action": "override_removed",
            "limit": name.as_str(),
            "id": id,
        });
        let removed = self
            .inner
            .storage
            .remove_override(name.as_str(), &id, self.now(), &audit)
            .await?;
        let Some(removed) = removed else {
            if self.file_names(name, &id) {
                return Err(Refusal::Conflict(format!(
                    "the override of {name} for {id} is in the overrides file (rate-limit-overrides): edit the file and reload to change it"
                ))
                .into());
            }
            return Err(Refusal::NotFound("rate-limit override").into());
        };
        tracing::warn!(limit = %name, id = %id, "rate-limit override removed");
        self.reload_overrides().await?;
        let mut listed = self.listed_stored(&removed);
        listed.effective = None;
        Ok(listed)
    }

    /// Every override: the database's (oldest first), then the file's (in the file's order),
    /// each with its status.
    pub async fn list_overrides(&self) -> Result<Vec<ListedOverride>, Error> {
        let stored = self.inner.storage.overrides().await?;
        let now = self.now();
        let mut listed: Vec<ListedOverride> =
            stored.iter().map(|s| self.listed_stored(s)).collect();
        let in_force: Vec<(LimitName, String)> = stored
            .iter()
            .filter(|s| !s.expired_at(now))
            .filter_map(|s| entry_of(s).map(|e| (e.limit, s.bucket.clone())))
            .collect();
        let config = self.inner.limits.config();
        let (file, _) = self.inner.limits.limiter().overrides_in_force();
        for entry in file.entries() {
            for id in &entry.ids {
                let id = id.to_string();
                let shadowed = in_force.iter().any(|(l, b)| *l == entry.limit && *b == id);
                listed.push(ListedOverride {
                    source: Source::File,
                    status: if shadowed {
                        Status::Shadowed
                    } else {
                        Status::Active
                    },
                    limit: entry.limit,
                    id,
                    burst: entry.burst,
                    count: entry.count,
                    period: entry.period,
                    effective: entry.resolve(&config).ok(),
                    default: default_of(&config, entry.limit),
                    stored: None,
                    file_line: entry.line,
                });
            }
        }
        Ok(listed)
    }

    /// The overrides of (limit, id), from both sources; `not found` when neither has one.
    pub async fn show_override(&self, limit: &str, id: &str) -> Result<Vec<ListedOverride>, Error> {
        let (name, id) = parse_bucket(limit, id).map_err(Refusal::Conflict)?;
        let id = id.to_string();
        let found: Vec<ListedOverride> = self
            .list_overrides()
            .await?
            .into_iter()
            .filter(|o| o.limit == name && o.id == id)
            .collect();
        if found.is_empty() {
            return Err(Refusal::NotFound("rate-limit override").into());
        }
        Ok(found)
    }

    /// Reads the database's overrides and puts those not expired in force on this instance.
    pub async fn reload_overrides(&self) -> Result<(), Error> {
        let stored = self.inner.storage.overrides().await?;
        self.apply_overrides(&stored).await
    }

    /// Puts those of `stored` not expired now in force.
    async fn apply_overrides(&self, stored: &[StoredOverride]) -> Result<(), Error> {
        let now = self.now();
        let entries: Vec<OverrideEntry> = stored
            .iter()
            .filter(|s| !s.expired_at(now))
            .filter_map(entry_of)
            .collect();
        let refreshed = self
            .inner
            .limits
            .limiter()
            .set_database_overrides(&Overrides::from_entries(entries))
            .await
            .map_err(|e| Error::internal("applying the database's rate-limit overrides", &e))?;
        if refreshed > 0 {
            tracing::info!(
                refreshed,
                "buckets of raised rate-limit overrides refreshed"
            );
        }
        Ok(())
    }

    fn file_names(&self, limit: LimitName, id: &str) -> bool {
        let (file, _) = self.inner.limits.limiter().overrides_in_force();
        file.entries()
            .iter()
            .any(|e| e.limit == limit && e.ids.iter().any(|i| i.to_string() == id))
    }

    fn listed_stored(&self, stored: &StoredOverride) -> ListedOverride {
        let config = self.inner.limits.config();
        let entry = entry_of(stored);
        let limit = entry
            .as_ref()
            .map(|e| e.limit)
            .or_else(|| stored.limit.parse().ok())
            .unwrap_or(LimitName::GlobalPerIp);
        ListedOverride {
            source: Source::Database,
            status: if stored.expired_at(self.now()) {
                Status::Expired
            } else {
                Status::Active
            },
            limit,
            id: stored.bucket.clone(),
            burst: stored.burst,
            count: stored.count,
            period: stored.period,
            effective: entry.and_then(|e| e.resolve(&config).ok()),
            default: default_of(&config, limit),
            stored: Some(stored.clone()),
            file_line: None,
        }
    }
}

/// The limit's numbers without any override.
fn default_of(config: &ratelimits::config::RateLimitingConfig, limit: LimitName) -> Option<Limit> {
    ratelimits::overrides::default_limit(config, limit)
}

/// Keeps the database's overrides in force on this instance until `shutdown` resolves: every
/// `rate-limiting.overrides-refresh` it asks for the table's change marker, reads the rows when
/// it moved, and puts those not expired in force (an expiry passing is a change too). A failed
/// read keeps what is in force and is logged; the next tick tries again.
pub async fn run_refresh(ra: Ra, shutdown: impl Future<Output = ()>) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut version: Option<OverridesVersion> = None;
    let mut stored: Vec<StoredOverride> = Vec::new();
    loop {
        // A zero in the configuration would spin; a tenth of a second is already more than any
        // operator needs.
        let every = ra
            .inner
            .limits
            .config()
            .overrides_refresh
            .std()
            .max(Duration::from_millis(100));
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = &mut shutdown => return,
        }
        let step = async {
            let now_version = ra.inner.storage.overrides_version().await?;
            if version != Some(now_version) {
                stored = ra.inner.storage.overrides().await?;
                version = Some(now_version);
            }
            ra.apply_overrides(&stored).await
        };
        if let Err(e) = step.await {
            tracing::warn!(error = %e, "refreshing the database's rate-limit overrides failed; those in force stay");
        }
    }
}
