//! Where a bucket lives: its owner and its field within the owner.
//!
//! An account's buckets (`o`rders, `s`AN budget, `f`ailed validations and `z`ombie counters per
//! identifier) belong to `a:<account>`; an address's (`g`lobal, `n`ew accounts) to `i:<address>`.
//! Both stores keep an owner's buckets together: in Redis as the fields of one hash (one key and
//! one TTL per owner instead of per bucket), in memory as one table entry (a new-order batch
//! touches one entry instead of five). Sharding is by owner, so one request's buckets share a
//! shard and cost one round trip.
//!
//! The parts are built straight from the limit and the id, without formatting the textual key
//! `<limit>:<id>` that operators and clients see; [`fmt::Display`] writes that key when needed.
//! Typical parts fit inline (24 bytes), so building a key does not allocate.

use std::fmt;
use std::fmt::Write;

use compact_str::CompactString;
use ipnet::IpNet;

use crate::bucket::BucketId;
use crate::error::Result;
use crate::key_hash::key_hash;
use crate::limit::LimitName;

/// A bucket's owner and field, with the owner's hash computed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketKey {
    /// Owner and field hashed together. First, so that comparing two keys (every pair of a
    /// batch is compared, to refuse duplicates) almost always ends on one integer.
    hash: u64,
    /// [`key_hash`] of `owner`: it picks the shard and the table entry.
    owner_hash: u64,
    field: CompactString,
    owner: CompactString,
}

/// Owner classes.
const ACCOUNT: &str = "a:";
const ADDRESS: &str = "i:";
/// Keys of no known limit (tests, tools): an owner of their own with a single field.
const OTHER: &str = "k:";
const OTHER_FIELD: &str = "v";

/// A limit's field code, and whether its buckets belong to an account (else to an address).
const fn code(name: LimitName) -> (&'static str, bool) {
    match name {
        LimitName::GlobalPerIp => ("g", false),
        LimitName::NewAccountPerIp => ("n", false),
        LimitName::NewOrdersPerAccount => ("o", true),
        LimitName::SanBudgetPerAccount => ("s", true),
        LimitName::FailedValidationPerAccountIdentifier => ("f", true),
        LimitName::ConsecutiveFailuresPerAccountIdentifier => ("z", true),
    }
}

/// A bucket's field: the limit's code, then `:<identifier>` for per-identifier limits.
fn field(name: LimitName, id: &BucketId) -> CompactString {
    let (code, _) = code(name);
    match id {
        BucketId::AccountIdentifier { identifier, .. } => {
            let mut field = CompactString::with_capacity(code.len() + 1 + identifier.len());
            field.push_str(code);
            field.push(':');
            field.push_str(identifier);
            field
        }
        BucketId::Ip(_) | BucketId::Account(_) => CompactString::const_new(code),
    }
}

fn limit_of_code(code: &str) -> Option<LimitName> {
    LimitName::ALL
        .into_iter()
        .find(|name| self::code(*name).0 == code)
}

impl BucketKey {
    /// The key of an owner's field, as the stores hold them.
    pub(crate) fn from_parts(owner: CompactString, field: CompactString) -> Self {
        // Keep in step with `sibling`.
        let owner_hash = key_hash(&owner);
        Self {
            hash: owner_hash.rotate_left(29) ^ key_hash(&field),
            owner_hash,
            owner,
            field,
        }
    }

    /// The key of `id`'s bucket of `name`; refuses an id of the wrong kind for the limit.
    /// IPv6 ids are taken as given: the limiter reduces addresses to their prefix first.
    pub fn new(name: LimitName, id: &BucketId) -> Result<Self> {
        id.check_kind(name)?;
        Ok(Self::of_checked(name, id))
    }

