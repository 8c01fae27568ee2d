//! The registry's life through the real binaries: launches, workers, crashes and exits.

mod common;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Fleet, fleetctl_bin, wait_for};
use fleet_identity::Namespace;
use fleet_registry::{OwnershipState, WorkerStatus};

const NAMESPACES: [&str; 5] = ["author", "reviewer", "merger", "controller", "reconciler"];

/// Starts `fleet-launch run` whose application starts five `fleetctl worker run`
/// workers that each wait for `stop` to exist.
fn launch_five(fleet: &Fleet, client: &str, stop: &std::path::Path) -> Child {
    let fleetctl = fleetctl_bin();
    let script = format!(
        "for ns in {}; do '{}' worker run --namespace $ns -- sh -c 'while [ ! -e \"{}\" ]; do sleep 0.05; done' & done; wait",
        NAMESPACES.join(" "),
        fleetctl.display(),
        stop.display()
    );
    fleet
        .launcher()
        .args(["run", "--client", client, "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn launch")
}

#[test]
fn two_launches_of_one_client_leave_ten_distinct_trusted_workers() {
    let fleet = Fleet::new();
    let stop = fleet.dir.path().join("stop");
    let mut guard = common::StopGuard {
        stop: stop.clone(),
        children: vec![launch_five(&fleet, "codex", &stop), launch_five(&fleet, "codex", &stop)],
    };

    let rows = wait_for(Duration::from_secs(60), || {
        let rows = fleet.workers_once_created()?;
        (rows.iter().filter(|r| r.status == WorkerStatus::Active).count() == 10).then_some(rows)
    });
    let ledger: BTreeSet<String> =
        fleet.open().instances().unwrap().into_iter().map(|i| i.client_instance_id.to_string()).collect();
    let instances: BTreeSet<String> = rows.iter().filter_map(|r| r.client_instance_id.clone()).collect();
    assert_eq!(instances.len(), 2, "two launches, two instance IDs");
    assert!(instances.is_subset(&ledger), "every instance ID is in the launcher's ledger");
    for instance in &instances {
        let namespaces: BTreeSet<Namespace> = rows
            .iter()
            .filter(|r| r.client_instance_id.as_ref() == Some(instance))
            .map(|r| r.namespace)
            .collect();
        assert_eq!(namespaces, Namespace::ALL.into_iter().collect(), "{instance} has all five namespaces");
    }
    let distinct =
        |f: fn(&fleet_registry::WorkerRow) -> String| rows.iter().map(f).collect::<BTreeSet<_>>().len();
    assert_eq!(distinct(|r| r.worker_identity.to_string()), 10);
    assert_eq!(distinct(|r| format!("{:?}", r.generation_id)), 10);
    assert_eq!(distinct(|r| format!("{:?}", r.pid)), 10);
    assert!(rows.iter().all(|r| r.client_type.as_ref().map(|c| c.as_str()) == Some("codex")));

    std::fs::write(&stop, b"").unwrap();
    for launch in &mut guard.children {
        assert!(launch.wait().unwrap().success());
    }
    let after = fleet.workers();
    assert_eq!(after.len(), 10);
    assert!(after.iter().all(|r| r.status == WorkerStatus::Released), "a clean exit releases every worker");
}

#[test]
fn a_killed_worker_stays_active_until_its_ttl_lapses_then_turns_stale() {
    let fleet = Fleet::new();
    let id = fleet.mint("claude_code");
    let mut wrapper = fleet
        .fleetctl()
        .args(["worker", "run", "--namespace", "author", "--ttl", "2", "--", "sleep", "60"])
        .env("GITEA_MCP_CLIENT", "claude_code")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .spawn()
        .unwrap();
    let row = wait_for(Duration::from_secs(30), || fleet.workers_once_created()?.into_iter().next());
    let pid = row.pid.unwrap();
    common::wait_until_running(pid);
    Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    let status = wrapper.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 9), "the wrapper reports the signal death");

    let row = fleet.workers().remove(0);
    assert_eq!(row.status, WorkerStatus::Active, "a crash does not release");
    // Exactly at the expiry instant the row is not yet expired.
    let expires = row.expires_at().unwrap();
    assert!(fleet.open().mark_expired_stale(expires).unwrap().is_empty());

    let marked = wait_for(Duration::from_secs(30), || {
        let out = fleet.ctl(&["registry", "sweep", "--json"]);
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let marked = v["marked_stale"].as_array().unwrap().clone();
        (!marked.is_empty()).then_some(marked)
    });
    assert_eq!(marked, vec![serde_json::json!(row.worker_identity.as_str())]);
    let row = fleet.workers().remove(0);
    assert_eq!((row.status, row.ownership_state), (WorkerStatus::Active, Some(OwnershipState::Stale)));
}

