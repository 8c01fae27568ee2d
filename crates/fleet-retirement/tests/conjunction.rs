//! The eligibility conjunction and the fingerprints, as properties.

use std::collections::{BTreeMap, BTreeSet};

use fleet_identity::{ClientInstanceId, Timestamp, WorkerIdentity};
use fleet_model::ProcessVerdict;
use fleet_model::{OwnershipState, WorkerRow, WorkerStatus};
use fleet_retirement::{
    Evidence, FINGERPRINT_FIELDS, PreserveReason, RetirementContext, Verdict, assess, plan,
    registry_fingerprint,
};
use proptest::prelude::*;

const INSTANCE: &str = "inst-codex-20260730T120000Z-aaaaaaaaaaaa";
const HOST: &str = "0123456789abcdef0123456789abcdef";

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix_millis((1_785_412_800 + secs) * 1000).unwrap()
}

/// A row that meets every requirement at `at(1000)` when probed gone.
fn eligible(n: u32) -> WorkerRow {
    serde_json::from_value(serde_json::json!({
        "worker_identity": format!("wkr-author-{n:04}"),
        "client_type": "codex",
        "client_instance_id": INSTANCE,
        "instance_provenance": "trusted_launcher",
        "namespace": "author",
        "session_id": "sess-a",
        "generation_id": format!("gen-{n}"),
        "host_id": HOST,
        "boot_id": "11111111-2222-3333-4444-555555555555",
        "pid": 4000 + n,
        "process_start_time": 70_000 + n,
        "repository": "/srv/repo",
        "status": "active",
        "ownership_state": "stale",
        "registered_at": at(0).to_string(),
        "last_heartbeat_at": at(100).to_string(),
        "heartbeat_ttl_s": 30,
        "fencing_epoch": n + 1,
        "token_fingerprint": format!("b3:{n:032}"),
    }))
    .unwrap()
}

struct World {
    rows: Vec<WorkerRow>,
    ledger: BTreeSet<ClientInstanceId>,
    owners: BTreeSet<String>,
    probes: BTreeMap<WorkerIdentity, ProcessVerdict>,
    ctx: RetirementContext,
}

impl World {
    fn new() -> Self {
        let row = eligible(1);
        let probes = [(row.worker_identity.clone(), ProcessVerdict::Gone)].into_iter().collect();
        Self {
            rows: vec![row],
            ledger: [ClientInstanceId::parse(INSTANCE).unwrap()].into_iter().collect(),
            owners: BTreeSet::new(),
            probes,
            ctx: RetirementContext {
                host_id: HOST.parse().unwrap(),
                boot_id: Some("11111111-2222-3333-4444-555555555555".parse().unwrap()),
                canonical_repository: "/srv/repo".parse().unwrap(),
                now: at(1000),
            },
        }
    }

    fn subject(&mut self) -> &mut WorkerRow {
        &mut self.rows[0]
    }

    fn probe(&mut self, v: ProcessVerdict) {
        let id = self.rows[0].worker_identity.clone();
        self.probes.insert(id, v);
    }

    /// Another active row, probed alive, built by `f` from a fresh eligible row.
    fn other(&mut self, f: impl FnOnce(&mut WorkerRow)) {
        let mut o = eligible(2);
        o.ownership_state = Some(OwnershipState::Owned);
        o.last_heartbeat_at = Some(at(995).to_string());
        o.namespace = fleet_identity::Namespace::Reviewer;
        f(&mut o);
        self.probes.insert(o.worker_identity.clone(), ProcessVerdict::Alive);
        self.rows.push(o);
    }

    fn verdict(&self) -> Verdict {
        let ev = Evidence::new(&self.rows, &self.ledger, &self.owners, &self.probes);
        assess(&self.rows[0], &ev, &self.ctx)
    }

