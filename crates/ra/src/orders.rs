//! Orders (RFC 8555 §7.4): creation under the identifier policy, the validity window, pausing
//! and the limiter chain; finalization under the CSR policy.

use std::net::IpAddr;

use acme_core::identifier::Identifier;
use acme_core::identifier::IdentifierError;
use acme_core::identifier::IdentifierKind;
use acme_core::identifier::canonical_set_hash;
use acme_core::ids::AccountId;
use acme_core::ids::OrderId;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use acme_jose::Jwk;
use aws_lc_rs::rand::SecureRandom;
use aws_lc_rs::rand::SystemRandom;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use storage::model::Account;
use storage::model::Finalizing;
use storage::model::NewAuthz;
use storage::model::NewOrder;
use storage::model::Order;
use time::OffsetDateTime;

use crate::Ra;
use crate::error::Error;
use crate::error::Refusal;
use crate::error::StateRefusal;
use crate::in_flight::Key;
use crate::jobs::Finalized;
use crate::jobs::ISSUE_WAIT;
use crate::profiles;
use crate::profiles::OrderRules;
use crate::profiles::ProfileRequest;
use crate::rate_info::RateLimitInfo;

/// An identifier as the client sent it: a type and a value, not yet normalised or judged.
#[derive(Debug, Clone)]
pub struct RawIdentifier {
    pub kind: String,
    pub value: String,
}

/// A new-order request, as the front end parsed it.
#[derive(Debug, Clone)]
pub struct OrderRequest {
    pub identifiers: Vec<RawIdentifier>,
    pub not_before: Option<OffsetDateTime>,
    pub not_after: Option<OffsetDateTime>,
    /// The ARI identifier of the certificate this order replaces (RFC 9773 §5).
    pub replaces: Option<String>,
    /// The certificate profile asked for (draft-ietf-acme-profiles); `None` takes the default.
    pub profile: Option<String>,
}

/// A created order and the rate-limit policies that applied.
#[derive(Debug)]
pub struct CreatedOrder {
    pub order: Order,
    pub rate_limit: Option<RateLimitInfo>,
}

