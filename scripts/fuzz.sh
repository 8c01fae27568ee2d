#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 60 s each) with cargo fuzz.
#   scripts/fuzz.sh [SECONDS]
# Needs cargo-fuzz (`cargo install cargo-fuzz`). On a stable toolchain the sanitizer
# flags cargo fuzz passes need RUSTC_BOOTSTRAP=1, which this script sets. Seeds come from
# fixtures/fuzz/<target>; any crash is left in fuzz/artifacts/<target> — turn it into a
# regression test before fixing it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
export RUSTC_BOOTSTRAP=1
for target in identities registry_import manifest scopes policy client_config profiles tool_arguments; do
    corpus="fuzz/corpus/$target"
    mkdir -p "$corpus"
    seeds="fixtures/fuzz/$target"
    [ -d "$seeds" ] && cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true
    echo "== $target (${seconds}s)"
    cargo fuzz run --fuzz-dir fuzz "$target" "$corpus" -- -max_total_time="$seconds" -max_len=65536
done
