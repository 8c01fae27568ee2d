//! Classification: rows, ledger, manifest, probe results and `now` in; the snapshot out.
//!
//! One pass over the ordered rows (`take`) judges each row (`judge`) and gathers what
//! every later step needs; the steps live beside it, one concern each: the per-row rules
//! (`rows`), the instance rules and views (`instances`), the reuse engine (`reuse`), the
//! manifest rules (`manifests`), the consistency token (`token`), the ledger index
//! (`ledger`), and the views the snapshot is made of (`views`).

mod instances;
mod ledger;
mod manifests;
mod reuse;
mod rows;
mod token;
mod views;

use instances::*;
use ledger::*;
use manifests::*;
use reuse::*;
use rows::*;
pub use token::TokenRows;
use token::*;
use views::NamespaceWorkers;
pub use views::{Counts, FleetSnapshot, InstanceView, WithWorkers, WorkerState, WorkerView};

use std::collections::BTreeMap;

use fleet_identity::{Namespace, Repository, Timestamp, WorkerIdentity};
use fleet_model::{HeartbeatJudge, ProcessVerdict};
use fleet_model::{InstanceRecord, OwnershipState, WorkerRow, WorkerStatus};

use crate::keys::{Arena, KeyTable};
use crate::manifest::Manifest;

/// Liveness probe results, by worker. Rows without an entry were not probed (another
/// host, or no probe available): the heartbeat alone speaks for them.
pub type ProbeResults = BTreeMap<WorkerIdentity, ProcessVerdict>;

/// What the operator expects of every live worker, beyond the manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// The repository every worker should be bound to; others are `foreign_repository`.
    pub canonical_repository: Option<Repository>,
    /// The code revision every worker should run (the manifest's, when it names one,
    /// wins); others are `old_revision`.
    pub expected_code_revision: Option<String>,
}

/// Everything the snapshot is computed from: the rows it borrows its views from
/// (`'rows`), and the rest, read only while it is taken (`'a`).
#[derive(Debug, Clone, Copy)]
pub struct SnapshotInput<'rows, 'a> {
    /// Every registry row.
    pub rows: &'rows [WorkerRow],
    /// The launcher's ledger.
    pub ledger: &'a [InstanceRecord],
    /// The approved manifest, when one is supplied.
    pub manifest: Option<&'a Manifest>,
    /// Liveness probe results.
    pub probes: &'a ProbeResults,
    /// Expectations beyond the manifest.
    pub policy: &'a Policy,
    /// The time the snapshot is taken at.
    pub now: Timestamp,
}

/// When a row's heartbeat lapses, and whether the row is live, stale or history.
fn judge(
    row: &WorkerRow,
    probe: Option<ProcessVerdict>,
    heartbeats: &HeartbeatJudge,
) -> (Option<Timestamp>, Option<Timestamp>, WorkerState) {
    // The registry's TTL rule, on the heartbeat parsed once.
    let beat = row.heartbeat();
    let judged = beat.zip(row.heartbeat_ttl_s).map(|(beat, ttl)| heartbeats.judge(beat, ttl));
    let expires_at = judged.map(|(expiry, _)| expiry);
    if row.status != WorkerStatus::Active {
        return (beat, expires_at, WorkerState::Historical);
    }
    // No parsable heartbeat or no TTL: nothing vouches for the row.
    let expired = judged.is_none_or(|(_, lapsed)| lapsed);
    let gone = matches!(probe, Some(ProcessVerdict::Gone | ProcessVerdict::PidReused));
    if expired || gone || row.ownership_state == Some(OwnershipState::Stale) {
        (beat, expires_at, WorkerState::Stale)
    } else {
        (beat, expires_at, WorkerState::Live)
    }
}

/// Takes the snapshot.
pub fn snapshot<'rows>(input: SnapshotInput<'rows, '_>) -> FleetSnapshot<'rows> {
    // Stores return rows in identity order. The pass takes them as given and checks the
    // order as it first reads each identity (checking it beforehand read every identity
    // twice); rows out of order, or sharing an identity (ordered then by content), are
    // sorted and the pass taken again.
    let ledger = LedgerIndex::new(input.ledger);
    if let Some(snapshot) = take(input, &ledger, input.rows.iter(), true) {
        return snapshot;
    }
    let ordered = ordered(input.rows);
    take(input, &ledger, ordered.iter().copied(), false)
        .unwrap_or_else(|| unreachable!("only a checked order is refused"))
}

