//! Versioned schema migrations, tracked in `PRAGMA user_version`. Each step runs in the
//! same `BEGIN IMMEDIATE` transaction as the version bump, so a crash mid-migration
//! leaves the previous version whole.

use fleet_registry::{StoreError, StoreErrorKind};
use rusqlite::{Connection, TransactionBehavior};

use crate::map_error;

/// Each migration, in order; migration `i` brings the schema to version `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: the launcher's ledger and the worker registrations of DESIGN.md.
    "CREATE TABLE instances (
        client_instance_id TEXT PRIMARY KEY NOT NULL,
        client_type        TEXT NOT NULL,
        fleet_run_id       TEXT,
        minted_at          TEXT NOT NULL,
        host_id            TEXT
    );
    CREATE TABLE worker_registrations (
        worker_identity     TEXT PRIMARY KEY NOT NULL,
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
        pid                 INTEGER,
        process_start_time  INTEGER,
        repository          TEXT,
        status              TEXT NOT NULL
            CHECK (status IN ('active', 'released', 'superseded', 'retired')),
        ownership_state     TEXT
            CHECK (ownership_state IN ('owned', 'stale', 'orphaned', 'unowned')),
        registered_at       TEXT NOT NULL,
        last_heartbeat_at   TEXT,
        heartbeat_ttl_s     INTEGER,
        fencing_epoch       INTEGER,
        token_fingerprint   TEXT,
        code_revision       TEXT,
        config_revision     TEXT,
        profile_revision    TEXT,
        schema_revision     TEXT,
        retired_at          TEXT,
        retired_by          TEXT,
        retirement_reason   TEXT
    );
    CREATE INDEX worker_registrations_slot
        ON worker_registrations (client_instance_id, namespace);",
    // 2: fenced leases and their append-only audit log.
    "CREATE TABLE leases (
        lease_key      TEXT PRIMARY KEY NOT NULL,
        kind           TEXT NOT NULL CHECK (kind IN ('connector', 'workflow', 'initialization')),
        owner          TEXT NOT NULL,
        lease_id       TEXT NOT NULL,
        fencing_epoch  INTEGER NOT NULL CHECK (fencing_epoch > 0),
        state          TEXT NOT NULL CHECK (state IN ('held', 'released')),
        acquired_at    TEXT NOT NULL,
        heartbeat_at   TEXT NOT NULL,
        expires_at     TEXT NOT NULL,
        released_at    TEXT,
        updated_at     TEXT NOT NULL,
        scopes         TEXT NOT NULL DEFAULT '[]',
        target_version INTEGER,
        init_status    TEXT CHECK (init_status IN ('initializing', 'ready', 'failed')),
        failure_detail TEXT
    );
    CREATE TABLE lease_audit_log (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        event          TEXT NOT NULL,
        outcome        TEXT NOT NULL,
        reason         TEXT,
        lease_key      TEXT NOT NULL,
        kind           TEXT NOT NULL,
        identity       TEXT,
        binding        TEXT,
        connector      TEXT,
        fencing_epoch  INTEGER,
        correlation_id TEXT,
        at             TEXT NOT NULL
    );
    CREATE TRIGGER lease_audit_log_is_append_only_update BEFORE UPDATE ON lease_audit_log
        BEGIN SELECT RAISE(ABORT, 'lease_audit_log is append-only'); END;
    CREATE TRIGGER lease_audit_log_is_append_only_delete BEFORE DELETE ON lease_audit_log
        BEGIN SELECT RAISE(ABORT, 'lease_audit_log is append-only'); END;",
    // 3: the PID namespace a worker's pid belongs to.
    "ALTER TABLE worker_registrations ADD COLUMN pid_namespace INTEGER;",
    // 4: the history of changes a long-lived reader follows (fleet_registry's
    // ChangePosition). Each worker row inserted or updated gets a `change_seq` above
    // every other row's; a row removed (or renamed) moves `worker_removals`; any ledger
    // write moves `instances`. Writers are serialised, so all of these move in commit
    // order. Triggers keep them, so every writer does, whatever statement it runs; a
    // statement that sets `change_seq` itself (the heartbeat, the hot path) spares the
    // trigger writing the row a second time. Each step is random (1 to 65 536): a file
    // restored in place from an older copy of itself, then written again, does not come
    // back to the values a reader last saw (a reader that sees them go back reads
    // everything). The data model is unchanged: this is SQLite's own.
    "CREATE TABLE registry_changes (
        id              INTEGER PRIMARY KEY CHECK (id = 1),
        worker_removals INTEGER NOT NULL,
        instances       INTEGER NOT NULL
    );
    INSERT OR IGNORE INTO registry_changes VALUES (1, random() & 1099511627775, random() & 1099511627775);
    ALTER TABLE worker_registrations ADD COLUMN change_seq INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX worker_registrations_changes ON worker_registrations (change_seq);
    CREATE TRIGGER worker_registrations_insert_is_a_change AFTER INSERT ON worker_registrations
    BEGIN
        UPDATE worker_registrations
            SET change_seq = (SELECT max(change_seq) FROM worker_registrations) + 1 + (random() & 65535)
            WHERE rowid = NEW.rowid;
    END;
    CREATE TRIGGER worker_registrations_update_is_a_change AFTER UPDATE ON worker_registrations
        WHEN NEW.change_seq IS OLD.change_seq
    BEGIN
        UPDATE worker_registrations
            SET change_seq = (SELECT max(change_seq) FROM worker_registrations) + 1 + (random() & 65535)
            WHERE rowid = NEW.rowid;
    END;
    CREATE TRIGGER worker_registrations_rename_is_a_removal
        AFTER UPDATE OF worker_identity ON worker_registrations
        WHEN NEW.worker_identity IS NOT OLD.worker_identity
    BEGIN
        UPDATE registry_changes SET worker_removals = worker_removals + 1 + (random() & 65535);
    END;
    CREATE TRIGGER worker_registrations_delete_is_a_removal AFTER DELETE ON worker_registrations
    BEGIN
        UPDATE registry_changes SET worker_removals = worker_removals + 1 + (random() & 65535);
    END;
    CREATE TRIGGER instances_insert_is_a_change AFTER INSERT ON instances
    BEGIN
        UPDATE registry_changes SET instances = instances + 1 + (random() & 65535);
    END;
    CREATE TRIGGER instances_update_is_a_change AFTER UPDATE ON instances
    BEGIN
        UPDATE registry_changes SET instances = instances + 1 + (random() & 65535);
    END;
    CREATE TRIGGER instances_delete_is_a_change AFTER DELETE ON instances
    BEGIN
        UPDATE registry_changes SET instances = instances + 1 + (random() & 65535);
    END;",
    // 5: the registry's own id, minted once (fleet_registry::RegistryId).
    "CREATE TABLE registry_identity (
        id          INTEGER PRIMARY KEY CHECK (id = 1),
        registry_id TEXT NOT NULL
    );
    INSERT OR IGNORE INTO registry_identity VALUES (1, lower(hex(randomblob(16))));",
    // 6: the highest fencing epoch ever handed out per lease key and worker slot, which
    // pruning, importing and restoring rows never lower; seeded from the rows there are.
    "CREATE TABLE fencing_high_water (
        scope TEXT PRIMARY KEY NOT NULL,
        epoch INTEGER NOT NULL CHECK (epoch > 0)
    );
    INSERT OR IGNORE INTO fencing_high_water
        SELECT 'slot ' || client_instance_id || ' ' || namespace, max(fencing_epoch)
        FROM worker_registrations
        WHERE client_instance_id IS NOT NULL AND fencing_epoch > 0
        GROUP BY client_instance_id, namespace;
    INSERT OR IGNORE INTO fencing_high_water SELECT 'lease ' || lease_key, fencing_epoch FROM leases;",
    // 7: the lease decisions counted as they are written (a trigger on the audit log), so
    // a reader of the counters reads a few rows at any log length, and retention does
    // not lower them; seeded from the log there is.
    "CREATE TABLE lease_decision_counts (
        event TEXT NOT NULL,
        outcome TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        n INTEGER NOT NULL CHECK (n >= 0),
        PRIMARY KEY (event, outcome, reason)
    );
    INSERT INTO lease_decision_counts
        SELECT event, outcome, coalesce(reason, ''), count(*) FROM lease_audit_log GROUP BY 1, 2, 3;
    CREATE TRIGGER lease_decision_counted AFTER INSERT ON lease_audit_log BEGIN
        INSERT INTO lease_decision_counts VALUES (NEW.event, NEW.outcome, coalesce(NEW.reason, ''), 1)
            ON CONFLICT (event, outcome, reason) DO UPDATE SET n = n + 1;
    END;",
    // 8: the history only moves forward, whoever writes. A row's `change_seq` set by a
    // statement must rise above every row's (as the heartbeat's does): a row written
    // back to an older version, or two rows' versions swapped, would let a reader keep
    // serving what it read. The counters never go back and their row stays.
    "CREATE TRIGGER worker_registrations_change_seq_only_rises
        BEFORE UPDATE OF change_seq ON worker_registrations
        WHEN NEW.change_seq IS NOT OLD.change_seq
         AND NEW.change_seq <= (SELECT max(change_seq) FROM worker_registrations)
    BEGIN
        SELECT RAISE(ABORT, 'change_seq only rises: a row written takes a version above every row''s');
    END;
    CREATE TRIGGER registry_changes_only_rise BEFORE UPDATE ON registry_changes
        WHEN NEW.id IS NOT OLD.id OR NEW.worker_removals < OLD.worker_removals OR NEW.instances < OLD.instances
    BEGIN
        SELECT RAISE(ABORT, 'the registry''s change counters only rise');
    END;
    CREATE TRIGGER registry_changes_stay BEFORE DELETE ON registry_changes
    BEGIN
        SELECT RAISE(ABORT, 'the registry''s change counters are kept');
    END;",
    // 9: the process that holds a tenure (`connector run`), so that a run of the same
    // connector on another host never resumes a tenure a live run holds.
    "ALTER TABLE leases ADD COLUMN holder_process TEXT;",
    // 10: the digest of every row's version (fleet_registry::VersionsDigest), kept as
    // rows are written, so a reader proves the rows it kept current by reading the rows
    // changed since, not by summing every row's version at each read.
    "ALTER TABLE registry_changes ADD COLUMN worker_rows INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE registry_changes ADD COLUMN worker_version_sum INTEGER NOT NULL DEFAULT 0;
    UPDATE registry_changes SET
        worker_rows = (SELECT count(*) FROM worker_registrations),
        worker_version_sum = (SELECT coalesce(sum(change_seq & 4294967295), 0) FROM worker_registrations);
    CREATE TRIGGER worker_registrations_insert_is_digested AFTER INSERT ON worker_registrations
    BEGIN
        UPDATE registry_changes SET worker_rows = worker_rows + 1,
            worker_version_sum = worker_version_sum + (NEW.change_seq & 4294967295);
    END;
    CREATE TRIGGER worker_registrations_version_is_digested AFTER UPDATE OF change_seq ON worker_registrations
        WHEN NEW.change_seq IS NOT OLD.change_seq
    BEGIN
        UPDATE registry_changes SET worker_version_sum =
            worker_version_sum + (NEW.change_seq & 4294967295) - (OLD.change_seq & 4294967295);
    END;
    CREATE TRIGGER worker_registrations_delete_is_digested AFTER DELETE ON worker_registrations
    BEGIN
        UPDATE registry_changes SET worker_rows = worker_rows - 1,
            worker_version_sum = worker_version_sum - (OLD.change_seq & 4294967295);
    END;
    -- The counters' guard watches only the columns it guards, so a heartbeat's update of
    -- the digest runs no guard (and the heartbeat's write lock is held that much less).
    DROP TRIGGER IF EXISTS registry_changes_only_rise;
    CREATE TRIGGER registry_changes_only_rise
        BEFORE UPDATE OF id, worker_removals, instances ON registry_changes
        WHEN NEW.id IS NOT OLD.id OR NEW.worker_removals < OLD.worker_removals OR NEW.instances < OLD.instances
    BEGIN
        SELECT RAISE(ABORT, 'the registry''s change counters only rise');
    END;",
    // 11: operators' fences of hosts gone for good (fleet_model::HostFence): a boot id,
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
    // 12: what each host's boot last said of itself when one of its processes
    // registered: its hostname, and its clock against the store's (fleet_model::HostBoot).
    "CREATE TABLE host_boots (
        host_id         TEXT NOT NULL,
        boot_id         TEXT NOT NULL,
        hostname        TEXT,
        first_seen_at   TEXT NOT NULL,
        last_seen_at    TEXT NOT NULL,
        clock_offset_ms INTEGER,
        PRIMARY KEY (host_id, boot_id)
    );",
    // 13: the live fleet found from an index (fleet_model::LiveScope), so the reads a
    // fleet makes all the time do not pay for its history; and which builds may use
    // the schema (an index changes nothing for the builds of version 12).
    "CREATE INDEX worker_registrations_active ON worker_registrations (client_instance_id)
        WHERE status = 'active';
    CREATE TABLE fleet_schema_compatibility (oldest_build INTEGER NOT NULL);
    INSERT INTO fleet_schema_compatibility VALUES (12);",
];

