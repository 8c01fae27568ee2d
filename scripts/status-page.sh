#!/usr/bin/env bash
# The fleet's page (`fleetctl serve`, at `/`) in headless Chromium (Debian's package):
# a launch of three workers, and a row whose launch id is markup (a row is kept as
# written: a malformed value is evidence too); the page as the browser built it must
# show the verdict, the launch's row with its live workers, and the markup as text,
# never as an element. Its pictures must be drawn from what this script put in: the
# history's counts, a heartbeat gauge per worker against its TTL, the ages' histogram,
# and a lease that changed hands (epoch 1 to alpha, epoch 2 to beta) on the time line.
# FLEET_SCREENSHOT=docs/fleet-page.png keeps the page's picture.
#
#   scripts/status-page.sh            # uses target/debug (built by `cargo test`)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${FLEET_BIN_DIR:-$root/target/debug}"
browser="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$browser" ]; then
    apt-get install -y chromium >/dev/null 2>&1 \
        || { apt-get update >/dev/null 2>&1 && apt-get install -y chromium >/dev/null 2>&1; } \
        || { echo "status-page: chromium cannot be installed here" >&2; exit 1; }
    browser="$(command -v chromium)"
fi
work="$(mktemp -d)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
export FLEET_REGISTRY="$work/registry.sqlite3"
id="$("$bin/fleet-launch" mint --client codex)"
cat >"$work/planted.json" <<'JSON'
[{"worker_identity": "wkr-planted", "namespace": "author", "status": "active",
  "registered_at": "2026-07-30T12:00:00Z", "client_instance_id": "<b>planted</b>"}]
JSON
"$bin/fleetctl" registry import "$work/planted.json" >/dev/null
for ns in author reviewer merger; do
    GITEA_MCP_CLIENT=codex GITEA_MCP_CLIENT_INSTANCE="$id" \
        "$bin/fleetctl" worker run --namespace "$ns" -- sleep 120 &
    pids+=($!)
done
"$bin/fleetctl" lease acquire --key workflow:page-demo --owner alpha --ttl 1 >/dev/null
sleep 1.5
"$bin/fleetctl" lease takeover --key workflow:page-demo --owner beta --expected-epoch 1 --ttl 600 >/dev/null
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$bin/fleetctl" serve --listen "127.0.0.1:$port" 2>/dev/null &
pids+=($!)
for _ in $(seq 50); do
    rows="$("$bin/fleetctl" worker list --json 2>/dev/null || echo '[]')"
    [ "$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])))' "$rows")" = 4 ] && break
    sleep 0.2
done
dom="$work/page.html"
timeout 60 "$browser" --headless --no-sandbox --disable-gpu --dump-dom "http://127.0.0.1:$port/" >"$dom" 2>/dev/null
timeout 60 "$browser" --headless --no-sandbox --disable-gpu --window-size=1000,2000 \
    --screenshot="${FLEET_SCREENSHOT:-$work/page.png}" "http://127.0.0.1:$port/" >/dev/null 2>&1
python3 - "$dom" "$id" <<'PY'
import sys
from html.parser import HTMLParser
dom, launch = open(sys.argv[1]).read(), sys.argv[2]
class Page(HTMLParser):
    def __init__(self):
        super().__init__(); self.tags = []; self.verdict = None; self.cells = []; self._in = None
    def handle_starttag(self, tag, attrs):
        self.tags.append(tag); a = dict(attrs)
        if a.get("id") == "verdict": self._in = "verdict"
        elif tag == "td": self._in = ("td", a.get("class"))
    def handle_data(self, data):
        if self._in == "verdict": self.verdict = data.strip()
        elif isinstance(self._in, tuple): self.cells.append((data.strip(), self._in[1]))
    def handle_endtag(self, tag): self._in = None
