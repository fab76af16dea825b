//! Validation evidence (issue 29) through a real issuance: the certificate's evidence, read back
//! from the server's database, names the identifier, the method, the address the validator
//! reached and the CAA records that allowed issuance, and is kept for two years.

use std::time::Duration;

use acme_jose::Algorithm;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use serde_json::json;
use testkit::poll::OnTheWay;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;

const CA: &str = "certeasy.test";

#[tokio::test]
async fn issuance_keeps_the_evidence_sqlite() {
    issuance_keeps_the_evidence(Db::Sqlite).await;
}

#[tokio::test]
async fn issuance_keeps_the_evidence_postgres() {
    issuance_keeps_the_evidence(Db::Postgres).await;
}

async fn issuance_keeps_the_evidence(db: Db) {
    let mut env = TestEnv::new(db).await;
    env.section("acme", &format!("  caa-identities: [\"{CA}\"]\n"));
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let http_name = env.name("evidence-http");
    let dns_name = env.name("evidence-dns");
    env.dns.add_caa(&http_name, 0, "issue", CA);

    let r = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({ "identifiers": [
                {"type": "dns", "value": http_name},
                {"type": "dns", "value": dns_name},
            ]})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let order_url = r.location();
    for authz_url in r.body["authorizations"].as_array().unwrap() {
        let authz = raw.post(authz_url.as_str().unwrap(), None).await;
        let name = authz.body["identifier"]["value"].as_str().unwrap();
        let kind = if name == http_name {
            "http-01"
        } else {
            "dns-01"
        };
        let challenge = crate::raw::challenge(&authz.body, kind);
        let token = challenge["token"].as_str().unwrap();
        let key_authorization = raw.key_authorization(token);
        if kind == "http-01" {
            env.http.add(token, &key_authorization);
        } else {
            let digest =
                aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key_authorization.as_bytes());
            env.dns.add_txt(
                &format!("_acme-challenge.{name}"),
                &URL_SAFE_NO_PAD.encode(digest.as_ref()),
            );
        }
        let started = raw
            .post(challenge["url"].as_str().unwrap(), Some(&json!({})))
            .await;
        assert_eq!(started.status, 200, "{started:?}");
    }
    let order = wait_for(&raw, &order_url, "ready").await;
    let csr = {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec![http_name.clone(), dns_name.clone()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        URL_SAFE_NO_PAD.encode(params.serialize_request(&key).unwrap().der())
    };
    let r = raw
        .post(
            order["finalize"].as_str().unwrap(),
            Some(&json!({ "csr": csr })),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    wait_for(&raw, &order_url, "valid").await;

    let storage = storage::Storage::connect(&env.database_url())
        .await
        .unwrap();
    let order_id: acme_core::ids::OrderId = order_url.rsplit('/').next().unwrap().parse().unwrap();
    let now = time::OffsetDateTime::now_utc();
    let stored = storage.order(order_id, now).await.unwrap().unwrap();
    let certificate = storage
        .certificate(stored.certificate_id.unwrap())
        .await
        .unwrap()
        .unwrap();
    let records = storage
        .certificate_evidence(&certificate.serial)
        .await
        .unwrap();
    assert_eq!(records.len(), 2, "{records:?}");

    let http = records.iter().find(|r| r.identifier == http_name).unwrap();
    assert_eq!(http.method, "http-01");
    assert_eq!(
        http.addresses,
        [format!("127.0.0.1:{}", env.http.port())],
        "{http:?}"
    );
    assert!(
        http.observed
            .starts_with("key authorization matched at http://"),
        "{http:?}"
    );
    assert!(http.observed.contains("(HTTP 200)"), "{http:?}");
    assert_eq!(
        http.caa,
        [format!("{http_name}. CAA 0 issue \"{CA}\"")],
        "{http:?}"
    );

    let dns = records.iter().find(|r| r.identifier == dns_name).unwrap();
    assert_eq!(dns.method, "dns-01");
    assert_eq!(
        dns.addresses,
        [format!("resolver {}", env.dns.addr())],
        "{dns:?}"
    );
    assert!(
        dns.observed.contains("TXT record with the expected digest"),
        "{dns:?}"
    );
    assert!(
        dns.caa[0].starts_with("no CAA records (climbed to the root"),
        "{dns:?}"
    );

    for record in &records {
        assert!(
            (now - record.validated_at).whole_minutes() < 5,
            "{record:?}"
        );
        let kept = record.kept_until - record.validated_at;
        assert!(kept >= time::Duration::days(729), "{record:?}");
        assert!(record.kept_until >= certificate.not_after, "{record:?}");
    }
    assert_eq!(storage::evidence::digest(&records).len(), 64);
    storage.close().await;
}

async fn wait_for(raw: &Raw, url: &str, want: &str) -> Value {
    raw.wait_for_status(
        url,
        want,
        OnTheWay::Not(&["invalid", "valid"]),
        Duration::from_secs(20),
    )
    .await
    .unwrap_or_else(|stuck| panic!("{stuck}"))
}
