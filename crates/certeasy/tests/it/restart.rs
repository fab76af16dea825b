//! A crash in the middle of a validation or a finalization loses nothing: the restarted server
//! resumes the job once its lease expires.

use std::time::Duration;

use acme_jose::Algorithm;
use serde_json::Value;
use serde_json::json;
use testkit::poll::OnTheWay;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;

const LEASE: &str = "2s";

fn validation_section(env: &TestEnv, http_port: u16, timeout: &str) -> String {
    format!(
        "  dns-servers: [\"{}\"]\n  http-port: {http_port}\n  tls-alpn-port: {}\n  allow-loopback: true\n  timeout: {timeout}\n  job-lease: {LEASE}\n",
        env.dns.addr(),
        env.tls.port()
    )
}

async fn wait_for_status(raw: &Raw, url: &str, want: &str, env: &TestEnv) -> Value {
    let within = Duration::from_secs(30);
    raw.wait_for_status(url, want, OnTheWay::Any, within)
        .await
        .unwrap_or_else(|stuck| panic!("{stuck}; server log:\n{}", env.server_log()))
}

#[tokio::test]
async fn crash_during_validation_resumes_after_restart() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    // A target that accepts connections and never answers: the validation hangs.
    let tarpit = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tarpit_port = tarpit.local_addr().unwrap().port();
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::channel(8);
    let tarpit_task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = tarpit.accept().await {
            held.push(stream);
            let _ = seen_tx.try_send(());
        }
    });
    let section = validation_section(&env, tarpit_port, "60s");
    env.section("validation", &section);
    env.spawn_binary().await;

    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("resume");
    let order = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    let order_url = order.location();
    let ch = raw.http01_challenge(&order.body).await;
    let token = ch["token"].as_str().unwrap().to_owned();
    let r = raw
        .post(ch["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    assert_eq!(r.body["status"], "processing", "{r:?}");
    tokio::time::timeout(Duration::from_secs(20), seen_rx.recv())
        .await
        .expect("the validation connects")
        .unwrap();

    env.kill_binary();
    tarpit_task.abort();

    env.http.add(&token, &raw.key_authorization(&token));
    let section = validation_section(&env, env.http.port(), "5s");
    env.section("validation", &section);
    env.spawn_binary().await;
    let order = wait_for_status(&raw, &order_url, "ready", &env).await;
    assert!(order.get("error").is_none(), "{order}");
}

#[tokio::test]
async fn crash_during_finalization_resumes_after_restart() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let section = validation_section(&env, env.http.port(), "5s");
    env.section("validation", &section);
    env.spawn_binary().await;

    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("finalize");
    let order = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    let order_url = order.location();
    let ch = raw.http01_challenge(&order.body).await;
    let token = ch["token"].as_str().unwrap();
    env.http.add(token, &raw.key_authorization(token));
    raw.post(ch["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    wait_for_status(&raw, &order_url, "ready", &env).await;
    env.kill_binary();

    // Leave the database exactly as a crash while signing would: finalize accepted, the job
    // claimed by a worker that then died.
    let db_url = format!(
        "sqlite://{}",
        env.dir.path().join("data/certeasy.db").display()
    );
    let storage = storage::Storage::connect(&db_url).await.unwrap();
    let order_id: acme_core::ids::OrderId = order_url.rsplit('/').next().unwrap().parse().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.clone()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&key).unwrap();
    let now = time::OffsetDateTime::now_utc();
    storage
        .begin_finalize(order_id, csr.der(), None, now)
        .await
        .unwrap();
    let claimed = storage
        .claim_job(now, time::Duration::seconds(2), 3)
        .await
        .unwrap();
    assert!(claimed.is_some(), "the finalize job exists");
    drop(storage);

    env.spawn_binary().await;
    let order = wait_for_status(&raw, &order_url, "valid", &env).await;
    let cert = raw.post(order["certificate"].as_str().unwrap(), None).await;
    crate::certcheck::assert_chain(&cert.text, &env.root_pem(), &[&name]);
}

/// A finalize request accepted by the real server whose certificate is signed only after a
/// crash and a restart: the `certificate_issued` record still names the address the request
/// came from (the loopback address this test's client uses), since it is stored with the order,
/// not held by the process that answered. The finalization is held up by a CAA recheck (every
/// authorization is rechecked at issuance, `caa-recheck-after: 0s`) against a nameserver that
/// never answers, and the server is killed while its job waits for it; the restarted server,
/// with a nameserver that answers, resumes the job once its lease expires.
#[tokio::test]
async fn the_finalize_requests_address_survives_a_crash_before_issuance() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section("acme", "  caa-identities: [\"certeasy.test\"]\n");
    let answering = format!(
        "{}  caa-recheck-after: 0s\n",
        validation_section(&env, env.http.port(), "5s")
    );
    env.section("validation", &answering);
    env.spawn_binary().await;

    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("finalize-ip");
    let order = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    let order_url = order.location();
    let finalize_url = order.body["finalize"].as_str().unwrap().to_owned();
    let ch = raw.http01_challenge(&order.body).await;
    let token = ch["token"].as_str().unwrap();
    env.http.add(token, &raw.key_authorization(token));
    raw.post(ch["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    wait_for_status(&raw, &order_url, "ready", &env).await;
    env.kill_binary();

    // A nameserver that takes every query, over UDP and TCP, and never answers.
    let silent_tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent_tcp.local_addr().unwrap();
    let silent_udp = tokio::net::UdpSocket::bind(silent_addr).await.unwrap();
    let tarpit = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent_tcp.accept().await {
            held.push(stream);
        }
    });
    let silent = format!(
        "  dns-servers: [\"{silent_addr}\"]\n  http-port: {}\n  tls-alpn-port: {}\n  allow-loopback: true\n  timeout: 60s\n  job-lease: {LEASE}\n  caa-recheck-after: 0s\n",
        env.http.port(),
        env.tls.port()
    );
    env.section("validation", &silent);
    // At least a second after the validation, so that the recheck is due.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    env.spawn_binary().await;
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.clone()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&key).unwrap();
    let csr = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, csr.der());
    let accepted = raw.post(&finalize_url, Some(&json!({ "csr": csr }))).await;
    assert_eq!(
        accepted.body["status"],
        "processing",
        "{accepted:?}; server log:\n{}",
        env.server_log()
    );
    env.kill_binary();
    tarpit.abort();
    drop(silent_udp);

    env.section("validation", &answering);
    env.spawn_binary().await;
    let order = wait_for_status(&raw, &order_url, "valid", &env).await;
    let cert = raw.post(order["certificate"].as_str().unwrap(), None).await;
    crate::certcheck::assert_chain(&cert.text, &env.root_pem(), &[&name]);

    let listed = env
        .admin_cli()
        .run_async(
            &["audit", "list", "--json", "--kind", "certificate_issued"],
            Duration::from_secs(60),
        )
        .await
        .json();
    let records = listed.as_array().unwrap();
    assert_eq!(records.len(), 1, "{listed}");
    let record = &records[0];
    assert_eq!(record["names"], json!([name]), "{record}");
    assert_eq!(record["client_ip"], "127.0.0.1", "{record}");
    assert_eq!(record["actor"]["type"], "account", "{record}");
    assert_eq!(
        record["actor"]["id"],
        record["account"].to_string(),
        "{record}"
    );
}
