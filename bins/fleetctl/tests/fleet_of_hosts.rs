//! A fleet of three simulated hosts on one PostgreSQL registry (each played as
//! `common::netns` says: its own network, UTS, mount and PID namespaces, machine id
//! and boot id), each running a launch of real workers and a `connector run` starter
//! that contends for one binding and restarts when refused; whichever holds it runs a
//! command that appends `tick EPOCH ACTOR` to a log this test owns (`common::acts`).
//! The operator works from this machine, a fourth host. In turn:
//!
//! 1. a host is killed for good: its lease is taken over once it lapses; the operator
//!    fences it, its rows retire, and the fleet reads SAFE again;
//! 2. the holder's host is partitioned past its lease's TTL: its command ends before
//!    the lease could lapse, another host takes over, and after the heal it acts on
//!    nothing (its starter is refused);
//! 3. a host reboots (a new boot id) and starts a new launch: its old boot's rows
//!    retire as `eligible_host_rebooted`, the new launch stays live;
//! 4. a host's clock runs 10 minutes ahead (faketime(1)): no healthy worker is ever
//!    marked stale.
//!
//! Across all of it: no live worker is retired, no two commands act at once, none at an
//! older epoch after a newer one. Needs root (namespaces, veth) and
//! `FLEET_TEST_POSTGRES_URL` on 127.0.0.1; skips, saying why, where either is missing.
//! `scripts/hosts-soak.sh` runs the rounds again and again for a given time.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::NetHost;
use common::{Schema, base_url, fleetctl_bin, sibling_bin, wait_for};

const KEY: &str = "connector:acme/agent-9/chat";
/// The workers' heartbeat TTL, seconds.
const WORKER_TTL: &str = "2";
/// The connector lease's TTL, seconds: long enough for a takeover's round trips through
/// the relays, short enough for the test.
const LEASE_TTL: &str = "3";

struct Fleet {
    dir: tempfile::TempDir,
    schema: Schema,
    policy: PathBuf,
    log: PathBuf,
}

