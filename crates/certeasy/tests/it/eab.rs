//! External account binding (RFC 8555 §7.3.4) end to end: keys from `certeasy admin eab`, raw
//! bindings (refusals, a single-use key raced by concurrent clients, the inherited policy), and
//! lego and certbot registering and issuing with a key.

use std::path::Path;
use std::time::Duration;

use acme_jose::Algorithm;
use acme_jose::eab::MacAlgorithm;
use acme_jose::sign::eab_binding;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use serde_json::json;
use tokio::process::Command;

use crate::certcheck::assert_chain;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::admin;
use crate::harness::free_port;
use crate::harness::run;
use crate::raw::Raw;
use crate::raw::Reply;

const TIMEOUT: Duration = Duration::from_secs(180);

/// Creates a key with `certeasy admin eab create --json`; returns (kid, HMAC key base64url).
fn create_key(env: &TestEnv, extra: &[&str]) -> (String, String) {
    let mut args = vec!["eab", "create", "--json"];
    args.extend_from_slice(extra);
    let (ok, out) = admin(env, &args);
    assert!(ok, "eab create failed: {out}");
    let key: Value = serde_json::from_str(&out).unwrap();
    (
        key["kid"].as_str().unwrap().to_owned(),
        key["hmac-key"].as_str().unwrap().to_owned(),
    )
}

/// The domain every `env.name(..)` of this test lies below.
fn test_domain(env: &TestEnv) -> String {
    format!("{}.certeasy.test", env.suffix)
}

async fn new_account(raw: &Raw, binding: Option<Value>) -> Reply {
    let mut payload = json!({"termsOfServiceAgreed": true});
    if let Some(b) = binding {
        payload["externalAccountBinding"] = b;
    }
    raw.post(&raw.url("/acme/new-account"), Some(&payload))
        .await
}

/// A client's report that the server requires a binding: lego and certbot read the directory's
/// `externalAccountRequired` and stop before registering; the server's own answer to a request
/// without a binding is checked by the raw tests.
fn requires_eab(out: &str) -> bool {
    out.contains("externalAccountRequired")
        || out.to_lowercase().contains("external account binding")
}

