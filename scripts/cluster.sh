#!/usr/bin/env bash
# The scaled-out topology without a container engine: two Certeasy instances on the local
# PostgreSQL and Redis, behind a local nginx that terminates TLS and proxies HTTPS to both.
#
#   scripts/cluster.sh start            # creates everything, prints the directory URL and root
#   scripts/cluster.sh status           # each process, and each instance's /readyz
#   scripts/cluster.sh stop-instance b  # stops one instance (SIGTERM, then SIGKILL after 10 s)
#   scripts/cluster.sh kill-instance b  # crashes one instance (SIGKILL)
#   scripts/cluster.sh stop             # stops everything, drops the database, deletes the keys
#
# Nothing shared is touched destructively: `start` creates a database with a unique name on
# the PostgreSQL server and `stop` drops that database; Redis keys are written under a unique
# prefix and `stop` deletes only the keys under it (never FLUSHDB). The CA, the nginx
# certificate, the shared secrets, every config file, log and pid live in CLUSTER_DIR.
#
# Environment (all optional):
#   CERTEASY_BIN           the certeasy binary (default: certeasy on PATH, else target/release)
#   CLUSTER_DIR            state directory (default: ./cluster)
#   CLUSTER_PORT_BASE      nginx listens on BASE, instance a on BASE+1 (admin BASE+2),
#                          instance b on BASE+3 (admin BASE+4); their CRL listeners on
#                          BASE+5 and BASE+6; default 24000
#   CLUSTER_POSTGRES_URL   a PostgreSQL URL allowed to CREATE DATABASE
#                          (default postgres://postgres@127.0.0.1:5432/postgres)
#   CLUSTER_REDIS_URL      default redis://127.0.0.1:6379
#   CLUSTER_DB_NAME        database to create (default certeasy_cluster_<random>)
#   CLUSTER_HOST           name clients use for nginx (default localhost)
#   CLUSTER_HTTP01_PORT, CLUSTER_TLSALPN01_PORT, CLUSTER_DNS_SERVERS (comma-separated ip:port),
#   CLUSTER_ALLOW_LOOPBACK (true|false): the `validation` section (defaults 80, 443, the host's
#                          resolvers, false)
#   CLUSTER_JOB_LEASE      validation.job-lease (default 30s)
#   CLUSTER_REDIS_PREFIX   redis.key-prefix without the colon (default certeasy-cluster-<random>)
#   CLUSTER_EXTRA_YAML     a file appended to both instances' configs, for sections this script
#                          does not write (e.g. rate-limiting)
set -euo pipefail

starting=0
die() {
  echo "cluster.sh: $*" >&2
  if [ "$starting" = 1 ] && [ -e "$state" ]; then
    echo "cluster.sh: clean up what was started with: CLUSTER_DIR=$dir $0 stop" >&2
  fi
  exit 1
}

repo="$(cd "$(dirname "$0")/.." && pwd)"
dir="${CLUSTER_DIR:-$repo/cluster}"
state="$dir/state.env"

need() { command -v "$1" >/dev/null 2>&1 || die "$1 is missing (Debian package: $2)"; }

# nginx is often in /usr/sbin, which is not on every user's PATH.
find_nginx() {
  if command -v nginx >/dev/null 2>&1; then command -v nginx
  elif [ -x /usr/sbin/nginx ]; then echo /usr/sbin/nginx
  else die "nginx is missing (Debian package: nginx)"; fi
}

find_certeasy() {
  if [ -n "${CERTEASY_BIN:-}" ]; then echo "$CERTEASY_BIN"
  elif command -v certeasy >/dev/null 2>&1; then command -v certeasy
  elif [ -x "$repo/target/release/certeasy" ]; then echo "$repo/target/release/certeasy"
  else die "no certeasy binary: set CERTEASY_BIN or build with cargo build --release -p certeasy"; fi
}

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

pid_of() { cat "$dir/$1.pid" 2>/dev/null || true; }

# Stops a process by pid: SIGTERM, then SIGKILL once `secs` seconds have gone by.
stop_pid() {
  local pid="$1" secs="$2"
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 $((secs * 10))); do alive "$pid" || return 0; sleep 0.1; done
  echo "pid $pid did not stop in ${secs}s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

