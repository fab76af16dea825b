//! The directory object (RFC 8555 §7.1.1), serialised once when the state is built: nothing in
//! it changes while the server runs (a reload changes the rate limits and the listener's
//! certificate only), and every client fetches it before it creates an account.

use axum::body::Bytes;
use ra::settings::PolicySettings;
use serde_json::json;

use crate::settings::ApiSettings;
use crate::urls::RENEWAL_INFO_PATH;
use crate::urls::Urls;

pub(crate) fn render(settings: &ApiSettings, policy: &PolicySettings, urls: &Urls) -> Bytes {
    let mut meta = json!({ "externalAccountRequired": policy.external_account_required });
    if let Some(tos) = &policy.terms_of_service {
        meta["termsOfService"] = json!(tos);
    }
    if let Some(site) = &settings.website {
        meta["website"] = json!(site);
    }
    if !settings.caa_identities.is_empty() {
        meta["caaIdentities"] = json!(settings.caa_identities);
    }
    // draft-ietf-acme-dns-persist-02 §3.2, §4.1: what a client needs to publish a record before
    // any order.
    if !settings.dns_persist_issuer_domain_names.is_empty() {
        meta["issuerDomainNames"] = json!(settings.dns_persist_issuer_domain_names);
        meta["accountHashPrefix"] = json!(urls.account_hash_prefix());
    }
    // draft-ietf-acme-profiles: name → human-readable description.
    let profiles: serde_json::Map<String, serde_json::Value> = policy
        .profiles
        .iter()
        .map(|p| (p.name().to_owned(), json!(p.description())))
        .collect();
    meta["profiles"] = serde_json::Value::Object(profiles);
    let mut body = json!({
        "newNonce": urls.url("/acme/new-nonce"),
        "newAccount": urls.url("/acme/new-account"),
        "newOrder": urls.url("/acme/new-order"),
        "revokeCert": urls.url("/acme/revoke-cert"),
        "keyChange": urls.url("/acme/key-change"),
        "renewalInfo": urls.url(RENEWAL_INFO_PATH),
        "meta": meta,
    });
    if policy.pre_authorization {
        // RFC 8555 §7.1.1: present only where pre-authorization is offered.
        body["newAuthz"] = json!(urls.url("/acme/new-authz"));
    }
    Bytes::from(body.to_string())
}
