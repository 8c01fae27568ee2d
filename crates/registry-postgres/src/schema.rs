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
    );
    CREATE TABLE fleet_schema_compatibility (oldest_build BIGINT NOT NULL);
    INSERT INTO fleet_schema_compatibility VALUES (10);",
    // 12: the live fleet found from an index (fleet_model::LiveScope), so the reads a
    // fleet makes all the time do not pay for its history (an index changes nothing
    // for the builds before it).
    "CREATE INDEX worker_registrations_active ON worker_registrations (client_instance_id)
        WHERE status = 'active';",
];

/// What each migration adds, for `registry upgrade` to say: step `i + 1` is `STEPS[i]`.
const STEPS: &[&str] = &[
    "the launcher's ledger and the worker registrations",
    "fenced leases and their append-only audit log",
    "the PID namespace of a worker's pid",
    "the registry's own id",
    "the fencing epochs' high-water marks",
    "lease decisions counted as they are written",
    "lease decisions counted once per statement",
    "the process that holds a tenure",
    "operators' fences of hosts gone for good",
    "what each host's boots said of themselves",
    "the server history grants are made on, and which builds may use the schema",
    "the live fleet's index",
];
const _: () = assert!(STEPS.len() == MIGRATIONS.len(), "one description per migration");

/// The table in which a schema says which builds may still use it: the oldest build
/// schema version that can register, heartbeat, renew, read and retire on it (a
/// migration that only adds keeps the builds before it working; version 11 only adds a
/// table that builds of version 10 never read). A newer registry without it is used by
/// no older build.
const COMPATIBILITY: &str = "fleet_schema_compatibility";

/// The schema version this build writes: the registry's data model, the registry's id
/// (version 4), the fencing epochs' high-water marks (version 5), the lease decisions
/// counted as they are written (version 6), once per statement (version 7), the process
/// that holds a tenure (version 8), the fences of hosts gone for good (version 9), what
/// each host's boots said of themselves (version 10), the server history grants are made
/// on (version 11), the live fleet's index (version 12).
pub const SCHEMA_VERSION: i64 = 12;
const _: () = assert!(SCHEMA_VERSION >= fleet_registry::SCHEMA_VERSION);
#[allow(clippy::cast_possible_wrap)] // a handful of migrations, never near i64::MAX
const _: () = assert!(MIGRATIONS.len() as i64 == SCHEMA_VERSION, "one migration per schema version");

/// Creates the schema in a database (or schema) that holds none yet, under the migration
/// lock, and returns the registry's id, as migration 4 minted it. A registry another
/// session created meanwhile is taken as it is.
pub(crate) fn create(client: &mut Client) -> Result<String, StoreError> {
    let mut tx = client.transaction(IsolationLevel::ReadCommitted, false).map_err(map_error)?;
    tx.batch_execute(MIGRATION_LOCK).map_err(map_error)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS fleet_schema_version (version BIGINT NOT NULL)")
        .map_err(map_error)?;
    let current = stored_version(&mut tx)?;
    if current == 0 {
        apply(&mut tx, 0)?;
    }
    let id = registry_id(&mut tx)?;
    tx.commit().map_err(map_error)?;
    if current != 0 && current != SCHEMA_VERSION {
        check_version(client, current)?;
    }
    Ok(id)
}

/// Whether this build may use a registry at schema `version` (not 0): its own, or a newer
/// one that says builds of this version may still use it. An older one is refused with
/// the command that upgrades it: nothing else changes a registry's schema.
pub(crate) fn check_version(client: &mut Client, version: i64) -> Result<(), StoreError> {
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    if version < SCHEMA_VERSION {
        return Err(StoreError::new(
            StoreErrorKind::OlderSchema,
            format!(
                "the PostgreSQL registry is at schema version {version} and this build uses {SCHEMA_VERSION}: \
                 run `fleetctl registry upgrade` (it copies the tables first; see --dry-run) once every \
                 build that uses it reads version {SCHEMA_VERSION}"
            ),
        ));
    }
    let sql = format!(
        "SELECT CASE WHEN to_regclass('{COMPATIBILITY}') IS NULL THEN NULL \
         ELSE (SELECT min(oldest_build)::text FROM {COMPATIBILITY}) END"
    );
    let oldest = crate::session::text_rows(client.simple_query(&sql).map_err(map_error)?)
        .pop()
        .and_then(|row| row.into_iter().next().flatten())
        .and_then(|v| v.parse::<i64>().ok());
    match oldest {
        Some(oldest) if oldest <= SCHEMA_VERSION => Ok(()),
        oldest => Err(StoreError::new(
            StoreErrorKind::NewerSchema,
            format!(
                "registry schema version {version} is newer than this build's {SCHEMA_VERSION}, and {}: \
                 use a newer build",
                oldest.map_or_else(
                    || "says no older build may use it".to_owned(),
                    |o| format!("needs a build of schema {o} or later")
                )
            ),
        )),
    }
}

