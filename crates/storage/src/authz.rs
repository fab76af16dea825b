//! Authorizations and challenges: expiry, starting a validation, recording its verdict,
//! deactivation.

use crate::sql;
use crate::sql::Conn;
use acme_core::ids::AuthzId;
use acme_core::ids::ChallengeId;
use acme_core::problem::Problem;
use acme_core::status::AuthzStatus;
use acme_core::status::ChallengeStatus;
use time::Duration;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::codec;
use crate::error::Error;
use crate::evidence;
use crate::evidence::Evidence;
use crate::model::Authorization;
use crate::model::Challenge;
use crate::model::ChallengeStart;
use crate::model::Job;
use crate::model::JobKind;
use crate::model::NotStarted;
use crate::model::StatusChange;
use crate::model::ValidationRecorded;
use crate::rows;
use crate::state;

pub(crate) async fn get(
    s: &Storage,
    key: rows::AuthzKey,
    now: OffsetDateTime,
) -> Result<Option<Authorization>> {
    let id = {
        let mut conn = s.db.acquire().await?;
        let Some(authz) = rows::load_authorization_by(&mut conn, key).await? else {
            return Ok(None);
        };
        let expired = matches!(authz.status, AuthzStatus::Pending | AuthzStatus::Valid)
            && authz.expires_at <= now;
        if !expired {
            // The common read takes no write lock.
            return Ok(Some(authz));
        }
        authz.id
    };
    let mut tx = s.begin_write().await?;
    state::lock_orders_holding(&mut tx, s.backend, id).await?;
    state::expire_authz(&mut tx, id, codec::unix(now)).await?;
    let authz = rows::load_authorization(&mut tx, id).await?;
    tx.commit().await?;
    Ok(authz)
}

pub(crate) async fn challenge(s: &Storage, id: ChallengeId) -> Result<Option<Challenge>> {
    let mut conn = s.db.acquire().await?;
    rows::load_challenge(&mut conn, id).await
}

/// The authorization's status, row-locked on PostgreSQL so that deciding on it and acting on it
/// cannot interleave with another request for the same authorization. A pending or valid
/// authorization past its expiry is expired here (with the orders that hold it), so the caller
/// sees `expired`; the common case, not yet expired, costs this one statement. The caller has
/// locked the orders holding it first (`state::lock_orders_holding`), the order every path
/// takes locks in.
async fn lock_authz_status(
    conn: &mut Conn,
    backend: Backend,
    id: AuthzId,
    now: i64,
) -> Result<AuthzStatus> {
    let query = match backend {
        Backend::Postgres => {
            sql::query("SELECT status, expires_at FROM authorizations WHERE id = $1 FOR UPDATE")
        }
        Backend::Sqlite => {
            sql::query("SELECT status, expires_at FROM authorizations WHERE id = $1")
        }
    };
    let row = query
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(Error::NotFound)?;
    let status: AuthzStatus = codec::parse(&row.try_get::<String, _>("status")?)?;
    let expires_at: i64 = row.try_get("expires_at")?;
    if matches!(status, AuthzStatus::Pending | AuthzStatus::Valid)
        && expires_at <= now
        && state::expire_authz(conn, id, now).await?
    {
        return Ok(AuthzStatus::Expired);
    }
    Ok(status)
}

/// Moves a pending challenge to `to` (`processing`, or `valid` for a validation that succeeded
/// before anything was recorded) under the locks every path takes: the orders holding the
/// authorization, then the authorization, whose expiry is applied first. One validation per
/// authorization: a challenge whose sibling has left pending does not start. The answer's `job`
/// is always `None`: the caller enqueues it.
async fn try_start(
    s: &Storage,
    conn: &mut Conn,
    id: ChallengeId,
    now_s: i64,
    to: ChallengeStatus,
) -> Result<ChallengeStart> {
    let challenge = rows::load_challenge(conn, id)
        .await?
        .ok_or(Error::NotFound)?;
    let authz_id = challenge.authz_id;
    state::lock_orders_holding(conn, s.backend, authz_id).await?;
    let authz_status = lock_authz_status(conn, s.backend, authz_id, now_s).await?;
    // On PostgreSQL, re-read under the lock: a concurrent start may have moved it. SQLite's
    // IMMEDIATE transaction held the write lock before the first read.
    let mut challenge = match s.backend {
        Backend::Postgres => rows::load_challenge(conn, id)
            .await?
            .ok_or(Error::NotFound)?,
        Backend::Sqlite => challenge,
    };
    if challenge.status != ChallengeStatus::Pending {
        return Ok(ChallengeStart::Left(challenge));
    }
    if authz_status != AuthzStatus::Pending {
        return Ok(ChallengeStart::NotStarted(NotStarted::AuthzNotPending(
            authz_status,
        )));
    }
    let validated_at = (to == ChallengeStatus::Valid).then_some(now_s);
    if !start_if_first(conn, id, authz_id, to, validated_at).await? {
        return Ok(ChallengeStart::NotStarted(NotStarted::SiblingStarted));
    }
    challenge.status = to;
    challenge.validated_at = validated_at.map(codec::time_from_unix).transpose()?;
    Ok(ChallengeStart::Started {
        challenge,
        job: None,
    })
}

