//! CRL shards at the size of issue 31 (100,000 revocations of 7-day certificates): the CPU one
//! shard of 25,000 revoked entries takes to build and publish with a file key, and the CPU to
//! regenerate every shard of 100,000 revocations spread over 1, 4, 16 and 32 shards, from which
//! the default of `crl.shards` is chosen (docs/performance.md, "CRLs").
//!
//! Self-contained: each measurement creates its own storage (SQLite in a temporary directory, or
//! a PostgreSQL database of its own that is dropped afterwards), a generated CA in a temporary
//! directory (its key in a file), and writes the revoked certificates through the storage's own
//! writes, as the server does: an order reusing one valid authorization (ready at once), the
//! serial reserved and the certificate stored against it, then revoked through the bulk
//! revocation of `certeasy admin` (1,000 per transaction). Certificates live 7 days and none has
//! expired, so every one is listed.
//!
//! CPU is `CLOCK_PROCESS_CPUTIME_ID` (every thread of this process: the runtime, SQLite's
//! connection threads) before and after; on PostgreSQL the CPU of the database's own backends
//! (`/proc/PID/stat`, 10 ms ticks) is reported beside it. Medians of
//! `CERTEASY_CRL_BENCH_RUNS` (default 5) runs.
//!
//! `cargo bench -p workers --bench crl`; environment: `CERTEASY_CRL_BENCH_BACKENDS`
//! (`sqlite,postgres`), `CERTEASY_CRL_BENCH_SWEEP_BACKENDS` (`sqlite`), `CERTEASY_CRL_BENCH_ENTRIES`
//! (25000), `CERTEASY_CRL_BENCH_UNREVOKED` (100000: valid certificates beside them, which the
//! query must skip), `CERTEASY_CRL_BENCH_TOTAL` (100000), `CERTEASY_CRL_BENCH_SHARDS` (`1,4,16,32`).
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::print_stdout,
    clippy::cast_precision_loss
)] // A measurement that cannot set itself up stops loudly, and prints its figures.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use acme_core::clock::SharedClock;
use acme_core::clock::SystemClock;
use issuance::Ca;
use issuance::CaSettings;
use issuance::CrlDistribution;
use issuance::RevokedEntry;
use sqlx::AnyConnection;
use sqlx::Connection;
use storage::Backend;
use storage::Storage;
use storage::ca_state::DEFAULT_ISSUER;
use storage::crls::PublishedCrl;
use testkit::postgres::PgDatabase;
use time::Duration;
use time::OffsetDateTime;
use workers::crl::CrlSettings;
use workers::crl::publish_shard;

#[path = "../tests/common/crl_fill.rs"]
mod crl_fill;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v} is not understood"))
        })
        .unwrap_or(default)
}

fn list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn main() {
    let entries: usize = env_or("CERTEASY_CRL_BENCH_ENTRIES", 25_000);
    let total: usize = env_or("CERTEASY_CRL_BENCH_TOTAL", 100_000);
    let unrevoked: usize = env_or("CERTEASY_CRL_BENCH_UNREVOKED", 100_000);
    let runs: usize = env_or("CERTEASY_CRL_BENCH_RUNS", 5);
    let backends = list("CERTEASY_CRL_BENCH_BACKENDS", "sqlite,postgres");
    let sweep_backends = list("CERTEASY_CRL_BENCH_SWEEP_BACKENDS", "sqlite");
    let shard_counts: Vec<u16> = list("CERTEASY_CRL_BENCH_SHARDS", "1,4,16,32")
        .iter()
        .map(|s| {
            s.parse()
                .expect("CERTEASY_CRL_BENCH_SHARDS lists shard counts")
        })
        .collect();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        sqlx::any::install_default_drivers();
        for backend in &backends {
            one_shard(backend, entries, unrevoked, runs).await;
        }
        for backend in &sweep_backends {
            for &shards in &shard_counts {
                all_shards(backend, total, shards, runs).await;
            }
        }
    });
}

