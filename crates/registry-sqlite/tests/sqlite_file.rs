//! What only the SQLite backend promises: file mode, WAL, refusal of foreign and newer
//! files, and safe concurrent migration.

use std::os::unix::fs::PermissionsExt;

use fleet_registry::OpenMode;
use fleet_registry::{Registry, StoreErrorKind};
use registry_sqlite::{SCHEMA_VERSION, SqliteStore};

mod common;
use common::digests;

#[test]
fn a_new_registry_file_is_private_and_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/state/registry.sqlite3");
    let store = SqliteStore::open(&path, OpenMode::CreateIfMissing).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let journal: String = store.connection().query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(journal, "wal");
    let version: i64 = store.connection().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    store.integrity_check().unwrap();
}

#[test]
fn a_missing_file_is_missing_when_it_must_exist() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.sqlite3");
    let err = SqliteStore::open(&path, OpenMode::MustExist).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Missing);
    assert!(!path.exists(), "a failed open must not create the file");
}

#[test]
fn a_file_that_is_not_a_database_is_corrupt_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.sqlite3");
    let junk = b"these are not the pages you are looking for, not at all, no".repeat(100);
    std::fs::write(&path, &junk).unwrap();
    let err = SqliteStore::open(&path, OpenMode::MustExist).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), junk);
}

#[test]
fn a_registry_from_a_newer_build_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite3");
    let store = SqliteStore::open(&path, OpenMode::CreateIfMissing).unwrap();
    // A newer build's file that does not say which builds may use it.
    store.connection().execute_batch("DROP TABLE fleet_schema_compatibility").unwrap();
    store.connection().pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
    drop(store);
    let err = SqliteStore::open(&path, OpenMode::MustExist).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::NewerSchema, "{err}");
}

/// A newer schema that says builds of this one's version may still use it (a
/// migration that only adds) is used, unchanged; one that says otherwise, or says
/// nothing, is refused naming both versions.
#[test]
fn a_newer_registry_is_used_only_where_it_says_this_build_may() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite3");
    let store = SqliteStore::open(&path, OpenMode::CreateIfMissing).unwrap();
    store
        .connection()
        .execute_batch(&format!(
            "DELETE FROM fleet_schema_compatibility;
             INSERT INTO fleet_schema_compatibility VALUES ({SCHEMA_VERSION});
             CREATE TABLE added_by_a_later_build (x INTEGER);
             PRAGMA user_version = {};",
            SCHEMA_VERSION + 1
        ))
        .unwrap();
    drop(store);
    let mut registry = Registry::new(SqliteStore::open(&path, OpenMode::MustExist).unwrap());
    assert!(registry.workers().unwrap().is_empty());
    let version: i64 =
        registry.store().connection().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, SCHEMA_VERSION + 1, "never set back");
    registry
        .store()
        .connection()
        .execute_batch(&format!(
            "UPDATE fleet_schema_compatibility SET oldest_build = {}",
            SCHEMA_VERSION + 1
        ))
        .unwrap();
    drop(registry);
    let err = SqliteStore::open(&path, OpenMode::MustExist).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::NewerSchema, "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("version {}", SCHEMA_VERSION + 1))
            && text.contains(&SCHEMA_VERSION.to_string())
    );
}

#[test]
fn many_threads_opening_one_new_file_migrate_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite3");
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || {
                let store = SqliteStore::open(&path, OpenMode::CreateIfMissing).unwrap();
                Registry::new(store).workers().unwrap().len()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 0);
    }
}

#[test]
fn a_corrupt_value_in_a_row_is_reported_with_its_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite3");
    let store = SqliteStore::open(&path, OpenMode::CreateIfMissing).unwrap();
    store
        .connection()
        .execute(
            "INSERT INTO worker_registrations (worker_identity, namespace, status, registered_at, pid) \
             VALUES ('w1', 'author', 'active', '2026-07-30T12:00:00Z', -5)",
            [],
        )
        .unwrap();
    let err = Registry::new(store).workers().unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt);
    assert!(err.to_string().contains("w1") && err.to_string().contains("pid"), "{err}");
}

#[test]
fn many_processes_opening_one_new_file_all_succeed() {
    // Threads share one process's locks; processes do not. Each child is this test
    // binary re-entered through the helper test below.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite3");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..8)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", "open_from_env_helper", "--nocapture"])
                .env("FLEET_OPEN_HELPER_PATH", &path)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "every process opens the new registry");
    }
    let store = SqliteStore::open(&path, OpenMode::MustExist).unwrap();
    store.integrity_check().unwrap();
}