/// `claim`: the lease under which the caller runs the validation job itself (see
/// [`state::enqueue_job`]); the job comes back only when this call created it.
pub(crate) async fn start_challenge(
    s: &Storage,
    id: ChallengeId,
    now: OffsetDateTime,
    claim: Option<Duration>,
) -> Result<ChallengeStart> {
    let mut tx = s.begin_write().await?;
    let start = try_start(
        s,
        &mut tx,
        id,
        codec::unix(now),
        ChallengeStatus::Processing,
    )
    .await?;
    let answer = match start {
        ChallengeStart::Started { challenge, .. } => {
            let job = state::enqueue_job(&mut tx, JobKind::Validate(id), now, claim).await?;
            ChallengeStart::Started { challenge, job }
        }
        other => other,
    };
    // Commit even when it did not start, so that an expiry found on the way is persisted.
    tx.commit().await?;
    Ok(answer)
}

/// A validation that succeeded before anything about it was recorded: pending → valid in one
/// transaction, with the checks of [`start_challenge`] and the effects of a valid verdict of
/// [`record_validation`]. The challenge that has already left pending is returned as it is.
pub(crate) async fn record_valid_at_once(
    s: &Storage,
    id: ChallengeId,
    evidence: Option<&Evidence>,
    valid_for: Duration,
    now: OffsetDateTime,
) -> Result<ChallengeStart> {
    let now_s = codec::unix(now);
    let evidence = evidence.map(evidence::encode);
    if s.backend == Backend::Postgres {
        return record_valid_at_once_pg(s, id, evidence, now_s, codec::unix(now + valid_for)).await;
    }
    let mut tx = s.begin_write().await?;
    let answer = try_start(s, &mut tx, id, now_s, ChallengeStatus::Valid).await?;
    if let ChallengeStart::Started { challenge, .. } = &answer {
        sql::query("UPDATE challenges SET evidence = $2 WHERE id = $1")
            .bind(id.0)
            .bind(evidence)
            .execute(&mut *tx)
            .await?;
        authz_validated(&mut tx, challenge.authz_id, valid_for, now).await?;
    }
    tx.commit().await?;
    Ok(answer)
}

/// [`record_valid_at_once`] on PostgreSQL: the same transaction, lock for lock, as the function
/// `certeasy_record_valid_at_once` (migration 0013, with the evidence kept by its four-argument
/// form of migration 0019), in one round trip instead of ten.
async fn record_valid_at_once_pg(
    s: &Storage,
    id: ChallengeId,
    evidence: Option<String>,
    now_s: i64,
    valid_until: i64,
) -> Result<ChallengeStart> {
    let row = sql::query("SELECT * FROM certeasy_record_valid_at_once($1, $2, $3, $4)")
        .bind(id.0)
        .bind(now_s)
        .bind(valid_until)
        .bind(evidence)
        .fetch_optional(&s.db)
        .await?
        .ok_or(Error::NotFound)?;
    let challenge = rows::challenge(&row)?;
    match row.try_get::<String, _>("outcome")?.as_str() {
        "started" => Ok(ChallengeStart::Started {
            challenge,
            job: None,
        }),
        "left" => Ok(ChallengeStart::Left(challenge)),
        "refused" => Ok(ChallengeStart::NotStarted(NotStarted::AuthzNotPending(
            codec::parse(&row.try_get::<String, _>("authz_status")?)?,
        ))),
        "sibling" => Ok(ChallengeStart::NotStarted(NotStarted::SiblingStarted)),
        other => Err(Error::Corrupt(format!(
            "certeasy_record_valid_at_once answered {other}"
        ))),
    }
}

