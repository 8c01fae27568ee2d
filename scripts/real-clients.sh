#!/usr/bin/env bash
# The real agent clients, installed from npm at pinned versions, run sessions through
# `fleet-launch install` and `fleet-launch run` against a scripted model on 127.0.0.1
# (scripts/scripted-model.py), which calls the fleet's tools in a fixed order and logs
# every answer the agent reads. Per client (Claude Code, Codex, Gemini CLI):
#
# 1. two launches at once: while the first session holds, the second's agent snapshots
#    the fleet and reads SAFE with ten live workers, five `owned` rows under each launch;
# 2. the agent reads a refusal's code (apply asked of the controller, whose profile may
#    not retire: `permission_denied`);
# 3. every row is released when its session exits;
# 4. a worker that crashed (SIGKILL, its heartbeat lapsed) is retired by an agent
#    through MCP alone: the reconciler's plan, then apply with the plan's fingerprints.
#
#   scripts/real-clients.sh            # uses target/debug (built by `cargo test`)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${FLEET_BIN_DIR:-$root/target/debug}"
cache="${FLEET_CLIENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetward-clients}"
mkdir -p "$cache"
npm install --prefix "$cache" --no-audit --no-fund --loglevel error \
    @anthropic-ai/claude-code@2.1.197 @openai/codex@0.169.0 @google/gemini-cli@0.61.0 >/dev/null

work="$(mktemp -d)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
export HOME="$work/home" PATH="$bin:$cache/node_modules/.bin:$PATH"
mkdir -p "$HOME"

# The scripts the model follows, one set per client (its name is in each prompt).
python3 - "$work" >"$work/scripts.json" <<'PY'
import json, sys
work = sys.argv[1]
apply = "gitea_apply_stale_worker_retirement"
scripts = {}
for client in ["claude_code", "codex", "gemini"]:
    scripts[f"hold-{client}"] = {
        "calls": [{"server": "gitea-author", "tool": "gitea_get_runtime_context"}],
        "hold_until": f"{work}/release-{client}",
    }
    scripts[f"fleet-{client}"] = {"calls": [
        {"server": "gitea-controller", "tool": "gitea_snapshot_instance_fleet", "args": {}},
        {"server": "gitea-controller", "tool": apply,
         "args": {"registry_fingerprint": "0" * 64, "candidate_fingerprint": "0" * 64}},
    ]}
    scripts[f"retire-{client}"] = {"calls": [
        {"server": "gitea-reconciler", "tool": "gitea_plan_stale_worker_retirement", "args": {}},
        {"server": "gitea-reconciler", "tool": apply,
         "args": {"registry_fingerprint": "$prev.registry_fingerprint",
                  "candidate_fingerprint": "$prev.candidate_fingerprint"}},
    ]}
print(json.dumps(scripts))
PY
python3 "$root/scripts/scripted-model.py" --scripts "$work/scripts.json" --log "$work/answers.jsonl" \
    --port-file "$work/port" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
model="http://127.0.0.1:$(cat "$work/port")"

# The reconciler may retire; nobody else may (docs/MCP.md, profiles.json).
python3 - >"$work/profiles.json" <<'PY'
import json
profiles = {ns: {"role": ns, "allowed_operations": ["gitea.read"]}
            for ns in ["author", "reviewer", "merger", "controller", "reconciler"]}
profiles["reconciler"]["allowed_operations"].append("gitea.worker_registry.retire")
print(json.dumps({"profiles": profiles}))
PY
chmod 600 "$work/profiles.json"
export FLEET_PROFILES="$work/profiles.json"

apply_tool=gitea_apply_stale_worker_retirement
# Each client's headless session, pointed at the scripted model by the client's own
# documented setting; PROMPT is the last argument.
session() {
    local client="$1" prompt="$2"
    case "$client" in
        claude_code)
            timeout 180 fleet-launch run --client "$client" -- env ANTHROPIC_BASE_URL="$model" \
                ANTHROPIC_API_KEY=scripted CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 claude -p --allowedTools "mcp__gitea-reconciler__$apply_tool,mcp__gitea-controller__$apply_tool" -- "$prompt" ;;
        codex)
            timeout 180 fleet-launch run --client "$client" -- codex exec --skip-git-repo-check -m scripted -c model_provider=scripted \
                -c "model_providers.scripted={name=\"scripted\",base_url=\"$model/v1\",wire_api=\"responses\"}" \
                -c "mcp_servers.gitea-reconciler.tools.$apply_tool.approval_mode=\"approve\"" \
                -c "mcp_servers.gitea-controller.tools.$apply_tool.approval_mode=\"approve\"" \
                -- "$prompt" ;;
        gemini)
            timeout 180 fleet-launch run --client "$client" -- env GOOGLE_GEMINI_BASE_URL="$model" \
                GEMINI_API_KEY=scripted gemini -p "$prompt" ;;
    esac
}

# What the agent read at a step of a script: the answer's body, as the client sent it.
answer() {
    python3 - "$work/answers.jsonl" "$1" "$2" <<'PY'
import json, sys
path, script, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
for line in open(path):
    entry = json.loads(line)
    if entry["script"] == script and entry["step"] == step:
        print(json.dumps(entry["result"]))
        break
else:
    sys.exit(f"the agent of {script} read no answer at step {step}")
PY
}

