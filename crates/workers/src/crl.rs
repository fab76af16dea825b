//! The CRL publisher: keeps every shard's CRL (RFC 5280 §5) fresh in the database, from which
//! every instance serves it.
//!
//! A shard is rebuilt when a revocation in it has been recorded since its last CRL (checked
//! every `CHECK_INTERVAL`, so a revocation reaches the CRL within about a second), and on
//! schedule every `update-interval`, so that a CRL never comes close to its `nextUpdate`.
//! Publishing is compare-and-set on the shard's CRL number: when several instances rebuild the
//! same shard at once, one stores its CRL and the others discard theirs, so numbers grow by one
//! per published CRL and no two CRLs of a shard share a number.
//!
//! A shard lists its revoked certificates and the serials reserved under this CA's chain that
//! were possibly signed and then abandoned (no certificate row exists to revoke them); marking
//! one abandoned raises its shard's counter like a revocation does.
//!
//! Every loaded issuer (issuer rotation) publishes its own shards, signed with its own key and
//! naming its own URL, whether it is the active one or not, until its certificate expires: none
//! of the certificates it signed outlives it. A retired issuer (expired when loaded) publishes
//! nothing.

use std::sync::Arc;
use std::time::Duration;

use acme_core::clock::SharedClock;
use issuance::Ca;
use issuance::CaHandle;
use issuance::IssuerName;
use issuance::RevokedEntry;
use storage::Storage;
use storage::crls::CrlShardState;
use storage::crls::PublishedCrl;
use tokio_util::sync::CancellationToken;

/// How often the shards' state is read for revocations to publish: one small query a second.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Default of `crl.update-interval`.
pub const DEFAULT_UPDATE_INTERVAL: Duration = Duration::from_secs(6 * 3600);

/// Default of `crl.lifetime`: `nextUpdate` a week after `thisUpdate`, within the Baseline
/// Requirements' ten days, and long enough that relying parties ride out an outage of the CA.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);

/// Default of `crl.shards`, chosen with `benches/crl.rs` at issue 31's size (100,000 revoked
/// 7-day certificates): regenerating every shard takes the same CPU whatever the count (0.17 s
/// for 1, 4 or 16 shards, 0.14 s for 32: the entries dominate), so the count sets what one shard
/// weighs. At 16 the largest CRL a relying party downloads is 284 KB (1.1 MB at 4, 4.4 MB at 1)
/// and one shard's rebuild takes about 12 ms of CPU (43 ms at 4), a quarter of it signing on a
/// runtime thread, with a quarter of the bytes stored under SQLite's writer lock; 32 would halve
/// that again but double the CRLs every aggregator fetches and every instance keeps in memory,
/// for figures already far inside the update interval.
pub const DEFAULT_SHARDS: u16 = 16;

/// How CRLs are published.
#[derive(Debug, Clone)]
pub struct CrlSettings {
    /// Shards `0..shards` are published.
    pub shards: u16,
    /// A shard's CRL is rebuilt at least this often.
    pub update_interval: Duration,
    /// `nextUpdate - thisUpdate`.
    pub lifetime: Duration,
}

impl Default for CrlSettings {
    fn default() -> Self {
        Self {
            shards: DEFAULT_SHARDS,
            update_interval: DEFAULT_UPDATE_INTERVAL,
            lifetime: DEFAULT_LIFETIME,
        }
    }
}

