#!/usr/bin/env bash
# The previous release's binaries and this build's on one registry, as an operator
# upgrades a running fleet (docs/UPGRADING.md), on SQLite and on PostgreSQL (a server of
# its own, restarted after the upgrade as a failover or maintenance restarts it):
#
#  1. the previous build creates the registry and runs a launch of four workers (owned
#     by their launch process) and a workflow lease; this build refuses to read the
#     older registry (exit 3, naming the upgrade);
#  2. this build upgrades it (`registry upgrade --dry-run`, then `registry upgrade`,
#     which keeps a copy); the PostgreSQL server restarts;
#  3. the old workers keep their rows live on the new schema, and the fleet reads SAFE;
#  4. one old worker crashes: the fleet reads UNSAFE (to this build and the old one),
#     this build retires the row, and the fleet reads SAFE again;
#  5. the lease changes hands from the old build to this one at the next epoch, the old
#     build's stale epoch is refused, and no epoch is granted twice;
#  6. the old build still registers, reads and releases on the upgraded registry.
#
#   scripts/upgrade-check.sh [--from REV]     # default REV: the last release tag (v*)
#   scripts/upgrade-check.sh --if-schema-changed   # CI: only when the schema moved past the tag's
#
# The previous build's binaries are built once into target/upgrade-check (or
# $FLEET_UPGRADE_CACHE) from a work tree of REV; this build's come from target/debug (or
# $FLEET_BIN_DIR). Run as root, the PostgreSQL server runs as the postgres user.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
new="${FLEET_BIN_DIR:-$root/target/debug}"
from=""
only_if_changed=""
while [ $# -gt 0 ]; do
    case "$1" in
        --from) from="${2:?--from needs a revision}"; shift 2 ;;
        --if-schema-changed) only_if_changed=1; shift ;;
        *) echo "upgrade-check: unknown argument $1 (try --from REV or --if-schema-changed)" >&2; exit 2 ;;
    esac
done
if [ -z "$from" ]; then
    from="$(git -C "$root" describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null || true)"
fi
if [ -z "$from" ]; then
    echo "upgrade-check: skipped, no release tag (v*) to upgrade from yet (--from REV names one)"
    exit 0
fi
rev="$(git -C "$root" rev-parse --short=12 "$from^{commit}")"

# The schema versions a revision's build uses, as "SQLITE POSTGRESQL".
schema_of() {
    local sqlite pg
    sqlite="$(git -C "$root" show "$1:crates/registry-sqlite/src/migrations.rs" \
        | sed -n 's/^pub const SCHEMA_VERSION: i64 = \([0-9]*\);/\1/p')"
    pg="$(git -C "$root" show "$1:crates/registry-postgres/src/schema.rs" \
        | sed -n 's/^pub const SCHEMA_VERSION: i64 = \([0-9]*\);/\1/p')"
    echo "$sqlite $pg"
}
was="$(schema_of "$rev")"
now="$(schema_of HEAD)"
if [ -n "$only_if_changed" ] && [ "$was" = "$now" ]; then
    echo "upgrade-check: the schema is as at $from (SQLite, PostgreSQL: $now): nothing to upgrade"
    exit 0
fi

cache="${FLEET_UPGRADE_CACHE:-$root/target/upgrade-check}"
old="$cache/bin-$rev"
if [ ! -x "$old/fleetctl" ] || [ ! -x "$old/fleet-launch" ]; then
    echo "upgrade-check: building $from ($rev) into $old"
    mkdir -p "$cache"
    src="$cache/src-$rev"
    [ -d "$src" ] || git -C "$root" worktree add -q --detach "$src" "$rev"
    (cd "$src" && CARGO_TARGET_DIR="$cache/target-$rev" cargo build -q -p fleetctl -p fleet-launch)
    mkdir -p "$old"
    cp "$cache/target-$rev/debug/fleetctl" "$cache/target-$rev/debug/fleet-launch" "$old/"
    git -C "$root" worktree remove --force "$src"
fi

