//! Which issuer signs new certificates (issuer rotation), and whether an operator may switch to
//! another.
//!
//! The active issuer is stored in the database (`ca_state`, migration 0020) rather than in each
//! instance's configuration, so that one `certeasy admin ca activate` switches every instance of
//! a cluster without a restart. Each instance reads it before signing, kept for
//! [`ACTIVE_ISSUER_REFRESH`]: within that time after an activation every instance signs with
//! the new issuer. Until the first activation the configured `ca.active-issuer` is active.
//!
//! An issuer may become active only if it is configured, loaded, not retired and valid at least
//! as long as the longest profile's certificates, so that no certificate is cut short (or
//! refused) for outliving its issuer.

use std::sync::Mutex;
use std::sync::PoisonError;
use std::time::Instant;

use issuance::Ca;
use issuance::IssuerName;
use issuance::Profiles;
use storage::Storage;
use storage::audit::AuditKind;
use time::Duration;
use time::OffsetDateTime;

use crate::audit::Requester;
use crate::error::Error;
use crate::error::Refusal;

/// How long an instance keeps the active issuer it read before reading it again: the most an
/// activation takes to reach every instance. The one place this interval is set.
pub const ACTIVE_ISSUER_REFRESH: std::time::Duration = std::time::Duration::from_secs(2);

/// The issuer new certificates are signed by, read from the database and kept briefly.
#[derive(Debug)]
pub struct ActiveIssuer {
    storage: Storage,
    /// `ca.active-issuer`: active until an operator activates another; a reload may change it.
    configured: Mutex<IssuerName>,
    read: Mutex<Option<(IssuerName, Instant)>>,
}

impl ActiveIssuer {
    pub fn new(storage: Storage, configured: IssuerName) -> Self {
        Self {
            storage,
            configured: Mutex::new(configured),
            read: Mutex::new(None),
        }
    }

    /// `ca.active-issuer` as a reload read it: it applies from now on, until an operator
    /// activates an issuer (the database's choice always wins over the configuration's).
    pub fn set_configured(&self, name: IssuerName) {
        *self
            .configured
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = name;
        self.forget();
    }

    /// `ca.active-issuer` as in force: what is active until an operator activates an issuer.
    pub fn configured_name(&self) -> IssuerName {
        self.configured
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The active issuer's name when `ca` (this instance's set in force) cannot sign with it:
    /// not configured here, or retired. Such an instance signs nothing (a certificate under
    /// another issuer than the one the operator activated would be a mis-issuance of a kind),
    /// and `/readyz` names the issuer so that a load balancer takes the instance out until a
    /// reload adds it.
    pub async fn missing_from(&self, ca: &Ca) -> Option<IssuerName> {
        let name = self.current().await;
        ca.issuer(&name).is_none().then_some(name)
    }

    /// The active issuer's name. When the database cannot be read, the last name read (or the
    /// configured one) stands: signing goes on under the issuer in force, and the failure is
    /// logged.
    pub async fn current(&self) -> IssuerName {
        let held = self
            .read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some((name, at)) = &held
            && at.elapsed() < ACTIVE_ISSUER_REFRESH
        {
            return name.clone();
        }
        let name = match self.storage.active_issuer().await {
            Ok(Some(stored)) => match IssuerName::new(&stored.name) {
                Ok(name) => name,
                Err(why) => {
                    tracing::error!(%why, "the stored active issuer is not a valid name; the configured one signs");
                    self.configured_name()
                }
            },
            Ok(None) => self.configured_name(),
            Err(e) => {
                tracing::warn!(error = %e, "reading the active issuer; the one in force signs");
                return held.map_or_else(|| self.configured_name(), |(name, _)| name);
            }
        };
        *self.read.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((name.clone(), Instant::now()));
        name
    }

