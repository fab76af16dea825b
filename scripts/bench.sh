#!/usr/bin/env bash
# Runs Certeasy's benchmarks (release builds) and prints the figures of docs/performance.md:
# every figure is measured in the same run as its baseline, so the ratios are what to compare
# across machines. Needs redis-server, redis-benchmark, lego and psql (scripts/test.sh installs
# them) and PostgreSQL on 127.0.0.1:5432. Benchmarks start their own redis-server processes on
# free loopback ports and never touch the shared instance on 6379.
#
# Usage: scripts/bench.sh [memory] [redis] [redis-memory] [issuance-inproc] [issuance] [scale] [cluster] [testmode] [baseline] [year]
# (default: memory redis redis-memory issuance-inproc issuance; scale and cluster take minutes
# and run only when named, and so does testmode, the no-stall check of `serve --test-mode`,
# baseline, this build against an earlier certeasy binary named by BENCH_BASELINE, and year,
# Certeasy on half a year of short-lived certificates (2 million, on SQLite and PostgreSQL)
# against an empty database and Pebble: its data set is built once by `certeasy-loadgen fill`
# and cached in ${CERTEASY_BENCH_CACHE:-~/.cache/certeasy-bench}, outside the clone).
# Tunables (environment): BENCH_SECS, BENCH_TASKS (redis load), BENCH_BUCKETS (redis memory),
# BENCH_ACCOUNTS, BENCH_ORDERS, BENCH_CONCURRENCY, BENCH_LEGO_RUNS (issuance-inproc); the
# issuance (Certeasy vs Pebble), scale, cluster and testmode parts are the load generator's
# `certeasy-loadgen bench <part>`, whose `--help` lists their settings, each with the environment
# variable it falls back to (BENCH_ROUNDS, BENCH_DURATION, BENCH_RERUNS, BENCH_STALL_AFTER,
# BENCH_UPDATE_DOCS, BENCH_FLAME, ...); BENCH_PROFILE [dist] is the Cargo profile both binaries
# are built with for them.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/certeasy-target}"
export CERTEASY_TEST_POSTGRES_URL="${CERTEASY_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
out="$CARGO_TARGET_DIR/bench-results.txt"
raw="$CARGO_TARGET_DIR/bench-raw.txt"
mkdir -p "$CARGO_TARGET_DIR"
: >"$raw"

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(memory redis redis-memory issuance-inproc issuance)
wants() { local p; for p in "${parts[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }

log() { printf '\n==> %s\n' "$*" >&2; }

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "nproc: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "ram: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "rustc: $(rustc --version)"
  command -v redis-server >/dev/null && echo "redis: $(redis-server --version | awk '{print $3}')"
  command -v lego >/dev/null && echo "lego: $(lego --version | head -1)"
} | tee "$out"

if wants memory; then
  # The machine is shared: a whole criterion run drifts by 10-20 % between its first and last
  # bench. Each run measures ours and governor back to back, so each run gives a ratio; the
  # figure is the median of BENCH_MEMORY_RUNS runs, with the spread shown.
  runs="${BENCH_MEMORY_RUNS:-3}"
  for run in $(seq 1 "$runs"); do
    log "in-memory limiter vs governor (criterion), run $run of $runs"
    cargo bench -p ratelimits --bench memory -- --output-format bencher | tee -a "$raw" |
      awk -v run="$run" '
        /^test .* bench:/ {
          name = $2; ns = $5; gsub(",", "", ns)
          per = (name ~ /^new_order_batch/) ? 5 : 1
          printf "run %d %s %.0f\n", run, name, per * 1e9 / ns
        }'
  done | tee "$CARGO_TARGET_DIR/bench-memory-runs.txt" >&2
  awk '
    # Insertion sort of a[1..n]: plain awk (mawk on Debian) has no asort.
    function sort(a, n,    i, j, v) {
      for (i = 2; i <= n; i++) { v = a[i]; for (j = i - 1; j >= 1 && a[j] > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
    }
    { rate[$2, $3] = $4; runs[$2] = 1 }
    END {
      split("new_order_batch single_bucket", groups, " ")
      for (g = 1; g <= 2; g++) {
        p = groups[g]
        n = 0
        for (r in runs) {
          n++
          lim[n] = rate[r, p "/certeasy_limiter"] / rate[r, p "/governor_keyed"]
          sto[n] = rate[r, p "/certeasy_memory_store"] / rate[r, p "/governor_keyed_prebuilt"]
          ours[n] = rate[r, p "/certeasy_limiter"]
        }
        sort(lim, n); sort(sto, n); sort(ours, n)
        m = int((n + 1) / 2)
        printf "RESULT %s_limiter_decisions_per_s_median=%.0f\n", p, ours[m]
        printf "RESULT %s_limiter_vs_governor_median=%.3f (min %.3f, max %.3f, %d runs)\n", p, lim[m], lim[1], lim[n], n
        printf "RESULT %s_store_vs_governor_prebuilt_median=%.3f (min %.3f, max %.3f, %d runs)\n", p, sto[m], sto[1], sto[n], n
      }
    }' "$CARGO_TARGET_DIR/bench-memory-runs.txt" | tee -a "$out"
fi

if wants redis; then
  log "redis load generator vs redis-benchmark"
  cargo bench -p ratelimits --bench redis_load | tee -a "$raw" | grep '^RESULT' | tee -a "$out"
fi

if wants redis-memory; then
  log "redis memory per bucket"
  cargo bench -p ratelimits --bench redis_memory | tee -a "$raw" | grep '^RESULT' | tee -a "$out"
fi

if wants issuance-inproc; then
  log "issuance-inproc (lego against the binary; instant-acme throughput on SQLite and PostgreSQL)"
  # Builds the release `certeasy` binary with the bench (the binary it runs as `certeasy serve`);
  # a separate `cargo build --release -p certeasy` would resolve features without the
  # dev-dependencies and rebuild half the tree for nothing.
  cargo bench -p certeasy --bench issuance --no-run
  cargo bench -p certeasy --bench issuance | tee -a "$raw" | grep '^RESULT' | tee -a "$out"
fi

# The load generator's parts start the servers themselves and write their own results
# ($CARGO_TARGET_DIR/bench-<part>/) and docs/performance.md sections. Both binaries are built with
# the profile that is shipped and measured (Cargo.toml's `dist`), in separate invocations so that
# each gets the features it is shipped with; the load generator runs the `certeasy` next to it.
loadgen_parts=()
for part in issuance scale cluster testmode baseline year; do
  if wants "$part"; then loadgen_parts+=("$part"); fi
done
if [ ${#loadgen_parts[@]} -gt 0 ]; then
  profile="${BENCH_PROFILE:-dist}"
  log "building certeasy and certeasy-loadgen ($profile profile)"
  cargo build --profile "$profile" -p certeasy
  cargo build --profile "$profile" -p loadgen
  for part in "${loadgen_parts[@]}"; do
    log "$part (certeasy-loadgen bench $part)"
    "$CARGO_TARGET_DIR/$profile/certeasy-loadgen" bench "$part" | tee -a "$raw"
  done
fi

log "figures (also in $out; full output in $raw)"
cat "$out"
