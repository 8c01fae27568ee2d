//! Answers sized for an agent. A 10 000-worker snapshot is 4.6 MB of JSON, far past what
//! a client puts in a model's context (Claude Code's default limit for one MCP tool
//! output is 25 000 tokens), so by default the snapshot tool answers with the verdict,
//! the counts, the caller's own instance in full, and a bounded page of findings with
//! their totals; arguments narrow or page it, and `detail: "full"` returns the whole
//! snapshot. The plan's preserved rows are summarised by reason unless a page of them
//! is asked for; its candidates are always complete, since apply needs them.

use fleet_identity::Namespace;
use fleet_snapshot::{FindingCode, FleetSnapshot};
use schemars::JsonSchema;
use serde_json::{Value, json};

fleet_identity::outward_codes! {
    /// How much of the snapshot or plan to answer with.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub(crate) enum Detail ("detail") {
        /// The verdict, the counts, one instance in full and a page of findings.
        #[default]
        Summary = "summary",
        /// Everything, in the seed's shape.
        Full = "full",
    }
}

/// One plain string property with its values, inline: what every client's schema reader
/// takes (a `$ref` to `$defs` is not).
impl JsonSchema for Detail {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Detail".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "enum": Detail::ALL.map(Detail::as_str) })
    }
}

/// The most entries one page holds, and how many it holds unless told.
pub(crate) const MAX_LIMIT: u64 = 200;
/// Findings per page unless `limit` says otherwise.
pub(crate) const DEFAULT_FINDINGS: u64 = 20;
/// The longest `instance` argument taken (a minted id is under 100 bytes).
const MAX_INSTANCE_BYTES: usize = 256;
/// Candidates a plan summary shows unless `candidate_limit` says otherwise.
pub(crate) const DEFAULT_CANDIDATES: u64 = 50;

/// A refusal of one argument: its name and why.
pub(crate) type ArgumentError = (&'static str, String);

/// The offset a cursor stands for: the decimal index of the first entry of the page.
fn offset(cursor: Option<&str>) -> Result<usize, ArgumentError> {
    offset_of("cursor", cursor)
}

fn offset_of(field: &'static str, cursor: Option<&str>) -> Result<usize, ArgumentError> {
    cursor.map_or(Ok(0), |c| {
        c.parse().map_err(|_| (field, format!("{field} {c:?} is not one this server returned")))
    })
}

fn limit(value: Option<u64>, default: u64) -> Result<usize, ArgumentError> {
    limit_of("limit", value, default)
}

fn limit_of(field: &'static str, value: Option<u64>, default: u64) -> Result<usize, ArgumentError> {
    let limit = value.unwrap_or(default);
    if limit > MAX_LIMIT {
        return Err((field, format!("{field} {limit} is outside 0..={MAX_LIMIT}")));
    }
    Ok(usize::try_from(limit).unwrap_or(0))
}

/// What a summary of the snapshot shows: the narrowing arguments, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapshotPage {
    instance: Option<String>,
    namespace: Option<Namespace>,
    finding_code: Option<FindingCode>,
    limit: usize,
    offset: usize,
}

