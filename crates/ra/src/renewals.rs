//! ACME Renewal Information (RFC 9773): the window in which a certificate should be renewed, the
//! `replaces` field of new orders, and the operator's early-renewal mark.

use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::ids::Serial;
use acme_core::problem::ProblemType;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use storage::model::Certificate;
use storage::model::CertificateFilter;
use storage::model::Page;
use storage::model::RenewEarly;
use time::Duration;
use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::ParsedExtension;
use x509_parser::prelude::FromDer;

use crate::Ra;
use crate::audit::AuditKind;
use crate::audit::Requester;
use crate::certificate_names;
use crate::error::Error;
use crate::error::Refusal;

/// Which certificates an operator marks for early renewal.
#[derive(Debug, Clone)]
pub enum RenewEarlyTarget {
    Serial(Serial),
    /// Every certificate of the account.
    Account(AccountId),
    /// Every certificate holding the name.
    Name(Identifier),
}

/// A suggested renewal window and when to ask again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenewalWindow {
    pub start: OffsetDateTime,
    pub end: OffsetDateTime,
    /// How long the client should wait before asking again.
    pub retry_after: Duration,
}

/// A replaced certificate, as new-order found it.
#[derive(Debug, Clone)]
pub(crate) struct Replacement {
    /// The replaced certificate's ARI identifier, canonical (unpadded base64url).
    pub(crate) cert_id: String,
    /// Whether the renewal is exempt from the order-creation limit: it comes inside (or after the
    /// start of) the suggested window of a certificate that is not revoked. It is never exempt
    /// from the duplicate-certificate limit (`guards.rs`).
    pub(crate) exempt: bool,
}

/// The parts of an ARI certificate identifier: `base64url(AKI keyIdentifier) "."
/// base64url(serial)`.
fn parse_cert_id(text: &str) -> Result<(Vec<u8>, Serial), Refusal> {
    let bad = || {
        Refusal::malformed(format!(
            "{text:?} is not an ARI certificate identifier (base64url keyIdentifier \".\" base64url serial, RFC 9773 §4.1)"
        ))
    };
    let (aki, serial) = text.split_once('.').ok_or_else(bad)?;
    let aki = URL_SAFE_NO_PAD.decode(aki).map_err(|_| bad())?;
    let serial = URL_SAFE_NO_PAD.decode(serial).map_err(|_| bad())?;
    if aki.is_empty() || serial.is_empty() {
        return Err(bad());
    }
    Ok((aki, Serial::from_bytes(serial)))
}

/// The Authority Key Identifier's keyIdentifier and the names of a certificate.
fn certificate_facts(der: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let aki = cert
        .extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(a) => {
                a.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => None,
        });
    Some((aki?, certificate_names::of_parsed(&cert)))
}

impl Ra {
    /// The certificate an ARI identifier names, if this CA issued it.
    async fn certificate_by_cert_id(&self, cert_id: &str) -> Result<Certificate, Error> {
        let (aki, serial) = parse_cert_id(cert_id)?;
        let cert = self
            .inner
            .storage
            .certificate_by_serial(&serial)
            .await?
            .ok_or(Refusal::NotFound("certificate"))?;
        // The serial alone would do for this CA; the AKI must match too, so an identifier made
        // for another issuer's certificate with the same serial is not taken for ours.
        match certificate_facts(&cert.der) {
            Some((stored_aki, _)) if stored_aki == aki => Ok(cert),
            _ => Err(Refusal::NotFound("certificate").into()),
        }
    }

    /// RFC 9773 §4.2: the suggested renewal window of the certificate `cert_id` names.
    pub async fn renewal_info(&self, cert_id: &str) -> Result<RenewalWindow, Error> {
        let cert = self.certificate_by_cert_id(cert_id).await?;
        Ok(self.window(&cert, self.now()))
    }

