//! Plan over 100k rows, apply of 10k candidates on a real SQLite file, and fingerprint
//! throughput.

use std::collections::{BTreeMap, BTreeSet};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use fleet_identity::{ClientInstanceId, Timestamp, WorkerIdentity};
use fleet_model::{
    InstanceRecord, LivenessProbe, OwnershipState, ProcessIdentity, ProcessVerdict, RegistryDump, WorkerRow,
};
use fleet_registry::{ApplyRequest, OpenMode, Registry};
use fleet_retirement::{Evidence, RetirementContext, plan, registry_fingerprint};
use registry_sqlite::SqliteStore;

const HOST: &str = "0123456789abcdef0123456789abcdef";

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix_millis((1_785_412_800 + secs) * 1000).expect("time")
}

/// `n` rows over `n / 5` launches; every `stride`-th row is a stale orphan, the rest live.
fn fleet(n: usize, stride: usize) -> (Vec<WorkerRow>, Vec<InstanceRecord>) {
    let namespaces = ["author", "reviewer", "merger", "controller", "reconciler"];
    let mut rows = Vec::with_capacity(n);
    let mut ledger = Vec::new();
    for i in 0..n {
        let launch = i / 5;
        let instance = format!("inst-codex-20260730T120000Z-{launch:012x}");
        if i % 5 == 0 {
            ledger.push(InstanceRecord {
                client_instance_id: ClientInstanceId::parse(&instance).expect("id"),
                client_type: "codex".parse().expect("client"),
                fleet_run_id: None,
                minted_at: at(0),
                host_id: None,
            });
        }
        let stale = i % stride == 0;
        rows.push(
            serde_json::from_value(serde_json::json!({
                "worker_identity": format!("wkr-{}-{i:08}", namespaces[i % 5]),
                "client_type": "codex",
                "client_instance_id": instance,
                "namespace": namespaces[i % 5],
                "session_id": format!("sess-{launch}"),
                "generation_id": format!("gen-{i}"),
                "host_id": HOST,
                "boot_id": "11111111-2222-3333-4444-555555555555",
                "pid": 1 + i,
                "process_start_time": 1000 + i,
                "repository": "/srv/repo",
                "status": "active",
                "ownership_state": if stale { "stale" } else { "owned" },
                "registered_at": at(0).to_string(),
                "last_heartbeat_at": if stale { at(10).to_string() } else { at(990).to_string() },
                "heartbeat_ttl_s": 30,
                "fencing_epoch": 1,
            }))
            .expect("row"),
        );
    }
    (rows, ledger)
}

fn ctx() -> RetirementContext {
    RetirementContext {
        host_id: HOST.parse().expect("host"),
        boot_id: Some("11111111-2222-3333-4444-555555555555".parse().expect("boot")),
        canonical_repository: "/srv/repo".parse().expect("repo"),
        now: at(1000),
    }
}

/// Stale rows are gone; the rest alive.
fn probes(rows: &[WorkerRow]) -> BTreeMap<WorkerIdentity, ProcessVerdict> {
    rows.iter()
        .map(|r| {
            let v = if r.ownership_state == Some(OwnershipState::Stale) {
                ProcessVerdict::Gone
            } else {
                ProcessVerdict::Alive
            };
            (r.worker_identity.clone(), v)
        })
        .collect()
}

struct Scripted(BTreeMap<(u32, u64), ProcessVerdict>);

impl LivenessProbe for Scripted {
    fn probe(&self, p: &ProcessIdentity) -> ProcessVerdict {
        self.0.get(&(p.pid.get(), p.process_start_time.ticks())).copied().unwrap_or(ProcessVerdict::Unknown)
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("retirement");
    group.sample_size(10);

    let (rows, ledger) = fleet(100_000, 10);
    let ids: BTreeSet<ClientInstanceId> = ledger.iter().map(|l| l.client_instance_id.clone()).collect();
    let owners = BTreeSet::new();
    let pr = probes(&rows);
    group.throughput(Throughput::Elements(rows.len() as u64));
    group.bench_function("plan_100k_rows", |b| {
        b.iter(|| plan(&Evidence::new(&rows, &ids, &owners, &pr), &ctx()).candidate_count)
    });
    group.bench_function("registry_fingerprint_100k_rows", |b| b.iter(|| registry_fingerprint(&rows)));

    // Apply: 10k candidates among 20k rows on a real SQLite file, copied fresh per run.
    let (rows, ledger) = fleet(20_000, 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let template = dir.path().join("template.sqlite3");
    let mut registry = Registry::new(SqliteStore::open(&template, OpenMode::CreateIfMissing).expect("open"));
    registry
        .import(&RegistryDump { instances: ledger.clone(), worker_registrations: rows.clone() })
        .expect("import");
    drop(registry);
    let ids: BTreeSet<ClientInstanceId> = ledger.iter().map(|l| l.client_instance_id.clone()).collect();
    let pr = probes(&rows);
    let p = plan(&Evidence::new(&rows, &ids, &owners, &pr), &ctx());
    assert_eq!(p.candidate_count, 10_000);
    let scripted = Scripted(
        rows.iter()
            .map(|r| {
                (
                    (r.pid.expect("pid").get(), r.process_start_time.expect("start").ticks()),
                    pr[&r.worker_identity],
                )
            })
            .collect(),
    );
    let request = ApplyRequest {
        every_candidate: false,
        registry_fingerprint: p.registry_fingerprint.clone(),
        candidate_fingerprint: p.candidate_fingerprint.clone(),
        worker_identities: p.candidate_worker_identities.clone(),
        retired_by: "bench".into(),
        registry_match: fleet_registry::RegistryMatch::Candidates,
        audit: Default::default(),
    };
    let copy = dir.path().join("run.sqlite3");
    group.throughput(Throughput::Elements(10_000));
    group.bench_function("apply_10k_candidates", |b| {
        b.iter_batched(
            || {
                let _ = std::fs::remove_file(copy.with_extension("sqlite3-wal"));
                std::fs::copy(&template, &copy).expect("copy");
                Registry::new(SqliteStore::open(&copy, OpenMode::MustExist).expect("open"))
            },
            |mut registry| {
                let report = registry.apply_retirement(&request, &ctx(), &scripted);
                assert_eq!(report.retired_count, 10_000, "{report:?}");
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
