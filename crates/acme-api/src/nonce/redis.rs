//! The shared nonce ledger in Redis, on the rate-limit store's client (its own key prefix).

use std::time::Duration;

use ratelimits::RedisStore;

use super::LedgerFuture;
use super::NonceLedger;
use super::Redemption;

/// Name of the shared HMAC key under the prefix. Redeemed nonces are recorded on its shard, so
/// one script checks the key and records the nonce atomically.
const KEY_NAME: &str = "key";

/// A [`NonceLedger`] in Redis: `<prefix>key` holds the shared key (the first instance to start
/// proposes it), and each redeemed nonce is a key that expires with the nonce.
#[derive(Debug, Clone)]
pub struct RedisNonceLedger {
    store: RedisStore,
}

impl RedisNonceLedger {
    /// `store` should use a key prefix of its own (`<redis.key-prefix>nonce:`).
    pub fn new(store: RedisStore) -> Self {
        Self { store }
    }
}

impl NonceLedger for RedisNonceLedger {
    fn shared_key<'a>(&'a self, proposal: &'a str) -> LedgerFuture<'a, String> {
        Box::pin(async move {
            self.store
                .shared_secret(KEY_NAME, proposal)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn redeem_once<'a>(
        &'a self,
        key: &'a str,
        id: &'a str,
        ttl: Duration,
    ) -> LedgerFuture<'a, Redemption> {
        Box::pin(async move {
            let answer = self
                .store
                .insert_once_guarded(KEY_NAME, key, id, ttl)
                .await
                .map_err(|e| e.to_string())?;
            Ok(match answer {
                Some(true) => Redemption::First,
                Some(false) => Redemption::Again,
                None => Redemption::KeyChanged,
            })
        })
    }
}
