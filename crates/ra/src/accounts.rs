//! Accounts (RFC 8555 §7.3): registration, contacts, deactivation and key change.

use std::net::IpAddr;

use acme_core::ids::AccountId;
use acme_core::problem::ProblemType;
use acme_core::status::AccountStatus;
use acme_jose::Jwk;
use acme_jose::eab::EabBinding;
use storage::model::Account;
use storage::model::KeyChange;
use storage::model::NewAccount;
use storage::model::StatusChange;

use crate::Ra;
use crate::audit::AuditKind;
use crate::audit::Requester;
use crate::audit::deactivation;
use crate::eab::Creation;
use crate::error::Error;
use crate::error::Refusal;
use crate::keys::KeyUse;
use crate::rate_info::RateLimitInfo;

/// A new-account request, as the front end parsed and authenticated it.
#[derive(Debug)]
pub struct AccountRequest {
    /// The key that signed the request (`jwk`), verified.
    pub jwk: Jwk,
    pub contacts: Option<Vec<String>>,
    pub terms_of_service_agreed: bool,
    pub only_return_existing: bool,
    /// The `externalAccountBinding`, parsed and checked against the outer JWS (RFC 8555
    /// §7.3.4 steps 1 and 2); its MAC is verified here.
    pub external_account_binding: Option<EabBinding>,
    /// The client's address (after trusted proxies), for the account-creation limit.
    pub client_ip: IpAddr,
}

/// What a new-account request ended in.
#[derive(Debug)]
pub enum Registered {
    /// The key already has an account (RFC 8555 §7.3.1: answered with it, 200).
    Existing(Account),
    /// A new account (201), with the rate-limit policies that applied.
    Created {
        account: Account,
        rate_limit: Option<RateLimitInfo>,
    },
}

/// Changes a subscriber asks of its account.
#[derive(Debug, Default)]
pub struct AccountUpdate {
    /// `Some("deactivated")` deactivates; any other status is refused.
    pub status: Option<String>,
    pub contacts: Option<Vec<String>>,
}

impl Ra {
    /// Registers the key of `request`, or finds its account.
    pub async fn new_account(&self, request: AccountRequest) -> Result<Registered, Error> {
        // A weak or blocked key gets no account, and no lookup either (as in Boulder).
        self.check_key(&request.jwk, KeyUse::Account).await?;
        let storage = &self.inner.storage;
        let thumbprint = request.jwk.thumbprint();
        if request.only_return_existing {
            return match storage.account_by_thumbprint(&thumbprint).await? {
                Some(existing) => answer_existing(existing),
                None => Err(Refusal::problem(
                    ProblemType::AccountDoesNotExist,
                    "no account exists for this key",
                )
                .into()),
            };
        }
        // A registered key is answered with its account whatever else the request says (RFC 8555
        // §7.3.1), but nearly every key sent here is new: so the checks and the insert come first,
        // and the key's account is looked for only when one of them refuses, or when the insert
        // finds it. A read fewer per new account (7 % of the server's CPU per account).
        match self.register(&request, thumbprint.clone()).await {
            Ok((Creation::New(account), rate_limit)) => {
                tracing::info!(account_id = %account.id, "account created");
                metrics::counter!("certeasy_accounts_created_total").increment(1);
                Ok(Registered::Created {
                    account,
                    rate_limit,
                })
            }
            Ok((Creation::Existing(id), _)) => match storage.account(id).await? {
                Some(existing) => answer_existing(existing),
                None => Err(Error::internal(
                    "new account",
                    &"the account holding the key vanished",
                )),
            },
            Err(refused) => match storage.account_by_thumbprint(&thumbprint).await {
                Ok(Some(existing)) => answer_existing(existing),
                Ok(None) => Err(refused),
                Err(e) => {
                    tracing::warn!(error = %e, "looking for the key's account after a refusal failed");
                    Err(refused)
                }
            },
        }
    }

    /// The checks a new account passes, its rate-limit token, and the insert; the token is
    /// given back unless an account was created.
    async fn register(
        &self,
        request: &AccountRequest,
        thumbprint: String,
    ) -> Result<(Creation, Option<RateLimitInfo>), Error> {
        let kid = self
            .check_binding(request.external_account_binding.as_ref())
            .await?;
        if let Some(terms) = &self.inner.settings.terms_of_service
            && !request.terms_of_service_agreed
        {
            return Err(Refusal::TermsNotAgreed {
                terms: terms.clone(),
            }
            .into());
        }
        let contacts = self.check_contacts(request.contacts.clone().unwrap_or_default())?;
        let spent = self.charge_account_creation(request.client_ip).await?;
        let new = NewAccount {
            jwk_json: request.jwk.to_json().to_string(),
            thumbprint,
            contacts,
            tos_agreed: request.terms_of_service_agreed,
        };
        let requester = Requester::new_account(request.client_ip);
        let created = self
            .create_account_bound(kid.as_ref(), new, &requester)
            .await;
        if !matches!(created, Ok(Creation::New(_))) {
            self.refund(&spent).await;
        }
        Ok((created?, spent.info))
    }

    /// Applies a subscriber's changes to its own account, asked by `requester` (its holder).
    pub async fn update_account(
        &self,
        account: &Account,
        update: AccountUpdate,
        requester: &Requester,
    ) -> Result<Account, Error> {
        if let Some(status) = update.status.as_deref() {
            if status != "deactivated" {
                return Err(Refusal::malformed(format!(
                    "an account can only be changed to \"deactivated\", not {status:?}"
                ))
                .into());
            }
            return self.deactivate_account(account.id, requester).await;
        }
        match update.contacts {
            Some(contacts) => {
                let contacts = self.check_contacts(contacts)?;
                let mut audit = requester.event(
                    AuditKind::AccountContactsUpdated,
                    format!("contacts changed by {}", requester.who()),
                );
                audit.account = Some(account.id);
                audit.detail = serde_json::json!({
                    "before": account.contacts,
                    "after": contacts,
                });
                Ok(self
                    .inner
                    .storage
                    .update_account_contacts(account.id, contacts, self.now(), &audit)
                    .await?)
            }
            None => Ok(account.clone()),
        }
    }

