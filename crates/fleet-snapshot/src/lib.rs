//! The fleet health snapshot: from registry rows, the launcher's ledger, an optional
//! approved manifest, liveness probe results and `now`, a deterministic answer to "is
//! the fleet safe to mutate, and if not, exactly why", with the instance-aware mutation
//! gate for one worker.
//!
//! This crate is pure: every input is an argument, and the same inputs give the same
//! snapshot whatever the order of the rows. With `fleet-model` it is all another tool
//! needs to judge a `fleetctl registry export` file:
//!
//! ```
//! use fleet_identity::Timestamp;
//! use fleet_model::RegistryDump;
//! use fleet_snapshot::{Policy, ProbeResults, SnapshotInput, snapshot};
//!
//! let export = r#"{"instances": [], "worker_registrations": [{
//!     "worker_identity": "wkr-author-1", "namespace": "author", "status": "active",
//!     "client_instance_id": "local-placeholder",
//!     "registered_at": "2026-07-30T12:00:00Z",
//!     "last_heartbeat_at": "2026-07-30T12:00:00Z", "heartbeat_ttl_s": 30}]}"#;
//! let dump = RegistryDump::from_json(export).expect("an export");
//! let fleet = snapshot(SnapshotInput {
//!     rows: &dump.worker_registrations,
//!     ledger: &dump.instances,
//!     manifest: None,
//!     probes: &ProbeResults::new(),
//!     policy: &Policy::default(),
//!     now: Timestamp::parse("2026-07-30T12:00:10Z").expect("a time"),
//! });
//! // A worker whose launch the launcher never minted makes the fleet unsafe.
//! assert!(!fleet.live_fleet_safe);
//! assert_eq!(fleet.counts.live_worker_count, 1);
//! ```
//!
//! `examples/classify_export.rs` does the same for a file.

#![deny(missing_docs)]

mod classify;
mod findings;
mod gate;
mod heartbeats;
mod judgement;
mod keys;
mod manifest;

pub use classify::{
    Counts, InstanceView, Policy, ProbeResults, SnapshotInput, WithWorkers, WorkerState, WorkerView, snapshot,
};
pub use findings::{Evidence, Finding, FindingCode};
pub use gate::{GateReason, GateVerdict, mutation_gate};
pub use heartbeats::{HeartbeatComparison, LiveHeartbeats, compare_heartbeats, compare_snapshot_heartbeats};
pub use judgement::{Judgement, MovedHeartbeats};
pub use manifest::{Manifest, ManifestError, ManifestInstance};

/// The snapshot of a fleet, as `fleetctl snapshot --json` and the MCP tool print it.
pub use classify::FleetSnapshot;
pub use classify::TokenRows;
