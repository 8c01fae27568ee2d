//! Planning and applying retirement, written once over the store. The plan is one
//! consistent read judged by the pure `fleet-retirement` rules. The apply, inside one write
//! transaction, re-read, re-plan with freshly read leases, ledger and probes, compare
//! the candidate fingerprint (and, when asked, the registry fingerprint), revalidate
//! each requested identity, then retire each survivor with a guarded whole-row
//! compare-and-swap — with the external fence re-compared and the process re-probed
//! before every write.

use std::collections::{BTreeMap, BTreeSet};

use fleet_identity::{ClientInstanceId, WorkerIdentity};
use fleet_model::{HostEvidence, LivenessProbe, ProcessVerdict, WorkerRow, WorkerStatus, probe_active_rows};
use fleet_retirement::{
    CandidateFingerprint, Evidence, Plan, PreserveReason, RegistryFingerprint, RetirementContext, Verdict,
    plan, registry_fingerprint,
};
use serde::Serialize;

use crate::error::StoreError;
use crate::leases::active_workflow_owners_in;
use crate::registry::Registry;
use crate::store::Store;

/// An apply request: the plan's tokens and the identities it named.
#[derive(Debug, Clone)]
pub struct ApplyRequest {
    /// The plan's `registry_fingerprint`.
    pub registry_fingerprint: RegistryFingerprint,
    /// The plan's `candidate_fingerprint`.
    pub candidate_fingerprint: CandidateFingerprint,
    /// The candidates to retire (empty with `every_candidate`).
    pub worker_identities: Vec<WorkerIdentity>,
    /// Retire every candidate of the plan whose `candidate_fingerprint` the request
    /// carries, without naming them: the fingerprint covers each candidate's identity
    /// and content, so the fresh plan's candidates are the planned ones when it matches.
    /// For a plan too large to copy back (tens of thousands of candidates).
    pub every_candidate: bool,
    /// Who retires them (recorded in `retired_by`).
    pub retired_by: String,
    /// How much of the registry must be as the plan saw it.
    pub registry_match: RegistryMatch,
    /// What the retirement concerns, for the record (seed 004's `remote`, `host`,
    /// `org`, `repo`).
    pub audit: RetirementAudit,
}

/// Seed 004's audit context of a plan or an apply: the remote it concerns and,
/// optionally, host, org and repository overrides. An apply reports it back
/// (`audit_context`) and logs it with each row it retires.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetirementAudit {
    /// The remote (a configured name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// The forge host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The organisation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// The repository.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
}

/// An audit context value refused: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AuditFieldError {
    /// The field (`remote`, `host`, `org`, `repo`).
    pub field: &'static str,
    /// Why, naming the value.
    pub message: String,
}

impl AuditFieldError {
    fn new(field: &'static str, message: String) -> Self {
        Self { field, message }
    }
}

impl RetirementAudit {
    /// Checks each value given: `remote` a name (`[a-z0-9][a-z0-9._-]*`, and one of
    /// `known_remotes` when the operator lists them), `host` a DNS host name (with an
    /// optional port), `org` and `repo` forge names (`[A-Za-z0-9][A-Za-z0-9._-]*`),
    /// each at most 100 characters. The error names the field.
    pub fn new(
        remote: Option<String>,
        host: Option<String>,
        org: Option<String>,
        repo: Option<String>,
        known_remotes: Option<&[String]>,
    ) -> Result<Self, AuditFieldError> {
        fn shaped(value: &str, first: impl Fn(char) -> bool, rest: impl Fn(char) -> bool) -> bool {
            let mut chars = value.chars();
            value.len() <= 100 && chars.next().is_some_and(first) && chars.all(rest)
        }
        let name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if let Some(r) = &remote {
            let lower = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
            if !shaped(r, lower, |c| lower(c) || matches!(c, '.' | '_' | '-')) {
                return Err(AuditFieldError::new(
                    "remote",
                    format!("remote {r:?} is not a remote name ([a-z0-9][a-z0-9._-]*)"),
                ));
            }
            if let Some(known) = known_remotes
                && !known.iter().any(|k| k == r)
            {
                return Err(AuditFieldError::new(
                    "remote",
                    format!("remote {r:?} is not one of the configured remotes: {}", known.join(", ")),
                ));
            }
        }
        if let Some(h) = &host {
            let (name, port) = h.split_once(':').map_or((h.as_str(), None), |(n, p)| (n, Some(p)));
            let label_ok = name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
            let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
            if name.len() > 253 || !label_ok || !port_ok {
                return Err(AuditFieldError::new("host", format!("host {h:?} is not a host name")));
            }
        }
        for (field, value) in [("org", &org), ("repo", &repo)] {
            if let Some(v) = value
                && !shaped(v, |c| c.is_ascii_alphanumeric(), name_char)
            {
                return Err(AuditFieldError::new(
                    field,
                    format!("{field} {v:?} is not a name ([A-Za-z0-9][A-Za-z0-9._-]*)"),
                ));
            }
        }
        Ok(Self { remote, host, org, repo })
    }

