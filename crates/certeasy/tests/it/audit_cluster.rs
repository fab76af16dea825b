//! Two instances on one PostgreSQL database, issuing at the same time, write one audit chain:
//! every record's seq follows the one before with no gap and no fork, every certificate either
//! instance issued has its `certificate_issued` record, and `verify` finds the chain intact.

use std::collections::BTreeSet;

use futures::future::join_all;
use instant_acme::ChallengeType;
use instant_acme::Identifier;
use serde_json::Value;

use crate::flow::issue;
use crate::harness::Db;
use crate::harness::TestEnv;

/// Certificates each instance issues, all at once.
const PER_INSTANCE: usize = 6;
const CLI_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_issuing_at_once_write_one_audit_chain() {
    let mut a = TestEnv::new(Db::Postgres).await;
    a.start().await;
    // Instance b: the same database and the same CA (a's issuing and listener intermediates,
    // as an operator would copy them to a second host), its own ports and responders.
    let ca = a.dir.path().join("data/ca");
    let mut b = TestEnv::new(Db::Sqlite).await;
    b.section("database", &format!("  url: \"{}\"\n", a.database_url()));
    b.section(
        "ca",
        &format!(
            "  existing:\n    certificate: \"{}\"\n    private-key: \"{}\"\n    chain: \"{}\"\n",
            ca.join("intermediate.pem").display(),
            ca.join("intermediate.key").display(),
            ca.join("root.pem").display()
        ),
    );
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
