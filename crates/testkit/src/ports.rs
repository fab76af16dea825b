//! Free TCP ports on 127.0.0.1 for servers a test or benchmark starts later (bound and released).
//!
//! A port is chosen below the kernel's ephemeral range: a port the kernel hands out for `:0`
//! goes back into the pool that every outgoing connection of every concurrent test draws from,
//! and with hundreds of client sockets open (the listener tests) one of them soon takes it
//! before the server binds. Ports below the range are only ever taken by explicit binds like
//! these. A pseudo-random start per process and a process-wide counter keep concurrent test
//! processes apart; a port that is busy is skipped.

use std::net::TcpListener;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering;

/// The lowest port handed out: below it live the well-known services a machine may run.
const LOWEST: u32 = 10_000;

/// How many times [`free_port_block`] starts again before giving up.
const BLOCK_TRIES: usize = 200;

/// A free TCP port on 127.0.0.1.
///
/// # Panics
///
/// When every port between 10000 and the ephemeral range is busy: the machine cannot run the
/// test, and a test has no better answer than failing.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let (low, high) = (LOWEST, ephemeral_low.clamp(LOWEST + 1, u32::from(u16::MAX)));
    let span = high - low;
    let seed = std::process::id().wrapping_mul(2_654_435_761) % span;
    for _ in 0..span {
        let port = low + (seed + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between {low} and {high}");
}

/// A port `p` such that `p..p + len` are all free on 127.0.0.1, for a script that numbers the
/// ports of several servers from one base (`scripts/cluster.sh`).
///
/// # Panics
///
/// When no such block is found in 200 tries.
pub fn free_port_block(len: u16) -> u16 {
    for _ in 0..BLOCK_TRIES {
        let base = free_port();
        if base < u16::MAX - len
            && (1..len).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok())
        {
            return base;
        }
    }
    panic!("no block of {len} free ports");
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::free_port;
    use super::free_port_block;

    #[test]
    fn a_free_port_can_be_bound_and_differs_from_the_last() {
        let a = free_port();
        let b = free_port();
        assert_ne!(a, b);
        assert!(TcpListener::bind(("127.0.0.1", a)).is_ok());
    }

    #[test]
    fn every_port_of_a_block_is_free() {
        let base = free_port_block(5);
        for port in base..base + 5 {
            assert!(TcpListener::bind(("127.0.0.1", port)).is_ok(), "{port}");
        }
    }
}
