//! The registry's rules, written once over [`Store`]: registration (its rule in
//! `registration`), heartbeats, release, the stale sweep, and import and export.

use fleet_identity::{ClientInstanceId, Namespace, Timestamp, WorkerIdentity};
use fleet_model::{
    Claim, InstanceRecord, LivenessProbe, OwnershipState, RegistryDump, WorkerRow, WorkerStatus,
};

use crate::error::{StoreError, StoreErrorKind};
pub use crate::records::{WorkerCredential, WorkerToken};
pub use crate::registration::{
    HeartbeatTtl, InstanceRef, Registered, Registration, RegistrationOutcome, Revisions, TtlOutOfRange,
};
use crate::registration::{mint_worker_identity, register_in};
use crate::store::{ImportSummary, Store, Tx};

/// The registry: the rules over a [`Store`].
#[derive(Debug)]
pub struct Registry<S> {
    store: S,
    /// The host and boot this registry's lease operations come from, when known.
    pub(crate) caller: Option<crate::hosts::Caller>,
}

/// What a stale sweep did, and the fleet it looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sweep {
    /// The rows it marked stale.
    pub marked: Vec<WorkerIdentity>,
    /// How many rows were active when it looked.
    pub active_workers: usize,
}

/// The most rows one write transaction of a sweep marks stale: a few milliseconds of
/// the write lock, so registrations and heartbeats wait no longer behind a sweep of a
/// large fleet than behind any other write.
pub const SWEEP_BATCH: usize = 256;

impl<S: Store> Registry<S> {
    /// Wraps a store.
    pub fn new(store: S) -> Self {
        Self { store, caller: None }
    }

    /// The store underneath, for reads a backend offers beyond the registry's own.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store underneath, given back.
    pub fn into_store(self) -> S {
        self.store
    }

    /// The store underneath, for the algorithms of this crate.
    pub(crate) fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Whether this build may still use the registry's schema (see
    /// [`Store::check_schema`]).
    pub fn check_schema(&mut self) -> Result<(), StoreError> {
        self.store.check_schema()
    }

    /// The store's change marker (see [`Store::change_marker`]).
    pub fn change_marker(&mut self) -> Result<Option<u128>, StoreError> {
        self.store.change_marker()
    }

    /// Bounds how long any one call may wait on the store (see [`Store::set_call_deadline`]).
    pub fn set_call_deadline(&mut self, deadline: Option<std::time::Duration>) {
        self.store.set_call_deadline(deadline);
    }

    /// One worker row.
    pub fn worker(&mut self, id: &WorkerIdentity) -> Result<Option<WorkerRow>, StoreError> {
        self.store.read(|tx| tx.worker(id))
    }

    /// Every row, of any status, of one `(instance, namespace)` slot.
    pub fn slot(&mut self, instance: &str, namespace: Namespace) -> Result<Vec<WorkerRow>, StoreError> {
        self.store.read(|tx| tx.slot(instance, namespace))
    }

    /// The registry's id: the same however its location is spelled (see [`crate::RegistryId`]).
    pub fn registry_id(&mut self) -> Result<crate::RegistryId, StoreError> {
        self.store.read(|tx| tx.registry_id())
    }

    /// The store's clock now (PostgreSQL's server clock; for a SQLite file, its host's
    /// kernel clock).
    pub fn store_now(&mut self) -> Result<Timestamp, StoreError> {
        self.store.read(|tx| tx.store_now())
    }

    /// Every worker row with the store's clock, read in one transaction.
    pub fn workers_at_store_clock(&mut self) -> Result<(Vec<WorkerRow>, Timestamp), StoreError> {
        self.store.read(|tx| Ok((tx.workers()?, tx.store_now()?)))
    }

    /// Records an ID the launcher minted. Only recorded IDs are trusted.
    pub fn record_instance(&mut self, record: &InstanceRecord) -> Result<(), StoreError> {
        self.store.write(|tx| tx.insert_instance(record))?;
        tracing::info!(
            client_instance = record.client_instance_id.as_str(),
            client_type = record.client_type.as_str(),
            outcome = "minted",
            "launch recorded in the ledger"
        );
        Ok(())
    }

    /// Whether the launcher recorded `id`.
    pub fn instance(&mut self, id: &ClientInstanceId) -> Result<Option<InstanceRecord>, StoreError> {
        self.store.read(|tx| tx.instance(id))
    }

    /// The launcher's ledger.
    pub fn instances(&mut self) -> Result<Vec<InstanceRecord>, StoreError> {
        self.store.read(|tx| tx.instances())
    }