    /// [`BucketKey::new`] for an id whose kind the caller has checked.
    pub(crate) fn of_checked(name: LimitName, id: &BucketId) -> Self {
        let owner = match id {
            BucketId::Ip(net) => return Self::of_net(name, *net),
            BucketId::Account(account) | BucketId::AccountIdentifier { account, .. } => {
                let mut digits = itoa::Buffer::new();
                let digits = digits.format(*account);
                let mut owner = CompactString::with_capacity(ACCOUNT.len() + digits.len());
                owner.push_str(ACCOUNT);
                owner.push_str(digits);
                owner
            }
        };
        Self::from_parts(owner, field(name, id))
    }

    /// The key of an address's (or prefix's) bucket of an address-keyed limit.
    pub(crate) fn of_net(name: LimitName, net: IpNet) -> Self {
        let mut owner = CompactString::const_new(ADDRESS);
        // Writing to a CompactString cannot fail.
        let _ = write!(owner, "{}", BucketId::Ip(net));
        Self::from_parts(owner, CompactString::const_new(code(name).0))
    }

    /// The key of another bucket of this key's owner: `id` must have been checked for `name`
    /// and must name the same owner (the same account, say), which the caller knows. A
    /// request's buckets mostly share an owner, and this spares writing and hashing it again.
    pub(crate) fn sibling_of(&self, name: LimitName, id: &BucketId) -> Self {
        let field = field(name, id);
        Self {
            hash: self.owner_hash.rotate_left(29) ^ key_hash(&field),
            owner_hash: self.owner_hash,
            owner: self.owner.clone(),
            field,
        }
    }

    /// Reads a textual key `<limit>:<id>` (as written by operators and older tools). Text that
    /// names no known limit is kept whole, as a bucket of its own.
    pub fn parse(key: &str) -> Self {
        let other = || {
            let mut owner = CompactString::const_new(OTHER);
            owner.push_str(key);
            Self::from_parts(owner, CompactString::const_new(OTHER_FIELD))
        };
        let Some((limit, id)) = key.split_once(':') else {
            return other();
        };
        let Some(name) = LimitName::ALL
            .into_iter()
            .find(|name| name.as_str() == limit)
        else {
            return other();
        };
        let (code, by_account) = code(name);
        let mut field = CompactString::const_new(code);
        let mut owner = CompactString::const_new(if by_account { ACCOUNT } else { ADDRESS });
        match id.split_once(':').filter(|_| by_account) {
            Some((account, identifier)) => {
                owner.push_str(account);
                field.push(':');
                field.push_str(identifier);
            }
            None => owner.push_str(id),
        }
        Self::from_parts(owner, field)
    }

    /// The owner: `a:<account>`, `i:<address>` or `k:<key>`.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The bucket within its owner: a limit code, and `:<identifier>` for per-identifier limits.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The limit a bucket belongs to, from its field's code; None for keys of no known limit.
    pub fn limit_name(&self) -> Option<LimitName> {
        if self.owner.starts_with(OTHER) {
            return None;
        }
        let code = self
            .field
            .split_once(':')
            .map_or(&*self.field, |(code, _)| code);
        limit_of_code(code)
    }

    /// The identifier of a per-(account, identifier) bucket.
    pub fn identifier(&self) -> Option<&str> {
        self.field.split_once(':').map(|(_, identifier)| identifier)
    }

    /// The process-wide hash of the owner.
    pub(crate) fn owner_hash(&self) -> u64 {
        self.owner_hash
    }
}

/// The hash computed at construction from owner and field: equal keys have equal parts, so equal
/// hashes.
impl std::hash::Hash for BucketKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl From<&str> for BucketKey {
    fn from(key: &str) -> Self {
        Self::parse(key)
    }
}

impl From<String> for BucketKey {
    fn from(key: String) -> Self {
        Self::parse(&key)
    }
}

