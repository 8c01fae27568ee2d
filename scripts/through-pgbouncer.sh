#!/usr/bin/env bash
# Runs the PostgreSQL conformance suite and the PostgreSQL worker tests a second time,
# through a PgBouncer of its own in transaction pooling mode (scripts/pgbouncer-start.sh)
# in front of the server at FLEET_TEST_POSTGRES_URL (default:
# postgres://postgres@127.0.0.1:5432/test). In transaction mode PgBouncer may hand each
# transaction, and each statement outside one, a different server session, so nothing
# may rely on session state: the tests give each registry a database of its own
# (FLEET_TEST_POSTGRES_ISOLATION=database), not a schema chosen by search_path. Few
# server sessions, so clients take turns on them as under load: a statement that relied
# on its session (a prepared statement kept between transactions) meets another.
#
#   scripts/through-pgbouncer.sh [cargo test arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."

server="${FLEET_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
dir="$(mktemp -d /tmp/fleetward-pgbouncer.XXXXXX)"
stop() {
    kill "$(cat "$dir/pgbouncer.pid" 2>/dev/null)" 2>/dev/null || true
    rm -rf "$dir"
}
trap stop EXIT
listen="$(scripts/pgbouncer-start.sh "$server" "$dir" 3)"

export FLEET_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$listen/${server##*/}"
export FLEET_TEST_POSTGRES_ISOLATION=database
echo "through-pgbouncer: PgBouncer $(pgbouncer --version | head -1 | awk '{print $2}') (transaction pooling) at 127.0.0.1:$listen"
# --workspace, as the README's test command builds: the same features, nothing rebuilt
# (the SQLite conformance suite, also named `conformance`, runs again beside it).
cargo test --workspace --test conformance "$@"
# The worker tests that neither set session options (a pooler forwards none) nor find
# their own server sessions by name (a pooler shares them out).
cargo test --workspace --test postgres_backend "$@" -- \
    a_fixture_snapshots_alike_on_postgres_and_sqlite \
    a_worker_registers_and_releases_through_postgres \
    a_launch_beats_sweeps_and_retires_on_postgres \
    eight_concurrent_initializers_on_postgres_run_the_command_once
