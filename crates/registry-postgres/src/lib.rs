//! The PostgreSQL backend of the registry, for fleets that span hosts. It implements the
//! same `Store` and `Tx` traits as the SQLite backend and passes the same conformance
//! suite; the rules stay in `fleet-registry`.
//!
//! Writers are serialised by a transaction-scoped advisory lock taken as the first
//! statement of every write transaction, the counterpart of SQLite's `BEGIN IMMEDIATE`;
//! readers use a read-only repeatable-read transaction, one consistent view. Times are
//! stored as the registry's canonical RFC 3339 text, so both backends hold the same
//! values; the store's clock is the server's `clock_timestamp()`.
//!
//! ```no_run
//! use fleet_registry::Registry;
//! use registry_postgres::PostgresStore;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The URL's password, if any, is never printed: errors and logs name the server only.
//! let mut registry = Registry::new(PostgresStore::connect("postgres://fleet@db.internal/fleet")?);
//! let fleet = registry.live()?;
//! println!("{} rows in the live fleet", fleet.worker_registrations.len());
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]
// Store crates convert between Rust and SQL integers; every such cast must be checked.
#![warn(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)]

mod bounded;
mod errors;
mod heartbeat;
mod replication;
mod rows;
mod schema;
mod session;
mod tls;

pub use schema::SCHEMA_VERSION;
pub use session::{ANSWER_MARGIN, CONNECT_DEADLINE};

use bounded::{Client, Transaction};
use errors::commit_error;
pub(crate) use errors::map_error;
use fleet_identity::{ClientInstanceId, Namespace, Timestamp, WorkerIdentity};
use fleet_lease::{LeaseKey, LeaseKind, LeaseRecord};
use fleet_registry::{
    AuditEntry, Claim, InstanceRecord, Store, StoreError, StoreErrorKind, Tx, WorkerCredential, WorkerRow,
};
use schema::missing_id;
use session::connect_within;
use tokio_postgres::IsolationLevel;

/// A registry in a PostgreSQL database.
pub struct PostgresStore {
    client: Client,
    /// The longest any one round trip waits, as the session's statement timeout sets it.
    default_deadline: std::time::Duration,
    /// The registry's id, read once at connect (it never changes).
    registry_id: fleet_registry::RegistryId,
    /// The advisory lock every write transaction holds.
    write_lock: WriteLock,
}

/// How a write transaction begins.
#[derive(Debug, Clone)]
struct WriteLock {
    /// The advisory lock's key, the registry's id: two registries (two schemas of one
    /// database) never wait on each other.
    key: i64,
    /// What each write sets for itself before it takes the lock (`Timeouts::for_writes`).
    settings: Vec<(&'static str, &'static str)>,
    /// How long a write waits for a lock when a caller bounded its calls (see
    /// `Store::set_call_deadline`): under that bound, so the server gives up the wait
    /// and says so (busy) before the client would have to drop the connection.
    lock_wait: Option<std::time::Duration>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PostgresStore(..)")
    }
}

/// The launches that have an active row, from the index of active rows.
const LIVE_LAUNCHES: &str = "SELECT DISTINCT client_instance_id FROM worker_registrations \
     WHERE status = 'active' AND client_instance_id IS NOT NULL";

/// The change marker's statement (see `Store::change_marker`).
static MARKER: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let digest = |table: &str| {
        format!(
            "(SELECT count(*) FROM {table}), (SELECT sum(hashtextextended(c::text || x::text, 0)) FROM {table})"
        )
    };
    format!(
        "WITH live AS ({LIVE_LAUNCHES}), \
         live_rows AS (SELECT ctid AS c, xmin AS x FROM worker_registrations WHERE status = 'active' \
           UNION ALL SELECT history.* FROM live CROSS JOIN LATERAL \
           (SELECT ctid AS c, xmin AS x FROM worker_registrations \
            WHERE client_instance_id = live.client_instance_id AND status <> 'active' OFFSET 0) AS history), \
         live_ledger AS (SELECT ledger.* FROM live CROSS JOIN LATERAL \
           (SELECT ctid AS c, xmin AS x FROM instances \
            WHERE client_instance_id = live.client_instance_id OFFSET 0) AS ledger) \
         SELECT md5(concat_ws(' ', {}, {}))",
        digest("live_rows"),
        digest("live_ledger")
    )
});