/// The history's one row, built again: fresh counters, as migration 4 writes them, and
/// the digest of the rows there are, as migration 10 seeds it.
const HISTORY_ROW: &str = "INSERT OR IGNORE INTO registry_changes \
     (id, worker_removals, instances, worker_rows, worker_version_sum) \
     SELECT 1, random() & 1099511627775, random() & 1099511627775, count(*), \
     coalesce(sum(change_seq & 4294967295), 0) FROM worker_registrations;";

/// The schema version this build writes: the registry's data model (version 3),
/// SQLite's own history of changes (version 4), the registry's id (version 5) and the
/// fencing epochs' high-water marks (version 6), the lease decisions counted as they are
/// written (version 7), a history that only moves forward (version 8), the process that
/// holds a tenure (version 9), the digest of the rows' versions kept as they are
/// written (version 10), the fences of hosts gone for good (version 11), what each
/// host's boots said of themselves (version 12), the live fleet's index and which builds
/// may use the schema (version 13).
pub const SCHEMA_VERSION: i64 = 13;
const _: () = assert!(SCHEMA_VERSION >= fleet_registry::SCHEMA_VERSION);
#[allow(clippy::cast_possible_wrap)] // a handful of migrations, never near i64::MAX
const _: () = assert!(MIGRATIONS.len() as i64 == SCHEMA_VERSION, "one migration per schema version");

