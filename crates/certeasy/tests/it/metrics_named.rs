//! The operators' view names only metrics that exist: every `certeasy_*` name in the Grafana
//! dashboard (`contrib/grafana/certeasy-dashboard.json`) and in the alert rules
//! (`contrib/prometheus/certeasy-alerts.yml`) is on the `/metrics` of a real running server, the
//! binary with Redis for its limits, after one issuance. A renamed metric, or one that appears
//! only after an event the server has not seen yet, fails here rather than as an empty panel or
//! an alert that can never fire.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use instant_acme::ChallengeType;
use instant_acme::Identifier;
use testkit::poll::eventually;

use crate::flow::issue;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::unique;

/// A file of the repository's `contrib/`.
fn contrib(path: &str) -> String {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../contrib")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// Every `certeasy_[a-z0-9_]+` in `text`: the names a query (or a description) uses, with the
/// suffix it uses (`_bucket` for a histogram's quantiles).
fn names_in(text: &str) -> BTreeSet<String> {
    const PREFIX: &str = "certeasy_";
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        // A prefix glued to a longer word (`xcerteasy_`) is not a metric name.
        let glued = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let tail = &rest[at + PREFIX.len()..];
        let len = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        if !glued && len > 0 {
            names.insert(format!("{PREFIX}{}", &tail[..len]));
        }
        rest = &tail[len..];
    }
    names
}

/// The names a scrape shows: each sample's name (`x_bucket`, `x_sum`, `x_count` for a
/// histogram) and each family's `# TYPE` name (`x`).
fn names_scraped(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|line| match line.strip_prefix("# TYPE ") {
            Some(typed) => typed.split(' ').next(),
            None if line.starts_with('#') => None,
            None => line.split(['{', ' ']).next(),
        })
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

async fn scrape(env: &TestEnv) -> String {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("http://{}/metrics", env.admin_addr()))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[test]
fn names_are_found_in_queries_and_scrapes() {
    let query = r#"sum by (le) (rate(certeasy_http_request_duration_seconds_bucket{job=~"$job"}[5m])) / certeasy_a1 + xcerteasy_no"#;
    assert_eq!(
        names_in(query),
        BTreeSet::from([
            "certeasy_a1".to_owned(),
            "certeasy_http_request_duration_seconds_bucket".to_owned(),
        ])
    );
    let scrape = "# TYPE certeasy_h histogram\ncerteasy_h_bucket{le=\"0.1\"} 0\ncerteasy_h_sum 0\ncerteasy_c 3\n";
    assert_eq!(
        names_scraped(scrape),
        BTreeSet::from(
            [
                "certeasy_h",
                "certeasy_h_bucket",
                "certeasy_h_sum",
                "certeasy_c"
            ]
            .map(str::to_owned)
        )
    );
}

#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_name_is_exported_on_sqlite() {
    every_named_metric_is_exported(Db::Sqlite).await;
}

/// PostgreSQL too: the job backlog is read with its own SQL there, and the audit gauges come
/// from the sealer.
#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_name_is_exported_on_postgres() {
    every_named_metric_is_exported(Db::Postgres).await;
}

async fn every_named_metric_is_exported(db: Db) {
    let dashboard = contrib("grafana/certeasy-dashboard.json");
    let rules = contrib("prometheus/certeasy-alerts.yml");
    // The dashboard is a JSON document Grafana can import.
    let parsed: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    assert!(parsed["panels"].as_array().is_some_and(|p| p.len() > 10));
    let mut wanted = names_in(&dashboard);
    wanted.extend(names_in(&rules));
    assert!(wanted.len() > 30, "too few names found: {wanted:?}");

    let mut env = TestEnv::new(db).await;
    let prefix = unique("metrics");
    env.section(
        "redis",
        &format!("  shards: [\"redis://127.0.0.1:6379\"]\n  key-prefix: \"{prefix}:\"\n"),
    );
    env.spawn_binary().await;
    let account = env.account().await;
    let name = env.name("metrics");
    issue(
        &env,
        &account,
        &[Identifier::Dns(name)],
        ChallengeType::Http01,
    )
    .await;

    // The CRLs are published and loaded within seconds of the start: poll until then.
    let mut missing = BTreeSet::new();
    let complete = eventually(
        Duration::from_secs(30),
        Duration::from_millis(200),
        async || {
            let exported = names_scraped(&scrape(&env).await);
            missing = wanted.difference(&exported).cloned().collect();
            missing.is_empty().then_some(())
        },
    )
    .await;
    assert!(
        complete.is_some(),
        "named in contrib/ but not exported: {missing:?}\n{}",
        scrape(&env).await
    );
    env.kill_binary();
}
