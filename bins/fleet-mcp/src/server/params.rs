//! The tools' arguments, as their input schemas declare them, and the checks that turn
//! an argument into what a tool acts on (identities, a TTL, a retirement context).

use super::*;
use fleet_runtime::ContextError;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SnapshotParams {
    /// The approved fleet manifest: {"instances": [{"client_type", "client_instance_id", "fleet_run_id", "namespaces"}]}.
    #[serde(default)]
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub(super) expected_manifest: Option<Value>,
    /// The repository every worker should be bound to; a worker bound to another is
    /// reported as foreign_repository (an active blocker).
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) canonical_repository: Option<String>,
    /// The consistency_token of an earlier snapshot this server answered: the answer
    /// then says which live workers' heartbeats advanced, stood still, went back, were
    /// lost or appeared since (heartbeat_comparison).
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) compare_to: Option<String>,
    /// "summary" (default): the verdict, the counts, one instance in full and a page of
    /// findings with their totals. "full": the whole snapshot (megabytes for a large fleet).
    #[serde(default)]
    pub(super) detail: Detail,
    /// The instance to show in full (default: this server's own).
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) instance: Option<String>,
    /// Only workers and findings of this namespace.
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) namespace: Option<String>,
    /// Only findings of this code (stale_worker, duplicate_namespace_worker, …).
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) finding_code: Option<String>,
    /// Findings per page (0 to 200, default 20).
    #[serde(default)]
    #[schemars(with = "u64", range(max = 200))]
    pub(super) limit: Option<u64>,
    /// The next_cursor of the previous page.
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) cursor: Option<String>,
}

/// Seed 004's audit context of a plan or an apply.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(crate) struct AuditArgs {
    /// The remote the retirement concerns (seed 004's audit context; one of
    /// FLEET_REMOTES when the operator lists them).
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) remote: Option<String>,
    /// Host override for the audit context.
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) host: Option<String>,
    /// Organisation override for the audit context.
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) org: Option<String>,
    /// Repository override for the audit context.
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) repo: Option<String>,
}

impl AuditArgs {
    /// The audit context, checked; a bad value is `invalid_arguments` naming its field.
    pub(super) fn checked(self) -> Result<fleet_registry::RetirementAudit, CallToolResult> {
        fleet_runtime::retirement_audit(self.remote, self.host, self.org, self.repo)
            .map_err(|e| invalid(e.field, e.message))
    }
}

