#!/usr/bin/env python3
"""What each long-lived process costs against the registry it watches.

For each registry given (say, an empty one, `synthetic_export 1000` and `100000`
imported, and the 100,000 with every row retired: history beside no live fleet), it
starts, one at a time:

* `fleetctl worker run --namespace author --ttl 3 -- sleep 30` of a freshly minted
  launch, read after 10 s (its heartbeat and sweeps have run a few times);
* `fleet-mcp --namespace controller` of the same launch, read after `initialize` and
  20 calls of the snapshot tool;
* `fleetctl serve`, read after one `/metrics` and one `/`;

and prints each one's private memory (`Pss_Anon` from /proc/PID/smaps_rollup), resident
memory, threads, and open descriptors of the registry file (SQLite's connections: the
database, its WAL and shared memory each). Not part of CI.

  cargo build --release -p fleetctl -p fleet-launch -p fleet-mcp
  scripts/footprint.py empty.sqlite3 f1000.sqlite3 f100000.sqlite3 h100000.sqlite3
"""
import argparse
import json
import os
import socket
import subprocess
import time


def footprint(pid, registry):
    rss = pss_anon = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss_Anon:"):
                pss_anon = int(line.split()[1])
    threads = len(os.listdir(f"/proc/{pid}/task"))
    registry = os.path.realpath(registry)
    fds = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(registry):
                fds += 1
        except OSError:
            pass
    return pss_anon / 1024, rss / 1024, threads, fds


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        while s.recv(1 << 16):
            pass


def worker(bindir, env, registry):
    proc = subprocess.Popen([f"{bindir}/fleetctl", "worker", "run", "--namespace", "author", "--ttl", "3",
                             "--", "sleep", "30"], env=env, stderr=subprocess.DEVNULL)
    time.sleep(10)
    figures = footprint(proc.pid, registry)
    proc.terminate()
    proc.wait()
    return figures


def mcp(bindir, env, registry, calls):
    proc = subprocess.Popen([f"{bindir}/fleet-mcp", "--namespace", "controller"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def call(message):
        proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()
        if "id" in message:
            proc.stdout.readline()

    call({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "footprint", "version": "0"}}})
    call({"jsonrpc": "2.0", "method": "notifications/initialized"})
    for i in range(calls):
        call({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
              "params": {"name": "gitea_snapshot_instance_fleet", "arguments": {}}})
    figures = footprint(proc.pid, registry)
    proc.stdin.close()
    proc.wait()
    return figures


def serve(bindir, env, registry):
    port = free_port()
    proc = subprocess.Popen([f"{bindir}/fleetctl", "serve", "--listen", f"127.0.0.1:{port}"], env=env,
                            stderr=subprocess.DEVNULL)
    while True:
        try:
            get(port, "/metrics")
            break
        except OSError:
            time.sleep(0.1)
    get(port, "/")
    figures = footprint(proc.pid, registry)
    proc.terminate()
    proc.wait()
    return figures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("registries", nargs="+")
    parser.add_argument("--bin", default="target/release")
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    print(f"{'registry':<20} {'process':<12} {'private MB':>10} {'RSS MB':>8} {'threads':>8} {'registry fds':>13}")
    for registry in args.registries:
        env = dict(os.environ, FLEET_REGISTRY=registry, GITEA_MCP_CLIENT="codex")
        minted = subprocess.run([f"{args.bin}/fleet-launch", "mint", "--client", "codex"], env=env,
                                check=True, capture_output=True, text=True)
        env["GITEA_MCP_CLIENT_INSTANCE"] = minted.stdout.strip().splitlines()[-1]
        for name, figures in [("worker run", worker(args.bin, env, registry)),
                              ("fleet-mcp", mcp(args.bin, env, registry, args.calls)),
                              ("serve", serve(args.bin, env, registry))]:
            private, rss, threads, fds = figures
            print(f"{os.path.basename(registry):<20} {name:<12} {private:>10.1f} {rss:>8.1f} {threads:>8} {fds:>13}")


if __name__ == "__main__":
    main()
