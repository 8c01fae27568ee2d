#!/usr/bin/env bash
# A fleet of three simulated hosts on one PostgreSQL registry, for longer than CI runs
# it: round after round, the lease holder's host dies and is fenced, the next holder's
# host is partitioned past its lease and healed, a host reboots, a host's clock runs
# 10 minutes ahead; which host plays each part follows which one holds the lease
# (bins/fleetctl/tests/fleet_of_hosts.rs). Every round checks that no live worker was
# retired, no two commands acted at once and none at an older epoch, and prints the
# handover and proof times so far. Needs root and FLEET_TEST_POSTGRES_URL on 127.0.0.1.
#
#   scripts/hosts-soak.sh [SECONDS]      # default 1800
set -euo pipefail
cd "$(dirname "$0")/.."
export FLEET_TEST_POSTGRES_URL="${FLEET_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
export FLEET_HOSTS_SECONDS="${1:-1800}"
# The hosts run the launcher and the MCP server beside fleetctl.
cargo build --release --workspace --bins
cargo test --release -p fleetctl --test fleet_of_hosts -- --nocapture 2>&1 \
    | grep -vE '^ *(Compiling|Finished|Running|Blocking|[0-9]+:|at )'