impl SnapshotPage {
    /// Checks the narrowing arguments of a summary; under `detail: "full"` none may be
    /// given, since the full answer is the whole snapshot.
    pub(crate) fn new(
        detail: Detail,
        instance: Option<String>,
        namespace: Option<&str>,
        finding_code: Option<&str>,
        limit_arg: Option<u64>,
        cursor: Option<&str>,
    ) -> Result<Option<Self>, ArgumentError> {
        if detail == Detail::Full {
            let given = [
                ("instance", instance.is_some()),
                ("namespace", namespace.is_some()),
                ("finding_code", finding_code.is_some()),
                ("limit", limit_arg.is_some()),
                ("cursor", cursor.is_some()),
            ];
            return match given.into_iter().find(|(_, given)| *given) {
                Some((field, _)) => Err((
                    field,
                    format!(
                        "detail \"full\" answers with the whole snapshot; {field} narrows only a summary"
                    ),
                )),
                None => Ok(None),
            };
        }
        // The summary repeats the instance it narrows to: an argument no instance id could
        // be is refused, not echoed.
        if let Some(given) = instance.as_deref().filter(|i| i.len() > MAX_INSTANCE_BYTES) {
            return Err((
                "instance",
                format!("instance is {} bytes; an instance id is at most {MAX_INSTANCE_BYTES}", given.len()),
            ));
        }
        let namespace = namespace
            .map(|ns| ns.parse::<Namespace>().map_err(|e| ("namespace", e.to_string())))
            .transpose()?;
        let finding_code = finding_code
            .map(|code| {
                FindingCode::ALL.into_iter().find(|c| c.as_str() == code).ok_or_else(|| {
                    (
                        "finding_code",
                        format!("finding_code {code:?} is not a finding code (docs/SNAPSHOT.md)"),
                    )
                })
            })
            .transpose()?;
        Ok(Some(Self {
            instance,
            namespace,
            finding_code,
            limit: limit(limit_arg, DEFAULT_FINDINGS)?,
            offset: offset(cursor)?,
        }))
    }

    /// The summary of `snap`: its verdict and counts; the instance named by `instance`
    /// (else `own`, the caller's) with its workers, narrowed to `namespace`; and a page
    /// of the findings that match, active blockers first, with their totals.
    pub(crate) fn body(&self, snap: &FleetSnapshot<'_>, own: Option<&str>) -> serde_json::Result<Summary> {
        let instance = self.instance.as_deref().or(own);
        let of_instance = |id: Option<&str>| instance.is_none_or(|wanted| id == Some(wanted));
        let instances: Vec<_> = match instance {
            Some(wanted) => {
                snap.instances.iter().filter(|i| i.client_instance_id == Some(wanted)).take(1).collect()
            }
            None => Vec::new(),
        };
        let workers: Vec<_> = match instance {
            Some(_) => snap
                .workers
                .iter()
                .filter(|w| of_instance(w.client_instance_id()))
                .filter(|w| self.namespace.is_none_or(|ns| w.row.namespace == ns))
                .collect(),
            None => Vec::new(),
        };
        let matching: Vec<_> = snap
            .findings
            .iter()
            .filter(|f| self.instance.is_none() || of_instance(f.client_instance_id.as_deref()))
            .filter(|f| self.namespace.is_none_or(|ns| f.namespace == Some(ns)))
            .filter(|f| self.finding_code.is_none_or(|code| f.code == code))
            .collect();
        // Active blockers first, each group in report order: the page an agent reads
        // first says why the fleet is unsafe.
        let ordered =
            matching.iter().filter(|f| f.active_blocker).chain(matching.iter().filter(|f| !f.active_blocker));
        let page: Vec<_> = ordered.skip(self.offset).take(self.limit).collect();
        let next = self.offset + page.len();
        let workers = workers.iter().map(serde_json::to_value).collect::<serde_json::Result<Vec<_>>>()?;
        let rest = json_map(json!({
            "live_fleet_safe": snap.live_fleet_safe,
            "manifest_supplied": snap.manifest_supplied,
            "counts": snap.counts,
            "instances": instances,
            "findings": page,
            "page": {
                "detail": Detail::Summary.as_str(),
                "instance": instance,
                "namespace": self.namespace,
                "finding_code": self.finding_code,
                "instances_total": snap.instances.len(),
                "workers_total": snap.workers.len(),
                "findings_total": snap.findings.len(),
                "findings_matching": matching.len(),
                "findings_returned": page.len(),
                "cursor": self.offset.to_string(),
                "next_cursor": (next < matching.len()).then(|| next.to_string()),
                "note": "a summary: narrow with instance, namespace and finding_code, page the findings \
                         with limit and next_cursor, or ask detail \"full\" for the whole snapshot",
            },
        }));
        Ok(Summary {
            snapshot_at: snap.snapshot_at,
            consistency_token: snap.consistency_token.clone(),
            registry_revision: snap.registry_revision.clone(),
            workers,
            heartbeat_comparison: None,
            rest,
        })
    }
}

