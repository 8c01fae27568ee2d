//! Uncontended lease operations through the registry against a bare single-row CAS
//! `UPDATE` on the same file, in the same run. Each iteration commits.

use criterion::{Criterion, criterion_group, criterion_main};
use fleet_lease::{LeaseKey, LeaseKind};
use fleet_registry::OpenMode;
use fleet_registry::{AuditContext, Registry};
use registry_sqlite::SqliteStore;

fn leases(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("registry.sqlite3");
    let mut registry = Registry::new(SqliteStore::open(&path, OpenMode::CreateIfMissing).expect("open"));
    let ctx = AuditContext::default();
    let ttl = time::Duration::seconds(30);
    let mut group = c.benchmark_group("lease");

    let key = LeaseKey::new("workflow:bench-cycle").expect("key");
    group.bench_function("acquire_release_cycle", |b| {
        b.iter(|| {
            let lease = registry
                .acquire_lease(&key, LeaseKind::Workflow, "w", ttl, &[], &ctx)
                .expect("store")
                .expect("acquired");
            registry.release_lease(&key, &lease.holder(), &ctx).expect("store").expect("released");
        })
    });

    let key = LeaseKey::new("workflow:bench-renew").expect("key");
    let lease = registry
        .acquire_lease(&key, LeaseKind::Workflow, "w", ttl, &[], &ctx)
        .expect("store")
        .expect("acquired");
    let holder = lease.holder();
    group.bench_function("renew", |b| {
        b.iter(|| registry.renew_lease(&key, &holder, ttl, &ctx).expect("store").expect("renewed"))
    });

    // The baseline: a bare compare-and-swap on one lease row, no audit, same file.
    let bare = rusqlite::Connection::open(&path).expect("bare");
    bare.pragma_update(None, "synchronous", "NORMAL").expect("sync");
    let mut stmt = bare
        .prepare(
            "UPDATE leases SET fencing_epoch = fencing_epoch + 1, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') \
             WHERE lease_key = ?1 AND fencing_epoch = ?2",
        )
        .expect("prepare");
    let mut epoch: i64 = bare
        .query_row("SELECT fencing_epoch FROM leases WHERE lease_key = 'workflow:bench-renew'", [], |r| {
            r.get(0)
        })
        .expect("epoch");
    group.bench_function("bare_single_row_cas_update", |b| {
        b.iter(|| {
            assert_eq!(stmt.execute(rusqlite::params!["workflow:bench-renew", epoch]).expect("update"), 1);
            epoch += 1;
        })
    });
    // The same swap committed durably, as lease transactions commit: the price of
    // synchronous = FULL on this disk.
    bare.pragma_update(None, "synchronous", "FULL").expect("sync");
    group.bench_function("bare_single_row_cas_update_synchronous_full", |b| {
        b.iter(|| {
            assert_eq!(stmt.execute(rusqlite::params!["workflow:bench-renew", epoch]).expect("update"), 1);
            epoch += 1;
        })
    });
    group.finish();
}

criterion_group!(benches, leases);
criterion_main!(benches);
