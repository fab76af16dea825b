#!/usr/bin/env bash
# Certeasy against Pebble with one load generator (crates/loadgen, `certeasy-loadgen`), and
# Certeasy alone at scale or as two instances. Called by scripts/bench.sh; usable on its own:
#
#   scripts/bench-loadgen.sh issuance   # Pebble vs Certeasy, alternating rounds -> docs/performance.md
#   scripts/bench-loadgen.sh scale      # 10,000 accounts and 100,000 orders: Certeasy's RSS
#   scripts/bench-loadgen.sh cluster    # two instances (PostgreSQL + Redis) behind a TCP proxy vs one,
#                                       # and one on PostgreSQL + Redis vs one on the SQLite default
#   scripts/bench-loadgen.sh issuance-report  # render the last issuance results again (no run)
#   scripts/bench-loadgen.sh testmode   # `certeasy serve --test-mode` under full issuance at 32
#                                       # concurrent flows: fails when any flow stalls (issue 11)
#
# Every run starts its server afresh: a new Pebble process, a new Certeasy data directory (and
# database). Both servers validate http-01 against the load generator's responder and resolve
# names through its DNS server, on the same fixed loopback ports. Rate limits of Certeasy are
# off for the run (whitelisted loopback, per-account limits disabled); Pebble has none.
#
# Environment (defaults in brackets):
#   BENCH_ROUNDS [3]            rounds; each round runs every scenario on both servers, the
#                               server order alternating from round to round
#   BENCH_DURATION [20]         seconds each scenario starts new flows
#   BENCH_SCENARIOS ["full:8 full:32 new-account:32 new-order:8"]  scenario:concurrency list
#   BENCH_NEW_ORDER_ACCOUNTS [32]  accounts made before the new-order scenario
#   BENCH_POLL_MS [5]           order poll interval (Retry-After is not honoured)
#   BENCH_STALL_AFTER [10]      seconds after which a flow counts as a stall
#   BENCH_RERUNS [2]            times a run with a stalled flow is set aside and run again
#   BENCH_FLAME [1]             profile Certeasy's full issuance (perf) after the rounds
#   BENCH_FLAME_SECS [10]       length of the profiled run
#   BENCH_PERF_CALLGRAPH [dwarf,16384]  perf record --call-graph mode
#   BENCH_PORT_BASE [18400]     first of the loopback ports used (BASE to BASE+17)
#   BENCH_SETTLE_LOAD [0.5], BENCH_SETTLE_SECS [90]  before the first round, wait (at most that
#                               long) for the 1-minute load average to fall below that
#   BENCH_UPDATE_DOCS [1]       write the table into docs/performance.md and the images to docs/img
#   BENCH_SCALE_ACCOUNTS [10000], BENCH_SCALE_ORDERS [100000], BENCH_SCALE_CONCURRENCY [16]
#   BENCH_CLUSTER_ROUNDS [BENCH_ROUNDS], BENCH_CLUSTER_DURATION [BENCH_DURATION],
#   BENCH_CLUSTER_SCENARIOS ["full:32 new-order:32"]
#   BENCH_CLUSTER_DB_DELAY_US [0]  (cluster) hold PostgreSQL's traffic this many microseconds
#                               each way (the load generator's proxy), for a database on a
#                               host of its own: 250 is a round trip of about 0.5 ms
#   BENCH_TESTMODE_CONCURRENCY [32], BENCH_TESTMODE_DURATION [BENCH_DURATION] (testmode)
#   CERTEASY_TEST_POSTGRES_URL [postgres://postgres@127.0.0.1:5432/postgres] (cluster)
#   BENCH_REDIS_URL [redis://127.0.0.1:6379] (cluster; keys under a fresh per-run prefix)
# Results: $CARGO_TARGET_DIR/bench-<part>/ (raw JSON per run, the table, the chart, logs of a
# failed run).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/certeasy-target}"
part="${1:?usage: scripts/bench-loadgen.sh issuance|scale|cluster}"
rounds="${BENCH_ROUNDS:-3}"
duration="${BENCH_DURATION:-20}"
scenarios="${BENCH_SCENARIOS:-full:8 full:32 new-account:32 new-order:8}"
new_order_accounts="${BENCH_NEW_ORDER_ACCOUNTS:-32}"
poll_ms="${BENCH_POLL_MS:-5}"
stall_after="${BENCH_STALL_AFTER:-10}"
base="${BENCH_PORT_BASE:-18400}"
acme_port=$base
mgmt_port=$((base + 1))
admin_port=$((base + 2))
http01_port=$((base + 3))
tls_alpn_port=$((base + 4))
dns_port=$((base + 5))
proxy_port=$((base + 6))
acme2_port=$((base + 7))
admin2_port=$((base + 8))
db_proxy_port=$((base + 17))
font=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf

out="$CARGO_TARGET_DIR/bench-$part"
log() { printf '\n==> %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Installs Debian package $1 when $2 (a command or a file) is missing.
need() {
  if command -v "$2" >/dev/null 2>&1 || [ -e "$2" ]; then return 0; fi
  log "installing $1"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
}

loadgen="$CARGO_TARGET_DIR/release/certeasy-loadgen"
certeasy="$CARGO_TARGET_DIR/release/certeasy"

build() {
  log "building certeasy and certeasy-loadgen (release)"
  # Separate invocations: each binary gets the features it is shipped with.
  cargo build --release -p certeasy
  cargo build --release -p loadgen
  settle
}

# Waits (up to BENCH_SETTLE_SECS) until the 1-minute load average is below BENCH_SETTLE_LOAD, so
# that the first round does not share the cores with what just ran (the build above, say). The
# load average recorded for each run says how quiet the machine was.
settle() {
  local max="${BENCH_SETTLE_SECS:-90}" below="${BENCH_SETTLE_LOAD:-0.5}" waited=0 load
  while :; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    if awk -v l="$load" -v b="$below" 'BEGIN { exit !(l < b) }'; then break; fi
    if [ "$waited" -ge "$max" ]; then
      log "load average still $load after ${max} s; starting anyway"
      break
    fi
    sleep 5
    waited=$((waited + 5))
  done
}

# Waits until TCP $1 accepts connections (process $2 must stay alive).
wait_port() {
  local port=$1 pid=$2 i
  for i in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then echo "server $pid exited early" >&2; return 1; fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on $port" >&2
  return 1
}

stop() {
  local pid
  for pid in "$@"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

server_pid=""
server_root=""
server_dir=""
directory=""

start_pebble() {
  server_dir=$(mktemp -d "$out/run.pebble.XXXX")
  "$loadgen" tls-cert --out "$server_dir"
  cat >"$server_dir/pebble.json" <<EOF
{
  "pebble": {
    "listenAddress": "127.0.0.1:$acme_port",
    "managementListenAddress": "127.0.0.1:$mgmt_port",
    "certificate": "$server_dir/cert.pem",
    "privateKey": "$server_dir/key.pem",
    "httpPort": $http01_port,
    "tlsPort": $tls_alpn_port,
    "ocspResponderURL": "",
    "externalAccountBindingRequired": false
  }
}
EOF
  # No artificial validation sleeps, no rejected nonces, no authorization reuse (every order
  # of the run names a new host anyway).
  PEBBLE_VA_NOSLEEP=1 PEBBLE_WFE_NONCEREJECT=0 PEBBLE_AUTHZREUSE=0 \
    pebble -config "$server_dir/pebble.json" -dnsserver "127.0.0.1:$dns_port" \
    >"$server_dir/server.log" 2>&1 </dev/null &
  server_pid=$!
  server_root="$server_dir/root.pem"
  directory="https://localhost:$acme_port/dir"
  wait_port "$acme_port" "$server_pid"
}

# Writes a Certeasy configuration: $1 dir, $2 listen port, $3 admin port, $4 external port,
# $5 database URL (empty: SQLite in the data dir), $6 Redis URL (empty: none), $7 key prefix.
certeasy_config() {
  local dir=$1 port=$2 admin=$3 external=$4 db=${5:-} redis=${6:-} prefix=${7:-}
  {
    cat <<EOF
data-dir: "$dir/data"
server:
  listen: "127.0.0.1:$port"
  admin-listen: "127.0.0.1:$admin"
  external-url: "https://localhost:$external"
  tls-names: ["localhost", "127.0.0.1"]
validation:
  dns-servers: ["127.0.0.1:$dns_port"]
  http-port: $http01_port
  tls-alpn-port: $tls_alpn_port
  allow-loopback: true
  timeout: 5s
logging:
  level: "warn"
acme:
  reuse-valid-authorizations: false
rate-limiting:
  whitelist: ["127.0.0.1", "::1"]
  order-creation:
    enabled: false
  pending-authorizations:
    enabled: false
  duplicate-certificate:
    enabled: false
  failed-validation:
    enabled: false
zombie-pausing:
  enabled: false
crl:
  listen: "127.0.0.1:$((port + 9))"
EOF
    [ -n "$db" ] && printf 'database:\n  url: "%s"\n' "$db"
    [ -n "$redis" ] && printf 'redis:\n  shards: ["%s"]\n  key-prefix: "%s"\n' "$redis" "$prefix"
    true
  } >"$dir/certeasy-$port.yaml"
  echo "$dir/certeasy-$port.yaml"
}

start_certeasy() {
  server_dir=$(mktemp -d "$out/run.certeasy.XXXX")
  local config
  config=$(certeasy_config "$server_dir" "$acme_port" "$admin_port" "$acme_port")
  "$certeasy" serve --config "$config" >"$server_dir/server.log" 2>&1 </dev/null &
  server_pid=$!
  server_root="$server_dir/data/ca/root.pem"
  directory="https://localhost:$acme_port/directory"
  wait_port "$acme_port" "$server_pid"
  until [ -s "$server_root" ]; do sleep 0.1; done
}

# Runs scenario $2 at concurrency $3 against the started server labelled $1, round $4.
run_scenario() {
  local label=$1 scenario=$2 concurrency=$3 round=$4
  local result="$out/raw/$label-$scenario-c$concurrency-r$round.json"
  "$loadgen" run --directory "$directory" --ca-root "$server_root" --server-pid "$server_pid" \
    --scenario "$scenario" --concurrency "$concurrency" --duration "$duration" \
    --accounts "$new_order_accounts" --poll-ms "$poll_ms" --stall-after "$stall_after" \
    --http01-listen "127.0.0.1:$http01_port" --dns-listen "127.0.0.1:$dns_port" \
    --label "$label" --round "$round" --output "$result" >&2
}

# One run on a fresh server. A run in which some flow stalled is set aside (kept in
# $out/stalled/, counted in the report's run line) and run again, up to BENCH_RERUNS times:
# Pebble 2.4 sometimes deadlocks under concurrent finalizations (its MemoryStore lock), and a
# deadlocked run says nothing about its throughput.
one_run() {
  local label=$1 scenario=$2 concurrency=$3 round=$4 attempt result
  result="$out/raw/$label-$scenario-c$concurrency-r$round.json"
  for attempt in $(seq 0 "${BENCH_RERUNS:-2}"); do
    log "round $round: $label, $scenario x$concurrency (load average $(cut -d' ' -f1 /proc/loadavg))"
    "start_$label"
    run_scenario "$label" "$scenario" "$concurrency" "$round" ||
      { echo "--- $label log ---" >&2; tail -20 "$server_dir/server.log" >&2; stop "$server_pid"; return 1; }
    stop "$server_pid"
    if grep -q '"stalls": 0,' "$result"; then
      rm -rf "$server_dir"
      return 0
    fi
    mkdir -p "$out/stalled"
    mv "$result" "$out/stalled/$label-$scenario-c$concurrency-r$round-a$attempt.json"
    cp "$server_dir/server.log" "$out/stalled/$label-$scenario-c$concurrency-r$round-a$attempt.log"
    echo "$label $scenario x$concurrency round $round" >>"$out/stalled.txt"
    rm -rf "$server_dir"
  done
  echo "$label $scenario x$concurrency round $round stalled ${BENCH_RERUNS:-2} times more: no figure" >&2
}

# "label: N runs" for the report's run line.
stalled_summary() {
  if [ ! -s "$out/stalled.txt" ]; then echo "no run stalled"; return; fi
  printf 'runs set aside because a flow stalled and run again: %s' \
    "$(cut -d' ' -f1-3 "$out/stalled.txt" | sort | uniq -c |
      awk '{printf "%s%s %s %s %d times", (NR > 1 ? ", " : ""), $2, $3, $4, $1}')"
}

flame() {
  local secs="${BENCH_FLAME_SECS:-10}" data="$out/perf.data"
  need linux-perf perf
  log "profiling Certeasy's full issuance (perf, $secs s, not part of the figures)"
  start_certeasy
  perf record -q -e cpu-clock -F 299 --call-graph "${BENCH_PERF_CALLGRAPH:-dwarf,16384}" -p "$server_pid" \
    -o "$data" -- sleep "$((secs + 1))" 2>"$out/perf-record.log" &
  local perf_pid=$!
  "$loadgen" run --directory "$directory" --ca-root "$server_root" --scenario full \
    --concurrency 32 --duration "$secs" --poll-ms "$poll_ms" --stall-after "$stall_after" \
    --http01-listen "127.0.0.1:$http01_port" --dns-listen "127.0.0.1:$dns_port" \
    --label certeasy-profiled >&2
  wait "$perf_pid" || true
  stop "$server_pid"
  perf script -i "$data" >"$out/perf.script" 2>/dev/null
  "$loadgen" flamegraph --perf-script "$out/perf.script" --output "$out/flamegraph.svg" \
    --title "Certeasy: full issuance, 32 concurrent (perf, $secs s)"
  rm -rf "$server_dir" "$data"
}

machine() {
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "nproc: $(nproc); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "pebble: $(dpkg-query -W -f='${Version}' pebble 2>/dev/null || echo unknown)"
  echo "rounds: $rounds; duration: $duration s; scenarios: $scenarios; poll: $poll_ms ms"
}

issuance() {
  need pebble pebble
  need fonts-dejavu-core "$font"
  build
  rm -rf "$out"
  mkdir -p "$out/raw"
  machine | tee "$out/machine.txt" >&2
  local round label scenario concurrency item order
  for round in $(seq 1 "$rounds"); do
    # Alternate which server goes first, so drift on a shared machine hits both alike.
    if [ $((round % 2)) = 1 ]; then order="pebble certeasy"; else order="certeasy pebble"; fi
    for item in $scenarios; do
      scenario=${item%%:*}
      concurrency=${item##*:}
      for label in $order; do
        one_run "$label" "$scenario" "$concurrency" "$round"
      done
    done
  done
  [ "${BENCH_FLAME:-1}" = 1 ] && flame
  issuance_report
}

issuance_report() {
  # The settings of the run that made the results (machine.txt), not of this shell.
  report issuance-vs-pebble pebble certeasy \
    "$(sed -n 5p "$out/machine.txt"), Pebble $(sed -n 4p "$out/machine.txt" | cut -d' ' -f2-); $(stalled_summary); cells are the median (min–max) over rounds"
}

# Renders $out/raw into $out/table.md (and the chart); with BENCH_UPDATE_DOCS=1 also between the
# $1 markers of docs/performance.md, the images into docs/img/. $2/$3: baseline and subject
# labels; $4: what the run was.
report() {
  local marker=$1 baseline=$2 subject=$3 extra=$4
  printf 'Run of %s (%s, %s): %s.\n\n' \
    "$(sed -n 1p "$out/machine.txt" | cut -d' ' -f2-)" \
    "$(sed -n 2p "$out/machine.txt")" "$(sed -n 3p "$out/machine.txt")" \
    "$extra" >"$out/preamble.md"
  local args=(--results "$out/raw" --baseline "$baseline" --subject "$subject"
    --preamble "$out/preamble.md" --markdown "$out/table.md" --font "$font")
  [ "$marker" != scale ] && args+=(--chart "$out/$marker.png")
  [ -d "$out/stalled" ] && args+=(--stalled "$out/stalled")
  if [ "${BENCH_UPDATE_DOCS:-1}" = 1 ]; then
    args+=(--insert-into docs/performance.md --marker "$marker")
    mkdir -p docs/img
  fi
  "$loadgen" report "${args[@]}"
  if [ "${BENCH_UPDATE_DOCS:-1}" = 1 ]; then
    [ -f "$out/$marker.png" ] && cp "$out/$marker.png" docs/img/
    [ -f "$out/flamegraph.svg" ] && cp "$out/flamegraph.svg" docs/img/certeasy-issuance-flamegraph.svg
    log "docs/performance.md ($marker) and docs/img updated"
  fi
}

scale() {
  need fonts-dejavu-core "$font"
  build
  rm -rf "$out"
  mkdir -p "$out/raw"
  local accounts="${BENCH_SCALE_ACCOUNTS:-10000}" orders="${BENCH_SCALE_ORDERS:-100000}"
  machine | tee "$out/machine.txt" >&2
  log "scale: $accounts accounts, then $orders orders (no validation), Certeasy on SQLite"
  start_certeasy
  "$loadgen" run --directory "$directory" --ca-root "$server_root" --server-pid "$server_pid" \
    --scenario scale --accounts "$accounts" --orders "$orders" \
    --concurrency "${BENCH_SCALE_CONCURRENCY:-16}" --stall-after "$stall_after" \
    --http01-listen "127.0.0.1:$http01_port" --dns-listen "127.0.0.1:$dns_port" \
    --label certeasy --output "$out/raw/certeasy-scale.json" >&2
  du -sh "$server_dir/data" | sed 's/^/data dir: /' >&2
  stop "$server_pid"
  rm -rf "$server_dir"
  report scale certeasy certeasy "$accounts accounts and $orders orders on SQLite, ${BENCH_SCALE_CONCURRENCY:-16} concurrent"
}

# Two Certeasy instances on one PostgreSQL database and Redis, behind the load generator's TCP
# round-robin proxy, against one instance behind the same proxy.
cluster() {
  need fonts-dejavu-core "$font"
  build
  rm -rf "$out"
  mkdir -p "$out/raw"
  local admin_url="${CERTEASY_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
  local redis_url="${BENCH_REDIS_URL:-redis://127.0.0.1:6379}"
  local round instances item scenario concurrency order
  rounds="${BENCH_CLUSTER_ROUNDS:-$rounds}"
  duration="${BENCH_CLUSTER_DURATION:-$duration}"
  scenarios="${BENCH_CLUSTER_SCENARIOS:-full:32 new-order:32}"
  machine | tee "$out/machine.txt" >&2
  for round in $(seq 1 "$rounds"); do
    if [ $((round % 2)) = 1 ]; then order="sqlite 1 2"; else order="2 1 sqlite"; fi
    for item in $scenarios; do
      scenario=${item%%:*}
      concurrency=${item##*:}
      for instances in $order; do
        cluster_run "$instances" "$scenario" "$concurrency" "$round" "$admin_url" "$redis_url"
      done
    done
  done
  local network=""
  [ "${BENCH_CLUSTER_DB_DELAY_US:-0}" != 0 ] &&
    network=", PostgreSQL reached through a proxy delaying each direction ${BENCH_CLUSTER_DB_DELAY_US} µs"
  report cluster certeasy-1 certeasy-2 \
    "$rounds rounds of $duration s per scenario; PostgreSQL + Redis, one instance vs two behind one TCP round-robin proxy$network"
  report postgres-vs-sqlite certeasy-sqlite certeasy-1 \
    "$rounds rounds of $duration s per scenario, behind the same proxy; one instance on the embedded SQLite default vs one on PostgreSQL + Redis$network"
}

cluster_run() {
  local instances=$1 scenario=$2 concurrency=$3 round=$4 admin_url=$5 redis_url=$6
  local label="certeasy-$instances" db="certeasy_loadgen_$$_${round}_$RANDOM"
  # "sqlite": one instance on the embedded default (SQLite, limits in memory), the baseline of
  # the PostgreSQL figures.
  local db_url redis_arg
  if [ "$instances" = sqlite ]; then instances=1 db_url="" redis_arg=""; fi
  local prefix="certeasy-loadgen-$$-$RANDOM:" base_url=${admin_url%/*}
  local db_delay="${BENCH_CLUSTER_DB_DELAY_US:-0}" db_proxy_pid=""
  log "round $round: $label, $scenario x$concurrency (load average $(cut -d' ' -f1 /proc/loadavg))"
  if [ "$label" != certeasy-sqlite ]; then
    psql "$admin_url" -v ON_ERROR_STOP=1 -qc "CREATE DATABASE $db" >/dev/null
    db_url="$base_url/$db" redis_arg="$redis_url"
    if [ "$db_delay" != 0 ]; then
      # The instances reach PostgreSQL through a proxy that delays each direction, as a
      # database on another host would answer; the URL's user and host:port are kept apart.
      local authority=${base_url#*://} user=""
      case "$authority" in *@*) user="${authority%%@*}@" authority=${authority#*@} ;; esac
      "$loadgen" proxy --listen "127.0.0.1:$db_proxy_port" --backend "$authority" \
        --delay-us "$db_delay" 2>/dev/null &
      db_proxy_pid=$!
      wait_port "$db_proxy_port" "$db_proxy_pid"
      db_url="${base_url%%://*}://${user}127.0.0.1:$db_proxy_port/$db"
    fi
  fi
  server_dir=$(mktemp -d "$out/run.$label.XXXX")
  local pids=() backends=() i port admin config
  for i in $(seq 1 "$instances"); do
    if [ "$i" = 1 ]; then port=$acme_port admin=$admin_port; else port=$acme2_port admin=$admin2_port; fi
    config=$(certeasy_config "$server_dir" "$port" "$admin" "$proxy_port" "$db_url" "$redis_arg" "$prefix")
    "$certeasy" serve --config "$config" >"$server_dir/server-$i.log" 2>&1 </dev/null &
    pids+=($!)
    backends+=(--backend "127.0.0.1:$port")
    # The first instance creates the CA (and migrates the database); the others load it.
    wait_port "$port" "$!"
  done
  "$loadgen" proxy --listen "127.0.0.1:$proxy_port" "${backends[@]}" 2>"$server_dir/proxy.log" &
  local proxy_pid=$!
  wait_port "$proxy_port" "$proxy_pid"
  local pid_args=() pid
  for pid in "${pids[@]}"; do pid_args+=(--server-pid "$pid"); done
  "$loadgen" run --directory "https://localhost:$proxy_port/directory" \
    --ca-root "$server_dir/data/ca/root.pem" "${pid_args[@]}" \
    --scenario "$scenario" --concurrency "$concurrency" --duration "$duration" \
    --accounts "$new_order_accounts" --poll-ms "$poll_ms" --stall-after "$stall_after" \
    --http01-listen "127.0.0.1:$http01_port" --dns-listen "127.0.0.1:$dns_port" \
    --label "$label" --round "$round" --output "$out/raw/$label-$scenario-c$concurrency-r$round.json" >&2 ||
    { tail -20 "$server_dir"/server-*.log >&2; stop "$proxy_pid" "${pids[@]}"; return 1; }
  stop "$proxy_pid" "${pids[@]}"
  [ -n "$db_proxy_pid" ] && stop "$db_proxy_pid"
  [ -n "$db_url" ] && { psql "$admin_url" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null || true; }
  # Only this run's keys (never a flush: the Redis instance is shared).
  redis-cli -u "$redis_url" --scan --pattern "$prefix*" | xargs -r redis-cli -u "$redis_url" del >/dev/null || true
  rm -rf "$server_dir"
}

# `certeasy serve --test-mode` as a client's CI starts it (flags only, no configuration file, state
# in its own temporary directory), under full issuance: the test instance must never deadlock,
# so any stalled flow fails the part. Validation goes to the load generator's responder and DNS
# server; authorization reuse is off, as for Pebble above.
testmode() {
  need jq jq
  build
  rm -rf "$out"
  mkdir -p "$out"
  local concurrency="${BENCH_TESTMODE_CONCURRENCY:-32}" secs="${BENCH_TESTMODE_DURATION:-$duration}"
  machine | tee "$out/machine.txt" >&2
  log "test mode: full issuance x$concurrency for $secs s (load average $(cut -d' ' -f1 /proc/loadavg))"
  "$certeasy" serve --test-mode --json --listen "127.0.0.1:$acme_port" \
    --admin-listen "127.0.0.1:$admin_port" --crl-listen "127.0.0.1:$((acme_port + 9))" --http-port "$http01_port" \
    --tls-alpn-port "$tls_alpn_port" --dns-server "127.0.0.1:$dns_port" --no-authz-reuse \
    >"$out/info.json" 2>"$out/server.log" </dev/null &
  server_pid=$!
  local i
  for i in $(seq 1 300); do
    [ -s "$out/info.json" ] && break
    kill -0 "$server_pid" 2>/dev/null || { tail -20 "$out/server.log" >&2; return 1; }
    sleep 0.1
  done
  directory=$(jq -r .directory "$out/info.json")
  server_root=$(jq -r .root "$out/info.json")
  local data_dir
  data_dir=$(jq -r '."data-dir"' "$out/info.json")
  "$loadgen" run --directory "$directory" --ca-root "$server_root" --server-pid "$server_pid" \
    --scenario full --concurrency "$concurrency" --duration "$secs" --poll-ms "$poll_ms" \
    --stall-after "$stall_after" \
    --http01-listen "127.0.0.1:$http01_port" --dns-listen "127.0.0.1:$dns_port" \
    --label certeasy-test-mode --output "$out/testmode.json" >&2 ||
    { tail -20 "$out/server.log" >&2; stop "$server_pid"; return 1; }
  stop "$server_pid"
  [ -e "$data_dir" ] && { echo "test mode left its state directory $data_dir behind" >&2; return 1; }
  local stalls
  stalls=$(jq -r .stalls "$out/testmode.json")
  echo "test mode, full issuance x$concurrency, $secs s: $(jq -r .flows "$out/testmode.json") flows, $(jq -r .errors "$out/testmode.json") errors, $stalls stalls"
  [ "$stalls" = 0 ] || { echo "test mode stalled under load: see $out/server.log" >&2; return 1; }
}

case "$part" in
  issuance) issuance ;;
  issuance-report) out="$CARGO_TARGET_DIR/bench-issuance" issuance_report ;;
  scale) scale ;;
  cluster) cluster ;;
  testmode) testmode ;;
  *) echo "unknown part $part: expected issuance, scale, cluster or testmode" >&2; exit 2 ;;
esac
