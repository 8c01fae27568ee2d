//! The per-row rules: the findings one row earns on its own, and the finding over an
//! instance's historical rows.

use super::*;

use fleet_identity::{InstanceClaim, TrustVerdict};
use fleet_model::{OwnershipState, WorkerRow};

use crate::findings::{Finding, FindingCode};

pub(super) fn row_findings(
    row: &WorkerRow,
    view: &WorkerView<'_>,
    group: &Group<'_>,
    policy: &Policy,
    expected_revision: Option<&str>,
    out: &mut Vec<Finding>,
) {
    let instance = row.client_instance_id.as_deref();
    let me = std::iter::once(&row.worker_identity);
    let base = |code, detail: String| {
        Finding::new(code, detail).instance(instance).namespace(row.namespace).workers(me.clone())
    };

    if view.state == WorkerState::Stale {
        out.push(
            base(
                FindingCode::StaleWorker,
                format!("{} is marked active but nothing vouches for it", row.worker_identity),
            )
            .evidence("last_heartbeat_at", &row.last_heartbeat_at)
            .evidence("heartbeat_ttl_s", row.heartbeat_ttl_s)
            .evidence("expires_at", view.expires_at)
            .evidence("ownership_state", row.ownership_state)
            .evidence("liveness", view.liveness),
        );
    }
    match row.ownership_state {
        Some(OwnershipState::Orphaned) => out.push(base(
            FindingCode::OrphanedWorker,
            format!("{} is active but its ownership is orphaned", row.worker_identity),
        )),
        Some(OwnershipState::Unowned) => out.push(base(
            FindingCode::UnownedWorker,
            format!("{} is active but no process owns it", row.worker_identity),
        )),
        _ => {}
    }

    let mut missing: Vec<&str> = Vec::new();
    for (field, present) in [
        ("generation_id", row.generation_id.is_some()),
        ("host_id", row.host_id.is_some()),
        ("boot_id", row.boot_id.is_some()),
        ("pid", row.pid.is_some()),
        ("process_start_time", row.process_start_time.is_some()),
    ] {
        if !present {
            missing.push(field);
        }
    }
    let claim_kind = match &group.claim {
        InstanceClaim::Missing => Some("missing"),
        InstanceClaim::Legacy(_) => Some("legacy_placeholder"),
        InstanceClaim::Malformed(_) => Some("malformed"),
        InstanceClaim::WellFormed(_) => None,
    };
    if claim_kind.is_some() || !missing.is_empty() {
        out.push(
            base(
                FindingCode::LegacyIncompleteIdentity,
                format!("{} lacks trusted instance or process evidence", row.worker_identity),
            )
            .evidence("instance_claim", claim_kind.unwrap_or("well_formed"))
            .evidence("missing_fields", &missing),
        );
    }
    if let InstanceClaim::WellFormed(id) = &group.claim {
        if group.trust == TrustVerdict::Unminted {
            out.push(
                base(
                    FindingCode::UnmintedInstanceId,
                    format!("{id} is well-formed but the launcher never minted it"),
                )
                .evidence("trust", TrustVerdict::Unminted),
            );
        }
        if row.client_type.as_ref() != Some(id.client_type()) {
            out.push(
                base(
                    FindingCode::UnknownClient,
                    format!("{} reports a client type its instance ID contradicts", row.worker_identity),
                )
                .evidence("client_type", &row.client_type)
                .evidence("instance_client_type", id.client_type()),
            );
        }
    } else if row.client_type.is_none() {
        out.push(
            base(FindingCode::UnknownClient, format!("{} reports no client type", row.worker_identity))
                .evidence("client_type", &row.client_type),
        );
    }
    if let Some(canonical) = &policy.canonical_repository
        && row.repository.as_ref() != Some(canonical)
    {
        out.push(
            base(
                FindingCode::ForeignRepository,
                format!("{} is bound to another repository", row.worker_identity),
            )
            .evidence("repository", &row.repository)
            .evidence("canonical_repository", canonical),
        );
    }
    if let Some(expected) = expected_revision
        && row.code_revision.as_deref() != Some(expected)
    {
        out.push(
            base(FindingCode::OldRevision, format!("{} runs another code revision", row.worker_identity))
                .evidence("code_revision", &row.code_revision)
                .evidence("expected_code_revision", expected),
        );
    }
}

/// The finding over one instance's released, superseded and retired rows.
pub(super) fn historical_finding(instance: Option<&str>, rows: &[&WorkerRow]) -> Finding {
    // How many rows of each status, by name: counted in a small list (one instance has
    // few rows and fewer statuses), then written into the JSON map.
    let mut counts: Vec<(&str, usize)> = Vec::with_capacity(1);
    for row in rows {
        let status = row.status.as_str();
        match counts.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += 1,
            None => counts.push((status, 1)),
        }
    }
    // In name order, also where serde_json keeps maps in insertion order.
    counts.sort_unstable();
    let mut statuses = serde_json::Map::new();
    for (status, n) in counts {
        statuses.insert(status.to_owned(), n.into());
    }
    Finding::new(FindingCode::HistoricalDead, format!("{} released, superseded or retired rows", rows.len()))
        .instance(instance)
        .workers(rows.iter().map(|r| &r.worker_identity))
        .evidence_value("statuses", statuses.into())
}
