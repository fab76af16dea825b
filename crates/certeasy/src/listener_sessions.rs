//! The ACME listener's TLS session cache, emptied whenever the listener certificate changes.
//!
//! A resumed TLS session skips the certificate: the client keeps trusting the one it saw when
//! the session began. Without this, a client could go on resuming sessions made under a
//! certificate the operator replaced (perhaps because its key leaked) or that renewal retired,
//! for as long as the cache keeps them. Emptying the cache on every swap makes each client's
//! next connection a full handshake that sees the certificate in force.

use arc_swap::ArcSwap;
use rustls::server::ServerSessionMemoryCache;
use rustls::server::StoresServerSessions;

/// As many sessions as rustls keeps by default.
const CAPACITY: usize = 256;

/// The session store rustls uses; [`ListenerSessions::forget_all`] starts it afresh.
#[derive(Debug)]
pub struct ListenerSessions {
    cache: ArcSwap<ServerSessionMemoryCache>,
}

impl Default for ListenerSessions {
    fn default() -> Self {
        Self {
            cache: ArcSwap::new(ServerSessionMemoryCache::new(CAPACITY)),
        }
    }
}

impl ListenerSessions {
    /// Drops every stored session. A handshake that picked the old certificate just before the
    /// swap may still store its session afterwards; that one session is the only survivor.
    pub fn forget_all(&self) {
        self.cache.store(ServerSessionMemoryCache::new(CAPACITY));
    }
}

impl StoresServerSessions for ListenerSessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.cache.load().put(key, value)
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cache.load().get(key)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cache.load().take(key)
    }

    fn can_cache(&self) -> bool {
        true
    }
}
