//! `fleetctl connector run` holds a binding, runs its command under a validated grant,
//! and stops the command the moment a takeover fences it out.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{Fleet, alive, wait_for};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const KEY: &str = "connector:acme/agent-7/slack-main";

fn policy(fleet: &Fleet) -> std::path::PathBuf {
    let rule = |connector: &str| {
        serde_json::json!({"tenant": "acme", "agent": "agent-7", "binding": "slack-main",
            "connector": connector, "scopes": ["chat.read"], "max_ttl_s": 60})
    };
    let path = fleet.dir.path().join("policy.json");
    std::fs::write(&path, serde_json::json!({"allow": [rule("conn-a"), rule("conn-b")]}).to_string())
        .unwrap();
    path
}

/// conn-a holding the binding with a 1 s TTL, its command a `sleep` that wrote its pid:
/// the `connector run` process and the command's pid.
fn conn_a_holding(fleet: &Fleet, policy: &std::path::Path) -> (std::process::Child, i32) {
    let pidfile = fleet.dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let holder = fleet
        .fleetctl()
        .args(["connector", "run", "--key", KEY, "--owner", "conn-a", "--scope", "chat.read", "--ttl", "1"])
        .arg("--policy")
        .arg(policy)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let command: i32 =
        wait_for(Duration::from_secs(10), || std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok());
    (holder, command)
}

#[test]
fn the_command_runs_with_its_context_and_its_exit_code_passes_through() {
    let fleet = Fleet::new();
    let policy = policy(&fleet);
    let seen = fleet.dir.path().join("seen");
    let script = format!(
        "echo \"$FLEET_CONNECTOR_TENANT $FLEET_CONNECTOR_BINDING $FLEET_CONNECTOR_ID $FLEET_CONNECTOR_FENCING_EPOCH $FLEET_CONNECTOR_SCOPES\" > {}; cat \"$FLEET_CONNECTOR_CONTEXT\" >> {}; exit 7",
        seen.display(),
        seen.display()
    );
    let out = fleet
        .fleetctl()
        .args(["connector", "run", "--key", KEY, "--owner", "conn-a", "--scope", "chat.read", "--policy"])
        .arg(&policy)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", String::from_utf8_lossy(&out.stderr));
    let seen = std::fs::read_to_string(&seen).unwrap();
    assert!(seen.starts_with("acme slack-main conn-a 1 chat.read\n"), "{seen}");
    assert!(seen.contains("\"lease_id\""), "{seen}");
    let log = fleet.ctl(&["lease", "audit", "--key", KEY, "--json"]);
    let log: serde_json::Value = serde_json::from_slice(&log.stdout).unwrap();
    let events: Vec<String> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{}:{}", e["event"].as_str().unwrap(), e["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(&events[..3], ["acquire:acquired", "grant_issue:issued", "grant_validate:valid"]);
    assert_eq!(events.last().map(String::as_str), Some("release:released"));
    assert!(!log.to_string().contains("chat.read"), "no scope in the audit log");
}

#[test]
fn without_a_policy_that_allows_it_nothing_runs() {
    let fleet = Fleet::new();
    let other = fleet.dir.path().join("other.json");
    std::fs::write(&other, r#"{"allow": []}"#).unwrap();
    let marker = fleet.dir.path().join("ran");
    let out = fleet
        .fleetctl()
        .args(["connector", "run", "--key", KEY, "--owner", "conn-a", "--scope", "chat.read", "--policy"])
        .arg(&other)
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("policy_denied"));
    assert!(!marker.exists());
}