/// Opens the registry named by `FLEET_OPEN_HELPER_PATH`; does nothing when unset.
#[test]
fn open_from_env_helper() {
    if let Some(path) = std::env::var_os("FLEET_OPEN_HELPER_PATH") {
        let store = SqliteStore::open(std::path::Path::new(&path), OpenMode::CreateIfMissing).unwrap();
        Registry::new(store).workers().unwrap();
    }
}

#[test]
fn the_audit_log_is_append_only_and_never_holds_scopes() {
    use fleet_registry::ConnectorRequest;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite3");
    let mut registry = Registry::new(SqliteStore::open(&path, OpenMode::CreateIfMissing).unwrap());
    let identity = fleet_lease::ConnectorIdentity::new("acme", "agent", "binding").unwrap();
    let scopes = vec!["secret-scope.write".to_owned()];
    let ctx = fleet_registry::AuditContext {
        correlation_id: Some("corr".into()),
        binding: Some("acme/agent/binding".into()),
    };
    let limits = fleet_lease::GrantLimits::default();
    let acquire = ConnectorRequest::Acquire {
        connector: "conn",
        scopes: &scopes,
        ttl: time::Duration::seconds(30),
        process: None,
    };
    let lease = registry
        .connector_lease(&identity, acquire, limits, &fleet_registry::conformance::AllowAll, &ctx)
        .unwrap()
        .unwrap();
    let release = ConnectorRequest::Release { holder: &lease.holder() };
    registry
        .connector_lease(&identity, release, limits, &fleet_registry::conformance::AllowAll, &ctx)
        .unwrap()
        .unwrap();
    drop(registry);

    let conn = rusqlite::Connection::open(&path).unwrap();
    let rows: Vec<String> = conn
        .prepare("SELECT * FROM lease_audit_log")
        .unwrap()
        .query_map([], |r| {
            let n = r.as_ref().column_count();
            Ok((0..n).map(|i| format!("{:?}", r.get_ref(i).unwrap())).collect::<Vec<_>>().join("|"))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        for forbidden in ["secret-scope", "scope", "grant", "payload", "token", lease.lease_id.as_str()] {
            assert!(!row.contains(forbidden), "the audit log holds {forbidden:?}: {row}");
        }
    }
    let update = conn.execute("UPDATE lease_audit_log SET outcome = 'forged'", []);
    assert!(update.unwrap_err().to_string().contains("append-only"));
    let delete = conn.execute("DELETE FROM lease_audit_log", []);
    assert!(delete.unwrap_err().to_string().contains("append-only"));
}

/// Inserts a minimal active worker row `id` as any SQL client would.
fn insert_row(conn: &rusqlite::Connection, id: &str) {
    conn.execute(
        "INSERT INTO worker_registrations (worker_identity, namespace, status, registered_at) \
         VALUES (?1, 'author', 'active', '2026-07-30T12:00:00Z')",
        [id],
    )
    .unwrap();
}

/// A new registry file, its registry, and a second plain connection to it (another
/// SQL client); the directory lives as long as the first value.
fn new_registry() -> (tempfile::TempDir, Registry<SqliteStore>, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite3");
    let registry = Registry::new(SqliteStore::open(&path, OpenMode::CreateIfMissing).unwrap());
    let other = rusqlite::Connection::open(&path).unwrap();
    (dir, registry, other)
}

/// Follows the registry from `since`, checks the rows against a full read, and returns
/// the new position and how many worker rows were read (None: everything).
fn follow(
    registry: &mut Registry<SqliteStore>,
    kept: &mut fleet_registry::RegistryDump,
    since: Option<fleet_registry::ReadMark>,
) -> (Option<fleet_registry::ReadMark>, Option<usize>) {
    let read = registry.read_since(since).unwrap();
    let rows = match &read.changes {
        fleet_registry::RegistryChanges::Everything(_) => None,
        fleet_registry::RegistryChanges::Since { workers, .. } => Some(workers.len()),
    };
    let (mark, _) = read.apply(kept);
    assert_eq!(*kept, registry.export().unwrap().live());
    (mark, rows)
}

/// The history of changes is kept by the file itself (triggers), so a writer that knows
/// nothing of it (an operator's `sqlite3`, another program) is followed too: its update
/// is read as one changed row, and a row it renames or deletes makes the reader read
/// everything.
#[test]
fn a_reader_follows_writes_made_by_any_sql_client() {
    let (_dir, mut registry, other) = new_registry();
    insert_row(&other, "wkr-a");
    insert_row(&other, "wkr-b");
    let mut kept = fleet_registry::RegistryDump::default();
    let (mut at, _) = follow(&mut registry, &mut kept, None);
    other
        .execute("UPDATE worker_registrations SET status = 'released' WHERE worker_identity = 'wkr-b'", [])
        .unwrap();
    let mut rows;
    (at, rows) = follow(&mut registry, &mut kept, at);
    assert_eq!(rows, Some(1), "one updated row read");
    insert_row(&other, "wkr-0");
    (at, rows) = follow(&mut registry, &mut kept, at);
    assert_eq!(rows, Some(1), "one new row read");
    assert_eq!(kept.worker_registrations[0].worker_identity.as_str(), "wkr-0");
    other
        .execute(
            "UPDATE worker_registrations SET worker_identity = 'wkr-c' WHERE worker_identity = 'wkr-a'",
            [],
        )
        .unwrap();
    (at, rows) = follow(&mut registry, &mut kept, at);
    assert_eq!(rows, None, "a renamed row: everything read");
    other.execute("DELETE FROM worker_registrations WHERE worker_identity = 'wkr-0'", []).unwrap();
    (_, rows) = follow(&mut registry, &mut kept, at);
    assert_eq!(rows, None, "a deleted row: everything read");
}

/// A registry file of schema version 3 (before the history of changes) opens at the
/// current version with its rows, a copy of it as it was kept beside it, and its readers
/// then read only what changed.
#[test]
fn a_version_3_registry_is_upgraded_with_its_rows_and_followed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite3");
    {
        // Version 3 as it was: the current file without what versions 4 to 10 added.
        let store = SqliteStore::open(&path, OpenMode::CreateIfMissing).unwrap();
        store
            .connection()
            .execute_batch(
                "DROP TRIGGER worker_registrations_insert_is_digested;
                 DROP TRIGGER worker_registrations_version_is_digested;
                 DROP TRIGGER worker_registrations_delete_is_digested;
                 DROP TRIGGER worker_registrations_change_seq_only_rises;
                 DROP TRIGGER registry_changes_only_rise;
                 DROP TRIGGER registry_changes_stay;
                 DROP TRIGGER worker_registrations_insert_is_a_change;
                 DROP TRIGGER worker_registrations_update_is_a_change;
                 DROP TRIGGER worker_registrations_rename_is_a_removal;
                 DROP TRIGGER worker_registrations_delete_is_a_removal;
                 DROP TRIGGER instances_insert_is_a_change;
                 DROP TRIGGER instances_update_is_a_change;
                 DROP TRIGGER instances_delete_is_a_change;
                 DROP INDEX worker_registrations_changes;
                 ALTER TABLE worker_registrations DROP COLUMN change_seq;
                 DROP TABLE registry_changes;
                 DROP TABLE registry_identity;
                 DROP TABLE fencing_high_water;
                 DROP TRIGGER lease_decision_counted;
                 DROP TABLE lease_decision_counts;
                 ALTER TABLE leases DROP COLUMN holder_process;
                 DROP TABLE host_fences;
                 DROP TABLE host_boots;
                 DROP INDEX worker_registrations_active;
                 DROP TABLE fleet_schema_compatibility;
                 PRAGMA user_version = 3;",
            )
            .unwrap();
        insert_row(store.connection(), "wkr-a");
        insert_row(store.connection(), "wkr-b");
    }
    // Nothing but `registry upgrade` changes the schema: a reader is refused, naming it.
    let refused = SqliteStore::open(&path, OpenMode::MustExist).unwrap_err();
    assert_eq!(refused.kind(), StoreErrorKind::OlderSchema, "{refused}");
    assert!(refused.to_string().contains("fleetctl registry upgrade"), "{refused}");
    let planned = SqliteStore::upgrade(&path, true, true).unwrap();
    assert_eq!((planned.from, planned.to, planned.steps.len()), (3, SCHEMA_VERSION, 10), "{planned:?}");
    let refused = SqliteStore::open(&path, OpenMode::MustExist).unwrap_err();
    assert_eq!(refused.kind(), StoreErrorKind::OlderSchema, "a dry run changes nothing: {refused}");
    let done = SqliteStore::upgrade(&path, false, true).unwrap();
    assert_eq!(done.backup.as_deref(), Some(format!("{}.schema-v3.backup", path.display()).as_str()));
    let mut registry = Registry::new(SqliteStore::open(&path, OpenMode::MustExist).unwrap());
    let version: i64 =
        registry.store().connection().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert!(registry.registry_id().is_ok(), "the upgrade minted the registry's id");
    let mut kept = fleet_registry::RegistryDump::default();
    let (at, _) = follow(&mut registry, &mut kept, None);
    assert_eq!(kept.worker_registrations.len(), 2, "the rows of version 3");
    registry
        .store()
        .connection()
        .execute("UPDATE worker_registrations SET status = 'released' WHERE worker_identity = 'wkr-a'", [])
        .unwrap();
    let (_, rows) = follow(&mut registry, &mut kept, at);
    assert_eq!(rows, Some(1), "one updated row read");

    // The upgrade kept the file as it was, privately, for builds that read version 3.
    let copy = dir.path().join("registry.sqlite3.schema-v3.backup");
    let mode = std::fs::metadata(&copy).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let old = rusqlite::Connection::open(&copy).unwrap();
    let version: i64 = old.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    let rows: i64 = old.query_row("SELECT count(*) FROM worker_registrations", [], |r| r.get(0)).unwrap();
    assert_eq!((version, rows), (3, 2));
}

