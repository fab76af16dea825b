//! The in-memory store's footprint: bytes per bucket (the RSS delta over the fill; the workspace
//! forbids `unsafe`, so no counting allocator) and the peak RSS of a process holding 1,000,000
//! live buckets.
//!
//! Each scenario runs in a fresh child process (this binary, re-executed), so its peak RSS is its
//! own: `accounts` fills half a million accounts with an order and a SAN-budget bucket each (the
//! shape of the Redis memory bench), `addresses` a million addresses with one global bucket each.
//! Every bucket is spent once and stays live (its TAT is in the future). Tunable: `BENCH_BUCKETS`
//! (default 1,000,000). Prints `RESULT name=value` lines for `scripts/bench.sh`.

use std::error::Error;
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

use ratelimits::Kind;
use ratelimits::Limit;
use ratelimits::LimitName;
use ratelimits::MemoryStore;
use ratelimits::batch::Transaction;
use ratelimits::config::Mode;
use ratelimits::nanos::unix_nanos;
use time::OffsetDateTime;

type BoxError = Box<dyn Error + Send + Sync>;

/// A field of `/proc/self/status` in kB, as bytes.
fn status_bytes(field: &str) -> Result<u64, BoxError> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kb: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("{field} missing from /proc/self/status"))?;
    Ok(kb * 1024)
}

fn scenario(name: &str, buckets: u64) -> Result<(), BoxError> {
    // Room for every bucket: the default cap (about a million, split over shards) would evict.
    let store = MemoryStore::new(usize::try_from(buckets)? * 2);
    let hour = Duration::from_secs(3600);
    let orders = Limit::new("order-creation", 5, 20, hour, Mode::Enforce)?;
    let sans = Limit::new("san-budget", 100, 100, hour, Mode::Enforce)?;
    let global = Limit::new("global", 100, 100, Duration::from_secs(1), Mode::Enforce)?;
    let now = unix_nanos(OffsetDateTime::now_utc());
    let rss_before = status_bytes("VmRSS:")?;
    match name {
        "accounts" => {
            for account in 0..buckets / 2 {
                let batch = [
                    Transaction::new(
                        LimitName::NewOrdersPerAccount,
                        format!("order-creation:{account}"),
                        orders,
                        1,
                        Kind::CheckAndSpend,
                    )?,
                    Transaction::new(
                        LimitName::SanBudgetPerAccount,
                        format!("san-budget:{account}"),
                        sans,
                        3,
                        Kind::CheckAndSpend,
                    )?,
                ];
                if !store.spend_batch_now(now, &batch)?.allowed {
                    return Err("a first order was denied".into());
                }
            }
        }
        _ => {
            for i in 0..buckets {
                let ip = Ipv4Addr::from(0x0a00_0000 + u32::try_from(i)?);
                let batch = [Transaction::new(
                    LimitName::GlobalPerIp,
                    format!("global:{ip}"),
                    global,
                    1,
                    Kind::CheckAndSpend,
                )?];
                if !store.spend_batch_now(now, &batch)?.allowed {
                    return Err("a first request was denied".into());
                }
            }
        }
    }
    let held = store.len() as u64;
    let rss = status_bytes("VmRSS:")?.saturating_sub(rss_before);
    let peak = status_bytes("VmHWM:")?;
    println!("{name}: {held} live buckets, RSS delta {rss} bytes, peak RSS {peak}");
    if held != buckets / 2 * 2 && held != buckets {
        return Err(format!("{name}: {held} buckets held, {buckets} written").into());
    }
    println!(
        "RESULT memory_{name}_rss_bytes_per_bucket={:.1}",
        rss as f64 / held as f64
    );
    println!("RESULT memory_{name}_buckets={held}");
    println!(
        "RESULT memory_{name}_peak_rss_mib={:.1}",
        peak as f64 / (1024.0 * 1024.0)
    );
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let buckets: u64 = std::env::var("BENCH_BUCKETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--scenario") {
        let name = args.get(i + 1).ok_or("--scenario needs a name")?;
        return scenario(name, buckets);
    }
    // An empty process's peak, for reference.
    println!(
        "RESULT memory_empty_process_peak_rss_mib={:.1}",
        status_bytes("VmHWM:")? as f64 / (1024.0 * 1024.0)
    );
    for name in ["accounts", "addresses"] {
        let output = Command::new(std::env::current_exe()?)
            .args(["--scenario", name])
            .output()?;
        print!("{}", String::from_utf8_lossy(&output.stdout));
        if !output.status.success() {
            return Err(format!(
                "scenario {name} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
    }
    Ok(())
}
