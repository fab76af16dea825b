//! The admin API's documents for accounts and certificates, and the parsing of what operators
//! type (identifiers, serials, dates, revocation reasons). The server renders these documents
//! and `certeasy admin` reads them back, so both sides share one definition of every field name:
//! `--json` prints them as they come, and their names are a stable interface.

use acme_core::identifier::Identifier;
use acme_core::ids::Serial;
use acme_core::status::RevocationReason;
use serde::Deserialize;
use serde::Serialize;
use storage::model::CertificateFilter;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use ra::operator::AccountDetail;
use ra::operator::CertificateDetail;

/// An account. The counts are there only when one account is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountDoc {
    pub id: i64,
    pub status: String,
    pub contacts: Vec<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// RFC 7638 thumbprint of the account key, base64url.
    pub key_thumbprint: String,
    pub terms_of_service_agreed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orders: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_certificates: Option<u64>,
}

impl AccountDoc {
    pub fn new(account: &storage::model::Account) -> Self {
        Self {
            id: account.id.0,
            status: account.status.as_str().to_owned(),
            contacts: account.contacts.clone(),
            created_at: account.created_at,
            key_thumbprint: account.thumbprint.clone(),
            terms_of_service_agreed: account.tos_agreed,
            orders: None,
            certificates: None,
            revoked_certificates: None,
        }
    }

    pub fn detailed(detail: &AccountDetail) -> Self {
        Self {
            orders: Some(detail.counts.orders),
            certificates: Some(detail.counts.certificates),
            revoked_certificates: Some(detail.counts.revoked_certificates),
            ..Self::new(&detail.account)
        }
    }
}

/// A page of accounts; `next_before` is the `before` of the next page (absent on the last).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountList {
    pub accounts: Vec<AccountDoc>,
    pub next_before: Option<i64>,
}

/// A certificate. `pem` (leaf and chain) is there only when asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificateDoc {
    pub id: i64,
    /// Lower-case hex, as stored and as `openssl x509 -serial` prints it (without colons).
    pub serial: String,
    pub account: i64,
    /// `type:value`, e.g. `dns:www.example.com`, `ip:192.0.2.1`.
    pub names: Vec<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub not_before: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub not_after: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub issued_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub revoked_at: Option<OffsetDateTime>,
    /// RFC 5280 reason name (`keyCompromise`, …) when revoked.
    pub revocation_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pem: Option<String>,
}

impl CertificateDoc {
    pub fn summary(c: &storage::model::CertificateSummary) -> Self {
        Self {
            id: c.id.0,
            serial: c.serial.to_hex(),
            account: c.account_id.0,
            names: c.identifiers.iter().map(ToString::to_string).collect(),
            not_before: c.not_before,
            not_after: c.not_after,
            issued_at: c.issued_at,
            revoked_at: c.revoked_at,
            revocation_reason: reason_name(c.revoked_at, c.revocation_reason),
            pem: None,
        }
    }

    pub fn detailed(d: &CertificateDetail, with_pem: bool) -> Self {
        let c = &d.certificate;
        Self {
            id: c.id.0,
            serial: c.serial.to_hex(),
            account: c.account_id.0,
            names: d.identifiers.iter().map(ToString::to_string).collect(),
            not_before: c.not_before,
            not_after: c.not_after,
            issued_at: c.issued_at,
            revoked_at: c.revoked_at,
            revocation_reason: reason_name(c.revoked_at, c.revocation_reason),
            pem: with_pem.then(|| c.chain_pem.clone()),
        }
    }
}

fn reason_name(
    revoked_at: Option<OffsetDateTime>,
    reason: Option<RevocationReason>,
) -> Option<String> {
    revoked_at.map(|_| {
        reason
            .unwrap_or(RevocationReason::Unspecified)
            .as_str()
            .to_owned()
    })
}

/// A page of certificates; `next_before` as in [`AccountList`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificateList {
    pub certificates: Vec<CertificateDoc>,
    pub next_before: Option<i64>,
}

/// How many certificates a bulk revocation would take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountDoc {
    pub count: u64,
}

/// One bulk-revocation step's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchDoc {
    /// Serials revoked by this step.
    pub revoked: Vec<String>,
    /// `before` of the next step; absent when the selection is exhausted.
    pub next_before: Option<i64>,
}

