//! The registry's rules, written once over [`Store`]: registration (reconnect versus
//! restart), heartbeats, release, the stale sweep, and import and export.

use std::fmt;

use fleet_identity::{
    ClientInstanceId, ClientType, FleetRunId, GenerationId, LegacyPlaceholder, Namespace, Profile,
    Repository, SessionId, Timestamp, WorkerIdentity,
};
use fleet_model::{
    Claim, InstanceRecord, LivenessProbe, OwnershipState, ProcessIdentity, ProcessVerdict, RegistryDump,
    WorkerRow, WorkerStatus,
};
use serde::Serialize;

use crate::error::{StoreError, StoreErrorKind};
use crate::store::{ImportSummary, Store, Tx};

/// The instance a worker says it belongs to: a launcher ID, or a legacy placeholder
/// from a worker that predates the launcher. Malformed and missing IDs never register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceRef {
    /// A well-formed launcher ID (trusted only if the ledger holds it).
    Minted(ClientInstanceId),
    /// A `legacy-pid-*` / `pid-*` / `proc-*` placeholder.
    Legacy(LegacyPlaceholder),
}

impl InstanceRef {
    /// The ID as text.
    pub fn as_str(&self) -> &str {
        match self {
            InstanceRef::Minted(id) => id.as_str(),
            InstanceRef::Legacy(p) => p.as_str(),
        }
    }
}

/// How long a heartbeat stays valid. Workers heartbeat every third of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HeartbeatTtl(u32);

impl HeartbeatTtl {
    /// The default: 30 seconds, so a heartbeat every 10.
    pub const DEFAULT: HeartbeatTtl = HeartbeatTtl(30);

    /// A TTL of `seconds`, from 1 second to one day.
    pub fn from_secs(seconds: u32) -> Result<Self, StoreError> {
        if (1..=86_400).contains(&seconds) {
            Ok(Self(seconds))
        } else {
            Err(StoreError::invalid(format!("heartbeat ttl {seconds}s is outside 1..=86400 seconds")))
        }
    }

    /// The TTL in seconds.
    pub fn secs(self) -> u32 {
        self.0
    }

    /// How often a worker heartbeats: a third of the TTL, so two beats may be lost
    /// before the row expires.
    pub fn interval(self) -> std::time::Duration {
        std::time::Duration::from_millis(u64::from(self.0) * 1000 / 3)
    }
}

/// The code, configuration, profile and schema revisions a worker runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Revisions {
    /// The code revision (a build's version or a commit).
    pub code: Option<String>,
    /// The revision of the configuration it was started with.
    pub config: Option<String>,
    /// The revision of its profile.
    pub profile: Option<String>,
    /// The registry data model it speaks (`SCHEMA_VERSION`).
    pub schema: Option<String>,
}

/// Everything a worker process says about itself when it registers.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The agent client of its launch (`codex`, `claude_code`, …).
    pub client_type: ClientType,
    /// Its launch's instance ID: minted by the launcher, or a legacy placeholder.
    pub instance: InstanceRef,
    /// Who vouched for the instance ID (`trusted_launcher` when the launcher did).
    pub instance_provenance: Option<String>,
    /// The fleet run its launch belongs to, when one was named.
    pub fleet_run_id: Option<FleetRunId>,
    /// The namespace it serves.
    pub namespace: Namespace,
    /// Its profile, when one was named.
    pub profile: Option<Profile>,
    /// The client session its launch shares (all five workers of a launch alike).
    pub session_id: Option<SessionId>,
    /// Minted by the worker runtime once per process boot.
    pub generation_id: GenerationId,
    /// The registered process: host, boot, pid, start time and PID namespace.
    pub process: ProcessIdentity,
    /// The repository it is bound to (retirement runs only where it is canonical).
    pub repository: Option<Repository>,
    /// How long its row stays live after a heartbeat.
    pub heartbeat_ttl: HeartbeatTtl,
    /// The revisions it runs.
    pub revisions: Revisions,
    /// What the worker says of its ownership: owned by its launch, orphaned (its
    /// launch's client is gone), or unowned (started outside any launch).
    pub claim: Claim,
    /// The host's name as it reports it, for people: `host list` shows it. Never
    /// evidence of anything.
    pub hostname: Option<String>,
}

/// A secret only the registered process holds. The registry keeps only its fingerprint,
/// so a heartbeat or release can come only from the process that registered.
#[derive(Clone, PartialEq, Eq)]
pub struct WorkerToken {
    // Only the fingerprint is kept, computed once: heartbeats present it on every beat.
    fingerprint: String,
}

impl WorkerToken {
    /// A fresh random token.
    pub fn generate() -> Result<Self, StoreError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| StoreError::new(StoreErrorKind::Unavailable, format!("no randomness: {e}")))?;
        Ok(Self::from_bytes(bytes))
    }

    /// A token from known bytes (tests and benchmarks).
    pub fn from_bytes(secret: [u8; 32]) -> Self {
        let hex = blake3::hash(&secret).to_hex();
        Self { fingerprint: format!("b3:{}", &hex.as_str()[..32]) }
    }

    /// The fingerprint stored in `token_fingerprint`.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

impl fmt::Debug for WorkerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WorkerToken(..)")
    }
}

/// What a registered process presents to heartbeat or release.
#[derive(Debug, Clone)]
pub struct WorkerCredential {
    /// The row.
    pub worker_identity: WorkerIdentity,
    /// The process boot that registered it.
    pub generation_id: GenerationId,
    /// The process's secret.
    pub token: WorkerToken,
}

