//! dns-01 (RFC 8555 §8.4): a TXT record at `_acme-challenge.<name>` holding the key authorization
//! digest.

use acme_core::identifier::Identifier;
use acme_core::problem::{Problem, ProblemType};
use hickory_resolver::proto::rr::{RData, RecordType};

use crate::context::CheckContext;
use crate::evidence::Seen;
use crate::failure::Failure;
use crate::key_authorization;
use crate::quote::quote_prefix;
use crate::resolver::Answer;

/// How many wrong values are quoted back in the problem detail.
const QUOTED_VALUES: usize = 5;

pub(crate) async fn validate(
    context: &CheckContext,
    identifier: &Identifier,
    key_authorization: &str,
) -> Result<Seen, Failure> {
    let name = format!("_acme-challenge.{}", identifier.base_name());
    validate_at(context, &name, key_authorization).await
}

/// The dns-01 check at the validation domain name `name`; dns-account-01 uses it at its
/// account-scoped name.
pub(crate) async fn validate_at(
    context: &CheckContext,
    name: &str,
    key_authorization: &str,
) -> Result<Seen, Failure> {
    // A missing or stale TXT record is what propagation looks like, and retrying only queries
    // DNS again: those failures may be retried. A DNS server failing (SERVFAIL, timeout) is no
    // propagation and is the verdict (see `failure.rs`).
    let expected = key_authorization::dns01_txt_value(key_authorization);
    let values = match context.dns.query(name, RecordType::TXT).await {
        Answer::Records(records) => records
            .iter()
            .filter_map(|r| match r {
                // A record's character-strings form one value (long values are split in 255-byte strings).
                RData::TXT(txt) => Some(
                    txt.txt_data
                        .iter()
                        .map(|s| String::from_utf8_lossy(s))
                        .collect::<String>(),
                ),
                _ => None,
            })
            .collect::<Vec<_>>(),
        Answer::NxDomain => {
            return Err(Failure::propagation(Problem::new(
                ProblemType::Dns,
                format!(
                    "DNS problem: NXDOMAIN looking up TXT for {name} - check that a DNS record exists for this domain"
                ),
            )));
        }
        Answer::NoData => Vec::new(),
        Answer::Failed(why) => {
            return Err(Failure::transient(Problem::new(
                ProblemType::Dns,
                format!("DNS problem: {why} looking up TXT for {name}"),
            )));
        }
    };
    if values.iter().any(|v| v == &expected) {
        let others = values.len() - 1;
        let besides = match others {
            0 => String::new(),
            1 => " (and 1 other TXT value)".to_owned(),
            n => format!(" (and {n} other TXT values)"),
        };
        return Ok(Seen {
            addresses: context.dns.servers(),
            observed: format!(
                "TXT record with the expected digest {expected:?} at {name}{besides}"
            ),
        });
    }
    if values.is_empty() {
        return Err(Failure::propagation(Problem::new(
            ProblemType::Unauthorized,
            format!("No TXT record found at {name}; expected one with the value {expected:?}"),
        )));
    }
    let quoted: Vec<String> = values
        .iter()
        .take(QUOTED_VALUES)
        .map(|v| quote_prefix(v.as_bytes()))
        .collect();
    let more = if values.len() > QUOTED_VALUES {
        format!(" (and {} more)", values.len() - QUOTED_VALUES)
    } else {
        String::new()
    };
    let plural = if values.len() == 1 {
        "record"
    } else {
        "records"
    };
    Err(Failure::propagation(Problem::new(
        ProblemType::IncorrectResponse,
        format!(
            "Incorrect TXT {plural} {}{more} found at {name}; expected {expected:?}",
            quoted.join(", ")
        ),
    )))
}
