//! RFC 8555 JSON: domain objects in, wire objects out. Converted by hand so the domain stays free of
//! the wire format.

use acme_core::identifier::Identifier;
use acme_core::problem::Problem;
use acme_core::status::ChallengeType;
use serde::Deserialize;
use serde_json::Value;
use serde_json::json;
use storage::model::Account;
use storage::model::Authorization;
use storage::model::Challenge;
use storage::model::Order;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::urls::Urls;

pub(crate) fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

pub(crate) fn identifier_json(id: &Identifier) -> Value {
    json!({ "type": id.kind().as_str(), "value": id.value() })
}

pub(crate) fn problem_json(problem: &Problem, status: u16) -> Value {
    let mut v = json!({
        "type": problem.kind.urn(),
        "detail": problem.detail,
        "status": status,
    });
    if let Some(id) = &problem.identifier {
        v["identifier"] = identifier_json(id);
    }
    if !problem.subproblems.is_empty() {
        v["subproblems"] = Value::Array(
            problem
                .subproblems
                .iter()
                .map(|p| {
                    let mut s = json!({ "type": p.kind.urn(), "detail": p.detail });
                    if let Some(id) = &p.identifier {
                        s["identifier"] = identifier_json(id);
                    }
                    s
                })
                .collect(),
        );
    }
    v
}

/// A problem stored on a challenge or order, rendered without an HTTP status.
fn stored_problem_json(problem: &Problem) -> Value {
    let mut v = problem_json(problem, 400);
    if let Some(map) = v.as_object_mut() {
        map.remove("status");
    }
    v
}

pub(crate) fn account_json(urls: &Urls, account: &Account) -> Value {
    json!({
        "status": account.status.as_str(),
        "contact": account.contacts,
        "termsOfServiceAgreed": account.tos_agreed,
        "orders": urls.account_orders(account.id),
    })
}

pub(crate) fn order_json(urls: &Urls, order: &Order) -> Value {
    let mut v = json!({
        "status": order.status.as_str(),
        "expires": rfc3339(order.expires_at),
        "identifiers": order.identifiers.iter().map(identifier_json).collect::<Vec<_>>(),
        "authorizations": order.authz_ids.iter().map(|id| urls.authz(*id)).collect::<Vec<_>>(),
        "finalize": urls.finalize(order.id),
    });
    if let Some(replaces) = &order.replaces {
        v["replaces"] = json!(replaces);
    }
    if let Some(t) = order.not_before {
        v["notBefore"] = json!(rfc3339(t));
    }
    if let Some(t) = order.not_after {
        v["notAfter"] = json!(rfc3339(t));
    }
    if let Some(p) = &order.error {
        v["error"] = stored_problem_json(p);
    }
    if let Some(profile) = &order.profile {
        v["profile"] = json!(profile);
    }
    if let Some(c) = order.certificate_id {
        v["certificate"] = json!(urls.certificate(c));
    }
    v
}

pub(crate) fn challenge_json(urls: &Urls, ch: &Challenge) -> Value {
    let mut v = json!({
        "type": ch.kind.as_str(),
        "url": urls.challenge(ch.id),
        "status": ch.status.as_str(),
        "token": ch.token,
    });
    // draft-ietf-acme-dns-persist-02 §3.1. The token stays, unused by the record, so clients
    // that read every challenge's token keep working.
    if ch.kind == ChallengeType::DnsPersist01 {
        v["issuerDomainNames"] = json!(urls.issuer_domain_names());
    }
    if let Some(t) = ch.validated_at {
        v["validated"] = json!(rfc3339(t));
    }
    if let Some(p) = &ch.error {
        v["error"] = stored_problem_json(p);
    }
    v
}

pub(crate) fn authz_json(urls: &Urls, authz: &Authorization) -> Value {
    let id = &authz.identifier;
    let mut v = json!({
        "identifier": { "type": id.kind().as_str(), "value": id.base_name() },
        "status": authz.status.as_str(),
        "expires": rfc3339(authz.expires_at),
        "challenges": authz.challenges.iter().map(|c| challenge_json(urls, c)).collect::<Vec<_>>(),
    });
    if id.is_wildcard() {
        v["wildcard"] = json!(true);
    }
    v
}

/// `newAccount` and account-update payloads (RFC 8555 §7.3).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AccountRequest {
    pub(crate) contact: Option<Vec<String>>,
    pub(crate) terms_of_service_agreed: Option<bool>,
    pub(crate) only_return_existing: Option<bool>,
    pub(crate) status: Option<String>,
    pub(crate) external_account_binding: Option<Value>,
}

/// `newOrder` payload (RFC 8555 §7.4).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OrderRequest {
    pub(crate) identifiers: Vec<IdentifierRequest>,
    pub(crate) not_before: Option<String>,
    pub(crate) not_after: Option<String>,
    /// RFC 9773 §5: the ARI identifier of the certificate this order replaces.
    pub(crate) replaces: Option<String>,
    /// draft-ietf-acme-profiles: the certificate profile asked for.
    pub(crate) profile: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct IdentifierRequest {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) value: String,
}

/// `newAuthz` payload (RFC 8555 §7.4.1): the one identifier to pre-authorize.
#[derive(Debug, Deserialize)]
pub(crate) struct NewAuthzRequest {
    pub(crate) identifier: IdentifierRequest,
}

/// `finalize` payload.
#[derive(Debug, Deserialize)]
pub(crate) struct FinalizeRequest {
    pub(crate) csr: String,
}

/// `revokeCert` payload (RFC 8555 §7.6).
#[derive(Debug, Deserialize)]
pub(crate) struct RevokeRequest {
    pub(crate) certificate: String,
    pub(crate) reason: Option<i64>,
}

/// Authorization update payload.
#[derive(Debug, Deserialize)]
pub(crate) struct AuthzUpdate {
    pub(crate) status: Option<String>,
}

/// `keyChange` inner payload (RFC 8555 §7.3.5).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KeyChange {
    pub(crate) account: String,
    pub(crate) old_key: Value,
}
