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
    let cas = rusqlite::Connection::open(&path).expect("bare");
    cas.pragma_update(None, "synchronous", "NORMAL").expect("sync");
    let mut stmt = cas
        .prepare(
            "UPDATE leases SET fencing_epoch = fencing_epoch + 1, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') \
             WHERE lease_key = ?1 AND fencing_epoch = ?2",
        )
        .expect("prepare");
    let mut epoch: i64 = cas
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
    cas.pragma_update(None, "synchronous", "FULL").expect("sync");
    group.bench_function("bare_single_row_cas_update_synchronous_full", |b| {
        b.iter(|| {
            assert_eq!(stmt.execute(rusqlite::params!["workflow:bench-renew", epoch]).expect("update"), 1);
            epoch += 1;
        })
    });

    // The floor for renew: the same four statements in one durable `BEGIN IMMEDIATE`
    // transaction, written with bare rusqlite: the store's clock, the read of the row,
    // the whole-row compare-and-swap, and the audit insert.
    let columns = fleet_lease::LEASE_COLUMNS;
    let n = columns.len();
    let set: Vec<String> = columns.iter().enumerate().map(|(i, c)| format!("{c} = ?{}", i + 1)).collect();
    let guard: Vec<String> =
        columns.iter().enumerate().map(|(i, c)| format!("{c} IS ?{}", n + i + 1)).collect();
    let swap = format!("UPDATE leases SET {} WHERE {}", set.join(", "), guard.join(" AND "));
    let select = format!("SELECT {} FROM leases WHERE lease_key = ?1", columns.join(", "));
    let mut bare = rusqlite::Connection::open(&path).expect("bare");
    bare.pragma_update(None, "synchronous", "FULL").expect("sync");
    group.bench_function("bare_four_statement_renew_transaction", |b| {
        b.iter(|| {
            let tx = bare.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).expect("begin");
            let now: String = tx
                .prepare_cached("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")
                .and_then(|mut s| s.query_row([], |r| r.get(0)))
                .expect("clock");
            let old: Vec<rusqlite::types::Value> = tx
                .prepare_cached(&select)
                .and_then(|mut s| {
                    s.query_row(["workflow:bench-renew"], |r| (0..n).map(|i| r.get(i)).collect())
                })
                .expect("read");
            let mut new = old.clone();
            for i in [7, 8, 10] {
                new[i] = rusqlite::types::Value::Text(now.clone());
            }
            let changed = tx
                .prepare_cached(&swap)
                .and_then(|mut s| s.execute(rusqlite::params_from_iter(new.iter().chain(&old))))
                .expect("swap");
            assert_eq!(changed, 1);
            tx.prepare_cached(
                "INSERT INTO lease_audit_log (event, outcome, reason, lease_key, kind, identity, binding, \
                 connector, fencing_epoch, correlation_id, at) VALUES ('renew', 'renewed', NULL, ?1, \
                 'workflow', 'w', NULL, NULL, ?2, NULL, ?3)",
            )
            .and_then(|mut s| s.execute(rusqlite::params!["workflow:bench-renew", old[4], now]))
            .expect("audit");
            tx.commit().expect("commit");
        })
    });
    group.finish();
}

criterion_group!(benches, leases);
criterion_main!(benches);
