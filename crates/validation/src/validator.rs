//! The entry point: one validation attempt for one challenge.
//!
//! One attempt runs under one deadline, `validation.timeout`, covering DNS, every address,
//! redirects and CAA, and returns within [`Validator::worst_case_attempt`] (the timeout
//! plus 2 s), which the workers' backstop outlasts. At most two addresses are tried per name (the
//! first IPv6 and the first IPv4 one), sharing half the timeout for connecting, so a silent first
//! address leaves time for the second. Every address connected to, redirects included, is first
//! judged by `address_policy.rs`; the failure's class (propagation, transient, definite) is
//! decided where the failure is seen (`failure.rs`), never from problem text; and what a target
//! served is quoted only as a short escaped prefix (`quote.rs`).

use std::sync::Arc;

use acme_core::identifier::{Identifier, IdentifierKind};
use acme_core::problem::{Problem, ProblemType};
use acme_core::status::ChallengeType;

use crate::address_policy::AddressPolicy;
use crate::context::CheckContext;
use crate::error::Error;
use crate::evidence::Evidence;
use crate::failure::Failure;
use crate::resolver::DnsClient;
use crate::settings::ValidationSettings;
use crate::{caa, dns_account01, dns_persist01, dns01, http01, tls_alpn01};

/// Most issuer domain names dns-persist-01 may name (draft-ietf-acme-dns-persist-02 §3.1).
pub const MAX_ISSUER_DOMAIN_NAMES: usize = 10;

/// The account an attempt is made for, as the DNS-scoped challenges need it: dns-account-01
/// derives its label from the URI, dns-persist-01 recomputes the hashed account URI over every
/// key the account has had.
#[derive(Debug, Clone, Copy)]
pub struct AttemptAccount<'a> {
    /// The account URL exactly as the server hands it out (also what CAA `accounturi` names).
    pub uri: &'a str,
    /// RFC 7638 thumbprint (base64url) of the account's current key.
    pub thumbprint: &'a str,
    /// Thumbprints of the keys the account had before, newest first (dns-persist-01 records
    /// made with them keep validating after a key change, draft §4.2).
    pub earlier_thumbprints: &'a [String],
    /// The time of the attempt in seconds since the epoch, from the caller's clock
    /// (dns-persist-01's `persistUntil`).
    pub now_unix: i64,
}

/// Lower case, no trailing dot, and a domain name: what the drafts and RFC 8659 compare.
fn normalised_names(names: &[String], what: &str) -> Result<Vec<String>, Error> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let normalised = name.trim().trim_end_matches('.').to_ascii_lowercase();
        if normalised.is_empty()
            || normalised.len() > 253
            || normalised.contains(|c: char| c.is_whitespace() || c == ';')
        {
            return Err(Error::Settings(format!(
                "{what} {name:?} is not a domain name"
            )));
        }
        out.push(normalised);
    }
    Ok(out)
}

/// Performs validation attempts. Cheap to clone; clones share the resolver and TLS configuration.
#[derive(Debug, Clone)]
pub struct Validator {
    context: Arc<CheckContext>,
}

impl Validator {
    /// Builds a validator. Fails only on unusable settings or DNS/TLS setup.
    pub fn new(settings: ValidationSettings) -> Result<Self, Error> {
        if settings.timeout.is_zero() {
            return Err(Error::Settings(
                "timeout must be greater than zero".to_owned(),
            ));
        }
        if settings.max_body_bytes == 0 {
            return Err(Error::Settings(
                "max_body_bytes must be greater than zero".to_owned(),
            ));
        }
        if settings.http_port == 0 || settings.tls_alpn_port == 0 {
            return Err(Error::Settings(
                "http_port and tls_alpn_port must not be 0".to_owned(),
            ));
        }
        let caa_identities = normalised_names(&settings.caa_identities, "CAA identity")?;
        let dns_persist_issuers = normalised_names(
            &settings.dns_persist_issuer_domain_names,
            "dns-persist-01 issuer domain name",
        )?;
        if dns_persist_issuers.len() > MAX_ISSUER_DOMAIN_NAMES {
            return Err(Error::Settings(format!(
                "at most {MAX_ISSUER_DOMAIN_NAMES} dns-persist-01 issuer domain names may be given"
            )));
        }
        let policy = Arc::new(AddressPolicy::new(
            settings.allow_loopback,
            settings.deny_target_cidrs.clone(),
        ));
        let dns = DnsClient::new(&settings, Arc::clone(&policy))?;
        let tls = tls_alpn01::client_config()?;
        Ok(Self {
            context: Arc::new(CheckContext {
                settings,
                policy,
                dns,
                tls,
                caa_identities,
                dns_persist_issuers,
            }),
        })
    }

