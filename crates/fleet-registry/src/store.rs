//! The traits a registry backend implements: transactions over a few primitive reads and
//! guarded writes. The rules live in [`crate::Registry`], written once over these.

use fleet_identity::{ClientInstanceId, Namespace, Timestamp, WorkerIdentity};
use fleet_lease::{LeaseKey, LeaseKind, LeaseRecord};
use fleet_model::{Claim, HostBoot, HostFence, InstanceRecord, RegistryDump, WorkerRow};

use crate::error::StoreError;
use crate::records::AuditEntry;
use crate::records::WorkerCredential;

/// The version of the registry's schema (its tables and columns) that this build reads
/// and writes; workers record it as their `schema_revision`. Every backend's migrations
/// reach at least this version; a backend may number further migrations of its own
/// that add nothing to the data model (SQLite's fourth keeps a history of changes).
pub const SCHEMA_VERSION: i64 = 3;

/// Rows' identities and versions (the value of [`ChangePosition::workers`] each was last
/// written at).
pub type RowVersions = Vec<(String, i64)>;

/// Whether opening a registry may create it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Create the registry (a SQLite file with mode 0600, and its directory) when missing.
    CreateIfMissing,
    /// Fail with `Unavailable` when the registry does not exist: readers must not report
    /// an empty fleet because a path was mistyped.
    MustExist,
}

/// How many lease decisions of one event, outcome and denial reason the store has
/// written (see [`Tx::decision_counts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionCount {
    /// The lifecycle event (`acquire`, `renew`, …).
    pub event: String,
    /// The outcome code.
    pub outcome: String,
    /// The denial reason, when the decision was a denial.
    pub reason: Option<String>,
    /// How many.
    pub n: u64,
}

/// Which audit entries a reader wants, one page at a time (see [`Tx::audit_page`]).
#[derive(Debug, Clone, Copy)]
pub struct AuditQuery<'a> {
    /// Only this lease's entries.
    pub key: Option<&'a LeaseKey>,
    /// Only entries at or after this time.
    pub since: Option<Timestamp>,
    /// Only entries before this time.
    pub until: Option<Timestamp>,
    /// Oldest first: entries whose `id` is above this. Newest first: below it.
    pub after: i64,
    /// Newest first (for the last entries of a log, `--tail`).
    pub newest_first: bool,
    /// The most entries one page holds.
    pub limit: usize,
}

impl AuditQuery<'_> {
    /// The newest `limit` entries of the whole log, newest first.
    pub fn newest(limit: usize) -> Self {
        AuditQuery { key: None, since: None, until: None, after: i64::MAX, newest_first: true, limit }
    }

    /// Whether `entry` is one this query selects (ignoring the page's size).
    pub fn selects(&self, entry: &AuditEntry) -> bool {
        let position = if self.newest_first { entry.id < self.after } else { entry.id > self.after };
        position
            && self.key.is_none_or(|k| entry.lease_key == k.as_str())
            && self.since.is_none_or(|t| entry.at >= t)
            && self.until.is_none_or(|t| entry.at < t)
    }
}

