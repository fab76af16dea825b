//! The flame graph of a `perf record -g` profile, drawn with inferno (no Perl scripts needed).

use std::fs::File;
use std::io::BufReader;
use std::io::BufWriter;

use anyhow::Context;
use inferno::collapse::Collapse;
use inferno::collapse::perf::Folder;
use inferno::collapse::perf::Options as CollapseOptions;
use inferno::flamegraph::Options;

use crate::cli::FlamegraphArgs;

pub(crate) fn flamegraph(args: &FlamegraphArgs) -> anyhow::Result<()> {
    let input = File::open(&args.perf_script)
        .with_context(|| format!("opening {}", args.perf_script.display()))?;
    let mut folded = Vec::new();
    Folder::from(CollapseOptions::default())
        .collapse(BufReader::new(input), &mut folded)
        .context("collapsing the perf script")?;
    if folded.is_empty() {
        anyhow::bail!("no stacks in {}", args.perf_script.display());
    }
    let mut options = Options::default();
    options.title.clone_from(&args.title);
    // `bench` records `-e cpu-clock`, whose sample weight is nanoseconds of CPU.
    options.count_name = "ns".to_owned();
    let output = File::create(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    inferno::flamegraph::from_reader(&mut options, folded.as_slice(), BufWriter::new(output))
        .context("drawing the flame graph")?;
    Ok(())
}
