//! The job runner on real parts: SQLite storage, a CA, and the testkit DNS and http-01 servers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::Ipv4Addr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use acme_core::clock::SystemClock;
use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::ids::ChallengeId;
use acme_core::ids::JobId;
use acme_core::ids::OrderId;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::ChallengeStatus;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use common::csr;
use common::ev;
use common::storage_on;
use issuance::Ca;
use issuance::CaSettings;
use issuance::Profiles;
use issuance::profiles::ProfileDefinition;
use ra::in_flight::InFlight;
use ra::in_flight::Key;
use ra::jobs::Finalized;
use ra::jobs::JobRunner;
use ra::jobs::Slot;
use ra::jobs::ValidationTarget;
use ra::verdicts::ValidationHook;
use storage::Backend;
use storage::Storage;
use storage::model::Challenge;
use storage::model::ChallengeStart;
use storage::model::Finalizing;
use storage::model::NewAccount;
use storage::model::ValidationRecorded;
use testkit::dns::TestDnsServer;
use testkit::http01::Http01Responder;
use testkit::postgres::PgDatabase;
use time::OffsetDateTime;
use validation::ValidationSettings;
use validation::Validator;
use workers::Workers;
use workers::settings::WorkerSettings;

struct Env {
    _pg: Option<PgDatabase>,
    _dir: tempfile::TempDir,
    storage: Storage,
    ca: Arc<Ca>,
    validator: Validator,
    dns: TestDnsServer,
    http: Http01Responder,
}

async fn env() -> Env {
    env_on(Backend::Sqlite).await
}

async fn env_on(backend: Backend) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let (pg, storage) = storage_on(backend, dir.path(), "certeasy_workers_").await;
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
        _pg: pg,
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
    spawn_with(env, hook, test_settings())
}

/// Two workers on a one-second lease: any attempt longer than a second would lose its job to
/// the other worker without a heartbeat.
fn test_settings() -> WorkerSettings {
    WorkerSettings {
        concurrency: 2,
        lease: time::Duration::seconds(1),
        poll_interval: Duration::from_millis(100),
        ..WorkerSettings::default()
    }
}

fn spawn_with(env: &Env, hook: Arc<dyn ValidationHook>, settings: WorkerSettings) -> Workers {
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
async fn order_for(env: &Env, name: &str, token: &str) -> (OrderId, ChallengeId) {
    order_with(env, name, token, ChallengeType::Http01).await
}

/// An account whose key thumbprint is `tp`, and an order for `name` with one challenge of `kind`.
async fn order_with(
    env: &Env,
    name: &str,
    token: &str,
    kind: ChallengeType,
) -> (OrderId, ChallengeId) {
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
                &ev(),
            )
            .await
            .unwrap(),
    };
    let (order, challenge) = common::pending_order(
        &env.storage,
        account.id,
        name,
        (kind, token.to_owned()),
        now,
    )
    .await;
    (order.id, challenge)
}

/// The order as it is now.
async fn order_now(env: &Env, order: OrderId) -> storage::model::Order {
    common::order_now(&env.storage, order).await
}

async fn wait_for(env: &Env, order: OrderId, want: OrderStatus) {
    common::wait_for(&env.storage, order, want).await;
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
        .begin_finalize(
            order,
            &csr("ok.workers.test"),
            None,
            OffsetDateTime::now_utc(),
        )
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

/// Log lines written while the test runs, at the level the subscriber lets through.
#[derive(Clone, Default)]
struct CapturedLog(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLog {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// What a target serves is the subscriber's content: the stored problem quotes a short prefix of
/// it for the subscriber, but an info-level log never carries it (a debug-level one may).
/// Current-thread runtime: the workers' tasks run on the thread the subscriber is set for.
#[tokio::test(flavor = "current_thread")]
async fn content_fetched_from_a_target_stays_out_of_info_logs() {
    for (level, expect_body_logged) in
        [(tracing::Level::INFO, false), (tracing::Level::DEBUG, true)]
    {
        let log = CapturedLog::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);

        let env = env().await;
        let workers = spawn(&env, Arc::new(Counting::default()));
        let (order, challenge) = order_for(&env, "leaky.workers.test", "toklog").await;
        env.http.add("toklog", "SUBSCRIBER-SECRET-body");
        env.storage
            .start_challenge(challenge, OffsetDateTime::now_utc())
            .await
            .unwrap();
        workers.wake();
        wait_for(&env, order, OrderStatus::Invalid).await;
        workers.shutdown().await;

        let ch = env.storage.challenge(challenge).await.unwrap().unwrap();
        assert!(
            ch.error.unwrap().detail.contains("SUBSCRIBER-SECRET"),
            "the subscriber is shown what was found"
        );
        let text = log.text();
        assert!(text.contains("validation failed"), "{level}: {text}");
        assert_eq!(
            text.contains("SUBSCRIBER-SECRET"),
            expect_body_logged,
            "{level}: {text}"
        );
    }
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
            .claim_job(now, time::Duration::seconds(1), 3)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        env.storage
            .claim_job(now, time::Duration::seconds(1), 3)
            .await
            .unwrap()
            .is_none(),
        "leased"
    );
    let workers = spawn(&env, Arc::new(ra::verdicts::NoHook));
    wait_for(&env, order, OrderStatus::Ready).await;
    workers.shutdown().await;
}

/// A hook that takes its time (the first calls sleep as long as `delays` says), counts its calls
/// and notes the challenge's stored status at the moment it is called.
struct Probe {
    storage: Storage,
    delays: std::sync::Mutex<Vec<Duration>>,
    calls: AtomicUsize,
    finished: AtomicUsize,
    seen: std::sync::Mutex<Vec<(ChallengeStatus, ChallengeStatus)>>,
}

impl Probe {
    fn new(storage: &Storage, delays: Vec<Duration>) -> Arc<Self> {
        Arc::new(Self {
            storage: storage.clone(),
            delays: std::sync::Mutex::new(delays),
            calls: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            seen: std::sync::Mutex::new(Vec::new()),
        })
    }
}

impl ValidationHook for Probe {
    fn on_validation<'a>(
        &'a self,
        recorded: &'a ValidationRecorded,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let authz = self
                .storage
                .authorization(recorded.authz_id, OffsetDateTime::now_utc())
                .await
                .unwrap()
                .unwrap();
            self.seen
                .lock()
                .unwrap()
                .push((recorded.status, authz.challenges[0].status));
            let delay = {
                let mut delays = self.delays.lock().unwrap();
                if delays.is_empty() {
                    Duration::ZERO
                } else {
                    delays.remove(0)
                }
            };
            tokio::time::sleep(delay).await;
            self.finished.fetch_add(1, Ordering::SeqCst);
        })
    }
}