/// The history only moves forward, whoever writes: another SQL client cannot write a
/// row back to an older version, swap two rows' versions, or set the counters back; the
/// statement is refused whole. A row written twice so that it would come back to its
/// old version is read as changed.
#[test]
fn a_hand_cannot_set_the_history_back() {
    let (_dir, mut registry, other) = new_registry();
    insert_row(&other, "wkr-a");
    insert_row(&other, "wkr-b");
    let mut kept = fleet_registry::RegistryDump::default();
    let (at, _) = follow(&mut registry, &mut kept, None);
    let refused = |sql: &str| {
        let err = other.execute_batch(sql).expect_err(sql);
        assert!(
            err.to_string().contains("only rise") || err.to_string().contains("are kept"),
            "{sql}: {err}"
        );
    };
    refused("UPDATE worker_registrations SET status = 'released', change_seq = change_seq - 70000");
    refused(
        "UPDATE worker_registrations SET change_seq = (SELECT max(change_seq) FROM worker_registrations) \
         + (SELECT min(change_seq) FROM worker_registrations) - change_seq",
    );
    refused("UPDATE registry_changes SET instances = instances - 1");
    refused("UPDATE registry_changes SET worker_removals = worker_removals - 1");
    refused("DELETE FROM registry_changes");
    let old: i64 = other
        .query_row("SELECT change_seq FROM worker_registrations WHERE worker_identity = 'wkr-a'", [], |r| {
            r.get(0)
        })
        .unwrap();
    other
        .execute(
            "UPDATE worker_registrations SET status = 'retired', \
             change_seq = (SELECT max(change_seq) FROM worker_registrations) + 100 WHERE worker_identity = 'wkr-a'",
            [],
        )
        .unwrap();
    refused(&format!("UPDATE worker_registrations SET change_seq = {old} WHERE worker_identity = 'wkr-a'"));
    let (_, rows) = follow(&mut registry, &mut kept, at);
    assert_eq!(rows, Some(1), "the row written is read");
}

