//! The worker registry, independent of any database: the store traits a backend
//! implements, and the algorithms written once over those traits (registration,
//! heartbeats, release, the stale sweep, import and export, leases, and the retirement
//! apply, which composes the pure `fleet-retirement` rules with a live probe).
//!
//! A backend implements [`Store`] and [`Tx`]: a handful of primitive reads and guarded
//! writes, run inside the transactions the backend opens. Everything with a rule in it
//! lives here, so two backends cannot drift apart. `conformance` (a feature) holds the suite each
//! backend runs against itself.
//!
//! Code written over [`Registry`] runs on either backend (`registry-sqlite`,
//! `registry-postgres`; their crate pages show a registry opened):
//!
//! ```
//! use fleet_identity::Timestamp;
//! use fleet_lease::{LeaseKey, LeaseKind};
//! use fleet_registry::{AuditContext, Registry, Store, StoreError};
//!
//! /// Marks the lapsed rows stale, then takes the deploy lease for `owner` if it is free:
//! /// the epoch to fence the deploy's writes with.
//! fn sweep_and_lease<S: Store>(registry: &mut Registry<S>, owner: &str, now: Timestamp) -> Result<Option<u64>, StoreError> {
//!     let swept = registry.sweep(now)?;
//!     println!("{} rows marked stale", swept.marked.len());
//!     let key = LeaseKey::new("workflow:deploy").map_err(|e| StoreError::invalid(e.to_string()))?;
//!     let ttl = time::Duration::seconds(30);
//!     let granted = registry.acquire_lease(&key, LeaseKind::Workflow, owner, ttl, &[], &AuditContext::default())?;
//!     Ok(granted.ok().map(|lease| lease.fencing_epoch.get()))
//! }
//! ```

#![deny(missing_docs)]

mod backup;
mod changes;
pub mod columns;
mod error;
mod gateway;
mod hosts;
mod identity;
mod leases;
mod records;
mod registration;
mod registry;
mod replication;
mod retire;
mod store;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use backup::{HighWater, MAX_ROW_BYTES, RegistryBackup, RestoreError};
pub use changes::{RegistryChanges, RegistryRead, WHOLE_READ_EVERY};
pub use error::{StoreError, StoreErrorKind, with_causes};
pub use gateway::ConnectorExecutionContext;
pub use hosts::{BootReport, FenceReport, HostList, HostReport, HostState, MAX_FENCE_REASON_LEN, host_list};
pub use identity::RegistryId;
pub use leases::{
    ActiveLeases, AuditContext, AuditEntry, AuditEntryError, ConnectorRequest, LeaseResult, MAX_OWNER_LEN,
    active_workflow_owners_in,
};
pub use registry::{
    HeartbeatTtl, InstanceRef, Registered, Registration, RegistrationOutcome, Registry, Revisions,
    SWEEP_BATCH, Sweep, TtlOutOfRange, WorkerCredential, WorkerToken,
};
pub use replication::{
    DEFAULT_EPOCH_GAP, EPOCH_FLOOR_SCOPE, GrantVerdict, HistoryAcceptance, RecordedHistory,
    ReplicationPolicy, ReplicationStatus, ServerHistory, ServerReplication, judge_grant,
};
pub use retire::{
    ApplyOutcome, ApplyReport, ApplyRequest, AuditFieldError, BeforeWrite, KeptReason, Preserved,
    RegistryMatch, RetirementAudit, plan_rows,
};
pub use store::{
    AuditQuery, ChangePosition, DecisionCount, ImportSummary, OpenMode, ReadMark, RowVersions,
    SCHEMA_VERSION, SchemaUpgrade, Store, Tx, VersionsDigest,
};

/// The rows the registry stores and the probe values its rules consult, from the data
/// model at the bottom of the graph.
pub use fleet_model::{
    BootSpan, Claim, CloneConflict, DumpError, FencedBoot, HeartbeatJudge, HostBoot, HostEvidence, HostFence,
    HostProof, InstanceRecord, Liveness, LivenessProbe, MAX_CLOCK_SKEW, OwnershipState, ProcessIdentity,
    ProcessVerdict, RegistryDump, WORKER_COLUMNS, WorkerRow, WorkerStatus, heartbeat_expiry,
    probe_active_rows, probe_places, probed_places,
};