/// A snapshot summary: what moves while the fleet's judgement stands (the time, the
/// token, the heartbeats of the workers shown) as fields of their own, and the rest as
/// it was written. A kept summary is answered again with those fields brought up to
/// date, never by editing its JSON.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Summary {
    pub(crate) snapshot_at: fleet_identity::Timestamp,
    pub(crate) consistency_token: String,
    pub(crate) registry_revision: String,
    /// The workers of the instance shown, each as the snapshot writes a worker.
    pub(crate) workers: Vec<Value>,
    /// Seed 000's comparison with the snapshot `compare_to` named, when it named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) heartbeat_comparison: Option<Value>,
    /// The verdict, counts, instances, findings and page.
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

/// What every snapshot answer starts with, whole, summary or digest: when, the tokens,
/// the verdict and the counts.
pub(crate) fn verdict(snap: &FleetSnapshot<'_>) -> serde_json::Map<String, Value> {
    json_map(json!({
        "snapshot_at": snap.snapshot_at,
        "consistency_token": snap.consistency_token,
        "registry_revision": snap.registry_revision,
        "live_fleet_safe": snap.live_fleet_safe,
        "manifest_supplied": snap.manifest_supplied,
        "counts": snap.counts,
    }))
}

/// The object a `json!({…})` literal makes.
pub(crate) fn json_map(value: Value) -> serde_json::Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

/// The paging arguments of a plan summary: a page of candidates (`candidate_limit`,
/// default 50, from `candidate_cursor`) and a page of preserved rows (`limit`, default
/// none, from `cursor`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PlanPaging<'a> {
    pub(crate) limit: Option<u64>,
    pub(crate) cursor: Option<&'a str>,
    pub(crate) candidate_limit: Option<u64>,
    pub(crate) candidate_cursor: Option<&'a str>,
}

/// What a summary of the plan shows of its candidates and preserved rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlanPage {
    limit: usize,
    offset: usize,
    candidate_limit: usize,
    candidate_offset: usize,
}

impl PlanPage {
    /// Checks the paging arguments; `None` for `detail: "full"`.
    pub(crate) fn new(detail: Detail, paging: PlanPaging<'_>) -> Result<Option<Self>, ArgumentError> {
        if detail == Detail::Full {
            let full = "detail \"full\" answers with every candidate and preserved row";
            return match paging {
                PlanPaging { limit: Some(_), .. } => Err(("limit", full.into())),
                PlanPaging { cursor: Some(_), .. } => Err(("cursor", full.into())),
                PlanPaging { candidate_limit: Some(_), .. } => Err(("candidate_limit", full.into())),
                PlanPaging { candidate_cursor: Some(_), .. } => Err(("candidate_cursor", full.into())),
                _ => Ok(None),
            };
        }
        Ok(Some(Self {
            limit: limit(paging.limit, 0)?,
            offset: offset(paging.cursor)?,
            candidate_limit: limit_of("candidate_limit", paging.candidate_limit, DEFAULT_CANDIDATES)?,
            candidate_offset: offset_of("candidate_cursor", paging.candidate_cursor)?,
        }))
    }

