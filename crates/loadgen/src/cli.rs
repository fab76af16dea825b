//! Command-line interface.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::ArgAction;
use clap::Args;
use clap::Parser;
use clap::Subcommand;
use clap::ValueEnum;
use clap::builder::BoolishValueParser;

/// ACME load generator for any RFC 8555 directory (Certeasy, Pebble, ...).
///
/// `run` answers http-01 itself (a responder on --http01-listen) and resolves every name under
/// --domain-suffix to 127.0.0.1 (a DNS server on --dns-listen): configure the server under test
/// to validate on that port and to use that resolver. `bench issuance` does all of it for Pebble
/// and Certeasy (`scripts/bench.sh issuance` builds both and calls it).
#[derive(Debug, Parser)]
#[command(name = "certeasy-loadgen", version, about, long_about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run one scenario against one or more directory URLs and print its figures.
    Run(RunArgs),
    /// A TCP round-robin proxy: each accepted connection goes to the next backend.
    Proxy(ProxyArgs),
    /// Aggregate the JSON results of several rounds into a markdown table and a PNG chart.
    Report(ReportArgs),
    /// Collapse `perf script` output and draw a flame graph (SVG).
    Flamegraph(FlamegraphArgs),
    /// Write a throw-away CA and a `localhost`/127.0.0.1 certificate for a server's HTTPS
    /// listener (Pebble's Debian package ships no test certificates).
    TlsCert(TlsCertArgs),
    /// Start the servers afresh for every run, drive them with `run`, and report: Certeasy
    /// against Pebble (`issuance`), Certeasy at scale, as a cluster, or in test mode.
    Bench(Box<BenchArgs>),
    /// Fill a fresh database with half a year of a CA's history (accounts, certificates signed
    /// by the data directory's CA, what pruning leaves of their orders, authorizations and
    /// challenges, validation evidence, revocations) through storage's own writes, and keep it
    /// in a cache for benches; reused when present and complete.
    Fill(FillArgs),
}

/// What one flow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Scenario {
    /// New account, new order, authorization, http-01 ready, poll until ready, finalize, poll
    /// until valid, download the certificate.
    Full,
    /// New account only (directory, nonce, newAccount).
    NewAccount,
    /// New order only, on --accounts accounts created beforehand (not timed).
    NewOrder,
    /// Create --accounts accounts and then --orders orders (no validation) as fast as
    /// possible, then report the server's peak and current RSS (needs --server-pid).
    Scale,
}

impl Scenario {
    /// The name `--scenario` takes (and result file names use).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::NewAccount => "new-account",
            Self::NewOrder => "new-order",
            Self::Scale => "scale",
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// ACME directory URL; repeat to spread flows over several servers round-robin (flow i uses
    /// URL i mod n), e.g. two instances sharing one database.
    #[arg(long = "directory", required = true)]
    pub(crate) directories: Vec<String>,

    /// PEM file of the root that signed the server's HTTPS certificate (trusted alone).
    #[arg(long)]
    pub(crate) ca_root: PathBuf,

    #[arg(long, value_enum, default_value = "full")]
    pub(crate) scenario: Scenario,

    /// Flows in flight at once (each lane runs its flows one after another on its own HTTP
    /// connection pool).
    #[arg(long, default_value_t = 8)]
    pub(crate) concurrency: usize,

    /// Start new flows for this many seconds (flows in flight then finish). Ignored when --flows
    /// is given.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) duration: f64,

    /// Run exactly this many flows instead of a duration.
    #[arg(long)]
    pub(crate) flows: Option<u64>,

    /// Accounts created before the timed part (new-order) or in the first step (scale).
    #[arg(long, default_value_t = 32)]
    pub(crate) accounts: u64,

    /// Orders of the scale scenario.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) orders: u64,

    /// Delay between two polls of an order. Retry-After is not honoured: the figures measure
    /// servers, not client sleeps.
    #[arg(long, default_value_t = 5)]
    pub(crate) poll_ms: u64,

    /// A flow still running after this many seconds is abandoned and counted as a stall.
    #[arg(long, default_value_t = 30.0)]
    pub(crate) stall_after: f64,

