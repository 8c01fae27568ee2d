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
import os
import subprocess
import time

from fleet_processes import Mcp, free_port, get, memory, wait_for_port


def footprint(pid, registry):
    rss, private = memory(pid)
    threads = len(os.listdir(f"/proc/{pid}/task"))
    registry = os.path.realpath(registry)
    fds = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(registry):
                fds += 1
        except OSError:
            pass
    return private, rss, threads, fds


def worker(bindir, env, registry):
    proc = subprocess.Popen([f"{bindir}/fleetctl", "worker", "run", "--namespace", "author", "--ttl", "3",
                             "--", "sleep", "30"], env=env, stderr=subprocess.DEVNULL)
    time.sleep(10)
    figures = footprint(proc.pid, registry)
    proc.terminate()
    proc.wait()
    return figures


def mcp(bindir, env, registry, calls):
    server = Mcp(bindir, env)
    for _ in range(calls):
        server.call("gitea_snapshot_instance_fleet", {})
    figures = footprint(server.pid, registry)
    server.close()
    return figures


def serve(bindir, env, registry):
    port = free_port()
    proc = subprocess.Popen([f"{bindir}/fleetctl", "serve", "--listen", f"127.0.0.1:{port}"], env=env,
                            stderr=subprocess.DEVNULL)
    wait_for_port(port)
    get(port, "/metrics")
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
