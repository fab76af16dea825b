//! `certeasy-loadgen`: drives ACME flows against any directory URL and reports throughput,
//! per-phase latency and the server's CPU and memory; `bench` starts Pebble and Certeasy for each
//! run and renders the Certeasy-vs-Pebble report of `scripts/bench.sh` (table, chart, flame
//! graph).
//!
//! The measurement is part of the project (issue 9): the same client, the same challenge
//! responders and the same polling run against both servers, so the ratio measures the servers.

mod bench;
mod cases;
mod challenges;
mod chart;
mod cli;
mod fill;
mod flame;
mod flows;
mod machine;
mod procfs;
mod proxy;
mod report;
mod run;
mod servers;
mod stats;
mod tlscert;

use clap::Parser;

use crate::cli::Cli;
use crate::cli::Command;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run::run_blocking(args).map(drop),
        Command::Proxy(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?;
            runtime.block_on(proxy::serve(args))
        }
        Command::Report(args) => report::report(&args),
        Command::Flamegraph(args) => flame::flamegraph(&args),
        Command::TlsCert(args) => tlscert::write(&args),
        Command::Bench(args) => bench::bench(*args),
        Command::Fill(args) => fill::fill(args),
    }
}
