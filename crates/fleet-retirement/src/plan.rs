//! The dry-run plan of `gitea_plan_stale_worker_retirement`.

use std::collections::BTreeMap;

use fleet_identity::{Timestamp, WorkerIdentity};
use fleet_model::{HostProof, OwnershipState, ProcessVerdict, WorkerRow};
use serde::Serialize;

use crate::eligibility::{Evidence, PreserveReason, RetirementContext, Verdict, assess_probed};
use crate::fingerprint::{CandidateFingerprint, RegistryFingerprint, digest, row_hashes};

/// One assessed row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    /// The row.
    pub worker_identity: WorkerIdentity,
    /// `eligible_stale_orphan`, or the preserve reason.
    pub reason_code: Verdict,
    /// One sentence.
    pub detail: &'static str,
    /// What the verdict rests on.
    pub evidence: RowEvidence,
    /// For a preserved row that time alone will make a candidate (its process is gone
    /// and only its heartbeat has not yet lapsed): the instant after which it lapses.
    /// A sweep then marks it stale, and a plan made after that names it a candidate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eligible_after: Option<Timestamp>,
}

/// The row fields and probe result a verdict rests on (each as the row holds it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowEvidence {
    /// The row's status.
    pub status: fleet_model::WorkerStatus,
    /// Its ownership state.
    pub ownership_state: Option<OwnershipState>,
    /// Its last heartbeat, as stored.
    pub last_heartbeat_at: Option<String>,
    /// Its heartbeat TTL.
    pub heartbeat_ttl_s: Option<u32>,
    /// The host of its process.
    pub host_id: Option<fleet_identity::HostId>,
    /// The boot of that host.
    pub boot_id: Option<fleet_identity::BootId>,
    /// The pid of its process.
    pub pid: Option<fleet_identity::Pid>,
    /// The start time of the process that holds that pid.
    pub process_start_time: Option<fleet_identity::ProcessStartTime>,
    /// The repository the row is bound to: beside the plan's own, what a
    /// `repository_binding_ambiguous` row was compared with.
    pub repository: Option<fleet_identity::Repository>,
    /// What the probe said of its process (none where no probe could speak).
    pub liveness: Option<ProcessVerdict>,
}

fleet_identity::outward_codes! {
    /// What a plan is: its `outcome` field.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum PlanOutcome ("plan outcome") {
        /// A dry run: nothing was changed.
        Planned = "planned",
    }
}

/// The plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Plan {
    /// Always [`PlanOutcome::Planned`].
    pub outcome: PlanOutcome,
    /// Stable token over every row.
    pub registry_fingerprint: RegistryFingerprint,
    /// Stable token over the candidates.
    pub candidate_fingerprint: CandidateFingerprint,
    /// The candidates, sorted.
    pub candidate_worker_identities: Vec<WorkerIdentity>,
    /// Each candidate.
    pub candidates: Vec<Assessment>,
    /// Each preserved row with its reason.
    pub preserved: Vec<Assessment>,
    /// How many rows each reason preserved (in the conjunction's order).
    pub preserved_reason_counts: BTreeMap<PreserveReason, usize>,
    /// Rows assessed.
    pub assessed_count: usize,
    /// Candidates.
    pub candidate_count: usize,
    /// Preserved rows.
    pub preserved_count: usize,
    /// Owners of active workflow leases.
    pub protected_active_workflow_owners: Vec<String>,
    /// The earliest `eligible_after` of the preserved rows: when planning again may
    /// find a candidate that this plan does not, if nothing but time moves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_eligible_after: Option<Timestamp>,
    /// The repository rows must be bound to.
    pub canonical_repository: String,
    /// Always false: planning writes nothing.
    pub mutation_performed: bool,
    /// Always true.
    pub read_only: bool,
}

fn evidence(row: &WorkerRow, probe: Option<ProcessVerdict>) -> RowEvidence {
    RowEvidence {
        status: row.status,
        ownership_state: row.ownership_state,
        last_heartbeat_at: row.last_heartbeat_at.clone(),
        heartbeat_ttl_s: row.heartbeat_ttl_s,
        host_id: row.host_id.clone(),
        boot_id: row.boot_id.clone(),
        pid: row.pid,
        process_start_time: row.process_start_time,
        repository: row.repository.clone(),
        liveness: probe,
    }
}

