//! Rate-limit overrides managed without a redeploy: two instances on one PostgreSQL database;
//! overrides added and removed through one instance's CLI (`certeasy admin overrides`) apply on
//! the other within its refresh, without a reload. A raised limit admits a request it refused,
//! a lowered one refuses, a removal restores the default, an expiry ends an override; a missing
//! comment, a wrong id and a second override of one bucket are refused; the audit log names who
//! made each change; the overrides file's entries are listed beside the database's.

use std::time::Duration;

use acme_jose::Algorithm;
use serde_json::Value;
use serde_json::json;
use testkit::admin_cli::AdminCli;
use testkit::admin_cli::CliOutput;
use testkit::poll::eventually;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;
use crate::raw::Reply;

const CLI_TIMEOUT: Duration = Duration::from_secs(60);
/// Far more than the default `rate-limiting.overrides-refresh` (2 s): the time a loaded machine
/// may take, not the time the test expects to wait.
const WITHIN: Duration = Duration::from_secs(30);
const EVERY: Duration = Duration::from_millis(200);

/// Order creation: 3 per hour, a burst of 3. Loopback is whitelisted for the per-address limits.
const LIMITS: &str = "  whitelist: [\"127.0.0.1\", \"::1\"]\n  order-creation:\n    orders-per-account-per-hour: 3\n    order-burst: 3\n";

async fn new_order(raw: &Raw, name: &str) -> Reply {
    raw.post(
        &raw.url("/acme/new-order"),
        Some(&json!({ "identifiers": [{"type": "dns", "value": name}] })),
    )
    .await
}

fn account_id(raw: &Raw) -> String {
    raw.kid
        .clone()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned()
}

async fn cli(env: &TestEnv, args: &[&str]) -> CliOutput {
    let mut all = vec!["--operator", "alice"];
    all.extend_from_slice(args);
    env.admin_cli().run_async(&all, CLI_TIMEOUT).await
}