    /// PID of the server; repeat for several processes (their CPU and RSS are added up). CPU
    /// time is read from /proc/PID/stat before and after the timed part.
    #[arg(long = "server-pid")]
    pub(crate) server_pids: Vec<u32>,

    /// Where the http-01 responder listens; the server's http-01 port must be this port.
    #[arg(long, default_value = "127.0.0.1:5002")]
    pub(crate) http01_listen: SocketAddr,

    /// Where the DNS server listens (UDP and TCP); give it to the server as its resolver.
    #[arg(long, default_value = "127.0.0.1:8053")]
    pub(crate) dns_listen: SocketAddr,

    /// Every name under this suffix resolves to 127.0.0.1.
    #[arg(long, default_value = "loadgen.test")]
    pub(crate) domain_suffix: String,

    /// Speak HTTP/1.1 only (default: HTTP/2 when the server offers it through ALPN).
    #[arg(long)]
    pub(crate) http1: bool,

    /// Free text stored in the JSON result (e.g. the server's name), for `report`.
    #[arg(long, default_value = "server")]
    pub(crate) label: String,

    /// Round number stored in the JSON result, for `report`.
    #[arg(long, default_value_t = 1)]
    pub(crate) round: u32,

    /// Print one JSON object instead of the human-readable summary.
    #[arg(long)]
    pub(crate) json: bool,

    /// Also write the JSON object to this file.
    #[arg(long)]
    pub(crate) output: Option<PathBuf>,

    /// Tokio worker threads of the load generator.
    ///
    /// One by default: the load generator shares the machine with the server it measures, and on
    /// two cores a second runtime thread cost it 15 to 25 % more CPU per flow (wake-ups between
    /// its threads) against either server, without raising any scenario's throughput; one thread
    /// kept up with 5,500 new accounts and 700 full issuances a second (docs/performance.md).
    #[arg(long, default_value_t = 1)]
    pub(crate) threads: usize,
}

#[derive(Debug, Args)]
pub(crate) struct ProxyArgs {
    /// Address to accept connections on.
    #[arg(long)]
    pub(crate) listen: SocketAddr,
    /// Backend address; repeat for each backend.
    #[arg(long = "backend", required = true)]
    pub(crate) backends: Vec<SocketAddr>,
    /// Hold every chunk this many microseconds before passing it on, in each direction: a
    /// network between the two sides, e.g. a database on a host of its own (250 makes a round
    /// trip of about 0.5 ms plus the timer's slack). 0 passes data through at once.
    #[arg(long, default_value_t = 0)]
    pub(crate) delay_us: u64,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Directory holding the JSON results (`run --output`), any file name ending in `.json`.
    #[arg(long)]
    pub(crate) results: PathBuf,
    /// Directory holding the runs set aside because a flow stalled: for a case with no clean
    /// run of a server, the report gives that server's rate until its first stall instead.
    #[arg(long)]
    pub(crate) stalled: Option<PathBuf>,
    /// Label of the baseline server (the ratio's denominator).
    #[arg(long, default_value = "pebble")]
    pub(crate) baseline: String,
    /// Label of the measured server (the ratio's numerator).
    #[arg(long, default_value = "certeasy")]
    pub(crate) subject: String,
    /// Write the markdown here.
    #[arg(long)]
    pub(crate) markdown: PathBuf,
    /// Markdown put before the tables (e.g. the machine and date of the run).
    #[arg(long)]
    pub(crate) preamble: Option<PathBuf>,
    /// Draw the flows/s chart here (PNG).
    #[arg(long)]
    pub(crate) chart: Option<PathBuf>,
    /// TrueType font for the chart's text.
    #[arg(
        long,
        default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    )]
    pub(crate) font: PathBuf,
    /// Replace the text between `<!-- NAME:begin -->` and `<!-- NAME:end -->` of this file
    /// with the markdown (see --marker).
    #[arg(long)]
    pub(crate) insert_into: Option<PathBuf>,
    #[arg(long, default_value = "issuance-vs-pebble")]
    pub(crate) marker: String,
}