/// A copy of the SQLite database the server wrote (`POST /admin/backup`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackupDoc {
    /// Where the copy is, on the server's machine (`<data-dir>/backups/certeasy-….db`).
    pub path: String,
    /// The copy's size.
    pub bytes: u64,
    /// How long the copy took.
    pub seconds: f64,
}

/// The certificate filters as the query string (listing, count) or body (bulk revocation)
/// carries them, as operators type them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificateQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_before: Option<String>,
    /// Expiring from the server's now to now plus this duration (`7d`, `36h`): the window is
    /// the server's, whose clock decides expiry; not with `expires_after`/`expires_before`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiring_within: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked: Option<bool>,
}

impl CertificateQuery {
    /// The storage filter, `expiring_within` counted from `now`; `Err` names the field that did
    /// not parse.
    pub fn to_filter(&self, now: OffsetDateTime) -> Result<CertificateFilter, String> {
        let time = |field: &str, v: &Option<String>| {
            v.as_deref()
                .map(|t| parse_time(t).map_err(|e| format!("{field}: {e}")))
                .transpose()
        };
        let mut expires_from = time("expires-after", &self.expires_after)?;
        let mut expires_until = time("expires-before", &self.expires_before)?;
        if let Some(within) = self.expiring_within.as_deref() {
            if expires_from.is_some() || expires_until.is_some() {
                return Err("expiring-within: not with expires-after or expires-before".to_owned());
            }
            let within = within
                .trim()
                .parse::<acme_core::duration::ConfigDuration>()
                .map_err(|e| format!("expiring-within: {e}"))?;
            expires_from = Some(now);
            expires_until = Some(now.saturating_add(within.time()));
        }
        Ok(CertificateFilter {
            name: self
                .name
                .as_deref()
                .map(|n| parse_identifier(n).map_err(|e| format!("name: {e}")))
                .transpose()?,
            serial: self
                .serial
                .as_deref()
                .map(|s| parse_serial(s).map_err(|e| format!("serial: {e}")))
                .transpose()?,
            account: self.account.map(acme_core::ids::AccountId),
            issued_from: time("issued-after", &self.issued_after)?,
            issued_until: time("issued-before", &self.issued_before)?,
            expires_from,
            expires_until,
            revoked: self.revoked,
        })
    }
}

/// Body of a bulk-revocation step: the filters, the reason, and where this step starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkRevokeBody {
    #[serde(flatten)]
    pub filter: CertificateQuery,
    pub reason: String,
    #[serde(default)]
    pub before: Option<i64>,
    #[serde(default)]
    pub batch: Option<u32>,
}

/// Body of revoking one certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeBody {
    pub reason: String,
}

/// What kind of refusal an error answer is; the HTTP status follows from it (`admin_error.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorType {
    /// The request names something malformed (a serial, a date, a limit name, a body field).
    BadRequest,
    /// No valid bearer token.
    Unauthorized,
    /// Sent by a browser (`Origin`, `Sec-Fetch-Site`), refused with or without the token.
    Forbidden,
    /// The record named does not exist, or no route has the path.
    NotFound,
    /// The route exists, for another method.
    MethodNotAllowed,
    /// The state forbids it: revoked already, blocked already, a backup on PostgreSQL.
    Conflict,
    /// The configuration files did not reload; what was in force stays.
    ReloadRefused,
    /// The database or Redis did not answer.
    Unavailable,
    /// A fault of the server.
    Internal,
}

/// Every error answer of `/admin/*`: `{"type": "not-found", "detail": "certificate does not
/// exist"}`. `detail` is a sentence for the operator, printed by `certeasy admin` as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDoc {
    #[serde(rename = "type")]
    pub kind: ErrorType,
    pub detail: String,
}

/// An external account binding key as `/admin/eab` answers it. The fields are in alphabetical
/// order, as the listing has always printed them; `hmac-key` is there only in the answer to the
/// key's creation, `deactivated-accounts` only in the answer to its revocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EabKeyDoc {
    pub bound_accounts: u32,
    pub cidrs: Vec<String>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deactivated_accounts: Option<u64>,
    pub domains: Vec<String>,
    pub expires_at: Option<String>,
    /// Base64url; shown once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmac_key: Option<String>,
    /// The key ID (hex).
    pub kid: String,
    pub max_validity: Option<String>,
    pub profiles: Vec<String>,
    pub reusable: bool,
    pub revoked_at: Option<String>,
}

