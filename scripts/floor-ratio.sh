#!/usr/bin/env bash
# Whole-process reads of a 100k-row registry against two floors, the read-and-print
# floor and the lower read-and-decode floor (every row read and decoded, nothing
# printed), the commands alternating round by round (on a shared machine whose speed drifts within
# minutes, running all of one command and then all of the next skews the ratio). Prints
# each command's median and fastest time and the median of its per-round ratio to the
# floor. Not part of CI.
#
#   scripts/floor-ratio.sh [ROUNDS]     (default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-15}"
# `--example` alone would build only the examples: the binary is asked for by name.
cargo build --release -q -p fleetctl --bin fleetctl
cargo build --release -q -p fleet-snapshot --example synthetic_export -p registry-sqlite --example read_and_print
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export FLEET_REGISTRY="$dir/r100k.sqlite3"
target/release/examples/synthetic_export 100000 > "$dir/fleet.json"
target/release/fleetctl registry import "$dir/fleet.json" > /dev/null
python3 - "$rounds" <<'PY'
import os, statistics, subprocess, sys, time

commands = {
    "floor (read and print)": ["target/release/examples/read_and_print", os.environ["FLEET_REGISTRY"]],
    "floor (read and decode)": ["target/release/examples/read_and_print", "--decode-only", os.environ["FLEET_REGISTRY"]],
    "fleetctl snapshot --json": ["target/release/fleetctl", "snapshot", "--json"],
    "fleetctl retire plan --json": ["target/release/fleetctl", "retire", "plan", "--json"],
}
times = {name: [] for name in commands}
for round_ in range(int(sys.argv[1]) + 1):  # round 0 warms the page cache
    for name, argv in commands.items():
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        if round_:
            times[name].append(time.perf_counter() - started)
def ratio(runs, floor):
    ratios = [run / base for run, base in zip(runs, times[floor])]
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"

for name, runs in times.items():
    print(f"{name}: median {statistics.median(runs) * 1000:.0f} ms, fastest {min(runs) * 1000:.0f} ms, "
          f"to read and print {ratio(runs, 'floor (read and print)')}, "
          f"to read and decode {ratio(runs, 'floor (read and decode)')}")
PY
