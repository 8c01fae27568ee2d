//! A kept [`Judgement`] answers what a fresh classification would. Random fleets go
//! through random histories — heartbeats (on time, late, from the future), the clock
//! moving, processes crashing or coming back, rows inserted, deleted or released, the
//! ledger changing — as a long-lived reader follows them: a heartbeat alone is followed,
//! any other change of the rows ends the judgement (the runtime reads it whole then).
//! After every step, while the judgement stands, the snapshot it implies (the one it was
//! made of, with the new time and token and the moved workers' views) must be the fresh
//! classification's JSON, token included; when it does not stand, it is made again.

use fleet_identity::{ClientInstanceId, ClientType, Namespace, Timestamp, WorkerIdentity};
use fleet_model::{InstanceRecord, ProcessVerdict, WorkerRow, WorkerStatus};
use fleet_snapshot::{Judgement, Policy, ProbeResults, SnapshotInput, snapshot};
use proptest::prelude::*;
use serde_json::Value;

const INSTANCES: [&str; 3] =
    ["inst-codex-20260730T120000Z-aaaaaaaaaaaa", "inst-codex-20260730T120100Z-bbbbbbbbbbbb", "legacy-pid-1"];

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix_millis((1_785_412_800 + secs) * 1000).unwrap()
}

/// A complete worker of instance `inst` in namespace `ns`; `n` makes it unique.
fn worker(inst: usize, ns: usize, n: u32, ttl: u32, beat: i64) -> WorkerRow {
    serde_json::from_value(serde_json::json!({
        "worker_identity": format!("wkr-{n:05}"),
        "client_type": "codex",
        "client_instance_id": INSTANCES[inst],
        "instance_provenance": if inst < 2 { "trusted_launcher" } else { "legacy_placeholder" },
        "namespace": Namespace::ALL[ns],
        "profile": Namespace::ALL[ns],
        "session_id": format!("sess-{inst}"),
        "generation_id": format!("gen-{n:05}"),
        "host_id": "0123456789abcdef0123456789abcdef",
        "boot_id": "11111111-2222-3333-4444-555555555555",
        "pid": 1000 + n,
        "process_start_time": 50_000 + u64::from(n),
        "repository": "/srv/repo",
        "status": "active",
        "ownership_state": "owned",
        "registered_at": at(0).to_string(),
        "last_heartbeat_at": at(beat).to_string(),
        "heartbeat_ttl_s": ttl,
        "fencing_epoch": 1,
        "token_fingerprint": format!("b3:{n:032}"),
        "code_revision": "0.1.0",
        "schema_revision": "1",
    }))
    .unwrap()
}

fn record(inst: usize) -> InstanceRecord {
    InstanceRecord {
        client_instance_id: ClientInstanceId::parse(INSTANCES[inst]).unwrap(),
        client_type: ClientType::new("codex").unwrap(),
        fleet_run_id: None,
        minted_at: at(0),
        host_id: None,
    }
}

/// One step of a history.
#[derive(Debug, Clone)]
enum Step {
    /// A row's heartbeat written `secs` from now (negative: late; past 300: from
    /// beyond the believable future).
    Beat(prop::sample::Index, i64),
    /// The clock moves on.
    Clock(i64),
    /// The probe now answers this for a row's process (`None`: no answer).
    Probe(prop::sample::Index, Option<ProcessVerdict>),
    /// A new row (instance, namespace, TTL, heartbeat from now).
    Insert(usize, usize, u32, i64),
    /// A row removed.
    Delete(prop::sample::Index),
    /// A row released.
    Release(prop::sample::Index),
    /// An instance's ledger entry added or removed.
    Ledger(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let verdict = prop_oneof![
        Just(None),
        Just(Some(ProcessVerdict::Alive)),
        Just(Some(ProcessVerdict::Gone)),
        Just(Some(ProcessVerdict::PidReused)),
        Just(Some(ProcessVerdict::Unknown)),
    ];
    prop_oneof![
        8 => (any::<prop::sample::Index>(), prop_oneof![8 => -5i64..2, 1 => -60i64..-20, 1 => 290i64..400])
            .prop_map(|(i, s)| Step::Beat(i, s)),
        4 => prop_oneof![0i64..3, 3i64..40, 280i64..320].prop_map(Step::Clock),
        1 => (any::<prop::sample::Index>(), verdict).prop_map(|(i, v)| Step::Probe(i, v)),
        1 => (0usize..3, 0usize..5, prop_oneof![Just(5u32), Just(30)], -10i64..2)
            .prop_map(|(i, n, t, b)| Step::Insert(i, n, t, b)),
        1 => any::<prop::sample::Index>().prop_map(Step::Delete),
        1 => any::<prop::sample::Index>().prop_map(Step::Release),
        1 => (0usize..2).prop_map(Step::Ledger),
    ]
}

/// The fleet as a reader sees it.
struct World {
    rows: Vec<WorkerRow>,
    ledger: Vec<InstanceRecord>,
    probes: ProbeResults,
    now: i64,
    next: u32,
}

impl World {
    fn snapshot_json(&self) -> Value {
        self.judge().1
    }