/// Body of `POST /admin/eab`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct EabCreateBody {
    /// Names equal to or below these domains are allowed.
    pub domains: Vec<String>,
    /// IP identifiers inside these networks are allowed.
    pub cidrs: Vec<String>,
    /// Profile names allowed; empty means any.
    pub profiles: Vec<String>,
    /// Longest certificate validity, as a duration (`30d`).
    pub max_validity: Option<String>,
    /// The key binds no new account after this long (`7d`).
    pub expires_in: Option<String>,
    /// The key may bind several accounts (default: one).
    pub reusable: bool,
}

/// Query of `POST /admin/eab/{kid}/revoke`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct EabRevokeQuery {
    /// Also deactivate the valid accounts bound with the key.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deactivate_accounts: bool,
}

/// A blocked key, as `keys list --json` prints it and `keys block --json` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedKeyDoc {
    /// SHA-256 of the key's SubjectPublicKeyInfo DER, lowercase hex.
    pub spki_sha256: String,
    /// `database` (`keys block`) or `file` (`acme.blocked-keys-file`).
    pub source: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// When it was blocked; not known for the file's keys.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub blocked_at: Option<OffsetDateTime>,
}

/// Body of `POST /admin/keys/block` and `/admin/keys/unblock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyBody {
    /// A hash, or PEM text (public key, certificate or CSR).
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// Body of `/admin/pause` and `/admin/unpause`: identifiers as `dns:name`, `ip:addr`, or bare.
/// The answer is the count of pairs changed, as a line of text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseBody {
    pub account: i64,
    #[serde(default)]
    pub identifiers: Vec<String>,
}

/// Query of `GET /admin/pauses`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<i64>,
    #[serde(default)]
    pub all: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Body of `/admin/certificates/renew-early`: one serial (hex), one account or one name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewEarlyBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `before` (the keyset cursor) and `limit` of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// The account filters of `GET /admin/accounts`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contact: Option<String>,
}

/// Query of `GET /admin/certificates/{serial}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShowQuery {
    #[serde(default)]
    pub pem: bool,
}

/// Parses `dns:x`, `ip:x` or a bare name or address.
pub fn parse_identifier(text: &str) -> Result<Identifier, String> {
    let text = text.trim();
    let parsed = match text.split_once(':') {
        Some(("dns", v)) => Identifier::dns(v),
        Some(("ip", v)) => Identifier::ip(v),
        _ if text.parse::<std::net::IpAddr>().is_ok() => Identifier::ip(text),
        _ => Identifier::dns(text),
    };
    parsed.map_err(|e| e.to_string())
}

/// Hex, upper or lower case, with or without the colons `openssl x509 -text` prints.
pub fn parse_serial(text: &str) -> Result<Serial, String> {
    let hex: String = text.trim().chars().filter(|c| *c != ':').collect();
    Serial::from_hex(&hex).ok_or_else(|| format!("{text:?} is not a hex serial number"))
}

/// RFC 3339 (`2026-01-31T12:00:00Z`) or a date (`2026-01-31`, midnight UTC).
pub fn parse_time(text: &str) -> Result<OffsetDateTime, String> {
    let text = text.trim();
    if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(t);
    }
    let date_format = time::macros::format_description!("[year]-[month]-[day]");
    time::Date::parse(text, &date_format)
        .map(|d| d.midnight().assume_utc())
        .map_err(|_| {
            format!("{text:?} is neither RFC 3339 (2026-01-31T12:00:00Z) nor a date (2026-01-31)")
        })
}

/// An RFC 5280 reason by name (`keyCompromise`, case-insensitive) or code (`1`).
pub fn parse_reason(text: &str) -> Result<RevocationReason, String> {
    let text = text.trim();
    let by_code = text
        .parse::<i64>()
        .ok()
        .and_then(RevocationReason::from_code);
    let by_name = REASONS
        .iter()
        .copied()
        .find(|r| r.as_str().eq_ignore_ascii_case(text));
    by_code.or(by_name).ok_or_else(|| {
        let names: Vec<String> = REASONS
            .iter()
            .map(|r| format!("{} ({})", r.as_str(), r.code()))
            .collect();
        format!(
            "unknown revocation reason {text:?}; use one of {}",
            names.join(", ")
        )
    })
}

