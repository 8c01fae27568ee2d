#!/usr/bin/env bash
# `fleetctl registry import` of ROWS worker rows (and AUDIT lease audit entries) into a
# fresh SQLite file and a fresh PostgreSQL schema, alternating round by round, then
# `fleetctl snapshot --json` of each (three times a round); prints each backend's median
# time and peak memory and the ratio of PostgreSQL's time to SQLite's, for the import
# and for the snapshot. Needs FLEET_TEST_POSTGRES_URL. Not part of CI.
#
#   scripts/import-speed.sh [ROWS] [ROUNDS] [AUDIT]     (default 10000, 5, 0)
set -euo pipefail
cd "$(dirname "$0")/.."
rows="${1:-10000}"
rounds="${2:-5}"
audit="${3:-0}"
: "${FLEET_TEST_POSTGRES_URL:?set FLEET_TEST_POSTGRES_URL}"
# `--example` alone would build only the example: the binary is asked for by name.
cargo build --release -q -p fleetctl --bin fleetctl
cargo build --release -q -p fleet-snapshot --example synthetic_export
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
target/release/examples/synthetic_export "$rows" > "$dir/fleet.json"
# The audit log a busy fleet writes: renewals of a few hundred leases, in order.
python3 - "$audit" "$dir/fleet.json" <<'PY'
import json, sys
count, path = int(sys.argv[1]), sys.argv[2]
if count:
    with open(path) as f:
        dump = json.load(f)
    with open(path, "w") as f:
        f.write(json.dumps(dump)[:-1] + ', "lease_audit_log": [')
        for i in range(count):
            entry = {"id": i + 1, "event": "renew", "outcome": "renewed", "reason": None,
                     "lease_key": f"workflow:job-{i % 300}", "kind": "workflow",
                     "identity": f"wkr-author-{i % 300:08d}", "binding": None, "connector": None,
                     "fencing_epoch": 1 + i // 300, "correlation_id": None,
                     "at": f"2026-07-{1 + i // 100000 % 28:02d}T12:00:00.{i % 1000:03d}Z"}
            f.write(("," if i else "") + json.dumps(entry))
        f.write("]}")
PY
python3 - "$rows" "$rounds" "$dir" "$audit" <<'PY'
import os, statistics, subprocess, sys, time
rows, rounds, work, audit = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
base = os.environ["FLEET_TEST_POSTGRES_URL"]
times = {"sqlite": [], "postgres": []}
peaks = {"sqlite": [], "postgres": []}
snapshots = {"sqlite": [], "postgres": []}
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
        done = subprocess.run(["/usr/bin/time", "-f", "%M", "target/release/fleetctl", "registry", "import",
                               os.path.join(work, "fleet.json")], env=env, check=True, capture_output=True, text=True)
        times[backend].append(time.perf_counter() - start)
        peaks[backend].append(int(done.stderr.strip().splitlines()[-1]) / 1024)
    for _ in range(3):
        for backend, location in (("sqlite", os.path.join(work, f"r{r}.sqlite3")),
                                  ("postgres", f"{base}{sep}options=-csearch_path%3D{schema}")):
            env = dict(os.environ, FLEET_REGISTRY=location)
            start = time.perf_counter()
            subprocess.run(["target/release/fleetctl", "snapshot", "--json"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            snapshots[backend].append(time.perf_counter() - start)
    subprocess.run(["psql", base, "-qc", f"DROP SCHEMA {schema} CASCADE"], check=True, env=quiet)
sqlite, postgres = statistics.median(times["sqlite"]), statistics.median(times["postgres"])
print(f"{rows} rows, {audit} audit entries: SQLite {sqlite * 1000:.0f} ms ({max(peaks['sqlite']):.0f} MB), "
      f"PostgreSQL {postgres * 1000:.0f} ms ({max(peaks['postgres']):.0f} MB), {postgres / sqlite:.2f}x")
sqlite, postgres = statistics.median(snapshots["sqlite"]), statistics.median(snapshots["postgres"])
print(f"snapshot --json of {rows} rows: SQLite {sqlite * 1000:.0f} ms, PostgreSQL {postgres * 1000:.0f} ms, "
      f"{postgres / sqlite:.2f}x")
PY