    /// Breaks exactly the requirement whose failure is `reason`.
    fn flip(&mut self, reason: PreserveReason) {
        use PreserveReason as R;
        match reason {
            R::AlreadyTerminalRegistration => self.subject().status = WorkerStatus::Released,
            R::IncompleteRegistryIdentity => self.subject().generation_id = None,
            R::UnparsableHeartbeat => self.subject().last_heartbeat_at = Some("not a time".into()),
            R::WorkerLive => {
                self.subject().last_heartbeat_at = Some(at(990).to_string());
                self.probe(ProcessVerdict::Alive);
            }
            R::PidLivenessUnknown => self.probe(ProcessVerdict::Unknown),
            R::PidAlive => self.probe(ProcessVerdict::Alive),
            R::HeartbeatNotExpired => self.subject().last_heartbeat_at = Some(at(990).to_string()),
            R::AmbiguousOwnershipState => self.subject().ownership_state = Some(OwnershipState::Owned),
            R::RepositoryBindingAmbiguous => self.subject().repository = Some("/srv/other".parse().unwrap()),
            R::ConflictingIdentityEvidence => {
                let pid = self.rows[0].pid;
                self.other(|o| o.pid = pid);
            }
            R::ClientInstanceConflict => self.other(|o| o.namespace = fleet_identity::Namespace::Author),
            R::ProtectedActiveWorkflowOwner => {
                let id = self.rows[0].worker_identity.to_string();
                self.owners.insert(id);
            }
            R::UntrustedIdentityProvenance => self.ledger.clear(),
            R::HostBindingUnproven => self.ctx.host_id = "ffffffffffffffffffffffffffffffff".parse().unwrap(),
            R::BootIdentityUnknown => self.ctx.boot_id = None,
            R::PidReuseDetected => self.probe(ProcessVerdict::PidReused),
            // The codes may grow (`non_exhaustive`): a reason without a flip fails here,
            // since every test walks `PreserveReason::ALL`.
            other => panic!("no flip is written for {other}: add one"),
        }
    }
}

#[test]
fn the_base_row_is_eligible() {
    assert_eq!(World::new().verdict(), Verdict::EligibleStaleOrphan);
}

#[test]
fn each_single_flip_preserves_with_its_own_reason() {
    for reason in PreserveReason::ALL {
        let mut world = World::new();
        world.flip(reason);
        assert_eq!(world.verdict(), Verdict::Preserve(reason), "{reason}");
    }
}

/// Flips that do not touch the same inputs, so any subset of them can be combined.
const COMBINABLE: [PreserveReason; 12] = [
    PreserveReason::AlreadyTerminalRegistration,
    PreserveReason::IncompleteRegistryIdentity,
    PreserveReason::UnparsableHeartbeat,
    PreserveReason::PidAlive,
    PreserveReason::AmbiguousOwnershipState,
    PreserveReason::RepositoryBindingAmbiguous,
    PreserveReason::ConflictingIdentityEvidence,
    PreserveReason::ProtectedActiveWorkflowOwner,
    PreserveReason::UntrustedIdentityProvenance,
    PreserveReason::HostBindingUnproven,
    PreserveReason::BootIdentityUnknown,
    PreserveReason::ClientInstanceConflict,
];

