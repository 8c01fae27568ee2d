//! Round trip of `gitea_snapshot_instance_fleet` over stdio against 1k- and 10k-worker
//! registries (rows of another host; idle, and live: a heartbeat committed before each
//! call), against a 1k-worker registry of live local
//! processes (every call probes each one), and server start-to-ready time (spawn,
//! register, MCP initialize).
//!
//! The round trip is measured twice: with rmcp's client, and with a bare line client
//! that writes one JSON-RPC request and reads and parses one response line, as the MCP
//! stdio transport defines it (newline-delimited JSON-RPC messages on stdin and stdout:
//! <https://modelcontextprotocol.io/specification/2025-06-18/basic/transports#stdio>).
//! The bare client also prints the p50 and p99 of 200 calls, the figures the
//! performance goals name.

use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use fleet_registry::OpenMode;
use fleet_registry::{Registry, RegistryDump};
use registry_sqlite::SqliteStore;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::json;
use tokio::process::Command;

/// A healthy fleet of `workers` rows in a new registry at `path`; the launch ID of the
/// server to start. With `local`, row `i` records process `local[i]` of this machine
/// (so every snapshot probes it); without, the rows name another host.
fn healthy_fleet(path: &Path, workers: usize, local: &[fleet_registry::ProcessIdentity]) -> String {
    let launch =
        std::process::Command::new(Path::new(env!("CARGO_BIN_EXE_fleet-mcp")).with_file_name("fleet-launch"))
            .args(["mint", "--client", "codex"])
            .env("FLEET_REGISTRY", path)
            .output()
            .expect("fleet-launch");
    let id = String::from_utf8(launch.stdout).expect("utf8").trim().to_owned();
    let namespaces = ["author", "reviewer", "merger", "controller", "reconciler"];
    // A healthy fleet: every launch in the ledger, every heartbeat fresh for the day.
    let now = fleet_identity::Timestamp::new(time::OffsetDateTime::now_utc()).to_string();
    let instances: Vec<_> = (0..workers / 5)
        .map(|i| json!({"client_instance_id": format!("inst-codex-20260730T120000Z-{i:012x}"), "client_type": "codex",
                        "minted_at": "2026-07-30T12:00:00Z"}))
        .collect();
    let rows: Vec<_> = (0..workers)
        .map(|i| {
            let mut row = json!({
                "worker_identity": format!("wkr-bench-{i:05}"), "client_type": "codex",
                "client_instance_id": format!("inst-codex-20260730T120000Z-{:012x}", i / 5),
                "namespace": namespaces[i % 5], "generation_id": format!("gen-{i}"),
                "host_id": "0123456789abcdef0123456789abcdef", "boot_id": "11111111-2222-3333-4444-555555555555",
                "pid": 1_000_000 + i, "process_start_time": 1 + i, "status": "active", "ownership_state": "owned",
                "registered_at": "2026-07-30T12:00:00Z", "last_heartbeat_at": now, "heartbeat_ttl_s": 86_400,
                "session_id": format!("sess-{}", i / 5), "repository": "/srv/repo",
            });
            if let Some(process) = local.get(i) {
                row["host_id"] = json!(process.host_id);
                row["boot_id"] = json!(process.boot_id);
                row["pid"] = json!(process.pid);
                row["process_start_time"] = json!(process.process_start_time);
                row["pid_namespace"] = json!(process.pid_namespace);
            }
            row
        })
        .collect();
    let dump =
        RegistryDump::from_json(&json!({ "instances": instances, "worker_registrations": rows }).to_string())
            .expect("dump");
    Registry::new(SqliteStore::open(path, OpenMode::MustExist).expect("open")).import(&dump).expect("import");
    id
}

async fn connect(registry: &Path, id: &str) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    let transport = TokioChildProcess::new(Command::new(env!("CARGO_BIN_EXE_fleet-mcp")).configure(|cmd| {
        cmd.args(["--namespace", "controller"])
            .env("FLEET_REGISTRY", registry)
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", id);
    }))
    .expect("spawn");
    ().serve(transport).await.expect("initialize")
}

/// Child processes killed and reaped when dropped.
struct Children(Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A bare MCP client over the server's pipes: one request line out, one response line in.
struct LineClient {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    next_id: u64,
    line: String,
}

impl LineClient {
    fn start(registry: &Path, id: &str) -> Self {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fleet-mcp"))
            .args(["--namespace", "controller"])
            .env("FLEET_REGISTRY", registry)
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", id)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut client = Self { child, stdin, stdout, next_id: 0, line: String::new() };
        client.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}),
        );
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send(&mut self, message: &serde_json::Value) {
        use std::io::Write as _;
        let mut text = message.to_string();
        text.push('\n');
        self.stdin.write_all(text.as_bytes()).expect("write");
        self.stdin.flush().expect("flush");
    }

    fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::BufRead as _;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}));
        self.line.clear();
        self.stdout.read_line(&mut self.line).expect("read");
        let answer: serde_json::Value = serde_json::from_str(&self.line).expect("a JSON-RPC line");
        assert_eq!(answer["id"], self.next_id, "{answer}");
        answer
    }

    fn snapshot(&mut self) -> serde_json::Value {
        let answer =
            self.request("tools/call", json!({"name": "gitea_snapshot_instance_fleet", "arguments": {}}));
        assert_ne!(answer["result"]["isError"], true, "{answer}");
        answer
    }
}

