//! Account keys parsed once, for the many requests an account signs.
//!
//! Every `kid`-signed request reads its account (for its status, which must be checked on every
//! request) and verified the signature with the key stored in it. Parsing that key (JSON, then
//! the point into the crypto library's form, with its on-curve check) was 3 % of the server's CPU
//! under full issuance; this map keeps the parsed key per account. It holds no state of its
//! own: an entry is used only when the account's stored JWK is byte for byte the one it was
//! parsed from, so a key change, on this instance or another, is seen on the next request.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;

use acme_core::ids::AccountId;
use acme_jose::Jwk;
use acme_jose::VerifyingKey;

/// Accounts whose keys are kept. At this many the map is emptied and refills from the accounts
/// still active. An entry is under 1 KiB for an EC key and about 3 KiB for an 8192-bit RSA key,
/// so the map stays under 30 MiB.
const CAPACITY: usize = 10_000;

/// Parsed keys by account, checked against the stored JWK on every use.
#[derive(Debug, Default)]
pub(crate) struct AccountKeys {
    keys: Mutex<HashMap<AccountId, Entry>>,
}

#[derive(Debug, Clone)]
struct Entry {
    /// The stored JWK text the key was parsed from.
    jwk_json: Arc<str>,
    key: Arc<VerifyingKey>,
}

/// Why a stored key could not be used.
#[derive(Debug)]
pub(crate) enum StoredKeyError {
    Json(serde_json::Error),
    Jwk(acme_jose::Error),
}

impl AccountKeys {
    /// The parsed key of `account`, whose stored JWK is `jwk_json`.
    pub(crate) fn get(
        &self,
        account: AccountId,
        jwk_json: &str,
    ) -> Result<Arc<VerifyingKey>, StoredKeyError> {
        if let Some(entry) = self.lock().get(&account)
            && *entry.jwk_json == *jwk_json
        {
            return Ok(Arc::clone(&entry.key));
        }
        let value: serde_json::Value =
            serde_json::from_str(jwk_json).map_err(StoredKeyError::Json)?;
        let jwk = Jwk::from_json(&value).map_err(StoredKeyError::Jwk)?;
        let key = Arc::new(VerifyingKey::new(jwk).map_err(StoredKeyError::Jwk)?);
        let mut keys = self.lock();
        if keys.len() >= CAPACITY {
            keys.clear();
        }
        keys.insert(
            account,
            Entry {
                jwk_json: Arc::from(jwk_json),
                key: Arc::clone(&key),
            },
        );
        Ok(key)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<AccountId, Entry>> {
        // The map holds only derived data, so one left mid-update by a panic is still usable.
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