/// A plan with the audit context it was asked for.
#[derive(serde::Serialize)]
pub(super) struct PlanWithAudit<'a> {
    #[serde(flatten)]
    pub(super) plan: &'a fleet_retirement::Plan,
    #[serde(skip_serializing_if = "fleet_registry::RetirementAudit::is_empty")]
    pub(super) audit_context: &'a fleet_registry::RetirementAudit,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct PlanParams {
    /// Expected repository binding; defaults to this server's working directory.
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) canonical_repository: Option<String>,
    /// Seed 004's audit context.
    #[serde(flatten)]
    pub(super) audit: AuditArgs,
    /// "summary" (default): every candidate, and the preserved rows counted by reason.
    /// "full": every preserved row with its evidence too.
    #[serde(default)]
    pub(super) detail: Detail,
    /// Preserved rows to include (0 to 200, default 0).
    #[serde(default)]
    #[schemars(with = "u64", range(max = 200))]
    pub(super) limit: Option<u64>,
    /// The next_cursor of the previous page of preserved rows.
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) cursor: Option<String>,
    /// Candidates to include (0 to 200, default 50).
    #[serde(default)]
    #[schemars(with = "u64", range(max = 200))]
    pub(super) candidate_limit: Option<u64>,
    /// The next_candidate_cursor of the previous page of candidates.
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) candidate_cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ApplyParams {
    /// The exact registry_fingerprint the plan returned.
    pub(super) registry_fingerprint: String,
    /// The exact candidate_fingerprint the plan returned.
    pub(super) candidate_fingerprint: String,
    /// The candidate identities to retire (a JSON or comma-separated string is accepted
    /// too). Omitted: every candidate of the plan whose candidate_fingerprint is given.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) worker_identities: Option<Value>,
    /// Must match the value the plan used.
    #[serde(default)]
    #[schemars(with = "String")]
    pub(super) canonical_repository: Option<String>,
    /// Refuse with registry_revision_moved when any row changed since the plan, even one
    /// outside the candidates (default false: only the candidates must be unchanged).
    #[serde(default)]
    pub(super) require_registry_match: bool,
    /// Seed 004's audit context.
    #[serde(flatten)]
    pub(super) audit: AuditArgs,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LeaseAcquireParams {
    /// The workflow's name; the lease key is workflow:NAME.
    pub(super) workflow: String,
    /// Seconds until the lease lapses unless renewed (1 to 3600, default 60).
    #[serde(default)]
    #[schemars(with = "u64", range(min = 1, max = 3600))]
    pub(super) ttl_s: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LeaseHolderParams {
    /// The workflow's name.
    pub(super) workflow: String,
    /// The lease id the acquisition returned.
    pub(super) lease_id: String,
    /// The fencing epoch the acquisition returned.
    #[schemars(range(min = 1))]
    pub(super) fencing_epoch: u64,
    /// Seconds from now (renew only; default 60).
    #[serde(default)]
    #[schemars(with = "u64", range(min = 1, max = 3600))]
    pub(super) ttl_s: Option<u64>,
}

pub(super) fn parse_identities(value: &Value) -> Result<Vec<WorkerIdentity>, String> {
    let items: Vec<String> = match value {
        Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or("not a string"))
            .collect::<Result<_, _>>()?,
        Value::String(text) if text.trim_start().starts_with('[') => {
            serde_json::from_str(text).map_err(|e| format!("not a JSON list: {e}"))?
        }
        Value::String(text) => {
            text.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect()
        }
        _ => return Err("worker_identities must be a list or a string".into()),
    };
    items.into_iter().map(|s| WorkerIdentity::new(s).map_err(|e| e.to_string())).collect()
}

/// Where a retirement runs (see [`retirement_context`]): a repository that cannot be
/// read is the caller's argument; a host whose identity cannot be read is not.
pub(super) fn context(
    repository: Option<&str>,
) -> Result<fleet_retirement::RetirementContext, CallToolResult> {
    retirement_context(repository).map_err(context_refusal)
}

/// The answer to a retirement context that could not be made.
pub(super) fn context_refusal(e: ContextError) -> CallToolResult {
    match e {
        ContextError::HostIdentity(_) => refuse(Refusal::RegistryUnavailable, e),
        ContextError::CurrentDirectory(_) | ContextError::Repository(_) => invalid("canonical_repository", e),
        // A reason this build does not know yet: said as it is.
        _ => refuse(Refusal::InternalError, e),
    }
}

/// The answer to a worker that may not act on the fleet now.
pub(super) fn may_not_mutate(e: fleet_runtime::WorkerMayNotMutate) -> CallToolResult {
    use fleet_runtime::WorkerMayNotMutate;
    match e {
        WorkerMayNotMutate::Registry(e) => refuse(Refusal::RegistryUnavailable, e),
        WorkerMayNotMutate::GateClosed(reasons) => {
            refusal(Refusal::MutationGateClosed, serde_json::json!({ "reasons": reasons }))
        }
        // Seed 004's stable-runtime mode: no mutation from a binary an upgrade replaced.
        WorkerMayNotMutate::RuntimeUnstable(e) => refuse(Refusal::RuntimeUnstable, e),
        WorkerMayNotMutate::CohortNotUnique => {
            refuse(Refusal::CohortNotUnique, "this instance runs more than one worker in a namespace")
        }
        WorkerMayNotMutate::LeasesUnreadable(e) => refuse(Refusal::LeaseEnumerationFailed, e),
        // A rule this build does not know yet: said as it is.
        other => refuse(Refusal::InternalError, format!("{other:?}")),
    }
}

pub(super) fn ttl(seconds: Option<u64>) -> Result<time::Duration, CallToolResult> {
    let s = seconds.unwrap_or(60);
    if (1..=3600).contains(&s) {
        Ok(time::Duration::seconds(i64::try_from(s).unwrap_or(60)))
    } else {
        Err(invalid("ttl_s", format!("ttl_s {s} is outside 1..=3600")))
    }
}