    /// The window of a certificate: a fraction of its lifetime, moved by its jitter; in the past
    /// once it is revoked or marked for early renewal, so clients renew at once.
    fn window(&self, cert: &Certificate, now: OffsetDateTime) -> RenewalWindow {
        let r = &self.inner.settings.renewal;
        let retry_after = r.retry_after;
        if let Some(at) = cert.revoked_at.or(cert.renew_early_at) {
            let end = at.min(now);
            return RenewalWindow {
                start: end - Duration::hours(1),
                end,
                retry_after,
            };
        }
        let lifetime = cert.not_after - cert.not_before;
        let jitter = lifetime * (r.jitter * serial_fraction(&cert.serial));
        let mut start = cert.not_before + lifetime * r.window_start + jitter;
        let mut end = cert.not_before + lifetime * r.window_end + jitter;
        // Never past expiry: a window that ends after notAfter would let a client wait too long.
        end = end.min(cert.not_after - Duration::minutes(1));
        start = start.min(end - Duration::minutes(1));
        RenewalWindow {
            start,
            end,
            retry_after,
        }
    }

    /// RFC 9773 §5: the certificate `replaces` names must exist, belong to `account`, share an
    /// identifier with the order, and not already be replaced by an order that is not invalid.
    pub(crate) async fn check_replaces(
        &self,
        account: AccountId,
        identifiers: &[Identifier],
        replaces: &str,
    ) -> Result<Replacement, Error> {
        let cert = self
            .certificate_by_cert_id(replaces)
            .await
            .map_err(|e| match e {
                Error::Refused(r) if matches!(*r, Refusal::NotFound(_)) => {
                    Error::from(Refusal::malformed(format!(
                        "\"replaces\" names {replaces:?}, which is not a certificate this CA issued"
                    )))
                }
                other => other,
            })?;
        if cert.account_id != account {
            return Err(Refusal::unauthorized(
                "\"replaces\" names a certificate of another account",
            )
            .into());
        }
        let names = certificate_facts(&cert.der)
            .map(|(_, names)| names)
            .unwrap_or_default();
        if !identifiers
            .iter()
            .any(|i| names.iter().any(|n| n == i.value()))
        {
            return Err(Refusal::malformed(
                "\"replaces\" names a certificate that shares no identifier with this order",
            )
            .into());
        }
        let (aki, serial) = parse_cert_id(replaces)?;
        let cert_id = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(aki),
            URL_SAFE_NO_PAD.encode(serial.as_bytes())
        );
        let now = self.now();
        if let Some(order) = self.inner.storage.replacing_order(&cert_id, now).await? {
            return Err(Refusal::problem(
                ProblemType::AlreadyReplaced,
                format!(
                    "the certificate {replaces} is already being replaced by order {order}; order without \"replaces\" or finish that one"
                ),
            )
            .into());
        }
        let exempt = renewal_exempt(&cert, self.window(&cert, now), now);
        Ok(Replacement { cert_id, exempt })
    }

    /// An operator asks for certificates to be renewed early: their ARI window moves into the
    /// past, so ARI clients renew at their next poll. Returns how many were newly marked
    /// (unexpired, unrevoked, not marked before). Each marking is recorded as an admin action of
    /// `requester`, in its transaction.
    pub async fn renew_early(
        &self,
        which: &RenewEarlyTarget,
        requester: &Requester,
    ) -> Result<u64, Error> {
        let storage = &self.inner.storage;
        let now = self.now();
        let record = |serial: Option<&Serial>, account: Option<AccountId>| {
            let mut event = requester.event(
                AuditKind::AdminAction,
                format!(
                    "certificates marked for early renewal by {} (their ARI window moves into the past)",
                    requester.who()
                ),
            );
            event.serial = serial.cloned();
            event.account = account;
            event.detail = serde_json::json!({
                "action": "renew_early",
                "target": format!("{which:?}"),
            });
            event
        };
        let marked = match which {
            RenewEarlyTarget::Serial(serial) => {
                storage
                    .mark_renew_early(
                        &RenewEarly::Serial(serial.clone()),
                        now,
                        &record(Some(serial), None),
                    )
                    .await?
            }
            RenewEarlyTarget::Account(account) => {
                storage
                    .mark_renew_early(
                        &RenewEarly::Account(*account),
                        now,
                        &record(None, Some(*account)),
                    )
                    .await?
            }
            // The certificates holding the name, page by page (the names are the orders'), each
            // marked by its serial.
            RenewEarlyTarget::Name(name) => {
                let filter = CertificateFilter {
                    name: Some(name.clone()),
                    revoked: Some(false),
                    ..CertificateFilter::default()
                };
                let mut marked = 0;
                let mut before = None;
                loop {
                    let page = storage
                        .list_certificates(&filter, Page { before, limit: 500 })
                        .await?;
                    for cert in &page {
                        let mut event = record(Some(&cert.serial), Some(cert.account_id));
                        event.names = vec![name.value().to_lowercase()];
                        marked += storage
                            .mark_renew_early(&RenewEarly::Serial(cert.serial.clone()), now, &event)
                            .await?;
                    }
                    match page.last() {
                        Some(last) if page.len() == 500 => before = Some(last.id),
                        _ => break marked,
                    }
                }
            }
        };
        tracing::info!(?which, marked, "certificates marked for early renewal");
        metrics::counter!("certeasy_certificates_renew_early_total").increment(marked);
        Ok(marked)
    }
}

