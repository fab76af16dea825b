//! The operator's queries at a year's size (issue 31): times, through the storage API the admin
//! listener calls, the first page (100 rows, the CLI's default) of `certificates list
//! --expiring-within 7d --json`, of `--name`, `--account` and `--serial`, and a bulk revocation
//! of 10,000 certificates in the admin API's batches of 500 (`ra::operator::revoke_batch`: a
//! page of the selection, then `revoke_certificates`).
//!
//! Given a database filled beforehand (`certeasy-loadgen fill`): `BENCH_YEAR_SQLITE` (a data
//! directory holding `certeasy.db`, or the file) and/or `BENCH_YEAR_PG` (a URL). Migrations are
//! applied on open, as at start. The name, account and serial looked up are the newest
//! certificate's. Each query runs `BENCH_ROUNDS` (default 7) times; the first run (the coldest)
//! and the median are printed. The revocation changes the database: it takes unrevoked
//! certificates that expired between 60 and 30 days ago, oldest day first, so repeated runs
//! take other ones. Prints `RESULT name=value` lines.
//!
//! `cargo bench -p storage --bench admin_queries`
#![allow(clippy::expect_used, clippy::unwrap_used)] // A measurement that cannot set itself up stops loudly.

use std::time::Duration as StdDuration;
use std::time::Instant;

use acme_core::ids::CertificateId;
use acme_core::status::RevocationReason;
use storage::Storage;
use storage::audit::Actor;
use storage::audit::AuditEvent;
use storage::audit::AuditKind;
use storage::model::CertificateFilter;
use storage::model::Page;
use time::Duration;
use time::OffsetDateTime;

/// The CLI's page (`DEFAULT_LIST_LIMIT`).
const PAGE: u32 = 100;
/// The admin API's batch (`DEFAULT_REVOKE_BATCH`).
const BATCH: u32 = 500;
const TO_REVOKE: usize = 10_000;

fn ms(d: StdDuration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn time_query(
    s: &Storage,
    backend: &str,
    label: &str,
    filter: &CertificateFilter,
    rounds: usize,
) {
    let mut times = Vec::with_capacity(rounds);
    let mut rows = 0;
    for _ in 0..rounds {
        let started = Instant::now();
        let page = s
            .list_certificates(
                filter,
                Page {
                    before: None,
                    limit: PAGE,
                },
            )
            .await
            .unwrap();
        times.push(ms(started.elapsed()));
        rows = page.len();
    }
    println!("RESULT {backend}_admin_{label}_first_ms={:.2}", times[0]);
    println!(
        "RESULT {backend}_admin_{label}_median_ms={:.2}",
        median(times)
    );
    println!("RESULT {backend}_admin_{label}_rows={rows}");
}

async fn bench(s: &Storage, backend: &str) {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let now = OffsetDateTime::now_utc();
    let newest = s
        .list_certificates(
            &CertificateFilter::default(),
            Page {
                before: None,
                limit: 1,
            },
        )
        .await
        .unwrap()
        .pop()
        .expect("the database holds no certificate: fill it first");
    let filters = [
        (
            "expiring_within_7d",
            CertificateFilter {
                expires_from: Some(now),
                expires_until: Some(now + Duration::days(7)),
                ..Default::default()
            },
        ),
        (
            "name",
            CertificateFilter {
                name: newest.identifiers.first().cloned(),
                ..Default::default()
            },
        ),
        (
            "account",
            CertificateFilter {
                account: Some(newest.account_id),
                ..Default::default()
            },
        ),
        (
            "serial",
            CertificateFilter {
                serial: Some(newest.serial.clone()),
                ..Default::default()
            },
        ),
    ];
    for (label, filter) in &filters {
        time_query(s, backend, label, filter, rounds).await;
    }

    // Bulk revocation, as the admin listener runs it batch by batch.
    let mut revoked = 0_usize;
    let mut batch_ms = Vec::new();
    let started = Instant::now();
    let mut day = now - Duration::days(60);
    while revoked < TO_REVOKE && day < now - Duration::days(30) {
        let selection = CertificateFilter {
            expires_from: Some(day),
            expires_until: Some(day + Duration::days(1)),
            revoked: Some(false),
            ..Default::default()
        };
        let mut before: Option<CertificateId> = None;
        while revoked < TO_REVOKE {
            let t = Instant::now();
            let want = u32::try_from(TO_REVOKE - revoked).unwrap().min(BATCH);
            let rows = s
                .list_certificates(
                    &selection,
                    Page {
                        before,
                        limit: want,
                    },
                )
                .await
                .unwrap();
            let Some(last) = rows.last() else { break };
            before = Some(last.id);
            let ids: Vec<CertificateId> = rows.iter().map(|r| r.id).collect();
            let audits: Vec<AuditEvent> = rows
                .iter()
                .map(|r| {
                    let mut event = AuditEvent::new(
                        AuditKind::CertificateRevoked,
                        Actor::System,
                        "admin bench",
                    );
                    event.account = Some(r.account_id);
                    event.serial = Some(r.serial.clone());
                    event
                })
                .collect();
            revoked += s
                .revoke_certificates(
                    &ids,
                    RevocationReason::Superseded,
                    OffsetDateTime::now_utc(),
                    &audits,
                )
                .await
                .unwrap()
                .len();
            batch_ms.push(ms(t.elapsed()));
        }
        day += Duration::days(1);
    }
    let total = started.elapsed();
    println!("RESULT {backend}_admin_bulk_revoke_count={revoked}");
    println!(
        "RESULT {backend}_admin_bulk_revoke_seconds={:.2}",
        total.as_secs_f64()
    );
    println!(
        "RESULT {backend}_admin_bulk_revoke_batches={}",
        batch_ms.len()
    );
    if !batch_ms.is_empty() {
        let max = batch_ms.iter().copied().fold(0.0, f64::max);
        println!(
            "RESULT {backend}_admin_bulk_revoke_batch_median_ms={:.1}",
            median(batch_ms)
        );
        println!("RESULT {backend}_admin_bulk_revoke_batch_max_ms={max:.1}");
    }
}

#[tokio::main]
async fn main() {
    let mut any = false;
    if let Ok(path) = std::env::var("BENCH_YEAR_SQLITE") {
        let path = std::path::PathBuf::from(path);
        let file = if path.is_dir() {
            path.join("certeasy.db")
        } else {
            path
        };
        let started = Instant::now();
        let s = Storage::connect(&format!("sqlite://{}", file.display()))
            .await
            .unwrap();
        println!("RESULT sqlite_admin_open_ms={:.0}", ms(started.elapsed()));
        bench(&s, "sqlite").await;
        s.close().await;
        any = true;
    }
    if let Ok(url) = std::env::var("BENCH_YEAR_PG") {
        let started = Instant::now();
        let s = Storage::connect(&url).await.unwrap();
        println!("RESULT postgres_admin_open_ms={:.0}", ms(started.elapsed()));
        bench(&s, "postgres").await;
        s.close().await;
        any = true;
    }
    if !any {
        eprintln!("set BENCH_YEAR_SQLITE=<data dir or file> and/or BENCH_YEAR_PG=<url>");
        std::process::exit(2);
    }
}
