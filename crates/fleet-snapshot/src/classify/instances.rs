//! The instance rules: the active rows that claim one instance ID, gathered into a
//! group as the pass reads them, the findings over each group, and the instance views.

use super::*;
use std::collections::{BTreeMap, BTreeSet};

use fleet_identity::{InstanceClaim, Namespace, TrustVerdict};
use fleet_model::WorkerRow;
use rustc_hash::FxHashMap;

use crate::findings::{Finding, FindingCode};
use crate::keys::{Arena, Span};
use crate::manifest::Manifest;

/// The active rows that claim one instance ID, with what the ID claims, read and judged
/// against the ledger once for all of them, and what its rows agree on, gathered as
/// each row is read.
pub(super) struct Group<'rows> {
    pub(super) key: Option<&'rows str>,
    /// The key's number in the snapshot's [`KeyTable`].
    pub(super) instance: usize,
    pub(super) claim: InstanceClaim,
    pub(super) trust: TrustVerdict,
    /// Each member with its state and namespace (kept here, so that building the
    /// instance's view later need not read the row again).
    pub(super) members: Vec<(&'rows WorkerRow, WorkerState, Namespace)>,
    /// The first client type a member reports.
    pub(super) client_type: Option<&'rows str>,
    /// The launch fields (see [`launch_fields`]) every live member must match: the first
    /// live value of each, or for the host the ledger's, when it records one; copied
    /// into the snapshot's arena of launch values (see [`crate::keys`]).
    pub(super) launch: [Option<Span>; 5],
    /// Some live member's launch field differs from `launch`.
    pub(super) launch_disagrees: bool,
    /// The namespaces with a live member, as bits.
    pub(super) live_namespaces: u8,
    /// Some namespace has two live members.
    pub(super) duplicate_namespace: bool,
}

impl<'rows> Group<'rows> {
    pub(super) fn new(
        key: Option<&'rows str>,
        instance: usize,
        ledger: &LedgerIndex<'_>,
        ledger_host: Option<&str>,
        values: &mut Arena,
    ) -> Self {
        let claim = InstanceClaim::read(key);
        let trust = claim.trust(ledger);
        let mut launch = [None; 5];
        launch[HOST] = ledger_host.map(|host| values.put(host));
        Self {
            key,
            instance,
            claim,
            trust,
            // A launch has one worker per namespace.
            members: Vec::with_capacity(Namespace::ALL.len()),
            client_type: None,
            launch,
            launch_disagrees: false,
            live_namespaces: 0,
            duplicate_namespace: false,
        }
    }

    pub(super) fn push(&mut self, row: &'rows WorkerRow, state: WorkerState, values: &mut Arena) {
        self.members.push((row, state, row.namespace));
        if self.client_type.is_none() {
            self.client_type = row.client_type.as_ref().map(|c| c.as_str());
        }
        if state != WorkerState::Live {
            return;
        }
        // Rows without a field do not vote.
        for (agreed, (_, value)) in self.launch.iter_mut().zip(launch_fields(row)) {
            match (*agreed, value) {
                (None, value) => *agreed = value.map(|v| values.put(v)),
                (Some(agreed), Some(value)) if values.get(agreed) != value => self.launch_disagrees = true,
                _ => {}
            }
        }
        let bit = 1u8 << (row.namespace as u8);
        self.duplicate_namespace |= self.live_namespaces & bit != 0;
        self.live_namespaces |= bit;
    }

    pub(super) fn live(&self) -> impl Iterator<Item = &'rows WorkerRow> + '_ {
        self.members.iter().filter(|(_, state, _)| *state == WorkerState::Live).map(|(row, _, _)| *row)
    }
}

/// What the pass files under one instance ID: where its group is, when it has an
/// active row, and its historical rows.
#[derive(Default)]
pub(super) struct Filed<'rows> {
    pub(super) group: Option<usize>,
    pub(super) historical: Vec<&'rows WorkerRow>,
}

/// The groups, ordered by instance ID.
pub(super) struct Groups<'rows>(pub(super) Vec<Group<'rows>>);

impl<'rows> Groups<'rows> {
    pub(super) fn get(&self, key: Option<&str>) -> Option<&Group<'rows>> {
        let at = self.0.binary_search_by(|g| g.key.cmp(&key)).ok()?;
        Some(&self.0[at])
    }
}