/// The primitive operations available inside one transaction.
pub trait Tx {
    /// Every worker row, ordered by `worker_identity`.
    fn workers(&mut self) -> Result<Vec<WorkerRow>, StoreError>;
    /// Up to `limit` rows, of any status, whose `worker_identity` comes after `after`
    /// (from the first without it), in identity order (bytewise): one page of
    /// [`Tx::workers`], so a reader of a registry of any size and history holds a page at
    /// a time. A backend answers it from its identity index.
    fn workers_page(
        &mut self,
        after: Option<&WorkerIdentity>,
        limit: usize,
    ) -> Result<Vec<WorkerRow>, StoreError> {
        let mut rows = self.workers()?;
        rows.retain(|r| after.is_none_or(|a| r.worker_identity > *a));
        rows.truncate(limit);
        Ok(rows)
    }
    /// The live fleet's rows ([`fleet_model::LiveScope`]: every active row, and every
    /// row of a launch that has one), ordered by `worker_identity`: what the snapshot,
    /// the retirement plan and its apply read. A backend answers from an index, so the
    /// history beside the live fleet costs these reads nothing.
    fn live_workers(&mut self) -> Result<Vec<WorkerRow>, StoreError> {
        let rows = self.workers()?;
        Ok(RegistryDump { instances: Vec::new(), worker_registrations: rows }.live().worker_registrations)
    }
    /// The ledger entries of the launches that have an active row, ordered by
    /// `client_instance_id`.
    fn live_instances(&mut self) -> Result<Vec<InstanceRecord>, StoreError> {
        let dump = RegistryDump { instances: self.instances()?, worker_registrations: self.workers()? };
        Ok(dump.live().instances)
    }
    /// One worker row.
    fn worker(&mut self, id: &WorkerIdentity) -> Result<Option<WorkerRow>, StoreError>;
    /// Every row, of any status, that claims `(client_instance_id, namespace)`.
    fn slot(&mut self, instance: &str, namespace: Namespace) -> Result<Vec<WorkerRow>, StoreError>;
    /// Inserts a new row; a row with the same `worker_identity` is a conflict.
    fn insert_worker(&mut self, row: &WorkerRow) -> Result<(), StoreError>;
    /// Compare-and-swap: replaces the row only if every column still equals `expected`.
    /// Returns whether it did.
    fn replace_worker(&mut self, expected: &WorkerRow, new: &WorkerRow) -> Result<bool, StoreError>;
    /// Compare-and-delete: removes the row only if every column still equals `expected`.
    /// Returns whether it did. Only pruning of terminal rows deletes.
    fn delete_worker(&mut self, expected: &WorkerRow) -> Result<bool, StoreError>;
    /// The whole ledger, ordered by `client_instance_id`.
    fn instances(&mut self) -> Result<Vec<InstanceRecord>, StoreError>;
    /// One ledger entry.
    fn instance(&mut self, id: &ClientInstanceId) -> Result<Option<InstanceRecord>, StoreError>;
    /// Records a minted ID; an ID already recorded is a conflict.
    fn insert_instance(&mut self, record: &InstanceRecord) -> Result<(), StoreError>;