/// A holder paused (SIGSTOP) cannot renew: its keeper, which holds the deadline of the
/// last committed renewal, ends the command before the lease can lapse, so by the time
/// another connector may take the binding over nothing of the former holder acts. The
/// holder, resumed, says in one line that its lease lapsed and exits 1.
#[test]
fn a_paused_holders_command_is_ended_before_its_lease_can_lapse() {
    let fleet = Fleet::new();
    let policy = policy(&fleet);
    let (mut holder, command) = conn_a_holding(&fleet, &policy);

    let holder_pid = Pid::from_raw(i32::try_from(holder.id()).unwrap());
    kill(holder_pid, Signal::SIGSTOP).unwrap();
    let paused = std::time::Instant::now();
    // The lease (1 s TTL) may lapse 1 s after the last renewal was sent; the keeper has
    // ended the command by then.
    wait_for(Duration::from_secs(5), || (!alive(command)).then_some(()));
    std::thread::sleep(Duration::from_millis(1200).saturating_sub(paused.elapsed()));
    let out = fleet
        .fleetctl()
        .args(["lease", "takeover", "--key", KEY, "--owner", "conn-b", "--expected-epoch", "1"])
        .args(["--scope", "chat.read", "--ttl", "30", "--policy"])
        .arg(&policy)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!alive(command), "the former holder's command ended before the takeover");

    kill(holder_pid, Signal::SIGCONT).unwrap();
    let status = holder.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let mut stderr = String::new();
    std::io::Read::read_to_string(holder.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("lapsed"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
}

/// A `connector run` that ended without releasing (SIGKILL) leaves its lease held; the
/// same connector, started again, resumes it at the same epoch (seed 002's reconnect
/// keeps the binding) instead of being refused `lease_held` until it lapses.
#[test]
fn a_restarted_connector_resumes_its_own_live_lease_at_the_same_epoch() {
    let fleet = Fleet::new();
    let policy = policy(&fleet);
    let first = fleet.dir.path().join("first");
    let script = format!("echo $FLEET_CONNECTOR_FENCING_EPOCH > {}; exec sleep 60", first.display());
    let mut holder = fleet
        .fleetctl()
        .args(["connector", "run", "--key", KEY, "--owner", "conn-a", "--scope", "chat.read", "--ttl", "60"])
        .arg("--policy")
        .arg(&policy)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(10), || std::fs::read_to_string(&first).ok().filter(|e| !e.is_empty()));
    kill(Pid::from_raw(i32::try_from(holder.id()).unwrap()), Signal::SIGKILL).unwrap();
    let _ = holder.wait();

    let second = fleet.dir.path().join("second");
    let out = fleet
        .fleetctl()
        .args(["connector", "run", "--key", KEY, "--owner", "conn-a", "--scope", "chat.read", "--ttl", "60"])
        .arg("--policy")
        .arg(&policy)
        .args(["--", "sh", "-c", &format!("echo $FLEET_CONNECTOR_FENCING_EPOCH > {}", second.display())])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&first).unwrap().trim(), "1");
    assert_eq!(std::fs::read_to_string(&second).unwrap().trim(), "1", "the same epoch");
    // Another connector is still refused while the lease lives.
    let out = fleet
        .fleetctl()
        .args(["lease", "acquire", "--key", KEY, "--owner", "conn-b", "--scope", "chat.read", "--policy"])
        .arg(&policy)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
}

/// The policy is read again on every renewal: a grant withdrawn from the file stops the
/// command at the next renewal.
#[test]
fn a_policy_withdrawn_while_running_stops_the_command() {
    let fleet = Fleet::new();
    let policy = policy(&fleet);
    let (mut holder, command) = conn_a_holding(&fleet, &policy);
    let withdrawn = fleet.dir.path().join("withdrawn.json");
    std::fs::write(&withdrawn, r#"{"allow": []}"#).unwrap();
    std::fs::rename(&withdrawn, &policy).unwrap();
    let status = holder.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let mut stderr = String::new();
    std::io::Read::read_to_string(holder.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("policy_denied"), "{stderr}");
    wait_for(Duration::from_secs(5), || (!alive(command)).then_some(()));
}

/// A holder paused past its lease (SIGSTOP) still has its command running; a `connector
/// run` of another connector that takes the binding over ends that command before its
/// own starts.
#[test]
fn a_takeover_by_connector_run_ends_a_paused_former_holders_command_first() {
    let fleet = Fleet::new();
    let policy = policy(&fleet);
    let (mut holder, command) = conn_a_holding(&fleet, &policy);
    let holder_pid = Pid::from_raw(i32::try_from(holder.id()).unwrap());
    kill(holder_pid, Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let seen = fleet.dir.path().join("seen");
    // Alive is any state but zombie (ended, waiting to be reaped) or gone.
    let check = format!(
        "s=$(sed 's/.*) //' /proc/{command}/stat 2>/dev/null | cut -d' ' -f1); \
         case \"$s\" in ''|Z|X) echo alone > {0};; *) echo overlap > {0};; esac",
        seen.display()
    );
    let out = fleet
        .fleetctl()
        .args(["connector", "run", "--key", KEY, "--owner", "conn-b", "--scope", "chat.read", "--ttl", "30"])
        .arg("--policy")
        .arg(&policy)
        .args(["--", "sh", "-c", &check])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&seen).unwrap().trim(), "alone");
    kill(holder_pid, Signal::SIGCONT).unwrap();
    assert_eq!(holder.wait().unwrap().code(), Some(1));
}

/// A second `connector run` of the same connector for the same binding, started while
/// the first lives, is refused (exit 1, naming the live holder's pid) instead of resuming
/// the first's tenure beside it; once the first is gone, a restart resumes as before.
#[test]
fn a_second_run_of_a_live_holder_is_refused_naming_it() {
    let fleet = Fleet::new();
    let policy = policy(&fleet);
    let run = |script: &str| run_as_conn_a(&fleet, &policy, script);
    let ran = fleet.dir.path().join("ran");
    let mut first = run("exec sleep 60").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_for(Duration::from_secs(10), || {
        let out = fleet.ctl(&["lease", "show", "--key", KEY, "--json"]);
        String::from_utf8_lossy(&out.stdout).contains("conn-a").then_some(())
    });
    let out = run(&format!("touch {}", ran.display())).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("pid {}", first.id())), "names the live holder: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!ran.exists(), "the second run's command never ran");

    kill(Pid::from_raw(i32::try_from(first.id()).unwrap()), Signal::SIGKILL).unwrap();
    let _ = first.wait();
    let out = run(&format!("touch {}", ran.display())).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(ran.exists(), "a restart after the first died resumes");
}