    /// The longest one [`Validator::validate`] call can take
    /// ([`ValidationSettings::worst_case_attempt`] of this validator's settings): a job that runs
    /// an attempt must hold its lease at least this long.
    pub fn worst_case_attempt(&self) -> std::time::Duration {
        self.context.settings.worst_case_attempt()
    }

    /// Performs one validation attempt for `account` (its URI is what the server hands out as
    /// the account's URL, compared exactly with CAA `accounturi` parameters, RFC 8657 §3);
    /// [`Validator::attempt`] without the classification.
    pub async fn validate(
        &self,
        identifier: &Identifier,
        challenge: ChallengeType,
        token: &str,
        key_authorization: &str,
        account: &AttemptAccount<'_>,
    ) -> Result<(), Problem> {
        self.attempt(identifier, challenge, token, key_authorization, account)
            .await
            .map(drop)
            .map_err(|failure| failure.problem)
    }

    /// Performs one validation attempt for `account`, saying of a failure whether it may be repeated (a dns-01 record still propagating), may pass only later
    /// (transient) or is definite (see `failure.rs`).
    ///
    /// `Ok` when the challenge is satisfied and, for DNS identifiers with CAA identities
    /// configured, CAA permits issuance to this account by this challenge type. Otherwise a
    /// problem whose type says where it failed (`dns`, `connection`, `tls`, `incorrectResponse`,
    /// `unauthorized`, `caa`, `malformed`, `rejectedIdentifier`) and whose detail tells the
    /// subscriber what was found. The [`Evidence`] of a success says what was reached and seen,
    /// and which CAA records allowed issuance.
    ///
    /// For a wildcard identifier the base name is validated, and only dns-01 is accepted.
    ///
    /// The whole attempt (every query, address and redirect, and CAA) is bounded by
    /// `settings.timeout`; past it the attempt is dropped and a `connection` problem returned, so
    /// a call never takes longer than [`ValidationSettings::worst_case_attempt`]. That time
    /// limit is a transient failure.
    pub async fn attempt(
        &self,
        identifier: &Identifier,
        challenge: ChallengeType,
        token: &str,
        key_authorization: &str,
        account: &AttemptAccount<'_>,
    ) -> Result<Evidence, Failure> {
        let account_uri = account.uri;
        check_applicable(identifier, challenge)?;
        if !token_is_valid(token) {
            return Err(Problem::new(
                ProblemType::Malformed,
                "the challenge token must be non-empty base64url text",
            )
            .into());
        }
        let context = &*self.context;
        let challenge_check = async {
            let seen = match challenge {
                ChallengeType::Http01 => {
                    http01::validate(context, identifier, token, key_authorization).await
                }
                ChallengeType::Dns01 => {
                    dns01::validate(context, identifier, key_authorization).await
                }
                ChallengeType::TlsAlpn01 => {
                    tls_alpn01::validate(context, identifier, key_authorization).await
                }
                ChallengeType::DnsAccount01 => {
                    dns_account01::validate(context, identifier, key_authorization, account_uri)
                        .await
                }
                ChallengeType::DnsPersist01 => {
                    return persist(context, identifier, account).await;
                }
            };
            seen.map(|seen| (seen, None))
        };
        // CAA failures are definite, lookup failures included: RFC 8659 makes a CA refuse when
        // CAA cannot be checked, and a refusal is not worth repeating within the attempt budget.
        let caa_check = async {
            caa_permits(context, identifier, challenge, account_uri)
                .await
                .map_err(Failure::definite)
        };
        // Both run concurrently; a failed challenge is reported first because it is what the
        // subscriber is working on, and as soon as it fails: a slow CAA lookup must not delay it.
        let both = async {
            tokio::pin!(challenge_check, caa_check);
            let mut caa_result = None;
            let challenge_result = loop {
                tokio::select! {
                    result = &mut challenge_check => break result,
                    result = &mut caa_check, if caa_result.is_none() => caa_result = Some(result),
                }
            };
            let (seen, persist_until) = challenge_result?;
            let caa = match caa_result {
                Some(result) => result?,
                None => caa_check.await?,
            };
            Ok(Evidence {
                addresses: seen.addresses,
                observed: seen.observed,
                caa,
                persist_until,
            })
        };
        let limit = context.settings.timeout;
        match tokio::time::timeout(limit, both).await {
            Ok(result) => result,
            Err(_) => Err(Failure::transient(Problem::new(
                ProblemType::Connection,
                format!(
                    "The {} validation attempt for {} exceeded the time limit of {}s and was abandoned",
                    challenge.as_str(),
                    identifier.value(),
                    limit.as_secs_f64()
                ),
            ))),
        }
    }