#[derive(Debug, Args)]
pub(crate) struct FlamegraphArgs {
    /// Output of `perf script` (from `perf record -g`).
    #[arg(long)]
    pub(crate) perf_script: PathBuf,
    /// SVG to write.
    #[arg(long)]
    pub(crate) output: PathBuf,
    #[arg(long, default_value = "Certeasy: full issuance")]
    pub(crate) title: String,
}

#[derive(Debug, Args)]
pub(crate) struct TlsCertArgs {
    /// Directory to write `root.pem`, `cert.pem` and `key.pem` into.
    #[arg(long)]
    pub(crate) out: PathBuf,
}

/// What `bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BenchPart {
    /// Pebble against Certeasy, rounds alternating which goes first; the table and chart of
    /// docs/performance.md, and a flame graph of Certeasy's full issuance.
    Issuance,
    /// Render the last `issuance` results again (no run).
    IssuanceReport,
    /// --scale-accounts accounts, then --scale-orders orders: Certeasy's RSS.
    Scale,
    /// Two instances (PostgreSQL + Redis) behind a TCP proxy against one, and one on
    /// PostgreSQL + Redis against one on the SQLite default.
    Cluster,
    /// `certeasy serve --test-mode` under full issuance: fails when any flow stalls.
    Testmode,
    /// This build against an earlier Certeasy build (--baseline), rounds alternating which goes
    /// first: what a change costs, on SQLite or (--baseline-postgres) PostgreSQL.
    Baseline,
    /// Render the last `baseline` results again (no run).
    BaselineReport,
    /// Half a year of short-lived certificates (`fill`'s data set, built once and cached) on
    /// SQLite and PostgreSQL against an empty database and Pebble: throughput, start-up, pruning,
    /// the operator's listings and issuance during a bulk revocation.
    Year,
}