/// What each migration adds, for `registry upgrade` to say: step `i + 1` is `STEPS[i]`.
const STEPS: &[&str] = &[
    "the launcher's ledger and the worker registrations",
    "fenced leases and their append-only audit log",
    "the PID namespace of a worker's pid",
    "the history of changes long-lived readers follow",
    "the registry's own id",
    "the fencing epochs' high-water marks",
    "lease decisions counted as they are written",
    "a history of changes that only moves forward",
    "the process that holds a tenure",
    "the digest of the rows' versions",
    "operators' fences of hosts gone for good",
    "what each host's boots said of themselves",
    "the live fleet's index, and which builds may use the schema",
];
const _: () = assert!(STEPS.len() == MIGRATIONS.len(), "one description per migration");

/// The table in which a schema newer than this build's says which builds may still use
/// it: the oldest build schema version that can register, heartbeat, renew, read and
/// retire on it (a migration that only adds keeps the builds before it working). A
/// newer registry without it is used by no older build.
const COMPATIBILITY: &str = "fleet_schema_compatibility";

/// Checks the database's schema before it is used, creating it in a new file (version
/// 0): an older schema is refused with the command that upgrades it (nothing else
/// changes a registry's schema), and a newer one unless it says this build may use it.
pub(crate) fn check_or_create(conn: &mut Connection) -> Result<(), StoreError> {
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(map_error)?;
    match current {
        0 => apply(conn),
        v if v == SCHEMA_VERSION => Ok(()),
        v if v > SCHEMA_VERSION => usable_newer(conn, v),
        v => Err(older(conn, v)),
    }
}