    /// Every worker row.
    pub fn workers(&mut self) -> Result<Vec<WorkerRow>, StoreError> {
        self.store.read(|tx| tx.workers())
    }

    /// Up to `limit` worker rows after `after`, in identity order: a page of
    /// [`Registry::workers`] (`None` starts at the first row).
    pub fn workers_page(
        &mut self,
        after: Option<&WorkerIdentity>,
        limit: usize,
    ) -> Result<Vec<WorkerRow>, StoreError> {
        self.store.read(|tx| tx.workers_page(after, limit))
    }

    /// The live fleet ([`fleet_model::LiveScope`]): its ledger entries and rows, read
    /// from the store's index, without the history beside them.
    pub fn live(&mut self) -> Result<RegistryDump, StoreError> {
        self.store.read(crate::changes::live_in)
    }

    /// The ledger and every worker row, read in one transaction.
    pub fn export(&mut self) -> Result<RegistryDump, StoreError> {
        self.store.read(export_in)
    }

    /// Registers a worker process.
    ///
    /// The same process registering again (same host, boot, pid, start time and
    /// generation) keeps its row and identity: a reconnect. Any other process gets a new
    /// `worker_identity` under the same instance, with a fencing epoch one above every
    /// earlier row of its `(instance, namespace)` slot. Earlier active rows of that slot
    /// whose process `probe` proves gone are marked superseded; rows it cannot prove gone
    /// are left for the snapshot to report.
    pub fn register(
        &mut self,
        reg: &Registration,
        token: &WorkerToken,
        now: Timestamp,
        probe: &dyn LivenessProbe,
    ) -> Result<Registered, StoreError> {
        if let InstanceRef::Minted(id) = &reg.instance
            && id.client_type() != &reg.client_type
        {
            return Err(StoreError::invalid(format!(
                "instance id {id} was minted for client {}, not {}",
                id.client_type(),
                reg.client_type
            )));
        }
        let worker_identity = mint_worker_identity(reg.namespace)?;
        let registered = self
            .store
            .write_durable(|tx| register_in(tx, reg, token, now, probe, worker_identity))
            .map_err(|e| match e.kind() {
                StoreErrorKind::OutcomeUnknown => StoreError::new(
                    StoreErrorKind::OutcomeUnknown,
                    format!(
                        "the registration of {} for instance {} may have committed or not: {e}",
                        reg.namespace,
                        reg.instance.as_str()
                    ),
                ),
                _ => e,
            });
        match &registered {
            Ok(r) => tracing::info!(
                worker = %r.row.worker_identity,
                namespace = %reg.namespace,
                instance = reg.instance.as_str(),
                outcome = r.outcome.as_str(),
                superseded = r.superseded.len(),
                "registered"
            ),
            Err(e) => {
                tracing::info!(namespace = %reg.namespace, instance = reg.instance.as_str(), error = %e, "registration refused")
            }
        }
        registered
    }

    /// Records a heartbeat. Fails with `NotFound` when the row is gone or no longer
    /// active, and with `Conflict` when another generation or token holds it: in both
    /// cases the caller has lost its registration and must stop acting as that worker.
    pub fn heartbeat(&mut self, who: &WorkerCredential, now: Timestamp) -> Result<(), StoreError> {
        self.heartbeat_claiming(who, now, Claim::Owned)
    }

    /// [`heartbeat`](Self::heartbeat), saying what the worker claims of its ownership
    /// now (a worker whose launch's client died heartbeats as orphaned).
    pub fn heartbeat_claiming(
        &mut self,
        who: &WorkerCredential,
        now: Timestamp,
        claim: Claim,
    ) -> Result<(), StoreError> {
        if self.store.touch_heartbeat(who, now, claim)? {
            return Ok(());
        }
        self.store.read(|tx| -> Result<(), StoreError> {
            let row = tx.worker(&who.worker_identity)?;
            if let Some(row) = row.as_ref().filter(|r| holds(who, r))
                && let (Some(host), Some(boot)) = (&row.host_id, &row.boot_id)
            {
                crate::hosts::refuse_if_fenced(tx, host, boot)?;
            }
            Err(lost_registration(who, row.as_ref()))
        })
    }

