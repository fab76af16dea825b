//! `run`: lanes of flows against the server(s), and the figures of one run.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use anyhow::bail;
use instant_acme::Account;
use serde::Deserialize;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::challenges::Challenges;
use crate::cli::RunArgs;
use crate::cli::Scenario;
use crate::flows;
use crate::flows::Phase;
use crate::flows::Timings;

use crate::procfs;
use crate::stats::Latency;
use testkit::acme_http;
use testkit::acme_http::LaneClient;

/// Error messages kept in the result, so a failing run says why without flooding it.
const ERROR_SAMPLES: usize = 5;

/// When lanes stop starting flows.
#[derive(Debug, Clone, Copy)]
enum Stop {
    Flows(u64),
    Deadline(Instant),
}

/// What the lanes of one part did.
#[derive(Debug, Default)]
struct Outcomes {
    timings: Vec<Timings>,
    /// Whole-flow latency of each successful flow, ms.
    totals: Vec<f64>,
    /// When each successful flow ended, seconds after the lanes started.
    ended_s: Vec<f64>,
    /// When the first flow that stalled began, seconds after the lanes started.
    first_stall_began_s: Option<f64>,
    errors: u64,
    stalls: u64,
    error_samples: Vec<String>,
    wall_s: f64,
}

impl Outcomes {
    fn merge(&mut self, other: Self) {
        self.timings.extend(other.timings);
        self.totals.extend(other.totals);
        self.ended_s.extend(other.ended_s);
        if let Some(began) = other.first_stall_began_s {
            self.stalled(began);
        }
        self.errors += other.errors;
        self.stalls += other.stalls;
        for sample in other.error_samples {
            if self.error_samples.len() < ERROR_SAMPLES {
                self.error_samples.push(sample);
            }
        }
    }

    fn flows(&self) -> u64 {
        self.totals.len() as u64
    }

    /// Notes a stalled flow that began `began` seconds after the lanes started.
    fn stalled(&mut self, began: f64) {
        self.first_stall_began_s = Some(self.first_stall_began_s.map_or(began, |f| f.min(began)));
    }

    /// The rate while the server still answered, for a run in which a flow stalled: the flows
    /// that ended between the first flow's end and the start of the first flow that stalled,
    /// over that time. A server that deadlocks (Pebble 2.4 under concurrent finalizations) has
    /// no figure over the whole run, but this one is a fair upper bound of its rate: every
    /// flow counted ended before the deadlock, and the ramp-up before the first end is left out.
    fn before_stall(&self) -> Option<BeforeStall> {
        let stall = self.first_stall_began_s?;
        let first = self.ended_s.iter().copied().fold(f64::INFINITY, f64::min);
        let flows = self.ended_s.iter().filter(|&&t| t <= stall).count();
        let seconds = stall - first;
        (flows >= 2 && seconds > 0.0).then(|| BeforeStall {
            flows: flows as u64,
            seconds,
            flows_per_s: (flows - 1) as f64 / seconds,
        })
    }
}

/// [`Outcomes::before_stall`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BeforeStall {
    pub(crate) flows: u64,
    pub(crate) seconds: f64,
    pub(crate) flows_per_s: f64,
}

/// The server processes' figures over the timed part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ServerFigures {
    pub(crate) cpu_s: f64,
    pub(crate) cpu_ms_per_flow: f64,
    pub(crate) vmhwm_kib: u64,
    pub(crate) vmrss_kib: u64,
}

/// The two steps of the scale scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ScaleFigures {
    pub(crate) accounts: u64,
    pub(crate) accounts_per_s: f64,
    pub(crate) orders: u64,
    pub(crate) orders_per_s: f64,
}

/// One run, as printed with `--json` and read back by `report`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunResult {
    pub(crate) label: String,
    pub(crate) round: u32,
    pub(crate) scenario: Scenario,
    pub(crate) concurrency: usize,
    pub(crate) directories: Vec<String>,
    pub(crate) started_unix_s: u64,
    pub(crate) flows: u64,
    pub(crate) errors: u64,
    pub(crate) stalls: u64,
    pub(crate) error_samples: Vec<String>,
    pub(crate) wall_s: f64,
    pub(crate) flows_per_s: f64,
    pub(crate) polls_per_flow: f64,
    pub(crate) poll_ms: u64,
    pub(crate) stall_after_s: f64,
    /// Whole flow.
    pub(crate) latency_ms: Latency,
    /// By phase name, in flow order.
    pub(crate) phases_ms: BTreeMap<String, Latency>,
    pub(crate) server: Option<ServerFigures>,
    pub(crate) scale: Option<ScaleFigures>,
    /// Only for a run in which a flow stalled; absent from results written before it existed.
    #[serde(default)]
    pub(crate) before_stall: Option<BeforeStall>,
}

