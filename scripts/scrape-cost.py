#!/usr/bin/env python3
"""Cost of one `fleetctl serve` scrape against the length of the lease audit log.

For each log length, a fresh SQLite registry gets that many audit entries (written
straight into the append-only table, as years of lease decisions would leave them), a
`fleetctl serve` starts, one scrape warms it (it counts the whole log once), and then
ROUNDS scrapes are timed, the registries alternating round by round (a shared machine's
speed drifts). Prints the median scrape time per length and its ratio to the shortest
log's. Not part of CI.

  cargo build --release -p fleetctl
  scripts/scrape-cost.py --lengths 1000 1000000 --rounds 30
"""
import argparse
import os
import socket
import sqlite3
import statistics
import subprocess
import tempfile
import time


def scrape(port):
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        while s.recv(1 << 16):
            pass
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 1_000_000])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--fleetctl", default="target/release/fleetctl")
    args = parser.parse_args()
    work = tempfile.mkdtemp()
    servers, ports = [], []
    for n in args.lengths:
        registry = os.path.join(work, f"r{n}.sqlite3")
        env = dict(os.environ, FLEET_REGISTRY=registry)
        subprocess.run([args.fleetctl, "registry", "init"], env=env, check=True, capture_output=True)
        db = sqlite3.connect(registry)
        rows = ((("acquire", "acquired", None) if i % 3 else ("acquire", "denied", "lease_held"))
                for i in range(n))
        db.executemany(
            "INSERT INTO lease_audit_log (event, outcome, reason, lease_key, kind, identity, at) "
            "VALUES (?, ?, ?, 'workflow:w', 'workflow', 'wkr-a', '2026-07-30T12:00:00.000Z')", rows)
        db.commit()
        db.close()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        servers.append(subprocess.Popen([args.fleetctl, "serve", "--listen", f"127.0.0.1:{port}"],
                                        env=env, stderr=subprocess.DEVNULL))
        ports.append(port)
    for port in ports:
        while True:
            try:
                scrape(port)  # the warming scrape counts the whole log once
                break
            except OSError:
                time.sleep(0.05)
    times = {n: [] for n in args.lengths}
    for _ in range(args.rounds):
        for n, port in zip(args.lengths, ports):
            times[n].append(scrape(port))
    for server in servers:
        server.kill()
    floor = statistics.median(times[args.lengths[0]])
    for n in args.lengths:
        median = statistics.median(times[n])
        print(f"{n:>9} audit entries: median scrape {median * 1000:.2f} ms, {median / floor:.2f}x the {args.lengths[0]}-entry log")


if __name__ == "__main__":
    main()
