//! fleet-mcp driven as a real MCP client drives it: over stdio, from this separate
//! process, with rmcp's client. Real SQLite registry, real launcher-minted IDs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};
use tokio::process::Command;

const NAMESPACES: [&str; 5] = ["author", "reviewer", "merger", "controller", "reconciler"];
const TOOLS: [&str; 7] = [
    "gitea_snapshot_instance_fleet",
    "gitea_plan_stale_worker_retirement",
    "gitea_apply_stale_worker_retirement",
    "gitea_get_runtime_context",
    "gitea_acquire_workflow_lease",
    "gitea_renew_workflow_lease",
    "gitea_release_workflow_lease",
];

struct Fleet {
    dir: tempfile::TempDir,
    registry: PathBuf,
}

type Client = RunningService<RoleClient, ()>;

impl Fleet {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let registry = dir.path().join("registry.sqlite3");
        Self { dir, registry }
    }

    fn bin(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_BIN_EXE_fleet-mcp")).with_file_name(name)
    }

    fn mint(&self) -> String {
        let out = StdCommand::new(Self::bin("fleet-launch"))
            .args(["mint", "--client", "codex"])
            .env("FLEET_REGISTRY", &self.registry)
            .output()
            .expect("fleet-launch is built by `cargo test --workspace`");
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    fn profiles(&self, name: &str, reconciler_retires: bool) -> PathBuf {
        let mut profiles = serde_json::Map::new();
        for ns in NAMESPACES {
            let mut ops = vec!["gitea.read"];
            // Give every profile the capability when asked: the role check must still
            // keep author, reviewer and merger out.
            if reconciler_retires {
                ops.push("gitea.worker_registry.retire");
            }
            profiles.insert(ns.into(), json!({ "role": ns, "allowed_operations": ops }));
        }
        let path = self.dir.path().join(name);
        std::fs::write(&path, json!({ "profiles": profiles }).to_string()).unwrap();
        path
    }

    async fn connect(&self, ns: &str, instance: Option<&str>, profiles: Option<&Path>) -> Client {
        let transport =
            TokioChildProcess::new(Command::new(env!("CARGO_BIN_EXE_fleet-mcp")).configure(|cmd| {
                cmd.args(["--namespace", ns, "--ttl", "5"])
                    .env("FLEET_REGISTRY", &self.registry)
                    .env("GITEA_MCP_CLIENT", "codex")
                    .env_remove("GITEA_MCP_PROFILE")
                    .env_remove("FLEET_PROFILES")
                    .current_dir(self.dir.path());
                match instance {
                    Some(id) => cmd.env("GITEA_MCP_CLIENT_INSTANCE", id),
                    None => cmd.env_remove("GITEA_MCP_CLIENT_INSTANCE"),
                };
                if let Some(p) = profiles {
                    cmd.env("FLEET_PROFILES", p);
                }
            }))
            .unwrap();
        ().serve(transport).await.expect("initialize")
    }
}

async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    let params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    client.call_tool(params).await.expect("a tool failure is a result, never a protocol error")
}

fn body(result: &CallToolResult) -> Value {
    let text = serde_json::to_value(&result.content[0]).unwrap()["text"].as_str().unwrap().to_owned();
    serde_json::from_str(&text).unwrap()
}

fn failed(result: &CallToolResult) -> Option<String> {
    (result.is_error == Some(true)).then(|| body(result)["error"].as_str().unwrap_or_default().to_owned())
}

fn workers(fleet: &Fleet) -> Vec<fleet_registry::WorkerRow> {
    let store =
        registry_sqlite::SqliteStore::open(&fleet.registry, fleet_registry::OpenMode::MustExist).unwrap();
    fleet_registry::Registry::new(store).workers().unwrap()
}