    /// Whether this validator checks CAA at all (`caa_identities` is not empty). When it does
    /// not, [`Validator::check_caa`] always permits.
    pub fn checks_caa(&self) -> bool {
        !self.context.caa_identities.is_empty()
    }

    /// Checks CAA alone, as at issuance when the validation is older than CAA may be trusted
    /// (the CA/Browser Forum's 8 hours): `Ok(())` when the CAA records of `identifier` permit
    /// this CA to issue to the account `account_uri` whose authorization was validated by
    /// `method` (RFC 8659, RFC 8657), or when there is nothing to check (CAA checking off, an
    /// IP identifier). Otherwise a `caa` problem saying which record refuses and why. A lookup
    /// that fails, or does not finish within `settings.timeout`, refuses as well (RFC 8659 §3:
    /// issuance needs the absence of records established).
    pub async fn check_caa(
        &self,
        identifier: &Identifier,
        method: ChallengeType,
        account_uri: &str,
    ) -> Result<(), Problem> {
        let context = &*self.context;
        let limit = context.settings.timeout;
        match tokio::time::timeout(limit, caa_permits(context, identifier, method, account_uri))
            .await
        {
            Ok(result) => result.map(drop),
            Err(_) => Err(Problem::new(
                ProblemType::Caa,
                format!(
                    "The CAA check for {} exceeded the time limit of {}s; issuance is refused until CAA can be checked",
                    identifier.value(),
                    limit.as_secs_f64()
                ),
            )),
        }
    }
}

/// CAA for a DNS identifier when CAA identities are configured; nothing to check otherwise.
/// `Ok` with what allowed issuance, for the evidence.
async fn caa_permits(
    context: &CheckContext,
    identifier: &Identifier,
    method: ChallengeType,
    account_uri: &str,
) -> Result<Vec<String>, Problem> {
    if identifier.kind() != IdentifierKind::Dns {
        return Ok(vec![
            "no CAA check: CAA applies to DNS names, not IP addresses (RFC 8738 §7)".to_owned(),
        ]);
    }
    if context.caa_identities.is_empty() {
        return Ok(vec![
            "no CAA check: no CAA identities are configured (acme.caa-identities)".to_owned(),
        ]);
    }
    let request = caa::Request {
        identifier,
        method,
        account_uri,
    };
    caa::check(&context.dns, &context.caa_identities, request).await
}

/// dns-persist-01 with this validator's issuer domain names and the account's keys, current
/// first.
async fn persist(
    context: &CheckContext,
    identifier: &Identifier,
    account: &AttemptAccount<'_>,
) -> Result<(crate::evidence::Seen, Option<i64>), Failure> {
    if context.dns_persist_issuers.is_empty() {
        return Err(Failure::definite(Problem::new(
            ProblemType::Malformed,
            "dns-persist-01 is not offered by this CA (no issuer domain names are configured)",
        )));
    }
    let mut thumbprints = Vec::with_capacity(1 + account.earlier_thumbprints.len());
    thumbprints.push(account.thumbprint.to_owned());
    thumbprints.extend(
        account
            .earlier_thumbprints
            .iter()
            .filter(|t| t.as_str() != account.thumbprint)
            .cloned(),
    );
    let expected = dns_persist01::Expected {
        issuer_domain_names: &context.dns_persist_issuers,
        account_hash_prefix: &context.settings.account_hash_prefix,
        account_uri: account.uri,
        thumbprints: &thumbprints,
        now_unix: account.now_unix,
    };
    let (seen, accepted) = dns_persist01::validate(context, identifier, &expected).await?;
    Ok((seen, accepted.persist_until))
}