/// A hand that first drops the guards (schema changes) and then sets the counters back
/// is not followed: any change of the schema makes the reader read everything.
#[test]
fn counters_set_back_with_the_guards_dropped_make_the_reader_read_everything() {
    let (_dir, mut registry, other) = new_registry();
    insert_row(&other, "wkr-a");
    let mut kept = fleet_registry::RegistryDump::default();
    let (at, _) = follow(&mut registry, &mut kept, None);
    other
        .execute_batch(
            "DROP TRIGGER worker_registrations_change_seq_only_rises;
             DROP TRIGGER worker_registrations_update_is_a_change;
             UPDATE worker_registrations SET status = 'released';",
        )
        .unwrap();
    let (_, rows) = follow(&mut registry, &mut kept, at);
    assert_eq!(rows, None, "everything read");
}

/// The history's row removed by hand (its guard dropped first): nothing can be trusted
/// from it, so every read reads everything (and still sees every change).
#[test]
fn without_its_history_row_the_reader_reads_everything() {
    let (_dir, mut registry, other) = new_registry();
    insert_row(&other, "wkr-a");
    insert_row(&other, "wkr-b");
    other.execute_batch("DROP TRIGGER registry_changes_stay; DELETE FROM registry_changes;").unwrap();
    let mut kept = fleet_registry::RegistryDump::default();
    let (at, _) = follow(&mut registry, &mut kept, None);
    assert_eq!(at, None, "no position");
    other.execute("DELETE FROM worker_registrations WHERE worker_identity = 'wkr-a'", []).unwrap();
    let (_, rows) = follow(&mut registry, &mut kept, at);
    assert_eq!(rows, None, "everything read");
    assert_eq!(kept.worker_registrations.len(), 1);
}

