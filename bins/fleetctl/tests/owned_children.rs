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
    // The row names the worker's keeper, the command's parent, which lives exactly as
    // long as the worker's process tree.
    let stat = std::fs::read_to_string(format!("/proc/{worker}/stat")).unwrap();
    let keeper: u32 = stat.rsplit_once(')').unwrap().1.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(rows[0].pid.map(|p| p.get()), Some(keeper), "the row names the worker's keeper");
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

/// A command that builds a process tree: a grandchild, and a daemon that double-forks
/// away from its parent and appends to `log` every 50 ms while it lives. Every process
/// of the tree carries `FLEET_TEST_TREE=<token>` in its environment.
fn tree_script(log: &Path) -> String {
    format!(
        "echo \"start $FLEET_INIT_EPOCH\" >> {log}; sleep 300 & \
         ( setsid sh -c 'while true; do echo \"tick $FLEET_INIT_EPOCH\" >> {log}; sleep 0.05; done' & ); \
         sleep 300",
        log = log.display()
    )
}

/// The processes alive now whose environment carries `token`.
fn carrying(token: &str) -> Vec<i32> {
    let needle = format!("FLEET_TEST_TREE={token}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| alive(*pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
        })
        .collect()
}

/// Waits until the tree of `token` has started its daemon (the log has a tick).
fn wait_for_tree(token: &str, log: &Path) {
    wait_for(Duration::from_secs(20), || {
        let ticking = std::fs::read_to_string(log).is_ok_and(|l| l.contains("tick"));
        (ticking && carrying(token).len() >= 3).then_some(())
    });
}

/// Waits until no process of the tree of `token` is left, failing with the survivors.
fn assert_tree_gone(token: &str, what: &str) {
    let start = std::time::Instant::now();
    while !carrying(token).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(15), "{what}: survivors {:?}", carrying(token));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `fleetctl initialize --key schema --target-version 1 --ttl 2` running the tree of
