//! Reading only what changed: a long-lived reader keeps the rows it read and the
//! store's [`ChangePosition`] at that read, and next time reads the worker rows written
//! since. On a live fleet every heartbeat is a write, so a reader that re-read all
//! 10 000 rows whenever anything moved spent most of its time reading rows that were
//! the same as last time.
//!
//! A reader serves what it kept only when it can prove every kept row current: the
//! store's counters must not have gone back or seen a removal, and the rows not written
//! since must be exactly the kept rows at the versions it kept (compared by digest).
//! A file restored in place from an older copy and then written again fails that proof,
//! and the reader reads everything.

use fleet_model::{InstanceRecord, LiveScope, RegistryDump, WorkerRow, WorkerStatus};

use crate::error::StoreError;
use crate::registry::Registry;
use crate::store::{ReadMark, Store};

/// One read of the registry by [`Registry::read_since`].
#[derive(Debug)]
pub struct RegistryRead {
    /// Where the store stood at this read and the versions of the rows read; give it to
    /// the next [`Registry::read_since`]. `None` when the store keeps no history.
    pub mark: Option<ReadMark>,
    /// What was read.
    pub changes: RegistryChanges,
}

/// What [`Registry::read_since`] read.
#[derive(Debug)]
pub enum RegistryChanges {
    /// The whole registry: there was no earlier position, the store keeps no history,
    /// or rows were removed since.
    Everything(RegistryDump),
    /// What changed since the earlier position.
    Since {
        /// Every worker row inserted or updated since, in no particular order (it may
        /// hold rows that did not change).
        workers: Vec<WorkerRow>,
        /// The whole ledger when it changed.
        instances: Option<Vec<InstanceRecord>>,
    },
}

/// The longest a reader follows changes before it reads everything again: whatever a
/// hand with write access to the store does to fool the proof above, a reader serves it
/// for at most this long.
pub const WHOLE_READ_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl<S: Store> Registry<S> {
    /// Reads the live fleet ([`fleet_model::LiveScope`]) in one transaction: all of it,
    /// or, given the mark of an earlier read of this store (`since`), only what changed
    /// after it — when the store proves that the rows not written since are the rows
    /// that read kept, and the history beside them unchanged. A launch that comes into
    /// the live fleet brings its history with it.
    pub fn read_since(&mut self, since: Option<ReadMark>) -> Result<RegistryRead, StoreError> {
        self.store_mut().read(|tx| {
            let Some(now) = tx.change_position()? else {
                return Ok(RegistryRead { mark: None, changes: RegistryChanges::Everything(live_in(tx)?) });
            };
            if let Some(then) = since {
                let at = *then.position();
                // Counters that went back belong to another history (a restored file).
                let continues = now.worker_removals == at.worker_removals
                    && now.history == at.history
                    && now.workers >= at.workers
                    && now.instances >= at.instances
                    && then.whole_read_within(WHOLE_READ_EVERY);
                if continues {
                    let (mut workers, versions) = if now.workers == at.workers {
                        (Vec::new(), Vec::new())
                    } else {
                        (tx.workers_changed_since(&at)?, tx.worker_versions_since(Some(&at))?)
                    };
                    if tx.versions_digest_upto(&at)? == Some(then.expected_unchanged(&versions)) {
                        // New active rows: their launches' history (none for a new launch)
                        // and ledger entries join the rows kept.
                        let mut launches: Vec<&str> = workers
                            .iter()
                            .filter(|r| r.status == WorkerStatus::Active)
                            .filter_map(|r| r.client_instance_id.as_deref())
                            .filter(|id| !then.keeps_launch(id))
                            .collect();
                        launches.sort_unstable();
                        launches.dedup();
                        let (history, history_versions) = if launches.is_empty() {
                            Default::default()
                        } else {
                            tx.launch_history(&launches)?
                        };
                        let instances = if now.instances == at.instances && launches.is_empty() {
                            None
                        } else {
                            Some(tx.live_instances()?)
                        };
                        let mut mark = then.advance(now, versions);
                        let joined: Vec<String> = launches.iter().map(|id| (*id).to_owned()).collect();
                        let history: Vec<WorkerRow> =
                            history.into_iter().filter(|r| !mark.keeps(r.worker_identity.as_str())).collect();
                        mark.keep(history_versions, joined);
                        workers.extend(history);
                        return Ok(RegistryRead {
                            mark: Some(mark),
                            changes: RegistryChanges::Since { workers, instances },
                        });
                    }
                }
            }
            let dump = live_in(tx)?;
            let mut mark = ReadMark::new(now, tx.live_worker_versions()?, tx.versions_digest_upto(&now)?);
            mark.set_launches(active_launches(&dump.worker_registrations));
            Ok(RegistryRead { mark: Some(mark), changes: RegistryChanges::Everything(dump) })
        })
    }
}

