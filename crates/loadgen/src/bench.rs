//! `bench`: the benchmark driver. Every run starts its server afresh (a new Pebble process, a
//! new Certeasy data directory and database), drives it with `run` on fixed loopback ports,
//! keeps the JSON result, and the part ends with `report` (table, chart, docs/performance.md).
//!
//! A run in which some flow stalled is set aside (kept in `stalled/`, counted in the report's
//! first line) and run again, up to `--reruns` times: Pebble 2.4 sometimes deadlocks under
//! concurrent finalizations (its MemoryStore lock), and a deadlocked run says nothing about its
//! throughput.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use anyhow::Context;
use anyhow::bail;
use clap::Parser;
use clap::ValueEnum;

use crate::cli::BenchArgs;
use crate::cli::BenchPart;
use crate::cli::Cli;
use crate::cli::Command as CliCommand;
use crate::cli::FlamegraphArgs;
use crate::cli::ReportArgs;
use crate::cli::RunArgs;
use crate::cli::Scenario;
use crate::fill::psql;
use crate::flame;
use crate::machine;
use crate::machine::Machine;
use crate::report;
use crate::run;
use crate::servers;
use crate::servers::CerteasyInstance;
use crate::servers::Ports;
use crate::servers::Process;
use crate::servers::Started;

mod year;

/// Lines of a server's log shown when a run fails.
const LOG_TAIL: usize = 20;
/// The chart's font; the part installs it when missing.
const FONT_PACKAGE: &str = "fonts-dejavu-core";

/// `scenario:concurrency`, one item of `--scenarios`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Item {
    scenario: Scenario,
    concurrency: usize,
}

impl FromStr for Item {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (scenario, concurrency) = s
            .split_once(':')
            .with_context(|| format!("{s:?}: write scenario:concurrency, e.g. full:8"))?;
        let scenario = Scenario::from_str(scenario, false)
            .map_err(|e| anyhow::anyhow!("{s:?}: unknown scenario ({e})"))?;
        let concurrency = concurrency
            .parse()
            .with_context(|| format!("{s:?}: the concurrency is not a number"))?;
        Ok(Self {
            scenario,
            concurrency,
        })
    }
}

fn items(list: &str) -> anyhow::Result<Vec<Item>> {
    list.split_whitespace().map(Item::from_str).collect()
}

/// Logs a step to stderr the way every part does.
fn log(line: &str) {
    eprintln!("\n==> {line}");
}

/// The part's settings and where it writes.
struct Bench {
    args: BenchArgs,
    ports: Ports,
    certeasy: PathBuf,
    /// `<target-dir>/bench-<part>`.
    out: PathBuf,
}

pub(crate) fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let ports = Ports::from_base(args.port_base)?;
    let certeasy = match &args.certeasy {
        Some(path) => path.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("the load generator's own path has no directory")?
            .join("certeasy"),
    };
    let target = match &args.target_dir {
        Some(dir) => dir.clone(),
        None => std::env::var_os("HOME")
            .map(PathBuf::from)
            .context("neither --target-dir (CARGO_TARGET_DIR) nor HOME is set")?
            .join(".cache/certeasy-target"),
    };
    let name = match args.part {
        BenchPart::Issuance | BenchPart::IssuanceReport => "issuance",
        BenchPart::Scale => "scale",
        BenchPart::Cluster => "cluster",
        BenchPart::Testmode => "testmode",
        BenchPart::Baseline | BenchPart::BaselineReport => "baseline",
        BenchPart::Year => "year",
    };
    let bench = Bench {
        out: target.join(format!("bench-{name}")),
        args,
        ports,
        certeasy,
    };
    match bench.args.part {
        BenchPart::Issuance => bench.issuance(),
        BenchPart::IssuanceReport => bench.issuance_report(),
        BenchPart::Scale => bench.scale(),
        BenchPart::Cluster => bench.cluster(),
        BenchPart::Testmode => bench.testmode(),
        BenchPart::Baseline => bench.baseline(),
        BenchPart::BaselineReport => bench.baseline_report(),
        BenchPart::Year => bench.year(),
    }
}

