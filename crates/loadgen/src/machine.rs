//! The machine a benchmark runs on: what it is (stated with every result), the Debian packages
//! a part needs, and a quiet start.

use std::path::Path;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use anyhow::bail;
use serde::Deserialize;
use serde::Serialize;
use time::OffsetDateTime;
use time::macros::format_description;

use crate::procfs;

/// What the report's first line says of the run: kept in `machine.json` next to the results, so
/// that `issuance-report` renders them again with the settings of the run that made them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Machine {
    /// `2026-11-27 01:22 UTC`.
    pub(crate) date: String,
    pub(crate) nproc: usize,
    pub(crate) cpu: String,
    /// The three load averages when the part started.
    pub(crate) load_at_start: String,
    /// Debian's version of the `pebble` package, `unknown` when it is not installed that way.
    pub(crate) pebble: String,
    /// `rounds: 3; duration: 20 s; scenarios: ...; poll: 5 ms`.
    pub(crate) settings: String,
}

impl Machine {
    pub(crate) fn now(settings: String) -> anyhow::Result<Self> {
        let date = OffsetDateTime::now_utc()
            .format(format_description!(
                "[year]-[month]-[day] [hour]:[minute] UTC"
            ))
            .context("formatting the date")?;
        let (one, five, fifteen) = procfs::load_average()?;
        Ok(Self {
            date,
            nproc: std::thread::available_parallelism().map_or(1, usize::from),
            cpu: procfs::cpu_model()?,
            load_at_start: format!("{one:.2} {five:.2} {fifteen:.2}"),
            pebble: pebble_version(),
            settings,
        })
    }

    /// The lines printed when a part starts and kept in `machine.txt`.
    pub(crate) fn text(&self) -> String {
        format!(
            "date: {}\nnproc: {}; cpu: {}\nload average at start: {}\npebble: {}\n{}\n",
            self.date, self.nproc, self.cpu, self.load_at_start, self.pebble, self.settings
        )
    }

    /// The report's first paragraph: when, where, how loaded, and what `extra` says of the run.
    pub(crate) fn preamble(&self, extra: &str) -> String {
        format!(
            "Run of {} (nproc: {}; cpu: {}, load average at start: {}): {extra}.\n\n",
            self.date, self.nproc, self.cpu, self.load_at_start
        )
    }

    pub(crate) fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::write(dir.join("machine.txt"), self.text())?;
        std::fs::write(
            dir.join("machine.json"),
            serde_json::to_string_pretty(self)? + "\n",
        )?;
        Ok(())
    }

    pub(crate) fn read(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join("machine.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {} (run the part first)", path.display()))?;
        Ok(serde_json::from_str(&text)?)
    }
}

fn pebble_version() -> String {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", "pebble"])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success() && !out.stdout.is_empty())
        .map_or_else(
            || "unknown".to_owned(),
            |out| String::from_utf8_lossy(&out.stdout).into_owned(),
        )
}

/// The 1-minute load average, for the line each run logs.
pub(crate) fn load_now() -> String {
    procfs::load_average().map_or_else(|_| "?".to_owned(), |(one, _, _)| format!("{one:.2}"))
}

/// Installs Debian package `package` when `probe` (a command on `PATH` or a file) is missing.
pub(crate) fn need(package: &str, probe: &str) -> anyhow::Result<()> {
    if Path::new(probe).exists() || on_path(probe) {
        return Ok(());
    }
    eprintln!("\n==> installing {package}");
    let root = rustix::process::geteuid().is_root();
    let apt = |args: &[&str]| -> anyhow::Result<()> {
        let mut command = if root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.arg("apt-get");
            sudo
        };
        let status = command
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .context("running apt-get")?;
        if !status.success() {
            bail!("apt-get {} failed: {status}", args.join(" "));
        }
        Ok(())
    };
    apt(&["update", "-qq"])?;
    apt(&["install", "-y", "-qq", package])
}

fn on_path(command: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(command).is_file()))
}

/// Waits (at most `max`) until the 1-minute load average is below `below`, so that the first
/// round does not share the cores with what just ran (the build, say). The load average each
/// run logs says how quiet the machine was.
pub(crate) fn settle(below: f64, max: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let (one, _, _) = procfs::load_average()?;
        if f64::from(one) < below {
            return Ok(());
        }
        if started.elapsed() >= max {
            eprintln!(
                "\n==> load average still {one:.2} after {} s; starting anyway",
                max.as_secs()
            );
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::Machine;

    #[test]
    fn the_preamble_names_the_run() {
        let machine = Machine {
            date: "2026-11-27 01:22 UTC".to_owned(),
            nproc: 2,
            cpu: "AMD EPYC".to_owned(),
            load_at_start: "0.46 1.56 1.74".to_owned(),
            pebble: "2.4.0+ds1-2+b4".to_owned(),
            settings: "rounds: 3".to_owned(),
        };
        assert_eq!(
            machine.preamble("3 rounds"),
            "Run of 2026-11-27 01:22 UTC (nproc: 2; cpu: AMD EPYC, load average at start: \
             0.46 1.56 1.74): 3 rounds.\n\n"
        );
        let again: Machine =
            serde_json::from_str(&serde_json::to_string(&machine).expect("json")).expect("reads");
        assert_eq!(again.text(), machine.text());
    }
}
