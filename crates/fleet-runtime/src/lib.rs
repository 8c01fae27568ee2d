//! The use cases every Fleetward binary runs, each one call with a typed outcome: a
//! worker's registration with its heartbeat loop ([`WorkerSession`]), the fleet as one
//! process sees it ([`Fleet`]: the snapshot, retirement, leases, the registry's upkeep),
//! initialization and connector bindings under fenced leases ([`run_initialization`],
//! [`run_connector`]), and where the registry is ([`RegistryLocation`]).
//!
//! Embedding a worker in a Rust tool, as `fleetctl worker run` does for a command
//! (`examples/embedded_worker.rs` is the same as a program):
//!
//! ```
//! use fleet_runtime::{ClientType, Fleet, Launch, Namespace, Policy, RegistryLocation};
//! use fleet_runtime::{WorkerOptions, WorkerSession, now};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let location = RegistryLocation::Sqlite(dir.path().join("registry.sqlite3"));
//! // A launcher mints the instance its workers share (inside a launch, a tool reads it
//! // with `InstanceEnv::from_process` instead).
//! let launch = Launch::mint(&location, &ClientType::new("codex")?, None, None)?;
//! // This process, owned by its launch: registered, then heartbeating on its own thread.
//! let worker = WorkerSession::start(&location, &launch.env, WorkerOptions::this_process(Namespace::Author)?)?;
//! worker.heartbeat()?; // a beat now, besides the thread's own
//!
//! let mut fleet = Fleet::new(location);
//! let snapshot = fleet.snapshot(None, &Policy::default(), now())?;
//! assert!(snapshot.live_fleet_safe);
//! assert_eq!(snapshot.counts.active_worker_count, 1);
//!
//! worker.release()?;
//! # Ok(())
//! # }
//! ```
//!
//! A Fleet's lease use cases, a workflow lease taken and renewed:
//!
//! ```
//! use fleet_runtime::{DenyAll, Fleet, LeaseChange, LeaseKey, RegistryLocation};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let mut fleet = Fleet::new(RegistryLocation::Sqlite(dir.path().join("registry.sqlite3"))).creating_registry();
//! let key = LeaseKey::new("workflow:deploy")?;
//! let ttl = fleet_runtime::time::Duration::seconds(30);
//! let deny = DenyAll; // the connector policy: none here, a workflow lease needs none
//! let held = fleet
//!     .change_lease(&key, LeaseChange::Acquire { owner: "tool-a", ttl, scopes: &[] }, &deny, None)?
//!     .expect("no one holds it yet");
//! let renewed = fleet
//!     .change_lease(&key, LeaseChange::Renew { holder: &held.holder(), ttl: None }, &deny, None)?
//!     .expect("still its holder");
//! assert_eq!(renewed.fencing_epoch, held.fencing_epoch);
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

pub mod clock;
mod connector;
mod env;
mod fleet;
pub mod hosts;
mod init;
pub mod input;
mod launch;
mod location;
mod stable;
mod tools;
pub mod user_file;
mod worker;
mod worker_json;

pub use clock::now;
pub use connector::{ConnectorEnd, ConnectorError, ConnectorRun, max_connector_ttl, run_connector};
pub use env::{AgentClient, EnvError, InstanceEnv, PROVENANCE_TRUSTED_LAUNCHER, vars};
pub use fleet::{
    AfterApply, Applied, ContextError, Fleet, JsonSnapshot, KeptAlive, LeaseChange, LeaseError, PolicyError,
    PruneError, PruneReport, PruneRequest, Taken, WorkerApplyRefused, WorkerMayNotMutate, connector_policy,
    import_registry, probe_local, retirement_audit, retirement_context, take_snapshot,
};
pub use fleet_host::{diagnostics_are_json, json_diagnostics, keeper, notice, process, tenure, warn};
pub use fleet_snapshot::MovedHeartbeats;
pub use init::{Cancel, InitOptions, InitReport, run_initialization};
pub use launch::{
    Launch, LaunchProcess, Lineage, LineageError, check_launch_lineage, check_slot_unheld, claim_of,
    launch_process_value, random_key,
};
pub use location::{
    AnyStore, LocationError, RegistryLocation, init_registry, open_registry, upgrade_registry, version_line,
};
pub use stable::StableRuntime;
pub use tools::McpTool;
pub use worker::{WorkerOptions, WorkerSession, new_generation_id};

// The types the use cases' signatures take and give, so that a tool linking the
// runtime alone can name every one of them.
pub use fleet_identity::{
    ClientInstanceId, ClientType, FleetRunId, GenerationId, Namespace, Repository, SessionId, Timestamp,
    WorkerIdentity,
};
pub use fleet_lease::{
    ConnectorIdentity, ConnectorPolicy, DenyAll, FencingEpoch, Holder, LeaseId, LeaseKey, LeaseKind,
    LeaseRecord, StaticPolicy,
};
pub use fleet_registry::{
    ApplyReport, ApplyRequest, AuditEntry, AuditQuery, HeartbeatTtl, LeaseResult, ProcessIdentity, Registry,
    RegistryDump, RetirementAudit, Revisions, StoreError, StoreErrorKind, WorkerRow, WorkerStatus,
};
pub use fleet_retirement::{Plan, RetirementContext};
pub use fleet_snapshot::{FleetSnapshot, Manifest, Policy};
/// The `time` crate, whose `Duration` the lease use cases take as a TTL (the one
/// third-party type in their signatures: the leases' own crate keeps time in it).
pub use time;
