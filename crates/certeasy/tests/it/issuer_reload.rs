//! Issuer rotation without a restart, against the real `certeasy serve` binary: a second
//! intermediate (made with `certeasy ca new-intermediate` and the offline root key) is added to
//! `ca.issuers` and put in force by SIGHUP, activated, and signs the next certificate; a reload
//! with a broken entry, or one removing an issuer still needed, leaves the set in force serving
//! and says why; and an instance whose configuration lacks the active issuer is not ready, signs
//! nothing (its finalization waits, never signed by another issuer), and finishes it with that
//! issuer once a reload adds it.

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use instant_acme::Account;
use instant_acme::ChallengeType;
use instant_acme::Identifier;
use instant_acme::NewOrder;
use instant_acme::OrderStatus;
use instant_acme::RetryPolicy;
use serde_json::Value;

use crate::flow::issue;
use crate::harness::Db;
use crate::harness::TestEnv;

const ROTATED: &str = "int-2027";
const ROTATED_CN: &str = "Reloaded Intermediate 2027";
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `certeasy ca ...` to its end.
pub(crate) fn ca_command(args: &[&str]) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_certeasy"))
        .arg("ca")
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "certeasy ca {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The CA made by `ca init` with the root key kept offline, then a second intermediate under
/// that root in `<dir>/issuers`, as an operator rotating would: the `ca.issuers` entry for it.
fn ca_with_second_intermediate(env: &TestEnv) -> String {
    second_intermediate(env, ROTATED, ROTATED_CN)
}

/// [`ca_with_second_intermediate`] for an issuer named `name` with common name `cn` (also what
/// `audit_cluster.rs` rotates to).
pub(crate) fn second_intermediate(env: &TestEnv, name: &str, cn: &str) -> String {
    let root_key = env.dir.path().join("offline/root.key");
    let issuers = env.dir.path().join("issuers");
    let config = env.config_path.display().to_string();
    env.write_config_for_test();
    ca_command(&[
        "init",
        "--config",
        &config,
        "--root-key-out",
        &root_key.display().to_string(),
    ]);
    let root = root_pem_path(env);
    ca_command(&[
        "new-intermediate",
        "--config",
        &config,
        "--name",
        name,
        "--common-name",
        cn,
        "--root-cert",
        &root.display().to_string(),
        "--root-key",
        &root_key.display().to_string(),
        "--out-dir",
        &issuers.display().to_string(),
    ]);
    issuer_entry(
        name,
        &issuers.join(format!("{name}.pem")),
        &issuers.join(format!("{name}.key")),
        &root,
    )
}

fn root_pem_path(env: &TestEnv) -> PathBuf {
    env.dir.path().join("data/ca/root.pem")
}

/// One `ca.issuers` list item.
fn issuer_entry(name: &str, certificate: &Path, key: &Path, chain: &Path) -> String {
    format!(
        "    - name: {name}\n      certificate: \"{}\"\n      private-key: \"{}\"\n      chain: \"{}\"\n",
        certificate.display(),
        key.display(),
        chain.display()
    )
}

pub(crate) fn ca_section(entries: &str) -> String {
    if entries.is_empty() {
        String::new()
    } else {
        format!("  issuers:\n{entries}")
    }
}

pub(crate) fn leaf_issuer_cn(chain_pem: &str) -> String {
    crate::certcheck::issuer_cn(&crate::certcheck::pem_ders(chain_pem)[0])
}

/// The configured issuers' names as `certeasy admin ca list --json` shows them.
async fn listed_issuers(env: &TestEnv) -> Vec<String> {
    let listed = env
        .admin_cli()
        .run_async(&["ca", "list", "--json"], CLI_TIMEOUT)
        .await;
    assert!(listed.ok, "{listed:?}");
    listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_owned())
        .collect()
}