    fn judge(&self) -> (Judgement, Value) {
        let snap = snapshot(SnapshotInput {
            rows: &self.rows,
            ledger: &self.ledger,
            manifest: None,
            probes: &self.probes,
            policy: &Policy::default(),
            now: at(self.now),
        });
        let json = serde_json::to_value(&snap).unwrap();
        (Judgement::of(&snap, &self.rows, self.probes.clone(), &Policy::default()), json)
    }

    /// Applies `step`; the places whose heartbeat alone moved, or `None` when anything
    /// else about the rows or the ledger changed.
    fn apply(&mut self, step: &Step) -> Option<Vec<usize>> {
        let pick =
            |i: &prop::sample::Index, rows: &[WorkerRow]| (!rows.is_empty()).then(|| i.index(rows.len()));
        match step {
            Step::Beat(i, secs) => {
                let Some(i) = pick(i, &self.rows) else { return Some(Vec::new()) };
                self.rows[i].last_heartbeat_at = Some(at(self.now + secs).to_string());
                Some(vec![i])
            }
            Step::Clock(secs) => {
                self.now += secs;
                Some(Vec::new())
            }
            Step::Probe(i, verdict) => {
                if let Some(i) = pick(i, &self.rows) {
                    let id = self.rows[i].worker_identity.clone();
                    match verdict {
                        Some(v) => self.probes.insert(id, *v),
                        None => self.probes.remove(&id),
                    };
                }
                Some(Vec::new())
            }
            Step::Insert(inst, ns, ttl, beat) => {
                self.next += 1;
                // Identities rise, so the rows stay in identity order.
                self.rows.push(worker(*inst, *ns, self.next, *ttl, self.now + beat));
                None
            }
            Step::Delete(i) => {
                let i = pick(i, &self.rows)?;
                self.rows.remove(i);
                None
            }
            Step::Release(i) => {
                let i = pick(i, &self.rows)?;
                self.rows[i].status = WorkerStatus::Released;
                None
            }
            Step::Ledger(inst) => {
                let id = ClientInstanceId::parse(INSTANCES[*inst]).unwrap();
                match self.ledger.iter().position(|r| r.client_instance_id == id) {
                    Some(p) => {
                        self.ledger.remove(p);
                    }
                    None => self.ledger.push(record(*inst)),
                }
                None
            }
        }
    }
}

/// The snapshot a standing judgement implies: the one it was made of, at `now`, with
/// `token`, and each moved worker's view in place of the one it had.
fn implied(made: &Value, judgement: &Judgement, rows: &[WorkerRow], now: Timestamp, token: &str) -> Value {
    let mut json = made.clone();
    json["snapshot_at"] = serde_json::to_value(now).unwrap();
    json["consistency_token"] = Value::from(token);
    json["registry_revision"] = Value::from(token);
    let moved = judgement.moved(rows);
    for worker in json["workers"].as_array_mut().unwrap() {
        if let Some(view) = worker["worker_identity"].as_str().and_then(|id| moved.view(id)) {
            *worker = serde_json::to_value(view).unwrap();
        }
    }
    json
}

fn fleet(specs: &[(usize, usize, bool)]) -> World {
    let rows = specs
        .iter()
        .zip(1u32..)
        .map(|(&(inst, ns, short), n)| worker(inst, ns, n, if short { 5 } else { 30 }, 100))
        .collect::<Vec<_>>();
    World {
        next: u32::try_from(rows.len()).unwrap(),
        rows,
        ledger: vec![record(0), record(1)],
        probes: ProbeResults::new(),
        now: 101,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// After every step of a random history, a judgement that stands gives the fresh
    /// classification's snapshot, JSON and token alike.
    #[test]
    fn a_kept_judgement_answers_what_a_fresh_classification_would(
        specs in prop::collection::vec((0usize..3, 0usize..5, any::<bool>()), 0..140),
        steps in prop::collection::vec(step(), 1..60),
    ) {
        let mut world = fleet(&specs);
        let (mut judgement, mut made) = world.judge();
        for step in &steps {
            let followed = match world.apply(step) {
                Some(places) => {
                    judgement.follow(&world.rows, &places);
                    true
                }
                None => false,
            };
            let now = at(world.now);
            if followed && judgement.stands(&world.probes, false, &Policy::default(), now) {
                let token = judgement.token_at(&world.rows, now);
                let fresh = world.snapshot_json();
                prop_assert_eq!(&token, fresh["consistency_token"].as_str().unwrap());
                prop_assert_eq!(implied(&made, &judgement, &world.rows, now, &token), fresh, "after {:?}", step);
            } else {
                (judgement, made) = world.judge();
            }
        }
    }
}

/// The judgement stands where it should, not only where it must: a heartbeat of a live
/// worker, and time that lapses nothing, keep it; a manifest, a probe that changes, the
/// earliest lapse of the classification (even of a worker that heartbeated since) and a
/// moved heartbeat that lapses end it.
#[test]
fn heartbeats_of_live_workers_keep_a_judgement_and_lapses_end_it() {
    let policy = Policy::default();
    let mut world = fleet(&[(0, 0, false), (0, 1, false), (0, 2, true)]);
    let (mut judgement, _) = world.judge();
    assert!(judgement.stands(&world.probes, false, &policy, at(101)));
    assert!(!judgement.stands(&world.probes, true, &policy, at(101)), "a manifest is judged anew");
    let mut probes = world.probes.clone();
    probes.insert(WorkerIdentity::new("wkr-00001").unwrap(), ProcessVerdict::Gone);
    assert!(!judgement.stands(&probes, false, &policy, at(101)), "a probe answer is judged anew");
    // The short-TTL worker (5 s from 100) lapses after 105; its heartbeat at 104 is
    // followed, but the classification's verdicts are kept no longer than its earliest
    // lapse (then the fleet is judged anew).
    world.rows[2].last_heartbeat_at = Some(at(104).to_string());
    judgement.follow(&world.rows, &[2]);
    assert!(judgement.stands(&world.probes, false, &policy, at(105)));
    assert!(!judgement.stands(&world.probes, false, &policy, at(106)));

    // Every worker lapses at 130; one's heartbeat written back to 95 lapses at 125.
    let mut world = fleet(&[(0, 0, false), (0, 1, false)]);
    let (mut judgement, _) = world.judge();
    world.rows[0].last_heartbeat_at = Some(at(95).to_string());
    judgement.follow(&world.rows, &[0]);
    assert!(judgement.stands(&world.probes, false, &policy, at(124)));
    assert!(!judgement.stands(&world.probes, false, &policy, at(126)), "the moved heartbeat lapsed");
    // A heartbeat of a worker that is not live is not followed.
    let mut world = fleet(&[(0, 0, false), (0, 1, false)]);
    world.rows[1].status = WorkerStatus::Released;
    let (mut judgement, _) = world.judge();
    world.rows[1].last_heartbeat_at = Some(at(101).to_string());
    judgement.follow(&world.rows, &[1]);
    assert!(!judgement.stands(&world.probes, false, &policy, at(101)));
}