/// The bucket's limit as `ratelimit show` prints it on `env` (`burst 3, 3 per 1h`).
async fn bucket_limit(cli: &AdminCli, limit: &str, id: &str) -> String {
    let out = cli
        .run_async(&["ratelimit", "show", limit, id], CLI_TIMEOUT)
        .await;
    assert!(out.ok, "{out:?}");
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("limit:"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Waits until `env` shows `want` as the bucket's limit.
async fn wait_for_limit(env: &TestEnv, limit: &str, id: &str, want: &str) {
    let cli = env.admin_cli();
    let mut last = String::new();
    let seen = eventually(WITHIN, EVERY, async || {
        last = bucket_limit(&cli, limit, id).await;
        (last == want).then_some(())
    })
    .await;
    assert!(
        seen.is_some(),
        "{limit} {id}: wanted {want:?}, still {last:?}"
    );
}

fn find<'a>(list: &'a Value, source: &str, limit: &str, id: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|o| o["source"] == source && o["limit"] == limit && o["id"] == id)
        .unwrap_or_else(|| panic!("no {source} override of {limit} {id} in {list:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overrides_added_on_one_instance_apply_on_the_other_without_a_reload() {
    let mut a = TestEnv::new(Db::Postgres).await;
    a.section("rate-limiting", LIMITS);
    // The overrides file of instance a: one range and one account (a bucket the database will
    // override too).
    let file = a.dir.path().join("overrides.yaml");
    std::fs::write(
        &file,
        "- limit: global\n  burst: 7\n  ids: [\"192.0.2.0/24\"]\n  comment: the lab\n- limit: order-creation\n  burst: 2\n  ids: [\"999999\"]\n",
    )
    .unwrap();
    a.top_level = format!("rate-limit-overrides: \"{}\"\n", file.display());
    a.start().await;
    let mut b = TestEnv::new(Db::Sqlite).await;
    b.section("database", &format!("  url: \"{}\"\n", a.database_url()));
    b.section("ca", &a.existing_ca_section());
    b.section("rate-limiting", LIMITS);
    b.root_path = a.root_path.clone();
    b.start().await;

    // Raised: an account refused on b is admitted once an override added through a applies.
    let mut busy = Raw::new(&b, Algorithm::Es256);
    busy.register().await;
    let busy_id = account_id(&busy);
    for i in 0..3 {
        let name = b.name(&format!("busy{i}"));
        assert_eq!(new_order(&busy, &name).await.status, 201);
    }
    let refused = new_order(&busy, &b.name("busy-refused")).await;
    assert_eq!(refused.status, 429, "{refused:?}");
    let added = cli(
        &a,
        &[
            "overrides",
            "add",
            "order-creation",
            &busy_id,
            "--burst",
            "20",
            "--count",
            "20",
            "--period",
            "1h",
            "--comment",
            "ticket 4711: nightly renewals",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(added["source"], "database");
    assert_eq!(added["status"], "active");
    assert_eq!(added["effective"]["burst"], 20);
    assert_eq!(added["default"]["burst"], 3);
    assert_eq!(added["comment"], "ticket 4711: nightly renewals");
    assert!(
        added["created_by"].as_str().unwrap().starts_with("alice"),
        "{added}"
    );
    let mut n = 0;
    let admitted = eventually(WITHIN, EVERY, async || {
        n += 1;
        let reply = new_order(&busy, &b.name(&format!("busy-again{n}"))).await;
        match reply.status {
            201 => Some(()),
            429 => None,
            _ => panic!("{reply:?}"),
        }
    })
    .await;
    assert!(admitted.is_some(), "b never applied the raised override");

    // Lowered: another account gets a burst of 1 on b.
    let mut quiet = Raw::new(&b, Algorithm::Es256);
    quiet.register().await;
    let quiet_id = account_id(&quiet);
    assert!(
        cli(
            &a,
            &[
                "overrides",
                "add",
                "order-creation",
                &quiet_id,
                "--burst",
                "1",
                "--comment",
                "misbehaving client"
            ]
        )
        .await
        .ok
    );
    wait_for_limit(&b, "order-creation", &quiet_id, "burst 1, 3 per 1h").await;
    assert_eq!(new_order(&quiet, &b.name("quiet1")).await.status, 201);
    assert_eq!(new_order(&quiet, &b.name("quiet2")).await.status, 429);

    // Removed: the default applies again on b.
    let removed = cli(&a, &["overrides", "remove", "order-creation", &busy_id]).await;
    assert!(removed.ok, "{removed:?}");
    wait_for_limit(&b, "order-creation", &busy_id, "burst 3, 3 per 1h").await;
    let again = cli(&a, &["overrides", "remove", "order-creation", &busy_id]).await;
    assert!(
        !again.ok && again.stderr.contains("does not exist"),
        "{again:?}"
    );

    // Expired: an override with an expiry applies, then stops applying, and is listed expired.
    let mut brief = Raw::new(&b, Algorithm::Es256);
    brief.register().await;
    let brief_id = account_id(&brief);
    let expiring = cli(
        &a,
        &[
            "overrides",
            "add",
            "order-creation",
            &brief_id,
            "--burst",
            "9",
            "--comment",
            "launch day",
            "--expires",
            "15s",
        ],
    )
    .await;
    assert!(expiring.ok, "{expiring:?}");
    wait_for_limit(&b, "order-creation", &brief_id, "burst 9, 3 per 1h").await;
    wait_for_limit(&b, "order-creation", &brief_id, "burst 3, 3 per 1h").await;
    let listed = cli(&a, &["overrides", "list", "--json"]).await.json();
    assert_eq!(
        find(&listed, "database", "order-creation", &brief_id)["status"],
        "expired"
    );

    // Refused: no comment (the command line, then the server for a blank one), an id of the
    // wrong kind, a second override of one bucket, removing one of the file.
    let missing = cli(
        &a,
        &["overrides", "add", "order-creation", "5", "--burst", "2"],
    )
    .await;
    assert!(
        !missing.ok && missing.stderr.contains("--comment"),
        "{missing:?}"
    );
    let blank = cli(
        &a,
        &[
            "overrides",
            "add",
            "order-creation",
            "5",
            "--burst",
            "2",
            "--comment",
            "  ",
        ],
    )
    .await;
    assert!(
        !blank.ok && blank.stderr.contains("a comment is required"),
        "{blank:?}"
    );
    let wrong_kind = cli(
        &a,
        &[
            "overrides",
            "add",
            "global",
            "12345",
            "--burst",
            "2",
            "--comment",
            "x",
        ],
    )
    .await;
    assert!(
        !wrong_kind.ok && wrong_kind.stderr.contains("per IP"),
        "{wrong_kind:?}"
    );
    let twice = cli(
        &a,
        &[
            "overrides",
            "add",
            "order-creation",
            &quiet_id,
            "--burst",
            "2",
            "--comment",
            "again",
        ],
    )
    .await;
    assert!(
        !twice.ok && twice.stderr.contains("already overrides"),
        "{twice:?}"
    );
    let file_one = cli(&a, &["overrides", "remove", "global", "192.0.2.0/24"]).await;
    assert!(
        !file_one.ok && file_one.stderr.contains("edit the file"),
        "{file_one:?}"
    );

    // Both sources listed together; a bucket both name takes the database's numbers.
    assert!(
        cli(
            &a,
            &[
                "overrides",
                "add",
                "order-creation",
                "999999",
                "--burst",
                "4",
                "--comment",
                "replaces the file's for now"
            ]
        )
        .await
        .ok
    );
    let listed = cli(&a, &["overrides", "list", "--json"]).await.json();
    let lab = find(&listed, "file", "global", "192.0.2.0/24");
    assert_eq!(lab["status"], "active");
    assert_eq!(lab["effective"]["burst"], 7);
    assert_eq!(
        find(&listed, "file", "order-creation", "999999")["status"],
        "shadowed"
    );
    assert_eq!(
        find(&listed, "database", "order-creation", "999999")["status"],
        "active"
    );
    assert_eq!(
        bucket_limit(&a.admin_cli(), "order-creation", "999999").await,
        "burst 4, 3 per 1h"
    );
    let shown = cli(
        &a,
        &["overrides", "show", "order-creation", "999999", "--json"],
    )
    .await
    .json();
    assert_eq!(shown.as_array().unwrap().len(), 2, "{shown:#}");
    let table = cli(&a, &["overrides", "list"]).await;
    assert!(table.ok, "{table:?}");
    let header = table.stdout.lines().next().unwrap();
    assert!(
        header.contains("SOURCE") && header.contains("COMMENT"),
        "{header}"
    );
    assert!(
        table.stdout.contains("ticket") || table.stdout.contains("misbehaving client"),
        "{}",
        table.stdout
    );

    // Each change is one audit record naming who made it.
    let records = cli(&a, &["audit", "list", "--json", "--limit", "1000"])
        .await
        .json();
    let changes: Vec<&Value> = records
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "limits_changed")
        .collect();
    let actions = |action: &str| {
        changes
            .iter()
            .filter(|r| r["detail"]["action"] == action)
            .count()
    };
    assert_eq!(actions("override_added"), 4, "{changes:#?}");
    assert_eq!(actions("override_removed"), 1, "{changes:#?}");
    for record in &changes {
        assert_eq!(record["actor"]["type"], "admin", "{record}");
        assert_eq!(record["actor"]["operator"], "alice", "{record}");
    }
    let raise = changes
        .iter()
        .find(|r| r["detail"]["action"] == "override_added" && r["detail"]["id"] == busy_id)
        .unwrap();
    assert_eq!(raise["detail"]["limit"], "order-creation");
    assert_eq!(raise["detail"]["comment"], "ticket 4711: nightly renewals");
}