fn detail(reason: PreserveReason) -> &'static str {
    use PreserveReason as R;
    match reason {
        R::AlreadyTerminalRegistration => "the registration is no longer active",
        R::IncompleteRegistryIdentity => "a field the conjunction reads is missing",
        R::UnparsableHeartbeat => "last_heartbeat_at is not a UTC time",
        R::WorkerLive => "the heartbeat is within its TTL and the process is not proved gone",
        R::PidLivenessUnknown => "the liveness probe gave no definite answer",
        R::PidAlive => "the registered process is alive",
        R::HeartbeatNotExpired => "the heartbeat has not expired",
        R::AmbiguousOwnershipState => "ownership_state is not exactly stale",
        R::RepositoryBindingAmbiguous => "the repository binding is missing or not canonical",
        R::ConflictingIdentityEvidence => "identity evidence is shared with a live or unprobeable worker",
        R::ClientInstanceConflict => "another active row of this instance and namespace may be live",
        R::ProtectedActiveWorkflowOwner => "the worker owns an active workflow lease",
        R::UntrustedIdentityProvenance => "the instance ID was not minted by the launcher",
        R::HostBindingUnproven => "the row belongs to another host",
        R::BootIdentityUnknown => "a boot id is unknown",
        R::PidReuseDetected => "the pid number now belongs to a different process",
    }
}

/// When a row preserved as `heartbeat_not_expired` becomes a candidate if nothing but
/// time moves: the conjunction is asked again as it will stand just after the heartbeat
/// lapses, with the row marked stale as the sweep will mark it. `None` when some other
/// requirement would still preserve it then.
fn eligible_after(
    row: &WorkerRow,
    probe: Option<ProcessVerdict>,
    ev: &Evidence<'_>,
    ctx: &RetirementContext,
) -> Option<Timestamp> {
    let expiry = fleet_model::heartbeat_expiry(row.heartbeat()?, row.heartbeat_ttl_s?);
    let swept = WorkerRow { ownership_state: Some(OwnershipState::Stale), ..row.clone() };
    let later = RetirementContext { now: expiry.saturating_add(time::Duration::seconds(1)), ..ctx.clone() };
    assess_probed(&swept, probe, ev, &later).is_eligible().then_some(expiry)
}

/// Plans retirement: assesses every row and selects the eligible ones.
pub fn plan(ev: &Evidence<'_>, ctx: &RetirementContext) -> Plan {
    let mut candidates = Vec::new();
    let mut preserved = Vec::new();
    let mut counts: BTreeMap<PreserveReason, usize> = BTreeMap::new();
    let rows = ev.ordered();
    // Each row's hash is computed once and serves both fingerprints.
    let hashes = row_hashes(rows.iter().map(|(row, _)| *row));
    let mut candidate_hashes = Vec::new();
    for (&(row, probe), hash) in rows.iter().zip(&hashes) {
        match assess_probed(row, probe, ev, ctx) {
            verdict @ (Verdict::EligibleStaleOrphan | Verdict::EligibleByHost(_)) => {
                candidate_hashes.push(*hash);
                candidates.push(Assessment {
                    worker_identity: row.worker_identity.clone(),
                    reason_code: verdict,
                    detail: match verdict {
                        Verdict::EligibleByHost(HostProof::HostRebooted) => {
                            "every requirement holds: its host has booted again since, so the process is gone"
                        }
                        Verdict::EligibleByHost(HostProof::HostFenced) => {
                            "every requirement holds: an operator fenced its host as gone for good"
                        }
                        _ => "every requirement holds: the process is provably gone",
                    },
                    evidence: evidence(row, probe),
                    eligible_after: None,
                });
            }
            Verdict::Preserve(reason) => {
                *counts.entry(reason).or_default() += 1;
                preserved.push(Assessment {
                    worker_identity: row.worker_identity.clone(),
                    reason_code: Verdict::Preserve(reason),
                    detail: detail(reason),
                    evidence: evidence(row, probe),
                    eligible_after: match reason {
                        PreserveReason::HeartbeatNotExpired => eligible_after(row, probe, ev, ctx),
                        _ => None,
                    },
                });
            }
        }
    }
    let next_eligible_after = preserved.iter().filter_map(|a| a.eligible_after).min();
    Plan {
        outcome: PlanOutcome::Planned,
        registry_fingerprint: RegistryFingerprint::from_digest(digest(hashes)),
        candidate_fingerprint: CandidateFingerprint::from_digest(digest(candidate_hashes)),
        candidate_worker_identities: candidates.iter().map(|c| c.worker_identity.clone()).collect(),
        candidate_count: candidates.len(),
        preserved_count: preserved.len(),
        assessed_count: candidates.len() + preserved.len(),
        candidates,
        preserved,
        preserved_reason_counts: counts,
        protected_active_workflow_owners: ev.lease_owners.iter().cloned().collect(),
        next_eligible_after,
        canonical_repository: ctx.canonical_repository.to_string(),
        mutation_performed: false,
        read_only: true,
    }
}