    /// Forgets what was read, so that this instance signs with an issuer activated through it
    /// at once.
    pub fn forget(&self) {
        *self.read.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// One issuer as `certeasy admin ca list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerListing {
    pub name: IssuerName,
    pub active: bool,
    /// Its certificate had expired when it was loaded: it signs and publishes nothing.
    pub retired: bool,
    pub not_after: OffsetDateTime,
    /// Certificates stored under it, ever.
    pub certificates: u64,
    /// The latest notAfter of those: its CRLs are published until then.
    pub last_certificate_not_after: Option<OffsetDateTime>,
}

/// The longest validity any profile gives a certificate: an issuer must outlive a certificate
/// issued now for that long.
pub fn longest_validity(profiles: &Profiles) -> Duration {
    profiles
        .iter()
        .map(issuance::Profile::validity)
        .max()
        .unwrap_or(Duration::ZERO)
}

/// Whether `name` may become the active issuer at `now`: configured and loaded, not retired
/// and valid for at least `longest` more (`Conflict`, saying why).
pub fn may_activate(
    ca: &Ca,
    name: &IssuerName,
    longest: Duration,
    now: OffsetDateTime,
) -> Result<(), Refusal> {
    if let Some(retired) = ca.retired_issuers().iter().find(|r| &r.name == name) {
        return Err(Refusal::Conflict(format!(
            "issuer {name} is retired: its certificate expired at {}",
            retired.not_after
        )));
    }
    let Some(issuer) = ca.issuer(name) else {
        // Named in full: the usual cause is an entry added to the file and not yet reloaded.
        let loaded: Vec<String> = ca.issuers().map(|i| i.name().to_string()).collect();
        return Err(Refusal::Conflict(format!(
            "no issuer {name} is loaded on this instance (loaded: {}): add it to ca.issuers, \
             reload (SIGHUP or `certeasy admin reload`) and activate it then",
            loaded.join(", ")
        )));
    };
    let not_after = issuer.issuing_not_after();
    if not_after <= now {
        return Err(Refusal::Conflict(format!(
            "issuer {name} expired at {not_after}"
        )));
    }
    if not_after < now + longest {
        return Err(Refusal::Conflict(format!(
            "issuer {name} expires at {not_after}, before a certificate issued now under the longest profile ({} days) would: certificates would be cut short; activate an issuer valid until at least {}",
            longest.whole_days(),
            now + longest
        )));
    }
    Ok(())
}

/// Makes `name` the active issuer of every instance, after [`may_activate`]; this instance
/// switches at once, the others within [`ACTIVE_ISSUER_REFRESH`].
pub async fn activate(
    storage: &Storage,
    ca: &Ca,
    active: &ActiveIssuer,
    name: &IssuerName,
    longest: Duration,
    now: OffsetDateTime,
    requester: &Requester,
) -> Result<(), Error> {
    may_activate(ca, name, longest, now)?;
    let previous = active.current().await;
    let mut event = requester.event(
        AuditKind::IssuerActivated,
        format!(
            "{} activated issuer {name}: configured, not retired, and valid until {} (beyond the longest profile's certificates)",
            requester.who(),
            ca.issuer(name).map_or_else(|| "?".to_owned(), |issuer| issuer.issuing_not_after().to_string())
        ),
    );
    event.detail = serde_json::json!({ "issuer": name.as_str(), "previous": previous.as_str() });
    storage
        .set_active_issuer(name.as_str(), now, &event)
        .await?;
    active.forget();
    tracing::info!(issuer = %name, "issuer activated: new certificates are signed by it");
    Ok(())
}

/// Every configured issuer with what it signed, the active one marked.
pub async fn list(
    storage: &Storage,
    ca: &Ca,
    active: &ActiveIssuer,
) -> Result<Vec<IssuerListing>, Error> {
    let current = active.current().await;
    let usage = storage.issuer_usage().await?;
    let used = |name: &IssuerName| {
        usage
            .iter()
            .find(|u| u.issuer == name.as_str())
            .map_or((0, None), |u| (u.certificates, u.last_not_after))
    };
    let mut listed: Vec<IssuerListing> = ca
        .issuers()
        .map(|issuer| {
            let (certificates, last) = used(issuer.name());
            IssuerListing {
                name: issuer.name().clone(),
                active: issuer.name() == &current,
                retired: false,
                not_after: issuer.issuing_not_after(),
                certificates,
                last_certificate_not_after: last,
            }
        })
        .collect();
    listed.extend(ca.retired_issuers().iter().map(|retired| {
        let (certificates, last) = used(&retired.name);
        IssuerListing {
            name: retired.name.clone(),
            active: retired.name == current,
            retired: true,
            not_after: retired.not_after,
            certificates,
            last_certificate_not_after: last,
        }
    }));
    Ok(listed)
}
