//! The running server holds its SQLite database exclusively: online backups go through it
//! (`certeasy admin backup`, `POST /admin/backup`), and a second server on the same data
//! directory refuses to start. The real binaries, as operators run them.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use acme_core::ids::Serial;
use instant_acme::ChallengeType;
use instant_acme::Identifier;
use serde_json::Value;
use testkit::admin_cli::CliOutput;

use crate::certcheck::pem_ders;
use crate::flow::issue;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;

/// An upper bound for one CLI run or a refused start; each takes well under a second.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `certeasy admin <args>` against the environment's admin listener, naming the URL and
/// the token file (not the config), without blocking the runtime the test's server may run on.
async fn admin(env: &TestEnv, args: &[&str]) -> CliOutput {
    env.remote_admin_cli().run_async(args, TIMEOUT).await
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The name part of a backup file: `certeasy-YYYYMMDDTHHMMSSZ` (and a suffix) plus `.db`.
fn stamp(t: time::OffsetDateTime) -> String {
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    t.format(&format).unwrap()
}

/// The serial of the leaf of `chain`.
fn leaf_serial(chain: &str) -> Serial {
    let der = pem_ders(chain).remove(0);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    Serial::from_bytes(cert.raw_serial().to_vec())
}

async fn metric_sum(env: &TestEnv, metric: &str, filter: &str) -> f64 {
    let text = reqwest::get(format!("http://{}/metrics", env.admin_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(metric) && l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn admin_backup_copies_the_running_servers_database() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.spawn_binary().await;
    let account = env.account().await;
    let name = env.name("backup");
    let chain = issue(
        &env,
        &account,
        &[Identifier::Dns(name.clone())],
        ChallengeType::Http01,
    )
    .await;
    let serial = leaf_serial(&chain);
    let data = env.dir.path().join("data");
    let backups = data.join("backups");
    assert!(!backups.exists(), "no backup directory before a backup");

    // ---- --json: one document naming a private file under <data-dir>/backups ----
    let before = time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap();
    let out = admin(&env, &["backup", "--json"]).await;
    let after = time::OffsetDateTime::now_utc();
    assert!(
        out.ok,
        "backup failed: {}{}\n--- server log ---\n{}",
        out.stdout,
        out.stderr,
        env.server_log()
    );
    let doc: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {}", out.stdout));
    let path = PathBuf::from(doc["path"].as_str().expect("path"));
    assert_eq!(path.parent(), Some(backups.as_path()), "{doc}");
    assert_eq!(mode(&backups), 0o700);
    assert_eq!(mode(&path), 0o600, "{}", path.display());
    let file = path.file_name().unwrap().to_str().unwrap().to_owned();
    // The name carries the second the copy started, in UTC.
    let named = (before.unix_timestamp()..=after.unix_timestamp())
        .map(|t| time::OffsetDateTime::from_unix_timestamp(t).unwrap())
        .any(|t| file == format!("certeasy-{}.db", stamp(t)));
    assert!(named, "{file} is not certeasy-<a second of the run>.db");
    let bytes = doc["bytes"].as_u64().expect("bytes");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes);
    assert!(bytes > 0);
    let seconds = doc["seconds"].as_f64().expect("seconds");
    assert!((0.0..60.0).contains(&seconds), "{seconds}");

    // The live database cannot be opened while the server runs; the copy can.
    let live = storage::Storage::connect(&env.database_url()).await;
    assert!(
        matches!(live, Err(storage::error::Error::InUse(_))),
        "{:?}",
        live.err()
    );
    let copy = storage::Storage::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let cert = copy
        .certificate_by_serial(&serial)
        .await
        .unwrap()
        .expect("the issued certificate is in the backup");
    assert_eq!(cert.chain_pem.trim(), chain.trim());
    copy.close().await;

    // ---- a name taken already: the next suffix, and the file there is left alone ----
    // Squat every name of the next minute, so the next backup starts on a taken second.
    let now = time::OffsetDateTime::now_utc();
    let squatted: Vec<PathBuf> = (0..60)
        .map(|s| {
            backups.join(format!(
                "certeasy-{}.db",
                stamp(now + time::Duration::seconds(s))
            ))
        })
        .filter(|p| *p != path)
        .collect();
    for p in &squatted {
        std::fs::write(p, "not a backup").unwrap();
    }
    let out = admin(&env, &["backup"]).await;
    assert!(out.ok, "backup failed: {}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one human line: {}", out.stdout);
    let second = lines[0]
        .split_whitespace()
        .map(PathBuf::from)
        .find(|p| p.parent() == Some(backups.as_path()))
        .unwrap_or_else(|| panic!("no path under {} in {:?}", backups.display(), lines[0]));
    let second_name = second.file_name().unwrap().to_str().unwrap();
    assert!(second_name.ends_with("-2.db"), "{second_name}");
    assert_eq!(mode(&second), 0o600);
    let copy = storage::Storage::connect(&format!("sqlite://{}", second.display()))
        .await
        .unwrap();
    assert!(copy.certificate_by_serial(&serial).await.unwrap().is_some());
    copy.close().await;
    for p in &squatted {
        assert_eq!(std::fs::read_to_string(p).unwrap(), "not a backup");
    }

    assert_eq!(
        metric_sum(&env, "certeasy_backups_total", "outcome=\"done\"").await,
        2.0
    );
    assert_eq!(
        metric_sum(&env, "certeasy_backups_total", "outcome=\"failed\"").await,
        0.0
    );
    let log = env.server_log();
    assert!(
        log.contains("database backed up") && log.contains(&file),
        "the backup is logged:\n{log}"
    );
}

#[tokio::test]
async fn a_second_server_on_the_same_data_directory_refuses_to_start() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.spawn_binary().await;
    let database = env.dir.path().join("data/certeasy.db");

    // Same configuration, other listeners: only the database can stop it.
    let mut second = tokio::process::Command::new(env!("CARGO_BIN_EXE_certeasy"));
    second
        .args(["serve", "--config"])
        .arg(&env.config_path)
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--admin-listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--crl-listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(TIMEOUT, second.output())
        .await
        .expect("the second server exits instead of serving")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&database.display().to_string()),
        "the error names the database file:\n{stderr}"
    );
    assert!(
        stderr.contains("in use by another process"),
        "the error says why:\n{stderr}"
    );

    // The first server goes on serving, database included.
    let ready = reqwest::get(format!("http://{}/readyz", env.admin_addr()))
        .await
        .unwrap();
    assert!(ready.status().is_success());
    let account = env.account().await;
    let name = env.name("after");
    let chain = issue(
        &env,
        &account,
        &[Identifier::Dns(name)],
        ChallengeType::Http01,
    )
    .await;
    let out = admin(
        &env,
        &[
            "certificates",
            "show",
            &leaf_serial(&chain).to_hex(),
            "--json",
        ],
    )
    .await;
    assert!(out.ok, "{}{}", out.stdout, out.stderr);
}

#[tokio::test]
async fn admin_backup_on_postgres_points_to_pg_dump() {
    let mut env = TestEnv::new(Db::Postgres).await;
    env.start().await;
    let response = reqwest::Client::new()
        .post(format!("http://{}/admin/backup", env.admin_addr()))
        .bearer_auth(env.admin_token())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::CONFLICT);
    let text = response.text().await.unwrap();
    assert!(text.contains("pg_dump"), "{text}");

    let out = admin(&env, &["backup", "--json"]).await;
    assert!(!out.ok);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(out.stderr.contains("pg_dump"), "{}", out.stderr);

    // Nothing written, not even the directory.
    assert!(!env.dir.path().join("data/backups").exists());
}