/// Runs lanes that each call `flow(lane, sequence)` until `stop`; a flow running longer than
/// `stall_after` is abandoned and counted as a stall.
async fn drive<F, Fut>(lanes: usize, stop: Stop, stall_after: Duration, flow: F) -> Outcomes
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<Timings>> + Send + 'static,
{
    let flow = Arc::new(flow);
    let sequence = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for lane in 0..lanes {
        let (flow, sequence) = (Arc::clone(&flow), Arc::clone(&sequence));
        tasks.spawn(async move {
            let mut outcomes = Outcomes::default();
            loop {
                let seq = sequence.fetch_add(1, Ordering::Relaxed);
                let more = match stop {
                    Stop::Flows(n) => seq < n,
                    Stop::Deadline(deadline) => Instant::now() < deadline,
                };
                if !more {
                    break;
                }
                let flow_started = Instant::now();
                match tokio::time::timeout(stall_after, flow(lane, seq)).await {
                    Ok(Ok(timings)) => {
                        outcomes
                            .totals
                            .push(flow_started.elapsed().as_secs_f64() * 1e3);
                        outcomes.ended_s.push(started.elapsed().as_secs_f64());
                        outcomes.timings.push(timings);
                    }
                    Ok(Err(error)) => {
                        outcomes.errors += 1;
                        if outcomes.error_samples.len() < ERROR_SAMPLES {
                            outcomes.error_samples.push(format!("{error:#}"));
                        }
                    }
                    Err(_) => {
                        outcomes.stalls += 1;
                        outcomes.stalled((flow_started - started).as_secs_f64());
                    }
                }
            }
            outcomes
        });
    }
    let mut all = Outcomes::default();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(outcomes) => all.merge(outcomes),
            Err(error) => {
                all.errors += 1;
                all.error_samples.push(format!("lane failed: {error}"));
            }
        }
    }
    all.wall_s = started.elapsed().as_secs_f64();
    all
}

/// Names unique across runs against one server, under the suffix the DNS server answers for.
fn name(run_id: &str, seq: u64, suffix: &str) -> String {
    format!("f{seq}-{run_id}.{suffix}")
}

/// Creates `count` accounts, spread over the lanes and directories; `Outcomes` for their timing.
async fn create_accounts(
    clients: &Arc<Vec<LaneClient>>,
    directories: &Arc<Vec<String>>,
    count: u64,
    stall_after: Duration,
) -> (Vec<Account>, Outcomes) {
    let accounts = Arc::new(Mutex::new(Vec::new()));
    let (clients, directories, sink) = (
        Arc::clone(clients),
        Arc::clone(directories),
        Arc::clone(&accounts),
    );
    let outcomes = drive(
        clients.len(),
        Stop::Flows(count),
        stall_after,
        move |lane, seq| {
            let client = clients[lane].clone();
            let directory = directories[seq as usize % directories.len()].clone();
            let sink = Arc::clone(&sink);
            async move {
                let started = Instant::now();
                let account = flows::new_account(&client, &directory).await?;
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(account);
                Ok(Timings {
                    phases: vec![(Phase::Account, started.elapsed().as_secs_f64() * 1e3)],
                    polls: 0,
                })
            }
        },
    )
    .await;
    let accounts = std::mem::take(&mut *accounts.lock().unwrap_or_else(PoisonError::into_inner));
    (accounts, outcomes)
}

/// Orders on `accounts` round-robin until `stop`.
async fn create_orders(
    accounts: Vec<Account>,
    lanes: usize,
    stop: Stop,
    stall_after: Duration,
    run_id: &str,
    suffix: &str,
) -> anyhow::Result<Outcomes> {
    if accounts.is_empty() {
        bail!("no account could be created");
    }
    let accounts = Arc::new(accounts);
    let (run_id, suffix) = (run_id.to_owned(), suffix.to_owned());
    Ok(drive(lanes, stop, stall_after, move |_, seq| {
        let account = accounts[seq as usize % accounts.len()].clone();
        let name = name(&run_id, seq, &suffix);
        async move { flows::order_flow(&account, &name).await }
    })
    .await)
}

