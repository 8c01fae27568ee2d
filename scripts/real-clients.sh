#!/usr/bin/env bash
# The real agent clients, installed from npm at pinned versions, start the servers that
# `fleet-launch install` configures, under `fleet-launch run`, and every server registers
# under the launch. No model is needed: each client's own `mcp list` connects to every
# configured server (Claude Code's health check, Gemini CLI's status). Checks, per client:
# five rows under the launch's instance id, all `owned`, all released once it exits.
#
# Codex is not run here: its `mcp list` does not start servers, and a session needs a
# model endpoint. Its process tree (the npm entry point spawning the native binary) is
# played by bins/fleet-mcp/tests/agent_clients.rs.
#
#   scripts/real-clients.sh            # uses target/debug (built by `cargo test`)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${FLEET_BIN_DIR:-$root/target/debug}"
cache="${FLEET_CLIENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetward-clients}"
mkdir -p "$cache"
npm install --prefix "$cache" --no-audit --no-fund --loglevel error \
    @anthropic-ai/claude-code@2.1.197 @google/gemini-cli@0.61.0 >/dev/null

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
check() {
    local client="$1" registry="$work/$1.sqlite3" rows
    shift
    (cd "$work/project" && FLEET_REGISTRY="$registry" "$bin/fleet-launch" install --client "$client" >/dev/null)
    (cd "$work/project" && FLEET_REGISTRY="$registry" timeout 120 "$bin/fleet-launch" run --client "$client" -- "$@" >/dev/null 2>&1)
    rows="$(FLEET_REGISTRY="$registry" "$bin/fleetctl" worker list --json)"
    python3 - "$client" "$rows" <<'PY'
import json, sys
client, rows = sys.argv[1], json.loads(sys.argv[2])
instances = {r["client_instance_id"] for r in rows}
namespaces = sorted(r["namespace"] for r in rows)
assert len(rows) == 5 and len(instances) == 1, f"{client}: {len(rows)} rows under {instances}"
assert namespaces == sorted(["author", "reviewer", "merger", "controller", "reconciler"]), namespaces
assert all(r["ownership_state"] == "owned" for r in rows), f"{client}: not all owned"
assert all(r["status"] == "released" for r in rows), f"{client}: not all released"
print(f"{client}: five workers registered under {instances.pop()}, owned, released on exit")
PY
}

export HOME="$work/home" PATH="$bin:$cache/node_modules/.bin:$PATH"
mkdir -p "$HOME/.gemini" "$work/project/.claude"
(cd "$work/project" && git init -q .)
# Each client runs a project's servers only once the project is trusted or approved
# (docs/CLIENTS.md): Gemini CLI's trusted folders, Claude Code's project approval.
printf '{"%s": "TRUST_FOLDER"}\n' "$work/project" > "$HOME/.gemini/trustedFolders.json"
printf '{"enableAllProjectMcpServers": true}\n' > "$work/project/.claude/settings.local.json"
check claude_code claude mcp list
check gemini gemini mcp list
