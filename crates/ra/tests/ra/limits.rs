//! The five layers of the limiter chain (`docs/rate-limits.md`): global per IP, account creation
//! per IP, order creation per account (orders, SAN budget, failed validations), pending
//! authorizations and duplicate certificates (the database-backed two). Every 429 says exactly
//! how long to wait, and enforce is told apart from shadow.

use std::net::IpAddr;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use acme_core::ids::AccountId;
use acme_core::problem::ProblemType;
use acme_core::status::ChallengeStatus;
use metrics::Counter;
use metrics::Gauge;
use metrics::Histogram;
use metrics::Key;
use metrics::KeyName;
use metrics::Metadata;
use metrics::SharedString;
use metrics::Unit;
use ra::Refusal;
use ra::verdicts::FailedValidationHook;
use ra::verdicts::ValidationHook;
use ratelimits::config::Mode;
use ratelimits::limiter::DECISIONS;
use storage::model::ValidationRecorded;

use crate::harness::CLIENT;
use crate::harness::account_request;
use crate::harness::client_ip;
use crate::harness::dns;
use crate::harness::harness;
use crate::harness::key;
use crate::harness::problem_kind;
use crate::harness::rate_limited;
use crate::harness::refusal;

// Layer 1: every ACME POST from an address.

#[tokio::test]
async fn the_global_limit_refuses_past_the_burst_and_says_to_wait_one_emission_interval() {
    let h = harness()
        .limits(|l| {
            l.global.enabled = true;
            l.global.requests_per_minute = 60;
            l.global.burst = 2;
        })
        .build()
        .await;
    h.ra.charge_request(CLIENT).await.unwrap();
    h.ra.charge_request(CLIENT).await.unwrap();
    let (limit, retry_after) = rate_limited(h.ra.charge_request(CLIENT).await);
    assert_eq!(limit, "global");
    assert_eq!(retry_after, 1);
    // Another address has its own bucket.
    h.ra.charge_request(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)))
        .await
        .unwrap();
    h.advance(time::Duration::seconds(1));
    h.ra.charge_request(CLIENT).await.unwrap();
}

