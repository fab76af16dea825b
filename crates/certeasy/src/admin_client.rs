//! The client side of the admin API (`admin.rs`): one method per route, taking and returning the
//! documents of `admin_wire.rs`, so `certeasy admin` never spells a path, a field name or an
//! error shape itself.
//!
//! Paths are built with `url`'s segment encoder ([`url::PathSegmentsMut::push`]), so what an
//! operator types (a serial, a bucket id holding `:` and `/`, a key ID) stays one path segment.
//! A refusal comes back as [`Refused`], its `detail` taken from the server's error document.

use std::time::Duration;

use reqwest::RequestBuilder;
use reqwest::Response;
use reqwest::StatusCode;
use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;

use crate::admin_token::AdminToken;
use crate::admin_wire::AccountDoc;
use crate::admin_wire::AccountList;
use crate::admin_wire::AccountQuery;
use crate::admin_wire::BackupDoc;
use crate::admin_wire::BatchDoc;
use crate::admin_wire::BlockedKeyDoc;
use crate::admin_wire::BulkRevokeBody;
use crate::admin_wire::CertificateDoc;
use crate::admin_wire::CertificateList;
use crate::admin_wire::CertificateQuery;
use crate::admin_wire::CountDoc;
use crate::admin_wire::EabCreateBody;
use crate::admin_wire::EabKeyDoc;
use crate::admin_wire::EabRevokeQuery;
use crate::admin_wire::ErrorDoc;
use crate::admin_wire::KeyBody;
use crate::admin_wire::PageQuery;
use crate::admin_wire::PauseBody;
use crate::admin_wire::PauseQuery;
use crate::admin_wire::RenewEarlyBody;
use crate::admin_wire::RevokeBody;
use crate::admin_wire::ShowQuery;

/// How long a request may take; a bulk step or a listing of 1,000 rows is well inside it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// How long `certeasy admin backup` waits for the server's answer, which comes when the copy is
/// complete: minutes for a large database, so the usual limit does not apply.
const BACKUP_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// The server refused: its status and the sentence it gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: StatusCode,
    pub detail: String,
}

/// A route's document, or the server's refusal. The outer `anyhow::Result` of every call is the
/// transport: no connection, a timeout, an answer that is not the document.
pub type Reply<T> = Result<T, Refused>;

/// The admin API of one server, with its bearer token.
#[derive(Debug, Clone)]
pub struct AdminClient {
    http: reqwest::Client,
    /// The admin listener's URL; a path in it (a proxy's prefix) is kept before `/admin`.
    base: Url,
}

impl AdminClient {
    pub fn new(base: &str, token: &AdminToken) -> anyhow::Result<Self> {
        Self::new_as(base, token, None)
    }