    /// Whether nothing was given.
    pub fn is_empty(&self) -> bool {
        self.remote.is_none() && self.host.is_none() && self.org.is_none() && self.repo.is_none()
    }
}

/// How much of the registry an apply requires to be as the plan saw it.
///
/// The decision to retire a row rests on the row itself and on the evidence the
/// conjunction reads about it: the fresh plan inside the apply's transaction recomputes
/// both, and `candidate_fingerprint` covers the candidates' identities and canonical
/// content. A heartbeat of an unrelated live worker moves `registry_fingerprint` but no
/// candidate's verdict, so by default it does not refuse the apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RegistryMatch {
    /// The candidates, their canonical content and their evidence must be unchanged
    /// (`candidate_fingerprint`); other rows may have moved.
    #[default]
    Candidates,
    /// Seed 004's strict form: any movement of `registry_fingerprint` refuses with
    /// `registry_revision_moved`.
    WholeRegistry,
}

fleet_identity::outward_codes! {
    /// The outcome of an apply, as the seed names them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum ApplyOutcome ("apply outcome") {
        /// The transaction ran; see retired and preserved.
        Applied = "applied",
        /// The registry changed between plan and apply.
        RegistryRevisionMoved = "registry_revision_moved",
        /// The eligibility verdict changed between plan and apply.
        CandidateSetMoved = "candidate_set_moved",
        /// Every requested row is already retired.
        AlreadyRetired = "already_retired",
        /// No identity was requested.
        NothingRequested = "nothing_requested",
        /// Rolled back; nothing retired.
        TransactionFailed = "transaction_failed",
        /// No liveness probe: nothing is retired unfenced.
        LivenessReprobeUnavailable = "liveness_reprobe_unavailable",
    }
}

/// One requested row that was not retired, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preserved {
    /// The row.
    pub worker_identity: WorkerIdentity,
    /// Why.
    pub reason_code: KeptReason,
}

/// Why an apply left a requested row as it was. It serializes as its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeptReason {
    /// The fresh plan preserved it (the conjunction's reason), or the re-probe just
    /// before its write did not find its process gone (`pid_alive`,
    /// `pid_reuse_detected`, `pid_liveness_unknown`).
    Preserve(PreserveReason),
    /// No row has that identity.
    NotRegistered,
    /// The fresh plan neither names it a candidate nor preserves it.
    NotACandidate,
    /// Another writer changed the row between its checks and its swap.
    RowChangedSincePlan,
}

impl KeptReason {
    /// The code as JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            KeptReason::Preserve(reason) => reason.as_str(),
            KeptReason::NotRegistered => "not_registered",
            KeptReason::NotACandidate => "not_a_candidate",
            KeptReason::RowChangedSincePlan => "row_changed_since_plan",
        }
    }
}

fleet_identity::outward_codes!(impl KeptReason);

/// What an apply did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ApplyReport {
    /// The outcome.
    pub outcome: ApplyOutcome,
    /// False only for `transaction_failed`.
    pub success: bool,
    /// Retired rows.
    pub retired: Vec<WorkerIdentity>,
    /// Requested rows that were preserved.
    pub preserved: Vec<Preserved>,
    /// `retired.len()`.
    pub retired_count: usize,
    /// Whether anything was written.
    pub mutation_performed: bool,
    /// The error that rolled the transaction back; absent from the JSON otherwise, so
    /// `error` in an answer always means a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The `registry_fingerprint` the plan returned.
    pub plan_registry_fingerprint: RegistryFingerprint,
    /// The `registry_fingerprint` of the rows the apply read (absent when it read none).
    pub registry_fingerprint: Option<RegistryFingerprint>,
    /// The request's audit context (absent when none was given).
    #[serde(skip_serializing_if = "RetirementAudit::is_empty")]
    pub audit_context: RetirementAudit,
    /// Whether the registry moved since the plan (absent when the apply read no rows).
    /// Under [`RegistryMatch::Candidates`] a movement outside the candidates does not
    /// refuse on its own.
    pub registry_moved: Option<bool>,
}