    /// Releases a registration on a clean exit.
    pub fn release(&mut self, who: &WorkerCredential, now: Timestamp) -> Result<WorkerRow, StoreError> {
        self.store.write(|tx| {
            let row = tx.worker(&who.worker_identity)?;
            let current = match row {
                Some(row) if holds(who, &row) => row,
                other => return Err(lost_registration(who, other.as_ref())),
            };
            if let (Some(host), Some(boot)) = (&current.host_id, &current.boot_id) {
                crate::hosts::refuse_if_fenced(tx, host, boot)?;
            }
            let mut released = current.clone();
            released.status = WorkerStatus::Released;
            released.last_heartbeat_at = Some(now.to_string());
            if !tx.replace_worker(&current, &released)? {
                return Err(StoreError::conflict(format!(
                    "worker {} changed while it was being released",
                    who.worker_identity
                )));
            }
            tracing::info!(worker = %released.worker_identity, "released");
            Ok(released)
        })
    }

    /// The stale sweep: marks `ownership_state = stale` on every active row not yet stale
    /// (owned, orphaned or unowned) whose heartbeat expired by `now` (see [`WorkerRow::heartbeat_expired`]). Status stays
    /// `active`: the row is now a stale worker still marked active, which only a
    /// heartbeat from its own process (back to owned) or retirement ends. Each row is
    /// swapped only if unchanged since it was read, so a heartbeat racing the sweep wins.
    ///
    /// Every live worker runs it on its heartbeat tick, so it first looks in a read
    /// transaction (reading only the rows the store finds lapsed, see
    /// [`Tx::sweep_candidates`](crate::Tx::sweep_candidates)) and takes the write lock
    /// only when some row is due; then it marks the
    /// rows it found due in short write transactions of at most [`SWEEP_BATCH`] rows
    /// each, so a sweep of a large fleet never holds the write lock (and every
    /// registration and heartbeat waiting on it) for the whole pass. A batch that fails
    /// ends the sweep with what earlier batches marked kept: each mark stands on its own.
    pub fn mark_expired_stale(&mut self, now: Timestamp) -> Result<Vec<WorkerIdentity>, StoreError> {
        Ok(self.sweep(now)?.marked)
    }

    /// [`mark_expired_stale`](Self::mark_expired_stale), also saying how many active
    /// workers the fleet has, which a worker uses to pace its own sweeps.
    pub fn sweep(&mut self, now: Timestamp) -> Result<Sweep, StoreError> {
        let (due, active_workers) = self.store.read(|tx| {
            let (candidates, active) = tx.sweep_candidates(now)?;
            let due: Vec<WorkerRow> = candidates.into_iter().filter(|row| due_for_sweep(row, now)).collect();
            Ok::<_, StoreError>((due, active))
        })?;
        let mut marked = Vec::new();
        for batch in due.chunks(SWEEP_BATCH) {
            // Each row is swapped only if it is still exactly as read: one that
            // heartbeated, was released or re-registered since is left as it now is.
            let swapped = self.store.write(|tx| {
                let mut swapped = Vec::new();
                for row in batch {
                    let mut stale = row.clone();
                    stale.ownership_state = Some(OwnershipState::Stale);
                    if tx.replace_worker(row, &stale)? {
                        tracing::info!(worker = %row.worker_identity, "sweep: heartbeat expired, marked stale");
                        swapped.push(row.worker_identity.clone());
                    }
                }
                Ok::<_, StoreError>(swapped)
            })?;
            marked.extend(swapped);
        }
        Ok(Sweep { marked, active_workers })
    }

    /// The terminal rows (released, superseded, retired) whose last sign of life — the
    /// retirement, else the last heartbeat, else the registration — is before `before`:
    /// what [`prune`](Self::prune) would remove. Active rows are never among them.
    pub fn prunable(&mut self, before: Timestamp) -> Result<Vec<WorkerRow>, StoreError> {
        let rows = self.workers()?;
        Ok(rows
            .into_iter()
            .filter(|r| r.status != WorkerStatus::Active)
            .filter(|r| r.retired_at.or_else(|| r.heartbeat()).unwrap_or(r.registered_at) < before)
            .collect())
    }

    /// Deletes `rows`, each only if it is still exactly as given (a compare-and-delete):
    /// the caller exported them first, so nothing is lost that was not written down.
    /// Only terminal rows are deleted; returns those that were.
    pub fn prune(&mut self, rows: &[WorkerRow]) -> Result<Vec<WorkerIdentity>, StoreError> {
        self.store.write(|tx| {
            let mut pruned = Vec::new();
            for row in rows.iter().filter(|r| r.status != WorkerStatus::Active) {
                if tx.delete_worker(row)? {
                    tracing::info!(worker = %row.worker_identity, status = %row.status, "pruned");
                    pruned.push(row.worker_identity.clone());
                }
            }
            Ok(pruned)
        })
    }

