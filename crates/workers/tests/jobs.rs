//! The job runner on real parts: SQLite storage, a CA, and the testkit DNS and http-01 servers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::Ipv4Addr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use acme_core::clock::SystemClock;
use acme_core::identifier::Identifier;
use acme_core::identifier::canonical_set_hash;
use acme_core::ids::OrderId;
use acme_core::status::ChallengeStatus;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use issuance::Ca;
use issuance::CaSettings;
use storage::Storage;
use storage::model::NewAccount;
use storage::model::NewAuthz;
use storage::model::NewOrder;
use storage::model::OrderGuards;
use storage::model::ValidationRecorded;
use testkit::dns::TestDnsServer;
use testkit::http01::Http01Responder;
use time::OffsetDateTime;
use validation::ValidationSettings;
use validation::Validator;
use workers::Workers;
use workers::hooks::ValidationHook;
use workers::settings::WorkerSettings;

struct Env {
    _dir: tempfile::TempDir,
    storage: Storage,
    ca: Arc<Ca>,
    validator: Validator,
    dns: TestDnsServer,
    http: Http01Responder,
}

async fn env() -> Env {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("db.sqlite").display());
    let storage = Storage::connect(&url).await.unwrap();
    let ca = Arc::new(
        Ca::load_or_create(
            &CaSettings::new(dir.path().join("ca")),
            OffsetDateTime::now_utc(),
        )
        .unwrap(),
    );
    let dns = TestDnsServer::start().await.unwrap();
    let http = Http01Responder::start().await.unwrap();
    let validator = Validator::new(ValidationSettings {
        dns_servers: vec![dns.addr()],
        http_port: http.port(),
        allow_loopback: true,
        timeout: Duration::from_secs(5),
        ..ValidationSettings::default()
    })
    .unwrap();
    Env {
        _dir: dir,
        storage,
        ca,
        validator,
        dns,
        http,
    }
}

/// Counts the verdicts the hook is told about.
#[derive(Default)]
struct Counting(AtomicUsize, AtomicUsize);

impl ValidationHook for Counting {
    fn on_validation<'a>(
        &'a self,
        recorded: &'a ValidationRecorded,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            match recorded.status {
                ChallengeStatus::Valid => self.0.fetch_add(1, Ordering::SeqCst),
                _ => self.1.fetch_add(1, Ordering::SeqCst),
            };
        })
    }
}

fn spawn(env: &Env, hook: Arc<dyn ValidationHook>) -> Workers {
    let settings = WorkerSettings {
        concurrency: 2,
        lease: time::Duration::seconds(1),
        poll_interval: Duration::from_millis(100),
        ..WorkerSettings::default()
    };
    Workers::spawn(
        env.storage.clone(),
        env.validator.clone(),
        Arc::clone(&env.ca),
        Arc::new(SystemClock),
        settings,
        hook,
    )
}

/// An account whose key thumbprint is `tp`, and an order for `name` with one http-01 challenge.
async fn order_for(env: &Env, name: &str, token: &str) -> (OrderId, acme_core::ids::ChallengeId) {
    let now = OffsetDateTime::now_utc();
    env.dns.set_a(name, Ipv4Addr::LOCALHOST);
    let account = match env.storage.account_by_thumbprint("tp").await.unwrap() {
        Some(a) => a,
        None => env
            .storage
            .create_account(
                NewAccount {
                    jwk_json: "{}".into(),
                    thumbprint: "tp".into(),
                    contacts: vec![],
                    tos_agreed: true,
                },
                now,
            )
            .await
            .unwrap(),
    };
    let id = Identifier::dns(name).unwrap();
    let order = env
        .storage
        .create_order(
            NewOrder {
                account_id: account.id,
                identifiers: vec![id.clone()],
                set_hash: canonical_set_hash(std::slice::from_ref(&id)),
                not_before: None,
                not_after: None,
                expires_at: now + time::Duration::days(1),
                authorizations: vec![NewAuthz {
                    identifier: id,
                    expires_at: now + time::Duration::days(1),
                    challenges: vec![(ChallengeType::Http01, token.to_owned())],
                }],
                reuse_valid_authz: false,
            },
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap();
    let authz = env
        .storage
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    (order.id, authz.challenges[0].id)
}

async fn wait_for(env: &Env, order: OrderId, want: OrderStatus) {
    for _ in 0..100 {
        let o = env
            .storage
            .order(order, OffsetDateTime::now_utc())
            .await
            .unwrap()
            .unwrap();
        if o.status == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("order {order} never became {}", want.as_str());
}

fn csr(name: &str) -> Vec<u8> {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.serialize_request(&key).unwrap().der().to_vec()
}

#[tokio::test]
async fn validates_then_issues_and_tells_the_hook() {
    let env = env().await;
    let hook = Arc::new(Counting::default());
    let workers = spawn(&env, hook.clone());
    let (order, challenge) = order_for(&env, "ok.workers.test", "tok1").await;
    env.http.add("tok1", "tok1.tp");
    env.storage
        .start_challenge(challenge, OffsetDateTime::now_utc())
        .await
        .unwrap();
    workers.wake();
    wait_for(&env, order, OrderStatus::Ready).await;
    assert_eq!(hook.0.load(Ordering::SeqCst), 1);

    env.storage
        .begin_finalize(order, &csr("ok.workers.test"), OffsetDateTime::now_utc())
        .await
        .unwrap();
    workers.wake();
    wait_for(&env, order, OrderStatus::Valid).await;
    let o = env
        .storage
        .order(order, OffsetDateTime::now_utc())
        .await
        .unwrap()
        .unwrap();
    let cert = env
        .storage
        .certificate(o.certificate_id.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(cert.chain_pem.matches("BEGIN CERTIFICATE").count() >= 2);
    assert!(
        env.storage.next_job_due().await.unwrap().is_none(),
        "finished jobs are deleted"
    );
    workers.shutdown().await;
}

#[tokio::test]
async fn a_failed_validation_is_a_verdict_not_a_retry() {
    let env = env().await;
    let hook = Arc::new(Counting::default());
    let workers = spawn(&env, hook.clone());
    let (order, challenge) = order_for(&env, "broken.workers.test", "tok2").await;
    env.storage
        .start_challenge(challenge, OffsetDateTime::now_utc())
        .await
        .unwrap();
    workers.wake();
    wait_for(&env, order, OrderStatus::Invalid).await;
    let ch = env.storage.challenge(challenge).await.unwrap().unwrap();
    assert_eq!(ch.status, ChallengeStatus::Invalid);
    assert!(
        ch.error.unwrap().detail.contains("acme-challenge"),
        "the error it saw is stored"
    );
    assert_eq!(
        hook.1.load(Ordering::SeqCst),
        1,
        "the hook hears the failure once"
    );
    workers.shutdown().await;
}

#[tokio::test]
async fn a_job_abandoned_by_a_dead_worker_is_resumed_after_its_lease() {
    let env = env().await;
    let (order, challenge) = order_for(&env, "resume.workers.test", "tok3").await;
    env.http.add("tok3", "tok3.tp");
    let now = OffsetDateTime::now_utc();
    env.storage.start_challenge(challenge, now).await.unwrap();
    // A worker claims the job and dies without finishing it.
    assert!(
        env.storage
            .claim_job(now, time::Duration::seconds(1))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        env.storage
            .claim_job(now, time::Duration::seconds(1))
            .await
            .unwrap()
            .is_none(),
        "leased"
    );
    let workers = spawn(&env, Arc::new(workers::hooks::NoHook));
    wait_for(&env, order, OrderStatus::Ready).await;
    workers.shutdown().await;
}