impl Fleet {
    /// `fleetctl args` on the operator's host (this machine).
    fn ctl(&self, args: &[&str]) -> std::process::Output {
        Command::new(fleetctl_bin())
            .args(args)
            .env("FLEET_REGISTRY", self.schema.url())
            .env_remove("GITEA_MCP_LAUNCH_PROCESS")
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.ctl(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Every row, as the operator's snapshot shows it.
    fn rows(&self) -> Vec<serde_json::Value> {
        self.json(&["worker", "list", "--json"]).as_array().unwrap().clone()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// What the hosts said, and the log's last ticks of each epoch: for a failure to
    /// explain itself.
    fn explain(&self) -> String {
        let mut text = String::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "stderr") {
                text.push_str(&format!("--- {}\n", entry.path().display()));
                text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
        let log = self.log();
        let mut last: Vec<&str> = Vec::new();
        for line in log.lines() {
            let epoch = line.split_whitespace().nth(1);
            if last.last().map(|l| l.split_whitespace().nth(1)) != Some(epoch) {
                last.push(line);
            }
        }
        text.push_str(&format!("--- epochs as they began: {last:?}\n"));
        let audit = self.ctl(&["lease", "audit", "--key", KEY]);
        text.push_str(&String::from_utf8_lossy(&audit.stdout));
        text
    }
}

/// A `program` started on `host`, kept as one of its processes.
fn start(fleet: &Fleet, host: &mut NetHost, program: &Path, args: &[&str], envs: &[(&str, &str)]) {
    let mut cmd = host.command(program, &fleet.schema.url());
    cmd.args(args).current_dir(fleet.dir.path()).stdout(Stdio::null()).stderr(
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(fleet.dir.path().join(format!("{}.stderr", host.name)))
            .unwrap(),
    );
    for (k, v) in envs {
        cmd.env(k, v);
    }
    host.keep(cmd.spawn().unwrap());
}

/// A launch of two workers on `host`, under `fleet-launch run`; with `faketime`, their
/// clocks run that far off.
fn launch(fleet: &Fleet, host: &mut NetHost, faketime: Option<&str>) {
    let worker = match faketime {
        Some(offset) => format!("faketime -f {offset} \"$FLEETCTL\""),
        None => "\"$FLEETCTL\"".to_owned(),
    };
    let script = format!(
        "for ns in author reviewer; do {worker} worker run --namespace $ns --ttl {WORKER_TTL} -- sleep 600 & done; wait"
    );
    let fleetctl = fleetctl_bin().display().to_string();
    start(
        fleet,
        host,
        &sibling_bin("fleet-launch"),
        &["run", "--client", "codex", "--", "sh", "-c", &script],
        &[("FLEETCTL", &fleetctl), ("FAKETIME_DONT_FAKE_MONOTONIC", "1")],
    );
}

/// The host's connector starter: `connector run` again and again, its command ticking
/// into the log while it holds the binding.
fn contend(fleet: &Fleet, host: &mut NetHost) {
    let tick = format!(
        "while :; do echo \"tick $FLEET_CONNECTOR_FENCING_EPOCH {}-$$\" >> {}; sleep 0.05; done",
        host.name,
        fleet.log.display()
    );
    let script = format!(
        "while :; do \"$FLEETCTL\" connector run --key {KEY} --owner {} --scope chat.read --ttl {LEASE_TTL} \
         --policy {} -- sh -c '{tick}'; sleep 0.3; done",
        host.name,
        fleet.policy.display()
    );
    let fleetctl = fleetctl_bin().display().to_string();
    start(fleet, host, Path::new("/bin/sh"), &["-c", &script], &[("FLEETCTL", &fleetctl)]);
}

/// The host whose command ticked last, and at which epoch.
fn holder(fleet: &Fleet) -> Option<(String, u64)> {
    let log = fleet.log();
    let line = log.lines().rev().find(|l| l.split_whitespace().count() == 3)?;
    let mut parts = line.split_whitespace().skip(1);
    let epoch = parts.next()?.parse().ok()?;
    let actor = parts.next()?.split('-').take(2).collect::<Vec<_>>().join("-");
    Some((actor, epoch))
}

/// Waits until a host other than `not` holds the binding at an epoch above `above`.
fn new_holder(fleet: &Fleet, not: &str, above: u64) -> (String, u64) {
    wait_for(Duration::from_secs(40), || holder(fleet).filter(|(h, e)| h != not && *e > above))
}

/// The rows of `host` in boot `boot` (or any), by status.
fn rows_of(fleet: &Fleet, host: &NetHost, boot: Option<&str>) -> Vec<serde_json::Value> {
    fleet
        .rows()
        .into_iter()
        .filter(|r| r["host_id"] == host.machine_id.as_str() && boot.is_none_or(|b| r["boot_id"] == b))
        .collect()
}

fn live_rows(fleet: &Fleet, host: &NetHost) -> usize {
    let now = time::OffsetDateTime::now_utc();
    rows_of(fleet, host, Some(&host.boot_id))
        .iter()
        .filter(|r| {
            r["status"] == "active"
                && r["last_heartbeat_at"].as_str().is_some_and(|t| {
                    time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                        .is_ok_and(|beat| (now - beat).abs() < time::Duration::seconds(2))
                })
        })
        .count()
}

/// Plans and applies retirement from the operator's host; returns the retired rows'
/// reasons, sorted.
fn retire(fleet: &Fleet) -> Vec<String> {
    let plan = fleet.json(&["retire", "plan", "--json"]);
    if plan["candidate_count"] == 0 {
        return Vec::new();
    }
    let applied = fleet.json(&common::apply_args(&plan, &["--every-candidate", "--json"]));
    let retired: Vec<&str> =
        applied["retired"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    let mut reasons: Vec<String> = plan["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| retired.contains(&c["worker_identity"].as_str().unwrap()))
        .map(|c| c["reason_code"].as_str().unwrap().to_owned())
        .collect();
    reasons.sort();
    reasons
}

fn gate_is_safe(fleet: &Fleet) -> bool {
    fleet.ctl(&["snapshot", "--gate"]).status.success()
}

/// No honest row is marked stale while `for_` passes.
fn no_false_stale(fleet: &Fleet, honest: &[&NetHost], for_: Duration) {
    let watch = Instant::now();
    while watch.elapsed() < for_ {
        for row in fleet.rows() {
            let on_honest = honest
                .iter()
                .any(|h| row["host_id"] == h.machine_id.as_str() && row["boot_id"] == h.boot_id.as_str());
            if on_honest && row["status"] == "active" {
                assert_ne!(row["ownership_state"], "stale", "a healthy worker read stale: {row}");
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// How long to go on: `FLEET_HOSTS_SECONDS` (the soak script sets it), else one round.
fn soak_for() -> Option<Duration> {
    std::env::var("FLEET_HOSTS_SECONDS").ok().and_then(|s| s.parse().ok()).map(Duration::from_secs)
}

/// The times the rounds measured, printed at the end.
#[derive(Default)]
struct Figures {
    death_to_takeover: Vec<Duration>,
    cut_to_takeover: Vec<Duration>,
    reboot_to_retired: Vec<Duration>,
}

fn summary(name: &str, times: &[Duration]) -> String {
    let max = times.iter().max().copied().unwrap_or_default();
    let mean = times.iter().sum::<Duration>() / u32::try_from(times.len().max(1)).unwrap();
    format!("{name}: mean {:.2} s, max {:.2} s", mean.as_secs_f64(), max.as_secs_f64())
}

#[test]
fn a_fleet_of_three_hosts_outlives_a_death_a_partition_a_reboot_and_a_skewed_clock() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    if !base.contains("@127.0.0.1:") {
        eprintln!("skipped: the relays reach the registry server only on 127.0.0.1");
        return;
    }
    if !Path::new("/usr/bin/faketime").exists() {
        eprintln!("skipped: faketime is not installed (apt-get install faketime)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let made: Vec<Option<NetHost>> = [("host-d", 3), ("host-e", 4), ("host-f", 5)]
        .iter()
        .map(|(n, i)| NetHost::new(n, *i, dir.path()))
        .collect();
    if made.iter().any(Option::is_none) {
        eprintln!("skipped: this machine cannot create network namespaces and veth pairs (needs root)");
        return;
    }
    let mut hosts: Vec<NetHost> = made.into_iter().flatten().collect();
    let policy = dir.path().join("policy.json");
    let allow: Vec<_> = hosts
        .iter()
        .map(|h| {
            serde_json::json!({"tenant": "acme", "agent": "agent-9", "binding": "chat",
                "connector": h.name, "scopes": ["chat.read"], "max_ttl_s": 60})
        })
        .collect();
    std::fs::write(&policy, serde_json::json!({ "allow": allow }).to_string()).unwrap();
    let log = dir.path().join("acts.log");
    let fleet = Fleet { schema: Schema::new(&base), policy, log, dir };
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    for host in &hosts {
        host.relay();
    }
    let mut epoch_before = 0;
    let mut figures = Figures::default();
    let soak = soak_for();
    let started = Instant::now();
    for round in 0.. {
        if round > 0 && soak.is_none_or(|limit| started.elapsed() >= limit) {
            break;
        }
        eprintln!("round {round}");
        // The rows of earlier rounds, retired at their end.
        let earlier: Vec<serde_json::Value> =
            fleet.rows().iter().map(|r| r["worker_identity"].clone()).collect();
        for host in &mut hosts {
            launch(&fleet, host, None);
            contend(&fleet, host);
        }
        for host in &hosts {
            wait_for(Duration::from_secs(40), || (live_rows(&fleet, host) == 2).then_some(()));
        }
        let (first, epoch) =
            wait_for(Duration::from_secs(40), || holder(&fleet).filter(|(_, e)| *e > epoch_before));
        assert!(gate_is_safe(&fleet), "six live workers on three hosts");

        // 1. The holder's host dies for good; another takes the binding over once the
        //    lease lapses, and the operator fences the dead host.
        let dead = hosts.iter().position(|h| h.name == first).unwrap();
        hosts[dead].vanish();
        let died = Instant::now();
        let (second, epoch) = new_holder(&fleet, &first, epoch);
        figures.death_to_takeover.push(died.elapsed());
        std::thread::sleep(Duration::from_millis(2500));
        assert!(!gate_is_safe(&fleet), "the dead host's stale rows block the fleet");
        let fenced = fleet.ctl(&["host", "fence", &hosts[dead].machine_id, "--reason", "the VM was deleted"]);
        assert!(fenced.status.success(), "{}", String::from_utf8_lossy(&fenced.stderr));
        assert_eq!(retire(&fleet), ["eligible_host_fenced"; 2]);
        assert!(gate_is_safe(&fleet), "SAFE again once the dead host's rows retired");

        // 2. The new holder's host is cut off past its lease's TTL: its command ends
        //    before the lease could lapse, the third host takes over, and after the heal
        //    the cut host acts on nothing.
        let cut = hosts.iter().position(|h| h.name == second).unwrap();
        hosts[cut].set_link("down");
        let cut_at = Instant::now();
        let (third, epoch) = new_holder(&fleet, &second, epoch);
        figures.cut_to_takeover.push(cut_at.elapsed());
        std::thread::sleep(Duration::from_millis(1000));
        assert_eq!(retire(&fleet), Vec::<String>::new(), "a cut-off host's rows are never retired");
        hosts[cut].set_link("up");
        wait_for(Duration::from_secs(40), || (live_rows(&fleet, &hosts[cut]) == 2).then_some(()));
        std::thread::sleep(Duration::from_millis(2000));
        assert_eq!(
            holder(&fleet).map(|(h, _)| h),
            Some(third.clone()),
            "the healed host acts on nothing\n{}",
            fleet.explain()
        );

        // 3. The third host reboots and starts a new launch: its old rows retire on the
        //    proof of the new boot, the new launch stays live.
        let rebooted = hosts.iter().position(|h| h.name == third).unwrap();
        let old_boot = hosts[rebooted].boot_id.clone();
        hosts[rebooted].vanish();
        hosts[rebooted].boot(u8::try_from(round).unwrap() * 2 + 2);
        let before = Instant::now();
        launch(&fleet, &mut hosts[rebooted], None);
        contend(&fleet, &mut hosts[rebooted]);
        wait_for(Duration::from_secs(40), || (live_rows(&fleet, &hosts[rebooted]) == 2).then_some(()));
        wait_for(Duration::from_secs(40), || {
            rows_of(&fleet, &hosts[rebooted], Some(&old_boot))
                .iter()
                .all(|r| r["status"] != "active" || r["ownership_state"] == "stale")
                .then_some(())
        });
        let reasons = retire(&fleet);
        assert!(reasons.iter().all(|r| r == "eligible_host_rebooted") && reasons.len() == 2, "{reasons:?}");
        assert_eq!(live_rows(&fleet, &hosts[rebooted]), 2, "the new boot's launch stays live");
        figures.reboot_to_retired.push(before.elapsed());

        // 4. The healed host starts a launch whose clocks run 10 minutes ahead: no
        //    healthy worker is ever marked stale.
        launch(&fleet, &mut hosts[cut], Some("+10m"));
        std::thread::sleep(Duration::from_millis(1500));
        let honest: Vec<&NetHost> = hosts.iter().filter(|h| h.name != first).collect();
        no_false_stale(&fleet, &honest, Duration::from_secs(5));
        // The host list names each host as it calls itself, and the skewed one's offset.
        let listed = fleet.json(&["host", "list", "-o", "json"]);
        for host in hosts.iter().filter(|h| h.name != first) {
            let report =
                listed["hosts"].as_array().unwrap().iter().find(|r| r["host_id"] == host.machine_id.as_str());
            let report = report.unwrap_or_else(|| panic!("{} listed: {listed}", host.name));
            assert_eq!(report["hostname"], host.name, "{report}");
            let offset = report["clock_offset_ms"].as_i64().unwrap();
            let expected = if host.name == second { 600_000 } else { 0 };
            assert!(
                (offset - expected).abs() < 5_000,
                "{}: offset {offset} ms: {report}\n{}",
                host.name,
                fleet.explain()
            );
        }

        // Across it all: the log shows no two commands at once, none at an older epoch.
        let epochs = common::acts::check(&fleet.log());
        assert!(epochs >= 3 * (round + 1), "handovers acted: {epochs} epochs");
        eprintln!(
            "round {round}: {epochs} epochs so far; {}; {}; {}",
            summary("death to takeover", &figures.death_to_takeover),
            summary("partition to takeover", &figures.cut_to_takeover),
            summary("reboot to retired", &figures.reboot_to_retired)
        );
        epoch_before = epoch;

        // Every retired row was a dead host's or an earlier boot's, never a live one's.
        for row in fleet
            .rows()
            .iter()
            .filter(|r| r["status"] == "retired" && !earlier.contains(&r["worker_identity"]))
        {
            let of_dead = row["host_id"] == hosts[dead].machine_id.as_str();
            let of_old_boot = row["host_id"] == hosts[rebooted].machine_id.as_str()
                && row["boot_id"] != hosts[rebooted].boot_id.as_str();
            assert!(of_dead || of_old_boot, "a live worker was retired: {row}");
        }

        // The next round starts from nothing: every host down and fenced, its rows
        // retired, then unfenced for a new boot.
        for host in &mut hosts {
            host.vanish();
            let fenced = fleet.ctl(&["host", "fence", &host.machine_id, "--reason", "end of a round"]);
            assert!(fenced.status.success(), "{}", String::from_utf8_lossy(&fenced.stderr));
        }
        std::thread::sleep(Duration::from_millis(2500));
        retire(&fleet);
        assert!(fleet.rows().iter().all(|r| r["status"] != "active"), "every row of the round retired");
        for (i, host) in hosts.iter_mut().enumerate() {
            let lifted = fleet.ctl(&["host", "unfence", &host.machine_id]);
            assert!(lifted.status.success(), "{}", String::from_utf8_lossy(&lifted.stderr));
            host.boot(u8::try_from(round * 10 + 10 + i).unwrap());
        }
    }
}
