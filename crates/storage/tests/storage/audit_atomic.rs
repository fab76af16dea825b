//! An audited change and its audit record commit together or not at all: with the audit log
//! refusing every insert (a trigger on the log, and on PostgreSQL on the pending records the
//! sealer chains), the certificate of a reserved order is not stored (on
//! PostgreSQL through the one-statement path), a key is not blocked and an account is not
//! deactivated, and the chain does not move.

use acme_core::status::AccountStatus;
use acme_core::status::OrderStatus;
use sqlx::AnyConnection;
use sqlx::Connection;
use storage::Storage;
use storage::model::Reserved;
use testkit::postgres::PgDatabase;

use crate::harness;
use crate::harness::Begun;
use crate::harness::ev;
use crate::harness::t0;

const REFUSE_SQLITE: &str = "CREATE TRIGGER audit_refused BEFORE INSERT ON audit_log \
     BEGIN SELECT RAISE(ABORT, 'the audit log refuses'); END;";

const REFUSE_POSTGRES: &str = "CREATE FUNCTION audit_refused() RETURNS trigger LANGUAGE plpgsql \
     AS $$ BEGIN RAISE EXCEPTION 'the audit log refuses'; END $$; \
     CREATE TRIGGER audit_refused BEFORE INSERT ON audit_log \
     FOR EACH ROW EXECUTE FUNCTION audit_refused(); \
     CREATE TRIGGER audit_pending_refused BEFORE INSERT ON audit_pending \
     FOR EACH ROW EXECUTE FUNCTION audit_refused();";

enum Db {
    Lite(tempfile::TempDir),
    Pg(PgDatabase),
}

impl Db {
    async fn open(&self) -> Storage {
        match self {
            Db::Lite(dir) => harness::sqlite_in(dir).await,
            Db::Pg(pg) => Storage::connect(pg.url()).await.unwrap(),
        }
    }

    /// Makes every insert into the audit log fail, on a connection of its own (SQLite's file is
    /// held exclusively by an open `Storage`, so the caller closes it first).
    async fn refuse_records(&self) {
        let (url, sql) = match self {
            Db::Lite(dir) => (
                format!("sqlite://{}", dir.path().join("certeasy.db").display()),
                REFUSE_SQLITE,
            ),
            Db::Pg(pg) => (pg.url().to_owned(), REFUSE_POSTGRES),
        };
        sqlx::any::install_default_drivers();
        let mut conn = AnyConnection::connect(&url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
    }
}

async fn no_change_without_its_record(db: Db) {
    let now = t0();
    let s = db.open().await;
    let account = harness::account(&s, now).await;
    let order = harness::ready_order(&s, account.id, &["a.example.com"], now).await;
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    let reserved = s
        .reserve_serial(
            order.id,
            harness::reservation_of(&harness::new_cert(7, now)),
            now,
        )
        .await
        .unwrap();
    assert!(matches!(reserved, Reserved::Reserved(_)), "{reserved:?}");
    let (head_before, _) = s.audit_head().await.unwrap();
    s.close().await;

    db.refuse_records().await;
    let s = db.open().await;
    let cert = harness::new_cert(7, now);
    let serial = cert.serial.clone();
    let stored = s.complete_order(order.id, cert, now, None, &ev()).await;
    assert!(stored.is_err(), "{stored:?}");
    let order = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(order.status, OrderStatus::Processing);
    assert_eq!(order.certificate_id, None);
    assert!(s.certificate_by_serial(&serial).await.unwrap().is_none());
    assert!(s.certificate_evidence(&serial).await.unwrap().is_empty());

    let key = [7_u8; 32];
    assert!(s.block_key(&key, "leaked", now, &ev()).await.is_err());
    assert!(!s.is_key_blocked(&key).await.unwrap());

    assert!(s.deactivate_account(account.id, now, &ev()).await.is_err());
    let account = s.account(account.id).await.unwrap().unwrap();
    assert_eq!(account.status, AccountStatus::Valid);

    assert_eq!(s.audit_head().await.unwrap().0, head_before);
    s.close().await;
}

#[tokio::test]
async fn sqlite_no_change_without_its_record() {
    no_change_without_its_record(Db::Lite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn postgres_no_change_without_its_record() {
    sqlx::any::install_default_drivers();
    no_change_without_its_record(Db::Pg(PgDatabase::create("certeasy_test_").unwrap())).await;
}
