//! The server's replication as a grant sees it (see `fleet_registry::ReplicationPolicy`):
//! the history it writes on, its standbys, and what the registry recorded, read in one
//! statement inside the grant's transaction; and the record the registry keeps.

use fleet_registry::{
    GrantVerdict, RecordedHistory, ReplicationPolicy, ReplicationStatus, ServerHistory, ServerReplication,
    StoreError, StoreErrorKind,
};

use crate::bounded::Transaction;
use crate::map_error;

/// Reads the server's replication and the recorded history. For a grant it also sets the
/// transaction's `synchronous_commit` to `remote_apply`: with a synchronous standby the
/// commit returns once the standby has applied it (so a promoted standby holds every
/// grant the registry acknowledged); without one it is an ordinary durable commit.
///
/// The timeline is the one the server writes its log on now (`pg_walfile_name`'s first
/// eight hex digits), which a promotion or a point-in-time restore moves at once.
fn read(tx: &mut Transaction<'_>, for_grant: bool) -> Result<ReplicationStatus, StoreError> {
    let commit = if for_grant { "set_config('synchronous_commit', 'remote_apply', true)" } else { "''" };
    let sql = format!(
        "SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names'), \
         (SELECT count(*) FROM pg_stat_replication), \
         (SELECT system_identifier::text FROM pg_control_system()), \
         CASE WHEN pg_is_in_recovery() THEN NULL \
              ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END, \
         {commit}, \
         h.system_identifier, h.timeline, h.policy, h.recorded_at, h.accepted_by, h.reason \
         FROM (SELECT 1) AS one LEFT JOIN server_history AS h ON h.id = 1"
    );
    let row = tx.query_one(&sql, &[]).map_err(map_error)?;
    if row.get::<_, bool>(0) {
        return Err(StoreError::new(
            StoreErrorKind::Unavailable,
            "the PostgreSQL server is a standby in recovery (read-only): writes go to the primary; \
             name every server in the URL with target_session_attrs=read-write",
        ));
    }
    let timeline = |value: i64| {
        u32::try_from(value).map_err(|_| StoreError::corrupt(format!("timeline {value} is out of range")))
    };
    let server = ServerReplication {
        history: ServerHistory { system_identifier: row.get(3), timeline: timeline(row.get(4))? },
        synchronous_standby_names: row.get(1),
        standbys: u64::try_from(row.get::<_, i64>(2)).unwrap_or(0),
    };
    let recorded = match row.get::<_, Option<String>>(6) {
        None => None,
        Some(system_identifier) => {
            let policy: String = row.get(8);
            Some(RecordedHistory {
                history: ServerHistory { system_identifier, timeline: timeline(row.get(7))? },
                policy: ReplicationPolicy::parse(&policy).ok_or_else(|| {
                    StoreError::corrupt(format!(
                        "server_history.policy {policy:?} is not a replication policy"
                    ))
                })?,
                recorded_at: row.get(9),
                accepted_by: row.get(10),
                reason: row.get(11),
            })
        }
    };
    Ok(ReplicationStatus { server, recorded })
}

/// What the server and the registry say now (a read).
pub(crate) fn status(tx: &mut Transaction<'_>) -> Result<ReplicationStatus, StoreError> {
    read(tx, false)
}

/// Run first in every grant's transaction: refuses the grant (`NotDurable`, nothing
/// written) where it might not survive a failover, records the server's history where
/// the verdict says so, and warns where it says to.
pub(crate) fn guard_grant(tx: &mut Transaction<'_>) -> Result<(), StoreError> {
    let status = read(tx, true)?;
    match status.verdict() {
        GrantVerdict::Refuse(why) => Err(StoreError::new(StoreErrorKind::NotDurable, why)),
        GrantVerdict::Grant { record, warning } => {
            if let Some(warning) = warning {
                tracing::warn!(target: "fleet", "{warning}");
            }
            if record {
                let policy = status.recorded.as_ref().map_or_else(ReplicationPolicy::default, |r| r.policy);
                write(tx, &status.server.history, policy, None)?;
            }
            Ok(())
        }
    }
}

/// Records `history` and `policy`, with who accepted it and why when an operator did.
fn write(
    tx: &mut Transaction<'_>,
    history: &ServerHistory,
    policy: ReplicationPolicy,
    accepted: Option<(&str, &str)>,
) -> Result<(), StoreError> {
    let (by, reason) = accepted.unzip();
    tx.execute(
        "INSERT INTO server_history (id, system_identifier, timeline, policy, recorded_at, accepted_by, reason) \
         VALUES (1, $1, $2, $3, to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), $4, $5) \
         ON CONFLICT (id) DO UPDATE SET system_identifier = EXCLUDED.system_identifier, \
         timeline = EXCLUDED.timeline, policy = EXCLUDED.policy, recorded_at = EXCLUDED.recorded_at, \
         accepted_by = EXCLUDED.accepted_by, reason = EXCLUDED.reason",
        &[&history.system_identifier, &i64::from(history.timeline), &policy.as_str(), &by, &reason],
    )
    .map_err(map_error)?;
    Ok(())
}

/// Sets the policy, recording the server's current history only where none is recorded.
pub(crate) fn set_policy(tx: &mut Transaction<'_>, policy: ReplicationPolicy) -> Result<(), StoreError> {
    let status = status(tx)?;
    if status.recorded.is_none() {
        return write(tx, &status.server.history, policy, None);
    }
    tx.execute("UPDATE server_history SET policy = $1 WHERE id = 1", &[&policy.as_str()])
        .map_err(map_error)?;
    Ok(())
}

/// Records the server's current history as accepted by `by` for `reason`.
pub(crate) fn accept(
    tx: &mut Transaction<'_>,
    by: &str,
    reason: &str,
) -> Result<(Option<ServerHistory>, ServerHistory), StoreError> {
    let status = status(tx)?;
    let policy = status.recorded.as_ref().map_or_else(ReplicationPolicy::default, |r| r.policy);
    write(tx, &status.server.history, policy, Some((by, reason)))?;
    Ok((status.recorded.map(|r| r.history), status.server.history))
}