/// Whether a renewal of `cert` made at `now` skips the order-creation limit, as Let's Encrypt's
/// ARI renewals do: at or after the start of its window. A revoked certificate's window lies in
/// the past, but its replacement is never exempt: otherwise issue, revoke and replace would
/// issue without limit. (A certificate an operator marked for early renewal is exempt: the
/// operator asked for the renewals.)
fn renewal_exempt(cert: &Certificate, window: RenewalWindow, now: OffsetDateTime) -> bool {
    cert.revoked_at.is_none() && now >= window.start
}

/// A fixed number in [0, 1) from a serial (its last bytes, which are random): spreads windows
/// without state.
fn serial_fraction(serial: &Serial) -> f64 {
    let bytes = serial.as_bytes();
    let mut v: u32 = 0;
    for b in bytes.iter().rev().take(4) {
        v = (v << 8) | u32::from(*b);
    }
    f64::from(v) / (f64::from(u32::MAX) + 1.0)
}

#[cfg(test)]
mod tests {
    use acme_core::ids::CertificateId;
    use acme_core::ids::OrderId;
    use acme_core::status::RevocationReason;

    use super::*;

    fn certificate(revoked: bool, marked: bool) -> Certificate {
        let t0 = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        Certificate {
            id: CertificateId(1),
            account_id: AccountId(1),
            order_id: OrderId(1),
            serial: Serial::from_bytes(vec![1, 2, 3]),
            der: Vec::new(),
            chain_pem: String::new(),
            set_hash: String::new(),
            not_before: t0,
            not_after: t0 + Duration::days(90),
            issued_at: t0,
            revoked_at: revoked.then_some(t0 + Duration::days(1)),
            revocation_reason: revoked.then_some(RevocationReason::Unspecified),
            renew_early_at: marked.then_some(t0 + Duration::days(1)),
        }
    }

    #[test]
    fn a_revoked_certificates_replacement_is_never_exempt() {
        let t0 = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        let window = |start_day: i64| RenewalWindow {
            start: t0 + Duration::days(start_day),
            end: t0 + Duration::days(start_day + 5),
            retry_after: Duration::hours(6),
        };
        let now = t0 + Duration::days(2);
        // Due: the window started before now.
        assert!(renewal_exempt(&certificate(false, false), window(1), now));
        assert!(renewal_exempt(&certificate(false, true), window(1), now));
        // Revoked: its window lies in the past, but no exemption.
        assert!(!renewal_exempt(&certificate(true, false), window(1), now));
        assert!(!renewal_exempt(&certificate(true, true), window(1), now));
        // Not yet due.
        assert!(!renewal_exempt(&certificate(false, false), window(60), now));
    }

    #[test]
    fn cert_ids_parse_and_bad_ones_are_malformed() {
        let (aki, serial) = parse_cert_id("aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE").unwrap();
        assert_eq!(aki.len(), 20);
        assert_eq!(serial.to_hex(), "0087654321");
        for bad in [
            "",
            "abc",
            ".AIdlQyE",
            "aYhb.",
            "a*b.c",
            "aYhba4dGQEHhs3uEe6CuLN4ByNQ.!!",
        ] {
            assert!(parse_cert_id(bad).is_err(), "{bad:?}");
        }
    }
}
