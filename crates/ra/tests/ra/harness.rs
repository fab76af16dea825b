//! The one place an [`Ra`] is built for these tests, wired as `certeasy serve` wires it
//! (`crates/certeasy/src/serve.rs`) but with a throw-away SQLite database, a fake clock that only
//! moves when a test moves it, the in-memory rate-limit store, and a fake job runner that records
//! what it is handed instead of validating or signing.
//!
//! Every limit is off unless a test turns it on ([`Builder::limits`]), so a test about one rule
//! is not refused by another.

use std::net::IpAddr;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use acme_core::clock::FakeClock;
use acme_core::identifier::Identifier;
use acme_core::problem::ProblemType;
use acme_core::status::AccountStatus;
use acme_core::status::ChallengeStatus;
use acme_core::status::OrderStatus;
use acme_jose::Algorithm;
use acme_jose::Jwk;
use acme_jose::sign::SigningKey;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use issuance::Ca;
use issuance::CaSettings;
use issuance::CheckedCsr;
use ra::Error;
use ra::Ra;
use ra::Refusal;
use ra::accounts::AccountRequest;
use ra::accounts::Registered;
use ra::audit::Requester;
use ra::in_flight::Held;
use ra::jobs::Finalized;
use ra::jobs::JobRunner;
use ra::jobs::Reply;
use ra::jobs::Slot;
use ra::jobs::ValidationTarget;
use ra::limits::RateLimits;
use ra::orders::CreatedOrder;
use ra::orders::OrderRequest;
use ra::orders::RawIdentifier;
use ra::settings::PolicySettings;
use ratelimits::BucketKey;
use ratelimits::Limit;
use ratelimits::MemoryStore;
use ratelimits::Overrides;
use ratelimits::Store;
use ratelimits::batch::BatchOutcome;
use ratelimits::batch::Transaction;
use ratelimits::config::RateLimitingConfig;
use ratelimits::gcra::Decision;
use ratelimits::limiter::Limiter;
use ratelimits::store::Debt;
use ratelimits::store::StoreFuture;
use storage::Storage;
use storage::model::Account;
use storage::model::Certificate;
use storage::model::Challenge;
use storage::model::NewCertificate;
use storage::model::NewReservation;
use storage::model::Order;
use storage::model::Reserved;
use tempfile::TempDir;
use time::OffsetDateTime;
use time::macros::datetime;
use tokio::sync::Semaphore;

/// Where every test's clock starts: a fixed instant, so every time a test sees is the same on
/// every run.
pub(crate) const START: OffsetDateTime = datetime!(2026-03-02 09:00:00 UTC);

/// The address requests come from unless a test says otherwise.
pub(crate) const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10));

/// A built policy layer and the fakes around it.
pub(crate) struct Harness {
    pub(crate) ra: Ra,
    pub(crate) storage: Storage,
    pub(crate) clock: FakeClock,
    pub(crate) jobs: Arc<FakeJobs>,
    /// The CA certificates are signed with in [`Harness::issue`] (what the job runner would do).
    pub(crate) ca: Ca,
    _dir: TempDir,
}

/// How a harness is to be built.
pub(crate) struct Builder {
    settings: PolicySettings,
    limits: RateLimitingConfig,
    slots: usize,
    store_down: bool,
}

/// A harness with the default policy, every limit off and no free worker place.
pub(crate) fn harness() -> Builder {
    Builder {
        settings: PolicySettings::default(),
        limits: no_limits(),
        slots: 0,
        store_down: false,
    }
}

/// The default rate-limit configuration with every limit turned off.
pub(crate) fn no_limits() -> RateLimitingConfig {
    let mut config = RateLimitingConfig::default();
    config.global.enabled = false;
    config.account_creation.enabled = false;
    config.order_creation.enabled = false;
    config.duplicate_certificate.enabled = false;
    config.failed_validation.enabled = false;
    config.pending_authorizations.enabled = false;
    config.zombie_pausing.enabled = false;
    config
}

