//! A reader that follows the history of changes (`Registry::read_since`) holds the live
//! fleet a full read holds, whatever SQL any client runs between its reads: random
//! inserts into a few launches, updates, releases and reactivations (a launch leaves the
//! live fleet and comes back), renames, deletes, replaces and ledger writes on a real
//! SQLite file, read at random points, each read checked against a full export's live
//! fleet; and the digest of the rows' versions the triggers keep is the rows' own after
//! every write but a replace.

use fleet_registry::{OpenMode, ReadMark, Registry, RegistryChanges, RegistryDump};
use proptest::prelude::*;
use registry_sqlite::SqliteStore;

mod common;
use common::digests;

/// One write by another SQL client, on identities `wkr-0` to `wkr-7`.
#[derive(Debug, Clone)]
enum Write {
    /// A row of launch `.1` (of four; the fifth is none).
    Insert(u8, u8),
    Heartbeat(u8, u16),
    Release(u8),
    /// A terminal row made active again: its launch comes back into the live fleet.
    Activate(u8),
    Rename(u8, u8),
    Delete(u8),
    Ledger(u8),
    /// Several rows at once.
    HeartbeatAll(u16),
    /// `INSERT OR REPLACE` of an identity there may be: SQLite deletes the old row without
    /// running delete triggers (recursive triggers are off), so the digest the triggers
    /// keep may drift from the rows; readers then read everything, never too little.
    Replace(u8),
}

fn write() -> impl Strategy<Value = Write> {
    prop_oneof![
        4 => (0..8u8, 0..5u8).prop_map(|(w, l)| Write::Insert(w, l)),
        6 => (0..8u8, any::<u16>()).prop_map(|(w, t)| Write::Heartbeat(w, t)),
        3 => (0..8u8).prop_map(Write::Release),
        1 => (0..8u8).prop_map(Write::Activate),
        1 => (0..8u8, 0..8u8).prop_map(|(a, b)| Write::Rename(a, b)),
        1 => (0..8u8).prop_map(Write::Delete),
        1 => (0..4u8).prop_map(Write::Ledger),
        1 => any::<u16>().prop_map(Write::HeartbeatAll),
        1 => (0..8u8).prop_map(Write::Replace),
    ]
}

/// The instance ID of launch `l`.
fn launch(l: u8) -> String {
    format!("inst-codex-20260730T120000Z-00000000000{l}")
}

/// Runs `write`; a write that breaks a constraint (a duplicate identity) is a write
/// that did not happen, as for any client.
fn run(conn: &rusqlite::Connection, write: &Write) {
    let beat = |t: u16| format!("2026-07-30T12:{:02}:{:02}.{:03}Z", t / 6000 % 60, t / 100 % 60, t % 1000);
    let _ = match write {
        Write::Insert(w, l) => conn.execute(
            "INSERT INTO worker_registrations \
             (worker_identity, client_instance_id, namespace, status, registered_at) \
             VALUES (?1, ?2, 'author', 'active', '2026-07-30T12:00:00Z')",
            rusqlite::params![format!("wkr-{w}"), (*l < 4).then(|| launch(*l))],
        ),
        Write::Heartbeat(w, t) => conn.execute(
            "UPDATE worker_registrations SET last_heartbeat_at = ?1 WHERE worker_identity = ?2",
            [beat(*t), format!("wkr-{w}")],
        ),
        Write::Release(w) => conn.execute(
            "UPDATE worker_registrations SET status = 'released' WHERE worker_identity = ?1",
            [format!("wkr-{w}")],
        ),
        Write::Activate(w) => conn.execute(
            "UPDATE worker_registrations SET status = 'active' WHERE worker_identity = ?1",
            [format!("wkr-{w}")],
        ),
        Write::Rename(a, b) => conn.execute(
            "UPDATE worker_registrations SET worker_identity = ?2 WHERE worker_identity = ?1",
            [format!("wkr-{a}"), format!("wkr-{b}")],
        ),
        Write::Delete(w) => {
            conn.execute("DELETE FROM worker_registrations WHERE worker_identity = ?1", [format!("wkr-{w}")])
        }
        Write::Ledger(i) => conn.execute(
            "INSERT OR REPLACE INTO instances (client_instance_id, client_type, minted_at) \
             VALUES (?1, 'codex', '2026-07-30T12:00:00Z')",
            [launch(*i)],
        ),
        Write::HeartbeatAll(t) => {
            conn.execute("UPDATE worker_registrations SET last_heartbeat_at = ?1", [beat(*t)])
        }
        Write::Replace(w) => conn.execute(
            "INSERT OR REPLACE INTO worker_registrations (worker_identity, namespace, status, registered_at) \
             VALUES (?1, 'reviewer', 'active', '2026-07-30T12:00:00Z')",
            [format!("wkr-{w}")],
        ),
    };
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_reader_following_changes_holds_what_a_full_read_holds(
        steps in proptest::collection::vec((write(), any::<bool>()), 1..40)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("registry.sqlite3");
        let mut registry = Registry::new(SqliteStore::open(&path, OpenMode::CreateIfMissing).unwrap());
        let other = rusqlite::Connection::open(&path).unwrap();
        let mut kept = RegistryDump::default();
        let mut position: Option<ReadMark> = None;
        let mut replaced = false;
        for (write, read_after) in steps.iter().chain([&(Write::Ledger(0), true)]) {
            run(&other, write);
            // Until a replace, the digest the triggers keep is the rows' own.
            replaced |= matches!(write, Write::Replace(_));
            if !replaced {
                let (kept, rows) = digests(&other);
                prop_assert_eq!(kept, rows, "after {:?}", write);
            }
            if !read_after {
                continue;
            }
            let read = registry.read_since(position.take()).unwrap();
            let incremental = matches!(read.changes, RegistryChanges::Since { .. });
            let before = kept.clone();
            let (mark, origins) = read.apply(&mut kept);
            position = mark;
            prop_assert_eq!(&kept, &registry.export().unwrap().live(), "incremental read: {}", incremental);
            prop_assert_eq!(origins.len(), kept.worker_registrations.len());
            for (row, origin) in kept.worker_registrations.iter().zip(&origins) {
                if let Some(origin) = origin {
                    prop_assert_eq!(Some(row), before.worker_registrations.get(*origin));
                }
            }
        }
    }
}
