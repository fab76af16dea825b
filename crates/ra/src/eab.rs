//! External account binding (RFC 8555 §7.3.4): which key a new account is bound with, binding
//! it in the transaction that creates the account, and the key's policy on every order of a
//! bound account. The front end parses the binding (a JWS) and reflects it in the response; the
//! MAC is verified here, with the key only storage knows.

use acme_core::identifier::Identifier;
use acme_core::ids::EabKid;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_jose::eab::EabBinding;
use issuance::Profile;
use storage::error::Error as StorageError;
use storage::model::Account;
use storage::model::BindOutcome;
use storage::model::NewAccount;
use time::OffsetDateTime;

use crate::Ra;
use crate::error::Error;
use crate::error::Refusal;

/// What creating the account came to.
#[derive(Debug)]
pub(crate) enum Creation {
    /// A new account (bound to the key when there was a binding).
    New(Account),
    /// A concurrent request registered the same account key first; nothing was bound.
    Existing(acme_core::ids::AccountId),
}

fn unauthorized(detail: String) -> Error {
    Refusal::unauthorized(detail).into()
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

impl Ra {
    /// Steps 3 to 5 of RFC 8555 §7.3.4 (the front end did 1 and 2 when it parsed the binding),
    /// or, without a binding, whether this CA requires one. Returns the key a verified binding
    /// names. Whether the key is still usable is decided again when the account is created,
    /// under a lock on the key.
    pub(crate) async fn check_binding(
        &self,
        binding: Option<&EabBinding>,
    ) -> Result<Option<EabKid>, Error> {
        let Some(binding) = binding else {
            if self.inner.settings.external_account_required {
                return Err(Refusal::problem(
                    ProblemType::ExternalAccountRequired,
                    "this CA requires an external account binding: ask its operator for a key \
                     identifier and HMAC key, and give them to your client (certbot --eab-kid \
                     --eab-hmac-key, lego --eab --kid --hmac)",
                )
                .into());
            }
            return Ok(None);
        };
        let kid = EabKid(binding.kid().to_owned());
        let Some(key) = self.inner.storage.eab_key(&kid).await? else {
            return Err(unauthorized(format!(
                "externalAccountBinding: no external account key has the identifier \"{kid}\"; \
                 check the key identifier the CA operator gave you"
            )));
        };
        binding
            .verify(&key.hmac_key)
            .map_err(|e| Refusal::Problem(Problem::from(e)))?;
        Ok(Some(kid))
    }

    /// Creates the account: bound to the key in the same transaction when there is one.
    pub(crate) async fn create_account_bound(
        &self,
        kid: Option<&EabKid>,
        new: NewAccount,
    ) -> Result<Creation, Error> {
        let storage = &self.inner.storage;
        let now = self.now();
        let Some(kid) = kid else {
            return match storage.create_account(new, now).await {
                Ok(account) => Ok(Creation::New(account)),
                Err(StorageError::Conflict(id)) => {
                    Ok(Creation::Existing(acme_core::ids::AccountId(id)))
                }
                Err(e) => Err(e.into()),
            };
        };
        match storage.bind_eab_and_create_account(kid, new, now).await? {
            BindOutcome::Created(account) => Ok(Creation::New(account)),
            BindOutcome::KeyRegistered(id) => Ok(Creation::Existing(id)),
            BindOutcome::UnknownKey => Err(unauthorized(format!(
                "externalAccountBinding: no external account key has the identifier \"{kid}\""
            ))),
            BindOutcome::Revoked(at) => Err(unauthorized(format!(
                "externalAccountBinding: the external account key \"{kid}\" was revoked at {}; \
                 ask the CA operator for a new key",
                rfc3339(at)
            ))),
            BindOutcome::Expired(at) => Err(unauthorized(format!(
                "externalAccountBinding: the external account key \"{kid}\" expired at {}; ask \
                 the CA operator for a new key",
                rfc3339(at)
            ))),
            BindOutcome::AlreadyBound(_) => Err(unauthorized(format!(
                "externalAccountBinding: the external account key \"{kid}\" is single-use and \
                 already bound to another account; ask the CA operator for a new key"
            ))),
        }
    }

    /// What a bound account may order: the key's identifiers, profiles and maximum validity.
    /// Returns the `notAfter` to store: an order that asks for none gets its profile's default
    /// validity cut to the key's maximum rather than a refusal, so clients that never send
    /// `notAfter` (certbot, lego) can use a key whose maximum is shorter than the default.
    /// Accounts without a key pass at once with their `notAfter` unchanged.
    pub(crate) async fn check_key_policy(
        &self,
        account: &Account,
        identifiers: &[Identifier],
        profile: &Profile,
        (not_before, not_after): (Option<OffsetDateTime>, Option<OffsetDateTime>),
        now: OffsetDateTime,
    ) -> Result<Option<OffsetDateTime>, Error> {
        let Some(kid) = &account.eab_kid else {
            return Ok(not_after);
        };
        let Some(key) = self.inner.storage.eab_key(kid).await? else {
            // The column references the key, so this is a damaged database, not a verdict.
            return Err(StorageError::Corrupt(format!(
                "account {} is bound to missing external account key {kid}",
                account.id
            ))
            .into());
        };
        key.policy
            .check_identifiers(identifiers)
            .map_err(Refusal::Problem)?;
        key.policy
            .check_profile(profile.name())
            .map_err(Refusal::Problem)?;
        let backdate = self.inner.settings.backdate;
        let (start, default_end) = profile.window(not_before, None, now, backdate);
        match (not_after, key.policy.max_validity()) {
            (Some(end), _) => {
                key.policy
                    .check_validity(end - start)
                    .map_err(Refusal::Problem)?;
                Ok(Some(end))
            }
            (None, Some(max)) if default_end - start > max => Ok(Some(start + max)),
            (None, _) => Ok(None),
        }
    }
}
