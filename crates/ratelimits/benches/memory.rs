//! In-memory decisions per second: our limiter and `MemoryStore` against `governor`'s keyed
//! (DashMap) limiter, measured in the same run so the ratio means something on any machine.
//!
//! One iteration is one request: either a single bucket, or the new-order batch the server builds
//! (order count and SAN budget spent, three failed-validation buckets checked). Every request
//! names another account, cycling over [`accounts`] in a scattered order ([`STRIDE`]), and every
//! limit is raised so all requests are allowed: both sides then do the same work on every
//! iteration (decide and write).
//!
//! The memory store answers without waiting, so the limiter's future is polled once
//! (`now_or_never`) rather than driven by an executor whose cost governor would not pay.
//!
//! Our limiter runs as in production, with the Prometheus recorder installed: every decision is
//! counted and timed, which governor does not do.
//!
//! `scripts/bench.sh` runs this with `--output-format bencher` and turns ns/iter into decisions/s.
#![allow(clippy::expect_used)] // A bench that cannot set itself up must stop loudly.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use criterion::Criterion;
use criterion::Throughput;
use futures::FutureExt;
use governor::DefaultKeyedRateLimiter;
use governor::Quota;
use governor::RateLimiter;
use ratelimits::BucketId;
use ratelimits::Kind;
use ratelimits::Limiter;
use ratelimits::MemoryStore;
use ratelimits::Overrides;
use ratelimits::Request;
use ratelimits::batch::Transaction;
use ratelimits::config::RateLimitingConfig;
use ratelimits::limit::Limit;
use ratelimits::limit::LimitName;
use time::OffsetDateTime;

/// Distinct accounts the requests cycle over: `BENCH_MEMORY_ACCOUNTS`, default 50,000. Few
/// accounts keep every bucket in the CPU caches; many make each request a cache miss, as on a
/// busy server.
fn accounts() -> usize {
    static ACCOUNTS: OnceLock<usize> = OnceLock::new();
    *ACCOUNTS.get_or_init(|| {
        let n: usize = std::env::var("BENCH_MEMORY_ACCOUNTS")
            .ok()
            .map(|v| v.parse().expect("BENCH_MEMORY_ACCOUNTS is a number"))
            .unwrap_or(50_000);
        assert!(
            n > 0 && !n.is_multiple_of(STRIDE),
            "BENCH_MEMORY_ACCOUNTS must be positive and not a multiple of {STRIDE}"
        );
        n
    })
}
/// Accounts are visited in this stride's order, which is a permutation because it is prime and
/// does not divide [`accounts`]. Visiting them in creation order would let the CPU prefetch
/// whatever was allocated in that order (governor's heap-allocated keys, our prebuilt batches),
/// which real traffic, arriving from accounts in no particular order, never does.
const STRIDE: usize = 7_919;

/// The account after `i`.
fn next(i: usize) -> usize {
    (i + STRIDE) % accounts()
}

/// Buckets in the new-order batch: order count, SAN budget, three failed-validation checks.
const BATCH: u64 = 5;
/// High enough that no bucket ever denies during a run.
const HUGE: u64 = 1_000_000_000;

fn names(account: usize) -> [String; 3] {
    [
        format!("a{account}.example.com"),
        format!("www.a{account}.example.com"),
        format!("api.a{account}.example.com"),
    ]
}

fn config() -> RateLimitingConfig {
    let mut config = RateLimitingConfig::default();
    config.order_creation.order_burst = HUGE;
    config.order_creation.orders_per_account_per_hour = HUGE;
    config.order_creation.san_budget_per_account_per_hour = HUGE;
    config
}

fn limiter() -> Limiter {
    Limiter::new(
        &config(),
        &Overrides::default(),
        Arc::new(MemoryStore::default()),
    )
    .expect("the bench configuration is valid")
}

