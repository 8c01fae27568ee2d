#!/usr/bin/env python3
"""What months of history cost the reads a fleet makes all the time.

Builds two registries from one synthetic export: LIVE holds ten launches (about 50
rows, their ledger entries); HISTORY holds the same ten launches and, beside them,
--history more rows of launches that ended (every row retired, as months of churn
leave them). Then, alternating between the two round by round, it times:

* `fleetctl snapshot --json` and `fleetctl retire plan --json` (whole processes);
* the MCP snapshot and plan tools of one `fleet-mcp --namespace controller` per
  registry (one call each per round, after a heartbeat-free warm-up);
* the first `/metrics` and the first `/` of a `fleetctl serve` started for the round;

and prints each read's median on both registries and the ratio HISTORY / LIVE (the
goal: within 1.5x). With --postgres URL (a server where the user may create
databases), the same on PostgreSQL, in databases fleet_history_live and
fleet_history_full. Not part of CI.

  cargo build --release -p fleetctl -p fleet-launch -p fleet-mcp
  cargo build --release -p fleet-snapshot --example synthetic_export
  scripts/history-cost.py [--history 100000] [--rounds 7] [--postgres postgres://postgres@127.0.0.1:5432/test]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

from fleet_processes import Mcp, free_port, get, wait_for_port


def split(export, launches):
    """The export's first `launches` launches with an active row, and the whole export
    with every other row retired."""
    rows = export["worker_registrations"]
    live = []
    for row in rows:
        launch = row.get("client_instance_id")
        if row["status"] == "active" and launch and launch not in live:
            live.append(launch)
        if len(live) == launches:
            break
    live = set(live)
    for row in rows:
        if row.get("client_instance_id") not in live:
            row["status"] = "retired"
            row["retired_at"] = row.get("last_heartbeat_at") or row["registered_at"]
            row["retired_by"] = "history-cost"
            row["retirement_reason"] = "eligible_stale_orphan"
    small = {
        "instances": [i for i in export["instances"] if i["client_instance_id"] in live],
        "worker_registrations": [r for r in rows if r.get("client_instance_id") in live],
    }
    return small, export


def timed(command, env):
    start = time.perf_counter()
    subprocess.run(command, env=env, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def serve_first(bindir, env):
    port = free_port()
    proc = subprocess.Popen([f"{bindir}/fleetctl", "serve", "--listen", f"127.0.0.1:{port}"], env=env,
                            stderr=subprocess.DEVNULL)
    wait_for_port(port)
    metrics, _, _ = get(port, "/metrics")
    page, _, _ = get(port, "/")
    proc.terminate()
    proc.wait()
    return metrics, page


def prepare(bindir, registry, export_path):
    env = dict(os.environ, FLEET_REGISTRY=registry, GITEA_MCP_CLIENT="codex")
    subprocess.run([f"{bindir}/fleetctl", "registry", "import", export_path], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    minted = subprocess.run([f"{bindir}/fleet-launch", "mint", "--client", "codex"], env=env,
                            check=True, capture_output=True, text=True)
    env["GITEA_MCP_CLIENT_INSTANCE"] = minted.stdout.strip().splitlines()[-1]
    return env


def measure(bindir, envs, rounds, repository):
    reads = ["snapshot --json", "retire plan --json", "MCP snapshot", "MCP plan", "/metrics", "/"]
    times = {name: {read: [] for read in reads} for name in envs}
    servers = {name: Mcp(bindir, env) for name, env in envs.items()}
    plan_args = {"canonical_repository": repository}
    for server in servers.values():
        server.call("gitea_snapshot_instance_fleet", {})
        server.call("gitea_plan_stale_worker_retirement", plan_args)
    for _ in range(rounds):
        for name, env in envs.items():
            t = times[name]
            t["snapshot --json"].append(timed([f"{bindir}/fleetctl", "snapshot", "--json"], env))
            t["retire plan --json"].append(timed([f"{bindir}/fleetctl", "retire", "plan", "--json",
                                                  "--canonical-repository", repository], env))
            t["MCP snapshot"].append(servers[name].call("gitea_snapshot_instance_fleet", {"detail": "full"}))
            t["MCP plan"].append(servers[name].call("gitea_plan_stale_worker_retirement", plan_args))
            metrics, page = serve_first(bindir, env)
            t["/metrics"].append(metrics)
            t["/"].append(page)
    for server in servers.values():
        server.close()
    return reads, times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--launches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--bin", default="target/release")
    parser.add_argument("--postgres", help="a server URL whose user may create databases")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        raw = subprocess.run([f"{args.bin}/examples/synthetic_export", str(args.history + 5 * args.launches)],
                             check=True, capture_output=True).stdout
        small, whole = split(json.loads(raw), args.launches)
        paths = {}
        for name, export in [("live", small), ("history", whole)]:
            paths[name] = os.path.join(work, f"{name}.json")
            with open(paths[name], "w") as f:
                json.dump(export, f)
        repository = next(r["repository"] for r in small["worker_registrations"] if r.get("repository"))
        backends = {"SQLite": {name: os.path.join(work, f"{name}.sqlite3") for name in paths}}
        if args.postgres:
            base = args.postgres.rsplit("/", 1)[0]
            urls = {}
            for name in paths:
                db = f"fleet_history_{name}"
                for sql in [f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}"]:
                    subprocess.run(["psql", args.postgres, "-qc", sql], check=True)
                urls[name] = f"{base}/{db}"
            backends["PostgreSQL"] = urls
        for backend, registries in backends.items():
            envs = {name: prepare(args.bin, registries[name], paths[name]) for name in paths}
            reads, times = measure(args.bin, envs, args.rounds, repository)
            print(f"{backend}: {len(small['worker_registrations'])} rows of {args.launches} launches, "
                  f"beside {args.history} rows of history; medians of {args.rounds} rounds")
            print(f"  {'read':<20} {'live ms':>9} {'+history ms':>12} {'ratio':>7}")
            for read in reads:
                live = statistics.median(times["live"][read]) * 1000
                history = statistics.median(times["history"][read]) * 1000
                print(f"  {read:<20} {live:>9.2f} {history:>12.2f} {history / live:>6.2f}x")


if __name__ == "__main__":
    main()