#[tokio::test]
async fn tools_are_listed_with_schemas_and_truthful_annotations() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let client = fleet.connect("controller", Some(&id), None).await;
    let tools: BTreeMap<String, rmcp::model::Tool> =
        client.list_all_tools().await.unwrap().into_iter().map(|t| (t.name.to_string(), t)).collect();
    assert_eq!(tools.keys().map(String::as_str).collect::<Vec<_>>(), {
        let mut t = TOOLS.to_vec();
        t.sort_unstable();
        t
    });
    for (name, tool) in &tools {
        let a = tool.annotations.as_ref().expect("annotated");
        assert_eq!(a.open_world_hint, Some(false), "{name} is not open-world");
        assert_eq!(tool.input_schema.get("type"), Some(&json!("object")), "{name}");
    }
    let ro = |n: &str| tools[n].annotations.as_ref().unwrap().read_only_hint;
    assert_eq!(ro("gitea_snapshot_instance_fleet"), Some(true));
    assert_eq!(ro("gitea_plan_stale_worker_retirement"), Some(true));
    let apply = tools["gitea_apply_stale_worker_retirement"].annotations.as_ref().unwrap();
    assert_eq!((apply.read_only_hint, apply.destructive_hint), (Some(false), Some(true)));
    let props = tools["gitea_apply_stale_worker_retirement"].input_schema.get("properties").unwrap();
    for field in ["registry_fingerprint", "candidate_fingerprint", "worker_identities"] {
        assert!(props.get(field).is_some(), "apply schema lacks {field}");
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn each_tool_answers_a_controller() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let client = fleet.connect("controller", Some(&id), None).await;
    let snap = call(&client, "gitea_snapshot_instance_fleet", json!({})).await;
    assert_eq!(failed(&snap), None);
    assert_eq!(body(&snap)["counts"]["live_worker_count"], 1);
    let manifest = json!({"instances": [{"client_type": "codex", "client_instance_id": id, "namespaces": ["controller"]}]});
    let with_manifest =
        call(&client, "gitea_snapshot_instance_fleet", json!({ "expected_manifest": manifest })).await;
    assert_eq!(body(&with_manifest)["live_fleet_safe"], true);
    let bad =
        call(&client, "gitea_snapshot_instance_fleet", json!({ "expected_manifest": {"instances": 3} }))
            .await;
    assert_eq!(failed(&bad).as_deref(), Some("invalid_manifest"));

    let plan = call(&client, "gitea_plan_stale_worker_retirement", json!({})).await;
    let plan = body(&plan);
    assert_eq!((plan["read_only"].clone(), plan["mutation_performed"].clone()), (json!(true), json!(false)));

    let context = body(&call(&client, "gitea_get_runtime_context", json!({})).await);
    assert_eq!(context["client_instance_id"], json!(id));
    assert_eq!(context["instance_trust"], "trusted");
    assert_eq!(context["mutation_gate"]["mutation_allowed"], true);

    let lease = body(
        &call(&client, "gitea_acquire_workflow_lease", json!({"workflow": "deploy", "ttl_s": 30})).await,
    );
    let (lease_id, epoch) = (lease["lease"]["lease_id"].clone(), lease["lease"]["fencing_epoch"].clone());
    let renewed = call(
        &client,
        "gitea_renew_workflow_lease",
        json!({"workflow": "deploy", "lease_id": lease_id, "fencing_epoch": epoch}),
    )
    .await;
    assert_eq!(failed(&renewed), None);
    let released = call(
        &client,
        "gitea_release_workflow_lease",
        json!({"workflow": "deploy", "lease_id": lease_id, "fencing_epoch": epoch}),
    )
    .await;
    assert_eq!(failed(&released), None);
    let again = call(
        &client,
        "gitea_release_workflow_lease",
        json!({"workflow": "deploy", "lease_id": lease_id, "fencing_epoch": epoch}),
    )
    .await;
    assert_eq!(failed(&again).as_deref(), Some("lease_released"));

    let bad_args = call(
        &client,
        "gitea_apply_stale_worker_retirement",
        json!({"registry_fingerprint": "x", "candidate_fingerprint": "y", "worker_identities": []}),
    )
    .await;
    assert_eq!(failed(&bad_args).as_deref(), Some("permission_denied"), "no profile holds retire by default");
    client.cancel().await.unwrap();
}