/// [`tree_script`] marked with `token`, once its daemon has started.
fn initialize_tree(fleet: &Fleet, log: &Path, token: &str) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut owner = fleet.fleetctl();
    owner
        .env("FLEET_TEST_TREE", token)
        .args(["initialize", "--key", "schema", "--target-version", "1", "--ttl", "2", "--", "sh", "-c"])
        .arg(tree_script(log))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // As started from a terminal, where Ctrl-C reaches it: a test run in the background
    // of a non-interactive shell inherits SIGINT ignored (POSIX, "Asynchronous Lists"),
    // and an ignored signal stays ignored across exec.
    // SAFETY: signal(2) is async-signal-safe, which is all a pre_exec hook may call.
    unsafe {
        owner.pre_exec(|| {
            nix::sys::signal::signal(Signal::SIGINT, nix::sys::signal::SigHandler::SigDfl)
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    let owner = owner.spawn().unwrap();
    wait_for_tree(token, log);
    owner
}

fn token() -> String {
    format!("{}-{:?}", std::process::id(), std::time::Instant::now())
}

/// `initialize`'s owner SIGKILLed while its command's tree runs: the whole tree is gone
/// (the double-forked daemon included), and the next owner's run, after the lease
/// lapses, never overlaps it: every line the first run wrote comes before the second
/// run's start. The second run is told the next fencing epoch.
#[test]
fn a_killed_initialize_owner_takes_its_whole_tree_and_the_next_run_never_overlaps() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let log = fleet.dir.path().join("runs.log");
    let token = token();
    let mut owner = initialize_tree(&fleet, &log, &token);
    kill(Pid::from_raw(i32::try_from(owner.id()).unwrap()), Signal::SIGKILL).unwrap();
    let _ = owner.wait();
    assert_tree_gone(&token, "initialize owner killed");

    let second = format!(
        "echo \"start $FLEET_INIT_EPOCH\" >> {log}; echo \"done $FLEET_INIT_EPOCH\" >> {log}",
        log = log.display()
    );
    let out = fleet
        .fleetctl()
        .args([
            "initialize",
            "--key",
            "schema",
            "--target-version",
            "1",
            "--ttl",
            "2",
            "--",
            "sh",
            "-c",
            &second,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<String> = std::fs::read_to_string(&log).unwrap().lines().map(str::to_owned).collect();
    let second_start = lines.iter().position(|l| l == "start 2").expect("the second run at epoch 2");
    assert!(lines[..second_start].iter().all(|l| l.ends_with(" 1")), "{lines:?}");
    assert_eq!(
        &lines[second_start..],
        ["start 2", "done 2"],
        "nothing of the first run after the second began"
    );
}

/// `worker run`'s wrapper SIGKILLed, and stopped with SIGTERM: either way no process of
/// the worker's tree survives.
#[test]
fn a_worker_runs_tree_ends_with_its_wrapper_killed_or_stopped() {
    for signal in [Signal::SIGKILL, Signal::SIGTERM] {
        let fleet = Fleet::new();
        let id = fleet.mint("codex");
        let log = fleet.dir.path().join("worker.log");
        let token = token();
        let mut wrapper = fleet
            .fleetctl()
            .env("FLEET_TEST_TREE", &token)
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &id)
            .args(["worker", "run", "--namespace", "author", "--", "sh", "-c", &tree_script(&log)])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_tree(&token, &log);
        kill(Pid::from_raw(i32::try_from(wrapper.id()).unwrap()), signal).unwrap();
        let _ = wrapper.wait();
        assert_tree_gone(&token, &format!("worker run {signal}"));
    }
}

/// `connector run` SIGKILLed, and stopped with SIGTERM: no process of the command's tree
/// survives; on SIGTERM the lease is released too.
#[test]
fn a_connector_commands_tree_ends_with_its_owner_killed_or_stopped() {
    for signal in [Signal::SIGKILL, Signal::SIGTERM] {
        let fleet = Fleet::new();
        let policy = fleet.dir.path().join("policy.json");
        let rule = serde_json::json!({"tenant": "acme", "agent": "agent-7", "binding": "slack-main",
            "connector": "conn-a", "scopes": ["chat.read"], "max_ttl_s": 60});
        std::fs::write(&policy, serde_json::json!({"allow": [rule]}).to_string()).unwrap();
        let log = fleet.dir.path().join("connector.log");
        let token = token();
        let key = "connector:acme/agent-7/slack-main";
        let mut owner = fleet
            .fleetctl()
            .env("FLEET_TEST_TREE", &token)
            .args(["connector", "run", "--key", key, "--owner", "conn-a", "--scope", "chat.read", "--policy"])
            .arg(&policy)
            .args(["--", "sh", "-c", &tree_script(&log)])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_tree(&token, &log);
        kill(Pid::from_raw(i32::try_from(owner.id()).unwrap()), signal).unwrap();
        let status = owner.wait().unwrap();
        assert_tree_gone(&token, &format!("connector run {signal}"));
        if signal == Signal::SIGTERM {
            assert_eq!(status.code(), Some(143));
            let show = fleet.ctl(&["lease", "show", "--key", key, "--json"]);
            let lease: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
            assert_eq!(lease[0]["state"], "released", "{lease}");
        }
    }
}

/// A former owner paused past its lease (SIGSTOP) still has its command's tree running:
/// the owner that takes over ends that tree before it runs anything, so the two runs
/// never overlap; the paused owner, resumed, finds its lease gone and records nothing.
#[test]
fn a_takeover_ends_a_paused_former_owners_tree_before_running() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let log = fleet.dir.path().join("runs.log");
    let token = token();
    let mut owner = initialize_tree(&fleet, &log, &token);
    let owner_pid = Pid::from_raw(i32::try_from(owner.id()).unwrap());
    kill(owner_pid, Signal::SIGSTOP).unwrap();

    let second = format!(
        "echo \"start $FLEET_INIT_EPOCH\" >> {log}; sleep 0.5; echo \"done $FLEET_INIT_EPOCH\" >> {log}",
        log = log.display()
    );
    let out = fleet
        .fleetctl()
        .args([
            "initialize",
            "--key",
            "schema",
            "--target-version",
            "1",
            "--ttl",
            "2",
            "--",
            "sh",
            "-c",
            &second,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<String> = std::fs::read_to_string(&log).unwrap().lines().map(str::to_owned).collect();
    let second_start = lines.iter().position(|l| l == "start 2").expect("the second run at epoch 2");
    assert_eq!(
        &lines[second_start..],
        ["start 2", "done 2"],
        "nothing of the first run after the second began"
    );

    kill(owner_pid, Signal::SIGCONT).unwrap();
    let status = owner.wait().unwrap();
    assert_eq!(status.code(), Some(1), "the former owner lost its lease");
    assert!(carrying(&token).is_empty(), "no process of the first run is left");
}

/// `initialize` stopped with SIGTERM or SIGINT, as operators and supervisors stop
/// things: no process of its command's tree survives.
#[test]
fn a_stopped_initialize_owner_takes_its_whole_tree() {
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let fleet = Fleet::new();
        assert!(fleet.ctl(&["registry", "init"]).status.success());
        let log = fleet.dir.path().join("runs.log");
        let token = token();
        let mut owner = initialize_tree(&fleet, &log, &token);
        kill(Pid::from_raw(i32::try_from(owner.id()).unwrap()), signal).unwrap();
        let _ = owner.wait();
        assert_tree_gone(&token, &format!("initialize {signal}"));
    }
}

/// A `worker run` (TTL 1 s) of a new launch whose command sleeps a minute, and the
/// command's pid once it runs.
fn sleeping_worker(fleet: &Fleet) -> (std::process::Child, i32) {
    let id = fleet.mint("codex");
    let pidfile = fleet.dir.path().join("pid");
    let owner = fleet
        .fleetctl()
        .args(["worker", "run", "--namespace", "author", "--ttl", "1", "--", "sh", "-c"])
        .arg(format!("echo $$ > {}; exec sleep 60", pidfile.display()))
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (owner, pid_in(&pidfile))
}

/// Waits for `owner` to end, asserts it exited 1, and returns what it said.
fn ended_refused(owner: &mut std::process::Child) -> String {
    let status = owner.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(owner.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    stderr
}

/// A worker whose row is retired behind its back (here written into the registry file
/// directly, as an apply from another host, or an operator's hand, would leave it) must
/// not go on working unseen: within a heartbeat `worker run` ends its command's tree,
/// says why in one line and exits 1.
#[test]
fn a_worker_whose_row_is_retired_behind_its_back_stops_its_command() {
    let fleet = Fleet::new();
    let (mut owner, command) = sleeping_worker(&fleet);
    let conn = rusqlite::Connection::open(&fleet.registry).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let retired = conn
        .execute("UPDATE worker_registrations SET status = 'retired', retired_by = 'elsewhere'", [])
        .unwrap();
    assert_eq!(retired, 1);
    let stderr = ended_refused(&mut owner);
    assert!(stderr.contains("no longer registered"), "{stderr}");
    wait_for(Duration::from_secs(5), || (!alive(command)).then_some(()));
}

/// A worker whose registry's schema an upgrade moves on (docs/UPGRADING.md): while the
/// newer schema says builds of this one's version may use it (a step that only adds,
/// `oldest_build` unmoved) the worker runs on; once it says they may not (a contracting
/// step raised `oldest_build`), the worker is refused for good, and within one TTL
/// `worker run` ends its command's tree, names the versions and exits 1. Written here
/// as such upgrades leave the file: a later `user_version` and its compatibility row.
#[test]
fn a_worker_runs_on_through_an_upgrade_it_may_use_and_stops_at_one_it_may_not() {
    let fleet = Fleet::new();
    let (mut owner, command) = sleeping_worker(&fleet);
    let conn = rusqlite::Connection::open(&fleet.registry).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let ours: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    let upgrade = |oldest_build: i64| {
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE; DELETE FROM fleet_schema_compatibility;              INSERT INTO fleet_schema_compatibility VALUES ({oldest_build});              PRAGMA user_version = {}; COMMIT;",
            ours + 1
        ))
        .unwrap();
    };
    upgrade(ours);
    // Three TTLs of 1 s: three schema checks, each saying this build may go on.
    std::thread::sleep(Duration::from_secs(3));
    assert!(owner.try_wait().unwrap().is_none() && alive(command), "the worker runs on");
    upgrade(ours + 1);
    let stderr = ended_refused(&mut owner);
    assert!(stderr.contains(&format!("registry schema version {} is newer", ours + 1)), "{stderr}");
    wait_for(Duration::from_secs(5), || (!alive(command)).then_some(()));
}

/// A worker whose registry is removed under it (the file and its log deleted) is
/// refused for good, not merely cut off: it must not go on heartbeating into the
/// deleted file, unseen by everyone. Within a heartbeat or two `worker run` ends its
/// command's tree, says the registry was removed, and exits 1.
#[test]
fn a_worker_whose_registry_is_removed_stops_its_command() {
    let fleet = Fleet::new();
    let (mut owner, command) = sleeping_worker(&fleet);
    for suffix in ["", "-wal", "-shm"] {
        let mut file = fleet.registry.clone().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
    let stderr = ended_refused(&mut owner);
    assert!(stderr.contains("removed") || stderr.contains("does not exist"), "{stderr}");
    wait_for(Duration::from_secs(5), || (!alive(command)).then_some(()));
}