/// The snapshot of `rows`, which are in [`ordered`] order; or with `check_order`, `None`
/// as soon as a row does not follow the one before it in strictly increasing identity
/// order.
fn take<'rows>(
    input: SnapshotInput<'rows, '_>,
    ledger: &LedgerIndex<'_>,
    rows: impl ExactSizeIterator<Item = &'rows WorkerRow>,
    check_order: bool,
) -> Option<FleetSnapshot<'rows>> {
    let expected_revision = input
        .manifest
        .and_then(|m| m.code_revision.as_deref())
        .or(input.policy.expected_code_revision.as_deref());

    // One pass over the rows while each is in cache: its view, its state, its own
    // findings, its instance's group, its reuse keys and its share of the token. Later
    // steps read only what this pass gathered, and the rows of the few findings.
    // Rows are ordered by identity, as the probe results are: one merged walk finds each
    // row's verdict without a tree lookup per row.
    let mut probes = input.probes.iter().peekable();
    let mut views = Vec::with_capacity(rows.len());
    let mut findings = Vec::new();
    // Sized for launches of five: growing these tables row by row copied them whole
    // each time they doubled.
    let launches = rows.len() / Namespace::ALL.len() + 1;
    // About the length of a minted instance ID, and of the five launch values.
    let mut instances = KeyTable::with_capacity(launches, 48);
    let mut values = Arena::with_capacity(launches * 128);
    let mut filed: Vec<Filed<'rows>> = Vec::with_capacity(launches);
    // Identities begin with the namespace, and minted ones then with a time: past the
    // first namespace's rows, a row's instance is most often the one numbered after the
    // instance of the namespace's previous row. The guess is checked against the key.
    let mut next_instance = [0usize; Namespace::ALL.len()];
    let mut groups: Vec<Group<'rows>> = Vec::with_capacity(launches);
    let mut reuse = ReuseKeys::with_capacity(rows.len());
    let heartbeats = HeartbeatJudge::at(input.now);
    let mut token = Token::new(input.now);
    let mut previous: Option<&WorkerIdentity> = None;
    for row in rows {
        if check_order {
            if previous.is_some_and(|p| *p >= row.worker_identity) {
                return None;
            }
            previous = Some(&row.worker_identity);
        }
        while probes.next_if(|(id, _)| **id < row.worker_identity).is_some() {}
        let liveness = probes.peek().filter(|(id, _)| **id == row.worker_identity).map(|(_, v)| **v);
        let (heartbeat, expires_at, state) = judge(row, liveness, &heartbeats);
        let view = WorkerView { row, state, expires_at, heartbeat, liveness };
        token.row(row);
        let key = view.client_instance_id();
        let guess = &mut next_instance[row.namespace as usize];
        let (instance, new) = instances.number_guessing(key, *guess);
        *guess = instance + 1;
        if new {
            filed.push(Filed::default());
        }
        let filed = &mut filed[instance];
        if view.state == WorkerState::Historical {
            filed.historical.push(row);
        } else {
            let at = *filed.group.get_or_insert_with(|| {
                let ledger_host = key.and_then(|k| ledger.host(k)).map(|h| h.as_str());
                groups.push(Group::new(key, instance, ledger, ledger_host, &mut values));
                groups.len() - 1
            });
            let group = &mut groups[at];
            group.push(row, view.state, &mut values);
            row_findings(row, &view, group, input.policy, expected_revision, &mut findings);
            reuse.push(row, instance);
        }
        views.push(view);
    }

    // Instances in ID order: their historical findings, and their groups (found in about
    // that order when instance IDs and worker identities both begin with a time).
    let mut rank = vec![0; filed.len()];
    for (place, at) in instances.in_key_order().into_iter().enumerate() {
        rank[at] = place;
        if !filed[at].historical.is_empty() {
            findings.push(historical_finding(instances.key(at), &filed[at].historical));
        }
    }
    drop(filed);
    groups.sort_unstable_by_key(|g| rank[g.instance]);
    let groups = Groups(groups);
    for group in &groups.0 {
        instance_findings(group, ledger, &mut findings);
    }
    reuse.report(&mut findings);
    if let Some(manifest) = input.manifest {
        manifest_findings(manifest, &groups, &mut findings);
    }
    findings.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));

    let instances = instance_views(&groups, input.manifest, &findings);
    let mut counts = Counts {
        total_rows: views.len(),
        instance_count: instances.len(),
        finding_count: findings.len(),
        active_blocker_count: findings.iter().filter(|f| f.active_blocker).count(),
        ..Counts::default()
    };
    for view in &views {
        match view.state {
            WorkerState::Live => counts.live_worker_count += 1,
            WorkerState::Stale => counts.stale_worker_count += 1,
            WorkerState::Historical => counts.historical_row_count += 1,
        }
    }
    counts.active_worker_count = counts.live_worker_count + counts.stale_worker_count;
    let token = token.finish();
    Some(FleetSnapshot {
        snapshot_at: input.now,
        consistency_token: token.clone(),
        registry_revision: token,
        live_fleet_safe: counts.active_blocker_count == 0,
        manifest_supplied: input.manifest.is_some(),
        counts,
        instances,
        workers: views,
        findings,
    })
}

