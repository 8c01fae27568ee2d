//! The registry conformance suite against a real PostgreSQL server, one fresh schema per
//! store, dropped with it. The server comes from `FLEET_TEST_POSTGRES_URL`: CI sets it,
//! and there an unreachable server fails every test; without it (a machine without
//! PostgreSQL) each case says it skipped.

use fleet_identity::Timestamp;
use fleet_registry::{Store, StoreError, Tx, WorkerCredential};
use registry_postgres::PostgresStore;

fn url() -> Option<String> {
    std::env::var("FLEET_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty())
}

/// A store in a schema of its own, dropped when the store is.
struct Scratch {
    store: PostgresStore,
    url: String,
    schema: String,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.url, postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        }
    }
}

impl Store for Scratch {
    fn write<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        self.store.write(f)
    }

    fn read<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        self.store.read(f)
    }

    fn touch_heartbeat(
        &mut self,
        who: &WorkerCredential,
        now: Timestamp,
        claim: fleet_registry::Claim,
    ) -> Result<bool, StoreError> {
        self.store.touch_heartbeat(who, now, claim)
    }

    fn change_marker(&mut self) -> Result<Option<u128>, StoreError> {
        self.store.change_marker()
    }
}

impl Scratch {
    /// A plain connection to the scratch schema, writing behind the registry's back.
    fn side_client(&self) -> postgres::Client {
        let mut client = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        client.batch_execute(&format!("SET search_path TO {}", self.schema)).unwrap();
        client
    }
}

fn fresh() -> Scratch {
    let url = url().expect("FLEET_TEST_POSTGRES_URL");
    let schema = format!("fleet_test_{}", uuid::Uuid::now_v7().simple());
    let store =
        PostgresStore::connect_in_schema(&url, Some(&schema)).expect("connect to the test PostgreSQL server");
    Scratch { store, url, schema }
}

fleet_registry::registry_conformance!(skip_unless = crate::url().is_some(), crate::fresh());

/// A value written behind the registry's back that does not validate is reported as
/// corruption naming the row and the column, for every kind of column.
#[test]
fn a_corrupt_value_in_a_row_is_reported_with_its_column() {
    if url().is_none() {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    }
    for (column, value) in [
        ("pid", "-5"),
        ("heartbeat_ttl_s", "-1"),
        ("fencing_epoch", "-1"),
        ("namespace", "'wizard'"),
        ("registered_at", "'yesterday'"),
        ("host_id", "'not hex'"),
    ] {
        let scratch = fresh();
        let mut client = scratch.side_client();
        client
            .batch_execute(
                "INSERT INTO worker_registrations (worker_identity, namespace, status, registered_at) \
                 VALUES ('w1', 'author', 'active', '2026-07-30T12:00:00.000Z')",
            )
            .unwrap();
        client.batch_execute(&format!("UPDATE worker_registrations SET {column} = {value}")).unwrap();
        let err = fleet_registry::Registry::new(scratch).workers().unwrap_err();
        assert_eq!(err.kind(), fleet_registry::StoreErrorKind::Corrupt, "{column}: {err}");
        assert!(err.to_string().contains("w1") && err.to_string().contains(column), "{column}: {err}");
    }
}

/// A reader slow between the statements of its read-only transaction (a starved process
/// decoding a large read on a busy host) is not ended by the server at the write
/// transaction's 5 s idle bound: a read holds no lock a writer waits on. A write idle
/// that long still is (`postgres_backend.rs::a_writer_paused_holding_the_write_lock_blocks_others_only_briefly`).
#[test]
fn a_read_idle_past_the_write_bound_still_completes() {
    if url().is_none() {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    }
    let mut scratch = fresh();
    let read = scratch.read(|tx| {
        let rows = tx.workers()?;
        std::thread::sleep(std::time::Duration::from_secs(6));
        Ok::<_, StoreError>((rows, tx.store_now()?))
    });
    assert!(read.is_ok(), "{read:?}");
}

/// Rows are decoded as they arrive; a bad one amid many fails the read, naming it, and
/// the rows after it are still read off the wire: the same connection answers the next
/// read whole.
#[test]
fn a_corrupt_row_amid_many_fails_the_read_and_the_connection_answers_the_next() {
    if url().is_none() {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    }
    let scratch = fresh();
    let mut client = scratch.side_client();
    client
        .batch_execute(
            "INSERT INTO worker_registrations (worker_identity, namespace, status, registered_at) \
             SELECT 'w' || lpad(n::text, 5, '0'), 'author', 'active', '2026-07-30T12:00:00.000Z' \
             FROM generate_series(1, 5000) AS n; \
             UPDATE worker_registrations SET namespace = 'wizard' WHERE worker_identity = 'w02500'",
        )
        .unwrap();
    let mut registry = fleet_registry::Registry::new(scratch);
    let err = registry.workers().unwrap_err();
    assert_eq!(err.kind(), fleet_registry::StoreErrorKind::Corrupt, "{err}");
    assert!(err.to_string().contains("w02500"), "{err}");
    client
        .batch_execute(
            "UPDATE worker_registrations SET namespace = 'author' WHERE worker_identity = 'w02500'",
        )
        .unwrap();
    let workers = registry.workers().unwrap();
    assert_eq!(workers.len(), 5000);
    assert_eq!(workers[2499].worker_identity.as_str(), "w02500");
}