impl ApplyReport {
    fn nothing(outcome: ApplyOutcome, request: &ApplyRequest) -> Self {
        Self {
            outcome,
            success: outcome != ApplyOutcome::TransactionFailed,
            retired: Vec::new(),
            preserved: Vec::new(),
            retired_count: 0,
            mutation_performed: false,
            error: None,
            plan_registry_fingerprint: request.registry_fingerprint.clone(),
            registry_fingerprint: None,
            audit_context: request.audit.clone(),
            registry_moved: None,
        }
    }

    /// This report, with the registry fingerprint the apply read.
    fn read(mut self, current: &RegistryFingerprint) -> Self {
        self.registry_moved = Some(*current != self.plan_registry_fingerprint);
        self.registry_fingerprint = Some(current.clone());
        self
    }
}

fn reprobe_reason(verdict: Option<ProcessVerdict>) -> KeptReason {
    KeptReason::Preserve(match verdict {
        Some(ProcessVerdict::Alive) => PreserveReason::PidAlive,
        Some(ProcessVerdict::PidReused) => PreserveReason::PidReuseDetected,
        _ => PreserveReason::PidLivenessUnknown,
    })
}

/// A seam called inside the transaction just before each row's checks and write, so a
/// test can move the world at the worst moment (acquire a lease, revive a process).
pub trait BeforeWrite {
    /// Called with the open transaction and the identity about to be retired.
    fn before_write(&self, tx: &mut dyn crate::store::Tx, worker: &WorkerIdentity) -> Result<(), StoreError>;
}

impl BeforeWrite for () {
    fn before_write(&self, _: &mut dyn crate::store::Tx, _: &WorkerIdentity) -> Result<(), StoreError> {
        Ok(())
    }
}

/// The retirement plan of `rows` with the ledger's `instances`, the owners of the live
/// workflow leases and the host `fences`, `probe` judging the rows it can speak for:
/// what [`Registry::plan_retirement`] plans from one read of the store, for a caller
/// that keeps those (a watcher's dry run). Rows are judged as the stale sweep leaves
/// them: no dead worker waits for a live one to sweep it (docs/RETIREMENT.md).
pub fn plan_rows(
    rows: &[WorkerRow],
    instances: &[fleet_model::InstanceRecord],
    owners: &BTreeSet<String>,
    fences: &[fleet_model::HostFence],
    probe: &dyn LivenessProbe,
    ctx: &RetirementContext,
) -> Plan {
    let ledger: BTreeSet<ClientInstanceId> = instances.iter().map(|i| i.client_instance_id.clone()).collect();
    let rows = crate::registry::as_swept(rows, ctx.now);
    let probes = probe_active_rows(&rows, probe);
    let hosts = HostEvidence::new(&rows, fences);
    plan(&Evidence::with_hosts(&rows, &ledger, owners, &probes, &hosts), ctx)
}

impl<S: Store> Registry<S> {
    /// Plans retirement (seed 004's dry run) from one consistent read of rows, ledger
    /// and workflow leases, with `probe` judging the rows it can speak for. Writes
    /// nothing.
    pub fn plan_retirement(
        &mut self,
        ctx: &RetirementContext,
        probe: &dyn LivenessProbe,
    ) -> Result<Plan, StoreError> {
        let (rows, instances, owners, fences) = self.store_mut().read(|tx| {
            Ok::<_, StoreError>((
                tx.live_workers()?,
                tx.live_instances()?,
                active_workflow_owners_in(tx)?.owners,
                tx.host_fences()?,
            ))
        })?;
        Ok(plan_rows(&rows, &instances, &owners, &fences, probe, ctx))
    }

    /// Applies a retirement plan as of `ctx.now`, re-probing each candidate with `probe`
    /// inside the transaction.
    pub fn apply_retirement(
        &mut self,
        request: &ApplyRequest,
        ctx: &RetirementContext,
        probe: &dyn LivenessProbe,
    ) -> ApplyReport {
        self.apply(request, ctx, Some(probe), &())
    }

