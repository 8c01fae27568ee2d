//! The registry conformance suite against a real PostgreSQL server, one fresh schema per
//! store, dropped with it (or, with `FLEET_TEST_POSTGRES_ISOLATION=database`, as through
//! PgBouncer in transaction pooling where no session state holds, a database of its
//! own: `scripts/through-pgbouncer.sh`). The server comes from
//! `FLEET_TEST_POSTGRES_URL`: CI sets it, and there an unreachable server fails every
//! test; without it (a machine without PostgreSQL) each case says it skipped.

use fleet_identity::Timestamp;
use fleet_registry::{Store, StoreError, Tx, WorkerCredential};
use registry_postgres::PostgresStore;

fn url() -> Option<String> {
    std::env::var("FLEET_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty())
}

/// Whether each store gets a database of its own rather than a schema.
fn by_database() -> bool {
    std::env::var("FLEET_TEST_POSTGRES_ISOLATION").is_ok_and(|v| v == "database")
}

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let query = path.split_once('?').map_or("", |(_, q)| q);
    let sep = if query.is_empty() { "" } else { "?" };
    format!("{scheme}://{authority}/{name}{sep}{query}")
}

/// A store in a schema (or database) of its own, dropped when the store is.
struct Scratch {
    store: PostgresStore,
    /// The server's URL, as the tests were given it.
    url: String,
    /// The schema or database.
    schema: String,
}

impl Scratch {
    /// The URL of the store's own database.
    fn own_url(&self) -> String {
        if by_database() { with_database(&self.url, &self.schema) } else { self.url.clone() }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.url, postgres::NoTls) {
            let drop = if by_database() {
                format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.schema)
            } else {
                format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema)
            };
            let _ = client.batch_execute(&drop);
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

    fn write_durable<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        self.store.write_durable(f)
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

    fn after_bulk_load(&mut self) -> Result<(), StoreError> {
        self.store.after_bulk_load()
    }
}

impl Scratch {
    /// A plain connection to the scratch schema, writing behind the registry's back.
    fn side_client(&self) -> postgres::Client {
        let mut client = postgres::Client::connect(&self.own_url(), postgres::NoTls).unwrap();
        if !by_database() {
            client.batch_execute(&format!("SET search_path TO {}", self.schema)).unwrap();
        }
        client
    }
}

fn fresh() -> Scratch {
    let url = url().expect("FLEET_TEST_POSTGRES_URL");
    let schema = format!("fleet_test_{}", uuid::Uuid::now_v7().simple());
    let store = if by_database() {
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("the test PostgreSQL server");
        admin.batch_execute(&format!("CREATE DATABASE {schema}")).expect("create a database");
        PostgresStore::connect(&with_database(&url, &schema))
    } else {
        PostgresStore::connect_in_schema(&url, Some(&schema))
    };
    Scratch { store: store.expect("connect to the test PostgreSQL server"), url, schema }
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

fn workflow(key: &str) -> fleet_lease::LeaseKey {
    fleet_lease::LeaseKey::new(key).unwrap()
}

fn acquire(
    registry: &mut fleet_registry::Registry<Scratch>,
    key: &str,
) -> Result<fleet_lease::FencingEpoch, StoreError> {
    let granted = registry.acquire_lease(
        &workflow(key),
        fleet_lease::LeaseKind::Workflow,
        "wkr-a",
        time::Duration::seconds(30),
        &[],
        &fleet_registry::AuditContext::default(),
    )?;
    Ok(granted.expect("granted").fencing_epoch)
}

/// A registry whose server history changed since its last grant (a failover or restore;
/// here the recorded history is moved behind its back) refuses every grant, leases and
/// registrations alike, until an operator accepts the new history; then every new
/// epoch is above the floor the acceptance set.
#[test]
fn a_changed_server_history_refuses_grants_until_accepted() {
    if url().is_none() {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    }
    use fleet_registry::StoreErrorKind;
    let scratch = fresh();
    let mut side = scratch.side_client();
    let mut registry = fleet_registry::Registry::new(scratch);
    assert_eq!(acquire(&mut registry, "workflow:one").unwrap().get(), 1);
    side.batch_execute("UPDATE server_history SET timeline = timeline + 1").unwrap();

    let refused = acquire(&mut registry, "workflow:two").unwrap_err();
    assert_eq!(refused.kind(), StoreErrorKind::NotDurable, "{refused}");
    assert!(refused.to_string().contains("server history changed"), "{refused}");
    let reg = fleet_registry::conformance::registration(
        fleet_identity::Namespace::Author,
        fleet_registry::conformance::process(100, 5000),
        "gen-a",
    );
    let token = fleet_registry::WorkerToken::from_bytes([7; 32]);
    let probe = fleet_registry::conformance::ScriptedProbe::default();
    let err = registry.register(&reg, &token, fleet_registry::conformance::at(0), &probe).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::NotDurable, "{err}");
    let status = registry.replication().unwrap().expect("PostgreSQL replicates");
    assert!(matches!(status.verdict(), fleet_registry::GrantVerdict::Refuse(_)));

    let accepted = registry.accept_server_history(1_000, "ops", "checked the old primary is gone").unwrap();
    assert_eq!(accepted.epoch_floor, 1_001);
    assert_eq!(accepted.previous.map(|h| h.timeline), Some(accepted.accepted.timeline + 1));
    assert_eq!(acquire(&mut registry, "workflow:two").unwrap().get(), 1_002);
    let row = registry.register(&reg, &token, fleet_registry::conformance::at(0), &probe).unwrap().row;
    assert_eq!(row.fencing_epoch, Some(1_002));
}

