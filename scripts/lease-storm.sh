#!/usr/bin/env bash
# A lease storm on SQLite and, when FLEET_TEST_POSTGRES_URL is set, on PostgreSQL:
# WORKERS processes x ROUNDS rounds with random SIGKILL and SIGSTOP, checked from the
# audit log (crates/fleet-runtime/examples/lease_storm.rs). Not part of CI.
#
#   scripts/lease-storm.sh [WORKERS ROUNDS KILLS STOPS]     (default 16 10000 200 200)
set -euo pipefail
cd "$(dirname "$0")/.."
args=("${1:-16}" "${2:-10000}" "${3:-200}" "${4:-200}")
cargo build --release -q -p fleet-runtime --example lease_storm
storm=target/release/examples/lease_storm
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "== SQLite"
"$storm" "$dir/storm.sqlite3" "${args[@]}"
if [[ -n "${FLEET_TEST_POSTGRES_URL:-}" ]]; then
    schema="fleet_storm_$$"
    psql -q "$FLEET_TEST_POSTGRES_URL" -c "CREATE SCHEMA $schema"
    trap 'psql -q "$FLEET_TEST_POSTGRES_URL" -c "DROP SCHEMA $schema CASCADE"; rm -rf "$dir"' EXIT
    sep='?'; [[ "$FLEET_TEST_POSTGRES_URL" == *\?* ]] && sep='&'
    echo "== PostgreSQL"
    "$storm" "${FLEET_TEST_POSTGRES_URL}${sep}options=-csearch_path%3D${schema}" "${args[@]}"
fi
