//! dns-persist-01 (draft-ietf-acme-dns-persist-02): a standing TXT record at
//! `_validation-persist.<name>` that names this CA (one of its issuer domain names) and the
//! account (a hashed account URI), so an account validates the name again and again without a
//! DNS change per order.
//!
//! The record's RDATA (its character-strings joined) is an RFC 8659 §4.2 `issue-value`:
//! `issuer-domain-name; tag=value; ...`, with spaces and tabs allowed around every `;` and `=`.
//! How it is judged, in the draft's words where it has them:
//!
//! - Records whose issuer domain name is not one of ours (compared in lower case, §3.1), or
//!   that have none, are ignored (§4.3.2); several records may stand side by side, one per CA or
//!   account, and one that satisfies everything is enough.
//! - A record of ours must be well formed: the grammar, a known parameter at most once (tags are
//!   compared without regard to case, so `PersistUntil` cannot slip past as an unknown one), a
//!   mandatory `accounturi`, a `persistUntil` that is a base-10 integer. Otherwise `malformed`
//!   (§9.3.1). Parameters with tags we do not know are ignored (§4.1 item 1).
//! - `accounturi` is `<accountHashPrefix>sha-256/<base64url(SHA-256(len || domain || thumbprint
//!   || account URL))>` (§4.1 item 3), compared by simple string comparison. Not under our
//!   prefix, another algorithm, or not 43 base64url characters: `malformed`. Well formed but for
//!   no key of the requesting account: `unauthorized`. The CA recomputes it over the account's
//!   current key first, then every earlier key newest first (records made before a key change
//!   keep working, §4.2), each with the validated name and with the `*` opt-out form. A
//!   deactivated account never gets here: its requests are refused before a challenge starts.
//! - `policy=wildcard` (value compared without regard to case; any other value counts as none) is
//!   required for a wildcard identifier, whose record sits at its base name (§5). Subdomains are
//!   not validated from a parent's record (the draft's MAY of §6 is not taken): a name's record
//!   is looked up at that name only.
//! - `persistUntil=T`: after T the record is `unauthorized` (§4.1 item 5); the caller caps the
//!   authorization's expiry at T.
//!
//! Failure classes (`failure.rs`): no record at all, or none naming this CA, may still be
//! propagating and is retried like dns-01; a record of ours that is malformed or refuses is the
//! verdict at once.

use acme_core::identifier::Identifier;
use acme_core::problem::{Problem, ProblemType};
use aws_lc_rs::digest;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hickory_resolver::proto::rr::{RData, RecordType};

use crate::context::CheckContext;
use crate::evidence::Seen;
use crate::failure::Failure;
use crate::quote::quote_prefix;
use crate::resolver::Answer;

/// The DNS label the record sits under (draft §2).
pub(crate) const LABEL: &str = "_validation-persist";

/// The one hash algorithm accepted, as the RFC 6920 Hash Name String names it (§4.1: mandatory).
pub(crate) const HASH_ALGORITHM: &str = "sha-256";

/// How many refusing records are described in a problem detail.
const DESCRIBED_RECORDS: usize = 3;

/// Who asks, and what a record must name to answer for them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected<'a> {
    /// This CA's issuer domain names, lower case without a trailing dot.
    pub(crate) issuer_domain_names: &'a [String],
    /// This CA's `accountHashPrefix`.
    pub(crate) account_hash_prefix: &'a str,
    /// The requesting account's URL, exactly as the server hands it out.
    pub(crate) account_uri: &'a str,
    /// The account's key thumbprints (RFC 7638, base64url): the current one first, then the
    /// earlier ones newest first.
    pub(crate) thumbprints: &'a [String],
    /// The time of the attempt, in seconds since the epoch, for `persistUntil`.
    pub(crate) now_unix: i64,
}

/// A record that satisfied everything, and what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Accepted {
    /// The record's issuer domain name (lower case).
    pub(crate) issuer: String,
    /// `persistUntil`, when the record has one.
    pub(crate) persist_until: Option<i64>,
    /// Whether `policy=wildcard` was present.
    pub(crate) wildcard: bool,
    /// Which thumbprint matched: 0 the current key, 1 the one before, ...
    pub(crate) key_index: usize,
    /// Whether the hash was computed with the `*` opt-out instead of the name.
    pub(crate) domain_omitted: bool,
}

