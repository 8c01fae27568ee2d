#!/usr/bin/env python3
"""What `fleetctl serve` costs against the size of the fleet it serves.

For each registry given (made with the synthetic export: `cargo run --release -p
fleet-snapshot --example synthetic_export -- N > fleetN.json`, then `fleetctl registry
import`), a `fleetctl serve` starts; after one warm-up scrape and page, ROUNDS scrapes
and page loads are timed, the servers alternating round by round (a shared machine's
speed drifts). Then PAGES event streams are opened on each server, as that many open
browser pages would, and the server's CPU time over IDLE seconds is read from
/proc/PID/stat while nothing changes; then a lease is acquired and the time until every
stream has heard of it is taken. Prints, per registry: scrape bytes, median scrape and
page time, resident and private (Pss_Anon) memory, idle CPU as a share of one core, and
the time for the change to reach every page. Not part of CI.

  cargo build --release -p fleetctl
  scripts/serve-cost.py r1000.sqlite3 r100000.sqlite3 --rounds 10
"""
import argparse
import os
import socket
import statistics
import subprocess
import threading
import time

from fleet_processes import free_port, get, memory


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("registries", nargs="+")
    parser.add_argument("--fleetctl", default="target/release/fleetctl")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()
    servers = []
    for registry in args.registries:
        port = free_port()
        env = dict(os.environ, FLEET_REGISTRY=registry)
        proc = subprocess.Popen([args.fleetctl, "serve", "--listen", f"127.0.0.1:{port}"],
                                env=env, stderr=subprocess.DEVNULL)
        servers.append({"registry": registry, "port": port, "proc": proc, "env": env,
                        "scrape": [], "page": []})
    for s in servers:
        while True:
            try:
                get(s["port"], "/metrics")
                break
            except OSError:
                time.sleep(0.1)
        get(s["port"], "/")
    for _ in range(args.rounds):
        for s in servers:
            took, _, body = get(s["port"], "/metrics")
            s["scrape"].append(took)
            s["bytes"] = len(body)
            took, _, body = get(s["port"], "/")
            s["page"].append(took)
            s["page_bytes"] = len(body)
            s["since"] = body.split(b'data-since="')[1].split(b'"')[0].decode()
    for s in servers:
        s["rss"], s["private"] = memory(s["proc"].pid)
        heard = []
        streams = []
        for _ in range(args.pages):
            c = socket.create_connection(("127.0.0.1", s["port"]))
            c.sendall(f"GET /events?since={s['since']} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
            streams.append(c)
        time.sleep(2)
        before = cpu_seconds(s["proc"].pid)
        time.sleep(args.idle)
        s["idle_cpu"] = (cpu_seconds(s["proc"].pid) - before) / args.idle

        def listen(c):
            data = b""
            c.settimeout(30)
            while b"data: changed" not in data:
                chunk = c.recv(4096)
                if not chunk:
                    return
                data += chunk
            heard.append(time.perf_counter())

        threads = [threading.Thread(target=listen, args=(c,)) for c in streams]
        for t in threads:
            t.start()
        key = f"workflow:serve-cost-{time.time_ns()}"
        changed = time.perf_counter()
        subprocess.run([args.fleetctl, "lease", "acquire", "--key", key, "--owner", "serve-cost"],
                       env=s["env"], check=True, capture_output=True)
        for t in threads:
            t.join()
        s["reach"] = (max(heard) - changed) if len(heard) == len(streams) else float("nan")
        for c in streams:
            c.close()
    floor = servers[0]
    print(f"{'registry':<28} {'scrape':>10} {'scrape ms':>10} {'x floor':>8} {'page ms':>8} "
          f"{'page KB':>8} {'RSS MB':>7} {'private MB':>10} {'idle cpu':>9} {'change s':>9}")
    for s in servers:
        scrape = statistics.median(s["scrape"]) * 1000
        ratio = scrape / (statistics.median(floor["scrape"]) * 1000)
        print(f"{os.path.basename(s['registry']):<28} {s['bytes']:>10} {scrape:>10.1f} {ratio:>8.2f} "
              f"{statistics.median(s['page']) * 1000:>8.1f} {s['page_bytes'] / 1024:>8.1f} "
              f"{s['rss']:>7.1f} {s['private']:>10.1f} {s['idle_cpu'] * 100:>8.1f}% {s['reach']:>9.2f}")
    for s in servers:
        s["proc"].terminate()
        s["proc"].wait()


if __name__ == "__main__":
    main()
