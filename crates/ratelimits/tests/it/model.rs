//! The limiter against a plain token bucket holding exact (nanosecond) fractional tokens.

use std::net::IpAddr;
use std::sync::Arc;

use proptest::prelude::ProptestConfig;
use proptest::prelude::Strategy;
use proptest::prop_assert_eq;
use proptest::proptest;
use ratelimits::LimitName;
use ratelimits::Limiter;
use ratelimits::MemoryStore;
use ratelimits::Overrides;
use ratelimits::Request;
use ratelimits::config::RateLimitingConfig;
use time::Duration;
use time::OffsetDateTime;

/// Tokens as nanoseconds of refill: a full bucket holds `burst × interval`.
struct TokenBucket {
    level: i128,
    capacity: i128,
    interval: i128,
}

impl TokenBucket {
    fn take(&mut self, elapsed_ns: i128, cost: u64) -> (bool, u64) {
        self.level = (self.level + elapsed_ns).min(self.capacity);
        let need = i128::from(cost) * self.interval;
        let allowed = self.level >= need;
        if allowed {
            self.level -= need;
        }
        (allowed, u64::try_from(self.level / self.interval).unwrap())
    }
}

fn steps() -> impl Strategy<Value = Vec<(u32, u64)>> {
    proptest::collection::vec((0u32..3_000, 0u64..=40), 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn limiter_matches_a_token_bucket(per_minute in 1u64..=600, burst in 1u64..=40, steps in steps()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut config = RateLimitingConfig::default();
        config.global.requests_per_minute = per_minute;
        config.global.burst = burst;
        let limiter = Limiter::new(&config, &Overrides::empty(), Arc::new(MemoryStore::default())).unwrap();
        let interval = i128::from(60_000_000_000u64 / per_minute);
        let mut reference = TokenBucket { level: i128::from(burst) * interval, capacity: i128::from(burst) * interval, interval };
        let ip: IpAddr = "198.51.100.7".parse().unwrap();
        let mut now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        for (elapsed_ms, cost) in steps {
            let cost = cost.min(burst);
            now += Duration::milliseconds(i64::from(elapsed_ms));
            let (allowed, remaining) = reference.take(i128::from(elapsed_ms) * 1_000_000, cost);
            let verdict = runtime.block_on(limiter.check(now, &[Request::ip(LimitName::GlobalPerIp, ip, cost)])).unwrap();
            prop_assert_eq!(verdict.allowed, allowed);
            prop_assert_eq!(verdict.binding.unwrap().remaining, remaining);
        }
    }
}
