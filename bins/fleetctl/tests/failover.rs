//! Fencing epochs across a PostgreSQL failover, on a primary and streaming standby of
//! the test's own (`common::pg_cluster`), reached through one multi-host URL with
//! `target_session_attrs=read-write`, as operators connect:
//!
//! * asynchronous replication: a grant the standby never received is lost when the
//!   primary crashes and the standby is promoted. The default policy refuses grants
//!   while an asynchronous standby streams; under the `asynchronous` policy each grant
//!   is warned of, and after the promotion the registry sees the new server history and
//!   refuses the grant that would repeat the lost epoch until an operator accepts it,
//!   which moves every new epoch past any the old history could have handed out;
//! * synchronous replication (`synchronous_standby_names = '*'`, policy `synchronous`):
//!   real `connector run` holders contend while the primary crashes mid-grant and the
//!   standby is promoted; every epoch a command acted on is on the promoted server, no
//!   epoch is acted on by two holders, and grants carry on once a new standby is
//!   attached, with no operator.
//!
//! Needs the PostgreSQL server binaries (`pg_config --bindir`); skips, saying why, where
//! they are missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::pg_cluster::{PgServer, multi_host_url, server_binaries};
use common::{acts, assert_one_line_error, fleetctl_bin, wait_for};

const KEY: &str = "workflow:failover/deploy";
const CONNECTOR_KEY: &str = "connector:acme/agent-9/chat";

/// The server binaries, or why the test cannot run here.
fn binaries() -> Option<PathBuf> {
    let Some(bin) = server_binaries() else {
        eprintln!("skipped: the PostgreSQL server binaries (pg_config --bindir) are not installed");
        return None;
    };
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if root && !Command::new("id").arg("postgres").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: running as root, and there is no postgres user to run the servers as");
        return None;
    }
    Some(bin)
}

fn ctl(url: &str, dir: &Path, args: &[&str]) -> Output {
    Command::new(fleetctl_bin())
        .args(args)
        .env("FLEET_REGISTRY", url)
        .env_remove("GITEA_MCP_LAUNCH_PROCESS")
        .current_dir(dir)
        .output()
        .unwrap()
}

/// The epoch a successful lease command granted.
fn granted(out: &Output) -> u64 {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    answer["lease"]["fencing_epoch"].as_u64().unwrap()
}

