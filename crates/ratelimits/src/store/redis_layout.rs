//! Where a bucket lives in Redis: a field of one of [`GROUPS`] small hashes per shard.
//!
//! Redis spends about 90 bytes on every key with a TTL (its dictionary entry, the key's string,
//! the object header, the expires entry and both tables' slots), whatever the value. One hash per
//! owner (the previous layout) paid that for every account and every address, 88.5 bytes per
//! bucket in all. Here an owner's buckets are fields of a *group* hash chosen by the owner's
//! hash, so the per-key cost is shared by the group's few dozen fields, and a field costs its
//! bytes in the group's listpack: a compact binary name (7 bytes for an account's order bucket)
//! and the TAT, which the listpack keeps as a 64-bit integer (10 bytes with its framing).
//!
//! A group's TTL covers its longest-lived bucket. Fields whose bucket is full again are not
//! expired by Redis: a TAT in the past is a full bucket, exactly as if the field were absent,
//! so a stale field is harmless to every decision. The scripts remove them: whenever a write adds
//! a field and leaves the group with a multiple of [`SWEEP_EVERY`] fields, the group's stale
//! fields are deleted. A group therefore holds at most its live buckets at the last sweep plus
//! [`SWEEP_EVERY`] fields.
//!
//! Sharding is unchanged (by the owner's text), so a bucket stays on the shard that held it in
//! the previous layout and the scripts can move it over (see `spend.lua`).

use std::net::IpAddr;

use ipnet::IpNet;
use smallvec::SmallVec;

use crate::bucket_key::BucketKey;

/// Group hashes per shard. 65,536 keeps a group at a few dozen fields up to a few million
/// buckets per shard, well inside Redis' `hash-max-listpack-entries` (128 by default), beyond
/// which a hash turns into a dictionary that costs several times as much per field. Changing it
/// moves every bucket to another group: it is part of the layout, not a setting.
pub(crate) const GROUPS: u64 = 1 << 16;

// Four hex digits name a group.
const _: () = assert!(GROUPS <= 1 << 16);

/// A write that adds a field sweeps the group when its field count reaches a multiple of this.
pub(crate) const SWEEP_EVERY: i64 = 16;

/// Longest field kept as it is. Longer ones (a long DNS name of a per-identifier limit) would
/// exceed `hash-max-listpack-value` (64) and turn the whole group into a dictionary, so their
/// tail is replaced by a digest.
const MAX_PLAIN_FIELD: usize = 48;

/// First byte of a field that is not one of the compact shapes below.
const GENERIC: u8 = 0;
/// First byte of a field whose tail was replaced by a digest.
const DIGESTED: u8 = 1;

/// A field's bytes; typical fields stay inline.
pub(crate) type Field = SmallVec<[u8; 32]>;