impl Bench {
    /// Checks the binaries and the machine, and empties the results directory.
    fn prepare(&self, raw: bool) -> anyhow::Result<()> {
        if !self.certeasy.is_file() {
            bail!(
                "no certeasy binary at {} (build it, or give --certeasy)",
                self.certeasy.display()
            );
        }
        if self.out.exists() {
            std::fs::remove_dir_all(&self.out)
                .with_context(|| format!("emptying {}", self.out.display()))?;
        }
        std::fs::create_dir_all(if raw {
            self.out.join("raw")
        } else {
            self.out.clone()
        })?;
        machine::settle(
            self.args.settle_load,
            Duration::from_secs(self.args.settle_secs),
        )
    }

    /// Records and prints the machine and the settings of the part.
    fn machine(&self, settings: String) -> anyhow::Result<Machine> {
        let machine = Machine::now(settings)?;
        eprint!("{}", machine.text());
        machine.write(&self.out)?;
        Ok(machine)
    }

    fn settings(&self, rounds: u32, duration: f64, scenarios: &str) -> String {
        format!(
            "rounds: {rounds}; duration: {duration} s; scenarios: {scenarios}; poll: {} ms",
            self.args.poll_ms
        )
    }

    /// The `run` of one scenario against `directory` (its defaults are the command's own).
    fn run_args(&self, directory: &str, ca_root: &Path, label: &str) -> anyhow::Result<RunArgs> {
        let cli = Cli::try_parse_from([
            "certeasy-loadgen",
            "run",
            "--directory",
            directory,
            "--ca-root",
            &ca_root.display().to_string(),
        ])?;
        let CliCommand::Run(mut args) = cli.command else {
            bail!("`run` parsed as another command");
        };
        args.poll_ms = self.args.poll_ms;
        args.stall_after = self.args.stall_after;
        args.accounts = self.args.new_order_accounts;
        args.http01_listen = servers::loopback(self.ports.http01);
        args.dns_listen = servers::loopback(self.ports.dns);
        args.label = label.to_owned();
        Ok(args)
    }

    fn raw(&self, label: &str, item: Item, round: u32) -> PathBuf {
        self.out.join("raw").join(format!(
            "{label}-{}-c{}-r{round}.json",
            item.scenario.name(),
            item.concurrency
        ))
    }

    // ---- issuance -------------------------------------------------------------------------

    /// Pebble against Certeasy, rounds alternating which goes first, so that drift on a shared
    /// machine hits both alike; then the flame graph and the report.
    fn issuance(&self) -> anyhow::Result<()> {
        machine::need("pebble", "pebble")?;
        machine::need(FONT_PACKAGE, &self.args.font.display().to_string())?;
        self.prepare(true)?;
        let scenarios = items(&self.args.scenarios)?;
        self.machine(self.settings(self.args.rounds, self.args.duration, &self.args.scenarios))?;
        for round in 1..=self.args.rounds {
            let order = if round % 2 == 1 {
                ["pebble", "certeasy"]
            } else {
                ["certeasy", "pebble"]
            };
            for &item in &scenarios {
                for label in order {
                    self.one_run(label, item, round)?;
                }
            }
        }
        if self.args.flame {
            self.flame()?;
        }
        self.issuance_report()
    }

    fn start(&self, label: &str) -> anyhow::Result<Started> {
        match label {
            "pebble" => servers::start_pebble(&self.out, &self.ports),
            _ => servers::start_certeasy(&self.out, &self.certeasy, &self.ports, label),
        }
    }

