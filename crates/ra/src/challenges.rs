//! Authorizations and challenges (RFC 8555 §7.5): starting a validation and deactivating an
//! authorization.

use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use acme_core::ids::ChallengeId;
use acme_core::status::AuthzStatus;
use acme_core::status::ChallengeStatus;
use storage::model::Account;
use storage::model::Authorization;
use storage::model::Challenge;
use storage::model::ChallengeStart;
use storage::model::StatusChange;

use crate::Ra;
use crate::error::Error;
use crate::error::Refusal;
use crate::error::StateRefusal;
use crate::in_flight::Key;
use crate::jobs::VALIDATION_WAIT;
use crate::jobs::ValidationTarget;

impl Ra {
    /// An authorization of this account; others' are indistinguishable from missing ones.
    pub async fn authorization_of(
        &self,
        account: AccountId,
        id: AuthzId,
    ) -> Result<Authorization, Error> {
        match self.inner.storage.authorization(id, self.now()).await? {
            Some(authz) if authz.account_id == account => Ok(authz),
            _ => Err(Refusal::NotFound("authorization").into()),
        }
    }

    /// A challenge of this account, with its authorization.
    pub async fn challenge_of(
        &self,
        account: AccountId,
        id: ChallengeId,
    ) -> Result<(Challenge, Authorization), Error> {
        // One read: the authorization holding the challenge, with all its challenges.
        let authz = match self
            .inner
            .storage
            .authorization_of_challenge(id, self.now())
            .await?
        {
            Some(authz) if authz.account_id == account => authz,
            _ => return Err(Refusal::NotFound("challenge").into()),
        };
        let challenge = authz
            .challenges
            .iter()
            .find(|c| c.id == id)
            .cloned()
            .ok_or(Refusal::NotFound("challenge"))?;
        Ok((challenge, authz))
    }

    /// The subscriber asks for `challenge` of `authz` to be validated. It is validated at once
    /// when a worker place is free, and answered with the verdict if it comes within a moment;
    /// through the queue otherwise. A challenge that has already left pending is answered as it
    /// stands: starting is idempotent.
    ///
    /// At once means before anything is recorded: a success is stored in the one transaction
    /// that starts and decides the challenge (see [`JobRunner::validate_at_once`]). Until then the
    /// database still says pending, so the authorization's key in `ra::in_flight` is what keeps
    /// a second request of this instance from validating it again: it waits for the first one's
    /// write and answers from the durable start, which then finds the challenge started or the
    /// authorization decided. Under the key the authorization is read again, because the first
    /// request may have written and let go between this request's read and its taking the key.
    pub async fn start_validation(
        &self,
        account: &Account,
        challenge: Challenge,
        authz: &Authorization,
    ) -> Result<Challenge, Error> {
        if challenge.status != ChallengeStatus::Pending {
            return Ok(challenge);
        }
        // The same refusal as storage's when the authorization left pending after this read.
        if authz.status != AuthzStatus::Pending {
            return Err(StateRefusal::AuthzNotPending(authz.status).into());
        }
        let held = match self.inner.in_flight.enter(Key::Authz(authz.id)) {
            Ok(held) => held,
            Err(busy) => {
                busy.wait(VALIDATION_WAIT * 2).await;
                return self.start_queued(account, challenge.id).await;
            }
        };
        let now = self.now();
        let current = self.inner.storage.authorization(authz.id, now).await?;
        let untouched = current.as_ref().is_some_and(|a| {
            a.status == AuthzStatus::Pending
                && a.expires_at > now
                && a.challenges
                    .iter()
                    .all(|c| c.status == ChallengeStatus::Pending)
        });
        let jobs = &self.inner.jobs;
        let slot = if untouched { jobs.try_slot() } else { None };
        let Some(slot) = slot else {
            // The durable start decides (and refuses what it must) while the key is held.
            let started = self.start_queued(account, challenge.id).await;
            drop(held);
            return started;
        };
        let target = ValidationTarget {
            challenge: challenge.clone(),
            authz_id: authz.id,
            authz_expires: authz.expires_at,
            identifier: authz.identifier.clone(),
            account_id: account.id,
            thumbprint: account.thumbprint.clone(),
        };
        let started = jobs
            .validate_at_once(slot, target, VALIDATION_WAIT, held)
            .await
            .map_err(|_| {
                Error::internal("validation", &"the validation ended without an answer")
            })??;
        tracing::info!(account_id = %account.id, challenge_id = %challenge.id, kind = started.kind.as_str(), status = started.status.as_str(), "validation requested");
        Ok(started)
    }

    /// The durable start: pending → processing with a job for the queue's workers. Idempotent
    /// for a challenge that has left pending, which it returns as it is.
    async fn start_queued(&self, account: &Account, id: ChallengeId) -> Result<Challenge, Error> {
        let started = match self.inner.storage.start_challenge(id, self.now()).await? {
            ChallengeStart::Started { challenge, .. } | ChallengeStart::Left(challenge) => {
                challenge
            }
            ChallengeStart::NotStarted(why) => return Err(why.into()),
        };
        if started.status == ChallengeStatus::Processing {
            self.inner.jobs.wake();
        }
        tracing::info!(account_id = %account.id, challenge_id = %id, kind = started.kind.as_str(), status = started.status.as_str(), "validation requested (queued)");
        Ok(started)
    }

    /// How long the client should wait before polling `challenge` again when its validation is
    /// being retried: until the next attempt is due (at least a second). `None` when no retry is
    /// scheduled, so the caller uses its usual Retry-After. Only a processing challenge costs a
    /// query.
    pub async fn validation_retry_after(
        &self,
        challenge: &Challenge,
    ) -> Result<Option<time::Duration>, Error> {
        if challenge.status != ChallengeStatus::Processing {
            return Ok(None);
        }
        let due = self.inner.storage.validation_retry_at(challenge.id).await?;
        // Whole seconds (Retry-After's unit), rounded up so a client does not poll too early.
        Ok(due.map(|at| {
            let wait = at - self.now();
            let whole = time::Duration::seconds(wait.whole_seconds());
            let rounded = if wait > whole {
                whole + time::Duration::SECOND
            } else {
                whole
            };
            rounded.max(time::Duration::SECOND)
        }))
    }

    /// The subscriber deactivates its authorization (RFC 8555 §7.5.2): only a pending or valid
    /// one.
    pub async fn deactivate_authorization(
        &self,
        account: AccountId,
        authz: &Authorization,
    ) -> Result<Authorization, Error> {
        // The same refusal as storage's when the authorization changed after this read.
        if !matches!(authz.status, AuthzStatus::Pending | AuthzStatus::Valid) {
            return Err(StateRefusal::AuthzNotActive(authz.status).into());
        }
        let updated = match self
            .inner
            .storage
            .deactivate_authorization(authz.id, self.now())
            .await?
        {
            StatusChange::Changed(updated) => updated,
            // Deactivated, expired or decided since it was read.
            StatusChange::Unchanged(now) => {
                return Err(StateRefusal::AuthzNotActive(now.status).into());
            }
        };
        tracing::info!(account_id = %account, authz_id = %authz.id, "authorization deactivated");
        Ok(updated)
    }
}
