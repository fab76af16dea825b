//! CRLs are served from memory: a GET reads no database, and a CRL published later (by this
//! instance or another on the same database) is served once its number is seen to grow.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use acme_api::crl::CrlState;
use acme_api::crl::PublishedCrls;
use acme_core::clock::SystemClock;
use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::http::StatusCode;
use storage::Storage;
use storage::ca_state::DEFAULT_ISSUER;
use storage::crls::PublishedCrl;
use testkit::postgres::PgDatabase;
use time::OffsetDateTime;
use tower::ServiceExt;

fn crl(number: u64, der: &[u8]) -> PublishedCrl {
    let now = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
    PublishedCrl {
        number,
        der: der.to_vec(),
        this_update: now,
        next_update: now + time::Duration::days(7),
    }
}

fn router(crls: &Arc<PublishedCrls>) -> Router {
    acme_api::crl::router(CrlState::new(Arc::clone(crls), Arc::new(SystemClock)))
}

/// GET `/crl/<file>`: the status, the ETag and the body.
async fn get(router: &Router, file: &str) -> (StatusCode, Option<String>, Vec<u8>) {
    let response = router
        .clone()
        .oneshot(
            Request::get(format!("/crl/{file}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status();
    let etag = response
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap()
        .to_vec();
    (status, etag, body)
}

#[tokio::test]
async fn a_get_reads_no_database_and_a_new_number_is_served_after_a_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("certeasy.db").display());
    let storage = Storage::connect(&url).await.unwrap();
    storage.ensure_crl_shards(DEFAULT_ISSUER, 2).await.unwrap();
    let crls = Arc::new(PublishedCrls::default());
    let router = router(&crls);

    // Nothing loaded yet: not "no such CRL", but "come back in a second".
    let (status, _, _) = get(&router, "0.crl").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    assert!(
        storage
            .publish_crl(DEFAULT_ISSUER, 0, 0, 0, &crl(1, b"first"))
            .await
            .unwrap()
    );
    assert_eq!(crls.refresh(&storage).await.unwrap(), 1);
    assert_eq!(
        get(&router, "0.crl").await,
        (
            StatusCode::OK,
            Some("\"0-1\"".to_owned()),
            b"first".to_vec()
        )
    );
    assert_eq!(get(&router, "1.crl").await.0, StatusCode::NOT_FOUND);

    // A CRL published in the database is not seen by a GET until the next refresh: GETs are
    // answered from memory.
    assert!(
        storage
            .publish_crl(DEFAULT_ISSUER, 0, 1, 0, &crl(2, b"second"))
            .await
            .unwrap()
    );
    assert_eq!(get(&router, "0.crl").await.2, b"first");
    assert_eq!(crls.refresh(&storage).await.unwrap(), 1);
    assert_eq!(
        get(&router, "0.crl").await,
        (
            StatusCode::OK,
            Some("\"0-2\"".to_owned()),
            b"second".to_vec()
        )
    );
    // An unchanged number loads nothing.
    assert_eq!(crls.refresh(&storage).await.unwrap(), 0);

    // With the database closed, the CRLs are still served.
    storage.close().await;
    assert!(crls.refresh(&storage).await.is_err());
    assert_eq!(get(&router, "0.crl").await.2, b"second");
}

#[tokio::test]
async fn an_instance_serves_the_crl_another_instance_published() {
    let pg = PgDatabase::create("certeasy_crl_").unwrap();
    let publisher = Storage::connect(pg.url()).await.unwrap();
    let server = Storage::connect(pg.url()).await.unwrap();
    publisher
        .ensure_crl_shards(DEFAULT_ISSUER, 1)
        .await
        .unwrap();
    assert!(
        publisher
            .publish_crl(DEFAULT_ISSUER, 0, 0, 0, &crl(1, b"one"))
            .await
            .unwrap()
    );

    let crls = Arc::new(PublishedCrls::default());
    let router = router(&crls);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let refresher = {
        let crls = Arc::clone(&crls);
        tokio::spawn(async move {
            crls.keep_fresh(&server, async {
                let _ = stopped.await;
            })
            .await;
        })
    };
    let served = |want: &'static [u8]| {
        let router = router.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let (status, _, body) = get(&router, "0.crl").await;
                if status == StatusCode::OK && body == want {
                    return;
                }
                assert!(Instant::now() < deadline, "{want:?} never served");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    served(b"one").await;
    // The other instance publishes the next number; this one picks it up by itself.
    assert!(
        publisher
            .publish_crl(DEFAULT_ISSUER, 0, 1, 0, &crl(2, b"two"))
            .await
            .unwrap()
    );
    served(b"two").await;
    stop.send(()).unwrap();
    refresher.await.unwrap();
    publisher.close().await;
}