    /// One run of `item` on a fresh server, run again while a flow stalls (at most `--reruns`
    /// more times).
    fn one_run(&self, label: &str, item: Item, round: u32) -> anyhow::Result<()> {
        let result_path = self.raw(label, item, round);
        for attempt in 0..=self.args.reruns {
            log(&format!(
                "round {round}: {label}, {} x{} (load average {})",
                item.scenario.name(),
                item.concurrency,
                machine::load_now()
            ));
            let server = self.start(label)?;
            let mut args = self.run_args(&server.directory, &server.root, label)?;
            args.server_pids = vec![server.process.pid()];
            args.scenario = item.scenario;
            args.concurrency = item.concurrency;
            args.duration = self.args.duration;
            args.round = round;
            args.output = Some(result_path.clone());
            let result = match run::run_blocking(args) {
                Ok(result) => result,
                Err(error) => {
                    let log = servers::tail(&server.log(), LOG_TAIL);
                    server.process.stop()?;
                    return Err(error.context(format!("--- {label} log ---\n{log}")));
                }
            };
            let Started { process, dir, .. } = server;
            process.stop()?;
            if result.stalls == 0 {
                std::fs::remove_dir_all(&dir)?;
                return Ok(());
            }
            let stalled = self.out.join("stalled");
            std::fs::create_dir_all(&stalled)?;
            let kept = format!(
                "{label}-{}-c{}-r{round}-a{attempt}",
                item.scenario.name(),
                item.concurrency
            );
            std::fs::rename(&result_path, stalled.join(format!("{kept}.json")))?;
            std::fs::copy(dir.join("server.log"), stalled.join(format!("{kept}.log")))?;
            let mut list = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.out.join("stalled.txt"))?;
            writeln!(
                list,
                "{label} {} x{} round {round}",
                item.scenario.name(),
                item.concurrency
            )?;
            std::fs::remove_dir_all(&dir)?;
        }
        eprintln!(
            "{label} {} x{} round {round} stalled {} times more: no figure",
            item.scenario.name(),
            item.concurrency,
            self.args.reruns
        );
        Ok(())
    }

    /// Certeasy's full issuance at 32 concurrent under `perf record` (not part of the figures),
    /// drawn as `flamegraph.svg`.
    fn flame(&self) -> anyhow::Result<()> {
        machine::need("linux-perf", "perf")?;
        let secs = self.args.flame_secs;
        log(&format!(
            "profiling Certeasy's full issuance (perf, {secs} s, not part of the figures)"
        ));
        let server = servers::start_certeasy(&self.out, &self.certeasy, &self.ports, "certeasy")?;
        let data = self.out.join("perf.data");
        let perf = Process::spawn(
            "perf record",
            Command::new("perf")
                .args([
                    "record",
                    "-q",
                    "-e",
                    "cpu-clock",
                    "-F",
                    "299",
                    "--call-graph",
                ])
                .arg(&self.args.perf_callgraph)
                .arg("-p")
                .arg(server.process.pid().to_string())
                .arg("-o")
                .arg(&data)
                .args(["--", "sleep", &(secs + 1).to_string()]),
            &self.out.join("perf-record.log"),
        )?;
        let mut args = self.run_args(&server.directory, &server.root, "certeasy-profiled")?;
        args.scenario = Scenario::Full;
        args.concurrency = 32;
        args.duration = secs as f64;
        run::run_blocking(args)?;
        perf.wait()?;
        let Started { process, dir, .. } = server;
        process.stop()?;
        let script = self.out.join("perf.script");
        let status = Command::new("perf")
            .arg("script")
            .arg("-i")
            .arg(&data)
            .stdout(std::fs::File::create(&script)?)
            .stderr(Stdio::null())
            .status()
            .context("running perf script")?;
        if !status.success() {
            bail!("perf script failed: {status} (see perf-record.log)");
        }
        flame::flamegraph(&FlamegraphArgs {
            perf_script: script,
            output: self.out.join("flamegraph.svg"),
            title: format!("Certeasy: full issuance, 32 concurrent (perf, {secs} s)"),
        })?;
        std::fs::remove_dir_all(&dir)?;
        std::fs::remove_file(&data)?;
        Ok(())
    }

    /// The report of the issuance results in `out`, with the settings of the run that made
    /// them (`machine.json`), not of this invocation.
    fn issuance_report(&self) -> anyhow::Result<()> {
        let machine = Machine::read(&self.out)?;
        let extra = format!(
            "{}, Pebble {}; {}; cells are the median (min–max) over rounds",
            machine.settings,
            machine.pebble,
            stalled_summary(&self.out.join("stalled.txt"))?
        );
        self.report(&machine, "issuance-vs-pebble", "pebble", "certeasy", &extra)
    }

    /// Renders `raw/` into `table.md` (and the chart); with `--update-docs` also between the
    /// `marker` comments of docs/performance.md, and the images into docs/img/.
    fn report(
        &self,
        machine: &Machine,
        marker: &str,
        baseline: &str,
        subject: &str,
        extra: &str,
    ) -> anyhow::Result<()> {
        let preamble = self.out.join("preamble.md");
        std::fs::write(&preamble, machine.preamble(extra))?;
        let stalled = self.out.join("stalled");
        let img = self.args.docs.join("img");
        let args = ReportArgs {
            results: self.out.join("raw"),
            stalled: stalled.is_dir().then_some(stalled),
            baseline: baseline.to_owned(),
            subject: subject.to_owned(),
            markdown: self.out.join("table.md"),
            preamble: Some(preamble),
            chart: (marker != "scale").then(|| self.out.join(format!("{marker}.png"))),
            font: self.args.font.clone(),
            insert_into: self
                .args
                .update_docs
                .then(|| self.args.docs.join("performance.md")),
            marker: marker.to_owned(),
        };
        if self.args.update_docs {
            std::fs::create_dir_all(&img)?;
        }
        report::report(&args)?;
        if self.args.update_docs {
            if let Some(chart) = args.chart.filter(|c| c.is_file()) {
                std::fs::copy(&chart, img.join(format!("{marker}.png")))?;
            }
            let flame = self.out.join("flamegraph.svg");
            if flame.is_file() {
                std::fs::copy(&flame, img.join("certeasy-issuance-flamegraph.svg"))?;
            }
            log(&format!(
                "{} ({marker}) and {} updated",
                self.args.docs.join("performance.md").display(),
                img.display()
            ));
        }
        Ok(())
    }

    // ---- baseline -------------------------------------------------------------------------

    /// This build against `--baseline`, both on the same settings, rounds alternating which
    /// goes first; the report is `baseline`'s table (ratios are this build over the baseline).
    fn baseline(&self) -> anyhow::Result<()> {
        let Some(baseline) = &self.args.baseline else {
            bail!(
                "the baseline part needs --baseline (BENCH_BASELINE): an earlier certeasy binary"
            );
        };
        if !baseline.is_file() {
            bail!("no baseline certeasy binary at {}", baseline.display());
        }
        self.prepare(true)?;
        let scenarios = items(&self.args.baseline_scenarios)?;
        self.machine(self.settings(
            self.args.rounds,
            self.args.duration,
            &self.args.baseline_scenarios,
        ))?;
        let drop_keys: Vec<String> = self
            .args
            .baseline_drop_keys
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(str::to_owned)
            .collect();
        let mut shared = Shared::new(&self.args.postgres_url, &self.args.redis_url);
        for round in 1..=self.args.rounds {
            let order = if round % 2 == 1 {
                ["baseline", "certeasy"]
            } else {
                ["certeasy", "baseline"]
            };
            for &item in &scenarios {
                for label in order {
                    let database_url = if self.args.baseline_postgres {
                        Some(shared.create_database(round)?)
                    } else {
                        None
                    };
                    let (binary, drop) = if label == "baseline" {
                        (baseline.as_path(), drop_keys.as_slice())
                    } else {
                        (self.certeasy.as_path(), &[][..])
                    };
                    let server = servers::start_certeasy_build(
                        &self.out,
                        binary,
                        &self.ports,
                        label,
                        database_url,
                        drop,
                    )?;
                    let result = self.measure(server, label, item, round);
                    shared.release();
                    result?;
                }
            }
        }
        self.baseline_report()
    }

    /// One run of `item` on `server`, which is stopped afterwards.
    fn measure(&self, server: Started, label: &str, item: Item, round: u32) -> anyhow::Result<()> {
        log(&format!(
            "round {round}: {label}, {} x{} (load average {})",
            item.scenario.name(),
            item.concurrency,
            machine::load_now()
        ));
        let mut args = self.run_args(&server.directory, &server.root, label)?;
        args.server_pids = vec![server.process.pid()];
        args.scenario = item.scenario;
        args.concurrency = item.concurrency;
        args.duration = self.args.duration;
        args.round = round;
        args.output = Some(self.raw(label, item, round));
        let result = run::run_blocking(args);
        let log_tail = servers::tail(&server.log(), LOG_TAIL);
        let Started { process, dir, .. } = server;
        process.stop()?;
        result.map_err(|error| error.context(format!("--- {label} log ---\n{log_tail}")))?;
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    fn baseline_report(&self) -> anyhow::Result<()> {
        let machine = Machine::read(&self.out)?;
        let database = if self.args.baseline_postgres {
            "PostgreSQL"
        } else {
            "SQLite"
        };
        let extra = format!(
            "{}; this build against the baseline build on {database}; cells are the median \
             (min–max) over rounds",
            machine.settings
        );
        self.report(&machine, "baseline", "baseline", "certeasy", &extra)
    }

    // ---- scale ----------------------------------------------------------------------------

    /// `--scale-accounts` accounts, then `--scale-orders` orders (no validation), Certeasy on
    /// SQLite: its RSS.
    fn scale(&self) -> anyhow::Result<()> {
        machine::need(FONT_PACKAGE, &self.args.font.display().to_string())?;
        self.prepare(true)?;
        let (accounts, orders, concurrency) = (
            self.args.scale_accounts,
            self.args.scale_orders,
            self.args.scale_concurrency,
        );
        let machine = self.machine(self.settings(
            self.args.rounds,
            self.args.duration,
            &self.args.scenarios,
        ))?;
        log(&format!(
            "scale: {accounts} accounts, then {orders} orders (no validation), Certeasy on SQLite"
        ));
        let server = servers::start_certeasy(&self.out, &self.certeasy, &self.ports, "certeasy")?;
        let mut args = self.run_args(&server.directory, &server.root, "certeasy")?;
        args.server_pids = vec![server.process.pid()];
        args.scenario = Scenario::Scale;
        args.accounts = accounts;
        args.orders = orders;
        args.concurrency = concurrency;
        args.output = Some(self.out.join("raw/certeasy-scale.json"));
        if let Err(error) = run::run_blocking(args) {
            let log = servers::tail(&server.log(), LOG_TAIL);
            return Err(error.context(format!("--- certeasy log ---\n{log}")));
        }
        eprintln!(
            "data dir: {:.1} MiB",
            dir_bytes(&server.dir.join("data"))? as f64 / (1024.0 * 1024.0)
        );
        let Started { process, dir, .. } = server;
        process.stop()?;
        std::fs::remove_dir_all(&dir)?;
        self.report(
            &machine,
            "scale",
            "certeasy",
            "certeasy",
            &format!("{accounts} accounts and {orders} orders on SQLite, {concurrency} concurrent"),
        )
    }

    // ---- cluster --------------------------------------------------------------------------

    /// Two Certeasy instances on one PostgreSQL database and Redis, behind the load
    /// generator's TCP round-robin proxy, against one instance behind the same proxy; and one
    /// on PostgreSQL + Redis against one on the SQLite default.
    fn cluster(&self) -> anyhow::Result<()> {
        machine::need(FONT_PACKAGE, &self.args.font.display().to_string())?;
        self.prepare(true)?;
        let rounds = self.args.cluster_rounds.unwrap_or(self.args.rounds);
        let duration = self.args.cluster_duration.unwrap_or(self.args.duration);
        let scenarios = items(&self.args.cluster_scenarios)?;
        let machine =
            self.machine(self.settings(rounds, duration, &self.args.cluster_scenarios))?;
        for round in 1..=rounds {
            let order = if round % 2 == 1 {
                [Setup::Sqlite, Setup::Instances(1), Setup::Instances(2)]
            } else {
                [Setup::Instances(2), Setup::Instances(1), Setup::Sqlite]
            };
            for &item in &scenarios {
                for setup in order {
                    self.cluster_run(setup, item, round, duration)?;
                }
            }
        }
        let network = if self.args.cluster_db_delay_us == 0 {
            String::new()
        } else {
            format!(
                ", PostgreSQL reached through a proxy delaying each direction {} µs",
                self.args.cluster_db_delay_us
            )
        };
        self.report(
            &machine,
            "cluster",
            "certeasy-1",
            "certeasy-2",
            &format!(
                "{rounds} rounds of {duration} s per scenario; PostgreSQL + Redis, one instance \
                 vs two behind one TCP round-robin proxy{network}"
            ),
        )?;
        self.report(
            &machine,
            "postgres-vs-sqlite",
            "certeasy-sqlite",
            "certeasy-1",
            &format!(
                "{rounds} rounds of {duration} s per scenario, behind the same proxy; one \
                 instance on the embedded SQLite default vs one on PostgreSQL + Redis{network}"
            ),
        )
    }

    fn cluster_run(
        &self,
        setup: Setup,
        item: Item,
        round: u32,
        duration: f64,
    ) -> anyhow::Result<()> {
        let label = setup.label();
        log(&format!(
            "round {round}: {label}, {} x{} (load average {})",
            item.scenario.name(),
            item.concurrency,
            machine::load_now()
        ));
        let dir = servers::fresh_dir(&self.out, &label)?;
        // Every resource the run makes is released by `Shared::drop`, whatever fails.
        let mut shared = Shared::new(&self.args.postgres_url, &self.args.redis_url);
        let mut db_proxy = None;
        let (database_url, redis) = match setup {
            Setup::Sqlite => (None, None),
            Setup::Instances(_) => {
                let mut url = shared.create_database(round)?;
                shared.used_redis = true;
                if self.args.cluster_db_delay_us != 0 {
                    // The instances reach PostgreSQL through a proxy that delays each
                    // direction, as a database on another host would answer.
                    let (proxied, backend) = via_proxy(&url, self.ports.db_proxy)?;
                    let mut proxy = self.proxy(
                        &dir,
                        "db-proxy",
                        self.ports.db_proxy,
                        &[backend],
                        self.args.cluster_db_delay_us,
                    )?;
                    proxy.wait_port(self.ports.db_proxy)?;
                    db_proxy = Some(proxy);
                    url = proxied;
                }
                (
                    Some(url),
                    Some((self.args.redis_url.clone(), shared.prefix.clone())),
                )
            }
        };
        let mut instances = Vec::new();
        for i in 1..=setup.count() {
            let (listen, admin) = if i == 1 {
                (self.ports.acme, self.ports.admin)
            } else {
                (self.ports.acme2, self.ports.admin2)
            };
            let instance = CerteasyInstance {
                listen,
                admin,
                external: self.ports.proxy,
                database_url: database_url.clone(),
                redis: redis.clone(),
            };
            let config = servers::certeasy_config(&dir, &self.ports, &instance);
            let path = servers::write_certeasy_config(&dir, &config)?;
            let mut process = Process::spawn(
                "certeasy",
                Command::new(&self.certeasy)
                    .arg("serve")
                    .arg("--config")
                    .arg(&path),
                &dir.join(format!("server-{i}.log")),
            )?;
            // The first instance creates the CA (and migrates the database); the others load it.
            process.wait_port(listen)?;
            instances.push((process, listen));
        }
        let backends: Vec<String> = instances
            .iter()
            .map(|(_, port)| servers::loopback(*port).to_string())
            .collect();
        let mut proxy = self.proxy(&dir, "proxy", self.ports.proxy, &backends, 0)?;
        proxy.wait_port(self.ports.proxy)?;
        let directory = format!("https://localhost:{}/directory", self.ports.proxy);
        let mut args = self.run_args(&directory, &dir.join("data/ca/root.pem"), &label)?;
        args.server_pids = instances.iter().map(|(p, _)| p.pid()).collect();
        args.scenario = item.scenario;
        args.concurrency = item.concurrency;
        args.duration = duration;
        args.round = round;
        args.output = Some(self.raw(&label, item, round));
        let outcome = run::run_blocking(args);
        proxy.stop()?;
        for (process, _) in instances {
            process.stop()?;
        }
        if let Some(proxy) = db_proxy {
            proxy.stop()?;
        }
        if let Err(error) = outcome {
            let logs: String = (1..=setup.count())
                .map(|i| servers::tail(&dir.join(format!("server-{i}.log")), LOG_TAIL))
                .collect::<Vec<_>>()
                .join("\n");
            return Err(error.context(format!("--- {label} logs ---\n{logs}")));
        }
        shared.release();
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    /// This program's `proxy` command as a process of its own (its CPU is not the load
    /// generator's, nor the servers').
    fn proxy(
        &self,
        dir: &Path,
        name: &str,
        port: u16,
        backends: &[String],
        delay_us: u64,
    ) -> anyhow::Result<Process> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .arg("proxy")
            .arg("--listen")
            .arg(servers::loopback(port).to_string())
            .arg("--delay-us")
            .arg(delay_us.to_string());
        for backend in backends {
            command.arg("--backend").arg(backend);
        }
        Process::spawn(name, &mut command, &dir.join(format!("{name}.log")))
    }

    // ---- testmode -------------------------------------------------------------------------

    /// `certeasy serve --test-mode` as a client's CI starts it (flags only, no configuration
    /// file, state in its own temporary directory) under full issuance: the test instance must
    /// never deadlock, so any stalled flow fails the part.
    fn testmode(&self) -> anyhow::Result<()> {
        self.prepare(false)?;
        let concurrency = self.args.testmode_concurrency;
        let secs = self.args.testmode_duration.unwrap_or(self.args.duration);
        self.machine(self.settings(self.args.rounds, self.args.duration, &self.args.scenarios))?;
        log(&format!(
            "test mode: full issuance x{concurrency} for {secs} s (load average {})",
            machine::load_now()
        ));
        let info_path = self.out.join("info.json");
        let ports = &self.ports;
        // Its stdout is the JSON object saying where it listens, its stderr the log.
        let mut server = Process::spawn_split(
            "certeasy serve --test-mode",
            Command::new(&self.certeasy)
                .args(["serve", "--test-mode", "--json", "--no-authz-reuse"])
                .arg("--listen")
                .arg(servers::loopback(ports.acme).to_string())
                .arg("--admin-listen")
                .arg(servers::loopback(ports.admin).to_string())
                .arg("--crl-listen")
                .arg(servers::loopback(servers::crl_port(ports.acme)).to_string())
                .arg("--http-port")
                .arg(ports.http01.to_string())
                .arg("--tls-alpn-port")
                .arg(ports.tls_alpn.to_string())
                .arg("--dns-server")
                .arg(servers::loopback(ports.dns).to_string()),
            &info_path,
            &self.out.join("server.log"),
        )?;
        server.wait_file(&info_path)?;
        let info: TestModeInfo = serde_json::from_str(&std::fs::read_to_string(&info_path)?)
            .with_context(|| format!("reading {}", info_path.display()))?;
        let mut args = self.run_args(&info.directory, &info.root, "certeasy-test-mode")?;
        args.server_pids = vec![server.pid()];
        args.scenario = Scenario::Full;
        args.concurrency = concurrency;
        args.duration = secs;
        args.output = Some(self.out.join("testmode.json"));
        let result = match run::run_blocking(args) {
            Ok(result) => result,
            Err(error) => {
                let log = servers::tail(&self.out.join("server.log"), LOG_TAIL);
                return Err(error.context(format!("--- server log ---\n{log}")));
            }
        };
        server.stop()?;
        if info.data_dir.exists() {
            bail!(
                "test mode left its state directory {} behind",
                info.data_dir.display()
            );
        }
        println!(
            "test mode, full issuance x{concurrency}, {secs} s: {} flows, {} errors, {} stalls",
            result.flows, result.errors, result.stalls
        );
        if result.stalls != 0 {
            bail!(
                "test mode stalled under load: see {}",
                self.out.join("server.log").display()
            );
        }
        Ok(())
    }
}

