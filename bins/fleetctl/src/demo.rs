//! `fleetctl demo`: a guided tour on a throw-away registry. It starts a real small fleet
//! (two launches of five workers), then shows what Fleetward sees and does as a worker
//! crashes and its heartbeat lapses.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use fleet_cli::Failure;
use fleet_cli::{out, outln};
use fleet_identity::{ClientType, Namespace, WorkerIdentity};
use fleet_registry::{OwnershipState, WorkerRow, WorkerStatus};
use fleet_runtime::{Fleet, Launch, RegistryLocation, now};

use crate::worker_cmd::list_table;

/// Heartbeat TTL of the demo's workers: short, so the tour does not wait long.
const DEMO_TTL_SECS: u32 = 2;

struct Tour {
    location: RegistryLocation,
    stop: PathBuf,
    workers: Vec<Child>,
}

impl Drop for Tour {
    fn drop(&mut self) {
        // However the tour ends, no worker outlives it.
        let _ = std::fs::write(&self.stop, b"");
        for child in &mut self.workers {
            let _ = child.wait();
        }
    }
}

fn step(n: u32, title: &str) -> Result<(), Failure> {
    outln!("\n== {n}. {title}")
}

/// Every worker row of the tour's registry.
fn workers(location: &RegistryLocation) -> Result<Vec<WorkerRow>, Failure> {
    Ok(Fleet::new(location.clone()).all_workers()?)
}