fleet_identity::outward_codes! {
    /// Whether a registration made a new row or found the process's own.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RegistrationOutcome ("registration outcome") {
        /// A new process: a new `worker_identity`.
        Registered = "registered",
        /// The same process registering again keeps its row.
        Reconnected = "reconnected",
    }
}

/// The result of a registration.
#[derive(Debug, Clone)]
pub struct Registered {
    /// The row as written.
    pub row: WorkerRow,
    /// New or reconnected.
    pub outcome: RegistrationOutcome,
    /// Earlier rows of the same slot whose processes were proved gone and marked
    /// superseded.
    pub superseded: Vec<WorkerIdentity>,
}

/// The registry: the rules over a [`Store`].
#[derive(Debug)]
pub struct Registry<S> {
    store: S,
    /// The host and boot this registry's lease operations come from, when known.
    pub(crate) caller: Option<crate::hosts::Caller>,
}

/// What a stale sweep did, and the fleet it looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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

fn mint_worker_identity(namespace: Namespace) -> Result<WorkerIdentity, StoreError> {
    WorkerIdentity::new(format!("wkr-{namespace}-{}", uuid::Uuid::now_v7()))
        .map_err(|e| StoreError::invalid(e.to_string()))
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

fn register_in(
    tx: &mut dyn Tx,
    reg: &Registration,
    token: &WorkerToken,
    now: Timestamp,
    probe: &dyn LivenessProbe,
    worker_identity: WorkerIdentity,
) -> Result<Registered, StoreError> {
    crate::hosts::refuse_if_fenced(tx, &reg.process.host_id, &reg.process.boot_id)?;
    crate::hosts::note_boot(tx, reg, now)?;
    let slot = tx.slot(reg.instance.as_str(), reg.namespace)?;
    let own = slot.iter().find(|row| {
        row.status == WorkerStatus::Active
            && row.process().as_ref() == Some(&reg.process)
            && row.generation_id.as_ref() == Some(&reg.generation_id)
    });
    if let Some(own) = own {
        let mut renewed = own.clone();
        renewed.token_fingerprint = Some(token.fingerprint().to_owned());
        renewed.last_heartbeat_at = Some(now.to_string());
        renewed.ownership_state = Some(reg.claim.state());
        if !tx.replace_worker(own, &renewed)? {
            return Err(StoreError::conflict("registration changed during reconnect"));
        }
        return Ok(Registered {
            row: renewed,
            outcome: RegistrationOutcome::Reconnected,
            superseded: Vec::new(),
        });
    }

    let mut superseded = Vec::new();
    for row in slot.iter().filter(|r| r.status == WorkerStatus::Active) {
        let gone = row
            .process()
            .is_some_and(|p| matches!(probe.probe(&p), ProcessVerdict::Gone | ProcessVerdict::PidReused));
        if gone {
            let mut replaced = row.clone();
            replaced.status = WorkerStatus::Superseded;
            if tx.replace_worker(row, &replaced)? {
                superseded.push(row.worker_identity.clone());
            }
        }
    }

    // Above every row of the slot and every epoch it ever had (rows pruned or restored
    // away included).
    let scope = slot_scope(reg.instance.as_str(), reg.namespace);
    let seen = slot.iter().filter_map(|r| r.fencing_epoch).max().unwrap_or(0);
    let fencing_epoch = seen.max(crate::replication::epoch_floor(tx, &scope)?) + 1;
    tx.raise_high_water(&scope, fencing_epoch)?;
    let row = WorkerRow {
        worker_identity,
        client_type: Some(reg.client_type.clone()),
        client_instance_id: Some(reg.instance.as_str().to_owned()),
        instance_provenance: reg.instance_provenance.clone(),
        fleet_run_id: reg.fleet_run_id.clone(),
        namespace: reg.namespace,
        profile: reg.profile.clone(),
        session_id: reg.session_id.clone(),
        generation_id: Some(reg.generation_id.clone()),
        host_id: Some(reg.process.host_id.clone()),
        boot_id: Some(reg.process.boot_id.clone()),
        pid: Some(reg.process.pid),
        process_start_time: Some(reg.process.process_start_time),
        repository: reg.repository.clone(),
        status: WorkerStatus::Active,
        ownership_state: Some(reg.claim.state()),
        registered_at: now,
        last_heartbeat_at: Some(now.to_string()),
        heartbeat_ttl_s: Some(reg.heartbeat_ttl.secs()),
        fencing_epoch: Some(fencing_epoch),
        token_fingerprint: Some(token.fingerprint().to_owned()),
        code_revision: reg.revisions.code.clone(),
        config_revision: reg.revisions.config.clone(),
        profile_revision: reg.revisions.profile.clone(),
        schema_revision: reg.revisions.schema.clone(),
        retired_at: None,
        retired_by: None,
        retirement_reason: None,
        pid_namespace: reg.process.pid_namespace,
    };
    tx.insert_worker(&row)?;
    Ok(Registered { row, outcome: RegistrationOutcome::Registered, superseded })
}

/// The ledger and every worker row, as transaction `tx` sees them.
pub(crate) fn export_in(tx: &mut dyn Tx) -> Result<RegistryDump, StoreError> {
    Ok(RegistryDump { instances: tx.instances()?, worker_registrations: tx.workers()? })
}

pub(crate) use fleet_retirement::{as_swept, due_for_sweep};

/// The high-water scope of a worker slot.
pub(crate) fn slot_scope(instance: &str, namespace: Namespace) -> String {
    format!("slot {instance} {namespace}")
}