/// Whether `challenge` validates through DNS records at the name (and so may validate a
/// wildcard's base name, and never an IP address).
fn is_dns_based(challenge: ChallengeType) -> bool {
    matches!(
        challenge,
        ChallengeType::Dns01 | ChallengeType::DnsAccount01 | ChallengeType::DnsPersist01
    )
}

/// Refuses combinations the RFCs exclude before any network traffic.
fn check_applicable(identifier: &Identifier, challenge: ChallengeType) -> Result<(), Problem> {
    if identifier.is_wildcard() && !is_dns_based(challenge) {
        return Err(Problem::new(
            ProblemType::Malformed,
            format!(
                "{} cannot validate the wildcard identifier {}; wildcards can only be validated with dns-01, dns-account-01 or dns-persist-01",
                challenge.as_str(),
                identifier.value()
            ),
        ));
    }
    if identifier.kind() == IdentifierKind::Ip && is_dns_based(challenge) {
        return Err(Problem::new(
            ProblemType::Malformed,
            format!(
                "{} cannot validate the IP identifier {}; use http-01 or tls-alpn-01 (RFC 8738)",
                challenge.as_str(),
                identifier.value()
            ),
        ));
    }
    Ok(())
}

/// Tokens are base64url (RFC 8555 §8.1); anything else could change the URL path.
fn token_is_valid(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_need_dns01_and_ips_refuse_it() {
        let wildcard = Identifier::dns("*.example.com").unwrap();
        for challenge in [
            ChallengeType::Dns01,
            ChallengeType::DnsAccount01,
            ChallengeType::DnsPersist01,
        ] {
            assert!(check_applicable(&wildcard, challenge).is_ok());
            let ip = Identifier::ip("192.0.2.1").unwrap();
            assert!(check_applicable(&ip, challenge).is_err());
        }
        for challenge in [ChallengeType::Http01, ChallengeType::TlsAlpn01] {
            let problem = check_applicable(&wildcard, challenge).unwrap_err();
            assert_eq!(problem.kind, ProblemType::Malformed);
            assert!(problem.detail.contains("dns-01"), "{}", problem.detail);
        }
        let ip = Identifier::ip("192.0.2.1").unwrap();
        assert_eq!(
            check_applicable(&ip, ChallengeType::Dns01)
                .unwrap_err()
                .kind,
            ProblemType::Malformed
        );
        assert!(check_applicable(&ip, ChallengeType::Http01).is_ok());
    }

    /// Workers spawn validation attempts on a multi-threaded runtime.
    #[test]
    fn validator_and_its_futures_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>(_: &T) {}
        fn assert_send<T: Send>(_: &T) {}
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let settings = ValidationSettings {
            dns_servers: vec!["127.0.0.1:53".parse().unwrap()],
            ..ValidationSettings::default()
        };
        let validator = Validator::new(settings).unwrap();
        assert_send_sync(&validator);
        let id = Identifier::dns("a.example.com").unwrap();
        let account = AttemptAccount {
            uri: "https://ca.test/acme/acct/1",
            thumbprint: "k",
            earlier_thumbprints: &[],
            now_unix: 0,
        };
        let future = validator.validate(&id, ChallengeType::Http01, "t", "t.k", &account);
        assert_send(&future);
        let future = validator.check_caa(&id, ChallengeType::Http01, "https://ca.test/acme/acct/1");
        assert_send(&future);
    }

    #[test]
    fn tokens_must_be_base64url() {
        assert!(token_is_valid("abc-DEF_123"));
        for bad in ["", "a/b", "../x", "a b", "a?b", "a.b"] {
            assert!(!token_is_valid(bad), "{bad:?}");
        }
    }

    #[test]
    fn settings_are_checked() {
        let zero = ValidationSettings {
            timeout: std::time::Duration::ZERO,
            ..ValidationSettings::default()
        };
        assert!(matches!(Validator::new(zero), Err(Error::Settings(_))));
        let bad_caa = ValidationSettings {
            caa_identities: vec!["ca.example; x=y".to_owned()],
            dns_servers: vec!["127.0.0.1:53".parse().unwrap()],
            ..ValidationSettings::default()
        };
        assert!(matches!(Validator::new(bad_caa), Err(Error::Settings(_))));
    }
}