/// pending → `to` (and `validated_at`), unless another challenge of the authorization has left
/// pending (one validation per authorization). The caller holds the authorization's lock and has
/// seen this challenge pending, so `false` can only mean the other challenge.
async fn start_if_first(
    conn: &mut Conn,
    id: ChallengeId,
    authz: AuthzId,
    to: ChallengeStatus,
    validated_at: Option<i64>,
) -> Result<bool> {
    Ok(sql::query(
        "UPDATE challenges SET status = $3, validated_at = $4 WHERE id = $1 AND status = 'pending' \
         AND NOT EXISTS (SELECT 1 FROM challenges other \
             WHERE other.authz_id = $2 AND other.status <> 'pending')",
    )
    .bind(id.0)
    .bind(authz.0)
    .bind(to.as_str())
    .bind(validated_at)
    .execute(&mut *conn)
    .await?
    .rows_affected()
        > 0)
}

/// A challenge of the authorization was validated: a pending authorization becomes valid for
/// its own lifetime, the one of the profile it was created for (migration 0025), but never
/// longer than `valid_for`, the policy layer's valid-authorization lifetime for this validation
/// (the CA-wide one, which bounds every profile's, cut shorter by a dns-persist-01 record's
/// `persistUntil`); without its own lifetime, `valid_for`. The unfinished orders holding
/// it expire no later, and those whose authorizations are now all valid become ready. The
/// PostgreSQL function `certeasy_record_valid_at_once` decides the expiry alike.
async fn authz_validated(
    conn: &mut Conn,
    authz_id: AuthzId,
    valid_for: Duration,
    now: OffsetDateTime,
) -> Result<()> {
    let own: Option<i64> =
        sql::query_scalar::<Option<i64>>("SELECT valid_lifetime FROM authorizations WHERE id = $1")
            .bind(authz_id.0)
            .fetch_optional(&mut *conn)
            .await?
            .flatten();
    let expires = match own {
        Some(secs) => codec::unix(now)
            .saturating_add(secs)
            .min(codec::unix(now + valid_for)),
        None => codec::unix(now + valid_for),
    };
    if decide_authz(conn, authz_id, AuthzStatus::Valid, Some(expires)).await? {
        state::cap_orders_expiry(conn, authz_id, expires).await?;
        state::promote_orders_holding(conn, authz_id, codec::unix(now)).await?;
    }
    Ok(())
}

