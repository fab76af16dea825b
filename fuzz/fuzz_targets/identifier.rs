//! Identifier parsing (`Identifier::parse`/`dns`/`ip`) and the allow/deny `IdentifierPolicy`.
//!
//! Input: line 1 is the wire type, line 2 the value, and each further line a policy entry
//! (`allow-domain x`, `deny-domain x`, `allow-cidr n`, `deny-cidr n`). Normalisation must be
//! idempotent (a parsed identifier re-parses to itself), since the duplicate-certificate limit and
//! the CSR check compare identifiers byte for byte.
#![no_main]

use std::net::IpAddr;

use acme_core::identifier::{
    Identifier, IdentifierError, IdentifierKind, IdentifierPolicy, canonical_set,
};
use ipnet::IpNet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let kind = lines.next().unwrap_or_default();
    let value = lines.next().unwrap_or_default();
    let policy = policy(lines);

    // The typed constructors agree with the wire-type one.
    let by_kind = Identifier::parse(kind, value);
    match kind {
        "dns" => assert_eq!(by_kind, Identifier::dns(value)),
        "ip" => assert_eq!(by_kind, Identifier::ip(value)),
        _ => assert!(matches!(by_kind, Err(IdentifierError::UnsupportedType(_)))),
    }
    // Both kinds are always tried, whatever line 1 says.
    for parsed in [by_kind, Identifier::dns(value), Identifier::ip(value)] {
        match parsed {
            Ok(id) => check_identifier(&id, &policy),
            Err(IdentifierError::InvalidDns { value: v, .. }) => assert_eq!(v, value),
            Err(IdentifierError::InvalidIp(v)) => assert_eq!(v, value),
            Err(_) => {}
        }
    }
});

fn policy<'a>(lines: impl Iterator<Item = &'a str>) -> IdentifierPolicy {
    let mut policy = IdentifierPolicy::default();
    for line in lines {
        let Some((what, arg)) = line.split_once(' ') else {
            continue;
        };
        let net = || arg.parse::<IpNet>().ok();
        match what {
            "allow-domain" => policy.allow_domains.push(arg.to_owned()),
            "deny-domain" => policy.deny_domains.push(arg.to_owned()),
            "allow-cidr" => policy.allow_cidrs.extend(net()),
            "deny-cidr" => policy.deny_cidrs.extend(net()),
            _ => {}
        }
    }
    policy
}

fn check_identifier(id: &Identifier, policy: &IdentifierPolicy) {
    let value = id.value();
    assert_eq!(
        Identifier::parse(id.kind().as_str(), value).as_ref(),
        Ok(id),
        "normalisation is not idempotent"
    );
    assert_eq!(id.to_string(), format!("{}:{value}", id.kind().as_str()));
    assert_eq!(canonical_set(&[id.clone(), id.clone()]), id.to_string());
    match id.kind() {
        IdentifierKind::Dns => {
            assert!(value.is_ascii() && !value.bytes().any(|b| b.is_ascii_uppercase()));
            assert!(!value.is_empty() && value.len() <= 253 && !value.ends_with('.'));
            assert!(!id.base_name().contains('*'));
            assert_eq!(id.is_wildcard(), value.starts_with("*."));
            assert!(value.parse::<IpAddr>().is_err());
            assert_eq!(id.ip_addr(), None);
            // A wildcard is never allowed where its base name is refused. (It may be refused
            // where its base is allowed: a denied domain anywhere below the base refuses it.)
            let base = Identifier::dns(id.base_name()).expect("the base name of a name parses");
            if policy.check(&base).is_err() {
                assert!(
                    policy.check(id).is_err(),
                    "{id} allowed although its base name is refused"
                );
            }
        }
        IdentifierKind::Ip => {
            let addr = id.ip_addr().expect("an ip identifier has an address");
            assert_eq!(&Identifier::from_ip(addr), id);
            assert!(!id.is_wildcard());
            let _ = policy.check(id);
        }
    }
    if policy.allow_domains.is_empty()
        && policy.deny_domains.is_empty()
        && policy.allow_cidrs.is_empty()
        && policy.deny_cidrs.is_empty()
    {
        assert!(policy.check(id).is_ok(), "an empty policy refused {id}");
    }
}