#[test]
fn a_worker_passes_on_its_exit_code_and_releases() {
    let fleet = Fleet::new();
    let id = fleet.mint("gemini");
    let out = fleet
        .fleetctl()
        .args(["worker", "run", "--namespace", "reviewer", "--", "sh", "-c", "exit 7"])
        .env("GITEA_MCP_CLIENT", "gemini")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let rows = fleet.workers();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, WorkerStatus::Released);
}

#[test]
fn worker_list_prints_a_table_and_json() {
    let fleet = Fleet::new();
    let id = fleet.mint("grok");
    let out = fleet
        .fleetctl()
        .args(["worker", "run", "--namespace", "merger", "--", "true"])
        .env("GITEA_MCP_CLIENT", "grok")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .output()
        .unwrap();
    assert!(out.status.success());
    let table = String::from_utf8(fleet.ctl(&["worker", "list"]).stdout).unwrap();
    assert!(table.starts_with("INSTANCE"), "{table}");
    assert!(table.contains(&id) && table.contains("merger") && table.contains("released"), "{table}");
    let json: serde_json::Value =
        serde_json::from_slice(&fleet.ctl(&["worker", "list", "--json"]).stdout).unwrap();
    assert_eq!(json[0]["client_instance_id"], serde_json::json!(id));
    assert_eq!(json[0]["status"], "released");
}

#[test]
fn worker_list_filters_by_instance_namespace_and_status() {
    let fleet = Fleet::new();
    let ids: Vec<String> = (0..2).map(|_| fleet.mint("grok")).collect();
    for (id, ns) in [(&ids[0], "merger"), (&ids[0], "author"), (&ids[1], "merger")] {
        let out = fleet
            .fleetctl()
            .args(["worker", "run", "--namespace", ns, "--", "true"])
            .env("GITEA_MCP_CLIENT", "grok")
            .env("GITEA_MCP_CLIENT_INSTANCE", id)
            .output()
            .unwrap();
        assert!(out.status.success());
    }
    let count = |args: &[&str]| -> usize {
        let mut all = vec!["worker", "list", "--json"];
        all.extend(args);
        serde_json::from_slice::<Vec<serde_json::Value>>(&fleet.ctl(&all).stdout).unwrap().len()
    };
    assert_eq!(count(&[]), 3);
    assert_eq!(count(&["--instance", &ids[0]]), 2);
    assert_eq!(count(&["--namespace", "merger"]), 2);
    assert_eq!(count(&["--instance", &ids[1], "--namespace", "merger"]), 1);
    assert_eq!(count(&["--status", "released"]), 3);
    assert_eq!(count(&["--status", "active"]), 0);
}

/// SIGTERM and SIGINT — how operators and supervisors stop things — are forwarded to the
/// worker, and a worker that then ends by that signal stopped cleanly: its row is
/// released, never left to turn stale like a crash.
#[test]
fn a_stop_signal_to_worker_run_is_a_clean_stop_that_releases_the_row() {
    for (signal, code) in [(nix::sys::signal::Signal::SIGTERM, 143), (nix::sys::signal::Signal::SIGINT, 130)]
    {
        let fleet = Fleet::new();
        let id = fleet.mint("codex");
        let mut wrapper = fleet
            .fleetctl()
            .args(["worker", "run", "--namespace", "author", "--", "sleep", "60"])
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &id)
            .spawn()
            .unwrap();
        wait_for(Duration::from_secs(30), || (fleet.workers_once_created()?.len() == 1).then_some(()));
        let pid = nix::unistd::Pid::from_raw(i32::try_from(wrapper.id()).unwrap());
        nix::sys::signal::kill(pid, signal).unwrap();
        let status = wrapper.wait().unwrap();
        assert_eq!(status.code(), Some(code), "{signal}");
        let row = &fleet.workers()[0];
        assert_eq!(row.status, WorkerStatus::Released, "{signal}");
    }
}

