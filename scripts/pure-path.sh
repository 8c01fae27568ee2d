#!/usr/bin/env bash
# The pure crates read what the binaries write: a real registry (a finished worker, a
# running one, a workflow lease) is exported by `fleetctl registry export`, and the
# pure crates' examples alone classify it (`fleet-snapshot`'s classify_export) and plan
# its retirement (`fleet-retirement`'s plan_export), and so do the previous release's
# (fixtures/exports/previous-release.json). Run by CI after `cargo test`, which
# builds the binaries and the examples.
#
#   scripts/pure-path.sh            # uses target/debug (built by `cargo test`)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${FLEET_BIN_DIR:-$root/target/debug}"
work="$(mktemp -d)"
running=""
cleanup() {
    # The running worker releases its row as it stops: the registry goes after it.
    if [ -n "$running" ]; then
        kill "$running" 2>/dev/null || true
        wait "$running" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
export FLEET_REGISTRY="$work/registry.sqlite3"
"$bin/fleetctl" registry init >/dev/null
id="$("$bin/fleet-launch" mint --client codex | tail -n 1)"
export GITEA_MCP_CLIENT=codex GITEA_MCP_CLIENT_INSTANCE="$id"
"$bin/fleetctl" worker run --namespace author --repository /srv/repo -- true
"$bin/fleetctl" worker run --namespace reviewer --repository /srv/repo -- sleep 60 &
running=$!
for _ in $(seq 50); do
    [ "$("$bin/fleetctl" worker list -o name 2>/dev/null | wc -l)" -ge 2 ] && break
    sleep 0.2
done
"$bin/fleetctl" lease acquire --key workflow:deploy --owner ops >/dev/null
"$bin/fleetctl" registry export >"$work/fleet.json"
for table in instances worker_registrations leases lease_audit_log fencing_high_water; do
    grep -q "\"$table\"" "$work/fleet.json" || { echo "pure-path: the export has no $table" >&2; exit 1; }
done
# Exit 0 safe, 1 unsafe (this fleet's running worker has no launch process to own it);
# anything else is a file the pure crates could not read.
verdict=0
"$bin/examples/classify_export" "$work/fleet.json" >"$work/classified" || verdict=$?
cat "$work/classified"
[ "$verdict" -le 1 ] || { echo "pure-path: classify_export exited $verdict" >&2; exit 1; }
grep -q "1 live of 1 active workers in 1 instances" "$work/classified"
"$bin/examples/plan_export" "$work/fleet.json" --repository /srv/repo | tee "$work/planned"
grep -q "of 2 rows" "$work/planned"
# A backup outlives a release: the previous release's export reads the same way.
previous="$root/fixtures/exports/previous-release.json"
verdict=0
"$bin/examples/classify_export" "$previous" >"$work/classified-previous" || verdict=$?
[ "$verdict" -le 1 ] || { echo "pure-path: classify_export exited $verdict on $previous" >&2; exit 1; }
"$bin/examples/plan_export" "$previous" --repository /srv/repo >"$work/planned-previous"
grep -q "of 2 rows" "$work/planned-previous"
echo "pure-path: the pure crates classified and planned a real export, and the previous release's"