/// The batch `acme-api` builds for a new order (see `charge_order`).
fn new_order_requests(account: usize, names: &[String; 3]) -> Vec<Request> {
    let id = i64::try_from(account).expect("small account ids");
    let mut requests = vec![
        Request::new(LimitName::NewOrdersPerAccount, BucketId::Account(id), 1),
        Request::new(LimitName::SanBudgetPerAccount, BucketId::Account(id), 3),
    ];
    for name in names {
        requests.push(
            Request::new(
                LimitName::FailedValidationPerAccountIdentifier,
                BucketId::AccountIdentifier {
                    account: id,
                    identifier: name.clone(),
                },
                1,
            )
            .with_kind(Kind::CheckOnly),
        );
    }
    requests
}

fn unix_nanos() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(since.as_nanos()).expect("before 2262")
}

fn limit(name: LimitName) -> Limit {
    let limiter = limiter();
    let id = match name.id_kind() {
        ratelimits::limit::IdKind::Ip => BucketId::Ip("192.0.2.1/32".parse().expect("a CIDR")),
        ratelimits::limit::IdKind::Account => BucketId::Account(1),
        ratelimits::limit::IdKind::AccountIdentifier => BucketId::AccountIdentifier {
            account: 1,
            identifier: "example.com".to_owned(),
        },
    };
    limiter.limit_for(name, &id).expect("the limit is enabled")
}

/// The limits the limiter resolves for the three families of the batch.
#[derive(Clone, Copy)]
struct Limits {
    orders: Limit,
    sans: Limit,
    failed: Limit,
}

/// The store-level batch with keys and limits resolved beforehand.
fn transactions(account: usize, names: &[String; 3], limits: Limits) -> Vec<Transaction> {
    let mut batch = vec![
        Transaction::new(
            LimitName::NewOrdersPerAccount,
            format!("order-creation:{account}"),
            limits.orders,
            1,
            Kind::CheckAndSpend,
        )
        .expect("cost within burst"),
        Transaction::new(
            LimitName::SanBudgetPerAccount,
            format!("san-budget:{account}"),
            limits.sans,
            3,
            Kind::CheckAndSpend,
        )
        .expect("cost within burst"),
    ];
    for name in names {
        batch.push(
            Transaction::new(
                LimitName::FailedValidationPerAccountIdentifier,
                format!("failed-validation:{account}:{name}"),
                limits.failed,
                1,
                Kind::CheckOnly,
            )
            .expect("cost within burst"),
        );
    }
    batch
}

/// Governor's counterpart: one keyed limiter per limit family, as governor has one quota per
/// limiter. Every quota is huge, like ours, so nothing is ever denied.
struct Governor {
    orders: DefaultKeyedRateLimiter<String>,
    sans: DefaultKeyedRateLimiter<String>,
    failed: DefaultKeyedRateLimiter<String>,
}

impl Governor {
    fn new() -> Self {
        let huge = NonZeroU32::new(1_000_000_000).expect("not zero");
        let quota = || Quota::per_hour(huge).allow_burst(huge);
        Self {
            orders: RateLimiter::keyed(quota()),
            sans: RateLimiter::keyed(quota()),
            failed: RateLimiter::keyed(quota()),
        }
    }

    fn batch(&self, keys: &[String; 5]) -> bool {
        let three = NonZeroU32::new(3).expect("not zero");
        let mut allowed = self.orders.check_key(&keys[0]).is_ok();
        allowed &= matches!(self.sans.check_key_n(&keys[1], three), Ok(Ok(())));
        for key in &keys[2..] {
            allowed &= self.failed.check_key(key).is_ok();
        }
        allowed
    }
}

fn governor_keys(account: usize, names: &[String; 3]) -> [String; 5] {
    [
        format!("order-creation:{account}"),
        format!("san-budget:{account}"),
        format!("failed-validation:{account}:{}", names[0]),
        format!("failed-validation:{account}:{}", names[1]),
        format!("failed-validation:{account}:{}", names[2]),
    ]
}