fn binding_for(raw: &Raw, kid: &str, hmac: &[u8], url: &str) -> Value {
    eab_binding(kid, hmac, MacAlgorithm::Hs256, url, &raw.key.public_jwk())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_bindings_refusals_race_and_policy() {
    raw_bindings_on(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_bindings_refusals_race_and_policy_on_postgres() {
    raw_bindings_on(Db::Postgres).await;
}

async fn raw_bindings_on(db: Db) {
    let mut env = TestEnv::new(db).await;
    env.section("acme", "  external-account-required: true\n");
    env.start().await;
    let domain = test_domain(&env);
    let (kid, hmac_b64) = create_key(&env, &["--domain", &domain, "--max-validity", "30d"]);
    let hmac = URL_SAFE_NO_PAD.decode(&hmac_b64).unwrap();

    let probe = Raw::new(&env, Algorithm::Es256);
    let directory = probe
        .http
        .get(env.directory_url())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let directory: Value = serde_json::from_str(&directory).unwrap();
    assert_eq!(directory["meta"]["externalAccountRequired"], true);
    let new_account_url = probe.url("/acme/new-account");

    // No binding on a server that requires one.
    let r = new_account(&probe, None).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(
        r.problem_type(),
        "urn:ietf:params:acme:error:externalAccountRequired"
    );
    // A wrong HMAC key, an unknown kid, another URL, another account key.
    let r = new_account(
        &probe,
        Some(binding_for(&probe, &kid, b"not the key", &new_account_url)),
    )
    .await;
    assert_eq!(
        r.problem_type(),
        "urn:ietf:params:acme:error:unauthorized",
        "{r:?}"
    );
    let r = new_account(
        &probe,
        Some(binding_for(&probe, "no-such-kid", &hmac, &new_account_url)),
    )
    .await;
    assert_eq!(
        r.problem_type(),
        "urn:ietf:params:acme:error:unauthorized",
        "{r:?}"
    );
    assert!(
        r.body["detail"].as_str().unwrap().contains("no-such-kid"),
        "{r:?}"
    );
    let r = new_account(
        &probe,
        Some(binding_for(
            &probe,
            &kid,
            &hmac,
            &probe.url("/acme/new-order"),
        )),
    )
    .await;
    assert_eq!(
        r.problem_type(),
        "urn:ietf:params:acme:error:malformed",
        "{r:?}"
    );
    let stranger = Raw::new(&env, Algorithm::Es256);
    let r = new_account(
        &probe,
        Some(binding_for(&stranger, &kid, &hmac, &new_account_url)),
    )
    .await;
    assert_eq!(
        r.problem_type(),
        "urn:ietf:params:acme:error:malformed",
        "{r:?}"
    );

    // Eight clients race for the single-use key: exactly one account is bound.
    let clients: Vec<Raw> = (0..8).map(|_| Raw::new(&env, Algorithm::Es256)).collect();
    let replies = futures::future::join_all(clients.iter().map(|c| {
        let binding = binding_for(c, &kid, &hmac, &new_account_url);
        new_account(c, Some(binding))
    }))
    .await;
    let winners: Vec<usize> = (0..replies.len())
        .filter(|i| replies[*i].status == 201)
        .collect();
    assert_eq!(winners.len(), 1, "{replies:?}");
    for (i, r) in replies.iter().enumerate() {
        if i != winners[0] {
            assert_eq!(r.status, 403, "{r:?}");
            assert_eq!(r.problem_type(), "urn:ietf:params:acme:error:unauthorized");
            assert!(
                r.body["detail"].as_str().unwrap().contains("already bound"),
                "{r:?}"
            );
        }
    }
    let created = &replies[winners[0]];
    // RFC 8555 §7.3.4: the new account object carries the binding it was created with.
    assert!(
        created.body["externalAccountBinding"]["protected"]
            .as_str()
            .is_some(),
        "{created:?}"
    );
    let mut winner = clients.into_iter().nth(winners[0]).unwrap();
    winner.kid = Some(created.location());

    let (ok, listed) = admin(&env, &["eab", "list", "--json"]);
    assert!(ok, "{listed}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed[0]["kid"], kid.as_str());
    assert_eq!(listed[0]["bound-accounts"], 1);
    assert!(listed[0].get("hmac-key").is_none());
    let (ok, table) = admin(&env, &["eab", "list"]);
    assert!(
        ok && table.contains(&kid) && !table.contains(&hmac_b64),
        "{table}"
    );

    // The bound account inherits the key's policy.
    let new_order = winner.url("/acme/new-order");
    let inside = env.name("inside");
    let r = winner
        .post(
            &new_order,
            Some(&json!({"identifiers": [{"type": "dns", "value": inside}]})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    // Asking no notAfter gets the CA's default (90 days) cut to the key's 30 days.
    let rfc3339 = &time::format_description::well_known::Rfc3339;
    let capped =
        time::OffsetDateTime::parse(r.body["notAfter"].as_str().unwrap(), rfc3339).unwrap();
    let days = (capped - time::OffsetDateTime::now_utc()).whole_hours();
    assert!((29 * 24..=30 * 24).contains(&days), "{r:?}");
    let r = winner
        .post(
            &new_order,
            // The shipped profile that certifies IP addresses, so that the key's policy judges
            // both identifiers.
            Some(&json!({"identifiers": [
                {"type": "dns", "value": inside},
                {"type": "dns", "value": "elsewhere.example.org"},
                {"type": "ip", "value": "192.0.2.7"},
            ], "profile": "short-lived"})),
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(
        r.problem_type(),
        "urn:ietf:params:acme:error:rejectedIdentifier"
    );
    assert_eq!(r.body["subproblems"].as_array().unwrap().len(), 2, "{r:?}");
    let not_after = time::OffsetDateTime::now_utc() + time::Duration::days(60);
    let r = winner
        .post(
            &new_order,
            Some(&json!({
                "identifiers": [{"type": "dns", "value": inside}],
                "notAfter": not_after.format(&time::format_description::well_known::Rfc3339).unwrap(),
            })),
        )
        .await;
    assert_eq!(
        r.problem_type(),
        "urn:ietf:params:acme:error:malformed",
        "{r:?}"
    );
    assert!(
        r.body["detail"].as_str().unwrap().contains("30 days"),
        "{r:?}"
    );

    // Revoked and expired keys bind nothing; a reusable key binds several accounts.
    let (ok, out) = admin(&env, &["eab", "revoke", &kid]);
    assert!(ok, "{out}");
    let (ok, out) = admin(&env, &["eab", "revoke", &kid]);
    assert!(!ok && out.contains("already revoked"), "{out}");
    let (reusable, reusable_hmac) = create_key(&env, &["--reusable"]);
    let reusable_hmac = URL_SAFE_NO_PAD.decode(reusable_hmac).unwrap();
    for _ in 0..2 {
        let c = Raw::new(&env, Algorithm::Es256);
        let r = new_account(
            &c,
            Some(binding_for(&c, &reusable, &reusable_hmac, &new_account_url)),
        )
        .await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    let (ok, out) = admin(&env, &["eab", "revoke", &reusable]);
    assert!(ok, "{out}");
    let c = Raw::new(&env, Algorithm::Es256);
    let r = new_account(
        &c,
        Some(binding_for(&c, &reusable, &reusable_hmac, &new_account_url)),
    )
    .await;
    assert_eq!(
        r.problem_type(),
        "urn:ietf:params:acme:error:unauthorized",
        "{r:?}"
    );
    assert!(
        r.body["detail"].as_str().unwrap().contains("revoked"),
        "{r:?}"
    );
}

/// A new account bound with `kid`, registered: its kid is set.
async fn bound_account(env: &TestEnv, kid: &str, hmac: &[u8]) -> Raw {
    let mut raw = Raw::new(env, Algorithm::Es256);
    let url = raw.url("/acme/new-account");
    let r = new_account(&raw, Some(binding_for(&raw, kid, hmac, &url))).await;
    assert_eq!(r.status, 201, "{r:?}");
    raw.kid = Some(r.location());
    raw
}

/// POST-as-GET of the account itself: what the account's next request gets.
async fn account_request(raw: &Raw) -> Reply {
    raw.post(raw.kid.as_deref().unwrap(), None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_with_deactivate_accounts_cuts_off_the_keys_accounts_only() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.start().await;
    let (team, team_hmac) = create_key(&env, &["--reusable"]);
    let team_hmac = URL_SAFE_NO_PAD.decode(team_hmac).unwrap();
    let (other, other_hmac) = create_key(&env, &[]);
    let other_hmac = URL_SAFE_NO_PAD.decode(other_hmac).unwrap();
    let first = bound_account(&env, &team, &team_hmac).await;
    let second = bound_account(&env, &team, &team_hmac).await;
    let elsewhere = bound_account(&env, &other, &other_hmac).await;
    let mut plain = Raw::new(&env, Algorithm::Es256);
    plain.register().await;
    for raw in [&first, &second, &elsewhere, &plain] {
        assert_eq!(account_request(raw).await.status, 200);
    }

    let (ok, out) = admin(&env, &["eab", "revoke", &team, "--deactivate-accounts"]);
    assert!(ok, "{out}");
    assert!(out.contains("deactivated accounts: 2"), "{out}");

    // The key's accounts are refused from their next request on; the others are untouched.
    for raw in [&first, &second] {
        let r = account_request(raw).await;
        assert_eq!(
            r.problem_type(),
            "urn:ietf:params:acme:error:unauthorized",
            "{r:?}"
        );
    }
    for raw in [&elsewhere, &plain] {
        let r = account_request(raw).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body["status"], "valid");
    }
    // As an operator sees it.
    let account_id = first.kid.as_deref().unwrap().rsplit('/').next().unwrap();
    let (ok, shown) = admin(&env, &["accounts", "show", account_id, "--json"]);
    assert!(ok, "{shown}");
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["status"], "deactivated", "{shown}");

    // Asked again of the revoked key: not a conflict, nothing left to deactivate.
    let (ok, out) = admin(&env, &["eab", "revoke", &team, "--deactivate-accounts"]);
    assert!(ok && out.contains("deactivated accounts: 0"), "{out}");
    // Without the flag, a second revocation is still refused.
    let (ok, out) = admin(&env, &["eab", "revoke", &team]);
    assert!(!ok && out.contains("already revoked"), "{out}");
    // Revoking without the flag leaves the bound account working.
    let (ok, out) = admin(&env, &["eab", "revoke", &other]);
    assert!(ok && out.contains("deactivated accounts: 0"), "{out}");
    assert_eq!(account_request(&elsewhere).await.status, 200);
}

/// A single-use key's HMAC key is erased when it binds: the same binding, correct as it was,
/// is refused as spent, and the listing shows the key bound once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_single_use_key_verifies_nothing() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.start().await;
    let (kid, hmac) = create_key(&env, &[]);
    let hmac = URL_SAFE_NO_PAD.decode(hmac).unwrap();
    bound_account(&env, &kid, &hmac).await;
    let again = Raw::new(&env, Algorithm::Es256);
    let url = again.url("/acme/new-account");
    let r = new_account(&again, Some(binding_for(&again, &kid, &hmac, &url))).await;
    assert_eq!(r.problem_type(), "urn:ietf:params:acme:error:unauthorized");
    assert!(
        r.body["detail"].as_str().unwrap().contains("already bound"),
        "{r:?}"
    );
    let (ok, listed) = admin(&env, &["eab", "list", "--json"]);
    assert!(ok, "{listed}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed[0]["bound-accounts"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_is_honoured_when_not_required() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.start().await;
    let (kid, hmac) = create_key(&env, &["--domain", &test_domain(&env)]);
    let hmac = URL_SAFE_NO_PAD.decode(hmac).unwrap();
    let mut plain = Raw::new(&env, Algorithm::Es256);
    plain.register().await;
    let mut bound = Raw::new(&env, Algorithm::Es256);
    let url = bound.url("/acme/new-account");
    let r = new_account(&bound, Some(binding_for(&bound, &kid, &hmac, &url))).await;
    assert_eq!(r.status, 201, "{r:?}");
    bound.kid = Some(r.location());
    let outside = json!({"identifiers": [{"type": "dns", "value": "outside.example.org"}]});
    let r = bound
        .post(&bound.url("/acme/new-order"), Some(&outside))
        .await;
    assert_eq!(
        r.problem_type(),
        "urn:ietf:params:acme:error:rejectedIdentifier",
        "{r:?}"
    );
    let r = plain
        .post(&plain.url("/acme/new-order"), Some(&outside))
        .await;
    assert_eq!(
        r.status, 201,
        "an account without a key is not restricted: {r:?}"
    );
}

fn lego(env: &TestEnv, path: &Path, port: u16, name: &str) -> Command {
    let mut cmd = crate::clients::lego(&env.root_path, &env.directory_url(), path);
    cmd.args(["--domains", name, "--http", "--http.port"])
        .arg(format!("127.0.0.1:{port}"));
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lego_registers_and_issues_with_a_key() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section("acme", "  external-account-required: true\n");
    let port = free_port();
    env.challenge_ports(port, env.tls.port());
    env.spawn_binary().await;
    let (kid, hmac) = create_key(&env, &["--domain", &test_domain(&env)]);
    let name = env.name("lego-eab");
    let path = env.dir.path().join("lego");

    let mut cmd = lego(&env, &env.dir.path().join("lego-without"), port, &name);
    cmd.arg("run");
    let (ok, out) = run(cmd, TIMEOUT).await;
    assert!(!ok && requires_eab(&out), "{out}");

    let mut cmd = lego(&env, &path, port, &name);
    cmd.args([
        "--eab",
        &format!("--kid={kid}"),
        &format!("--hmac={hmac}"),
        "run",
    ]);
    let (ok, out) = run(cmd, TIMEOUT).await;
    assert!(
        ok,
        "lego with EAB failed:\n{out}\n--- server log ---\n{}",
        env.server_log()
    );
    let pem = std::fs::read_to_string(path.join(format!("certificates/{name}.crt"))).unwrap();
    assert_chain(&pem, &env.root_pem(), &[&name]);

    // The same account (lego keeps it under --path) is refused outside the key's domain.
    let outside = format!("outside-{}.certeasy.test", env.suffix);
    let mut cmd = lego(&env, &path, port, &outside);
    cmd.args([
        "--eab",
        &format!("--kid={kid}"),
        &format!("--hmac={hmac}"),
        "run",
    ]);
    let (ok, out) = run(cmd, TIMEOUT).await;
    assert!(!ok && out.contains("rejectedIdentifier"), "{out}");
}

fn certbot(env: &TestEnv, dir: &Path, port: u16, name: &str) -> Command {
    let mut cmd = crate::clients::certbot(&env.root_path, &env.directory_url(), dir);
    cmd.args([
        "certonly",
        "--standalone",
        "--agree-tos",
        "-m",
        "certbot@example.com",
    ])
    .args(["--http-01-address", "127.0.0.1", "--http-01-port"])
    .arg(port.to_string())
    .args(["-d", name]);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certbot_registers_and_issues_with_a_key_on_postgres() {
    let mut env = TestEnv::new(Db::Postgres).await;
    env.section("acme", "  external-account-required: true\n");
    let port = free_port();
    env.challenge_ports(port, env.tls.port());
    env.spawn_binary().await;
    let (kid, hmac) = create_key(&env, &["--domain", &test_domain(&env)]);
    let name = env.name("certbot-eab");
    let dir = env.dir.path().join("certbot");

    let (ok, out) = run(
        certbot(&env, &env.dir.path().join("certbot-without"), port, &name),
        TIMEOUT,
    )
    .await;
    assert!(!ok && requires_eab(&out), "{out}");

    let mut cmd = certbot(&env, &dir, port, &name);
    // `=`: a key that starts with '-' would otherwise be taken for an option.
    cmd.args([format!("--eab-kid={kid}"), format!("--eab-hmac-key={hmac}")]);
    let (ok, out) = run(cmd, TIMEOUT).await;
    assert!(
        ok,
        "certbot with EAB failed:\n{out}\n--- server log ---\n{}",
        env.server_log()
    );
    let pem =
        std::fs::read_to_string(dir.join(format!("config/live/{name}/fullchain.pem"))).unwrap();
    assert_chain(&pem, &env.root_pem(), &[&name]);

    // The registered account (kept in the config dir) is refused outside the key's domain.
    let outside = format!("outside-{}.certeasy.test", env.suffix);
    let (ok, out) = run(certbot(&env, &dir, port, &outside), TIMEOUT).await;
    let log = std::fs::read_to_string(dir.join("logs/letsencrypt.log")).unwrap_or_default();
    // certbot 2.1 (Debian) answers the problem with a crash of its own while reporting it
    // ("AttributeError: can't set attribute"), so the server's answer is read from its log.
    assert!(
        !ok && (out.contains("rejectedIdentifier") || log.contains("error:rejectedIdentifier")),
        "{out}\n--- certbot log ---\n{log}"
    );
}
