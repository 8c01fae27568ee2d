//! Two agent sessions started from one shared config, for each client, with the servers
//! given exactly the environment that client gives a stdio MCP server by its documented
//! rules. Each session is started by `fleet-launch run`, as the quick start says.
//!
//! The rules played here:
//! * Codex: only HOME, LOGNAME, PATH, SHELL, USER, LANG, LC_ALL, TERM, TMPDIR and TZ from
//!   its own environment (`DEFAULT_ENV_VARS` in codex-rs/rmcp-client/src/utils.rs), plus
//!   the entry's `env`, plus each variable its `env_vars` names (docs/config.md,
//!   "mcp_servers").
//! * Claude Code: `${VAR}` and `${VAR:-default}` expanded in the entry's `env` from its own
//!   environment (docs.anthropic.com, Claude Code MCP, "Environment variable expansion in
//!   .mcp.json"), over the MCP TypeScript SDK's default environment for stdio servers
//!   (`getDefaultEnvironment`: HOME, LOGNAME, PATH, SHELL, TERM, USER).
//! * Cursor: `${env:NAME}` in `env` (cursor.com/docs, MCP, "Config interpolation"), over
//!   the same default environment.
//! * Gemini CLI: `$VAR` and `${VAR}` in `env` (gemini-cli docs/tools/mcp-server.md,
//!   "Environment variable expansion"), over the same default environment.
//! * VS Code: `${env:NAME}` in `env` of a `servers` entry with `type: stdio`
//!   (code.visualstudio.com/docs/copilot/chat/mcp-servers, configuration format), over
//!   the same default environment.
//!
//! The default environment is the smallest any of them passes: a config that works on it
//! works when a client passes more.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use fleet_runtime::RegistryLocation;
use fleet_snapshot::Policy;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::Value;
use tokio::process::Command;

const CODEX_DEFAULT_ENV: [&str; 10] =
    ["HOME", "LOGNAME", "PATH", "SHELL", "USER", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ"];
const SDK_DEFAULT_ENV: [&str; 6] = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];

fn bin(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fleet-mcp")).with_file_name(name)
}

/// One server entry as the client reads it from its config file.
#[derive(Debug)]
struct Entry {
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    env_vars: Vec<String>,
}

/// Reads the five entries from the file `fleet-launch install` wrote.
fn read_entries(client: &str, file: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(file).unwrap();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().into_iter().flatten().map(|s| s.as_str().unwrap().to_owned()).collect()
    };
    let servers: Vec<Value> = if client == "codex" {
        let doc: toml_edit::DocumentMut = text.parse().unwrap();
        let servers = doc["mcp_servers"].as_table().unwrap();
        servers
            .iter()
            .map(|(_, t)| {
                let t = t.as_table().unwrap();
                let env: BTreeMap<String, String> = t["env"]
                    .as_inline_table()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.to_owned(), v.as_str().unwrap().to_owned()))
                    .collect();
                let array = |key: &str| -> Vec<String> {
                    t[key].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
                };
                serde_json::json!({
                    "command": t["command"].as_str().unwrap(),
                    "args": array("args"),
                    "env": env,
                    "env_vars": array("env_vars"),
                })
            })
            .collect()
    } else {
        let v: Value = serde_json::from_str(&text).unwrap();
        let key = if client == "vscode" { "servers" } else { "mcpServers" };
        if client == "vscode" {
            assert!(v[key].as_object().unwrap().values().all(|e| e["type"] == "stdio"), "VS Code needs type");
        }
        v[key].as_object().unwrap().values().cloned().collect()
    };
    servers
        .iter()
        .map(|s| Entry {
            command: s["command"].as_str().unwrap().to_owned(),
            args: strings(&s["args"]),
            env: serde_json::from_value(s["env"].clone()).unwrap(),
            env_vars: strings(&s["env_vars"]),
        })
        .collect()
}

