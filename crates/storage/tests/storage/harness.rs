//! Runs one scenario against a fresh database of each backend, and the fixtures scenarios share.

use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use acme_core::identifier::Identifier;
use acme_core::identifier::canonical_set_hash;
use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use acme_core::ids::ChallengeId;
use acme_core::ids::OrderId;
use acme_core::ids::Serial;
use acme_core::status::ChallengeType;
use sqlx::AnyConnection;
use sqlx::Connection;
use storage::Storage;
use storage::audit::Actor;
use storage::audit::AuditEvent;
use storage::audit::AuditKind;
use storage::model::Account;
use storage::model::Certificate;
use storage::model::Challenge;
use storage::model::ChallengeStart;
use storage::model::Finalizing;
use storage::model::Job;
use storage::model::NewAccount;
use storage::model::NewAuthz;
use storage::model::NewCertificate;
use storage::model::NewOrder;
use storage::model::NewReservation;
use storage::model::Order;
use storage::model::OrderCreation;
use storage::model::OrderGuards;
use storage::model::Reserved;
use storage::model::StatusChange;
use testkit::postgres::PgDatabase;
use time::Duration;
use time::OffsetDateTime;

/// An audit record for a write whose record the test does not look at (`audit.rs` and the
/// scenarios of each kind check the records themselves).
pub(crate) fn ev() -> AuditEvent {
    AuditEvent::new(AuditKind::AdminAction, Actor::System, "test")
}

/// The valid-authorization lifetime verdicts are recorded with unless a test says otherwise: the
/// server's default (`ra::settings::DEFAULT_VALID_AUTHORIZATION_LIFETIME`).
pub(crate) const VALID_FOR: Duration = Duration::days(30);

/// The reuse margin of [`VALID_FOR`]: a day (`ra::settings::reuse_margin`).
pub(crate) const REUSE_MARGIN: Duration = Duration::days(1);

/// A created order.
pub(crate) trait Created {
    fn created(self) -> Order;
}

impl Created for OrderCreation {
    fn created(self) -> Order {
        match self {
            OrderCreation::Created { order, .. } => *order,
            other => panic!("the order was not created: {other:?}"),
        }
    }
}

/// A challenge that started now or before (`Started` or `Left`).
pub(crate) trait Started {
    fn started(self) -> Challenge;
    /// `started` with the job of `start_challenge_claimed`.
    fn started_claimed(self) -> (Challenge, Option<Job>);
}

impl Started for ChallengeStart {
    fn started(self) -> Challenge {
        self.started_claimed().0
    }
    fn started_claimed(self) -> (Challenge, Option<Job>) {
        match self {
            ChallengeStart::Started { challenge, job } => (challenge, job),
            ChallengeStart::Left(challenge) => (challenge, None),
            ChallengeStart::NotStarted(why) => panic!("the challenge did not start: {why:?}"),
        }
    }
}

/// A status change that was made.
pub(crate) trait Changed<T> {
    fn changed(self) -> T;
}

impl<T: std::fmt::Debug> Changed<T> for StatusChange<T> {
    fn changed(self) -> T {
        match self {
            StatusChange::Changed(value) => value,
            StatusChange::Unchanged(value) => panic!("nothing changed: {value:?}"),
        }
    }
}

/// A finalization that began.
pub(crate) trait Begun {
    fn begun(self) -> Order;
    fn begun_claimed(self) -> (Order, Option<Job>);
}

impl Begun for Finalizing {
    fn begun(self) -> Order {
        self.begun_claimed().0
    }
    fn begun_claimed(self) -> (Order, Option<Job>) {
        match self {
            Finalizing::Begun { order, job } => (*order, job),
            Finalizing::NotReady(status) => panic!("the order is {status:?}, not ready"),
        }
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Unique within the process; with the pid, unique on the machine.
pub(crate) fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}

/// Runs `scenario` in a task so that a panic still lets the harness clean up, then re-raises it.
async fn run_guarded<F, Fut>(storage: Storage, scenario: F) -> Result<(), tokio::task::JoinError>
where
    F: FnOnce(Storage) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let result = tokio::spawn(scenario(storage.clone())).await;
    storage.close().await;
    result
}

fn reraise(result: Result<(), tokio::task::JoinError>) {
    if let Err(e) = result {
        match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("scenario task failed: {e}"),
        }
    }
}

pub(crate) async fn sqlite<F, Fut>(scenario: F)
where
    F: FnOnce(Storage) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let storage = sqlite_in(&dir).await;
    assert_eq!(storage.backend(), storage::Backend::Sqlite);
    reraise(run_guarded(storage, scenario).await);
}

/// The database `certeasy.db` in `dir`, created by `connect` when it does not exist yet.
pub(crate) async fn sqlite_in(dir: &tempfile::TempDir) -> Storage {
    Storage::connect(&format!(
        "sqlite://{}",
        dir.path().join("certeasy.db").display()
    ))
    .await
    .unwrap()
}