/// A grant whose COMMIT the server never answers (its session ended while the commit
/// ran: a crash, a failover) is reported as of unknown outcome with its key and the
/// epoch it may hold, never as a plain failure. The commit is held open by a deferred
/// trigger that sleeps, and the session is terminated from another.
#[test]
fn a_grant_whose_commit_goes_unanswered_is_reported_unknown() {
    if url().is_none() {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    }
    let scratch = fresh();
    let mut side = scratch.side_client();
    side.batch_execute(
        "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$; \
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON leases \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();",
    )
    .unwrap();
    let killer = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            // The simple protocol: nothing prepared, which a pooler could lose.
            let answer = side
                .simple_query(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE wait_event = 'PgSleep' AND query = 'COMMIT' AND pid <> pg_backend_pid()",
                )
                .unwrap();
            let ended = answer.iter().any(
                |m| matches!(m, postgres::SimpleQueryMessage::Row(r) if r.get(0).is_some_and(|n| n != "0")),
            );
            if ended {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
    let mut registry = fleet_registry::Registry::new(scratch);
    let err = acquire(&mut registry, "workflow:unanswered").unwrap_err();
    killer.join().unwrap();
    assert_eq!(err.kind(), fleet_registry::StoreErrorKind::OutcomeUnknown, "{err}");
    let text = err.to_string();
    assert!(text.contains("workflow:unanswered") && text.contains("fencing epoch 1"), "{text}");
}

impl Scratch {
    /// Opens the store's registry again, as another process would.
    fn connect_again(&self) -> Result<PostgresStore, StoreError> {
        if by_database() {
            PostgresStore::connect(&self.own_url())
        } else {
            PostgresStore::connect_in_schema(&self.url, Some(&self.schema))
        }
    }

    fn upgrade(&self, dry_run: bool) -> Result<fleet_registry::SchemaUpgrade, StoreError> {
        if by_database() {
            PostgresStore::upgrade(&self.own_url(), None, dry_run, true)
        } else {
            PostgresStore::upgrade(&self.url, Some(&self.schema), dry_run, true)
        }
    }
}

/// Only `registry upgrade` changes a registry's schema: a registry at the previous
/// version is refused by every other opener, naming the command; a dry run changes
/// nothing; the upgrade copies the tables first, then brings the schema up, rows kept.
#[test]
fn an_older_schema_is_refused_until_upgraded() {
    if url().is_none() {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    }
    use fleet_registry::StoreErrorKind;
    let scratch = fresh();
    let mut side = scratch.side_client();
    // Version 10 as it was.
    side.batch_execute(
        "DROP TABLE server_history; DROP TABLE fleet_schema_compatibility; \
         DROP INDEX worker_registrations_active; \
         UPDATE fleet_schema_version SET version = 10; \
         INSERT INTO instances VALUES ('inst-codex-20260730T120000Z-0123456789ab', 'codex', NULL, '2026-07-30T12:00:00.000Z', NULL);",
    )
    .unwrap();
    let refused = scratch.connect_again().unwrap_err();
    assert_eq!(refused.kind(), StoreErrorKind::OlderSchema, "{refused}");
    assert!(refused.to_string().contains("fleetctl registry upgrade"), "{refused}");

    let planned = scratch.upgrade(true).unwrap();
    assert_eq!((planned.from, planned.to, planned.steps.len()), (10, registry_postgres::SCHEMA_VERSION, 2));
    assert_eq!(
        scratch.connect_again().unwrap_err().kind(),
        StoreErrorKind::OlderSchema,
        "a dry run changes nothing"
    );

    let done = scratch.upgrade(false).unwrap();
    assert!(done.backup.is_some() && !done.dry_run, "{done:?}");
    let copied: i64 = side.query_one("SELECT count(*) FROM instances_schema_v10", &[]).unwrap().get(0);
    assert_eq!(copied, 1, "the tables were copied first");
    let mut registry = fleet_registry::Registry::new(scratch.connect_again().unwrap());
    assert_eq!(registry.instances().unwrap().len(), 1, "the rows are kept");
}

/// A newer schema that says builds of this one's version may still use it is used;
/// one that says otherwise is refused naming both versions, at open and to a session
/// opened before that asks.
#[test]
fn a_newer_schema_is_used_only_where_it_says_this_build_may() {
    if url().is_none() {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    }
    let scratch = fresh();
    let mut side = scratch.side_client();
    let next = registry_postgres::SCHEMA_VERSION + 1;
    side.batch_execute(&format!(
        "UPDATE fleet_schema_version SET version = {next}; \
         UPDATE fleet_schema_compatibility SET oldest_build = {}",
        registry_postgres::SCHEMA_VERSION
    ))
    .unwrap();
    let mut registry = fleet_registry::Registry::new(scratch.connect_again().unwrap());
    assert!(registry.workers().unwrap().is_empty());
    registry.check_schema().expect("an open session may use it");
    side.batch_execute(&format!("UPDATE fleet_schema_compatibility SET oldest_build = {next}")).unwrap();
    let err = scratch.connect_again().unwrap_err();
    assert_eq!(err.kind(), fleet_registry::StoreErrorKind::NewerSchema, "{err}");
    assert!(err.to_string().contains(&format!("version {next}")), "{err}");
    // A session opened before is told so when it asks (a worker asks once per TTL).
    let err = registry.check_schema().unwrap_err();
    assert_eq!(err.kind(), fleet_registry::StoreErrorKind::NewerSchema, "{err}");
}

/// An import leaves the planner statistics of what it loaded (`ANALYZE`): a server whose
/// autovacuum has not run yet otherwise plans the first reads of a fresh import blind,
/// and a live read beside a large history then cost a whole-table plan and a JIT
/// compilation (docs/PERFORMANCE.md, "History").
#[test]
fn an_import_leaves_the_tables_analyzed() {
    if url().is_none() {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    }
    let scratch = fresh();
    let mut side = scratch.side_client();
    let analyzed = |side: &mut postgres::Client| -> f32 {
        side.query_one("SELECT reltuples FROM pg_class WHERE oid = 'worker_registrations'::regclass", &[])
            .unwrap()
            .get(0)
    };
    use fleet_registry::conformance as c;
    let mut registry = fleet_registry::Registry::new(scratch.connect_again().unwrap());
    let registration = c::registration(fleet_identity::Namespace::Author, c::process(100, 5000), "gen-a");
    let token = fleet_registry::WorkerToken::from_bytes([1; 32]);
    let registered =
        registry.register(&registration, &token, c::at(0), &c::ScriptedProbe::default()).unwrap();
    assert!(analyzed(&mut side) < 0.0, "a registration analyzes nothing");
    let rows: Vec<_> = (0..3)
        .map(|i| {
            let mut row = registered.row.clone();
            row.worker_identity = format!("wkr-imported-{i}").parse().unwrap();
            row
        })
        .collect();
    registry
        .import(&fleet_registry::RegistryDump { instances: Vec::new(), worker_registrations: rows })
        .unwrap();
    assert_eq!(analyzed(&mut side), 4.0, "the import analyzed the table it loaded");
}
