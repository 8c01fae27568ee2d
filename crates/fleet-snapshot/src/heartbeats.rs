//! Heartbeat continuity between two snapshots.

use fleet_identity::{Timestamp, WorkerIdentity};
use serde::Serialize;

use crate::classify::{FleetSnapshot, WorkerState};

/// What happened to each live worker's heartbeat between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeartbeatComparison {
    /// When the earlier snapshot was taken.
    pub earlier_at: Timestamp,
    /// When the later snapshot was taken.
    pub later_at: Timestamp,
    /// Live in both, heartbeat moved forward.
    pub advanced: Vec<WorkerIdentity>,
    /// Live in both, heartbeat unchanged.
    pub unchanged: Vec<WorkerIdentity>,
    /// Heartbeat moved backwards (a restored or rewritten row).
    pub regressed: Vec<WorkerIdentity>,
    /// Live earlier, not live later.
    pub lost: Vec<WorkerIdentity>,
    /// Live later, not live earlier.
    pub appeared: Vec<WorkerIdentity>,
    /// Every worker live in the earlier snapshot is live in the later one with a later
    /// heartbeat.
    pub continuous: bool,
}

fn live<'rows>(
    s: &FleetSnapshot<'rows>,
) -> std::collections::BTreeMap<&'rows WorkerIdentity, Option<Timestamp>> {
    s.workers
        .iter()
        .filter(|w| w.state == WorkerState::Live)
        .map(|w| (w.worker_identity(), w.row.heartbeat()))
        .collect()
}

/// Compares heartbeats of `earlier` and `later`.
pub fn compare_snapshot_heartbeats(
    earlier: &FleetSnapshot<'_>,
    later: &FleetSnapshot<'_>,
) -> HeartbeatComparison {
    let (before, after) = (live(earlier), live(later));
    let mut out = HeartbeatComparison {
        earlier_at: earlier.snapshot_at,
        later_at: later.snapshot_at,
        advanced: Vec::new(),
        unchanged: Vec::new(),
        regressed: Vec::new(),
        lost: Vec::new(),
        appeared: Vec::new(),
        continuous: false,
    };
    for (id, beat) in &before {
        match after.get(id) {
            None => out.lost.push((*id).clone()),
            Some(next) if next > beat => out.advanced.push((*id).clone()),
            Some(next) if next == beat => out.unchanged.push((*id).clone()),
            Some(_) => out.regressed.push((*id).clone()),
        }
    }
    out.appeared = after.keys().filter(|id| !before.contains_key(*id)).map(|id| (*id).clone()).collect();
    out.continuous = out.unchanged.is_empty() && out.regressed.is_empty() && out.lost.is_empty();
    out
}