/// A registry at an older schema version: `registry upgrade` names what it does.
pub(crate) fn older(conn: &Connection, version: i64) -> StoreError {
    let path = conn.path().filter(|p| !p.is_empty()).unwrap_or("the registry");
    StoreError::new(
        StoreErrorKind::OlderSchema,
        format!(
            "registry {path} is at schema version {version} and this build uses {SCHEMA_VERSION}: \
             run `fleetctl registry upgrade` (it keeps a copy; see --dry-run) once every build that \
             uses it reads version {SCHEMA_VERSION}"
        ),
    )
}

/// A newer schema is used if it says builds of this one's version may use it.
pub(crate) fn usable_newer(conn: &Connection, version: i64) -> Result<(), StoreError> {
    let oldest: Option<i64> = conn
        .query_row(&format!("SELECT min(oldest_build) FROM {COMPATIBILITY}"), [], |r| r.get(0))
        .unwrap_or(None);
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

/// The steps from `from` to this build's version, as `registry upgrade` prints them.
fn steps_from(from: i64) -> Vec<String> {
    STEPS
        .iter()
        .enumerate()
        .skip(usize::try_from(from).unwrap_or(0))
        .map(|(i, what)| format!("{}: {what}", i + 1))
        .collect()
}

/// `registry upgrade`: brings an existing registry to this build's schema, after keeping
/// a copy of the file as it was beside it (unless `backup` is false); with `dry_run`,
/// only says what it would do.
pub(crate) fn upgrade(
    conn: &mut Connection,
    dry_run: bool,
    backup: bool,
) -> Result<fleet_registry::SchemaUpgrade, StoreError> {
    let from: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(map_error)?;
    if from > SCHEMA_VERSION {
        usable_newer(conn, from)?;
    }
    let path = conn.path().filter(|p| !p.is_empty()).unwrap_or_default().to_owned();
    let copy = (backup && from > 0 && from < SCHEMA_VERSION).then(|| backup_path(&path, from));
    let report = fleet_registry::SchemaUpgrade {
        from,
        to: from.max(SCHEMA_VERSION),
        steps: steps_from(from),
        backup: copy.clone(),
        dry_run,
    };
    if dry_run || from >= SCHEMA_VERSION {
        return Ok(report);
    }
    if copy.is_some() {
        keep_a_copy(conn, from)?;
    }
    apply(conn)?;
    Ok(report)
}

/// Runs every migration the database lacks, in one `BEGIN IMMEDIATE` transaction.
fn apply(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(map_error)?;
    // Another process may have migrated while we waited for the lock.
    let current: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(map_error)?;
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(usize::try_from(current).unwrap_or(0)) {
        tx.execute_batch(sql).map_err(|e| migration_failed(&tx, current, index + 1, &e))?;
        tx.pragma_update(None, "user_version", i64::try_from(index + 1).unwrap_or(i64::MAX))
            .map_err(map_error)?;
    }
    tx.commit().map_err(map_error)
}

/// One line for a migration that failed (and rolled back): which step, SQLite's own
/// message without the statement it quotes, where the untouched copy is, what to do.
fn migration_failed(conn: &Connection, from: i64, step: usize, e: &rusqlite::Error) -> StoreError {
    let why = match e {
        rusqlite::Error::SqlInputError { msg, .. } => msg.clone(),
        rusqlite::Error::SqliteFailure(err, Some(msg)) => format!("{msg} ({:?})", err.code),
        other => other.to_string().lines().next().unwrap_or_default().to_owned(),
    };
    let path = conn.path().filter(|p| !p.is_empty()).unwrap_or("the registry");
    let copy =
        if from > 0 { format!(" (a copy is kept at {path}.schema-v{from}.backup)") } else { String::new() };
    StoreError::new(
        StoreErrorKind::Unavailable,
        format!(
            "cannot upgrade {path} from schema version {from} to {SCHEMA_VERSION}: step {step} failed: {why}; \
             nothing was changed{copy}; the build that wrote it still reads it: keep to it and report the file"
        ),
    )
}

/// Before an upgrade (which older builds cannot read back), the file as it is is copied
/// beside it, `REGISTRY.schema-vN.backup`, once: the way back to the older build.
/// `VACUUM INTO` writes a consistent copy and refuses a file that already exists, which
/// keeps the first copy when several processes upgrade at once.
fn keep_a_copy(conn: &Connection, version: i64) -> Result<(), StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(path) = conn.path().filter(|p| !p.is_empty()) else { return Ok(()) };
    let copy = backup_path(path, version);
    let fail = |e: &dyn std::fmt::Display| {
        StoreError::new(
            StoreErrorKind::Unavailable,
            format!("cannot keep a copy of {path} before upgrading its schema (nothing was changed): {e}"),
        )
    };
    // Created empty and private first (the registry's rows are the operator's alone);
    // `VACUUM INTO` fills an empty file. One that exists is an earlier copy: kept.
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&copy) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(fail(&e)),
    }
    if let Err(e) = conn.execute("VACUUM INTO ?1", [&copy]) {
        let _ = std::fs::remove_file(&copy);
        return Err(fail(&e));
    }
    tracing::info!(registry = path, backup = copy, "kept a copy of the registry at schema version {version}");
    Ok(())
}

