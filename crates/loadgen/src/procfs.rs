//! The server's CPU time and memory, read from `/proc` (Linux only).

use anyhow::Context;
use anyhow::bail;

/// `AT_CLKTCK` in the auxiliary vector: the unit of `utime`/`stime` in `/proc/PID/stat`.
const AT_CLKTCK: u64 = 17;
/// The value on every Linux architecture in practice, used when the auxiliary vector says nothing.
const DEFAULT_CLK_TCK: u64 = 100;

/// CPU time (user + system, all threads) of a process in clock ticks, from the text of
/// `/proc/PID/stat`. The command name is parenthesised and may itself contain spaces and
/// parentheses, so fields are counted from the last `)`.
pub(crate) fn parse_stat_ticks(stat: &str) -> anyhow::Result<u64> {
    let (_, rest) = stat.rsplit_once(')').context("no ')' in /proc/PID/stat")?;
    // After the name: state (3), ppid (4), ... utime (14), stime (15).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let (Some(utime), Some(stime)) = (fields.get(11), fields.get(12)) else {
        bail!("/proc/PID/stat has too few fields");
    };
    Ok(utime.parse::<u64>()? + stime.parse::<u64>()?)
}

/// Clock ticks per second, from this process's auxiliary vector (pairs of native-endian u64).
pub(crate) fn clock_ticks_per_second() -> u64 {
    let Ok(auxv) = std::fs::read("/proc/self/auxv") else {
        return DEFAULT_CLK_TCK;
    };
    auxv.chunks_exact(16)
        .filter_map(|pair| {
            let key = u64::from_ne_bytes(pair.get(..8)?.try_into().ok()?);
            let value = u64::from_ne_bytes(pair.get(8..)?.try_into().ok()?);
            (key == AT_CLKTCK).then_some(value)
        })
        .next()
        .filter(|&ticks| ticks > 0)
        .unwrap_or(DEFAULT_CLK_TCK)
}

/// CPU seconds used so far by all the given processes together.
pub(crate) fn cpu_seconds(pids: &[u32]) -> anyhow::Result<f64> {
    let ticks_per_second = clock_ticks_per_second() as f64;
    let mut total = 0.0;
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        total += parse_stat_ticks(&stat)? as f64 / ticks_per_second;
    }
    Ok(total)
}

/// `(VmHWM, VmRSS)` in KiB from the text of `/proc/PID/status`.
pub(crate) fn parse_status_memory(status: &str) -> anyhow::Result<(u64, u64)> {
    let field = |name: &str| -> anyhow::Result<u64> {
        let value = status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .with_context(|| format!("no {name} in /proc/PID/status"))?;
        Ok(value.trim().trim_end_matches("kB").trim().parse()?)
    };
    Ok((field("VmHWM:")?, field("VmRSS:")?))
}

/// Peak and current resident set of all the given processes, summed, in KiB.
pub(crate) fn memory_kib(pids: &[u32]) -> anyhow::Result<(u64, u64)> {
    let mut total = (0, 0);
    for pid in pids {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        let (hwm, rss) = parse_status_memory(&status)?;
        total = (total.0 + hwm, total.1 + rss);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::clock_ticks_per_second;
    use super::parse_stat_ticks;
    use super::parse_status_memory;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        // A name with a space and a parenthesis; utime 1234, stime 56.
        let stat = "4242 (cert easy) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 1234 56 0 0 20 0 9 0 \
                    100 2000000 3000 18446744073709551615";
        assert_eq!(parse_stat_ticks(stat).expect("parses"), 1290);
        assert!(parse_stat_ticks("12 (short) S 1").is_err());
    }

    #[test]
    fn own_stat_and_clock_parse() {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("linux");
        parse_stat_ticks(&stat).expect("own stat parses");
        assert!(clock_ticks_per_second() > 0);
    }

    #[test]
    fn status_memory_fields() {
        let status =
            "Name:\tcerteasy\nVmPeak:\t  900 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\n";
        assert_eq!(
            parse_status_memory(status).expect("parses"),
            (51_200, 40_960)
        );
        assert!(parse_status_memory("Name: x\n").is_err());
    }
}