/// The rows ordered by identity, then by content for rows that share an identity, so
/// that every later step is independent of input order.
fn ordered(rows: &[WorkerRow]) -> Vec<&WorkerRow> {
    let mut out = fleet_model::rows_by_identity(rows);
    // Only rows that share an identity (a reuse finding) pay for this.
    for run in out.chunk_by_mut(|a, b| a.worker_identity == b.worker_identity).filter(|run| run.len() > 1) {
        run.sort_by_cached_key(|row| serde_json::to_string(row).unwrap_or_default());
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use fleet_identity::Namespace;

    use std::collections::{HashMap, HashSet};

    use super::{sharing_candidates, sort_by_hash};

    /// `NamespaceWorkers` numbers namespaces by their place in `Namespace::ALL` and
    /// writes them in that order, which must be the order a map of them would have.
    #[test]
    fn namespaces_are_numbered_and_listed_in_their_own_order() {
        for (at, ns) in Namespace::ALL.into_iter().enumerate() {
            assert_eq!(ns as usize, at, "{ns}");
        }
        assert!(Namespace::ALL.is_sorted());
    }

    proptest! {
        /// Large lists take the counting passes, small ones the comparison sort; both
        /// leave the same entries, equal hashes together and in hash order.
        #[test]
        fn sorting_by_hash_groups_equal_hashes(
            hashes in prop::collection::vec(0u32..64, 0..9000),
            spread in any::<u32>(),
        ) {
            let entries: Vec<u64> = hashes
                .iter()
                .zip(0u64..)
                .map(|(h, at)| (u64::from(h.wrapping_mul(spread | 1)) << 32) | at)
                .collect();
            let mut sorted = entries.clone();
            sort_by_hash(&mut sorted);
            prop_assert!(sorted.windows(2).all(|w| w[0] >> 32 <= w[1] >> 32));
            let (mut a, mut b) = (entries, sorted);
            a.sort_unstable();
            b.sort_unstable();
            prop_assert_eq!(a, b);
        }

        /// Every entry whose hash another entry shares is a candidate, and candidates
        /// come in hash order; large lists (past the bit table's threshold) included.
        #[test]
        fn every_entry_sharing_its_hash_is_a_candidate(
            hashes in prop::collection::vec(any::<u32>(), 0..9000),
            repeats in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 0..20),
        ) {
            let mut hashes = hashes;
            // Random hashes seldom repeat: copy some over others.
            for (from, to) in repeats {
                if !hashes.is_empty() {
                    let value = hashes[from.index(hashes.len())];
                    let at = to.index(hashes.len());
                    hashes[at] = value;
                }
            }
            let entries: Vec<u64> = hashes.iter().zip(0u64..).map(|(h, at)| (u64::from(*h) << 32) | at).collect();
            let candidates = sharing_candidates(entries.clone());
            prop_assert!(candidates.windows(2).all(|w| w[0] >> 32 <= w[1] >> 32));
            let mut count: HashMap<u32, usize> = HashMap::new();
            for h in &hashes {
                *count.entry(*h).or_default() += 1;
            }
            let candidates: HashSet<u64> = candidates.into_iter().collect();
            for (entry, h) in entries.iter().zip(&hashes) {
                prop_assert!(count[h] == 1 || candidates.contains(entry), "{entry:#x} shares its hash");
            }
        }
    }
}
