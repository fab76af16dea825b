//! `certeasy admin audit list|show|export|verify` against a running server, on SQLite and on
//! PostgreSQL: the real CLI binary, through the admin API. Records are appended through the
//! server's own storage (known content, whatever else the server records), the listings and the
//! export are checked, then the database is tampered with (sqlite3 on the stopped server's
//! file, psql beside the running one) and `verify` must fail naming the record, through the
//! server and offline (`certeasy audit verify --config`).

use std::net::IpAddr;
use std::process::Command as StdCommand;

use acme_core::ids::AccountId;
use acme_core::ids::Serial;
use serde_json::Value;
use serde_json::json;
use storage::audit::Actor;
use storage::audit::AuditEvent;
use storage::audit::AuditKind;
use time::OffsetDateTime;

use crate::harness::Db;
use crate::harness::TestEnv;

/// An upper bound for one CLI run; each takes well under a second.
const CLI_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs the CLI without blocking the runtime: the server under test runs on it.
async fn admin(env: &TestEnv, args: &[&str]) -> testkit::admin_cli::CliOutput {
    env.admin_cli().run_async(args, CLI_TIMEOUT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_cli_sqlite() {
    audit_cli(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_cli_postgres() {
    audit_cli(Db::Postgres).await;
}

/// Five known records: (seq, reason) of each, oldest first.
async fn append_known(env: &TestEnv) -> Vec<(i64, String)> {
    let storage = env.server.as_ref().unwrap().storage.clone();
    let now = OffsetDateTime::now_utc();
    let mut appended = Vec::new();
    for i in 0..5_i64 {
        let reason = format!("audit-cli test record {i}");
        let mut event = if i % 2 == 0 {
            let mut e = AuditEvent::new(
                AuditKind::CertificateRevoked,
                Actor::Admin {
                    token: storage::audit::admin_token_identity(&env.admin_token()),
                    operator: Some("alice".into()),
                },
                &reason,
            );
            e.serial = Serial::from_hex(&format!("0a0b{i:02x}"));
            e.account = Some(AccountId(900 + i));
            e
        } else {
            AuditEvent::new(
                AuditKind::AdminAction,
                Actor::Operator("bob".into()),
                &reason,
            )
        };
        event.names = vec![format!("host{i}.audit.example")];
        event.client_ip = Some("127.0.0.1".parse::<IpAddr>().unwrap());
        event.detail = json!({ "i": i });
        let seq = storage.append_audit(&event, now).await.unwrap();
        appended.push((seq, reason));
    }
    appended
}

fn records(list: &Value) -> Vec<&Value> {
    list.as_array().unwrap().iter().collect()
}

/// Runs `sql` against the server's database: psql beside a running PostgreSQL server; on
/// SQLite the server is stopped first (it holds its file exclusively) and started again.
/// `certeasy admin audit verify` after a tampering: it fails, naming `seq` as where the chain
/// breaks. Returns its answer for what else the caller expects of it.
async fn verify_breaks_at(env: &TestEnv, seq: i64) -> testkit::admin_cli::CliOutput {
    let broken = admin(env, &["audit", "verify"]).await;
    assert!(!broken.ok, "{broken:?}");
    assert!(
        broken
            .stdout
            .contains(&format!("audit chain BROKEN at record {seq}:")),
        "{}",
        broken.stdout
    );
    broken
}

async fn tamper(env: &mut TestEnv, db: Db, sql: &str) {
    let out = match db {
        Db::Postgres => StdCommand::new("psql")
            .arg(env.database_url())
            .args(["-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .expect("psql must be installed (scripts/test.sh installs it)"),
        Db::Sqlite => {
            env.server.take().unwrap().shutdown().await;
            let file = env.dir.path().join("data/certeasy.db");
            let out = StdCommand::new("sqlite3")
                .arg(&file)
                .arg(sql)
                .output()
                .expect("sqlite3 must be installed (scripts/test.sh installs it)");
            env.start().await;
            out
        }
    };
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn audit_cli(db: Db) {
    let mut env = TestEnv::new(db).await;
    env.start().await;
    // Something real first: an ACME account (recorded when the server records account
    // creation), then the known records.
    let _account = env.account().await;
    let known = append_known(&env).await;
    let (first, last) = (known[0].0, known[4].0);

    // list --json: newest first, every field.
    let list = admin(&env, &["audit", "list", "--json"]).await.json();
    let listed = records(&list);
    assert_eq!(listed[0]["seq"], last);
    assert_eq!(listed[0]["reason"], known[4].1);
    assert_eq!(listed[0]["kind"], "certificate_revoked");
    assert_eq!(listed[0]["actor"]["type"], "admin");
    assert_eq!(listed[0]["actor"]["operator"], "alice");
    assert!(
        listed[0]["actor"]["id"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(listed[0]["serial"], "0a0b04");
    assert_eq!(listed[0]["account"], 904);
    assert_eq!(listed[0]["names"], json!(["host4.audit.example"]));
    assert_eq!(listed[0]["client_ip"], "127.0.0.1");
    assert_eq!(listed[0]["detail"], json!({ "i": 4 }));
    assert_eq!(listed[0]["prev_hash"], listed[1]["hash"], "chained");

    // Filters: kind (either spelling), name, serial, account, a relative --since.
    let seqs = |v: &Value| -> Vec<i64> {
        records(v)
            .iter()
            .map(|r| r["seq"].as_i64().unwrap())
            .collect()
    };
    let by_kind = admin(&env, &["audit", "list", "--json", "--kind", "admin-action"])
        .await
        .json();
    let admin_actions: Vec<i64> = seqs(&by_kind)
        .into_iter()
        .filter(|s| known.iter().any(|(k, _)| k == s))
        .collect();
    assert_eq!(admin_actions, vec![known[3].0, known[1].0]);
    let by_name = admin(
        &env,
        &["audit", "list", "--json", "--name", "HOST2.audit.example"],
    )
    .await
    .json();
    assert_eq!(seqs(&by_name), vec![known[2].0]);
    let by_serial = admin(&env, &["audit", "list", "--json", "--serial", "0A:0B:00"])
        .await
        .json();
    assert_eq!(seqs(&by_serial), vec![first]);
    let by_account = admin(&env, &["audit", "list", "--json", "--account", "902"])
        .await
        .json();
    assert_eq!(seqs(&by_account), vec![known[2].0]);
    let recent = admin(&env, &["audit", "list", "--json", "--since", "1h"])
        .await
        .json();
    assert!(seqs(&recent).contains(&first));
    let future = admin(
        &env,
        &["audit", "list", "--json", "--since", "2999-01-01T00:00:00Z"],
    )
    .await
    .json();
    assert!(records(&future).is_empty());
    let bad = admin(&env, &["audit", "list", "--kind", "nonsense"]).await;
    assert!(
        !bad.ok && bad.stderr.contains("unknown audit record kind"),
        "{bad:?}"
    );

    // The table and show.
    let table = admin(&env, &["audit", "list", "--limit", "2"]).await;
    assert!(table.ok, "{table:?}");
    assert!(table.stdout.contains(&known[4].1), "{}", table.stdout);
    assert!(
        table.stdout.contains("(more: add --before"),
        "{}",
        table.stdout
    );
    let show = admin(&env, &["audit", "show", &known[2].0.to_string()]).await;
    assert!(show.ok, "{show:?}");
    assert!(show.stdout.contains(&known[2].1), "{}", show.stdout);
    let missing = admin(&env, &["audit", "show", "999999"]).await;
    assert!(
        !missing.ok && missing.stderr.contains("does not exist"),
        "{missing:?}"
    );
    let by_serial = admin(&env, &["audit", "show", "--serial", "0a0b02"]).await;
    assert!(by_serial.ok, "{by_serial:?}");
    assert!(
        by_serial.stdout.contains(&known[2].1),
        "{}",
        by_serial.stdout
    );
    assert!(
        by_serial.stdout.contains("validation evidence"),
        "{}",
        by_serial.stdout
    );

    // export: JSON lines, oldest first, every record of the chain, fields in a fixed order.
    let file = env.dir.path().join("audit.jsonl");
    let export = admin(&env, &["audit", "export", "--out", file.to_str().unwrap()]).await;
    assert!(export.ok, "{export:?}");
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.len() as i64 >= last,
        "every record from 1 to the head"
    );
    for (i, line) in lines.iter().enumerate() {
        assert!(line.starts_with("{\"seq\":"), "{line}");
        let doc: Value = serde_json::from_str(line).unwrap();
        assert_eq!(doc["seq"], i as i64 + 1);
    }
    let keys: Vec<String> = {
        let doc: serde_json::Map<String, Value> =
            serde_json::from_str(lines[first as usize - 1]).unwrap();
        doc.keys().cloned().collect()
    };
    assert_eq!(
        keys.len(),
        12,
        "seq, at, kind, actor, client_ip, account, serial, names, reason, detail, prev_hash, hash"
    );
    // A continuous feed resumes after the last seq shipped: exactly the lines after it.
    let shipped = lines.len() - 2;
    let resumed = admin(
        &env,
        &["audit", "export", "--after-seq", &shipped.to_string()],
    )
    .await;
    assert!(resumed.ok, "{resumed:?}");
    let rest: Vec<i64> = resumed
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert!(rest.len() >= 2, "{rest:?}");
    assert_eq!(&rest[..2], &[shipped as i64 + 1, shipped as i64 + 2]);
    let filtered = admin(&env, &["audit", "export", "--kind", "certificate_revoked"]).await;
    assert!(filtered.ok, "{filtered:?}");
    let revoked: Vec<Value> = filtered
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ours: Vec<i64> = revoked
        .iter()
        .map(|r| r["seq"].as_i64().unwrap())
        .filter(|s| known.iter().any(|(k, _)| k == s))
        .collect();
    assert_eq!(ours, vec![known[0].0, known[2].0, known[4].0]);

    // verify: clean, with the head printed; --expect-head of the head passes, of nonsense fails.
    let verify = admin(&env, &["audit", "verify"]).await;
    assert!(verify.ok, "{verify:?}");
    assert!(
        verify.stdout.contains("audit chain intact"),
        "{}",
        verify.stdout
    );
    let head_hash = listed[0]["hash"].as_str().unwrap().to_owned();
    assert!(
        verify.stdout.contains(&format!("head seq:  {last}")),
        "{}",
        verify.stdout
    );
    assert!(verify.stdout.contains(&head_hash), "{}", verify.stdout);
    let expected = admin(&env, &["audit", "verify", "--expect-head", &head_hash]).await;
    assert!(expected.ok, "{expected:?}");
    let unknown = admin(
        &env,
        &["audit", "verify", "--expect-head", &"ab".repeat(32)],
    )
    .await;
    assert!(!unknown.ok, "{unknown:?}");
    assert!(unknown.stdout.contains("NOT FOUND"), "{}", unknown.stdout);

    // An edited record is named, with exit code 1.
    let middle = known[2].0;
    tamper(
        &mut env,
        db,
        &format!("UPDATE audit_log SET reason = 'nothing happened' WHERE seq = {middle}"),
    )
    .await;
    verify_breaks_at(&env, middle).await;
    let json = admin(&env, &["audit", "verify", "--json"]).await;
    assert!(!json.ok);
    let doc: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["first_broken"]["seq"], middle);

    // Put the reason back: clean again; then delete a record: named.
    tamper(
        &mut env,
        db,
        &format!(
            "UPDATE audit_log SET reason = '{}' WHERE seq = {middle}",
            known[2].1
        ),
    )
    .await;
    assert!(admin(&env, &["audit", "verify"]).await.ok);
    let deleted = known[1].0;
    tamper(
        &mut env,
        db,
        &format!("DELETE FROM audit_log WHERE seq = {deleted}"),
    )
    .await;
    let broken = verify_breaks_at(&env, deleted).await;
    assert!(broken.stdout.contains("missing"), "{}", broken.stdout);

    // The same finding offline, on the database itself (a running server holds its SQLite
    // file, so that one is stopped first).
    if db == Db::Sqlite {
        env.server.take().unwrap().shutdown().await;
    }
    let offline = tokio::process::Command::new(env!("CARGO_BIN_EXE_certeasy"))
        .args(["audit", "verify", "--config"])
        .arg(&env.config_path)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&offline.stdout);
    assert_eq!(offline.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("audit chain BROKEN at record {deleted}:")),
        "{stdout}"
    );
    assert!(stdout.contains("head hash: "), "{stdout}");
}

/// A revocation signed with the certificate's own key (RFC 8555 §7.6, no account) is recorded
/// as done by that key's holder: actor type `certificate_key`, named by the key's RFC 7638
/// thumbprint, from the loopback address the request came from; the certificate's account is
/// still the record's account. Through the real server and the CLI's JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_by_the_certificates_key_names_the_key() {
    use acme_jose::Algorithm;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    use crate::raw::Raw;

    let mut env = TestEnv::new(Db::Sqlite).await;
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("revoked-by-key");
    let order = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    let order_url = order.location();
    let challenge = raw.http01_challenge(&order.body).await;
    let token = challenge["token"].as_str().unwrap();
    env.http.add(token, &raw.key_authorization(token));
    raw.post(challenge["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    let within = std::time::Duration::from_secs(30);
    let ready = raw
        .wait_for_status(&order_url, "ready", testkit::poll::OnTheWay::Any, within)
        .await
        .unwrap();
    // The certificate's key, both as rcgen signs the CSR with it and as a JWS signer.
    let cert_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.clone()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = URL_SAFE_NO_PAD.encode(params.serialize_request(&cert_key).unwrap().der());
    raw.post(
        ready["finalize"].as_str().unwrap(),
        Some(&json!({ "csr": csr })),
    )
    .await;
    let valid = raw
        .wait_for_status(&order_url, "valid", testkit::poll::OnTheWay::Any, within)
        .await
        .unwrap();
    let chain = raw.post(valid["certificate"].as_str().unwrap(), None).await;
    let der = crate::certcheck::pem_ders(&chain.text).remove(0);

    let holder = Raw {
        http: raw.http.clone(),
        base: raw.base.clone(),
        key: acme_jose::sign::SigningKey::from_pkcs8(Algorithm::Es256, &cert_key.serialize_der())
            .unwrap(),
        kid: None,
    };
    let thumbprint = holder.key.public_jwk().thumbprint();
    let revoked = holder
        .post(
            &raw.url("/acme/revoke-cert"),
            Some(&json!({ "certificate": URL_SAFE_NO_PAD.encode(&der), "reason": 1 })),
        )
        .await;
    assert_eq!(revoked.status, 200, "{revoked:?}");

    let list = admin(
        &env,
        &["audit", "list", "--json", "--kind", "certificate_revoked"],
    )
    .await
    .json();
    let listed = records(&list);
    assert_eq!(listed.len(), 1, "{list}");
    let record = listed[0];
    assert_eq!(record["actor"]["type"], "certificate_key", "{record}");
    assert_eq!(record["actor"]["id"], thumbprint.as_str(), "{record}");
    assert!(record["actor"].get("operator").is_none(), "{record}");
    assert_eq!(record["client_ip"], "127.0.0.1", "{record}");
    assert!(record["account"].as_i64().is_some(), "{record}");
    assert_eq!(
        record["detail"]["certificate_key_thumbprint"],
        thumbprint.as_str(),
        "{record}"
    );
    let issued = admin(
        &env,
        &["audit", "list", "--json", "--kind", "certificate_issued"],
    )
    .await
    .json();
    assert_eq!(records(&issued)[0]["account"], record["account"]);
    assert_eq!(records(&issued)[0]["client_ip"], "127.0.0.1");
    // The table names the actor too.
    let seq = record["seq"].as_i64().unwrap().to_string();
    let show = admin(&env, &["audit", "show", &seq]).await;
    assert!(show.ok, "{show:?}");
    assert!(
        show.stdout
            .contains(&format!("actor:      certificate_key {thumbprint}")),
        "{}",
        show.stdout
    );
    assert!(admin(&env, &["audit", "verify"]).await.ok);
}