pub(crate) async fn postgres<F, Fut>(scenario: F)
where
    F: FnOnce(Storage) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    postgres_at(|storage, _url| scenario(storage)).await;
}

/// [`postgres`], also telling the scenario its database URL (to look at the database beside
/// the storage API).
pub(crate) async fn postgres_at<F, Fut>(scenario: F)
where
    F: FnOnce(Storage, String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    // The scenarios that look beside the storage API connect through `sqlx::Any`.
    sqlx::any::install_default_drivers();
    let pg = PgDatabase::create("certeasy_test_").unwrap_or_else(|e| {
        panic!(
            "PostgreSQL tests need a server ({e:#}). Start PostgreSQL on 127.0.0.1:5432 or set \
             CERTEASY_TEST_POSTGRES_URL to an admin URL."
        )
    });
    let url = pg.url().to_owned();
    let storage = Storage::connect(&url).await.unwrap();
    assert_eq!(storage.backend(), storage::Backend::Postgres);
    let result = run_guarded(storage, |storage| scenario(storage, url)).await;
    drop(pg);
    reraise(result);
}

/// Generates one `#[tokio::test]` per backend for each scenario `async fn(&Storage)` named.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    $crate::harness::sqlite(|s| async move { super::$name(&s).await }).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    $crate::harness::postgres(|s| async move { super::$name(&s).await }).await;
                }
            )+
        }
    };
}

// ---- fixtures ----

/// A whole-second instant, so that values survive the unix-seconds columns exactly.
pub(crate) fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
}

pub(crate) fn dns(name: &str) -> Identifier {
    Identifier::dns(name).unwrap()
}

/// Starts the first (http-01) challenge of `authz`, as a client's challenge POST does, which
/// enqueues its validation job.
pub(crate) async fn start_first_challenge(
    s: &Storage,
    authz: AuthzId,
    now: OffsetDateTime,
) -> ChallengeId {
    let chal = s
        .authorization(authz, now)
        .await
        .unwrap()
        .unwrap()
        .challenges[0]
        .id;
    s.start_challenge(chal, now).await.unwrap().started();
    chal
}

pub(crate) async fn account(s: &Storage, now: OffsetDateTime) -> Account {
    let thumb = format!("thumb-{}", unique());
    s.create_account(
        NewAccount {
            jwk_json: format!(r#"{{"kty":"EC","x":"{thumb}"}}"#),
            thumbprint: thumb,
            contacts: vec!["mailto:ops@example.com".to_owned()],
            tos_agreed: true,
        },
        now,
        &ev(),
    )
    .await
    .unwrap()
}

/// An order for `names`, orders and authorizations expiring a week after `now`.
pub(crate) fn new_order(
    account: AccountId,
    names: &[&str],
    now: OffsetDateTime,
    reuse: bool,
) -> NewOrder {
    new_order_expiring(
        account,
        names,
        now + Duration::days(7),
        now + Duration::days(7),
        reuse.then(|| now + REUSE_MARGIN),
    )
}

/// A SQLite database in `dir` with the shipped migrations before `first_left_out` (a file-name
/// prefix such as `"0012"`) applied, as a release before that migration left it: its URL and a
/// connection to write old rows with. [`Storage::connect`] on the URL then applies the rest.
pub(crate) async fn sqlite_migrated_before(
    dir: &std::path::Path,
    first_left_out: &str,
) -> (String, AnyConnection) {
    // A connection opened before any `Storage` needs the drivers installed.
    sqlx::any::install_default_drivers();
    let url = format!("sqlite://{}?mode=rwc", dir.join("old.db").display());
    let old = dir.join("migrations");
    std::fs::create_dir(&old).unwrap();
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/sqlite");
    for entry in std::fs::read_dir(&shipped).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name.as_str() < first_left_out {
            std::fs::copy(entry.path(), old.join(&name)).unwrap();
        }
    }
    let mut conn = AnyConnection::connect(&url).await.unwrap();
    sqlx::migrate::Migrator::new(old.as_path())
        .await
        .unwrap()
        .run(&mut conn)
        .await
        .unwrap();
    (url, conn)
}

/// Creates `new` with no guards; it must succeed.
pub(crate) async fn created_order(s: &Storage, new: NewOrder, now: OffsetDateTime) -> Order {
    s.create_order(new, &OrderGuards::default(), now)
        .await
        .unwrap()
        .created()
}

/// A created order for `names` whose order and authorizations expire when given.
pub(crate) async fn order_expiring(
    s: &Storage,
    account: AccountId,
    names: &[&str],
    order_expires: OffsetDateTime,
    authz_expires: OffsetDateTime,
    now: OffsetDateTime,
) -> Order {
    let new = new_order_expiring(account, names, order_expires, authz_expires, None);
    created_order(s, new, now).await
}

