//! A judgement kept between snapshots: what a classification rested on, and for how
//! long its verdicts stand. They stand until a row changes (but for the heartbeat of a
//! worker that was live and stays live), a heartbeat lapses or comes within belief from
//! the future, the probe answers or the policy change, or a manifest is given. While
//! they stand, a snapshot taken now says what the classification said, with only its
//! time, its consistency token and the moved heartbeats (and their expiries) changed —
//! which a [`Judgement`] answers without classifying again, in time that grows with
//! what changed rather than with the fleet.

use std::collections::{BTreeMap, BTreeSet};

use fleet_identity::Timestamp;
use fleet_model::{HeartbeatJudge, MAX_CLOCK_SKEW, WorkerRow, heartbeat_expiry};

use crate::classify::{FleetSnapshot, Policy, ProbeResults, TokenRows, WorkerState, WorkerView};

/// What a classification rested on, followed through heartbeats and time (see the
/// module's documentation). Pure: every input is given.
#[derive(Debug, Clone)]
pub struct Judgement {
    probes: ProbeResults,
    policy: Policy,
    /// When the classification was taken.
    at: Timestamp,
    /// The first instant at which a heartbeat of the classification lapses or, coming
    /// from the future, becomes believable (`None`: time alone changes nothing).
    valid_before: Option<Timestamp>,
    /// Whether each row, by its place among the rows, was live (`None` when the
    /// snapshot's workers were not the rows in that order: no heartbeat is followed).
    live: Option<Vec<bool>>,
    /// Whether every change since was followed: a change that was not ends the
    /// judgement.
    followed: bool,
    /// The rows whose heartbeat alone moved since, by place: the heartbeat, the TTL and
    /// the number of the follow that moved it last.
    moved: BTreeMap<usize, Move>,
    /// The moved rows by expiry (the earliest lapses first) and by heartbeat (the newest
    /// is the first to be from beyond the believable future): whether every moved row is
    /// still live is two looks, not a pass over them.
    expiries: BTreeSet<(Timestamp, usize)>,
    beats: BTreeSet<(Timestamp, usize)>,
    /// The moved rows by the follow that moved them last.
    by_follow: BTreeMap<u64, Vec<usize>>,
    /// How many follows there have been.
    follows: u64,
    /// The rows' share of the token, made when first asked for and kept along.
    token: Option<TokenRows>,
}

/// A moved heartbeat.
#[derive(Debug, Clone, Copy)]
struct Move {
    beat: Timestamp,
    ttl: u32,
    follow: u64,
}

impl Judgement {
    /// What `snap`, a classification of `rows` with `probes` and `policy` (and no
    /// manifest), rests on.
    pub fn of(snap: &FleetSnapshot<'_>, rows: &[WorkerRow], probes: ProbeResults, policy: &Policy) -> Self {
        let in_row_order = snap.workers.len() == rows.len()
            && snap.workers.iter().zip(rows).all(|(view, row)| std::ptr::eq(view.row, row));
        Self {
            probes,
            policy: policy.clone(),
            at: snap.snapshot_at,
            valid_before: valid_before(snap, snap.snapshot_at),
            live: in_row_order.then(|| snap.workers.iter().map(|v| v.state == WorkerState::Live).collect()),
            followed: true,
            moved: BTreeMap::new(),
            expiries: BTreeSet::new(),
            beats: BTreeSet::new(),
            by_follow: BTreeMap::new(),
            follows: 0,
            token: None,
        }
    }

    /// Follows a change of the rows in which only the heartbeats of the rows at
    /// `places` moved (`rows` as they are now, in the same order as before). When each
    /// of those rows was live and has a heartbeat and a TTL to judge, the judgement
    /// goes on (whether each is still live at a given time, [`Judgement::stands`]
    /// asks); otherwise it stands no more. Costs what the places cost, not the fleet.
    pub fn follow(&mut self, rows: &[WorkerRow], places: &[usize]) {
        let Some(live) = self.live.as_ref().filter(|_| self.followed) else { return };
        let mut beats = Vec::with_capacity(places.len());
        for &i in places {
            match rows.get(i).and_then(|row| row.heartbeat().zip(row.heartbeat_ttl_s)) {
                Some(beat) if live.get(i).copied().unwrap_or(false) => beats.push((i, beat)),
                _ => {
                    self.followed = false;
                    return;
                }
            }
        }
        self.follows += 1;
        for (i, (beat, ttl)) in beats {
            let moved = Move { beat, ttl, follow: self.follows };
            if let Some(old) = self.moved.insert(i, moved) {
                self.expiries.remove(&(heartbeat_expiry(old.beat, old.ttl), i));
                self.beats.remove(&(old.beat, i));
                if let Some(at) = self.by_follow.get_mut(&old.follow) {
                    at.retain(|p| *p != i);
                    if at.is_empty() {
                        self.by_follow.remove(&old.follow);
                    }
                }
            }
            self.expiries.insert((heartbeat_expiry(beat, ttl), i));
            self.beats.insert((beat, i));
            self.by_follow.entry(self.follows).or_default().push(i);
        }
        if let Some(token) = &mut self.token {
            token.update(rows, places);
        }
    }

