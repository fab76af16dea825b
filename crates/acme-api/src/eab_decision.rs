//! External account binding decisions (RFC 8555 §7.3.4): whether a newAccount may proceed and
//! with which key, creating the bound account, and what a bound account may order.
//!
//! Nothing here knows HTTP: the handlers pass domain values in and turn a refusal (`Problem`)
//! into a response, so this module can move into the policy layer unchanged. Each function
//! returns `Err` for an infrastructure failure (the database) and `Ok(Err(problem))` for a
//! verdict, as storage does.

use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::ids::EabKid;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_jose::Jwk;
use acme_jose::eab::EabBinding;
use serde_json::Value;
use storage::Storage;
use storage::error::Error as StorageError;
use storage::model::Account;
use storage::model::BindOutcome;
use storage::model::NewAccount;
use time::OffsetDateTime;

use crate::settings::ApiSettings;

/// A verdict: `Ok` to proceed, `Err` with the problem to answer.
pub(crate) type Verdict<T> = Result<T, Problem>;

/// A binding whose MAC verified with the key it names.
#[derive(Debug, Clone)]
pub(crate) struct VerifiedBinding {
    kid: EabKid,
    /// The `externalAccountBinding` as the client sent it, reflected in the new account object.
    value: Value,
}

/// What account creation came to.
#[derive(Debug)]
pub(crate) enum Registered {
    /// A new account (bound to the key when there was a binding).
    New(Account),
    /// A concurrent request registered the same account key first; nothing was bound.
    Existing(AccountId),
}

fn unauthorized(detail: String) -> Problem {
    Problem::new(ProblemType::Unauthorized, detail)
}

/// Steps 1 to 5 of RFC 8555 §7.3.4 for a newAccount payload's `externalAccountBinding`, or,
/// without one, whether the server requires it. `outer_url` and `jwk` are those of the verified
/// outer JWS. Whether the key is still usable is decided again when the account is created,
/// under a lock on the key.
pub(crate) async fn check_binding(
    storage: &Storage,
    required: bool,
    binding: Option<&Value>,
    outer_url: &str,
    jwk: &Jwk,
) -> Result<Verdict<Option<VerifiedBinding>>, StorageError> {
    let Some(value) = binding else {
        if required {
            return Ok(Err(Problem::new(
                ProblemType::ExternalAccountRequired,
                "this CA requires an external account binding: ask its operator for a key \
                 identifier and HMAC key, and give them to your client (certbot --eab-kid \
                 --eab-hmac-key, lego --eab --kid --hmac)",
            )));
        }
        return Ok(Ok(None));
    };
    let parsed = match EabBinding::parse(value, outer_url, jwk) {
        Ok(parsed) => parsed,
        Err(e) => return Ok(Err(e.into())),
    };
    let kid = EabKid(parsed.kid().to_owned());
    let Some(key) = storage.eab_key(&kid).await? else {
        return Ok(Err(unauthorized(format!(
            "externalAccountBinding: no external account key has the identifier \"{kid}\"; check \
             the key identifier the CA operator gave you"
        ))));
    };
    if let Err(e) = parsed.verify(&key.hmac_key) {
        return Ok(Err(e.into()));
    }
    Ok(Ok(Some(VerifiedBinding {
        kid,
        value: value.clone(),
    })))
}

/// Creates the account: bound to the key in the same transaction when there is a binding.
pub(crate) async fn create_account(
    storage: &Storage,
    binding: Option<&VerifiedBinding>,
    new: NewAccount,
    now: OffsetDateTime,
) -> Result<Verdict<Registered>, StorageError> {
    let Some(binding) = binding else {
        return match storage.create_account(new, now).await {
            Ok(account) => Ok(Ok(Registered::New(account))),
            Err(StorageError::Conflict(id)) => Ok(Ok(Registered::Existing(AccountId(id)))),
            Err(e) => Err(e),
        };
    };
    let kid = &binding.kid;
    let verdict = match storage.bind_eab_and_create_account(kid, new, now).await? {
        BindOutcome::Created(account) => Ok(Registered::New(account)),
        BindOutcome::KeyRegistered(id) => Ok(Registered::Existing(id)),
        BindOutcome::UnknownKey => Err(unauthorized(format!(
            "externalAccountBinding: no external account key has the identifier \"{kid}\""
        ))),
        BindOutcome::Revoked(at) => Err(unauthorized(format!(
            "externalAccountBinding: the external account key \"{kid}\" was revoked at {}; ask \
             the CA operator for a new key",
            crate::wire::rfc3339(at)
        ))),
        BindOutcome::Expired(at) => Err(unauthorized(format!(
            "externalAccountBinding: the external account key \"{kid}\" expired at {}; ask the \
             CA operator for a new key",
            crate::wire::rfc3339(at)
        ))),
        BindOutcome::AlreadyBound(_) => Err(unauthorized(format!(
            "externalAccountBinding: the external account key \"{kid}\" is single-use and \
             already bound to another account; ask the CA operator for a new key"
        ))),
    };
    Ok(verdict)
}

/// RFC 8555 §7.3.4: the account object of a new account bound by this request carries the
/// binding it was created with.
pub(crate) fn reflect_binding(
    account_json: &mut Value,
    account: &Account,
    binding: Option<&VerifiedBinding>,
) {
    if let Some(b) = binding
        && account.eab_kid.as_ref() == Some(&b.kid)
    {
        account_json["externalAccountBinding"] = b.value.clone();
    }
}

/// What a bound account may order: the key's identifiers and maximum validity (the order's
/// `notBefore`/`notAfter`, with the CA's defaults applied as the order handler applies them).
/// Returns the `notAfter` to store: an order that asks for none gets the CA's default validity
/// cut to the key's maximum rather than a refusal, so clients that never send `notAfter` (certbot,
/// lego) can use a key whose maximum is shorter than the default. Accounts without a key pass at
/// once with their `notAfter` unchanged.
pub(crate) async fn check_new_order(
    storage: &Storage,
    settings: &ApiSettings,
    account: &Account,
    identifiers: &[Identifier],
    (not_before, not_after): (Option<OffsetDateTime>, Option<OffsetDateTime>),
    now: OffsetDateTime,
) -> Result<Verdict<Option<OffsetDateTime>>, StorageError> {
    let Some(kid) = &account.eab_kid else {
        return Ok(Ok(not_after));
    };
    let start = not_before.unwrap_or(now - settings.backdate);
    let Some(key) = storage.eab_key(kid).await? else {
        // The column references the key, so this is a damaged database, not a verdict.
        return Err(StorageError::Corrupt(format!(
            "account {} is bound to missing external account key {kid}",
            account.id
        )));
    };
    if let Err(problem) = key.policy.check_identifiers(identifiers) {
        return Ok(Err(problem));
    }
    let verdict = match (not_after, key.policy.max_validity()) {
        (Some(end), _) => key.policy.check_validity(end - start).map(|()| Some(end)),
        (None, Some(max)) if settings.default_validity > max => Ok(Some(start + max)),
        (None, _) => Ok(None),
    };
    Ok(verdict)
}
