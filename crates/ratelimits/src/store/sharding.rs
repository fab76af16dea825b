//! Client-side sharding: which primary holds a key.
//!
//! The hash must be the same in every instance and every release, so it is a fixed FNV-1a rather
//! than std's randomly seeded hasher; jump consistent hashing then moves only 1/n of the keys when
//! a shard is added.

/// FNV-1a, 64 bits.
fn fnv1a(key: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Jump consistent hash (Lamping & Veach, 2014): the shard of `key` among `shards` (at least 1).
pub(crate) fn shard_of(key: &str, shards: usize) -> usize {
    let n = i64::try_from(shards.max(1)).unwrap_or(i64::MAX);
    let mut k = fnv1a(key);
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < n {
        b = j;
        k = k.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        // The quotient is at most 2^31 × (b + 1), far below i64::MAX for any realistic b.
        let scale = f64::from(1u32 << 31) / (((k >> 33) + 1) as f64);
        j = ((b + 1) as f64 * scale) as i64;
    }
    usize::try_from(b).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::shard_of;

    #[test]
    fn stable_balanced_and_minimal_movement() {
        let keys: Vec<String> = (0..10_000)
            .map(|i| format!("global:10.0.{}.{}", i / 256, i % 256))
            .collect();
        let mut counts = [0usize; 2];
        for key in &keys {
            counts[shard_of(key, 2)] += 1;
            assert_eq!(shard_of(key, 1), 0);
        }
        assert!(counts.iter().all(|&c| c > 4_000), "{counts:?}");
        // Going from 2 to 3 shards moves keys only onto the new shard.
        for key in &keys {
            let after = shard_of(key, 3);
            assert!(after == 2 || after == shard_of(key, 2));
        }
        assert_eq!(
            shard_of("global:10.0.0.1", 2),
            shard_of("global:10.0.0.1", 2)
        );
    }
}