/// `settle`: the claim of the job that produced the verdict, deleted in the same transaction.
pub(crate) async fn record_validation(
    s: &Storage,
    id: ChallengeId,
    outcome: std::result::Result<(), Problem>,
    evidence: Option<&Evidence>,
    valid_for: Duration,
    now: OffsetDateTime,
    settle: Option<&Job>,
) -> Result<ValidationRecorded> {
    let now_s = codec::unix(now);
    let mut tx = s.begin_write().await?;
    let row = sql::query(
        "SELECT c.id AS id, c.authz_id AS authz_id, c.type AS type, c.token AS token, \
         c.status AS status, c.validated_at AS validated_at, c.error_type AS error_type, \
         c.error_detail AS error_detail, \
         a.account_id AS account_id, a.identifier_type AS identifier_type, \
         a.identifier_value AS identifier_value \
         FROM challenges c JOIN authorizations a ON a.id = c.authz_id WHERE c.id = $1",
    )
    .bind(id.0)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(Error::NotFound)?;
    let authz_id = AuthzId(row.try_get("authz_id")?);
    let account_id = acme_core::ids::AccountId(row.try_get("account_id")?);
    let identifier = codec::identifier(
        &row.try_get::<String, _>("identifier_type")?,
        &row.try_get::<String, _>("identifier_value")?,
    )?;
    state::lock_orders_holding(&mut tx, s.backend, authz_id).await?;
    // An authorization that expired while the worker ran stays expired; the verdict is still
    // kept on the challenge.
    lock_authz_status(&mut tx, s.backend, authz_id, now_s).await?;
    // On PostgreSQL, re-read under the locks (as in `start_challenge`); SQLite's IMMEDIATE
    // transaction held the write lock before the first read.
    let current = match s.backend {
        Backend::Postgres => rows::load_challenge(&mut tx, id)
            .await?
            .ok_or(Error::NotFound)?,
        Backend::Sqlite => rows::challenge(&row)?,
    };
    let recorded = |status, changed| ValidationRecorded {
        account_id,
        authz_id,
        identifier: identifier.clone(),
        status,
        changed,
    };
    if let Some(job) = settle {
        state::settle_job(&mut tx, job).await?;
    }
    match current.status {
        ChallengeStatus::Valid | ChallengeStatus::Invalid => {
            tx.commit().await?;
            return Ok(recorded(current.status, false));
        }
        // A verdict comes from the job its start enqueued: one for a challenge never started
        // is a broken invariant (a bug or a manual edit), not a state to decide on.
        ChallengeStatus::Pending => {
            return Err(Error::Corrupt(format!(
                "a verdict for challenge {id}, whose validation was never started"
            )));
        }
        ChallengeStatus::Processing => {}
    }
    let status = match &outcome {
        Ok(()) => {
            sql::query("UPDATE challenges SET status = 'valid', validated_at = $2, error_type = NULL, error_detail = NULL, evidence = $3 WHERE id = $1")
                .bind(id.0)
                .bind(now_s)
                .bind(evidence.map(evidence::encode))
                .execute(&mut *tx)
                .await?;
            authz_validated(&mut tx, authz_id, valid_for, now).await?;
            ChallengeStatus::Valid
        }
        Err(problem) => {
            let (error_type, error_detail) = codec::problem_columns(Some(problem));
            sql::query("UPDATE challenges SET status = 'invalid', error_type = $2, error_detail = $3 WHERE id = $1")
                .bind(id.0)
                .bind(error_type)
                .bind(error_detail)
                .execute(&mut *tx)
                .await?;
            if decide_authz(&mut tx, authz_id, AuthzStatus::Invalid, None).await? {
                state::invalidate_orders_holding(&mut tx, authz_id, now_s, Some(problem)).await?;
            }
            ChallengeStatus::Invalid
        }
    };
    tx.commit().await?;
    Ok(recorded(status, true))
}

/// pending → `to` (with a new expiry when given); false when the authorization had already left
/// pending.
async fn decide_authz(
    conn: &mut Conn,
    id: AuthzId,
    to: AuthzStatus,
    expires: Option<i64>,
) -> Result<bool> {
    Ok(sql::query(
        "UPDATE authorizations SET status = $2, expires_at = COALESCE($3, expires_at) \
         WHERE id = $1 AND status = 'pending'",
    )
    .bind(id.0)
    .bind(to.as_str())
    .bind(expires)
    .execute(&mut *conn)
    .await?
    .rows_affected()
        > 0)
}