/// Expands the references one client's syntax allows; anything unset becomes empty
/// (or the `:-` default).
fn expand(client: &str, value: &str, from: &BTreeMap<String, String>) -> String {
    let lookup = |name: &str| from.get(name).cloned();
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        if let Some(body) = tail.strip_prefix('{').and_then(|t| t.split_once('}')) {
            let (inner, after) = body;
            let expanded = match client {
                "cursor" | "vscode" => inner.strip_prefix("env:").map(|n| lookup(n).unwrap_or_default()),
                "claude_code" => Some(match inner.split_once(":-") {
                    Some((name, default)) => lookup(name).unwrap_or_else(|| default.to_owned()),
                    None => lookup(inner).unwrap_or_default(),
                }),
                "gemini" => Some(lookup(inner).unwrap_or_default()),
                _ => None,
            };
            match expanded {
                Some(text) => out.push_str(&text),
                None => out.push_str(&format!("${{{inner}}}")),
            }
            rest = after;
        } else if client == "gemini" {
            let len = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
            out.push_str(&lookup(&tail[..len]).unwrap_or_default());
            rest = &tail[len..];
        } else {
            out.push('$');
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// The environment `client`, itself running with `client_env`, gives the server `entry`.
fn server_env(
    client: &str,
    entry: &Entry,
    client_env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let base: &[&str] = if client == "codex" { &CODEX_DEFAULT_ENV } else { &SDK_DEFAULT_ENV };
    let mut env: BTreeMap<String, String> =
        base.iter().filter_map(|k| Some(((*k).to_owned(), client_env.get(*k)?.clone()))).collect();
    if client == "codex" {
        env.extend(entry.env.clone());
        for name in &entry.env_vars {
            if let Some(value) = client_env.get(name) {
                env.insert(name.clone(), value.clone());
            }
        }
    } else {
        env.extend(entry.env.iter().map(|(k, v)| (k.clone(), expand(client, v, client_env))));
    }
    env
}

/// The environment `fleet-launch run` hands the agent client it starts.
fn launched_client_env(registry: &Path, home: &Path, client_type: &str) -> BTreeMap<String, String> {
    let out = StdCommand::new(bin("fleet-launch"))
        .args(["run", "--client", client_type, "--", "env", "-0"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("FLEET_REGISTRY", registry)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut env: BTreeMap<String, String> = out
        .stdout
        .split(|b| *b == 0)
        .filter_map(|kv| {
            std::str::from_utf8(kv).ok()?.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect();
    // The launcher names the process it became (here `env`, which has exited); this test
    // plays that client from here on, so it names this process instead.
    assert!(env.contains_key("GITEA_MCP_LAUNCH_PROCESS"), "the launch records its client");
    env.insert("GITEA_MCP_LAUNCH_PROCESS".into(), fleet_runtime::launch_process_value().unwrap());
    env
}

type Client = rmcp::service::RunningService<rmcp::service::RoleClient, ()>;

async fn start(entry: &Entry, env: &BTreeMap<String, String>, cwd: &Path) -> Client {
    let transport = TokioChildProcess::new(Command::new(&entry.command).configure(|cmd| {
        cmd.args(&entry.args).env_clear().envs(env).current_dir(cwd);
    }))
    .unwrap();
    ().serve(transport).await.expect("initialize")
}

async fn runtime_context(client: &Client) -> Value {
    let result =
        client.call_tool(CallToolRequestParams::new("gitea_get_runtime_context")).await.expect("a result");
    result.structured_content.clone().expect("structured content")
}

#[tokio::test]
async fn two_sessions_from_one_shared_config_are_two_trusted_launches_for_every_client() {
    for (client, client_type) in [
        ("codex", "codex"),
        ("claude_code", "claude_code"),
        ("cursor", "cursor"),
        ("gemini", "gemini"),
        ("vscode", "vscode"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (home, project) = (dir.path().join("home"), dir.path().join("project"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&project).unwrap();
        let registry = dir.path().join("registry.sqlite3");
        let out = StdCommand::new(bin("fleet-launch"))
            .args(["install", "--client", client, "--scope", "project"])
            .env("HOME", &home)
            .current_dir(&project)
            .output()
            .unwrap();
        assert!(out.status.success(), "{client}: {}", String::from_utf8_lossy(&out.stderr));
        let file = match client {
            "codex" => project.join(".codex/config.toml"),
            "claude_code" => project.join(".mcp.json"),
            "cursor" => project.join(".cursor/mcp.json"),
            "gemini" => project.join(".gemini/settings.json"),
            _ => project.join(".vscode/mcp.json"),
        };
        let entries = read_entries(client, &file);
        assert_eq!(entries.len(), 5, "{client}");

        let mut servers = Vec::new();
        for _session in 0..2 {
            let client_env = launched_client_env(&registry, &home, client_type);
            for entry in &entries {
                servers.push(start(entry, &server_env(client, entry, &client_env), &project).await);
            }
        }
        let location = RegistryLocation::Sqlite(registry.clone());
        let mut fleet = fleet_runtime::Fleet::new(location);
        let snap = fleet.snapshot(None, &Policy::default(), fleet_runtime::now()).unwrap();
        assert!(snap.live_fleet_safe, "{client}: {:?}", snap.findings);
        assert_eq!(snap.counts.live_worker_count, 10, "{client}");
        assert_eq!(snap.instances.len(), 2, "{client}");
        for instance in &snap.instances {
            assert_eq!(instance.trust, fleet_identity::TrustVerdict::Trusted, "{client}");
            assert!(instance.missing_namespaces.is_empty(), "{client}");
        }
        let context = runtime_context(&servers[9]).await;
        assert_eq!(context["instance_trust"], "trusted", "{client}");
        for server in servers {
            server.cancel().await.unwrap();
        }
    }
}

#[tokio::test]
async fn a_server_started_without_the_launcher_says_what_is_missing_and_how_its_client_forwards_it() {
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join("registry.sqlite3");
    let file = dir.path().join("config.toml");
    let out = StdCommand::new(bin("fleet-launch"))
        .args(["install", "--client", "codex", "--file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let entries = read_entries("codex", &file);
    // Codex started by hand: none of the launch's variables exist in its environment.
    let client_env: BTreeMap<String, String> = [
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".to_owned(), dir.path().display().to_string()),
        ("FLEET_REGISTRY".to_owned(), registry.display().to_string()),
    ]
    .into();
    let server = start(&entries[0], &server_env("codex", &entries[0], &client_env), dir.path()).await;
    let context = runtime_context(&server).await;
    let error = context["environment_error"].as_str().unwrap();
    assert!(error.starts_with("GITEA_MCP_CLIENT is not set"), "{error}");
    assert!(error.contains("env_vars") && error.contains("fleet-launch run"), "{error}");
    // The host it runs on, and no fence against it.
    let host = &context["host"];
    assert_eq!(host["host_id"].as_str(), Some(fleet_probe::host_id().unwrap().as_str()), "{context}");
    assert!(host["boot_id"].is_string() && host["fence"].is_null(), "{context}");
    server.cancel().await.unwrap();
}

/// A client started from inside a launch — an agent's shell running `codex exec` —
/// inherits the launch's variables, and its servers are started by it, not by the
/// client `fleet-launch run` started. They do not register under the borrowed identity,
/// they say how to start a nested client, and the fleet stays safe.
#[tokio::test]
async fn a_client_nested_in_a_launch_does_not_register_under_its_identity() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let registry = dir.path().join("registry.sqlite3");
    let launched = launched_client_env(&registry, &home, "codex");
    // The launched client: this test process. Its servers register.
    let entry = Entry {
        command: bin("fleet-mcp").display().to_string(),
        args: vec!["--namespace".into(), "author".into()],
        env: BTreeMap::new(),
        env_vars: Vec::new(),
    };
    let own = start(&entry, &launched, dir.path()).await;
    // The nested client: a shell of the agent's, which starts its own server with the
    // environment it inherited. `sh -c '…; true'` keeps the shell as the server's parent.
    let nested = StdCommand::new("sh")
        .args(["-c", &format!("{} --namespace author --ttl 5 < /dev/null; true", bin("fleet-mcp").display())])
        .env_clear()
        .envs(&launched)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&nested.stderr);
    assert!(said.contains("fleet-launch run --client codex"), "{said}");
    let rows = fleet_registry::Registry::new(
        registry_sqlite::SqliteStore::open(&registry, fleet_registry::OpenMode::MustExist).unwrap(),
    )
    .workers()
    .unwrap();
    assert_eq!(rows.len(), 1, "only the launched client's server registered: {rows:?}");
    let location = RegistryLocation::Sqlite(registry.clone());
    let mut fleet = fleet_runtime::Fleet::new(location);
    let snap = fleet.snapshot(None, &Policy::default(), fleet_runtime::now()).unwrap();
    assert!(
        !snap.findings.iter().any(|f| f.code == fleet_snapshot::FindingCode::DuplicateNamespaceWorker),
        "{:?}",
        snap.findings
    );
    let _ = own.cancel().await;
}

/// A server below `layers` processes between it and this test (the launched client),
/// each a shell that stays (`…; true` keeps `sh` from exec'ing), as a published package
/// nests them.
fn wrapped(layers: usize, namespace: &str) -> Entry {
    let mut script = format!("\"$0\" --namespace {namespace} --ttl 5; true");
    for _ in 1..layers {
        script = format!("sh -c '{}' \"$0\"; true", script.replace('\'', r"'\''"));
    }
    Entry {
        command: "sh".into(),
        args: vec!["-c".into(), script, bin("fleet-mcp").display().to_string()],
        env: BTreeMap::new(),
        env_vars: Vec::new(),
    }
}

fn rows_of(registry: &Path) -> Vec<fleet_registry::WorkerRow> {
    fleet_registry::Registry::new(
        registry_sqlite::SqliteStore::open(registry, fleet_registry::OpenMode::MustExist).unwrap(),
    )
    .workers()
    .unwrap()
}

/// The real clients start their servers below wrappers, as their published packages do:
/// Codex's npm entry point `bin/codex.js` (package `@openai/codex`) is a Node script that
/// `spawn`s the native binary, which starts the servers (two processes between the
/// launched client and a server); Gemini CLI (`@google/gemini-cli`) relaunches itself
/// in a child Node process (`relaunchAppInChildProcess`, packages/cli/src/utils/
/// relaunch.ts), whose child starts the servers. Every namespace of such a launch
/// registers under the launch, owned, and the fleet says SAFE with all five live.
#[tokio::test]
async fn servers_below_a_clients_wrappers_register_under_its_launch() {
    for (client_type, layers) in [("codex", 2), ("gemini", 2), ("claude_code", 1)] {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let registry = dir.path().join("registry.sqlite3");
        let launched = launched_client_env(&registry, &home, client_type);
        let mut servers = Vec::new();
        for namespace in ["author", "reviewer", "merger", "controller", "reconciler"] {
            servers.push(start(&wrapped(layers, namespace), &launched, dir.path()).await);
        }
        for server in &servers {
            let context = runtime_context(server).await;
            assert!(context["environment_error"].is_null(), "{client_type}: {context}");
        }
        let rows = rows_of(&registry);
        assert_eq!(rows.len(), 5, "{client_type}: every server registered: {rows:?}");
        assert!(
            rows.iter().all(|r| r.ownership_state == Some(fleet_registry::OwnershipState::Owned)),
            "{client_type}: {rows:?}"
        );
        let mut fleet = fleet_runtime::Fleet::new(RegistryLocation::Sqlite(registry.clone()));
        let snap = fleet.snapshot(None, &Policy::default(), fleet_runtime::now()).unwrap();
        assert!(snap.live_fleet_safe, "{client_type}: {:?}", snap.findings);
        for server in servers {
            let _ = server.cancel().await;
        }
    }
}

/// A client nested in a launch whose servers sit below wrappers too (a Codex started from
/// the agent's shell) finds each slot held by the launch's own live server, and does not
/// register under the borrowed identity; it says what to run instead.
#[tokio::test]
async fn a_wrapped_client_nested_in_a_launch_finds_its_slot_held() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let registry = dir.path().join("registry.sqlite3");
    let launched = launched_client_env(&registry, &home, "codex");
    let own = start(&wrapped(2, "author"), &launched, dir.path()).await;
    assert!(runtime_context(&own).await["environment_error"].is_null());
    let nested = start(&wrapped(3, "author"), &launched, dir.path()).await;
    let context = runtime_context(&nested).await;
    let said = context.to_string();
    assert!(
        said.contains("held by live worker") && said.contains("fleet-launch run --client codex"),
        "{said}"
    );
    assert_eq!(rows_of(&registry).len(), 1, "only the launch's own server registered");
    let _ = nested.cancel().await;
    let _ = own.cancel().await;
}
