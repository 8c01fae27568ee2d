//! Stale retirement through the binary and through the library on real SQLite files:
//! plan then apply, replays, and every race of seed 004 between plan and apply.

mod common;

use std::process::{Child, Command};
use std::time::Duration;

use common::{Fleet, wait_for};
use fleet_registry::{OwnershipState, WorkerStatus};

/// A minted launch with one worker per namespace given, each running `sleep 60` under
/// `fleetctl worker run` with a 1 s TTL.
fn start_workers(fleet: &Fleet, namespaces: &[&str]) -> (String, Vec<Child>) {
    let id = fleet.mint("codex");
    let children = namespaces
        .iter()
        .map(|ns| {
            fleet
                .fleetctl()
                .args([
                    "worker",
                    "run",
                    "--namespace",
                    ns,
                    "--ttl",
                    "1",
                    "--repository",
                    "/srv/repo",
                    "--",
                    "sleep",
                    "60",
                ])
                .env("GITEA_MCP_CLIENT", "codex")
                .env("GITEA_MCP_CLIENT_INSTANCE", &id)
                .spawn()
                .unwrap()
        })
        .collect();
    wait_for(Duration::from_secs(30), || {
        (fleet.workers_once_created()?.len() == namespaces.len()).then_some(())
    });
    (id, children)
}

/// Kills the worker process of `namespace` and waits until the sweep marks it stale.
fn crash(fleet: &Fleet, namespace: &str) -> String {
    let row = fleet.workers().into_iter().find(|r| r.namespace.as_str() == namespace).unwrap();
    let pid = row.pid.unwrap();
    common::wait_until_running(pid);
    Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    wait_for(Duration::from_secs(30), || {
        fleet.ctl(&["registry", "sweep"]);
        let r = fleet.workers().into_iter().find(|r| r.worker_identity == row.worker_identity)?;
        (r.ownership_state == Some(OwnershipState::Stale)).then_some(())
    });
    row.worker_identity.to_string()
}

