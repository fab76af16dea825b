//! The limiter: whitelist, IPv6 prefixes, overrides, reload, shadow mode, admin calls.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ratelimits::BucketId;
use ratelimits::Error;
use ratelimits::Kind;
use ratelimits::LimitName;
use ratelimits::Limiter;
use ratelimits::MemoryStore;
use ratelimits::Overrides;
use ratelimits::Request;
use ratelimits::config::Mode;
use ratelimits::config::RateLimitingConfig;
use ratelimits::config::parse_ip_or_cidr;
use time::OffsetDateTime;

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn limiter(config: &RateLimitingConfig, overrides: &str) -> Limiter {
    Limiter::new(
        config,
        &Overrides::parse(overrides).unwrap(),
        Arc::new(MemoryStore::default()),
    )
    .unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

async fn admitted(limiter: &Limiter, request: &Request, tries: usize) -> usize {
    let mut n = 0;
    for _ in 0..tries {
        if limiter
            .check(now(), std::slice::from_ref(request))
            .await
            .unwrap()
            .allowed
        {
            n += 1;
        }
    }
    n
}

#[tokio::test]
async fn whitelist_bypasses_ip_limits_only() {
    let mut config = RateLimitingConfig::default();
    config.whitelist = vec![
        parse_ip_or_cidr("10.0.0.0/8").unwrap(),
        parse_ip_or_cidr("::1").unwrap(),
    ];
    let limiter = limiter(&config, "");
    assert!(limiter.is_whitelisted(ip("10.1.2.3")));
    assert!(!limiter.is_whitelisted(ip("11.1.2.3")));
    let account = Request::ip(LimitName::NewAccountPerIp, ip("10.1.2.3"), 1);
    assert_eq!(admitted(&limiter, &account, 10).await, 10);
    let v6_loopback = Request::ip(LimitName::NewAccountPerIp, ip("::1"), 1);
    assert_eq!(
        admitted(&limiter, &v6_loopback, 10).await,
        10,
        "whitelisting looks at the full address"
    );
    let other = Request::ip(LimitName::NewAccountPerIp, ip("11.1.2.3"), 1);
    assert_eq!(admitted(&limiter, &other, 10).await, 2);
    let orders = Request::new(LimitName::NewOrdersPerAccount, BucketId::Account(1), 1);
    assert_eq!(
        admitted(&limiter, &orders, 10).await,
        5,
        "account limits still apply"
    );
}

#[tokio::test]
async fn ipv6_clients_share_their_prefix_bucket() {
    let limiter = limiter(&RateLimitingConfig::default(), "");
    let a = Request::ip(LimitName::NewAccountPerIp, ip("2001:db8:1:2::a"), 1);
    let b = Request::ip(LimitName::NewAccountPerIp, ip("2001:db8:1:2:ffff::b"), 1);
    let c = Request::ip(LimitName::NewAccountPerIp, ip("2001:db8:1:3::a"), 1);
    assert!(
        limiter
            .check(now(), std::slice::from_ref(&a))
            .await
            .unwrap()
            .allowed
    );
    assert!(
        limiter
            .check(now(), std::slice::from_ref(&b))
            .await
            .unwrap()
            .allowed
    );
    let verdict = limiter
        .check(now(), std::slice::from_ref(&a))
        .await
        .unwrap();
    assert!(!verdict.allowed);
    let binding = verdict.binding.unwrap();
    assert_eq!(
        binding.key.to_string(),
        "account-creation:2001:db8:1:2::/64"
    );
    assert_eq!(
        (binding.name, binding.burst, binding.count, binding.period),
        (LimitName::NewAccountPerIp, 2, 5, Duration::from_secs(3600))
    );
    assert_eq!(binding.retry_in, Duration::from_secs(720));
    assert!(
        limiter
            .check(now(), std::slice::from_ref(&c))
            .await
            .unwrap()
            .allowed
    );
    assert_eq!(
        limiter.ip_id(ip("2001:db8:1:2::a")).to_string(),
        "2001:db8:1:2::/64"
    );
}

#[tokio::test]
async fn binding_is_the_denial_and_a_disabled_limit_has_no_bucket() {
    let mut config = RateLimitingConfig::default();
    config.global.enabled = false;
    let limiter = limiter(&config, "");
    let client = ip("192.0.2.1");
    let verdict = limiter
        .check(now(), &[Request::ip(LimitName::GlobalPerIp, client, 1)])
        .await
        .unwrap();
    assert_eq!((verdict.allowed, verdict.binding), (true, None));
    // Orders: exhaust the 5-order burst; the SAN budget (check-only here) has plenty left and a
    // far longer interval, yet the verdict is the order denial (boulder#8674).
    let account = BucketId::Account(9);
    let batch = |sans: u64| {
        vec![
            Request::new(LimitName::NewOrdersPerAccount, account.clone(), 1),
            Request::new(LimitName::SanBudgetPerAccount, account.clone(), sans)
                .with_kind(Kind::CheckOnly),
        ]
    };
    for _ in 0..5 {
        assert!(limiter.check(now(), &batch(99)).await.unwrap().allowed);
    }
    let verdict = limiter.check(now(), &batch(99)).await.unwrap();
    assert!(!verdict.allowed);
    assert_eq!(
        verdict.binding.unwrap().name,
        LimitName::NewOrdersPerAccount
    );
}

#[tokio::test]
async fn shadow_mode_reports_but_never_denies() {
    let mut config = RateLimitingConfig::default();
    config.account_creation.mode = Mode::Shadow;
    let limiter = limiter(&config, "");
    let request = Request::ip(LimitName::NewAccountPerIp, ip("192.0.2.9"), 1);
    for _ in 0..2 {
        assert!(
            limiter
                .check(now(), std::slice::from_ref(&request))
                .await
                .unwrap()
                .shadow_denials
                .is_empty()
        );
    }
    let verdict = limiter
        .check(now(), std::slice::from_ref(&request))
        .await
        .unwrap();
    assert!(verdict.allowed);
    assert_eq!(verdict.shadow_denials.len(), 1);
    assert_eq!(verdict.shadow_denials[0].name, LimitName::NewAccountPerIp);
    assert!(verdict.binding.is_none());
}

#[tokio::test]
async fn overrides_and_reload() {
    let config = RateLimitingConfig::default();
    let overrides = "- limit: account-creation\n  burst: 4\n  ids: [\"192.0.2.0/24\"]\n";
    let limiter = limiter(&config, overrides);
    let special = Request::ip(LimitName::NewAccountPerIp, ip("192.0.2.50"), 1);
    let plain = Request::ip(LimitName::NewAccountPerIp, ip("198.51.100.1"), 1);
    assert_eq!(admitted(&limiter, &special, 10).await, 4);
    assert_eq!(admitted(&limiter, &plain, 10).await, 2);

    // A bad reload keeps the old policy.
    let mut bad = config.clone();
    bad.global.burst = 0;
    assert!(limiter.reload(&bad, &Overrides::empty()).is_err());
    assert_eq!(
        limiter
            .limit_for(
                LimitName::NewAccountPerIp,
                &BucketId::Ip(parse_ip_or_cidr("192.0.2.50").unwrap())
            )
            .unwrap()
            .burst(),
        4
    );

    // Raising the default takes effect at once for the exhausted bucket (boulder#8785): with 3600
    // per hour and a burst of 10, the bucket is "empty" and refills within a second.
    let mut raised = config.clone();
    raised.account_creation.per_ip_per_hour = 3600;
    raised.account_creation.burst = 10;
    limiter.reload(&raised, &Overrides::empty()).unwrap();
    let verdict = limiter
        .check(now(), std::slice::from_ref(&plain))
        .await
        .unwrap();
    assert!(!verdict.allowed);
    assert_eq!(verdict.binding.unwrap().retry_in, Duration::from_secs(1));
    let later = now() + time::Duration::seconds(1);
    assert!(
        limiter
            .check(later, std::slice::from_ref(&plain))
            .await
            .unwrap()
            .allowed
    );
}

#[tokio::test]
async fn show_reset_refund_and_wrong_ids() {
    let limiter = limiter(&RateLimitingConfig::default(), "");
    let account = BucketId::parse(LimitName::NewOrdersPerAccount, "77").unwrap();
    let request = Request::new(LimitName::NewOrdersPerAccount, account.clone(), 3);
    assert!(
        limiter
            .check(now(), std::slice::from_ref(&request))
            .await
            .unwrap()
            .allowed
    );
    let state = limiter
        .show(now(), LimitName::NewOrdersPerAccount, &account)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (state.key.as_str(), state.remaining),
        ("order-creation:77", 2)
    );
    assert_eq!(state.reset_at, now() + time::Duration::seconds(3 * 180));
    limiter
        .refund(
            now(),
            &[Request::new(
                LimitName::NewOrdersPerAccount,
                account.clone(),
                1,
            )],
        )
        .await
        .unwrap();
    assert_eq!(
        limiter
            .show(now(), LimitName::NewOrdersPerAccount, &account)
            .await
            .unwrap()
            .unwrap()
            .remaining,
        3
    );
    limiter
        .reset(LimitName::NewOrdersPerAccount, &account)
        .await
        .unwrap();
    assert_eq!(
        limiter
            .show(now(), LimitName::NewOrdersPerAccount, &account)
            .await
            .unwrap()
            .unwrap()
            .remaining,
        5
    );
    assert!(
        limiter
            .show(
                now(),
                LimitName::ConsecutiveFailuresPerAccountIdentifier,
                &BucketId::AccountIdentifier {
                    account: 1,
                    identifier: "a.example".into()
                }
            )
            .await
            .unwrap()
            .is_none()
    );

    let wrong = Request::ip(LimitName::NewOrdersPerAccount, ip("192.0.2.1"), 1);
    assert!(matches!(
        limiter.check(now(), &[wrong]).await,
        Err(Error::InvalidId { .. })
    ));
    let too_big = Request::new(LimitName::NewOrdersPerAccount, account.clone(), 6);
    assert!(matches!(
        limiter.check(now(), &[too_big]).await,
        Err(Error::CostAboveBurst { .. })
    ));
}