# The CA both instances issue under (ca.existing), the listener intermediate beside it (it signs
# the instances' own HTTPS certificates and nginx's, never the issuing intermediate, whose every
# certificate the database records), and nginx's certificate.
make_pki() {
  local ca="$dir/ca" tls="$dir/tls"
  mkdir -p "$ca" "$tls"
  chmod 700 "$ca" "$tls"
  (
    umask 077
    cd "$ca"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out root.key 2>/dev/null
    openssl req -x509 -new -key root.key -sha256 -days 3650 -out root.pem \
      -subj "/O=Certeasy cluster/CN=Certeasy cluster root $id" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -addext "subjectKeyIdentifier=hash"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out intermediate.key 2>/dev/null
    openssl req -new -key intermediate.key -out intermediate.csr \
      -subj "/O=Certeasy cluster/CN=Certeasy cluster intermediate $id"
    printf '%s\n' "basicConstraints=critical,CA:TRUE,pathlen:0" \
      "keyUsage=critical,digitalSignature,keyCertSign,cRLSign" \
      "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid:always" > intermediate.ext
    openssl x509 -req -in intermediate.csr -CA root.pem -CAkey root.key -CAcreateserial \
      -days 1825 -sha256 -extfile intermediate.ext -out intermediate.pem 2>/dev/null
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out listener.key 2>/dev/null
    openssl req -new -key listener.key -out listener.csr \
      -subj "/O=Certeasy cluster/CN=Certeasy cluster listener $id"
    printf '%s\n' "basicConstraints=critical,CA:TRUE,pathlen:0" \
      "keyUsage=critical,digitalSignature,keyCertSign" "extendedKeyUsage=serverAuth,clientAuth" \
      "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid:always" > listener.ext
    openssl x509 -req -in listener.csr -CA root.pem -CAkey root.key -CAcreateserial \
      -days 1825 -sha256 -extfile listener.ext -out listener.pem 2>/dev/null
    rm -f intermediate.csr intermediate.ext listener.csr listener.ext root.srl
    chmod 644 root.pem intermediate.pem listener.pem
    cd "$tls"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out nginx.key 2>/dev/null
    openssl req -new -key nginx.key -out nginx.csr -subj "/CN=$host"
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
      "extendedKeyUsage=serverAuth" "subjectAltName=DNS:$host,DNS:localhost,IP:127.0.0.1" \
      "authorityKeyIdentifier=keyid" > nginx.ext
    openssl x509 -req -in nginx.csr -CA "$ca/listener.pem" -CAkey "$ca/listener.key" \
      -CAcreateserial -days 365 -sha256 -extfile nginx.ext -out nginx.crt 2>/dev/null
    cat nginx.crt "$ca/listener.pem" > nginx.pem
    rm -f nginx.csr nginx.ext nginx.crt "$ca/listener.srl"
  )
}

# One instance's configuration; everything but its ports and data dir is the same for both.
write_instance_config() {
  local name="$1" port="$2" admin="$3" crl="$4" dns="" server servers=()
  IFS=, read -r -a servers <<< "${CLUSTER_DNS_SERVERS:-}"
  for server in "${servers[@]}"; do dns="$dns${dns:+, }\"$server\""; done
  mkdir -p "$dir/$name"
  chmod 700 "$dir/$name"
  cat > "$dir/$name.yaml" <<EOF
# Instance $name of the cluster made by scripts/cluster.sh.
data-dir: "$dir/$name"
server:
  listen: "127.0.0.1:$port"
  admin-listen: "127.0.0.1:$admin"
  external-url: "https://$host:$nginx_port"
  tls-names: ["localhost", "127.0.0.1"]
  # nginx connects from 127.0.0.1 and names the client in X-Forwarded-For; only it is trusted.
  trusted-proxies: ["127.0.0.1/32"]
  admin-token-file: "$dir/secrets/admin.token"
database:
  url: "$db_url"
ca:
  existing:
    certificate: "$dir/ca/intermediate.pem"
    private-key: "$dir/ca/intermediate.key"
    chain: "$dir/ca/root.pem"
redis:
  shards: ["$redis_url"]
  timeout: 1s
  key-prefix: "$prefix:"
validation:
  dns-servers: [$dns]
  http-port: ${CLUSTER_HTTP01_PORT:-80}
  tls-alpn-port: ${CLUSTER_TLSALPN01_PORT:-443}
  allow-loopback: ${CLUSTER_ALLOW_LOOPBACK:-false}
  job-lease: ${CLUSTER_JOB_LEASE:-30s}
logging:
  # tower_http=debug logs every request an instance serves.
  level: "info,tower_http=debug"
zombie-pausing:
  unpause-key-file: "$dir/secrets/unpause.key"
crl:
  listen: "127.0.0.1:$crl"
  # Certificates name the CRL behind nginx, which any live instance answers (/crl/ is also
  # served on the ACME listener).
  base-url: "https://$host:$nginx_port/crl"
EOF
  if [ -n "${CLUSTER_EXTRA_YAML:-}" ]; then cat "$CLUSTER_EXTRA_YAML" >> "$dir/$name.yaml"; fi
}

