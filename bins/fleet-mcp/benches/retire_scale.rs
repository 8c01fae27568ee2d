//! Retirement through MCP alone at 1k, 10k and 100k candidates: the default
//! `gitea_plan_stale_worker_retirement` answer, then `gitea_apply_stale_worker_retirement`
//! given only the plan's two fingerprints (every candidate retired). For each size it
//! prints each answer's size in bytes and its round trip, beside a floor measured in the
//! same run: reading and decoding every row of the same registry in-process.
//!
//! `cargo bench -p fleet-mcp --bench retire_scale` (sizes from `FLEET_RETIRE_SCALES`,
//! comma-separated, default `1000,10000,100000`). The client is a bare line client: one
//! JSON-RPC request line out, one response line in, as the MCP stdio transport defines
//! it (<https://modelcontextprotocol.io/specification/2025-06-18/basic/transports#stdio>).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use fleet_registry::{OpenMode, Registry, RegistryDump};
use registry_sqlite::SqliteStore;
use serde_json::{Value, json};

const NAMESPACES: [&str; 5] = ["author", "reviewer", "merger", "controller", "reconciler"];

/// `candidates` stale rows of this host whose processes are gone (pids above any
/// `pid_max`), every launch in the ledger.
fn import_candidates(registry: &Path, candidates: usize) {
    let host = fleet_probe::host_id().expect("host id");
    let boot = fleet_probe::boot_id().expect("boot id");
    let namespace = fleet_probe::own_pid_namespace().expect("pid namespace");
    let instance = |i: usize| format!("inst-codex-20260730T120000Z-{:012x}", i / 5);
    let instances: Vec<_> = (0..candidates)
        .step_by(5)
        .map(|i| json!({"client_instance_id": instance(i), "client_type": "codex", "minted_at": "2026-07-30T12:00:00Z"}))
        .collect();
    let rows: Vec<_> = (0..candidates)
        .map(|i| {
            json!({
                "worker_identity": format!("wkr-gone-{i:06}"), "client_type": "codex",
                "client_instance_id": instance(i), "namespace": NAMESPACES[i % 5],
                "generation_id": format!("gen-{i}"), "host_id": host, "boot_id": boot,
                "pid_namespace": namespace, "pid": 4_194_305 + i, "process_start_time": 1 + i,
                "status": "active", "ownership_state": "owned",
                "registered_at": "2026-07-30T12:00:00Z", "last_heartbeat_at": "2026-07-30T12:00:00Z",
                "heartbeat_ttl_s": 60, "session_id": format!("sess-{}", i / 5), "repository": "/srv/repo",
            })
        })
        .collect();
    let dump = RegistryDump::from_value(json!({ "instances": instances, "worker_registrations": rows }))
        .expect("dump");
    Registry::new(SqliteStore::open(registry, OpenMode::MustExist).expect("open"))
        .import(&dump)
        .expect("import");
}

/// A bare MCP client of a controller server that may retire.
struct LineClient {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl LineClient {
    fn start(dir: &Path, registry: &Path, id: &str) -> Self {
        let profiles = dir.join("profiles.json");
        let grant = json!({"role": "controller", "allowed_operations": ["gitea.read", "gitea.worker_registry.retire"]});
        std::fs::write(&profiles, json!({"profiles": {"controller": grant}}).to_string()).expect("profiles");
        let mut child = Command::new(env!("CARGO_BIN_EXE_fleet-mcp"))
            .args(["--namespace", "controller"])
            .env("FLEET_REGISTRY", registry)
            .env("FLEET_PROFILES", &profiles)
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", id)
            .env("GITEA_MCP_LAUNCH_PROCESS", fleet_runtime::launch_process_value().expect("this process"))
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("fleet-mcp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut client = Self { child, stdin, stdout, next_id: 0 };
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}});
        client.request("initialize", init);
        writeln!(client.stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .expect("send");
        client
    }

    /// The result of one request, the size of its response line and its round trip.
    fn request(&mut self, method: &str, params: Value) -> (Value, usize, Duration) {
        self.next_id += 1;
        let started = Instant::now();
        let line = json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").expect("send");
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).expect("receive");
        let took = started.elapsed();
        let value: Value = serde_json::from_str(&answer).expect("a JSON-RPC line");
        (value["result"].clone(), answer.len(), took)
    }

    fn call(&mut self, tool: &str, arguments: Value) -> (Value, usize, Duration) {
        let (result, size, took) = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        (result["structuredContent"].clone(), size, took)
    }
}

impl Drop for LineClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run once small.
    let benching = std::env::args().any(|a| a == "--bench");
    let sizes: Vec<usize> = std::env::var("FLEET_RETIRE_SCALES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| if benching { vec![1_000, 10_000, 100_000] } else { vec![100] });
    println!(
        "candidates  floor_read_ms  plan_ms  plan_bytes  plan/floor  apply_ms  apply_bytes  apply/floor  retired"
    );
    for n in sizes {
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = dir.path().join("registry.sqlite3");
        let location = fleet_runtime::RegistryLocation::Sqlite(registry.clone());
        let codex = "codex".parse().expect("client type");
        let id = fleet_runtime::Launch::mint(&location, &codex, None, None).expect("mint").id().to_owned();
        import_candidates(&registry, n);
        let floor = {
            let started = Instant::now();
            let rows = Registry::new(SqliteStore::open(&registry, OpenMode::MustExist).expect("open"))
                .workers()
                .expect("rows");
            assert_eq!(rows.len(), n);
            started.elapsed()
        };
        let mut client = LineClient::start(dir.path(), &registry, &id);
        let repo = json!({"canonical_repository": "/srv/repo"});
        let (plan, plan_bytes, plan_took) = client.call("gitea_plan_stale_worker_retirement", repo);
        assert_eq!(plan["candidate_count"], n, "{plan}");
        let apply = json!({
            "registry_fingerprint": plan["registry_fingerprint"],
            "candidate_fingerprint": plan["candidate_fingerprint"],
            "canonical_repository": "/srv/repo",
        });
        let (report, apply_bytes, apply_took) = client.call("gitea_apply_stale_worker_retirement", apply);
        assert_eq!(report["retired_count"], n, "{report}");
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "{n:>10}  {:>13.1}  {:>7.1}  {plan_bytes:>10}  {:>10.2}  {:>8.1}  {apply_bytes:>11}  {:>11.2}  {:>7}",
            ms(floor),
            ms(plan_took),
            ms(plan_took) / ms(floor),
            ms(apply_took),
            ms(apply_took) / ms(floor),
            report["retired_count"]
        );
    }
}
