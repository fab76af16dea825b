//! A CRL shard with thousands of entries, as the publisher builds it: `openssl crl` parses it and
//! lists every entry; each entry is the certificate's serial, revocation time and reason; the
//! CRL verifies under the issuing CA and names its shard's URL in a critical issuing
//! distribution point; a revoked certificate leaves the CRL once it has expired (RFC 5280
//! §3.3 lets a CRL drop it: an expired certificate is rejected on its validity alone), which is
//! what keeps 7-day certificates' CRLs small however many were revoked over the months. Real
//! parts: SQLite or PostgreSQL storage filled through its own writes, a generated CA with its
//! key in a file, the CRL publisher, the `openssl` command.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/crl_fill.rs"]
mod crl_fill;

use std::collections::BTreeMap;
use std::sync::Arc;

use acme_core::clock::FakeClock;
use acme_core::clock::SharedClock;
use acme_core::status::RevocationReason;
use common::storage_on;
use crl_fill::Fill;
use crl_fill::Revoked;
use issuance::Ca;
use issuance::CaSettings;
use issuance::CrlDistribution;
use storage::Backend;
use storage::ca_state::DEFAULT_ISSUER;
use time::Duration;
use time::OffsetDateTime;
use workers::crl::CrlSettings;
use x509_parser::prelude::FromDer;
use x509_parser::prelude::ParsedExtension;
use x509_parser::prelude::ReasonCode;
use x509_parser::revocation_list::CertificateRevocationList;

