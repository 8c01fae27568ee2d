//! The long-lived fleet reader never answers from stale rows: a commit by another
//! connection, a replaced registry file and a removed one are all seen on the next read.

use fleet_registry::{OpenMode, RegistryDump};
use fleet_runtime::{FleetReader, RegistryLocation, open_registry};

/// A ledger entry and one active worker row per name, in the registry's export format.
fn dump(names: &[&str]) -> RegistryDump {
    let id = "inst-codex-20260730T120000Z-0123456789ab";
    let rows: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            serde_json::json!({
                "worker_identity": name, "client_type": "codex", "client_instance_id": id,
                "namespace": "author", "status": "active", "registered_at": "2026-07-30T12:00:00Z",
                "last_heartbeat_at": "2026-07-30T12:00:00Z", "heartbeat_ttl_s": 30, "pid": 100 + i,
            })
        })
        .collect();
    let text = serde_json::json!({
        "instances": [{"client_instance_id": id, "client_type": "codex", "minted_at": "2026-07-30T12:00:00Z"}],
        "worker_registrations": rows,
    });
    RegistryDump::from_json(&text.to_string()).unwrap()
}

fn create(location: &RegistryLocation, names: &[&str]) {
    open_registry(location, OpenMode::CreateIfMissing).unwrap().import(&dump(names)).unwrap();
}

fn identities(reader: &mut FleetReader) -> Vec<String> {
    reader.dump().unwrap().worker_registrations.iter().map(|r| r.worker_identity.to_string()).collect()
}

#[test]
fn a_commit_by_another_connection_is_read_at_once() {
    let dir = tempfile::tempdir().unwrap();
    commits_are_read_at_once(&RegistryLocation::Sqlite(dir.path().join("registry.sqlite3")));
}

/// The same on PostgreSQL (`FLEET_TEST_POSTGRES_URL`; CI sets it), whose change marker
/// is a digest of the row versions.
#[test]
fn a_commit_by_another_connection_is_read_at_once_on_postgres() {
    let Some(base) = std::env::var("FLEET_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty()) else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = format!("fleet_reader_{}", std::process::id());
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).expect("the test PostgreSQL server");
    admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")).unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    commits_are_read_at_once(&RegistryLocation::Postgres(format!(
        "{base}{sep}options=-csearch_path%3D{schema}"
    )));
    admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).unwrap();
}

fn commits_are_read_at_once(location: &RegistryLocation) {
    let location = location.clone();
    create(&location, &["wkr-a"]);
    let mut reader = FleetReader::new(location.clone());
    assert_eq!(identities(&mut reader), ["wkr-a"]);
    assert_eq!(identities(&mut reader), ["wkr-a"], "unchanged: served from what was read");

    open_registry(&location, OpenMode::MustExist).unwrap().import(&dump(&["wkr-b"])).unwrap();
    assert_eq!(identities(&mut reader), ["wkr-a", "wkr-b"]);
}

#[test]
fn a_replaced_registry_file_is_read_afresh_and_a_removed_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite3");
    let location = RegistryLocation::Sqlite(path.clone());
    create(&location, &["wkr-old"]);
    let mut reader = FleetReader::new(location.clone());
    assert_eq!(identities(&mut reader), ["wkr-old"]);

    // Restored from elsewhere: the open connection still sees the old file.
    let other = RegistryLocation::Sqlite(dir.path().join("restored.sqlite3"));
    create(&other, &["wkr-new"]);
    std::fs::rename(dir.path().join("restored.sqlite3"), &path).unwrap();
    assert_eq!(identities(&mut reader), ["wkr-new"]);

    std::fs::rename(&path, dir.path().join("moved-away.sqlite3")).unwrap();
    let err = reader.dump().unwrap_err();
    assert!(err.to_string().contains("registry.sqlite3"), "{err}");
}
