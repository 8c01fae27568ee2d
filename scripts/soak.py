#!/usr/bin/env python3
"""Whether the long-lived processes stay flat: a fleet with churn, watched for a while.

A constant live fleet of --launches launches of five `fleetctl worker run` each, and
beside it, every --churn seconds, one launch crashed whole (SIGKILL of its workers'
process groups) and replaced by a new one, the crashed launch's rows retired once their
heartbeats lapse (`retire plan`, then `retire apply --every-candidate`) and a workflow
lease taken and released. Watching it all the time: one `fleet-mcp --namespace
controller` answering a snapshot call every 0.5 s, and one `fleetctl serve` scraped
every 10 s with two `/events` streams open.

Every 10 s it samples, for fleet-mcp, serve and one long-lived `worker run`: private
memory (`Pss_Anon`), open descriptors, threads and sockets (on PostgreSQL, its server
sessions); and it records each snapshot call's and each scrape's latency. At the end it
prints each figure's median over the first and the last tenth of the run. Flat within
noise is the goal. Not part of CI.

  cargo build --release -p fleetctl -p fleet-launch -p fleet-mcp
  scripts/soak.py --duration 1800                      # SQLite, a file of its own
  scripts/soak.py --duration 1800 --registry postgres://postgres@127.0.0.1:5432/fleet_soak

With --restart CMD, CMD (a shell command) runs once halfway: a server restart, such as
`runuser -u postgres -- pg_ctl -D DATA -m fast -w restart` for a server of the soak's own.
The report then says how long the fleet took to read as before (the snapshot's live
count back to the constant fleet's) and counts the failed calls and scrapes.
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from fleet_processes import Mcp, free_port, get, memory, wait_for_port

NAMESPACES = ["author", "reviewer", "merger", "controller", "reconciler"]


def launch_process():
    """This process as `fleet-launch run` records a launch's client."""
    with open("/proc/self/stat") as stat:
        start = stat.read().rsplit(")", 1)[1].split()[19]
    namespace = os.readlink("/proc/self/ns/pid").split("[")[1].rstrip("]")
    return f"{os.getpid()}:{start}:{namespace}"


def sample(pid):
    """(private MB, descriptors, threads, sockets) of `pid`."""
    _, private = memory(pid)
    fds = sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        fds += 1
        try:
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return private, fds, len(os.listdir(f"/proc/{pid}/task")), sockets


