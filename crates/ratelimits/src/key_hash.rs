//! One hash per bucket key, computed once when a transaction is built.
//!
//! The memory store picks the shard and finds the slot with the same 64 bits, so a key is hashed
//! once per decision instead of once per lookup (shard choice, read, write). The seed is random
//! per process: bucket keys carry client-chosen text (DNS names), which must not be able to aim
//! every bucket at one slot.

use std::hash::BuildHasher;
use std::sync::OnceLock;

use foldhash::fast::RandomState;

fn state() -> &'static RandomState {
    static STATE: OnceLock<RandomState> = OnceLock::new();
    STATE.get_or_init(RandomState::default)
}

/// The process-wide hash of a bucket key.
pub(crate) fn key_hash(key: &str) -> u64 {
    state().hash_one(key)
}

#[cfg(test)]
mod tests {
    use super::key_hash;

    #[test]
    fn stable_within_the_process_and_spread() {
        assert_eq!(key_hash("global:192.0.2.1"), key_hash("global:192.0.2.1"));
        assert_ne!(key_hash("global:192.0.2.1"), key_hash("global:192.0.2.2"));
    }
}