/// [`run`] on a runtime of its own with `--threads` workers: the command, and each run of
/// `bench`, whose responders and DNS server are gone with the runtime when it returns.
pub(crate) fn run_blocking(args: RunArgs) -> anyhow::Result<RunResult> {
    // The one crypto provider of the workspace; a second install is a no-op error.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: RunArgs) -> anyhow::Result<RunResult> {
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let challenges = Arc::new(
        Challenges::start(args.dns_listen, args.http01_listen, &args.domain_suffix).await?,
    );
    let tls = acme_http::tls_config(&args.ca_root)?;
    let clients: Arc<Vec<LaneClient>> = Arc::new(
        (0..args.concurrency)
            .map(|_| acme_http::lane_client(tls.clone(), args.http1))
            .collect(),
    );
    let directories = Arc::new(args.directories.clone());
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let run_id = format!("{:x}{:x}", started_unix.as_secs(), std::process::id());
    let stall_after = Duration::from_secs_f64(args.stall_after);
    let poll = Duration::from_millis(args.poll_ms);
    let stop = || match args.flows {
        Some(n) => Stop::Flows(n),
        None => Stop::Deadline(Instant::now() + Duration::from_secs_f64(args.duration)),
    };

    // Accounts the new-order scenario orders on are made before the clock starts.
    let prepared = if args.scenario == Scenario::NewOrder {
        let (accounts, outcomes) =
            create_accounts(&clients, &directories, args.accounts, stall_after).await;
        if outcomes.flows() < args.accounts {
            bail!(
                "creating {} accounts: {} errors, {} stalls: {:?}",
                args.accounts,
                outcomes.errors,
                outcomes.stalls,
                outcomes.error_samples
            );
        }
        accounts
    } else {
        Vec::new()
    };

    let cpu_before = procfs::cpu_seconds(&args.server_pids)?;
    let mut scale = None;
    let outcomes = match args.scenario {
        Scenario::Full => {
            let (clients, directories, challenges) = (
                Arc::clone(&clients),
                Arc::clone(&directories),
                Arc::clone(&challenges),
            );
            let (run_id, suffix) = (run_id.clone(), args.domain_suffix.clone());
            drive(args.concurrency, stop(), stall_after, move |lane, seq| {
                let client = clients[lane].clone();
                let directory = directories[seq as usize % directories.len()].clone();
                let challenges = Arc::clone(&challenges);
                let name = name(&run_id, seq, &suffix);
                async move {
                    flows::full_flow(&client, &directory, &challenges.http01, &name, poll).await
                }
            })
            .await
        }
        Scenario::NewAccount => {
            let (clients, directories) = (Arc::clone(&clients), Arc::clone(&directories));
            drive(args.concurrency, stop(), stall_after, move |lane, seq| {
                let client = clients[lane].clone();
                let directory = directories[seq as usize % directories.len()].clone();
                async move { flows::account_flow(&client, &directory).await }
            })
            .await
        }
        Scenario::NewOrder => {
            create_orders(
                prepared,
                args.concurrency,
                stop(),
                stall_after,
                &run_id,
                &args.domain_suffix,
            )
            .await?
        }
        Scenario::Scale => {
            let (accounts, mut outcomes) =
                create_accounts(&clients, &directories, args.accounts, stall_after).await;
            let accounts_figures = (outcomes.flows(), outcomes.wall_s);
            let orders = create_orders(
                accounts,
                args.concurrency,
                Stop::Flows(args.orders),
                stall_after,
                &run_id,
                &args.domain_suffix,
            )
            .await?;
            scale = Some(ScaleFigures {
                accounts: accounts_figures.0,
                accounts_per_s: accounts_figures.0 as f64 / accounts_figures.1.max(1e-9),
                orders: orders.flows(),
                orders_per_s: orders.flows() as f64 / orders.wall_s.max(1e-9),
            });
            let wall = outcomes.wall_s + orders.wall_s;
            outcomes.merge(orders);
            outcomes.wall_s = wall;
            outcomes
        }
    };
    let server = if args.server_pids.is_empty() {
        None
    } else {
        let cpu_s = procfs::cpu_seconds(&args.server_pids)? - cpu_before;
        let (vmhwm_kib, vmrss_kib) = procfs::memory_kib(&args.server_pids)?;
        Some(ServerFigures {
            cpu_s,
            cpu_ms_per_flow: cpu_s * 1e3 / outcomes.flows().max(1) as f64,
            vmhwm_kib,
            vmrss_kib,
        })
    };

    let result = summarise(&args, started_unix.as_secs(), outcomes, server, scale);
    let json = serde_json::to_string_pretty(&result)?;
    if let Some(path) = &args.output {
        std::fs::write(path, format!("{json}\n"))?;
    }
    if args.json {
        println!("{json}");
    } else {
        print_summary(&result);
    }
    drop(challenges);
    Ok(result)
}

