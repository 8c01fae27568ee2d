// Tool calls through the TypeScript MCP SDK's client, as Claude Code, Gemini CLI and the
// MCP Inspector make them, against fleet-mcp over stdio. For each fleet size it times, in
// alternating rounds, `tools/list` (the floor: a round trip with a small answer), the
// default snapshot (a summary), and the whole snapshot (`detail: "full"`) beside the
// client's own parse of that answer's bytes (the floor a whole answer cannot beat), and
// prints p50s and ratios. With --live, another connection (a python3 sqlite3 writer)
// writes one worker's heartbeat before each default snapshot, as a fleet that never
// stops heartbeating does. Not part of CI: it needs the SDK from npm.
//
//   npm install @modelcontextprotocol/sdk@1          (in this directory or above)
//   cargo build --release -p fleet-mcp -p fleetctl
//   node scripts/ts-sdk-bench.mjs --workers 1000,10000 --calls 40 [--live]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { execFileSync, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
};
const sizes = arg("workers", "1000,10000").split(",").map(Number);
const calls = Number(arg("calls", "40"));
const bin = resolve(arg("bin", "target/release"));
const live = process.argv.includes("--live");

// A heartbeat writer on its own connection: one line in (a worker identity), one out
// once its heartbeat is committed.
function heartbeatWriter(registry) {
  const script = [
    "import datetime, sqlite3, sys",
    "db = sqlite3.connect(sys.argv[1])",
    "for line in sys.stdin:",
    "    beat = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%f')[:-3] + 'Z'",
    "    db.execute('UPDATE worker_registrations SET last_heartbeat_at = ? WHERE worker_identity = ?', (beat, line.strip()))",
    "    db.commit()",
    "    print('ok', flush=True)",
  ].join("\n");
  const child = spawn("python3", ["-c", script, registry], { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  return {
    async beat(identity) {
      child.stdin.write(`${identity}\n`);
      await lines.next();
    },
    close() { child.stdin.end(); },
  };
}
const NAMESPACES = ["author", "reviewer", "merger", "controller", "reconciler"];

function healthyFleet(workers) {
  const now = new Date().toISOString().replace(/\.\d+Z$/, ".000Z");
  const instance = (i) => `inst-codex-20260730T120000Z-${Math.floor(i / 5).toString(16).padStart(12, "0")}`;
  const instances = [];
  for (let i = 0; i < workers; i += 5) {
    instances.push({ client_instance_id: instance(i), client_type: "codex", minted_at: "2026-07-30T12:00:00Z" });
  }
  const rows = [];
  for (let i = 0; i < workers; i++) {
    rows.push({
      worker_identity: `wkr-bench-${String(i).padStart(5, "0")}`, client_type: "codex",
      client_instance_id: instance(i), namespace: NAMESPACES[i % 5], generation_id: `gen-${i}`,
      host_id: "0123456789abcdef0123456789abcdef", boot_id: "11111111-2222-3333-4444-555555555555",
      pid: 1_000_000 + i, process_start_time: 1 + i, status: "active", ownership_state: "owned",
      registered_at: "2026-07-30T12:00:00Z", last_heartbeat_at: now, heartbeat_ttl_s: 86400,
      session_id: `sess-${Math.floor(i / 5)}`, repository: "/srv/repo",
    });
  }
  return { instances, worker_registrations: rows };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function time(fn) {
  const start = process.hrtime.bigint();
  const value = await fn();
  return [Number(process.hrtime.bigint() - start) / 1e6, value];
}

for (const workers of sizes) {
  const dir = mkdtempSync(join(tmpdir(), "ts-bench-"));
  const registry = join(dir, "registry.sqlite3");
  writeFileSync(join(dir, "fleet.json"), JSON.stringify(healthyFleet(workers)));
  execFileSync(join(bin, "fleetctl"), ["registry", "import", join(dir, "fleet.json")],
    { env: { ...process.env, FLEET_REGISTRY: registry }, stdio: "ignore" });
  const transport = new StdioClientTransport({
    command: join(bin, "fleet-mcp"), args: ["--namespace", "controller"],
    env: { PATH: process.env.PATH, FLEET_REGISTRY: registry, GITEA_MCP_CLIENT: "codex" }, stderr: "ignore",
  });
  const client = new Client({ name: "ts-sdk-bench", version: "1" });
  await client.connect(transport);
  const writer = live ? heartbeatWriter(registry) : null;
  const t = { list: [], summary: [], full: [], parse: [] };
  let summaryBytes = 0, fullBytes = 0;
  for (let i = 0; i < calls; i++) {
    t.list.push((await time(() => client.listTools()))[0]);
    if (writer) await writer.beat(`wkr-bench-${String((i * 7919) % workers).padStart(5, "0")}`);
    const [s, summary] = await time(() => client.callTool({ name: "gitea_snapshot_instance_fleet", arguments: {} }));
    t.summary.push(s);
    summaryBytes = JSON.stringify(summary).length;
    const [f, full] = await time(() =>
      client.callTool({ name: "gitea_snapshot_instance_fleet", arguments: { detail: "full" } }));
    t.full.push(f);
    const raw = JSON.stringify({ jsonrpc: "2.0", id: i, result: full });
    fullBytes = raw.length;
    t.parse.push((await time(async () => JSON.parse(raw)))[0]);
  }
  await client.close();
  writer?.close();
  const floor = median(t.list);
  console.log(`${workers} workers${live ? ", a heartbeat before each default snapshot" : ""}: tools/list p50 ${floor.toFixed(2)} ms; default snapshot p50 ` +
    `${median(t.summary).toFixed(2)} ms (${(median(t.summary) / floor).toFixed(2)}x tools/list, ${summaryBytes} bytes); ` +
    `full p50 ${median(t.full).toFixed(2)} ms against the client's parse of its ${fullBytes} bytes ` +
    `${median(t.parse).toFixed(2)} ms (${(median(t.full) / median(t.parse)).toFixed(2)}x)`);
}
