//! A reference plan written straight from seed 004's conjunction: each row is judged by
//! the requirements in the seed's order, and the two fleet-wide requirements ("no other
//! row that may be live shares its identity evidence", "no other row that may be live
//! claims its instance and namespace") scan every other row, where the fast plan looks
//! its answers up in an index. A property test holds `plan` to it on random fleets.

use std::collections::{BTreeMap, BTreeSet};

use fleet_identity::{ClientInstanceId, Timestamp, WorkerIdentity};
use fleet_model::{OwnershipState, ProcessVerdict, WorkerRow, WorkerStatus};
use fleet_retirement::{Evidence, PreserveReason, RetirementContext, Verdict, plan};
use proptest::prelude::*;

const HOST: &str = "0123456789abcdef0123456789abcdef";
const OTHER_HOST: &str = "fedcba9876543210fedcba9876543210";
const BOOT: &str = "11111111-2222-3333-4444-555555555555";

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix_millis((1_785_412_800 + secs) * 1000).unwrap()
}

fn instance(n: u8) -> String {
    format!("inst-codex-20260730T120000Z-{n:012x}")
}

/// The world a plan judges.
#[derive(Debug, Clone)]
struct World {
    rows: Vec<WorkerRow>,
    ledger: BTreeSet<ClientInstanceId>,
    owners: BTreeSet<String>,
    probes: BTreeMap<WorkerIdentity, ProcessVerdict>,
    ctx: RetirementContext,
}

/// May this row be live: active and not proved gone.
fn may_be_live(row: &WorkerRow, probe: Option<ProcessVerdict>) -> bool {
    row.status == WorkerStatus::Active
        && !matches!(probe, Some(ProcessVerdict::Gone | ProcessVerdict::PidReused))
}

/// Seed 004's conjunction for the row at `i`, in its order.
fn reference_verdict(w: &World, i: usize) -> Verdict {
    use PreserveReason as R;
    let row = &w.rows[i];
    let probe_of = |r: &WorkerRow| w.probes.get(&r.worker_identity).copied();
    let probe = probe_of(row);
    let keep = Verdict::Preserve;
    if row.status != WorkerStatus::Active {
        return keep(R::AlreadyTerminalRegistration);
    }
    let complete = row.client_instance_id.is_some()
        && row.generation_id.is_some()
        && row.pid.is_some()
        && row.process_start_time.is_some()
        && row.last_heartbeat_at.is_some()
        && row.heartbeat_ttl_s.is_some()
        && row.ownership_state.is_some();
    if !complete {
        return keep(R::IncompleteRegistryIdentity);
    }
    let Some(beat) = row.heartbeat() else { return keep(R::UnparsableHeartbeat) };
    let expired = fleet_model::heartbeat_lapsed(beat, row.heartbeat_ttl_s.unwrap_or(0), w.ctx.now);
    let gone = matches!(probe, Some(ProcessVerdict::Gone | ProcessVerdict::PidReused));
    if !expired && !gone {
        return keep(R::WorkerLive);
    }
    let other_host = row.host_id.as_ref() != Some(&w.ctx.host_id);
    let boot_unknown = row.boot_id.is_none() || w.ctx.boot_id.is_none();
    match probe {
        None | Some(ProcessVerdict::Unknown) if other_host => return keep(R::HostBindingUnproven),
        None | Some(ProcessVerdict::Unknown) if boot_unknown => return keep(R::BootIdentityUnknown),
        None | Some(ProcessVerdict::Unknown) => return keep(R::PidLivenessUnknown),
        Some(ProcessVerdict::Alive) => return keep(R::PidAlive),
        Some(ProcessVerdict::Gone | ProcessVerdict::PidReused) => {}
    }
    if !expired {
        return keep(R::HeartbeatNotExpired);
    }
    if row.ownership_state != Some(OwnershipState::Stale) {
        return keep(R::AmbiguousOwnershipState);
    }
    if row.repository.as_ref() != Some(&w.ctx.canonical_repository) {
        return keep(R::RepositoryBindingAmbiguous);
    }
    // Every other row (by place: two rows may share an identity) that may be live.
    let others = || {
        w.rows.iter().enumerate().filter(move |(j, o)| *j != i && may_be_live(o, probe_of(o))).map(|(_, o)| o)
    };
    let shares_evidence = |o: &WorkerRow| {
        o.worker_identity == row.worker_identity
            || (row.generation_id.is_some() && o.generation_id == row.generation_id)
            || (row.host_id.is_some()
                && row.pid.is_some()
                && o.host_id == row.host_id
                && o.boot_id == row.boot_id
                && o.pid == row.pid)
            || (row.token_fingerprint.is_some() && o.token_fingerprint == row.token_fingerprint)
    };
    if others().any(shares_evidence) {
        return keep(R::ConflictingIdentityEvidence);
    }
    if others().any(|o| o.client_instance_id == row.client_instance_id && o.namespace == row.namespace) {
        return keep(R::ClientInstanceConflict);
    }
    if w.owners.contains(row.worker_identity.as_str()) {
        return keep(R::ProtectedActiveWorkflowOwner);
    }
    if !row.instance_id().is_some_and(|id| w.ledger.contains(&id)) {
        return keep(R::UntrustedIdentityProvenance);
    }
    if other_host {
        return keep(R::HostBindingUnproven);
    }
    if boot_unknown {
        return keep(R::BootIdentityUnknown);
    }
    if probe == Some(ProcessVerdict::PidReused) {
        return keep(R::PidReuseDetected);
    }
    Verdict::EligibleStaleOrphan
}

