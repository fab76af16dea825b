//! The rate-limit overrides file (`ratelimits::Overrides::parse`), then the limiter built from it
//! on the default limits, as `certeasy serve` and a reload do.
//!
//! An accepted file must hold only usable entries (ids present, numbers at least 1, no id
//! overridden twice for one limit), and building a limiter from it must not panic or overflow.
#![no_main]

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use ratelimits::config::RateLimitingConfig;
use ratelimits::{Limiter, MemoryStore, Overrides, Store};

fn store() -> Arc<dyn Store> {
    static STORE: OnceLock<Arc<MemoryStore>> = OnceLock::new();
    STORE
        .get_or_init(|| Arc::new(MemoryStore::new(1024)))
        .clone()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let overrides = match Overrides::parse(text) {
        Ok(overrides) => overrides,
        Err(error) => {
            assert!(!error.to_string().is_empty());
            return;
        }
    };
    let mut seen = HashSet::new();
    for (position, entry) in overrides.entries().iter().enumerate() {
        assert_eq!(entry.index, position);
        assert!(entry.line.is_none_or(|l| l >= 1));
        assert!(!entry.ids.is_empty());
        assert!(entry.burst.is_none_or(|b| b >= 1));
        assert!(entry.count.is_none_or(|c| c >= 1));
        assert!(entry.period.is_none_or(|p| !p.is_zero()));
        for id in &entry.ids {
            assert!(seen.insert((entry.limit, id.clone())), "{id:?} twice");
        }
    }
    let defaults = RateLimitingConfig::default();
    if let Ok(limiter) = Limiter::new(&defaults, &overrides, store()) {
        let _ = limiter.reload(&defaults, &overrides);
    }
});