/// Which servers a cluster run starts.
#[derive(Debug, Clone, Copy)]
enum Setup {
    /// One instance on the embedded default (SQLite, limits in memory): the baseline of the
    /// PostgreSQL figures.
    Sqlite,
    /// This many instances on one fresh PostgreSQL database and Redis.
    Instances(u8),
}

impl Setup {
    fn label(self) -> String {
        match self {
            Self::Sqlite => "certeasy-sqlite".to_owned(),
            Self::Instances(n) => format!("certeasy-{n}"),
        }
    }

    fn count(self) -> u8 {
        match self {
            Self::Sqlite => 1,
            Self::Instances(n) => n,
        }
    }
}

/// A run's database on the shared PostgreSQL and its keys on the shared Redis, dropped and
/// deleted when the run ends (never a flush: both servers are shared).
struct Shared {
    admin_url: String,
    redis_url: String,
    /// A fresh prefix per run.
    prefix: String,
    database: Option<String>,
    /// Set once the run used Redis.
    used_redis: bool,
}

/// A name no other run of this machine has (the process id and the clock).
fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{}_{:x}", std::process::id(), nanos % (1 << 40))
}

impl Shared {
    fn new(admin_url: &str, redis_url: &str) -> Self {
        Self {
            admin_url: admin_url.to_owned(),
            redis_url: redis_url.to_owned(),
            prefix: format!("certeasy-loadgen-{}:", unique()),
            database: None,
            used_redis: false,
        }
    }

