//! The server's CPU time and memory, and the machine's load, read from `/proc` (Linux only)
//! through the `procfs` crate.

use anyhow::Context;
use procfs::Current;
use procfs::LoadAverage;
use procfs::process::Process;

/// `/proc/PID` of a process the load generator measures.
fn process(pid: u32) -> anyhow::Result<Process> {
    let pid = i32::try_from(pid).with_context(|| format!("{pid} is not a process id"))?;
    Process::new(pid).with_context(|| format!("no process {pid}"))
}

/// CPU seconds (user + system, all threads) used so far by all the given processes together.
pub(crate) fn cpu_seconds(pids: &[u32]) -> anyhow::Result<f64> {
    let ticks_per_second = procfs::ticks_per_second() as f64;
    let mut total = 0.0;
    for &pid in pids {
        let stat = process(pid)?
            .stat()
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        total += (stat.utime + stat.stime) as f64 / ticks_per_second;
    }
    Ok(total)
}

/// Peak and current resident set (`VmHWM`, `VmRSS`) of all the given processes, summed, in KiB.
pub(crate) fn memory_kib(pids: &[u32]) -> anyhow::Result<(u64, u64)> {
    let mut total = (0, 0);
    for &pid in pids {
        let status = process(pid)?
            .status()
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        let (Some(hwm), Some(rss)) = (status.vmhwm, status.vmrss) else {
            anyhow::bail!("/proc/{pid}/status has no VmHWM or VmRSS (a kernel thread?)");
        };
        total = (total.0 + hwm, total.1 + rss);
    }
    Ok(total)
}

/// The 1-, 5- and 15-minute load averages.
pub(crate) fn load_average() -> anyhow::Result<(f32, f32, f32)> {
    let load = LoadAverage::current().context("reading /proc/loadavg")?;
    Ok((load.one, load.five, load.fifteen))
}

/// The first processor's model name, as `/proc/cpuinfo` gives it.
pub(crate) fn cpu_model() -> anyhow::Result<String> {
    let info = procfs::CpuInfo::current().context("reading /proc/cpuinfo")?;
    Ok(info.model_name(0).unwrap_or("unknown").to_owned())
}

#[cfg(test)]
mod tests {
    use super::cpu_seconds;
    use super::load_average;
    use super::memory_kib;

    /// The figures of this very process: it has run, and it has a resident set.
    #[test]
    fn own_cpu_and_memory_are_read() {
        let me = std::process::id();
        let spin: u64 = (0..2_000_000u64).map(std::hint::black_box).sum();
        assert!(spin > 0);
        assert!(cpu_seconds(&[me]).expect("own stat") >= 0.0);
        let (hwm, rss) = memory_kib(&[me, me]).expect("own status");
        assert!(hwm >= rss / 2 && rss > 0, "{hwm} {rss}");
        assert!(load_average().expect("loadavg").0 >= 0.0);
    }

    #[test]
    fn a_missing_process_is_an_error() {
        // PID_MAX_LIMIT is 2^22: no process has a larger id.
        assert!(cpu_seconds(&[(1 << 22) + 1]).is_err());
    }
}
