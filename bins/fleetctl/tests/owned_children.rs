//! `fleetctl` owns the processes it starts: a worker runs only once registered, and an
//! owner killed outright takes its command with it.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{Fleet, alive, wait_for};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Waits until `path` holds a pid, and returns it.
fn pid_in(path: &Path) -> i32 {
    wait_for(Duration::from_secs(10), || std::fs::read_to_string(path).ok()?.trim().parse().ok())
}

#[test]
fn a_worker_never_runs_when_it_cannot_be_registered() {
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    let marker = fleet.dir.path().join("ran");
    // The registry location is a directory: registration must fail.
    let out = fleet
        .fleetctl()
        .env("FLEET_REGISTRY", fleet.dir.path())
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .args(["worker", "run", "--namespace", "author", "--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!marker.exists(), "the worker command ran although it was never registered");
}

#[test]
fn a_registered_worker_runs_with_the_pid_the_registry_holds() {
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    let pidfile = fleet.dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let mut owner = fleet
        .fleetctl()
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .args(["worker", "run", "--namespace", "author", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let worker = pid_in(&pidfile);
    let rows = fleet.workers();
    assert_eq!(
        rows[0].pid.map(|p| p.get()),
        Some(u32::try_from(worker).unwrap()),
        "the row names the worker"
    );
    let identity = fleet_probe::process_identity(rows[0].pid.unwrap()).unwrap();
    assert_eq!(Some(identity.process_start_time), rows[0].process_start_time, "the same incarnation");

    // SIGKILL the supervisor: the worker goes with it.
    kill(Pid::from_raw(i32::try_from(owner.id()).unwrap()), Signal::SIGKILL).unwrap();
    let _ = owner.wait();
    wait_for(Duration::from_secs(5), || (!alive(worker)).then_some(()));
}

#[test]
fn a_killed_initialize_owner_takes_its_command_with_it() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let pidfile = fleet.dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let mut owner = fleet
        .fleetctl()
        .args(["initialize", "--key", "schema", "--target-version", "1", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let command = pid_in(&pidfile);
    assert!(alive(command));
    kill(Pid::from_raw(i32::try_from(owner.id()).unwrap()), Signal::SIGKILL).unwrap();
    let _ = owner.wait();
    wait_for(Duration::from_secs(5), || (!alive(command)).then_some(()));
}
