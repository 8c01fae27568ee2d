// The floor under `detail: "full"` through the TypeScript MCP SDK: what the client's
// `callTool` costs for the same answer when the server costs nothing. It captures
// fleet-mcp's tool list and whole-snapshot answer for a registry, then serves them back
// from a stand-in server that answers at once, and times `callTool` against the
// client's own `JSON.parse` of the same bytes. `compare` alternates, call by call, the
// stand-in and fleet-mcp on the registry the answer was captured from, and prints
// fleet-mcp's p50 as a ratio to the stand-in's: the floor no server can go under
// through this client. Not part of CI: it needs the SDK.
//
//   npm install @modelcontextprotocol/sdk@1          (in this directory or above)
//   node scripts/ts-sdk-replay.mjs capture REGISTRY target/release /tmp/captured.json
//   node scripts/ts-sdk-replay.mjs bench /tmp/captured.json
//   node scripts/ts-sdk-replay.mjs compare /tmp/captured.json REGISTRY target/release [CALLS]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const [mode, ...rest] = process.argv.slice(2);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const FULL = { name: "gitea_snapshot_instance_fleet", arguments: { detail: "full" } };

if (mode === "capture") {
  const [registry, bin, out] = rest;
  const transport = new StdioClientTransport({
    command: `${bin}/fleet-mcp`, args: ["--namespace", "controller"],
    env: { PATH: process.env.PATH, FLEET_REGISTRY: registry, GITEA_MCP_CLIENT: "codex" }, stderr: "ignore",
  });
  const client = new Client({ name: "ts-sdk-replay", version: "1" });
  await client.connect(transport);
  writeFileSync(out, JSON.stringify({ tools: await client.listTools(), full: await client.callTool(FULL) }));
  await client.close();
} else if (mode === "serve") {
  // The stand-in server: each answer is ready before it is asked for.
  const { tools, full } = JSON.parse(readFileSync(rest[0], "utf8"));
  const fullText = JSON.stringify(full);
  createInterface({ input: process.stdin }).on("line", (line) => {
    const msg = JSON.parse(line);
    if (msg.id === undefined) return;
    if (msg.method === "tools/call") {
      process.stdout.write(`{"jsonrpc":"2.0","id":${JSON.stringify(msg.id)},"result":${fullText}}\n`);
      return;
    }
    const result = msg.method === "initialize"
      ? { protocolVersion: msg.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "replay", version: "1" } }
      : msg.method === "tools/list" ? tools : {};
    process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id: msg.id, result }) + "\n");
  });
} else if (mode === "bench") {
  const transport = new StdioClientTransport({
    command: process.execPath, args: [fileURLToPath(import.meta.url), "serve", rest[0]], stderr: "inherit",
  });
  const client = new Client({ name: "ts-sdk-replay", version: "1" });
  await client.connect(transport);
  await client.listTools();
  const full = [], parse = [];
  for (let i = 0; i < Number(rest[1] ?? 30); i++) {
    let start = process.hrtime.bigint();
    const answer = await client.callTool(FULL);
    full.push(Number(process.hrtime.bigint() - start) / 1e6);
    const raw = JSON.stringify({ jsonrpc: "2.0", id: i, result: answer });
    start = process.hrtime.bigint();
    JSON.parse(raw);
    parse.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  console.log(`stand-in server: full p50 ${median(full).toFixed(2)} ms against the client's parse ` +
    `${median(parse).toFixed(2)} ms (${(median(full) / median(parse)).toFixed(2)}x)`);
  await client.close();
} else if (mode === "compare") {
  const [captured, registry, bin, calls] = rest;
  const connect = async (command, args, env) => {
    const client = new Client({ name: "ts-sdk-replay", version: "1" });
    await client.connect(new StdioClientTransport({ command, args, env, stderr: "ignore" }));
    await client.listTools();
    return client;
  };
  const standIn = await connect(process.execPath, [fileURLToPath(import.meta.url), "serve", captured]);
  const server = await connect(`${bin}/fleet-mcp`, ["--namespace", "controller"],
    { PATH: process.env.PATH, FLEET_REGISTRY: registry, GITEA_MCP_CLIENT: "codex" });
  const time = async (client) => {
    const start = process.hrtime.bigint();
    await client.callTool(FULL);
    return Number(process.hrtime.bigint() - start) / 1e6;
  };
  const floor = [], served = [];
  for (let i = 0; i < Number(calls ?? 30); i++) {
    floor.push(await time(standIn));
    served.push(await time(server));
  }
  console.log(`full p50: fleet-mcp ${median(served).toFixed(2)} ms, the stand-in that answers at once ` +
    `${median(floor).toFixed(2)} ms (${(median(served) / median(floor)).toFixed(2)}x)`);
  await standIn.close();
  await server.close();
} else {
  console.error("usage: ts-sdk-replay.mjs capture REGISTRY BIN OUT | bench CAPTURED [CALLS] | compare CAPTURED REGISTRY BIN [CALLS]");
  process.exit(2);
}