/// A storage on `backend`: SQLite in `dir`, or a PostgreSQL database dropped with the guard.
async fn storage(backend: &str, dir: &Path) -> (Option<PgDatabase>, Storage) {
    let pg = match backend {
        "sqlite" => None,
        "postgres" => Some(PgDatabase::create("certeasy_crl_bench_").unwrap()),
        other => panic!("unknown backend {other}"),
    };
    let url = match &pg {
        Some(pg) => pg.url().to_owned(),
        None => format!("sqlite://{}", dir.join("crl.db").display()),
    };
    let s = Storage::connect(&url).await.unwrap();
    assert_eq!(
        s.backend() == Backend::Postgres,
        pg.is_some(),
        "the URL's backend"
    );
    (pg, s)
}

/// A generated CA (file key) in `dir` publishing `shards` shards.
fn ca(dir: &Path, shards: u16) -> Ca {
    Ca::load_or_create(&CaSettings::new(dir.join("ca")), OffsetDateTime::now_utc())
        .unwrap()
        .with_crl_distribution(CrlDistribution {
            base_url: "http://crl.bench.example/crl".to_owned(),
            shards,
        })
}

/// CPU seconds this process has used so far, all threads, with nanosecond resolution.
fn process_cpu() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// The CPU of the PostgreSQL backends serving the database (the server side of the query and
/// the store), read from `/proc`.
struct PgCpu {
    conn: AnyConnection,
}

impl PgCpu {
    async fn connect(url: &str) -> Self {
        Self {
            conn: AnyConnection::connect(url).await.unwrap(),
        }
    }