/// Five namespaces × every tool × with and without the retire capability.
#[tokio::test]
async fn the_permission_matrix_holds_cell_by_cell() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let with = fleet.profiles("with-retire.json", true);
    let without = fleet.profiles("without-retire.json", false);
    for (profiles, retire) in [(&without, false), (&with, true)] {
        for ns in NAMESPACES {
            let client = fleet.connect(ns, Some(&id), Some(profiles)).await;
            let fleet_role = matches!(ns, "controller" | "reconciler");
            for tool in TOOLS {
                let args = match tool {
                    "gitea_apply_stale_worker_retirement" => {
                        json!({"registry_fingerprint": "b3:x", "candidate_fingerprint": "b3:y", "worker_identities": "wkr-nobody"})
                    }
                    "gitea_acquire_workflow_lease" => json!({"workflow": format!("matrix-{ns}-{retire}")}),
                    "gitea_renew_workflow_lease" | "gitea_release_workflow_lease" => {
                        json!({"workflow": format!("matrix-{ns}-{retire}-none"), "lease_id": "lease-none", "fencing_epoch": 1})
                    }
                    _ => json!({}),
                };
                let result = call(&client, tool, args).await;
                let error = failed(&result);
                let expected: Option<&str> = match tool {
                    "gitea_snapshot_instance_fleet" | "gitea_plan_stale_worker_retirement" => {
                        (!fleet_role).then_some("role_denied")
                    }
                    "gitea_apply_stale_worker_retirement" => match (retire, fleet_role) {
                        (false, _) => Some("permission_denied"),
                        (true, false) => Some("role_denied"),
                        // Authorized: it reaches the registry, where the plan's tokens are stale.
                        (true, true) => Some("registry_revision_moved"),
                    },
                    "gitea_get_runtime_context" | "gitea_acquire_workflow_lease" => None,
                    _ => Some("lease_not_found"),
                };
                assert_eq!(error.as_deref(), expected, "{ns} × {tool} × retire={retire}");
            }
            client.cancel().await.unwrap();
        }
    }
}

