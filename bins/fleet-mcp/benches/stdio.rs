//! Round trip of `gitea_snapshot_instance_fleet` over stdio against a 1k-worker
//! registry, and server start-to-ready time (spawn, register, MCP initialize).

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

fn thousand_workers(path: &Path) -> String {
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
    let instances: Vec<_> = (0..200)
        .map(|i| json!({"client_instance_id": format!("inst-codex-20260730T120000Z-{i:012x}"), "client_type": "codex",
                        "minted_at": "2026-07-30T12:00:00Z"}))
        .collect();
    let rows: Vec<_> = (0..1000)
        .map(|i| {
            json!({
                "worker_identity": format!("wkr-bench-{i:05}"), "client_type": "codex",
                "client_instance_id": format!("inst-codex-20260730T120000Z-{:012x}", i / 5),
                "namespace": namespaces[i % 5], "generation_id": format!("gen-{i}"),
                "host_id": "0123456789abcdef0123456789abcdef", "boot_id": "11111111-2222-3333-4444-555555555555",
                "pid": 100_000 + i, "process_start_time": 1 + i, "status": "active", "ownership_state": "owned",
                "registered_at": "2026-07-30T12:00:00Z", "last_heartbeat_at": now, "heartbeat_ttl_s": 86_400,
                "session_id": format!("sess-{}", i / 5), "repository": "/srv/repo",
            })
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

fn stdio(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = dir.path().join("registry.sqlite3");
    let id = thousand_workers(&registry);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut group = c.benchmark_group("mcp_stdio");
    let client = rt.block_on(connect(&registry, &id));
    let first = rt
        .block_on(client.call_tool(CallToolRequestParams::new("gitea_snapshot_instance_fleet")))
        .expect("call");
    let text = serde_json::to_value(&first.content[0]).expect("json")["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let snap: serde_json::Value = serde_json::from_str(&text).expect("snapshot");
    assert_eq!(snap["counts"]["live_worker_count"], 1001, "a healthy 1k-worker fleet plus the server itself");
    eprintln!(
        "snapshot JSON: {} bytes, {} findings",
        text.len(),
        snap["findings"].as_array().map_or(0, Vec::len)
    );
    group.bench_function("snapshot_round_trip_1k_workers", |b| {
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
    group.sample_size(20);
    group.bench_function("server_start_to_ready", |b| {
        b.iter(|| {
            rt.block_on(async {
                let client = connect(&registry, &id).await;
                client.cancel().await.expect("cancel");
            })
        })
    });
    group.finish();
}

criterion_group!(benches, stdio);
criterion_main!(benches);
