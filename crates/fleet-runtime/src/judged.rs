//! What a [`Fleet`](crate::Fleet)'s last snapshot rested on, and how long its verdicts
//! stand: until a row changes, a heartbeat lapses or comes within belief from the
//! future, or the probe answers or the policy change. A heartbeat of a worker that was
//! live and stays live changes no verdict (only that worker's heartbeat and expiry):
//! the judgement follows it, so a fleet that never stops heartbeating is not classified
//! again on every read.

use std::collections::BTreeMap;

use fleet_identity::Timestamp;
use fleet_registry::{HeartbeatJudge, MAX_CLOCK_SKEW, WorkerRow, heartbeat_expiry};
use fleet_snapshot::{FleetSnapshot, Policy, ProbeResults, WorkerState, WorkerView};

/// What a snapshot rested on, beyond its time: a snapshot taken later with the same
/// rows (but for heartbeats of workers that stay live), probe answers and policy, and
/// no manifest, says the same until `valid_before`.
#[derive(Debug)]
pub(crate) struct Judged {
    /// Its number (see [`Taken`](crate::Taken)).
    pub(crate) number: u64,
    /// The rows' generation it reads: the one it was taken of, or a later one in which
    /// only heartbeats of live workers moved.
    pub(crate) generation: u64,
    pub(crate) probes: ProbeResults,
    pub(crate) policy: Policy,
    pub(crate) at: Timestamp,
    /// The first instant at which a heartbeat lapses or, coming from the future, becomes
    /// believable (`None`: time alone changes nothing).
    valid_before: Option<Timestamp>,
    /// Whether each row, in the order read, was live (`None` when the snapshot's
    /// workers were not the rows in that order: no heartbeat is followed then).
    live: Option<Vec<bool>>,
    /// The rows whose heartbeat alone moved since, by place: the heartbeat and the TTL.
    moved: BTreeMap<usize, (Timestamp, u32)>,
}

impl Judged {
    /// What `snap`, taken at `at` of `rows` (generation `generation`) with `probes` and
    /// `policy`, rests on.
    pub(crate) fn new(
        number: u64,
        generation: u64,
        snap: &FleetSnapshot<'_>,
        rows: &[WorkerRow],
        probes: ProbeResults,
        policy: &Policy,
        at: Timestamp,
    ) -> Self {
        let in_row_order = snap.workers.len() == rows.len()
            && snap.workers.iter().zip(rows).all(|(view, row)| std::ptr::eq(view.row, row));
        Self {
            number,
            generation,
            probes,
            policy: policy.clone(),
            at,
            valid_before: valid_before(snap, at),
            live: in_row_order.then(|| snap.workers.iter().map(|v| v.state == WorkerState::Live).collect()),
            moved: BTreeMap::new(),
        }
    }

    /// Whether a snapshot taken at `at` with `probes`, `policy` and no manifest, of
    /// the rows of `generation`, would judge every row as this one did.
    pub(crate) fn stands(
        &self,
        generation: u64,
        probes: &ProbeResults,
        manifest_given: bool,
        policy: &Policy,
        at: Timestamp,
    ) -> bool {
        let judge = HeartbeatJudge::at(at);
        !manifest_given
            && self.generation == generation
            && self.policy == *policy
            && self.at <= at
            && self.valid_before.is_none_or(|before| at < before)
            && self.probes == *probes
            // Each moved heartbeat keeps its worker live now, by the registry's TTL rule.
            && self.moved.values().all(|&(beat, ttl)| !judge.judge(beat, ttl).1)
    }