/// The textual key, `<limit>:<id>`.
impl fmt::Display for BucketKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (class, id) = self.owner.split_at(2.min(self.owner.len()));
        if class == OTHER {
            return f.write_str(id);
        }
        let (code, identifier) = match self.field.split_once(':') {
            Some((code, identifier)) => (code, Some(identifier)),
            None => (self.field.as_str(), None),
        };
        match limit_of_code(code) {
            Some(name) => f.write_str(name.as_str())?,
            None => f.write_str(code)?,
        }
        write!(f, ":{id}")?;
        if let Some(identifier) = identifier {
            write!(f, ":{identifier}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::BucketKey;
    use crate::bucket::BucketId;
    use crate::bucket::ip_bucket;
    use crate::limit::LimitName;

    fn round_trip(name: LimitName, id: &BucketId, owner: &str, field: &str) {
        let key = BucketKey::new(name, id).unwrap();
        assert_eq!((key.owner(), key.field()), (owner, field));
        let text = id.key(name).unwrap();
        assert_eq!(key.to_string(), text, "displays as the textual key");
        assert_eq!(
            BucketKey::parse(&text),
            key,
            "parses back to the same parts"
        );
    }

    #[test]
    fn owners_fields_and_text() {
        let v4 = ip_bucket("192.0.2.7".parse().unwrap(), 64);
        let v6 = ip_bucket("2001:db8:1:2:3:4:5:6".parse().unwrap(), 64);
        round_trip(
            LimitName::GlobalPerIp,
            &BucketId::Ip(v4),
            "i:192.0.2.7",
            "g",
        );
        round_trip(
            LimitName::NewAccountPerIp,
            &BucketId::Ip(v6),
            "i:2001:db8:1:2::/64",
            "n",
        );
        round_trip(
            LimitName::NewOrdersPerAccount,
            &BucketId::Account(42),
            "a:42",
            "o",
        );
        round_trip(
            LimitName::SanBudgetPerAccount,
            &BucketId::Account(42),
            "a:42",
            "s",
        );
        let pair = BucketId::AccountIdentifier {
            account: 42,
            identifier: "*.example.com".to_owned(),
        };
        round_trip(
            LimitName::FailedValidationPerAccountIdentifier,
            &pair,
            "a:42",
            "f:*.example.com",
        );
        round_trip(
            LimitName::ConsecutiveFailuresPerAccountIdentifier,
            &pair,
            "a:42",
            "z:*.example.com",
        );
        // An IP identifier holds colons of its own.
        let ip_pair = BucketId::AccountIdentifier {
            account: 42,
            identifier: "2001:db8::1".to_owned(),
        };
        round_trip(
            LimitName::FailedValidationPerAccountIdentifier,
            &ip_pair,
            "a:42",
            "f:2001:db8::1",
        );
        assert!(BucketKey::new(LimitName::GlobalPerIp, &BucketId::Account(1)).is_err());
    }

    #[test]
    fn unknown_text_is_a_bucket_of_its_own() {
        for text in ["tight", "nope:1", "a:b:c"] {
            let key = BucketKey::parse(text);
            assert_eq!(key.owner(), format!("k:{text}"));
            assert_eq!(key.field(), "v");
            assert_eq!(key.to_string(), text);
        }
        assert_ne!(BucketKey::parse("x"), BucketKey::parse("y"));
    }

    #[test]
    fn one_owner_per_account_and_per_address() {
        let a = BucketKey::new(LimitName::NewOrdersPerAccount, &BucketId::Account(7)).unwrap();
        let b = BucketKey::parse("failed-validation:7:example.com");
        assert_eq!(a.owner(), b.owner());
        assert_eq!(a.owner_hash(), b.owner_hash());
        assert_ne!(a, b);
        let pair = BucketId::AccountIdentifier {
            account: 7,
            identifier: "example.com".to_owned(),
        };
        let sibling = a.sibling_of(LimitName::FailedValidationPerAccountIdentifier, &pair);
        assert_eq!(sibling, b, "a sibling is the key built from scratch");
    }
}