const SHARDS: u16 = 4;
/// The shard filled; the others stay empty.
const SHARD: u16 = 1;
/// Revoked certificates still valid when the CRL is built, and revoked ones that expire first.
const LIVE: usize = 3_000;
const EXPIRING: usize = 200;
const BASE_URL: &str = "http://crl.large.test/crl";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_crl_shard_parses_lists_its_entries_and_drops_expired_ones_sqlite() {
    a_large_crl_shard_parses_lists_its_entries_and_drops_expired_ones(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_crl_shard_parses_lists_its_entries_and_drops_expired_ones_postgres() {
    a_large_crl_shard_parses_lists_its_entries_and_drops_expired_ones(Backend::Postgres).await;
}

/// 3,000 revoked 7-day certificates and 200 revoked 1-day ones, all in one shard. A day after
/// they were revoked the shard lists the 3,200; two days after, the 3,000 still valid.
async fn a_large_crl_shard_parses_lists_its_entries_and_drops_expired_ones(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (_pg, storage) = storage_on(backend, dir.path(), "certeasy_crl_large_").await;
    let now = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
    let ca = Ca::load_or_create(&CaSettings::new(dir.path().join("ca")), now)
        .unwrap()
        .with_crl_distribution(CrlDistribution {
            base_url: BASE_URL.to_owned(),
            shards: SHARDS,
        });
    storage
        .ensure_crl_shards(DEFAULT_ISSUER, SHARDS)
        .await
        .unwrap();
    let fill = |count, not_after, first_serial| Fill {
        ca: &ca,
        count,
        shards: SHARDS,
        only_shard: Some(SHARD),
        now,
        not_after,
        first_serial,
        revoke: true,
    };
    let live = crl_fill::fill(&storage, &fill(LIVE, now + Duration::days(7), 0)).await;
    let expiring =
        crl_fill::fill(&storage, &fill(EXPIRING, now + Duration::days(1), 1 << 40)).await;
    assert!(live.iter().chain(&expiring).all(|r| r.shard == SHARD));

    let fake = FakeClock::new(now + Duration::hours(1));
    let clock: SharedClock = Arc::new(fake.clone());
    let settings = CrlSettings {
        shards: SHARDS,
        ..CrlSettings::default()
    };
    let published = workers::crl::publish_due(&storage, &ca, &clock, &settings)
        .await
        .unwrap();
    assert_eq!(published, usize::from(SHARDS), "every shard's first CRL");
    let all: Vec<Revoked> = live.iter().chain(&expiring).cloned().collect();
    check_shard(&storage, &ca, dir.path(), &all, now).await;
    for other in (0..SHARDS).filter(|s| *s != SHARD) {
        let crl = storage
            .published_crl(DEFAULT_ISSUER, other)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(openssl_serials(&crl.der, dir.path()), 0, "shard {other}");
    }

    // Past the 1-day certificates' notAfter, and past the update interval: the shard is rebuilt
    // on schedule without them.
    fake.advance(Duration::days(2));
    let published = workers::crl::publish_due(&storage, &ca, &clock, &settings)
        .await
        .unwrap();
    assert_eq!(published, usize::from(SHARDS), "due again");
    check_shard(&storage, &ca, dir.path(), &live, now).await;
}

/// The shard's published CRL lists exactly `expected`, as `openssl crl` and x509-parser read it.
async fn check_shard(
    storage: &storage::Storage,
    ca: &Ca,
    dir: &std::path::Path,
    expected: &[Revoked],
    revoked_at: OffsetDateTime,
) {
    let published = storage
        .published_crl(DEFAULT_ISSUER, SHARD)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(openssl_serials(&published.der, dir), expected.len());
    let text = openssl_text(&published.der, dir);
    assert!(
        text.contains(&format!("URI:{BASE_URL}/{SHARD}.crl")),
        "the issuing distribution point names the shard's URL"
    );

    let (rest, crl) = CertificateRevocationList::from_der(&published.der).unwrap();
    assert!(rest.is_empty());
    let (_, pem) = x509_parser::pem::parse_x509_pem(ca.chain_pem().as_bytes()).unwrap();
    crl.verify_signature(pem.parse_x509().unwrap().public_key())
        .unwrap();
    let idp = crl
        .extensions()
        .iter()
        .find(|ext| {
            matches!(
                ext.parsed_extension(),
                ParsedExtension::IssuingDistributionPoint(_)
            )
        })
        .expect("an issuing distribution point");
    assert!(idp.critical, "RFC 5280 §5.2.5: critical");

    let want: BTreeMap<Vec<u8>, RevocationReason> = expected
        .iter()
        .map(|r| (unsigned(r.serial.as_bytes()), r.reason))
        .collect();
    let mut got = BTreeMap::new();
    for entry in crl.iter_revoked_certificates() {
        assert_eq!(
            entry.revocation_date.timestamp(),
            revoked_at.unix_timestamp(),
            "revoked when the bulk revocation ran"
        );
        let reason = match entry.reason_code() {
            None => RevocationReason::Unspecified,
            Some((_, ReasonCode::KeyCompromise)) => RevocationReason::KeyCompromise,
            Some((_, ReasonCode::Superseded)) => RevocationReason::Superseded,
            Some((_, other)) => panic!("unexpected reason {other:?}"),
        };
        assert!(
            got.insert(unsigned(entry.raw_serial()), reason).is_none(),
            "a serial is listed once"
        );
    }
    assert_eq!(got, want);
    // Serials in ascending order, as the storage lists them.
    let serials: Vec<&[u8]> = crl
        .iter_revoked_certificates()
        .map(|e| e.raw_serial())
        .collect();
    assert!(serials.windows(2).all(|w| w[0] < w[1]));
}

fn openssl_text(der: &[u8], dir: &std::path::Path) -> String {
    let path = dir.join("shard.crl");
    std::fs::write(&path, der).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["crl", "-inform", "DER", "-noout", "-text", "-in"])
        .arg(&path)
        .output()
        .expect("openssl is installed (scripts/test.sh)");
    assert!(
        out.status.success(),
        "openssl crl refused it: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// How many revoked serials `openssl crl` lists.
fn openssl_serials(der: &[u8], dir: &std::path::Path) -> usize {
    openssl_text(der, dir).matches("Serial Number:").count()
}

/// A serial's magnitude: DER writes a leading zero before a first byte with its high bit set.
fn unsigned(bytes: &[u8]) -> Vec<u8> {
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    bytes[first..].to_vec()
}