impl PostgresStore {
    /// `fleetctl registry upgrade`: brings the registry at `url` (in `schema`, when
    /// given) to this build's schema, copying each of its tables first
    /// (`TABLE_schema_vN`) unless `backup` is false; with `dry_run`, only says what it
    /// would do. The one way a registry's schema changes: every other connection refuses
    /// an older schema.
    pub fn upgrade(
        url: &str,
        schema: Option<&str>,
        dry_run: bool,
        backup: bool,
    ) -> Result<fleet_registry::SchemaUpgrade, StoreError> {
        let (config, tls) = tls::prepare(url)?;
        let (mut client, opened) = connect_within(&config, tls, schema)?;
        if opened.version == 0 {
            return Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "there is no registry at this PostgreSQL URL (run `fleetctl registry init`)",
            ));
        }
        schema::upgrade(&mut client, dry_run, backup)
    }

    /// Connects to `url` and migrates the schema on the connection's search path.
    pub fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_in_schema(url, None)
    }

    /// Connects and works inside `schema` (created if missing): one database can hold
    /// several registries, as tests do.
    pub fn connect_in_schema(url: &str, schema: Option<&str>) -> Result<Self, StoreError> {
        if let Some(schema) = schema
            && (schema.is_empty() || !schema.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        {
            return Err(StoreError::invalid(format!("schema name {schema:?} must be [A-Za-z0-9_]+")));
        }
        let (config, tls) = tls::prepare(url)?;
        let (mut client, opened) = connect_within(&config, tls, schema)?;
        // A database without a registry gets one; an existing registry's schema is
        // never changed here (`upgrade` does that), so readers take no migration lock.
        let registry_id = if opened.version == 0 {
            schema::create(&mut client)?
        } else {
            schema::check_version(&mut client, opened.version)?;
            opened.registry_id.ok_or_else(missing_id)?
        };
        let registry_id = fleet_registry::RegistryId::new(registry_id)?;
        let write_lock = WriteLock {
            key: registry_id.lock_key(),
            settings: opened.timeouts.for_writes(),
            lock_wait: None,
        };
        let default_deadline = client.deadline();
        Ok(Self { client, default_deadline, registry_id, write_lock })
    }
}

/// A write transaction holding the registry's write lock. It runs at READ COMMITTED
/// whatever the server's default: each statement then reads a snapshot taken after the
/// lock is held, so writes serialize on the lock and never fail with a serialization
/// error (which a stricter default raises for a snapshot taken while waiting for it).
fn locked_write<'c>(client: &'c mut Client, lock: &WriteLock) -> Result<Transaction<'c>, StoreError> {
    let mut tx = client.transaction(IsolationLevel::ReadCommitted, false).map_err(map_error)?;
    // One round trip: this transaction's own bounds, then the lock.
    let mut settings: Vec<String> =
        lock.settings.iter().map(|(name, value)| format!("set_config('{name}', '{value}', true)")).collect();
    if let Some(wait) = lock.lock_wait {
        settings.push(format!("set_config('lock_timeout', '{}ms', true)", wait.as_millis().max(1)));
    }
    settings.push("pg_advisory_xact_lock($1)".to_owned());
    tx.execute(&format!("SELECT {}", settings.join(", ")), &[&lock.key]).map_err(map_error)?;
    Ok(tx)
}

struct PgTx<'a, 'b> {
    tx: &'a mut Transaction<'b>,
    registry_id: &'a fleet_registry::RegistryId,
}

impl Tx for PgTx<'_, '_> {
    /// A heartbeat in the form Fleetward writes (`2026-07-30T12:00:00.000Z`) sorts as
    /// text in time order, so it is compared with each row's cutoff (`now` less its TTL)
    /// as text, exactly; any other form is passed on for the sweep to judge. No row's
    /// text is cast, so no value in a row can fail the statement.
    fn sweep_candidates(&mut self, now: Timestamp) -> Result<(Vec<WorkerRow>, usize), StoreError> {
        let active: i64 = self
            .tx
            .query_one("SELECT count(*) FROM worker_registrations WHERE status = 'active'", &[])
            .map_err(map_error)?
            .get(0);
        let sql = format!(
            "SELECT {} FROM worker_registrations \
             WHERE status = 'active' AND ownership_state IS DISTINCT FROM 'stale' \
             AND heartbeat_ttl_s IS NOT NULL AND last_heartbeat_at IS NOT NULL \
             AND (last_heartbeat_at !~ '^[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}T[0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}\\.[0-9]{{3}}Z$' \
                  OR last_heartbeat_at COLLATE \"C\" < to_char(($1::text::timestamptz - make_interval(secs => heartbeat_ttl_s)) \
                                                 AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'))",
            *rows::LIST
        );
        let candidates = self
            .tx
            .query(&sql, &[&now.to_string()])
            .map_err(map_error)?
            .iter()
            .map(rows::read_worker)
            .collect::<Result<_, _>>()?;
        Ok((candidates, usize::try_from(active).unwrap_or(0)))
    }