    /// The account `id`, whatever its status: the front end authenticates a request signed for
    /// it and refuses one that is not valid itself.
    pub async fn account(&self, id: AccountId) -> Result<Option<Account>, Error> {
        Ok(self.inner.storage.account(id).await?)
    }

    /// Deactivates an account (RFC 8555 §7.3.6): it can do nothing afterwards, and its pending
    /// authorizations are deactivated with it. The subscriber's request and an operator's
    /// command both end here; `requester` is recorded as who asked.
    pub async fn deactivate_account(
        &self,
        account: AccountId,
        requester: &Requester,
    ) -> Result<Account, Error> {
        let audit = deactivation(
            requester,
            account,
            format!("deactivated by {}", requester.who()),
        );
        let updated = match self
            .inner
            .storage
            .deactivate_account(account, self.now(), &audit)
            .await?
        {
            StatusChange::Changed(updated) => updated,
            StatusChange::Unchanged(now) => {
                return Err(Refusal::AccountNotValid(now.status).into());
            }
        };
        tracing::info!(account_id = %account, "account deactivated");
        Ok(updated)
    }

    /// Replaces the account's key with `new_key`, already proven by the inner JWS of a
    /// key-change request whose `oldKey` is `account.thumbprint`, the key the request was
    /// authenticated with. The change is a compare-and-set on that old key: when a concurrent
    /// key change replaced it first, this one is refused (`Refusal::Conflict`, 409), so one key
    /// never rolls over to two. A key of another account is refused (`KeyInUse`). `requester`
    /// (the account's holder) is recorded as who asked.
    pub async fn change_key(
        &self,
        account: &Account,
        new_key: &Jwk,
        requester: &Requester,
    ) -> Result<Account, Error> {
        let new_thumbprint = new_key.thumbprint();
        if new_thumbprint == account.thumbprint {
            return Err(Refusal::malformed("the new key is the same as the current key").into());
        }
        self.check_key(new_key, KeyUse::Account).await?;
        let mut audit = requester.event(
            AuditKind::AccountKeyChanged,
            format!(
                "key changed by {}: the request was signed by the old key and its inner JWS by the new one, which is neither weak nor blocked",
                requester.who()
            ),
        );
        audit.account = Some(account.id);
        audit.detail = serde_json::json!({
            "old_thumbprint": account.thumbprint,
            "new_thumbprint": new_thumbprint,
        });
        let outcome = self
            .inner
            .storage
            .change_account_key(
                account.id,
                &account.thumbprint,
                &new_key.to_json().to_string(),
                &new_thumbprint,
                self.now(),
                &audit,
            )
            .await?;
        match outcome {
            KeyChange::Changed(updated) => {
                tracing::info!(account_id = %account.id, "account key changed");
                Ok(updated)
            }
            KeyChange::KeyInUse(other) => Err(Refusal::KeyInUse(other).into()),
            KeyChange::OldKeyReplaced => Err(Refusal::Conflict(
                "the account's key was changed by another request while this one was processed; \
                 oldKey is no longer the account's key"
                    .to_owned(),
            )
            .into()),
        }
    }

    fn check_contacts(&self, contacts: Vec<String>) -> Result<Vec<String>, Error> {
        let max = self.inner.settings.max_contacts;
        if contacts.len() > max {
            return Err(Refusal::problem(
                ProblemType::InvalidContact,
                format!("at most {max} contacts are allowed"),
            )
            .into());
        }
        for c in &contacts {
            let Some(addr) = c.strip_prefix("mailto:") else {
                return Err(Refusal::problem(
                    ProblemType::UnsupportedContact,
                    format!("contact {c:?} is not supported: only mailto: URLs are"),
                )
                .into());
            };
            if !valid_email(addr) {
                return Err(Refusal::problem(
                    ProblemType::InvalidContact,
                    format!("contact {c:?} is not a valid email address"),
                )
                .into());
            }
        }
        Ok(contacts)
    }
}

/// A deliberately plain check: one address, ASCII, no URL header fields, a dotted domain.
fn valid_email(addr: &str) -> bool {
    if !addr.is_ascii() || addr.contains(['?', '#', ',', ' ', '<', '>', '"']) || addr.len() > 254 {
        return false;
    }
    let Some((local, domain)) = addr.rsplit_once('@') else {
        return false;
    };
    !local.is_empty()
        && !local.contains('@')
        && acme_core::identifier::Identifier::dns(domain).is_ok_and(|d| !d.is_wildcard())
}

/// The answer to a new-account request whose key already has `account`: the account while it
/// is valid, a refusal once it is deactivated or revoked.
fn answer_existing(account: Account) -> Result<Registered, Error> {
    if account.status != AccountStatus::Valid {
        return Err(Refusal::AccountNotValid(account.status).into());
    }
    Ok(Registered::Existing(account))
}

#[cfg(test)]
mod tests {
    use super::valid_email;

    #[test]
    fn emails() {
        assert!(valid_email("admin@example.com"));
        assert!(!valid_email("admin@localhost"));
        assert!(!valid_email("a@b@example.com"));
        assert!(!valid_email("admin@example.com?subject=x"));
        assert!(!valid_email("ädmin@example.com"));
        assert!(!valid_email("@example.com"));
        assert!(!valid_email("admin@*.example.com"));
    }
}