fn summarise(
    args: &RunArgs,
    started_unix_s: u64,
    outcomes: Outcomes,
    server: Option<ServerFigures>,
    scale: Option<ScaleFigures>,
) -> RunResult {
    let flows = outcomes.flows();
    let before_stall = outcomes.before_stall();
    let mut by_phase: BTreeMap<Phase, Vec<f64>> = BTreeMap::new();
    let mut polls = 0;
    for timings in &outcomes.timings {
        polls += timings.polls;
        for &(phase, ms) in &timings.phases {
            by_phase.entry(phase).or_default().push(ms);
        }
    }
    RunResult {
        label: args.label.clone(),
        round: args.round,
        scenario: args.scenario,
        concurrency: args.concurrency,
        directories: args.directories.clone(),
        started_unix_s,
        flows,
        errors: outcomes.errors,
        stalls: outcomes.stalls,
        error_samples: outcomes.error_samples,
        wall_s: outcomes.wall_s,
        flows_per_s: flows as f64 / outcomes.wall_s.max(1e-9),
        polls_per_flow: polls as f64 / flows.max(1) as f64,
        poll_ms: args.poll_ms,
        stall_after_s: args.stall_after,
        latency_ms: Latency::of(outcomes.totals),
        phases_ms: by_phase
            .into_iter()
            .map(|(phase, samples)| (phase.name().to_owned(), Latency::of(samples)))
            .collect(),
        server,
        scale,
        before_stall,
    }
}

/// Ignores write errors: a closed pipe (`| head`) must not turn a finished run into a panic.
fn print_summary(result: &RunResult) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{} {:?} x{}: {} flows in {:.2} s = {:.1} flows/s; {} errors, {} stalls; {:.1} polls/flow",
        result.label,
        result.scenario,
        result.concurrency,
        result.flows,
        result.wall_s,
        result.flows_per_s,
        result.errors,
        result.stalls,
        result.polls_per_flow
    );
    let row = |out: &mut std::io::StdoutLock<'_>, name: &str, l: &Latency| {
        let _ = writeln!(
            out,
            "  {name:<16} n={:<7} p50 {:>8.2} ms  p90 {:>8.2} ms  p99 {:>8.2} ms  max {:>8.2} ms",
            l.count, l.p50, l.p90, l.p99, l.max
        );
    };
    row(&mut out, "flow", &result.latency_ms);
    for phase in Phase::ALL {
        if let Some(latency) = result.phases_ms.get(phase.name()) {
            row(&mut out, phase.name(), latency);
        }
    }
    if let Some(server) = &result.server {
        let _ = writeln!(
            out,
            "  server: {:.2} CPU s, {:.2} CPU ms/flow, VmHWM {:.1} MiB, VmRSS {:.1} MiB",
            server.cpu_s,
            server.cpu_ms_per_flow,
            server.vmhwm_kib as f64 / 1024.0,
            server.vmrss_kib as f64 / 1024.0
        );
    }
    if let Some(before) = &result.before_stall {
        let _ = writeln!(
            out,
            "  before the first stall: {} flows in {:.2} s = {:.1} flows/s",
            before.flows, before.seconds, before.flows_per_s
        );
    }
    if let Some(scale) = &result.scale {
        let _ = writeln!(
            out,
            "  scale: {} accounts at {:.1}/s, {} orders at {:.1}/s",
            scale.accounts, scale.accounts_per_s, scale.orders, scale.orders_per_s
        );
    }
    for sample in &result.error_samples {
        let _ = writeln!(out, "  error: {sample}");
    }
}

#[cfg(test)]
mod tests {
    use super::Outcomes;

    /// The rate counts the flows that ended by the time the first stalled flow began, from the
    /// first end on; a run without a stall has none.
    #[test]
    fn the_rate_before_a_stall_leaves_out_the_ramp_up_and_what_ended_after_it() {
        let mut outcomes = Outcomes {
            ended_s: vec![0.5, 0.7, 1.0, 1.5, 2.5, 3.0],
            ..Outcomes::default()
        };
        assert!(outcomes.before_stall().is_none());
        outcomes.first_stall_began_s = Some(1.5);
        let before = outcomes.before_stall().unwrap();
        assert_eq!(before.flows, 4);
        assert!((before.seconds - 1.0).abs() < 1e-9);
        // Three flows ended in the second after the first end.
        assert!((before.flows_per_s - 3.0).abs() < 1e-9);
        // A stall before the second end leaves nothing to measure.
        outcomes.first_stall_began_s = Some(0.6);
        assert!(outcomes.before_stall().is_none());
    }

    /// Lanes merge to the earliest stall of any of them.
    #[test]
    fn merged_lanes_keep_the_earliest_stall() {
        let mut all = Outcomes::default();
        for began in [Some(2.0), None, Some(1.25)] {
            all.merge(Outcomes {
                first_stall_began_s: began,
                ..Outcomes::default()
            });
        }
        assert_eq!(all.first_stall_began_s, Some(1.25));
    }
}