fn wait_until<T>(
    limit: Duration,
    mut check: impl FnMut() -> Result<Option<T>, Failure>,
) -> Result<T, Failure> {
    let start = Instant::now();
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if start.elapsed() > limit {
            return Err(Failure::refused(format!("the demo fleet did not settle within {limit:?}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spawn_worker(exe: &Path, tour: &Tour, launch: &Launch, ns: Namespace) -> Result<Child, Failure> {
    let wait_for_stop = format!("while [ ! -e '{}' ]; do sleep 0.1; done", tour.stop.display());
    Command::new(exe)
        .args(["worker", "run", "--namespace", ns.as_str(), "--ttl", &DEMO_TTL_SECS.to_string(), "--"])
        .args(["sh", "-c", &wait_for_stop])
        .envs(launch.vars())
        // The tour is the client of its launch: its workers are owned while it runs.
        .env(fleet_runtime::vars::LAUNCH_PROCESS, fleet_runtime::launch_process_value()?)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| Failure::store(format!("cannot start a demo worker: {e}")))
}

pub(crate) fn run(keep: Option<PathBuf>) -> Result<ExitCode, Failure> {
    let keep_dir = keep.is_some();
    let dir = match keep {
        Some(dir) => {
            std::fs::create_dir_all(&dir).map_err(|e| Failure::usage(format!("{}: {e}", dir.display())))?;
            dir
        }
        None => std::env::temp_dir().join(format!("fleetward-demo-{}", std::process::id())),
    };
    let location = RegistryLocation::Sqlite(dir.join("registry.sqlite3"));
    let exe =
        std::env::current_exe().map_err(|e| Failure::store(format!("cannot find fleetctl itself: {e}")))?;
    let mut tour = Tour { location: location.clone(), stop: dir.join("stop"), workers: Vec::new() };
    let _ = std::fs::remove_file(&tour.stop);

    step(1, "Two launches of the same client, five namespace workers each")?;
    outln!("registry: {location}")?;
    let codex = ClientType::new("codex").map_err(|e| Failure::usage(e.to_string()))?;
    let mut launches = Vec::new();
    for _ in 0..2 {
        let launch = Launch::mint(&location, &codex, None, None)?;
        outln!("fleet-launch minted and recorded {}", launch.id())?;
        for ns in Namespace::ALL {
            let child = spawn_worker(&exe, &tour, &launch, ns)?;
            tour.workers.push(child);
        }
        launches.push(launch);
    }
    let rows = wait_until(Duration::from_secs(30), || {
        let rows = workers(&tour.location)?;
        Ok((rows.iter().filter(|r| r.status == WorkerStatus::Active).count() == 10).then_some(rows))
    })?;
    out!("{}", list_table(&rows, now()))?;
    outln!("\n$ fleetctl snapshot")?;
    out!("{}", fleet_snapshot_text(&tour.location)?)?;
    outln!("Two distinct trusted instance IDs share the client type codex: that is not a collision.")?;

    step(2, "A worker crashes (SIGKILL)")?;
    let victim = pick(&rows, launches[1].id(), Namespace::Author)?;
    let pid = victim.pid.ok_or_else(|| Failure::store("the demo worker has no pid"))?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid.as_raw()), nix::sys::signal::Signal::SIGKILL)
        .map_err(|e| Failure::store(format!("cannot kill pid {pid}: {e}")))?;
    outln!("killed pid {pid} ({} of {})", victim.worker_identity, launches[1].id())?;
    outln!(
        "Its row stays active: a crash does not release, and the heartbeat still counts for {DEMO_TTL_SECS}s."
    )?;

    step(3, "The heartbeat lapses; the fleet itself marks the row stale")?;
    let marked = wait_until(Duration::from_secs(30), || {
        let rows = workers(&tour.location)?;
        let stale: Vec<WorkerIdentity> = rows
            .into_iter()
            .filter(|r| r.status == WorkerStatus::Active && r.ownership_state == Some(OwnershipState::Stale))
            .map(|r| r.worker_identity)
            .collect();
        Ok((!stale.is_empty()).then_some(stale))
    })?;
    for id in &marked {
        outln!("stale: {id} (marked by the live workers' own heartbeat sweep; no operator ran anything)")?;
    }
    outln!("\n$ fleetctl snapshot")?;
    out!("{}", fleet_snapshot_text(&tour.location)?)?;
    outln!("A stale worker still marked active blocks mutation until it is retired.")?;

    step(4, "Retirement: a dry-run plan, then a compare-and-swap apply on proof")?;
    retire(&tour.location, &marked)?;

    step(5, "A fenced lease changes hands")?;
    lease_handover(&tour.location, &rows, launches[0].id())?;

    step(6, "The other workers exit cleanly and release their rows")?;
    std::fs::write(&tour.stop, b"").map_err(|e| Failure::store(format!("cannot stop the demo: {e}")))?;
    for child in &mut tour.workers {
        let _ = child.wait();
    }
    tour.workers.clear();
    let rows = workers(&tour.location)?;
    out!("{}", list_table(&rows, now()))?;
    let released = rows.iter().filter(|r| r.status == WorkerStatus::Released).count();
    outln!("{released} released, 1 retired: nothing was deleted, every row keeps its history.")?;
    if keep_dir {
        outln!("\nThe registry is kept at {location}: `fleetctl --registry {location} worker list`.")?;
    } else {
        let _ = std::fs::remove_dir_all(&dir);
        outln!("\nRun `fleetctl demo --keep DIR` to keep the registry for a closer look.")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn pick<'a>(rows: &'a [WorkerRow], instance: &str, ns: Namespace) -> Result<&'a WorkerRow, Failure> {
    rows.iter()
        .find(|r| {
            r.client_instance_id.as_deref() == Some(instance)
                && r.namespace == ns
                && r.status == WorkerStatus::Active
        })
        .ok_or_else(|| Failure::store(format!("no active {ns} worker for {instance}")))
}

fn fleet_snapshot_text(location: &RegistryLocation) -> Result<String, Failure> {
    let policy = fleet_snapshot::Policy::default();
    let render = |snap: &fleet_snapshot::FleetSnapshot<'_>| crate::snapshot_cmd::render(snap, false);
    Ok(fleet_runtime::take_snapshot(location, None, &policy, now(), render)?)
}

fn retire(location: &RegistryLocation, stale: &[WorkerIdentity]) -> Result<(), Failure> {
    use fleet_registry::{ApplyOutcome, ApplyRequest, RegistryMatch};
    let mut fleet = Fleet::new(location.clone());
    let plan = fleet.plan(&fleet_runtime::retirement_context(None)?)?;
    outln!("$ fleetctl retire plan")?;
    outln!(
        "  {} candidate(s) {:?}; preserved: {}",
        plan.candidate_count,
        plan.candidate_worker_identities.iter().map(|i| i.as_str()).collect::<Vec<_>>(),
        plan.preserved_reason_counts.iter().map(|(r, n)| format!("{r}×{n}")).collect::<Vec<_>>().join(", ")
    )?;
    let request = ApplyRequest {
        registry_fingerprint: plan.registry_fingerprint.clone(),
        candidate_fingerprint: plan.candidate_fingerprint.clone(),
        worker_identities: plan.candidate_worker_identities.clone(),
        every_candidate: false,
        retired_by: "fleetctl-demo".into(),
        registry_match: RegistryMatch::Candidates,
        audit: Default::default(),
    };
    // The live workers keep heartbeating between plan and apply; that moves the
    // registry, not the candidates, so the apply goes through.
    let report = fleet.apply(&request, &fleet_runtime::retirement_context(None)?)?.report;
    outln!("$ fleetctl retire apply --registry-fingerprint … --candidate-fingerprint … --workers …")?;
    outln!(
        "  {}: retired {:?}{}",
        report.outcome,
        report.retired.iter().map(|i| i.as_str()).collect::<Vec<_>>(),
        if report.registry_moved == Some(true) { " (other rows moved since the plan)" } else { "" }
    )?;
    if report.outcome != ApplyOutcome::Applied || !report.retired.iter().any(|r| stale.contains(r)) {
        return Err(Failure::refused(format!("the demo's retirement did not apply: {}", report.outcome)));
    }
    outln!("\n$ fleetctl snapshot")?;
    out!("{}", fleet_snapshot_text(location)?)?;
    outln!("The retired row is history now: the fleet is safe again.")?;
    Ok(())
}

fn lease_handover(location: &RegistryLocation, rows: &[WorkerRow], instance: &str) -> Result<(), Failure> {
    use fleet_lease::{DenyAll, LeaseKey};
    use fleet_runtime::LeaseChange;
    let key = LeaseKey::new("workflow:demo-deploy").map_err(|e| Failure::usage(e.to_string()))?;
    let ttl = time::Duration::seconds(1);
    let holder_a = pick(rows, instance, Namespace::Merger)?.worker_identity.to_string();
    let holder_b = pick(rows, instance, Namespace::Controller)?.worker_identity.to_string();
    let mut fleet = Fleet::new(location.clone());
    let mut change =
        |change| fleet.change_lease(&key, change, &DenyAll, None).map_err(|e| Failure::store(e.to_string()));
    let acquire = |owner| LeaseChange::Acquire { owner, ttl, scopes: &[] };
    let first = change(acquire(&holder_a))?.map_err(|d| Failure::refused(d.to_string()))?;
    outln!("{holder_a} acquires {key}: epoch {}", first.fencing_epoch)?;
    let refused = change(acquire(&holder_b))?;
    outln!("{holder_b} tries too: {}", refused.err().map_or("acquired".into(), |d| d.as_str().to_owned()))?;
    outln!("{holder_a} pauses (a long GC, a stopped process) and stops renewing…")?;
    std::thread::sleep(Duration::from_millis(1200));
    let second = change(acquire(&holder_b))?.map_err(|d| Failure::refused(d.to_string()))?;
    outln!("the lease lapsed; {holder_b} takes it over: epoch {}", second.fencing_epoch)?;
    let stale = change(LeaseChange::Renew { holder: &first.holder(), ttl: Some(ttl) })?;
    outln!(
        "{holder_a} wakes up and renews with epoch {}: {}",
        first.fencing_epoch,
        stale.err().map_or("renewed".into(), |d| d.as_str().to_owned())
    )?;
    outln!("The epoch, not the clock, decides: a former owner can never act on stale authority.")?;
    Ok(())
}