    /// A client whose requests name `operator` (`X-Certeasy-Operator`), which the server
    /// records with every change it makes for them.
    pub fn new_as(base: &str, token: &AdminToken, operator: Option<&str>) -> anyhow::Result<Self> {
        let base = Url::parse(base)
            .map_err(|e| anyhow::anyhow!("the admin URL {base:?} is not a URL: {e}"))?;
        if base.cannot_be_a_base() {
            anyhow::bail!("the admin URL {base} cannot take a path");
        }
        let mut auth =
            reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.as_str()))?;
        auth.set_sensitive(true);
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::AUTHORIZATION, auth);
        if let Some(name) = operator.map(str::trim).filter(|n| !n.is_empty()) {
            let value = reqwest::header::HeaderValue::from_str(name).map_err(|_| {
                anyhow::anyhow!("the operator name {name:?} cannot be sent in a header")
            })?;
            headers.insert(crate::admin::OPERATOR_HEADER, value);
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .default_headers(headers)
            .timeout(REQUEST_TIMEOUT)
            .build()?;
        Ok(Self { http, base })
    }

    /// The base URL as given, for messages.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// `base` + `/admin/<segments…>`, each segment percent-encoded as one, and the fields of
    /// `query` (a flat serde struct; `None` fields left out) as the query string.
    fn url(&self, segments: &[&str], query: &impl Serialize) -> anyhow::Result<Url> {
        let mut url = self.base.clone();
        {
            let mut path = url
                .path_segments_mut()
                .map_err(|()| anyhow::anyhow!("the admin URL {} cannot take a path", self.base))?;
            path.pop_if_empty().push("admin");
            for segment in segments {
                // `url` drops these rather than encode them, which would name another route.
                if matches!(*segment, "" | "." | "..") {
                    anyhow::bail!("{segment:?} cannot name a record");
                }
                path.push(segment);
            }
        }
        if let serde_json::Value::Object(fields) = serde_json::to_value(query)? {
            let pairs: Vec<(String, String)> = fields
                .into_iter()
                .filter_map(|(key, value)| match value {
                    serde_json::Value::Null => None,
                    serde_json::Value::String(s) => Some((key, s)),
                    other => Some((key, other.to_string())),
                })
                .collect();
            if !pairs.is_empty() {
                url.query_pairs_mut().extend_pairs(pairs);
            }
        }
        Ok(url)
    }

    fn get(&self, segments: &[&str], query: &impl Serialize) -> anyhow::Result<RequestBuilder> {
        Ok(self.http.get(self.url(segments, query)?))
    }

    fn post(
        &self,
        segments: &[&str],
        query: &impl Serialize,
        body: &impl Serialize,
    ) -> anyhow::Result<RequestBuilder> {
        Ok(self
            .http
            .post(self.url(segments, query)?)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_string(body)?))
    }

    /// Sends `request`; a success is the JSON document `T`.
    async fn doc<T: DeserializeOwned>(request: RequestBuilder) -> anyhow::Result<Reply<T>> {
        let text = match Self::send(request).await? {
            Ok(text) => text,
            Err(refused) => return Ok(Err(refused)),
        };
        serde_json::from_str(&text)
            .map(Ok)
            .map_err(|e| anyhow::anyhow!("unexpected answer from the admin API ({e}): {text}"))
    }

    /// Sends `request`; a success is its text, a failure the server's [`ErrorDoc`].
    async fn send(request: RequestBuilder) -> anyhow::Result<Reply<String>> {
        let response: Response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        if status.is_success() {
            return Ok(Ok(text));
        }
        let detail = match serde_json::from_str::<ErrorDoc>(&text) {
            Ok(doc) => doc.detail,
            // Not this server's shape: a proxy in between, or another program on the port.
            Err(_) if text.trim().is_empty() => format!("the admin listener answered {status}"),
            Err(_) => text.trim_end().to_owned(),
        };
        Ok(Err(Refused { status, detail }))
    }

    /// A count the server answers as a line of text (pause, unpause).
    async fn count(request: RequestBuilder) -> anyhow::Result<Reply<u64>> {
        match Self::send(request).await? {
            Ok(text) => {
                text.trim().parse().map(Ok).map_err(|e| {
                    anyhow::anyhow!("unexpected answer from the admin API ({e}): {text}")
                })
            }
            Err(refused) => Ok(Err(refused)),
        }
    }

    // ---- operations: answered in text ----

    /// `POST /admin/reload`: what was reloaded, as a line.
    pub async fn reload(&self) -> anyhow::Result<Reply<String>> {
        Self::send(self.post(&["reload"], &(), &())?).await
    }

    /// `GET /admin/ratelimit/{limit}/{id}`: the bucket, as labelled lines.
    pub async fn bucket(&self, limit: &str, id: &str) -> anyhow::Result<Reply<String>> {
        Self::send(self.get(&["ratelimit", limit, id], &())?).await
    }

    /// `POST /admin/ratelimit/{limit}/{id}/reset`.
    pub async fn reset_bucket(&self, limit: &str, id: &str) -> anyhow::Result<Reply<String>> {
        Self::send(self.post(&["ratelimit", limit, id, "reset"], &(), &())?).await
    }

    /// `GET /admin/pauses`: a tab-separated listing.
    pub async fn pauses(&self, query: &PauseQuery) -> anyhow::Result<Reply<String>> {
        Self::send(self.get(&["pauses"], query)?).await
    }

    /// `POST /admin/pause`: how many pairs were newly paused.
    pub async fn pause(&self, body: &PauseBody) -> anyhow::Result<Reply<u64>> {
        Self::count(self.post(&["pause"], &(), body)?).await
    }

    /// `POST /admin/unpause`: how many pairs were unpaused (at most
    /// `acme_api::unpause::MAX_PER_CLICK` when no identifier is named).
    pub async fn unpause(&self, body: &PauseBody) -> anyhow::Result<Reply<u64>> {
        Self::count(self.post(&["unpause"], &(), body)?).await
    }

    /// `POST /admin/backup`, waiting up to an hour for the copy.
    pub async fn backup(&self) -> anyhow::Result<Reply<BackupDoc>> {
        Self::doc(self.post(&["backup"], &(), &())?.timeout(BACKUP_TIMEOUT)).await
    }

    // ---- accounts ----

    pub async fn accounts(
        &self,
        filter: &AccountQuery,
        page: &PageQuery,
    ) -> anyhow::Result<Reply<AccountList>> {
        #[derive(Serialize)]
        struct Query<'a> {
            #[serde(flatten)]
            filter: &'a AccountQuery,
            #[serde(flatten)]
            page: &'a PageQuery,
        }
        Self::doc(self.get(&["accounts"], &Query { filter, page })?).await
    }

    pub async fn account(&self, id: i64) -> anyhow::Result<Reply<AccountDoc>> {
        Self::doc(self.get(&["accounts", &id.to_string()], &())?).await
    }

    /// Deactivates, then answers the account as it is afterwards.
    pub async fn deactivate_account(&self, id: i64) -> anyhow::Result<Reply<AccountDoc>> {
        Self::doc(self.post(&["accounts", &id.to_string(), "deactivate"], &(), &())?).await
    }

    // ---- certificates ----

    pub async fn certificates(
        &self,
        filter: &CertificateQuery,
        page: &PageQuery,
    ) -> anyhow::Result<Reply<CertificateList>> {
        #[derive(Serialize)]
        struct Query<'a> {
            #[serde(flatten)]
            filter: &'a CertificateQuery,
            #[serde(flatten)]
            page: &'a PageQuery,
        }
        Self::doc(self.get(&["certificates"], &Query { filter, page })?).await
    }

    /// How many unrevoked certificates `filter` selects.
    pub async fn count_revocable(
        &self,
        filter: &CertificateQuery,
    ) -> anyhow::Result<Reply<CountDoc>> {
        Self::doc(self.get(&["certificates", "count"], filter)?).await
    }

    pub async fn certificate(
        &self,
        serial: &str,
        pem: bool,
    ) -> anyhow::Result<Reply<CertificateDoc>> {
        Self::doc(self.get(&["certificates", serial.trim()], &ShowQuery { pem })?).await
    }

    /// Revokes one certificate, then answers it as it is afterwards.
    pub async fn revoke(
        &self,
        serial: &str,
        body: &RevokeBody,
    ) -> anyhow::Result<Reply<CertificateDoc>> {
        Self::doc(self.post(&["certificates", serial.trim(), "revoke"], &(), body)?).await
    }

    /// One step of a bulk revocation.
    pub async fn revoke_batch(&self, body: &BulkRevokeBody) -> anyhow::Result<Reply<BatchDoc>> {
        Self::doc(self.post(&["certificates", "revoke"], &(), body)?).await
    }

    pub async fn renew_early(&self, body: &RenewEarlyBody) -> anyhow::Result<Reply<CountDoc>> {
        Self::doc(self.post(&["certificates", "renew-early"], &(), body)?).await
    }

    // ---- external account binding keys ----

    /// The new key, its HMAC key included (the only time it is shown).
    pub async fn create_eab_key(&self, body: &EabCreateBody) -> anyhow::Result<Reply<EabKeyDoc>> {
        Self::doc(self.post(&["eab"], &(), body)?).await
    }

    pub async fn eab_keys(&self) -> anyhow::Result<Reply<Vec<EabKeyDoc>>> {
        Self::doc(self.get(&["eab"], &())?).await
    }

    pub async fn revoke_eab_key(
        &self,
        kid: &str,
        query: &EabRevokeQuery,
    ) -> anyhow::Result<Reply<EabKeyDoc>> {
        Self::doc(self.post(&["eab", kid, "revoke"], query, &())?).await
    }

    // ---- blocked keys ----

    pub async fn block_key(&self, body: &KeyBody) -> anyhow::Result<Reply<BlockedKeyDoc>> {
        Self::doc(self.post(&["keys", "block"], &(), body)?).await
    }

    pub async fn unblock_key(&self, body: &KeyBody) -> anyhow::Result<Reply<BlockedKeyDoc>> {
        Self::doc(self.post(&["keys", "unblock"], &(), body)?).await
    }

    pub async fn blocked_keys(&self) -> anyhow::Result<Reply<Vec<BlockedKeyDoc>>> {
        Self::doc(self.get(&["keys"], &())?).await
    }

    // ---- rate-limit overrides (`admin_overrides.rs`) ----

    pub async fn overrides(
        &self,
    ) -> anyhow::Result<Reply<Vec<crate::admin_overrides::OverrideDoc>>> {
        Self::doc(self.get(&["overrides"], &())?).await
    }

    pub async fn override_of(
        &self,
        key: &crate::admin_overrides::OverrideKey,
    ) -> anyhow::Result<Reply<Vec<crate::admin_overrides::OverrideDoc>>> {
        Self::doc(self.get(&["overrides", "show"], key)?).await
    }

    pub async fn add_override(
        &self,
        body: &crate::admin_overrides::AddOverrideBody,
    ) -> anyhow::Result<Reply<crate::admin_overrides::OverrideDoc>> {
        Self::doc(self.post(&["overrides"], &(), body)?).await
    }

    pub async fn remove_override(
        &self,
        key: &crate::admin_overrides::OverrideKey,
    ) -> anyhow::Result<Reply<crate::admin_overrides::OverrideDoc>> {
        Self::doc(self.post(&["overrides", "remove"], &(), key)?).await
    }

    // ---- issuers (`admin_issuers.rs`) ----

    pub async fn issuers(&self) -> anyhow::Result<Reply<Vec<crate::admin_issuers::IssuerDoc>>> {
        Self::doc(self.get(&["ca", "issuers"], &())?).await
    }

    pub async fn activate_issuer(
        &self,
        name: &str,
    ) -> anyhow::Result<Reply<crate::admin_issuers::IssuerDoc>> {
        Self::doc(self.post(&["ca", "issuers", name, "activate"], &(), &())?).await
    }

    // ---- the audit log (`admin_audit.rs`) ----

    pub async fn audit_records(
        &self,
        query: &crate::admin_audit::AuditQuery,
    ) -> anyhow::Result<Reply<Vec<crate::admin_audit::AuditRecordDoc>>> {
        Self::doc(self.get(&["audit"], query)?).await
    }

    pub async fn audit_record(
        &self,
        seq: i64,
    ) -> anyhow::Result<Reply<crate::admin_audit::AuditRecordDoc>> {
        Self::doc(self.get(&["audit", &seq.to_string()], &())?).await
    }

    pub async fn audit_head(&self) -> anyhow::Result<Reply<crate::admin_audit::AuditHeadDoc>> {
        Self::doc(self.get(&["audit", "head"], &())?).await
    }

    /// The whole chain is checked before the answer: as long as a backup may take.
    pub async fn verify_audit(
        &self,
        query: &crate::admin_audit::VerifyQuery,
    ) -> anyhow::Result<Reply<crate::admin_audit::VerifyDoc>> {
        Self::doc(
            self.get(&["audit", "verify"], query)?
                .timeout(BACKUP_TIMEOUT),
        )
        .await
    }

    /// The certificate's validation evidence, as the server stores it.
    pub async fn certificate_evidence(
        &self,
        serial: &str,
    ) -> anyhow::Result<Reply<serde_json::Value>> {
        Self::doc(self.get(&["audit", "evidence", serial], &())?).await
    }
}