/// Why a record of ours does not validate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The record breaks the syntax the draft requires (§9.3.1: `malformed`).
    Malformed(String),
    /// Well formed, but not for this account, expired, or not for wildcards (`unauthorized`).
    Unauthorized(String),
}

/// A record's issue-value, split but not yet judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IssueValue<'a> {
    /// The issuer domain name as written (empty when the record has none).
    pub(crate) issuer: &'a str,
    /// `(tag, value)` pairs in order.
    pub(crate) parameters: Vec<(&'a str, &'a str)>,
}

fn is_wsp(c: char) -> bool {
    c == ' ' || c == '\t'
}

fn trim_wsp(s: &str) -> &str {
    s.trim_matches(is_wsp)
}

/// RFC 8659 `label`: `(ALPHA / DIGIT) *( *("-") (ALPHA / DIGIT))`; also the shape of a `tag`.
fn is_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        }
        _ => false,
    }
}

/// RFC 8659 `issuer-domain-name`: labels separated by single dots.
fn is_issuer_domain_name(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(is_label)
}

/// RFC 8659 `value`: `*(%x21-3A / %x3C-7E)`, printable ASCII without `;` or space.
fn is_value(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, 0x21..=0x3a | 0x3c..=0x7e))
}

/// The issuer domain name a record names, lower-cased, when it names one well formed; `None`
/// for a record that is none of our business (§4.3.2 ignores it).
pub(crate) fn issuer_of(rdata: &str) -> Option<String> {
    let first = rdata.split(';').next().unwrap_or_default();
    let issuer = trim_wsp(first);
    is_issuer_domain_name(issuer).then(|| issuer.to_ascii_lowercase())
}

/// Splits `rdata` by the RFC 8659 §4.2 `issue-value` grammar, or says what breaks it.
pub(crate) fn parse(rdata: &str) -> Result<IssueValue<'_>, String> {
    let mut segments = rdata.split(';');
    let issuer = trim_wsp(segments.next().unwrap_or_default());
    if !issuer.is_empty() && !is_issuer_domain_name(issuer) {
        return Err(format!(
            "the issuer domain name {} is not a domain name",
            quote_prefix(issuer.as_bytes())
        ));
    }
    let rest: Vec<&str> = segments.collect();
    // `issuer;` with nothing after the semicolon is allowed by the grammar (`[parameters]`);
    // an empty parameter between or after others is not.
    if rest.len() == 1 && trim_wsp(rest[0]).is_empty() {
        return Ok(IssueValue {
            issuer,
            parameters: Vec::new(),
        });
    }
    let mut parameters = Vec::with_capacity(rest.len());
    for segment in rest {
        let segment = trim_wsp(segment);
        if segment.is_empty() {
            return Err("an empty parameter (two semicolons, or one at the end)".to_owned());
        }
        let Some((tag, value)) = segment.split_once('=') else {
            return Err(format!(
                "the parameter {} has no '='",
                quote_prefix(segment.as_bytes())
            ));
        };
        let (tag, value) = (trim_wsp(tag), trim_wsp(value));
        if !is_label(tag) {
            return Err(format!(
                "the parameter tag {} is not letters, digits and inner hyphens",
                quote_prefix(tag.as_bytes())
            ));
        }
        if !is_value(value) {
            return Err(format!(
                "the value of {tag} holds a character outside printable ASCII without spaces"
            ));
        }
        parameters.push((tag, value));
    }
    Ok(IssueValue { issuer, parameters })
}

/// The hashed account URI for one key and domain (§4.1 item 3): `prefix` `sha-256/` and the
/// unpadded base64url SHA-256 of `len(domain) || domain || thumbprint || account_uri`.
pub(crate) fn hashed_account_uri(
    prefix: &str,
    domain: &str,
    thumbprint: &str,
    account_uri: &str,
) -> String {
    let mut input = Vec::with_capacity(1 + domain.len() + thumbprint.len() + account_uri.len());
    // Domain names are at most 253 octets (the identifier's constructor checks); `*` is one.
    input.push(u8::try_from(domain.len()).unwrap_or(u8::MAX));
    input.extend_from_slice(domain.as_bytes());
    input.extend_from_slice(thumbprint.as_bytes());
    input.extend_from_slice(account_uri.as_bytes());
    let hash = digest::digest(&digest::SHA256, &input);
    format!(
        "{prefix}{HASH_ALGORITHM}/{}",
        URL_SAFE_NO_PAD.encode(hash.as_ref())
    )
}