    /// The store's clock: lease expiry is judged on it, never on a caller's.
    fn store_now(&mut self) -> Result<Timestamp, StoreError>;
    /// The registry's id, minted when the registry was created (see [`crate::RegistryId`]).
    fn registry_id(&mut self) -> Result<crate::RegistryId, StoreError>;
    /// The highest fencing epoch ever handed out in `scope` (a lease key, a worker slot),
    /// 0 when none: kept where pruning, importing and restoring rows do not reach, so an
    /// epoch is never handed out twice.
    fn high_water(&mut self, scope: &str) -> Result<u64, StoreError>;
    /// Every scope's high-water mark, ordered by scope.
    fn high_waters(&mut self) -> Result<Vec<(String, u64)>, StoreError>;
    /// Raises `scope`'s high-water mark to `epoch` (never lowers it).
    fn raise_high_water(&mut self, scope: &str, epoch: u64) -> Result<(), StoreError>;
    /// [`raise_high_water`](Self::raise_high_water) for each scope, each named once; a
    /// backend whose round trips cost may raise them at once.
    fn raise_high_waters(&mut self, marks: &[(String, u64)]) -> Result<(), StoreError> {
        marks.iter().try_for_each(|(scope, epoch)| self.raise_high_water(scope, *epoch))
    }
    /// Every host fence, lifted ones included, ordered by host and boot.
    fn host_fences(&mut self) -> Result<Vec<HostFence>, StoreError>;
    /// Writes `fence`: inserts it, or replaces the fence of the same host and boot.
    fn put_host_fence(&mut self, fence: &HostFence) -> Result<(), StoreError>;
    /// What each host's boots last said of themselves, ordered by host and boot.
    fn host_boots(&mut self) -> Result<Vec<HostBoot>, StoreError>;
    /// Records what a boot says of itself: inserts it, or keeps its `first_seen_at` and
    /// replaces the rest.
    fn note_host_boot(&mut self, boot: &HostBoot) -> Result<(), StoreError>;
    /// One lease.
    fn lease(&mut self, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError>;
    /// Every lease, optionally of one kind, ordered by key.
    fn leases(&mut self, kind: Option<LeaseKind>) -> Result<Vec<LeaseRecord>, StoreError>;
    /// Compare-and-swap: inserts `new` when `expected` is `None` (false if a row exists),
    /// else replaces the row only if it still equals `expected`. Returns whether it wrote.
    fn put_lease(&mut self, expected: Option<&LeaseRecord>, new: &LeaseRecord) -> Result<bool, StoreError>;
    /// Appends to the audit log (the store assigns `id`).
    fn append_audit(&mut self, entry: &AuditEntry) -> Result<(), StoreError>;
    /// Appends `entries` in their order, as [`append_audit`](Self::append_audit) does
    /// one by one; a backend whose round trips cost may write them at once.
    fn append_audits(&mut self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        entries.iter().try_for_each(|e| self.append_audit(e))
    }
    /// The audit log, optionally of one lease, in log order.
    fn audit(&mut self, key: Option<&LeaseKey>) -> Result<Vec<AuditEntry>, StoreError>;
    /// Inserts many ledger entries at once, as an import does. Fails as
    /// [`Tx::insert_instance`] does.
    fn insert_instances(&mut self, records: &[InstanceRecord]) -> Result<(), StoreError> {
        records.iter().try_for_each(|record| self.insert_instance(record))
    }
    /// Inserts many rows at once, as an import does; a backend may send them in fewer
    /// round trips than one statement per row. Fails as [`Tx::insert_worker`] does.
    fn insert_workers(&mut self, rows: &[WorkerRow]) -> Result<(), StoreError> {
        rows.iter().try_for_each(|row| {
            self.insert_worker(row).map_err(|e| crate::records::worker_conflict(e, &row.worker_identity))
        })
    }
    /// The audit entries after position `after` (an entry's `id`), in log order: what a
    /// reader that keeps counts reads on each visit. A backend answers it from its index.
    fn audit_after(&mut self, after: i64) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self.audit(None)?.into_iter().filter(|e| e.id > after).collect())
    }
    /// The lease decisions counted as the store wrote them: `(event, outcome, reason, n)`,
    /// the reason empty for a decision that was not a denial. `None` when the store keeps
    /// no such counts (then a reader counts the log itself).
    fn decision_counts(&mut self) -> Result<Option<Vec<DecisionCount>>, StoreError> {
        Ok(None)
    }
    /// Removes the audit entries at or below position `through` written before `before`
    /// (what a retention run exported first), and nothing else; returns how many. The
    /// log refuses every other update and delete. A backend that cannot refuses.
    fn prune_audit(&mut self, through: i64, before: Timestamp) -> Result<usize, StoreError> {
        let _ = (through, before);
        Err(StoreError::new(crate::StoreErrorKind::Unavailable, "this store cannot prune its audit log"))
    }
    /// One page of the audit entries `query` selects, at most `query.limit`: oldest first
    /// after `query.after`, or newest first before it. A backend answers it with one
    /// bounded statement, so a reader pages through a log of any size in flat memory.
    fn audit_page(&mut self, query: &AuditQuery<'_>) -> Result<Vec<AuditEntry>, StoreError> {
        let mut page: Vec<AuditEntry> =
            self.audit(query.key)?.into_iter().filter(|e| query.selects(e)).collect();
        if query.newest_first {
            page.reverse();
        }
        page.truncate(query.limit);
        Ok(page)
    }

    /// Every row the stale sweep may mark at `now` — each active, not yet stale row
    /// whose heartbeat lapsed, perhaps with more rows (the sweep checks each again) —
    /// and how many rows are active. A backend filters on the server, so a sweep of a
    /// large live fleet reads the few rows that lapsed, not every row.
    fn sweep_candidates(&mut self, now: Timestamp) -> Result<(Vec<WorkerRow>, usize), StoreError> {
        let _ = now;
        let rows = self.workers()?;
        let active = rows.iter().filter(|r| r.status == fleet_model::WorkerStatus::Active).count();
        Ok((rows, active))
    }

    /// The server's replication and the history the registry recorded (see
    /// [`crate::ReplicationStatus`]); `None` for a store that does not replicate.
    fn replication(&mut self) -> Result<Option<crate::ReplicationStatus>, StoreError> {
        Ok(None)
    }

    /// Sets the registry's replication policy, recording the server's current history
    /// when none is recorded yet (never replacing one: that is an acceptance).
    fn set_replication_policy(&mut self, policy: crate::ReplicationPolicy) -> Result<(), StoreError> {
        let _ = policy;
        Err(no_replication())
    }

    /// Records the server's current history as the one grants are made on, with who
    /// accepted it and why; returns the history recorded before, if any. The caller
    /// raises the epoch floor in the same transaction.
    fn accept_server_history(
        &mut self,
        accepted_by: &str,
        reason: &str,
    ) -> Result<(Option<crate::ServerHistory>, crate::ServerHistory), StoreError> {
        let _ = (accepted_by, reason);
        Err(no_replication())
    }

    /// Where the store's history of worker rows and ledger entries stands, as this
    /// transaction sees it; `None` when the store keeps no such history (then a reader
    /// reads every row each time).
    fn change_position(&mut self) -> Result<Option<ChangePosition>, StoreError> {
        Ok(None)
    }

    /// Every worker row inserted or updated since the store stood at `since` (a
    /// position this store returned), in no particular order. It may return more
    /// rows than changed, never fewer; rows removed since are not its concern (see
    /// [`ChangePosition::worker_removals`]).
    fn workers_changed_since(&mut self, since: &ChangePosition) -> Result<Vec<WorkerRow>, StoreError> {
        let _ = since;
        self.workers()
    }

    /// Each worker row's version — the value of [`ChangePosition::workers`] it was last
    /// written at — for the rows written since `since`, or for every row (`None`).
    /// Empty where the store keeps no history.
    fn worker_versions_since(
        &mut self,
        since: Option<&ChangePosition>,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let _ = since;
        Ok(Vec::new())
    }

    /// The digest of the versions of the rows not written since `upto` (version at most
    /// `upto.workers`): what a reader that kept those rows checks its own against before
    /// it trusts them. `None` where the store keeps no history.
    fn versions_digest_upto(&mut self, upto: &ChangePosition) -> Result<Option<VersionsDigest>, StoreError> {
        let _ = upto;
        Ok(None)
    }

    /// The versions (as [`Tx::worker_versions_since`] gives them) of the live fleet's
    /// rows ([`Tx::live_workers`]): what a reader that keeps those rows marks them with.
    fn live_worker_versions(&mut self) -> Result<Vec<(String, i64)>, StoreError> {
        let live: std::collections::HashSet<String> =
            self.live_workers()?.into_iter().map(|r| r.worker_identity.to_string()).collect();
        Ok(self.worker_versions_since(None)?.into_iter().filter(|(id, _)| live.contains(id)).collect())
    }

    /// The rows of `launches` that are not active, and their versions: the history a
    /// reader of the live fleet takes in when one of these launches has an active row
    /// again (or for the first time: then there is none).
    fn launch_history(&mut self, launches: &[&str]) -> Result<(Vec<WorkerRow>, RowVersions), StoreError> {
        let rows: Vec<WorkerRow> = self
            .workers()?
            .into_iter()
            .filter(|r| r.status != fleet_model::WorkerStatus::Active)
            .filter(|r| r.client_instance_id.as_deref().is_some_and(|id| launches.contains(&id)))
            .collect();
        let ids: std::collections::HashSet<String> =
            rows.iter().map(|r| r.worker_identity.to_string()).collect();
        let versions =
            self.worker_versions_since(None)?.into_iter().filter(|(id, _)| ids.contains(id)).collect();
        Ok((rows, versions))
    }
}

