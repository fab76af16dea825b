//! The accounts a server on SQLite has read, kept in memory.
//!
//! Every authenticated request reads its account (six of the ten requests of an issuance),
//! because a deactivation or a key change must take effect on the very next request. On SQLite
//! the server is the only user of its database file: it holds the file exclusively while it runs
//! (`sql::lite`), and every write to an account goes through this crate, which forgets the
//! account once the write has committed. So an account kept here is the stored one, and the read
//! can be skipped. PostgreSQL is shared by instances that do not see each other's writes: there
//! the account is read every time.
//!
//! A read that started before a write committed could otherwise put the old row back after the
//! write forgot it; so every forgetting advances a generation, and a read keeps what it found
//! only if no account was forgotten since it began.
//!
//! The cache belongs to one [`crate::Storage::connect`] and its clones. The exclusive lock keeps
//! other processes out, not a second `connect` to the same file in this process, which would
//! keep accounts this one changed: the binary connects once (`serve`), and a tool that needs a
//! second view of a running server's database asks the server.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::PoisonError;

use acme_core::ids::AccountId;

use crate::model::Account;

/// Accounts kept at most; the map is emptied when full. An issuance uses its account for seconds,
/// and a busy server sees a few thousand accounts a minute, so this bounds memory (a few MiB)
/// without costing a hit rate worth measuring.
const CAPACITY: usize = 10_000;

#[derive(Debug, Default)]
pub(crate) struct AccountCache {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    accounts: HashMap<AccountId, Account>,
    /// Advanced by every [`AccountCache::forget`].
    generation: u64,
}

impl AccountCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn get(&self, id: AccountId) -> Option<Account> {
        self.lock().accounts.get(&id).cloned()
    }

    /// Taken before reading an account from the database, and handed to [`AccountCache::keep`].
    pub(crate) fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Keeps `account` as read by a read that began at `generation`, unless an account was
    /// forgotten since (the row read may be older than that write).
    pub(crate) fn keep(&self, generation: u64, account: &Account) {
        let mut inner = self.lock();
        if inner.generation != generation {
            return;
        }
        if inner.accounts.len() >= CAPACITY {
            inner.accounts.clear();
        }
        inner.accounts.insert(account.id, account.clone());
    }

    /// Called once a write to the account has committed.
    pub(crate) fn forget(&self, id: AccountId) {
        let mut inner = self.lock();
        inner.generation = inner.generation.wrapping_add(1);
        inner.accounts.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use acme_core::ids::AccountId;
    use acme_core::status::AccountStatus;
    use time::OffsetDateTime;

    use super::AccountCache;
    use super::CAPACITY;
    use crate::model::Account;

    fn account(id: i64, status: AccountStatus) -> Account {
        Account {
            id: AccountId(id),
            status,
            jwk_json: "{}".into(),
            thumbprint: format!("t{id}"),
            contacts: Vec::new(),
            tos_agreed: true,
            created_at: OffsetDateTime::UNIX_EPOCH,
            eab_kid: None,
        }
    }

    #[test]
    fn a_read_that_began_before_a_write_does_not_keep_the_old_row() {
        let cache = AccountCache::default();
        // A read begins, the account is then deactivated and forgotten, and the read comes back
        // with the row it found before the write.
        let began = cache.generation();
        cache.forget(AccountId(1));
        cache.keep(began, &account(1, AccountStatus::Valid));
        assert_eq!(cache.get(AccountId(1)), None);
        // A read that began after the write keeps what it found.
        let began = cache.generation();
        cache.keep(began, &account(1, AccountStatus::Deactivated));
        assert_eq!(
            cache.get(AccountId(1)).map(|a| a.status),
            Some(AccountStatus::Deactivated)
        );
        cache.forget(AccountId(1));
        assert_eq!(cache.get(AccountId(1)), None);
    }

    #[test]
    fn the_cache_is_bounded() {
        let cache = AccountCache::default();
        let began = cache.generation();
        for id in 0..=i64::try_from(CAPACITY).unwrap() {
            cache.keep(began, &account(id, AccountStatus::Valid));
        }
        assert!(cache.lock().accounts.len() <= CAPACITY);
        assert!(
            cache
                .get(AccountId(i64::try_from(CAPACITY).unwrap()))
                .is_some()
        );
    }
}
