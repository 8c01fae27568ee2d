//! A worker in its own PID namespace (as in a container, here `unshare -p`) shares the
//! host's machine id and boot id, but its pid means nothing to the host's process table.
//! The host's probe must say it cannot tell, never that the worker is gone.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Fleet, sibling_bin, wait_for};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Whether this machine lets us make a PID namespace (root, or user namespaces allowed).
fn pid_namespaces_available() -> bool {
    Command::new("unshare")
        .args(["-p", "-f", "--kill-child", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The host pid of the one child of `parent`.
fn only_child(parent: u32) -> i32 {
    let mut text = String::new();
    std::fs::File::open(format!("/proc/{parent}/task/{parent}/children"))
        .and_then(|mut f| f.read_to_string(&mut text))
        .expect("children of unshare");
    text.split_whitespace().next().and_then(|p| p.parse().ok()).expect("unshare has a child")
}

#[test]
fn a_live_worker_in_another_pid_namespace_is_never_retired() {
    if !pid_namespaces_available() {
        eprintln!(
            "skipped: this machine cannot create a PID namespace (unshare -p needs root or user namespaces)"
        );
        return;
    }
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    let mut unshare = Command::new("unshare")
        .args(["-p", "-f", "--kill-child", "--"])
        .arg(sibling_bin("fleet-mcp"))
        .args(["--namespace", "author", "--ttl", "2"])
        .env("FLEET_REGISTRY", &fleet.registry)
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .current_dir(fleet.dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("unshare");
    let row = wait_for(Duration::from_secs(10), || fleet.workers_once_created()?.into_iter().next());
    assert_eq!(row.pid.map(|p| p.get()), Some(1), "inside its namespace the worker is pid 1");
    let host_ns = fleet_probe::own_pid_namespace().unwrap();
    assert!(row.pid_namespace.is_some_and(|ns| ns != host_ns), "the row records the worker's namespace");

    // While it heartbeats, the snapshot counts it live: the host cannot see it, which is
    // not the same as seeing it gone.
    let out = fleet.ctl(&["snapshot", "--json"]);
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(snap["counts"]["live_worker_count"], 1, "{snap}");

    // Pause it past its TTL: the row goes stale, and still may not be retired.
    let worker = Pid::from_raw(only_child(unshare.id()));
    kill(worker, Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(2600));
    assert!(fleet.ctl(&["registry", "sweep"]).status.success());
    let out = fleet.ctl(&["retire", "plan", "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["candidate_count"], 0, "{plan}");
    assert_eq!(plan["preserved"][0]["reason_code"], "pid_liveness_unknown", "{plan}");
    let apply = fleet.ctl(&[
        "retire",
        "apply",
        "--registry-fingerprint",
        plan["registry_fingerprint"].as_str().unwrap(),
        "--candidate-fingerprint",
        plan["candidate_fingerprint"].as_str().unwrap(),
        "--workers",
        row.worker_identity.as_str(),
    ]);
    assert_ne!(apply.status.code(), Some(0), "{}", String::from_utf8_lossy(&apply.stdout));
    let after = fleet.workers();
    assert_eq!(after[0].status, fleet_registry::WorkerStatus::Active, "a live worker is never retired");

    kill(worker, Signal::SIGCONT).unwrap();
    drop(unshare.stdin.take());
    let _ = unshare.wait();
}

/// `fleetctl` as a container's entrypoint is pid 1 of its PID namespace (`unshare -p -f
/// --mount-proc`, as a container runtime starts it): every command that keeps a process
/// still runs it — `worker run`, `initialize` and `connector run` — and passes its exit
/// status through.
#[test]
fn every_keeping_command_runs_its_command_as_pid_1() {
    if !pid_namespaces_available() {
        eprintln!(
            "skipped: this machine cannot create a PID namespace (unshare -p needs root or user namespaces)"
        );
        return;
    }
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let policy = fleet.dir.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"allow": [{"tenant": "t", "agent": "a", "binding": "b", "connector": "c1", "scopes": ["s"], "max_ttl_s": 60}]}"#,
    )
    .unwrap();
    let policy = policy.to_string_lossy().into_owned();
    let instance = fleet.mint("codex");
    let runs: [&[&str]; 3] = [
        &["worker", "run", "--namespace", "author", "--"],
        &["initialize", "--key", "entry", "--target-version", "1", "--"],
        &[
            "connector",
            "run",
            "--key",
            "connector:t/a/b",
            "--owner",
            "c1",
            "--scope",
            "s",
            "--policy",
            &policy,
            "--",
        ],
    ];
    for args in runs {
        let out = Command::new("unshare")
            .args(["-p", "-f", "--mount-proc", "--kill-child", "--"])
            .arg(common::fleetctl_bin())
            .args(args)
            .args(["sh", "-c", "echo \"hi from $$\"; exit 7"])
            .env("FLEET_REGISTRY", &fleet.registry)
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &instance)
            .current_dir(fleet.dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stdout.contains("hi from"), "{args:?} ran its command: {stdout} {stderr}");
        let expected = if args[0] == "initialize" { 1 } else { 7 };
        assert_eq!(out.status.code(), Some(expected), "{args:?}: {stderr}");
    }
}

/// The zombies among the children of host pid `pid`.
fn zombie_children(pid: i32) -> usize {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .filter(|c| {
            std::fs::read_to_string(format!("/proc/{c}/stat"))
                .ok()
                .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
                .unwrap_or(false)
        })
        .count()
}

/// `worker run` and `serve` as pid 1 of a PID namespace (a container's entrypoint) reap
/// the orphans the kernel hands them: processes started from outside the namespace
/// (`docker exec`, here nsenter(1) into it) whose shell exits before its background
/// jobs leave those jobs to pid 1 (pid_namespaces(7)); none stays a zombie.
#[test]
fn as_pid_1_worker_run_and_serve_leave_no_zombies() {
    if !pid_namespaces_available() {
        eprintln!(
            "skipped: this machine cannot create a PID namespace (unshare -p needs root or user namespaces)"
        );
        return;
    }
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let instance = fleet.mint("codex");
    let entrypoints: [&[&str]; 2] = [
        &["worker", "run", "--namespace", "author", "--", "sleep", "60"],
        &["serve", "--listen", "127.0.0.1:0"],
    ];
    for args in entrypoints {
        let mut unshare = Command::new("unshare")
            .args(["-p", "-f", "--mount-proc", "--kill-child", "--"])
            .arg(common::fleetctl_bin())
            .args(args)
            .env("FLEET_REGISTRY", &fleet.registry)
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &instance)
            .current_dir(fleet.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let init = wait_for(Duration::from_secs(10), || {
            let children =
                std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", unshare.id())).ok()?;
            children.split_whitespace().next()?.parse::<i32>().ok()
        });
        std::thread::sleep(Duration::from_millis(500));
        for _ in 0..5 {
            let status = Command::new("nsenter")
                .args(["-t", &init.to_string(), "-p", "-m", "--", "sh", "-c", "sleep 0.2 & exit 0"])
                .status()
                .unwrap();
            assert!(status.success());
        }
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(zombie_children(init), 0, "{args:?} as pid 1 left zombies");
        let _ = kill(Pid::from_raw(i32::try_from(unshare.id()).unwrap()), Signal::SIGKILL);
        let _ = unshare.wait();
    }
}
