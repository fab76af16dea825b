//! Weak and blocked keys over HTTP (RFC 8555 §7.3, §7.3.5, §7.4): a key blocked in the database
//! (`certeasy admin keys block`, named by hash or by a PEM file) or by `acme.blocked-keys-file`,
//! or one that Fermat's method factors, gets `badPublicKey` at new-account and key change and
//! `badCSR` at finalize; `keys list`, `keys unblock` and a reload of the file change that.

use acme_jose::Algorithm;
use acme_jose::SpkiHash;
use acme_jose::sign::SigningKey;
use base64::Engine;
use serde_json::Value;
use serde_json::json;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::admin;
use crate::raw::Raw;
use crate::raw::Reply;
use crate::rfc_answers::assert_problem;
use crate::rfc_answers::csr;
use crate::rfc_answers::ready_order;
use crate::rfc_answers::wait_for_status;

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../../testdata/goodkey/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn pem_der(text: &str) -> Vec<u8> {
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap()
}

/// The RSA 2048 key whose primes are too close (Fermat factors it in one round).
fn close_primes_key() -> SigningKey {
    SigningKey::from_pkcs8(
        Algorithm::Rs256,
        &pem_der(&fixture("rsa-close-primes.key.pem")),
    )
    .unwrap()
}

/// A hand-driven client signing with `key`.
fn raw_with(env: &TestEnv, key: SigningKey) -> Raw {
    let mut raw = Raw::new(env, Algorithm::Es256);
    raw.key = key;
    raw
}

/// A copy of `key` (the signing key type is not `Clone`).
fn copy(key: &SigningKey) -> SigningKey {
    SigningKey::from_pkcs8(key.algorithm(), &key.to_pkcs8_der().unwrap()).unwrap()
}

async fn new_account(raw: &Raw) -> Reply {
    raw.post(
        &raw.url("/acme/new-account"),
        Some(&json!({"termsOfServiceAgreed": true})),
    )
    .await
}