    /// Whether a snapshot taken at `at` with `probes`, `policy` and (when
    /// `manifest_given`) a manifest, of the rows as last followed, would judge every
    /// row as the classification did.
    pub fn stands(
        &self,
        probes: &ProbeResults,
        manifest_given: bool,
        policy: &Policy,
        at: Timestamp,
    ) -> bool {
        let judge = HeartbeatJudge::at(at);
        // Of the moved heartbeats, the first to lapse and the newest (the first to be
        // from beyond the believable future) decide whether every one keeps its
        // worker live now, by the registry's TTL rule.
        let lapsed = |entry: Option<&(Timestamp, usize)>| {
            entry.is_some_and(|(_, i)| self.moved.get(i).is_some_and(|m| judge.judge(m.beat, m.ttl).1))
        };
        self.followed
            && !manifest_given
            && self.policy == *policy
            && self.at <= at
            && self.valid_before.is_none_or(|before| at < before)
            && self.probes == *probes
            && !lapsed(self.expiries.first())
            && !lapsed(self.beats.last())
    }

    /// The consistency token a snapshot of `rows` (the rows as last followed) taken at
    /// `at` carries: the same as a classification's, from the rows' share kept (made on
    /// the first call, then followed).
    pub fn token_at(&mut self, rows: &[WorkerRow], at: Timestamp) -> String {
        self.token.get_or_insert_with(|| TokenRows::of(rows)).token_at(at)
    }

    /// The workers whose heartbeat moved since the classification, among `rows` (the
    /// rows as last followed).
    pub fn moved<'r>(&'r self, rows: &'r [WorkerRow]) -> MovedHeartbeats<'r> {
        MovedHeartbeats { rows, judgement: self, after: 0 }
    }
}

/// Live workers whose heartbeat moved, and nothing else about them or the fleet: each is
/// still live, with its new heartbeat and expiry.
#[derive(Debug, Clone, Copy)]
pub struct MovedHeartbeats<'r> {
    rows: &'r [WorkerRow],
    judgement: &'r Judgement,
    /// Only those moved by a follow after this one.
    after: u64,
}

impl<'r> MovedHeartbeats<'r> {
    /// How many changes the judgement has followed: a later [`MovedHeartbeats::since`]
    /// of this number tells only of heartbeats moved after now.
    pub fn follows(&self) -> u64 {
        self.judgement.follows
    }

    /// Only the workers whose heartbeat moved after follow number `after` (see
    /// [`MovedHeartbeats::follows`]): what a caller that kept the earlier ones needs.
    #[must_use]
    pub fn since(self, after: u64) -> Self {
        Self { after, ..self }
    }

    /// The view of worker `identity` now, when its heartbeat moved: the view the
    /// classification holds with the new heartbeat and expiry.
    pub fn view(&self, identity: &str) -> Option<WorkerView<'r>> {
        let i = self.rows.binary_search_by(|r| r.worker_identity.as_str().cmp(identity)).ok()?;
        let moved = self.judgement.moved.get(&i).filter(|m| m.follow > self.after)?;
        Some(self.view_at(i, *moved))
    }

    /// Each moved worker's view: in identity order when all moves since the
    /// classification are asked for, else in the order they moved.
    pub fn views(&self) -> Box<dyn Iterator<Item = WorkerView<'r>> + '_> {
        let judgement = self.judgement;
        if self.after == 0 {
            return Box::new(judgement.moved.iter().map(|(&i, &m)| self.view_at(i, m)));
        }
        Box::new(
            judgement
                .by_follow
                .range(self.after + 1..)
                .flat_map(|(_, places)| places)
                .filter_map(|i| Some(self.view_at(*i, *judgement.moved.get(i)?))),
        )
    }

    fn view_at(&self, i: usize, moved: Move) -> WorkerView<'r> {
        let row = &self.rows[i];
        WorkerView {
            row,
            state: WorkerState::Live,
            expires_at: Some(heartbeat_expiry(moved.beat, moved.ttl)),
            heartbeat: Some(moved.beat),
            liveness: self.judgement.probes.get(&row.worker_identity).copied(),
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