/// Judges one record for the name `domain` (a wildcard's base name, `wildcard` set): `None` when
/// it is not ours to judge (another issuer, or none), otherwise whether it validates.
pub(crate) fn judge(
    rdata: &str,
    domain: &str,
    wildcard: bool,
    expected: &Expected<'_>,
) -> Option<Result<Accepted, Refusal>> {
    let issuer = issuer_of(rdata)?;
    if !expected.issuer_domain_names.contains(&issuer) {
        return None;
    }
    Some(judge_ours(rdata, issuer, domain, wildcard, expected))
}

fn judge_ours(
    rdata: &str,
    issuer: String,
    domain: &str,
    wildcard: bool,
    expected: &Expected<'_>,
) -> Result<Accepted, Refusal> {
    let value = parse(rdata).map_err(Refusal::Malformed)?;
    let mut account = None;
    let mut policy = None;
    let mut persist_until = None;
    for (tag, v) in &value.parameters {
        let slot = if tag.eq_ignore_ascii_case("accounturi") {
            &mut account
        } else if tag.eq_ignore_ascii_case("policy") {
            &mut policy
        } else if tag.eq_ignore_ascii_case("persistUntil") {
            &mut persist_until
        } else {
            // §4.1 item 1: unknown parameters are ignored, for forward compatibility.
            continue;
        };
        if slot.replace(*v).is_some() {
            return Err(Refusal::Malformed(format!(
                "the parameter {tag} appears more than once"
            )));
        }
    }
    let Some(account) = account else {
        return Err(Refusal::Malformed(
            "the mandatory accounturi parameter is missing".to_owned(),
        ));
    };
    let persist_until = match persist_until {
        None => None,
        Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
            Some(v.parse::<i64>().map_err(|_| {
                Refusal::Malformed(format!(
                    "persistUntil={v} is not a UNIX time this CA can read"
                ))
            })?)
        }
        Some(v) => {
            return Err(Refusal::Malformed(format!(
                "persistUntil={} is not a base-10 integer",
                quote_prefix(v.as_bytes())
            )));
        }
    };
    check_hashed_uri_form(account, expected.account_hash_prefix)?;
    let matched = expected
        .thumbprints
        .iter()
        .enumerate()
        .find_map(|(index, thumbprint)| {
            [(domain, false), ("*", true)]
                .into_iter()
                .find(|(name, _)| {
                    hashed_account_uri(
                        expected.account_hash_prefix,
                        name,
                        thumbprint,
                        expected.account_uri,
                    ) == account
                })
                .map(|(_, omitted)| (index, omitted))
        });
    let Some((key_index, domain_omitted)) = matched else {
        return Err(Refusal::Unauthorized(format!(
            "its accounturi is not the hashed URI of this account ({}) for {domain} with any of its keys",
            expected.account_uri
        )));
    };
    let wildcard_policy = policy.is_some_and(|p| p.eq_ignore_ascii_case("wildcard"));
    if wildcard && !wildcard_policy {
        return Err(Refusal::Unauthorized(format!(
            "it does not allow wildcard certificates (policy=wildcard) and *.{domain} was asked for"
        )));
    }
    if let Some(until) = persist_until
        && expected.now_unix > until
    {
        return Err(Refusal::Unauthorized(format!(
            "its persistUntil={until} has passed"
        )));
    }
    Ok(Accepted {
        issuer,
        persist_until,
        wildcard: wildcard_policy,
        key_index,
        domain_omitted,
    })
}

/// `malformed` unless `account` is `<prefix>sha-256/<43 base64url characters>` (§9.3.1).
fn check_hashed_uri_form(account: &str, prefix: &str) -> Result<(), Refusal> {
    let Some(rest) = account.strip_prefix(prefix) else {
        return Err(Refusal::Malformed(format!(
            "its accounturi {} is not a hashed account URI under this CA's accountHashPrefix {prefix}",
            quote_prefix(account.as_bytes())
        )));
    };
    let Some((algorithm, hash)) = rest.split_once('/') else {
        return Err(Refusal::Malformed(format!(
            "its accounturi {} names no hash algorithm",
            quote_prefix(account.as_bytes())
        )));
    };
    if algorithm != HASH_ALGORITHM {
        return Err(Refusal::Malformed(format!(
            "its accounturi uses the hash algorithm {}; this CA accepts only {HASH_ALGORITHM}",
            quote_prefix(algorithm.as_bytes())
        )));
    }
    let well_formed = hash.len() == 43
        && hash
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && URL_SAFE_NO_PAD.decode(hash).is_ok();
    if !well_formed {
        return Err(Refusal::Malformed(format!(
            "its accounturi hash {} is not 43 base64url characters (a SHA-256 digest)",
            quote_prefix(hash.as_bytes())
        )));
    }
    Ok(())
}

