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

/// The live workers of one snapshot with their heartbeats: all a comparison needs, from a
/// snapshot in memory ([`LiveHeartbeats::of`]) or from its JSON
/// ([`LiveHeartbeats::from_json`]), as `fleetctl snapshot --json` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveHeartbeats {
    at: Timestamp,
    beats: std::collections::BTreeMap<WorkerIdentity, Option<Timestamp>>,
}

impl LiveHeartbeats {
    /// The live workers of `snapshot`.
    pub fn of(snapshot: &FleetSnapshot<'_>) -> Self {
        let beats = snapshot
            .workers
            .iter()
            .filter(|w| w.state == WorkerState::Live)
            .map(|w| (w.worker_identity().clone(), w.row.heartbeat()))
            .collect();
        Self { at: snapshot.snapshot_at, beats }
    }

    /// The live workers of a snapshot's whole JSON (`snapshot_at`, and `workers` with
    /// their `state` and `last_heartbeat_at`); the error names what is missing or wrong.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let at = value["snapshot_at"]
            .as_str()
            .and_then(|t| Timestamp::parse(t).ok())
            .ok_or("snapshot_at is missing or not a timestamp")?;
        let workers = value["workers"].as_array().ok_or("workers is missing: a whole snapshot is needed")?;
        let mut beats = std::collections::BTreeMap::new();
        for (i, worker) in workers.iter().enumerate() {
            if worker["state"] != "live" {
                continue;
            }
            let id = worker["worker_identity"]
                .as_str()
                .and_then(|id| WorkerIdentity::new(id).ok())
                .ok_or_else(|| format!("workers[{i}].worker_identity is missing or malformed"))?;
            let beat = match &worker["last_heartbeat_at"] {
                serde_json::Value::Null => None,
                serde_json::Value::String(t) => {
                    Some(Timestamp::parse(t).map_err(|e| format!("workers[{i}].last_heartbeat_at: {e}"))?)
                }
                _ => return Err(format!("workers[{i}].last_heartbeat_at is not a timestamp")),
            };
            beats.insert(id, beat);
        }
        Ok(Self { at, beats })
    }

    /// When the snapshot was taken.
    pub fn at(&self) -> Timestamp {
        self.at
    }
}

/// Compares heartbeats of `earlier` and `later`.
pub fn compare_snapshot_heartbeats(
    earlier: &FleetSnapshot<'_>,
    later: &FleetSnapshot<'_>,
) -> HeartbeatComparison {
    compare_heartbeats(&LiveHeartbeats::of(earlier), &LiveHeartbeats::of(later))
}

/// Compares the heartbeats of two snapshots however they were kept.
pub fn compare_heartbeats(earlier: &LiveHeartbeats, later: &LiveHeartbeats) -> HeartbeatComparison {
    let (before, after) = (&earlier.beats, &later.beats);
    let mut out = HeartbeatComparison {
        earlier_at: earlier.at,
        later_at: later.at,
        advanced: Vec::new(),
        unchanged: Vec::new(),
        regressed: Vec::new(),
        lost: Vec::new(),
        appeared: Vec::new(),
        continuous: false,
    };
    for (id, beat) in before {
        match after.get(id) {
            None => out.lost.push(id.clone()),
            Some(next) if next > beat => out.advanced.push(id.clone()),
            Some(next) if next == beat => out.unchanged.push(id.clone()),
            Some(_) => out.regressed.push(id.clone()),
        }
    }
    out.appeared = after.keys().filter(|id| !before.contains_key(*id)).cloned().collect();
    out.continuous = out.unchanged.is_empty() && out.regressed.is_empty() && out.lost.is_empty();
    out
}