/// FNV-1a, 64 bits, then a finaliser: the group must be the same in every instance and release
/// (so no seeded hasher), and independent of the shard choice, which hashes the same text.
fn group_hash(owner: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in owner.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // splitmix64's finaliser.
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// The group hash of `key`'s owner: `<prefix>b:<4 hex digits>`.
pub(crate) fn group_key(prefix: &str, key: &BucketKey) -> String {
    let group = group_hash(key.owner()) % GROUPS;
    format!("{prefix}b:{group:04x}")
}

fn push_varint(out: &mut Field, mut value: u64) {
    while value >= 0x80 {
        // The low seven bits, with the continuation bit: the cast keeps exactly them.
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The field of an account's bucket: its limit code, the account as a varint, then the rest of
/// the field (`:<identifier>` for per-identifier limits). None when the owner is not a
/// canonical account number.
fn account_field(account: &str, field: &str) -> Option<Field> {
    let number: u64 = account.parse().ok()?;
    let mut digits = itoa::Buffer::new();
    if digits.format(number) != account {
        return None;
    }
    let code = *field.as_bytes().first()?;
    if !matches!(code, b'o' | b's' | b'f' | b'z') {
        return None;
    }
    let mut out = Field::new();
    out.push(code);
    push_varint(&mut out, number);
    out.extend_from_slice(&field.as_bytes()[1..]);
    Some(out)
}

/// The field of an address's bucket: its limit code, 4 or 6, the prefix length and the
/// network's significant bytes. None when the owner is not an address or a network without host
/// bits.
fn address_field(address: &str, field: &str) -> Option<Field> {
    let net = match address.parse::<IpNet>() {
        Ok(net) => net,
        Err(_) => IpNet::from(address.parse::<IpAddr>().ok()?),
    };
    if net.trunc() != net {
        return None;
    }
    let code = *field.as_bytes().first()?;
    if !matches!(code, b'g' | b'n') {
        return None;
    }
    let mut out = Field::new();
    out.push(code);
    let significant = usize::from(net.prefix_len()).div_ceil(8);
    match net.network() {
        IpAddr::V4(v4) => {
            out.push(b'4');
            out.push(net.prefix_len());
            out.extend_from_slice(&v4.octets()[..significant]);
        }
        IpAddr::V6(v6) => {
            out.push(b'6');
            out.push(net.prefix_len());
            out.extend_from_slice(&v6.octets()[..significant]);
        }
    }
    out.extend_from_slice(&field.as_bytes()[1..]);
    Some(out)
}

/// Any owner and field: a marker, the owner's length, the owner, the field.
fn generic_field(owner: &str, field: &str) -> Field {
    let mut out = Field::new();
    out.push(GENERIC);
    push_varint(&mut out, owner.len() as u64);
    out.extend_from_slice(owner.as_bytes());
    out.extend_from_slice(field.as_bytes());
    out
}

/// `key`'s field in its group hash. Distinct keys get distinct fields: each shape starts with
/// its own first byte (a limit code, [`GENERIC`] or [`DIGESTED`]) and is self-delimiting up to
/// its last part. A field longer than [`MAX_PLAIN_FIELD`] keeps its first 16 bytes and replaces
/// the rest with 128 bits of SHA-256 of the whole: a collision would need 2^64 work, and could
/// only join two buckets of one account (names are chosen by the account's own client).
pub(crate) fn field(key: &BucketKey) -> Field {
    let owner = key.owner();
    let compact = if let Some(account) = owner.strip_prefix("a:") {
        account_field(account, key.field())
    } else if let Some(address) = owner.strip_prefix("i:") {
        address_field(address, key.field())
    } else {
        None
    };
    let plain = compact.unwrap_or_else(|| generic_field(owner, key.field()));
    if plain.len() <= MAX_PLAIN_FIELD {
        return plain;
    }
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &plain);
    let mut out = Field::new();
    out.push(DIGESTED);
    out.extend_from_slice(&plain[..16]);
    out.extend_from_slice(&digest.as_ref()[..16]);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::MAX_PLAIN_FIELD;
    use super::field;
    use super::group_key;
    use crate::bucket::BucketId;
    use crate::bucket::ip_bucket;
    use crate::bucket_key::BucketKey;
    use crate::limit::LimitName;

    #[test]
    fn compact_shapes() {
        let orders = BucketKey::new(
            LimitName::NewOrdersPerAccount,
            &BucketId::Account(10_000_000),
        )
        .unwrap();
        assert_eq!(field(&orders).as_slice(), b"o\x80\xad\xe2\x04");
        let v4 = BucketKey::new(
            LimitName::GlobalPerIp,
            &BucketId::Ip(ip_bucket("192.0.2.7".parse().unwrap(), 64)),
        )
        .unwrap();
        assert_eq!(field(&v4).as_slice(), b"g4\x20\xc0\x00\x02\x07");
        let v6 = BucketKey::new(
            LimitName::NewAccountPerIp,
            &BucketId::Ip(ip_bucket("2001:db8:1:2:3:4:5:6".parse().unwrap(), 64)),
        )
        .unwrap();
        assert_eq!(
            field(&v6).as_slice(),
            b"n6\x40\x20\x01\x0d\xb8\x00\x01\x00\x02"
        );
        let pair = BucketKey::new(
            LimitName::FailedValidationPerAccountIdentifier,
            &BucketId::AccountIdentifier {
                account: 42,
                identifier: "example.com".to_owned(),
            },
        )
        .unwrap();
        assert_eq!(field(&pair).as_slice(), b"f\x2a:example.com");
        // Keys of no known limit, and non-canonical owners, keep their text.
        assert_eq!(
            field(&BucketKey::parse("tight")).as_slice(),
            b"\x00\x07k:tightv"
        );
        assert_eq!(
            field(&BucketKey::parse("order-creation:007")).as_slice(),
            b"\x00\x05a:007o"
        );
        assert_eq!(
            field(&BucketKey::parse("global:10.0.0.1/24")).as_slice(),
            b"\x00\x0di:10.0.0.1/24g"
        );
    }

    #[test]
    fn long_fields_are_digested_and_stay_distinct() {
        let long = |name: &str| {
            BucketKey::new(
                LimitName::ConsecutiveFailuresPerAccountIdentifier,
                &BucketId::AccountIdentifier {
                    account: 42,
                    identifier: name.to_owned(),
                },
            )
            .unwrap()
        };
        let base = "a".repeat(60);
        let a = field(&long(&format!("{base}.example.com")));
        let b = field(&long(&format!("{base}.example.net")));
        assert_eq!(a.len(), 33);
        assert!(a.len() <= MAX_PLAIN_FIELD);
        assert_ne!(a, b);
        assert_eq!(a, field(&long(&format!("{base}.example.com"))));
    }

    #[test]
    fn distinct_keys_distinct_fields_and_groups_spread() {
        let mut fields = HashSet::new();
        let mut groups = HashSet::new();
        let mut keys = Vec::new();
        for account in [0i64, 1, 127, 128, 16_383, 16_384, i64::MAX] {
            for name in [
                LimitName::NewOrdersPerAccount,
                LimitName::SanBudgetPerAccount,
            ] {
                keys.push(BucketKey::new(name, &BucketId::Account(account)).unwrap());
            }
            keys.push(BucketKey::parse(&format!("failed-validation:{account}:x")));
            keys.push(BucketKey::parse(&format!("failed-validation:{account}")));
        }
        for text in ["k", "k1", "o", "order-creation:x", "global:10.0.0.0/24"] {
            keys.push(BucketKey::parse(text));
        }
        keys.push(BucketKey::parse("global:10.0.0.0"));
        keys.push(BucketKey::parse("global:::/0"));
        for key in &keys {
            assert!(fields.insert(field(key)), "{key} shares a field");
        }
        for i in 0..10_000 {
            let key =
                BucketKey::new(LimitName::NewOrdersPerAccount, &BucketId::Account(i)).unwrap();
            groups.insert(group_key("p:", &key));
        }
        // 10,000 owners over 65,536 groups: about 9,300 distinct groups expected.
        assert!(groups.len() > 9_000, "{}", groups.len());
        assert_eq!(group_key("p:", &keys[0]).len(), "p:b:0000".len());
    }
}