    fn workers(&mut self) -> Result<Vec<WorkerRow>, StoreError> {
        // In identity order, by the bytes: sorted here, where it costs a millisecond at
        // 10 000 rows. The server sorted by a collation no index has, on disk past its
        // `work_mem` (23 ms of a 24 ms query at 10 000 rows).
        let sql = format!("SELECT {} FROM worker_registrations", *rows::LIST);
        let mut workers = self.tx.query_map(&sql, rows::read_worker).map_err(map_error)??;
        workers.sort_unstable_by(|a, b| a.worker_identity.cmp(&b.worker_identity));
        Ok(workers)
    }

    /// Compared and ordered by the bytes (`COLLATE "C"`), as every other reader orders
    /// identities, whatever collation the database has.
    fn workers_page(
        &mut self,
        after: Option<&WorkerIdentity>,
        limit: usize,
    ) -> Result<Vec<WorkerRow>, StoreError> {
        let sql = format!(
            "SELECT {} FROM worker_registrations WHERE worker_identity COLLATE \"C\" > $1 \
             ORDER BY worker_identity COLLATE \"C\" LIMIT $2",
            *rows::LIST
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let after = after.map_or("", |a| a.as_str());
        self.tx.query(&sql, &[&after, &limit]).map_err(map_error)?.iter().map(rows::read_worker).collect()
    }

    /// The active rows from their index, then the rest of each of their launches from
    /// the slot index, one launch at a time (a lateral subquery the planner cannot
    /// flatten: without statistics, after an import, it scanned the whole table to join
    /// the launches); sorted here, as every row is.
    fn live_workers(&mut self) -> Result<Vec<WorkerRow>, StoreError> {
        let sql = format!(
            "SELECT {cols} FROM worker_registrations WHERE status = 'active' \
             UNION ALL SELECT history.* FROM ({LIVE_LAUNCHES}) AS live CROSS JOIN LATERAL \
             (SELECT {cols} FROM worker_registrations \
              WHERE client_instance_id = live.client_instance_id AND status <> 'active' OFFSET 0) AS history",
            cols = *rows::LIST
        );
        let mut workers = self.tx.query_map(&sql, rows::read_worker).map_err(map_error)??;
        workers.sort_unstable_by(|a, b| a.worker_identity.cmp(&b.worker_identity));
        Ok(workers)
    }

    fn live_instances(&mut self) -> Result<Vec<InstanceRecord>, StoreError> {
        let sql = format!(
            "SELECT ledger.* FROM ({LIVE_LAUNCHES}) AS live CROSS JOIN LATERAL \
             (SELECT {} FROM instances WHERE client_instance_id = live.client_instance_id OFFSET 0) AS ledger",
            *rows::INSTANCE_LIST
        );
        let mut instances = self.tx.query_map(&sql, rows::read_instance).map_err(map_error)??;
        instances.sort_unstable_by(|a, b| a.client_instance_id.as_str().cmp(b.client_instance_id.as_str()));
        Ok(instances)
    }

    fn worker(&mut self, id: &WorkerIdentity) -> Result<Option<WorkerRow>, StoreError> {
        let sql = format!("SELECT {} FROM worker_registrations WHERE worker_identity = $1", *rows::LIST);
        self.tx
            .query_opt(&sql, &[&id.as_str()])
            .map_err(map_error)?
            .as_ref()
            .map(rows::read_worker)
            .transpose()
    }

    fn slot(&mut self, instance: &str, namespace: Namespace) -> Result<Vec<WorkerRow>, StoreError> {
        let sql = format!(
            "SELECT {} FROM worker_registrations WHERE client_instance_id = $1 AND namespace = $2 \
             ORDER BY worker_identity COLLATE \"C\"",
            *rows::LIST
        );
        self.tx
            .query(&sql, &[&instance, &namespace.as_str()])
            .map_err(map_error)?
            .iter()
            .map(rows::read_worker)
            .collect()
    }

    fn insert_worker(&mut self, row: &WorkerRow) -> Result<(), StoreError> {
        let values = rows::WorkerValues::of(row);
        self.tx.execute(rows::insert_sql(), &values.params()).map_err(map_error)?;
        Ok(())
    }

    /// Every entry in one statement, one array parameter per column.
    fn insert_instances(&mut self, records: &[InstanceRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = records.iter().map(|r| r.client_instance_id.as_str()).collect();
        let types: Vec<&str> = records.iter().map(|r| r.client_type.as_str()).collect();
        let runs: Vec<Option<&str>> =
            records.iter().map(|r| r.fleet_run_id.as_ref().map(|f| f.as_str())).collect();
        let minted: Vec<String> = records.iter().map(|r| r.minted_at.to_string()).collect();
        let hosts: Vec<Option<&str>> =
            records.iter().map(|r| r.host_id.as_ref().map(|h| h.as_str())).collect();
        self.tx
            .execute(
                "INSERT INTO instances (client_instance_id, client_type, fleet_run_id, minted_at, host_id) \
                 SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[])",
                &[&ids, &types, &runs, &minted, &hosts],
            )
            .map_err(map_error)?;
        Ok(())
    }

    /// Every row in one statement, one array parameter per column: an import of 10 000
    /// rows is one round trip, not 10 000.
    fn insert_workers(&mut self, rows: &[WorkerRow]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let columns = rows::worker_columns(rows);
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            columns.iter().map(|c| c.as_ref()).collect();
        self.tx.execute(rows::insert_unnest_sql(), &params).map_err(|e| {
            let duplicate = e.as_db_error().and_then(|db| db.detail().map(str::to_owned));
            let err = map_error(e);
            match (err.kind(), duplicate) {
                (StoreErrorKind::Conflict, Some(detail)) => {
                    StoreError::conflict(format!("a worker of the import is already registered: {detail}"))
                }
                _ => err,
            }
        })?;
        Ok(())
    }

    fn replace_worker(&mut self, expected: &WorkerRow, new: &WorkerRow) -> Result<bool, StoreError> {
        let (new, old) = (rows::WorkerValues::of(new), rows::WorkerValues::of(expected));
        let mut params = new.params();
        params.extend(old.params());
        Ok(self.tx.execute(rows::replace_sql(), &params).map_err(map_error)? == 1)
    }

    fn delete_worker(&mut self, expected: &WorkerRow) -> Result<bool, StoreError> {
        let old = rows::WorkerValues::of(expected);
        Ok(self.tx.execute(rows::delete_sql(), &old.params()).map_err(map_error)? == 1)
    }

    fn instances(&mut self) -> Result<Vec<InstanceRecord>, StoreError> {
        // Sorted here, as the workers are.
        let sql = format!("SELECT {} FROM instances", *rows::INSTANCE_LIST);
        let mut instances = self.tx.query_map(&sql, rows::read_instance).map_err(map_error)??;
        instances.sort_unstable_by(|a, b| a.client_instance_id.as_str().cmp(b.client_instance_id.as_str()));
        Ok(instances)
    }

    fn instance(&mut self, id: &ClientInstanceId) -> Result<Option<InstanceRecord>, StoreError> {
        let sql = format!("SELECT {} FROM instances WHERE client_instance_id = $1", *rows::INSTANCE_LIST);
        self.tx
            .query_opt(&sql, &[&id.as_str()])
            .map_err(map_error)?
            .as_ref()
            .map(rows::read_instance)
            .transpose()
    }

    fn insert_instance(&mut self, record: &InstanceRecord) -> Result<(), StoreError> {
        self.tx
            .execute(
                "INSERT INTO instances (client_instance_id, client_type, fleet_run_id, minted_at, host_id) \
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &record.client_instance_id.as_str(),
                    &record.client_type.as_str(),
                    &record.fleet_run_id.as_ref().map(|f| f.as_str()),
                    &record.minted_at.to_string(),
                    &record.host_id.as_ref().map(|h| h.as_str()),
                ],
            )
            .map_err(|e| {
                let err = map_error(e);
                if err.kind() == StoreErrorKind::Conflict {
                    StoreError::conflict(format!(
                        "instance {} is already recorded",
                        record.client_instance_id
                    ))
                } else {
                    err
                }
            })?;
        Ok(())
    }

    fn registry_id(&mut self) -> Result<fleet_registry::RegistryId, StoreError> {
        Ok(self.registry_id.clone())
    }

    fn high_water(&mut self, scope: &str) -> Result<u64, StoreError> {
        let epoch: Option<i64> = self
            .tx
            .query_opt("SELECT epoch FROM fencing_high_water WHERE scope = $1", &[&scope])
            .map_err(map_error)?
            .map(|r| r.get(0));
        Ok(epoch.map_or(0, i64::cast_unsigned))
    }

    fn high_waters(&mut self) -> Result<Vec<(String, u64)>, StoreError> {
        let rows = self
            .tx
            .query("SELECT scope, epoch FROM fencing_high_water ORDER BY scope COLLATE \"C\"", &[])
            .map_err(map_error)?;
        Ok(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1).cast_unsigned())).collect())
    }

    fn raise_high_water(&mut self, scope: &str, epoch: u64) -> Result<(), StoreError> {
        let epoch = i64::try_from(epoch).map_err(|_| StoreError::invalid("a fencing epoch past i64"))?;
        self.tx
            .execute(
                "INSERT INTO fencing_high_water (scope, epoch) VALUES ($1, $2) \
                 ON CONFLICT (scope) DO UPDATE SET epoch = greatest(fencing_high_water.epoch, excluded.epoch)",
                &[&scope, &epoch],
            )
            .map_err(map_error)?;
        Ok(())
    }

    /// Every mark in one statement (a restore's batch is one round trip, not one per row).
    fn raise_high_waters(&mut self, marks: &[(String, u64)]) -> Result<(), StoreError> {
        if marks.is_empty() {
            return Ok(());
        }
        let scopes: Vec<&str> = marks.iter().map(|(scope, _)| scope.as_str()).collect();
        let epochs = marks
            .iter()
            .map(|(_, epoch)| {
                i64::try_from(*epoch).map_err(|_| StoreError::invalid("a fencing epoch past i64"))
            })
            .collect::<Result<Vec<i64>, _>>()?;
        self.tx
            .execute(
                "INSERT INTO fencing_high_water (scope, epoch) SELECT * FROM unnest($1::TEXT[], $2::BIGINT[]) \
                 ON CONFLICT (scope) DO UPDATE SET epoch = greatest(fencing_high_water.epoch, excluded.epoch)",
                &[&scopes, &epochs],
            )
            .map_err(map_error)?;
        Ok(())
    }

    fn store_now(&mut self) -> Result<Timestamp, StoreError> {
        let text: String = self
            .tx
            .query_one(
                "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')",
                &[],
            )
            .map_err(map_error)?
            .get(0);
        Timestamp::parse(&text).map_err(|e| StoreError::corrupt(format!("store clock: {e}")))
    }

    fn replication(&mut self) -> Result<Option<fleet_registry::ReplicationStatus>, StoreError> {
        replication::status(self.tx).map(Some)
    }

    fn set_replication_policy(
        &mut self,
        policy: fleet_registry::ReplicationPolicy,
    ) -> Result<(), StoreError> {
        replication::set_policy(self.tx, policy)
    }

    fn accept_server_history(
        &mut self,
        accepted_by: &str,
        reason: &str,
    ) -> Result<(Option<fleet_registry::ServerHistory>, fleet_registry::ServerHistory), StoreError> {
        replication::accept(self.tx, accepted_by, reason)
    }

    fn host_fences(&mut self) -> Result<Vec<fleet_registry::HostFence>, StoreError> {
        let sql = fleet_registry::columns::host_fences_sql();
        self.tx.query(&sql, &[]).map_err(map_error)?.iter().map(rows::read_host_fence).collect()
    }

    fn put_host_fence(&mut self, fence: &fleet_registry::HostFence) -> Result<(), StoreError> {
        let values = rows::host_fence_values(fence);
        self.tx.execute(rows::put_host_fence_sql(), &values.params()).map_err(map_error)?;
        Ok(())
    }

    fn host_boots(&mut self) -> Result<Vec<fleet_registry::HostBoot>, StoreError> {
        let sql = fleet_registry::columns::host_boots_sql();
        self.tx.query(&sql, &[]).map_err(map_error)?.iter().map(rows::read_host_boot).collect()
    }

    fn note_host_boot(&mut self, boot: &fleet_registry::HostBoot) -> Result<(), StoreError> {
        let values = rows::host_boot_values(boot);
        self.tx.execute(rows::note_host_boot_sql(), &values.params()).map_err(map_error)?;
        Ok(())
    }

    fn lease(&mut self, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError> {
        let sql = format!("SELECT {} FROM leases WHERE lease_key = $1", *rows::LEASE_LIST);
        self.tx
            .query_opt(&sql, &[&key.as_str()])
            .map_err(map_error)?
            .as_ref()
            .map(rows::read_lease)
            .transpose()
    }

    fn leases(&mut self, kind: Option<LeaseKind>) -> Result<Vec<LeaseRecord>, StoreError> {
        let sql = format!(
            "SELECT {} FROM leases WHERE $1::TEXT IS NULL OR kind = $1 ORDER BY lease_key COLLATE \"C\"",
            *rows::LEASE_LIST
        );
        self.tx
            .query(&sql, &[&kind.map(LeaseKind::as_str)])
            .map_err(map_error)?
            .iter()
            .map(rows::read_lease)
            .collect()
    }

    fn put_lease(&mut self, expected: Option<&LeaseRecord>, new: &LeaseRecord) -> Result<bool, StoreError> {
        let new_values = rows::LeaseValues::of(new);
        let changed = match expected {
            None => self.tx.execute(rows::lease_insert_sql(), &new_values.params()).map_err(map_error)?,
            Some(old) => {
                let old_values = rows::LeaseValues::of(old);
                let mut params = new_values.params();
                params.extend(old_values.params());
                self.tx.execute(rows::lease_replace_sql(), &params).map_err(map_error)?
            }
        };
        Ok(changed == 1)
    }

    fn append_audit(&mut self, e: &AuditEntry) -> Result<(), StoreError> {
        let epoch = e.fencing_epoch.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
        self.tx
            .execute(
                "INSERT INTO lease_audit_log (event, outcome, reason, lease_key, kind, identity, binding, \
                 connector, fencing_epoch, correlation_id, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                &[
                    &e.event,
                    &e.outcome,
                    &e.reason,
                    &e.lease_key,
                    &e.kind.as_str(),
                    &e.identity,
                    &e.binding,
                    &e.connector,
                    &epoch,
                    &e.correlation_id,
                    &e.at.to_string(),
                ],
            )
            .map_err(map_error)?;
        Ok(())
    }

    /// Every entry in one statement, one array parameter per column (a restore's batch
    /// is one round trip); `WITH ORDINALITY` keeps their order, so ids follow it.
    fn append_audits(&mut self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let text =
            |f: fn(&AuditEntry) -> Option<&str>| -> Vec<Option<&str>> { entries.iter().map(f).collect() };
        let (events, outcomes, reasons) =
            (text(|e| Some(&e.event)), text(|e| Some(&e.outcome)), text(|e| e.reason.as_deref()));
        let (keys, kinds, identities) =
            (text(|e| Some(&e.lease_key)), text(|e| Some(e.kind.as_str())), text(|e| e.identity.as_deref()));
        let (bindings, connectors, correlations) = (
            text(|e| e.binding.as_deref()),
            text(|e| e.connector.as_deref()),
            text(|e| e.correlation_id.as_deref()),
        );
        let epochs: Vec<Option<i64>> =
            entries.iter().map(|e| e.fencing_epoch.map(|v| i64::try_from(v).unwrap_or(i64::MAX))).collect();
        let at: Vec<String> = entries.iter().map(|e| e.at.to_string()).collect();
        self.tx
            .execute(
                "INSERT INTO lease_audit_log (event, outcome, reason, lease_key, kind, identity, binding, \
                 connector, fencing_epoch, correlation_id, at) \
                 SELECT event, outcome, reason, lease_key, kind, identity, binding, connector, fencing_epoch, \
                 correlation_id, at FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], \
                 $6::TEXT[], $7::TEXT[], $8::TEXT[], $9::BIGINT[], $10::TEXT[], $11::TEXT[]) WITH ORDINALITY \
                 AS r(event, outcome, reason, lease_key, kind, identity, binding, connector, fencing_epoch, \
                 correlation_id, at, n) ORDER BY n",
                &[
                    &events,
                    &outcomes,
                    &reasons,
                    &keys,
                    &kinds,
                    &identities,
                    &bindings,
                    &connectors,
                    &epochs,
                    &correlations,
                    &at,
                ],
            )
            .map_err(map_error)?;
        Ok(())
    }

    fn audit(&mut self, key: Option<&LeaseKey>) -> Result<Vec<AuditEntry>, StoreError> {
        self.audit_from(key, 0)
    }

    fn audit_after(&mut self, after: i64) -> Result<Vec<AuditEntry>, StoreError> {
        self.audit_from(None, after)
    }

    fn decision_counts(&mut self) -> Result<Option<Vec<fleet_registry::DecisionCount>>, StoreError> {
        let rows = self
            .tx
            .query("SELECT event, outcome, reason, n FROM lease_decision_counts", &[])
            .map_err(map_error)?;
        Ok(Some(
            rows.iter()
                .map(|r| {
                    let reason: String = r.get(2);
                    fleet_registry::DecisionCount {
                        event: r.get(0),
                        outcome: r.get(1),
                        reason: (!reason.is_empty()).then_some(reason),
                        n: u64::try_from(r.get::<_, i64>(3)).unwrap_or(0),
                    }
                })
                .collect(),
        ))
    }

    fn prune_audit(&mut self, through: i64, before: Timestamp) -> Result<usize, StoreError> {
        // Inside the write transaction: no other session sees the trigger disabled.
        self.tx
            .batch_execute("ALTER TABLE lease_audit_log DISABLE TRIGGER lease_audit_log_is_append_only")
            .map_err(map_error)?;
        let removed = self
            .tx
            .execute(
                "DELETE FROM lease_audit_log WHERE id <= $1 AND at < $2",
                &[&through, &before.to_string()],
            )
            .map_err(map_error)?;
        self.tx
            .batch_execute("ALTER TABLE lease_audit_log ENABLE TRIGGER lease_audit_log_is_append_only")
            .map_err(map_error)?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }

    fn audit_page(&mut self, query: &fleet_registry::AuditQuery<'_>) -> Result<Vec<AuditEntry>, StoreError> {
        const COLUMNS: &str = "SELECT id, event, outcome, reason, lease_key, kind, identity, binding, connector, \
            fencing_epoch, correlation_id, at FROM lease_audit_log WHERE ($1::TEXT IS NULL OR lease_key = $1) \
            AND ($3::TEXT IS NULL OR at >= $3) AND ($4::TEXT IS NULL OR at < $4)";
        let sql = if query.newest_first {
            format!("{COLUMNS} AND id < $2 ORDER BY id DESC LIMIT $5")
        } else {
            format!("{COLUMNS} AND id > $2 ORDER BY id LIMIT $5")
        };
        let (since, until) = (query.since.map(|t| t.to_string()), query.until.map(|t| t.to_string()));
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        self.tx
            .query(&sql, &[&query.key.map(LeaseKey::as_str), &query.after, &since, &until, &limit])
            .map_err(map_error)?
            .iter()
            .map(rows::read_audit)
            .collect()
    }
}