write_nginx_config() {
  mkdir -p "$dir/nginx/tmp"
  cat > "$dir/nginx/nginx.conf" <<EOF
# nginx in front of the cluster made by scripts/cluster.sh: terminates TLS with a certificate
# of the cluster's CA and proxies HTTPS to both instances, verifying their certificates.
worker_processes 1;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/error.log info;
events { worker_connections 512; }
http {
  log_format upstream '\$remote_addr [\$time_local] "\$request" \$status upstream=\$upstream_addr';
  access_log $dir/nginx/access.log upstream;
  client_body_temp_path $dir/nginx/tmp/body;
  proxy_temp_path $dir/nginx/tmp/proxy;
  fastcgi_temp_path $dir/nginx/tmp/fastcgi;
  uwsgi_temp_path $dir/nginx/tmp/uwsgi;
  scgi_temp_path $dir/nginx/tmp/scgi;
  # Bodies and answers stay in memory (Certeasy refuses bodies over 64 KiB anyway).
  client_max_body_size 64k;
  client_body_buffer_size 64k;
  proxy_max_temp_file_size 0;

  upstream certeasy {
    server 127.0.0.1:$a_port max_fails=1 fail_timeout=10s;
    server 127.0.0.1:$b_port max_fails=1 fail_timeout=10s;
  }

  server {
    listen 127.0.0.1:$nginx_port ssl;
    server_name $host;
    ssl_certificate $dir/tls/nginx.pem;
    ssl_certificate_key $dir/tls/nginx.key;
    ssl_protocols TLSv1.2 TLSv1.3;

    location / {
      proxy_pass https://certeasy;
      proxy_http_version 1.1;
      proxy_ssl_verify on;
      proxy_ssl_trusted_certificate $dir/ca/root.pem;
      proxy_ssl_name localhost;
      proxy_ssl_server_name on;
      proxy_set_header Host \$http_host;
      # nginx is the edge: it names the TCP peer and drops whatever the client claimed, so
      # nobody can write their own X-Forwarded-For past it. Behind another proxy, append
      # instead (\$proxy_add_x_forwarded_for) and trust that proxy too.
      proxy_set_header X-Forwarded-For \$remote_addr;
      proxy_set_header X-Forwarded-Proto https;
      # A request whose instance fails (refuses the connection, closes it or dies before
      # answering) is sent to the other one, POSTs included: every ACME POST carries a
      # single-use nonce, shared through Redis, so a resent POST is either processed once or
      # refused with badNonce (which clients retry). The only other POST, /unpause, unpauses
      # what is already unpaused the second time.
      proxy_next_upstream error timeout non_idempotent;
      proxy_connect_timeout 2s;
      proxy_read_timeout 60s;
    }
  }
}
EOF
}

start_instance() {
  local name="$1" admin="$2"
  NO_COLOR=1 setsid "$bin" serve --config "$dir/$name.yaml" </dev/null >>"$dir/$name.log" 2>&1 &
  echo $! > "$dir/$name.pid"
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null 2>&1; then return 0; fi
    alive "$(pid_of "$name")" || { tail -n 40 "$dir/$name.log" >&2; die "instance $name exited"; }
    sleep 0.1
  done
  tail -n 40 "$dir/$name.log" >&2
  die "instance $name is not ready after 30 s"
}

cmd_start() {
  [ ! -e "$state" ] || die "$dir already holds a cluster ($state); run stop first"
  need openssl openssl
  need psql postgresql-client
  need redis-cli redis-tools
  need curl curl
  nginx_bin="$(find_nginx)"
  bin="$(find_certeasy)"
  local base="${CLUSTER_PORT_BASE:-24000}"
  nginx_port="$base"; a_port=$((base + 1)); a_admin=$((base + 2))
  b_port=$((base + 3)); b_admin=$((base + 4))
  id="$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
  host="${CLUSTER_HOST:-localhost}"
  local pg_admin="${CLUSTER_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
  db_name="${CLUSTER_DB_NAME:-certeasy_cluster_$id}"
  case "$db_name" in *[!a-z0-9_]*) die "CLUSTER_DB_NAME must be [a-z0-9_]";; esac
  redis_url="${CLUSTER_REDIS_URL:-redis://127.0.0.1:6379}"
  prefix="${CLUSTER_REDIS_PREFIX:-certeasy-cluster-$id}"

  mkdir -p "$dir"
  chmod 700 "$dir"
  dir="$(cd "$dir" && pwd)"
  state="$dir/state.env"
  redis-cli -u "$redis_url" ping >/dev/null || die "Redis does not answer at $redis_url"
  psql "$pg_admin" -v ON_ERROR_STOP=1 -qc "CREATE DATABASE $db_name" >/dev/null \
    || die "cannot create database $db_name at $pg_admin"
  db_url="${pg_admin%/*}/$db_name"
  # From here on `stop` knows what to remove, whatever fails next.
  starting=1
  cat > "$state" <<EOF