pub(super) fn instance_findings(group: &Group<'_>, ledger: &LedgerIndex<'_>, out: &mut Vec<Finding>) {
    // Most launches have one live worker per namespace and agree on who launched them:
    // the pass that gathered the group settled that without building anything here.
    if !group.duplicate_namespace && !group.launch_disagrees {
        return;
    }
    let instance = group.key;
    let live: Vec<&WorkerRow> = group.live().collect();
    let mut by_namespace: BTreeMap<Namespace, Vec<&WorkerRow>> = BTreeMap::new();
    for row in &live {
        by_namespace.entry(row.namespace).or_default().push(row);
    }
    for (ns, rows) in by_namespace.iter().filter(|(_, rows)| rows.len() > 1) {
        out.push(
            Finding::new(
                FindingCode::DuplicateNamespaceWorker,
                format!("{} live {ns} workers claim one instance", rows.len()),
            )
            .instance(instance)
            .namespace(*ns)
            .workers(rows.iter().map(|r| &r.worker_identity))
            .evidence("pids", rows.iter().map(|r| r.pid).collect::<Vec<_>>()),
        );
    }

    // Workers of one launch share who launched them; disagreement is two launches on one
    // ID. A field conflicts when two live rows (or a row and the ledger's host) hold
    // different values; rows without the field do not vote.
    let Some(id) = instance else { return };
    if !group.launch_disagrees {
        return;
    }
    let mut conflicts: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for row in &live {
        for (field, value) in launch_fields(row) {
            if let Some(value) = value {
                conflicts.entry(field).or_default().insert(value);
            }
        }
    }
    if let Some(host) = ledger.host(id)
        && live.iter().any(|r| r.host_id.as_ref().is_some_and(|h| h != host))
    {
        conflicts.entry("host_id").or_default().insert(host.as_str());
    }
    conflicts.retain(|_, values| values.len() > 1);
    if !conflicts.is_empty() {
        out.push(
            Finding::new(
                FindingCode::ClientInstanceCollision,
                format!(
                    "live workers of {id} disagree on {}",
                    conflicts.keys().copied().collect::<Vec<_>>().join(", ")
                ),
            )
            .instance(Some(id))
            .workers(live.iter().map(|r| &r.worker_identity))
            .evidence("conflicting", conflicts),
        );
    }
}

/// The place of the host among [`launch_fields`].
pub(super) const HOST: usize = 3;

/// The fields every worker of one launch shares, by name.
pub(super) fn launch_fields(row: &WorkerRow) -> [(&'static str, Option<&str>); 5] {
    [
        ("client_type", row.client_type.as_ref().map(|v| v.as_str())),
        ("session_id", row.session_id.as_ref().map(|v| v.as_str())),
        ("fleet_run_id", row.fleet_run_id.as_ref().map(|v| v.as_str())),
        ("host_id", row.host_id.as_ref().map(|v| v.as_str())),
        ("boot_id", row.boot_id.as_ref().map(|v| v.as_str())),
    ]
}

pub(super) fn instance_views<'rows>(
    groups: &Groups<'rows>,
    manifest: Option<&Manifest>,
    findings: &[Finding],
) -> Vec<InstanceView<'rows>> {
    let mut blockers: FxHashMap<Option<&str>, BTreeSet<FindingCode>> = FxHashMap::default();
    for f in findings.iter().filter(|f| f.active_blocker) {
        blockers.entry(f.client_instance_id.as_deref()).or_default().insert(f.code);
    }
    // The first manifest entry for each ID, as a linear search would find it.
    let mut listed: FxHashMap<&str, &crate::manifest::ManifestInstance> = FxHashMap::default();
    for entry in manifest.map(|m| m.instances.as_slice()).unwrap_or_default() {
        listed.entry(entry.client_instance_id.as_str()).or_insert(entry);
    }
    groups
        .0
        .iter()
        .map(|group| {
            let entry = group.key.and_then(|k| listed.get(k));
            let expected: &[Namespace] = entry.map_or(&Namespace::ALL, |i| &i.namespaces);
            let of = |wanted: WorkerState| {
                group
                    .members
                    .iter()
                    .filter(move |(_, state, _)| *state == wanted)
                    .map(|(row, _, ns)| (*ns, &row.worker_identity))
            };
            let namespaces = NamespaceWorkers::new(of(WorkerState::Live));
            let stale_workers = of(WorkerState::Stale).map(|(_, id)| id).collect();
            InstanceView {
                client_instance_id: group.key,
                client_type: group.client_type,
                trust: group.trust,
                manifested: manifest.map(|_| entry.is_some()),
                missing_namespaces: expected
                    .iter()
                    .copied()
                    .filter(|ns| namespaces.get(*ns).is_empty())
                    .collect(),
                namespaces,
                stale_workers,
                blockers: blockers.get(&group.key).map(|b| b.iter().copied().collect()).unwrap_or_default(),
            }
        })
        .collect()
}