impl PgTx<'_, '_> {
    /// The audit log (of one lease, when given) after position `after`, by the primary key.
    fn audit_from(&mut self, key: Option<&LeaseKey>, after: i64) -> Result<Vec<AuditEntry>, StoreError> {
        self.tx
            .query(
                "SELECT id, event, outcome, reason, lease_key, kind, identity, binding, connector, fencing_epoch, \
                 correlation_id, at FROM lease_audit_log WHERE ($1::TEXT IS NULL OR lease_key = $1) AND id > $2 \
                 ORDER BY id",
                &[&key.map(LeaseKey::as_str), &after],
            )
            .map_err(map_error)?
            .iter()
            .map(rows::read_audit)
            .collect()
    }
}

impl Store for PostgresStore {
    fn write<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        let mut tx = locked_write(&mut self.client, &self.write_lock)?;
        let value = f(&mut PgTx { tx: &mut tx, registry_id: &self.registry_id })?;
        tx.commit().map_err(map_error)?;
        Ok(value)
    }

    /// A grant: refused before anything is written where the server's replication could
    /// lose it (`replication::guard_grant`), committed with `synchronous_commit =
    /// remote_apply`, and `OutcomeUnknown` when the server's answer to COMMIT never came.
    fn write_durable<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        let mut tx = locked_write(&mut self.client, &self.write_lock)?;
        replication::guard_grant(&mut tx)?;
        let value = f(&mut PgTx { tx: &mut tx, registry_id: &self.registry_id })?;
        tx.commit().map_err(commit_error)?;
        Ok(value)
    }

    fn read<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        let mut tx = self.client.transaction(IsolationLevel::RepeatableRead, true).map_err(map_error)?;
        let value = f(&mut PgTx { tx: &mut tx, registry_id: &self.registry_id })?;
        tx.commit().map_err(map_error)?;
        Ok(value)
    }

    /// A missed deadline drops the connection (its answer can no longer be trusted to
    /// belong to the next question): the caller opens a new one.
    fn set_call_deadline(&mut self, deadline: Option<std::time::Duration>) {
        let bound = deadline.map_or(self.default_deadline, |d| d.min(self.default_deadline));
        self.write_lock.lock_wait = deadline.map(|d| d / 2);
        self.client.set_deadline(bound.max(std::time::Duration::from_millis(1)));
    }

    /// PostgreSQL keeps no commit counter a client can read, so the marker is a digest
    /// of the row versions a reader keeps, the live fleet's (`Tx::live_workers` and
    /// `Tx::live_instances`, found the same way): each committed insert or update leaves
    /// a tuple with a new `(ctid, xmin)`, and a delete takes one away, so the digest
    /// moves with every commit that changes what a live read returns and stands still
    /// otherwise (one statement, one snapshot). It reads only system columns of the live
    /// fleet's rows: a few milliseconds for 10 000, against some 60 for reading them
    /// whole, and nothing of the history beside them.
    /// `ANALYZE` of the tables an import writes: a server whose autovacuum has not yet
    /// run (or is off) otherwise plans the first reads of a fresh import on no
    /// statistics at all. A role that may not analyze a table is warned by the server
    /// and skips it.
    fn after_bulk_load(&mut self) -> Result<(), StoreError> {
        self.client
            .simple_query("ANALYZE worker_registrations, instances, leases, lease_audit_log")
            .map(drop)
            .map_err(map_error)
    }

    /// The recorded version (`fleet_schema_version`), judged as at open: one simple
    /// query, nothing kept on the session (a pooler may run it on another).
    fn check_schema(&mut self) -> Result<(), StoreError> {
        let rows = self.client.simple_query("SELECT version FROM fleet_schema_version").map_err(map_error)?;
        let version = session::text_rows(rows)
            .pop()
            .and_then(|row| row.into_iter().next().flatten())
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0);
        schema::check_version(&mut self.client, version)
    }

    fn change_marker(&mut self) -> Result<Option<u128>, StoreError> {
        let digest: String = self
            .client
            .query_typed(&MARKER, &[])
            .map_err(map_error)?
            .first()
            .map(|row| row.get(0))
            .unwrap_or_default();
        u128::from_str_radix(&digest, 16).map(Some).map_err(|e| {
            StoreError::new(StoreErrorKind::Unavailable, format!("change marker {digest:?}: {e}"))
        })
    }

    /// The hot path: one unnamed statement, one round trip, nothing kept on the server
    /// session between beats (a pooler may run each on another).
    fn touch_heartbeat(
        &mut self,
        who: &WorkerCredential,
        now: Timestamp,
        claim: Claim,
    ) -> Result<bool, StoreError> {
        use tokio_postgres::types::Type;
        let now = now.to_string();
        let matched = self
            .client
            .query_typed(
                &heartbeat::HEARTBEAT,
                &[
                    (&now, Type::TEXT),
                    (&who.worker_identity.as_str(), Type::TEXT),
                    (&who.generation_id.as_str(), Type::TEXT),
                    (&who.token.fingerprint(), Type::TEXT),
                    (&claim.as_str(), Type::TEXT),
                ],
            )
            .map_err(map_error)?;
        Ok(matched.len() == 1)
    }
}
