//! `bench year`: Certeasy after half a year of short-lived certificates, against itself on an
//! empty database and against Pebble, in the same run.
//!
//! The data set is `fill`'s (built once, cached outside the clone); every round takes a fresh
//! copy of it per backend, so that what one round writes never reaches the next. Each scenario
//! runs on a fresh server: Pebble, then Certeasy on an empty database and on the copy, for each
//! backend, the order rotating from round to round so that drift on a shared machine hits all
//! alike. Every Certeasy start is timed to "Certeasy is ready." with its peak RSS at that moment.
//! After the rounds, pruning is measured on a last copy: the real background pass
//! (`workers::pruner::pass`) with the clock moved past the retention of everything the data set
//! still holds, which makes a backlog of a week's orders, authorizations and challenges.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::BufRead as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use acme_core::clock::FakeClock;
use acme_core::clock::SharedClock;
use anyhow::Context;
use anyhow::bail;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use workers::pruner::BatchSize;
use workers::pruner::PrunerSettings;

use super::Bench;
use super::FONT_PACKAGE;
use super::Item;
use super::Shared;
use super::items;
use super::log;
use crate::cases::Grouped;
use crate::cases::ScenarioOrder;
use crate::cases::spread;
use crate::chart;
use crate::cli::FillBackend;
use crate::fill;
use crate::fill::FillParams;
use crate::fill::FillReport;
use crate::fill::FreshCopy;
use crate::machine;
use crate::procfs;
use crate::report;
use crate::servers;
use crate::servers::CerteasyInstance;
use crate::servers::Process;
use crate::servers::Started;
use crate::stats::Spread;

/// The marker of the part's section in docs/performance.md.
const MARKER: &str = "year";
/// How long a start on a large database may take before the part gives up.
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// What `certeasy serve` prints once it answers.
const READY_LINE: &str = "Certeasy is ready.";

/// One timed start of Certeasy.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Startup {
    label: String,
    seconds: f64,
    peak_rss_kib: u64,
}

/// The background pruner's pass over a backlog.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Pruning {
    backend: String,
    rows: u64,
    seconds: f64,
    rows_per_second: f64,
    longest_hold_ms: f64,
    last_batch_rows: u32,
    /// A write as a request makes it (an account created), every [`PROBE_EVERY`], timed to
    /// its commit: quiet on the same copy just before the pass, then during it. What the pass
    /// makes a request wait includes the checkpoints its writes bring, which its own hold
    /// leaves out.
    #[serde(default)]
    probe_quiet: Probe,
    #[serde(default)]
    probe_during: Probe,
}

/// The write probe's latencies, in milliseconds.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Probe {
    writes: usize,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// How often the write probe writes: about a new-account a second per core in a busy hour of a
/// large CA, a hundred times over, so that a stall of the writer is seen.
const PROBE_EVERY: Duration = Duration::from_millis(10);

/// How long the probe writes, unmeasured, before the quiet measurement.
const PROBE_WARM_UP: Duration = Duration::from_secs(1);

/// How long the probe measures the quiet copy before the pass.
const PROBE_QUIET: Duration = Duration::from_secs(2);

/// An operator's command on the running server, timed as the operator sees it (the CLI's whole
/// run: start, request, answer, output).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct AdminTiming {
    backend: String,
    command: String,
    /// Median of the runs.
    seconds: f64,
    runs: usize,
}

/// New-order at 8 concurrent on the half-year copy: quiet, during a bulk revocation (whose
/// revocations make every CRL shard stale, rebuilt each second while they come), and right after
/// it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct UnderLoad {
    backend: String,
    revoked: u64,
    revoke_seconds: f64,
    quiet_p99_ms: f64,
    quiet_flows_per_s: f64,
    during_p99_ms: f64,
    during_flows_per_s: f64,
    after_p99_ms: f64,
    after_flows_per_s: f64,
}