page = Page(); page.feed(dom)
assert page.verdict in ("Fleet SAFE", "Fleet UNSAFE"), page.verdict
assert (launch, None) in page.cells, "the launch has its row"
assert sum(1 for text, cls in page.cells if text == "live" and cls == "live") == 3, page.cells
assert "b" not in page.tags, "registry values are text, never markup"
assert ("<b>planted</b>", None) in page.cells, "the planted value shows as the text it is"
print(f"status-page: {page.verdict}, the launch's row with 3 live workers, as Chromium built it")
PY

# The pictures, read back from the page as Chromium built it.
python3 - "$dom" <<'PY'
import sys
from html.parser import HTMLParser
class Pictures(HTMLParser):
    def __init__(self):
        super().__init__(); self.found = {}; self.meters = []; self.bands = {}; self.tenures = []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id") in ("history", "beat-ages", "lease-timeline", "host-states"):
            assert a.get("role") == "img" and a.get("aria-label"), f"{a['id']} says what it shows in words"
            self.found[a["id"]] = a
        if tag == "meter": self.meters.append(a)
        if a.get("class") == "band": self.bands[a["data-band"]] = int(a["data-count"])
        if a.get("class") == "tenure": self.tenures.append((int(a["data-epoch"]), a["data-holder"], a["data-held"]))
p = Pictures(); p.feed(open(sys.argv[1]).read())
history = p.found["history"]
# Three workers of the launch and the planted row (active, no heartbeat: stale).
assert (history["data-live"], history["data-stale"]) == ("3", "1"), history
assert len(p.meters) == 3, f"a gauge per worker with a heartbeat: {p.meters}"
for m in p.meters:
    assert 0 <= int(m["value"]) < int(m["max"]) and f"TTL {m['max']} s" in m["title"], m
assert sum(p.bands.values()) == 3 and p.found["beat-ages"]["data-total"] == "3", p.bands
assert p.tenures == [(1, "alpha", "false"), (2, "beta", "true")], p.tenures
print(f"status-page: pictures drawn from the data put in: history live 3 stale 1, {len(p.meters)} heartbeat "
      f"gauges, ages {p.bands}, lease epochs {[(e, h) for e, h, _ in p.tenures]}")
PY

# Live: the page stays open in Chromium (driven over the DevTools protocol on a pipe,
# `--remote-debugging-pipe`) while a worker crashes; the blocker must appear on the page
# with no reload by hand, and the page must log no console error (its security policy
# refusing anything included). The page is opened while eight other clients hold every
# event stream the server allows, so its own stream is refused (503) at first; they hang
# up, and the page must follow the fleet again.
reviewers() { "$bin/fleetctl" worker list -o name --namespace reviewer --status active 2>/dev/null || true; }
earlier="$(reviewers)"
GITEA_MCP_CLIENT=codex GITEA_MCP_CLIENT_INSTANCE="$id" \
    setsid "$bin/fleetctl" worker run --namespace reviewer --ttl 3 -- sleep 120 >/dev/null 2>&1 &
crashing=$!
pids+=($!)
disown "$crashing"  # its death by SIGKILL is the point, not news
crashing_id=""
for _ in $(seq 50); do
    crashing_id="$(comm -13 <(echo "$earlier" | sort) <(reviewers | sort) | sed 's|^worker/||')"
    [ -n "$crashing_id" ] && break
    sleep 0.2
done
python3 - "$browser" "http://127.0.0.1:$port/" "$crashing" 3 "$crashing_id" <<'PY'
import json, os, signal, subprocess, sys, time
browser, url, crashing, ttl, worker = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
import fcntl
# Chromium reads commands on fd 3 and writes on fd 4; the pipe ends are moved out of the
# way first, so placing one cannot overwrite the other.
to_chrome, from_us = os.pipe()
from_chrome, to_us = os.pipe()
to_chrome, to_us = (fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in (to_chrome, to_us))
def pipes():
    os.dup2(to_chrome, 3); os.dup2(to_us, 4)