    /// [`Registry::apply_retirement`] with the seams a test needs: no probe at all
    /// (then nothing is retired), and a hook called inside the transaction just before
    /// each row's checks and write.
    #[cfg(feature = "conformance")]
    pub fn apply_retirement_with_hook(
        &mut self,
        request: &ApplyRequest,
        ctx: &RetirementContext,
        probe: Option<&dyn LivenessProbe>,
        hook: &dyn BeforeWrite,
    ) -> ApplyReport {
        self.apply(request, ctx, probe, hook)
    }

    fn apply(
        &mut self,
        request: &ApplyRequest,
        ctx: &RetirementContext,
        probe: Option<&dyn LivenessProbe>,
        hook: &dyn BeforeWrite,
    ) -> ApplyReport {
        let now = ctx.now;
        if request.worker_identities.is_empty() && !request.every_candidate {
            tracing::info!(outcome = "nothing_requested", "retirement apply refused");
            return ApplyReport::nothing(ApplyOutcome::NothingRequested, request);
        }
        let Some(probe) = probe else {
            tracing::info!(outcome = "liveness_reprobe_unavailable", "retirement apply refused");
            return ApplyReport::nothing(ApplyOutcome::LivenessReprobeUnavailable, request);
        };
        let result: Result<ApplyReport, StoreError> = self.store_mut().write(|tx| {
            // 1. The authoritative rows (the live fleet's: history is never a candidate),
            // and the same rows as the stale sweep leaves them at `now` (what the plan
            // judged); a row is written by swapping its stored version.
            let stored = tx.live_workers()?;
            let stored_by_id: BTreeMap<&WorkerIdentity, &WorkerRow> =
                stored.iter().map(|r| (&r.worker_identity, r)).collect();
            let rows = crate::registry::as_swept(&stored, now);
            let by_id: BTreeMap<&WorkerIdentity, &WorkerRow> =
                rows.iter().map(|r| (&r.worker_identity, r)).collect();
            // A replay names rows already retired; those of a launch that has ended are
            // history, looked up one by one.
            let mut all_retired = !request.every_candidate;
            for id in &request.worker_identities {
                if !all_retired {
                    break;
                }
                all_retired = match by_id.get(id) {
                    Some(row) => row.status == WorkerStatus::Retired,
                    None => tx.worker(id)?.is_some_and(|r| r.status == WorkerStatus::Retired),
                };
            }
            let nothing = |outcome| ApplyReport::nothing(outcome, request);
            if all_retired {
                let current = registry_fingerprint(&rows);
                return Ok(nothing(ApplyOutcome::AlreadyRetired).read(&current));
            }
            // 2. A fresh plan, with leases, ledger and probes read inside this
            // transaction; it recomputes both tokens.
            let fence = active_workflow_owners_in(tx)?;
            let ledger: BTreeSet<ClientInstanceId> =
                tx.live_instances()?.into_iter().map(|i| i.client_instance_id).collect();
            let probes = probe_active_rows(&rows, probe);
            let hosts = HostEvidence::new(&rows, &tx.host_fences()?);
            let evidence = Evidence::with_hosts(&rows, &ledger, &fence.owners, &probes, &hosts);
            let fresh = plan(&evidence, ctx);
            let moved = fresh.registry_fingerprint != request.registry_fingerprint;
            if moved && request.registry_match == RegistryMatch::WholeRegistry {
                return Ok(nothing(ApplyOutcome::RegistryRevisionMoved).read(&fresh.registry_fingerprint));
            }
            // 3. The candidate fingerprint: the same candidates, with the same content.
            if fresh.candidate_fingerprint != request.candidate_fingerprint {
                return Ok(nothing(ApplyOutcome::CandidateSetMoved).read(&fresh.registry_fingerprint));
            }
            let requested = if request.every_candidate {
                &fresh.candidate_worker_identities
            } else {
                &request.worker_identities
            };
            if requested.is_empty() {
                return Ok(nothing(ApplyOutcome::NothingRequested).read(&fresh.registry_fingerprint));
            }
            let reasons: BTreeMap<&WorkerIdentity, Verdict> =
                fresh.preserved.iter().map(|a| (&a.worker_identity, a.reason_code)).collect();
            // 4 and 5. Revalidate each request, then retire it by guarded swap.
            let mut report = nothing(ApplyOutcome::Applied).read(&fresh.registry_fingerprint);
            for id in requested {
                let preserve = |reason| Preserved { worker_identity: id.clone(), reason_code: reason };
                let Some(row) = by_id.get(id).copied() else {
                    report.preserved.push(preserve(KeptReason::NotRegistered));
                    continue;
                };
                if fresh.candidate_worker_identities.binary_search(id).is_err() {
                    let reason = match reasons.get(id) {
                        Some(Verdict::Preserve(reason)) => KeptReason::Preserve(*reason),
                        _ => KeptReason::NotACandidate,
                    };
                    report.preserved.push(preserve(reason));
                    continue;
                }
                hook.before_write(tx, id)?;
                // The external fence: any movement voids every remaining decision.
                if active_workflow_owners_in(tx)?.fingerprint != fence.fingerprint {
                    return Err(StoreError::conflict("workflow leases moved during apply; rolled back"));
                }
                // The liveness re-probe must affirmatively re-establish that this very
                // process is gone: the probe, where it speaks for the row's host and
                // boot; elsewhere the host's later boot or its fence, read again in
                // this transaction.
                let probed = row.process().map(|p| probe.probe(&p));
                let by_host = evidence.host_proof(row, probed);
                let verdict = if by_host.is_some() { Some(ProcessVerdict::Gone) } else { probed };
                if verdict != Some(ProcessVerdict::Gone) {
                    report.preserved.push(preserve(reprobe_reason(verdict)));
                    continue;
                }
                let reason = by_host.map_or(Verdict::EligibleStaleOrphan, Verdict::EligibleByHost).as_str();
                let mut retired = row.clone();
                retired.status = WorkerStatus::Retired;
                retired.retired_at = Some(now);
                retired.retired_by = Some(request.retired_by.clone());
                retired.retirement_reason = Some(reason.into());
                let Some(stored_row) = stored_by_id.get(id).copied() else {
                    report.preserved.push(preserve(KeptReason::NotRegistered));
                    continue;
                };
                if tx.replace_worker(stored_row, &retired)? {
                    let audit = &request.audit;
                    tracing::info!(
                        worker = %id,
                        retired_by = %request.retired_by,
                        remote = audit.remote.as_deref(),
                        host = audit.host.as_deref(),
                        org = audit.org.as_deref(),
                        repo = audit.repo.as_deref(),
                        "retired a stale worker"
                    );
                    report.retired.push(id.clone());
                } else {
                    report.preserved.push(preserve(KeptReason::RowChangedSincePlan));
                }
            }
            report.retired_count = report.retired.len();
            report.mutation_performed = report.retired_count > 0;
            Ok(report)
        });
        let report = result.unwrap_or_else(|e| ApplyReport {
            error: Some(e.to_string()),
            ..ApplyReport::nothing(ApplyOutcome::TransactionFailed, request)
        });
        for p in &report.preserved {
            tracing::info!(worker = %p.worker_identity, reason = %p.reason_code, "retirement preserved a requested row");
        }
        tracing::info!(
            outcome = report.outcome.as_str(),
            registry_moved = report.registry_moved,
            retired = report.retired_count,
            preserved = report.preserved.len(),
            error = report.error.as_deref(),
            "retirement apply"
        );
        report
    }
}

