#!/usr/bin/env bash
# Soak run (not part of the tests): SOAK_MINUTES (default 30) of mixed issuance at about 80 % of
# the peak of docs/performance.md (section 5, in process), against the release `certeasy serve` binary (embedded
# SQLite, rate limits in a private redis-server on its own loopback port). Along the way Redis is
# SIGKILLed three times (down 5 s each, restarted empty) and the server twice (restarted at
# once). At the end every certificate a client was told about must be in the database exactly
# once, for its order, and a sample is downloaded again through ACME; the server's RSS is
# sampled from /proc and judged flat or growing (median of the last third against the first
# third of the last server process, after a warm-up).
#
# The driver is crates/certeasy/benches/soak.rs (a `[[bench]]` with test = false, so
# `cargo test` never runs it). Everything listens on 127.0.0.1 only. Results go to SOAK_DIR
# (default $CARGO_TARGET_DIR/soak-<UTC time>): summary.txt, certificates.tsv, rss.tsv,
# events.tsv, failures.txt, server.log, redis.log. Exits non-zero when a certificate is lost or
# duplicated (or the driver fails).
#
# Environment: SOAK_MINUTES (30), SOAK_RATE (orders started per second, 74), SOAK_CONCURRENCY
# (most orders in flight, 40), SOAK_ACCOUNTS (20), SOAK_RSS_EVERY (seconds between RSS samples;
# default about 100 samples a run, at most 5 s apart), SOAK_VERIFY_DOWNLOADS (300), SOAK_DIR,
# SOAK_PROFILE (cargo profile of the server and driver: bench, i.e. release, by default; `dev`
# reuses a test build for a quick check of the machinery, and its figures say nothing about
# release performance).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/certeasy-target}"
minutes="${SOAK_MINUTES:-30}"
export SOAK_SECONDS
SOAK_SECONDS="$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')"
export SOAK_DIR="${SOAK_DIR:-$CARGO_TARGET_DIR/soak-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$SOAK_DIR"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
need_pkg() { # need_pkg <command> <debian package>
  if ! command -v "$1" >/dev/null 2>&1; then
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$2" >/dev/null
  fi
}
need_pkg redis-server redis-server
need_pkg sqlite3 sqlite3

echo "==> building the soak driver and the release certeasy binary" >&2
profile="${SOAK_PROFILE:-bench}"
cargo bench --profile "$profile" -p certeasy --bench soak --locked --no-run
echo "==> soak: $minutes min, results in $SOAK_DIR" >&2
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "nproc: $(nproc), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "minutes: $minutes, cargo profile: $profile"
} >"$SOAK_DIR/machine.txt"
status=0
cargo bench --profile "$profile" -p certeasy --bench soak --locked || status=$?
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$SOAK_DIR/machine.txt"
echo "==> results in $SOAK_DIR (summary.txt)" >&2
exit "$status"