fn backend_name(backend: FillBackend) -> &'static str {
    match backend {
        FillBackend::Sqlite => "sqlite",
        FillBackend::Postgres => "postgres",
    }
}

fn backend_title(name: &str) -> &'static str {
    if name == "postgres" {
        "PostgreSQL"
    } else {
        "SQLite"
    }
}

fn backends(list: &str) -> anyhow::Result<Vec<FillBackend>> {
    list.split_whitespace()
        .map(|b| match b {
            "sqlite" => Ok(FillBackend::Sqlite),
            "postgres" => Ok(FillBackend::Postgres),
            other => bail!("{other:?}: a backend is sqlite or postgres"),
        })
        .collect()
}

impl Bench {
    pub(super) fn year(&self) -> anyhow::Result<()> {
        machine::need("pebble", "pebble")?;
        machine::need(FONT_PACKAGE, &self.args.font.display().to_string())?;
        self.prepare(true)?;
        let scenarios = items(&self.args.year_scenarios)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let mut datasets: BTreeMap<&'static str, FillReport> = BTreeMap::new();
        for backend in backends(&self.args.year_backends)? {
            let params = FillParams {
                backend,
                certificates: self.args.year_certificates,
                accounts: self.args.year_accounts,
                revocations: self.args.year_revocations,
                days: self.args.year_days,
                seed: 1,
            };
            log(&format!(
                "data set {} (built once, then cached)",
                params.key()
            ));
            let report = runtime.block_on(fill::dataset(
                &params,
                &fill::cache_dir(),
                &self.args.postgres_url,
                false,
                true,
            ))?;
            datasets.insert(backend_name(backend), report);
        }
        std::fs::write(
            self.out.join("datasets.json"),
            serde_json::to_string_pretty(&datasets)?,
        )?;
        let machine = self.machine(self.settings(
            self.args.rounds,
            self.args.duration,
            &self.args.year_scenarios,
        ))?;
        let mut startups = Vec::new();
        let copies_dir = self.out.join("copies");
        for round in 1..=self.args.rounds {
            let mut copies = BTreeMap::new();
            for (&name, report) in &datasets {
                log(&format!(
                    "round {round}: a fresh copy of the {name} data set"
                ));
                let copy = fill::fresh_copy(
                    report,
                    &self.args.postgres_url,
                    &copies_dir,
                    &format!("{name}_r{round}"),
                )?;
                copies.insert(name, copy);
            }
            let mut labels = vec!["pebble".to_owned()];
            for name in datasets.keys() {
                labels.push(format!("{name}-empty"));
                labels.push(format!("{name}-year"));
            }
            let turn = usize::try_from(round - 1).unwrap_or(0) % labels.len();
            labels.rotate_left(turn);
            for &item in &scenarios {
                for label in &labels {
                    if label == "pebble" {
                        self.one_run(label, item, round)?;
                        continue;
                    }
                    let (name, kind) = label
                        .split_once('-')
                        .context("a year label is <backend>-<kind>")?;
                    let mut shared = Shared::new(&self.args.postgres_url, &self.args.redis_url);
                    let (data_dir, database_url) = match (kind, copies.get(name)) {
                        ("year", Some(copy)) => (
                            Some(copy.data_dir.clone()),
                            (!copy.database_url.is_empty()).then(|| copy.database_url.clone()),
                        ),
                        _ if name == "postgres" => (None, Some(shared.create_database(round)?)),
                        _ => (None, None),
                    };
                    let (server, startup) =
                        self.start_timed(label, data_dir.as_deref(), database_url)?;
                    startups.push(startup);
                    let result = self.measure(server, label, item, round);
                    shared.release();
                    result?;
                }
            }
            for (_, copy) in copies {
                fill::drop_copy(copy, &self.args.postgres_url)?;
            }
        }
        std::fs::write(
            self.out.join("startups.json"),
            serde_json::to_string_pretty(&startups)?,
        )?;
        let mut prunings = Vec::new();
        for (&name, report) in &datasets {
            log(&format!("pruning a backlog on the {name} data set"));
            let copy = fill::fresh_copy(
                report,
                &self.args.postgres_url,
                &copies_dir,
                &format!("{name}_prune"),
            )?;
            let pruning = runtime.block_on(prune_backlog(name, &copy));
            fill::drop_copy(copy, &self.args.postgres_url)?;
            prunings.push(pruning?);
        }
        std::fs::write(
            self.out.join("pruning.json"),
            serde_json::to_string_pretty(&prunings)?,
        )?;
        let mut admin = Vec::new();
        let mut loads = Vec::new();
        for (&name, report) in &datasets {
            log(&format!("the operator's commands on the {name} data set"));
            let copy = fill::fresh_copy(
                report,
                &self.args.postgres_url,
                &copies_dir,
                &format!("{name}_admin"),
            )?;
            let result = self.at_size(name, &copy, &runtime);
            fill::drop_copy(copy, &self.args.postgres_url)?;
            let (timings, load) = result?;
            admin.extend(timings);
            loads.push(load);
        }
        std::fs::write(
            self.out.join("admin.json"),
            serde_json::to_string_pretty(&(&admin, &loads))?,
        )?;
        self.year_report(
            &machine.preamble(&machine.settings),
            &datasets,
            &startups,
            &prunings,
            &admin,
            &loads,
        )
    }

