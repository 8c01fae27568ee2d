//! The launcher through its binary: every ID it prints is in the ledger first, two
//! launches never share an ID, and `run` hands the instance environment to the app.

use std::collections::BTreeSet;
use std::process::Command;

use fleet_identity::ClientInstanceId;
use fleet_registry::OpenMode;
use fleet_registry::Registry;
use registry_sqlite::SqliteStore;

fn launcher(registry: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fleet-launch"));
    cmd.env("FLEET_REGISTRY", registry).env_remove("GITEA_MCP_PROFILE");
    cmd
}

fn ledger(registry: &std::path::Path) -> BTreeSet<String> {
    let store = SqliteStore::open(registry, OpenMode::MustExist).unwrap();
    Registry::new(store).instances().unwrap().into_iter().map(|i| i.client_instance_id.to_string()).collect()
}

#[test]
fn every_minted_id_is_recorded_and_distinct() {
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join("registry.sqlite3");
    let ids: Vec<String> = (0..5)
        .map(|_| {
            let out = launcher(&registry).args(["mint", "--client", "codex"]).output().unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        })
        .collect();
    let distinct: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(distinct.len(), 5, "two launches never share an ID");
    assert_eq!(ledger(&registry), distinct, "every printed ID is in the ledger");
    for id in &ids {
        assert_eq!(ClientInstanceId::parse(id).unwrap().client_type().as_str(), "codex");
    }
}

#[test]
fn config_is_identity_free_and_the_same_on_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join("registry.sqlite3");
    for client in ["codex", "claude_code", "cursor", "gemini", "vscode"] {
        let print = || {
            let out = launcher(&registry).args(["config", "--client", client]).output().unwrap();
            assert!(out.status.success(), "{client}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap()
        };
        let first = print();
        assert_eq!(first, print(), "{client}: the same on every call");
        assert!(!first.contains("inst-"), "{client}: no instance ID is baked in");
        for ns in ["author", "reviewer", "merger", "controller", "reconciler"] {
            assert!(first.contains(&format!("gitea-{ns}")), "{client}: {ns}");
        }
    }
    assert!(!registry.exists(), "printing a config mints nothing");
}

#[test]
fn run_execs_the_app_with_the_instance_environment() {
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join("registry.sqlite3");
    let out = launcher(&registry)
        .args([
            "run",
            "--client",
            "gemini",
            "--",
            "sh",
            "-c",
            "echo $GITEA_MCP_CLIENT_INSTANCE $GITEA_MCP_CLIENT $FLEET_REGISTRY",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let parts: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(parts[1], "gemini");
    assert_eq!(parts[2], registry.to_str().unwrap());
    assert_eq!(ledger(&registry), [parts[0].to_owned()].into());
}

#[test]
fn a_missing_application_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join("registry.sqlite3");
    let out =
        launcher(&registry).args(["run", "--client", "codex", "--", "/nonexistent/app"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot run /nonexistent/app"));
}