#[track_caller]
fn assert_detail(r: &Reply, contains: &str, what: &str) {
    let detail = r.body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(contains), "{what}: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_and_weak_keys_are_refused_sqlite() {
    blocked_and_weak_keys_are_refused(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_and_weak_keys_are_refused_postgres() {
    blocked_and_weak_keys_are_refused(Db::Postgres).await;
}

async fn blocked_and_weak_keys_are_refused(db: Db) {
    let mut env = TestEnv::new(db).await;
    let file_blocked = SigningKey::generate(Algorithm::Es256).unwrap();
    let file_path = env.dir.path().join("blocked-keys.txt");
    std::fs::write(
        &file_path,
        format!(
            "# keys no account may hold\n\n{}  # from the file\n",
            SpkiHash::of(&file_blocked.public_jwk())
        ),
    )
    .unwrap();
    env.section(
        "acme",
        &format!("  blocked-keys-file: \"{}\"\n", file_path.display()),
    );
    env.start().await;

    // Blocked in the database by its hash, with a reason; a second block is refused.
    let db_blocked = SigningKey::generate(Algorithm::Es256).unwrap();
    let db_hash = SpkiHash::of(&db_blocked.public_jwk()).to_hex();
    let (ok, out) = admin(
        &env,
        &[
            "keys",
            "block",
            &db_hash,
            "--reason",
            "reported compromised",
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains(&format!("blocked {db_hash}")), "{out}");
    let (ok, out) = admin(&env, &["keys", "block", &db_hash]);
    assert!(!ok && out.contains("already blocked"), "{out}");
    let (ok, out) = admin(&env, &["keys", "block", "not-a-key"]);
    assert!(!ok && out.contains("not a SHA-256 hash"), "{out}");

    let (ok, out) = admin(&env, &["keys", "list", "--json"]);
    assert!(ok, "{out}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 2, "{out}");
    assert_eq!(listed[0]["spki_sha256"], db_hash.as_str());
    assert_eq!(listed[0]["source"], "database");
    assert_eq!(listed[0]["reason"], "reported compromised");
    assert!(listed[0]["blocked_at"].is_string(), "{out}");
    assert_eq!(
        listed[1]["spki_sha256"],
        SpkiHash::of(&file_blocked.public_jwk()).to_hex().as_str()
    );
    assert_eq!(listed[1]["source"], "file");

    // new-account with either blocked key, or with a weak one: badPublicKey, no account.
    for (key, what, because) in [
        (
            copy(&db_blocked),
            "a key blocked in the database",
            "blocked by the operator",
        ),
        (
            copy(&file_blocked),
            "a key blocked by the file",
            "blocked by the operator",
        ),
        (close_primes_key(), "RSA with close primes", "Fermat"),
    ] {
        let raw = raw_with(&env, key);
        let r = new_account(&raw).await;
        assert_problem(&r, 400, "badPublicKey", what);
        assert_detail(&r, because, what);
        let existing = raw
            .post(
                &raw.url("/acme/new-account"),
                Some(&json!({"onlyReturnExisting": true})),
            )
            .await;
        assert_problem(&existing, 400, "badPublicKey", what);
    }

    // Key change to a blocked key: badPublicKey, and the account keeps its key.
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let inner = raw.key_change_inner(&db_blocked);
    let r = raw.post(&raw.url("/acme/key-change"), Some(&inner)).await;
    assert_problem(&r, 400, "badPublicKey", "key change to a blocked key");
    assert_detail(&r, "blocked by the operator", "key change");
    let inner = raw.key_change_inner(&close_primes_key());
    let r = raw.post(&raw.url("/acme/key-change"), Some(&inner)).await;
    assert_problem(&r, 400, "badPublicKey", "key change to a weak key");
    assert_eq!(
        raw.post(raw.kid.as_deref().unwrap(), None).await.status,
        200,
        "the old key still signs"
    );

    // Finalize with a CSR whose key is blocked (named by a PEM public key file) or weak: badCSR,
    // and the order stays ready.
    let name = env.name("weakcsr");
    let (order_url, order) = ready_order(&env, &raw, &name).await;
    let finalize = order["finalize"].as_str().unwrap().to_owned();
    let csr_key = rcgen::KeyPair::generate().unwrap();
    let csr_key_path = env.dir.path().join("csr-key.pub.pem");
    std::fs::write(&csr_key_path, csr_key.public_key_pem()).unwrap();
    let path = csr_key_path.to_str().unwrap();
    let (ok, out) = admin(&env, &["keys", "block", path, "--json"]);
    assert!(ok, "{out}");
    let close_rcgen = rcgen::KeyPair::from_pem(&fixture("rsa-close-primes.key.pem")).unwrap();
    for (csr_b64, what, because) in [
        (
            csr(&[&name], &csr_key),
            "a blocked CSR key",
            "blocked by the operator",
        ),
        (
            csr(&[&name], &close_rcgen),
            "a CSR key with close primes",
            "Fermat",
        ),
    ] {
        let r = raw.post(&finalize, Some(&json!({"csr": csr_b64}))).await;
        assert_problem(&r, 400, "badCSR", what);
        assert_detail(&r, because, what);
        assert_eq!(
            raw.post(&order_url, None).await.body["status"],
            "ready",
            "{what}: the order is untouched"
        );
    }

    // Unblocked (named by the same file), the key finalizes; a second unblock finds nothing.
    let (ok, out) = admin(&env, &["keys", "unblock", path]);
    assert!(ok, "{out}");
    let (ok, out) = admin(&env, &["keys", "unblock", path]);
    assert!(!ok && out.contains("does not exist"), "{out}");
    let r = raw
        .post(&finalize, Some(&json!({"csr": csr(&[&name], &csr_key)})))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let valid = wait_for_status(&raw, &order_url, "valid").await;

    // The key of an issued certificate, blocked by naming the certificate's PEM file: the leaf's
    // key is the one blocked, and it cannot be certified again.
    let chain = raw
        .post(valid["certificate"].as_str().unwrap(), None)
        .await
        .text;
    let cert_path = env.dir.path().join("issued.pem");
    std::fs::write(&cert_path, &chain).unwrap();
    let (ok, out) = admin(
        &env,
        &["keys", "block", cert_path.to_str().unwrap(), "--json"],
    );
    assert!(ok, "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        doc["spki_sha256"],
        SpkiHash::of_spki_der(&rcgen::PublicKeyData::subject_public_key_info(&csr_key))
            .unwrap()
            .to_hex()
            .as_str(),
        "{out}"
    );
    let (order_url, order) = ready_order(&env, &raw, &name).await;
    let r = raw
        .post(
            order["finalize"].as_str().unwrap(),
            Some(&json!({"csr": csr(&[&name], &csr_key)})),
        )
        .await;
    assert_problem(&r, 400, "badCSR", "the key of a blocked certificate");
    assert_eq!(raw.post(&order_url, None).await.body["status"], "ready");

    // The database key unblocked registers; the file's stays blocked until the file changes.
    let (ok, out) = admin(&env, &["keys", "unblock", &db_hash]);
    assert!(ok, "{out}");
    let r = new_account(&raw_with(&env, copy(&db_blocked))).await;
    assert_eq!(r.status, 201, "{r:?}");

    // A reload reads the file again: a key added to it is refused from then on.
    let other = SigningKey::generate(Algorithm::EdDsa).unwrap();
    std::fs::write(
        &file_path,
        format!(
            "{}\n{}\n",
            SpkiHash::of(&file_blocked.public_jwk()),
            SpkiHash::of(&other.public_jwk())
        ),
    )
    .unwrap();
    let (ok, out) = admin(&env, &["reload"]);
    assert!(ok, "{out}");
    let r = new_account(&raw_with(&env, other)).await;
    assert_problem(&r, 400, "badPublicKey", "a key added to the file");
    // A file that no longer parses keeps the previous list and says so.
    std::fs::write(&file_path, "garbage\n").unwrap();
    let (ok, out) = admin(&env, &["reload"]);
    assert!(!ok && out.contains("blocked keys"), "{out}");
    let r = new_account(&raw_with(&env, copy(&file_blocked))).await;
    assert_problem(&r, 400, "badPublicKey", "the previous list stays");

    // The refusals are counted by what the key was to become and why.
    let metrics = reqwest::get(format!("http://{}/metrics", env.admin_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (key_use, reason) in [
        ("account", "blocked"),
        ("account", "fermat"),
        ("certificate", "blocked"),
        ("certificate", "fermat"),
    ] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("certeasy_keys_refused_total{")
                    && l.contains(&format!("use=\"{key_use}\""))
                    && l.contains(&format!("reason=\"{reason}\""))),
            "{key_use} {reason}: {metrics}"
        );
    }
}