/// Every setting has the environment variable `scripts/bench.sh` documents as its fallback.
/// Switches take `1`/`0` (also `true`/`false`, `yes`/`no`).
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    pub(crate) part: BenchPart,

    /// Rounds; each round runs every scenario on every server, the server order alternating
    /// from round to round.
    #[arg(long, env = "BENCH_ROUNDS", default_value_t = 3)]
    pub(crate) rounds: u32,
    /// Seconds each scenario starts new flows.
    #[arg(long, env = "BENCH_DURATION", default_value_t = 20.0)]
    pub(crate) duration: f64,
    /// `scenario:concurrency` items, separated by spaces.
    #[arg(
        long,
        env = "BENCH_SCENARIOS",
        default_value = "full:8 full:32 new-account:32 new-order:8"
    )]
    pub(crate) scenarios: String,
    /// Accounts made before the new-order scenario.
    #[arg(long, env = "BENCH_NEW_ORDER_ACCOUNTS", default_value_t = 32)]
    pub(crate) new_order_accounts: u64,
    /// Order poll interval (Retry-After is not honoured).
    #[arg(long, env = "BENCH_POLL_MS", default_value_t = 5)]
    pub(crate) poll_ms: u64,
    /// Seconds after which a flow counts as a stall.
    #[arg(long, env = "BENCH_STALL_AFTER", default_value_t = 10.0)]
    pub(crate) stall_after: f64,
    /// Times a run with a stalled flow is set aside and run again.
    #[arg(long, env = "BENCH_RERUNS", default_value_t = 2)]
    pub(crate) reruns: u32,
    /// Profile Certeasy's full issuance (perf) after the rounds of `issuance`.
    #[arg(long, env = "BENCH_FLAME", default_value = "1", action = ArgAction::Set,
          value_parser = BoolishValueParser::new())]
    pub(crate) flame: bool,
    /// Length of the profiled run, seconds.
    #[arg(long, env = "BENCH_FLAME_SECS", default_value_t = 10)]
    pub(crate) flame_secs: u64,
    /// `perf record --call-graph` mode.
    #[arg(long, env = "BENCH_PERF_CALLGRAPH", default_value = "dwarf,16384")]
    pub(crate) perf_callgraph: String,
    /// First of the loopback ports used (BASE to BASE+17).
    #[arg(long, env = "BENCH_PORT_BASE", default_value_t = 18400)]
    pub(crate) port_base: u16,
    /// Before the first round, wait until the 1-minute load average is below this...
    #[arg(long, env = "BENCH_SETTLE_LOAD", default_value_t = 0.5)]
    pub(crate) settle_load: f64,
    /// ...or this many seconds have passed.
    #[arg(long, env = "BENCH_SETTLE_SECS", default_value_t = 90)]
    pub(crate) settle_secs: u64,
    /// Write the table into docs/performance.md and the images into docs/img.
    #[arg(long, env = "BENCH_UPDATE_DOCS", default_value = "1", action = ArgAction::Set,
          value_parser = BoolishValueParser::new())]
    pub(crate) update_docs: bool,
    /// The documentation directory --update-docs writes into.
    #[arg(long, default_value = "docs")]
    pub(crate) docs: PathBuf,
    /// Accounts of the scale part.
    #[arg(long, env = "BENCH_SCALE_ACCOUNTS", default_value_t = 10_000)]
    pub(crate) scale_accounts: u64,
    /// Orders of the scale part.
    #[arg(long, env = "BENCH_SCALE_ORDERS", default_value_t = 100_000)]
    pub(crate) scale_orders: u64,
    /// Concurrency of the scale part.
    #[arg(long, env = "BENCH_SCALE_CONCURRENCY", default_value_t = 16)]
    pub(crate) scale_concurrency: usize,
    /// Rounds of the cluster part (default: --rounds).
    #[arg(long, env = "BENCH_CLUSTER_ROUNDS")]
    pub(crate) cluster_rounds: Option<u32>,
    /// Seconds of each cluster scenario (default: --duration).
    #[arg(long, env = "BENCH_CLUSTER_DURATION")]
    pub(crate) cluster_duration: Option<f64>,
    /// `scenario:concurrency` items of the cluster part.
    #[arg(
        long,
        env = "BENCH_CLUSTER_SCENARIOS",
        default_value = "full:32 new-order:32"
    )]
    pub(crate) cluster_scenarios: String,
    /// Cluster: hold PostgreSQL's traffic this many microseconds each way (the `proxy`
    /// command), for a database on a host of its own: 250 is a round trip of about 0.5 ms.
    #[arg(long, env = "BENCH_CLUSTER_DB_DELAY_US", default_value_t = 0)]
    pub(crate) cluster_db_delay_us: u64,
    /// Concurrent flows of the test-mode part.
    #[arg(long, env = "BENCH_TESTMODE_CONCURRENCY", default_value_t = 32)]
    pub(crate) testmode_concurrency: usize,
    /// Seconds of the test-mode part (default: --duration).
    #[arg(long, env = "BENCH_TESTMODE_DURATION")]
    pub(crate) testmode_duration: Option<f64>,
    /// PostgreSQL server (any database on it) the cluster part creates its databases on.
    #[arg(
        long,
        env = "CERTEASY_TEST_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pub(crate) postgres_url: String,
    /// Redis of the cluster part (keys under a fresh per-run prefix, removed after the run).
    #[arg(
        long,
        env = "BENCH_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub(crate) redis_url: String,
    /// The `certeasy` binary (default: next to this one, as a `cargo build` leaves it).
    #[arg(long, env = "BENCH_CERTEASY")]
    pub(crate) certeasy: Option<PathBuf>,
    /// The earlier `certeasy` binary the `baseline` part measures this one against.
    #[arg(long, env = "BENCH_BASELINE")]
    pub(crate) baseline: Option<PathBuf>,
    /// Configuration keys the baseline predates, dotted and comma-separated
    /// (`database.evidence-retention,ca.issuers`): left out of the baseline's file, so that it
    /// runs on its own defaults for them.
    #[arg(long, env = "BENCH_BASELINE_DROP_KEYS", default_value = "")]
    pub(crate) baseline_drop_keys: String,
    /// `scenario:concurrency` items of the year part.
    #[arg(
        long,
        env = "BENCH_YEAR_SCENARIOS",
        default_value = "full:8 full:32 new-order:8"
    )]
    pub(crate) year_scenarios: String,
    /// Backends of the year part, separated by spaces (sqlite, postgres).
    #[arg(long, env = "BENCH_YEAR_BACKENDS", default_value = "sqlite postgres")]
    pub(crate) year_backends: String,
    /// Certificates of the year part's data set (see `fill`).
    #[arg(long, env = "BENCH_YEAR_CERTIFICATES", default_value_t = 2_000_000)]
    pub(crate) year_certificates: u64,
    /// Accounts of the year part's data set.
    #[arg(long, env = "BENCH_YEAR_ACCOUNTS", default_value_t = 50_000)]
    pub(crate) year_accounts: u64,
    /// Revocations of the year part's data set.
    #[arg(long, env = "BENCH_YEAR_REVOCATIONS", default_value_t = 100_000)]
    pub(crate) year_revocations: u64,
    /// Simulated days of the year part's data set.
    #[arg(long, env = "BENCH_YEAR_DAYS", default_value_t = 180)]
    pub(crate) year_days: u32,
    /// `scenario:concurrency` items of the baseline part.
    #[arg(
        long,
        env = "BENCH_BASELINE_SCENARIOS",
        default_value = "full:8 full:32"
    )]
    pub(crate) baseline_scenarios: String,
    /// Run both builds of the baseline part on a fresh PostgreSQL database per run instead of
    /// SQLite.
    #[arg(long, env = "BENCH_BASELINE_POSTGRES", default_value = "0", action = ArgAction::Set,
          value_parser = BoolishValueParser::new())]
    pub(crate) baseline_postgres: bool,
    /// Results go to `<target-dir>/bench-<part>/` (raw JSON per run, the table, the chart,
    /// logs of a failed run).
    #[arg(long, env = "CARGO_TARGET_DIR")]
    pub(crate) target_dir: Option<PathBuf>,
    /// TrueType font for the chart's text.
    #[arg(
        long,
        default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    )]
    pub(crate) font: PathBuf,
}

