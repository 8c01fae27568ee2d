#!/usr/bin/env python3
"""What keeping the digest of the rows' versions (SQLite schema version 10) costs a
heartbeat: the heartbeat's statement, committed alone, on a copy of REGISTRY and on a
second copy whose digest triggers are dropped (as schema version 9 wrote rows),
alternating round by round; prints each rate and their ratio. Not part of CI.

  scripts/digest-write-cost.py REGISTRY [HEARTBEATS] [ROUNDS]     (default 2000, 6)
"""

import os
import sqlite3
import statistics
import sys
import tempfile
import time

HEARTBEAT = (
    "UPDATE worker_registrations SET last_heartbeat_at = ?, change_seq = "
    "(SELECT coalesce(max(change_seq), 0) + 1 + (random() & 65535) FROM worker_registrations) "
    "WHERE worker_identity = ?"
)
DIGEST_TRIGGERS = [
    "worker_registrations_insert_is_digested",
    "worker_registrations_version_is_digested",
    "worker_registrations_delete_is_digested",
]


def copy(source, target, drop_digest):
    sqlite3.connect(source).execute("VACUUM INTO ?", (target,))
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    if drop_digest:
        for trigger in DIGEST_TRIGGERS:
            conn.execute(f"DROP TRIGGER {trigger}")
    return conn


def main():
    source = sys.argv[1]
    beats = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    with tempfile.TemporaryDirectory() as work:
        arms = {
            "digest kept (schema 10)": copy(source, os.path.join(work, "kept.sqlite3"), False),
            "without it (schema 9)": copy(source, os.path.join(work, "bare.sqlite3"), True),
        }
        first = next(iter(arms.values()))
        ids = [r[0] for r in first.execute("SELECT worker_identity FROM worker_registrations LIMIT ?", (beats,))]
        rates = {name: [] for name in arms}
        for round_ in range(rounds):
            for name, conn in arms.items():
                started = time.perf_counter()
                for i, worker in enumerate(ids):
                    conn.execute(HEARTBEAT, (f"2026-07-30T12:{round_ % 60:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}Z", worker))
                rates[name].append(len(ids) / (time.perf_counter() - started))
        for name, runs in rates.items():
            print(f"{name}: {statistics.median(runs):.0f} heartbeats/s")
        kept, bare = (statistics.median(runs) for runs in rates.values())
        print(f"ratio {kept / bare:.2f}")


if __name__ == "__main__":
    main()