#[tokio::test]
async fn a_slow_attempt_keeps_its_lease_and_runs_once() {
    a_slow_attempt_keeps_its_lease_and_runs_once_on(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_slow_attempt_keeps_its_lease_and_runs_once_on_postgres() {
    a_slow_attempt_keeps_its_lease_and_runs_once_on(Backend::Postgres).await;
}

async fn a_slow_attempt_keeps_its_lease_and_runs_once_on(backend: Backend) {
    let env = env_on(backend).await;
    // Four lease lengths inside one attempt: only the heartbeat keeps the second worker away.
    let probe = Probe::new(&env.storage, vec![Duration::from_secs(4)]);
    let workers = spawn(&env, probe.clone());
    let (order, challenge) = order_for(&env, "slow.workers.test", "tok4").await;
    env.http.add("tok4", "tok4.tp");
    env.storage
        .start_challenge(challenge, OffsetDateTime::now_utc())
        .await
        .unwrap();
    workers.wake();
    wait_for(&env, order, OrderStatus::Ready).await;
    assert_eq!(
        probe.calls.load(Ordering::SeqCst),
        1,
        "one worker ran the job, once, although it outlasted its lease four times"
    );
    assert!(
        env.storage.next_job_due().await.unwrap().is_none(),
        "the job is done and deleted"
    );
    workers.shutdown().await;
}

#[tokio::test]
async fn the_hook_spends_before_the_verdict_is_visible() {
    let env = env().await;
    let probe = Probe::new(&env.storage, vec![]);
    let workers = spawn(&env, probe.clone());
    let (bad, bad_challenge) = order_for(&env, "bad.workers.test", "tok5").await;
    let (good, good_challenge) = order_for(&env, "good.workers.test", "tok6").await;
    env.http.add("tok6", "tok6.tp");
    let now = OffsetDateTime::now_utc();
    env.storage
        .start_challenge(bad_challenge, now)
        .await
        .unwrap();
    env.storage
        .start_challenge(good_challenge, now)
        .await
        .unwrap();
    workers.wake();
    wait_for(&env, bad, OrderStatus::Invalid).await;
    wait_for(&env, good, OrderStatus::Ready).await;
    let mut seen = probe.seen.lock().unwrap().clone();
    seen.sort_by_key(|(verdict, _)| verdict.as_str());
    assert_eq!(
        seen,
        vec![
            (ChallengeStatus::Invalid, ChallengeStatus::Processing),
            (ChallengeStatus::Valid, ChallengeStatus::Processing),
        ],
        "the hook hears each verdict once, while clients still see the challenge processing"
    );
    workers.shutdown().await;
}

#[tokio::test]
async fn an_attempt_past_the_backstop_is_cut_off_and_retried() {
    let env = env().await;
    // The first attempt hangs (in the hook, which is part of the attempt) far past the backstop.
    let probe = Probe::new(&env.storage, vec![Duration::from_secs(120)]);
    let settings = WorkerSettings {
        attempt_timeout: Some(Duration::from_secs(2)),
        ..test_settings()
    };
    let workers = spawn_with(&env, probe.clone(), settings);
    let (order, challenge) = order_for(&env, "hang.workers.test", "tok7").await;
    env.http.add("tok7", "tok7.tp");
    env.storage
        .start_challenge(challenge, OffsetDateTime::now_utc())
        .await
        .unwrap();
    let started = Instant::now();
    workers.wake();
    wait_for(&env, order, OrderStatus::Ready).await;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "finished by the retry, not by the hung attempt"
    );
    assert_eq!(
        probe.calls.load(Ordering::SeqCst),
        2,
        "cut off, then retried"
    );
    assert_eq!(
        probe.finished.load(Ordering::SeqCst),
        1,
        "the hung attempt was cancelled, not left running"
    );
    workers.shutdown().await;
}

#[tokio::test]
async fn a_job_whose_last_attempt_died_is_settled_not_run_again() {
    a_job_whose_last_attempt_died_is_settled_not_run_again_on(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_job_whose_last_attempt_died_is_settled_not_run_again_on_postgres() {
    a_job_whose_last_attempt_died_is_settled_not_run_again_on(Backend::Postgres).await;
}

async fn a_job_whose_last_attempt_died_is_settled_not_run_again_on(backend: Backend) {
    let env = env_on(backend).await;
    let (order, challenge) = order_for(&env, "exhausted.workers.test", "tok8").await;
    // The name would validate: if the job ran again, the order would become ready.
    env.http.add("tok8", "tok8.tp");
    let now = OffsetDateTime::now_utc();
    env.storage.start_challenge(challenge, now).await.unwrap();
    // A worker allowed one attempt claims the job and dies during it.
    let job = env
        .storage
        .claim_job(now, time::Duration::seconds(1), 1)
        .await
        .unwrap()
        .unwrap();
    assert!(!job.exhausted);
    let hook = Arc::new(Counting::default());
    let settings = WorkerSettings {
        max_attempts: 1,
        ..test_settings()
    };
    let workers = spawn_with(&env, hook.clone(), settings);
    wait_for(&env, order, OrderStatus::Invalid).await;
    let ch = env.storage.challenge(challenge).await.unwrap().unwrap();
    assert_eq!(ch.status, ChallengeStatus::Invalid);
    assert_eq!(ch.error.unwrap().kind, ProblemType::ServerInternal);
    assert_eq!(
        hook.0.load(Ordering::SeqCst) + hook.1.load(Ordering::SeqCst),
        0,
        "no validation ran, so no verdict was reported"
    );
    assert!(env.storage.next_job_due().await.unwrap().is_none());
    workers.shutdown().await;
}

#[tokio::test]
async fn an_account_deactivated_while_processing_gets_no_certificate() {
    an_account_deactivated_while_processing_gets_no_certificate_on(Backend::Sqlite).await;
}

#[tokio::test]
async fn an_account_deactivated_while_processing_gets_no_certificate_on_postgres() {
    an_account_deactivated_while_processing_gets_no_certificate_on(Backend::Postgres).await;
}

async fn an_account_deactivated_while_processing_gets_no_certificate_on(backend: Backend) {
    let env = env_on(backend).await;
    let workers = spawn(&env, Arc::new(ra::verdicts::NoHook));
    let (order, challenge) = order_for(&env, "deactivated.workers.test", "tok9").await;
    env.http.add("tok9", "tok9.tp");
    env.storage
        .start_challenge(challenge, OffsetDateTime::now_utc())
        .await
        .unwrap();
    workers.wake();
    wait_for(&env, order, OrderStatus::Ready).await;
    // Stop the workers so the deactivation lands while the order is processing.
    workers.shutdown().await;
    let now = OffsetDateTime::now_utc();
    env.storage
        .begin_finalize(order, &csr("deactivated.workers.test"), None, now)
        .await
        .unwrap();
    let account = env
        .storage
        .account_by_thumbprint("tp")
        .await
        .unwrap()
        .unwrap();
    env.storage
        .deactivate_account(account.id, now, &ev())
        .await
        .unwrap();

    let workers = spawn(&env, Arc::new(ra::verdicts::NoHook));
    wait_for(&env, order, OrderStatus::Invalid).await;
    let o = env
        .storage
        .order(order, OffsetDateTime::now_utc())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(o.certificate_id, None);
    assert_eq!(o.error.unwrap().kind, ProblemType::Unauthorized);
    assert!(env.storage.next_job_due().await.unwrap().is_none());
    workers.shutdown().await;
}

/// A request that creates a job claimed runs it through `run_claimed`: validated and issued
/// without the queue, each job deleted with its outcome. Places are bounded by the concurrency,
/// shared with the job loops: with every place taken, `try_slot` says no and the caller falls
/// back to the queue.
#[tokio::test]
async fn jobs_run_at_once_by_their_creator_share_the_places_with_the_queue() {
    let env = env().await;
    let hook = Arc::new(Counting::default());
    let workers = spawn_with(
        &env,
        hook.clone(),
        WorkerSettings {
            concurrency: 1,
            ..test_settings()
        },
    );
    let (order, challenge) = order_for(&env, "now.workers.test", "tok-now").await;
    env.http.add("tok-now", "tok-now.tp");
    let lease = workers.lease();

    let slot = workers.try_slot().expect("the one place is free");
    assert!(workers.try_slot().is_none(), "one place, already taken");
    let started = env
        .storage
        .start_challenge_claimed(challenge, OffsetDateTime::now_utc(), lease)
        .await
        .unwrap();
    let ChallengeStart::Started { job: Some(job), .. } = started else {
        panic!("the challenge did not start with a job: {started:?}");
    };
    workers.run_claimed(slot, job, None).await.unwrap();
    // Recorded by the time the handle finishes, and no job is left behind.
    let ch = env.storage.challenge(challenge).await.unwrap().unwrap();
    assert_eq!(ch.status, ChallengeStatus::Valid);
    assert_eq!(hook.0.load(Ordering::SeqCst), 1);
    assert_eq!(env.storage.next_job_due().await.unwrap(), None);

    let slot = workers.try_slot().expect("the place came back");
    let begun = env
        .storage
        .begin_finalize_claimed(
            order,
            &csr("now.workers.test"),
            None,
            OffsetDateTime::now_utc(),
            lease,
        )
        .await
        .unwrap();
    let Finalizing::Begun { job: Some(job), .. } = begun else {
        panic!("the finalization did not begin with a job: {begun:?}");
    };
    workers.run_claimed(slot, job, None).await.unwrap();
    let o = order_now(&env, order).await;
    assert_eq!(o.status, OrderStatus::Valid);
    assert!(o.certificate_id.is_some());
    assert_eq!(env.storage.next_job_due().await.unwrap(), None);

    // While a request holds the only place, a queued job waits for it; it runs once freed.
    let (order2, challenge2) = order_for(&env, "queued.workers.test", "tok-q").await;
    env.http.add("tok-q", "tok-q.tp");
    let held = workers.try_slot().unwrap();
    env.storage
        .start_challenge(challenge2, OffsetDateTime::now_utc())
        .await
        .unwrap();
    workers.wake();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        env.storage
            .challenge(challenge2)
            .await
            .unwrap()
            .unwrap()
            .status,
        ChallengeStatus::Processing,
        "no place, so no worker claimed it"
    );
    drop(held);
    wait_for(&env, order2, OrderStatus::Ready).await;

    workers.shutdown().await;
    assert!(workers.try_slot().is_none(), "no new work after shutdown");
}

/// Settings whose only profile is "other": the orders of `order_for` ask for "tls-server",
/// which is gone.
fn without_the_orders_profile() -> WorkerSettings {
    let mut definitions = std::collections::BTreeMap::new();
    definitions.insert("other".to_owned(), ProfileDefinition::default());
    let profiles = Profiles::new(
        "other",
        &definitions,
        time::Duration::days(90),
        time::Duration::days(90),
    )
    .unwrap();
    WorkerSettings {
        profiles,
        ..test_settings()
    }
}

/// An order whose profile was removed from the configuration before it was signed fails with
/// `invalidProfile` rather than being signed under another profile.
#[tokio::test]
async fn an_order_whose_profile_is_gone_is_not_signed_under_another() {
    let env = env().await;
    let workers = spawn_with(
        &env,
        Arc::new(Counting::default()),
        without_the_orders_profile(),
    );
    let (order, challenge) = order_for(&env, "gone.workers.test", "tok-gone").await;
    env.http.add("tok-gone", "tok-gone.tp");
    env.storage
        .start_challenge(challenge, OffsetDateTime::now_utc())
        .await
        .unwrap();
    workers.wake();
    wait_for(&env, order, OrderStatus::Ready).await;
    env.storage
        .begin_finalize(
            order,
            &csr("gone.workers.test"),
            None,
            OffsetDateTime::now_utc(),
        )
        .await
        .unwrap();
    workers.wake();
    wait_for(&env, order, OrderStatus::Invalid).await;
    let o = order_now(&env, order).await;
    assert_eq!(o.profile.as_deref(), Some("tls-server"));
    assert_eq!(o.certificate_id, None);
    let error = o.error.unwrap();
    assert_eq!(error.kind, ProblemType::InvalidProfile);
    assert!(error.detail.contains("other"), "{}", error.detail);
    workers.shutdown().await;
}

/// A finalization from the queue checks CAA again for an authorization validated longer ago
/// than `caa_recheck_after` (zero here: any earlier second), with the method that validated it
/// and the account's URI, and fails the order with `caa` when the records now refuse.
#[tokio::test]
async fn finalization_rechecks_caa_of_old_validations() {
    let env = env().await;
    let validator = Validator::new(ValidationSettings {
        dns_servers: vec![env.dns.addr()],
        http_port: env.http.port(),
        allow_loopback: true,
        timeout: Duration::from_secs(5),
        caa_identities: vec!["ca.test".to_owned()],
        ..ValidationSettings::default()
    })
    .unwrap();
    let account_uris = acme_core::account_uri::AccountUris::new("https://ca.test:14000");
    let workers = Workers::spawn(
        env.storage.clone(),
        validator,
        Arc::clone(&env.ca),
        Arc::new(SystemClock),
        WorkerSettings {
            account_uris: account_uris.clone(),
            caa_recheck_after: time::Duration::ZERO,
            ..test_settings()
        },
        Arc::new(Counting::default()),
    );
    let mut orders = Vec::new();
    for (name, token) in [
        ("refused.workers.test", "tok-caa-1"),
        ("allowed.workers.test", "tok-caa-2"),
    ] {
        let (order, challenge) = order_for(&env, name, token).await;
        env.http.add(token, &format!("{token}.tp"));
        env.storage
            .start_challenge(challenge, OffsetDateTime::now_utc())
            .await
            .unwrap();
        workers.wake();
        wait_for(&env, order, OrderStatus::Ready).await;
        orders.push((order, name));
    }
    // Records appear after the validations, which were over http-01 for this account.
    let account = env
        .storage
        .account_by_thumbprint("tp")
        .await
        .unwrap()
        .unwrap();
    let uri = account_uris.uri(account.id);
    env.dns.add_caa(
        "refused.workers.test",
        0,
        "issue",
        &format!("ca.test; accounturi={uri}; validationmethods=dns-01"),
    );
    env.dns.add_caa(
        "allowed.workers.test",
        0,
        "issue",
        &format!("ca.test; accounturi={uri}; validationmethods=http-01"),
    );
    // Validation times are kept in whole seconds, rounded down: any later instant is older by
    // more than zero.
    for (order, name) in &orders {
        env.storage
            .begin_finalize(*order, &csr(name), None, OffsetDateTime::now_utc())
            .await
            .unwrap();
    }
    workers.wake();
    let (refused, _) = orders[0];
    let (allowed, _) = orders[1];
    wait_for(&env, refused, OrderStatus::Invalid).await;
    wait_for(&env, allowed, OrderStatus::Valid).await;
    let error = order_now(&env, refused).await.error.unwrap();
    assert_eq!(error.kind, ProblemType::Caa);
    assert!(
        error.detail.contains("checked again at issuance"),
        "{}",
        error.detail
    );
    assert!(
        error.detail.contains("validationmethods=dns-01 only"),
        "{}",
        error.detail
    );
    assert_eq!(order_now(&env, refused).await.certificate_id, None);
    workers.shutdown().await;
}

/// A dns-01 challenge whose record never appears (it may be propagating, the one retried class)
/// is retried `validation_retries` times and then failed with every attempt in its error; the
/// hook (failed-validation spend, zombie count) runs once, at that final verdict. The claims that
/// ended in a retry are not held against `max_attempts`, so even `max_attempts: 1` lets every
/// retry run.
#[tokio::test]
async fn propagation_failures_are_retried_and_the_hook_runs_once() {
    propagation_failures_retried_on(Backend::Sqlite).await;
}

#[tokio::test]
async fn propagation_failures_are_retried_and_the_hook_runs_once_on_postgres() {
    propagation_failures_retried_on(Backend::Postgres).await;
}

async fn propagation_failures_retried_on(backend: Backend) {
    let env = env_on(backend).await;
    let hook = Arc::new(Counting::default());
    let settings = WorkerSettings {
        max_attempts: 1,
        validation_retries: 2,
        retry_backoff: time::Duration::seconds(1),
        ..test_settings()
    };
    let workers = spawn_with(&env, Arc::clone(&hook) as Arc<dyn ValidationHook>, settings);
    let name = "propagating.workers.test";
    let (order, challenge) = order_with(&env, name, "tokretry", ChallengeType::Dns01).await;
    // A TXT set without this challenge's value: what a secondary serves before the update.
    env.dns.add_txt(
        &format!("_acme-challenge.{name}"),
        "value-of-an-earlier-order",
    );
    env.storage
        .start_challenge(challenge, OffsetDateTime::now_utc())
        .await
        .unwrap();
    workers.wake();
    // The first failure is recorded as an attempt while the challenge stays processing, and
    // runs no hook. (The hook count is read first: while only attempt 1 is recorded, the final
    // attempt, whose hook runs just before its verdict commits, has not started.)
    let mut seen_processing_with_attempt = false;
    for _ in 0..300 {
        let verdicts = hook.1.load(Ordering::SeqCst);
        let ch = env.storage.challenge(challenge).await.unwrap().unwrap();
        if ch.status != ChallengeStatus::Processing {
            break;
        }
        let recorded = env.storage.challenge_attempts(challenge).await.unwrap();
        if recorded.len() == 1 {
            seen_processing_with_attempt = true;
            assert_eq!(verdicts, 0, "no verdict yet");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen_processing_with_attempt);
    wait_for(&env, order, OrderStatus::Invalid).await;
    workers.shutdown().await;

    let ch = env.storage.challenge(challenge).await.unwrap().unwrap();
    assert_eq!(ch.status, ChallengeStatus::Invalid);
    let error = ch.error.unwrap();
    assert_eq!(error.kind, ProblemType::IncorrectResponse, "{error:?}");
    assert!(
        error.detail.contains("failed after 3 attempts"),
        "{}",
        error.detail
    );
    let attempts = env.storage.challenge_attempts(challenge).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| a.attempt).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(
        hook.1.load(Ordering::SeqCst),
        1,
        "one failure per challenge"
    );
    assert_eq!(hook.0.load(Ordering::SeqCst), 0);
}

/// Runs one challenge of `kind` for `name` under `settings` and `hook` until its order is
/// invalid; returns the challenge's final error and its recorded failed attempts.
async fn fail_one(
    env: &Env,
    name: &str,
    kind: ChallengeType,
    settings: WorkerSettings,
    hook: Arc<dyn ValidationHook>,
) -> (Problem, usize) {
    let workers = spawn_with(env, hook, settings);
    let (order, challenge) = order_with(env, name, "tokfinal", kind).await;
    env.storage
        .start_challenge(challenge, OffsetDateTime::now_utc())
        .await
        .unwrap();
    workers.wake();
    wait_for(env, order, OrderStatus::Invalid).await;
    workers.shutdown().await;
    let ch = env.storage.challenge(challenge).await.unwrap().unwrap();
    let attempts = env.storage.challenge_attempts(challenge).await.unwrap();
    (ch.error.unwrap(), attempts.len())
}

/// Settings that would retry up to five times a second apart, within a long window.
fn retrying() -> WorkerSettings {
    WorkerSettings {
        validation_retries: 5,
        retry_backoff: time::Duration::seconds(1),
        retry_window: time::Duration::minutes(10),
        ..test_settings()
    }
}

/// A refused connection is the verdict at once, whatever `validation_retries` says: only a dns-01
/// record may still be propagating.
#[tokio::test]
async fn a_refused_connection_is_final_at_once() {
    let env = env().await;
    let hook = Arc::new(Counting::default());
    let name = "refusing.workers.test";
    let workers = spawn_with(
        &env,
        Arc::clone(&hook) as Arc<dyn ValidationHook>,
        retrying(),
    );
    let (order, challenge) = order_for(&env, name, "tokrefused").await;
    // Nothing listens on 127.0.0.2 at the responder's port: the connection is refused.
    env.dns.set_a(name, Ipv4Addr::new(127, 0, 0, 2));
    env.storage
        .start_challenge(challenge, OffsetDateTime::now_utc())
        .await
        .unwrap();
    workers.wake();
    wait_for(&env, order, OrderStatus::Invalid).await;
    workers.shutdown().await;
    let ch = env.storage.challenge(challenge).await.unwrap().unwrap();
    let error = ch.error.unwrap();
    assert_eq!(error.kind, ProblemType::Connection, "{error:?}");
    assert!(!error.detail.contains("attempts"), "{}", error.detail);
    assert!(
        env.storage
            .challenge_attempts(challenge)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(hook.1.load(Ordering::SeqCst), 1);
}

/// `retry_window` bounds how long retries keep a challenge processing, whatever `retries` says:
/// a second retry would start 3 s after the first failure, past a 2 s window.
#[tokio::test]
async fn retries_stop_at_the_window() {
    let env = env().await;
    let settings = WorkerSettings {
        retry_window: time::Duration::seconds(2),
        ..retrying()
    };
    let (error, failed_before) = fail_one(
        &env,
        "window.workers.test",
        ChallengeType::Dns01,
        settings,
        Arc::new(Counting::default()),
    )
    .await;
    assert_eq!(error.kind, ProblemType::Dns, "{error:?}");
    assert_eq!(failed_before, 1, "one retry, 1 s after the first failure");
    assert!(
        error.detail.contains("failed after 2 attempts"),
        "{}",
        error.detail
    );
}

/// Counts verdicts as [`Counting`] does, and refuses every retry it is asked about (a pair that
/// failed lately), counting the questions.
#[derive(Default)]
struct RefusesRetries(Counting, AtomicUsize);

impl ValidationHook for RefusesRetries {
    fn on_validation<'a>(
        &'a self,
        recorded: &'a ValidationRecorded,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        self.0.on_validation(recorded)
    }

    fn grants_retry<'a>(
        &'a self,
        _account: AccountId,
        _identifier: &'a Identifier,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        self.1.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(false))
    }
}

/// A retry the hook does not grant is not scheduled: the propagation failure is the verdict at
/// its first attempt, and the hook spends for it once.
#[tokio::test]
async fn a_retry_the_hook_refuses_is_not_scheduled() {
    let env = env().await;
    let hook = Arc::new(RefusesRetries::default());
    let (error, failed_before) = fail_one(
        &env,
        "refused-retry.workers.test",
        ChallengeType::Dns01,
        retrying(),
        Arc::clone(&hook) as Arc<dyn ValidationHook>,
    )
    .await;
    assert_eq!(error.kind, ProblemType::Dns, "{error:?}");
    assert_eq!(failed_before, 0, "one attempt, nothing retried");
    assert!(!error.detail.contains("attempts"), "{}", error.detail);
    assert_eq!(hook.1.load(Ordering::SeqCst), 1, "asked once");
    assert_eq!(hook.0.1.load(Ordering::SeqCst), 1, "one verdict");
}

/// The wait a request gives work it runs at once, when a test needs it to finish within it.
const AT_ONCE_WAIT: Duration = Duration::from_secs(5);

/// A place to run work at once. The job loops hold one for a moment whenever they look for a job,
/// so a request may have to try again.
async fn free_slot(workers: &Workers) -> Slot {
    for _ in 0..500 {
        if let Some(slot) = workers.try_slot() {
            return slot;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no place came free");
}

/// Validates `challenge` (of the account with thumbprint "tp") at once in a place of `workers`,
/// its authorization held in `in_flight` as a request holds it: the reply, and how long it took.
async fn validate_at_once(
    env: &Env,
    workers: &Workers,
    in_flight: &InFlight,
    challenge: ChallengeId,
    wait: Duration,
) -> (Challenge, Duration) {
    let challenge = env.storage.challenge(challenge).await.unwrap().unwrap();
    let authz = env
        .storage
        .authorization(challenge.authz_id, OffsetDateTime::now_utc())
        .await
        .unwrap()
        .unwrap();
    let held = in_flight.enter(Key::Authz(authz.id)).unwrap();
    let target = ValidationTarget {
        challenge,
        authz_id: authz.id,
        authz_expires: authz.expires_at,
        identifier: authz.identifier,
        account_id: authz.account_id,
        thumbprint: "tp".to_owned(),
    };
    let slot = free_slot(workers).await;
    let started = Instant::now();
    let reply = JobRunner::validate_at_once(workers, slot, target, wait, held)
        .await
        .expect("a reply is always sent")
        .unwrap();
    (reply, started.elapsed())
}

/// An order for `name` made ready by a validation run at once, its target serving the right key
/// authorization; the challenge as the reply showed it. The token is `name` without its dots
/// (base64url).
async fn ready_at_once(
    env: &Env,
    workers: &Workers,
    in_flight: &InFlight,
    name: &str,
) -> (OrderId, Challenge) {
    let token = format!("tok-{}", name.replace('.', "-"));
    let (order, challenge) = order_for(env, name, &token).await;
    env.http.add(&token, &format!("{token}.tp"));
    let (reply, _) = validate_at_once(env, workers, in_flight, challenge, AT_ONCE_WAIT).await;
    (order, reply)
}

/// Finalizes `order` (ready, for `name`) at once in a place of `workers`, held in `in_flight`.
async fn finalize_at_once(
    env: &Env,
    workers: &Workers,
    in_flight: &InFlight,
    order: OrderId,
    name: &str,
) -> storage::model::Order {
    let order = order_now(env, order).await;
    let der = csr(name);
    let checked = issuance::check_csr(&der, &order.identifiers).unwrap();
    let held = in_flight.enter(Key::Order(order.id)).unwrap();
    let slot = free_slot(workers).await;
    let reply = JobRunner::finalize_at_once(workers, slot, order, der, checked, AT_ONCE_WAIT, held)
        .await
        .expect("a reply is always sent")
        .unwrap();
    match reply {
        Finalized::Order(order) => *order,
        Finalized::AccountNotValid(status) => panic!("the account is {status:?}"),
    }
}

/// No job is left: none is due, and none can be claimed.
async fn assert_no_job_left(env: &Env) {
    assert_eq!(env.storage.next_job_due().await.unwrap(), None);
    let now = OffsetDateTime::now_utc();
    let claimed = env
        .storage
        .claim_job(now, time::Duration::seconds(30), 3)
        .await
        .unwrap();
    assert!(claimed.is_none(), "{claimed:?}");
}

/// No job is left, and none was ever made: the next job this database makes is its first. That
/// last part is conclusive on PostgreSQL, whose identity never hands out an id twice; SQLite
/// numbers the rows of an emptied table from 1 again. Call with the workers stopped: the probe
/// job is left claimed.
async fn assert_no_job_ever(env: &Env) {
    assert_no_job_left(env).await;
    let (_, probe) = order_for(env, "probe.workers.test", "tok-probe").await;
    let started = env
        .storage
        .start_challenge_claimed(
            probe,
            OffsetDateTime::now_utc(),
            time::Duration::seconds(30),
        )
        .await
        .unwrap();
    let ChallengeStart::Started { job: Some(job), .. } = started else {
        panic!("the probe did not start with a job: {started:?}");
    };
    assert_eq!(job.id, JobId(1), "an earlier job took the first id");
}

/// A validation run at once that succeeds is recorded in one transaction: the reply shows the
/// challenge valid, the order is ready, the hook heard one verdict, and no job was ever made.
#[tokio::test]
async fn a_validation_run_at_once_that_succeeds_makes_no_job() {
    a_validation_run_at_once_that_succeeds_makes_no_job_on(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_validation_run_at_once_that_succeeds_makes_no_job_on_postgres() {
    a_validation_run_at_once_that_succeeds_makes_no_job_on(Backend::Postgres).await;
}

async fn a_validation_run_at_once_that_succeeds_makes_no_job_on(backend: Backend) {
    let env = env_on(backend).await;
    let hook = Arc::new(Counting::default());
    let workers = spawn(&env, hook.clone());
    let name = "at-once.workers.test";
    let (order, reply) = ready_at_once(&env, &workers, &InFlight::default(), name).await;
    assert_eq!(reply.status, ChallengeStatus::Valid);
    assert_eq!(reply.error, None);
    assert!(reply.validated_at.is_some());
    assert_eq!(order_now(&env, order).await.status, OrderStatus::Ready);
    assert_eq!(hook.0.load(Ordering::SeqCst), 1, "one valid verdict");
    assert_eq!(hook.1.load(Ordering::SeqCst), 0);
    workers.shutdown().await;
    assert_no_job_ever(&env).await;
}

/// A validation run at once that fails for good is recorded the durable way: the reply shows the
/// challenge invalid with what was wrong, the order is invalid, the hook heard one failure, and
/// the job is gone with the verdict.
#[tokio::test]
async fn a_validation_run_at_once_that_fails_is_a_verdict() {
    let env = env().await;
    let hook = Arc::new(Counting::default());
    let workers = spawn(&env, hook.clone());
    let (order, challenge) = order_for(&env, "wrong.workers.test", "tok-wrong").await;
    env.http.add("tok-wrong", "tok-wrong.someone-else");
    let (reply, _) = validate_at_once(
        &env,
        &workers,
        &InFlight::default(),
        challenge,
        AT_ONCE_WAIT,
    )
    .await;
    assert_eq!(reply.status, ChallengeStatus::Invalid);
    let error = reply.error.expect("the reply carries the problem");
    assert_eq!(error.kind, ProblemType::IncorrectResponse);
    assert!(error.detail.contains("does not match"), "{}", error.detail);
    let stored = env.storage.challenge(challenge).await.unwrap().unwrap();
    assert_eq!(stored.status, ChallengeStatus::Invalid, "as the reply said");
    assert_eq!(order_now(&env, order).await.status, OrderStatus::Invalid);
    assert_eq!(hook.1.load(Ordering::SeqCst), 1, "one failure");
    assert_eq!(hook.0.load(Ordering::SeqCst), 0);
    assert_no_job_left(&env).await;
    workers.shutdown().await;
}

/// An http-01 target for `name` that answers each request `delay` late with `body`, counting the
/// requests. It listens on 127.0.0.3 at the responder's port, the one the validator dials.
async fn slow_target(env: &Env, name: &str, body: String, delay: Duration) -> Arc<AtomicUsize> {
    use tokio::io::AsyncReadExt;
    use tokio::io::AsyncWriteExt;
    let ip = Ipv4Addr::new(127, 0, 0, 3);
    let listener = tokio::net::TcpListener::bind((ip, env.http.port()))
        .await
        .unwrap();
    env.dns.set_a(name, ip);
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                let _ = conn.write_all(response.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    hits
}

/// A validation still running when the wait is over is started durably and answered
/// `processing` at once, the authorization let go; the same attempt then goes on under the job's
/// lease (a second lease length would otherwise hand the job to the other worker) and is
/// recorded when the target answers: one request, one verdict, and the job deleted.
#[tokio::test]
async fn a_slow_validation_run_at_once_is_answered_processing_and_finishes_later() {
    let env = env().await;
    let hook = Arc::new(Counting::default());
    let workers = spawn(&env, hook.clone());
    let name = "slow-at-once.workers.test";
    let (order, challenge) = order_for(&env, name, "tok-slow").await;
    let delay = Duration::from_secs(2);
    let hits = slow_target(&env, name, "tok-slow.tp".to_owned(), delay).await;
    let in_flight = InFlight::default();
    let wait = Duration::from_millis(200);
    let (reply, took) = validate_at_once(&env, &workers, &in_flight, challenge, wait).await;
    assert!(took < Duration::from_secs(1), "answered after {took:?}");
    assert_eq!(reply.status, ChallengeStatus::Processing);
    assert!(in_flight.is_empty(), "let go once the start was written");
    assert!(
        env.storage.next_job_due().await.unwrap().is_some(),
        "the attempt goes on under a job"
    );
    assert_eq!(hook.0.load(Ordering::SeqCst), 0, "no verdict yet");
    wait_for(&env, order, OrderStatus::Ready).await;
    let stored = env.storage.challenge(challenge).await.unwrap().unwrap();
    assert_eq!(stored.status, ChallengeStatus::Valid);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the first attempt was the one"
    );
    assert_eq!(hook.0.load(Ordering::SeqCst), 1);
    assert_eq!(hook.1.load(Ordering::SeqCst), 0);
    assert_no_job_left(&env).await;
    workers.shutdown().await;
}

/// A finalization run at once with no CAA to check again reserves the serial under a job the
/// request holds, signs, and stores: the reply is the valid order with its certificate, which
/// downloads, and no job is left.
#[tokio::test]
async fn a_finalization_run_at_once_issues_and_leaves_no_job() {
    a_finalization_run_at_once_issues_and_leaves_no_job_on(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_finalization_run_at_once_issues_and_leaves_no_job_on_postgres() {
    a_finalization_run_at_once_issues_and_leaves_no_job_on(Backend::Postgres).await;
}

async fn a_finalization_run_at_once_issues_and_leaves_no_job_on(backend: Backend) {
    let env = env_on(backend).await;
    let workers = spawn(&env, Arc::new(Counting::default()));
    let in_flight = InFlight::default();
    let name = "issue-at-once.workers.test";
    let (order, _) = ready_at_once(&env, &workers, &in_flight, name).await;
    let reply = finalize_at_once(&env, &workers, &in_flight, order, name).await;
    assert_eq!(reply.id, order);
    assert_eq!(reply.status, OrderStatus::Valid);
    let certificate_id = reply
        .certificate_id
        .expect("the reply names the certificate");
    assert_eq!(
        order_now(&env, order).await.certificate_id,
        Some(certificate_id)
    );
    let cert = env
        .storage
        .certificate(certificate_id)
        .await
        .unwrap()
        .unwrap();
    assert!(cert.chain_pem.matches("BEGIN CERTIFICATE").count() >= 2);
    workers.shutdown().await;
    // The request held the order's job while it signed (a crash would have left it to resume
    // the reserved serial); storing the certificate settled it.
    assert_no_job_left(&env).await;
}

/// A finalization run at once that cannot be signed (the order's profile is gone) goes the
/// durable way and fails the order with `invalidProfile`; the reply waits for it, and the job
/// is deleted with the failure.
#[tokio::test]
async fn a_finalization_run_at_once_whose_profile_is_gone_fails_the_order() {
    let env = env().await;
    let workers = spawn_with(
        &env,
        Arc::new(Counting::default()),
        without_the_orders_profile(),
    );
    let in_flight = InFlight::default();
    let name = "gone-at-once.workers.test";
    let (order, _) = ready_at_once(&env, &workers, &in_flight, name).await;
    let reply = finalize_at_once(&env, &workers, &in_flight, order, name).await;
    assert_eq!(
        reply.status,
        OrderStatus::Invalid,
        "the reply waited for the job"
    );
    assert_eq!(reply.certificate_id, None);
    assert_eq!(reply.error.unwrap().kind, ProblemType::InvalidProfile);
    let stored = order_now(&env, order).await;
    assert_eq!(stored.status, OrderStatus::Invalid);
    assert_eq!(stored.certificate_id, None);
    let error = stored.error.unwrap();
    assert_eq!(error.kind, ProblemType::InvalidProfile);
    assert!(error.detail.contains("other"), "{}", error.detail);
    assert_no_job_left(&env).await;
    workers.shutdown().await;
}

/// The key a request holds for work it runs at once is let go by the time the reply arrives:
/// the validation's authorization and the finalization's order are both free again.
#[tokio::test]
async fn work_run_at_once_lets_its_key_go_by_the_reply() {
    let env = env().await;
    let workers = spawn(&env, Arc::new(Counting::default()));
    let in_flight = InFlight::default();
    let name = "held.workers.test";
    let (order, reply) = ready_at_once(&env, &workers, &in_flight, name).await;
    assert_eq!(reply.status, ChallengeStatus::Valid);
    assert_eq!(in_flight.len(), 0, "the authorization was let go");
    let again = in_flight.enter(Key::Authz(reply.authz_id));
    assert!(again.is_ok(), "free to hold again");
    drop(again);
    let reply = finalize_at_once(&env, &workers, &in_flight, order, name).await;
    assert_eq!(reply.status, OrderStatus::Valid);
    assert_eq!(in_flight.len(), 0, "the order was let go");
    workers.shutdown().await;
}