rows() { FLEET_REGISTRY="$1" "$bin/fleetctl" worker list --json; }
# Active rows (0 until the first server has created the registry).
count_active() {
    python3 -c 'import json,sys; print(sum(r["status"] == "active" for r in json.loads(sys.argv[1])))' \
        "$(rows "$1" 2>/dev/null || echo '[]')"
}

check() {
    local client="$1" registry="$work/$1.sqlite3" project="$work/$1" crashed
    export FLEET_REGISTRY="$registry"
    mkdir -p "$project" && (cd "$project" && git init -q .)
    (cd "$project" && fleet-launch install --client "$client" --allow-read-only >/dev/null)
    case "$client" in
        # Each client runs a project's servers only once the project is trusted or
        # approved (docs/CLIENTS.md).
        claude_code) mkdir -p "$project/.claude"
            printf '{"enableAllProjectMcpServers": true}\n' >"$project/.claude/settings.local.json"
            printf '{"projects": {"%s": {"hasTrustDialogAccepted": true}}}\n' "$project" >"$HOME/.claude.json" ;;
        gemini) mkdir -p "$HOME/.gemini"
            printf '{"%s": "TRUST_FOLDER"}\n' "$project" >"$HOME/.gemini/trustedFolders.json"
            # A headless run takes the key from GEMINI_API_KEY once the auth type says so.
            printf '{"security": {"auth": {"selectedType": "gemini-api-key"}}}\n' >"$HOME/.gemini/settings.json"
            # The writing tool this run uses, granted by hand in Gemini CLI's policy engine
            # (`install --allow-read-only` granted the read-only ones).
            mkdir -p "$HOME/.gemini/policies"
            printf '[[rule]]\nmcpName = "%s"\ntoolName = "%s"\ndecision = "allow"\npriority = 100\n\n' \
                gitea-reconciler "$apply_tool" gitea-controller "$apply_tool" >"$HOME/.gemini/policies/grant-apply.toml" ;;
    esac

    # 1. Two launches at once.
    (cd "$project" && session "$client" "fleet-script:hold-$client" \
        >"$work/hold-$client.out" 2>&1) &
    local holder=$!
    for _ in $(seq 300); do [ "$(count_active "$registry")" = 5 ] && break; sleep 0.2; done
    (cd "$project" && session "$client" "fleet-script:fleet-$client" \
        >"$work/fleet-$client.out" 2>&1) || { cat "$work/fleet-$client.out" >&2; exit 1; }
    touch "$work/release-$client"
    wait "$holder" || { cat "$work/hold-$client.out" >&2; exit 1; }
    # A client may exit before its servers have finished: each releases its row when its
    # stdin closes, so the rows settle within moments of the session's end.
    for _ in $(seq 75); do [ "$(count_active "$registry")" = 0 ] && break; sleep 0.2; done
    python3 - "$client" "$(rows "$registry")" "$(answer "fleet-$client" 0)" "$(answer "fleet-$client" 1)" <<'PY'
import json, sys
import os; sys.path.insert(0, os.environ["ROOT_SCRIPTS"])
from importlib import import_module
model = import_module("scripted-model")
find, find_all = model.find_field, model.find_all
client, rows, snapshot, refusal = sys.argv[1], *map(json.loads, sys.argv[2:])
launches = {r["client_instance_id"] for r in rows}
assert len(rows) == 10 and len(launches) == 2, f"{client}: {len(rows)} rows under {launches}"
assert all(r["ownership_state"] == "owned" for r in rows), f"{client}: not all owned"
assert all(r["status"] == "released" for r in rows), f"{client}: not all released on exit"
assert find(snapshot, "live_fleet_safe") is True, f"{client}: the agent read {snapshot}"
live = find(snapshot, "live_worker_count")
assert live == 10, f"{client}: the agent read {live} live workers"
assert "permission_denied" in find_all(refusal, "error"), f"{client}: the agent read {refusal}"
print(f"{client}: two launches SAFE with ten live workers, a refusal read as permission_denied, all released")
PY

    # 4. A crashed worker, retired through MCP alone.
    GITEA_MCP_CLIENT="$client" GITEA_MCP_CLIENT_INSTANCE="$(fleet-launch mint --client "$client")" \
        setsid fleetctl worker run --namespace author --ttl 2 --repository "$project" -- sleep 60 >/dev/null 2>&1 &
    crashed=$!
    for _ in $(seq 100); do [ "$(count_active "$registry")" = 1 ] && break; sleep 0.1; done
    kill -KILL -- "-$crashed"
    wait "$crashed" 2>/dev/null || true
    sleep 3
    (cd "$project" && session "$client" "fleet-script:retire-$client" \
        >"$work/retire-$client.out" 2>&1) || { cat "$work/retire-$client.out" >&2; exit 1; }
    python3 - "$client" "$(rows "$registry")" "$(answer "retire-$client" 1)" <<'PY'
import json, sys
import os; sys.path.insert(0, os.environ["ROOT_SCRIPTS"])
from importlib import import_module
find = import_module("scripted-model").find_field
client, rows, applied = sys.argv[1], *map(json.loads, sys.argv[2:])
retired = [r for r in rows if r["status"] == "retired"]
assert find(applied, "retired_total") == 1, f"{client}: the agent read {applied}"
assert len(retired) == 1 and retired[0]["namespace"] == "author", f"{client}: {len(retired)} retired"
print(f"{client}: a crashed worker retired by the agent through MCP alone")
PY
}

export ROOT_SCRIPTS="$root/scripts"
for client in claude_code codex gemini; do
    check "$client"
done