/// `connector run` of connector `conn-a` on the test binding, running `script`.
fn run_as_conn_a(fleet: &Fleet, policy: &std::path::Path, script: &str) -> std::process::Command {
    let mut cmd = fleet.fleetctl();
    cmd.args(["connector", "run", "--key", KEY, "--owner", "conn-a", "--scope", "chat.read", "--ttl", "30"])
        .arg("--policy")
        .arg(policy)
        .args(["--", "sh", "-c", script]);
    cmd
}

/// The same with each run in another environment (its own `XDG_RUNTIME_DIR`, none and
/// another `HOME`, an `XDG_STATE_HOME`): the lock is the host's, not the environment's,
/// and the lease row's live holder on this host is never resumed beside.
#[test]
fn a_second_run_in_another_environment_is_refused_too() {
    let fleet = Fleet::new();
    let policy = policy(&fleet);
    let dir = fleet.dir.path();
    let run = |script: &str, env: &[(&str, std::path::PathBuf)]| {
        let mut cmd = run_as_conn_a(&fleet, &policy, script);
        cmd.env_remove("XDG_RUNTIME_DIR").env_remove("XDG_STATE_HOME");
        for (k, v) in env {
            std::fs::create_dir_all(v).unwrap();
            cmd.env(k, v);
        }
        cmd
    };
    let ran = dir.join("ran");
    let mut first = run("exec sleep 60", &[("XDG_RUNTIME_DIR", dir.join("xa"))])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(10), || {
        let out = fleet.ctl(&["lease", "show", "--key", KEY, "--json"]);
        String::from_utf8_lossy(&out.stdout).contains("conn-a").then_some(())
    });
    let touch = format!("touch {}", ran.display());
    for env in [
        vec![("XDG_RUNTIME_DIR", dir.join("xb"))],
        vec![("HOME", dir.join("other-home"))],
        vec![("XDG_STATE_HOME", dir.join("state"))],
    ] {
        let out = run(&touch, &env).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{env:?}: {stderr}");
        assert!(stderr.contains(&format!("pid {}", first.id())), "{env:?} names the live holder: {stderr}");
        assert!(!ran.exists(), "{env:?}: the second run's command never ran");
    }
    assert!(first.try_wait().unwrap().is_none(), "the first run's command was left alone");
    kill(Pid::from_raw(i32::try_from(first.id()).unwrap()), Signal::SIGKILL).unwrap();
    let _ = first.wait();
}

/// A run of the same connector on another host, started while the first lives, is
/// refused (exit 1, naming the live run's pid and host) instead of resuming the first's
/// tenure beside it: the host lock cannot see across hosts, so the lease row records the
/// process that holds the tenure. Once the first is gone (SIGKILL, its lease still live)
/// the other host is still refused — nothing there can prove the first gone — while a
/// restart on the first's own host resumes at the same epoch. The other host is played
/// as `hostile.rs` plays one (a machine id of its own in a mount namespace).
#[test]
fn a_run_of_a_live_holder_on_another_host_is_refused_naming_it() {
    if !common::mount_namespaces_available() {
        eprintln!("skipped: another host is played in a mount namespace, which needs root here");
        return;
    }
    let fleet = Fleet::new();
    let policy = policy(&fleet);
    let args = ["connector", "run", "--key", KEY, "--owner", "conn-a", "--scope", "chat.read", "--ttl", "30"];
    let ran = fleet.dir.path().join("ran");
    let record = format!("echo $FLEET_CONNECTOR_FENCING_EPOCH >> {}", ran.display());
    let mut first = fleet
        .fleetctl()
        .args(args)
        .arg("--policy")
        .arg(&policy)
        .args(["--", "sh", "-c", &format!("{record}; exec sleep 60")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(10), || std::fs::read_to_string(&ran).ok().filter(|r| !r.is_empty()));
    let elsewhere = || {
        fleet
            .fleetctl_on_another_host()
            .args(args)
            .arg("--policy")
            .arg(&policy)
            .args(["--", "sh", "-c", &record])
            .output()
            .unwrap()
    };
    let this_host = std::fs::read_to_string("/etc/machine-id").unwrap();
    let out = elsewhere();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("pid {} on host {}", first.id(), this_host.trim())), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");

    kill(Pid::from_raw(i32::try_from(first.id()).unwrap()), Signal::SIGKILL).unwrap();
    let _ = first.wait();
    let out = elsewhere();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&ran).unwrap().trim(), "1", "only the first run's command ran");

    let out =
        fleet.fleetctl().args(args).arg("--policy").arg(&policy).args(["--", "sh", "-c", &record]).output();
    let out = out.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "1\n1\n", "resumed on its own host at the same epoch");
}
