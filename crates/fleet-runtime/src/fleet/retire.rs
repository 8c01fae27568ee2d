//! Retirement as a session does it: the plan (over the kept rows or from one read), the
//! binding an apply travels with, and the apply — alone, or whole as an acting worker
//! makes it, behind seed 004's rules.

use std::collections::BTreeMap;

use fleet_identity::{Repository, WorkerIdentity};
use fleet_probe::LocalProbe;
use fleet_registry::{ApplyReport, ApplyRequest, StoreError, WorkerRow};
use fleet_retirement::{Plan, RetirementContext};
use fleet_snapshot::{FindingCode, FleetSnapshot, GateReason, Policy, mutation_gate};

use super::Fleet;
use crate::clock::now;
use crate::stable::StableRuntime;

/// Why the context of a retirement could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContextError {
    /// This host's identity (its machine and boot ids) could not be read: the host, not
    /// the input, is at fault.
    #[error("cannot read this host's identity: {0}")]
    HostIdentity(#[source] fleet_probe::ProbeError),
    /// The current directory, the default repository, could not be read.
    #[error("cannot read the current directory: {0}")]
    CurrentDirectory(#[source] std::io::Error),
    /// The repository given is not one.
    #[error(transparent)]
    Repository(#[from] fleet_identity::IdentityError),
}

/// Where retirement runs: this host and boot, the canonical repository (default: the
/// current directory), now.
pub fn retirement_context(repository: Option<&str>) -> Result<RetirementContext, ContextError> {
    let probe = LocalProbe::new().map_err(ContextError::HostIdentity)?;
    let repository = match repository {
        Some(r) => r.to_owned(),
        None => std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .map(|p| p.display().to_string())
            .map_err(ContextError::CurrentDirectory)?,
    };
    Ok(RetirementContext {
        host_id: probe.host_id().clone(),
        boot_id: Some(probe.boot_id().clone()),
        canonical_repository: Repository::new(repository)?,
        now: now(),
    })
}

/// Seed 004's audit context of a plan or apply, checked: `remote` must be one of
/// `FLEET_REMOTES` when the operator lists them. The error names the argument.
pub fn retirement_audit(
    remote: Option<String>,
    host: Option<String>,
    org: Option<String>,
    repo: Option<String>,
) -> Result<fleet_registry::RetirementAudit, fleet_registry::AuditFieldError> {
    let known: Option<Vec<String>> = std::env::var(crate::vars::REMOTES)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.split(',').map(str::trim).filter(|r| !r.is_empty()).map(str::to_owned).collect());
    fleet_registry::RetirementAudit::new(remote, host, org, repo, known.as_deref())
}

/// Why a worker may not act on the fleet now (seed 004's rules for a mutating tool
/// call), checked in this order.
#[derive(Debug)]
#[non_exhaustive]
pub enum WorkerMayNotMutate {
    /// The registry could not be read.
    Registry(StoreError),
    /// The worker's mutation gate is closed, for these reasons.
    GateClosed(Vec<GateReason>),
    /// The binary this worker runs was replaced since it started.
    RuntimeUnstable(String),
    /// The worker's instance runs more than one worker in a namespace.
    CohortNotUnique,
    /// The workflow leases, the apply's external fence, cannot be read.
    LeasesUnreadable(StoreError),
}

impl Fleet {
    /// The repository binding an apply of `workers` uses when none is given: the one
    /// its plan bound them to. A plan's candidates all carry the plan's binding (a row
    /// bound elsewhere is preserved as `repository_binding_ambiguous`), so it travels in
    /// the plan with them, and where the apply is run from changes nothing. `None` when
    /// the rows requested do not share one repository (then the caller's default holds,
    /// and the apply re-plans and refuses what does not match).
    pub fn binding_of(&mut self, workers: &[WorkerIdentity]) -> Result<Option<String>, StoreError> {
        let rows = self.with_registry(|registry| {
            workers.iter().map(|w| registry.worker(w)).collect::<Result<Vec<_>, _>>()
        })?;
        let mut repositories =
            rows.iter().flatten().filter_map(|r| r.repository.as_ref()).map(|r| r.as_str());
        let Some(first) = repositories.next() else { return Ok(None) };
        Ok(repositories.all(|r| r == first).then(|| first.to_owned()))
    }

    /// The repository binding an apply of `request` uses when none is given: the one
    /// its plan was made for. For named workers, the binding they share
    /// ([`Fleet::binding_of`]); for every candidate, the repository, among those the
    /// active rows are bound to, whose plan now has the candidates the request's
    /// fingerprint names. `None` when none does (then the caller's default holds, and
    /// the apply refuses what does not match).
    pub fn plan_binding(&mut self, request: &ApplyRequest) -> Result<Option<String>, StoreError> {
        if !request.worker_identities.is_empty() {
            return self.binding_of(&request.worker_identities);
        }
        let repositories: std::collections::BTreeSet<String> = self
            .dump()?
            .worker_registrations
            .iter()
            .filter(|r| r.status == fleet_registry::WorkerStatus::Active)
            .filter_map(|r| r.repository.as_ref().map(|r| r.as_str().to_owned()))
            .collect();
        for repository in repositories {
            let Ok(ctx) = retirement_context(Some(&repository)) else { continue };
            let plan = self.plan(&ctx)?;
            if plan.candidate_count > 0 && plan.candidate_fingerprint == request.candidate_fingerprint {
                return Ok(Some(repository));
            }
        }
        Ok(None)
    }

    /// A retirement dry run over the rows and ledger this session keeps (read again only
    /// when the store moved), with the workflow leases and host fences read now and this
    /// host's probe: what a watcher shows, without a second copy of every row. An apply
    /// plans again from one read inside its own transaction, whatever this says.
    pub fn plan_kept(&mut self, ctx: &RetirementContext) -> Result<Plan, StoreError> {
        let probe = self.local_probe()?;
        let (owners, fences) = self.with_registry(|registry| {
            Ok((registry.active_workflow_owners()?.owners, registry.host_fences()?))
        })?;
        self.read()?;
        let dump = self.rows()?;
        Ok(fleet_registry::plan_rows(
            &dump.worker_registrations,
            &dump.instances,
            &owners,
            &fences,
            &probe,
            ctx,
        ))
    }

    /// Plans retirement from one consistent read of rows, ledger and workflow leases,
    /// with this host's probe. Writes nothing.
    pub fn plan(&mut self, ctx: &RetirementContext) -> Result<Plan, StoreError> {
        let probe = self.local_probe()?;
        self.with_registry(|registry| registry.plan_retirement(ctx, &probe))
    }

    /// Whether `worker` may act on the fleet now: its mutation gate is open, its
    /// binary is the one it started with (`runtime`), its instance runs one worker per
    /// namespace, and the workflow leases that fence an apply can be read.
    pub fn worker_may_mutate(
        &mut self,
        worker: &WorkerRow,
        runtime: &StableRuntime,
    ) -> Result<(), WorkerMayNotMutate> {
        let mine = worker.client_instance_id.as_deref();
        let snap = self.snapshot(None, &Policy::default(), now()).map_err(WorkerMayNotMutate::Registry)?;
        let gate = mutation_gate(&snap, &worker.worker_identity);
        let cohort_not_unique = snap
            .findings_of(FindingCode::DuplicateNamespaceWorker)
            .any(|f| f.client_instance_id.as_deref() == mine);
        if !gate.mutation_allowed {
            return Err(WorkerMayNotMutate::GateClosed(gate.reasons));
        }
        runtime.check().map_err(WorkerMayNotMutate::RuntimeUnstable)?;
        if cohort_not_unique {
            return Err(WorkerMayNotMutate::CohortNotUnique);
        }
        self.with_registry(|registry| registry.active_workflow_owners())
            .map_err(WorkerMayNotMutate::LeasesUnreadable)?;
        Ok(())
    }

    /// Applies a retirement plan from this host as of `ctx.now`, in one transaction on
    /// the registry this session keeps open, re-probing each candidate with this host's
    /// probe, then reads what the fleet looks like after it. The apply's outcome stands
    /// even when that second read fails ([`AfterApply::Unread`]).
    pub fn apply(&mut self, request: &ApplyRequest, ctx: &RetirementContext) -> Result<Applied, StoreError> {
        let probe = self.local_probe()?;
        let report = self.with_registry(|registry| Ok(registry.apply_retirement(request, ctx, &probe)))?;
        let after = match self.snapshot(None, &Policy::default(), now()) {
            Ok(snap) => AfterApply::of(&snap),
            Err(e) => AfterApply::Unread { error: e.to_string() },
        };
        Ok(Applied { report, after })
    }

    /// Seed 004's apply as an acting worker makes it, whole: the worker's mutation
    /// gate, stable runtime, unique cohort and readable workflow leases
    /// ([`Fleet::worker_may_mutate`]); the plan's repository binding unless `repository`
    /// names one ([`Fleet::plan_binding`]); the retirement context; `still_allowed`,
    /// asked immediately before the write (a capability withdrawn during the call stops
    /// it); then the apply and the fleet right after it ([`Fleet::apply`]). Each step
    /// reuses this session's reads and probe.
    pub fn apply_as(
        &mut self,
        worker: &WorkerRow,
        runtime: &StableRuntime,
        request: &ApplyRequest,
        repository: Option<&str>,
        still_allowed: impl FnOnce() -> bool,
    ) -> Result<Applied, WorkerApplyRefused> {
        self.worker_may_mutate(worker, runtime).map_err(WorkerApplyRefused::MayNotMutate)?;
        let binding = match repository {
            Some(given) => Some(given.to_owned()),
            None => self.plan_binding(request).map_err(WorkerApplyRefused::Registry)?,
        };
        let ctx = retirement_context(binding.as_deref()).map_err(WorkerApplyRefused::Context)?;
        if !still_allowed() {
            return Err(WorkerApplyRefused::Revoked);
        }
        self.apply(request, &ctx).map_err(WorkerApplyRefused::Registry)
    }
}

/// Why [`Fleet::apply_as`] wrote nothing before the apply's own transaction.
#[derive(Debug)]
#[non_exhaustive]
pub enum WorkerApplyRefused {
    /// The worker may not act on the fleet now.
    MayNotMutate(WorkerMayNotMutate),
    /// The registry could not be read or written.
    Registry(StoreError),
    /// The retirement context could not be made (this host, or the repository given).
    Context(ContextError),
    /// The caller's permission was withdrawn before the write.
    Revoked,
}

/// An apply and the fleet right after it.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct Applied {
    /// What the apply did.
    #[serde(flatten)]
    pub report: ApplyReport,
    /// The fleet right after it (`post_apply` in an answer).
    #[serde(rename = "post_apply")]
    pub after: AfterApply,
}

/// What the fleet looks like right after an apply.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum AfterApply {
    /// The fleet as read again.
    Read {
        /// Whether the live fleet is safe now.
        live_fleet_safe: bool,
        /// How many of each active blocker remain.
        remaining_blockers: BTreeMap<FindingCode, usize>,
        /// How many workers are still stale.
        stale_worker_count: usize,
    },
    /// The fleet could not be read again, and why.
    Unread {
        /// Why.
        error: String,
    },
}

impl AfterApply {
    fn of(snap: &FleetSnapshot<'_>) -> Self {
        let mut remaining_blockers = BTreeMap::new();
        for f in snap.findings.iter().filter(|f| f.active_blocker) {
            *remaining_blockers.entry(f.code).or_default() += 1;
        }
        Self::Read {
            live_fleet_safe: snap.live_fleet_safe,
            remaining_blockers,
            stale_worker_count: snap.counts.stale_worker_count,
        }
    }
}

impl std::fmt::Display for AfterApply {
    /// The compact JSON of the summary, as `retire apply` prints it after `after:`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let json = serde_json::to_string(self).map_err(|_| std::fmt::Error)?;
        f.write_str(&json)
    }
}
