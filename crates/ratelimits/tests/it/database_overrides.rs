//! Overrides of the database beside the file's: one parser for both, the database's winning for a
//! bucket both name, kept across a reload of the file, and a raised one admitting an exhausted
//! bucket at once.

use std::sync::Arc;
use std::time::Duration;

use ratelimits::BucketId;
use ratelimits::LimitName;
use ratelimits::Limiter;
use ratelimits::MemoryStore;
use ratelimits::Overrides;
use ratelimits::Request;
use ratelimits::config::RateLimitingConfig;
use ratelimits::config::parse_ip_or_cidr;
use ratelimits::overrides::OverrideEntry;
use ratelimits::overrides::OverrideId;
use time::OffsetDateTime;

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn entry(limit: &str, id: &str, burst: u64) -> OverrideEntry {
    OverrideEntry::single(limit, id, Some(burst), None, None).unwrap()
}

fn burst_of(limiter: &Limiter, limit: LimitName, id: &BucketId) -> u64 {
    limiter.limit_for(limit, id).unwrap().burst()
}

#[test]
fn one_override_is_checked_by_the_parser_of_the_file() {
    let e = OverrideEntry::single(
        "order-creation",
        "12345",
        Some(50),
        Some(500),
        Some(Duration::from_secs(3600)),
    )
    .unwrap();
    assert_eq!(e.limit, LimitName::NewOrdersPerAccount);
    assert_eq!(e.ids, vec![OverrideId::Account(12345)]);
    assert_eq!(
        (e.burst, e.count, e.period),
        (Some(50), Some(500), Some(Duration::from_secs(3600)))
    );
    let error = |limit: &str, id: &str, burst: Option<u64>| {
        OverrideEntry::single(limit, id, burst, None, None)
            .unwrap_err()
            .to_string()
    };
    let e = error("global", "12345", Some(2));
    assert!(e.contains("limit global") && e.contains("per IP"), "{e}");
    let e = error("order-creation", "10.0.0.1", Some(2));
    assert!(e.contains("not an account id"), "{e}");
    let e = error("no-such-limit", "1", Some(2));
    assert!(e.contains("unknown limit name"), "{e}");
    let e = error("global", "10.0.0.1", Some(0));
    assert!(e.contains("burst must be at least 1"), "{e}");
    let e = error("global", "10.0.0.1", None);
    assert!(e.contains("sets neither"), "{e}");
    let finer = OverrideEntry::single(
        "global",
        "10.0.0.1",
        None,
        Some(1_000_000_000),
        Some(Duration::from_millis(1)),
    )
    .unwrap()
    .resolve(&RateLimitingConfig::default())
    .unwrap_err()
    .to_string();
    assert!(finer.contains("finer than one per nanosecond"), "{finer}");
}

#[test]
fn ids_have_one_canonical_text() {
    let text = |limit: LimitName, id: &str| OverrideId::parse(limit, id).unwrap().to_string();
    assert_eq!(text(LimitName::GlobalPerIp, "10.0.0.1"), "10.0.0.1");
    assert_eq!(text(LimitName::GlobalPerIp, "10.0.0.1/32"), "10.0.0.1");
    assert_eq!(text(LimitName::GlobalPerIp, "10.0.0.7/24"), "10.0.0.0/24");
    assert_eq!(
        text(LimitName::GlobalPerIp, "::ffff:192.0.2.7"),
        "192.0.2.7"
    );
    assert_eq!(
        text(LimitName::GlobalPerIp, "2001:db8::/48"),
        "2001:db8::/48"
    );
    assert_eq!(text(LimitName::NewOrdersPerAccount, "12345"), "12345");
}

#[tokio::test]
async fn the_database_wins_over_the_file_and_survives_a_reload() {
    let config = RateLimitingConfig::default();
    let file = Overrides::parse(
        "- limit: order-creation\n  burst: 2\n  ids: [\"7\", \"8\"]\n- limit: global\n  burst: 9\n  ids: [\"10.0.0.0/8\"]\n",
    )
    .unwrap();
    let limiter = Limiter::new(&config, &file, Arc::new(MemoryStore::default())).unwrap();
    let seven = BucketId::Account(7);
    let eight = BucketId::Account(8);
    let address = BucketId::Ip(parse_ip_or_cidr("10.1.2.3").unwrap());
    assert_eq!(
        burst_of(&limiter, LimitName::NewOrdersPerAccount, &seven),
        2
    );

    let database = Overrides::from_entries(vec![
        entry("order-creation", "7", 40),
        entry("global", "10.1.2.3", 1),
    ]);
    limiter.set_database_overrides(&database).await.unwrap();
    assert_eq!(
        burst_of(&limiter, LimitName::NewOrdersPerAccount, &seven),
        40,
        "the database's wins"
    );
    assert_eq!(
        burst_of(&limiter, LimitName::NewOrdersPerAccount, &eight),
        2
    );
    assert_eq!(
        burst_of(&limiter, LimitName::GlobalPerIp, &address),
        1,
        "the address is more specific than the file's range"
    );
    let (in_file, in_database) = limiter.overrides_in_force();
    assert_eq!((in_file.pairs(), in_database.pairs()), (3, 2));

    // A reload of the file keeps the database's overrides in force.
    let mut raised = config.clone();
    raised.order_creation.order_burst = 11;
    limiter.reload(&raised, &Overrides::empty()).unwrap();
    assert_eq!(
        burst_of(&limiter, LimitName::NewOrdersPerAccount, &seven),
        40
    );
    assert_eq!(
        burst_of(&limiter, LimitName::NewOrdersPerAccount, &eight),
        11
    );

    // Taken out: the default again.
    limiter
        .set_database_overrides(&Overrides::empty())
        .await
        .unwrap();
    assert_eq!(
        burst_of(&limiter, LimitName::NewOrdersPerAccount, &seven),
        11
    );
}

#[tokio::test]
async fn a_raised_database_override_admits_an_exhausted_bucket_at_once() {
    let mut config = RateLimitingConfig::default();
    config.order_creation.orders_per_account_per_hour = 1;
    config.order_creation.order_burst = 1;
    let limiter = Limiter::new(
        &config,
        &Overrides::empty(),
        Arc::new(MemoryStore::default()),
    )
    .unwrap();
    let order = Request::new(LimitName::NewOrdersPerAccount, BucketId::Account(5), 1);
    let check = async || {
        limiter
            .check(now(), std::slice::from_ref(&order))
            .await
            .unwrap()
            .allowed
    };
    assert!(check().await);
    assert!(!check().await);
    let refreshed = limiter
        .set_database_overrides(&Overrides::from_entries(vec![entry(
            "order-creation",
            "5",
            3,
        )]))
        .await
        .unwrap();
    assert_eq!(refreshed, 1);
    assert!(check().await && check().await && check().await);
    assert!(!check().await);
    // The same set again changes nothing and refreshes nothing.
    let again = limiter
        .set_database_overrides(&Overrides::from_entries(vec![entry(
            "order-creation",
            "5",
            3,
        )]))
        .await
        .unwrap();
    assert_eq!(again, 0);
    assert!(!check().await);
    // A failed-validation override names an account, whose per-name buckets cannot be listed:
    // it applies without a refresh, and is no error.
    limiter
        .set_database_overrides(&Overrides::from_entries(vec![entry(
            "failed-validation",
            "5",
            3,
        )]))
        .await
        .unwrap();
}