/// What a store without replication answers to a replication command.
fn no_replication() -> StoreError {
    StoreError::invalid(
        "this registry's store does not replicate (SQLite): replication settings are PostgreSQL's",
    )
}

/// How many rows, and the sum of their versions' low 32 bits (so no sum of a realistic
/// registry overflows): a digest two sets of row versions are compared by. Versions
/// move by random steps, so a row brought back at an older version (a restored backup)
/// changes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VersionsDigest {
    /// Rows.
    pub rows: i64,
    /// Sum of each version's low 32 bits.
    pub sum: i64,
}

impl VersionsDigest {
    /// The part of `version` the sum counts.
    pub fn part(version: i64) -> i64 {
        version & 0xFFFF_FFFF
    }

    fn add(&mut self, version: i64) {
        self.rows += 1;
        self.sum = self.sum.wrapping_add(Self::part(version));
    }

    fn remove(&mut self, version: i64) {
        self.rows -= 1;
        self.sum = self.sum.wrapping_sub(Self::part(version));
    }
}

/// What a reader keeps to prove its rows current: the store's position at its read,
/// the version of each row it holds (the live fleet's), and the digest of every row the
/// store held then (those rows and the history beside them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadMark {
    position: ChangePosition,
    versions: std::collections::HashMap<String, i64>,
    digest: VersionsDigest,
    /// The launches with an active row among the kept rows.
    launches: std::collections::HashSet<String>,
    /// When the registry was last read whole for this mark.
    whole_read_at: std::time::Instant,
}

