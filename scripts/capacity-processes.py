#!/usr/bin/env python3
"""A PostgreSQL fleet as it connects: WORKERS real `fleetctl worker run` processes
(launches of five, each minted by `fleet-launch mint`) against one server through a
PgBouncer in transaction pooling mode (scripts/pgbouncer-start.sh, POOL server sessions),
every worker heartbeating at its pacing (a third of TTL) and sweeping on its own ticks,
with `fleetctl snapshot` and `fleetctl retire plan` run beside them every 5 s, for
SECONDS once all are registered.

Reported: the heartbeat gaps each worker's rows show (consecutive last_heartbeat_at
values, read from the server every 0.5 s) against the beat interval, the floor this run
measures against (a gap is the interval plus the difference of two beats' latencies);
rows ever marked stale (false stale marks: every worker lives); server sessions of the
database (most seen); the snapshot's and the plan's whole-process times; private memory
(Pss_Anon) per `worker run` process.

    scripts/capacity-processes.py WORKERS SECONDS TTL [POOL]

Needs the release binaries (cargo build --release), PostgreSQL at FLEET_TEST_POSTGRES_URL
(default postgres://postgres@127.0.0.1:5432/test; the database fleet_capacity is made
and dropped) and psql.
"""

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release")
NAMESPACES = ["author", "reviewer", "merger", "controller", "reconciler"]


def psql(url, sql):
    out = subprocess.run(["psql", "-X", "-At", url, "-c", sql], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def with_database(url, name):
    scheme, rest = url.split("://", 1)
    authority = rest.split("/", 1)[0]
    return f"{scheme}://{authority}/{name}"


def private_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss_Anon:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def timed(cmd, env):
    start = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True)
    return time.monotonic() - start, out.returncode


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    workers, seconds, ttl = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    pool = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    if workers % 5:
        sys.exit("WORKERS must be launches of five")
    server = os.environ.get("FLEET_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
    db = "fleet_capacity"
    direct = with_database(server, db)
    psql(server, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    psql(server, f"CREATE DATABASE {db}")
    bouncer = tempfile.mkdtemp(prefix="fleetward-capacity-")
    port = subprocess.run(
        [os.path.join(ROOT, "scripts", "pgbouncer-start.sh"), server, bouncer, str(pool)],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    url = f"postgres://postgres@127.0.0.1:{port}/{db}"
    env = dict(os.environ, FLEET_REGISTRY=url)
    env.pop("GITEA_MCP_LAUNCH_PROCESS", None)
    procs = []
    try:
        subprocess.run([f"{BIN}/fleetctl", "registry", "init"], env=env, check=True, capture_output=True)
        max_connections = psql(direct, "SHOW max_connections")
        started = time.monotonic()
        for _ in range(workers // 5):
            # Launches start one after another, a few milliseconds apart; a mint that
            # meets the registry busy with the others' registrations is tried again.
            for attempt in range(10):
                out = subprocess.run(
                    [f"{BIN}/fleet-launch", "mint", "--client", "codex"], env=env, capture_output=True, text=True,
                )
                if out.returncode == 0:
                    break
                time.sleep(1)
            else:
                sys.exit(f"mint failed after {len(procs)} workers: {out.stderr.strip()}")
            minted = out.stdout.strip()
            launch_env = dict(env, GITEA_MCP_CLIENT="codex", GITEA_MCP_CLIENT_INSTANCE=minted)
            for ns in NAMESPACES:
                procs.append(subprocess.Popen(
                    [f"{BIN}/fleetctl", "worker", "run", "--namespace", ns, "--ttl", str(ttl), "--",
                     "sleep", str(seconds + 600)],
                    env=launch_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True,
                ))
        while int(psql(direct, "SELECT count(*) FROM worker_registrations WHERE status = 'active'")) < workers:
            ended = [p for p in procs if p.poll() is not None]
            if ended:
                sys.exit(f"{len(ended)} workers exited while registering (exit {ended[0].returncode})")
            time.sleep(0.5)
        registered_in = time.monotonic() - started

        seen = {}
        gaps = []
        stale_ever = set()
        sessions_most = 0
        snapshot_times, plan_times, failures = [], [], 0
        next_reader = time.monotonic()
        end = time.monotonic() + seconds
        memory = []
        while time.monotonic() < end:
            rows = psql(direct,
                        "SELECT worker_identity, last_heartbeat_at, coalesce(ownership_state, '') "
                        "FROM worker_registrations WHERE status = 'active'")
            for line in rows.splitlines():
                ident, beat, state = line.split("|")
                if state == "stale":
                    stale_ever.add(ident)
                last = seen.get(ident)
                if last is not None and beat != last:
                    gaps.append(iso_seconds(beat) - iso_seconds(last))
                seen[ident] = beat
            sessions = int(psql(server, f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}'"))
            sessions_most = max(sessions_most, sessions)
            if time.monotonic() >= next_reader:
                next_reader += 5
                took, rc = timed([f"{BIN}/fleetctl", "snapshot", "--json"], env)
                snapshot_times.append(took)
                failures += rc not in (0, 1)
                took, rc = timed([f"{BIN}/fleetctl", "retire", "plan", "--json"], env)
                plan_times.append(took)
                failures += rc not in (0, 1)
                if not memory:
                    memory = [m for m in (private_kb(p.pid) for p in procs) if m is not None]
            time.sleep(0.5)

        interval = ttl / 3
        gaps.sort()
        q = lambda f: gaps[min(len(gaps) - 1, int(f * len(gaps)))]
        print(f"workers {workers} (launches of five, one process each) through PgBouncer "
              f"(transaction pooling, pool {pool}), server max_connections {max_connections}")
        print(f"registered in {registered_in:.1f} s; ran {seconds} s; TTL {ttl} s, beat interval {interval:.1f} s")
        print(f"heartbeat gaps: {len(gaps)}; p50 {q(0.5):.3f} s, p99 {q(0.99):.3f} s, max {gaps[-1]:.3f} s; "
              f"p99 lateness {q(0.99) - interval:.3f} s = {(q(0.99) - interval) / ttl:.4f} of the TTL")
        print(f"false stale marks: {len(stale_ever)}")
        print(f"server sessions of the database, most seen: {sessions_most}")
        print(f"snapshot p50 {statistics.median(snapshot_times) * 1000:.0f} ms, "
              f"plan p50 {statistics.median(plan_times) * 1000:.0f} ms ({len(snapshot_times)} each, "
              f"{failures} failed)")
        if memory:
            print(f"worker run private memory (Pss_Anon): median {statistics.median(memory) / 1024:.1f} MB, "
                  f"max {max(memory) / 1024:.1f} MB, all {sum(memory) / 1024:.0f} MB")
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        for p in procs:
            p.wait()
        pid_file = os.path.join(bouncer, "pgbouncer.pid")
        if os.path.exists(pid_file):
            with open(pid_file) as f:
                os.kill(int(f.read().strip()), signal.SIGTERM)
        time.sleep(0.5)
        psql(server, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def iso_seconds(text):
    # 2026-07-30T12:00:00.000Z: seconds within the day are enough for gaps under a day
    # apart, except across midnight, which the run does not straddle by much.
    clock = text[11:23]
    h, m, s = clock.split(":")
    day = int(text[8:10])
    return day * 86400 + int(h) * 3600 + int(m) * 60 + float(s)


if __name__ == "__main__":
    main()