pub(crate) async fn validate(
    context: &CheckContext,
    identifier: &Identifier,
    expected: &Expected<'_>,
) -> Result<(Seen, Accepted), Failure> {
    let domain = identifier.base_name();
    let name = format!("{LABEL}.{domain}");
    let records: Vec<String> = match context.dns.query(&name, RecordType::TXT).await {
        Answer::Records(records) => records
            .iter()
            .filter_map(|r| match r {
                // A record's character-strings form one value (§9.1: long values are split).
                RData::TXT(txt) => Some(
                    txt.txt_data
                        .iter()
                        .map(|s| String::from_utf8_lossy(s))
                        .collect::<String>(),
                ),
                _ => None,
            })
            .collect(),
        Answer::NxDomain | Answer::NoData => Vec::new(),
        Answer::Failed(why) => {
            return Err(Failure::transient(Problem::new(
                ProblemType::Dns,
                format!("DNS problem: {why} looking up TXT for {name}"),
            )));
        }
    };
    let mut refusals = Vec::new();
    for record in &records {
        match judge(record, domain, identifier.is_wildcard(), expected) {
            None => {}
            Some(Ok(accepted)) => {
                let observed = describe_accepted(&name, &accepted, records.len());
                return Ok((
                    Seen {
                        addresses: context.dns.servers(),
                        observed,
                    },
                    accepted,
                ));
            }
            Some(Err(refusal)) => refusals.push((record, refusal)),
        }
    }
    let ours = expected.issuer_domain_names.join(", ");
    if refusals.is_empty() {
        let found = match records.len() {
            0 => "No TXT record found".to_owned(),
            1 => "The only TXT record found names another issuer".to_owned(),
            n => format!("None of the {n} TXT records found names this CA"),
        };
        return Err(Failure::propagation(Problem::new(
            ProblemType::Unauthorized,
            format!(
                "{found} at {name}; expected a dns-persist-01 record naming one of this CA's issuer domain names ({ours}) and this account"
            ),
        )));
    }
    // One record of ours that is merely malformed would mislead if another was refused for its
    // account or expiry: `malformed` only when every record of ours is.
    let kind = if refusals
        .iter()
        .all(|(_, r)| matches!(r, Refusal::Malformed(_)))
    {
        ProblemType::Malformed
    } else {
        ProblemType::Unauthorized
    };
    let described: Vec<String> = refusals
        .iter()
        .take(DESCRIBED_RECORDS)
        .map(|(record, refusal)| {
            let why = match refusal {
                Refusal::Malformed(why) => format!("malformed: {why}"),
                Refusal::Unauthorized(why) => why.clone(),
            };
            format!("{} ({why})", quote_prefix(record.as_bytes()))
        })
        .collect();
    let more = if refusals.len() > DESCRIBED_RECORDS {
        format!(" and {} more", refusals.len() - DESCRIBED_RECORDS)
    } else {
        String::new()
    };
    Err(Failure::definite(Problem::new(
        kind,
        format!(
            "No dns-persist-01 record at {name} validates for this account: {}{more}",
            described.join("; ")
        ),
    )))
}

