//! Who asked for a change that the audit log records, and the records of this crate's decisions.
//!
//! Every audited change is written by a storage function that takes the record with it and
//! appends it in the same transaction (`storage::audit`): the change and its record commit
//! together or not at all. This crate builds the record, because it is the one that knows who
//! asked (a [`Requester`]: an account and its address, an admin token and the operator it
//! names, or the server itself) and why the change was allowed (the verdict, in words). A
//! refused request reaches no storage write, so it records nothing.

use std::net::IpAddr;

use acme_core::ids::AccountId;
use acme_core::status::RevocationReason;
use storage::model::Certificate;
use storage::model::Order;

pub use storage::audit::Actor;
pub use storage::audit::AuditEvent;
pub use storage::audit::AuditKind;

/// Who asks for an audited change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester {
    pub actor: Actor,
    /// The client's address (after trusted proxies) when the request came over the network.
    pub client_ip: Option<IpAddr>,
}

impl Requester {
    /// An ACME account, by a request it signed from `client_ip`.
    pub fn account(id: AccountId, client_ip: IpAddr) -> Self {
        Self {
            actor: Actor::Account(id),
            client_ip: Some(client_ip),
        }
    }

    /// The holder of a key that has no account yet: the account it creates. Storage names the
    /// new account once its row exists (`Storage::create_account`).
    pub fn new_account(client_ip: IpAddr) -> Self {
        Self::account(AccountId(0), client_ip)
    }

    /// A caller of the admin API: the token's identity (`storage::audit::admin_token_identity`,
    /// never the token) and the operator's name as the caller gave it (a claim: the token is
    /// what was authenticated).
    pub fn admin(
        token_identity: String,
        operator: Option<String>,
        client_ip: Option<IpAddr>,
    ) -> Self {
        Self {
            actor: Actor::Admin {
                token: token_identity,
                operator,
            },
            client_ip,
        }
    }

    /// The holder of a certificate's private key, by the RFC 7638 thumbprint of the key that
    /// signed its request from `client_ip`: no account asks (RFC 8555 §7.6 revocation by the
    /// certificate's own key), and the server did not decide it either.
    pub fn certificate_key(thumbprint: String, client_ip: IpAddr) -> Self {
        Self {
            actor: Actor::CertificateKey(thumbprint),
            client_ip: Some(client_ip),
        }
    }

    /// The server itself: a worker, a validation hook, a reload on SIGHUP.
    pub fn system() -> Self {
        Self {
            actor: Actor::System,
            client_ip: None,
        }
    }

    /// Whether an ACME account asks (not an operator or the server).
    pub fn is_account(&self) -> bool {
        matches!(self.actor, Actor::Account(_))
    }

    /// A record of `kind` by this requester, for `reason`; the account is the requester's when
    /// it is one.
    pub fn event(&self, kind: AuditKind, reason: impl Into<String>) -> AuditEvent {
        let mut event = AuditEvent::new(kind, self.actor.clone(), reason);
        event.client_ip = self.client_ip;
        if let Actor::Account(id) = self.actor {
            event.account = Some(id);
        }
        event
    }

    /// Who, in the words of a record's reason.
    pub fn who(&self) -> &'static str {
        match self.actor {
            Actor::Account(_) => "the account's holder",
            Actor::Admin { .. } | Actor::Operator(_) => "an operator",
            Actor::System => "the server",
            Actor::CertificateKey(_) => "the holder of the certificate's private key",
        }
    }
}

/// The record of `certificate`'s revocation for `reason`, by `requester`, `how` being the
/// verdict that allowed it ("by the account holding it", ...).
pub(crate) fn revoked(
    requester: &Requester,
    certificate: &Certificate,
    reason: RevocationReason,
    how: &str,
) -> AuditEvent {
    let mut event = requester.event(
        AuditKind::CertificateRevoked,
        format!("revoked {how}, reason {}", reason.as_str()),
    );
    event.account = Some(certificate.account_id);
    event.serial = Some(certificate.serial.clone());
    event.names = crate::certificate_names::of_der(&certificate.der);
    event.detail = serde_json::json!({
        "certificate_id": certificate.id.0,
        "reason_code": reason.code(),
    });
    event
}

/// The record of the certificate `certificate` stored for `order`: issued to the order's
/// account, every authorization of the order valid (checked again when its serial was
/// reserved, with the account) and CAA checked at issuance. The account acted through its
/// finalize request, so the record names the address that request came from, as stored with the
/// order (none for orders finalized before it was stored). Storage adds the digest of the
/// validation evidence kept with it (`evidence_sha256`).
pub fn certificate_issued(
    order: &Order,
    certificate: &storage::model::NewCertificate,
) -> AuditEvent {
    let mut event = AuditEvent::new(
        AuditKind::CertificateIssued,
        Actor::Account(order.account_id),
        "issued to the order's account: valid account, every identifier authorized by a valid \
         authorization, CSR and key checked, CAA allowed at issuance",
    );
    event.client_ip = order.finalize_client_ip;
    event.account = Some(order.account_id);
    event.serial = Some(certificate.serial.clone());
    event.names = order
        .identifiers
        .iter()
        .map(|id| id.value().to_lowercase())
        .collect();
    event.detail = serde_json::json!({
        "order_id": order.id.0,
        "profile": order.profile,
        "not_before": rfc3339(certificate.not_before),
        "not_after": rfc3339(certificate.not_after),
    });
    event
}

pub(crate) fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

/// The record of account `account`'s deactivation, `reason` saying by whom and why.
pub(crate) fn deactivation(
    requester: &Requester,
    account: AccountId,
    reason: String,
) -> AuditEvent {
    let mut audit = requester.event(AuditKind::AccountDeactivated, reason);
    audit.account = Some(account);
    audit
}
