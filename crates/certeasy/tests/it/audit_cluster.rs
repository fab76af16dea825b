//! Two instances on one PostgreSQL database. Issuing at the same time, they write one audit
//! chain: every record's seq follows the one before with no gap and no fork, every certificate
//! either instance issued has its `certificate_issued` record, and `verify` finds the chain
//! intact. And an issuer activated through one of them is used by the other without a restart.

use std::collections::BTreeSet;

use futures::future::join_all;
use instant_acme::ChallengeType;
use instant_acme::Identifier;
use serde_json::Value;

use crate::flow::issue;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::issuer_reload::ca_section;
use crate::issuer_reload::leaf_issuer_cn;
use crate::issuer_reload::second_intermediate;

/// Certificates each instance issues, all at once.
const PER_INSTANCE: usize = 6;
const CLI_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_issuing_at_once_write_one_audit_chain() {
    let mut a = TestEnv::new(Db::Postgres).await;
    a.start().await;
    // Instance b: the same database and the same CA (a's issuing and listener intermediates,
    // as an operator would copy them to a second host), its own ports and responders.
    let mut b = TestEnv::new(Db::Sqlite).await;
    b.section("database", &format!("  url: \"{}\"\n", a.database_url()));
    b.section("ca", &a.existing_ca_section());
    b.root_path = a.root_path.clone();
    b.start().await;

    // One account per flow: an account may start only a burst of orders at once.
    let mut flows = Vec::new();
    let mut names = BTreeSet::new();
    for i in 0..PER_INSTANCE {
        for (env, label) in [(&a, "a"), (&b, "b")] {
            let name = env.name(&format!("{label}{i}"));
            names.insert(name.clone());
            flows.push(async move {
                let account = env.account().await;
                issue(
                    env,
                    &account,
                    &[Identifier::Dns(name)],
                    ChallengeType::Http01,
                )
                .await
            });
        }
    }
    let chains = join_all(flows).await;
    assert_eq!(chains.len(), 2 * PER_INSTANCE);

    let verify = a
        .admin_cli()
        .run_async(&["audit", "verify", "--json"], CLI_TIMEOUT)
        .await;
    assert!(verify.ok, "{verify:?}");
    let doc: Value = serde_json::from_str(&verify.stdout).unwrap();
    assert_eq!(doc["ok"], true, "{doc}");
    assert!(doc["first_broken"].is_null(), "{doc}");
    let head = doc["head_seq"].as_i64().unwrap();
    assert_eq!(doc["records"].as_i64().unwrap(), head, "one record per seq");

    // Both instances wrote into the one chain: seq 1..head, each linked to the one before, and
    // one certificate_issued record per name, whichever instance issued it.
    let listed = a
        .admin_cli()
        .run_async(&["audit", "list", "--json", "--limit", "1000"], CLI_TIMEOUT)
        .await
        .json();
    let mut records: Vec<&Value> = listed.as_array().unwrap().iter().collect();
    records.sort_by_key(|r| r["seq"].as_i64().unwrap());
    let seqs: Vec<i64> = records.iter().map(|r| r["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (1..=head).collect::<Vec<_>>());
    for pair in records.windows(2) {
        assert_eq!(pair[1]["prev_hash"], pair[0]["hash"], "{pair:?}");
    }
    let issued: BTreeSet<String> = records
        .iter()
        .filter(|r| r["kind"] == "certificate_issued")
        .flat_map(|r| r["names"].as_array().unwrap().clone())
        .map(|n| n.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(issued, names);
    let accounts: BTreeSet<i64> = records
        .iter()
        .filter(|r| r["kind"] == "account_created")
        .map(|r| r["account"].as_i64().unwrap())
        .collect();
    assert_eq!(accounts.len(), 2 * PER_INSTANCE, "one account per flow");
}

/// Issuer rotation in a cluster: both instances are configured with a second issuer; an
/// operator activates it through instance a's admin API, and instance b, never restarted and
/// never asked, signs its next certificate with it (it re-reads the active issuer from the
/// database within `ra::issuers::ACTIVE_ISSUER_REFRESH`). The activation is one audit record.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_activation_through_one_instance_switches_the_other_without_a_restart() {
    let mut a = TestEnv::new(Db::Postgres).await;
    let second = ca_section(&second_intermediate(
        &a,
        "int-2027",
        "Rotated Intermediate 2027",
    ));
    a.section("ca", &second);
    a.start().await;
    let mut b = TestEnv::new(Db::Sqlite).await;
    b.section("database", &format!("  url: \"{}\"\n", a.database_url()));
    b.section("ca", &format!("{}{second}", a.existing_ca_section()));
    b.root_path = a.root_path.clone();
    b.start().await;

    let account = b.account().await;
    let before = issue(
        &b,
        &account,
        &[Identifier::Dns(b.name("before"))],
        ChallengeType::Http01,
    )
    .await;
    let default_cn = leaf_issuer_cn(&before);
    assert_ne!(default_cn, "Rotated Intermediate 2027");

    let activated = a
        .admin_cli()
        .run_async(&["ca", "activate", "int-2027"], CLI_TIMEOUT)
        .await;
    assert!(activated.ok, "{activated:?}");

    // b signs with the new issuer once it has read the choice again: within the refresh
    // interval, which one order takes about as long as here.
    let deadline = std::time::Instant::now()
        + ra::issuers::ACTIVE_ISSUER_REFRESH
        + std::time::Duration::from_secs(10);
    let mut n = 0;
    loop {
        n += 1;
        let chain = issue(
            &b,
            &account,
            &[Identifier::Dns(b.name(&format!("after{n}")))],
            ChallengeType::Http01,
        )
        .await;
        if leaf_issuer_cn(&chain) == "Rotated Intermediate 2027" {
            break;
        }
        assert_eq!(leaf_issuer_cn(&chain), default_cn);
        assert!(
            std::time::Instant::now() < deadline,
            "instance b still signs with the old issuer"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }

    let listed = a
        .admin_cli()
        .run_async(
            &["audit", "list", "--json", "--kind", "issuer_activated"],
            CLI_TIMEOUT,
        )
        .await
        .json();
    let records = listed.as_array().unwrap();
    assert_eq!(records.len(), 1, "{listed}");
    assert_eq!(records[0]["detail"]["issuer"], "int-2027");
    assert_eq!(records[0]["detail"]["previous"], "default");
    assert_eq!(records[0]["actor"]["type"], "admin");
}
