//! Command-line interface.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use clap::Parser;
use clap::Subcommand;
use clap::ValueEnum;

/// ACME load generator for any RFC 8555 directory (Certeasy, Pebble, ...).
///
/// `run` answers http-01 itself (a responder on --http01-listen) and resolves every name under
/// --domain-suffix to 127.0.0.1 (a DNS server on --dns-listen): configure the server under test
/// to validate on that port and to use that resolver. `scripts/bench.sh issuance` does all of it
/// for Pebble and Certeasy.
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