fn plan(fleet: &Fleet) -> serde_json::Value {
    let out = fleet.ctl(&["retire", "plan", "--canonical-repository", "/srv/repo", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn plan_text(fleet: &Fleet) -> String {
    let out = fleet.ctl(&["retire", "plan", "--canonical-repository", "/srv/repo"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn apply(fleet: &Fleet, plan: &serde_json::Value) -> (Option<i32>, serde_json::Value) {
    apply_with(fleet, plan, &[])
}

fn apply_with(fleet: &Fleet, plan: &serde_json::Value, extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let workers: Vec<&str> =
        plan["candidate_worker_identities"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let workers = workers.join(",");
    let mut args = vec![
        "retire",
        "apply",
        "--canonical-repository",
        "/srv/repo",
        "--registry-fingerprint",
        plan["registry_fingerprint"].as_str().unwrap(),
        "--candidate-fingerprint",
        plan["candidate_fingerprint"].as_str().unwrap(),
        "--workers",
        &workers,
        "--json",
    ];
    args.extend(extra);
    let out = fleet.ctl(&args);
    (out.status.code(), serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null))
}

fn stop(children: Vec<Child>) {
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn a_crashed_worker_is_planned_retired_once_and_then_counted_historical() {
    let fleet = Fleet::new();
    let (_, children) = start_workers(&fleet, &["author", "reviewer"]);
    let victim = crash(&fleet, "author");
    let p = plan(&fleet);
    assert_eq!(p["candidate_worker_identities"], serde_json::json!([victim]));
    assert_eq!(p["preserved_reason_counts"]["worker_live"], 1, "the live reviewer is preserved");
    assert_eq!(p["read_only"], true);

    // Plan is deterministic while nothing moves.
    let again = plan(&fleet);
    if again["registry_fingerprint"] == p["registry_fingerprint"] {
        assert_eq!(again["candidate_fingerprint"], p["candidate_fingerprint"]);
    }
    // The live reviewer heartbeats every 333 ms and moves the registry fingerprint; that
    // does not touch the candidate, so one apply goes through.
    let (code, report) = apply(&fleet, &p);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["outcome"], "applied");
    assert_eq!(report["retired"], serde_json::json!([victim]));
    assert_eq!(report["post_apply"]["stale_worker_count"], 0);
    let row = fleet.workers().into_iter().find(|r| r.worker_identity.as_str() == victim).unwrap();
    assert_eq!(row.status, WorkerStatus::Retired);
    assert_eq!(row.retirement_reason.as_deref(), Some("eligible_stale_orphan"));
    assert!(row.retired_at.is_some() && row.retired_by.is_some());

    let (code, replay) = apply(
        &fleet,
        &serde_json::json!({
            "registry_fingerprint": "b3:0000000000000000000000000000000000000000000000000000000000000000",
            "candidate_fingerprint": "b3:0000000000000000000000000000000000000000000000000000000000000000",
            "candidate_worker_identities": [victim],
        }),
    );
    assert_eq!((code, replay["outcome"].as_str()), (Some(0), Some("already_retired")));
    // As text, the fleet after the apply is said in words, not as a JSON line.
    let zero = "b3:0000000000000000000000000000000000000000000000000000000000000000";
    let out = fleet.ctl(&[
        "retire",
        "apply",
        "--canonical-repository",
        "/srv/repo",
        "--registry-fingerprint",
        zero,
        "--candidate-fingerprint",
        zero,
        "--workers",
        &victim,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let after = text.lines().find(|l| l.starts_with("after: ")).unwrap_or_default();
    assert!(after.starts_with("after: the fleet is safe; 0 stale workers left"), "{text}");
    assert!(!after.contains('{'), "{after}");
    stop(children);
}

/// Waits until the registry fingerprint moves away from the plan's: the live workers
/// heartbeat every third of their 1 s TTL.
fn wait_for_a_heartbeat(fleet: &Fleet, p: &serde_json::Value) {
    wait_for(Duration::from_secs(30), || {
        (plan(fleet)["registry_fingerprint"] != p["registry_fingerprint"]).then_some(())
    });
}

#[test]
fn a_heartbeat_of_another_worker_between_plan_and_apply_does_not_refuse_it() {
    let fleet = Fleet::new();
    let (_, children) = start_workers(&fleet, &["author", "reviewer"]);
    let victim = crash(&fleet, "author");
    let p = plan(&fleet);
    wait_for_a_heartbeat(&fleet, &p);
    let (code, report) = apply(&fleet, &p);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["outcome"], "applied");
    assert_eq!(report["retired"], serde_json::json!([victim]));
    assert_eq!(report["registry_moved"], true);
    assert_eq!(report["plan_registry_fingerprint"], p["registry_fingerprint"]);
    assert_ne!(report["registry_fingerprint"], p["registry_fingerprint"]);
    stop(children);
}

#[test]
fn with_require_registry_match_a_heartbeat_between_plan_and_apply_refuses_it() {
    let fleet = Fleet::new();
    let (_, children) = start_workers(&fleet, &["author", "reviewer"]);
    crash(&fleet, "author");
    let p = plan(&fleet);
    wait_for_a_heartbeat(&fleet, &p);
    let before = fleet.workers();
    let (code, report) = apply_with(&fleet, &p, &["--require-registry-match"]);
    assert_eq!(code, Some(1));
    assert_eq!(report["outcome"], "registry_revision_moved");
    assert_eq!(report["registry_moved"], true);
    assert_eq!(report["retired_count"], 0);
    let after = fleet.workers();
    assert!(after.iter().all(|r| r.status == WorkerStatus::Active));
    let author =
        |rows: &[fleet_registry::WorkerRow]| rows.iter().find(|r| r.namespace.as_str() == "author").cloned();
    assert_eq!(author(&after), author(&before), "nothing written");
    stop(children);
}

#[test]
fn a_lease_acquired_between_plan_and_apply_protects_its_owner() {
    let fleet = Fleet::new();
    let (_, mut children) = start_workers(&fleet, &["author"]);
    let victim = crash(&fleet, "author");
    stop(std::mem::take(&mut children));
    let p = plan(&fleet);
    assert_eq!(p["candidate_count"], 1);
    let out = fleet.ctl(&["lease", "acquire", "--key", "workflow:deploy", "--owner", &victim, "--ttl", "60"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, report) = apply(&fleet, &p);
    assert_eq!(code, Some(1));
    assert_eq!(report["outcome"], "candidate_set_moved");
    let fresh = plan(&fleet);
    assert_eq!(fresh["preserved_reason_counts"]["protected_active_workflow_owner"], 1);
    assert_eq!(fresh["protected_active_workflow_owners"], serde_json::json!([victim]));
}

#[test]
fn a_revived_pid_between_plan_and_apply_is_never_retired() {
    use fleet_registry::{ApplyOutcome, ApplyRequest, BeforeWrite};
    use fleet_registry::{LivenessProbe, ProcessIdentity, ProcessVerdict};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// The OS answer, until `revived` is set; then this very process answers alive.
    struct Reviving {
        revived: AtomicBool,
    }
    impl LivenessProbe for Reviving {
        fn probe(&self, p: &ProcessIdentity) -> ProcessVerdict {
            if self.revived.load(Ordering::SeqCst) {
                ProcessVerdict::Alive
            } else {
                fleet_probe::LocalProbe::new().unwrap().probe(p)
            }
        }
    }
    struct ReviveBeforeWrite<'a>(&'a Reviving);
    impl BeforeWrite for ReviveBeforeWrite<'_> {
        fn before_write(
            &self,
            _: &mut dyn fleet_registry::Tx,
            _: &fleet_identity::WorkerIdentity,
        ) -> Result<(), fleet_registry::StoreError> {
            self.0.revived.store(true, Ordering::SeqCst);
            Ok(())
        }
    }

    let fleet = Fleet::new();
    let (_, children) = start_workers(&fleet, &["author"]);
    let victim = crash(&fleet, "author");
    stop(children);
    let p = plan(&fleet);
    let probe = Reviving { revived: AtomicBool::new(false) };
    let ctx = fleet_retirement::RetirementContext {
        host_id: fleet_probe::host_id().unwrap(),
        boot_id: fleet_probe::boot_id().ok(),
        canonical_repository: "/srv/repo".parse().unwrap(),
        now: fleet_identity::Timestamp::parse(&chrono_now()).unwrap(),
    };
    let request = ApplyRequest {
        registry_fingerprint: p["registry_fingerprint"].as_str().unwrap().parse().unwrap(),
        candidate_fingerprint: p["candidate_fingerprint"].as_str().unwrap().parse().unwrap(),
        worker_identities: vec![victim.parse().unwrap()],
        every_candidate: false,
        retired_by: "test".into(),
        registry_match: fleet_registry::RegistryMatch::Candidates,
        audit: Default::default(),
    };
    let report =
        fleet.open().apply_retirement_with_hook(&request, &ctx, Some(&probe), &ReviveBeforeWrite(&probe));
    assert_eq!(report.outcome, ApplyOutcome::Applied);
    assert_eq!(report.retired_count, 0);
    assert_eq!(report.preserved[0].reason_code, "pid_alive");
    assert_eq!(fleet.workers()[0].status, WorkerStatus::Active);

    // Without a probe nothing is retired at all.
    let none = fleet.open().apply_retirement_with_hook(&request, &retire_ctx(), None, &());
    assert_eq!(none.outcome, ApplyOutcome::LivenessReprobeUnavailable);
}

#[test]
fn a_lease_acquired_during_apply_rolls_the_whole_transaction_back() {
    use fleet_registry::{ApplyOutcome, ApplyRequest, BeforeWrite};

    /// Acquires a workflow lease for the second candidate inside the apply's
    /// transaction, after the first row was retired: the lease store moved, so the fence
    /// must roll the whole transaction back, the first retirement included.
    struct AcquireBeforeSecondWrite(std::cell::Cell<u32>);
    impl BeforeWrite for AcquireBeforeSecondWrite {
        fn before_write(
            &self,
            tx: &mut dyn fleet_registry::Tx,
            worker: &fleet_identity::WorkerIdentity,
        ) -> Result<(), fleet_registry::StoreError> {
            self.0.set(self.0.get() + 1);
            if self.0.get() == 2 {
                let tenure = fleet_lease::Tenure {
                    owner: worker.to_string(),
                    lease_id: fleet_lease::LeaseId::new("lease-sneaky").unwrap(),
                    ttl: time::Duration::seconds(60),
                    scopes: Vec::new(),
                    process: None,
                };
                let key = fleet_lease::LeaseKey::new("workflow:sneaky").unwrap();
                let now = tx.store_now()?;
                let (_, lease) =
                    fleet_lease::decide_acquire(None, &key, fleet_lease::LeaseKind::Workflow, &tenure, now)
                        .unwrap();
                assert!(tx.put_lease(None, &lease)?);
            }
            Ok(())
        }
    }

    let fleet = Fleet::new();
    let (_, children) = start_workers(&fleet, &["author", "reviewer"]);
    crash(&fleet, "author");
    crash(&fleet, "reviewer");
    stop(children);
    let p = plan(&fleet);
    assert_eq!(p["candidate_count"], 2);
    let request = ApplyRequest {
        registry_fingerprint: p["registry_fingerprint"].as_str().unwrap().parse().unwrap(),
        candidate_fingerprint: p["candidate_fingerprint"].as_str().unwrap().parse().unwrap(),
        every_candidate: false,
        worker_identities: p["candidate_worker_identities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().parse().unwrap())
            .collect(),
        retired_by: "test".into(),
        registry_match: fleet_registry::RegistryMatch::Candidates,
        audit: Default::default(),
    };
    let probe = fleet_probe::LocalProbe::new().unwrap();
    let hook = AcquireBeforeSecondWrite(std::cell::Cell::new(0));
    let report = fleet.open().apply_retirement_with_hook(&request, &retire_ctx(), Some(&probe), &hook);
    assert_eq!(hook.0.get(), 2, "the first row was processed before the lease moved");
    assert_eq!(report.outcome, ApplyOutcome::TransactionFailed);
    assert!(!report.success && !report.mutation_performed);
    assert_eq!(report.retired_count, 0);
    assert!(report.error.unwrap().contains("workflow leases moved"));
    assert!(
        fleet.workers().iter().all(|r| r.status == WorkerStatus::Active),
        "the first retirement was rolled back"
    );
    assert!(
        fleet.open().leases(None).unwrap().is_empty(),
        "and so was the lease written inside the transaction"
    );
}

#[test]
fn killing_the_applier_at_any_moment_leaves_none_or_all_retired() {
    let fleet = Fleet::new();
    let (_, children) = start_workers(&fleet, &["author", "reviewer", "merger", "controller", "reconciler"]);
    for ns in ["author", "reviewer", "merger", "controller", "reconciler"] {
        crash(&fleet, ns);
    }
    stop(children);
    let p = plan(&fleet);
    assert_eq!(p["candidate_count"], 5);
    let workers: Vec<&str> =
        p["candidate_worker_identities"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    for delay_ms in [0u64, 2, 4, 6, 8, 10, 15, 20, 30, 50] {
        let mut applier = fleet
            .fleetctl()
            .args(["retire", "apply", "--canonical-repository", "/srv/repo"])
            .args(["--registry-fingerprint", p["registry_fingerprint"].as_str().unwrap()])
            .args(["--candidate-fingerprint", p["candidate_fingerprint"].as_str().unwrap()])
            .args(["--workers", &workers.join(",")])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = Command::new("kill").args(["-KILL", &applier.id().to_string()]).status();
        let _ = applier.wait();
        let store =
            registry_sqlite::SqliteStore::open(&fleet.registry, fleet_registry::OpenMode::MustExist).unwrap();
        store.integrity_check().unwrap();
        let retired = fleet.workers().iter().filter(|r| r.status == WorkerStatus::Retired).count();
        assert!(retired == 0 || retired == 5, "after a kill at {delay_ms} ms, {retired} of 5 retired");
        if retired == 5 {
            return;
        }
    }
}

fn retire_ctx() -> fleet_retirement::RetirementContext {
    fleet_retirement::RetirementContext {
        host_id: fleet_probe::host_id().unwrap(),
        boot_id: fleet_probe::boot_id().ok(),
        canonical_repository: "/srv/repo".parse().unwrap(),
        now: fleet_identity::Timestamp::parse(&chrono_now()).unwrap(),
    }
}

fn chrono_now() -> String {
    fleet_identity::Timestamp::new(time::OffsetDateTime::now_utc()).to_string()
}

/// The launch's ledger entry disappears between plan and apply (an operator restored a
/// backup taken before the launch was minted): the candidate's instance is no longer
/// launcher-minted, the fresh plan preserves it as `untrusted_identity_provenance`, and
/// the apply refuses with nothing written.
#[test]
fn a_ledger_entry_lost_between_plan_and_apply_refuses_it() {
    let fleet = Fleet::new();
    let (id, mut children) = start_workers(&fleet, &["author"]);
    let victim = crash(&fleet, "author");
    stop(std::mem::take(&mut children));
    let p = plan(&fleet);
    assert_eq!(p["candidate_worker_identities"], serde_json::json!([victim]));
    let db = rusqlite::Connection::open(&fleet.registry).unwrap();
    let removed = db.execute("DELETE FROM instances WHERE client_instance_id = ?1", [&id]).unwrap();
    assert_eq!(removed, 1);
    drop(db);
    let reason = plan(&fleet)["preserved"][0]["reason_code"].clone();
    assert_eq!(reason, "untrusted_identity_provenance");
    let before = fleet.workers();
    let (code, report) = apply(&fleet, &p);
    assert_eq!(code, Some(1));
    assert_eq!(report["outcome"], "candidate_set_moved");
    assert_eq!(fleet.workers(), before, "nothing written");
}

/// Seed 004: "Live workers registered under legacy pid-/proc- instance identities are
/// preserved untouched and keep their legacy_incomplete_identity blockers", crashed or
/// not; `post_apply` then reports the blockers that remain instead of a safe fleet.
#[test]
fn legacy_pid_and_proc_workers_are_never_retired_and_stay_reported() {
    let fleet = Fleet::new();
    let (_, children) = start_workers(&fleet, &["author"]);
    let legacy: Vec<Child> = [("reviewer", "proc-4242"), ("merger", "pid-77")]
        .into_iter()
        .map(|(ns, instance)| {
            fleet
                .fleetctl()
                .args(["worker", "run", "--namespace", ns, "--ttl", "1", "--repository", "/srv/repo", "--"])
                .args(["sleep", "60"])
                .env("GITEA_MCP_CLIENT", "codex")
                .env("GITEA_MCP_CLIENT_INSTANCE", instance)
                .spawn()
                .unwrap()
        })
        .collect();
    wait_for(Duration::from_secs(30), || (fleet.workers_once_created()?.len() == 3).then_some(()));
    let proc_row = crash(&fleet, "reviewer");
    let victim = crash(&fleet, "author");

    let snap: serde_json::Value = serde_json::from_slice(&fleet.ctl(&["snapshot", "--json"]).stdout).unwrap();
    let legacy_named: Vec<&str> = snap["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "legacy_incomplete_identity")
        .flat_map(|f| f["worker_identities"].as_array().unwrap().iter().filter_map(|w| w.as_str()))
        .collect();
    assert!(legacy_named.contains(&proc_row.as_str()), "proc-* is a legacy identity: {legacy_named:?}");

    let p = plan(&fleet);
    assert_eq!(p["candidate_worker_identities"], serde_json::json!([victim]), "{p}");
    let (code, report) = apply(&fleet, &p);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["post_apply"]["live_fleet_safe"], false);
    assert!(
        report["post_apply"]["remaining_blockers"]["legacy_incomplete_identity"].as_u64() >= Some(2),
        "{report}"
    );
    let row = fleet.workers().into_iter().find(|r| r.worker_identity.as_str() == proc_row).unwrap();
    assert_eq!(row.status, WorkerStatus::Active, "preserved untouched");
    stop(children);
    stop(legacy);
}

/// A launch whose every worker was killed at once (SIGKILL to its process group) leaves
/// no live worker to sweep it: past the TTL its rows are still `owned`, yet the plan
/// finds them all candidates (it judges rows as the stale sweep leaves them), and an
/// apply run from another directory, given no repository, uses the plan's binding and
/// retires them.
#[test]
fn a_launch_killed_whole_is_retired_with_no_sweep_from_any_directory() {
    retire_a_launch_killed_whole_from_the_root(false);
}

/// As above, with `--every-candidate` in place of the list: the apply finds the plan
/// the candidate fingerprint names among the repositories the rows are bound to, from
/// any directory.
#[test]
fn every_candidate_is_retired_from_any_directory() {
    retire_a_launch_killed_whole_from_the_root(true);
}

fn retire_a_launch_killed_whole_from_the_root(every_candidate: bool) {
    use std::os::unix::process::CommandExt;
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    let mut group = 0;
    let children: Vec<Child> = ["author", "reviewer", "merger"]
        .iter()
        .map(|ns| {
            let child = fleet
                .fleetctl()
                .args(["worker", "run", "--namespace", ns, "--ttl", "1", "--repository", "/srv/repo"])
                .args(["--", "sleep", "60"])
                .env("GITEA_MCP_CLIENT", "codex")
                .env("GITEA_MCP_CLIENT_INSTANCE", &id)
                .process_group(group)
                .spawn()
                .unwrap();
            if group == 0 {
                group = i32::try_from(child.id()).unwrap();
            }
            child
        })
        .collect();
    wait_for(Duration::from_secs(30), || (fleet.workers_once_created()?.len() == 3).then_some(()));
    for row in fleet.workers() {
        common::wait_until_running(row.pid.unwrap());
    }
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(group), nix::sys::signal::Signal::SIGKILL).unwrap();
    stop(children);
    wait_for(Duration::from_secs(10), || {
        let p = plan(&fleet);
        (p["candidate_worker_identities"].as_array()?.len() == 3).then_some(())
    });
    assert!(
        fleet.workers().iter().all(|r| r.ownership_state == Some(OwnershipState::Owned)),
        "nobody swept: the rows are still owned"
    );
    let p = plan(&fleet);
    let workers: Vec<&str> =
        p["candidate_worker_identities"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    if !every_candidate {
        the_pure_crates_plan_the_export_as_the_binary_does(&fleet, &p);
    }
    // Planned from elsewhere, the plan names the binding the rows have and its own.
    let elsewhere = fleet.fleetctl().current_dir("/").args(["retire", "plan"]).output().unwrap();
    let text = String::from_utf8_lossy(&elsewhere.stdout);
    assert!(
        text.contains("this plan is for /;")
            && text.contains("bound to /srv/repo")
            && text.contains("--canonical-repository REPO"),
        "{text}"
    );
    let printed = plan_text(&fleet);
    assert!(printed.contains("fleetctl retire apply --canonical-repository /srv/repo "), "{printed}");
    let workers = workers.join(",");
    let selection = if every_candidate { ["--every-candidate", ""] } else { ["--workers", &workers] };
    let out = fleet
        .fleetctl()
        .current_dir("/")
        .args(["retire", "apply", "--json"])
        .args(selection.iter().filter(|a| !a.is_empty()))
        .args(["--registry-fingerprint", p["registry_fingerprint"].as_str().unwrap()])
        .args(["--candidate-fingerprint", p["candidate_fingerprint"].as_str().unwrap()])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(report["retired_count"], 3, "{report} {}", String::from_utf8_lossy(&out.stderr));
    assert!(fleet.workers().iter().all(|r| r.status == WorkerStatus::Retired));
}

/// What `fleetctl registry export` writes, read by the pure crates alone
/// (`fleet_retirement::Export`), plans as `fleetctl retire plan` does on the same
/// registry: the same fingerprints, candidates and verdicts, given this host's probes and
/// the same context; the pure classification reads the same file.
fn the_pure_crates_plan_the_export_as_the_binary_does(fleet: &Fleet, cli: &serde_json::Value) {
    let out = fleet.ctl(&["registry", "export"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let export = fleet_retirement::Export::from_json(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let ctx = fleet_runtime::retirement_context(Some("/srv/repo")).unwrap();
    let rows = fleet_retirement::as_swept(&export.dump.worker_registrations, ctx.now);
    let probes = fleet_registry::probe_active_rows(&rows, &fleet_probe::LocalProbe::new().unwrap());
    let pure = serde_json::to_value(export.plan(&probes, &ctx)).unwrap();
    for field in [
        "registry_fingerprint",
        "candidate_fingerprint",
        "candidate_worker_identities",
        "canonical_repository",
    ] {
        assert_eq!(pure[field], cli[field], "{field}");
    }
    let verdicts = |plan: &serde_json::Value| -> Vec<(String, String)> {
        plan["preserved"]
            .as_array()
            .unwrap()
            .iter()
            .chain(plan["candidates"].as_array().unwrap())
            .map(|a| (a["worker_identity"].to_string(), a["reason_code"].to_string()))
            .collect()
    };
    assert_eq!(verdicts(&pure), verdicts(cli));
    let snapshot = fleet_snapshot::snapshot(fleet_snapshot::SnapshotInput {
        rows: &export.dump.worker_registrations,
        ledger: &export.dump.instances,
        manifest: None,
        probes: &probes,
        policy: &fleet_snapshot::Policy::default(),
        now: ctx.now,
    });
    assert_eq!(snapshot.counts.total_rows, 3);
}