impl Builder {
    /// Changes the policy settings.
    pub(crate) fn settings(mut self, change: impl FnOnce(&mut PolicySettings)) -> Self {
        change(&mut self.settings);
        self
    }

    /// Changes the rate limits (all off to begin with).
    pub(crate) fn limits(mut self, change: impl FnOnce(&mut RateLimitingConfig)) -> Self {
        change(&mut self.limits);
        self
    }

    /// How many worker places the fake runner has free: work is then handed to it at once.
    pub(crate) fn slots(mut self, slots: usize) -> Self {
        self.slots = slots;
        self
    }

    /// The rate-limit store does not answer (a Redis that is away).
    pub(crate) fn store_down(mut self) -> Self {
        self.store_down = true;
        self
    }

    pub(crate) async fn build(self) -> Harness {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("ra.sqlite").display());
        let storage = Storage::connect(&url)
            .await
            .expect("the SQLite database opens");
        let clock = FakeClock::new(START);
        let shared: acme_core::clock::SharedClock = Arc::new(clock.clone());
        let store: Arc<dyn Store> = if self.store_down {
            Arc::new(DownStore)
        } else {
            Arc::new(MemoryStore::default())
        };
        let limiter = Limiter::new(&self.limits, &Overrides::empty(), store)
            .expect("the rate-limit configuration is valid");
        let limits = Arc::new(RateLimits::new(Arc::new(limiter), self.limits));
        let jobs = Arc::new(FakeJobs::new(self.slots));
        let runner: Arc<dyn JobRunner> = Arc::<FakeJobs>::clone(&jobs);
        let ra = Ra::new(self.settings, storage.clone(), shared, limits, runner);
        let ca = Ca::load_or_create(&CaSettings::new(dir.path().join("ca")), START)
            .expect("a CA is generated");
        Harness {
            ra,
            storage,
            clock,
            jobs,
            ca,
            _dir: dir,
        }
    }
}

/// A rate-limit store whose every call times out.
struct DownStore;

fn timed_out() -> ratelimits::Error {
    ratelimits::Error::Timeout(Duration::from_millis(50))
}

impl Store for DownStore {
    fn spend_batch<'a>(
        &'a self,
        _now: i64,
        _batch: &'a [Transaction],
    ) -> StoreFuture<'a, BatchOutcome> {
        Box::pin(async { Err(timed_out()) })
    }

    fn refund<'a>(&'a self, _now: i64, _batch: &'a [Transaction]) -> StoreFuture<'a, ()> {
        Box::pin(async { Err(timed_out()) })
    }

    fn reset<'a>(&'a self, _keys: &'a [BucketKey]) -> StoreFuture<'a, ()> {
        Box::pin(async { Err(timed_out()) })
    }

    fn peek<'a>(
        &'a self,
        _now: i64,
        _key: &'a BucketKey,
        _limit: &'a Limit,
    ) -> StoreFuture<'a, Decision> {
        Box::pin(async { Err(timed_out()) })
    }

    fn absorb<'a>(&'a self, _now: i64, _debts: &'a [Debt]) -> StoreFuture<'a, ()> {
        Box::pin(async { Err(timed_out()) })
    }
}

/// What the fake runner was handed.
#[derive(Debug, Clone)]
pub(crate) enum Handed {
    Validation {
        target: ValidationTarget,
        wait: Duration,
    },
    Finalization {
        order: Order,
        csr_der: Vec<u8>,
        wait: Duration,
    },
}

/// What the fake runner answers a finalization run at once with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinalizeAnswer {
    /// The order as it was handed over (the runner's "still processing" answer, as far as the
    /// policy layer can tell).
    OrderAsHanded,
    /// The account was found deactivated before anything was stored.
    AccountNotValid(AccountStatus),
}