/// Each row's verdict by the reference, by identity (rows sharing one keep all theirs).
fn reference(w: &World) -> BTreeMap<WorkerIdentity, Vec<Verdict>> {
    let mut verdicts: BTreeMap<WorkerIdentity, Vec<Verdict>> = BTreeMap::new();
    for i in 0..w.rows.len() {
        verdicts.entry(w.rows[i].worker_identity.clone()).or_default().push(reference_verdict(w, i));
    }
    verdicts.values_mut().for_each(|v| v.sort_by_key(|v| v.as_str()));
    verdicts
}

/// Each row's verdict in the fast plan, the same way.
fn fast(w: &World) -> BTreeMap<WorkerIdentity, Vec<Verdict>> {
    let p = plan(&Evidence::new(&w.rows, &w.ledger, &w.owners, &w.probes), &w.ctx);
    let mut verdicts: BTreeMap<WorkerIdentity, Vec<Verdict>> = BTreeMap::new();
    for a in p.candidates.iter().chain(&p.preserved) {
        verdicts.entry(a.worker_identity.clone()).or_default().push(a.reason_code);
    }
    verdicts.values_mut().for_each(|v| v.sort_by_key(|v| v.as_str()));
    verdicts
}

/// One row drawn from small domains, so that rows share identities, generations, pids,
/// tokens and slots, and every requirement fails now and then.
fn row() -> impl Strategy<Value = (WorkerRow, Option<ProcessVerdict>)> {
    let verdict = prop_oneof![
        Just(None),
        Just(Some(ProcessVerdict::Gone)),
        Just(Some(ProcessVerdict::Gone)),
        Just(Some(ProcessVerdict::Alive)),
        Just(Some(ProcessVerdict::PidReused)),
        Just(Some(ProcessVerdict::Unknown)),
    ];
    (
        (0u8..12, 0u8..4, 0usize..5, 0u8..12, 0u32..10, 0u8..12),
        (0u8..10, 0u8..6, 0u8..5, 0u8..10, 0usize..3),
        verdict,
    )
        .prop_map(
            |((id, inst, ns, generation, pid, token), (status, ownership, host, gap, beat), verdict)| {
                let mut row: WorkerRow = serde_json::from_value(serde_json::json!({
                    "worker_identity": format!("wkr-{id:02}"),
                    "client_type": "codex",
                    "client_instance_id": instance(inst),
                    "namespace": fleet_identity::Namespace::ALL[ns],
                    "generation_id": format!("gen-{generation}"),
                    "host_id": HOST,
                    "boot_id": BOOT,
                    "pid": 4000 + pid,
                    "process_start_time": 70_000 + pid,
                    "repository": "/srv/repo",
                    "status": "active",
                    "ownership_state": "stale",
                    "registered_at": at(0).to_string(),
                    "last_heartbeat_at": at([100, 980, 995][beat]).to_string(),
                    "heartbeat_ttl_s": 30,
                    "token_fingerprint": format!("b3:{token:032}"),
                }))
                .unwrap();
                row.status = match status {
                    0 => WorkerStatus::Released,
                    1 => WorkerStatus::Retired,
                    _ => WorkerStatus::Active,
                };
                row.ownership_state = match ownership {
                    0 => Some(OwnershipState::Owned),
                    1 => Some(OwnershipState::Orphaned),
                    2 => None,
                    _ => Some(OwnershipState::Stale),
                };
                match host {
                    0 => row.host_id = Some(OTHER_HOST.parse().unwrap()),
                    1 => row.boot_id = None,
                    _ => {}
                }
                match gap {
                    0 => row.generation_id = None,
                    1 => row.repository = Some("/srv/other".parse().unwrap()),
                    2 => row.last_heartbeat_at = Some("not a time".into()),
                    3 => row.client_instance_id = Some("legacy-pid-77".into()),
                    _ => {}
                }
                (row, verdict)
            },
        )
}

fn world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(row(), 0..24),
        prop::collection::btree_set(0u8..4, 0..4),
        prop::collection::btree_set(0u8..12, 0..3),
        any::<bool>(),
    )
        .prop_map(|(rows, minted, owners, boot_known)| {
            let probes = rows.iter().filter_map(|(r, v)| Some((r.worker_identity.clone(), (*v)?))).collect();
            World {
                rows: rows.into_iter().map(|(r, _)| r).collect(),
                ledger: minted.into_iter().map(|n| ClientInstanceId::parse(&instance(n)).unwrap()).collect(),
                owners: owners.into_iter().map(|n| format!("wkr-{n:02}")).collect(),
                probes,
                ctx: RetirementContext {
                    host_id: HOST.parse().unwrap(),
                    boot_id: boot_known.then(|| BOOT.parse().unwrap()),
                    canonical_repository: "/srv/repo".parse().unwrap(),
                    now: at(1000),
                },
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_plan_agrees_with_the_conjunction_applied_row_by_row(w in world()) {
        prop_assert_eq!(fast(&w), reference(&w));
    }
}
