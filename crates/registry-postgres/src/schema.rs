//! The registry's tables in PostgreSQL: each migration, the version this build writes,
//! and the migration that brings a database to it.

use fleet_registry::{StoreError, StoreErrorKind};
use tokio_postgres::IsolationLevel;

use crate::bounded::Client;
use crate::map_error;

/// The advisory lock a migration holds: keyed by the schema it migrates, since the
/// registry's id (which keys every later write) may not exist yet. Advisory locks are
/// scoped to one database, so registries in other databases never meet it.
const MIGRATION_LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('fleetward migration ' || current_schema(), 0))";

/// Each migration, in order; migration `i` brings the schema to version `i + 1`.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE instances (
        client_instance_id TEXT PRIMARY KEY,
        client_type        TEXT NOT NULL,
        fleet_run_id       TEXT,
        minted_at          TEXT NOT NULL,
        host_id            TEXT
    );
    CREATE TABLE worker_registrations (
        worker_identity     TEXT PRIMARY KEY,
        client_type         TEXT,
        client_instance_id  TEXT,
        instance_provenance TEXT,
        fleet_run_id        TEXT,
        namespace           TEXT NOT NULL,
        profile             TEXT,
        session_id          TEXT,
        generation_id       TEXT,
        host_id             TEXT,
        boot_id             TEXT,
        pid                 BIGINT,
        process_start_time  BIGINT,
        repository          TEXT,
        status              TEXT NOT NULL CHECK (status IN ('active', 'released', 'superseded', 'retired')),
        ownership_state     TEXT CHECK (ownership_state IN ('owned', 'stale', 'orphaned', 'unowned')),
        registered_at       TEXT NOT NULL,
        last_heartbeat_at   TEXT,
        heartbeat_ttl_s     BIGINT,
        fencing_epoch       BIGINT,
        token_fingerprint   TEXT,
        code_revision       TEXT,
        config_revision     TEXT,
        profile_revision    TEXT,
        schema_revision     TEXT,
        retired_at          TEXT,
        retired_by          TEXT,
        retirement_reason   TEXT
    );
    CREATE INDEX worker_registrations_slot ON worker_registrations (client_instance_id, namespace);",
    "CREATE TABLE leases (
        lease_key      TEXT PRIMARY KEY,
        kind           TEXT NOT NULL CHECK (kind IN ('connector', 'workflow', 'initialization')),
        owner          TEXT NOT NULL,
        lease_id       TEXT NOT NULL,
        fencing_epoch  BIGINT NOT NULL CHECK (fencing_epoch > 0),
        state          TEXT NOT NULL CHECK (state IN ('held', 'released')),
        acquired_at    TEXT NOT NULL,
        heartbeat_at   TEXT NOT NULL,
        expires_at     TEXT NOT NULL,
        released_at    TEXT,
        updated_at     TEXT NOT NULL,
        scopes         TEXT NOT NULL DEFAULT '[]',
        target_version BIGINT,
        init_status    TEXT CHECK (init_status IN ('initializing', 'ready', 'failed')),
        failure_detail TEXT
    );
    CREATE TABLE lease_audit_log (
        id             BIGSERIAL PRIMARY KEY,
        event          TEXT NOT NULL,
        outcome        TEXT NOT NULL,
        reason         TEXT,
        lease_key      TEXT NOT NULL,
        kind           TEXT NOT NULL,
        identity       TEXT,
        binding        TEXT,
        connector      TEXT,
        fencing_epoch  BIGINT,
        correlation_id TEXT,
        at             TEXT NOT NULL
    );
    CREATE FUNCTION lease_audit_log_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'lease_audit_log is append-only'; END $$;
    CREATE TRIGGER lease_audit_log_is_append_only BEFORE UPDATE OR DELETE ON lease_audit_log
        FOR EACH ROW EXECUTE FUNCTION lease_audit_log_is_append_only();",
    // 3: the PID namespace a worker's pid belongs to.
    "ALTER TABLE worker_registrations ADD COLUMN pid_namespace BIGINT;",
    // 4: the registry's own id, minted once (fleet_registry::RegistryId).
    "CREATE TABLE registry_identity (
        id          INTEGER PRIMARY KEY CHECK (id = 1),
        registry_id TEXT NOT NULL
    );
    INSERT INTO registry_identity VALUES (1, replace(gen_random_uuid()::text, '-', ''));",
    // 5: the highest fencing epoch ever handed out per lease key and worker slot, which
    // pruning, importing and restoring rows never lower; seeded from the rows there are.
    "CREATE TABLE fencing_high_water (
        scope TEXT PRIMARY KEY,
        epoch BIGINT NOT NULL CHECK (epoch > 0)
    );
    INSERT INTO fencing_high_water
        SELECT 'slot ' || client_instance_id || ' ' || namespace, max(fencing_epoch)
        FROM worker_registrations
        WHERE client_instance_id IS NOT NULL AND fencing_epoch > 0
        GROUP BY client_instance_id, namespace;
    INSERT INTO fencing_high_water SELECT 'lease ' || lease_key, fencing_epoch FROM leases;",
    // 6: the lease decisions counted as they are written (a trigger on the audit log), so
    // a reader of the counters reads a few rows at any log length, and retention does
    // not lower them; seeded from the log there is.
    "CREATE TABLE lease_decision_counts (
        event TEXT NOT NULL,
        outcome TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        n BIGINT NOT NULL CHECK (n >= 0),
        PRIMARY KEY (event, outcome, reason)
    );
    INSERT INTO lease_decision_counts
        SELECT event, outcome, coalesce(reason, ''), count(*) FROM lease_audit_log GROUP BY 1, 2, 3;
    CREATE FUNCTION lease_decision_counted() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO lease_decision_counts VALUES (NEW.event, NEW.outcome, coalesce(NEW.reason, ''), 1)
                ON CONFLICT (event, outcome, reason) DO UPDATE SET n = lease_decision_counts.n + 1;
            RETURN NULL;
        END $$;
    CREATE TRIGGER lease_decision_counted AFTER INSERT ON lease_audit_log
        FOR EACH ROW EXECUTE FUNCTION lease_decision_counted();",
    // 7: decisions counted once per statement, from its inserted rows grouped. A row
    // trigger updated one counter row once per entry, and PostgreSQL keeps every version
    // of a row a transaction updated, so a restore of a million entries of one kind
    // slowed with each (a batch of 10 000 took seconds, then longer).
    "DROP TRIGGER lease_decision_counted ON lease_audit_log;
    DROP FUNCTION lease_decision_counted();
    CREATE FUNCTION lease_decisions_counted() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO lease_decision_counts
                SELECT event, outcome, coalesce(reason, ''), count(*) FROM appended GROUP BY 1, 2, 3
                ON CONFLICT (event, outcome, reason) DO UPDATE SET n = lease_decision_counts.n + EXCLUDED.n;
            RETURN NULL;
        END $$;
    CREATE TRIGGER lease_decisions_counted AFTER INSERT ON lease_audit_log
        REFERENCING NEW TABLE AS appended FOR EACH STATEMENT EXECUTE FUNCTION lease_decisions_counted();",
    // 8: the process that holds a tenure (`connector run`), so that a run of the same
    // connector on another host never resumes a tenure a live run holds.
    "ALTER TABLE leases ADD COLUMN holder_process TEXT;",
    // 9: operators' fences of hosts gone for good (fleet_model::HostFence): a boot id,
    // or '*' for every boot of the host until the fence is lifted.
    "CREATE TABLE host_fences (
        host_id   TEXT NOT NULL,
        boot_id   TEXT NOT NULL,
        reason    TEXT NOT NULL,
        fenced_by TEXT NOT NULL,
        fenced_at TEXT NOT NULL,
        lifted_at TEXT,
        lifted_by TEXT,
        PRIMARY KEY (host_id, boot_id)
    );",
    // 10: what each host's boot last said of itself when one of its processes
    // registered: its hostname, and its clock against the store's (fleet_model::HostBoot).
    "CREATE TABLE host_boots (
        host_id         TEXT NOT NULL,
        boot_id         TEXT NOT NULL,
        hostname        TEXT,
        first_seen_at   TEXT NOT NULL,
        last_seen_at    TEXT NOT NULL,
        clock_offset_ms BIGINT,
        PRIMARY KEY (host_id, boot_id)
    );",
    // 11: the server history the registry's grants are made on, and the operator's
    // replication policy (fleet_registry::ReplicationPolicy): one row, written by the
    // first grant.
    "CREATE TABLE server_history (
        id                INTEGER PRIMARY KEY CHECK (id = 1),
        system_identifier TEXT NOT NULL,
        timeline          BIGINT NOT NULL,
        policy            TEXT NOT NULL CHECK (policy IN ('local', 'synchronous', 'asynchronous')),
        recorded_at       TEXT NOT NULL,
        accepted_by       TEXT,
        reason            TEXT
    );",
];

