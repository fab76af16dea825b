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

use crate::Ra;
use crate::error::Error;
use crate::error::Refusal;
use crate::jobs::Prepared;
use crate::jobs::VALIDATION_WAIT;
use crate::jobs::ValidationTarget;
use crate::jobs::run_and_wait;

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
    /// through the queue otherwise.
    pub async fn start_validation(
        &self,
        account: &Account,
        challenge: Challenge,
        authz: &Authorization,
    ) -> Result<Challenge, Error> {
        if authz.status != AuthzStatus::Pending {
            return Err(Refusal::malformed(format!(
                "the authorization is {}; only challenges of pending authorizations can be attempted",
                authz.status.as_str()
            ))
            .into());
        }
        let storage = &self.inner.storage;
        let jobs = &self.inner.jobs;
        let now = self.now();
        let started = match jobs.try_slot() {
            Some(slot) => {
                let (started, job) = storage
                    .start_challenge_claimed(challenge.id, now, jobs.lease())
                    .await?;
                let finished = match job {
                    Some(job) => {
                        let target = ValidationTarget {
                            challenge: started.clone(),
                            authz_id: authz.id,
                            authz_expires: authz.expires_at,
                            identifier: authz.identifier.clone(),
                            account_id: account.id,
                            thumbprint: account.thumbprint.clone(),
                        };
                        let prepared = Some(Prepared::Validate(target));
                        run_and_wait(jobs.as_ref(), slot, job, prepared, VALIDATION_WAIT).await
                    }
                    None => false,
                };
                if finished {
                    storage.challenge(challenge.id).await?.unwrap_or(started)
                } else {
                    started
                }
            }
            None => {
                let started = storage.start_challenge(challenge.id, now).await?;
                jobs.wake();
                started
            }
        };
        tracing::info!(account_id = %account.id, challenge_id = %challenge.id, kind = started.kind.as_str(), "validation requested");
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
        if !matches!(authz.status, AuthzStatus::Pending | AuthzStatus::Valid) {
            return Err(Refusal::malformed(format!(
                "only pending or valid authorizations can be deactivated; this one is {}",
                authz.status.as_str()
            ))
            .into());
        }
        let updated = self
            .inner
            .storage
            .deactivate_authorization(authz.id, self.now())
            .await?;
        tracing::info!(account_id = %account, authz_id = %authz.id, "authorization deactivated");
        Ok(updated)
    }
}
