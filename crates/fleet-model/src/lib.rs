//! Fleetward's data model, at the bottom of the crate graph: the registry's rows, the
//! launcher's ledger, the JSON dump that export writes and import reads, and the plain
//! values that a liveness probe hands back.
//!
//! Nothing here does I/O, reads a clock or draws randomness. The stores produce these
//! values, the probe produces the verdicts, and the pure crates (`fleet-snapshot`,
//! `fleet-retirement`) judge them; each of those depends on this crate, never on the
//! store or the probe.
//!
//! ```
//! use fleet_identity::Timestamp;
//! use fleet_model::{RegistryDump, WorkerStatus, heartbeat_lapsed};
//!
//! let dump = RegistryDump::from_json(r#"{"worker_registrations": [{
//!     "worker_identity": "wkr-author-1", "namespace": "author", "status": "active",
//!     "registered_at": "2026-07-30T12:00:00Z",
//!     "last_heartbeat_at": "2026-07-30T12:00:00Z", "heartbeat_ttl_s": 30}]}"#).expect("a dump");
//! let row = &dump.worker_registrations[0];
//! assert_eq!(row.status, WorkerStatus::Active);
//! let beat = Timestamp::parse("2026-07-30T12:00:00Z").unwrap();
//! assert!(!heartbeat_lapsed(beat, 30, Timestamp::parse("2026-07-30T12:00:30Z").unwrap()));
//! assert!(heartbeat_lapsed(beat, 30, Timestamp::parse("2026-07-30T12:00:31Z").unwrap()));
//! ```

#![deny(missing_docs)]

mod dump;
mod heartbeat;
mod hosts;
mod process;
mod rows;
mod scope;

pub use dump::{DumpError, EXPORT_TABLES, RegistryDump, numbered};
pub use heartbeat::{HeartbeatJudge, MAX_CLOCK_SKEW, heartbeat_expiry, heartbeat_lapsed};
pub use hosts::{
    BootSpan, CloneConflict, FencedBoot, HostBoot, HostEvidence, HostFence, HostProof, MAX_HOSTNAME_LEN,
    reported_hostname,
};
pub use process::{Liveness, LivenessProbe, ProcessIdentity, ProcessVerdict};
pub use rows::{
    Claim, ClientContradiction, InstanceRecord, OwnershipState, WORKER_COLUMNS, WorkerRow, WorkerStatus,
    probe_active_rows, probe_places, probed_places, rows_by_identity,
};
pub use scope::LiveScope;