proptest! {
    #[test]
    fn eligible_iff_every_requirement_holds(mask in 0u16..(1 << 12)) {
        let mut world = World::new();
        let flipped: Vec<PreserveReason> =
            COMBINABLE.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, r)| *r).collect();
        for r in &flipped {
            world.flip(*r);
        }
        let expected = flipped.iter().min().map_or(Verdict::EligibleStaleOrphan, |r| Verdict::Preserve(*r));
        prop_assert_eq!(world.verdict(), expected);
    }

    #[test]
    fn the_fingerprint_ignores_row_order(n in 1usize..12, seed in any::<u64>()) {
        let rows: Vec<WorkerRow> = (0..n).map(|i| eligible(u32::try_from(i).unwrap())).collect();
        let mut shuffled = rows.clone();
        let len = shuffled.len();
        for i in (1..len).rev() {
            let j = usize::try_from(seed.wrapping_mul(2862933555777941757).wrapping_add(i as u64) % (i as u64 + 1)).unwrap();
            shuffled.swap(i, j);
        }
        prop_assert_eq!(registry_fingerprint(&rows), registry_fingerprint(&shuffled));
    }

    #[test]
    fn the_fingerprint_moves_with_every_fingerprinted_field(field in 0usize..FINGERPRINT_FIELDS.len()) {
        let row = eligible(1);
        let mut value = serde_json::to_value(&row).unwrap();
        let name = FINGERPRINT_FIELDS[field];
        let changed = match name {
            "namespace" => serde_json::json!("merger"),
            "status" => serde_json::json!("released"),
            "ownership_state" => serde_json::json!("owned"),
            "pid" | "process_start_time" | "heartbeat_ttl_s" | "fencing_epoch" | "pid_namespace" => serde_json::json!(77),
            "registered_at" | "last_heartbeat_at" => serde_json::json!(at(5).to_string()),
            "host_id" | "boot_id" => serde_json::json!("abcdefabcdefabcdefabcdefabcdefab"),
            "client_type" => serde_json::json!("gemini"),
            "client_instance_id" => serde_json::json!("inst-codex-20260730T120000Z-bbbbbbbbbbbb"),
            _ => serde_json::json!("something-else"),
        };
        value[name] = changed;
        let moved: WorkerRow = serde_json::from_value(value).unwrap();
        prop_assert_ne!(registry_fingerprint(&[row]), registry_fingerprint(&[moved]), "{}", name);
    }

    #[test]
    fn the_fingerprint_ignores_every_excluded_field(which in 0usize..8, text in "[a-z0-9]{1,12}") {
        let row = eligible(1);
        let mut other = row.clone();
        match which {
            0 => other.token_fingerprint = Some(format!("b3:{text}")),
            1 => other.code_revision = Some(text.clone()),
            2 => other.config_revision = Some(text.clone()),
            3 => other.profile_revision = Some(text.clone()),
            4 => other.schema_revision = Some(text.clone()),
            5 => other.retired_at = Some(at(9)),
            6 => other.retired_by = Some(text.clone()),
            _ => other.retirement_reason = Some(text.clone()),
        }
        prop_assert_eq!(registry_fingerprint(&[row]), registry_fingerprint(&[other]));
    }
}

#[test]
fn a_ttl_of_900_0_hashes_like_900() {
    let a: WorkerRow = serde_json::from_value(serde_json::json!({"worker_identity":"w","namespace":"author","status":"active","registered_at":at(0).to_string(),"heartbeat_ttl_s":900})).unwrap();
    let b: WorkerRow = serde_json::from_value(serde_json::json!({"worker_identity":"w","namespace":"author","status":"active","registered_at":at(0).to_string(),"heartbeat_ttl_s":900.0})).unwrap();
    assert_eq!(registry_fingerprint(&[a]), registry_fingerprint(&[b]));
}

#[test]
fn the_plan_is_deterministic_and_counts_its_reasons() {
    let mut world = World::new();
    world.other(|o| o.namespace = fleet_identity::Namespace::Merger);
    let ev = Evidence::new(&world.rows, &world.ledger, &world.owners, &world.probes);
    let p = plan(&ev, &world.ctx);
    assert_eq!(p.candidate_count, 1);
    assert_eq!(p.preserved_reason_counts.get(&PreserveReason::WorkerLive), Some(&1));
    assert!(p.read_only && !p.mutation_performed);
    let again = plan(&ev, &world.ctx);
    assert_eq!(p, again);
}

#[test]
fn every_registry_column_is_either_fingerprinted_or_deliberately_excluded() {
    let excluded = [
        "token_fingerprint",
        "code_revision",
        "config_revision",
        "profile_revision",
        "schema_revision",
        "retired_at",
        "retired_by",
        "retirement_reason",
    ];
    let mut classified: Vec<&str> = FINGERPRINT_FIELDS.iter().chain(excluded.iter()).copied().collect();
    classified.sort_unstable();
    let mut columns = fleet_model::WORKER_COLUMNS.to_vec();
    columns.sort_unstable();
    assert_eq!(classified, columns, "a new column must be fingerprinted or excluded on purpose");
}

