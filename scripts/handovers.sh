#!/usr/bin/env bash
# Fencing proven from outside, for longer than CI runs it: three `connector run` starters
# contend for one binding under random SIGSTOP/SIGCONT and SIGKILL, on SQLite and (when
# FLEET_TEST_POSTGRES_URL is set) PostgreSQL, and the log their commands write is
# checked (bins/fleetctl/tests/handovers.rs). Prints the epochs (handovers) seen and the
# faults injected.
#
#   scripts/handovers.sh [SECONDS]      # default 1800 per backend
set -euo pipefail
cd "$(dirname "$0")/.."
export FLEET_HANDOVER_SECONDS="${1:-1800}"
cargo test --release -p fleetctl --test handovers -- --nocapture --test-threads 1 2>&1 \
    | grep -E '^(seed|[0-9]+ epochs|test )'