/// Why publishing a shard failed.
#[derive(Debug, thiserror::Error)]
pub enum CrlError {
    #[error("storage: {0}")]
    Storage(#[from] storage::error::Error),
    #[error("signing: {0}")]
    Signing(#[from] issuance::Error),
}

/// Publishes until `shutdown` is cancelled. The shards' rows are created first, so that every
/// revocation from then on finds its shard's counter; again for each issuer set a reload puts
/// in force, so that an added issuer's shards exist within a second of the reload.
pub async fn run(
    storage: Storage,
    ca: impl Into<CaHandle>,
    clock: SharedClock,
    settings: CrlSettings,
    shutdown: CancellationToken,
) {
    let handle: CaHandle = ca.into();
    // Exported so that an alert can compare a served CRL's age with the interval it is kept to.
    metrics::gauge!("certeasy_crl_update_interval_seconds")
        .set(settings.update_interval.as_secs_f64());
    let mut ticker = tokio::time::interval(CHECK_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The set whose shards were created last.
    let mut ensured: Option<Arc<Ca>> = None;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = shutdown.cancelled() => return,
        }
        let ca = handle.current();
        if ensured.as_ref().is_none_or(|set| !Arc::ptr_eq(set, &ca)) {
            match ensure_shards(&storage, &ca, &settings).await {
                Ok(()) => ensured = Some(Arc::clone(&ca)),
                Err(e) => {
                    tracing::warn!(error = %e, "creating the CRL shards");
                    continue;
                }
            }
        }
        if let Err(e) = publish_due(&storage, &ca, &clock, &settings).await {
            metrics::counter!("certeasy_crl_failures_total").increment(1);
            tracing::warn!(error = %e, "publishing CRLs");
        }
    }
}

/// Creates every loaded issuer's shard rows.
pub async fn ensure_shards(
    storage: &Storage,
    ca: &Ca,
    settings: &CrlSettings,
) -> Result<(), CrlError> {
    for issuer in ca.issuers() {
        storage
            .ensure_crl_shards(issuer.name().as_str(), settings.shards)
            .await?;
    }
    Ok(())
}

/// Rebuilds every shard that is stale or due, of every issuer that still publishes; returns how
/// many CRLs this instance stored.
pub async fn publish_due(
    storage: &Storage,
    ca: &Ca,
    clock: &SharedClock,
    settings: &CrlSettings,
) -> Result<usize, CrlError> {
    let now = clock.now();
    let mut stored = 0;
    for state in storage.crl_shard_states().await? {
        // Shards of an issuer this instance has not loaded are another instance's to publish;
        // those of one past its certificate's end list nothing valid any more.
        let Some(issuer) = IssuerName::new(&state.issuer)
            .ok()
            .and_then(|name| ca.issuer(&name))
            .filter(|issuer| issuer.publishes_crls_at(now))
        else {
            continue;
        };
        // Shards beyond the configured count (after it was lowered) still list the certificates
        // that name them: they stay published.
        if is_due(&state, now, settings)
            && publish_shard(storage, issuer, clock, settings, &state).await?
        {
            stored += 1;
        }
    }
    Ok(stored)
}

fn is_due(state: &CrlShardState, now: time::OffsetDateTime, settings: &CrlSettings) -> bool {
    if state.is_stale() {
        return true;
    }
    let interval =
        time::Duration::try_from(settings.update_interval).unwrap_or(time::Duration::DAY);
    state.this_update.is_none_or(|at| now - at >= interval)
}

/// Builds and stores one shard's CRL; `false` if another instance published it first. Public
/// so that the CRL bench (`benches/crl.rs`) times exactly what the publisher does for a shard.
pub async fn publish_shard(
    storage: &Storage,
    ca: &Ca,
    clock: &SharedClock,
    settings: &CrlSettings,
    state: &CrlShardState,
) -> Result<bool, CrlError> {
    // The counter was read before the entries: a revocation committed after this read raises it
    // past `state.revocations`, so the shard stays stale and is rebuilt on the next check.
    let now = clock.now();
    // The CA's own chain: abandoned serials are listed by the issuer that reserved them.
    let revoked = storage
        .revoked_in_crl_shard(&state.issuer, state.shard, ca.chain_pem(), now)
        .await?;
    let entries: Vec<RevokedEntry> = revoked
        .into_iter()
        .map(|r| RevokedEntry {
            serial: r.serial,
            revoked_at: r.revoked_at,
            reason: r.reason,
        })
        .collect();
    let lifetime = time::Duration::try_from(settings.lifetime).unwrap_or(time::Duration::WEEK);
    let number = state.number + 1;
    let der = ca.crl(state.shard, &entries, number, now, now + lifetime)?;
    let crl = PublishedCrl {
        number,
        der,
        this_update: now.replace_nanosecond(0).unwrap_or(now),
        next_update: (now + lifetime)
            .replace_nanosecond(0)
            .unwrap_or(now + lifetime),
    };
    let stored = storage
        .publish_crl(
            &state.issuer,
            state.shard,
            state.number,
            state.revocations,
            &crl,
        )
        .await?;
    if stored {
        let shard = state.shard.to_string();
        let issuer = state.issuer.clone();
        metrics::counter!("certeasy_crl_published_total", "issuer" => issuer.clone(), "shard" => shard.clone()).increment(1);
        #[allow(clippy::cast_precision_loss)] // a CRL's entry count is far below 2^52
        metrics::gauge!("certeasy_crl_entries", "issuer" => issuer, "shard" => shard)
            .set(entries.len() as f64);
        tracing::info!(
            issuer = %state.issuer,
            shard = state.shard,
            number,
            entries = entries.len(),
            "CRL published"
        );
    }
    Ok(stored)
}
