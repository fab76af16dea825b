//! `certeasy-loadgen`: drives ACME flows against any directory URL and reports throughput,
//! per-phase latency and the server's CPU and memory; also renders the Certeasy-vs-Pebble report
//! of `scripts/bench.sh` (table, chart, flame graph).
//!
//! The measurement is part of the project (issue 9): the same client, the same challenge
//! responders and the same polling run against both servers, so the ratio measures the servers.

mod cases;
mod challenges;
mod chart;
mod cli;
mod flame;
mod flows;
mod procfs;
mod proxy;
mod report;
mod run;
mod stats;
mod tlscert;

use clap::Parser;

use crate::cli::Cli;
use crate::cli::Command;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            // The one crypto provider of the workspace; a second install is a no-op error.
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(args.threads)
                .enable_all()
                .build()?;
            runtime.block_on(run::run(args))
        }
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
    }
}
