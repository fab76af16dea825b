use acme_core::ids::AuthzId;
use acme_core::ids::ChallengeId;
use acme_core::ids::OrderId;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::AuthzStatus;
use acme_core::status::ChallengeStatus;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use storage::Storage;
use storage::error::Error;
use storage::model::Authorization;
use storage::model::ChallengeStart;
use storage::model::Finalizing;
use storage::model::JobKind;
use storage::model::NotStarted;
use storage::model::Order;
use storage::model::OrderGuards;
use storage::model::PendingAuthzGuard;
use storage::model::StatusChange;
use time::Duration;

use crate::harness;
use crate::harness::Begun;
use crate::harness::Changed;
use crate::harness::Created;
use crate::harness::Started;
use crate::harness::dns;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    valid_path_to_certificate,
    authz_reuse,
    invalid_validation_propagates,
    order_and_authz_expiry,
    authz_deactivation,
    concurrent_finalize_has_one_winner,
    fail_order_and_account_listing,
    authorizations_and_challenges_keep_their_order,
);

async fn valid_path_to_certificate(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let mut new = harness::new_order(acct.id, &["a.example.com", "*.b.example.com"], now, true);
    new.not_before = Some(now);
    new.not_after = Some(now + Duration::days(30));
    new.profile = "short-lived".to_owned();
    let order = s
        .create_order(new.clone(), &OrderGuards::default(), now)
        .await
        .unwrap()
        .created();
    assert_eq!(order.status, OrderStatus::Pending);
    assert_eq!(order.account_id, acct.id);
    assert_eq!(order.identifiers, new.identifiers);
    assert_eq!(order.set_hash, new.set_hash);
    assert_eq!(order.not_before, Some(now));
    assert_eq!(order.not_after, Some(now + Duration::days(30)));
    assert_eq!(order.expires_at, new.expires_at);
    assert_eq!(order.error, None);
    assert_eq!(order.certificate_id, None);
    assert_eq!(order.created_at, now);
    assert_eq!(order.profile.as_deref(), Some("short-lived"));
    assert_eq!(order.authz_ids.len(), 2);
    assert_eq!(s.order(order.id, now).await.unwrap(), Some(order.clone()));
    assert_eq!(
        s.order(OrderId(order.id.0 + 1000), now).await.unwrap(),
        None
    );

    let first = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    let second = s
        .authorization(order.authz_ids[1], now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.identifier, dns("a.example.com"));
    assert_eq!(second.identifier, dns("*.b.example.com"));
    assert_eq!(first.status, AuthzStatus::Pending);
    assert_eq!(first.account_id, acct.id);
    assert_eq!(first.expires_at, new.authorizations[0].expires_at);
    assert_eq!(first.challenges.len(), 2);
    assert_eq!(first.challenges[0].kind, ChallengeType::Http01);
    assert_eq!(
        first.challenges[0].token,
        new.authorizations[0].challenges[0].1
    );
    assert_eq!(first.challenges[1].kind, ChallengeType::Dns01);
    assert!(
        first
            .challenges
            .iter()
            .all(|c| c.status == ChallengeStatus::Pending && c.authz_id == first.id)
    );
    assert_eq!(
        s.authorization(AuthzId(second.id.0 + 1000), now)
            .await
            .unwrap(),
        None
    );

    let http = first.challenges[0].clone();
    assert_eq!(s.challenge(http.id).await.unwrap(), Some(http.clone()));
    assert_eq!(
        s.challenge(ChallengeId(http.id.0 + 1000)).await.unwrap(),
        None
    );
    let started = s.start_challenge(http.id, now).await.unwrap().started();
    assert_eq!(started.status, ChallengeStatus::Processing);
    // Idempotent, and no second job.
    assert_eq!(
        s.start_challenge(http.id, now)
            .await
            .unwrap()
            .started()
            .status,
        ChallengeStatus::Processing
    );
    // One validation per authorization at a time.
    assert!(matches!(
        s.start_challenge(first.challenges[1].id, now).await,
        Ok(ChallengeStart::NotStarted(NotStarted::SiblingStarted))
    ));
    assert!(matches!(
        s.start_challenge(ChallengeId(http.id.0 + 1000), now).await,
        Err(Error::NotFound)
    ));
    let job = s
        .claim_job(now, Duration::seconds(60), 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.kind, JobKind::Validate(http.id));
    assert_eq!(
        s.claim_job(now, Duration::seconds(60), 3).await.unwrap(),
        None
    );
    s.complete_job(&job).await.unwrap();

    // A verdict for a challenge nobody started is refused.
    assert!(matches!(
        s.record_validation(
            second.challenges[0].id,
            Ok(()),
            harness::VALID_FOR,
            now,
            None
        )
        .await,
        Err(Error::Corrupt(_))
    ));

    let recorded = s
        .record_validation(http.id, Ok(()), harness::VALID_FOR, now, None)
        .await
        .unwrap();
    assert!(recorded.changed);
    assert_eq!(recorded.status, ChallengeStatus::Valid);
    assert_eq!(recorded.account_id, acct.id);
    assert_eq!(recorded.authz_id, first.id);
    assert_eq!(recorded.identifier, dns("a.example.com"));
    let again = s
        .record_validation(
            http.id,
            Err(Problem::new(ProblemType::Dns, "late")),
            harness::VALID_FOR,
            now,
            None,
        )
        .await
        .unwrap();
    assert!(!again.changed);
    assert_eq!(again.status, ChallengeStatus::Valid);
    let first = s.authorization(first.id, now).await.unwrap().unwrap();
    assert_eq!(first.status, AuthzStatus::Valid);
    assert_eq!(first.challenges[0].validated_at, Some(now));
    assert_eq!(first.challenges[0].error, None);
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Pending
    );
    assert!(matches!(
        s.begin_finalize(order.id, b"csr", None, now).await,
        Ok(Finalizing::NotReady(OrderStatus::Pending))
    ));

    let dns_chal = second.challenges[1].id;
    s.start_challenge(dns_chal, now).await.unwrap().started();
    s.record_validation(dns_chal, Ok(()), harness::VALID_FOR, now, None)
        .await
        .unwrap();
    let ready = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(ready.status, OrderStatus::Ready);

    assert_eq!(s.order_csr(order.id).await.unwrap(), None);
    assert_eq!(ready.finalize_client_ip, None, "not finalized yet");
    let client: std::net::IpAddr = "192.0.2.44".parse().unwrap();
    let processing = s
        .begin_finalize(order.id, b"the csr", Some(client), now)
        .await
        .unwrap()
        .begun();
    assert_eq!(processing.status, OrderStatus::Processing);
    assert_eq!(processing.finalize_client_ip, Some(client));
    assert_eq!(
        s.order(order.id, now)
            .await
            .unwrap()
            .unwrap()
            .finalize_client_ip,
        Some(client),
        "stored with the order, for a worker that issues after a restart"
    );
    assert_eq!(
        s.order_csr(order.id).await.unwrap(),
        Some(b"the csr".to_vec())
    );
    let jobs: Vec<_> = [
        s.claim_job(now, Duration::seconds(60), 3)
            .await
            .unwrap()
            .unwrap(),
        s.claim_job(now, Duration::seconds(60), 3)
            .await
            .unwrap()
            .unwrap(),
    ]
    .into_iter()
    .map(|j| j.kind)
    .collect();
    assert_eq!(
        jobs,
        vec![JobKind::Validate(dns_chal), JobKind::Finalize(order.id)]
    );

    let later = now + Duration::seconds(5);
    let cert = harness::complete(s, order.id, harness::new_cert(1, later), later, None).await;
    assert_eq!(cert.order_id, order.id);
    assert_eq!(cert.account_id, acct.id);
    assert_eq!(cert.set_hash, order.set_hash);
    assert_eq!(cert.issued_at, later);
    assert_eq!(cert.serial, harness::new_cert(1, later).serial);
    assert_eq!(cert.der, harness::new_cert(1, later).der);
    assert_eq!(
        cert.chain_pem,
        harness::download_of(&harness::new_cert(1, later))
    );
    assert_eq!(cert.not_after, later + Duration::days(90));
    assert_eq!(cert.revoked_at, None);
    let valid = s.order(order.id, later).await.unwrap().unwrap();
    assert_eq!(valid.status, OrderStatus::Valid);
    assert_eq!(valid.certificate_id, Some(cert.id));
    // A repeated completion (a retried job) returns the stored certificate.
    assert_eq!(
        s.complete_order(order.id, harness::new_cert(2, later), later, None, &ev())
            .await
            .unwrap(),
        cert
    );
    assert_eq!(s.certificate(cert.id).await.unwrap(), Some(cert.clone()));
    assert_eq!(
        s.certificate_by_serial(&cert.serial).await.unwrap(),
        Some(cert.clone())
    );
    assert!(matches!(
        s.begin_finalize(order.id, b"csr", None, later).await,
        Ok(Finalizing::NotReady(OrderStatus::Valid))
    ));
    assert!(matches!(
        s.begin_finalize(OrderId(order.id.0 + 1000), b"csr", None, later)
            .await,
        Err(Error::NotFound)
    ));
    // Valid orders do not expire.
    assert_eq!(
        s.order(order.id, later + Duration::days(30))
            .await
            .unwrap()
            .unwrap()
            .status,
        OrderStatus::Valid
    );
}