    /// On a running server over `copy`: the admin listings an operator runs, then new-order at 8
    /// concurrent quiet, during a bulk revocation of a day's certificates, and after it.
    fn at_size(
        &self,
        name: &str,
        copy: &FreshCopy,
        runtime: &tokio::runtime::Runtime,
    ) -> anyhow::Result<(Vec<AdminTiming>, UnderLoad)> {
        let sample = runtime.block_on(sample(copy))?;
        let label = format!("{name}-admin");
        let (server, _) =
            self.start_timed(&label, Some(&copy.data_dir), non_empty(&copy.database_url))?;
        let config = server
            .dir
            .join(format!("certeasy-{}.yaml", self.ports.acme));
        let admin = |args: &[&str]| -> anyhow::Result<f64> {
            let started = Instant::now();
            let output = Command::new(&self.certeasy)
                .arg("admin")
                .arg("--config")
                .arg(&config)
                .args(args)
                .output()
                .context("running certeasy admin")?;
            let seconds = started.elapsed().as_secs_f64();
            if !output.status.success() {
                bail!(
                    "certeasy admin {}: {}\n{}",
                    args.join(" "),
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            Ok(seconds)
        };
        let queries: Vec<(String, Vec<String>)> = vec![
            (
                "certificates list --expiring-within 7d --json".to_owned(),
                vec!["--expiring-within".into(), "7d".into()],
            ),
            (
                "certificates list --name <a name held> --json".to_owned(),
                vec!["--name".into(), sample.name.clone()],
            ),
            (
                "certificates list --name <a name never certified> --json".to_owned(),
                vec!["--name".into(), "never-certified.example".into()],
            ),
            (
                "certificates list --account <id> --json".to_owned(),
                vec!["--account".into(), sample.account.to_string()],
            ),
            (
                "certificates list --serial <hex> --json".to_owned(),
                vec!["--serial".into(), sample.serial.clone()],
            ),
        ];
        let mut timings = Vec::new();
        for (title, extra) in &queries {
            let mut args = vec!["certificates", "list", "--json"];
            args.extend(extra.iter().map(String::as_str));
            let mut runs = Vec::new();
            for _ in 0..3 {
                runs.push(admin(&args)?);
            }
            let median = Spread::of(&runs).map_or(0.0, |s| s.median);
            log(&format!("{name}: admin {title}: {median:.3} s"));
            timings.push(AdminTiming {
                backend: name.to_owned(),
                command: title.clone(),
                seconds: median,
                runs: runs.len(),
            });
        }
        let item = Item {
            scenario: crate::cli::Scenario::NewOrder,
            concurrency: 8,
        };
        let load = |tag: &str| -> anyhow::Result<crate::run::RunResult> {
            let mut args =
                self.run_args(&server.directory, &server.root, &format!("{name}-{tag}"))?;
            args.server_pids = vec![server.process.pid()];
            args.scenario = item.scenario;
            args.concurrency = item.concurrency;
            args.duration = self.args.duration;
            crate::run::run_blocking(args)
        };
        let quiet = load("quiet")?;
        let window = [
            "certificates".to_owned(),
            "revoke".to_owned(),
            "--reason".to_owned(),
            "superseded".to_owned(),
            "--issued-after".to_owned(),
            sample.window.0.clone(),
            "--issued-before".to_owned(),
            sample.window.1.clone(),
            "--json".to_owned(),
        ];
        let (during, revoke_seconds) = std::thread::scope(|scope| {
            let revoke = scope.spawn(|| {
                // The load's lanes are up first, so that the revocation lands in the middle.
                std::thread::sleep(Duration::from_secs(1));
                let args: Vec<&str> = window.iter().map(String::as_str).collect();
                admin(&args)
            });
            let during = load("during-revoke");
            let revoke = revoke
                .join()
                .map_err(|_| anyhow::anyhow!("the revoking thread panicked"))?;
            anyhow::Ok((during?, revoke?))
        })?;
        let after = load("after-revoke")?;
        log(&format!(
            "{name}: {} certificates revoked in {revoke_seconds:.1} s; new-order p99 {:.1} ms quiet, {:.1} during, {:.1} after",
            sample.in_window, quiet.latency_ms.p99, during.latency_ms.p99, after.latency_ms.p99
        ));
        let Started { process, dir, .. } = server;
        process.stop()?;
        std::fs::remove_dir_all(&dir)?;
        Ok((
            timings,
            UnderLoad {
                backend: name.to_owned(),
                revoked: sample.in_window,
                revoke_seconds,
                quiet_p99_ms: quiet.latency_ms.p99,
                quiet_flows_per_s: quiet.flows_per_s,
                during_p99_ms: during.latency_ms.p99,
                during_flows_per_s: during.flows_per_s,
                after_p99_ms: after.latency_ms.p99,
                after_flows_per_s: after.flows_per_s,
            },
        ))
    }

    /// Starts Certeasy with the bench's configuration, on `data_dir` (a copy of a data set) or a
    /// fresh one, and times it to "Certeasy is ready.", with its peak RSS then.
    fn start_timed(
        &self,
        label: &str,
        data_dir: Option<&Path>,
        database_url: Option<String>,
    ) -> anyhow::Result<(Started, Startup)> {
        let dir = servers::fresh_dir(&self.out, label)?;
        let instance = CerteasyInstance {
            listen: self.ports.acme,
            admin: self.ports.admin,
            external: self.ports.acme,
            database_url,
            redis: None,
        };
        let mut config = servers::certeasy_config(&dir, &self.ports, &instance);
        if let Some(data_dir) = data_dir {
            config.data_dir = data_dir.to_path_buf();
        }
        let root = config.data_dir.join("ca/root.pem");
        let path = servers::write_certeasy_config(&dir, &config)?;
        let log_path = dir.join("server.log");
        let started = Instant::now();
        let mut process = Process::spawn(
            "certeasy",
            Command::new(&self.certeasy)
                .arg("serve")
                .arg("--config")
                .arg(&path),
            &log_path,
        )?;
        loop {
            if printed(&log_path, READY_LINE)? {
                break;
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!(
                    "{label}: not ready after {} s\n{}",
                    READY_TIMEOUT.as_secs(),
                    servers::tail(&log_path, super::LOG_TAIL)
                );
            }
            process.alive().with_context(|| {
                format!("{label}\n{}", servers::tail(&log_path, super::LOG_TAIL))
            })?;
            std::thread::sleep(Duration::from_millis(5));
        }
        let seconds = started.elapsed().as_secs_f64();
        let (peak_rss_kib, _) = procfs::memory_kib(&[process.pid()])?;
        process.wait_port(self.ports.acme)?;
        log(&format!(
            "{label}: ready in {seconds:.2} s, peak RSS {} MiB",
            peak_rss_kib / 1024
        ));
        Ok((
            Started {
                process,
                root,
                directory: format!("https://localhost:{}/directory", self.ports.acme),
                dir,
            },
            Startup {
                label: label.to_owned(),
                seconds,
                peak_rss_kib,
            },
        ))
    }

    fn year_report(
        &self,
        preamble: &str,
        datasets: &BTreeMap<&'static str, FillReport>,
        startups: &[Startup],
        prunings: &[Pruning],
        admin: &[AdminTiming],
        loads: &[UnderLoad],
    ) -> anyhow::Result<()> {
        let grouped = report::load(&self.out.join("raw"))?;
        let mut md = String::new();
        md.push_str(preamble);
        md.push_str("\n\n");
        md.push_str(&dataset_table(datasets));
        md.push('\n');
        md.push_str(&comparison(&grouped, datasets));
        md.push('\n');
        md.push_str(&startup_table(startups));
        md.push('\n');
        md.push_str(&pruning_table(prunings));
        md.push('\n');
        md.push_str(&admin_table(admin));
        md.push('\n');
        md.push_str(&load_table(loads));
        let table = self.out.join("table.md");
        std::fs::write(&table, &md)?;
        for name in datasets.keys() {
            let png = self.out.join(format!("year-{name}.png"));
            chart::draw(
                &grouped,
                None,
                &format!("{name}-empty"),
                &format!("{name}-year"),
                &self.args.font,
                &png,
            )?;
            if self.args.update_docs {
                let img = self.args.docs.join("img");
                std::fs::create_dir_all(&img)?;
                std::fs::copy(&png, img.join(format!("year-{name}.png")))?;
            }
        }
        if self.args.update_docs {
            let doc = self.args.docs.join("performance.md");
            let text = std::fs::read_to_string(&doc)?;
            let updated = report::insert_between_markers(&text, MARKER, &md)?;
            std::fs::write(&doc, updated)?;
            log(&format!("{} ({MARKER}) updated", doc.display()));
        }
        println!("{md}");
        Ok(())
    }
}

/// Whether `path` holds a line `line`.
fn printed(path: &Path, line: &str) -> anyhow::Result<bool> {
    let Ok(file) = std::fs::File::open(path) else {
        return Ok(false);
    };
    for l in std::io::BufReader::new(file).lines() {
        if l?.trim_end() == line {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The real background pass on `copy`, its clock a week past the retention of everything the
/// data set holds: the backlog a pruner finds after a week switched off.
async fn prune_backlog(name: &str, copy: &FreshCopy) -> anyhow::Result<Pruning> {
    let config = certeasy::config::load(&copy.config_path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", copy.config_path.display()))?;
    let pool = storage::PoolSettings {
        max_connections: config.database.max_connections,
        sqlite_synchronous: config.database.sqlite_synchronous.into(),
    };
    let storage = storage::Storage::connect_with(&config.database_url(), pool)
        .await
        .context("opening the copy's database")?
        .with_evidence_retention(config.database.evidence_retention.time());
    let retention = config.database.prune_after.time();
    let at = OffsetDateTime::now_utc() + retention + time::Duration::days(8);
    let clock: SharedClock = Arc::new(FakeClock::new(at));
    let settings = PrunerSettings {
        retention,
        interval: config.database.prune_interval.std(),
        batch: config.database.prune_batch,
    };
    // The first writes on a fresh copy read cold pages (on PostgreSQL, 80 ms at the p99 of the
    // quiet probe): warmed first, the quiet figures are the steady state the pass is held to.
    run_probe(&storage, at, PROBE_WARM_UP, None).await?;
    let quiet = run_probe(&storage, at, PROBE_QUIET, None).await?;
    let mut size = BatchSize::new(settings.batch);
    let stop = CancellationToken::new();
    let probe = tokio::spawn({
        let storage = storage.clone();
        let stop = stop.clone();
        async move { run_probe(&storage, at, Duration::MAX, Some(stop)).await }
    });
    let started = Instant::now();
    let pass = workers::pruner::pass(
        &storage,
        &clock,
        &settings,
        &mut size,
        &CancellationToken::new(),
    )
    .await;
    let seconds = started.elapsed().as_secs_f64();
    stop.cancel();
    let during = probe.await??;
    storage.close().await;
    let Some((report, _)) = pass else {
        bail!("{name}: the pruner found nothing to prune a week past the retention");
    };
    let rows = report.orders
        + report.orders_trimmed
        + report.order_links
        + report.authorizations
        + report.challenges
        + report.evidence;
    Ok(Pruning {
        backend: name.to_owned(),
        rows,
        seconds,
        rows_per_second: rows as f64 / seconds.max(1e-9),
        longest_hold_ms: report.longest_hold.as_secs_f64() * 1e3,
        last_batch_rows: size.current(),
        probe_quiet: quiet,
        probe_during: during,
    })
}

/// Creates an account every [`PROBE_EVERY`] for `length` or until `stop`, timing each write.
async fn run_probe(
    storage: &storage::Storage,
    at: OffsetDateTime,
    length: Duration,
    stop: Option<CancellationToken>,
) -> anyhow::Result<Probe> {
    let started = Instant::now();
    let mut ticker = tokio::time::interval(PROBE_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut took = Vec::new();
    let mut n: u64 = 0;
    while started.elapsed() < length {
        match &stop {
            Some(stop) => tokio::select! {
                _ = ticker.tick() => {}
                () = stop.cancelled() => break,
            },
            None => {
                ticker.tick().await;
            }
        }
        n += 1;
        let new = storage::model::NewAccount {
            jwk_json: format!("{{\"kty\":\"EC\",\"probe\":{n}}}"),
            thumbprint: format!("probe-{}-{n}", started.elapsed().as_nanos()),
            contacts: Vec::new(),
            tos_agreed: true,
        };
        let audit = storage::audit::AuditEvent::new(
            storage::audit::AuditKind::AccountCreated,
            storage::audit::Actor::Account(acme_core::ids::AccountId(0)),
            "registered",
        );
        let write = Instant::now();
        storage.create_account(new, at, &audit).await?;
        took.push(write.elapsed().as_secs_f64() * 1e3);
    }
    took.sort_by(f64::total_cmp);
    let at_rank = |q: f64| {
        took.get(((took.len() as f64 * q).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0.0)
    };
    Ok(Probe {
        writes: took.len(),
        p50_ms: at_rank(0.5),
        p99_ms: at_rank(0.99),
        max_ms: took.last().copied().unwrap_or(0.0),
    })
}

fn non_empty(url: &str) -> Option<String> {
    (!url.is_empty()).then(|| url.to_owned())
}

/// What the operator's commands look for: a certificate from the middle of the half year (a
/// name it holds, its account, its serial), and a window of issue times holding about 10,000
/// certificates (the bulk revocation's selection) with their exact count.
struct Sample {
    name: String,
    account: i64,
    serial: String,
    window: (String, String),
    in_window: u64,
}

/// Certificates a bulk revocation takes.
const BULK_REVOCATION: u64 = 10_000;

async fn sample(copy: &FreshCopy) -> anyhow::Result<Sample> {
    use storage::model::CertificateFilter;
    use storage::model::Page;
    let config = certeasy::config::load(&copy.config_path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", copy.config_path.display()))?;
    let storage = storage::Storage::connect(&config.database_url())
        .await
        .context("opening the copy's database")?;
    let now = OffsetDateTime::now_utc();
    let middle = now - time::Duration::days(60);
    let page = storage
        .list_certificates(
            &CertificateFilter {
                issued_until: Some(middle),
                ..CertificateFilter::default()
            },
            Page {
                before: None,
                limit: 1,
            },
        )
        .await?;
    let Some(certificate) = page.into_iter().next() else {
        bail!("the data set holds no certificate issued before {middle}");
    };
    // A day holds certificates/days; the window is the share of a day that holds 10,000.
    let day = storage
        .count_certificates(&CertificateFilter {
            issued_from: Some(middle - time::Duration::days(1)),
            issued_until: Some(middle),
            ..CertificateFilter::default()
        })
        .await?
        .max(1);
    let seconds = (86_400 * BULK_REVOCATION / day).clamp(60, 86_400 * 30);
    let from = middle - time::Duration::seconds(i64::try_from(seconds).unwrap_or(86_400));
    let window = CertificateFilter {
        issued_from: Some(from),
        issued_until: Some(middle),
        revoked: Some(false),
        ..CertificateFilter::default()
    };
    let in_window = storage.count_certificates(&window).await?;
    storage.close().await;
    let rfc3339 = |t: OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .context("formatting a time")
    };
    Ok(Sample {
        name: certificate
            .identifiers
            .first()
            .map(|i| i.value().to_owned())
            .context("a certificate without a name")?,
        account: certificate.account_id.0,
        serial: certificate.serial.to_string(),
        window: (rfc3339(from)?, rfc3339(middle)?),
        in_window,
    })
}

fn admin_table(admin: &[AdminTiming]) -> String {
    let mut md = String::from(
        "| `certeasy admin …` on the half-year data set | backend | seconds (median of 3) |\n|---|---|---:|\n",
    );
    for a in admin {
        let _ = writeln!(
            md,
            "| `{}` | {} | {:.3} |",
            a.command,
            backend_title(&a.backend),
            a.seconds
        );
    }
    md
}

fn load_table(loads: &[UnderLoad]) -> String {
    let mut md = String::from(
        "| new-order ×8 on the half-year data set | bulk revocation | quiet: flows/s, p99 ms | during it | after it (CRLs rebuilt) |\n|---|---|---:|---:|---:|\n",
    );
    for l in loads {
        let _ = writeln!(
            md,
            "| {} | {} certificates in {:.1} s | {:.0}, {:.1} | {:.0}, {:.1} | {:.0}, {:.1} |",
            backend_title(&l.backend),
            l.revoked,
            l.revoke_seconds,
            l.quiet_flows_per_s,
            l.quiet_p99_ms,
            l.during_flows_per_s,
            l.during_p99_ms,
            l.after_flows_per_s,
            l.after_p99_ms
        );
    }
    md
}

fn dataset_table(datasets: &BTreeMap<&'static str, FillReport>) -> String {
    let mut md = String::from(
        "| data set | certificates | accounts | revocations | filled in | rows/s | database | bytes per certificate |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (name, r) in datasets {
        let _ = writeln!(
            md,
            "| {} ({} to {}){} | {} | {} | {} | {:.0} s | {:.0} | {:.2} GiB | {:.0} |",
            backend_title(name),
            r.first_day,
            r.last_day,
            if r.reused { ", cached" } else { "" },
            r.certificates,
            r.accounts,
            r.revocations,
            r.seconds,
            r.rows_per_second,
            r.database_bytes as f64 / f64::from(1u32 << 30),
            r.bytes_per_certificate
        );
    }
    md
}

type Figure = (
    &'static str,
    usize,
    fn(&crate::run::RunResult) -> Option<f64>,
);

fn figures(scenario: ScenarioOrder) -> Vec<Figure> {
    let mut rows: Vec<Figure> = vec![
        ("flows/s", 1, |r| Some(r.flows_per_s)),
        ("p99 ms", 1, |r| Some(r.latency_ms.p99)),
        ("server CPU ms / flow", 2, |r| {
            r.server.as_ref().map(|s| s.cpu_ms_per_flow)
        }),
    ];
    if scenario == ScenarioOrder::Full {
        rows.push(("errors + stalls", 0, |r| Some((r.errors + r.stalls) as f64)));
    }
    rows
}

/// Per backend: empty, half a year, their ratio, and half a year against Pebble.
fn comparison(grouped: &Grouped, datasets: &BTreeMap<&'static str, FillReport>) -> String {
    let mut md = String::from("| scenario | figure | Pebble |");
    let mut rule = String::from("|---|---|---:|");
    for name in datasets.keys() {
        let t = backend_title(name);
        let _ = write!(
            md,
            " {t} empty | {t} half a year | year / empty | year / Pebble |"
        );
        rule.push_str("---:|---:|---:|---:|");
    }
    md.push('\n');
    md.push_str(&rule);
    md.push('\n');
    for (case, by_label) in grouped {
        for (figure, decimals, read) in figures(case.scenario) {
            let pebble = spread(by_label.get("pebble"), read);
            let _ = write!(
                md,
                "| {} | {figure} | {} |",
                case.title(),
                report::cell(pebble, decimals)
            );
            for name in datasets.keys() {
                let empty = spread(by_label.get(&format!("{name}-empty")), read);
                let year = spread(by_label.get(&format!("{name}-year")), read);
                let _ = write!(
                    md,
                    " {} | {} | {} | {} |",
                    report::cell(empty, decimals),
                    report::cell(year, decimals),
                    report::ratio(year, empty),
                    report::ratio(year, pebble)
                );
            }
            md.push('\n');
        }
    }
    md
}

fn startup_table(startups: &[Startup]) -> String {
    let mut by_label: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for s in startups {
        let entry = by_label.entry(s.label.as_str()).or_default();
        entry.0.push(s.seconds);
        entry.1.push(s.peak_rss_kib as f64 / 1024.0);
    }
    let mut md = String::from(
        "| start of Certeasy | starts | to \"ready\", s | peak RSS at ready, MiB |\n|---|---:|---:|---:|\n",
    );
    for (label, (secs, rss)) in &by_label {
        let _ = writeln!(
            md,
            "| {label} | {} | {} | {} |",
            secs.len(),
            report::cell(Spread::of(secs), 2),
            report::cell(Spread::of(rss), 1)
        );
    }
    md
}

fn pruning_table(prunings: &[Pruning]) -> String {
    let mut md = String::from(
        "| pruning a week's backlog | rows deleted or trimmed | took, s | rows/s | longest writer hold, ms | batch at the end | a write's p99 / max, quiet, ms | during the pass, ms |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for p in prunings {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {:.0} | {:.1} | {} | {:.1} / {:.1} | {:.1} / {:.1} |",
            backend_title(&p.backend),
            p.rows,
            p.seconds,
            p.rows_per_second,
            p.longest_hold_ms,
            p.last_batch_rows,
            p.probe_quiet.p99_ms,
            p.probe_quiet.max_ms,
            p.probe_during.p99_ms,
            p.probe_during.max_ms,
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::backends;
    use super::printed;
    use crate::cli::FillBackend;

    #[test]
    fn backends_parse_and_refuse_unknown_names() {
        assert_eq!(
            backends("sqlite postgres").unwrap(),
            vec![FillBackend::Sqlite, FillBackend::Postgres]
        );
        assert!(backends("mysql").is_err());
    }

    #[test]
    fn the_ready_line_is_found_whole() {
        let dir = std::env::temp_dir().join(format!("certeasy-year-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("server.log");
        assert!(!printed(&log, "Certeasy is ready.").unwrap());
        std::fs::write(&log, "starting\nCerteasy is ready. almost\n").unwrap();
        assert!(!printed(&log, "Certeasy is ready.").unwrap());
        std::fs::write(&log, "starting\nCerteasy is ready.\n  ACME directory: x\n").unwrap();
        assert!(printed(&log, "Certeasy is ready.").unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
