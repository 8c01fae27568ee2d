//! The fleet health snapshot: from registry rows, the launcher's ledger, an optional
//! approved manifest, liveness probe results and `now`, a deterministic answer to "is
//! the fleet safe to mutate, and if not, exactly why", with the instance-aware mutation
//! gate for one worker.
//!
//! This crate is pure: every input is an argument, and the same inputs give the same
//! snapshot whatever the order of the rows.

mod classify;
mod findings;
mod gate;
mod heartbeats;
mod manifest;

pub use classify::{
    Counts, InstanceView, Policy, ProbeResults, SnapshotInput, WorkerState, WorkerView, snapshot,
};
pub use findings::{Finding, FindingCode};
pub use gate::{GateReason, GateVerdict, mutation_gate};
pub use heartbeats::{HeartbeatComparison, compare_snapshot_heartbeats};
pub use manifest::{Manifest, ManifestError, ManifestInstance};

/// The snapshot of a fleet, as `fleetctl snapshot --json` and the MCP tool print it.
pub use classify::FleetSnapshot;