class Soak:
    def __init__(self, args, workdir):
        self.bin = args.bin
        self.dir = workdir
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GITEA_")}
        self.env["FLEET_REGISTRY"] = args.registry or os.path.join(workdir, "registry.sqlite3")
        self.launches = []  # (instance, [Popen])
        self.lock = threading.Lock()
        self.figures = {}  # name -> [(t, value)]
        self.start = time.monotonic()
        self.stopping = threading.Event()
        self.epoch = 0

    def record(self, name, value):
        with self.lock:
            self.figures.setdefault(name, []).append((time.monotonic() - self.start, value))

    def run(self, *args, check=True):
        out = subprocess.run(args, cwd=self.dir, env=self.env, capture_output=True, text=True)
        if check and out.returncode != 0:
            sys.exit(f"{' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
        return out

    def ctl(self, *args, check=True):
        return self.run(f"{self.bin}/fleetctl", *args, check=check)

    def mint(self):
        return self.run(f"{self.bin}/fleet-launch", "mint", "--client", "codex").stdout.strip()

    def new_launch(self):
        instance = self.mint()
        env = dict(self.env, GITEA_MCP_CLIENT="codex", GITEA_MCP_CLIENT_INSTANCE=instance,
                   GITEA_MCP_LAUNCH_PROCESS=launch_process())
        workers = [subprocess.Popen(
            [f"{self.bin}/fleetctl", "worker", "run", "--namespace", ns, "--ttl", "6", "--", "sleep", "1000000"],
            cwd=self.dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        ) for ns in NAMESPACES]
        self.launches.append((instance, workers))

    def crash_oldest_but_one(self):
        """Crashes the launch after the first (the first is the one whose worker is sampled)."""
        _, workers = self.launches.pop(1)
        for worker in workers:
            try:
                os.killpg(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            worker.wait()

    def retire(self):
        plan = json.loads(self.ctl("retire", "plan", "--json").stdout)
        if plan["candidate_count"] == 0:
            return 0
        out = self.ctl("retire", "apply", "--every-candidate", "--json",
                       "--registry-fingerprint", plan["registry_fingerprint"],
                       "--candidate-fingerprint", plan["candidate_fingerprint"], check=False)
        report = json.loads(out.stdout) if out.stdout.strip() else {}
        return len(report.get("retired", []))

    def hand_over_a_lease(self, n):
        """A new holder takes the workflow lease (acquired the first time, taken over after
        a release since) and releases it."""
        owner = f"soak-{n}"
        if self.epoch == 0:
            out = self.ctl("lease", "acquire", "--key", "workflow:soak", "--owner", owner, "--ttl", "60", "--json",
                           check=False)
        else:
            out = self.ctl("lease", "takeover", "--key", "workflow:soak", "--owner", owner,
                           "--expected-epoch", str(self.epoch), "--ttl", "60", "--json", check=False)
        if out.returncode != 0:
            return
        lease = json.loads(out.stdout)["lease"]
        self.epoch = lease["fencing_epoch"]
        self.ctl("lease", "release", "--key", "workflow:soak", "--owner", owner, "--lease-id", lease["lease_id"],
                 "--epoch", str(self.epoch), check=False)

    def mcp_caller(self, server):
        while not self.stopping.is_set():
            try:
                took = server.call("gitea_snapshot_instance_fleet", {})
                self.record("fleet-mcp snapshot call ms", took * 1000)
            except Exception:  # a call refused while the server restarts is counted
                self.record("fleet-mcp failed calls", 1)
            self.stopping.wait(0.5)

    def live_workers(self):
        out = self.ctl("snapshot", "--json", check=False)
        try:
            return json.loads(out.stdout)["counts"]["live_worker_count"]
        except (ValueError, KeyError):
            return None

    def events(self, port):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n")
            s.settimeout(1)
            while not self.stopping.is_set():
                try:
                    if not s.recv(1 << 16):
                        return
                except socket.timeout:
                    pass

    def scrape(self, port):
        try:
            took, _, _ = get(port, "/metrics")
            self.record("serve /metrics ms", took * 1000)
        except OSError:
            self.record("serve failed scrapes", 1)


def tenth_medians(points, duration):
    first = [v for t, v in points if t <= duration / 10]
    last = [v for t, v in points if t >= duration * 9 / 10]
    if not first or not last:
        return None
    return statistics.median(first), statistics.median(last)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=3600)
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--churn", type=float, default=30)
    ap.add_argument("--registry", help="a PostgreSQL URL (an empty database); default a new SQLite file")
    ap.add_argument("--bin", default=os.path.realpath("target/release"))
    ap.add_argument("--restart", help="a shell command run once halfway (a server restart)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        soak = Soak(args, os.path.realpath(workdir))
        soak.ctl("registry", "init")
        for _ in range(args.launches):
            soak.new_launch()
        env = dict(soak.env, GITEA_MCP_CLIENT="codex", GITEA_MCP_CLIENT_INSTANCE=soak.mint())
        mcp = Mcp(args.bin, env, cwd=soak.dir)
        port = free_port()
        serve = subprocess.Popen([f"{args.bin}/fleetctl", "serve", "--listen", f"127.0.0.1:{port}"],
                                 cwd=soak.dir, env=soak.env, stderr=subprocess.DEVNULL)
        wait_for_port(port)
        threads = [threading.Thread(target=soak.mcp_caller, args=(mcp,), daemon=True)]
        threads += [threading.Thread(target=soak.events, args=(port,), daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        soak.start = time.monotonic()
        next_churn = next_scrape = 0.0
        churns = retired = 0
        restarted = None  # (seconds into the run, seconds until the fleet read as before)
        try:
            while (elapsed := time.monotonic() - soak.start) < args.duration:
                if elapsed >= next_scrape:
                    soak.scrape(port)
                    worker = soak.launches[0][1][0].pid
                    for name, pid in [("fleet-mcp", mcp.pid), ("serve", serve.pid), ("worker run", worker)]:
                        private, fds, nthreads, sockets = sample(pid)
                        soak.record(f"{name} private MB", private)
                        soak.record(f"{name} descriptors", fds)
                        soak.record(f"{name} threads", nthreads)
                        soak.record(f"{name} sockets", sockets)
                    next_scrape += 10
                if elapsed >= next_churn and elapsed > 0:
                    if len(soak.launches) > 1:
                        soak.crash_oldest_but_one()
                    soak.new_launch()
                    retired += soak.retire()
                    soak.hand_over_a_lease(churns)
                    churns += 1
                    next_churn += args.churn
                elif next_churn == 0:
                    next_churn = args.churn
                if args.restart and restarted is None and elapsed >= args.duration / 2:
                    before = soak.live_workers()
                    subprocess.run(args.restart, shell=True, check=True)
                    at = time.monotonic()
                    while soak.live_workers() != before and time.monotonic() - at < 120:
                        time.sleep(0.5)
                    restarted = (elapsed, time.monotonic() - at, soak.live_workers() == before)
                time.sleep(0.5)
        finally:
            soak.stopping.set()
            serve.terminate()
            mcp.close()
            for _, workers in soak.launches:
                for worker in workers:
                    worker.terminate()
            for _, workers in soak.launches:
                for worker in workers:
                    worker.wait()
            serve.wait()
        backend = "PostgreSQL" if args.registry else "SQLite"
        print(f"{backend}, {args.duration:.0f} s: {args.launches} live launches, {churns} crashed and "
              f"replaced, {retired} rows retired; medians of the first and the last tenth")
        if restarted:
            print(f"  restarted at {restarted[0]:.0f} s: the fleet read {'as before' if restarted[2] else 'otherwise'}"
                  f" {restarted[1]:.1f} s later")
        for name in ("fleet-mcp failed calls", "serve failed scrapes"):
            print(f"  {name}: {len(soak.figures.pop(name, []))}")
        print(f"  {'figure':<32} {'first':>9} {'last':>9}")
        for name in sorted(soak.figures):
            medians = tenth_medians(soak.figures[name], args.duration)
            if medians:
                print(f"  {name:<32} {medians[0]:>9.2f} {medians[1]:>9.2f}")


if __name__ == "__main__":
    main()