work="$(mktemp -d)"
chmod 755 "$work"
launch=""
pg=""
cleanup() {
    [ -n "$launch" ] && { kill -- "-$launch" 2>/dev/null || true; wait "$launch" 2>/dev/null || true; }
    [ -n "$pg" ] && as_pg "$pgbin/pg_ctl" -D "$pg/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "upgrade-check: $backend: $*" >&2; exit 1; }
step() { echo "upgrade-check: $backend: $*"; }
ms() { date +%s%3N; }

as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pgbin="$(pg_config --bindir 2>/dev/null || true)"

# `fleetctl snapshot --json` of BUILD: "SAFE|UNSAFE LIVE STALE".
verdict() {
    "$1/fleetctl" snapshot --json 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin); c = s["counts"]
print("SAFE" if s["live_fleet_safe"] else "UNSAFE", c["live_worker_count"], c["stale_worker_count"])'
}

# Waits up to $2 seconds for `verdict` of the new build to read $1.
await_verdict() {
    local want="$1" limit="$2" got=""
    for _ in $(seq $((limit * 5))); do
        got="$(verdict "$new" || true)"
        [ "$got" = "$want" ] && return 0
        sleep 0.2
    done
    fail "the fleet reads '$got', not '$want', after ${limit} s"
}

# The epoch a lease command's JSON answer holds.
epoch_of() { python3 -c 'import json,sys; print(json.load(sys.stdin)["lease"]["fencing_epoch"])'; }

