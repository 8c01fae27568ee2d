//! fleetctl against a real PostgreSQL registry (`FLEET_TEST_POSTGRES_URL`; CI sets it,
//! and there a missing server fails): the same fixture gives the same snapshot as on
//! SQLite, and workers register, heartbeat and release through it.

mod common;

use std::path::PathBuf;

use common::Fleet;

fn base_url() -> Option<String> {
    std::env::var("FLEET_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty())
}

/// A schema of its own, dropped afterwards; the registry URL selects it by search path.
struct Schema {
    base: String,
    name: String,
}

impl Schema {
    fn new(base: &str) -> Self {
        let name = format!("fleet_cli_{}", uuid::Uuid::now_v7().simple());
        let mut client =
            postgres::Client::connect(base, postgres::NoTls).expect("the test PostgreSQL server");
        client.batch_execute(&format!("CREATE SCHEMA {name}")).unwrap();
        Self { base: base.to_owned(), name }
    }

    fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-csearch_path%3D{}", self.base, self.name)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
    }
}

#[test]
fn a_fixture_snapshots_alike_on_postgres_and_sqlite() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let fixture_path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/snapshot/stale_and_historical.json");
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_path).unwrap()).unwrap();
    let fleet = Fleet::new();
    let registry_file = fleet.dir.path().join("registry.json");
    std::fs::write(&registry_file, fixture["registry"].to_string()).unwrap();
    let schema = Schema::new(&base);
    let snapshot = |location: &str| {
        let import = fleet
            .fleetctl()
            .env("FLEET_REGISTRY", location)
            .args(["registry", "import"])
            .arg(&registry_file)
            .output()
            .unwrap();
        assert!(import.status.success(), "{}", String::from_utf8_lossy(&import.stderr));
        let out = fleet
            .fleetctl()
            .env("FLEET_REGISTRY", location)
            .args(["snapshot", "--json", "--at", fixture["now"].as_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let on_postgres = snapshot(&schema.url());
    let on_sqlite = snapshot(fleet.registry.to_str().unwrap());
    assert_eq!(on_postgres, on_sqlite);
    assert_eq!(on_postgres["counts"]["stale_worker_count"], 2);
}

#[test]
fn a_worker_registers_and_releases_through_postgres() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let url = schema.url();
    let minted = std::process::Command::new(common::sibling_bin("fleet-launch"))
        .args(["mint", "--client", "codex"])
        .env("FLEET_REGISTRY", &url)
        .output()
        .unwrap();
    assert!(minted.status.success(), "{}", String::from_utf8_lossy(&minted.stderr));
    let id = String::from_utf8(minted.stdout).unwrap().trim().to_owned();
    let out = fleet
        .fleetctl()
        .env("FLEET_REGISTRY", &url)
        .args(["worker", "run", "--namespace", "author", "--ttl", "1", "--", "sleep", "1"])
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list =
        fleet.fleetctl().env("FLEET_REGISTRY", &url).args(["worker", "list", "--json"]).output().unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(rows[0]["client_instance_id"], serde_json::json!(id));
    assert_eq!(rows[0]["status"], "released");
    assert!(
        rows[0]["last_heartbeat_at"].as_str().unwrap() > rows[0]["registered_at"].as_str().unwrap(),
        "it heartbeat"
    );
}

#[test]
fn eight_concurrent_initializers_on_postgres_run_the_command_once() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let url = schema.url();
    let fleet = Fleet::new();
    let counter = fleet.dir.path().join("runs");
    let script = format!("echo run >> '{}'; sleep 0.3", counter.display());
    let children: Vec<_> = (0..8)
        .map(|_| {
            fleet
                .fleetctl()
                .env("FLEET_REGISTRY", &url)
                .args([
                    "initialize",
                    "--key",
                    "schema",
                    "--target-version",
                    "1",
                    "--ttl",
                    "5",
                    "--poll-ms",
                    "20",
                    "--",
                ])
                .args(["sh", "-c", &script])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "every starter reports ready");
    }
    assert_eq!(std::fs::read_to_string(&counter).unwrap().lines().count(), 1, "the command ran exactly once");
    let audit =
        fleet.fleetctl().env("FLEET_REGISTRY", &url).args(["lease", "audit", "--json"]).output().unwrap();
    let log: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    let starts = log.as_array().unwrap().iter().filter(|e| e["event"] == "init_start").count();
    assert_eq!(starts, 1);
}
