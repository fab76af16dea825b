//! Column encodings: how domain values become the plain integers and text the schema holds.
//!
//! Storage keeps lists and problems in simple text so that it never depends on a wire format;
//! every function here is the exact inverse of its partner, and decoding failures mean a row was
//! written by something else than this crate.

use std::str::FromStr;

use acme_core::identifier::Identifier;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use time::Duration;
use time::OffsetDateTime;

use crate::Result;
use crate::error::Error;

/// Unix seconds, the only time representation in the schema.
pub(crate) fn unix(t: OffsetDateTime) -> i64 {
    t.unix_timestamp()
}

/// The end of a lease taken at `now`, in whole seconds and never shorter than `lease`.
pub(crate) fn lease_end(now: OffsetDateTime, lease: Duration) -> i64 {
    unix_ceil(now).saturating_add(seconds_ceil(lease).max(1))
}

/// Unix seconds rounded up: the start of a lease, so that storing whole seconds never makes a
/// lease shorter than asked (a 1 s lease taken at x.9 s still lasts a full second).
pub(crate) fn unix_ceil(t: OffsetDateTime) -> i64 {
    let secs = t.unix_timestamp();
    if t.nanosecond() > 0 {
        secs.saturating_add(1)
    } else {
        secs
    }
}

/// Seconds of a duration, rounded up so that a lease is never shorter than asked.
pub(crate) fn seconds_ceil(d: Duration) -> i64 {
    let whole = d.whole_seconds();
    if d.subsec_nanoseconds() > 0 {
        whole + 1
    } else {
        whole
    }
}

pub(crate) fn time_from_unix(secs: i64) -> Result<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp(secs)
        .map_err(|e| Error::Corrupt(format!("timestamp {secs}: {e}")))
}

pub(crate) fn opt_time_from_unix(secs: Option<i64>) -> Result<Option<OffsetDateTime>> {
    secs.map(time_from_unix).transpose()
}

/// Parses a status or type name stored by this crate.
pub(crate) fn parse<T>(value: &str) -> Result<T>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    value
        .parse::<T>()
        .map_err(|e| Error::Corrupt(e.to_string()))
}

/// Newline-separated, with backslash escapes so that any string survives the round trip.
pub(crate) fn encode_list(items: &[String]) -> String {
    items
        .iter()
        .map(|item| item.replace('\\', "\\\\").replace('\n', "\\n"))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn decode_list(text: &str) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    text.split('\n').map(unescape).collect()
}

fn unescape(item: &str) -> String {
    let mut out = String::with_capacity(item.len());
    let mut chars = item.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `type:value` per line; identifiers are normalised, so they hold neither newlines nor need
/// escaping, and the first `:` separates the type from an IPv6 value.
pub(crate) fn encode_identifiers(identifiers: &[Identifier]) -> String {
    identifiers
        .iter()
        .map(|id| format!("{}:{}", id.kind().as_str(), id.value()))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn decode_identifiers(text: &str) -> Result<Vec<Identifier>> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split('\n')
        .map(|line| {
            let (kind, value) = line
                .split_once(':')
                .ok_or_else(|| Error::Corrupt(format!("identifier without type: {line:?}")))?;
            identifier(kind, value)
        })
        .collect()
}

pub(crate) fn identifier(kind: &str, value: &str) -> Result<Identifier> {
    Identifier::parse(kind, value).map_err(|e| Error::Corrupt(e.to_string()))
}

/// The two problem columns (short type name, detail); identifier and subproblems are not kept.
pub(crate) fn problem_columns(problem: Option<&Problem>) -> (Option<&'static str>, Option<String>) {
    match problem {
        Some(p) => (Some(p.kind.as_str()), Some(p.detail.clone())),
        None => (None, None),
    }
}

pub(crate) fn decode_problem(
    kind: Option<String>,
    detail: Option<String>,
) -> Result<Option<Problem>> {
    match kind {
        Some(kind) => Ok(Some(Problem::new(
            parse::<ProblemType>(&kind)?,
            detail.unwrap_or_default(),
        ))),
        None => Ok(None),
    }
}

/// Narrows a stored count; counts are never negative or beyond `u32` in practice.
pub(crate) fn count(n: i64) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Corrupt(format!("count out of range: {n}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_round_trip_with_awkward_characters() {
        let items = vec![
            "mailto:a@example.com".to_owned(),
            "x\\n\ny".to_owned(),
            "\\".to_owned(),
        ];
        assert_eq!(decode_list(&encode_list(&items)), items);
        assert_eq!(decode_list(&encode_list(&[])), Vec::<String>::new());
    }

    #[test]
    fn identifiers_round_trip() {
        let ids = vec![
            Identifier::dns("*.example.com").unwrap(),
            Identifier::ip("2001:db8::1").unwrap(),
            Identifier::ip("192.0.2.1").unwrap(),
        ];
        assert_eq!(decode_identifiers(&encode_identifiers(&ids)).unwrap(), ids);
        assert!(decode_identifiers("nocolon").is_err());
    }

    #[test]
    fn lease_seconds_round_up() {
        assert_eq!(seconds_ceil(Duration::seconds(30)), 30);
        assert_eq!(seconds_ceil(Duration::milliseconds(30_001)), 31);
    }
}