/// Every enforced bucket of a batch is reported, so clients can watch each quota; a check-only
/// bucket reports what it holds (a fresh one is full), never the hypothetical spend.
#[tokio::test]
async fn applied_lists_every_enforced_bucket_and_check_only_is_not_spent() {
    let mut config = RateLimitingConfig::default();
    config.failed_validation.mode = Mode::Shadow;
    config.zombie_pausing.enabled = true;
    let limiter = limiter(&config, "");
    let account = BucketId::Account(77);
    let pair = |name: &str| BucketId::AccountIdentifier {
        account: 77,
        identifier: name.to_owned(),
    };
    let batch = vec![
        Request::new(LimitName::NewOrdersPerAccount, account.clone(), 1),
        Request::new(LimitName::SanBudgetPerAccount, account.clone(), 3),
        Request::new(
            LimitName::ConsecutiveFailuresPerAccountIdentifier,
            pair("a.example"),
            1,
        )
        .with_kind(Kind::CheckOnly),
        // Shadow mode: decided and logged, but not a policy that applies to the client.
        Request::new(
            LimitName::FailedValidationPerAccountIdentifier,
            pair("a.example"),
            1,
        )
        .with_kind(Kind::CheckOnly),
    ];
    let first = limiter.check(now(), &batch).await.unwrap();
    let names: Vec<LimitName> = first.applied.iter().map(|b| b.name).collect();
    assert_eq!(
        names,
        [
            LimitName::NewOrdersPerAccount,
            LimitName::SanBudgetPerAccount,
            LimitName::ConsecutiveFailuresPerAccountIdentifier
        ]
    );
    let zombie = &first.applied[2];
    assert_eq!(
        zombie.remaining, zombie.burst,
        "a fresh check-only bucket is full"
    );
    assert_eq!(zombie.reset_in, Duration::ZERO);
    let second = limiter.check(now(), &batch).await.unwrap();
    for (a, b) in first.applied.iter().zip(&second.applied) {
        let spent = match a.name {
            LimitName::NewOrdersPerAccount => 1,
            LimitName::SanBudgetPerAccount => 3,
            _ => 0,
        };
        assert_eq!(a.remaining - b.remaining, spent, "{:?}", a.name);
    }
    // A denied batch spends nothing, and its allowed buckets say so.
    let too_many = vec![
        Request::new(LimitName::NewOrdersPerAccount, account.clone(), 1),
        Request::new(LimitName::SanBudgetPerAccount, account.clone(), 95),
    ];
    let denied = limiter.check(now(), &too_many).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.applied[0].remaining, second.applied[0].remaining);
    assert_eq!(denied.binding.unwrap().name, LimitName::SanBudgetPerAccount);
}