impl ReadMark {
    /// A mark at `position` for kept rows of these versions, in a store whose rows
    /// all together show `digest` (`None`: the kept rows are all there are).
    pub(crate) fn new(
        position: ChangePosition,
        versions: Vec<(String, i64)>,
        digest: Option<VersionsDigest>,
    ) -> Self {
        let digest = digest.unwrap_or_else(|| {
            let mut sum = VersionsDigest::default();
            versions.iter().for_each(|(_, v)| sum.add(*v));
            sum
        });
        Self {
            position,
            versions: versions.into_iter().collect(),
            digest,
            launches: std::collections::HashSet::new(),
            whole_read_at: std::time::Instant::now(),
        }
    }

    /// Whether the registry was read whole for this mark within `limit`.
    pub(crate) fn whole_read_within(&self, limit: std::time::Duration) -> bool {
        self.whole_read_at.elapsed() <= limit
    }

    /// The store's position at the read.
    pub fn position(&self) -> &ChangePosition {
        &self.position
    }

    /// Whether the reader keeps the row `id`.
    pub(crate) fn keeps(&self, id: &str) -> bool {
        self.versions.contains_key(id)
    }

    /// Whether the launch `id` has an active row among the kept rows.
    pub(crate) fn keeps_launch(&self, id: &str) -> bool {
        self.launches.contains(id)
    }

    /// The launches with an active row among the kept rows are these.
    pub(crate) fn set_launches(&mut self, launches: impl IntoIterator<Item = String>) {
        self.launches = launches.into_iter().collect();
    }

    /// The digest the rows not among `changed` must show, if every one of them is the
    /// row this mark holds (or history the reader does not keep, unchanged): the
    /// store's digest at the read without the kept rows written since.
    pub(crate) fn expected_unchanged(&self, changed: &[(String, i64)]) -> VersionsDigest {
        let mut digest = self.digest;
        for (id, _) in changed {
            if let Some(v) = self.versions.get(id) {
                digest.remove(*v);
            }
        }
        digest
    }

    /// This mark moved to `position`, with the rows written since at their versions.
    pub(crate) fn advance(mut self, position: ChangePosition, changed: Vec<(String, i64)>) -> Self {
        for (id, v) in changed {
            if let Some(old) = self.versions.insert(id, v) {
                self.digest.remove(old);
            }
            self.digest.add(v);
        }
        self.position = position;
        self
    }

    /// Launches that now have an active row among the kept rows, and their history,
    /// unchanged since the read, that the reader now keeps.
    pub(crate) fn keep(&mut self, history: Vec<(String, i64)>, launches: Vec<String>) {
        self.versions.extend(history);
        self.launches.extend(launches);
    }

    /// Rows the reader no longer keeps (they became history); they stay in the store.
    pub(crate) fn forget<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) {
        for id in ids {
            self.versions.remove(id);
        }
    }
}

/// Where a store's history of worker rows and ledger entries stands: counters that
/// move, in commit order, with every change. A long-lived reader keeps the position it
/// read its rows at and then reads only the rows changed since
/// ([`crate::Registry::read_since`]). A position means something only to the store
/// that returned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangePosition {
    /// Moves with every worker row inserted or updated; the row records the value it
    /// moved to, which is how [`Tx::workers_changed_since`] finds it.
    pub workers: i64,
    /// Moves with every worker row removed (or given another `worker_identity`).
    pub worker_removals: i64,
    /// Moves with every ledger entry written or removed.
    pub instances: i64,
    /// Moves with anything that could rewrite the history itself (SQLite's
    /// `schema_version`: a trigger dropped or changed): a reader whose position holds
    /// another value reads everything.
    pub history: i64,
}

