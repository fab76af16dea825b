//! `certeasy admin accounts …` and `certeasy admin certificates …` against a running server:
//! the real CLI binary, through the admin API, on certificates issued over ACME.

use std::process::Command as StdCommand;
use std::time::Duration;

use acme_core::status::RevocationReason;
use instant_acme::ChallengeType;
use instant_acme::Identifier;
use instant_acme::NewOrder;
use rustls_pki_types::CertificateDer;
use serde_json::Value;
use testkit::admin_cli::CliOutput;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::certcheck::pem_ders;
use crate::flow::issue;
use crate::harness::Db;
use crate::harness::TestEnv;

/// An upper bound for one CLI run; each takes well under a second.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the CLI without blocking the runtime: the server under test runs on it.
pub(crate) async fn admin(env: &TestEnv, args: &[&str]) -> CliOutput {
    env.admin_cli().run_async(args, CLI_TIMEOUT).await
}

/// The serials of a listing, in its order.
fn serials(list: &Value) -> Vec<String> {
    list["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["serial"].as_str().unwrap().to_owned())
        .collect()
}

fn account_id(account: &instant_acme::Account) -> String {
    account.id().rsplit('/').next().unwrap().to_owned()
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap()
}

/// An issued certificate: its leaf DER and serial as the admin API prints it.
struct Issued {
    der: Vec<u8>,
    serial: String,
}

async fn issue_for(env: &TestEnv, account: &instant_acme::Account, names: &[&str]) -> Issued {
    let ids: Vec<Identifier> = names
        .iter()
        .map(|n| Identifier::Dns((*n).to_owned()))
        .collect();
    let chain = issue(env, account, &ids, ChallengeType::Http01).await;
    let der = pem_ders(&chain).remove(0);
    let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
    let serial = hex::encode(parsed.raw_serial());
    Issued { der, serial }
}

async fn records(db: Db) {
    let mut env = TestEnv::new(db).await;
    env.start().await;
    let alice = env.account().await;
    let bob = env.account().await;
    let (a, b) = (account_id(&alice), account_id(&bob));
    let (n1, n2, n3, n4) = (
        env.name("one"),
        env.name("two"),
        env.name("three"),
        env.name("four"),
    );
    let c1 = issue_for(&env, &alice, &[&n1, &n2]).await;
    let c2 = issue_for(&env, &alice, &[&n3]).await;
    let c3 = issue_for(&env, &bob, &[&n1]).await;
    let c4 = issue_for(&env, &bob, &[&n4]).await;
    let now = OffsetDateTime::now_utc();

    // ---- listing with each filter ----
    let all = admin(&env, &["certificates", "list", "--json"])
        .await
        .json();
    assert_eq!(
        serials(&all),
        [
            c4.serial.as_str(),
            c3.serial.as_str(),
            c2.serial.as_str(),
            c1.serial.as_str()
        ]
    );
    assert_eq!(all["next_before"], Value::Null);
    let first = &all["certificates"][3];
    assert_eq!(first["account"].as_i64().unwrap().to_string(), a);
    assert_eq!(
        first["names"],
        serde_json::json!([format!("dns:{n1}"), format!("dns:{n2}")])
    );
    assert_eq!(first["revoked_at"], Value::Null);
    let by_name = admin(&env, &["certificates", "list", "--name", &n1, "--json"])
        .await
        .json();
    assert_eq!(serials(&by_name), [c3.serial.as_str(), c1.serial.as_str()]);
    let by_account = admin(&env, &["certificates", "list", "--account", &a, "--json"])
        .await
        .json();
    assert_eq!(
        serials(&by_account),
        [c2.serial.as_str(), c1.serial.as_str()]
    );
    // Serials as openssl prints them: upper case with colons.
    let colons = c2
        .serial
        .to_uppercase()
        .as_bytes()
        .chunks(2)
        .map(|p| std::str::from_utf8(p).unwrap())
        .collect::<Vec<_>>()
        .join(":");
    let by_serial = admin(
        &env,
        &["certificates", "list", "--serial", &colons, "--json"],
    )
    .await
    .json();
    assert_eq!(serials(&by_serial), [c2.serial.as_str()]);
    let hour = time::Duration::hours(1);
    let issued_now = admin(
        &env,
        &[
            "certificates",
            "list",
            "--issued-after",
            &rfc3339(now - hour),
            "--issued-before",
            &rfc3339(now + hour),
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(serials(&issued_now).len(), 4);
    let issued_earlier = admin(
        &env,
        &[
            "certificates",
            "list",
            "--issued-before",
            &rfc3339(now - hour),
            "--json",
        ],
    )
    .await
    .json();
    assert!(serials(&issued_earlier).is_empty());
    let expiring_later = admin(
        &env,
        &[
            "certificates",
            "list",
            "--expires-after",
            &rfc3339(now + time::Duration::days(1)),
            "--expires-before",
            &rfc3339(now + time::Duration::days(400)),
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(serials(&expiring_later).len(), 4);
    let expired = admin(
        &env,
        &[
            "certificates",
            "list",
            "--expires-before",
            &rfc3339(now),
            "--json",
        ],
    )
    .await
    .json();
    assert!(serials(&expired).is_empty());
    // Pages: two rows, then the rest from next_before.
    let page1 = admin(&env, &["certificates", "list", "--limit", "2", "--json"])
        .await
        .json();
    assert_eq!(serials(&page1), [c4.serial.as_str(), c3.serial.as_str()]);
    let before = page1["next_before"].as_i64().unwrap().to_string();
    let page2 = admin(
        &env,
        &[
            "certificates",
            "list",
            "--limit",
            "2",
            "--before",
            &before,
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(serials(&page2), [c2.serial.as_str(), c1.serial.as_str()]);
    // A bad date is refused with the field named.
    let bad = admin(&env, &["certificates", "list", "--expires-before", "soon"]).await;
    assert!(
        !bad.ok && bad.stderr.contains("expires-before"),
        "{}",
        bad.stderr
    );
    // The table.
    let table = admin(&env, &["certificates", "list", "--account", &b]).await;
    assert!(table.ok, "{}", table.stderr);
    let mut lines = table.stdout.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("ID") && header.contains("SERIAL") && header.contains("NAMES"));
    assert!(table.stdout.contains(&c3.serial) && table.stdout.contains(&n4));

    // None of it is reachable on the ACME listener, token or not.
    let acme = crate::raw::client(&env);
    for path in [
        "/admin/accounts",
        "/admin/certificates",
        "/admin/certificates/count",
    ] {
        let r = acme
            .get(format!("{}{path}", env.base_url()))
            .header("authorization", format!("Bearer {}", env.admin_token()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 404, "{path}");
    }

    // ---- show ----
    let shown = admin(&env, &["certificates", "show", &c1.serial, "--json"])
        .await
        .json();
    assert_eq!(shown["serial"], c1.serial.as_str());
    assert_eq!(shown["names"].as_array().unwrap().len(), 2);
    assert!(shown.get("pem").is_none());
    let with_pem = admin(&env, &["certificates", "show", &c1.serial, "--pem"]).await;
    assert!(with_pem.ok, "{}", with_pem.stderr);
    assert!(with_pem.stdout.contains("not after:"));
    assert_eq!(pem_ders(&with_pem.stdout)[0], c1.der);
    let missing = admin(&env, &["certificates", "show", "0badc0de"]).await;
    assert!(
        !missing.ok && missing.stderr.contains("does not exist"),
        "{}",
        missing.stderr
    );

    let accounts = admin(&env, &["accounts", "list", "--json"]).await.json();
    let ids: Vec<String> = accounts["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].to_string())
        .collect();
    assert_eq!(ids, [b.clone(), a.clone()]);
    let alice_doc = admin(&env, &["accounts", "show", &a, "--json"])
        .await
        .json();
    assert_eq!(alice_doc["status"], "valid");
    assert_eq!(
        alice_doc["contacts"],
        serde_json::json!(["mailto:ops@example.com"])
    );
    assert_eq!(alice_doc["orders"], 2);
    assert_eq!(alice_doc["certificates"], 2);
    assert_eq!(alice_doc["revoked_certificates"], 0);
    assert_eq!(alice_doc["key_thumbprint"].as_str().unwrap().len(), 43);
    let shown = admin(&env, &["accounts", "show", &a]).await;
    assert!(
        shown.ok && shown.stdout.contains("key thumbprint:"),
        "{}",
        shown.stdout
    );

    // ---- revoke by serial, with a reason ----
    let revoked = admin(
        &env,
        &[
            "certificates",
            "revoke",
            &c1.serial,
            "--reason",
            "keyCompromise",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(revoked["revocation_reason"], "keyCompromise");
    let storage = &env.server.as_ref().unwrap().storage;
    let serial = acme_core::ids::Serial::from_hex(&c1.serial).unwrap();
    let stored = storage
        .certificate_by_serial(&serial)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.revocation_reason,
        Some(RevocationReason::KeyCompromise)
    );
    assert!(stored.revoked_at.is_some());
    // The holder's own revocation now finds it revoked.
    let again = alice
        .revoke(&instant_acme::RevocationRequest {
            certificate: &CertificateDer::from(c1.der.clone()),
            reason: None,
        })
        .await
        .unwrap_err();
    let instant_acme::Error::Api(problem) = again else {
        panic!("expected a problem, got {again:?}")
    };
    assert_eq!(
        problem.r#type.as_deref(),
        Some("urn:ietf:params:acme:error:alreadyRevoked")
    );
    let twice = admin(
        &env,
        &["certificates", "revoke", &c1.serial, "--reason", "1"],
    )
    .await;
    assert!(
        !twice.ok && twice.stderr.contains("already revoked"),
        "{}",
        twice.stderr
    );
    let bad_reason = admin(
        &env,
        &["certificates", "revoke", &c2.serial, "--reason", "2"],
    )
    .await;
    assert!(
        !bad_reason.ok && bad_reason.stderr.contains("keyCompromise"),
        "{}",
        bad_reason.stderr
    );
    let revoked_list = admin(&env, &["certificates", "list", "--revoked", "--json"])
        .await
        .json();
    assert_eq!(serials(&revoked_list), [c1.serial.as_str()]);

    // Every certificate here expires within the profile's lifetime of the server's now, and
    // none within a second; the window does not combine with explicit expiry dates.
    let soon = admin(
        &env,
        &[
            "certificates",
            "list",
            "--expiring-within",
            "3650d",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(soon["certificates"].as_array().unwrap().len(), 4, "{soon}");
    let none_soon = admin(
        &env,
        &["certificates", "list", "--expiring-within", "1s", "--json"],
    )
    .await
    .json();
    assert!(none_soon["certificates"].as_array().unwrap().is_empty());
    let both = admin(
        &env,
        &[
            "certificates",
            "list",
            "--expiring-within",
            "7d",
            "--expires-before",
            "2030-01-01",
        ],
    )
    .await;
    assert!(!both.ok, "{}", both.stdout);

    // ---- bulk revocation ----
    // A mistyped reason is the operator's, said as such, not an unreachable listener.
    let typo = admin(
        &env,
        &[
            "certificates",
            "revoke",
            "--account",
            "1",
            "--reason",
            "bogus",
        ],
    )
    .await;
    assert!(
        !typo.ok
            && typo.stderr.contains("unknown revocation reason \"bogus\"")
            && !typo.stderr.contains("cannot reach"),
        "{}",
        typo.stderr
    );
    let everything = admin(&env, &["certificates", "revoke", "--reason", "superseded"]).await;
    assert!(
        !everything.ok && everything.stderr.contains("at least one filter"),
        "{}",
        everything.stderr
    );
    let bulk = admin(
        &env,
        &[
            "certificates",
            "revoke",
            "--account",
            &b,
            "--reason",
            "superseded",
            "--batch",
            "1",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(bulk["revoked"], 2);
    assert_eq!(bulk["selected"], 2);
    assert_eq!(bulk["reason"], "superseded");
    assert!(bulk["batches"].as_u64().unwrap() >= 2, "{bulk}");
    assert!(bulk["seconds"].as_f64().is_some(), "{bulk}");
    for c in [&c3, &c4] {
        let serial = acme_core::ids::Serial::from_hex(&c.serial).unwrap();
        let stored = storage
            .certificate_by_serial(&serial)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.revocation_reason, Some(RevocationReason::Superseded));
    }
    let left = admin(&env, &["certificates", "list", "--not-revoked", "--json"])
        .await
        .json();
    assert_eq!(serials(&left), [c2.serial.as_str()]);
    // Nothing left to revoke for bob: a second run revokes nothing.
    let nothing = admin(
        &env,
        &[
            "certificates",
            "revoke",
            "--account",
            &b,
            "--reason",
            "superseded",
        ],
    )
    .await;
    assert!(
        nothing.ok && nothing.stdout.contains("0 certificates revoked"),
        "{}",
        nothing.stdout
    );

    // ---- deactivate ----
    let deactivated = admin(&env, &["accounts", "deactivate", &a, "--json"])
        .await
        .json();
    assert_eq!(deactivated["status"], "deactivated");
    let Err(refused) = alice
        .new_order(&NewOrder::new(&[Identifier::Dns(n3.clone())]))
        .await
    else {
        panic!("a deactivated account created an order");
    };
    let instant_acme::Error::Api(problem) = refused else {
        panic!("expected a problem, got {refused:?}")
    };
    assert_eq!(
        problem.r#type.as_deref(),
        Some("urn:ietf:params:acme:error:unauthorized")
    );
    let twice = admin(&env, &["accounts", "deactivate", &a]).await;
    assert!(
        !twice.ok && twice.stderr.contains("already deactivated"),
        "{}",
        twice.stderr
    );
    let listed = admin(
        &env,
        &["accounts", "list", "--status", "deactivated", "--json"],
    )
    .await
    .json();
    assert_eq!(listed["accounts"].as_array().unwrap().len(), 1);
    assert_eq!(listed["accounts"][0]["id"].to_string(), a);
    // Bob is untouched and still issues.
    issue_for(&env, &bob, &[&n2]).await;
}

#[tokio::test]
async fn accounts_and_certificates_on_sqlite() {
    records(Db::Sqlite).await;
}

#[tokio::test]
async fn accounts_and_certificates_on_postgres() {
    records(Db::Postgres).await;
}

#[test]
fn help_explains_the_filters_with_examples() {
    let help = |args: &[&str]| {
        let out = StdCommand::new(env!("CARGO_BIN_EXE_certeasy"))
            .args(args)
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let list = help(&["admin", "certificates", "list"]);
    for flag in [
        "--name",
        "--serial",
        "--account",
        "--issued-after",
        "--expires-before",
        "--revoked",
        "--not-revoked",
        "--json",
        "Examples:",
    ] {
        assert!(list.contains(flag), "{flag} missing from:\n{list}");
    }
    let revoke = help(&["admin", "certificates", "revoke"]);
    assert!(
        revoke.contains("keyCompromise (1)") && revoke.contains("--batch"),
        "{revoke}"
    );
    for cmd in [
        &["admin", "accounts", "list"][..],
        &["admin", "accounts", "show"],
        &["admin", "accounts", "deactivate"],
        &["admin", "certificates", "show"],
    ] {
        assert!(help(cmd).contains("Example"), "{cmd:?}");
    }
}