#[test]
fn after_an_asynchronous_failover_no_epoch_is_handed_out_twice() {
    let Some(bin) = binaries() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut primary = PgServer::primary(&bin, dir.path(), "primary", "");
    let mut standby = PgServer::standby_of(&primary, dir.path(), "standby", "");
    let url = multi_host_url(&[&primary, &standby]);
    let run = |args: &[&str]| ctl(&url, dir.path(), args);
    assert!(run(&["registry", "init"]).status.success());

    // The default policy: a grant the asynchronous standby could lose is refused.
    let first = ["lease", "acquire", "--key", KEY, "--owner", "first", "--ttl", "1", "--json"];
    assert_one_line_error(&run(&first), 1, "asynchronous standby");
    let shown = run(&["registry", "replication"]);
    assert!(String::from_utf8_lossy(&shown.stdout).contains("1 streaming"), "{shown:?}");

    // The operator accepts the risk: every grant says so.
    assert!(run(&["registry", "replication", "--policy", "asynchronous"]).status.success());
    let out = run(&first);
    assert_eq!(granted(&out), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("confirmed by no standby"), "{out:?}");

    // The standby has the first grant, then hears nothing more; the second grant, an
    // acknowledged takeover at epoch 2, lives on the primary alone, which then crashes.
    standby.caught_up_with(&primary);
    standby.stop();
    std::thread::sleep(Duration::from_millis(1_200));
    let second = ["lease", "takeover", "--key", KEY, "--owner", "second", "--expected-epoch", "1", "--json"];
    assert_eq!(granted(&run(&second)), 2);
    primary.crash();
    standby.start();
    standby.promote();

    // Through the same URL the promoted standby answers, its lease still at epoch 1: a
    // takeover there would hand out epoch 2 again. The registry sees the new history.
    let third = ["lease", "takeover", "--key", KEY, "--owner", "third", "--expected-epoch", "1", "--json"];
    assert_one_line_error(&run(&third), 1, "server history changed");
    let status = run(&["registry", "replication", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["grants"], "refused", "{status}");
    assert_ne!(status["server"]["history"]["timeline"], status["recorded"]["history"]["timeline"]);

    // Once the operator accepts the new history, every new epoch is past any the lost
    // history could have handed out.
    let accepted =
        run(&["registry", "accept-history", "--reason", "primary lost; old holders stopped", "--json"]);
    assert!(accepted.status.success(), "{accepted:?}");
    let accepted: serde_json::Value = serde_json::from_slice(&accepted.stdout).unwrap();
    let floor = accepted["epoch_floor"].as_u64().unwrap();
    assert!(floor > 2, "{accepted}");
    let epoch = granted(&run(&third));
    assert!(epoch > floor, "epoch {epoch} after accepting a floor of {floor}");
}

#[test]
fn a_synchronous_failover_during_grants_repeats_no_epoch() {
    let Some(bin) = binaries() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut primary = PgServer::primary(&bin, dir.path(), "primary", "synchronous_standby_names = '*'");
    let standby = PgServer::standby_of(&primary, dir.path(), "standby", "synchronous_standby_names = ''");
    let url = multi_host_url(&[&primary, &standby]);
    assert!(ctl(&url, dir.path(), &["registry", "init"]).status.success());
    let set = ctl(&url, dir.path(), &["registry", "replication", "--policy", "synchronous"]);
    assert!(set.status.success(), "{set:?}");

    let policy = dir.path().join("policy.json");
    let allow: Vec<_> = ["left", "right"]
        .iter()
        .map(|c| {
            serde_json::json!({"tenant": "acme", "agent": "agent-9", "binding": "chat",
                "connector": c, "scopes": ["chat.read"], "max_ttl_s": 60})
        })
        .collect();
    std::fs::write(&policy, serde_json::json!({ "allow": allow }).to_string()).unwrap();
    let log = dir.path().join("acts.log");
    std::fs::write(&log, "").unwrap();
    let read_log = || std::fs::read_to_string(&log).unwrap();

    // Two holders, each a loop of `connector run` whose command ticks for a moment and
    // ends, so a new tenure (a new epoch) is granted every half second or so.
    let contenders: Vec<Contender> = ["left", "right"]
        .iter()
        .map(|name| Contender::start(name, &url, &policy, &log, dir.path()))
        .collect();
    wait_for(Duration::from_secs(60), || (acts::epochs_acted(&read_log()) >= 4).then_some(()));

    primary.crash();
    let crashed_at = read_log().len();
    let before = max_epoch(&read_log());
    standby.promote();
    // The survivor has no synchronous standby: grants wait (refused, each saying why)
    // until one is attached, as a failover manager would attach the old primary.
    standby.execute("ALTER SYSTEM SET synchronous_standby_names = '*'");
    standby.execute("SELECT pg_reload_conf()");
    let _attached = PgServer::standby_of(&standby, dir.path(), "standby-2", "synchronous_standby_names = ''");
    // Epochs granted after the crash (the holder of the crash's moment may tick on).
    let after = |log: &str| {
        let later = &log[crashed_at.min(log.len())..];
        let epochs: std::collections::BTreeSet<u64> = later
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
            .filter(|e| *e > before)
            .collect();
        epochs.len()
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    while after(&read_log()) < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(contenders);
    let log_text = read_log();
    assert!(after(&log_text) >= 3, "grants did not carry on after the failover:\n{log_text}");

    acts::check(&log_text);
    let mut owners: std::collections::BTreeMap<u64, std::collections::BTreeSet<&str>> = Default::default();
    for line in log_text.lines() {
        let mut parts = line.split_whitespace().skip(1);
        let (Some(epoch), Some(actor)) = (parts.next(), parts.next()) else { continue };
        let (Ok(epoch), Some(owner)) = (epoch.parse::<u64>(), actor.split('-').next()) else { continue };
        owners.entry(epoch).or_default().insert(owner);
    }
    for (epoch, who) in &owners {
        assert_eq!(who.len(), 1, "epoch {epoch} acted on by {who:?}:\n{log_text}");
    }
    eprintln!("epochs acted: {:?}; before the crash up to {before}", owners.keys().collect::<Vec<_>>());
    assert!(owners.keys().any(|e| *e > before), "no epoch above {before} after the failover");
    // Every epoch a command acted on was granted on the history the promoted server has.
    let granted: std::collections::BTreeSet<u64> = standby
        .value(&format!(
            "SELECT string_agg(DISTINCT fencing_epoch::text, ',') FROM lease_audit_log \
             WHERE lease_key = '{CONNECTOR_KEY}' AND outcome IN ('acquired', 'taken_over')"
        ))
        .split(',')
        .filter_map(|e| e.parse().ok())
        .collect();
    for epoch in owners.keys() {
        assert!(granted.contains(epoch), "epoch {epoch} acted on, but the promoted server never granted it");
    }
}

/// The largest epoch in the log.
fn max_epoch(log: &str) -> u64 {
    log.lines().filter_map(|l| l.split_whitespace().nth(1)?.parse().ok()).max().unwrap_or(0)
}

/// A `connector run` loop of one connector, killed (its whole process group) on drop.
struct Contender(std::process::Child);

impl Contender {
    fn start(name: &str, url: &str, policy: &Path, log: &Path, dir: &Path) -> Self {
        use std::os::unix::process::CommandExt;
        let tick = format!(
            "i=0; while [ $i -lt 8 ]; do echo \"tick $FLEET_CONNECTOR_FENCING_EPOCH {name}-$$\" >> {}; \
             sleep 0.05; i=$((i+1)); done",
            log.display()
        );
        let script = format!(
            "while :; do \"$FLEETCTL\" connector run --key {CONNECTOR_KEY} --owner {name} --scope chat.read \
             --ttl 2 --policy {} -- sh -c '{tick}'; sleep 0.2; done",
            policy.display()
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .env("FLEETCTL", fleetctl_bin())
            .env("FLEET_REGISTRY", url)
            .env_remove("GITEA_MCP_LAUNCH_PROCESS")
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        Self(child)
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.0.id())]).status();
        let _ = self.0.wait();
    }
}