chrome = subprocess.Popen([browser, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                           "about:blank"], pass_fds=(3, 4), preexec_fn=pipes,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.close(to_chrome); os.close(to_us)
inbox, buffer, next_id, errors = [], b"", 0, []
def send(method, params=None, session=None):
    global next_id
    next_id += 1
    message = {"id": next_id, "method": method, "params": params or {}}
    if session: message["sessionId"] = session
    os.write(from_us, json.dumps(message).encode() + b"\0")
    while True:
        for m in read():
            if m.get("id") == next_id:
                if "error" in m: sys.exit(f"status-page: {method}: {m['error']}")
                return m.get("result", {})
def read():
    global buffer
    chunk = os.read(from_chrome, 1 << 20)
    if not chunk: sys.exit("status-page: Chromium went away")
    buffer += chunk
    *whole, buffer = buffer.split(b"\0")
    messages = [json.loads(w) for w in whole if w]
    for m in messages:  # console errors and uncaught exceptions, from every page load
        if m.get("method") == "Runtime.exceptionThrown": errors.append(m["params"])
        if m.get("method") == "Runtime.consoleAPICalled" and m["params"].get("type") == "error": errors.append(m["params"])
        if m.get("method") == "Log.entryAdded" and m["params"]["entry"].get("level") == "error": errors.append(m["params"]["entry"])
    return messages
try:
    target = send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Runtime.enable", "Log.enable", "Page.enable"):
        send(domain, session=session)
    import socket, urllib.parse
    where = urllib.parse.urlsplit(url)
    held = []
    # The browsers run above have just hung up their own streams, which free their slots
    # within a second: a stream refused meanwhile is opened again.
    deadline = time.monotonic() + 10
    while len(held) < 8:
        s = socket.create_connection((where.hostname, where.port))
        s.sendall(b"GET /events?since=held HTTP/1.1\r\nHost: x\r\n\r\n")
        if s.recv(12) == b"HTTP/1.1 200":  # this stream has begun: it holds a slot
            held.append(s)
            continue
        s.close()
        assert time.monotonic() < deadline, "a slot was never freed for the held streams"
        time.sleep(0.25)
    send("Page.navigate", {"url": url}, session=session)
    def page(expr):
        return send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=session)["result"].get("value")
    def wait(expr, limit):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            value = page(expr)
            if value: return value
            time.sleep(0.1)
        return None
    assert wait("document.getElementById('verdict') && document.readyState === 'complete'", 20), "the page loaded"
    # This worker runs outside any launch, so it is already a blocker (unowned); its crash
    # must show as a stale worker.
    stale = ("[...document.querySelectorAll('#blockers tr')].some(r => r.cells[0].innerText === 'stale_worker'"
             f" && r.innerText.includes({json.dumps(worker)}))")
    assert worker and not page(stale), f"{worker} is not stale before the crash"
    time.sleep(2)  # the page's stream was refused, and tried again, while every slot was held
    for s in held:
        s.close()
    # A stream refused is tried again within 5 s, and a slot is freed within a second
    # of its client hanging up.
    retry = 6
    os.killpg(crashing, signal.SIGKILL)
    crashed_at = time.monotonic()
    shown = wait(stale, ttl + retry + 10)
    seen_after = time.monotonic() - crashed_at
    assert shown, f"no stale_worker blocker for {worker} on the page {seen_after:.1f} s after the crash: {page('document.body.innerText')}"
    assert seen_after <= ttl + retry + 2.5, f"the blocker showed {seen_after:.1f} s after the crash (TTL {ttl:.0f} s)"
    # The refusals this test caused on purpose are the only errors allowed.
    refused = lambda e: e.get("source") == "network" and "/events?" in e.get("url", "") and "503" in e.get("text", "")
    assert any(map(refused, errors)), "the page's stream was refused while every slot was held"
    errors = [e for e in errors if not refused(e)]
    assert not errors, f"console errors: {errors}"
    print(f"status-page: a crashed worker became a blocker on the open page {seen_after:.1f} s after the crash "
          f"(TTL {ttl:.0f} s; the page's stream refused at first while 8 others held every slot), no console error")
finally:
    chrome.kill()
PY