#[tokio::test]
async fn five_servers_of_one_launch_are_one_instance_and_release_on_shutdown() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let mut clients = Vec::new();
    for ns in NAMESPACES {
        clients.push(fleet.connect(ns, Some(&id), None).await);
    }
    let rows = workers(&fleet);
    assert_eq!(rows.len(), 5);
    assert!(rows.iter().all(|r| r.client_instance_id.as_deref() == Some(id.as_str())));
    let distinct: std::collections::BTreeSet<_> = rows.iter().map(|r| (&r.worker_identity, r.pid)).collect();
    assert_eq!(distinct.len(), 5);

    // A second controller with the same instance: a duplicate, and its gate closes.
    let extra = fleet.connect("controller", Some(&id), None).await;
    let snap = body(&call(&extra, "gitea_snapshot_instance_fleet", json!({})).await);
    assert_eq!(snap["live_fleet_safe"], false);
    assert!(snap["findings"].as_array().unwrap().iter().any(|f| f["code"] == "duplicate_namespace_worker"));
    let context = body(&call(&extra, "gitea_get_runtime_context", json!({})).await);
    assert_eq!(context["mutation_gate"]["mutation_allowed"], false);
    assert!(
        context["mutation_gate"]["reasons"]
            .as_array()
            .unwrap()
            .contains(&json!("duplicate_namespace_worker"))
    );
    clients.push(extra);

    for client in clients {
        client.cancel().await.unwrap();
    }
    // Each server releases as its stdin closes.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let rows = workers(&fleet);
        if rows.iter().all(|r| r.status == fleet_registry::WorkerStatus::Released) {
            assert_eq!(rows.len(), 6);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not all released: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_server_that_cannot_register_still_serves_diagnostic_reads() {
    let fleet = Fleet::new();
    fleet.mint();
    let client = fleet.connect("controller", None, None).await;
    let context = body(&call(&client, "gitea_get_runtime_context", json!({})).await);
    assert!(context["registration"].is_null());
    assert!(context["environment_error"].as_str().unwrap().contains("GITEA_MCP_CLIENT_INSTANCE"));
    let snap = call(&client, "gitea_snapshot_instance_fleet", json!({})).await;
    assert_eq!(failed(&snap), None, "diagnostic reads stay available");
    let lease = call(&client, "gitea_acquire_workflow_lease", json!({"workflow": "x"})).await;
    assert_eq!(failed(&lease).as_deref(), Some("worker_not_registered"));
    client.cancel().await.unwrap();
    assert!(workers(&fleet).is_empty(), "nothing was registered");
}

/// The entries `fleet-launch config` prints start five servers as written, whether read
/// from Claude Code's `.mcp.json` or Codex's `config.toml`.
#[tokio::test]
async fn the_launcher_configs_start_five_registered_servers() {
    for format in ["claude", "codex"] {
        let fleet = Fleet::new();
        let out = StdCommand::new(Fleet::bin("fleet-launch"))
            .args(["config", "--client", "codex", "--format", format])
            .env("FLEET_REGISTRY", &fleet.registry)
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let entries: Vec<(String, Vec<String>, BTreeMap<String, String>)> = match format {
            "claude" => {
                let v: Value = serde_json::from_str(&text).unwrap();
                v["mcpServers"]
                    .as_object()
                    .unwrap()
                    .values()
                    .map(|e| {
                        (
                            e["command"].as_str().unwrap().to_owned(),
                            serde_json::from_value(e["args"].clone()).unwrap(),
                            serde_json::from_value(e["env"].clone()).unwrap(),
                        )
                    })
                    .collect()
            }
            _ => parse_codex_toml(&text),
        };
        assert_eq!(entries.len(), 5, "{format}");
        let mut clients = Vec::new();
        for (command, args, env) in &entries {
            let transport = TokioChildProcess::new(Command::new(command).configure(|cmd| {
                cmd.args(args).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).envs(env);
            }))
            .unwrap();
            clients.push(().serve(transport).await.expect("initialize"));
        }
        let rows = workers(&fleet);
        assert_eq!(rows.len(), 5, "{format}");
        let instances: std::collections::BTreeSet<_> =
            rows.iter().map(|r| r.client_instance_id.clone()).collect();
        assert_eq!(instances.len(), 1, "{format}: one instance");
        let context = body(&call(&clients[3], "gitea_get_runtime_context", json!({})).await);
        assert_eq!(context["instance_trust"], "trusted", "{format}");
        for c in clients {
            c.cancel().await.unwrap();
        }
    }
}

/// Reads the `[mcp_servers.NAME]` tables `fleet-launch config --format codex` prints.
fn parse_codex_toml(text: &str) -> Vec<(String, Vec<String>, BTreeMap<String, String>)> {
    let mut out: Vec<(String, Vec<String>, BTreeMap<String, String>)> = Vec::new();
    let unquote = |s: &str| serde_json::from_str::<String>(s.trim()).unwrap();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.starts_with("[mcp_servers.") && !line.ends_with(".env]") {
            out.push((String::new(), Vec::new(), BTreeMap::new()));
        } else if line.starts_with('[') {
            continue;
        } else if let Some((key, value)) = line.split_once(" = ") {
            let entry = out.last_mut().unwrap();
            match key {
                "command" => entry.0 = unquote(value),
                "args" => entry.1 = serde_json::from_str(value).unwrap(),
                _ => {
                    entry.2.insert(key.to_owned(), unquote(value));
                }
            }
        }
    }
    out
}

