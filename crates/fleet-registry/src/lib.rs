//! The worker registry, independent of any database: the store traits a backend
//! implements, and the algorithms written once over those traits (registration,
//! heartbeats, release, the stale sweep, import and export, leases, and the retirement
//! apply, which composes the pure `fleet-retirement` rules with a live probe).
//!
//! A backend implements [`Store`] and [`Tx`]: a handful of primitive reads and guarded
//! writes, run inside the transactions the backend opens. Everything with a rule in it
//! lives here, so two backends cannot drift apart. `conformance` (a feature) holds the suite each
//! backend runs against itself.

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
    ActiveLeases, AuditContext, AuditEntry, ConnectorRequest, LeaseResult, MAX_OWNER_LEN,
    active_workflow_owners_in,
};
pub use registry::{
    HeartbeatTtl, InstanceRef, Registered, Registration, RegistrationOutcome, Registry, Revisions,
    SWEEP_BATCH, Sweep, WorkerCredential, WorkerToken,
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