    /// `plan` with its candidates and preserved rows cut to their pages (no preserved
    /// rows unless `limit` asked for some; `preserved_reason_counts` summarises them
    /// all), and the pages' totals. Apply needs only the fingerprints: it retires every
    /// candidate when no identities are named.
    /// The request's audit context goes with it when one was given.
    pub(crate) fn body(
        &self,
        plan: &fleet_retirement::Plan,
        audit: &fleet_registry::RetirementAudit,
    ) -> serde_json::Result<Value> {
        let page: Vec<_> = plan.preserved.iter().skip(self.offset).take(self.limit).collect();
        let next = self.offset + page.len();
        let (from, count) = (self.candidate_offset, self.candidate_limit);
        let candidates: Vec<_> = plan.candidates.iter().skip(from).take(count).collect();
        let identities: Vec<_> = plan.candidate_worker_identities.iter().skip(from).take(count).collect();
        let next_candidate = from + candidates.len();
        let body = json!({
            "outcome": plan.outcome,
            "registry_fingerprint": plan.registry_fingerprint,
            "candidate_fingerprint": plan.candidate_fingerprint,
            "candidate_worker_identities": identities,
            "candidates": candidates,
            "preserved": page,
            "preserved_reason_counts": plan.preserved_reason_counts,
            "assessed_count": plan.assessed_count,
            "candidate_count": plan.candidate_count,
            "preserved_count": plan.preserved_count,
            "protected_active_workflow_owners": plan.protected_active_workflow_owners,
            "canonical_repository": plan.canonical_repository,
            "mutation_performed": plan.mutation_performed,
            "read_only": plan.read_only,
            "page": {
                "detail": Detail::Summary.as_str(),
                "candidates_total": plan.candidates.len(),
                "candidates_returned": candidates.len(),
                "candidate_cursor": from.to_string(),
                "next_candidate_cursor": (next_candidate < plan.candidates.len()).then(|| next_candidate.to_string()),
                "preserved_total": plan.preserved.len(),
                "preserved_returned": page.len(),
                "cursor": self.offset.to_string(),
                "next_cursor": (next < plan.preserved.len()).then(|| next.to_string()),
                "note": "one page of candidates, and preserved rows summarised by reason; page them with \
                         candidate_limit/next_candidate_cursor and limit/next_cursor, or ask detail \"full\". \
                         To retire every candidate, pass the two fingerprints to apply without worker_identities",
            },
        });
        // `next_eligible_after` only when some preserved row becomes eligible later.
        #[derive(serde::Serialize)]
        struct Body<'a> {
            #[serde(flatten)]
            body: Value,
            #[serde(skip_serializing_if = "Option::is_none")]
            next_eligible_after: Option<fleet_identity::Timestamp>,
            #[serde(skip_serializing_if = "fleet_registry::RetirementAudit::is_empty")]
            audit_context: &'a fleet_registry::RetirementAudit,
        }
        serde_json::to_value(Body {
            body,
            next_eligible_after: plan.next_eligible_after,
            audit_context: audit,
        })
    }
}

/// An apply report sized for an agent: every count, and the first [`MAX_LIMIT`] retired
/// and preserved identities (an apply of every candidate may retire tens of thousands);
/// `page` says how many each list holds in all. An apply that wrote carries the fleet
/// after it (`post_apply`); a refusal carries no `success` flag, since it is not a
/// success of any kind.
#[derive(Debug, serde::Serialize)]
pub(crate) struct ApplyAnswer<'a> {
    outcome: fleet_registry::ApplyOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    success: Option<bool>,
    retired: &'a [fleet_identity::WorkerIdentity],
    preserved: &'a [fleet_registry::Preserved],
    retired_count: usize,
    mutation_performed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    plan_registry_fingerprint: &'a fleet_retirement::RegistryFingerprint,
    registry_fingerprint: Option<&'a fleet_retirement::RegistryFingerprint>,
    #[serde(skip_serializing_if = "fleet_registry::RetirementAudit::is_empty")]
    audit_context: &'a fleet_registry::RetirementAudit,
    registry_moved: Option<bool>,
    page: ApplyPage,
    #[serde(skip_serializing_if = "Option::is_none")]
    post_apply: Option<&'a fleet_runtime::AfterApply>,
}

/// How much of an apply's lists an [`ApplyAnswer`] shows.
#[derive(Debug, serde::Serialize)]
struct ApplyPage {
    retired_total: usize,
    retired_returned: usize,
    preserved_total: usize,
    preserved_returned: usize,
    preserved_reason_counts: std::collections::BTreeMap<String, usize>,
}