/// Apply's pre-checks each fail closed with their own reason, for a reconciler that
/// holds the retire capability.
#[tokio::test]
async fn apply_pre_checks_fail_closed_each_with_its_own_reason() {
    let apply_args = json!({"registry_fingerprint": "b3:x", "candidate_fingerprint": "b3:y", "worker_identities": ["wkr-x"]});

    // Not registered: no instance environment.
    let fleet = Fleet::new();
    fleet.mint();
    let profiles = fleet.profiles("retire.json", true);
    let unregistered = fleet.connect("reconciler", None, Some(&profiles)).await;
    let r = call(&unregistered, "gitea_apply_stale_worker_retirement", apply_args.clone()).await;
    assert_eq!(failed(&r).as_deref(), Some("worker_not_registered"));
    unregistered.cancel().await.unwrap();

    // The mutation gate closes for an instance ID the launcher never minted.
    let copied = "inst-codex-20260730T120000Z-0123456789ab";
    let untrusted = fleet.connect("reconciler", Some(copied), Some(&profiles)).await;
    let r = call(&untrusted, "gitea_apply_stale_worker_retirement", apply_args.clone()).await;
    assert_eq!(failed(&r).as_deref(), Some("mutation_gate_closed"));
    assert!(body(&r)["detail"].as_str().unwrap().contains("untrusted_instance_identity"));
    untrusted.cancel().await.unwrap();

    // Cohort uniqueness: two authors in the reconciler's own instance.
    let id = fleet.mint();
    let reconciler = fleet.connect("reconciler", Some(&id), Some(&profiles)).await;
    let author_a = fleet.connect("author", Some(&id), Some(&profiles)).await;
    let author_b = fleet.connect("author", Some(&id), Some(&profiles)).await;
    let r = call(&reconciler, "gitea_apply_stale_worker_retirement", apply_args.clone()).await;
    assert_eq!(failed(&r).as_deref(), Some("cohort_not_unique"));
    author_a.cancel().await.unwrap();
    author_b.cancel().await.unwrap();

    // The registry goes away under a running server.
    std::fs::rename(&fleet.registry, fleet.dir.path().join("moved.sqlite3")).unwrap();
    let r = call(&reconciler, "gitea_apply_stale_worker_retirement", apply_args.clone()).await;
    assert_eq!(failed(&r).as_deref(), Some("registry_unavailable"));
    let snap = call(&reconciler, "gitea_snapshot_instance_fleet", json!({})).await;
    assert_eq!(failed(&snap).as_deref(), Some("registry_unavailable"), "the snapshot fails closed too");
    reconciler.cancel().await.unwrap();
}

/// Removing the capability from profiles.json revokes apply at once, and leaves plan
/// and every other capability untouched.
#[tokio::test]
async fn editing_profiles_revokes_apply_immediately() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let profiles = fleet.profiles("live.json", true);
    let client = fleet.connect("reconciler", Some(&id), Some(&profiles)).await;
    let args = json!({"registry_fingerprint": "b3:x", "candidate_fingerprint": "b3:y", "worker_identities": "wkr-x"});
    let before = call(&client, "gitea_apply_stale_worker_retirement", args.clone()).await;
    assert_eq!(
        failed(&before).as_deref(),
        Some("registry_revision_moved"),
        "authorized, then refused by the registry"
    );
    std::fs::copy(fleet.profiles("without.json", false), &profiles).unwrap();
    let after = call(&client, "gitea_apply_stale_worker_retirement", args).await;
    assert_eq!(failed(&after).as_deref(), Some("permission_denied"));
    let plan = call(&client, "gitea_plan_stale_worker_retirement", json!({})).await;
    assert_eq!(failed(&plan), None);
    client.cancel().await.unwrap();
}