impl Ra {
    /// Creates an order for `account`: identifiers under the identifier policy, the profile's
    /// validation policy (`profiles::check`: the account allowed, the name limit, the identifier
    /// types; then its challenge types, lifetimes and authorization reuse), the validity
    /// window within the CA's limits, paused pairs refused, then the limiter chain (GCRA layers
    /// first, the database guards in the creating transaction). Tokens are refunded when the
    /// order is not created.
    pub async fn new_order(
        &self,
        account: &Account,
        request: OrderRequest,
    ) -> Result<CreatedOrder, Error> {
        let settings = &self.inner.settings;
        let now = self.now();
        let identifiers = self.check_identifiers(&request.identifiers)?;
        let profile = profiles::new_order(
            settings,
            account,
            ProfileRequest {
                profile: request.profile.as_deref(),
                identifiers: &identifiers,
                not_before: request.not_before,
                not_after: request.not_after,
            },
            now,
        )
        .map_err(Refusal::Problem)?;
        let rules = OrderRules::of(profile, settings);
        let profile_challenge_types = profile.validation().challenge_types.clone();
        // Decided before anything is charged: an identifier left without a challenge type is
        // refused as the profile's other checks are.
        let offered = identifiers
            .iter()
            .map(|id| {
                let offered = offered_challenges_for(id, settings.optional_challenges);
                profiles::challenges(profile, id, offered)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(Refusal::Problem)?;
        let not_after = self
            .check_key_policy(
                account,
                &identifiers,
                profile,
                (request.not_before, request.not_after),
                now,
            )
            .await?;
        let profile = profile.name().to_owned();
        self.refuse_paused(account.id, &identifiers, now).await?;
        let replacement = match &request.replaces {
            Some(cert_id) => Some(
                self.check_replaces(account.id, &identifiers, cert_id)
                    .await?,
            ),
            None => None,
        };
        // A due renewal ARI asked for (of a certificate not revoked) is exempt from the
        // order-creation limit, as Let's Encrypt does; never from the duplicate-certificate
        // limit (`create_with_guards`).
        let exempt = replacement.as_ref().is_some_and(|r| r.exempt);
        let mut spent = self.charge_order(account.id, &identifiers, exempt).await?;

        let mut authorizations = Vec::with_capacity(identifiers.len());
        for (id, offered) in identifiers.iter().zip(offered) {
            let challenges = offered
                .into_iter()
                .map(|kind| Ok((kind, random_token()?)))
                .collect::<Result<Vec<_>, Error>>()?;
            authorizations.push(NewAuthz {
                identifier: id.clone(),
                expires_at: now + rules.pending_authorization_lifetime,
                challenges,
            });
        }
        let new = NewOrder {
            account_id: account.id,
            set_hash: canonical_set_hash(&identifiers),
            identifiers,
            not_before: request.not_before,
            not_after,
            expires_at: now + rules.order_lifetime,
            authorizations,
            reuse_valid_until: settings
                .reuse_valid_authorizations
                .then(|| now + crate::settings::reuse_margin(rules.valid_authorization_lifetime)),
            replaces: replacement.map(|r| r.cert_id),
            profile,
            valid_authz_lifetime: Some(rules.valid_authorization_lifetime),
            reuse_challenge_types: profile_challenge_types,
        };
        let order = match self.create_with_guards(new, now).await {
            Ok((order, db_policies)) => {
                if let Some(info) = &mut spent.info {
                    for item in db_policies {
                        info.push(item);
                    }
                }
                order
            }
            Err(e) => {
                self.refund(&spent).await;
                return Err(e);
            }
        };
        tracing::info!(account_id = %account.id, order_id = %order.id, identifiers = order.identifiers.len(), "order created");
        metrics::counter!("certeasy_orders_created_total").increment(1);
        Ok(CreatedOrder {
            order,
            rate_limit: spent.info,
        })
    }

    /// Ids of the account's orders, ascending, strictly after `after`, at most `limit`.
    pub async fn orders_of(
        &self,
        account: AccountId,
        after: Option<OrderId>,
        limit: u32,
    ) -> Result<Vec<OrderId>, Error> {
        Ok(self
            .inner
            .storage
            .account_orders(account, after, limit)
            .await?)
    }

    /// An order of this account; other accounts' orders are indistinguishable from missing ones.
    pub async fn order_of(&self, account: AccountId, id: OrderId) -> Result<Order, Error> {
        match self.inner.storage.order(id, self.now()).await? {
            Some(order) if order.account_id == account => Ok(order),
            _ => Err(Refusal::NotFound("order").into()),
        }
    }

    /// Finalizes `order` of `account` (found with [`Ra::order_of`]) with `csr_b64url`, the CSR
    /// as the client sent it: the order must be ready, the CSR must match it and must not carry
    /// an account key. The certificate is issued at once when a worker place is free (the
    /// answer then says `valid`, or `invalid` with its error), through the queue otherwise
    /// (`processing`). `client_ip`, where the request came from, is stored with the order
    /// ([`Order::finalize_client_ip`]): the issuance's audit record names it, whichever worker
    /// signs and however long after.
    pub async fn finalize(
        &self,
        account: &Account,
        mut order: Order,
        csr_b64url: &str,
        client_ip: IpAddr,
    ) -> Result<Order, Error> {
        if order.status != OrderStatus::Ready {
            return Err(StateRefusal::OrderNotReady(order.status).into());
        }
        let csr = URL_SAFE_NO_PAD
            .decode(csr_b64url.trim_end_matches('='))
            .map_err(|_| {
                Refusal::problem(ProblemType::BadCsr, "\"csr\" is not base64url-encoded DER")
            })?;
        let checked = issuance::check_csr(&csr, &order.identifiers).map_err(|e| match e {
            issuance::Error::BadCsr(detail) => {
                Error::from(Refusal::problem(ProblemType::BadCsr, detail))
            }
            other => Error::internal("checking the CSR", &other),
        })?;
        profiles::finalize(
            &self.inner.settings.profiles,
            order.profile.as_deref(),
            &checked,
        )
        .map_err(Refusal::Problem)?;
        self.check_csr_key(checked.spki_der()).await?;
        self.refuse_account_key(account, checked.spki_der()).await?;
        // Until the work's first write the database still says ready, so the order's key in
        // `ra::in_flight` is what keeps a second request of this instance from signing again: it
        // waits for the first one's write, and the durable path then finds the order no longer
        // ready. A request that read the order just before the first one wrote and let go has
        // its reservation refused as not ready, before anything is signed.
        let held = match self.inner.in_flight.enter(Key::Order(order.id)) {
            Ok(held) => held,
            Err(busy) => {
                busy.wait(ISSUE_WAIT * 2).await;
                return self
                    .finalize_queued(account, order.id, &csr, client_ip)
                    .await;
            }
        };
        let jobs = &self.inner.jobs;
        let Some(slot) = jobs.try_slot() else {
            let queued = self
                .finalize_queued(account, order.id, &csr, client_ip)
                .await;
            drop(held);
            return queued;
        };
        let (account_id, order_id) = (account.id, order.id);
        // The job runner stores it with the order as `finalize_queued` does (see
        // `JobRunner::finalize_at_once`).
        order.finalize_client_ip = Some(client_ip);
        let finalized = jobs
            .finalize_at_once(slot, order, csr, checked, ISSUE_WAIT, held)
            .await
            .map_err(|_| {
                Error::internal("finalization", &"the finalization ended without an answer")
            })??;
        match finalized {
            Finalized::Order(order) => {
                tracing::info!(%account_id, %order_id, status = order.status.as_str(), "finalization accepted");
                Ok(*order)
            }
            Finalized::AccountNotValid(status) => Err(Refusal::AccountNotValid(status).into()),
        }
    }

    /// The durable path: ready → processing with a job for the queue's workers.
    async fn finalize_queued(
        &self,
        account: &Account,
        id: OrderId,
        csr: &[u8],
        client_ip: IpAddr,
    ) -> Result<Order, Error> {
        let processing = match self
            .inner
            .storage
            .begin_finalize(id, csr, Some(client_ip), self.now())
            .await?
        {
            Finalizing::Begun { order, .. } => *order,
            Finalizing::NotReady(status) => {
                return Err(StateRefusal::OrderNotReady(status).into());
            }
        };
        self.inner.jobs.wake();
        tracing::info!(account_id = %account.id, order_id = %id, "finalization accepted (queued)");
        Ok(processing)
    }

    /// Parses, normalises and judges the identifiers of an order; every refused identifier is
    /// a subproblem. Returns them sorted and without duplicates.
    pub(crate) fn check_identifiers(
        &self,
        raw: &[RawIdentifier],
    ) -> Result<Vec<Identifier>, Error> {
        let settings = &self.inner.settings;
        if raw.is_empty() {
            return Err(Refusal::malformed("the order has no identifiers").into());
        }
        if raw.len() > settings.max_identifiers_per_order {
            return Err(Refusal::problem(
                ProblemType::RejectedIdentifier,
                format!(
                    "an order may hold at most {} identifiers",
                    settings.max_identifiers_per_order
                ),
            )
            .into());
        }
        let mut identifiers = Vec::new();
        let mut problems = Vec::new();
        for r in raw {
            let parsed = Identifier::parse(&r.kind, &r.value).and_then(|id| {
                settings.identifier_policy.check(&id)?;
                Ok(id)
            });
            match parsed {
                Ok(id) => identifiers.push(id),
                Err(e) => {
                    let kind = match e {
                        IdentifierError::UnsupportedType(_) => ProblemType::UnsupportedIdentifier,
                        IdentifierError::Forbidden(_)
                        | IdentifierError::InvalidDns { .. }
                        | IdentifierError::InvalidIp(_) => ProblemType::RejectedIdentifier,
                    };
                    let mut p = Problem::new(kind, e.to_string());
                    if let Ok(kind) = r.kind.parse::<IdentifierKind>() {
                        // Show the identifier as sent when it could not be normalised.
                        p.detail = format!("{}: {}", kind.as_str(), p.detail);
                    }
                    problems.push(p);
                }
            }
        }
        if let Some(problem) = Problem::combine(
            problems,
            "Several identifiers of this order were refused; see subproblems",
        ) {
            return Err(Refusal::Problem(problem).into());
        }
        identifiers.sort();
        identifiers.dedup();
        Ok(identifiers)
    }

    /// A certificate must not carry the key of any ACME account, the requester's or another's:
    /// the key would then both control an account and be presented by a TLS server (RFC 8555
    /// §11.1 keeps the two apart). Accounts are found by the RFC 7638 thumbprint of the CSR
    /// key, the same unique key under which they are stored, so one indexed lookup covers
    /// deactivated accounts too.
    async fn refuse_account_key(&self, account: &Account, spki_der: &[u8]) -> Result<(), Error> {
        let csr_key = Jwk::from_spki_der(spki_der).map_err(|e| {
            Refusal::problem(
                ProblemType::BadCsr,
                format!("the CSR's public key is not supported: {e}"),
            )
        })?;
        let thumbprint = csr_key.thumbprint();
        let holder = if thumbprint == account.thumbprint {
            Some(account.id)
        } else {
            self.inner
                .storage
                .account_by_thumbprint(&thumbprint)
                .await?
                .map(|a| a.id)
        };
        match holder {
            None => Ok(()),
            Some(id) if id == account.id => Err(Refusal::problem(
                ProblemType::BadCsr,
                "the CSR's public key is this account's key; use a separate key for the certificate",
            )
            .into()),
            Some(_) => Err(Refusal::problem(
                ProblemType::BadCsr,
                "the CSR's public key is the key of an ACME account; use a separate key for the certificate",
            )
            .into()),
        }
    }
}

/// The validity window of an order's certificate, fixed when it is signed at `now`, never when
/// the order was made: a requested notBefore that has fallen more than `backdate` behind is
/// moved up to `now - backdate` (an order finalized days after it asked for notBefore = then
/// gets no certificate backdated by days), and a requested notAfter that has passed refuses the
/// issuance with `malformed`, the type a window refused at new-order gets (RFC 8555 has no
/// type of its own for it; the order cannot be fixed, only replaced). Without a requested
/// window the start is `now - backdate` and the end the profile's validity after it.
pub fn signing_window(
    profile: &issuance::Profile,
    not_before: Option<OffsetDateTime>,
    not_after: Option<OffsetDateTime>,
    now: OffsetDateTime,
    backdate: time::Duration,
) -> Result<(OffsetDateTime, OffsetDateTime), Problem> {
    profiles::signing_window(profile, not_before, not_after, now, backdate)
}

fn offered_challenges(id: &Identifier) -> Vec<ChallengeType> {
    match id.kind() {
        IdentifierKind::Dns if id.is_wildcard() => vec![ChallengeType::Dns01],
        IdentifierKind::Dns => vec![
            ChallengeType::Http01,
            ChallengeType::Dns01,
            ChallengeType::TlsAlpn01,
        ],
        IdentifierKind::Ip => vec![ChallengeType::Http01, ChallengeType::TlsAlpn01],
    }
}

/// [`offered_challenges`] and the draft types `optional` enables, which validate DNS names only
/// (a wildcard at its base name, as dns-01).
pub(crate) fn offered_challenges_for(
    id: &Identifier,
    optional: crate::settings::OptionalChallenges,
) -> Vec<ChallengeType> {
    let mut offered = offered_challenges(id);
    if id.kind() == IdentifierKind::Dns {
        if optional.dns_account_01 {
            offered.push(ChallengeType::DnsAccount01);
        }
        if optional.dns_persist_01 {
            offered.push(ChallengeType::DnsPersist01);
        }
    }
    offered
}

pub(crate) fn random_token() -> Result<String, Error> {
    let mut bytes = [0_u8; 32];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::internal("random token", &"the system RNG failed"))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::OptionalChallenges;

    #[test]
    fn draft_challenge_types_are_offered_for_dns_names_only_when_enabled() {
        let name = Identifier::dns("a.example.com").unwrap();
        let wildcard = Identifier::dns("*.example.com").unwrap();
        let ip = Identifier::ip("192.0.2.1").unwrap();
        let off = OptionalChallenges::default();
        for id in [&name, &wildcard, &ip] {
            assert_eq!(offered_challenges_for(id, off), offered_challenges(id));
        }
        let on = OptionalChallenges {
            dns_account_01: true,
            dns_persist_01: true,
        };
        for id in [&name, &wildcard] {
            let offered = offered_challenges_for(id, on);
            assert!(
                offered.contains(&ChallengeType::DnsAccount01),
                "{offered:?}"
            );
            assert!(
                offered.contains(&ChallengeType::DnsPersist01),
                "{offered:?}"
            );
        }
        assert_eq!(
            offered_challenges_for(&wildcard, on),
            [
                ChallengeType::Dns01,
                ChallengeType::DnsAccount01,
                ChallengeType::DnsPersist01
            ]
        );
        assert_eq!(offered_challenges_for(&ip, on), offered_challenges(&ip));
    }
}
