#!/usr/bin/env python3
"""Median time of one MCP tool call over stdio, for one or more fleet-mcp builds
alternating round by round (a shared machine's speed drifts within minutes).

The client writes one JSON-RPC request line and reads the answer line in reads of up
to 1 MiB without parsing it, as the MCP stdio transport defines them, so the server's
part shows: it prints the median time to the answer's first byte, to its last byte,
and the server's CPU time per call (all its threads, from /proc/<pid>/task/*/schedstat).
The registry holds a healthy fleet of WORKERS rows of another host (nothing is
probed); each server reads its own copy, made by the fleetctl beside it. With --live, another connection writes one worker's heartbeat before each
call, as a live fleet does, so every call reads the rows again. Not part of CI.

  scripts/mcp-call-times.py --workers 10000 --tool gitea_get_runtime_context \\
      --calls 40 --rounds 2 target/release/fleet-mcp /tmp/old/fleet-mcp
"""
import argparse
import datetime
import json
import os
import sqlite3
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


def call_times(server, registry, tool, arguments, calls, live_workers):
    """With live_workers (the fleet's size), a heartbeat of one of them before each call."""
    env = dict(os.environ, FLEET_REGISTRY=registry, GITEA_MCP_CLIENT="codex")
    env.pop("GITEA_MCP_CLIENT_INSTANCE", None)
    proc = subprocess.Popen([server, "--namespace", "controller"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0)
    out = proc.stdout.fileno()

    def send(message):
        proc.stdin.write((json.dumps(message) + "\n").encode())

    def read_line():
        """The answer line, and when its first byte arrived."""
        chunks, first = [], None
        while not chunks or not chunks[-1].endswith(b"\n"):
            chunk = os.read(out, 1 << 20)
            if not chunk:
                raise SystemExit(f"{server} closed its output")
            first = first or time.perf_counter()
            chunks.append(chunk)
        return b"".join(chunks), first

    def cpu_ns():
        total = 0
        for task in os.listdir(f"/proc/{proc.pid}/task"):
            try:
                with open(f"/proc/{proc.pid}/task/{task}/schedstat") as stat:
                    total += int(stat.read().split()[0])
            except OSError:
                pass  # a thread that ended
        return total

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "times", "version": "0"}}})
    read_line()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    writer = sqlite3.connect(registry) if live_workers else None
    first_byte, whole, size = [], [], 0
    cpu_before = cpu_ns()
    for i in range(calls):
        if writer:
            # A heartbeat as the registry writes one (millisecond precision, UTC).
            beat = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            writer.execute("UPDATE worker_registrations SET last_heartbeat_at = ? WHERE worker_identity = ?",
                           (beat, f"wkr-bench-{(i * 7919) % live_workers:05}"))
            writer.commit()
        started = time.perf_counter()
        send({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
        line, first = read_line()
        whole.append(time.perf_counter() - started)
        first_byte.append(first - started)
        size = len(line)
    cpu = (cpu_ns() - cpu_before) / calls / 1e6
    proc.stdin.close()
    proc.wait()
    return statistics.median(first_byte), statistics.median(whole), cpu, size


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--tool", default="gitea_snapshot_instance_fleet")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--live", action="store_true", help="write a heartbeat before each call")
    parser.add_argument("--arguments", default="{}", help="the tool's arguments, as JSON")
    parser.add_argument("servers", nargs="*", default=["target/release/fleet-mcp"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "fleet.json")
        with open(dump, "w") as out:
            json.dump(healthy_fleet(args.workers), out)
        # Each server reads a registry made by the fleetctl beside it (builds differ in
        # the registry schema they read).
        registries = {}
        for n, server in enumerate(args.servers):
            registries[server] = os.path.join(tmp, f"registry-{n}.sqlite3")
            fleetctl = os.path.join(os.path.dirname(os.path.abspath(server)), "fleetctl")
            subprocess.run([fleetctl, "registry", "import", dump], check=True, stdout=subprocess.DEVNULL,
                           env=dict(os.environ, FLEET_REGISTRY=registries[server]))
        for round_ in range(1, args.rounds + 1):
            for server in args.servers:
                first, whole, cpu, size = call_times(os.path.abspath(server), registries[server], args.tool,
                                                     json.loads(args.arguments), args.calls,
                                                     args.workers if args.live else 0)
                print(f"round {round_}: {server}: {args.tool} first byte {first * 1000:.2f} ms, "
                      f"whole answer {whole * 1000:.2f} ms, server CPU {cpu:.2f} ms per call, {size} bytes")


if __name__ == "__main__":
    main()