/// The database a dataset is filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FillBackend {
    /// A SQLite file in the data directory (Certeasy's embedded default).
    Sqlite,
    /// A PostgreSQL database, kept as a template database to clone.
    Postgres,
}

/// `fill`: the dataset is keyed by these parameters and cached in
/// `${CERTEASY_BENCH_CACHE:-$HOME/.cache/certeasy-bench}/year-<key>/` (the data directory in
/// `data/`, a configuration in `certeasy.yaml`, `complete.json` written last); on PostgreSQL the
/// database is the template `certeasy_year_<key>`. Don't serve the cached copy itself: take a
/// fresh copy (`--copy-to`), as benches do.
#[derive(Debug, Args)]
pub(crate) struct FillArgs {
    /// The database to fill.
    #[arg(long, value_enum, default_value = "sqlite")]
    pub(crate) backend: FillBackend,
    /// Certificates issued over the period (evenly over the days).
    #[arg(long, default_value_t = 2_000_000)]
    pub(crate) certificates: u64,
    /// Accounts, registered over the first quarter of the period.
    #[arg(long, default_value_t = 50_000)]
    pub(crate) accounts: u64,
    /// Certificates revoked over the period, each while in force.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) revocations: u64,
    /// Simulated days, ending at today's midnight (UTC).
    #[arg(long, default_value_t = 180)]
    pub(crate) days: u32,
    /// Seed of the simulation: the same parameters and seed give the same history.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// PostgreSQL maintenance database: where the template database is created and dropped.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pub(crate) postgres_url: String,
    /// Rebuild the dataset even when a complete one is cached.
    #[arg(long)]
    pub(crate) force: bool,
    /// The cache directory (default `${CERTEASY_BENCH_CACHE:-$HOME/.cache/certeasy-bench}`).
    #[arg(long)]
    pub(crate) cache_dir: Option<PathBuf>,
    /// Also make a fresh copy under this directory (`<dir>/<copy-name>/certeasy.yaml` serves
    /// it; on PostgreSQL the database `certeasy_copy_<copy-name>` cloned from the template).
    #[arg(long)]
    pub(crate) copy_to: Option<PathBuf>,
    /// The fresh copy's name (letters, digits, `_`).
    #[arg(long, default_value = "fresh")]
    pub(crate) copy_name: String,
    /// Print the report as one JSON object (and no progress bar).
    #[arg(long)]
    pub(crate) json: bool,
}