/// The schema version this build writes: the registry's data model, the registry's id
/// (version 4), the fencing epochs' high-water marks (version 5), the lease decisions
/// counted as they are written (version 6), once per statement (version 7), the process
/// that holds a tenure (version 8), the fences of hosts gone for good (version 9), what
/// each host's boots said of themselves (version 10), the server history grants are made
/// on (version 11).
pub const SCHEMA_VERSION: i64 = 11;
const _: () = assert!(SCHEMA_VERSION >= fleet_registry::SCHEMA_VERSION);
#[allow(clippy::cast_possible_wrap)] // a handful of migrations, never near i64::MAX
const _: () = assert!(MIGRATIONS.len() as i64 == SCHEMA_VERSION, "one migration per schema version");

/// Brings the schema up to this build's version under the migration lock and returns
/// the registry's id, as migration 4 minted it.
pub(crate) fn migrate(client: &mut Client) -> Result<String, StoreError> {
    let mut tx = client.transaction(IsolationLevel::ReadCommitted, false).map_err(map_error)?;
    tx.batch_execute(MIGRATION_LOCK).map_err(map_error)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS fleet_schema_version (version BIGINT NOT NULL)")
        .map_err(map_error)?;
    let current: i64 = tx
        .query_opt("SELECT version FROM fleet_schema_version", &[])
        .map_err(map_error)?
        .map_or(0, |r| r.get(0));
    if current > SCHEMA_VERSION {
        return Err(StoreError::new(
            StoreErrorKind::NewerSchema,
            format!("registry schema version {current} is newer than this build's {SCHEMA_VERSION}"),
        ));
    }
    for sql in MIGRATIONS.iter().skip(usize::try_from(current).unwrap_or(0)) {
        tx.batch_execute(sql).map_err(map_error)?;
    }
    if current != SCHEMA_VERSION {
        tx.execute("DELETE FROM fleet_schema_version", &[]).map_err(map_error)?;
        tx.execute("INSERT INTO fleet_schema_version (version) VALUES ($1)", &[&SCHEMA_VERSION])
            .map_err(map_error)?;
    }
    let id: Option<String> = tx
        .query_opt("SELECT registry_id FROM registry_identity WHERE id = 1", &[])
        .map_err(map_error)?
        .map(|r| r.get(0));
    let id = id.ok_or_else(missing_id)?;
    tx.commit().map_err(map_error)?;
    Ok(id)
}

pub(crate) fn missing_id() -> StoreError {
    StoreError::corrupt("the registry's id (table registry_identity) is missing")
}
