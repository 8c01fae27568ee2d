//! The instance-aware mutation gate: may this worker mutate?
//!
//! It judges the asking worker and its own instance, not the whole fleet: two
//! legitimate instances that share a profile never close each other's gate, while a
//! duplicate or colliding worker in the asker's own instance, or an asker without
//! trusted instance evidence, always does.

use fleet_identity::{TrustVerdict, WorkerIdentity};
use serde::Serialize;

use crate::classify::{FleetSnapshot, WorkerState};
use crate::findings::FindingCode;

fleet_identity::outward_codes! {
    /// Why the gate is closed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    #[non_exhaustive]
    pub enum GateReason ("gate reason") {
        /// No row for the worker.
        WorkerNotRegistered = "worker_not_registered",
        /// The worker's row is released, superseded or retired.
        WorkerNotActive = "worker_not_active",
        /// The worker's row is stale.
        WorkerStale = "worker_stale",
        /// The worker's instance ID is not trusted.
        UntrustedInstanceIdentity = "untrusted_instance_identity",
        /// Another live worker serves the same namespace of the same instance.
        DuplicateNamespaceWorker = "duplicate_namespace_worker",
        /// The worker's instance ID is claimed by two launches.
        ClientInstanceCollision = "client_instance_collision",
        /// One of the worker's identities is reused by another row.
        ReusedIdentity = "reused_identity",
        /// The worker lacks process evidence.
        IncompleteIdentity = "incomplete_identity",
        /// A manifest was supplied and the worker's instance is not on it.
        UnmanifestedInstance = "unmanifested_instance",
    }
}

/// The gate's answer for one worker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateVerdict {
    /// The worker asked about.
    pub worker_identity: WorkerIdentity,
    /// Whether it may mutate.
    pub mutation_allowed: bool,
    /// Why not (empty when allowed), sorted.
    pub reasons: Vec<GateReason>,
    /// The trust verdict of its instance ID, when it is registered.
    pub instance_trust: Option<TrustVerdict>,
}

/// Judges whether `worker` may mutate, from a snapshot.
pub fn mutation_gate(snapshot: &FleetSnapshot<'_>, worker: &WorkerIdentity) -> GateVerdict {
    let closed = |reason| GateVerdict {
        worker_identity: worker.clone(),
        mutation_allowed: false,
        reasons: vec![reason],
        instance_trust: None,
    };
    let Some(view) = snapshot.workers.iter().find(|w| w.worker_identity() == worker) else {
        return closed(GateReason::WorkerNotRegistered);
    };
    let mut reasons = Vec::new();
    match view.state {
        WorkerState::Historical => reasons.push(GateReason::WorkerNotActive),
        WorkerState::Stale => reasons.push(GateReason::WorkerStale),
        WorkerState::Live => {}
    }
    let trust = snapshot
        .instances
        .iter()
        .find(|i| i.client_instance_id == view.client_instance_id())
        .map(|i| i.trust);
    if trust != Some(TrustVerdict::Trusted) {
        reasons.push(GateReason::UntrustedInstanceIdentity);
    }
    for finding in &snapshot.findings {
        let mine = finding.worker_identities.contains(worker);
        let my_instance = finding.client_instance_id.is_some()
            && finding.client_instance_id.as_deref() == view.client_instance_id();
        let reason = match finding.code {
            FindingCode::DuplicateNamespaceWorker if mine => GateReason::DuplicateNamespaceWorker,
            FindingCode::ClientInstanceCollision if my_instance => GateReason::ClientInstanceCollision,
            code if code.is_reused_identity() && mine => GateReason::ReusedIdentity,
            FindingCode::LegacyIncompleteIdentity if mine => GateReason::IncompleteIdentity,
            FindingCode::Unmanifested if mine => GateReason::UnmanifestedInstance,
            _ => continue,
        };
        reasons.push(reason);
    }
    reasons.sort();
    reasons.dedup();
    GateVerdict {
        worker_identity: worker.clone(),
        mutation_allowed: reasons.is_empty(),
        reasons,
        instance_trust: trust
            .or_else(|| Some(fleet_identity::assess_instance_id(view.client_instance_id(), &NoLedger))),
    }
}

/// Used only to name the untrusted form of an ID whose instance has no view.
struct NoLedger;

impl fleet_identity::Ledger for NoLedger {
    fn holds(&self, _: &fleet_identity::ClientInstanceId) -> bool {
        false
    }
}
