#!/usr/bin/env python3
"""Retirement as an agent lives it, in a fleet that never stops heartbeating.

LAUNCHES launches of five real `fleetctl worker run` workers each, at the default TTL
(30 s, a heartbeat every 10 s), share one SQLite registry. Before the trials, CRASHED
workers of distinct launches are killed (SIGKILL) and the script waits until every one
is a retirement candidate. Each trial then plans, waits WAIT seconds (a model's turn),
and applies the plan to its crashed worker with `fleetctl retire apply`.

Trials of kind `clean` change nothing the decision rests on: only the live workers'
heartbeats move the registry. They must retire their crashed worker. Trials of the other
kinds inject one relevant change during the wait and must refuse, with nothing written:

  lease    a workflow lease is taken for the candidate;
  ledger   the candidate's launch is removed from the ledger (a restored old backup);
  restart  the candidate's launch restarts it: a new worker of the same instance and
           namespace registers and supersedes the crashed row;
  strict   nothing relevant, but --require-registry-match refuses any movement.

Not part of CI (the conformance suite is its fast form). Run from the repository root:

  cargo build --release -p fleetctl -p fleet-launch
  scripts/retire-live.py --launches 50 --clean 20 --inject 2 --wait 30
"""
import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

NAMESPACES = ["author", "reviewer", "merger", "controller", "reconciler"]
INJECTIONS = ["lease", "ledger", "restart", "strict"]


def launch_process():
    """This process as `fleet-launch run` records a launch's client: PID:START:PID_NAMESPACE."""
    with open("/proc/self/stat") as stat:
        start = stat.read().rsplit(")", 1)[1].split()[19]
    namespace = os.readlink("/proc/self/ns/pid").split("[")[1].rstrip("]")
    return f"{os.getpid()}:{start}:{namespace}"


