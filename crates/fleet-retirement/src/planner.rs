//! The conjunction as the planner that the registry's apply consults inside its
//! transaction.

use std::collections::{BTreeMap, BTreeSet};

use fleet_identity::{ClientInstanceId, WorkerIdentity};
use fleet_probe::ProcessVerdict;
use fleet_registry::{InstanceRecord, PlanSummary, RetirementPlanner, WorkerRow};

use crate::eligibility::{Evidence, RetirementContext};
use crate::fingerprint::registry_fingerprint;
use crate::plan::plan;

/// Plans with a fixed context (host, boot, canonical repository, time).
#[derive(Debug, Clone)]
pub struct Planner {
    /// Where and when retirement runs.
    pub ctx: RetirementContext,
}

impl RetirementPlanner for Planner {
    fn registry_fingerprint(&self, rows: &[WorkerRow]) -> String {
        registry_fingerprint(rows)
    }

    fn plan(
        &self,
        rows: &[WorkerRow],
        ledger: &[InstanceRecord],
        lease_owners: &BTreeSet<String>,
        probes: &BTreeMap<WorkerIdentity, ProcessVerdict>,
    ) -> PlanSummary {
        let ledger: BTreeSet<ClientInstanceId> =
            ledger.iter().map(|i| i.client_instance_id.clone()).collect();
        let ev = Evidence::new(rows, &ledger, lease_owners, probes);
        let p = plan(&ev, &self.ctx);
        PlanSummary {
            candidate_fingerprint: p.candidate_fingerprint,
            candidates: p.candidate_worker_identities.into_iter().collect(),
            reasons: p.preserved.into_iter().map(|a| (a.worker_identity, a.reason_code)).collect(),
        }
    }
}