/// A job runner that runs nothing: it records what it is handed, counts wake-ups and answers at
/// once.
pub(crate) struct FakeJobs {
    slots: Arc<Semaphore>,
    handed: Mutex<Vec<Handed>>,
    wakes: AtomicUsize,
    finalize_answer: Mutex<FinalizeAnswer>,
}

impl FakeJobs {
    fn new(slots: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(slots)),
            handed: Mutex::new(Vec::new()),
            wakes: AtomicUsize::new(0),
            finalize_answer: Mutex::new(FinalizeAnswer::OrderAsHanded),
        }
    }

    /// Everything handed over so far, in order.
    pub(crate) fn handed(&self) -> Vec<Handed> {
        self.handed.lock().unwrap().clone()
    }

    /// How many times a worker was woken for queued work.
    pub(crate) fn wakes(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }

    pub(crate) fn answer_finalizations_with(&self, answer: FinalizeAnswer) {
        *self.finalize_answer.lock().unwrap() = answer;
    }
}

impl JobRunner for FakeJobs {
    fn try_slot(&self) -> Option<Slot> {
        Arc::clone(&self.slots)
            .try_acquire_owned()
            .ok()
            .map(Slot::new)
    }

    fn validate_at_once(
        &self,
        slot: Slot,
        target: ValidationTarget,
        wait: Duration,
        held: Held,
    ) -> Reply<Challenge> {
        drop((slot, held));
        let mut answer = target.challenge.clone();
        answer.status = ChallengeStatus::Processing;
        self.handed
            .lock()
            .unwrap()
            .push(Handed::Validation { target, wait });
        let (tx, rx) = tokio::sync::oneshot::channel();
        tx.send(Ok(answer)).unwrap();
        rx
    }

    fn finalize_at_once(
        &self,
        slot: Slot,
        order: Order,
        csr_der: Vec<u8>,
        _csr: CheckedCsr,
        wait: Duration,
        held: Held,
    ) -> Reply<Finalized> {
        drop((slot, held));
        let answer = match *self.finalize_answer.lock().unwrap() {
            FinalizeAnswer::OrderAsHanded => Finalized::Order(Box::new(order.clone())),
            FinalizeAnswer::AccountNotValid(status) => Finalized::AccountNotValid(status),
        };
        self.handed.lock().unwrap().push(Handed::Finalization {
            order,
            csr_der,
            wait,
        });
        let (tx, rx) = tokio::sync::oneshot::channel();
        tx.send(Ok(answer)).unwrap();
        rx
    }