    /// Follows a read of generation `generation` in which only the heartbeats of the
    /// rows at `places` moved (`rows` as read now, in the same order as before). It
    /// stands for the new generation when each of those rows was live and has a
    /// heartbeat and a TTL to judge (whether it is live at a given time, [`Judged::stands`]
    /// asks); else it stays with the old one, and stands no more.
    pub(crate) fn follow(&mut self, places: &[usize], rows: &[WorkerRow], generation: u64) {
        let Some(live) = &self.live else { return };
        let mut moved = Vec::with_capacity(places.len());
        for &i in places {
            let row = &rows[i];
            let Some(beat) = row.heartbeat().zip(row.heartbeat_ttl_s) else { return };
            if !live.get(i).copied().unwrap_or(false) {
                return;
            }
            moved.push((i, beat));
        }
        self.moved.extend(moved);
        self.generation = generation;
    }

    /// The workers whose heartbeat moved since the snapshot, among `rows`.
    pub(crate) fn moved<'r>(&'r self, rows: &'r [WorkerRow]) -> MovedHeartbeats<'r> {
        MovedHeartbeats { rows, judged: self }
    }
}

/// The live workers whose heartbeat moved since an earlier snapshot, and nothing else
/// about them or the fleet: each is still live, with its new heartbeat and expiry.
#[derive(Debug, Clone, Copy)]
pub struct MovedHeartbeats<'r> {
    rows: &'r [WorkerRow],
    judged: &'r Judged,
}

impl<'r> MovedHeartbeats<'r> {
    /// The view of worker `identity` now, when its heartbeat moved: the view the
    /// snapshot holds with the new heartbeat and expiry.
    pub fn view(&self, identity: &str) -> Option<WorkerView<'r>> {
        let i = self.rows.binary_search_by(|r| r.worker_identity.as_str().cmp(identity)).ok()?;
        let (beat, ttl) = *self.judged.moved.get(&i)?;
        Some(self.view_at(i, beat, ttl))
    }

    /// Each moved worker's view, in identity order.
    pub fn views(&self) -> impl Iterator<Item = WorkerView<'r>> + '_ {
        self.judged.moved.iter().map(|(&i, &(beat, ttl))| self.view_at(i, beat, ttl))
    }

    fn view_at(&self, i: usize, beat: Timestamp, ttl: u32) -> WorkerView<'r> {
        let row = &self.rows[i];
        WorkerView {
            row,
            state: WorkerState::Live,
            expires_at: Some(heartbeat_expiry(beat, ttl)),
            heartbeat: Some(beat),
            liveness: self.judged.probes.get(&row.worker_identity).copied(),
        }
    }
}

/// The first instant after `at` at which time alone changes a verdict of `snap`: a live
/// row's heartbeat lapses just past its expiry, and a stale row's heartbeat from beyond
/// the believable future becomes believable when `at` comes within [`MAX_CLOCK_SKEW`]
/// of it (a stale row is counted at its expiry too, to be safe). Live rows, nearly the
/// whole of a healthy fleet, cost one comparison each.
fn valid_before(snap: &FleetSnapshot<'_>, at: Timestamp) -> Option<Timestamp> {
    let believable = at.saturating_add(MAX_CLOCK_SKEW);
    let earliest = |a: Option<Timestamp>, b: Timestamp| Some(a.map_or(b, |a| a.min(b)));
    // A heartbeat lapses once `now` is past its expiry; one from the future is believed
    // from the instant `now` is within the skew of it.
    let (mut lapses, mut believed) = (None, None);
    for view in &snap.workers {
        match view.state {
            WorkerState::Historical => {}
            WorkerState::Live => {
                if let Some(expiry) = view.expires_at {
                    lapses = earliest(lapses, expiry);
                }
            }
            WorkerState::Stale => {
                if let Some(expiry) = view.expires_at.filter(|e| *e >= at) {
                    lapses = earliest(lapses, expiry);
                }
                if let Some(beat) = view.heartbeat.filter(|b| *b > believable) {
                    believed = earliest(believed, beat.saturating_add(-MAX_CLOCK_SKEW));
                }
            }
        }
    }
    let lapses = lapses.map(|t: Timestamp| t.saturating_add(time::Duration::milliseconds(1)));
    match (lapses, believed) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
