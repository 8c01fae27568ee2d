#!/usr/bin/env bash
# `fleetctl registry import` of ROWS worker rows into a fresh SQLite file and a fresh
# PostgreSQL schema, alternating round by round; prints each backend's median and the
# ratio of PostgreSQL's to SQLite's. Needs FLEET_TEST_POSTGRES_URL. Not part of CI.
#
#   scripts/import-speed.sh [ROWS] [ROUNDS]     (default 10000, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
rows="${1:-10000}"
rounds="${2:-5}"
: "${FLEET_TEST_POSTGRES_URL:?set FLEET_TEST_POSTGRES_URL}"
cargo build --release -q -p fleetctl -p fleet-snapshot --example synthetic_export
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
target/release/examples/synthetic_export "$rows" > "$dir/fleet.json"
python3 - "$rows" "$rounds" "$dir" <<'PY'
import os, statistics, subprocess, sys, time
rows, rounds, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
base = os.environ["FLEET_TEST_POSTGRES_URL"]
times = {"sqlite": [], "postgres": []}
for r in range(rounds):
    schema = f"import_speed_{os.getpid()}_{r}"
    quiet = dict(os.environ, PGOPTIONS="-c client_min_messages=warning")
    subprocess.run(["psql", base, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"], check=True, env=quiet)
    sep = "&" if "?" in base else "?"
    for backend, location in (("sqlite", os.path.join(work, f"r{r}.sqlite3")),
                              ("postgres", f"{base}{sep}options=-csearch_path%3D{schema}")):
        env = dict(os.environ, FLEET_REGISTRY=location)
        subprocess.run(["target/release/fleetctl", "registry", "init"], env=env, check=True, capture_output=True)
        start = time.perf_counter()
        subprocess.run(["target/release/fleetctl", "registry", "import", os.path.join(work, "fleet.json")],
                       env=env, check=True, capture_output=True)
        times[backend].append(time.perf_counter() - start)
    subprocess.run(["psql", base, "-qc", f"DROP SCHEMA {schema} CASCADE"], check=True, env=quiet)
sqlite, postgres = statistics.median(times["sqlite"]), statistics.median(times["postgres"])
print(f"{rows} rows: SQLite {sqlite * 1000:.0f} ms, PostgreSQL {postgres * 1000:.0f} ms, {postgres / sqlite:.2f}x")
PY