/// `/readyz`: its status and text.
async fn readyz(env: &TestEnv) -> (u16, String) {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let response = http
        .get(format!("http://{}/readyz", env.admin_addr()))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// Sends SIGHUP to the running binary.
fn sighup(env: &TestEnv) {
    let pid = env.child.as_ref().expect("the binary runs").id();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The `config_reloaded` records, oldest first.
async fn reload_records(env: &TestEnv) -> Vec<Value> {
    let listed = env
        .admin_cli()
        .run_async(
            &["audit", "list", "--json", "--kind", "config_reloaded"],
            CLI_TIMEOUT,
        )
        .await;
    assert!(listed.ok, "{listed:?}");
    let mut records = listed.json().as_array().unwrap().clone();
    records.sort_by_key(|r| r["seq"].as_i64().unwrap());
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_issuer_signs_after_activation_and_a_broken_reload_keeps_the_set() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let entry = ca_with_second_intermediate(&env);
    env.spawn_binary().await;
    let account = env.account().await;
    let first = issue(
        &env,
        &account,
        &[Identifier::Dns(env.name("before"))],
        ChallengeType::Http01,
    )
    .await;
    let default_cn = leaf_issuer_cn(&first);
    assert_ne!(default_cn, ROTATED_CN);
    assert_eq!(listed_issuers(&env).await, ["default"]);

    // The operator adds the second intermediate to the file and sends SIGHUP: no restart.
    env.section("ca", &ca_section(&entry));
    env.write_config_for_test();
    sighup(&env);
    let deadline = Instant::now() + Duration::from_secs(20);
    while listed_issuers(&env).await != ["default", ROTATED] {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not add {ROTATED}:\n{}",
            env.server_log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let activated = env
        .admin_cli()
        .run_async(&["ca", "activate", ROTATED], CLI_TIMEOUT)
        .await;
    assert!(activated.ok, "{activated:?}\n{}", env.server_log());
    let rotated = issue(
        &env,
        &account,
        &[Identifier::Dns(env.name("after"))],
        ChallengeType::Http01,
    )
    .await;
    assert_eq!(leaf_issuer_cn(&rotated), ROTATED_CN);

    // The reload is on record, naming the issuer it added.
    let records = reload_records(&env).await;
    let added = records.last().expect("the SIGHUP reload is recorded");
    assert_eq!(added["detail"]["parts"]["issuers"], "reloaded", "{added}");
    assert_eq!(
        added["detail"]["issuers"]["added"],
        serde_json::json!([ROTATED]),
        "{added}"
    );
    assert_eq!(added["detail"]["issuers"]["removed"], serde_json::json!([]));

    // A broken entry: a certificate whose key is another's. The reload is refused naming the
    // entry and its file; the set in force stays and goes on signing.
    let issuers = env.dir.path().join("issuers");
    let broken = issuer_entry(
        "int-broken",
        &issuers.join(format!("{ROTATED}.pem")),
        &env.dir.path().join("data/ca/intermediate.key"),
        &root_pem_path(&env),
    );
    env.section("ca", &ca_section(&format!("{entry}{broken}")));
    env.write_config_for_test();
    let reload = env.admin_cli().run_async(&["reload"], CLI_TIMEOUT).await;
    let text = format!("{}{}", reload.stdout, reload.stderr);
    assert!(!reload.ok, "{reload:?}");
    assert!(
        text.contains("int-broken") && text.contains("ca.issuers"),
        "the refusal names the entry: {text}"
    );
    assert!(
        text.contains(&format!("{ROTATED}.pem")) || text.contains("intermediate.key"),
        "the refusal names the file: {text}"
    );
    assert_eq!(listed_issuers(&env).await, ["default", ROTATED]);
    let still = issue(
        &env,
        &account,
        &[Identifier::Dns(env.name("still"))],
        ChallengeType::Http01,
    )
    .await;
    assert_eq!(leaf_issuer_cn(&still), ROTATED_CN);
    let refused = reload_records(&env).await;
    let refused = refused.last().unwrap();
    assert_eq!(
        refused["detail"]["parts"]["issuers"], "refused",
        "{refused}"
    );
    assert!(refused["detail"]["issuers"].is_null(), "{refused}");

    // Removing the active issuer, which has an unexpired certificate, is refused too.
    env.section("ca", "");
    env.write_config_for_test();
    let reload = env.admin_cli().run_async(&["reload"], CLI_TIMEOUT).await;
    let text = format!("{}{}", reload.stdout, reload.stderr);
    assert!(!reload.ok && text.contains(ROTATED), "{reload:?}");
    assert_eq!(listed_issuers(&env).await, ["default", ROTATED]);
    assert_eq!(readyz(&env).await.0, 200);
}

/// Orders for `name` and has its authorization validated; the order, ready to finalize.
async fn ready_order(env: &TestEnv, account: &Account, name: &str) -> instant_acme::Order {
    let identifiers = [Identifier::Dns(name.to_owned())];
    let mut order = account
        .new_order(&NewOrder::new(&identifiers))
        .await
        .unwrap();
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.unwrap();
        let mut challenge = authz.challenge(ChallengeType::Http01).unwrap();
        let key_auth = challenge.key_authorization();
        env.http.add(&challenge.token, key_auth.as_str());
        challenge.set_ready().await.unwrap();
    }
    let status = order.poll_ready(&RetryPolicy::default()).await.unwrap();
    assert_eq!(status, OrderStatus::Ready);
    order
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_without_the_active_issuer_is_not_ready_and_signs_nothing_until_a_reload() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let entry = ca_with_second_intermediate(&env);
    env.section("ca", &ca_section(&entry));
    env.spawn_binary().await;
    let activated = env
        .admin_cli()
        .run_async(&["ca", "activate", ROTATED], CLI_TIMEOUT)
        .await;
    assert!(activated.ok, "{activated:?}");

    // This instance comes back with a configuration that lacks the active issuer (as a second
    // host whose file was not updated yet would start).
    env.kill_binary();
    env.section("ca", "");
    env.spawn_binary().await;
    let (status, text) = readyz(&env).await;
    assert_eq!(status, 503, "{text}");
    assert!(
        text.contains(ROTATED),
        "/readyz names the missing issuer: {text}"
    );

    // A finalization is accepted and waits: never signed by the implicit issuer instead.
    let account = env.account().await;
    let name = env.name("waits");
    let mut order = ready_order(&env, &account, &name).await;
    order.finalize().await.unwrap();
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        let state = order.refresh().await.unwrap();
        assert_eq!(
            state.status,
            OrderStatus::Processing,
            "{state:?}\n{}",
            env.server_log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The operator adds the issuer and reloads: ready again, and the waiting order is signed by
    // the active issuer, as is the next one.
    env.section("ca", &ca_section(&entry));
    env.write_config_for_test();
    let reload = env.admin_cli().run_async(&["reload"], CLI_TIMEOUT).await;
    assert!(reload.ok, "{reload:?}\n{}", env.server_log());
    let (status, text) = readyz(&env).await;
    assert_eq!(status, 200, "{text}");
    let chain = order
        .poll_certificate(&RetryPolicy::new().timeout(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", env.server_log()));
    assert_eq!(leaf_issuer_cn(&chain), ROTATED_CN);
    let next = issue(
        &env,
        &account,
        &[Identifier::Dns(env.name("next"))],
        ChallengeType::Http01,
    )
    .await;
    assert_eq!(leaf_issuer_cn(&next), ROTATED_CN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_would_unload_a_profiles_issuer_is_refused() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let entry = ca_with_second_intermediate(&env);
    env.section("ca", &ca_section(&entry));
    env.section(
        "issuance",
        &format!(
            "  default-profile: tls-server\n  profiles:\n    tls-server:\n      description: the active issuer's\n      identifier-types: [dns]\n    partner:\n      description: signed by {ROTATED}\n      identifier-types: [dns]\n      issuer: {ROTATED}\n"
        ),
    );
    env.spawn_binary().await;
    let account = env.account().await;
    let ids = [Identifier::Dns(env.name("partner"))];
    let (chain, profile) = crate::flow::issue_order(
        &env,
        &account,
        &NewOrder::new(&ids).profile("partner"),
        ChallengeType::Http01,
    )
    .await;
    assert_eq!(profile.as_deref(), Some("partner"));
    assert_eq!(leaf_issuer_cn(&chain), ROTATED_CN);

    // Taking the issuer out of ca.issuers while the profile names it: the reload is refused,
    // naming the profile's issuer, and the issuer stays loaded and signing.
    env.section("ca", "");
    env.write_config_for_test();
    let reload = env.admin_cli().run_async(&["reload"], CLI_TIMEOUT).await;
    let text = format!("{}{}", reload.stdout, reload.stderr);
    assert!(!reload.ok, "{reload:?}");
    assert!(
        text.contains(ROTATED) && text.contains("issuance.profiles.partner.issuer"),
        "the refusal names the profile's issuer: {text}"
    );
    // The admin CLI reads the same file, so the operator puts the entry back before asking.
    env.section("ca", &ca_section(&entry));
    env.write_config_for_test();
    assert_eq!(listed_issuers(&env).await, ["default", ROTATED]);
    let ids = [Identifier::Dns(env.name("still"))];
    let (chain, _) = crate::flow::issue_order(
        &env,
        &account,
        &NewOrder::new(&ids).profile("partner"),
        ChallengeType::Http01,
    )
    .await;
    assert_eq!(leaf_issuer_cn(&chain), ROTATED_CN);
}
