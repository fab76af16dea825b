//! End-to-end issuance figures.
//!
//! - `lego`: wall time of one full issuance by the real `lego` binary (new account, order,
//!   http-01, finalize, download) against the real `certeasy serve` binary; median of
//!   `BENCH_LEGO_RUNS` (default 5).
//! - `sqlite`, `postgres`: throughput of `BENCH_ACCOUNTS` (20) instant-acme accounts ×
//!   `BENCH_ORDERS` (10) orders each, `BENCH_CONCURRENCY` (40) at a time, http-01, against the
//!   server started in this process; certificates per second, p50/p95 latency of one issuance,
//!   and the peak RSS of this process (server and clients).
//!
//! Clients poll every [`POLL`] instead of honouring `Retry-After` (at least one second), so the
//! figures measure the server rather than client sleeps. Rate limits: loopback is whitelisted
//! and the per-account order limits are raised above what the run needs. Arguments select the
//! parts (default: all). Prints `RESULT name=value` lines for `scripts/bench.sh`.

use std::net::Ipv4Addr;
use std::path::Path;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use acme_core::clock::SystemClock;
use anyhow::Context;
use anyhow::bail;
use instant_acme::Account;
use instant_acme::AuthorizationStatus;
use instant_acme::ChallengeType;
use instant_acme::Identifier;
use instant_acme::NewAccount;
use instant_acme::NewOrder;
use instant_acme::OrderStatus;
use testkit::dns::TestDnsServer;
use testkit::http01::Http01Responder;
use testkit::ports::free_port;
use testkit::postgres::PgDatabase;
use tokio::process::Command;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// How often clients poll an order.
const POLL: Duration = Duration::from_millis(20);
/// A bound on every single issuance and process run.
const TIMEOUT: Duration = Duration::from_secs(120);

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The configuration file of a bench server.
fn write_config(
    dir: &Path,
    acme_port: u16,
    admin_port: u16,
    dns: &TestDnsServer,
    http_port: u16,
    database_url: Option<&str>,
) -> anyhow::Result<PathBuf> {
    let mut yaml = format!(
        "data-dir: \"{data}\"\n\
         server:\n  listen: \"127.0.0.1:{acme_port}\"\n  admin-listen: \"127.0.0.1:{admin_port}\"\n  \
         external-url: \"https://localhost:{acme_port}\"\n  tls-names: [\"localhost\", \"127.0.0.1\"]\n\
         validation:\n  dns-servers: [\"{dns}\"]\n  http-port: {http_port}\n  allow-loopback: true\n  timeout: 5s\n\
         logging:\n  level: \"warn\"\n\
         crl:\n  listen: \"127.0.0.1:0\"\n\
         rate-limiting:\n  whitelist: [\"127.0.0.1\", \"::1\"]\n  order-creation:\n    order-burst: 1000\n    \
         orders-per-account-per-hour: 1000\n    san-budget-per-account-per-hour: 1000\n",
        data = dir.join("data").display(),
        dns = dns.addr(),
    );
    if let Some(url) = database_url {
        yaml.push_str(&format!("database:\n  url: \"{url}\"\n"));
    }
    let path = dir.join("certeasy.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index]
}

async fn healthy(admin_port: u16, child: &mut tokio::process::Child) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()?;
    let url = format!("http://127.0.0.1:{admin_port}/healthz");
    for _ in 0..300 {
        if let Some(status) = child.try_wait()? {
            bail!("certeasy exited early with {status}");
        }
        if matches!(client.get(&url).send().await, Ok(r) if r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("certeasy did not become healthy")
}

/// Full issuances by the real lego against the real binary, one after the other.
async fn lego(runs: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let dns = TestDnsServer::start().await?;
    let (acme_port, admin_port, http_port) = (free_port(), free_port(), free_port());
    let config = write_config(dir.path(), acme_port, admin_port, &dns, http_port, None)?;
    let log = std::fs::File::create(dir.path().join("server.log"))?;
    let mut server = Command::new(env!("CARGO_BIN_EXE_certeasy"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    healthy(admin_port, &mut server).await?;
    let root = dir.path().join("data/ca/root.pem");
    let mut seconds = Vec::new();
    for run in 0..runs {
        let name = format!("lego{run}.{}.certeasy.test", std::process::id());
        dns.set_a(&name, Ipv4Addr::LOCALHOST);
        let mut cmd = Command::new("lego");
        cmd.env("LEGO_CA_CERTIFICATES", &root)
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .arg("--server")
            .arg(format!("https://localhost:{acme_port}/directory"))
            .args(["--accept-tos", "--email", "lego@example.com", "--path"])
            .arg(dir.path().join(format!("lego{run}")))
            .args(["--domains", &name, "--http", "--http.port"])
            .arg(format!("127.0.0.1:{http_port}"))
            .arg("run")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let started = Instant::now();
        let out = tokio::time::timeout(TIMEOUT, cmd.output())
            .await
            .context("lego timed out")??;
        let elapsed = started.elapsed().as_secs_f64();
        if !out.status.success() {
            bail!(
                "lego failed:\n{}{}\n--- server log ---\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default()
            );
        }
        let crt = dir
            .path()
            .join(format!("lego{run}/certificates/{name}.crt"));
        if !std::fs::read_to_string(&crt)?.contains("BEGIN CERTIFICATE") {
            bail!("lego wrote no certificate");
        }
        println!("lego run {run}: {elapsed:.3} s");
        seconds.push(elapsed);
    }
    server.kill().await?;
    println!("RESULT lego_issuance_s_median={:.3}", median(&mut seconds));
    Ok(())
}

/// One order for one name, answered through the http-01 responder, polled until the certificate
/// is downloaded. Returns the wall time.
async fn issue(account: &Account, http: &Http01Responder, name: String) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut order = account
        .new_order(&NewOrder::new(&[Identifier::Dns(name)]))
        .await?;
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz?;
        if authz.status == AuthorizationStatus::Valid {
            continue;
        }
        let mut challenge = authz
            .challenge(ChallengeType::Http01)
            .context("http-01 offered")?;
        http.add(&challenge.token, challenge.key_authorization().as_str());
        challenge.set_ready().await?;
    }
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match order.refresh().await?.status {
            OrderStatus::Ready => break,
            OrderStatus::Pending | OrderStatus::Processing => {}
            other => bail!("order became {other:?}: {:?}", order.state()),
        }
        if Instant::now() > deadline {
            bail!("order not ready in time");
        }
        tokio::time::sleep(POLL).await;
    }
    order.finalize().await?;
    loop {
        if let Some(chain) = order.certificate().await? {
            if !chain.contains("BEGIN CERTIFICATE") {
                bail!("no certificate in the chain");
            }
            break;
        }
        if Instant::now() > deadline {
            bail!("certificate not issued in time");
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Peak resident set of this process in KiB (`VmHWM`).
fn peak_rss_kib() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .context("no VmHWM")?;
    Ok(line.trim().trim_end_matches("kB").trim().parse()?)
}

/// Many concurrent issuances against the server in this process.
async fn throughput(label: &str, postgres: bool) -> anyhow::Result<()> {
    let accounts_n = env_or("BENCH_ACCOUNTS", 20);
    let orders_n = env_or("BENCH_ORDERS", 10);
    let concurrency = env_or("BENCH_CONCURRENCY", 40);
    let pg = if postgres {
        Some(PgDatabase::create("certeasy_bench_")?)
    } else {
        None
    };
    // Starts the peak over for this part (Linux: writing 5 resets VmHWM).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let dir = tempfile::tempdir()?;
    let dns = Arc::new(TestDnsServer::start().await?);
    let http = Arc::new(Http01Responder::start().await?);
    let (acme_port, admin_port) = (free_port(), free_port());
    let config_path = write_config(
        dir.path(),
        acme_port,
        admin_port,
        &dns,
        http.port(),
        pg.as_ref().map(PgDatabase::url),
    )?;
    let config = certeasy::config::load(&config_path)?;
    let server = certeasy::serve::start(&config, Some(&config_path), Arc::new(SystemClock)).await?;
    let root = dir.path().join("data/ca/root.pem");

    let started = Instant::now();
    let mut accounts = Vec::new();
    for _ in 0..accounts_n {
        let (account, _) = Account::builder_with_http(testkit::acme_http::nodelay_client(&root)?)
            .create(
                &NewAccount {
                    contact: &[],
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                server.directory_url.clone(),
                None,
            )
            .await?;
        accounts.push(account);
    }
    let accounts_s = started.elapsed().as_secs_f64();

    let permits = Arc::new(Semaphore::new(concurrency));
    let mut tasks = JoinSet::new();
    let started = Instant::now();
    for order in 0..orders_n {
        for (a, account) in accounts.iter().enumerate() {
            let name = format!("o{order}-a{a}.{label}.certeasy.test");
            dns.set_a(&name, Ipv4Addr::LOCALHOST);
            let (account, http, permits) =
                (account.clone(), Arc::clone(&http), Arc::clone(&permits));
            tasks.spawn(async move {
                let _permit = permits.acquire_owned().await?;
                issue(&account, &http, name).await
            });
        }
    }
    let mut latencies = Vec::new();
    while let Some(result) = tasks.join_next().await {
        latencies.push(result??);
    }
    let wall = started.elapsed().as_secs_f64();
    let peak = peak_rss_kib()?;
    server.shutdown().await;
    drop(pg);

    latencies.sort_by(f64::total_cmp);
    let certificates = latencies.len();
    println!(
        "{label}: {accounts_n} accounts in {accounts_s:.2} s; {certificates} certificates in {wall:.2} s, {concurrency} concurrent"
    );
    println!(
        "RESULT issuance_{label}_certs_per_s={:.2}",
        certificates as f64 / wall
    );
    println!(
        "RESULT issuance_{label}_latency_s_p50={:.3}",
        percentile(&latencies, 0.50)
    );
    println!(
        "RESULT issuance_{label}_latency_s_p95={:.3}",
        percentile(&latencies, 0.95)
    );
    println!(
        "RESULT issuance_{label}_peak_rss_mib={:.1}",
        peak as f64 / 1024.0
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    // `cargo bench` passes `--bench`; every other argument names a part.
    let mut parts: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if parts.is_empty() {
        parts = vec!["lego".into(), "sqlite".into(), "postgres".into()];
    }
    for part in &parts {
        match part.as_str() {
            "lego" => lego(env_or("BENCH_LEGO_RUNS", 5)).await?,
            "sqlite" => throughput("sqlite", false).await?,
            "postgres" => throughput("postgres", true).await?,
            other => bail!("unknown part {other:?}: expected lego, sqlite or postgres"),
        }
    }
    Ok(())
}