/// The digest of the rows' versions (schema version 10) is kept by triggers from the
/// rows there are: seeded when a version 9 file is upgraded, and when the history's row
/// is built again after a hand removed it; a reader then follows changes at once.
#[test]
fn the_digest_of_versions_is_seeded_from_the_rows_on_upgrade_and_on_repair() {
    let (dir, registry, other) = new_registry();
    drop(registry);
    let path = dir.path().join("registry.sqlite3");
    // Version 9 as it was, holding rows.
    other
        .execute_batch(
            "DROP TRIGGER worker_registrations_insert_is_digested;
             DROP TRIGGER worker_registrations_version_is_digested;
             DROP TRIGGER worker_registrations_delete_is_digested;
             ALTER TABLE registry_changes DROP COLUMN worker_rows;
             ALTER TABLE registry_changes DROP COLUMN worker_version_sum;
             DROP TABLE host_fences;
             DROP TABLE host_boots;
             DROP INDEX worker_registrations_active;
             DROP TABLE fleet_schema_compatibility;
             PRAGMA user_version = 9;",
        )
        .unwrap();
    insert_row(&other, "wkr-a");
    insert_row(&other, "wkr-b");
    SqliteStore::upgrade(&path, false, true).unwrap();
    let mut registry = Registry::new(SqliteStore::open(&path, OpenMode::MustExist).unwrap());
    let (kept, rows) = digests(&other);
    assert_eq!((kept, rows.0), (rows, 2), "seeded on upgrade");

    // Removed by hand, then built again by `registry init`.
    other.execute_batch("DROP TABLE registry_changes").unwrap();
    drop(registry);
    registry = Registry::new(SqliteStore::open(&path, OpenMode::CreateIfMissing).unwrap());
    let (kept, rows) = digests(&other);
    assert_eq!((kept, rows.0), (rows, 2), "seeded on repair");
    let mut kept = fleet_registry::RegistryDump::default();
    let (at, _) = follow(&mut registry, &mut kept, None);
    other
        .execute("UPDATE worker_registrations SET status = 'released' WHERE worker_identity = 'wkr-b'", [])
        .unwrap();
    let (_, read) = follow(&mut registry, &mut kept, at);
    assert_eq!(read, Some(1), "one changed row read, the rest proven by the digest");
}

/// A read of many rows is decoded on a second thread as SQLite steps: the rows come back
/// whole and in order, and a bad row amid them fails the read naming it (the rows after
/// it are not served), as a read decoded row by row does.
#[test]
fn a_large_read_decoded_on_a_second_thread_is_whole_in_order_or_names_its_bad_row() {
    let (_dir, mut registry, other) = new_registry();
    other
        .execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) \
             INSERT INTO worker_registrations (worker_identity, namespace, status, registered_at, pid) \
             SELECT printf('wkr-%05d', i), 'author', 'active', '2026-07-30T12:00:00Z', i FROM n;",
        )
        .unwrap();
    let workers = registry.workers().unwrap();
    assert_eq!(workers.len(), 20000);
    for (i, row) in workers.iter().enumerate() {
        assert_eq!(row.worker_identity.as_str(), format!("wkr-{:05}", i + 1));
        assert_eq!(row.pid.map(|p| i64::from(p.get())), Some(i64::try_from(i + 1).unwrap()));
    }
    for bad in ["namespace = 'wizard'", "pid = -5", "last_heartbeat_at = x'ff'"] {
        other
            .execute(
                &format!("UPDATE worker_registrations SET {bad} WHERE worker_identity = 'wkr-12345'"),
                [],
            )
            .unwrap();
        let err = registry.workers().unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{bad}: {err}");
        assert!(err.to_string().contains("wkr-12345"), "{bad}: {err}");
        other
            .execute(
                "UPDATE worker_registrations SET namespace = 'author', pid = 12345, last_heartbeat_at = NULL \
                 WHERE worker_identity = 'wkr-12345'",
                [],
            )
            .unwrap();
        assert_eq!(registry.workers().unwrap().len(), 20000, "read whole again after {bad}");
    }
}