/// The live fleet's ledger entries and rows, as transaction `tx` sees them.
pub(crate) fn live_in(tx: &mut dyn crate::store::Tx) -> Result<RegistryDump, StoreError> {
    Ok(RegistryDump { instances: tx.live_instances()?, worker_registrations: tx.live_workers()? })
}

impl RegistryRead {
    /// Brings `dump`, the live fleet as read at the earlier position, up to date with
    /// this read (see [`RegistryChanges::apply`]), and returns the mark to give the
    /// next [`Registry::read_since`], which no longer counts rows that became history
    /// among those kept.
    pub fn apply(self, dump: &mut RegistryDump) -> (Option<ReadMark>, Vec<Option<usize>>) {
        let mut mark = self.mark;
        let (origins, forgotten) = self.changes.apply_live(dump);
        if let Some(mark) = mark.as_mut().filter(|_| !forgotten.is_empty()) {
            mark.forget(forgotten.iter().map(String::as_str));
            mark.set_launches(active_launches(&dump.worker_registrations));
        }
        (mark, origins)
    }
}

/// The launches with an active row among `rows`.
fn active_launches(rows: &[WorkerRow]) -> Vec<String> {
    let active = rows.iter().filter(|r| r.status == WorkerStatus::Active);
    active.filter_map(|r| r.client_instance_id.as_ref().map(|id| id.as_str().to_owned())).collect()
}

impl RegistryChanges {
    /// When these changes to `dump` (the registry as read at the earlier position) move
    /// heartbeats and nothing else, the places in `dump` of the rows whose heartbeat
    /// moved, in order (empty when nothing changed); `None` when they add or remove a
    /// row, change the ledger or change any other column. A whole registry read again
    /// (a store that keeps no history) is compared row by row.
    pub fn heartbeats_only(&self, dump: &RegistryDump) -> Option<Vec<usize>> {
        let rows = &dump.worker_registrations;
        let mut moved = Vec::new();
        match self {
            RegistryChanges::Everything(new) => {
                if new.instances != dump.instances || new.worker_registrations.len() != rows.len() {
                    return None;
                }
                for (i, (old, row)) in rows.iter().zip(&new.worker_registrations).enumerate() {
                    if old != row {
                        old.differs_only_in_heartbeat(row).then_some(())?;
                        moved.push(i);
                    }
                }
            }
            RegistryChanges::Since { workers, instances: None } => {
                for row in workers {
                    let i = rows.binary_search_by(|r| r.worker_identity.cmp(&row.worker_identity)).ok()?;
                    if rows[i] != *row {
                        rows[i].differs_only_in_heartbeat(row).then_some(())?;
                        moved.push(i);
                    }
                }
                moved.sort_unstable();
                moved.dedup();
            }
            RegistryChanges::Since { instances: Some(_), .. } => return None,
        }
        Some(moved)
    }

    /// Brings `dump`, the live fleet as read at the earlier position, up to date with
    /// these changes. Returns, for each worker row now in `dump`, its place in the rows
    /// before when it is the same row, unchanged (`None` for a new or changed row), so
    /// that what a caller derived from a row can be kept.
    ///
    /// The rows stay in `worker_identity` order: a changed row replaces the row of its
    /// identity, a new one is merged in. Rows and ledger entries that left the live
    /// fleet (their launch has no active row left) are let go.
    pub fn apply(self, dump: &mut RegistryDump) -> Vec<Option<usize>> {
        self.apply_live(dump).0
    }