    fn wake(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

/// A fresh ES256 account key.
pub(crate) fn key() -> SigningKey {
    SigningKey::generate(Algorithm::Es256).unwrap()
}

/// A new-account request for `jwk` that agrees to the terms, from [`CLIENT`].
pub(crate) fn account_request(jwk: Jwk) -> AccountRequest {
    AccountRequest {
        jwk,
        contacts: None,
        terms_of_service_agreed: true,
        only_return_existing: false,
        external_account_binding: None,
        client_ip: CLIENT,
    }
}

/// A new-order request for DNS names (or IP addresses, when they parse as one). An order with an
/// IP address asks for the shipped `short-lived` profile, the only shipped one that certifies IP
/// addresses (as at Let's Encrypt).
pub(crate) fn order_request(names: &[&str]) -> OrderRequest {
    let any_ip = names.iter().any(|n| n.parse::<IpAddr>().is_ok());
    OrderRequest {
        identifiers: names
            .iter()
            .map(|n| RawIdentifier {
                kind: if n.parse::<IpAddr>().is_ok() {
                    "ip"
                } else {
                    "dns"
                }
                .to_owned(),
                value: (*n).to_owned(),
            })
            .collect(),
        not_before: None,
        not_after: None,
        replaces: None,
        profile: any_ip.then(|| "short-lived".to_owned()),
    }
}

pub(crate) fn dns(name: &str) -> Identifier {
    Identifier::dns(name).unwrap()
}

/// A CSR for `names` with a fresh P-256 key, and the key.
pub(crate) fn csr_for(names: &[&str]) -> (Vec<u8>, rcgen::KeyPair) {
    let key = rcgen::KeyPair::generate().unwrap();
    let der = csr_with(&key, names);
    (der, key)
}

/// A CSR for `names` with `key`.
pub(crate) fn csr_with(key: &rcgen::KeyPair, names: &[&str]) -> Vec<u8> {
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.serialize_request(key).unwrap().der().to_vec()
}

/// The CSR as a client sends it in a finalize request.
pub(crate) fn b64(der: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(der)
}

/// The refusal an outcome ended in; anything else fails the test.
#[track_caller]
pub(crate) fn refusal<T: std::fmt::Debug>(outcome: Result<T, Error>) -> Refusal {
    match outcome {
        Err(Error::Refused(refusal)) => *refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The ACME problem type of a plain refusal; anything else fails the test.
#[track_caller]
pub(crate) fn problem_kind<T: std::fmt::Debug>(outcome: Result<T, Error>) -> ProblemType {
    match refusal(outcome) {
        Refusal::Problem(p) => p.kind,
        other => panic!("expected a problem refusal, got {other:?}"),
    }
}

/// The limit and retry-after of a rate-limit refusal; anything else fails the test.
#[track_caller]
pub(crate) fn rate_limited<T: std::fmt::Debug>(outcome: Result<T, Error>) -> (&'static str, u64) {
    match refusal(outcome) {
        Refusal::RateLimited {
            limit,
            retry_after_secs,
            ..
        } => (limit, retry_after_secs),
        other => panic!("expected a rate-limit refusal, got {other:?}"),
    }
}

impl Harness {
    pub(crate) fn now(&self) -> OffsetDateTime {
        acme_core::clock::Clock::now(&self.clock)
    }

    pub(crate) fn advance(&self, by: time::Duration) {
        self.clock.advance(by);
    }

    /// A new account with a fresh key, and the key.
    pub(crate) async fn account(&self) -> (Account, SigningKey) {
        let key = key();
        let account = self.register(account_request(key.public_jwk())).await;
        (account, key)
    }

    /// Registers `request`, which must create an account.
    pub(crate) async fn register(&self, request: AccountRequest) -> Account {
        match self.ra.new_account(request).await.unwrap() {
            Registered::Created { account, .. } => account,
            other => panic!("expected a new account, got {other:?}"),
        }
    }

    /// Orders `names` for `account`.
    pub(crate) async fn order(
        &self,
        account: &Account,
        names: &[&str],
    ) -> Result<CreatedOrder, Error> {
        self.ra.new_order(account, order_request(names)).await
    }

    /// Marks every authorization of `order` valid (its first challenge validated now), as a
    /// successful validation does, and returns the order as stored afterwards.
    pub(crate) async fn validate_all(&self, order: &Order) -> Order {
        for id in &order.authz_ids {
            let authz = self
                .storage
                .authorization(*id, self.now())
                .await
                .unwrap()
                .unwrap();
            if authz.status == acme_core::status::AuthzStatus::Valid {
                continue;
            }
            self.storage
                .record_valid_at_once(
                    authz.challenges[0].id,
                    self.ra.settings().valid_authorization_lifetime,
                    self.now(),
                )
                .await
                .unwrap();
        }
        self.stored_order(order).await
    }

    pub(crate) async fn stored_order(&self, order: &Order) -> Order {
        self.storage
            .order(order.id, self.now())
            .await
            .unwrap()
            .unwrap()
    }

    /// An order of `names` for `account`, every authorization valid: ready to finalize.
    pub(crate) async fn ready_order(&self, account: &Account, names: &[&str]) -> Order {
        let created = self.order(account, names).await.unwrap();
        let order = self.validate_all(&created.order).await;
        assert_eq!(order.status, OrderStatus::Ready);
        order
    }

    /// Issues a certificate for `names` to `account` the way the queue does: a ready order is
    /// finalized through the policy layer (no free worker place, so it goes to `processing`),
    /// then the serial is reserved, signed and stored as a finalization job would.
    pub(crate) async fn issue(
        &self,
        account: &Account,
        names: &[&str],
    ) -> (Certificate, rcgen::KeyPair) {
        let order = self.ready_order(account, names).await;
        self.issue_order(account, order, names).await
    }

    /// [`Harness::issue`] for an order that is ready already.
    pub(crate) async fn issue_order(
        &self,
        account: &Account,
        order: Order,
        names: &[&str],
    ) -> (Certificate, rcgen::KeyPair) {
        let (der, key) = csr_for(names);
        let processing = self
            .ra
            .finalize(account, order, &b64(&der), client_ip())
            .await
            .unwrap();
        assert_eq!(processing.status, OrderStatus::Processing);
        let checked = issuance::check_csr(&der, &processing.identifiers).unwrap();
        let profiles = &self.ra.settings().profiles;
        let profile = profiles.select(processing.profile.as_deref()).unwrap();
        let now = self.now();
        let (not_before, not_after) = ra::orders::signing_window(
            profile,
            processing.not_before,
            processing.not_after,
            now,
            self.ra.settings().backdate,
        )
        .unwrap();
        let intent = self
            .ca
            .prepare(
                &checked,
                &processing.identifiers,
                profile,
                not_before,
                not_after,
            )
            .unwrap();
        let reserved = self
            .storage
            .reserve_serial(
                processing.id,
                NewReservation {
                    serial: intent.serial.clone(),
                    not_before: intent.not_before,
                    not_after: intent.not_after,
                    issuer_chain_pem: self.ca.chain_pem().to_owned(),
                    crl_shard: intent.crl_shard,
                    issuer: storage::ca_state::DEFAULT_ISSUER.to_owned(),
                },
                now,
            )
            .await
            .unwrap();
        assert!(matches!(reserved, Reserved::Reserved(_)), "{reserved:?}");
        let issued = self
            .ca
            .issue(&checked, &processing.identifiers, profile, &intent)
            .unwrap();
        let new = NewCertificate {
            serial: issued.serial,
            der: issued.der,
            issuer_chain_pem: issued.issuer_chain_pem.to_string(),
            not_before: issued.not_before,
            not_after: issued.not_after,
            crl_shard: issued.crl_shard,
        };
        let audit = ra::audit::certificate_issued(&processing, &new);
        let cert = self
            .storage
            .complete_order(processing.id, new, now, None, &audit)
            .await
            .unwrap();
        (cert, key)
    }

    /// The ARI certificate identifier of `cert` (RFC 9773 §4.1).
    pub(crate) fn cert_id(&self, cert: &Certificate) -> String {
        use x509_parser::prelude::FromDer;
        let (_, parsed) = x509_parser::certificate::X509Certificate::from_der(&cert.der).unwrap();
        let aki = parsed
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(a) => {
                    a.key_identifier.as_ref().map(|k| k.0.to_vec())
                }
                _ => None,
            })
            .unwrap();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(aki),
            URL_SAFE_NO_PAD.encode(cert.serial.as_bytes())
        )
    }
}

/// The address the tests' ACME requests come from (TEST-NET-1).
pub(crate) fn client_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7))
}

/// Who asks, where a test does not look at the audit record: an operator through the admin API.
pub(crate) fn who() -> Requester {
    Requester::admin(
        "sha256:0123456789abcdef".to_owned(),
        Some("alice".to_owned()),
        Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
    )
}

/// The holder of account `id`, asking from [`client_ip`].
pub(crate) fn subscriber(id: acme_core::ids::AccountId) -> Requester {
    Requester::account(id, client_ip())
}