    /// Every table of the registry, for a backup: the ledger, the worker rows, the
    /// leases and the lease audit log, from one consistent read.
    pub fn backup(&mut self) -> Result<crate::RegistryBackup, StoreError> {
        self.store.read(|tx| {
            Ok(crate::RegistryBackup {
                registry: export_in(tx)?,
                leases: tx.leases(None)?,
                lease_audit_log: tx.audit(None)?,
                fencing_high_water: tx
                    .high_waters()?
                    .into_iter()
                    .map(|(scope, epoch)| crate::backup::HighWater { scope, epoch })
                    .collect(),
            })
        })
    }

    /// Imports a dump in one transaction: either every row is written or none is. A
    /// worker row whose identity the registry already holds is a conflict; a ledger entry
    /// already present with the same content is left as it is.
    pub fn import(&mut self, dump: &RegistryDump) -> Result<ImportSummary, StoreError> {
        self.restore(&crate::RegistryBackup { registry: dump.clone(), ..Default::default() })
    }

    /// Restores a backup in one transaction, all or nothing, as [`import`](Self::import)
    /// does for its rows. A lease the registry already holds is a conflict unless it is
    /// the same row. The audit log is appended in its order, and only to a registry
    /// whose log is empty: two histories are never interleaved.
    pub fn restore(&mut self, backup: &crate::RegistryBackup) -> Result<ImportSummary, StoreError> {
        let dump = &backup.registry;
        self.store
            .write(|tx| {
                let mut restorer = crate::backup::Restorer::new(tx);
                for (i, record) in dump.instances.iter().enumerate() {
                    restorer.instance(i, record.clone())?;
                }
                for row in &dump.worker_registrations {
                    restorer.worker(row.clone())?;
                }
                for (i, lease) in backup.leases.iter().enumerate() {
                    restorer.lease(i, lease.clone())?;
                }
                let mut log: Vec<&crate::AuditEntry> = backup.lease_audit_log.iter().collect();
                log.sort_by_key(|e| e.id);
                for (i, entry) in log.into_iter().enumerate() {
                    restorer.audit(i, entry.clone())?;
                }
                for mark in &backup.fencing_high_water {
                    restorer.high_water(mark.clone())?;
                }
                Ok::<_, crate::RestoreError>(restorer.finish()?)
            })
            .map_err(StoreError::from)
            .inspect(log_import)
            .inspect(|_| self.bulk_loaded())
    }

    /// [`restore`](Self::restore) of a backup read from `reader` as it streams in: rows
    /// are checked and written in batches inside one transaction, so memory stays flat
    /// at any size and a bad row anywhere leaves the registry as it was.
    pub fn restore_from_reader(
        &mut self,
        reader: impl std::io::Read,
    ) -> Result<ImportSummary, crate::RestoreError> {
        self.store
            .write(|tx| crate::backup::Restorer::new(tx).stream(reader))
            .inspect(log_import)
            .inspect(|_| self.bulk_loaded())
    }

    /// After a bulk load: the store's statistics brought up to date, best effort (the
    /// load stands either way).
    fn bulk_loaded(&mut self) {
        if let Err(e) = self.store.after_bulk_load() {
            tracing::warn!(error = %e, "planner statistics not updated after the import");
        }
    }
}

fn log_import(summary: &ImportSummary) {
    tracing::info!(
        instances = summary.instances,
        instances_unchanged = summary.instances_unchanged,
        workers = summary.workers,
        leases = summary.leases,
        audit_entries = summary.audit_entries,
        outcome = "imported",
        "registry import"
    );
}

fn holds(who: &WorkerCredential, row: &WorkerRow) -> bool {
    row.status == WorkerStatus::Active
        && row.generation_id.as_ref() == Some(&who.generation_id)
        && row.token_fingerprint.as_deref() == Some(who.token.fingerprint())
}

fn lost_registration(who: &WorkerCredential, row: Option<&WorkerRow>) -> StoreError {
    match row {
        None => StoreError::not_found(format!("worker {} is not registered", who.worker_identity)),
        Some(row) if row.status != WorkerStatus::Active => {
            StoreError::not_found(format!("worker {} is {}, not active", who.worker_identity, row.status))
        }
        Some(_) => StoreError::conflict(format!(
            "worker {} is held by another generation or token",
            who.worker_identity
        )),
    }
}

/// The ledger and every worker row, as transaction `tx` sees them.
pub(crate) fn export_in(tx: &mut dyn Tx) -> Result<RegistryDump, StoreError> {
    Ok(RegistryDump { instances: tx.instances()?, worker_registrations: tx.workers()? })
}

pub(crate) use fleet_retirement::{as_swept, due_for_sweep};