impl Drop for LineClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Prints the p50 and p99 of 200 snapshot calls, `before` run ahead of each (untimed).
fn percentiles(client: &mut LineClient, workers: usize, mut before: impl FnMut()) {
    let mut times: Vec<std::time::Duration> = (0..200)
        .map(|_| {
            before();
            let started = std::time::Instant::now();
            client.snapshot();
            started.elapsed()
        })
        .collect();
    times.sort();
    // What the client alone spends parsing one answer: a floor no server change moves.
    let mut parse: Vec<std::time::Duration> = (0..50)
        .map(|_| {
            let started = std::time::Instant::now();
            let answer: serde_json::Value = serde_json::from_str(&client.line).expect("json");
            std::hint::black_box(answer);
            started.elapsed()
        })
        .collect();
    parse.sort();
    eprintln!(
        "bare client, {workers} workers, 200 calls: p50 {:.2} ms, p99 {:.2} ms; \
         parsing one {} KB answer alone: {:.2} ms",
        times[100].as_secs_f64() * 1e3,
        times[197].as_secs_f64() * 1e3,
        client.line.len() / 1024,
        parse[25].as_secs_f64() * 1e3
    );
}

fn stdio(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut group = c.benchmark_group("mcp_stdio");
    group.sample_size(20);
    let mut registries = Vec::new();
    for workers in [1_000, 10_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = dir.path().join("registry.sqlite3");
        let id = healthy_fleet(&registry, workers, &[]);
        let mut bare = LineClient::start(&registry, &id);
        let first = bare.snapshot();
        let snap = &first["result"]["structuredContent"];
        assert_eq!(
            snap["counts"]["live_worker_count"],
            workers + 1,
            "a healthy fleet plus the server itself"
        );
        eprintln!(
            "snapshot JSON at {workers} workers: {} bytes, text block {} bytes, {} findings",
            snap.to_string().len(),
            first["result"]["content"][0]["text"].as_str().map_or(0, str::len),
            snap["findings"].as_array().map_or(0, Vec::len)
        );
        percentiles(&mut bare, workers, || ());
        group.bench_function(format!("snapshot_round_trip_bare_client/{workers}"), |b| {
            b.iter(|| bare.snapshot())
        });
        // A live fleet: one worker's heartbeat committed (by another connection) before
        // each call, so the server must read what changed every time.
        let writer = rusqlite::Connection::open(&registry).expect("writer");
        let mut beat = 0usize;
        let mut heartbeat = || {
            beat += 1;
            let now = fleet_identity::Timestamp::new(time::OffsetDateTime::now_utc()).to_string();
            writer
                .execute(
                    "UPDATE worker_registrations SET last_heartbeat_at = ?1 WHERE worker_identity = ?2",
                    [now, format!("wkr-bench-{:05}", beat * 7919 % workers)],
                )
                .expect("heartbeat");
        };
        eprint!("live registry: ");
        percentiles(&mut bare, workers, &mut heartbeat);
        group.bench_function(format!("snapshot_round_trip_bare_client/{workers}_live"), |b| {
            b.iter_batched(&mut heartbeat, |()| bare.snapshot(), criterion::BatchSize::PerIteration)
        });
        let client = rt.block_on(connect(&registry, &id));
        group.bench_function(format!("snapshot_round_trip_rmcp_client/{workers}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let r = client
                        .call_tool(CallToolRequestParams::new("gitea_snapshot_instance_fleet"))
                        .await
                        .expect("call");
                    assert_ne!(r.is_error, Some(true));
                })
            })
        });
        rt.block_on(client.cancel()).expect("cancel");
        registries.push((dir, registry, id));
    }
    // A one-host fleet: every row a live process of this machine, probed on every call.
    let children = Children(
        (0..1_000)
            .map(|_| std::process::Command::new("sleep").arg("3600").spawn().expect("spawn sleep"))
            .collect(),
    );
    let local: Vec<_> = children
        .0
        .iter()
        .map(|c| fleet_probe::process_identity(fleet_identity::Pid::new(i64::from(c.id())).expect("pid")))
        .collect::<Result<_, _>>()
        .expect("identities");
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = dir.path().join("registry.sqlite3");
    let id = healthy_fleet(&registry, local.len(), &local);
    let mut bare = LineClient::start(&registry, &id);
    let first = bare.snapshot();
    assert_eq!(first["result"]["structuredContent"]["counts"]["live_worker_count"], local.len() + 1);
    eprint!("local processes: ");
    percentiles(&mut bare, local.len(), || ());
    group.bench_function("snapshot_round_trip_bare_client/1000_local", |b| b.iter(|| bare.snapshot()));
    drop(bare);
    drop(children);

    let (_, registry, id) = &registries[0];
    group.bench_function("server_start_to_ready", |b| {
        b.iter(|| {
            rt.block_on(async {
                let client = connect(registry, id).await;
                client.cancel().await.expect("cancel");
            })
        })
    });
    group.finish();
}

criterion_group!(benches, stdio);
criterion_main!(benches);
