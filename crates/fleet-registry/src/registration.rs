//! Registration's rule, over one write transaction: the same process registering again
//! keeps its row (a reconnect); a new process of a slot whose holder is proved gone
//! supersedes it at a higher fencing epoch; a slot held by a live worker is refused.

use fleet_identity::{
    ClientInstanceId, ClientType, FleetRunId, GenerationId, LegacyPlaceholder, Namespace, Profile,
    Repository, SessionId, Timestamp, WorkerIdentity,
};
use fleet_model::{Claim, LivenessProbe, ProcessIdentity, ProcessVerdict, WorkerRow, WorkerStatus};
use serde::Serialize;

use crate::error::StoreError;
use crate::records::{WorkerToken, slot_scope, worker_conflict};
use crate::store::Tx;

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
    pub fn from_secs(seconds: u32) -> Result<Self, TtlOutOfRange> {
        if (1..=86_400).contains(&seconds) { Ok(Self(seconds)) } else { Err(TtlOutOfRange(seconds)) }
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

/// A heartbeat TTL outside 1 second to one day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("heartbeat ttl {0}s is outside 1..=86400 seconds")]
pub struct TtlOutOfRange(pub u32);

impl From<TtlOutOfRange> for StoreError {
    fn from(e: TtlOutOfRange) -> Self {
        StoreError::invalid(e.to_string())
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

fleet_identity::outward_codes! {
    /// Whether a registration made a new row or found the process's own.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[non_exhaustive]
    pub enum RegistrationOutcome ("registration outcome") {
        /// A new process: a new `worker_identity`.
        Registered = "registered",
        /// The same process registering again keeps its row.
        Reconnected = "reconnected",
    }
}

/// The result of a registration.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Registered {
    /// The row as written.
    pub row: WorkerRow,
    /// New or reconnected.
    pub outcome: RegistrationOutcome,
    /// Earlier rows of the same slot whose processes were proved gone and marked
    /// superseded.
    pub superseded: Vec<WorkerIdentity>,
}

pub(crate) fn register_in(
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
    // A unique-key conflict here is a row that already has this identity.
    tx.insert_worker(&row).map_err(|e| worker_conflict(e, &row.worker_identity))?;
    Ok(Registered { row, outcome: RegistrationOutcome::Registered, superseded })
}

pub(crate) fn mint_worker_identity(namespace: Namespace) -> Result<WorkerIdentity, StoreError> {
    WorkerIdentity::new(format!("wkr-{namespace}-{}", uuid::Uuid::now_v7()))
        .map_err(|e| StoreError::invalid(e.to_string()))
}
