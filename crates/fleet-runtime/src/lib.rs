//! The pieces every Fleetward binary shares: where the registry is and how to open it,
//! the instance environment the launcher hands to workers, and a worker's registration
//! with its heartbeat loop.

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
    AfterApply, Applied, ContextError, Fleet, JsonSnapshot, LeaseChange, LeaseError, PolicyError, PruneError,
    PruneReport, PruneRequest, Taken, WorkerApplyRefused, WorkerMayNotMutate, connector_policy,
    import_registry, probe_local, retirement_audit, retirement_context, take_snapshot,
};
pub use fleet_host::{diagnostics_are_json, json_diagnostics, keeper, process, tenure, warn};
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
pub use worker::{WorkerOptions, WorkerSession};
