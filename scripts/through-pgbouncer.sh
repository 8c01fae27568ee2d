#!/usr/bin/env bash
# Runs the PostgreSQL conformance suite and the PostgreSQL worker tests a second time,
# through a PgBouncer of its own in transaction pooling mode (Debian's package,
# installed on first use) in front of the server at FLEET_TEST_POSTGRES_URL (default:
# postgres://postgres@127.0.0.1:5432/test). In transaction mode PgBouncer may hand each
# transaction, and each statement outside one, a different server session, so nothing
# may rely on session state: the tests give each registry a database of its own
# (FLEET_TEST_POSTGRES_ISOLATION=database), not a schema chosen by search_path.
#
#   scripts/through-pgbouncer.sh [cargo test arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."

server="${FLEET_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
hostport="${server#*@}"
hostport="${hostport%%/*}"
host="${hostport%%:*}"
port="${hostport##*:}"

if ! command -v pgbouncer >/dev/null 2>&1; then
    apt-get install -y pgbouncer >/dev/null 2>&1 \
        || { apt-get update >/dev/null 2>&1 && apt-get install -y pgbouncer >/dev/null 2>&1; } \
        || { echo "through-pgbouncer: pgbouncer is not installed and could not be" >&2; exit 1; }
fi
pgbouncer="$(command -v pgbouncer)"

dir="$(mktemp -d /tmp/fleetward-pgbouncer.XXXXXX)"
chmod 755 "$dir"
listen="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# Few server sessions, so clients take turns on them as under load: a statement that
# relied on its session (a prepared statement kept between transactions) meets another.
cat >"$dir/pgbouncer.ini" <<EOF
[databases]
* = host=$host port=$port user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $listen
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 3
max_client_conn = 4000
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
# PgBouncer refuses to run as root.
as=()
if [ "$(id -u)" = 0 ]; then
    chown -R postgres "$dir"
    as=(runuser -u postgres --)
fi
"${as[@]}" "$pgbouncer" -d "$dir/pgbouncer.ini"
stop() {
    kill "$(cat "$dir/pgbouncer.pid" 2>/dev/null)" 2>/dev/null || true
    rm -rf "$dir"
}
trap stop EXIT
for _ in $(seq 50); do
    [ -s "$dir/pgbouncer.pid" ] && break
    sleep 0.1
done

export FLEET_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$listen/${server##*/}"
export FLEET_TEST_POSTGRES_ISOLATION=database
echo "through-pgbouncer: PgBouncer $("$pgbouncer" --version | head -1 | awk '{print $2}') (transaction pooling) at 127.0.0.1:$listen"
cargo test -p registry-postgres --test conformance "$@"
# The worker tests that neither set session options (a pooler forwards none) nor find
# their own server sessions by name (a pooler shares them out).
cargo test -p fleetctl --test postgres_backend "$@" -- \
    a_fixture_snapshots_alike_on_postgres_and_sqlite \
    a_worker_registers_and_releases_through_postgres \
    a_launch_beats_sweeps_and_retires_on_postgres \
    eight_concurrent_initializers_on_postgres_run_the_command_once