/// A command that cannot be executed is refused before anything is registered.
#[test]
fn a_command_that_cannot_run_is_refused_before_any_row_is_written() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let id = fleet.mint("codex");
    let not_executable = fleet.dir.path().join("script.sh");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    for command in ["/no/such/binary", "no-such-command-anywhere", not_executable.to_str().unwrap()] {
        let out = fleet
            .fleetctl()
            .args(["worker", "run", "--namespace", "author", "--", command])
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &id)
            .output()
            .unwrap();
        common::assert_one_line_error(&out, 2, "cannot run");
    }
    assert!(fleet.workers().is_empty(), "no row was written");
}

/// A worker slot's fencing epoch never repeats: after `registry prune` removed every row
/// of the slot, the next worker of it gets the epoch after the pruned one, and importing
/// the prune's export back leaves the slot with two rows of two epochs.
#[test]
fn a_slots_fencing_epoch_never_repeats_across_prune_and_import() {
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    let run_once = || {
        let out = fleet
            .fleetctl()
            .args(["worker", "run", "--namespace", "author", "--", "true"])
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &id)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    run_once();
    assert_eq!(fleet.workers()[0].fencing_epoch, Some(1));
    let export = fleet.dir.path().join("pruned.json");
    let out = fleet.ctl(&[
        "registry",
        "prune",
        "--before",
        "2999-01-01T00:00:00Z",
        "--export",
        export.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(fleet.workers().is_empty(), "the released row was pruned");
    run_once();
    assert_eq!(fleet.workers()[0].fencing_epoch, Some(2), "the epoch after the pruned one");
    let out = fleet.ctl(&["registry", "import", export.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut epochs: Vec<_> = fleet.workers().iter().map(|r| r.fencing_epoch).collect();
    epochs.sort_unstable();
    assert_eq!(epochs, [Some(1), Some(2)]);
    run_once();
    assert!(fleet.workers().iter().any(|r| r.fencing_epoch == Some(3)), "and on from there");
}

/// A whole backup carries each scope's fencing high-water mark: a registry restored
/// from it into a new file never hands out an epoch the old one handed out, even where
/// no row shows it any longer (pruned).
#[test]
fn a_restored_backup_never_hands_out_an_epoch_again() {
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    for _ in 0..3 {
        fleet.register_and_release(&id, "author");
    }
    let out = fleet.ctl(&[
        "registry",
        "prune",
        "--before",
        "2999-01-01T00:00:00Z",
        "--export",
        fleet.dir.path().join("pruned.json").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(fleet.workers().is_empty(), "the rows of epochs 1 to 3 were pruned");
    let backup = fleet.dir.path().join("backup.json");
    let out = fleet.ctl(&["registry", "export"]);
    assert!(out.status.success());
    std::fs::write(&backup, &out.stdout).unwrap();
    let restored = Fleet::new();
    let out = restored.ctl(&["registry", "import", backup.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    restored.register_and_release(&id, "author");
    assert_eq!(restored.workers()[0].fencing_epoch, Some(4), "never 1 again");
}

/// `registry prune --before` takes a bare date as its first instant, UTC; a malformed one
/// is bad input naming the flag.
#[test]
fn prune_takes_a_bare_date() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let export = fleet.dir.path().join("pruned.json");
    let out = fleet.ctl(&[
        "registry",
        "prune",
        "--before",
        "2026-12-01",
        "--export",
        export.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["before"], "2026-12-01T00:00:00.000Z");
    let out = fleet.ctl(&["registry", "prune", "--before", "2026-13-01", "--export", "other.json"]);
    common::assert_one_line_error(&out, 2, "--before");
}

/// `registry prune --before` takes an age before now as journalctl does (`7d`); a dry
/// run says what would go and changes nothing; an export path where a link was planted
/// is refused and nothing is pruned; a malformed age is bad input naming the flag.
#[test]
fn prune_takes_an_age_and_a_dry_run_changes_nothing() {
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    fleet.register_and_release(&id, "author");
    let said = |args: &[&str]| -> serde_json::Value {
        let out = fleet.ctl(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let week = said(&["registry", "prune", "--before", "7d", "--dry-run", "--json"]);
    assert_eq!(week["terminal_rows"], 0, "released just now, not a week ago: {week}");
    std::thread::sleep(Duration::from_millis(1100));
    let now = said(&["registry", "prune", "--before", "1s", "--dry-run", "--json"]);
    assert_eq!((now["terminal_rows"].as_u64(), now["export"].is_null()), (Some(1), true), "{now}");
    assert_eq!(fleet.workers().len(), 1, "a dry run prunes nothing");

    let target = fleet.dir.path().join("elsewhere.json");
    std::fs::write(&target, "kept").unwrap();
    let planted = fleet.dir.path().join("pruned.json");
    std::os::unix::fs::symlink(&target, &planted).unwrap();
    let out = fleet.ctl(&["registry", "prune", "--before", "1s", "--export", planted.to_str().unwrap()]);
    common::assert_one_line_error(&out, 2, "cannot write");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
    assert_eq!(fleet.workers().len(), 1, "nothing pruned without its export");

    let out = fleet.ctl(&["registry", "prune", "--before", "5x", "--dry-run"]);
    common::assert_one_line_error(&out, 2, "--before");
}

/// `worker list` shows the record, every row; `worker list --live` the live fleet the
/// snapshot reads: a running launch's rows, its released one included, and nothing of a
/// launch that has ended.
#[test]
fn worker_list_live_shows_the_live_fleet_and_the_default_the_record() {
    let fleet = Fleet::new();
    let ended = fleet.mint("codex");
    fleet.register_and_release(&ended, "author");
    let running = fleet.mint("codex");
    fleet.register_and_release(&running, "author");
    let mut worker = fleet
        .fleetctl()
        .args(["worker", "run", "--namespace", "reviewer", "--", "sleep", "30"])
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", &running)
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(10), || (fleet.workers().len() == 3).then_some(()));
    let launches = |args: &[&str]| -> Vec<String> {
        let out = fleet.ctl(args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        rows.iter().map(|r| r["client_instance_id"].as_str().unwrap_or_default().to_owned()).collect()
    };
    let all = launches(&["worker", "list", "--json"]);
    assert_eq!(all.len(), 3, "{all:?}");
    let live = launches(&["worker", "list", "--live", "--json"]);
    assert_eq!(live, [running.clone(), running], "the running launch's two rows, not the ended one's");
    let _ = worker.kill();
    let _ = worker.wait();
}

/// `worker list --limit N` lists a registry of any history a page at a time: N rows in
/// identity order, with the `--after` that lists on said on stderr; listing on from it
/// gives the rest, each row once; the filters select before the limit counts.
#[test]
fn a_limited_worker_list_pages_through_every_row_once() {
    let fleet = Fleet::new();
    let rows: Vec<serde_json::Value> = (0..2500)
        .map(|i| {
            serde_json::json!({
                "worker_identity": format!("wkr-author-{i:05}"),
                "namespace": "author",
                "status": if i % 10 == 0 { "retired" } else { "released" },
                "registered_at": "2026-07-30T12:00:00Z",
            })
        })
        .collect();
    let file = fleet.dir.path().join("rows.json");
    std::fs::write(&file, serde_json::to_vec(&serde_json::json!({ "worker_registrations": rows })).unwrap())
        .unwrap();
    assert!(fleet.ctl(&["registry", "import", file.to_str().unwrap()]).status.success());

    let names = |args: &[&str]| {
        let out = fleet.ctl(&[&["worker", "list", "-o", "name"], args].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let listed: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let next = stderr.split("--after ").nth(1).map(|s| s.trim().to_owned());
        (listed, next)
    };
    let (first, next) = names(&["--limit", "1200"]);
    assert_eq!(first.len(), 1200);
    assert_eq!(first[0], "worker/wkr-author-00000");
    assert_eq!(next.as_deref(), Some("wkr-author-01199"));
    let (rest, end) = names(&["--limit", "5000", "--after", "wkr-author-01199"]);
    assert_eq!((rest.len(), end), (1300, None), "the rest, and nothing more to list");
    let all: BTreeSet<String> = first.iter().chain(&rest).cloned().collect();
    assert_eq!(all.len(), 2500, "every row once");

    let (retired, next) = names(&["--status", "retired", "--limit", "3"]);
    assert_eq!(retired, ["worker/wkr-author-00000", "worker/wkr-author-00010", "worker/wkr-author-00020"]);
    assert_eq!(next.as_deref(), Some("wkr-author-00020"));
    let out = fleet.ctl(&["worker", "list", "--limit", "0"]);
    assert_eq!(out.status.code(), Some(2), "a limit of 0 is bad input");
}