#[cfg(test)]
mod tests {
    use super::AdminClient;
    use crate::admin_token::AdminToken;
    use crate::admin_wire::EabRevokeQuery;
    use crate::admin_wire::PauseQuery;

    fn client(base: &str) -> AdminClient {
        let token = AdminToken::for_tests(&"0".repeat(64));
        AdminClient::new(base, &token).unwrap()
    }

    #[test]
    fn what_operators_type_stays_one_segment() {
        let c = client("http://127.0.0.1:14001");
        assert_eq!(
            c.url(&["ratelimit", "san-budget", "7:dns:a.example/x y"], &())
                .unwrap()
                .as_str(),
            "http://127.0.0.1:14001/admin/ratelimit/san-budget/7:dns:a.example%2Fx%20y"
        );
        assert_eq!(
            c.url(&["certificates", "0a:ff?x#y"], &()).unwrap().as_str(),
            "http://127.0.0.1:14001/admin/certificates/0a:ff%3Fx%23y"
        );
        assert!(c.url(&["certificates", ".."], &()).is_err());
        assert!(c.url(&["eab", "", "revoke"], &()).is_err());
    }

    #[test]
    fn a_base_path_and_trailing_slash_are_kept_once() {
        for base in ["http://h:1/prefix", "http://h:1/prefix/"] {
            assert_eq!(
                client(base).url(&["keys"], &()).unwrap().as_str(),
                "http://h:1/prefix/admin/keys"
            );
        }
        assert_eq!(
            client("http://h:1/").url(&["eab"], &()).unwrap().as_str(),
            "http://h:1/admin/eab"
        );
    }

    #[test]
    fn queries_leave_out_what_is_not_given() {
        let c = client("http://h:1");
        let all = PauseQuery {
            account: Some(7),
            all: true,
            limit: None,
        };
        assert_eq!(
            c.url(&["pauses"], &all).unwrap().as_str(),
            "http://h:1/admin/pauses?account=7&all=true"
        );
        let plain = EabRevokeQuery::default();
        assert_eq!(
            c.url(&["eab", "k", "revoke"], &plain).unwrap().as_str(),
            "http://h:1/admin/eab/k/revoke"
        );
        let deactivate = EabRevokeQuery {
            deactivate_accounts: true,
        };
        assert_eq!(
            c.url(&["eab", "k", "revoke"], &deactivate)
                .unwrap()
                .as_str(),
            "http://h:1/admin/eab/k/revoke?deactivate-accounts=true"
        );
        let token = AdminToken::for_tests(&"0".repeat(64));
        assert!(AdminClient::new("mailto:x@example.com", &token).is_err());
        assert!(AdminClient::new("127.0.0.1:14001", &token).is_err());
    }
}