impl<'a> ApplyAnswer<'a> {
    /// The answer to an apply that wrote (or found its rows already retired): the
    /// report and the fleet after it.
    pub(crate) fn applied(applied: &'a fleet_runtime::Applied) -> Self {
        Self { post_apply: Some(&applied.after), ..Self::refused(&applied.report) }
            .with_success(applied.report.success)
    }

    /// The detail of an apply the registry refused: the report without its flag.
    pub(crate) fn refused(report: &'a fleet_registry::ApplyReport) -> Self {
        let shown = usize::try_from(MAX_LIMIT).unwrap_or(usize::MAX);
        let mut reasons = std::collections::BTreeMap::new();
        for p in &report.preserved {
            *reasons.entry(p.reason_code.to_string()).or_default() += 1;
        }
        Self {
            outcome: report.outcome,
            success: None,
            retired: &report.retired[..report.retired.len().min(shown)],
            preserved: &report.preserved[..report.preserved.len().min(shown)],
            retired_count: report.retired_count,
            mutation_performed: report.mutation_performed,
            error: report.error.as_deref(),
            plan_registry_fingerprint: &report.plan_registry_fingerprint,
            registry_fingerprint: report.registry_fingerprint.as_ref(),
            audit_context: &report.audit_context,
            registry_moved: report.registry_moved,
            page: ApplyPage {
                retired_total: report.retired.len(),
                retired_returned: report.retired.len().min(shown),
                preserved_total: report.preserved.len(),
                preserved_returned: report.preserved.len().min(shown),
                preserved_reason_counts: reasons,
            },
            post_apply: None,
        }
    }

    fn with_success(self, success: bool) -> Self {
        Self { success: Some(success), ..self }
    }

    /// The answer as JSON.
    pub(crate) fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_refuses_every_narrowing_argument_by_name() {
        let cases = [
            (Some("i".to_owned()), None, None, None, None, "instance"),
            (None, Some("author"), None, None, None, "namespace"),
            (None, None, Some("stale_worker"), None, None, "finding_code"),
            (None, None, None, Some(5), None, "limit"),
            (None, None, None, None, Some("5"), "cursor"),
        ];
        for (instance, ns, code, limit, cursor, field) in cases {
            let err = SnapshotPage::new(Detail::Full, instance, ns, code, limit, cursor).unwrap_err();
            assert_eq!(err.0, field);
        }
        assert_eq!(SnapshotPage::new(Detail::Full, None, None, None, None, None), Ok(None));
    }

    #[test]
    fn bad_narrowing_arguments_are_named() {
        let bad = |ns, code, limit, cursor| {
            SnapshotPage::new(Detail::Summary, None, ns, code, limit, cursor).unwrap_err().0
        };
        assert_eq!(bad(Some("nobody"), None, None, None), "namespace");
        assert_eq!(bad(None, Some("nothing_at_all"), None, None), "finding_code");
        assert_eq!(bad(None, None, Some(MAX_LIMIT + 1), None), "limit");
        assert_eq!(bad(None, None, None, Some("x")), "cursor");
        let paging = |limit, cursor, candidate_limit, candidate_cursor| PlanPaging {
            limit,
            cursor,
            candidate_limit,
            candidate_cursor,
        };
        let bad = |detail, p| PlanPage::new(detail, p).unwrap_err().0;
        assert_eq!(bad(Detail::Summary, paging(Some(MAX_LIMIT + 1), None, None, None)), "limit");
        assert_eq!(bad(Detail::Summary, paging(None, None, Some(MAX_LIMIT + 1), None)), "candidate_limit");
        assert_eq!(bad(Detail::Summary, paging(None, None, None, Some("x"))), "candidate_cursor");
        assert_eq!(bad(Detail::Full, paging(None, Some("3"), None, None)), "cursor");
        assert_eq!(bad(Detail::Full, paging(None, None, Some(3), None)), "candidate_limit");
    }
}