async fn authz_reuse(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let first = harness::ready_order(s, acct.id, &["a.example.com"], now).await;

    let reused = s
        .create_order(
            harness::new_order(acct.id, &["a.example.com"], now, true),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap()
        .created();
    assert_eq!(reused.status, OrderStatus::Ready);
    assert_eq!(reused.authz_ids, first.authz_ids);

    let mixed = s
        .create_order(
            harness::new_order(acct.id, &["a.example.com", "c.example.com"], now, true),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap()
        .created();
    assert_eq!(mixed.status, OrderStatus::Pending);
    assert_eq!(mixed.authz_ids[0], first.authz_ids[0]);
    assert_ne!(mixed.authz_ids[1], first.authz_ids[0]);

    let fresh = s
        .create_order(
            harness::new_order(acct.id, &["a.example.com"], now, false),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap()
        .created();
    assert_eq!(fresh.status, OrderStatus::Pending);
    assert_ne!(fresh.authz_ids, first.authz_ids);

    // The wildcard flag is part of the identifier.
    let wildcard = s
        .create_order(
            harness::new_order(acct.id, &["*.a.example.com"], now, true),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap()
        .created();
    assert_eq!(wildcard.status, OrderStatus::Pending);
    assert_ne!(wildcard.authz_ids, first.authz_ids);

    // Never another account's authorization.
    let other = harness::account(s, now).await;
    let theirs = s
        .create_order(
            harness::new_order(other.id, &["a.example.com"], now, true),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap()
        .created();
    assert_eq!(theirs.status, OrderStatus::Pending);

    // Nor an expired one: a valid authorization lives the valid lifetime from its validation.
    let late = now + harness::VALID_FOR;
    let after_expiry = s
        .create_order(
            harness::new_order(acct.id, &["a.example.com"], late, true),
            &OrderGuards::default(),
            late,
        )
        .await
        .unwrap()
        .created();
    assert_eq!(after_expiry.status, OrderStatus::Pending);
    assert_ne!(after_expiry.authz_ids, first.authz_ids);
}

async fn invalid_validation_propagates(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = s
        .create_order(
            harness::new_order(acct.id, &["a.example.com", "b.example.com"], now, false),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap()
        .created();
    let a = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    let b = s
        .authorization(order.authz_ids[1], now)
        .await
        .unwrap()
        .unwrap();
    let problem = Problem::new(ProblemType::IncorrectResponse, "key authorization mismatch");

    s.start_challenge(a.challenges[0].id, now)
        .await
        .unwrap()
        .started();
    let recorded = s
        .record_validation(
            a.challenges[0].id,
            Err(problem.clone()),
            harness::VALID_FOR,
            now,
            None,
        )
        .await
        .unwrap();
    assert!(recorded.changed);
    assert_eq!(recorded.status, ChallengeStatus::Invalid);

    let a = s.authorization(a.id, now).await.unwrap().unwrap();
    assert_eq!(a.status, AuthzStatus::Invalid);
    assert_eq!(a.challenges[0].status, ChallengeStatus::Invalid);
    assert_eq!(a.challenges[0].error, Some(problem.clone()));
    assert_eq!(a.challenges[0].validated_at, None);
    assert_eq!(a.challenges[1].status, ChallengeStatus::Pending);
    let invalid = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(invalid.status, OrderStatus::Invalid);
    assert_eq!(invalid.error, Some(problem.clone()));
    // An invalid authorization accepts no further attempt.
    assert!(matches!(
        s.start_challenge(a.challenges[1].id, now).await,
        Ok(ChallengeStart::NotStarted(NotStarted::AuthzNotPending(
            AuthzStatus::Invalid
        )))
    ));

    // The other authorization can still succeed, but the order stays invalid.
    s.start_challenge(b.challenges[0].id, now)
        .await
        .unwrap()
        .started();
    s.record_validation(b.challenges[0].id, Ok(()), harness::VALID_FOR, now, None)
        .await
        .unwrap();
    assert_eq!(
        s.authorization(b.id, now).await.unwrap().unwrap().status,
        AuthzStatus::Valid
    );
    let still = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(still.status, OrderStatus::Invalid);
    assert_eq!(still.error, Some(problem));
}

async fn order_and_authz_expiry(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;

    // Order expiry.
    let short = harness::order_expiring(
        s,
        acct.id,
        &["a.example.com"],
        now + Duration::hours(1),
        now + Duration::days(7),
        now,
    )
    .await;
    let before = now + Duration::hours(1) - Duration::seconds(1);
    assert_eq!(
        s.order(short.id, before).await.unwrap().unwrap().status,
        OrderStatus::Pending
    );
    let expired = s
        .order(short.id, now + Duration::hours(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(expired.status, OrderStatus::Invalid);
    // Persisted: reading with an earlier clock still sees it.
    assert_eq!(
        s.order(short.id, now).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );

    // A ready order expires too, and then cannot be finalized.
    let ready = harness::ready_order(s, acct.id, &["r.example.com"], now).await;
    let past = ready.expires_at + Duration::seconds(1);
    assert!(matches!(
        s.begin_finalize(ready.id, b"csr", None, past).await,
        Ok(Finalizing::NotReady(OrderStatus::Invalid))
    ));
    assert_eq!(
        s.order(ready.id, now).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );

    // Pending authorization expiry invalidates its order.
    let order = harness::order_expiring(
        s,
        acct.id,
        &["b.example.com"],
        now + Duration::days(7),
        now + Duration::hours(2),
        now,
    )
    .await;
    let authz_id = order.authz_ids[0];
    let chal = s
        .authorization(authz_id, now)
        .await
        .unwrap()
        .unwrap()
        .challenges[0]
        .id;
    let at = now + Duration::hours(2);
    // Starting a challenge of an expired authorization is refused, and the expiry persists.
    assert!(matches!(
        s.start_challenge(chal, at).await,
        Ok(ChallengeStart::NotStarted(NotStarted::AuthzNotPending(
            AuthzStatus::Expired
        )))
    ));
    assert_eq!(
        s.authorization(authz_id, now)
            .await
            .unwrap()
            .unwrap()
            .status,
        AuthzStatus::Expired
    );
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );
    assert_eq!(
        s.challenge(chal).await.unwrap().unwrap().status,
        ChallengeStatus::Pending
    );

    // A valid authorization expires through a plain read; its ready order becomes invalid.
    let ready = harness::order_expiring(
        s,
        acct.id,
        &["c.example.com"],
        now + Duration::days(7),
        now + Duration::hours(3),
        now,
    )
    .await;
    let authz = s
        .authorization(ready.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    s.start_challenge(authz.challenges[0].id, now)
        .await
        .unwrap()
        .started();
    // The valid lifetime (not the pending one) decides when a valid authorization expires.
    s.record_validation(
        authz.challenges[0].id,
        Ok(()),
        Duration::hours(3),
        now,
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        s.order(ready.id, now).await.unwrap().unwrap().status,
        OrderStatus::Ready
    );
    let at = now + Duration::hours(3);
    assert_eq!(
        s.authorization(authz.id, at).await.unwrap().unwrap().status,
        AuthzStatus::Expired
    );
    assert_eq!(
        s.order(ready.id, now).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );

    // A validation that finishes after its authorization expired keeps the authorization expired.
    let late = harness::order_expiring(
        s,
        acct.id,
        &["d.example.com"],
        now + Duration::days(7),
        now + Duration::hours(4),
        now,
    )
    .await;
    let authz = s
        .authorization(late.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    s.start_challenge(authz.challenges[0].id, now)
        .await
        .unwrap()
        .started();
    let at = now + Duration::hours(4);
    let recorded = s
        .record_validation(authz.challenges[0].id, Ok(()), harness::VALID_FOR, at, None)
        .await
        .unwrap();
    assert!(recorded.changed);
    assert_eq!(
        s.authorization(authz.id, at).await.unwrap().unwrap().status,
        AuthzStatus::Expired
    );
    assert_eq!(
        s.order(late.id, at).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );
}

async fn authz_deactivation(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = s
        .create_order(
            harness::new_order(acct.id, &["a.example.com"], now, false),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap()
        .created();
    let deactivated = s
        .deactivate_authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .changed();
    assert_eq!(deactivated.status, AuthzStatus::Deactivated);
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );
    assert!(matches!(
        s.deactivate_authorization(order.authz_ids[0], now).await,
        Ok(StatusChange::Unchanged(Authorization {
            status: AuthzStatus::Deactivated,
            ..
        }))
    ));
    assert!(matches!(
        s.deactivate_authorization(AuthzId(order.authz_ids[0].0 + 1000), now)
            .await,
        Err(Error::NotFound)
    ));

    // A valid authorization can be deactivated; its ready order becomes invalid.
    let ready = harness::ready_order(s, acct.id, &["b.example.com"], now).await;
    assert_eq!(
        s.deactivate_authorization(ready.authz_ids[0], now)
            .await
            .unwrap()
            .changed()
            .status,
        AuthzStatus::Deactivated
    );
    assert_eq!(
        s.order(ready.id, now).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );
}

async fn concurrent_finalize_has_one_winner(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["a.example.com"], now).await;
    let (s1, s2) = (s.clone(), s.clone());
    let one = tokio::spawn(async move { s1.begin_finalize(order.id, b"one", None, now).await });
    let two = tokio::spawn(async move { s2.begin_finalize(order.id, b"two", None, now).await });
    let results = [one.await.unwrap(), two.await.unwrap()];
    let won: Vec<_> = results
        .iter()
        .filter(|r| matches!(r, Ok(Finalizing::Begun { .. })))
        .collect();
    assert_eq!(won.len(), 1, "{results:?}");
    assert!(
        results
            .iter()
            .any(|r| matches!(r, Ok(Finalizing::NotReady(OrderStatus::Processing)))),
        "{results:?}"
    );
    let csr = s.order_csr(order.id).await.unwrap().unwrap();
    assert!(csr == b"one" || csr == b"two");
    // Exactly one finalize job.
    let mut finalize_jobs = 0;
    while let Some(job) = s.claim_job(now, Duration::seconds(60), 3).await.unwrap() {
        if job.kind == JobKind::Finalize(order.id) {
            finalize_jobs += 1;
        }
    }
    assert_eq!(finalize_jobs, 1);
}

async fn fail_order_and_account_listing(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["a.example.com"], now).await;
    let problem = Problem::new(ProblemType::BadCsr, "CSR names do not match the order");
    assert!(matches!(
        s.fail_order(order.id, problem.clone(), now, None).await,
        Ok(StatusChange::Unchanged(Order {
            status: OrderStatus::Ready,
            ..
        }))
    ));
    assert!(matches!(
        s.complete_order(order.id, harness::new_cert(9, now), now, None, &ev())
            .await,
        Err(Error::Corrupt(_))
    ));
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    let failed = s
        .fail_order(order.id, problem.clone(), now, None)
        .await
        .unwrap()
        .changed();
    assert_eq!(failed.status, OrderStatus::Invalid);
    assert_eq!(failed.error, Some(problem.clone()));
    // A repeated report finds it invalid already: unchanged, and so settled.
    assert_eq!(
        s.fail_order(order.id, problem.clone(), now, None)
            .await
            .unwrap(),
        StatusChange::Unchanged(failed)
    );
    assert!(matches!(
        s.fail_order(OrderId(order.id.0 + 1000), problem, now, None)
            .await,
        Err(Error::NotFound)
    ));

    let mut ids = vec![order.id];
    for name in ["b.example.com", "c.example.com", "d.example.com"] {
        let o = s
            .create_order(
                harness::new_order(acct.id, &[name], now, false),
                &OrderGuards::default(),
                now,
            )
            .await
            .unwrap()
            .created();
        ids.push(o.id);
    }
    let other = harness::account(s, now).await;
    s.create_order(
        harness::new_order(other.id, &["e.example.com"], now, false),
        &OrderGuards::default(),
        now,
    )
    .await
    .unwrap()
    .created();
    assert_eq!(s.account_orders(acct.id, None, 100).await.unwrap(), ids);
    assert_eq!(s.account_orders(acct.id, None, 2).await.unwrap(), ids[..2]);
    assert_eq!(
        s.account_orders(acct.id, Some(ids[1]), 2).await.unwrap(),
        ids[2..]
    );
    assert_eq!(
        s.account_orders(acct.id, Some(ids[3]), 2).await.unwrap(),
        Vec::<OrderId>::new()
    );
}

/// An order's authorizations come back in the order of its identifiers and each one's challenges
/// in the order offered, whether the order was written on its own or after reads under the
/// account's lock (a guard): on PostgreSQL these are the two ways of calling
/// `certeasy_create_order`.
async fn authorizations_and_challenges_keep_their_order(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let guarded = OrderGuards {
        max_pending_authz: Some(PendingAuthzGuard {
            max: 100,
            refuse: true,
        }),
        ..OrderGuards::default()
    };
    for guards in [OrderGuards::default(), guarded] {
        let names = ["z", "a", "m"]
            .map(|first| format!("{first}{}.example.com", harness::unique().replace('_', "-")));
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut new = harness::new_order(acct.id, &names, now, false);
        let offered = [
            ChallengeType::TlsAlpn01,
            ChallengeType::Http01,
            ChallengeType::Dns01,
        ];
        for authz in &mut new.authorizations {
            authz.challenges = offered
                .iter()
                .map(|kind| (*kind, format!("tok-{}", harness::unique())))
                .collect();
        }
        let order = s
            .create_order(new.clone(), &guards, now)
            .await
            .unwrap()
            .created();
        assert_eq!(order.authz_ids.len(), 3);
        assert_eq!(s.order(order.id, now).await.unwrap(), Some(order.clone()));
        for (id, wanted) in order.authz_ids.iter().zip(&new.authorizations) {
            let authz = s.authorization(*id, now).await.unwrap().unwrap();
            assert_eq!(authz.identifier, wanted.identifier);
            assert_eq!(authz.status, AuthzStatus::Pending);
            let kinds: Vec<ChallengeType> = authz.challenges.iter().map(|c| c.kind).collect();
            assert_eq!(kinds, offered);
            let tokens: Vec<&str> = authz.challenges.iter().map(|c| c.token.as_str()).collect();
            let wanted_tokens: Vec<&str> =
                wanted.challenges.iter().map(|(_, t)| t.as_str()).collect();
            assert_eq!(tokens, wanted_tokens);
        }
    }
}
