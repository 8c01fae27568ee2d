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
/// ([`LiveHeartbeats::from_json`]), as `fleetctl snapshot --json` prints it. Kept compact
/// (the identities side by side in one string, in identity order): a server keeps one
/// for each of its recent answers, and builds one on every snapshot call.
/// A clone shares the workers with the original; one whose heartbeats moved
/// ([`LiveHeartbeats::moved_at`]) still shares their identities, and copies only the
/// heartbeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveHeartbeats {
    at: Timestamp,
    names: std::sync::Arc<Names>,
    /// Each worker's heartbeat, in the order of `names.spans`.
    beats: std::sync::Arc<Vec<Option<Timestamp>>>,
}

#[derive(Debug, PartialEq, Eq)]
struct Names {
    /// Every live worker's identity, one after another.
    text: String,
    /// Each worker's identity (its span of `text`), in identity order.
    spans: Vec<(u32, u32)>,
}

impl LiveHeartbeats {
    fn from_sorted<'n>(at: Timestamp, live: impl Iterator<Item = (&'n str, Option<Timestamp>)>) -> Self {
        let mut text = String::new();
        let mut spans = Vec::new();
        let mut beats = Vec::new();
        for (name, beat) in live {
            let start = u32::try_from(text.len()).unwrap_or(u32::MAX);
            text.push_str(name);
            spans.push((start, u32::try_from(text.len()).unwrap_or(u32::MAX)));
            beats.push(beat);
        }
        Self { at, names: std::sync::Arc::new(Names { text, spans }), beats: std::sync::Arc::new(beats) }
    }

    /// The identity of the worker at `i`.
    fn name(&self, i: usize) -> &str {
        let Some(&(start, end)) = self.names.spans.get(i) else { return "" };
        self.names.text.get(start as usize..end as usize).unwrap_or_default()
    }

    /// How many live workers.
    fn len(&self) -> usize {
        self.names.spans.len()
    }

    /// The same live workers and heartbeats, as seen by a snapshot taken at `at` (one
    /// that judged every worker as this one did).
    #[must_use]
    pub fn seen_at(&self, at: Timestamp) -> Self {
        Self { at, ..self.clone() }
    }

    /// These live workers as seen at `at`, with the heartbeats of `moved` (workers among
    /// them) in place of those kept: what a snapshot that judged every worker as this one
    /// did, while those workers heartbeated, holds.
    #[must_use]
    pub fn moved_at<'n>(&self, at: Timestamp, moved: impl IntoIterator<Item = (&'n str, Timestamp)>) -> Self {
        let mut beats = std::sync::Arc::clone(&self.beats);
        for (name, beat) in moved {
            let found = self.names.spans.binary_search_by(|&(start, end)| {
                self.names.text.get(start as usize..end as usize).unwrap_or_default().cmp(name)
            });
            if let Ok(i) = found {
                std::sync::Arc::make_mut(&mut beats)[i] = Some(beat);
            }
        }
        Self { at, names: std::sync::Arc::clone(&self.names), beats }
    }

    /// The live workers of `snapshot` (its workers are in identity order).
    pub fn of(snapshot: &FleetSnapshot<'_>) -> Self {
        let live = snapshot
            .workers
            .iter()
            .filter(|w| w.state == WorkerState::Live)
            .map(|w| (w.worker_identity().as_str(), w.heartbeat));
        if snapshot.workers.windows(2).all(|p| p[0].worker_identity() <= p[1].worker_identity()) {
            return Self::from_sorted(snapshot.snapshot_at, live);
        }
        let mut sorted: Vec<_> = live.collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        Self::from_sorted(snapshot.snapshot_at, sorted.into_iter())
    }

    /// The live workers of a snapshot's whole JSON (`snapshot_at`, and `workers` with
    /// their `state` and `last_heartbeat_at`); the error names what is missing or wrong.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        Self::from_value(&value)
    }

    /// [`LiveHeartbeats::from_json`] of JSON already parsed (a file read as it streams in).
    pub fn from_value(value: &serde_json::Value) -> Result<Self, String> {
        let at = value["snapshot_at"]
            .as_str()
            .and_then(|t| Timestamp::parse(t).ok())
            .ok_or("snapshot_at is missing or not a timestamp")?;
        let workers = value["workers"].as_array().ok_or("workers is missing: a whole snapshot is needed")?;
        let mut live = Vec::new();
        for (i, worker) in workers.iter().enumerate() {
            if worker["state"] != "live" {
                continue;
            }
            let id = worker["worker_identity"]
                .as_str()
                .filter(|id| WorkerIdentity::new(*id).is_ok())
                .ok_or_else(|| format!("workers[{i}].worker_identity is missing or malformed"))?;
            let beat = match &worker["last_heartbeat_at"] {
                serde_json::Value::Null => None,
                serde_json::Value::String(t) => {
                    Some(Timestamp::parse(t).map_err(|e| format!("workers[{i}].last_heartbeat_at: {e}"))?)
                }
                _ => return Err(format!("workers[{i}].last_heartbeat_at is not a timestamp")),
            };
            live.push((id, beat));
        }
        live.sort_by(|a, b| a.0.cmp(b.0));
        live.dedup_by(|a, b| a.0 == b.0);
        Ok(Self::from_sorted(at, live.into_iter()))
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

/// Compares the heartbeats of two snapshots however they were kept: one walk over both
/// lists in identity order.
pub fn compare_heartbeats(earlier: &LiveHeartbeats, later: &LiveHeartbeats) -> HeartbeatComparison {
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
    let id = |name: &str| WorkerIdentity::new(name).ok();
    let (mut b, mut a) = (0, 0);
    loop {
        match (b < earlier.len(), a < later.len()) {
            (false, false) => break,
            (true, false) => {
                out.lost.extend(id(earlier.name(b)));
                b += 1;
            }
            (false, true) => {
                out.appeared.extend(id(later.name(a)));
                a += 1;
            }
            (true, true) => match earlier.name(b).cmp(later.name(a)) {
                std::cmp::Ordering::Less => {
                    out.lost.extend(id(earlier.name(b)));
                    b += 1;
                }
                std::cmp::Ordering::Greater => {
                    out.appeared.extend(id(later.name(a)));
                    a += 1;
                }
                std::cmp::Ordering::Equal => {
                    let group = match later.beats[a].cmp(&earlier.beats[b]) {
                        std::cmp::Ordering::Greater => &mut out.advanced,
                        std::cmp::Ordering::Equal => &mut out.unchanged,
                        std::cmp::Ordering::Less => &mut out.regressed,
                    };
                    group.extend(id(earlier.name(b)));
                    b += 1;
                    a += 1;
                }
            },
        }
    }
    out.continuous = out.unchanged.is_empty() && out.regressed.is_empty() && out.lost.is_empty();
    out
}