pub(crate) fn new_order_expiring(
    account: AccountId,
    names: &[&str],
    order_expires: OffsetDateTime,
    authz_expires: OffsetDateTime,
    reuse_valid_until: Option<OffsetDateTime>,
) -> NewOrder {
    let identifiers: Vec<Identifier> = names.iter().map(|n| dns(n)).collect();
    let authorizations = identifiers
        .iter()
        .map(|id| NewAuthz {
            identifier: id.clone(),
            expires_at: authz_expires,
            challenges: vec![
                (ChallengeType::Http01, format!("tok-http-{}", unique())),
                (ChallengeType::Dns01, format!("tok-dns-{}", unique())),
            ],
        })
        .collect();
    NewOrder {
        account_id: account,
        set_hash: canonical_set_hash(&identifiers),
        identifiers,
        not_before: None,
        not_after: None,
        expires_at: order_expires,
        authorizations,
        reuse_valid_until,
        replaces: None,
        profile: "tls-server".to_owned(),
        valid_authz_lifetime: None,
        reuse_challenge_types: Vec::new(),
    }
}

/// Creates a pending order for `names` (no authorization reuse, no guards).
pub(crate) async fn pending_order(
    s: &Storage,
    account: AccountId,
    names: &[&str],
    now: OffsetDateTime,
) -> Order {
    s.create_order(
        new_order(account, names, now, false),
        &OrderGuards::default(),
        now,
    )
    .await
    .unwrap()
    .created()
}

/// Creates an order and validates every authorization through its first challenge.
pub(crate) async fn ready_order(
    s: &Storage,
    account: AccountId,
    names: &[&str],
    now: OffsetDateTime,
) -> Order {
    let order = pending_order(s, account, names, now).await;
    for authz_id in &order.authz_ids {
        let authz = s.authorization(*authz_id, now).await.unwrap().unwrap();
        let challenge = &authz.challenges[0];
        s.start_challenge(challenge.id, now)
            .await
            .unwrap()
            .started();
        s.record_validation(challenge.id, Ok(()), VALID_FOR, now, None)
            .await
            .unwrap();
    }
    let order = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(order.status, acme_core::status::OrderStatus::Ready);
    order
}

pub(crate) fn new_cert(serial: u8, now: OffsetDateTime) -> NewCertificate {
    NewCertificate {
        serial: Serial::from_bytes(vec![0x00, 0x7f, serial, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06]),
        der: vec![0x30, 0x82, serial],
        // One CA's chain for every certificate, as a server has.
        issuer_chain_pem:
            "-----BEGIN CERTIFICATE-----\naW50ZXJtZWRpYXRl\n-----END CERTIFICATE-----\n".to_owned(),
        not_before: now,
        not_after: now + Duration::days(90),
        crl_shard: None,
    }
}

/// The download of `cert` once stored: its leaf as PEM (64 characters a line, LF), then its
/// issuer chain.
pub(crate) fn download_of(cert: &NewCertificate) -> String {
    let leaf = pem::encode_config(
        &pem::Pem::new("CERTIFICATE", cert.der.clone()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    );
    format!("{leaf}{}", cert.issuer_chain_pem)
}

/// Takes a fresh order for `names` all the way to an issued certificate at `now`.
pub(crate) async fn issue(
    s: &Storage,
    account: AccountId,
    names: &[&str],
    serial: u8,
    now: OffsetDateTime,
) -> Certificate {
    let order = ready_order(s, account, names, now).await;
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    complete(s, order.id, new_cert(serial, now), now, None).await
}

/// What a worker records before it signs `cert`.
pub(crate) fn reservation_of(cert: &NewCertificate) -> NewReservation {
    NewReservation {
        serial: cert.serial.clone(),
        not_before: cert.not_before,
        not_after: cert.not_after,
        issuer_chain_pem: cert.issuer_chain_pem.clone(),
        crl_shard: cert.crl_shard,
        issuer: storage::ca_state::DEFAULT_ISSUER.to_owned(),
    }
}

/// Reserves `cert`'s serial for order `id` (processing), then stores `cert` against it, as a
/// worker does around signing; `settle` as for `complete_order`.
pub(crate) async fn complete(
    s: &Storage,
    id: OrderId,
    cert: NewCertificate,
    now: OffsetDateTime,
    settle: Option<&Job>,
) -> Certificate {
    let reserved = s
        .reserve_serial(id, reservation_of(&cert), now)
        .await
        .unwrap();
    assert!(
        matches!(&reserved, Reserved::Reserved(r) if r.serial == cert.serial),
        "{reserved:?}"
    );
    s.complete_order(id, cert, now, settle, &ev())
        .await
        .unwrap()
}