/// Deactivates a pending or valid authorization (expiry applied first); any other is
/// `Unchanged`, with the expiry found on the way committed.
pub(crate) async fn deactivate(
    s: &Storage,
    id: AuthzId,
    now: OffsetDateTime,
) -> Result<StatusChange<Authorization>> {
    let now_s = codec::unix(now);
    let mut tx = s.begin_write().await?;
    state::lock_orders_holding(&mut tx, s.backend, id).await?;
    let status = lock_authz_status(&mut tx, s.backend, id, now_s).await?;
    let changed = matches!(status, AuthzStatus::Pending | AuthzStatus::Valid);
    if changed {
        sql::query("UPDATE authorizations SET status = 'deactivated' WHERE id = $1")
            .bind(id.0)
            .execute(&mut *tx)
            .await?;
        state::invalidate_orders_holding(&mut tx, id, now_s, None).await?;
    }
    let authz = rows::load_authorization(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(if changed {
        StatusChange::Changed(authz)
    } else {
        StatusChange::Unchanged(authz)
    })
}

impl Storage {
    /// Reads an authorization with its challenges, first applying expiry (pending/valid past
    /// `expires_at` become expired, and pending orders that hold them become invalid).
    pub async fn authorization(
        &self,
        id: AuthzId,
        now: OffsetDateTime,
    ) -> Result<Option<Authorization>> {
        get(self, rows::AuthzKey::Id(id), now).await
    }
    /// [`Storage::authorization`] of the authorization that holds challenge `id`, in one read:
    /// what a challenge request needs to check ownership and state.
    pub async fn authorization_of_challenge(
        &self,
        id: ChallengeId,
        now: OffsetDateTime,
    ) -> Result<Option<Authorization>> {
        get(self, rows::AuthzKey::OfChallenge(id), now).await
    }
    pub async fn challenge(&self, id: ChallengeId) -> Result<Option<Challenge>> {
        challenge(self, id).await
    }
    /// The client asked for validation: pending → processing and a `Validate` job, in one
    /// transaction. Idempotent for a challenge already processing, valid or invalid (`Left`).
    /// `NotStarted` when the authorization is no longer pending (expiry applied first), or when
    /// another challenge of it was already started: one validation per authorization.
    pub async fn start_challenge(
        &self,
        id: ChallengeId,
        now: OffsetDateTime,
    ) -> Result<ChallengeStart> {
        start_challenge(self, id, now, None).await
    }
    /// [`Storage::start_challenge`], but the `Validate` job is inserted already claimed by the
    /// caller, leased for `lease`, and returned in `Started`, so the caller runs it at once
    /// instead of waking the queue.
    pub async fn start_challenge_claimed(
        &self,
        id: ChallengeId,
        now: OffsetDateTime,
        lease: Duration,
    ) -> Result<ChallengeStart> {
        start_challenge(self, id, now, Some(lease)).await
    }
    /// A validation that succeeded before anything about it was recorded (the request that asked
    /// for it ran it at once): pending → valid in one transaction, with the checks of
    /// [`Storage::start_challenge`] and the effects of a valid verdict of
    /// [`Storage::record_validation`]. No job ever exists for it. A challenge that has already
    /// left pending (started first by another request or instance, whose outcome stands) is
    /// returned as it is (`Left`); `NotStarted` as for [`Storage::start_challenge`]. The
    /// authorization is valid for `valid_for`, as in [`Storage::record_validation`].
    pub async fn record_valid_at_once(
        &self,
        id: ChallengeId,
        valid_for: Duration,
        now: OffsetDateTime,
    ) -> Result<ChallengeStart> {
        record_valid_at_once(self, id, None, valid_for, now).await
    }

    /// [`Storage::record_valid_at_once`] keeping what the attempt established with the
    /// challenge, for the certificates it will authorize (`evidence.rs`).
    pub async fn record_valid_at_once_with_evidence(
        &self,
        id: ChallengeId,
        evidence: &Evidence,
        valid_for: Duration,
        now: OffsetDateTime,
    ) -> Result<ChallengeStart> {
        record_valid_at_once(self, id, Some(evidence), valid_for, now).await
    }
    /// A worker's verdict: the challenge becomes valid or invalid (storing the problem), its
    /// authorization follows, and every order holding the authorization is updated (ready when
    /// all its authorizations are valid, invalid with the problem when one is invalid). A valid
    /// authorization expires `valid_for` (the policy layer's valid-authorization lifetime) after
    /// `now`, and the unfinished orders holding it expire no later. `Error::Corrupt` for a
    /// challenge never started, which no job can hold.
    ///
    /// `settle`: the job claim that produced the verdict; it is deleted in the same transaction
    /// (if the claim still holds it), so recording and finishing the job are one commit.
    pub async fn record_validation(
        &self,
        id: ChallengeId,
        outcome: std::result::Result<(), Problem>,
        valid_for: Duration,
        now: OffsetDateTime,
        settle: Option<&Job>,
    ) -> Result<ValidationRecorded> {
        record_validation(self, id, outcome, None, valid_for, now, settle).await
    }

    /// [`Storage::record_validation`] keeping, with a challenge that becomes valid, what the
    /// attempt established (`evidence.rs`): `Ok(evidence)` is the valid verdict.
    pub async fn record_validation_with_evidence(
        &self,
        id: ChallengeId,
        outcome: std::result::Result<&Evidence, Problem>,
        valid_for: Duration,
        now: OffsetDateTime,
        settle: Option<&Job>,
    ) -> Result<ValidationRecorded> {
        let (outcome, evidence) = match outcome {
            Ok(evidence) => (Ok(()), Some(evidence)),
            Err(problem) => (Err(problem), None),
        };
        record_validation(self, id, outcome, evidence, valid_for, now, settle).await
    }
    /// Client deactivation of a pending or valid authorization; its pending/ready orders become
    /// invalid. `Unchanged` otherwise.
    pub async fn deactivate_authorization(
        &self,
        id: AuthzId,
        now: OffsetDateTime,
    ) -> Result<StatusChange<Authorization>> {
        deactivate(self, id, now).await
    }
}