    async fn seconds(&mut self) -> f64 {
        let pids: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()",
        )
        .fetch_all(&mut self.conn)
        .await
        .unwrap();
        let ticks = procfs::ticks_per_second() as f64;
        pids.iter()
            .filter_map(|pid| procfs::process::Process::new(*pid).ok()?.stat().ok())
            .map(|stat| (stat.utime + stat.stime) as f64 / ticks)
            .sum()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Fills `count` 7-day certificates revoked now ([`crl_fill::fill`]); how long it took.
async fn timed_fill(
    s: &Storage,
    ca: &Ca,
    count: usize,
    shards: u16,
    only_shard: Option<u16>,
    revoke: bool,
    first_serial: u64,
) -> std::time::Duration {
    let started = Instant::now();
    let now = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
    crl_fill::fill(
        s,
        &crl_fill::Fill {
            ca,
            count,
            shards,
            only_shard,
            now,
            not_after: now + Duration::days(7),
            first_serial,
            revoke,
        },
    )
    .await;
    started.elapsed()
}

/// Builds and publishes shard 0, holding `entries` revoked certificates, `runs` times: the CPU
/// of each run, and the CPU of its phases measured apart (the query, the DER building and
/// signing, the store).
async fn one_shard(backend: &str, entries: usize, unrevoked: usize, runs: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (pg, s) = storage(backend, dir.path()).await;
    let shards = 4;
    let ca = ca(dir.path(), shards);
    s.ensure_crl_shards(DEFAULT_ISSUER, shards).await.unwrap();
    let filled = timed_fill(&s, &ca, entries, shards, Some(0), true, 0).await;
    let valid = timed_fill(&s, &ca, unrevoked, shards, None, false, 1 << 40).await;
    println!(
        "RESULT crl_fill_{backend} revoked={entries} in {:.1} s, unrevoked={unrevoked} in {:.1} s",
        filled.as_secs_f64(),
        valid.as_secs_f64()
    );
    let url = match &pg {
        Some(pg) => pg.url().to_owned(),
        None => format!("sqlite://{}", dir.path().join("crl.db").display()),
    };
    compare_queries(backend, &url, entries, runs).await;
    let mut pg_cpu = match &pg {
        Some(pg) => Some(PgCpu::connect(pg.url()).await),
        None => None,
    };
    let clock: SharedClock = Arc::new(SystemClock);
    let settings = CrlSettings {
        shards,
        ..CrlSettings::default()
    };
    let (mut cpu, mut wall, mut server) = (Vec::new(), Vec::new(), Vec::new());
    let (mut query, mut build, mut store) = (Vec::new(), Vec::new(), Vec::new());
    let mut der_len = 0;
    for _ in 0..runs {
        let state = s.crl_shard_states().await.unwrap().remove(0);
        assert_eq!(state.shard, 0);
        let pg_before = match pg_cpu.as_mut() {
            Some(p) => p.seconds().await,
            None => 0.0,
        };
        let (c0, w0) = (process_cpu(), Instant::now());
        assert!(
            publish_shard(&s, &ca, &clock, &settings, &state)
                .await
                .unwrap()
        );
        cpu.push(process_cpu() - c0);
        wall.push(w0.elapsed().as_secs_f64());
        if let Some(p) = pg_cpu.as_mut() {
            server.push(p.seconds().await - pg_before);
        }

        // The same three steps apart, to see where the CPU goes.
        let state = s.crl_shard_states().await.unwrap().remove(0);
        let now = OffsetDateTime::now_utc();
        let c0 = process_cpu();
        let listed = s
            .revoked_in_crl_shard(DEFAULT_ISSUER, 0, ca.chain_pem(), now)
            .await
            .unwrap();
        let c1 = process_cpu();
        assert_eq!(listed.len(), entries, "every revoked certificate is listed");
        let revoked: Vec<RevokedEntry> = listed
            .into_iter()
            .map(|r| RevokedEntry {
                serial: r.serial,
                revoked_at: r.revoked_at,
                reason: r.reason,
            })
            .collect();
        let der = ca
            .crl(0, &revoked, state.number + 1, now, now + Duration::days(7))
            .unwrap();
        let c2 = process_cpu();
        der_len = der.len();
        let crl = PublishedCrl {
            number: state.number + 1,
            der,
            this_update: now.replace_nanosecond(0).unwrap(),
            next_update: now.replace_nanosecond(0).unwrap() + Duration::days(7),
        };
        assert!(
            s.publish_crl(DEFAULT_ISSUER, 0, state.number, state.revocations, &crl)
                .await
                .unwrap()
        );
        let c3 = process_cpu();
        query.push(c1 - c0);
        build.push(c2 - c1);
        store.push(c3 - c2);
    }
    let published = s.published_crl(DEFAULT_ISSUER, 0).await.unwrap().unwrap();
    println!(
        "RESULT crl_shard_25k_cpu_seconds_{backend}={:.3} (entries={entries} runs={runs} \
         median; wall {:.3} s; CRL {} bytes)",
        median(cpu),
        median(wall),
        der_len
    );
    if !server.is_empty() {
        println!(
            "RESULT crl_shard_25k_postgres_backend_cpu_seconds={:.3} (the database server's side, \
             10 ms ticks)",
            median(server)
        );
    }
    println!(
        "RESULT crl_shard_25k_phases_{backend}: query={:.3} build_and_sign={:.3} store={:.3} \
         (CPU seconds, medians)",
        median(query),
        median(build),
        median(store)
    );
    openssl_parses(&published.der, entries, dir.path());
    s.close().await;
    drop(pg);
}

/// The shard's entries as the storage read them before migration 0027.
const QUERY_BEFORE: &str = "SELECT serial, revoked_at, revocation_reason FROM certificates \
     WHERE revoked_at IS NOT NULL AND (crl_shard = $1 OR ($1 = 0 AND crl_shard IS NULL)) \
     AND not_after > $2 AND COALESCE(issuer, 'default') = $3 ORDER BY serial";
/// As `Storage::revoked_in_crl_shard` reads them now, from 0027's covering index.
const QUERY_AFTER: &str = "SELECT serial, revoked_at, revocation_reason FROM certificates \
     WHERE revoked_at IS NOT NULL AND COALESCE(issuer, 'default') = $3 \
     AND COALESCE(crl_shard, 0) = $1 AND not_after > $2 ORDER BY serial";

/// The entries query before and after, alternated on the same database: CPU of this process and
/// (PostgreSQL) of the backends.
async fn compare_queries(backend: &str, url: &str, entries: usize, runs: usize) {
    let mut conn = AnyConnection::connect(url).await.unwrap();
    let mut pg_cpu = match backend {
        "postgres" => Some(PgCpu::connect(url).await),
        _ => None,
    };
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let mut cpu = [Vec::new(), Vec::new()];
    for _ in 0..runs {
        for (which, query) in [QUERY_BEFORE, QUERY_AFTER].into_iter().enumerate() {
            let server_before = match pg_cpu.as_mut() {
                Some(p) => p.seconds().await,
                None => 0.0,
            };
            let c0 = process_cpu();
            let rows = sqlx::query(query)
                .bind(0i64)
                .bind(now)
                .bind(DEFAULT_ISSUER)
                .fetch_all(&mut conn)
                .await
                .unwrap();
            let mut spent = process_cpu() - c0;
            if let Some(p) = pg_cpu.as_mut() {
                spent += p.seconds().await - server_before;
            }
            assert_eq!(rows.len(), entries);
            cpu[which].push(spent);
        }
    }
    let [before, after] = cpu;
    println!(
        "RESULT crl_entries_query_cpu_seconds_{backend}: before_0027={:.3} after_0027={:.3} \
         (medians of {runs}, alternated; PostgreSQL: with its backends' CPU)",
        median(before),
        median(after)
    );
    conn.close().await.unwrap();
}

/// `openssl crl` parses the CRL and counts `entries` serials.
fn openssl_parses(der: &[u8], entries: usize, dir: &Path) {
    let path = dir.join("shard.crl");
    std::fs::write(&path, der).unwrap();
    match std::process::Command::new("openssl")
        .args(["crl", "-inform", "DER", "-noout", "-text", "-in"])
        .arg(&path)
        .output()
    {
        Ok(out) => {
            assert!(
                out.status.success(),
                "openssl crl: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            let listed = text.matches("Serial Number:").count();
            assert_eq!(listed, entries, "openssl lists every entry");
            println!("RESULT crl_openssl_parses entries={listed}");
        }
        Err(e) => println!("RESULT crl_openssl_parses skipped: openssl not runnable: {e}"),
    }
}

/// Fills `total` revocations spread over `shards` shards, then regenerates every shard `runs`
/// times: CPU for all of them, the largest shard's, and the CRLs' sizes.
async fn all_shards(backend: &str, total: usize, shards: u16, runs: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (pg, s) = storage(backend, dir.path()).await;
    let ca = ca(dir.path(), shards);
    s.ensure_crl_shards(DEFAULT_ISSUER, shards).await.unwrap();
    let filled = timed_fill(&s, &ca, total, shards, None, true, 0).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let settings = CrlSettings {
        shards,
        ..CrlSettings::default()
    };
    let (mut all, mut wall, mut largest) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (c0, w0) = (process_cpu(), Instant::now());
        let mut max = 0.0f64;
        for state in s.crl_shard_states().await.unwrap() {
            let c = process_cpu();
            assert!(
                publish_shard(&s, &ca, &clock, &settings, &state)
                    .await
                    .unwrap()
            );
            max = max.max(process_cpu() - c);
        }
        all.push(process_cpu() - c0);
        wall.push(w0.elapsed().as_secs_f64());
        largest.push(max);
    }
    let mut sizes = Vec::new();
    for shard in 0..shards {
        let crl = s
            .published_crl(DEFAULT_ISSUER, shard)
            .await
            .unwrap()
            .unwrap();
        sizes.push(crl.der.len());
    }
    println!(
        "RESULT crl_regenerate_all_{backend} revocations={total} shards={shards} \
         cpu_seconds={:.3} wall_seconds={:.3} largest_shard_cpu_seconds={:.3} \
         largest_crl_bytes={} total_crl_bytes={} (medians of {runs}; fill {:.0} s)",
        median(all),
        median(wall),
        median(largest),
        sizes.iter().max().unwrap(),
        sizes.iter().sum::<usize>(),
        filled.as_secs_f64()
    );
    s.close().await;
    drop(pg);
}