check() {
    backend="$1"
    cd "$work"
    "$old/fleetctl" registry init >/dev/null
    # A launch of the old build: four workers its launch process owns.
    setsid "$old/fleet-launch" run --client codex -- bash -c "
        for ns in author reviewer merger; do '$old/fleetctl' worker run --ttl 3 --namespace \$ns -- sleep 600 & done
        '$old/fleetctl' worker run --ttl 3 --namespace controller -- sleep 600 &
        echo \$! > '$work/crashing.pid'
        wait" >/dev/null 2>&1 &
    launch=$!
    for _ in $(seq 100); do
        [ "$("$old/fleetctl" worker list -o name --status active 2>/dev/null | wc -l)" = 4 ] && break
        sleep 0.2
    done
    [ "$("$old/fleetctl" worker list -o name --status active | wc -l)" = 4 ] || fail "the old launch never registered"
    first="$("$old/fleetctl" lease acquire --key workflow:upgrade --owner old-ops --ttl 300 --json | epoch_of)"
    [ "$first" = 1 ] || fail "the old build's first grant was epoch $first"

    set +e
    refusal="$("$new/fleetctl" snapshot 2>&1 >/dev/null)"
    code=$?
    set -e
    [ "$code" = 3 ] && [[ "$refusal" == *"registry upgrade"* ]] \
        || fail "this build read the older registry (exit $code: $refusal)"
    step "this build refuses the older registry: $refusal"

    "$new/fleetctl" registry upgrade --dry-run >/dev/null
    set +e; "$new/fleetctl" snapshot >/dev/null 2>&1; code=$?; set -e
    [ "$code" = 3 ] || fail "the dry run changed the registry"
    started=$(ms)
    "$new/fleetctl" registry upgrade >"$work/upgrade.txt"
    took=$(($(ms) - started))
    step "upgraded in $took ms: $(tr '\n' ' ' <"$work/upgrade.txt")"
    if [ "$backend" = postgresql ]; then
        restarted=$(ms)
        as_pg "$pgbin/pg_ctl" -D "$pg/data" -m fast -w restart -l "$pg/log" >/dev/null
        step "the server restarted"
    else
        restarted=$(ms)
    fi

    # The old workers heartbeat on the new schema: still live well past their TTL.
    sleep 10
    await_verdict "SAFE 4 0" 10
    step "the old launch's 4 workers are live $(( ($(ms) - restarted) / 1000 )) s (over three TTLs) after the upgrade"

    kill -9 "$(cat "$work/crashing.pid")"
    await_verdict "UNSAFE 3 1" 15
    old_reads="$(verdict "$old")"
    [ "$old_reads" = "UNSAFE 3 1" ] || fail "the old build reads '$old_reads' with a worker crashed"
    # Its heartbeat lapses (and the clock-skew allowance passes) before it is a candidate.
    for _ in $(seq 100); do
        "$new/fleetctl" retire plan --json >"$work/plan.json"
        python3 - "$work/plan.json" <<'PY' >"$work/apply-args" && break
import json, sys
p = json.load(open(sys.argv[1]))
if len(p["candidates"]) != 1:
    sys.exit(1)
print(p["registry_fingerprint"], p["candidate_fingerprint"])
PY
        sleep 0.2
    done
    [ -s "$work/apply-args" ] || fail "the crashed worker never became a retirement candidate"
    read -r registry_fp candidate_fp <"$work/apply-args"
    "$new/fleetctl" retire apply --registry-fingerprint "$registry_fp" --candidate-fingerprint "$candidate_fp" --every-candidate >/dev/null
    await_verdict "SAFE 3 0" 10
    step "a crashed old worker read UNSAFE to both builds; this build retired it and the fleet reads SAFE"

    # The lease: the old build renews it on the new schema, lets it lapse, this build
    # takes it over at the next epoch, and the old build's epoch is refused.
    lease_id="$("$new/fleetctl" lease show --key workflow:upgrade --json | python3 -c '
import json, sys
shown = json.load(sys.stdin)
print([l for l in shown if l["lease_key"] == "workflow:upgrade"][0]["lease_id"])')"
    "$old/fleetctl" lease renew --key workflow:upgrade --owner old-ops --lease-id "$lease_id" --epoch 1 --ttl 1 >/dev/null \
        || fail "the old build could not renew its lease on the upgraded registry"
    sleep 1.5
    second="$("$new/fleetctl" lease takeover --key workflow:upgrade --owner new-ops --expected-epoch 1 --json | epoch_of)"
    [ "$second" = 2 ] || fail "this build's takeover granted epoch $second"
    if "$old/fleetctl" lease takeover --key workflow:upgrade --owner old-ops --expected-epoch 1 >/dev/null 2>&1; then
        fail "the old build took the lease over at a stale epoch"
    fi
    epochs="$("$new/fleetctl" lease audit --key workflow:upgrade --json | python3 -c '
import json, sys
grants = [e["fencing_epoch"] for e in json.load(sys.stdin) if e["outcome"] in ("acquired", "taken_over")]
print(" ".join(map(str, grants)))')"
    [ "$epochs" = "1 2" ] || fail "grants at epochs $epochs"
    step "the lease went from the old build (epoch 1) to this one (epoch 2); the old build's stale epoch was refused"

    GITEA_MCP_CLIENT=codex GITEA_MCP_CLIENT_INSTANCE="$("$old/fleet-launch" mint --client codex)" \
        "$old/fleetctl" worker run --namespace reconciler -- true || fail "the old build could not register"
    "$old/fleetctl" worker list >/dev/null || fail "the old build could not list"
    step "the old build still registers, heartbeats, releases and reads on it"

    kill -- "-$launch" 2>/dev/null || true
    wait "$launch" 2>/dev/null || true
    launch=""
}

echo "upgrade-check: $("$old/fleetctl" --version) -> $("$new/fleetctl" --version)"
export FLEET_REGISTRY="$work/registry.sqlite3"
check sqlite
if [ -z "$pgbin" ]; then
    echo "upgrade-check: PostgreSQL's server binaries (pg_config --bindir) are missing" >&2
    exit 1
fi
pg="$work/pg"
mkdir -p "$pg"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$pg"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
as_pg "$pgbin/initdb" -D "$pg/data" -U postgres --auth=trust -N >/dev/null
printf "port = %s\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n" "$port" >>"$pg/data/postgresql.conf"
as_pg "$pgbin/pg_ctl" -D "$pg/data" -l "$pg/log" -w start >/dev/null
export FLEET_REGISTRY="postgres://postgres@127.0.0.1:$port/postgres"
check postgresql
echo "upgrade-check: passed on SQLite and PostgreSQL, from $from ($rev, schema $was) to this build (schema $now)"
