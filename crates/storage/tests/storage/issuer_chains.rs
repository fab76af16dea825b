//! Issuer chains stored once (migration 0012): a certificate row keeps its leaf and the id of
//! its chain, and its download is assembled from both; rows written before keep their whole
//! chain and are served unchanged.

use acme_core::ids::Serial;
use sqlx::AnyConnection;
use sqlx::Connection;
use storage::Storage;
use storage::model::Certificate;
use storage::model::NewCertificate;
use storage::model::ReservedAtOnce;

use crate::harness;
use crate::harness::Begun;
use crate::harness::ev;
use crate::harness::t0;

const OTHER_CHAIN: &str =
    "-----BEGIN CERTIFICATE-----\nb3RoZXIgaW50ZXJtZWRpYXRl\n-----END CERTIFICATE-----\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_certificates_of_one_ca_share_one_stored_chain() {
    sqlx::any::install_default_drivers();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("certeasy.db").display());
    let s = Storage::connect(&url).await.unwrap();
    certificates_of_one_ca_share_one_stored_chain(s, url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_certificates_of_one_ca_share_one_stored_chain() {
    harness::postgres_at(certificates_of_one_ca_share_one_stored_chain).await;
}

/// The download is the leaf's PEM followed by the chain it was stored with, on every path that
/// stores or reads a certificate.
fn assert_download(cert: &Certificate, chain: &str) {
    let leaf = cert
        .chain_pem
        .strip_suffix(chain)
        .unwrap_or_else(|| panic!("{:?} does not end with the chain", cert.chain_pem));
    let parsed = pem::parse(leaf).unwrap();
    assert_eq!(parsed.tag(), "CERTIFICATE");
    assert_eq!(parsed.contents(), cert.der.as_slice());
    assert!(leaf.lines().all(|l| l.len() <= 64), "{leaf}");
}

async fn certificates_of_one_ca_share_one_stored_chain(s: Storage, url: String) {
    let now = t0();
    let account = harness::account(&s, now).await;
    let shared_chain = harness::new_cert(0, now).issuer_chain_pem;

    // Three through finalize-reserve-complete, one at once, one under another CA.
    let mut issued = Vec::new();
    for (i, name) in ["a.example", "b.example", "c.example"].iter().enumerate() {
        let serial = u8::try_from(i + 1).unwrap();
        issued.push((
            harness::issue(&s, account.id, &[name], serial, now).await,
            shared_chain.clone(),
        ));
    }
    let order = harness::ready_order(&s, account.id, &["d.example"], now).await;
    let cert = harness::new_cert(4, now);
    let at_once = s
        .reserve_ready_order(
            order.id,
            b"csr",
            None,
            harness::reservation_of(&cert),
            now,
            time::Duration::seconds(60),
        )
        .await
        .unwrap();
    let ReservedAtOnce::Reserved { job, .. } = at_once else {
        panic!("expected a reservation, got {at_once:?}");
    };
    let certificate = s
        .complete_order(order.id, cert, now, Some(&job), &ev())
        .await
        .unwrap();
    issued.push((certificate, shared_chain.clone()));
    let order = harness::ready_order(&s, account.id, &["e.example"], now).await;
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    let other = NewCertificate {
        issuer_chain_pem: OTHER_CHAIN.to_owned(),
        ..harness::new_cert(5, now)
    };
    issued.push((
        harness::complete(&s, order.id, other, now, None).await,
        OTHER_CHAIN.to_owned(),
    ));

    for (cert, chain) in &issued {
        assert_download(cert, chain);
        assert_eq!(s.certificate(cert.id).await.unwrap().as_ref(), Some(cert));
        assert_eq!(
            s.certificate_by_serial(&cert.serial)
                .await
                .unwrap()
                .as_ref(),
            Some(cert)
        );
    }
    s.close().await;

    let mut conn = AnyConnection::connect(&url).await.unwrap();
    let chains: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM issuer_chains")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(chains, 2, "one row per distinct chain");
    let with_text: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM certificates WHERE chain_pem <> '' OR issuer_chain_id IS NULL",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(with_text, 0, "no certificate row repeats its chain");
    conn.close().await.unwrap();
}

/// A certificate stored before migration 0012, with its whole chain in its row, is served as it
/// was stored once the migration has run.
#[tokio::test]
async fn sqlite_a_certificate_stored_before_the_migration_keeps_its_chain() {
    let dir = tempfile::tempdir().unwrap();
    let (url, mut conn) = harness::sqlite_migrated_before(dir.path(), "0012").await;
    let whole_chain = "-----BEGIN CERTIFICATE-----\nbGVhZg==\n-----END CERTIFICATE-----\n\
                       -----BEGIN CERTIFICATE-----\naW50ZXJtZWRpYXRl\n-----END CERTIFICATE-----\n";
    for statement in [
        "INSERT INTO accounts (id, thumbprint, jwk, status, created_at) \
         VALUES (1, 'tp', '{}', 'valid', 1700000000)"
            .to_owned(),
        "INSERT INTO orders (id, account_id, status, identifiers, set_hash, expires_at, \
         created_at, updated_at) \
         VALUES (7, 1, 'valid', 'dns:a.example', 'h', 1800000000, 1700000000, 1700000000)"
            .to_owned(),
        format!(
            "INSERT INTO certificates (id, account_id, order_id, serial, der, chain_pem, set_hash, \
             not_before, not_after, issued_at) \
             VALUES (9, 1, 7, '00aa', x'6c656166', '{whole_chain}', 'h', 1700000000, 1800000000, 1700000000)"
        ),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    conn.close().await.unwrap();

    let s = Storage::connect(&url).await.unwrap();
    let by_serial = s
        .certificate_by_serial(&Serial::from_hex("00aa").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_serial.chain_pem, whole_chain);
    assert_eq!(by_serial.der, b"leaf");
    let by_id = s.certificate(by_serial.id).await.unwrap().unwrap();
    assert_eq!(by_id, by_serial);
    // New certificates are stored the new way beside it.
    let now = t0();
    let account = harness::account(&s, now).await;
    let cert = harness::issue(&s, account.id, &["b.example"], 1, now).await;
    assert_download(&cert, &harness::new_cert(1, now).issuer_chain_pem);
    s.close().await;
}