pg_admin='$pg_admin'
db_name='$db_name'
redis_url='$redis_url'
prefix='$prefix'
nginx_port='$nginx_port'
a_admin='$a_admin'
b_admin='$b_admin'
host='$host'
EOF
  mkdir -p "$dir/secrets"
  chmod 700 "$dir/secrets"
  (umask 077; openssl rand -hex 32 > "$dir/secrets/admin.token"
   openssl rand -hex 32 > "$dir/secrets/unpause.key")
  make_pki
  write_instance_config a "$a_port" "$a_admin" $((base + 5))
  write_instance_config b "$b_port" "$b_admin" $((base + 6))
  write_nginx_config
  "$nginx_bin" -t -q -p "$dir/nginx" -c "$dir/nginx/nginx.conf" -e "$dir/nginx/error.log" \
    || die "nginx refuses the configuration"

  # Instance a applies the migrations alone, then b starts on the migrated database.
  start_instance a "$a_admin"
  start_instance b "$b_admin"
  "$nginx_bin" -p "$dir/nginx" -c "$dir/nginx/nginx.conf" -e "$dir/nginx/error.log" \
    </dev/null >>"$dir/nginx/start.log" 2>&1
  for _ in $(seq 1 50); do [ -s "$dir/nginx/nginx.pid" ] && break; sleep 0.1; done
  cp "$dir/nginx/nginx.pid" "$dir/nginx.pid"
  for _ in $(seq 1 50); do
    curl -sf --cacert "$dir/ca/root.pem" --resolve "$host:$nginx_port:127.0.0.1" \
      "https://$host:$nginx_port/directory" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -sf --cacert "$dir/ca/root.pem" --resolve "$host:$nginx_port:127.0.0.1" \
    "https://$host:$nginx_port/directory" >/dev/null || die "nginx does not answer on $nginx_port"

  cat <<EOF
Certeasy cluster is up: two instances behind nginx, on PostgreSQL database $db_name and Redis
key prefix $prefix:.
  ACME directory:   https://$host:$nginx_port/directory
  Root certificate: $dir/ca/root.pem
  Instance a:       https://127.0.0.1:$a_port  admin http://127.0.0.1:$a_admin  log $dir/a.log
  Instance b:       https://127.0.0.1:$b_port  admin http://127.0.0.1:$b_admin  log $dir/b.log
  nginx:            $dir/nginx/access.log (upstream=... names the instance of each request)
EOF
}

load_state() {
  [ -e "$state" ] || die "no cluster in $dir (no $state)"
  # shellcheck disable=SC1090
  . "$state"
}

cmd_status() {
  load_state
  local down=0 name pid
  for name in nginx a b; do
    pid="$(pid_of "$name")"
    if alive "$pid"; then echo "$name: running (pid $pid)"; else echo "$name: stopped"; down=1; fi
  done
  for name in a b; do
    local admin_var="${name}_admin"
    if curl -sf "http://127.0.0.1:${!admin_var}/readyz" >/dev/null 2>&1; then
      echo "$name: ready"
    else
      echo "$name: not ready"; down=1
    fi
  done
  echo "ACME directory:   https://$host:$nginx_port/directory"
  echo "Root certificate: $dir/ca/root.pem"
  return "$down"
}

cmd_stop_instance() {
  load_state
  case "${1:-}" in a|b) ;; *) die "usage: cluster.sh stop-instance a|b";; esac
  stop_pid "$(pid_of "$1")" 10
  echo "instance $1 stopped"
}

cmd_kill_instance() {
  load_state
  case "${1:-}" in a|b) ;; *) die "usage: cluster.sh kill-instance a|b";; esac
  local pid
  pid="$(pid_of "$1")"
  if alive "$pid"; then
    kill -KILL "$pid"
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.05; done
  fi
  echo "instance $1 killed"
}

cmd_stop() {
  load_state
  stop_pid "$(pid_of nginx)" 10
  stop_pid "$(pid_of a)" 10
  stop_pid "$(pid_of b)" 10
  rm -f "$dir/nginx.pid" "$dir/a.pid" "$dir/b.pid"
  psql "$pg_admin" -qc "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null \
    || echo "could not drop database $db_name" >&2
  # Only this cluster's keys (SCAN, then DEL of what matched); never a flush.
  redis-cli -u "$redis_url" --scan --pattern "$prefix:*" 2>/dev/null \
    | xargs -r -n 100 redis-cli -u "$redis_url" DEL >/dev/null 2>&1 || true
  rm -f "$state"
  echo "cluster stopped; database $db_name dropped, Redis keys $prefix:* deleted; files stay in $dir"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  stop-instance) cmd_stop_instance "${2:-}" ;;
  kill-instance) cmd_kill_instance "${2:-}" ;;
  *) echo "usage: $0 start|stop|status|stop-instance a|b|kill-instance a|b" >&2; exit 2 ;;
esac