/// An operator restores an older backup in place (`sqlite3 registry ".restore bak"`,
/// which is SQLite's backup API writing the old pages into the open file), and the
/// fleet then writes a few ordinary changes, enough to carry the counters past where the
/// reader last read. The restored file holds a row active that the reader kept as
/// retired: the reader must not serve what it kept, and reads everything.
#[test]
fn a_backup_restored_in_place_and_written_again_is_read_whole() {
    let (dir, mut registry, other) = new_registry();
    insert_row(&other, "wkr-a");
    insert_row(&other, "wkr-b");
    let backup = dir.path().join("backup.sqlite3");
    other.execute("VACUUM INTO ?1", [backup.to_str().unwrap()]).unwrap();
    other
        .execute("UPDATE worker_registrations SET status = 'retired' WHERE worker_identity = 'wkr-a'", [])
        .unwrap();
    let mut kept = fleet_registry::RegistryDump::default();
    let (at, _) = follow(&mut registry, &mut kept, None);
    let reached = at.as_ref().unwrap().position().workers;

    let mut restorer = rusqlite::Connection::open(dir.path().join("registry.sqlite3")).unwrap();
    restorer.restore(rusqlite::MAIN_DB, &backup, None::<fn(rusqlite::backup::Progress)>).unwrap();
    // Ordinary writes (heartbeats of wkr-b) until the counters have passed the reader's.
    while other
        .query_row("SELECT max(change_seq) FROM worker_registrations", [], |r| r.get::<_, i64>(0))
        .unwrap()
        <= reached
    {
        other.execute("UPDATE worker_registrations SET last_heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ') WHERE worker_identity = 'wkr-b'", []).unwrap();
    }
    let (_, rows) = follow(&mut registry, &mut kept, at);
    assert_eq!(rows, None, "everything read");
    let a = kept.worker_registrations.iter().find(|r| r.worker_identity.as_str() == "wkr-a").unwrap();
    assert_eq!(a.status, fleet_registry::WorkerStatus::Active, "the restored file's row, not the kept one");
}

/// The registry's id is minted once, stored in the file, and the same however the file
/// is named (a symlinked directory, a relative path); another file has another id.
#[test]
fn one_registry_has_one_id_under_every_spelling() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
    let id_of = |path: &std::path::Path| {
        Registry::new(SqliteStore::open(path, OpenMode::CreateIfMissing).unwrap()).registry_id().unwrap()
    };
    let first = id_of(&real.join("registry.sqlite3"));
    assert_eq!(first.as_str().len(), 32);
    assert_eq!(id_of(&dir.path().join("link/registry.sqlite3")), first, "through a symlinked directory");
    assert_eq!(id_of(&dir.path().join("real/../link/./registry.sqlite3")), first, "spelled another way");
    assert_eq!(id_of(&real.join("registry.sqlite3")), first, "stable across opens");
    assert_ne!(id_of(&dir.path().join("other.sqlite3")), first, "another registry");
}

/// A migration that fails says so in one short line: the step, SQLite's reason, where
/// the untouched copy is; never the statements it ran.
#[test]
fn a_failed_migration_is_one_short_line_naming_the_step_and_the_copy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite3");
    drop(SqliteStore::open(&path, OpenMode::CreateIfMissing).unwrap());
    // A file that says version 5 but already holds version 6's table: step 6 fails.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 5).unwrap();
    drop(conn);
    let err = SqliteStore::upgrade(&path, false, true).unwrap_err().to_string();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.len() < 400, "{} bytes: {err}", err.len());
    assert!(err.contains("step 6 failed") && err.contains("already exists"), "{err}");
    assert!(err.contains("registry.sqlite3.schema-v5.backup"), "{err}");
    assert!(!err.contains("CREATE"), "no SQL in the message: {err}");
}