/// A probe can only speak of its own host and boot. When it gives no answer for a row of
/// another host, or a row without a boot id, the reason names that, not a shrug.
#[test]
fn an_unprobeable_row_says_why_it_could_not_be_probed() {
    type Change = fn(&mut World);
    let cases: [(&str, Change, PreserveReason); 4] = [
        ("same host, no answer", |_| {}, PreserveReason::PidLivenessUnknown),
        (
            "another host",
            |w| w.subject().host_id = Some("fedcba9876543210fedcba9876543210".parse().unwrap()),
            PreserveReason::HostBindingUnproven,
        ),
        ("no boot id on the row", |w| w.subject().boot_id = None, PreserveReason::BootIdentityUnknown),
        ("no boot id where retirement runs", |w| w.ctx.boot_id = None, PreserveReason::BootIdentityUnknown),
    ];
    for (case, change, expected) in cases {
        for verdict in [None, Some(ProcessVerdict::Unknown)] {
            let mut world = World::new();
            change(&mut world);
            match verdict {
                Some(v) => world.probe(v),
                None => {
                    let id = world.rows[0].worker_identity.clone();
                    world.probes.remove(&id);
                }
            }
            assert_eq!(world.verdict(), Verdict::Preserve(expected), "{case}, probe {verdict:?}");
        }
    }
}

/// A heartbeat written with a time far in the future (a skewed clock, a forged import)
/// does not keep a crashed worker alive forever: once its process is proved gone it is
/// retired like any other.
#[test]
fn a_heartbeat_from_the_future_does_not_make_a_crashed_row_unretirable() {
    let mut world = World::new();
    world.subject().last_heartbeat_at = Some(at(1000 + 365 * 24 * 3600).to_string());
    assert_eq!(world.verdict(), Verdict::EligibleStaleOrphan);
    world.subject().last_heartbeat_at = Some(at(1000 + 60).to_string());
    world.probe(ProcessVerdict::Alive);
    assert_eq!(world.verdict(), Verdict::Preserve(PreserveReason::WorkerLive), "a little skew is believed");
}

impl World {
    fn plan(&self) -> fleet_retirement::Plan {
        plan(&Evidence::new(&self.rows, &self.ledger, &self.owners, &self.probes), &self.ctx)
    }
}

/// A crashed worker whose heartbeat has not yet lapsed: the plan says when time alone
/// makes it a candidate, and a plan made after that instant (once a sweep marked it
/// stale) names it a candidate.
#[test]
fn a_row_that_time_alone_makes_a_candidate_says_when() {
    let mut world = World::new();
    world.subject().ownership_state = Some(OwnershipState::Owned);
    world.subject().last_heartbeat_at = Some(at(990).to_string());
    let preserved = world.plan().preserved;
    assert_eq!(preserved[0].reason_code, "heartbeat_not_expired");
    assert_eq!(preserved[0].eligible_after, Some(at(1020)), "the beat at 990 plus its 30 s TTL");
    let json = serde_json::to_value(&preserved[0]).unwrap();
    assert_eq!(json["eligible_after"], "2026-07-30T12:17:00.000Z");

    world.ctx.now = at(1020);
    world.subject().ownership_state = Some(OwnershipState::Stale);
    assert_eq!(world.plan().preserved[0].reason_code, "heartbeat_not_expired", "at the instant itself");
    world.ctx.now = at(1021);
    assert_eq!(world.plan().candidate_count, 1);
}

/// A row that something other than time preserves gets no `eligible_after`, even when
/// its heartbeat is what fails first.
#[test]
fn a_row_that_time_alone_does_not_free_gives_no_eligible_after() {
    let mut world = World::new();
    world.subject().last_heartbeat_at = Some(at(990).to_string());
    world.ledger.clear();
    let plan = world.plan();
    assert_eq!(plan.preserved[0].reason_code, "heartbeat_not_expired");
    assert_eq!(plan.preserved[0].eligible_after, None);
    assert!(serde_json::to_value(&plan.preserved[0]).unwrap().get("eligible_after").is_none());

    // A live process is never eligible by time.
    let mut world = World::new();
    world.flip(PreserveReason::WorkerLive);
    assert_eq!(world.plan().preserved[0].eligible_after, None);
}

/// The plan names the earliest instant any preserved row becomes a candidate.
#[test]
fn the_plan_names_the_earliest_eligible_after() {
    let mut world = World::new();
    assert_eq!(world.plan().next_eligible_after, None);
    world.subject().last_heartbeat_at = Some(at(990).to_string());
    let mut sooner = eligible(3);
    sooner.last_heartbeat_at = Some(at(980).to_string());
    world.probes.insert(sooner.worker_identity.clone(), ProcessVerdict::Gone);
    world.rows.push(sooner);
    assert_eq!(world.plan().next_eligible_after, Some(at(1010)));
}
