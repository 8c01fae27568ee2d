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
    /// What `FLEET_REGISTRY` says: the SQLite file above, or a PostgreSQL URL.
    location: String,
    /// Arguments every server is started with, beside its namespace and TTL.
    server_args: Vec<String>,
}

type Client = RunningService<RoleClient, ()>;

impl Fleet {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let registry = dir.path().join("registry.sqlite3");
        let location = registry.to_string_lossy().into_owned();
        Self { dir, registry, location, server_args: Vec::new() }
    }

    /// An unregistered controller server on pipes, for a client that writes its own
    /// JSON-RPC lines.
    fn raw_controller(&self) -> std::process::Child {
        StdCommand::new(env!("CARGO_BIN_EXE_fleet-mcp"))
            .args(["--namespace", "controller"])
            .env("FLEET_REGISTRY", &self.location)
            .env_remove("GITEA_MCP_CLIENT_INSTANCE")
            .env_remove("FLEET_PROFILES")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    /// A fleet whose registry is the PostgreSQL database at `url`.
    fn on_postgres(url: &str) -> Self {
        Self { location: url.to_owned(), ..Self::new() }
    }

    fn bin(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_BIN_EXE_fleet-mcp")).with_file_name(name)
    }

    fn mint(&self) -> String {
        let out = StdCommand::new(Self::bin("fleet-launch"))
            .args(["mint", "--client", "codex"])
            .env("FLEET_REGISTRY", &self.location)
            .output()
            .expect("fleet-launch is built by `cargo test --workspace`");
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    fn profiles(&self, name: &str, reconciler_retires: bool) -> PathBuf {
        let mut profiles = serde_json::Map::new();
        for ns in NAMESPACES {
            let mut ops = vec!["gitea.read", "gitea.workflow_lease.write"];
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

    /// One launch: a minted instance and a client of each of its five servers, in
    /// `NAMESPACES` order, their heartbeats `ttl_s` apart.
    async fn launch_with_ttl(&self, ttl_s: u32) -> Vec<Client> {
        let id = self.mint();
        let mut clients = Vec::new();
        for ns in NAMESPACES {
            clients.push(self.connect_with_ttl(ns, Some(&id), None, ttl_s).await);
        }
        clients
    }

    async fn connect(&self, ns: &str, instance: Option<&str>, profiles: Option<&Path>) -> Client {
        self.connect_with_ttl(ns, instance, profiles, 5).await
    }

    async fn connect_with_ttl(
        &self,
        ns: &str,
        instance: Option<&str>,
        profiles: Option<&Path>,
        ttl: u32,
    ) -> Client {
        self.connect_binary(Path::new(env!("CARGO_BIN_EXE_fleet-mcp")), ns, instance, profiles, ttl).await
    }

    /// A server run from `binary` (a copy of fleet-mcp, say).
    async fn connect_binary(
        &self,
        binary: &Path,
        ns: &str,
        instance: Option<&str>,
        profiles: Option<&Path>,
        ttl: u32,
    ) -> Client {
        let ttl = ttl.to_string();
        let transport = TokioChildProcess::new(Command::new(binary).configure(|cmd| {
            // This test is the client of the launch, as `fleet-launch run` records
            // its client: the servers it starts are owned by it.
            cmd.args(["--namespace", ns, "--ttl", &ttl])
                .args(&self.server_args)
                .env("FLEET_REGISTRY", &self.location)
                .env("GITEA_MCP_LAUNCH_PROCESS", fleet_runtime::launch_process_value().unwrap())
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
    // A server that dies inside a call never answers: fail instead of waiting forever.
    tokio::time::timeout(Duration::from_secs(30), client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{tool} never answered"))
        .expect("a tool failure is a result, never a protocol error")
}

fn body(result: &CallToolResult) -> Value {
    let text = serde_json::to_value(&result.content[0]).unwrap()["text"].as_str().unwrap().to_owned();
    serde_json::from_str(&text).unwrap()
}

fn structured(result: &CallToolResult) -> Value {
    result.structured_content.clone().expect("structured content")
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
    each_tool_answers(&Fleet::new()).await;
}

/// The same on a PostgreSQL registry (`FLEET_TEST_POSTGRES_URL`; CI sets it). The
/// PostgreSQL client runs a runtime of its own, which cannot start on one of the
/// server's async worker threads: every call that reached the registry panicked there
/// and never answered.
#[tokio::test]
async fn each_tool_answers_a_controller_on_postgres() {
    let Ok(base) = std::env::var("FLEET_TEST_POSTGRES_URL") else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = PgSchema::create(&base, format!("fleet_mcp_{}", std::process::id()));
    each_tool_answers(&Fleet::on_postgres(&schema.url())).await;
    // The server shut down cleanly, outside its runtime, and released its registration.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while schema
        .count(&format!("SELECT count(*) FROM {}.worker_registrations WHERE status = 'active'", schema.name))
        > 0
    {
        assert!(std::time::Instant::now() < deadline, "the controller never released its registration");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A registry whose writers are stalled (another client holds the table's write lock)
/// must not hold the client's `initialize`: clients give a server a few seconds to
/// start and then drop it. The server answers, says its registration is pending, and
/// registers once the writer lets go.
#[tokio::test]
async fn a_stalled_writer_delays_the_registration_never_the_initialize() {
    let Ok(base) = std::env::var("FLEET_TEST_POSTGRES_URL") else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = PgSchema::create(&base, format!("fleet_mcp_stall_{}", std::process::id()));
    // A short lock_timeout: each attempt holds the registry's write lock at most a second
    // while it waits, so other tests sharing the database are not held up.
    let fleet = Fleet::on_postgres(&format!("{}%20-clock_timeout%3D1s", schema.url()));
    let id = fleet.mint();
    let held =
        HeldLock::take(&base, &format!("LOCK TABLE {}.worker_registrations IN EXCLUSIVE MODE", schema.name));
    let profiles = fleet.profiles("leases.json", false);
    let client = tokio::time::timeout(
        Duration::from_secs(30),
        fleet.connect("controller", Some(&id), Some(&profiles)),
    )
    .await
    .expect("initialize is answered while the registry's writers are stalled");
    let context = body(&call(&client, "gitea_get_runtime_context", json!({})).await);
    assert!(context["registration"].is_null(), "{context}");
    // Reads need no write: the snapshot and the plan are answered while writers wait.
    for tool in ["gitea_snapshot_instance_fleet", "gitea_plan_stale_worker_retirement"] {
        let read = tokio::time::timeout(Duration::from_secs(60), call(&client, tool, json!({})))
            .await
            .unwrap_or_else(|_| panic!("{tool} is answered while the registry's writers are stalled"));
        assert_eq!(failed(&read), None, "{tool}: {:?}", read.structured_content);
    }
    let pending = context["registration_error"].as_str().unwrap_or_default();
    assert!(pending.starts_with("registration pending"), "{context}");
    let lease = call(&client, "gitea_acquire_workflow_lease", json!({"workflow": "x"})).await;
    assert_eq!(failed(&lease).as_deref(), Some("registration_pending"));

    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let context = body(&call(&client, "gitea_get_runtime_context", json!({})).await);
        if !context["registration"].is_null() {
            assert!(context["registration_error"].is_null(), "{context}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never registered after the lock was let go: {context}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let active = format!("SELECT count(*) FROM {}.worker_registrations WHERE status = 'active'", schema.name);
    assert_eq!(schema.count(&active), 1);
    client.cancel().await.unwrap();
}

/// A writer that stalls right after it takes the registry's write lock (a partitioned
/// client) holds up other writers, never the reads: a new server answers `initialize`,
/// the snapshot and the plan while its own registration waits for the lock.
#[tokio::test]
async fn a_writer_stalled_holding_the_write_lock_holds_up_no_read() {
    let Ok(base) = std::env::var("FLEET_TEST_POSTGRES_URL") else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = PgSchema::create(&base, format!("fleet_mcp_held_{}", std::process::id()));
    // The store's own lock timeout, as an operator runs it.
    let fleet = Fleet::on_postgres(&schema.url());
    let id = fleet.mint();
    // The blocking PostgreSQL client runs on a thread of its own, off the test's runtime.
    let url = schema.url();
    let key = std::thread::spawn(move || {
        let location = fleet_runtime::RegistryLocation::resolve(Some(&url)).unwrap();
        let mut registry =
            fleet_runtime::open_registry(&location, fleet_registry::OpenMode::MustExist).unwrap();
        registry.registry_id().unwrap().lock_key()
    })
    .join()
    .unwrap();
    let held = HeldLock::take(
        &base,
        &format!("SET search_path TO {}; SELECT pg_advisory_xact_lock({key})", schema.name),
    );
    let client = tokio::time::timeout(Duration::from_secs(30), fleet.connect("controller", Some(&id), None))
        .await
        .expect("initialize is answered while a writer holds the write lock");
    for tool in
        ["gitea_snapshot_instance_fleet", "gitea_plan_stale_worker_retirement", "gitea_get_runtime_context"]
    {
        let read = tokio::time::timeout(Duration::from_secs(30), call(&client, tool, json!({})))
            .await
            .unwrap_or_else(|_| panic!("{tool} is answered while a writer holds the write lock"));
        assert_eq!(failed(&read), None, "{tool}: {:?}", read.structured_content);
    }
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !body(&call(&client, "gitea_get_runtime_context", json!({})).await)["registration_error"].is_null()
    {
        assert!(std::time::Instant::now() < deadline, "registered once the lock is let go");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.cancel().await.unwrap();
}

/// A schema of the test PostgreSQL server, dropped with this value (a failed test
/// leaves nothing behind). Its client runs on a thread of its own: the blocking
/// PostgreSQL client cannot run on a thread that drives an async runtime.
struct PgSchema {
    base: String,
    name: String,
}

impl PgSchema {
    fn create(base: &str, name: String) -> Self {
        let schema = Self { base: base.to_owned(), name };
        schema.run(format!("DROP SCHEMA IF EXISTS {0} CASCADE; CREATE SCHEMA {0}", schema.name)).unwrap();
        schema
    }

    /// The registry URL that selects this schema.
    fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-csearch_path%3D{}", self.base, self.name)
    }

    fn client(base: &str) -> postgres::Client {
        postgres::Client::connect(base, postgres::NoTls).expect("the test PostgreSQL server")
    }

    fn run(&self, sql: String) -> Result<(), postgres::Error> {
        let base = self.base.clone();
        let ran = std::thread::spawn(move || {
            postgres::Client::connect(&base, postgres::NoTls).and_then(|mut c| c.batch_execute(&sql))
        })
        .join();
        ran.unwrap_or_else(|_| panic!("the PostgreSQL client thread panicked"))
    }

    fn count(&self, sql: &str) -> i64 {
        let (base, sql) = (self.base.clone(), sql.to_owned());
        std::thread::spawn(move || Self::client(&base).query_one(&sql, &[]).unwrap().get(0)).join().unwrap()
    }
}

/// A transaction of another client that holds what `sql` locks until this value is
/// dropped: a writer stalled with its locks held.
struct HeldLock {
    release: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HeldLock {
    fn take(base: &str, sql: &str) -> Self {
        let (base, sql) = (base.to_owned(), sql.to_owned());
        let (held, is_held) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut client = PgSchema::client(&base);
            let mut tx = client.transaction().unwrap();
            tx.batch_execute(&sql).unwrap();
            held.send(()).unwrap();
            let _ = released.recv();
            tx.rollback().unwrap();
        });
        is_held.recv().expect("the lock was taken");
        Self { release: Some(release), thread: Some(thread) }
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        // Best effort: a failed test must still report its own failure.
        let _ = self.run(format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
    }
}

async fn each_tool_answers(fleet: &Fleet) {
    let id = fleet.mint();
    let profiles = fleet.profiles("leases.json", false);
    let client = fleet.connect("controller", Some(&id), Some(&profiles)).await;
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
                        json!({"registry_fingerprint": "b3:0000000000000000000000000000000000000000000000000000000000000000", "candidate_fingerprint": "b3:1111111111111111111111111111111111111111111111111111111111111111", "worker_identities": "wkr-nobody"})
                    }
                    "gitea_acquire_workflow_lease" => json!({"workflow": format!("matrix-{ns}-{retire}")}),
                    "gitea_renew_workflow_lease" | "gitea_release_workflow_lease" => {
                        json!({"workflow": format!("matrix-{ns}-{retire}-none"), "lease_id": "lease-none", "fencing_epoch": 1})
                    }
                    _ => json!({}),
                };
                let params = CallToolRequestParams::new(tool.to_owned())
                    .with_arguments(args.as_object().cloned().unwrap_or_default());
                // A tool the namespace does not list cannot be called at all.
                let error = match client.call_tool(params).await {
                    Ok(result) => failed(&result),
                    Err(_) => Some("not_listed".to_owned()),
                };
                let expected: Option<&str> = match tool {
                    "gitea_snapshot_instance_fleet" | "gitea_plan_stale_worker_retirement" => {
                        (!fleet_role).then_some("not_listed")
                    }
                    "gitea_apply_stale_worker_retirement" => match (retire, fleet_role) {
                        (_, false) => Some("not_listed"),
                        (false, true) => Some("permission_denied"),
                        // Authorized: it reaches the registry, where the plan's tokens are stale.
                        (true, true) => Some("candidate_set_moved"),
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
    let profiles = fleet.profiles("leases.json", false);
    let client = fleet.connect("controller", None, Some(&profiles)).await;
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

/// Each namespace lists the tools its role may call, as the one table of tools
/// (`fleet_runtime::McpTool`, which the launcher approves read-only tools by) says, each
/// read-only exactly when the table says so, and each has a schema every client dialect
/// accepts: one plain `type` per input property, an output schema for every tool.
#[tokio::test]
async fn a_namespace_lists_only_its_tools_with_plain_schemas() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    for ns in NAMESPACES {
        let client = fleet.connect(ns, Some(&id), None).await;
        let tools = client.list_all_tools().await.unwrap();
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        let fleet_role = matches!(ns, "controller" | "reconciler");
        assert_eq!(names.len(), if fleet_role { 7 } else { 4 }, "{ns}: {names:?}");
        assert_eq!(names.contains(&"gitea_apply_stale_worker_retirement"), fleet_role, "{ns}");
        let namespace: fleet_identity::Namespace = ns.parse().unwrap();
        let mut table: Vec<&str> = fleet_runtime::McpTool::listed(namespace).map(|t| t.as_str()).collect();
        names.sort();
        table.sort();
        assert_eq!(names, table, "{ns}: the server against the table of tools");
        for tool in &tools {
            let in_table: fleet_runtime::McpTool = tool.name.parse().unwrap();
            let read_only = tool.annotations.as_ref().and_then(|a| a.read_only_hint);
            assert_eq!(read_only, Some(in_table.read_only()), "{ns} {}: readOnlyHint", tool.name);
            let props = tool.input_schema.get("properties").and_then(Value::as_object);
            for (field, schema) in props.into_iter().flatten() {
                assert!(schema["type"].is_string(), "{ns} {} {field}: {schema}", tool.name);
            }
            let output =
                tool.output_schema.as_ref().unwrap_or_else(|| panic!("{} has no output schema", tool.name));
            assert_eq!(output.get("type"), Some(&json!("object")), "{}", tool.name);
        }
        client.cancel().await.unwrap();
    }
}

/// Whether `value` validates against `schema` under JSON Schema 2020-12 (what MCP's
/// schemas are written in) and under draft-07, which ajv — the TypeScript SDK's
/// validator, so Claude Code's, Gemini CLI's and the Inspector's — reads by default.
fn validates(value: &Value, schema: &serde_json::Map<String, Value>) -> Result<(), String> {
    let schema = Value::Object(schema.clone());
    let drafts =
        [("2020-12", jsonschema::draft202012::new(&schema)), ("draft-07", jsonschema::draft7::new(&schema))];
    for (draft, validator) in drafts {
        let validator = validator.map_err(|e| format!("{draft}: the schema does not compile: {e}"))?;
        validator.validate(value).map_err(|e| format!("{draft}: {e} at {}", e.instance_path()))?;
    }
    Ok(())
}

/// The keywords ajv knows in strict mode (its draft-07 vocabulary and annotations); strict
/// mode refuses a schema with any other, and any `format` without ajv-formats loaded.
const AJV_KEYWORDS: [&str; 17] = [
    "$schema",
    "type",
    "properties",
    "required",
    "anyOf",
    "oneOf",
    "allOf",
    "items",
    "additionalProperties",
    "description",
    "title",
    "minimum",
    "maximum",
    "enum",
    "const",
    "default",
    "examples",
];

/// Whether ajv's strict mode accepts `schema`: only keywords it knows, no `format` it
/// would have to look up, and no `default` its own `type` contradicts (`null` on an
/// integer, say).
fn ajv_strict(schema: &Value, at: &str) -> Result<(), String> {
    let Some(map) = schema.as_object() else { return Ok(()) };
    for (key, value) in map {
        if !AJV_KEYWORDS.contains(&key.as_str()) {
            return Err(format!("{at}: keyword {key:?} is unknown to ajv strict mode"));
        }
        match key.as_str() {
            "properties" => {
                for (name, sub) in value.as_object().into_iter().flatten() {
                    ajv_strict(sub, &format!("{at}/properties/{name}"))?;
                }
            }
            "items" | "additionalProperties" => ajv_strict(value, &format!("{at}/{key}"))?,
            "anyOf" | "oneOf" | "allOf" => {
                for (i, sub) in value.as_array().into_iter().flatten().enumerate() {
                    ajv_strict(sub, &format!("{at}/{key}/{i}"))?;
                }
            }
            "default" if value.is_null() && map.get("type") != Some(&json!("null")) => {
                return Err(format!("{at}: default null contradicts type {}", map["type"]));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Every tool's input and output schema is one ajv's strict mode accepts, and compiles
/// under 2020-12 and draft-07.
#[tokio::test]
async fn every_schema_is_one_strict_validators_accept() {
    let fleet = Fleet::new();
    let client = fleet.connect("reconciler", None, None).await;
    for tool in client.list_all_tools().await.unwrap() {
        let input = Value::Object((*tool.input_schema).clone());
        ajv_strict(&input, &format!("{} input", tool.name)).unwrap();
        validates(&json!({}), &tool.input_schema).map(drop).unwrap_or_else(|e| {
            assert!(!e.contains("does not compile"), "{}: {e}", tool.name);
        });
        let output = Value::Object((*tool.output_schema.clone().unwrap()).clone());
        ajv_strict(&output, &format!("{} output", tool.name)).unwrap();
    }
    client.cancel().await.unwrap();
}

/// Successes carry `structuredContent` that matches the declared output schema, and the
/// same JSON as text; failures carry the error body in both.
#[tokio::test]
async fn results_are_structured_and_match_their_output_schemas() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let profiles = fleet.profiles("retire.json", true);
    let client = fleet.connect("reconciler", Some(&id), Some(&profiles)).await;
    let schemas: BTreeMap<String, serde_json::Map<String, Value>> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.name.to_string(), (*t.output_schema.unwrap()).clone()))
        .collect();
    let lease = call(&client, "gitea_acquire_workflow_lease", json!({"workflow": "schema"})).await;
    let held = lease.structured_content.clone().unwrap();
    let plan = call(&client, "gitea_plan_stale_worker_retirement", json!({})).await;
    let plan_body = plan.structured_content.clone().unwrap();
    let cases = [
        ("gitea_snapshot_instance_fleet", json!({})),
        ("gitea_plan_stale_worker_retirement", json!({})),
        ("gitea_get_runtime_context", json!({})),
        (
            "gitea_renew_workflow_lease",
            json!({"workflow": "schema", "lease_id": held["lease"]["lease_id"], "fencing_epoch": held["lease"]["fencing_epoch"]}),
        ),
        (
            "gitea_apply_stale_worker_retirement",
            json!({"registry_fingerprint": plan_body["registry_fingerprint"], "candidate_fingerprint": plan_body["candidate_fingerprint"], "worker_identities": ["wkr-none"]}),
        ),
    ];
    for (tool, args) in cases {
        let result = call(&client, tool, args).await;
        assert_eq!(failed(&result), None, "{tool}: {:?}", result.structured_content);
        let structured =
            result.structured_content.clone().unwrap_or_else(|| panic!("{tool}: no structuredContent"));
        validates(&structured, &schemas[tool]).unwrap_or_else(|e| panic!("{tool}: {e}"));
        assert_eq!(body(&result), structured, "{tool}: the text block says the same");
    }
    client.cancel().await.unwrap();
}

/// Every refusal's `structuredContent` matches its tool's declared output schema too: the
/// TypeScript SDK (and so Gemini CLI) validates it even when `isError` is set.
#[tokio::test]
async fn refusals_match_their_output_schemas() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let client = fleet.connect("reconciler", Some(&id), None).await;
    let schemas: BTreeMap<String, serde_json::Map<String, Value>> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.name.to_string(), (*t.output_schema.unwrap()).clone()))
        .collect();
    let cases = [
        (
            "gitea_apply_stale_worker_retirement",
            json!({"registry_fingerprint": "x", "candidate_fingerprint": "y", "worker_identities": []}),
        ),
        ("gitea_acquire_workflow_lease", json!({"workflow": "w"})),
        ("gitea_renew_workflow_lease", json!({"workflow": 5})),
        ("gitea_snapshot_instance_fleet", json!({"expected_manifest": "x"})),
        ("gitea_snapshot_instance_fleet", json!({"expected_manifest": {"instances": 3}})),
        ("gitea_plan_stale_worker_retirement", json!({"canonical_repository": 7})),
        ("gitea_release_workflow_lease", json!({"workflow": "w", "lease_id": "l", "fencing_epoch": 0})),
    ];
    for (tool, args) in cases {
        let result = call(&client, tool, args).await;
        assert!(failed(&result).is_some(), "{tool} refuses");
        let structured = result.structured_content.clone().unwrap();
        validates(&structured, &schemas[tool]).unwrap_or_else(|e| panic!("{tool}: {e}: {structured}"));
    }
    client.cancel().await.unwrap();
}

/// An argument of the wrong type or a missing one is refused with the same JSON body as
/// any other refusal, naming the argument; a refused apply never says success.
#[tokio::test]
async fn argument_errors_and_refusals_share_one_json_body() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let profiles = fleet.profiles("retire.json", true);
    let client = fleet.connect("reconciler", Some(&id), Some(&profiles)).await;
    let cases = [
        ("gitea_acquire_workflow_lease", json!({"workflow": "w", "ttl_s": "60"}), "ttl_s"),
        ("gitea_acquire_workflow_lease", json!({}), "workflow"),
        (
            "gitea_apply_stale_worker_retirement",
            json!({"candidate_fingerprint": "b3:1111111111111111111111111111111111111111111111111111111111111111", "worker_identities": []}),
            "registry_fingerprint",
        ),
        (
            "gitea_renew_workflow_lease",
            json!({"workflow": "w", "lease_id": "l", "fencing_epoch": -1}),
            "fencing_epoch",
        ),
        (
            "gitea_renew_workflow_lease",
            json!({"workflow": "w", "lease_id": "l", "fencing_epoch": 0}),
            "fencing_epoch",
        ),
        ("gitea_acquire_workflow_lease", json!({"workflow": "w", "ttl_s": 99_999}), "ttl_s"),
        ("gitea_apply_stale_worker_retirement", json!({"worker_identities": [1]}), "worker_identities"),
        ("gitea_apply_stale_worker_retirement", json!({"worker_identities": 5}), "worker_identities"),
        ("gitea_snapshot_instance_fleet", json!({"expected_manifest": "x"}), "expected_manifest"),
        // Seed 004's audit context is checked, and an argument no tool takes is refused,
        // never ignored.
        ("gitea_plan_stale_worker_retirement", json!({"remote": "Not A Remote"}), "remote"),
        ("gitea_plan_stale_worker_retirement", json!({"host": "-bad-.example"}), "host"),
        ("gitea_plan_stale_worker_retirement", json!({"org": "a/b"}), "org"),
        ("gitea_plan_stale_worker_retirement", json!({"repo": ""}), "repo"),
        ("gitea_plan_stale_worker_retirement", json!({"remotes": "prgs"}), "remotes"),
        ("gitea_snapshot_instance_fleet", json!({"verbose": true}), "verbose"),
    ];
    for (tool, args, field) in cases {
        let mut args = args;
        if tool == "gitea_apply_stale_worker_retirement" && args.get("candidate_fingerprint").is_none() {
            args["registry_fingerprint"] = json!(format!("b3:{}", "0".repeat(64)));
            args["candidate_fingerprint"] = json!(format!("b3:{}", "1".repeat(64)));
        }
        let result = call(&client, tool, args).await;
        let expected = if field == "expected_manifest" { "invalid_manifest" } else { "invalid_arguments" };
        assert_eq!(failed(&result).as_deref(), Some(expected), "{tool}");
        let body = result.structured_content.clone().unwrap();
        assert_eq!(body["detail"]["field"], field, "{tool}: {body}");
        assert!(body["detail"]["message"].is_string(), "{tool}: {body}");
    }
    let refused = call(
        &client,
        "gitea_apply_stale_worker_retirement",
        json!({"registry_fingerprint": "b3:0000000000000000000000000000000000000000000000000000000000000000", "candidate_fingerprint": "b3:1111111111111111111111111111111111111111111111111111111111111111", "worker_identities": ["wkr-x"]}),
    )
    .await;
    assert_eq!(failed(&refused).as_deref(), Some("candidate_set_moved"));
    let detail = &refused.structured_content.clone().unwrap()["detail"];
    assert!(detail.is_object(), "{detail}");
    assert_eq!(detail["outcome"], "candidate_set_moved");
    assert!(detail.get("success").is_none(), "a refusal never says success: {detail}");
    client.cancel().await.unwrap();
}

/// The runtime context reads the registration afresh: its heartbeat moves.
#[tokio::test]
async fn the_runtime_context_is_read_fresh() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let client = fleet.connect("author", Some(&id), None).await;
    let first = body(&call(&client, "gitea_get_runtime_context", json!({})).await);
    let beat = |v: &Value| v["registration"]["last_heartbeat_at"].as_str().unwrap().to_owned();
    // A 5 s TTL heartbeats every 5/3 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = body(&call(&client, "gitea_get_runtime_context", json!({})).await);
        if beat(&now) != beat(&first) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the context kept the heartbeat of the start");
    }
    client.cancel().await.unwrap();
}

/// Apply's pre-checks each fail closed with their own reason, for a reconciler that
/// holds the retire capability.
#[tokio::test]
async fn apply_pre_checks_fail_closed_each_with_its_own_reason() {
    let apply_args = json!({"registry_fingerprint": "b3:0000000000000000000000000000000000000000000000000000000000000000", "candidate_fingerprint": "b3:1111111111111111111111111111111111111111111111111111111111111111", "worker_identities": ["wkr-x"]});

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
    assert!(body(&r)["detail"]["reasons"].to_string().contains("untrusted_instance_identity"));
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
    let args = json!({"registry_fingerprint": "b3:0000000000000000000000000000000000000000000000000000000000000000", "candidate_fingerprint": "b3:1111111111111111111111111111111111111111111111111111111111111111", "worker_identities": "wkr-x"});
    let before = call(&client, "gitea_apply_stale_worker_retirement", args.clone()).await;
    assert_eq!(
        failed(&before).as_deref(),
        Some("candidate_set_moved"),
        "authorized, then refused by the registry"
    );
    std::fs::copy(fleet.profiles("without.json", false), &profiles).unwrap();
    let after = call(&client, "gitea_apply_stale_worker_retirement", args).await;
    assert_eq!(failed(&after).as_deref(), Some("permission_denied"));
    let plan = call(&client, "gitea_plan_stale_worker_retirement", json!({})).await;
    assert_eq!(failed(&plan), None);
    client.cancel().await.unwrap();
}

/// Staleness without an operator: five servers of a launch with a 2 s TTL, one killed.
/// Nothing but the servers runs: their own heartbeat ticks sweep the lapsed row to
/// stale, and the reconciler's plan and apply, over MCP, retire it.
#[tokio::test]
async fn the_fleet_retires_a_crashed_worker_through_mcp_alone() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let profiles = fleet.profiles("retire.json", true);
    let mut clients = Vec::new();
    for ns in NAMESPACES {
        clients.push(fleet.connect_with_ttl(ns, Some(&id), Some(&profiles), 2).await);
    }
    let author = workers(&fleet).into_iter().find(|r| r.namespace.as_str() == "author").unwrap();
    kill_worker(&fleet, "author");

    let reconciler = &clients[4];
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let plan = loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let plan = body(&call(reconciler, "gitea_plan_stale_worker_retirement", json!({})).await);
        if plan["candidate_count"] == 1 {
            break plan;
        }
        assert!(std::time::Instant::now() < deadline, "never became a candidate: {plan}");
    };
    assert_eq!(plan["candidate_worker_identities"], json!([author.worker_identity.as_str()]));
    let applied = call(
        reconciler,
        "gitea_apply_stale_worker_retirement",
        json!({
            "registry_fingerprint": plan["registry_fingerprint"],
            "candidate_fingerprint": plan["candidate_fingerprint"],
            "worker_identities": plan["candidate_worker_identities"],
            "remote": "prgs",
            "org": "platform",
            "repo": "fleetward",
        }),
    )
    .await;
    assert_eq!(failed(&applied), None, "{:?}", applied.structured_content);
    assert_eq!(body(&applied)["retired_count"], 1);
    assert_eq!(
        body(&applied)["audit_context"],
        json!({"remote": "prgs", "org": "platform", "repo": "fleetward"}),
        "seed 004's audit context is reported with the retirement"
    );
    // The fleet after the apply, as `fleetctl retire apply` reports it.
    let after = &body(&applied)["post_apply"];
    assert_eq!(after["stale_worker_count"], 0, "{after}");
    assert!(after["remaining_blockers"].is_object() && after["live_fleet_safe"].is_boolean(), "{after}");
    let rows = workers(&fleet);
    let retired = rows.iter().find(|r| r.worker_identity == author.worker_identity).unwrap();
    assert_eq!(retired.status, fleet_registry::WorkerStatus::Retired);
    assert_eq!(rows.iter().filter(|r| r.status == fleet_registry::WorkerStatus::Active).count(), 4);
    for c in clients {
        let _ = c.cancel().await;
    }
}

/// Kills the worker process of `namespace` and returns its identity.
fn kill_worker(fleet: &Fleet, namespace: &str) -> String {
    let row = workers(fleet).into_iter().find(|r| r.namespace.as_str() == namespace).unwrap();
    let pid = i32::try_from(row.pid.unwrap().get()).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    row.worker_identity.to_string()
}

/// `fleetctl retire plan --json`, from the fleet's directory (the servers' repository).
fn cli_plan(fleet: &Fleet) -> Value {
    let out = StdCommand::new(Fleet::bin("fleetctl"))
        .args(["retire", "plan", "--json"])
        .env("FLEET_REGISTRY", &fleet.location)
        .current_dir(fleet.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Plans until `victim` is the one candidate (its heartbeat lapses, a sweep marks it).
async fn plan_until_candidate(victim: &str, mut plan: impl AsyncFnMut() -> Value) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let p = plan().await;
        if p["candidate_worker_identities"] == json!([victim]) {
            return p;
        }
        assert!(std::time::Instant::now() < deadline, "never became a candidate: {p}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A plan is applied by another process than the one that made it, while the fleet
/// lives: the CLI's plan by an MCP server, and one server's plan by a server started
/// after it (whose own registration moves the registry). Live workers heartbeat every
/// two thirds of a second, and each apply waits until they have.
#[tokio::test]
async fn a_plan_made_by_one_process_is_applied_by_another_in_a_live_fleet() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let profiles = fleet.profiles("retire.json", true);
    let mut clients = Vec::new();
    for ns in NAMESPACES {
        clients.push(fleet.connect_with_ttl(ns, Some(&id), Some(&profiles), 2).await);
    }
    let apply = async |client: &Client, plan: &Value| {
        call(
            client,
            "gitea_apply_stale_worker_retirement",
            json!({
                "registry_fingerprint": plan["registry_fingerprint"],
                "candidate_fingerprint": plan["candidate_fingerprint"],
                "worker_identities": plan["candidate_worker_identities"],
            }),
        )
        .await
    };
    let moved_since = |plan: &Value| {
        let plan = plan.clone();
        let fleet = &fleet;
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while cli_plan(fleet)["registry_fingerprint"] == plan["registry_fingerprint"] {
                assert!(std::time::Instant::now() < deadline, "no heartbeat moved the registry");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };

    // The CLI plans; the launch's reconciler server applies.
    let author = kill_worker(&fleet, "author");
    let plan = plan_until_candidate(&author, async || cli_plan(&fleet)).await;
    moved_since(&plan).await;
    let applied = apply(&clients[4], &plan).await;
    assert_eq!(failed(&applied), None, "{:?}", applied.structured_content);
    let report = body(&applied);
    assert_eq!((report["retired"].clone(), report["registry_moved"].clone()), (json!([author]), json!(true)));

    // One server plans; a server of another launch, started after the plan, applies.
    let reviewer = kill_worker(&fleet, "reviewer");
    let plan = plan_until_candidate(&reviewer, async || {
        body(&call(&clients[4], "gitea_plan_stale_worker_retirement", json!({})).await)
    })
    .await;
    let other = fleet.mint();
    let late = fleet.connect_with_ttl("controller", Some(&other), Some(&profiles), 2).await;
    moved_since(&plan).await;
    let applied = apply(&late, &plan).await;
    assert_eq!(failed(&applied), None, "{:?}", applied.structured_content);
    let report = body(&applied);
    assert_eq!(
        (report["retired"].clone(), report["registry_moved"].clone()),
        (json!([reviewer]), json!(true))
    );
    assert_eq!(report["plan_registry_fingerprint"], plan["registry_fingerprint"]);

    let retired: Vec<String> = workers(&fleet)
        .into_iter()
        .filter(|r| r.status == fleet_registry::WorkerStatus::Retired)
        .map(|r| r.worker_identity.to_string())
        .collect();
    assert_eq!(retired.len(), 2, "only the two crashed workers: {retired:?}");
    for c in clients.into_iter().chain([late]) {
        let _ = c.cancel().await;
    }
}

/// Profiles grant authority, so they fail closed: the workflow-lease tools need their own
/// capability (none by default), a profile must be for its own namespace, and a file
/// others may write, or that is not a regular file, is refused without being waited on.
#[tokio::test]
async fn profiles_fail_closed() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let acquire = json!({"workflow": "closed"});

    let defaults = fleet.connect("author", Some(&id), None).await;
    let r = call(&defaults, "gitea_acquire_workflow_lease", acquire.clone()).await;
    assert_eq!(failed(&r).as_deref(), Some("permission_denied"), "no lease capability by default");
    defaults.cancel().await.unwrap();

    // An author profile that claims the reconciler role is not promoted.
    let posing = fleet.dir.path().join("posing.json");
    let grant = json!({"role": "reconciler", "allowed_operations": ["gitea.read", "gitea.worker_registry.retire", "gitea.workflow_lease.write"]});
    std::fs::write(&posing, json!({"profiles": {"author": grant}}).to_string()).unwrap();
    let author = fleet.connect("author", Some(&id), Some(&posing)).await;
    let r = call(&author, "gitea_acquire_workflow_lease", acquire.clone()).await;
    assert_eq!(failed(&r).as_deref(), Some("role_mismatch"));
    author.cancel().await.unwrap();

    // World-writable: anyone could grant themselves retire.
    use std::os::unix::fs::PermissionsExt;
    let open = fleet.profiles("open.json", true);
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    let reconciler = fleet.connect("reconciler", Some(&id), Some(&open)).await;
    let r = call(&reconciler, "gitea_plan_stale_worker_retirement", json!({})).await;
    assert_eq!(failed(&r).as_deref(), Some("profile_unresolvable"));
    assert!(body(&r)["detail"]["message"].as_str().unwrap().contains("writable by others"));
    reconciler.cancel().await.unwrap();

    // A FIFO where the file should be: refused at once, and the server keeps answering.
    let fifo = fleet.dir.path().join("fifo.json");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let reconciler = fleet.connect("reconciler", Some(&id), Some(&fifo)).await;
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        call(&reconciler, "gitea_plan_stale_worker_retirement", json!({})),
    )
    .await
    .expect("reading profiles never blocks");
    assert_eq!(failed(&r).as_deref(), Some("profile_unresolvable"));
    assert!(body(&r)["detail"]["message"].as_str().unwrap().contains("not a regular file"));
    reconciler.cancel().await.unwrap();
}

/// Apply's remaining guards: asking for nothing is `nothing_requested`, and a workflow
/// lease table that cannot be read is `lease_enumeration_failed`; neither writes.
#[tokio::test]
async fn apply_refuses_an_empty_request_and_an_unreadable_lease_table() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let profiles = fleet.profiles("retire.json", true);
    let client = fleet.connect("reconciler", Some(&id), Some(&profiles)).await;
    let empty = json!({"registry_fingerprint": "b3:0000000000000000000000000000000000000000000000000000000000000000", "candidate_fingerprint": "b3:1111111111111111111111111111111111111111111111111111111111111111", "worker_identities": []});
    let r = call(&client, "gitea_apply_stale_worker_retirement", empty).await;
    assert_eq!(failed(&r).as_deref(), Some("nothing_requested"));

    // A lease row no reader can parse (written behind the registry's back).
    let conn = rusqlite::Connection::open(&fleet.registry).unwrap();
    conn.execute(
        "INSERT INTO leases (lease_key, kind, owner, lease_id, fencing_epoch, state, acquired_at, \
         heartbeat_at, expires_at, updated_at) VALUES ('workflow:bad', 'workflow', 'x', 'lease-x', 1, \
         'held', 'not a time', 'not a time', 'not a time', 'not a time')",
        [],
    )
    .unwrap();
    let before = workers(&fleet);
    let some = json!({"registry_fingerprint": "b3:0000000000000000000000000000000000000000000000000000000000000000", "candidate_fingerprint": "b3:1111111111111111111111111111111111111111111111111111111111111111", "worker_identities": ["wkr-x"]});
    let r = call(&client, "gitea_apply_stale_worker_retirement", some).await;
    assert_eq!(failed(&r).as_deref(), Some("lease_enumeration_failed"), "{:?}", r.structured_content);
    assert_eq!(workers(&fleet), before);
    client.cancel().await.unwrap();
}

/// Malformed input over the wire: garbage gets a parse error, a malformed request with an
/// id gets an answer with that id, and the session goes on.
#[test]
fn every_malformed_line_with_an_id_is_answered_and_garbage_gets_a_parse_error() {
    use std::io::{BufRead, Write};
    let fleet = Fleet::new();
    let mut child = fleet.raw_controller();
    let mut stdin = child.stdin.take().unwrap();
    let lines = [
        "this is not json",
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":"not an object"}"#,
        r#"{"jsonrpc":"2.0","id":"eight","method":42}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    ];
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut answers = Vec::new();
    while answers.len() < 4 {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "the server closed before answering: {answers:?}");
        answers.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    drop(stdin);
    let _ = child.wait();
    let by_id = |id: Value| answers.iter().find(|a| a["id"] == id).cloned();
    assert_eq!(by_id(Value::Null).unwrap()["error"]["code"], -32700);
    assert_eq!(by_id(json!(7)).unwrap()["error"]["code"], -32600);
    assert_eq!(by_id(json!("eight")).unwrap()["error"]["code"], -32600);
    assert!(by_id(json!(9)).unwrap()["result"]["serverInfo"].is_object(), "{answers:?}");
}

/// Seed 000's `foreign_repository` through the seed's own surface: the snapshot tool
/// takes the canonical repository and reports each worker bound to another.
#[tokio::test]
async fn the_snapshot_tool_reports_workers_of_a_foreign_repository() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let client = fleet.connect("controller", Some(&id), None).await;
    let home = std::fs::canonicalize(fleet.dir.path()).unwrap().display().to_string();
    let foreign = |snap: &Value| {
        snap["findings"].as_array().unwrap().iter().filter(|f| f["code"] == "foreign_repository").count()
    };
    let elsewhere = structured(
        &call(&client, "gitea_snapshot_instance_fleet", json!({"canonical_repository": "/srv/other"})).await,
    );
    assert_eq!(foreign(&elsewhere), 1, "{elsewhere}");
    assert_eq!(elsewhere["live_fleet_safe"], false);
    let here = structured(
        &call(&client, "gitea_snapshot_instance_fleet", json!({"canonical_repository": home})).await,
    );
    assert_eq!(foreign(&here), 0, "{here}");
    let bad = call(&client, "gitea_snapshot_instance_fleet", json!({"canonical_repository": ""})).await;
    assert_eq!(failed(&bad).as_deref(), Some("invalid_arguments"));
    client.cancel().await.unwrap();
}

/// Seed 000's `compare_snapshot_heartbeats` through the seed's surface: `compare_to` names
/// an earlier answer by its consistency token, and the answer proves continuity.
#[tokio::test]
async fn the_snapshot_tool_compares_heartbeats_with_an_earlier_answer() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let client = fleet.connect("controller", Some(&id), None).await;
    let first = structured(&call(&client, "gitea_snapshot_instance_fleet", json!({})).await);
    let token = first["consistency_token"].clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let comparison = loop {
        let later =
            structured(&call(&client, "gitea_snapshot_instance_fleet", json!({"compare_to": token})).await);
        let comparison = later["heartbeat_comparison"].clone();
        if comparison["advanced"].as_array().is_some_and(|a| !a.is_empty()) {
            break comparison;
        }
        assert!(std::time::Instant::now() < deadline, "the server's own heartbeat never advanced: {later}");
        // The server remembers its last eight answers; a beat comes every 5/3 s.
        tokio::time::sleep(Duration::from_millis(700)).await;
    };
    assert_eq!(comparison["continuous"], true, "{comparison}");
    assert_eq!(comparison["earlier_at"], first["snapshot_at"]);
    let unknown = call(&client, "gitea_snapshot_instance_fleet", json!({"compare_to": "b3:nothing"})).await;
    assert_eq!(failed(&unknown).as_deref(), Some("invalid_arguments"));
    assert_eq!(structured(&unknown)["detail"]["field"], "compare_to");
    client.cancel().await.unwrap();
}

/// Seed 004's stable-runtime mode: once an upgrade replaces the binary a server runs
/// from, that server refuses to retire (`runtime_unstable`) until it is restarted;
/// before, the same call reaches the registry.
#[tokio::test]
async fn a_server_whose_binary_was_replaced_refuses_to_retire() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let profiles = fleet.profiles("retire.json", true);
    let bin = fleet.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let installed = bin.join("fleet-mcp");
    std::fs::copy(env!("CARGO_BIN_EXE_fleet-mcp"), &installed).unwrap();
    let client = fleet.connect_binary(&installed, "reconciler", Some(&id), Some(&profiles), 5).await;
    let args = json!({"registry_fingerprint": format!("b3:{}", "0".repeat(64)), "candidate_fingerprint": format!("b3:{}", "1".repeat(64)), "worker_identities": ["wkr-x"]});
    let before = call(&client, "gitea_apply_stale_worker_retirement", args.clone()).await;
    assert_eq!(failed(&before).as_deref(), Some("candidate_set_moved"), "the registry is reached");

    // An upgrade installs a new binary in its place, as package managers do: a new file
    // renamed over the old one.
    let upgrade = bin.join("fleet-mcp.new");
    std::fs::copy(env!("CARGO_BIN_EXE_fleet-mcp"), &upgrade).unwrap();
    std::fs::rename(&upgrade, &installed).unwrap();
    let after = call(&client, "gitea_apply_stale_worker_retirement", args).await;
    assert_eq!(failed(&after).as_deref(), Some("runtime_unstable"), "{:?}", after.structured_content);
    let message = structured(&after)["detail"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("restart"), "{message}");
    let plan = call(&client, "gitea_plan_stale_worker_retirement", json!({})).await;
    assert_eq!(failed(&plan), None, "reads go on");
    client.cancel().await.unwrap();
}

/// Lines the server writes, each parsed, until `count` have come.
fn read_answers(out: &mut impl std::io::BufRead, count: usize) -> Vec<Value> {
    let mut answers = Vec::new();
    while answers.len() < count {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "the server closed before answering: {answers:?}");
        answers.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    answers
}

/// Protocol 2025-03-26 requires a server to accept JSON-RPC batches ("Transports",
/// JSON-RPC batching): a batch gets one array holding an answer per request, and a
/// bad member its own error inside it. 2025-06-18 removed batches: there a batch is an
/// invalid request.
#[test]
fn a_batch_is_answered_as_one_array_under_2025_03_26_only() {
    use std::io::Write;
    for (version, batches) in [("2025-03-26", true), ("2025-06-18", false)] {
        let fleet = Fleet::new();
        let mut child = fleet.raw_controller();
        let mut stdin = child.stdin.take().unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        writeln!(stdin, "{init}").unwrap();
        read_answers(&mut out, 1);
        writeln!(stdin, r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#).unwrap();
        writeln!(
            stdin,
            r#"[{{"jsonrpc":"2.0","id":1,"method":"ping"}},{{"jsonrpc":"2.0","id":"two","method":"tools/list"}},{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"arguments":{{}}}}}}]"#
        )
        .unwrap();
        writeln!(stdin, "[]").unwrap();
        stdin.flush().unwrap();
        let answers = read_answers(&mut out, 2);
        drop(stdin);
        let _ = child.wait();
        if batches {
            // The empty batch is answered at once; the batch once its last answer is in.
            let array =
                answers.iter().find_map(Value::as_array).unwrap_or_else(|| panic!("one array: {answers:?}"));
            let empty = answers.iter().find(|a| a.is_object()).unwrap();
            let by_id = |id: Value| array.iter().find(|a| a["id"] == id).cloned().unwrap();
            assert_eq!(array.len(), 3, "{array:?}");
            assert_eq!(by_id(json!(1))["result"], json!({}));
            assert!(by_id(json!("two"))["result"]["tools"].is_array());
            assert_eq!(by_id(json!(3))["error"]["code"], -32602);
            assert_eq!((empty["id"].clone(), empty["error"]["code"].clone()), (Value::Null, json!(-32600)));
        } else {
            for answer in &answers {
                assert_eq!(
                    (answer["id"].clone(), answer["error"]["code"].clone()),
                    (Value::Null, json!(-32600))
                );
            }
        }
    }
}

/// `workers` active rows of another host in `launches` of five, heartbeating now, with
/// every launch in the ledger.
fn import_healthy_rows(registry: &Path, workers: usize) {
    let now = fleet_identity::Timestamp::new(time::OffsetDateTime::now_utc()).to_string();
    import_rows(registry, workers, &now);
}

/// `workers` active rows of another host (never probed) in launches of five, each last
/// heartbeating at `beat` with a TTL of a day, and every launch in the ledger.
fn import_rows(registry: &Path, workers: usize, beat: &str) {
    let now = beat;
    let instance = |i: usize| format!("inst-codex-20260730T120000Z-{:012x}", i / 5);
    let instances: Vec<_> = (0..workers)
        .step_by(5)
        .map(|i| json!({"client_instance_id": instance(i), "client_type": "codex", "minted_at": "2026-07-30T12:00:00Z"}))
        .collect();
    let rows: Vec<_> = (0..workers)
        .map(|i| {
            json!({
                "worker_identity": format!("wkr-large-{i:05}"), "client_type": "codex",
                "client_instance_id": instance(i), "namespace": NAMESPACES[i % 5],
                "generation_id": format!("gen-{i}"), "host_id": "0123456789abcdef0123456789abcdef",
                "boot_id": "11111111-2222-3333-4444-555555555555", "pid": 1_000_000 + i,
                "process_start_time": 1 + i, "status": "active", "ownership_state": "owned",
                "registered_at": "2026-07-30T12:00:00Z", "last_heartbeat_at": now, "heartbeat_ttl_s": 86_400,
                "session_id": format!("sess-{}", i / 5), "repository": "/srv/repo",
            })
        })
        .collect();
    let dump = fleet_registry::RegistryDump::from_json(
        &json!({ "instances": instances, "worker_registrations": rows }).to_string(),
    )
    .unwrap();
    let store = registry_sqlite::SqliteStore::open(registry, fleet_registry::OpenMode::MustExist).unwrap();
    fleet_registry::Registry::new(store).import(&dump).unwrap();
}

/// An answer past the server's limit (by default what the TypeScript SDK's stdio
/// transport takes, 10 MiB; here the least it may be set to, 64 KiB) is refused with
/// `answer_too_large`, naming its size and the limit, in the tool's output schema; the
/// default summary of the same fleet still answers. A limit below 64 KiB is refused at
/// start.
#[tokio::test]
async fn an_answer_past_the_limit_is_refused_with_its_size() {
    let low = StdCommand::new(env!("CARGO_BIN_EXE_fleet-mcp"))
        .args(["--namespace", "controller", "--max-answer-bytes", "1000"])
        .output()
        .unwrap();
    assert_eq!(low.status.code(), Some(2));
    let err = String::from_utf8_lossy(&low.stderr);
    assert!(err.contains("--max-answer-bytes") && err.contains("65536"), "{err}");
    let mut fleet = Fleet::new();
    fleet.server_args = vec!["--max-answer-bytes".into(), "65536".into()];
    let id = fleet.mint();
    let client = fleet.connect("controller", Some(&id), None).await;
    import_rows(&fleet.registry, 200, "2026-07-30T12:00:00.000Z");
    let full = call(&client, "gitea_snapshot_instance_fleet", json!({"detail": "full"})).await;
    assert_eq!(failed(&full).as_deref(), Some("answer_too_large"));
    let detail = &structured(&full)["detail"];
    assert_eq!(detail["limit"], 65_536, "{detail}");
    assert!(detail["size"].as_u64().unwrap() > 65_536, "{detail}");
    assert!(detail["message"].as_str().unwrap().contains("fleetctl snapshot --json"), "{detail}");
    let tools = client.list_all_tools().await.unwrap();
    let schema = tools.iter().find(|t| t.name == "gitea_snapshot_instance_fleet").unwrap();
    validates(&structured(&full), schema.output_schema.as_ref().unwrap()).unwrap();
    let summary = call(&client, "gitea_snapshot_instance_fleet", json!({})).await;
    assert_eq!(failed(&summary), None);
    assert_eq!(structured(&summary)["counts"]["total_rows"], 201);
    client.cancel().await.unwrap();
}

/// By default an agent gets answers it can use at any fleet size: at 10 000 workers,
/// all stale, the snapshot and the plan each stay within 100 KB (structured content and
/// text together), say what they left out, and page or narrow to the rest; `detail:
/// "full"` is the whole snapshot.
#[tokio::test]
async fn default_answers_stay_small_at_ten_thousand_workers_and_page_to_the_rest() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let client = fleet.connect("controller", Some(&id), None).await;
    import_rows(&fleet.registry, 10_000, "2026-07-30T12:00:00.000Z");
    let size = |r: &CallToolResult| {
        r.structured_content.as_ref().unwrap().to_string().len() + body(r).to_string().len()
    };

    let first = call(&client, "gitea_snapshot_instance_fleet", json!({})).await;
    assert!(size(&first) < 100_000, "{} bytes", size(&first));
    let snap = first.structured_content.clone().unwrap();
    assert_eq!(snap["live_fleet_safe"], false);
    assert_eq!(snap["counts"]["total_rows"], 10_001);
    assert_eq!(snap["instances"].as_array().unwrap().len(), 1, "the caller's own instance");
    assert_eq!(snap["instances"][0]["client_instance_id"], json!(id));
    assert_eq!(snap["workers"].as_array().unwrap().len(), 1, "its one worker, this server");
    let page = &snap["page"];
    assert_eq!((page["findings_returned"].clone(), page["next_cursor"].clone()), (json!(20), json!("20")));
    assert!(page["findings_matching"].as_u64().unwrap() >= 10_000, "{page}");

    let next = structured(
        &call(
            &client,
            "gitea_snapshot_instance_fleet",
            json!({"cursor": "20", "limit": 200, "finding_code": "stale_worker"}),
        )
        .await,
    );
    let findings = next["findings"].as_array().unwrap_or_else(|| panic!("{next}"));
    assert_eq!(findings.len(), 200);
    assert!(findings.iter().all(|f| f["code"] == "stale_worker"));
    assert_ne!(findings[0], snap["findings"][0], "the next page, not the first again");
    assert_eq!(next["page"]["next_cursor"], "220");

    let one = structured(
        &call(
            &client,
            "gitea_snapshot_instance_fleet",
            json!({"instance": "inst-codex-20260730T120000Z-000000000007", "namespace": "merger"}),
        )
        .await,
    );
    assert_eq!(one["instances"][0]["client_instance_id"], "inst-codex-20260730T120000Z-000000000007");
    assert_eq!(one["workers"].as_array().unwrap().len(), 1, "{}", one["workers"]);
    assert!(one["findings"].as_array().unwrap().iter().all(|f| f["namespace"] == "merger"));

    let full = call(&client, "gitea_snapshot_instance_fleet", json!({"detail": "full"})).await;
    assert_eq!(full.structured_content.unwrap()["workers"].as_array().unwrap().len(), 10_001);
    let mixed = call(&client, "gitea_snapshot_instance_fleet", json!({"detail": "full", "limit": 5})).await;
    assert_eq!(failed(&mixed).as_deref(), Some("invalid_arguments"));

    let plan = call(&client, "gitea_plan_stale_worker_retirement", json!({})).await;
    assert!(size(&plan) < 100_000, "{} bytes", size(&plan));
    let plan = plan.structured_content.unwrap();
    assert_eq!(plan["assessed_count"], 10_001);
    assert_eq!(plan["preserved"], json!([]), "summarised by reason");
    assert_eq!(plan["page"]["preserved_total"], 10_001);
    let counted: u64 =
        plan["preserved_reason_counts"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(counted, 10_001);
    let paged = structured(
        &call(&client, "gitea_plan_stale_worker_retirement", json!({"limit": 50, "cursor": "100"})).await,
    );
    assert_eq!(paged["preserved"].as_array().unwrap().len(), 50);
    assert_eq!(paged["page"]["next_cursor"], "150");
    // The server's own heartbeat moves the registry fingerprint between two plans; the
    // candidates do not move.
    assert_eq!(paged["candidate_fingerprint"], plan["candidate_fingerprint"], "the same plan, another page");
    client.cancel().await.unwrap();
}

/// Answers of several megabytes (the snapshot's and the plan's bodies, which the server
/// writes to bytes once and splices into the outgoing line) reach the client whole,
/// across many fills of the pipe, and say what the registry holds; their text blocks
/// are digests that keep what a text-only client needs.
#[tokio::test]
async fn answers_of_megabytes_reach_the_client_whole() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    import_healthy_rows(&fleet.registry, 5_000);
    let client = fleet.connect("controller", Some(&id), None).await;
    for _ in 0..2 {
        let snapshot = call(&client, "gitea_snapshot_instance_fleet", json!({"detail": "full"})).await;
        let snap = snapshot.structured_content.clone().unwrap();
        assert!(snap.to_string().len() > 2 << 20, "larger than the widest pipe");
        assert_eq!(snap["counts"]["total_rows"], 5_001, "the rows and the server itself");
        assert_eq!(snap["workers"].as_array().unwrap().len(), 5_001);
        assert_eq!(snap["live_fleet_safe"], true, "{}", snap["findings"]);
        assert_eq!(body(&snapshot)["consistency_token"], snap["consistency_token"], "the digest agrees");

        let plan = call(&client, "gitea_plan_stale_worker_retirement", json!({"detail": "full"})).await;
        let structured = plan.structured_content.clone().unwrap();
        assert_eq!(structured["assessed_count"], 5_001);
        assert_eq!(structured["preserved"].as_array().unwrap().len(), 5_001, "every row's assessment");
        // Too large to repeat as text: the digest keeps all that apply needs.
        let digest = body(&plan);
        for field in [
            "registry_fingerprint",
            "candidate_fingerprint",
            "candidate_worker_identities",
            "preserved_count",
        ] {
            assert_eq!(digest[field], structured[field], "{field}");
        }
        assert_eq!(digest["omitted"]["preserved"], 5_001);
        assert!(digest.to_string().len() < 50_000, "{} characters", digest.to_string().len());
    }
    client.cancel().await.unwrap();
}

/// The server grows its stdout pipe only when an answer needs it: small answers leave
/// the pipe as the client made it (every pipe counts against its user's allowance), and
/// a snapshot of megabytes gets the largest pipe an unprivileged process may have.
#[test]
fn the_server_grows_its_stdout_pipe_only_for_a_large_answer() {
    use std::io::{BufRead, Write};
    let fleet = Fleet::new();
    fleet.mint();
    let mut child = fleet.raw_controller();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let pipe_size = |out: &std::io::BufReader<std::process::ChildStdout>| {
        nix::fcntl::fcntl(out.get_ref(), nix::fcntl::FcntlArg::F_GETPIPE_SZ).unwrap()
    };
    let made = pipe_size(&out);
    let mut line = String::new();
    let mut ask = |stdin: &mut std::process::ChildStdin, out: &mut std::io::BufReader<_>, request: Value| {
        writeln!(stdin, "{request}").unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        line.len()
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    ask(&mut stdin, &mut out, initialize);
    writeln!(stdin, r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#).unwrap();
    let snapshot = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "gitea_snapshot_instance_fleet", "arguments": {"detail": "full"}}})
    };
    let small = ask(&mut stdin, &mut out, snapshot(2));
    assert!(small < 64 << 10, "a small fleet's answer: {small} bytes");
    assert_eq!(pipe_size(&out), made, "small answers leave the pipe alone");

    import_healthy_rows(&fleet.registry, 3_000);
    let large = ask(&mut stdin, &mut out, snapshot(3));
    assert!(large > 1 << 20, "a large fleet's answer: {large} bytes");
    let max: i32 = std::fs::read_to_string("/proc/sys/fs/pipe-max-size").unwrap().trim().parse().unwrap();
    assert_eq!(pipe_size(&out), max.min(1 << 20), "grown for the large answer");
    drop(stdin);
    let _ = child.wait();
}

/// The server keeps a pidfd for each local worker it has seen alive and asks it on later
/// calls: a worker killed between two snapshot calls shows as gone on the second, with
/// its heartbeat still fresh.
#[tokio::test]
async fn a_worker_killed_between_two_snapshots_is_gone_in_the_second() {
    let fleet = Fleet::new();
    let clients = fleet.launch_with_ttl(600).await;
    let controller = &clients[3];
    let view_of = |snap: &Value, worker: &str| {
        snap["workers"].as_array().unwrap().iter().find(|w| w["worker_identity"] == worker).cloned().unwrap()
    };
    let author = workers(&fleet).into_iter().find(|r| r.namespace.as_str() == "author").unwrap();
    let author_id = author.worker_identity.as_str();
    let first =
        call(controller, "gitea_snapshot_instance_fleet", json!({})).await.structured_content.unwrap();
    assert_eq!(first["counts"]["live_worker_count"], 5, "{first}");
    assert_eq!(view_of(&first, author_id)["liveness"], "alive");

    let pid = i32::try_from(author.pid.unwrap().get()).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let snap =
            call(controller, "gitea_snapshot_instance_fleet", json!({})).await.structured_content.unwrap();
        let view = view_of(&snap, author_id);
        if view["liveness"] == "gone" {
            assert_eq!(view["state"], "stale", "{view}");
            assert_eq!(snap["live_fleet_safe"], false);
            break;
        }
        assert_eq!(view["liveness"], "alive", "{view}");
        assert!(std::time::Instant::now() < deadline, "the killed worker never read as gone: {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SIGTERM or SIGINT before the client's `initialize` (a client that gives up at once):
/// the server releases its row and exits `128 + signal`.
#[test]
fn a_stop_signal_before_initialize_releases_the_row() {
    for (signal, code) in [(nix::sys::signal::Signal::SIGTERM, 143), (nix::sys::signal::Signal::SIGINT, 130)]
    {
        let fleet = Fleet::new();
        let id = fleet.mint();
        let mut server = StdCommand::new(env!("CARGO_BIN_EXE_fleet-mcp"))
            .args(["--namespace", "author"])
            .env("FLEET_REGISTRY", &fleet.location)
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &id)
            .env_remove("GITEA_MCP_LAUNCH_PROCESS")
            .current_dir(fleet.dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while workers(&fleet).is_empty() {
            assert!(std::time::Instant::now() < deadline, "never registered");
            std::thread::sleep(Duration::from_millis(20));
        }
        let pid = nix::unistd::Pid::from_raw(i32::try_from(server.id()).unwrap());
        nix::sys::signal::kill(pid, signal).unwrap();
        let status = server.wait().unwrap();
        assert_eq!(status.code(), Some(code), "{signal}");
        assert_eq!(workers(&fleet)[0].status, fleet_registry::WorkerStatus::Released, "{signal}");
    }
}

/// A namespace's instructions name only what it lists: author, reviewer and merger
/// do not announce the fleet tools they cannot call.
#[tokio::test]
async fn instructions_name_only_the_tools_a_namespace_lists() {
    let fleet = Fleet::new();
    for (ns, fleet_tools) in [("author", false), ("merger", false), ("reconciler", true)] {
        let client = fleet.connect(ns, None, None).await;
        let info = client.peer_info().unwrap();
        let text = info.instructions.clone().unwrap_or_default();
        assert_eq!(text.contains("snapshot") || text.contains("retirement"), fleet_tools, "{ns}: {text}");
        client.cancel().await.unwrap();
    }
}

/// The client closes stdin, or sends SIGTERM, right after asking for a snapshot of
/// megabytes: whatever reaches stdout is whole JSON-RPC lines — the answer in flight is
/// written whole or not at all — and the row is released.
#[test]
fn stdin_closed_or_sigterm_mid_answer_leaves_only_whole_lines() {
    use std::io::{Read, Write};
    let fleet = Fleet::new();
    let id = fleet.mint();
    import_healthy_rows(&fleet.registry, 5_000);
    for (round, by_signal) in [false, true, false, true].into_iter().enumerate() {
        let mut server = StdCommand::new(env!("CARGO_BIN_EXE_fleet-mcp"))
            .args(["--namespace", "controller"])
            .env("FLEET_REGISTRY", &fleet.location)
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &id)
            .env_remove("GITEA_MCP_LAUNCH_PROCESS")
            .env_remove("FLEET_PROFILES")
            .current_dir(fleet.dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = server.stdin.take().unwrap();
        let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
        let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gitea_snapshot_instance_fleet","arguments":{"detail":"full"}}});
        writeln!(stdin, "{init}").unwrap();
        writeln!(stdin, "{}", json!({"jsonrpc":"2.0","method":"notifications/initialized"})).unwrap();
        writeln!(stdin, "{call}").unwrap();
        stdin.flush().unwrap();
        // Let the answer start, then end the session.
        std::thread::sleep(Duration::from_millis(150 + 50 * round as u64));
        if by_signal {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(server.id()).unwrap());
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        }
        drop(stdin);
        let mut out = Vec::new();
        server.stdout.take().unwrap().read_to_end(&mut out).unwrap();
        let status = server.wait().unwrap();
        assert!(out.is_empty() || out.ends_with(b"\n"), "round {round}: stdout ends mid-line");
        for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            serde_json::from_slice::<Value>(line)
                .unwrap_or_else(|e| panic!("round {round}: a cut line ({} bytes): {e}", line.len()));
        }
        assert_eq!(status.code(), Some(if by_signal { 143 } else { 0 }), "round {round}");
    }
    let rows = workers(&fleet);
    let servers: Vec<_> =
        rows.iter().filter(|r| r.client_instance_id.as_deref() == Some(id.as_str())).collect();
    assert!(servers.iter().all(|r| r.status == fleet_registry::WorkerStatus::Released), "every row released");
}

/// A heartbeat of a live worker changes no verdict: the next summary is answered from
/// the last one, with the moved heartbeat and expiry shown as a snapshot taken afresh
/// shows them, and `compare_to` sees the heartbeat advance.
#[tokio::test(flavor = "multi_thread")]
async fn a_summary_after_a_heartbeat_shows_it_as_a_fresh_snapshot_does() {
    let fleet = Fleet::new();
    // Their own heartbeats come every 200 s: the test's is the only one.
    let clients = fleet.launch_with_ttl(600).await;
    let controller = &clients[3];
    let first =
        call(controller, "gitea_snapshot_instance_fleet", json!({})).await.structured_content.unwrap();
    let author = first["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["namespace"] == "author")
        .unwrap()["worker_identity"]
        .as_str()
        .unwrap()
        .to_owned();
    let beat = fleet_runtime::now().to_string();
    let db = rusqlite::Connection::open(&fleet.registry).unwrap();
    let sql = "UPDATE worker_registrations SET last_heartbeat_at = ?1 WHERE worker_identity = ?2";
    assert_eq!(db.execute(sql, [beat.as_str(), author.as_str()]).unwrap(), 1);
    let token = first["consistency_token"].as_str().unwrap();
    let second = call(controller, "gitea_snapshot_instance_fleet", json!({ "compare_to": token }))
        .await
        .structured_content
        .unwrap();
    let at: fleet_identity::Timestamp = serde_json::from_value(second["snapshot_at"].clone()).unwrap();
    let location = fleet_runtime::RegistryLocation::Sqlite(fleet.registry.clone());
    let policy = fleet_snapshot::Policy::default();
    let whole =
        fleet_runtime::take_snapshot(&location, None, &policy, at, |s| serde_json::to_value(s).unwrap())
            .unwrap();
    assert_eq!(second["consistency_token"], whole["consistency_token"]);
    let shown: Vec<&Value> = whole["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["client_instance_id"] == first["page"]["instance"])
        .collect();
    assert_eq!(second["workers"].as_array().unwrap().iter().collect::<Vec<_>>(), shown);
    let moved =
        second["workers"].as_array().unwrap().iter().find(|w| w["worker_identity"] == author.as_str());
    assert_eq!(moved.unwrap()["last_heartbeat_at"], beat.as_str());
    assert_ne!(second["workers"], first["workers"]);
    for same in ["counts", "live_fleet_safe", "instances", "findings"] {
        assert_eq!(second[same], first[same], "{same}");
    }
    let comparison = &second["heartbeat_comparison"];
    assert_eq!(comparison["advanced"], json!([author]), "{comparison}");
    assert_eq!(comparison["unchanged"].as_array().unwrap().len(), 4, "{comparison}");
    for client in clients {
        client.cancel().await.unwrap();
    }
}

/// A summary of a fleet that has not changed since the last one is answered from that
/// one with its time and token moved: the token is the one a snapshot of the same rows
/// at the new time carries, and `compare_to` the earlier token still compares.
#[tokio::test(flavor = "multi_thread")]
async fn a_summary_of_an_unchanged_fleet_carries_the_time_and_token_of_now() {
    let fleet = Fleet::new();
    let clients = fleet.launch_with_ttl(600).await;
    let controller = &clients[3];
    let first =
        call(controller, "gitea_snapshot_instance_fleet", json!({})).await.structured_content.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let token = first["consistency_token"].as_str().unwrap();
    let second = call(controller, "gitea_snapshot_instance_fleet", json!({ "compare_to": token }))
        .await
        .structured_content
        .unwrap();
    assert_ne!(second["snapshot_at"], first["snapshot_at"], "the time moved");
    assert_ne!(second["consistency_token"], first["consistency_token"], "and the token with it");
    let at: fleet_identity::Timestamp = serde_json::from_value(second["snapshot_at"].clone()).unwrap();
    let expected = fleet_snapshot::TokenRows::of(&workers(&fleet)).token_at(at);
    assert_eq!(second["consistency_token"], expected.as_str(), "the token of these rows at that time");
    assert_eq!(second["registry_revision"], expected.as_str());
    for same in ["counts", "live_fleet_safe", "instances", "findings"] {
        assert_eq!(second[same], first[same], "{same}");
    }
    let comparison = &second["heartbeat_comparison"];
    assert_eq!(comparison["earlier_at"], first["snapshot_at"], "{comparison}");
    assert_eq!(comparison["later_at"], second["snapshot_at"], "compared as of this answer: {comparison}");
    assert_eq!(comparison["unchanged"].as_array().unwrap().len(), 5, "{comparison}");
    assert_eq!(comparison["lost"], json!([]), "{comparison}");
}

/// `candidates` stale rows of this host whose processes are gone (pids above any
/// `pid_max`), every launch in the ledger: each is a retirement candidate.
fn import_candidates(registry: &Path, candidates: usize) {
    let (host, boot) = (fleet_probe::host_id().unwrap(), fleet_probe::boot_id().unwrap());
    let namespace = fleet_probe::own_pid_namespace().unwrap();
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
    let dump = fleet_registry::RegistryDump::from_value(
        json!({ "instances": instances, "worker_registrations": rows }),
    )
    .unwrap();
    let store = registry_sqlite::SqliteStore::open(registry, fleet_registry::OpenMode::MustExist).unwrap();
    fleet_registry::Registry::new(store).import(&dump).unwrap();
}

/// An agent retires a large stale fleet through MCP calls alone, every answer under
/// 100 KB: the plan shows a page of candidates and both fingerprints, and apply given
/// only the fingerprints retires every candidate (the candidate fingerprint covers each
/// one), reporting counts and a page of identities.
#[tokio::test]
async fn an_agent_retires_ten_thousand_candidates_with_answers_under_100_kb() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let profiles = fleet.profiles("retire.json", true);
    // A TTL the import of 10,000 rows (which holds the write lock) cannot outlast on a
    // loaded machine: the server's own row must stay live for its gate to open.
    let client = fleet.connect_with_ttl("reconciler", Some(&id), Some(&profiles), 30).await;
    import_candidates(&fleet.registry, 10_000);
    let size = |r: &CallToolResult| {
        r.structured_content.as_ref().unwrap().to_string().len() + body(r).to_string().len()
    };
    let repo = json!({"canonical_repository": "/srv/repo"});
    let plan = call(&client, "gitea_plan_stale_worker_retirement", repo.clone()).await;
    assert_eq!(failed(&plan), None, "{:?}", plan.structured_content);
    assert!(size(&plan) < 100_000, "{} bytes", size(&plan));
    let plan = plan.structured_content.unwrap();
    assert_eq!(plan["candidate_count"], 10_000);
    assert_eq!(plan["candidates"].as_array().unwrap().len(), 50, "a page of candidates");
    assert_eq!(plan["page"]["next_candidate_cursor"], "50");
    let next = structured(
        &call(
            &client,
            "gitea_plan_stale_worker_retirement",
            json!({"canonical_repository": "/srv/repo", "candidate_cursor": "50", "candidate_limit": 200}),
        )
        .await,
    );
    assert_eq!(next["candidate_worker_identities"][0], "wkr-gone-000050");
    assert_eq!(next["page"]["next_candidate_cursor"], "250");

    let applied = call(
        &client,
        "gitea_apply_stale_worker_retirement",
        json!({
            "registry_fingerprint": plan["registry_fingerprint"],
            "candidate_fingerprint": plan["candidate_fingerprint"],
            "canonical_repository": "/srv/repo",
        }),
    )
    .await;
    assert_eq!(failed(&applied), None, "{:?}", applied.structured_content);
    assert!(size(&applied) < 100_000, "{} bytes", size(&applied));
    let report = applied.structured_content.unwrap();
    assert_eq!(report["retired_count"], 10_000);
    assert_eq!(report["page"]["retired_total"], 10_000);
    assert_eq!(report["retired"].as_array().unwrap().len(), 200);
    let after = structured(&call(&client, "gitea_plan_stale_worker_retirement", repo).await);
    assert_eq!(after["candidate_count"], 0, "every candidate retired");

    // A second apply of the same fingerprints finds the candidates moved: nothing twice.
    let again = call(
        &client,
        "gitea_apply_stale_worker_retirement",
        json!({
            "registry_fingerprint": plan["registry_fingerprint"],
            "candidate_fingerprint": plan["candidate_fingerprint"],
            "canonical_repository": "/srv/repo",
        }),
    )
    .await;
    assert_eq!(failed(&again).as_deref(), Some("candidate_set_moved"), "{:?}", again.structured_content);
    client.cancel().await.unwrap();
}

/// A refusal quotes at most a prefix of what it was given, saying how long the whole
/// was: a 6 MiB argument value or a 1 MiB argument name comes back in an answer of a
/// few kilobytes, never one past the client's message limit.
#[tokio::test]
async fn refusals_quote_a_prefix_of_their_input_never_all_of_it() {
    let fleet = Fleet::new();
    let id = fleet.mint();
    let client = fleet.connect("controller", Some(&id), None).await;
    let big = "x".repeat(6 << 20);
    let mut unknown_name = serde_json::Map::new();
    unknown_name.insert(big[..1 << 20].to_owned(), json!(1));
    let cases = [
        ("gitea_snapshot_instance_fleet", json!({"finding_code": big}), "finding_code"),
        ("gitea_snapshot_instance_fleet", json!({"instance": big}), "instance"),
        ("gitea_snapshot_instance_fleet", Value::Object(unknown_name), "field"),
        ("gitea_plan_stale_worker_retirement", json!({"cursor": big}), "cursor"),
        ("gitea_plan_stale_worker_retirement", json!({"candidate_cursor": big}), "candidate_cursor"),
    ];
    for (tool, args, what) in cases {
        let result = call(&client, tool, args).await;
        assert_eq!(failed(&result).as_deref(), Some("invalid_arguments"), "{what}");
        let size =
            result.structured_content.as_ref().unwrap().to_string().len() + body(&result).to_string().len();
        assert!(size < 8_192, "{what}: a refusal of {size} bytes");
        let text = result.structured_content.unwrap().to_string();
        assert!(
            what == "instance" || text.contains("bytes in all"),
            "{what}: the quote says how long the whole was: {text}"
        );
    }
    client.cancel().await.unwrap();
}