    /// Creates a fresh database; its URL.
    fn create_database(&mut self, round: u32) -> anyhow::Result<String> {
        let name = format!("certeasy_loadgen_{round}_{}", unique());
        psql(&self.admin_url, &format!("CREATE DATABASE {name}"))?;
        self.database = Some(name.clone());
        let (base, _) = self
            .admin_url
            .rsplit_once('/')
            .context("the PostgreSQL URL names no database")?;
        Ok(format!("{base}/{name}"))
    }

    /// Drops the database and deletes the run's Redis keys; errors are printed, not returned,
    /// so that the next run still starts.
    fn release(&mut self) {
        if let Some(name) = self.database.take()
            && let Err(error) = psql(
                &self.admin_url,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            )
        {
            eprintln!("dropping {name}: {error:#}");
        }
        if std::mem::take(&mut self.used_redis)
            && let Err(error) = delete_keys(&self.redis_url, &self.prefix)
        {
            eprintln!("deleting Redis keys {}*: {error:#}", self.prefix);
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.release();
    }
}

/// Deletes the keys under `prefix` (and only those).
fn delete_keys(url: &str, prefix: &str) -> anyhow::Result<()> {
    let output = Command::new("redis-cli")
        .args(["-u", url, "--scan", "--pattern"])
        .arg(format!("{prefix}*"))
        .output()
        .context("running redis-cli")?;
    if !output.status.success() {
        bail!("redis-cli --scan: {}", output.status);
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let keys: Vec<&str> = text.lines().filter(|k| !k.is_empty()).collect();
    for chunk in keys.chunks(500) {
        let status = Command::new("redis-cli")
            .args(["-u", url, "del"])
            .args(chunk)
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("redis-cli del: {status}");
        }
    }
    Ok(())
}

/// `url` with its host and port replaced by the database proxy's; and the original
/// `host:port`, the proxy's backend. The user and the database are kept.
fn via_proxy(url: &str, proxy_port: u16) -> anyhow::Result<(String, String)> {
    let (scheme, rest) = url
        .split_once("://")
        .with_context(|| format!("{url}: no scheme"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (user, host) = match authority.rsplit_once('@') {
        Some((user, host)) => (format!("{user}@"), host),
        None => (String::new(), authority),
    };
    let backend: std::net::SocketAddr = host
        .parse()
        .with_context(|| format!("{url}: the database proxy needs an IP address and port"))?;
    Ok((
        format!("{scheme}://{user}{}/{path}", servers::loopback(proxy_port)),
        backend.to_string(),
    ))
}

/// What `certeasy serve --test-mode --json` prints once ready.
#[derive(Debug, serde::Deserialize)]
struct TestModeInfo {
    directory: String,
    root: PathBuf,
    #[serde(rename = "data-dir")]
    data_dir: PathBuf,
}

/// "no run stalled", or which runs were set aside and how often, for the report's first line.
fn stalled_summary(list: &Path) -> anyhow::Result<String> {
    let text = match std::fs::read_to_string(list) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", list.display())),
    };
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        // "label scenario xN round R": the run without its round.
        let run: Vec<&str> = line.split_whitespace().take(3).collect();
        *counts.entry(run.join(" ")).or_default() += 1;
    }
    if counts.is_empty() {
        return Ok("no run stalled".to_owned());
    }
    let mut summary = "runs set aside because a flow stalled and run again: ".to_owned();
    for (i, (run, n)) in counts.iter().enumerate() {
        let _ = write!(summary, "{}{run} {n} times", if i > 0 { ", " } else { "" });
    }
    Ok(summary)
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_bytes(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::Item;
    use super::items;
    use super::stalled_summary;
    use super::via_proxy;
    use crate::cli::Scenario;

    #[test]
    fn scenario_lists_parse() {
        assert_eq!(
            items("full:8  new-account:32").expect("parses"),
            vec![
                Item {
                    scenario: Scenario::Full,
                    concurrency: 8
                },
                Item {
                    scenario: Scenario::NewAccount,
                    concurrency: 32
                },
            ]
        );
        assert!(items("full").is_err());
        assert!(items("fast:8").is_err());
        assert!(items("full:x").is_err());
    }

    #[test]
    fn set_aside_runs_are_counted_by_run() {
        let dir = std::env::temp_dir().join(format!("loadgen-stalled-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let list = dir.join("stalled.txt");
        assert_eq!(stalled_summary(&list).expect("absent"), "no run stalled");
        std::fs::write(
            &list,
            "pebble full x8 round 1\npebble full x32 round 1\npebble full x32 round 2\n",
        )
        .expect("write");
        assert_eq!(
            stalled_summary(&list).expect("reads"),
            "runs set aside because a flow stalled and run again: pebble full x32 2 times, \
             pebble full x8 1 times"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn the_database_url_goes_through_the_proxy() {
        assert_eq!(
            via_proxy("postgres://postgres@127.0.0.1:5432/db_1", 18417).expect("parses"),
            (
                "postgres://postgres@127.0.0.1:18417/db_1".to_owned(),
                "127.0.0.1:5432".to_owned()
            )
        );
        assert!(via_proxy("postgres://db.example:5432/x", 1).is_err());
    }
}