#[tokio::test]
async fn a_global_refusal_reports_the_policy_with_nothing_left() {
    let h = harness()
        .limits(|l| {
            l.global.enabled = true;
            l.global.requests_per_minute = 60;
            l.global.burst = 1;
        })
        .build()
        .await;
    let spent = h.ra.charge_request(CLIENT).await.unwrap();
    let info = spent.info.expect("the policy that applied");
    assert_eq!(info.items()[0].name, "global");
    assert_eq!(info.items()[0].quota, 1);
    assert_eq!(info.items()[0].remaining, 0);
    match refusal(h.ra.charge_request(CLIENT).await) {
        Refusal::RateLimited { info, detail, .. } => {
            assert_eq!(info.items()[0].remaining, 0);
            assert!(detail.contains("2026-03-02 09:00:01 UTC"), "{detail}");
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
}

#[tokio::test]
async fn a_refunded_request_gives_its_global_token_back() {
    let h = harness()
        .limits(|l| {
            l.global.enabled = true;
            l.global.requests_per_minute = 1;
            l.global.burst = 1;
        })
        .build()
        .await;
    let spent = h.ra.charge_request(CLIENT).await.unwrap();
    h.ra.refund(&spent).await;
    h.ra.charge_request(CLIENT).await.unwrap();
    assert_eq!(
        rate_limited(h.ra.charge_request(CLIENT).await),
        ("global", 60)
    );
}

#[tokio::test]
async fn a_whitelisted_address_is_never_charged_the_global_limit() {
    let h = harness()
        .limits(|l| {
            l.global.enabled = true;
            l.global.requests_per_minute = 1;
            l.global.burst = 1;
            l.whitelist = vec!["192.0.2.0/24".parse().unwrap()];
        })
        .build()
        .await;
    for _ in 0..5 {
        let spent = h.ra.charge_request(CLIENT).await.unwrap();
        assert!(spent.info.is_none(), "no policy applies");
    }
}

#[tokio::test]
async fn a_global_limit_in_shadow_mode_never_refuses() {
    let h = harness()
        .limits(|l| {
            l.global.enabled = true;
            l.global.mode = Mode::Shadow;
            l.global.requests_per_minute = 1;
            l.global.burst = 1;
        })
        .build()
        .await;
    for _ in 0..5 {
        h.ra.charge_request(CLIENT).await.unwrap();
    }
}

#[tokio::test]
async fn ipv6_clients_share_the_global_bucket_of_their_slash_64() {
    let h = harness()
        .limits(|l| {
            l.global.enabled = true;
            l.global.requests_per_minute = 60;
            l.global.burst = 1;
            l.ipv6_prefix_length = 64;
        })
        .build()
        .await;
    h.ra.charge_request("2001:db8:1:2::1".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(
        rate_limited(
            h.ra.charge_request("2001:db8:1:2::ffff".parse().unwrap())
                .await
        ),
        ("global", 1)
    );
    h.ra.charge_request("2001:db8:1:3::1".parse().unwrap())
        .await
        .unwrap();
}

// Layer 2: account creation per address.

#[tokio::test]
async fn account_creation_past_the_burst_is_refused_until_the_next_token() {
    let h = harness()
        .limits(|l| {
            l.account_creation.enabled = true;
            l.account_creation.per_ip_per_hour = 6;
            l.account_creation.burst = 1;
        })
        .build()
        .await;
    h.account().await;
    let (limit, retry_after) =
        rate_limited(h.ra.new_account(account_request(key().public_jwk())).await);
    assert_eq!(limit, "account-creation");
    assert_eq!(retry_after, 600);
    h.advance(time::Duration::seconds(599));
    assert_eq!(
        rate_limited(h.ra.new_account(account_request(key().public_jwk())).await),
        ("account-creation", 1)
    );
    h.advance(time::Duration::seconds(1));
    h.account().await;
}

#[tokio::test]
async fn a_registered_key_is_answered_with_its_account_even_when_the_address_has_no_creations_left()
{
    let h = harness()
        .limits(|l| {
            l.account_creation.enabled = true;
            l.account_creation.per_ip_per_hour = 1;
            l.account_creation.burst = 1;
        })
        .build()
        .await;
    let (account, key) = h.account().await;
    let again = h.ra.new_account(account_request(key.public_jwk())).await;
    let Ok(ra::accounts::Registered::Existing(existing)) = again else {
        panic!("expected the existing account, got {again:?}");
    };
    assert_eq!(existing.id, account.id);
}

#[tokio::test]
async fn a_new_account_refused_before_the_charge_costs_no_account_creation_token() {
    let h = harness()
        .limits(|l| {
            l.account_creation.enabled = true;
            l.account_creation.per_ip_per_hour = 1;
            l.account_creation.burst = 1;
        })
        .build()
        .await;
    let mut bad = account_request(key().public_jwk());
    bad.contacts = Some(vec!["tel:1".to_owned()]);
    assert_eq!(
        problem_kind(h.ra.new_account(bad).await),
        ProblemType::UnsupportedContact
    );
    h.account().await;
}

#[tokio::test]
async fn account_creation_in_shadow_mode_never_refuses() {
    let h = harness()
        .limits(|l| {
            l.account_creation.enabled = true;
            l.account_creation.mode = Mode::Shadow;
            l.account_creation.per_ip_per_hour = 1;
            l.account_creation.burst = 1;
        })
        .build()
        .await;
    for _ in 0..3 {
        h.account().await;
    }
}

// Layer 2 of new-order: orders and the SAN budget per account.

#[tokio::test]
async fn order_creation_past_the_burst_is_refused_until_the_next_token() {
    let h = harness()
        .limits(|l| {
            l.order_creation.enabled = true;
            l.order_creation.orders_per_account_per_hour = 6;
            l.order_creation.order_burst = 2;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    h.order(&account, &["a.example.com"]).await.unwrap();
    h.order(&account, &["b.example.com"]).await.unwrap();
    assert_eq!(
        rate_limited(h.order(&account, &["c.example.com"]).await),
        ("order-creation", 600)
    );
    // Another account has its own bucket.
    let (other, _) = h.account().await;
    h.order(&other, &["c.example.com"]).await.unwrap();
    h.advance(time::Duration::seconds(600));
    h.order(&account, &["c.example.com"]).await.unwrap();
}

#[tokio::test]
async fn a_created_order_reports_every_policy_that_applied() {
    let h = harness()
        .limits(|l| {
            l.order_creation.enabled = true;
            l.order_creation.orders_per_account_per_hour = 6;
            l.order_creation.order_burst = 2;
            l.order_creation.san_budget_per_account_per_hour = 10;
            l.pending_authorizations.enabled = true;
            l.pending_authorizations.max = 5;
            l.duplicate_certificate.enabled = true;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    let created = h
        .order(&account, &["a.example.com", "b.example.com"])
        .await
        .unwrap();
    let info = created.rate_limit.expect("policies applied");
    let by_name = |name: &str| {
        info.items()
            .iter()
            .find(|i| i.name == name)
            .unwrap_or_else(|| panic!("{name} in {info:?}"))
            .clone()
    };
    assert_eq!(by_name("order-creation").remaining, 1);
    assert_eq!(by_name("san-budget").remaining, 8);
    let pending = by_name("pending-authorizations");
    assert_eq!((pending.quota, pending.remaining), (5, 3));
    assert_eq!(pending.reset_secs, 7 * 86_400);
    let duplicate = by_name("duplicate-certificate");
    assert_eq!((duplicate.quota, duplicate.remaining), (5, 5));
}

#[tokio::test]
async fn an_order_with_more_names_than_the_whole_san_budget_is_rejected_identifier() {
    let h = harness()
        .limits(|l| {
            l.order_creation.enabled = true;
            l.order_creation.san_budget_per_account_per_hour = 3;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    let outcome = h
        .order(
            &account,
            &[
                "a.example.com",
                "b.example.com",
                "c.example.com",
                "d.example.com",
            ],
        )
        .await;
    assert_eq!(problem_kind(outcome), ProblemType::RejectedIdentifier);
}

#[tokio::test]
async fn an_order_with_more_names_than_the_whole_san_budget_in_shadow_mode_is_allowed() {
    let h = harness()
        .limits(|l| {
            l.order_creation.enabled = true;
            l.order_creation.mode = Mode::Shadow;
            l.order_creation.san_budget_per_account_per_hour = 3;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    let names = [
        "a.example.com",
        "b.example.com",
        "c.example.com",
        "d.example.com",
    ];
    // Never refused, and never a server error (a cost above the burst is one to the limiter).
    let created = h.order(&account, &names).await.unwrap();
    let reported = created
        .rate_limit
        .map(|i| i.items().iter().any(|i| i.name == "san-budget"))
        .unwrap_or(false);
    assert!(!reported, "a shadow limit is not reported to the client");
    // Again: nothing was left in a state that refuses.
    h.order(
        &account,
        &[
            "e.example.com",
            "f.example.com",
            "g.example.com",
            "h.example.com",
        ],
    )
    .await
    .unwrap();
}

/// Counts the shadow denials of the SAN budget recorded in [`DECISIONS`]; every other metric
/// goes nowhere.
#[derive(Default)]
struct SanBudgetShadowDenials(Arc<AtomicU64>);

impl metrics::Recorder for SanBudgetShadowDenials {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let label = |k: &str, v: &str| key.labels().any(|l| l.key() == k && l.value() == v);
        if key.name() == DECISIONS
            && label("limit", "san-budget")
            && label("outcome", "shadow_denied")
        {
            Counter::from_arc(Arc::clone(&self.0))
        } else {
            Counter::noop()
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// Counted as the limiter counts the shadow denials it decides. A runtime of its own: the
/// recorder is this thread's, so every metric of the test must be recorded on it.
#[test]
fn an_order_with_more_names_than_the_whole_san_budget_in_shadow_mode_is_counted_as_a_shadow_denial()
{
    let recorder = SanBudgetShadowDenials::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let h = harness()
                .limits(|l| {
                    l.order_creation.enabled = true;
                    l.order_creation.mode = Mode::Shadow;
                    l.order_creation.san_budget_per_account_per_hour = 3;
                })
                .build()
                .await;
            let (account, _) = h.account().await;
            h.order(&account, &["a.example.com", "b.example.com"])
                .await
                .unwrap();
            h.order(
                &account,
                &[
                    "c.example.com",
                    "d.example.com",
                    "e.example.com",
                    "f.example.com",
                ],
            )
            .await
            .unwrap();
        });
    });
    assert_eq!(recorder.0.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_spent_san_budget_refuses_the_next_order_until_it_refills() {
    let h = harness()
        .limits(|l| {
            l.order_creation.enabled = true;
            l.order_creation.san_budget_per_account_per_hour = 3;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    h.order(
        &account,
        &["a.example.com", "b.example.com", "c.example.com"],
    )
    .await
    .unwrap();
    assert_eq!(
        rate_limited(h.order(&account, &["d.example.com"]).await),
        ("san-budget", 1200)
    );
}

#[tokio::test]
async fn order_creation_in_shadow_mode_never_refuses() {
    let h = harness()
        .limits(|l| {
            l.order_creation.enabled = true;
            l.order_creation.mode = Mode::Shadow;
            l.order_creation.orders_per_account_per_hour = 1;
            l.order_creation.order_burst = 1;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    for name in ["a.example.com", "b.example.com", "c.example.com"] {
        h.order(&account, &[name]).await.unwrap();
    }
}

// Layer 4: failed validations per (account, identifier).

async fn fail_validation(h: &crate::harness::Harness, account: AccountId, name: &str) {
    let hook = FailedValidationHook::new(
        Arc::clone(h.ra.limits().limiter()),
        Arc::new(h.clock.clone()),
    );
    hook.on_validation(&ValidationRecorded {
        account_id: account,
        authz_id: acme_core::ids::AuthzId(1),
        identifier: dns(name),
        status: ChallengeStatus::Invalid,
        changed: true,
    })
    .await;
}

#[tokio::test]
async fn failed_validations_past_the_limit_refuse_orders_for_that_name_by_that_account_only() {
    let h = harness()
        .limits(|l| {
            l.failed_validation.enabled = true;
            l.failed_validation.max_per_window = 2;
            l.failed_validation.window = acme_core::duration::ConfigDuration::from_secs(3600);
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    let (other, _) = h.account().await;
    fail_validation(&h, account.id, "a.example.com").await;
    h.order(&account, &["a.example.com"]).await.unwrap();
    fail_validation(&h, account.id, "a.example.com").await;
    match refusal(h.order(&account, &["a.example.com", "b.example.com"]).await) {
        Refusal::RateLimited {
            limit,
            retry_after_secs,
            detail,
            ..
        } => {
            assert_eq!(limit, "failed-validation");
            assert_eq!(retry_after_secs, 1800);
            assert!(
                detail.contains("for a.example.com by this account"),
                "{detail}"
            );
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    // Other names of the account, and the same name for another account, are not held back.
    h.order(&account, &["b.example.com"]).await.unwrap();
    h.order(&other, &["a.example.com"]).await.unwrap();
    h.advance(time::Duration::seconds(1800));
    h.order(&account, &["a.example.com"]).await.unwrap();
}

#[tokio::test]
async fn a_valid_verdict_spends_no_failed_validation_token() {
    let h = harness()
        .limits(|l| {
            l.failed_validation.enabled = true;
            l.failed_validation.max_per_window = 1;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    let hook = FailedValidationHook::new(
        Arc::clone(h.ra.limits().limiter()),
        Arc::new(h.clock.clone()),
    );
    hook.on_validation(&ValidationRecorded {
        account_id: account.id,
        authz_id: acme_core::ids::AuthzId(1),
        identifier: dns("a.example.com"),
        status: ChallengeStatus::Valid,
        changed: true,
    })
    .await;
    h.order(&account, &["a.example.com"]).await.unwrap();
}

#[tokio::test]
async fn an_order_refused_by_a_later_layer_gives_its_order_token_back() {
    let h = harness()
        .limits(|l| {
            l.order_creation.enabled = true;
            l.order_creation.orders_per_account_per_hour = 1;
            l.order_creation.order_burst = 2;
            l.pending_authorizations.enabled = true;
            l.pending_authorizations.max = 1;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    let first = h.order(&account, &["a.example.com"]).await.unwrap().order;
    // Refused by the pending-authorization guard after the order token was spent.
    assert_eq!(
        rate_limited(h.order(&account, &["b.example.com"]).await).0,
        "pending-authorizations"
    );
    let authz =
        h.ra.authorization_of(account.id, first.authz_ids[0])
            .await
            .unwrap();
    h.ra.deactivate_authorization(account.id, &authz)
        .await
        .unwrap();
    // One token was left after the first order: it is still there.
    h.order(&account, &["b.example.com"]).await.unwrap();
    assert_eq!(
        rate_limited(h.order(&account, &["c.example.com"]).await).0,
        "order-creation"
    );
}

// Layer 3: pending authorizations per account (the database's count).

#[tokio::test]
async fn pending_authorizations_past_the_max_are_refused_until_the_soonest_expires() {
    let h = harness()
        .limits(|l| {
            l.pending_authorizations.enabled = true;
            l.pending_authorizations.max = 2;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    h.order(&account, &["a.example.com"]).await.unwrap();
    h.advance(time::Duration::hours(1));
    h.order(&account, &["b.example.com"]).await.unwrap();
    h.advance(time::Duration::hours(1));
    match refusal(h.order(&account, &["c.example.com"]).await) {
        Refusal::RateLimited {
            limit,
            retry_after_secs,
            info,
            ..
        } => {
            assert_eq!(limit, "pending-authorizations");
            // The first authorization expires 7 days after it was made, 2 hours ago.
            assert_eq!(retry_after_secs, 7 * 86_400 - 2 * 3600);
            assert_eq!(info.items()[0].quota, 2);
            assert_eq!(info.items()[0].remaining, 0);
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    // Another account is not held back.
    let (other, _) = h.account().await;
    h.order(&other, &["c.example.com"]).await.unwrap();
}

#[tokio::test]
async fn an_order_that_would_pass_the_pending_max_is_refused_whole() {
    let h = harness()
        .limits(|l| {
            l.pending_authorizations.enabled = true;
            l.pending_authorizations.max = 2;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    h.order(&account, &["a.example.com"]).await.unwrap();
    assert_eq!(
        rate_limited(h.order(&account, &["b.example.com", "c.example.com"]).await).0,
        "pending-authorizations"
    );
}

#[tokio::test]
async fn pending_authorizations_in_shadow_mode_never_refuse() {
    let h = harness()
        .limits(|l| {
            l.pending_authorizations.enabled = true;
            l.pending_authorizations.mode = Mode::Shadow;
            l.pending_authorizations.max = 1;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    h.order(&account, &["a.example.com"]).await.unwrap();
    let created = h.order(&account, &["b.example.com"]).await.unwrap();
    let reported = created
        .rate_limit
        .map(|info| {
            info.items()
                .iter()
                .any(|i| i.name == "pending-authorizations")
        })
        .unwrap_or(false);
    assert!(!reported, "a shadow limit is not reported to the client");
}

// Layer 5: duplicate certificates per account and exact identifier set.

#[tokio::test]
async fn a_duplicate_certificate_past_the_max_is_refused_until_the_oldest_leaves_the_window() {
    let h = harness()
        .limits(|l| {
            l.duplicate_certificate.enabled = true;
            l.duplicate_certificate.max_per_window = 1;
            l.duplicate_certificate.window =
                acme_core::duration::ConfigDuration::from_secs(168 * 3600);
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    h.issue(&account, &["a.example.com", "b.example.com"]).await;
    h.advance(time::Duration::hours(1));
    let (limit, retry_after) =
        rate_limited(h.order(&account, &["b.example.com", "a.example.com"]).await);
    assert_eq!(limit, "duplicate-certificate");
    assert_eq!(retry_after, 168 * 3600 - 3600);
    // Another set, or the same set for another account, is not a duplicate.
    h.order(&account, &["a.example.com"]).await.unwrap();
    let (other, _) = h.account().await;
    h.order(&other, &["a.example.com", "b.example.com"])
        .await
        .unwrap();
    h.advance(time::Duration::hours(167));
    h.order(&account, &["a.example.com", "b.example.com"])
        .await
        .unwrap();
}

#[tokio::test]
async fn duplicate_certificates_in_shadow_mode_never_refuse() {
    let h = harness()
        .limits(|l| {
            l.duplicate_certificate.enabled = true;
            l.duplicate_certificate.mode = Mode::Shadow;
            l.duplicate_certificate.max_per_window = 1;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    h.issue(&account, &["a.example.com"]).await;
    h.issue(&account, &["a.example.com"]).await;
}

// A store that does not answer: the limiter fails open (an outage of the limiter must not become
// an outage of issuance), for every GCRA layer; the database-backed layers still hold.

#[tokio::test]
async fn the_global_limit_lets_requests_through_when_its_store_does_not_answer() {
    let h = harness()
        .limits(|l| {
            l.global.enabled = true;
            l.global.requests_per_minute = 1;
            l.global.burst = 1;
        })
        .store_down()
        .build()
        .await;
    for _ in 0..3 {
        let spent = h.ra.charge_request(CLIENT).await.unwrap();
        let reported = spent.info.map(|i| i.items().len()).unwrap_or(0);
        assert_eq!(reported, 0, "no bucket state to report");
    }
}

#[tokio::test]
async fn account_creation_lets_accounts_through_when_its_store_does_not_answer() {
    let h = harness()
        .limits(|l| {
            l.account_creation.enabled = true;
            l.account_creation.per_ip_per_hour = 1;
            l.account_creation.burst = 1;
        })
        .store_down()
        .build()
        .await;
    h.account().await;
    h.account().await;
}

#[tokio::test]
async fn orders_pass_the_gcra_layers_but_not_the_database_layers_when_the_store_does_not_answer() {
    let h = harness()
        .limits(|l| {
            l.order_creation.enabled = true;
            l.order_creation.orders_per_account_per_hour = 1;
            l.order_creation.order_burst = 1;
            l.pending_authorizations.enabled = true;
            l.pending_authorizations.max = 2;
        })
        .store_down()
        .build()
        .await;
    let (account, _) = h.account().await;
    h.order(&account, &["a.example.com"]).await.unwrap();
    h.order(&account, &["b.example.com"]).await.unwrap();
    assert_eq!(
        rate_limited(h.order(&account, &["c.example.com"]).await).0,
        "pending-authorizations"
    );
}

// Reloading (SIGHUP): the new limits apply to the next request, the database-backed ones too.

#[tokio::test]
async fn a_reloaded_pending_authorization_max_applies_to_the_next_order() {
    let h = harness()
        .limits(|l| {
            l.pending_authorizations.enabled = true;
            l.pending_authorizations.max = 1;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    h.order(&account, &["a.example.com"]).await.unwrap();
    assert_eq!(
        rate_limited(h.order(&account, &["b.example.com"]).await).0,
        "pending-authorizations"
    );
    let mut looser = crate::harness::no_limits();
    looser.pending_authorizations.enabled = true;
    looser.pending_authorizations.max = 2;
    h.ra.limits()
        .reload(looser, &ratelimits::Overrides::empty())
        .await
        .unwrap();
    h.order(&account, &["b.example.com"]).await.unwrap();
}

#[tokio::test]
async fn a_reload_that_turns_the_order_limit_on_refuses_the_next_order_past_it() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    for name in ["a.example.com", "b.example.com"] {
        h.order(&account, &[name]).await.unwrap();
    }
    let mut stricter = crate::harness::no_limits();
    stricter.order_creation.enabled = true;
    stricter.order_creation.orders_per_account_per_hour = 1;
    stricter.order_creation.order_burst = 1;
    h.ra.limits()
        .reload(stricter, &ratelimits::Overrides::empty())
        .await
        .unwrap();
    h.order(&account, &["c.example.com"]).await.unwrap();
    assert_eq!(
        rate_limited(h.order(&account, &["d.example.com"]).await),
        ("order-creation", 3600)
    );
}

#[tokio::test]
async fn a_created_account_reports_the_account_creation_policy() {
    let h = harness()
        .limits(|l| {
            l.account_creation.enabled = true;
            l.account_creation.per_ip_per_hour = 6;
            l.account_creation.burst = 3;
        })
        .build()
        .await;
    let created =
        h.ra.new_account(account_request(key().public_jwk()))
            .await
            .unwrap();
    let ra::accounts::Registered::Created { rate_limit, .. } = created else {
        panic!("a new account");
    };
    let info = rate_limit.expect("the policy that applied");
    assert_eq!(info.items().len(), 1);
    let item = &info.items()[0];
    assert_eq!(
        (item.name, item.quota, item.remaining),
        ("account-creation", 3, 2)
    );
    assert_eq!(item.window_secs, 1800, "3 tokens at one per 600 s");
}

#[tokio::test]
async fn revoking_a_certificate_frees_its_duplicate_certificate_slot() {
    let h = harness()
        .limits(|l| {
            l.duplicate_certificate.enabled = true;
            l.duplicate_certificate.max_per_window = 1;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    assert_eq!(
        rate_limited(h.order(&account, &["a.example.com"]).await).0,
        "duplicate-certificate"
    );
    h.ra.revoke(
        ra::revocation::Revoker::Account(account.id),
        &cert.der,
        None,
        client_ip(),
    )
    .await
    .unwrap();
    h.order(&account, &["a.example.com"]).await.unwrap();
}