class Fleet:
    def __init__(self, bindir, workdir):
        self.fleetctl = os.path.join(bindir, "fleetctl")
        self.launcher = os.path.join(bindir, "fleet-launch")
        self.dir = workdir
        self.registry = os.path.join(workdir, "registry.sqlite3")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GITEA_")}
        self.env["FLEET_REGISTRY"] = self.registry
        self.children = []

    def run(self, *args, check=True):
        out = subprocess.run(args, cwd=self.dir, env=self.env, capture_output=True, text=True)
        if check and out.returncode != 0:
            sys.exit(f"{' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
        return out

    def ctl_json(self, *args, check=True):
        out = self.run(self.fleetctl, *args, "--json", check=check)
        return out.returncode, json.loads(out.stdout) if out.stdout.strip() else None

    def mint(self):
        return self.run(self.launcher, "mint", "--client", "codex").stdout.strip()

    def start_worker(self, instance, namespace):
        # This script is the client of every launch, as `fleet-launch run` records one.
        env = dict(self.env, GITEA_MCP_CLIENT="codex", GITEA_MCP_CLIENT_INSTANCE=instance,
                   GITEA_MCP_LAUNCH_PROCESS=launch_process())
        child = subprocess.Popen(
            [self.fleetctl, "worker", "run", "--namespace", namespace, "--", "sleep", "100000"],
            cwd=self.dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.children.append(child)

    def workers(self):
        return self.ctl_json("worker", "list")[1]

    def stop(self):
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


def wait_until(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    sys.exit(f"timed out waiting for {what}")


def row_of(rows, identity):
    return next(r for r in rows if r["worker_identity"] == identity)


def trial(fleet, kind, victim, wait):
    """One plan -> wait -> apply; returns (ok, outcome, registry_moved)."""
    _, plan = fleet.ctl_json("retire", "plan")
    if victim not in plan["candidate_worker_identities"]:
        return False, "victim not a candidate", None
    rows_before = fleet.workers()
    victim_row = row_of(rows_before, victim)
    time.sleep(wait)
    if kind == "lease":
        fleet.run(fleet.fleetctl, "lease", "acquire", "--key", f"workflow:inject-{victim}",
                  "--owner", victim, "--ttl", "600")
    elif kind == "ledger":
        with sqlite3.connect(fleet.registry, timeout=30) as db:
            db.execute("DELETE FROM instances WHERE client_instance_id = ?",
                       (victim_row["client_instance_id"],))
    elif kind == "restart":
        fleet.start_worker(victim_row["client_instance_id"], victim_row["namespace"])
        wait_until("the restarted worker", lambda: row_of(fleet.workers(), victim)["status"] != "active", 30)
    extra = ["--require-registry-match"] if kind == "strict" else []
    code, report = fleet.ctl_json(
        "retire", "apply",
        "--registry-fingerprint", plan["registry_fingerprint"],
        "--candidate-fingerprint", plan["candidate_fingerprint"],
        "--workers", victim,
        *extra, check=False,
    )
    outcome = report["outcome"] if report else f"exit {code}"
    moved = report.get("registry_moved") if report else None
    if kind == "clean":
        return code == 0 and victim in report["retired"], outcome, moved
    # A refusal writes nothing: every row the apply could have touched is as it was
    # just before the apply (the injected change itself aside).
    after = fleet.workers()
    retired_now = {r["worker_identity"] for r in after if r["status"] == "retired"}
    retired_before = {r["worker_identity"] for r in rows_before if r["status"] == "retired"}
    nothing_written = code == 1 and report["retired_count"] == 0 and retired_now == retired_before
    return nothing_written, outcome, moved


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release", help="directory of fleetctl and fleet-launch")
    ap.add_argument("--launches", type=int, default=50)
    ap.add_argument("--clean", type=int, default=20, help="trials with nothing relevant changed")
    ap.add_argument("--inject", type=int, default=2, help="trials of each injected change")
    ap.add_argument("--wait", type=float, default=30.0, help="seconds between plan and apply")
    args = ap.parse_args()
    bindir = os.path.abspath(args.bin)
    kinds = ["clean"] * args.clean + [k for k in INJECTIONS for _ in range(args.inject)]
    if len(kinds) > args.launches:
        sys.exit("need at least one launch per trial")
    with tempfile.TemporaryDirectory() as workdir:
        fleet = Fleet(bindir, os.path.realpath(workdir))
        try:
            fleet.run(fleet.fleetctl, "registry", "init")
            instances = [fleet.mint() for _ in range(args.launches)]
            for instance in instances:
                for ns in NAMESPACES:
                    fleet.start_worker(instance, ns)
            total = args.launches * len(NAMESPACES)
            wait_until("every worker registered", lambda: len(fleet.workers()) == total, 120)
            rows = fleet.workers()
            victims = []
            for instance in instances[: len(kinds)]:
                row = next(r for r in rows if r["client_instance_id"] == instance and r["namespace"] == "author")
                os.kill(row["pid"], signal.SIGKILL)
                victims.append(row["worker_identity"])
            print(f"{total} workers, {len(victims)} crashed; waiting until each is a candidate", flush=True)

            def all_candidates():
                _, plan = fleet.ctl_json("retire", "plan")
                return set(victims) <= set(plan["candidate_worker_identities"])

            wait_until("every crashed worker to be a candidate", all_candidates, 180)
            results = {}
            for n, (kind, victim) in enumerate(zip(kinds, victims), 1):
                ok, outcome, moved = trial(fleet, kind, victim, args.wait)
                results.setdefault(kind, []).append(ok)
                print(f"trial {n:2} {kind:8} {'ok  ' if ok else 'FAIL'} {outcome} registry_moved={moved}",
                      flush=True)
            for kind, oks in results.items():
                print(f"{kind:8} {sum(oks)}/{len(oks)}")
            clean = results.get("clean", [])
            injected = [ok for k, oks in results.items() if k != "clean" for ok in oks]
            good = sum(clean) >= len(clean) - len(clean) // 20 and all(injected)
            sys.exit(0 if good else 1)
        finally:
            fleet.stop()


if __name__ == "__main__":
    main()
