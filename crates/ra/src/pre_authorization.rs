//! Pre-authorization (RFC 8555 §7.4.1, `newAuthz`): an account validates an identifier before
//! it orders a certificate for it, as Go's `x/crypto/acme` and Posh-ACME can.
//!
//! A pre-authorization is judged as a one-name order is: the identifier policy, a type some
//! profile the account may use certifies, the account's external-account key, pausing, and the
//! order limits (new orders, the SAN budget, failed validations, pending authorizations). It is
//! an ordinary authorization once created, so an order reuses it under the rule every valid
//! authorization is reused under, and nothing else needs to know it came first.

use acme_core::identifier::Identifier;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType;
use storage::error::Error as StorageError;
use storage::model::Account;
use storage::model::Authorization;
use storage::model::NewAuthz;

use crate::Ra;
use crate::error::Error;
use crate::error::Refusal;
use crate::orders::RawIdentifier;
use crate::orders::offered_challenges_for;
use crate::orders::random_token;
use crate::profiles;
use crate::rate_info::RateLimitInfo;

/// A pre-authorization and the rate-limit policies that applied.
#[derive(Debug)]
pub struct PreAuthorized {
    pub authz: Authorization,
    /// True when an existing valid authorization was returned rather than a new one made.
    pub reused: bool,
    pub rate_limit: Option<RateLimitInfo>,
}

impl Ra {
    /// Whether this server pre-authorizes at all (`acme.pre-authorization`).
    pub fn pre_authorization_enabled(&self) -> bool {
        self.inner.settings.pre_authorization
    }

    /// Pre-authorizes `raw` for `account`: its valid authorization for the identifier when one
    /// can still be reused, or a new pending one with the challenges an order would offer.
    pub async fn new_authorization(
        &self,
        account: &Account,
        raw: RawIdentifier,
    ) -> Result<PreAuthorized, Error> {
        let settings = &self.inner.settings;
        if !settings.pre_authorization {
            return Err(Refusal::problem(
                ProblemType::Unauthorized,
                "this server does not pre-authorize identifiers; create an order instead",
            )
            .into());
        }
        let now = self.now();
        let identifiers = self.check_identifiers(std::slice::from_ref(&raw))?;
        let [identifier] = identifiers.as_slice() else {
            return Err(Refusal::malformed("send one identifier").into());
        };
        if identifier.is_wildcard() {
            return Err(Refusal::problem(
                ProblemType::RejectedIdentifier,
                format!(
                    "{} is a wildcard name, which cannot be pre-authorized (RFC 8555 §7.4.1); \
                     create an order for it instead",
                    identifier.value()
                ),
            )
            .into());
        }
        let offered = self.check_some_profile_admits(account, identifier).await?;
        self.refuse_paused(account.id, &identifiers, now).await?;
        let mut spent = self.charge_order(account.id, &identifiers, false).await?;
        let challenges = match offered
            .into_iter()
            .map(|kind| Ok((kind, random_token()?)))
            .collect::<Result<Vec<_>, Error>>()
        {
            Ok(challenges) => challenges,
            Err(e) => {
                self.refund(&spent).await;
                return Err(e);
            }
        };
        let new = NewAuthz {
            identifier: identifier.clone(),
            expires_at: now + settings.authorization_lifetime,
            challenges,
        };
        let reuse_until = settings
            .reuse_valid_authorizations
            .then(|| now + crate::settings::reuse_margin(settings.valid_authorization_lifetime));
        let (authz, reused, policies) = match self
            .pre_authorize_with_guard(account, &new, reuse_until, now)
            .await
        {
            Ok(done) => done,
            Err(e) => {
                self.refund(&spent).await;
                return Err(e);
            }
        };
        if reused {
            // Nothing was created: the order limits charged for it are given back.
            self.refund(&spent).await;
            spent.info = None;
        } else if let Some(info) = &mut spent.info {
            for item in policies {
                info.push(item);
            }
        }
        tracing::info!(account_id = %account.id, authz_id = %authz.id, reused, "pre-authorization");
        metrics::counter!(
            "certeasy_pre_authorizations_total",
            "outcome" => if reused { "reused" } else { "created" }
        )
        .increment(1);
        Ok(PreAuthorized {
            authz,
            reused,
            rate_limit: spent.info,
        })
    }

    /// A pre-authorization names no profile, so it needs one profile that would create this
    /// authorization in an order: one the account may use (by id, EAB key, and its key's
    /// profile list), that certifies the identifier's type and offers a challenge type for it.
    /// Returns the challenge types to offer: those of the profiles that admit it.
    async fn check_some_profile_admits(
        &self,
        account: &Account,
        identifier: &Identifier,
    ) -> Result<Vec<ChallengeType>, Error> {
        let key_policy = match &account.eab_kid {
            None => None,
            Some(kid) => match self.inner.storage.eab_key(kid).await? {
                Some(key) => Some(key.policy),
                None => {
                    // The column references the key, so this is a damaged database.
                    return Err(StorageError::Corrupt(format!(
                        "account {} is bound to missing external account key {kid}",
                        account.id
                    ))
                    .into());
                }
            },
        };
        if let Some(policy) = &key_policy {
            policy
                .check_identifiers(std::slice::from_ref(identifier))
                .map_err(Refusal::Problem)?;
        }
        let settings = &self.inner.settings;
        let one = std::slice::from_ref(identifier);
        let offered = offered_challenges_for(identifier, settings.optional_challenges);
        let admitted_by = |profile: &issuance::Profile| {
            profiles::check(profile, account, one, settings)?;
            if let Some(policy) = &key_policy {
                policy.check_profile(profile.name())?;
            }
            profiles::challenges(profile, identifier, offered.clone())
        };
        // The challenge types of every profile that admits it, in the order offered: the
        // authorization may serve an order of any of them, and each order reuses it only if it
        // was validated with a type of its own profile (`NewOrder::reuse_challenge_types`).
        let mut admitted: Vec<ChallengeType> = Vec::new();
        for profile in settings.profiles.iter() {
            if let Ok(types) = admitted_by(profile) {
                admitted.extend(types);
            }
        }
        if !admitted.is_empty() {
            return Ok(offered
                .into_iter()
                .filter(|t| admitted.contains(t))
                .collect());
        }
        // Refused by every profile: say why the default one refuses, which is the one an order
        // naming no profile would meet.
        let why = admitted_by(settings.profiles.default_profile())
            .err()
            .map(|p| p.detail)
            .unwrap_or_default();
        Err(Refusal::Problem(Problem::new(
            ProblemType::RejectedIdentifier,
            format!(
                "no certificate profile this account may use admits {} {}: {why}",
                identifier.kind().as_str(),
                identifier.value()
            ),
        ))
        .into())
    }
}
