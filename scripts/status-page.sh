#!/usr/bin/env bash
# The fleet's page (`fleetctl serve`, at `/`) in headless Chromium (Debian's package):
# a launch of three workers, and a row whose launch id is markup (a row is kept as
# written: a malformed value is evidence too); the page as the browser built it must
# show the verdict, the launch's row with its live workers, and the markup as text,
# never as an element.
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
timeout 60 "$browser" --headless --no-sandbox --disable-gpu --window-size=1000,600 \
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