    /// [`RegistryChanges::apply`], and the identities of the rows let go.
    fn apply_live(self, dump: &mut RegistryDump) -> (Vec<Option<usize>>, Vec<String>) {
        match self {
            RegistryChanges::Everything(new) => {
                let origins = new
                    .worker_registrations
                    .iter()
                    .enumerate()
                    .map(|(i, row)| (dump.worker_registrations.get(i) == Some(row)).then_some(i))
                    .collect();
                *dump = new;
                (origins, Vec::new())
            }
            RegistryChanges::Since { workers, instances } => {
                if let Some(instances) = instances {
                    dump.instances = instances;
                }
                // Only a row that is not active can take a launch out of the live fleet
                // (or be history of a launch that is not in it): heartbeats and new
                // registrations, nearly every read, merge without a pass over every row.
                let may_leave = workers.iter().any(|r| r.status != WorkerStatus::Active);
                let origins = merge(&mut dump.worker_registrations, workers);
                if !may_leave {
                    return (origins, Vec::new());
                }
                let scope = LiveScope::of(&dump.worker_registrations);
                let held: Vec<bool> = dump.worker_registrations.iter().map(|r| scope.holds(r)).collect();
                let records: Vec<bool> = dump.instances.iter().map(|i| scope.holds_record(i)).collect();
                drop(scope);
                if held.iter().chain(&records).all(|h| *h) {
                    return (origins, Vec::new());
                }
                let mut forgotten = Vec::new();
                let mut kept_origins = Vec::with_capacity(origins.len());
                let rows = std::mem::take(&mut dump.worker_registrations);
                for ((row, origin), held) in rows.into_iter().zip(origins).zip(held) {
                    if held {
                        dump.worker_registrations.push(row);
                        kept_origins.push(origin);
                    } else {
                        forgotten.push(row.worker_identity.to_string());
                    }
                }
                let mut records = records.into_iter();
                dump.instances.retain(|_| records.next().unwrap_or(false));
                (kept_origins, forgotten)
            }
        }
    }
}

/// Puts each of `changed` in place of the row of its identity in `rows`, or among them
/// in identity order when it is new; returns each row's earlier place if unchanged.
fn merge(rows: &mut Vec<WorkerRow>, changed: Vec<WorkerRow>) -> Vec<Option<usize>> {
    let mut origins: Vec<Option<usize>> = (0..rows.len()).map(Some).collect();
    let mut added = Vec::new();
    for row in changed {
        match rows.binary_search_by(|r| r.worker_identity.cmp(&row.worker_identity)) {
            Ok(i) if rows[i] == row => {}
            Ok(i) => {
                rows[i] = row;
                origins[i] = None;
            }
            Err(_) => added.push(row),
        }
    }
    if added.is_empty() {
        return origins;
    }
    // New rows (a registration, an import) are rare: the rows are sorted again with
    // them, two sorted runs that the stable sort merges in one pass. Should the rows
    // not have been in order after all, the sort puts them in order, and an identity
    // found twice keeps its newer row.
    let mut all: Vec<(WorkerRow, Option<usize>)> = std::mem::take(rows)
        .into_iter()
        .zip(origins)
        .chain(added.into_iter().map(|row| (row, None)))
        .collect();
    all.sort_by(|(a, _), (b, _)| a.worker_identity.cmp(&b.worker_identity));
    let mut merged: Vec<(WorkerRow, Option<usize>)> = Vec::with_capacity(all.len());
    for entry in all {
        match merged.last_mut() {
            Some(last) if last.0.worker_identity == entry.0.worker_identity => *last = entry,
            _ => merged.push(entry),
        }
    }
    rows.reserve(merged.len());
    merged
        .into_iter()
        .map(|(row, origin)| {
            rows.push(row);
            origin
        })
        .collect()
}