fn describe_accepted(name: &str, accepted: &Accepted, records: usize) -> String {
    let key = match accepted.key_index {
        0 => "the account's current key".to_owned(),
        1 => "the account's previous key".to_owned(),
        n => format!("the account's key of {n} changes ago"),
    };
    let form = if accepted.domain_omitted {
        "domain-omitted (*) hash"
    } else {
        "hash bound to the name"
    };
    let mut observed = format!(
        "dns-persist-01 TXT record at {name} naming issuer {} and this account ({form}, {key})",
        accepted.issuer
    );
    if accepted.wildcard {
        observed.push_str(", policy=wildcard");
    }
    if let Some(until) = accepted.persist_until {
        observed.push_str(&format!(", persistUntil={until}"));
    }
    if records > 1 {
        observed.push_str(&format!(" (one of {records} TXT records)"));
    }
    observed
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "https://ca.example/account-hash/";
    const ACCOUNT: &str = "https://ca.example/acct/123";
    /// RFC 7638 §3.1's example thumbprint, as the draft's §10.2 uses it.
    const KEY: &str = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs";
    const OLD_KEY: &str = "oldoldoldoldoldoldoldoldoldoldoldoldoldoldo";
    const NOW: i64 = 1_800_000_000;

    fn issuers() -> Vec<String> {
        vec!["authority.example".to_owned(), "ca.example.net".to_owned()]
    }

    fn thumbprints() -> Vec<String> {
        vec![KEY.to_owned(), OLD_KEY.to_owned()]
    }

    fn run(rdata: &str, domain: &str, wildcard: bool) -> Option<Result<Accepted, Refusal>> {
        let issuers = issuers();
        let thumbprints = thumbprints();
        let expected = Expected {
            issuer_domain_names: &issuers,
            account_hash_prefix: PREFIX,
            account_uri: ACCOUNT,
            thumbprints: &thumbprints,
            now_unix: NOW,
        };
        judge(rdata, domain, wildcard, &expected)
    }

    fn uri(domain: &str, key: &str) -> String {
        hashed_account_uri(PREFIX, domain, key, ACCOUNT)
    }

    fn accepted(rdata: &str) -> Accepted {
        match run(rdata, "example.com", false) {
            Some(Ok(a)) => a,
            other => panic!("{rdata:?}: {other:?}"),
        }
    }

    fn malformed(rdata: &str) -> String {
        match run(rdata, "example.com", false) {
            Some(Err(Refusal::Malformed(why))) => why,
            other => panic!("{rdata:?} should be malformed: {other:?}"),
        }
    }

    fn unauthorized(rdata: &str, domain: &str, wildcard: bool) -> String {
        match run(rdata, domain, wildcard) {
            Some(Err(Refusal::Unauthorized(why))) => why,
            other => panic!("{rdata:?} should be unauthorized: {other:?}"),
        }
    }

    #[test]
    fn hashed_uris_match_the_draft_test_vectors() {
        // draft-ietf-acme-dns-persist-02 §10.2.
        assert_eq!(
            uri("example.com", KEY),
            "https://ca.example/account-hash/sha-256/5SQm7n6tPh2-PlLbCKGnViTXX5z19SCN4cPGQHSk-kw"
        );
        assert_eq!(
            uri("*", KEY),
            "https://ca.example/account-hash/sha-256/NpDnSwUthQK8zCgFdefYxAdAVPnygMLbs9US6oO-5ug"
        );
    }

    #[test]
    fn the_drafts_example_records_validate() {
        // §10.2 (Figure 5), one character-string after another joined.
        let basic = "authority.example; accounturi=https://ca.example/account-hash/sha-256/5SQm7n6tPh2-PlLbCKGnViTXX5z19SCN4cPGQHSk-kw";
        let a = accepted(basic);
        assert_eq!(a.issuer, "authority.example");
        assert_eq!(
            (a.key_index, a.domain_omitted, a.wildcard),
            (0, false, false)
        );
        assert_eq!(a.persist_until, None);
        // §10.6's shape: wildcard and persistUntil (the draft's own time has passed; a later one).
        let wildcard = format!(
            "authority.example; accounturi={}; policy=wildcard; persistUntil={}",
            uri("example.com", KEY),
            NOW + 60
        );
        let a = match run(&wildcard, "example.com", true) {
            Some(Ok(a)) => a,
            other => panic!("{other:?}"),
        };
        assert!(a.wildcard);
        assert_eq!(a.persist_until, Some(NOW + 60));
    }

    #[test]
    fn the_domain_omitted_form_and_earlier_keys_are_accepted() {
        let a = accepted(&format!("authority.example;accounturi={}", uri("*", KEY)));
        assert!(a.domain_omitted);
        let a = accepted(&format!(
            "authority.example; accounturi={}",
            uri("example.com", OLD_KEY)
        ));
        assert_eq!(a.key_index, 1);
        let a = accepted(&format!(
            "authority.example; accounturi={}",
            uri("*", OLD_KEY)
        ));
        assert_eq!((a.key_index, a.domain_omitted), (1, true));
    }

    #[test]
    fn other_issuers_and_records_without_one_are_ignored() {
        let account = uri("example.com", KEY);
        for rdata in [
            format!("other-ca.example; accounturi={account}"),
            format!("authority.example.evil; accounturi={account}"),
            format!("; accounturi={account}"),
            String::new(),
            "v=spf1 -all".to_owned(),
            "some verification token".to_owned(),
            format!("authority..example; accounturi={account}"),
        ] {
            assert_eq!(run(&rdata, "example.com", false), None, "{rdata:?}");
        }
    }

    #[test]
    fn issuer_names_compare_without_case_and_whitespace_is_allowed() {
        let account = uri("example.com", KEY);
        for rdata in [
            format!("AUTHORITY.Example; accounturi={account}"),
            format!("  authority.example  ;  accounturi = {account}  "),
            format!("\tauthority.example\t;\taccounturi={account}"),
            format!("ca.example.net;accounturi={account}"),
        ] {
            accepted(&rdata);
        }
    }

    #[test]
    fn parameter_tags_and_policy_values_compare_without_case() {
        let account = uri("example.com", KEY);
        let a = match run(
            &format!("authority.example; AccountURI={account}; Policy=WILDCARD"),
            "example.com",
            true,
        ) {
            Some(Ok(a)) => a,
            other => panic!("{other:?}"),
        };
        assert!(a.wildcard);
        // persistUntil under another case is still persistUntil, so an expired one refuses.
        unauthorized(
            &format!(
                "authority.example; accounturi={account}; PERSISTUNTIL={}",
                NOW - 1
            ),
            "example.com",
            false,
        );
    }

    #[test]
    fn unknown_parameters_are_ignored() {
        let account = uri("example.com", KEY);
        let a = accepted(&format!(
            "authority.example; future-thing=1; accounturi={account}; x=; policy=other"
        ));
        // An unknown policy value is as if there were none.
        assert!(!a.wildcard);
    }

    #[test]
    fn the_accounturi_must_be_this_accounts() {
        // Another account's hash, another name's hash, the plain account URL of draft -01.
        let other_account =
            hashed_account_uri(PREFIX, "example.com", KEY, "https://ca.example/acct/124");
        let why = unauthorized(
            &format!("authority.example; accounturi={other_account}"),
            "example.com",
            false,
        );
        assert!(why.contains(ACCOUNT), "{why}");
        unauthorized(
            &format!("authority.example; accounturi={}", uri("example.org", KEY)),
            "example.com",
            false,
        );
        let unknown_key = uri("example.com", "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk");
        unauthorized(
            &format!("authority.example; accounturi={unknown_key}"),
            "example.com",
            false,
        );
        // Simple string comparison: the hash's case matters.
        let shouted = uri("example.com", KEY).replace("5SQm", "5sqm");
        unauthorized(
            &format!("authority.example; accounturi={shouted}"),
            "example.com",
            false,
        );
    }

    #[test]
    fn malformed_accounturis_are_malformed() {
        let hash = "5SQm7n6tPh2-PlLbCKGnViTXX5z19SCN4cPGQHSk-kw";
        for (account, says) in [
            (ACCOUNT.to_owned(), "accountHashPrefix"),
            (
                format!("https://other.example/account-hash/sha-256/{hash}"),
                "accountHashPrefix",
            ),
            (format!("{PREFIX}sha-512/{hash}"), "sha-512"),
            (format!("{PREFIX}{hash}"), "no hash algorithm"),
            (format!("{PREFIX}sha-256/{hash}="), "43"),
            (format!("{PREFIX}sha-256/{}", &hash[..42]), "43"),
            (format!("{PREFIX}sha-256/{}+", &hash[..42]), "43"),
            (String::new(), "accountHashPrefix"),
        ] {
            let why = malformed(&format!("authority.example; accounturi={account}"));
            assert!(why.contains(says), "{account:?}: {why}");
        }
    }

    #[test]
    fn syntax_errors_are_malformed() {
        let account = uri("example.com", KEY);
        for (rdata, says) in [
            ("authority.example".to_owned(), "accounturi"),
            ("authority.example;".to_owned(), "accounturi"),
            (
                "authority.example; policy=wildcard".to_owned(),
                "accounturi",
            ),
            (
                format!("authority.example; accounturi={account}; accounturi={account}"),
                "more than once",
            ),
            (
                format!("authority.example; accounturi={account}; policy=wildcard; POLICY=x"),
                "more than once",
            ),
            (
                format!("authority.example; accounturi={account};"),
                "empty parameter",
            ),
            (
                format!("authority.example;; accounturi={account}"),
                "empty parameter",
            ),
            ("authority.example; accounturi".to_owned(), "no '='"),
            (
                format!("authority.example; accounturi={account}; -bad=1"),
                "tag",
            ),
            (
                format!("authority.example; accounturi={account}; a b=1"),
                "tag",
            ),
            (
                format!("authority.example; accounturi={account}; note=a b"),
                "printable",
            ),
            (
                format!("authority.example; accounturi={account}; note=caf\u{e9}"),
                "printable",
            ),
            (
                format!("authority.example; accounturi={account}; persistUntil=soon"),
                "base-10",
            ),
            (
                format!("authority.example; accounturi={account}; persistUntil=-5"),
                "base-10",
            ),
            (
                format!("authority.example; accounturi={account}; persistUntil=1.5"),
                "base-10",
            ),
            (
                format!("authority.example; accounturi={account}; persistUntil="),
                "base-10",
            ),
            (
                format!(
                    "authority.example; accounturi={account}; persistUntil=99999999999999999999"
                ),
                "UNIX time",
            ),
        ] {
            let why = malformed(&rdata);
            assert!(why.contains(says), "{rdata:?}: {why}");
        }
    }

    #[test]
    fn persist_until_is_inclusive() {
        let account = uri("example.com", KEY);
        let a = accepted(&format!(
            "authority.example; accounturi={account}; persistUntil={NOW}"
        ));
        assert_eq!(a.persist_until, Some(NOW));
        let why = unauthorized(
            &format!(
                "authority.example; accounturi={account}; persistUntil={}",
                NOW - 1
            ),
            "example.com",
            false,
        );
        assert!(why.contains("persistUntil"), "{why}");
    }

    #[test]
    fn wildcards_need_policy_wildcard() {
        let account = uri("example.com", KEY);
        let why = unauthorized(
            &format!("authority.example; accounturi={account}"),
            "example.com",
            true,
        );
        assert!(why.contains("policy=wildcard"), "{why}");
        unauthorized(
            &format!("authority.example; accounturi={account}; policy=wildcards"),
            "example.com",
            true,
        );
        // A wildcard record also validates the name itself.
        accepted(&format!(
            "authority.example; accounturi={account}; policy=wildcard"
        ));
    }

    #[test]
    fn the_parser_splits_by_the_rfc_8659_grammar() {
        assert_eq!(
            parse("ca.example; a=1;b = 2").unwrap(),
            IssueValue {
                issuer: "ca.example",
                parameters: vec![("a", "1"), ("b", "2")],
            }
        );
        assert_eq!(parse(";").unwrap().issuer, "");
        assert!(parse("ca.example;").unwrap().parameters.is_empty());
        assert!(parse("ca_example; a=1").is_err());
        assert!(parse("-ca.example; a=1").is_err());
        assert!(parse("ca.example.; a=1").is_err());
        assert_eq!(issuer_of("CA.Example ; a=1").as_deref(), Some("ca.example"));
        assert_eq!(issuer_of("ca.example."), None);
        assert_eq!(issuer_of(""), None);
    }

    #[test]
    fn fixtures_from_testdata_judge_as_labelled() {
        // testdata/dns-persist-01/records.txt: `<verdict> <rdata>` per line, with `{uri}` and
        // `{uri*}` standing for this account's hashed URIs for example.com and the `*` form,
        // `{other}` for another account's.
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/dns-persist-01/records.txt"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let other = hashed_account_uri(PREFIX, "example.com", KEY, "https://ca.example/acct/9");
        let mut seen = 0;
        for line in text.lines() {
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let (verdict, rdata) = line.split_once(' ').unwrap();
            let rdata = rdata
                .replace("{uri*}", &uri("*", KEY))
                .replace("{uri}", &uri("example.com", KEY))
                .replace("{other}", &other)
                .replace("{now-1}", &(NOW - 1).to_string())
                .replace("{now+1}", &(NOW + 1).to_string());
            let (domain, wildcard) = ("example.com", verdict.ends_with("-wildcard"));
            let got = match run(&rdata, domain, wildcard) {
                None => "ignored",
                Some(Ok(_)) => "valid",
                Some(Err(Refusal::Malformed(_))) => "malformed",
                Some(Err(Refusal::Unauthorized(_))) => "unauthorized",
            };
            assert_eq!(got, verdict.trim_end_matches("-wildcard"), "{line}");
            seen += 1;
        }
        assert!(seen >= 10, "only {seen} fixtures");
    }
}
