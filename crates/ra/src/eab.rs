//! External account binding (RFC 8555 §7.3.4): which key a new account is bound with, binding
//! it in the transaction that creates the account, and the key's policy on every order of a
//! bound account. The front end parses the binding (a JWS) and reflects it in the response; the
//! MAC is verified here, with the key only storage knows.

use acme_core::eab_policy::EabPolicy;
use acme_core::identifier::Identifier;
use acme_core::ids::EabKid;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_jose::eab::EabBinding;
use aws_lc_rs::rand::SecureRandom;
use aws_lc_rs::rand::SystemRandom;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use issuance::Profile;
use storage::error::Error as StorageError;
use storage::model::Account;
use storage::model::BindOutcome;
use storage::model::EabKey;
use storage::model::NewAccount;
use storage::model::NewEabKey;
use storage::model::StatusChange;
use time::OffsetDateTime;

use crate::Ra;
use crate::audit::AuditEvent;
use crate::audit::AuditKind;
use crate::audit::Requester;
use crate::audit::deactivation;
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

fn already_bound(kid: &EabKid) -> Error {
    unauthorized(format!(
        "externalAccountBinding: the external account key \"{kid}\" is single-use and already \
         bound to another account; ask the CA operator for a new key"
    ))
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
        // A single-use key's HMAC key is erased when it binds its account: nothing can verify.
        let Some(hmac_key) = &key.hmac_key else {
            return Err(already_bound(&kid));
        };
        binding
            .verify(hmac_key)
            .map_err(|e| Refusal::Problem(Problem::from(e)))?;
        Ok(Some(kid))
    }

    /// Creates the account: bound to the key in the same transaction when there is one. The
    /// creation (and the binding) are recorded with `requester`, the key's holder.
    pub(crate) async fn create_account_bound(
        &self,
        kid: Option<&EabKid>,
        new: NewAccount,
        requester: &Requester,
    ) -> Result<Creation, Error> {
        let storage = &self.inner.storage;
        let now = self.now();
        let created = account_created(requester, &new, kid);
        let Some(kid) = kid else {
            return match storage.create_account(new, now, &created).await {
                Ok(account) => Ok(Creation::New(account)),
                Err(StorageError::Conflict(id)) => {
                    Ok(Creation::Existing(acme_core::ids::AccountId(id)))
                }
                Err(e) => Err(e.into()),
            };
        };
        let mut bound = requester.event(
            AuditKind::EabKeyBound,
            format!(
                "external account key {kid} bound to the new account: its MAC verified, the key neither revoked, expired nor (single-use) bound before"
            ),
        );
        bound.account = None;
        bound.detail = serde_json::json!({ "kid": kid.0 });
        match storage
            .bind_eab_and_create_account(kid, new, now, &created, &bound)
            .await?
        {
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
            BindOutcome::AlreadyBound(_) => Err(already_bound(kid)),
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

/// Bytes of a new HMAC key: 256 bits, the output size of HS256.
const HMAC_KEY_BYTES: usize = 32;
/// Bytes of a new key identifier: random, so identifiers reveal nothing about how many exist.
const KID_BYTES: usize = 16;

/// What revoking a key did.
#[derive(Debug)]
pub struct KeyRevocation {
    /// The key, revoked.
    pub key: EabKey,
    /// How many accounts bound with it this revocation deactivated (0 unless asked).
    pub deactivated_accounts: u64,
}

/// What an operator asks of a new key.
#[derive(Debug, Clone)]
pub struct KeyRequest {
    pub policy: EabPolicy,
    /// The key binds no new account after this long.
    pub expires_in: Option<time::Duration>,
    /// The key may bind several accounts (default: one).
    pub reusable: bool,
}

impl Ra {
    /// Creates an external-account-binding key with a random identifier and HMAC key. Returns
    /// the key and its HMAC key in base64url, which is shown to the operator once and never
    /// again (nor recorded: the audit record names the key by its identifier).
    pub async fn create_eab_key(
        &self,
        request: KeyRequest,
        requester: &Requester,
    ) -> Result<(EabKey, String), Error> {
        let hmac_key = random_bytes(HMAC_KEY_BYTES)?;
        // Hex, not base64url: an identifier the operator types on a command line must never
        // start with '-', or it reads as an option (`certeasy admin eab revoke <kid>`).
        let kid = hex::encode(random_bytes(KID_BYTES)?);
        let hmac_b64 = URL_SAFE_NO_PAD.encode(&hmac_key);
        let now = self.now();
        let new = NewEabKey {
            kid: EabKid(kid),
            hmac_key,
            policy: request.policy,
            expires_at: request.expires_in.map(|d| now + d),
            reusable: request.reusable,
        };
        let kid = new.kid.clone();
        let mut audit = requester.event(
            AuditKind::EabKeyCreated,
            format!("external account key {kid} created by {}", requester.who()),
        );
        audit.detail = serde_json::json!({
            "kid": kid.0,
            "reusable": new.reusable,
            "expires_at": new.expires_at.map(crate::audit::rfc3339),
            "allowed_domains": new.policy.allowed_domains(),
            "allowed_cidrs": new
                .policy
                .allowed_cidrs()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            "allowed_profiles": new.policy.allowed_profiles(),
            "max_validity_secs": new.policy.max_validity().map(|d| d.whole_seconds()),
        });
        let key = self
            .inner
            .storage
            .create_eab_key(new, now, &audit)
            .await?
            .ok_or_else(|| Refusal::Conflict(format!("key {kid} already exists")))?;
        tracing::info!(kid = %key.kid, reusable = key.reusable, "external account key created by an operator");
        metrics::counter!("certeasy_eab_keys_created_total").increment(1);
        Ok((key, hmac_b64))
    }

    /// Every key, for `eab list` (the HMAC keys are never shown).
    pub async fn eab_keys(&self) -> Result<Vec<EabKey>, Error> {
        Ok(self.inner.storage.list_eab_keys().await?)
    }

    /// Revokes a key: it binds no new account. Accounts bound with it keep its policy and keep
    /// working, unless `deactivate_accounts`: then each valid one is deactivated as its
    /// subscriber would (RFC 8555 §7.3.6: refused from its next request on, its pending
    /// authorizations deactivated and unfinished orders invalid), for a key that leaked or a
    /// customer who left. With `deactivate_accounts`, a key revoked before is not a conflict:
    /// its accounts are deactivated all the same (an operator may decide later, or run the
    /// command again after an interruption).
    pub async fn revoke_eab_key(
        &self,
        kid: &EabKid,
        deactivate_accounts: bool,
        requester: &Requester,
    ) -> Result<KeyRevocation, Error> {
        let storage = &self.inner.storage;
        let now = self.now();
        let mut audit = requester.event(
            AuditKind::EabKeyRevoked,
            format!(
                "external account key {kid} revoked by {}{}",
                requester.who(),
                if deactivate_accounts {
                    ", its bound accounts to be deactivated"
                } else {
                    ""
                }
            ),
        );
        audit.detail = serde_json::json!({
            "kid": kid.0,
            "deactivate_accounts": deactivate_accounts,
        });
        let key = match storage.revoke_eab_key(kid, now, &audit).await {
            Ok(StatusChange::Changed(key)) => {
                tracing::info!(kid = %kid, "external account key revoked by an operator");
                key
            }
            Ok(StatusChange::Unchanged(key)) if deactivate_accounts => key,
            Ok(StatusChange::Unchanged(_)) => {
                return Err(Refusal::Conflict(format!("key {kid} is already revoked")).into());
            }
            Err(StorageError::NotFound) => {
                return Err(Refusal::NotFound("external account key").into());
            }
            Err(e) => return Err(e.into()),
        };
        let mut deactivated = 0;
        if deactivate_accounts {
            for account in storage.valid_accounts_bound_to_eab_key(kid).await? {
                let audit = deactivation(
                    requester,
                    account,
                    format!(
                        "deactivated by {} with the revocation of external account key {kid} it was bound with",
                        requester.who()
                    ),
                );
                match storage.deactivate_account(account, now, &audit).await {
                    Ok(StatusChange::Changed(_)) => deactivated += 1,
                    // Deactivated or revoked meanwhile, by its subscriber or another operator.
                    Ok(StatusChange::Unchanged(_)) | Err(StorageError::NotFound) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            tracing::info!(kid = %kid, deactivated, "accounts bound with a revoked external account key deactivated by an operator");
        }
        Ok(KeyRevocation {
            key,
            deactivated_accounts: deactivated,
        })
    }
}

/// The record of a new account's creation; storage names the account once its row exists.
fn account_created(requester: &Requester, new: &NewAccount, kid: Option<&EabKid>) -> AuditEvent {
    let binding = match kid {
        Some(kid) => format!(", bound with external account key {kid}"),
        None => String::new(),
    };
    let mut audit = requester.event(
        AuditKind::AccountCreated,
        format!(
            "created by the holder of its key (neither weak nor blocked){binding}; contacts checked; terms of service agreed: {}",
            if new.tos_agreed { "yes" } else { "not asked" }
        ),
    );
    audit.account = None;
    audit.detail = serde_json::json!({
        "thumbprint": new.thumbprint,
        "contacts": new.contacts,
        "eab_kid": kid.map(|k| k.0.clone()),
    });
    audit
}

fn random_bytes(len: usize) -> Result<Vec<u8>, Error> {
    let mut bytes = vec![0_u8; len];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::internal("random key", &"the system RNG failed"))?;
    Ok(bytes)
}
