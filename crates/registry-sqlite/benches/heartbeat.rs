//! Heartbeat commits per second through the registry API against a bare rusqlite
//! prepared `UPDATE` loop on the same file, in the same run. Each iteration is one
//! committed transaction.

use criterion::{Criterion, criterion_group, criterion_main};
use fleet_identity::Timestamp;
use fleet_registry::OpenMode;
use fleet_registry::conformance::{ScriptedProbe, at, process, registration};
use fleet_registry::{Registry, WorkerCredential, WorkerToken};
use registry_sqlite::SqliteStore;

fn heartbeat(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("registry.sqlite3");
    let mut registry = Registry::new(SqliteStore::open(&path, OpenMode::CreateIfMissing).expect("open"));
    let token = WorkerToken::from_bytes([7; 32]);
    let reg = registration(fleet_identity::Namespace::Author, process(100, 5000), "gen-bench");
    let registered = registry.register(&reg, &token, at(0), &ScriptedProbe::default()).expect("register");
    let who = WorkerCredential {
        worker_identity: registered.row.worker_identity.clone(),
        generation_id: reg.generation_id.clone(),
        token: token.clone(),
    };

    let mut group = c.benchmark_group("heartbeat_commit");
    let mut tick = 0i64;
    group.bench_function("registry_api", |b| {
        b.iter(|| {
            tick += 1;
            registry
                .heartbeat(&who, Timestamp::from_unix_millis(1_785_412_800_000 + tick).expect("t"))
                .expect("beat");
        })
    });

    // The baseline: the same guarded UPDATE, prepared once, on a bare connection to the
    // same file with the same pragmas.
    let bare = rusqlite::Connection::open(&path).expect("open bare");
    bare.pragma_update(None, "journal_mode", "WAL").expect("wal");
    bare.pragma_update(None, "synchronous", "NORMAL").expect("sync");
    let mut stmt = bare
        .prepare(
            "UPDATE worker_registrations SET last_heartbeat_at = ?1, ownership_state = 'owned', \
             change_seq = (SELECT coalesce(max(change_seq), 0) + 1 + (random() & 65535) \
             FROM worker_registrations) WHERE worker_identity = ?2 AND generation_id = ?3 \
             AND token_fingerprint = ?4 AND status = 'active'",
        )
        .expect("prepare");
    let fingerprint = token.fingerprint();
    group.bench_function("bare_rusqlite_update", |b| {
        b.iter(|| {
            tick += 1;
            let now = Timestamp::from_unix_millis(1_785_412_800_000 + tick).expect("t").to_string();
            let n = stmt
                .execute(rusqlite::params![
                    now,
                    who.worker_identity.as_str(),
                    who.generation_id.as_str(),
                    fingerprint
                ])
                .expect("update");
            assert_eq!(n, 1);
        })
    });
    group.finish();
}

criterion_group!(benches, heartbeat);
criterion_main!(benches);