/// Where the copy of a registry at `version` is kept before an upgrade.
fn backup_path(path: &str, version: i64) -> String {
    format!("{path}.schema-v{version}.backup")
}

/// A schema object: its type (`table`, `index`, `trigger`), name and creating SQL.
#[derive(Debug, Clone)]
struct SchemaObject {
    kind: String,
    name: String,
    sql: String,
    /// For a table, its columns.
    columns: Vec<String>,
}

/// Every schema object of this build, read from a database migrated in memory, so the
/// list can never drift from the migrations.
fn reference() -> Result<&'static [SchemaObject], StoreError> {
    static REFERENCE: std::sync::OnceLock<Vec<SchemaObject>> = std::sync::OnceLock::new();
    if let Some(objects) = REFERENCE.get() {
        return Ok(objects);
    }
    let mut conn = Connection::open_in_memory().map_err(map_error)?;
    apply(&mut conn)?;
    let objects = schema_objects(&conn)?;
    Ok(REFERENCE.get_or_init(|| objects))
}

/// The schema objects `conn` holds, with each table's columns; SQLite's own (its
/// automatic indexes, `sqlite_sequence`) left out.
fn schema_objects(conn: &Connection) -> Result<Vec<SchemaObject>, StoreError> {
    let mut stmt = conn
        .prepare("SELECT type, name, coalesce(sql, '') FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        .map_err(map_error)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)))
        .map_err(map_error)?;
    let mut objects = Vec::new();
    for row in rows {
        let (kind, name, sql) = row.map_err(map_error)?;
        let columns = if kind == "table" {
            let mut info = conn.prepare("SELECT name FROM pragma_table_info(?1)").map_err(map_error)?;
            let names = info.query_map([&name], |r| r.get::<_, String>(0)).map_err(map_error)?;
            names.collect::<Result<Vec<_>, _>>().map_err(map_error)?
        } else {
            Vec::new()
        };
        objects.push(SchemaObject { kind, name, sql, columns });
    }
    Ok(objects)
}

/// Objects that hold no rows of their own, or only the history's counters, and so can
/// be built again without losing anything: indexes, triggers and `registry_changes`
/// (whose fresh counters make every reader read everything once).
fn rebuildable(object: &SchemaObject) -> bool {
    matches!(object.kind.as_str(), "index" | "trigger") || object.name == "registry_changes"
}

/// What this build's schema has that the file lacks: whole objects, and columns of
/// tables it has.
fn missing(conn: &Connection) -> Result<(Vec<SchemaObject>, Vec<String>), StoreError> {
    let present = schema_objects(conn)?;
    let mut objects = Vec::new();
    let mut columns = Vec::new();
    for wanted in reference()? {
        match present.iter().find(|p| p.kind == wanted.kind && p.name == wanted.name) {
            None => objects.push(wanted.clone()),
            Some(have) => columns.extend(
                wanted
                    .columns
                    .iter()
                    .filter(|c| !have.columns.contains(c))
                    .map(|c| format!("{}.{c}", wanted.name)),
            ),
        }
    }
    Ok((objects, columns))
}

/// Checks that the file holds every schema object of its version: a table, column,
/// index or trigger removed by hand (`DROP TABLE registry_changes`) is reported by name,
/// with what mends it, instead of surfacing later as "no such table".
pub(crate) fn verify(conn: &Connection, path: &std::path::Path) -> Result<(), StoreError> {
    let (objects, columns) = missing(conn)?;
    if objects.is_empty() && columns.is_empty() {
        return Ok(());
    }
    let mut names: Vec<String> = objects.iter().map(|o| format!("{} {}", o.kind, o.name)).collect();
    names.extend(columns.iter().map(|c| format!("column {c}")));
    let mend = if columns.is_empty() && objects.iter().all(rebuildable) {
        "run `fleetctl registry init` to build them again"
    } else {
        "they held rows that cannot be rebuilt: restore the registry from a backup (`fleetctl registry import`)"
    };
    Err(StoreError::corrupt(format!(
        "registry {} lacks part of its schema ({}); {mend}",
        path.display(),
        names.join(", ")
    )))
}

/// Builds again what [`verify`] finds missing and can be rebuilt, in one transaction;
/// returns the names of what it built. Anything else is left for [`verify`] to report.
pub(crate) fn repair(conn: &mut Connection) -> Result<Vec<String>, StoreError> {
    let (objects, columns) = missing(conn)?;
    if objects.is_empty() || !columns.is_empty() || !objects.iter().all(rebuildable) {
        return Ok(Vec::new());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(map_error)?;
    let mut built = Vec::new();
    // Tables before the indexes and triggers on them.
    let mut ordered: Vec<&SchemaObject> = objects.iter().collect();
    ordered.sort_by_key(|o| o.kind != "table");
    for object in ordered {
        tx.execute_batch(&object.sql).map_err(map_error)?;
        if object.name == "registry_changes" {
            tx.execute_batch(HISTORY_ROW).map_err(map_error)?;
        }
        built.push(format!("{} {}", object.kind, object.name));
    }
    tx.commit().map_err(map_error)?;
    Ok(built)
}
