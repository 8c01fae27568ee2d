#!/usr/bin/env bash
# Starts a PgBouncer of its own (Debian's package, installed on first use) in
# transaction pooling mode in front of the PostgreSQL server of SERVER_URL, in DIR (made
# for it), with POOL server sessions per database and user; prints the port it listens
# on (127.0.0.1). Stop it with: kill "$(cat DIR/pgbouncer.pid)".
#
#   scripts/pgbouncer-start.sh SERVER_URL DIR POOL
set -euo pipefail
server="$1" dir="$2" pool="$3"
hostport="${server#*@}"
hostport="${hostport%%/*}"
host="${hostport%%:*}"
port="${hostport##*:}"

if ! command -v pgbouncer >/dev/null 2>&1; then
    apt-get install -y pgbouncer >/dev/null 2>&1 \
        || { apt-get update >/dev/null 2>&1 && apt-get install -y pgbouncer >/dev/null 2>&1; } \
        || { echo "pgbouncer-start: pgbouncer is not installed and could not be" >&2; exit 1; }
fi
mkdir -p "$dir"
chmod 755 "$dir"
listen="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$host port=$port user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $listen
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = $pool
max_client_conn = 10000
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
# PgBouncer refuses to run as root.
as=()
if [ "$(id -u)" = 0 ]; then
    chown -R postgres "$dir"
    as=(runuser -u postgres --)
fi
# Many clients: each needs a descriptor.
ulimit -n 20000 2>/dev/null || true
"${as[@]}" "$(command -v pgbouncer)" -d "$dir/pgbouncer.ini"
for _ in $(seq 50); do
    [ -s "$dir/pgbouncer.pid" ] && break
    sleep 0.1
done
echo "$listen"