fn new_order_batch(c: &mut Criterion, all_names: &[[String; 3]]) {
    let mut group = c.benchmark_group("new_order_batch");
    group.throughput(Throughput::Elements(BATCH));

    let ours = limiter();
    let mut i = 0usize;
    group.bench_function("certeasy_limiter", |b| {
        b.iter(|| {
            i = next(i);
            let requests = new_order_requests(i, &all_names[i]);
            let verdict = ours
                .check(OffsetDateTime::now_utc(), black_box(&requests))
                .now_or_never()
                .expect("the memory store answers at once")
                .expect("a valid batch");
            assert!(verdict.allowed);
        });
    });

    let store = MemoryStore::default();
    let limits = Limits {
        orders: limit(LimitName::NewOrdersPerAccount),
        sans: limit(LimitName::SanBudgetPerAccount),
        failed: limit(LimitName::FailedValidationPerAccountIdentifier),
    };
    let batches: Vec<Vec<Transaction>> = (0..accounts())
        .map(|a| transactions(a, &all_names[a], limits))
        .collect();
    group.bench_function("certeasy_memory_store", |b| {
        b.iter(|| {
            i = next(i);
            let outcome = store
                .spend_batch_now(unix_nanos(), black_box(&batches[i]))
                .expect("a valid batch");
            assert!(outcome.allowed);
        });
    });
    drop(batches);

    let governor = Governor::new();
    group.bench_function("governor_keyed", |b| {
        b.iter(|| {
            i = next(i);
            let keys = governor_keys(i, &all_names[i]);
            assert!(governor.batch(black_box(&keys)));
        });
    });

    let governor = Governor::new();
    let keys: Vec<[String; 5]> = (0..accounts())
        .map(|a| governor_keys(a, &all_names[a]))
        .collect();
    group.bench_function("governor_keyed_prebuilt", |b| {
        b.iter(|| {
            i = next(i);
            assert!(governor.batch(black_box(&keys[i])));
        });
    });
    group.finish();
}

fn single_bucket(c: &mut Criterion) {
    let mut group = c.benchmark_group("single_bucket");
    group.throughput(Throughput::Elements(1));

    let ours = limiter();
    let mut i = 0usize;
    group.bench_function("certeasy_limiter", |b| {
        b.iter(|| {
            i = next(i);
            let id = BucketId::Account(i64::try_from(i).expect("small account ids"));
            let requests = [Request::new(LimitName::NewOrdersPerAccount, id, 1)];
            let verdict = ours
                .check(OffsetDateTime::now_utc(), black_box(&requests))
                .now_or_never()
                .expect("the memory store answers at once")
                .expect("a valid batch");
            assert!(verdict.allowed);
        });
    });

    let store = MemoryStore::default();
    let orders = limit(LimitName::NewOrdersPerAccount);
    let batches: Vec<[Transaction; 1]> = (0..accounts())
        .map(|a| {
            [Transaction::new(
                LimitName::NewOrdersPerAccount,
                format!("order-creation:{a}"),
                orders,
                1,
                Kind::CheckAndSpend,
            )
            .expect("cost within burst")]
        })
        .collect();
    group.bench_function("certeasy_memory_store", |b| {
        b.iter(|| {
            i = next(i);
            let outcome = store
                .spend_batch_now(unix_nanos(), black_box(&batches[i]))
                .expect("a valid batch");
            assert!(outcome.allowed);
        });
    });

    let governor = Governor::new();
    group.bench_function("governor_keyed", |b| {
        b.iter(|| {
            i = next(i);
            let key = format!("order-creation:{i}");
            assert!(governor.orders.check_key(black_box(&key)).is_ok());
        });
    });

    let governor = Governor::new();
    let keys: Vec<String> = (0..accounts())
        .map(|a| format!("order-creation:{a}"))
        .collect();
    group.bench_function("governor_keyed_prebuilt", |b| {
        b.iter(|| {
            i = next(i);
            assert!(governor.orders.check_key(black_box(&keys[i])).is_ok());
        });
    });
    group.finish();
}

/// The recorder `certeasy serve` installs, with its upkeep (which the server runs every 5 s).
fn install_prometheus() {
    // The same histogram buckets as `certeasy serve`.
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&[
            0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            10.0,
        ])
        .expect("buckets are given")
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the first recorder");
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            handle.run_upkeep();
        }
    });
}

fn main() {
    install_prometheus();
    let all_names: Vec<[String; 3]> = (0..accounts()).map(names).collect();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args();
    new_order_batch(&mut c, &all_names);
    single_bucket(&mut c);
    c.final_summary();
}