/// A registry backend.
pub trait Store {
    /// Runs `f` in a write transaction that holds the write lock from its first
    /// statement (SQLite's `BEGIN IMMEDIATE`). The transaction commits when `f` returns
    /// `Ok` and rolls back, leaving nothing written, when it returns `Err`.
    fn write<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>;

    /// Like [`write`](Self::write), for a grant (a lease's tenure, a registration's slot
    /// epoch), whose fencing epoch is used against outside systems and must never be
    /// handed out twice: the commit survives an OS crash or power loss before it
    /// returns, and on a replicated server the failover the registry's
    /// [`ReplicationPolicy`](crate::ReplicationPolicy) covers, or the write is refused
    /// (`NotDurable`) before anything is written. A commit whose outcome the store cannot
    /// know fails `OutcomeUnknown`. Backends whose every commit is durable and that
    /// do not replicate need not override it.
    fn write_durable<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        self.write(f)
    }

    /// Runs `f` in a read transaction that sees one consistent state of the store.
    fn read<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>;

    /// Whether this build may still use the registry's schema, as at open: fails with
    /// [`NewerSchema`](crate::StoreErrorKind::NewerSchema) once an upgrade moved it past what this build
    /// may use (and `OlderSchema` where it went back). A session kept open for long (a
    /// worker's) asks now and then, so that it does not run on unseen. The default says
    /// yes: a store whose schema never moves under an open session.
    fn check_schema(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// A value that moves whenever any connection commits a change to the store, read
    /// without reading a row: a long-lived reader keeps what it read while the marker
    /// stands still, and reads again once it moves. Read it *before* the rows it guards,
    /// so a commit in between can only cause a needless re-read, never a stale answer.
    /// `None` when the backend cannot tell, and then the caller must read every time.
    fn change_marker(&mut self) -> Result<Option<u128>, StoreError> {
        Ok(None)
    }

    /// Bounds how long any one call may wait on the store from now on (`None`: the
    /// backend's own bound): a lease holder renewing sets it to the time its lease has
    /// left, so a renewal that cannot finish in time fails instead of hanging. Backends
    /// without such a bound ignore it.
    fn set_call_deadline(&mut self, _deadline: Option<std::time::Duration>) {}

    /// Brings the store's planner statistics up to date after a bulk load (an import or
    /// a restore), so the first reads after it are planned on what the tables now hold.
    /// No default: a store that wraps another must pass it on.
    fn after_bulk_load(&mut self) -> Result<(), StoreError>;

    /// The heartbeat, as one guarded statement: sets `last_heartbeat_at = now` and
    /// `ownership_state` to what the worker claims on the row only if it is active and
    /// still belongs to the credential's generation and token. Returns whether a row
    /// matched.
    fn touch_heartbeat(
        &mut self,
        who: &WorkerCredential,
        now: Timestamp,
        claim: Claim,
    ) -> Result<bool, StoreError>;
}

/// What `registry upgrade` did, or would do (`dry_run`), to a registry's schema.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SchemaUpgrade {
    /// The schema version the registry was at.
    pub from: i64,
    /// The version it is at now (or would be).
    pub to: i64,
    /// Each step, `N: what it adds`, in order.
    pub steps: Vec<String>,
    /// Where the registry as it was is kept (a file beside a SQLite registry; tables
    /// beside a PostgreSQL registry's), when a copy was taken.
    pub backup: Option<String>,
    /// Whether nothing was changed because this was a dry run.
    pub dry_run: bool,
}

/// What an import wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ImportSummary {
    /// Ledger entries written.
    pub instances: usize,
    /// Ledger entries already present with the same content.
    pub instances_unchanged: usize,
    /// Worker rows written.
    pub workers: usize,
    /// Lease rows written.
    pub leases: usize,
    /// Audit-log entries written.
    pub audit_entries: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_tells_how_long_ago_the_registry_was_read_whole() {
        let position = ChangePosition { workers: 1, worker_removals: 0, instances: 0, history: 0 };
        let mark = ReadMark::new(position, vec![("w".into(), 1)], None);
        assert!(mark.whole_read_within(crate::WHOLE_READ_EVERY));
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(!mark.whole_read_within(std::time::Duration::from_millis(1)), "older than the limit");
        let advanced = mark.advance(position, vec![("w".into(), 2)]);
        assert!(
            !advanced.whole_read_within(std::time::Duration::from_millis(1)),
            "following is not reading whole"
        );
    }
}