/// Every reason an operator can give, in code order.
const REASONS: [RevocationReason; 5] = [
    RevocationReason::Unspecified,
    RevocationReason::KeyCompromise,
    RevocationReason::AffiliationChanged,
    RevocationReason::Superseded,
    RevocationReason::CessationOfOperation,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_by_name_or_code() {
        assert_eq!(
            parse_reason("keyCompromise").unwrap(),
            RevocationReason::KeyCompromise
        );
        assert_eq!(
            parse_reason("KEYCOMPROMISE").unwrap(),
            RevocationReason::KeyCompromise
        );
        assert_eq!(parse_reason("4").unwrap(), RevocationReason::Superseded);
        assert_eq!(
            parse_reason("cessationOfOperation").unwrap(),
            RevocationReason::CessationOfOperation
        );
        // 2 (cACompromise) is not a reason a leaf of this CA is revoked for.
        let err = parse_reason("2").unwrap_err();
        assert!(err.contains("affiliationChanged (3)"), "{err}");
        assert!(parse_reason("whatever").is_err());
    }

    #[test]
    fn serials_with_colons_and_capitals() {
        assert_eq!(parse_serial("0A:ff:01").unwrap().to_hex(), "0aff01");
        assert_eq!(parse_serial("0aff01").unwrap().to_hex(), "0aff01");
        assert!(parse_serial("xyz").is_err());
        assert!(parse_serial("").is_err());
    }

    #[test]
    fn times_as_rfc3339_or_dates() {
        assert_eq!(
            parse_time("2026-01-31").unwrap(),
            time::macros::datetime!(2026-01-31 0:00 UTC)
        );
        assert_eq!(
            parse_time("2026-01-31T12:30:00+01:00").unwrap(),
            time::macros::datetime!(2026-01-31 11:30 UTC)
        );
        assert!(parse_time("31/01/2026").is_err());
    }

    #[test]
    fn a_query_becomes_a_filter() {
        let q = CertificateQuery {
            name: Some("WWW.Example.com".to_owned()),
            serial: Some("01:02".to_owned()),
            account: Some(7),
            issued_after: Some("2026-01-01".to_owned()),
            revoked: Some(false),
            ..Default::default()
        };
        let now = time::macros::datetime!(2026-03-01 12:00 UTC);
        let f = q.to_filter(now).unwrap();
        assert_eq!(f.name.unwrap().to_string(), "dns:www.example.com");
        assert_eq!(f.serial.unwrap().to_hex(), "0102");
        assert_eq!(f.account, Some(acme_core::ids::AccountId(7)));
        assert!(f.issued_from.is_some() && f.issued_until.is_none());
        assert_eq!(f.revoked, Some(false));
        let bad = CertificateQuery {
            expires_before: Some("soon".to_owned()),
            ..Default::default()
        };
        assert!(
            bad.to_filter(now)
                .unwrap_err()
                .starts_with("expires-before")
        );
    }

    /// `--expiring-within` is a window from the server's now, and stands alone.
    #[test]
    fn expiring_within_counts_from_now() {
        let now = time::macros::datetime!(2026-03-01 12:00 UTC);
        let q = CertificateQuery {
            expiring_within: Some("7d".to_owned()),
            ..Default::default()
        };
        let f = q.to_filter(now).unwrap();
        assert_eq!(f.expires_from, Some(now));
        assert_eq!(
            f.expires_until,
            Some(time::macros::datetime!(2026-03-08 12:00 UTC))
        );
        let both = CertificateQuery {
            expiring_within: Some("7d".to_owned()),
            expires_before: Some("2026-04-01".to_owned()),
            ..Default::default()
        };
        assert!(
            both.to_filter(now)
                .unwrap_err()
                .starts_with("expiring-within")
        );
        let bad = CertificateQuery {
            expiring_within: Some("a week".to_owned()),
            ..Default::default()
        };
        assert!(
            bad.to_filter(now)
                .unwrap_err()
                .starts_with("expiring-within")
        );
    }
}
