#!/usr/bin/env python3
"""Median time of one MCP tool call over stdio, for one or more fleet-mcp builds
alternating round by round (a shared machine's speed drifts within minutes).

The client writes one JSON-RPC request line and reads one answer line without parsing
it, as the MCP stdio transport defines them. The registry holds a healthy fleet of
WORKERS rows of another host (nothing is probed). Not part of CI.

  scripts/mcp-call-times.py --workers 10000 --tool gitea_get_runtime_context \\
      --calls 40 --rounds 2 target/release/fleet-mcp /tmp/old/fleet-mcp
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import tempfile
import time

NAMESPACES = ["author", "reviewer", "merger", "controller", "reconciler"]


def healthy_fleet(workers):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    instance = lambda i: f"inst-codex-20260730T120000Z-{i // 5:012x}"
    return {
        "instances": [{"client_instance_id": instance(i), "client_type": "codex",
                       "minted_at": "2026-07-30T12:00:00Z"} for i in range(0, workers, 5)],
        "worker_registrations": [{
            "worker_identity": f"wkr-bench-{i:05}", "client_type": "codex",
            "client_instance_id": instance(i), "namespace": NAMESPACES[i % 5],
            "generation_id": f"gen-{i}", "host_id": "0123456789abcdef0123456789abcdef",
            "boot_id": "11111111-2222-3333-4444-555555555555", "pid": 1_000_000 + i,
            "process_start_time": 1 + i, "status": "active", "ownership_state": "owned",
            "registered_at": "2026-07-30T12:00:00Z", "last_heartbeat_at": now,
            "heartbeat_ttl_s": 86_400, "session_id": f"sess-{i // 5}", "repository": "/srv/repo",
        } for i in range(workers)],
    }


def call_times(server, registry, tool, calls):
    env = dict(os.environ, FLEET_REGISTRY=registry, GITEA_MCP_CLIENT="codex")
    env.pop("GITEA_MCP_CLIENT_INSTANCE", None)
    proc = subprocess.Popen([server, "--namespace", "controller"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)

    def send(message):
        proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "times", "version": "0"}}})
    proc.stdout.readline()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    times, size = [], 0
    for i in range(calls):
        started = time.perf_counter()
        send({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": tool, "arguments": {}}})
        size = len(proc.stdout.readline())
        times.append(time.perf_counter() - started)
    proc.stdin.close()
    proc.wait()
    return statistics.median(times), size


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--tool", default="gitea_snapshot_instance_fleet")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("servers", nargs="*", default=["target/release/fleet-mcp"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        registry = os.path.join(tmp, "registry.sqlite3")
        dump = os.path.join(tmp, "fleet.json")
        with open(dump, "w") as out:
            json.dump(healthy_fleet(args.workers), out)
        fleetctl = os.path.join(os.path.dirname(os.path.abspath(args.servers[0])), "fleetctl")
        subprocess.run([fleetctl, "registry", "import", dump], check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, FLEET_REGISTRY=registry))
        for round_ in range(1, args.rounds + 1):
            for server in args.servers:
                p50, size = call_times(os.path.abspath(server), registry, args.tool, args.calls)
                print(f"round {round_}: {server}: {args.tool} p50 {p50 * 1000:.2f} ms, answer {size} bytes")


if __name__ == "__main__":
    main()