#[cfg(test)]
mod tests {
    use super::RetirementAudit;

    #[test]
    fn the_audit_context_takes_names_and_refuses_the_rest_by_field() {
        let some = |s: &str| Some(s.to_owned());
        let ok = RetirementAudit::new(
            some("prgs"),
            some("git.example.org:3000"),
            some("Team_1"),
            some("repo.rs"),
            None,
        )
        .unwrap();
        assert_eq!(ok.remote.as_deref(), Some("prgs"));
        assert!(RetirementAudit::new(None, None, None, None, None).unwrap().is_empty());
        let bad =
            |remote, host, org, repo| RetirementAudit::new(remote, host, org, repo, None).unwrap_err().field;
        assert_eq!(bad(some("Upper"), None, None, None), "remote");
        assert_eq!(bad(None, some("a..b"), None, None), "host");
        assert_eq!(bad(None, some("host:0"), None, None), "host");
        assert_eq!(bad(None, None, some("../x"), None), "org");
        assert_eq!(bad(None, None, None, some(&"r".repeat(101))), "repo");
        let known = ["dadeschools".to_owned(), "prgs".to_owned()];
        assert!(RetirementAudit::new(some("prgs"), None, None, None, Some(&known)).is_ok());
        let refused = RetirementAudit::new(some("other"), None, None, None, Some(&known)).unwrap_err();
        assert_eq!(refused.field, "remote");
        assert!(refused.message.contains("dadeschools, prgs"), "{refused}");
    }
}