/// `registry upgrade`: brings the registry to this build's schema under the migration
/// lock, in one transaction, after copying each of its tables (`TABLE_schema_vN`, beside
/// it) unless `backup` is false; with `dry_run`, only says what it would do.
pub(crate) fn upgrade(
    client: &mut Client,
    dry_run: bool,
    backup: bool,
) -> Result<fleet_registry::SchemaUpgrade, StoreError> {
    let mut tx = client.transaction(IsolationLevel::ReadCommitted, false).map_err(map_error)?;
    tx.batch_execute(MIGRATION_LOCK).map_err(map_error)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS fleet_schema_version (version BIGINT NOT NULL)")
        .map_err(map_error)?;
    let from = stored_version(&mut tx)?;
    let steps: Vec<String> = STEPS
        .iter()
        .enumerate()
        .skip(usize::try_from(from).unwrap_or(0))
        .map(|(i, what)| format!("{}: {what}", i + 1))
        .collect();
    let tables: Vec<String> = if backup && from > 0 && from < SCHEMA_VERSION {
        tx.query(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() \
             AND tablename NOT LIKE '%\\_schema\\_v%' ORDER BY tablename",
            &[],
        )
        .map_err(map_error)?
        .iter()
        .map(|r| r.get(0))
        .collect()
    } else {
        Vec::new()
    };
    let copy = |table: &str| format!("{table}_schema_v{from}");
    let report = fleet_registry::SchemaUpgrade {
        from,
        to: from.max(SCHEMA_VERSION),
        steps,
        backup: (!tables.is_empty()).then(|| format!("tables {}", copy("*"))),
        dry_run,
    };
    if dry_run || from >= SCHEMA_VERSION {
        return Ok(report);
    }
    for table in &tables {
        // An earlier copy of the same version is kept as it is.
        tx.batch_execute(&format!("CREATE TABLE IF NOT EXISTS {} AS TABLE {table}", copy(table)))
            .map_err(map_error)?;
    }
    apply(&mut tx, from)?;
    tx.commit().map_err(map_error)?;
    Ok(report)
}

fn stored_version(tx: &mut crate::bounded::Transaction<'_>) -> Result<i64, StoreError> {
    Ok(tx
        .query_opt("SELECT version FROM fleet_schema_version", &[])
        .map_err(map_error)?
        .map_or(0, |r| r.get(0)))
}

/// Runs the migrations after `from` and records the version.
fn apply(tx: &mut crate::bounded::Transaction<'_>, from: i64) -> Result<(), StoreError> {
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(usize::try_from(from).unwrap_or(0)) {
        tx.batch_execute(sql).map_err(|e| {
            let e = map_error(e);
            StoreError::new(
                e.kind(),
                format!(
                    "cannot upgrade the PostgreSQL registry from schema version {from} to {SCHEMA_VERSION}: \
                     step {} failed, and nothing was changed: {e}",
                    index + 1
                ),
            )
        })?;
    }
    tx.execute("DELETE FROM fleet_schema_version", &[]).map_err(map_error)?;
    tx.execute("INSERT INTO fleet_schema_version (version) VALUES ($1)", &[&SCHEMA_VERSION])
        .map_err(map_error)?;
    Ok(())
}

fn registry_id(tx: &mut crate::bounded::Transaction<'_>) -> Result<String, StoreError> {
    let id: Option<String> = tx
        .query_opt("SELECT registry_id FROM registry_identity WHERE id = 1", &[])
        .map_err(map_error)?
        .map(|r| r.get(0));
    id.ok_or_else(missing_id)
}

pub(crate) fn missing_id() -> StoreError {
    StoreError::corrupt("the registry's id (table registry_identity) is missing")
}
