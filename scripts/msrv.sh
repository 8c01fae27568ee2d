#!/usr/bin/env bash
# The minimum Rust version the workspace declares (`rust-version` in Cargo.toml), checked
# two ways: no dependency the binaries and libraries build with declares a newer one,
# and the workspace builds with exactly that toolchain (fetched with rustup). Not part of
# CI: it downloads a toolchain.
#
#   scripts/msrv.sh
set -euo pipefail
cd "$(dirname "$0")/.."
declared=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
echo "declared minimum: $declared"
cargo metadata --format-version 1 --locked | python3 -c '
import json, sys
declared = tuple(int(x) for x in sys.argv[1].split("."))
meta = json.load(sys.stdin)
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
packages = {p["id"]: p for p in meta["packages"]}
seen, stack = set(), list(meta["workspace_members"])
while stack:  # what the binaries and libraries build with: normal and build dependencies
    pkg = stack.pop()
    if pkg in seen:
        continue
    seen.add(pkg)
    for dep in nodes[pkg]["deps"]:
        if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
            stack.append(dep["pkg"])
newer = sorted(
    (tuple(int(x) for x in packages[p]["rust_version"].split(".")), packages[p]["name"])
    for p in seen if packages[p].get("rust_version")
)
needs, name = newer[-1]
print("newest dependency minimum: %s (%s)" % (".".join(map(str, needs)), name))
if needs[:len(declared)] > declared:
    sys.exit("rust-version is older than %s needs" % name)
' "$declared"
rustup toolchain install "$declared" --profile minimal
cargo "+$declared" check --workspace --locked --lib --bins
echo "builds with $declared"
