//! Fenced leases across real processes: one-time initialization, takeover after a
//! crash or a pause, failure and retry, and a contention storm judged by the audit log.

mod common;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Fleet, assert_one_line_error, wait_for};
use fleet_lease::{LeaseKey, LeaseKind};

fn initialize(fleet: &Fleet, ttl: &str, script: &str) -> Command {
    let mut cmd = fleet.fleetctl();
    cmd.args([
        "initialize",
        "--key",
        "schema",
        "--target-version",
        "1",
        "--ttl",
        ttl,
        "--poll-ms",
        "20",
        "--",
    ])
    .args(["sh", "-c", script])
    .stdout(Stdio::null());
    cmd
}

fn starts(fleet: &Fleet) -> Vec<(String, Option<u64>)> {
    let key = LeaseKey::new("init:schema").unwrap();
    fleet
        .open()
        .lease_audit(Some(&key))
        .unwrap()
        .into_iter()
        .filter(|e| e.event == "init_start")
        .map(|e| (e.identity.unwrap_or_default(), e.fencing_epoch))
        .collect()
}

#[test]
fn eight_concurrent_starters_run_the_command_once_and_all_report_ready() {
    let fleet = Fleet::new();
    fleet.ctl(&["registry", "init"]);
    let counter = fleet.dir.path().join("runs");
    let script = format!("echo run >> '{}'; sleep 0.3", counter.display());
    let children: Vec<Child> = (0..8).map(|_| initialize(&fleet, "5", &script).spawn().unwrap()).collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "every starter reports ready");
    }
    assert_eq!(std::fs::read_to_string(&counter).unwrap().lines().count(), 1, "the command ran exactly once");
    assert_eq!(starts(&fleet).len(), 1);
    let again = initialize(&fleet, "5", &script).status().unwrap();
    assert!(again.success());
    assert_eq!(std::fs::read_to_string(&counter).unwrap().lines().count(), 1, "a ready version never reruns");
}

#[test]
fn a_killed_owner_is_taken_over_after_expiry_with_a_higher_token() {
    let fleet = Fleet::new();
    fleet.ctl(&["registry", "init"]);
    let started = fleet.dir.path().join("started");
    let done = fleet.dir.path().join("done");
    let mut owner =
        initialize(&fleet, "1", &format!("touch '{}'; exec sleep 30", started.display())).spawn().unwrap();
    wait_for(Duration::from_secs(20), || started.exists().then_some(()));
    Command::new("kill").args(["-KILL", &owner.id().to_string()]).status().unwrap();
    owner.wait().unwrap();
    // Its command is orphaned, still running: stop it so it cannot touch anything.
    Command::new("pkill").args(["-f", &format!("touch '{}'", started.display())]).status().ok();

    let next = initialize(&fleet, "1", &format!("touch '{}'", done.display())).status().unwrap();
    assert!(next.success());
    assert!(done.exists());
    let epochs: Vec<Option<u64>> = starts(&fleet).into_iter().map(|(_, e)| e).collect();
    assert_eq!(epochs, vec![Some(1), Some(2)], "the takeover holds a higher fencing token");
}

#[test]
fn a_paused_owner_cannot_complete_after_a_takeover() {
    let fleet = Fleet::new();
    fleet.ctl(&["registry", "init"]);
    let started = fleet.dir.path().join("started");
    let first_done = fleet.dir.path().join("first-done");
    let script = format!("touch '{}'; sleep 2; touch '{}'", started.display(), first_done.display());
    let mut owner = initialize(&fleet, "1", &script).spawn().unwrap();
    wait_for(Duration::from_secs(20), || started.exists().then_some(()));
    // Pause the owner (not its command): it can neither renew nor record.
    Command::new("kill").args(["-STOP", &owner.id().to_string()]).status().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let second = initialize(&fleet, "1", "true").status().unwrap();
    assert!(second.success(), "the second starter takes over and completes");
    Command::new("kill").args(["-CONT", &owner.id().to_string()]).status().unwrap();
    let status = owner.wait().unwrap();
    assert_eq!(status.code(), Some(1), "the paused owner learns it lost the lease");
    let (lease, _) = fleet.open().lease(&LeaseKey::new("init:schema").unwrap()).unwrap();
    let lease = lease.unwrap();
    assert_eq!(lease.fencing_epoch.get(), 2);
    assert_eq!(lease.init.unwrap().status, fleet_lease::InitStatus::Ready);
    let finishes: Vec<(String, Option<String>)> = fleet
        .open()
        .lease_audit(None)
        .unwrap()
        .into_iter()
        .filter(|e| e.event == "init_finish")
        .map(|e| (e.outcome, e.reason))
        .collect();
    assert_eq!(
        finishes.iter().filter(|(o, _)| o == "released").count(),
        1,
        "only the current holder recorded"
    );
}

#[test]
fn a_failing_command_leaves_failed_with_detail_and_a_later_run_retries() {
    let fleet = Fleet::new();
    fleet.ctl(&["registry", "init"]);
    let out = initialize(&fleet, "5", "exit 3").stderr(Stdio::piped()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exited with exit status: 3"));
    let (lease, _) = fleet.open().lease(&LeaseKey::new("init:schema").unwrap()).unwrap();
    let init = lease.unwrap().init.unwrap();
    assert_eq!(init.status, fleet_lease::InitStatus::Failed);
    assert!(init.failure_detail.unwrap().contains("exit status: 3"));
    assert!(initialize(&fleet, "5", "true").status().unwrap().success(), "a later run retries");
}

#[test]
fn a_newer_stored_version_is_refused() {
    let fleet = Fleet::new();
    fleet.ctl(&["registry", "init"]);
    assert!(initialize(&fleet, "5", "true").status().unwrap().success());
    let out = fleet
        .fleetctl()
        .args(["initialize", "--key", "schema", "--target-version", "0", "--", "true"])
        .output()
        .unwrap();
    assert_one_line_error(&out, 1, "newer than the target 0");
}

/// One process of the contention storm: acquire, renew, release or take over one
/// workflow lease in a tight loop. Does nothing unless `FLEET_HAMMER_REGISTRY` is set.
#[test]
fn lease_hammer_helper() {
    let Some(path) = std::env::var_os("FLEET_HAMMER_REGISTRY") else { return };
    let me = std::env::var("FLEET_HAMMER_ID").unwrap();
    let store =
        registry_sqlite::SqliteStore::open(std::path::Path::new(&path), fleet_registry::OpenMode::MustExist)
            .unwrap();
    let mut registry = fleet_registry::Registry::new(store);
    let key = LeaseKey::new("workflow:hot").unwrap();
    let ctx = fleet_registry::AuditContext::default();
    let ttl = time::Duration::milliseconds(30);
    for round in 0..40 {
        match registry.acquire_lease(&key, LeaseKind::Workflow, &me, ttl, &[], &ctx).unwrap() {
            Ok(lease) => {
                let _ = registry.renew_lease(&key, &lease.holder(), ttl, &ctx).unwrap();
                if round % 3 == 0 {
                    let _ = registry.release_lease(&key, &lease.holder(), &ctx).unwrap();
                }
            }
            Err(_) => {
                if let (Some(current), _) = registry.lease(&key).unwrap() {
                    let _ =
                        registry.take_over_lease(&key, current.fencing_epoch, &me, ttl, &[], &ctx).unwrap();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_contention_storm_never_gives_two_holders_one_epoch() {
    let fleet = Fleet::new();
    fleet.ctl(&["registry", "init"]);
    let exe = std::env::current_exe().unwrap();
    let children: Vec<Child> = (0..8)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", "lease_hammer_helper", "--nocapture"])
                .env("FLEET_HAMMER_REGISTRY", &fleet.registry)
                .env("FLEET_HAMMER_ID", format!("p{i}"))
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let log = fleet.open().lease_audit(Some(&LeaseKey::new("workflow:hot").unwrap())).unwrap();
    let tenures: Vec<(u64, String)> = log
        .iter()
        .filter(|e| e.outcome == "acquired" || e.outcome == "taken_over")
        .map(|e| (e.fencing_epoch.unwrap(), e.identity.clone().unwrap()))
        .collect();
    assert!(tenures.len() > 8, "the storm produced takeovers: {}", tenures.len());
    for pair in tenures.windows(2) {
        assert!(pair[1].0 > pair[0].0, "epochs strictly increase in log order: {pair:?}");
    }
    let epochs: BTreeSet<u64> = tenures.iter().map(|(e, _)| *e).collect();
    assert_eq!(epochs.len(), tenures.len(), "no two tenures share an epoch");
    // Every successful renewal or release was by the holder of the latest epoch.
    let mut current: Option<(u64, String)> = None;
    for e in &log {
        match e.outcome.as_str() {
            "acquired" | "taken_over" => {
                current = Some((e.fencing_epoch.unwrap(), e.identity.clone().unwrap()))
            }
            "renewed" | "released" => {
                let (epoch, owner) = current.clone().expect("a tenure exists");
                assert_eq!((e.fencing_epoch.unwrap(), e.identity.clone().unwrap()), (epoch, owner));
            }
            _ => {}
        }
    }
}

#[test]
fn connector_leases_through_the_cli_follow_policy_insert_only_and_takeover() {
    let fleet = Fleet::new();
    fleet.ctl(&["registry", "init"]);
    let key = "connector:acme/agent-7/slack-main";
    let policy = fleet.dir.path().join("policy.json");
    std::fs::write(
        &policy,
        serde_json::json!({"allow": [{"tenant": "acme", "agent": "agent-7", "binding": "slack-main",
            "connector": "conn-a", "scopes": ["chat.read"], "max_ttl_s": 120}]})
        .to_string(),
    )
    .unwrap();
    let json = |out: std::process::Output| -> (Option<i32>, serde_json::Value) {
        (out.status.code(), serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null))
    };
    let policy_arg = policy.to_str().unwrap();
    // `lease acquire` of the key by conn-a with `scope`, plus `extra` arguments.
    let acquire = |scope: &str, extra: &[&str]| {
        let mut args =
            vec!["lease", "acquire", "--key", key, "--owner", "conn-a", "--scope", scope, "--json"];
        args.extend(extra);
        json(fleet.ctl(&args))
    };
    // The default policy denies every connector lease.
    let (code, denied) = acquire("chat.read", &[]);
    assert_eq!((code, denied["reason"].as_str()), (Some(1), Some("policy_denied")));
    let (code, out_of_policy) = acquire("chat.write", &["--policy", policy_arg]);
    assert_eq!((code, out_of_policy["reason"].as_str()), (Some(1), Some("policy_denied")));
    let (code, acquired) = acquire("Chat.Read", &["--ttl", "1", "--policy", policy_arg]);
    assert_eq!(code, Some(0));
    assert_eq!(acquired["lease"]["scopes"], serde_json::json!(["chat.read"]), "scopes are normalized");
    let (code, held) = acquire("chat.read", &["--policy", policy_arg]);
    assert_eq!((code, held["reason"].as_str()), (Some(1), Some("lease_held")));
    std::thread::sleep(Duration::from_millis(1100));
    let (_, lapsed) = acquire("chat.read", &["--policy", policy_arg]);
    assert_eq!(lapsed["reason"], "takeover_required", "acquisition is insert-only");
    let takeover = |extra: &[&str]| {
        let mut args = vec!["lease", "takeover", "--key", key, "--owner", "conn-a", "--expected-epoch", "1"];
        args.extend(["--scope", "chat.read", "--json"]);
        args.extend(extra);
        json(fleet.ctl(&args))
    };
    let (code, unauthorized) = takeover(&[]);
    assert_eq!(
        (code, unauthorized["reason"].as_str()),
        (Some(1), Some("policy_denied")),
        "takeover is authorized too"
    );
    let (code, taken) = takeover(&["--policy", policy_arg]);
    assert_eq!(code, Some(0), "{taken}");
    assert_eq!(taken["lease"]["fencing_epoch"], 2);
    let (code, stale) = json(fleet.ctl(&[
        "lease",
        "renew",
        "--key",
        key,
        "--owner",
        "conn-a",
        "--lease-id",
        acquired["lease"]["lease_id"].as_str().unwrap(),
        "--epoch",
        "1",
        "--json",
        "--policy",
        policy_arg,
    ]));
    assert_eq!((code, stale["reason"].as_str()), (Some(1), Some("stale_epoch")));
    // Renewal and release pass the cap and the policy too.
    let lease_id = taken["lease"]["lease_id"].as_str().unwrap().to_owned();
    let as_holder = |verb: &str, extra: &[&str]| {
        let mut args = vec!["lease", verb, "--key", key, "--owner", "conn-a", "--lease-id", &lease_id];
        args.extend(["--epoch", "2", "--json"]);
        args.extend(extra);
        json(fleet.ctl(&args))
    };
    let (code, r) = as_holder("renew", &["--ttl", "86400"]);
    assert_eq!((code, r["reason"].as_str()), (Some(1), Some("ttl_exceeds_cap")), "no policy, past the cap");
    let (code, r) = as_holder("renew", &["--ttl", "60"]);
    assert_eq!(
        (code, r["reason"].as_str()),
        (Some(1), Some("policy_denied")),
        "no policy: the default denies"
    );
    let (code, r) = as_holder("renew", &["--ttl", "200", "--policy", policy_arg]);
    assert_eq!((code, r["reason"].as_str()), (Some(1), Some("policy_denied")), "past the policy's 120 s");
    let (code, r) = as_holder("renew", &["--ttl", "60", "--policy", policy_arg]);
    assert_eq!(code, Some(0), "{r}");
    let (code, r) = as_holder("release", &[]);
    assert_eq!((code, r["reason"].as_str()), (Some(1), Some("policy_denied")));
    let (code, r) = as_holder("release", &["--policy", policy_arg]);
    assert_eq!(code, Some(0), "{r}");
    let audit = fleet.ctl(&["lease", "audit", "--key", key]);
    let table = String::from_utf8(audit.stdout).unwrap();
    assert!(
        table.contains("policy_denied") && table.contains("taken_over") && !table.contains("chat.read"),
        "{table}"
    );
}

#[test]
fn show_and_audit_read_initialization_leases_and_say_when_a_lease_expired() {
    let fleet = Fleet::new();
    assert!(initialize(&fleet, "5", "true").status().unwrap().success());
    let out = fleet.ctl(&["lease", "show", "--key", "init:schema", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown[0]["init"]["status"], "ready", "{shown}");
    assert_eq!(shown[0]["status"], "released");
    let table = String::from_utf8(fleet.ctl(&["lease", "show", "--key", "init:schema"]).stdout).unwrap();
    assert!(table.contains("VERSION") && table.contains("ready"), "{table}");
    let audit = fleet.ctl(&["lease", "audit", "--key", "init:schema", "--json"]);
    let log: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    assert_eq!(log.as_array().unwrap().len(), 2, "{log}");
    let renew = fleet.ctl(&[
        "lease",
        "renew",
        "--key",
        "init:schema",
        "--owner",
        "x",
        "--lease-id",
        "l",
        "--epoch",
        "1",
    ]);
    assert_one_line_error(&renew, 2, "only `fleetctl initialize`");

    let acquired = fleet.ctl(&["lease", "acquire", "--key", "workflow:w", "--owner", "me", "--ttl", "1"]);
    assert!(acquired.status.success());
    std::thread::sleep(Duration::from_millis(1100));
    let out = fleet.ctl(&["lease", "show", "--key", "workflow:w", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown[0]["state"], "held", "the stored state");
    assert_eq!(shown[0]["status"], "expired", "what it means now");
}

#[test]
fn every_lease_mutation_and_refusal_is_one_log_event_with_its_reason() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let run = |owner: &str| {
        fleet
            .fleetctl()
            .env("RUST_LOG", "info")
            .args([
                "--log-format",
                "json",
                "lease",
                "acquire",
                "--key",
                "workflow:logged",
                "--owner",
                owner,
                "--json",
            ])
            .output()
            .unwrap()
    };
    let events = |out: &std::process::Output| -> Vec<serde_json::Value> {
        String::from_utf8_lossy(&out.stderr).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    };
    let acquired = events(&run("first"));
    assert!(
        acquired.iter().any(|e| e["fields"]["outcome"] == "acquired" && e["fields"]["identity"] == "first"),
        "{acquired:?}"
    );
    let refused = events(&run("second"));
    assert!(
        refused.iter().any(|e| e["fields"]["outcome"] == "denied" && e["fields"]["reason"] == "lease_held"),
        "{refused:?}"
    );
    let quiet = fleet.ctl(&["lease", "acquire", "--key", "workflow:logged", "--owner", "third", "--json"]);
    assert!(quiet.stderr.is_empty(), "without RUST_LOG nothing is logged below warn");
}

/// `registry export` is a whole backup: restored into a fresh registry, an
/// initialization version stays ready (its command does not run again), a workflow
/// lease is still held by its owner, and the audit log reads as before.
#[test]
fn a_restored_export_keeps_every_lease_and_the_audit_log() {
    let fleet = Fleet::new();
    fleet.ctl(&["registry", "init"]);
    assert!(initialize(&fleet, "5", "true").status().unwrap().success());
    let held =
        fleet.ctl(&["lease", "acquire", "--key", "workflow:deploy", "--owner", "wkr-a", "--ttl", "600"]);
    assert!(held.status.success(), "{}", String::from_utf8_lossy(&held.stderr));
    let export = fleet.ctl(&["registry", "export"]);
    assert!(export.status.success());
    let backup = fleet.dir.path().join("backup.json");
    std::fs::write(&backup, &export.stdout).unwrap();

    let restored = Fleet::new();
    let out = restored.ctl(&["registry", "import", "--json", backup.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["leases"], 2, "{summary}");
    let ran = restored.dir.path().join("ran");
    let again = initialize(&restored, "5", &format!("touch {}", ran.display())).status().unwrap();
    assert!(again.success());
    assert!(!ran.exists(), "version 1 was ready before the backup: it does not run again");
    let show = restored.ctl(&["lease", "show", "--key", "workflow:deploy", "--json"]);
    let lease: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(lease[0]["owner"], "wkr-a", "{lease}");
    let audit = |fleet: &Fleet| -> Vec<(String, String, String)> {
        fleet
            .open()
            .lease_audit(None)
            .unwrap()
            .into_iter()
            .map(|e| (e.lease_key, e.event, e.outcome))
            .collect()
    };
    let before = audit(&fleet);
    assert_eq!(audit(&restored)[..before.len()], before[..], "the log as it was, then the new check");
}

/// Every command that reports something has `--json`: one JSON object on stdout.
#[test]
fn registry_init_prune_and_initialize_report_as_json() {
    let fleet = Fleet::new();
    let json = |out: std::process::Output| -> serde_json::Value {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
    };
    let init = json(fleet.ctl(&["registry", "init", "--json"]));
    assert_eq!(init["outcome"], "ready");
    let written: i64 = rusqlite::Connection::open(&fleet.registry)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(init["schema_version"].as_i64(), Some(written), "the schema version the file is at");
    let json_init = |fleet: &Fleet| {
        let mut cmd = initialize(fleet, "5", "true");
        cmd.stdout(Stdio::piped());
        let args: Vec<std::ffi::OsString> = cmd.get_args().map(ToOwned::to_owned).collect();
        let mut with_json = fleet.fleetctl();
        with_json.args(&args[..1]).arg("--json").args(&args[1..]);
        json(with_json.output().unwrap())
    };
    assert_eq!(json_init(&fleet)["outcome"], "completed");
    let again = json_init(&fleet);
    assert_eq!(
        (again["outcome"].clone(), again["target_version"].clone()),
        ("already_ready".into(), 1.into())
    );
    let export = fleet.dir.path().join("pruned.json");
    let pruned = json(fleet.ctl(&[
        "registry",
        "prune",
        "--before",
        "2030-01-01T00:00:00Z",
        "--export",
        export.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(pruned["pruned"], serde_json::json!([]));
}

/// With `--log-format json` every line on stderr is one JSON object, a command's error
/// included, and every write to the registry is one event with a snake_case outcome.
#[test]
fn json_logs_are_json_on_every_line_and_every_write_is_an_event() {
    let fleet = Fleet::new();
    let lines = |out: &std::process::Output| -> Vec<serde_json::Value> {
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    };
    let logged = |args: &[&str]| {
        fleet.fleetctl().env("RUST_LOG", "info").args(["--log-format", "json"]).args(args).output().unwrap()
    };
    let missing = logged(&["worker", "list"]);
    assert_eq!(missing.status.code(), Some(3));
    let error = lines(&missing);
    assert_eq!(error.len(), 1, "{error:?}");
    assert_eq!(error[0]["level"], "ERROR");
    assert_eq!(error[0]["fields"]["exit_code"], 3);
    assert!(error[0]["fields"]["message"].as_str().unwrap().contains("registry init"), "{error:?}");

    let init = lines(&logged(&["registry", "init"]));
    assert!(init.iter().any(|e| e["fields"]["outcome"] == "ready"), "{init:?}");
    let mint = fleet
        .launcher()
        .env("RUST_LOG", "info")
        .args(["--log-format", "json", "mint", "--client", "codex"])
        .output()
        .unwrap();
    assert!(lines(&mint).iter().any(|e| e["fields"]["outcome"] == "minted"), "{:?}", lines(&mint));
    let args: Vec<std::ffi::OsString> =
        initialize(&fleet, "5", "true").get_args().map(ToOwned::to_owned).collect();
    let mut first = fleet.fleetctl();
    first.env("RUST_LOG", "info").args(["--log-format", "json"]).args(&args);
    let events = lines(&first.output().unwrap());
    assert!(events.iter().any(|e| e["fields"]["message"] == "initialization started"), "{events:?}");
    assert!(
        events.iter().all(|e| e["fields"]["outcome"].as_str().is_none_or(|o| o == o.to_lowercase())),
        "snake_case outcomes: {events:?}"
    );
}

/// The line `lease acquire` prints to renew with carries the lease's TTL: following it
/// keeps a 300 s lease at 300 s instead of shortening it to the default 30.
#[test]
fn following_the_printed_renew_line_keeps_the_ttl() {
    let fleet = Fleet::new();
    let out = fleet.ctl(&["lease", "acquire", "--key", "workflow:long", "--owner", "me", "--ttl", "300"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line =
        stdout.lines().find_map(|l| l.strip_prefix("renew or release with: ")).expect("the renew line");
    assert!(line.ends_with("--ttl 300"), "{line}");
    let mut args = vec!["lease", "renew", "--key", "workflow:long", "--json"];
    args.extend(line.split_whitespace());
    let out = fleet.ctl(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let renewed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let at =
        |field: &str| fleet_identity::Timestamp::parse(renewed["lease"][field].as_str().unwrap()).unwrap();
    assert_eq!(at("expires_at").since(at("heartbeat_at")).whole_seconds(), 300);
}

/// A renewal without `--ttl` keeps the TTL the lease was granted (as etcd's keep-alive
/// does); `--ttl` still sets another.
#[test]
fn a_renewal_without_ttl_keeps_the_granted_ttl() {
    let fleet = Fleet::new();
    let out =
        fleet.ctl(&["lease", "acquire", "--key", "workflow:long", "--owner", "me", "--ttl", "300", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let acquired: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (id, epoch) =
        (acquired["lease"]["lease_id"].as_str().unwrap(), acquired["lease"]["fencing_epoch"].to_string());
    let renew = |extra: &[&str]| {
        let mut args = vec!["lease", "renew", "--key", "workflow:long", "--owner", "me", "--lease-id", id];
        args.extend(["--epoch", &epoch, "--json"]);
        args.extend(extra);
        let out = fleet.ctl(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let renewed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let at = |field: &str| {
            fleet_identity::Timestamp::parse(renewed["lease"][field].as_str().unwrap()).unwrap()
        };
        at("expires_at").since(at("heartbeat_at")).whole_seconds()
    };
    assert_eq!(renew(&[]), 300);
    assert_eq!(renew(&["--ttl", "45"]), 45);
    assert_eq!(renew(&[]), 45, "the TTL last renewed with");
}

/// `lease audit` pages through a log of any size: 2,500 entries (past one page of
/// 1,000) print whole and in order as a table and as JSON; `--tail`, `--key`, `--since`
/// and `--until` select; `--follow` prints each new entry as it is written.
#[test]
fn the_audit_log_is_read_a_page_at_a_time_and_selected_and_followed() {
    let fleet = Fleet::new();
    let entries: Vec<serde_json::Value> = (1..=2_500)
        .map(|i| {
            serde_json::json!({
                "id": i, "event": "acquire", "outcome": "acquired", "reason": null,
                "lease_key": format!("workflow:w{}", i % 3), "kind": "workflow", "identity": "ops",
                "binding": null, "connector": null, "fencing_epoch": 1, "correlation_id": null,
                "at": format!("2026-12-01T{:02}:{:02}:{:02}.000Z", i / 3600, i / 60 % 60, i % 60),
            })
        })
        .collect();
    let backup = serde_json::json!({"instances": [], "worker_registrations": [], "leases": [], "lease_audit_log": entries});
    let file = fleet.dir.path().join("backup.json");
    std::fs::write(&file, backup.to_string()).unwrap();
    assert!(fleet.ctl(&["registry", "import", file.to_str().unwrap()]).status.success());
    let ids = |args: &[&str]| -> Vec<i64> {
        let mut all = vec!["lease", "audit", "--json"];
        all.extend(args);
        let out = fleet.ctl(&all);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let log: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        log.iter().map(|e| e["id"].as_i64().unwrap()).collect()
    };
    assert_eq!(ids(&[]), (1..=2_500).collect::<Vec<_>>());
    assert_eq!(ids(&["--tail", "3"]), [2_498, 2_499, 2_500]);
    assert_eq!(ids(&["--key", "workflow:w0", "--tail", "2"]), [2_496, 2_499]);
    assert_eq!(
        ids(&["--since", "2026-12-01T00:41:38Z", "--until", "2026-12-01T00:41:41Z"]),
        [2_498, 2_499, 2_500]
    );
    let table = String::from_utf8(fleet.ctl(&["lease", "audit"]).stdout).unwrap();
    assert_eq!(table.lines().count(), 2_501, "one header and every entry");
    assert!(table.lines().nth(2_500).unwrap().starts_with("2500 "));

    let mut follow = fleet
        .fleetctl()
        .args(["lease", "audit", "--follow", "--json", "--tail", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead as _;
    let mut lines = std::io::BufReader::new(follow.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["id"], 2_500);
    assert!(fleet.ctl(&["lease", "acquire", "--key", "workflow:new", "--owner", "ops"]).status.success());
    let next: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(next["lease_key"], "workflow:new");
    let _ = follow.kill();
    let _ = follow.wait();
}

/// Retention: `registry prune --audit-before` writes the old entries to its export
/// first, then removes exactly those; the export imports into a fresh registry, and the
/// log refuses any other delete as before.
#[test]
fn audit_retention_exports_then_removes_the_old_entries() {
    let fleet = Fleet::new();
    let entries: Vec<serde_json::Value> = (1..=30)
        .map(|i| {
            serde_json::json!({
                "id": i, "event": "acquire", "outcome": "acquired", "reason": null,
                "lease_key": "workflow:w", "kind": "workflow", "identity": "ops", "binding": null,
                "connector": null, "fencing_epoch": 1, "correlation_id": null,
                "at": format!("2026-11-{:02}T00:00:00.000Z", i),
            })
        })
        .collect();
    let backup = serde_json::json!({"lease_audit_log": entries});
    let file = fleet.dir.path().join("backup.json");
    std::fs::write(&file, backup.to_string()).unwrap();
    assert!(fleet.ctl(&["registry", "import", file.to_str().unwrap()]).status.success());
    let export = fleet.dir.path().join("pruned.json");
    let out = fleet.ctl(&[
        "registry",
        "prune",
        "--audit-before",
        "2026-11-21",
        "--export",
        export.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["audit_entries_pruned"], 20);
    let left = fleet.ctl(&["lease", "audit", "--json"]);
    let left: Vec<serde_json::Value> = serde_json::from_slice(&left.stdout).unwrap();
    assert_eq!(left.first().unwrap()["id"], 21);
    assert_eq!(left.len(), 10);

    let archive = Fleet::new();
    let out = archive.ctl(&["registry", "import", export.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let restored = archive.ctl(&["lease", "audit", "--json"]);
    let restored: Vec<serde_json::Value> = serde_json::from_slice(&restored.stdout).unwrap();
    assert_eq!(
        restored.iter().map(|e| e["id"].as_i64().unwrap()).collect::<Vec<_>>(),
        (1..=20).collect::<Vec<_>>()
    );

    let conn = rusqlite::Connection::open(&fleet.registry).unwrap();
    let err = conn.execute("DELETE FROM lease_audit_log", []).unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
}

/// `lease keep-alive`, as etcdctl's: it renews past the lease's TTL (a line for each
/// renewal), and SIGTERM releases the lease and exits 0. A keep-alive whose lease is
/// ended behind its back (released by its holder elsewhere) exits 1 on its next renewal,
/// saying it lost the lease.
#[test]
fn keep_alive_renews_past_the_ttl_and_releases_when_stopped() {
    let fleet = Fleet::new();
    let acquire = |key: &str| {
        let out = fleet.ctl(&["lease", "acquire", "--key", key, "--owner", "me", "--ttl", "2", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let acquired: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let lease = &acquired["lease"];
        (lease["lease_id"].as_str().unwrap().to_owned(), lease["fencing_epoch"].to_string())
    };
    let keep_alive = |key: &str, id: &str, epoch: &str| {
        fleet
            .fleetctl()
            .args(["lease", "keep-alive", "--key", key, "--owner", "me", "--lease-id", id, "--epoch", epoch])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let status = |key: &str| {
        let out = fleet.ctl(&["lease", "show", "--key", key, "--json"]);
        let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (shown[0]["status"].as_str().unwrap().to_owned(), shown[0]["fencing_epoch"].to_string())
    };

    let (id, epoch) = acquire("workflow:kept");
    let child = keep_alive("workflow:kept", &id, &epoch);
    // Twice the TTL: without the renewals the lease would have expired.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(status("workflow:kept"), ("held".to_owned(), epoch.clone()), "kept alive at its epoch");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{printed}{}", String::from_utf8_lossy(&out.stderr));
    assert!(printed.lines().filter(|l| l.starts_with("renewed workflow:kept")).count() >= 3, "{printed}");
    assert!(printed.ends_with("released workflow:kept\n"), "{printed}");
    assert_eq!(status("workflow:kept").0, "released");

    let (id, epoch) = acquire("workflow:lost");
    let child = keep_alive("workflow:lost", &id, &epoch);
    std::thread::sleep(Duration::from_millis(300));
    let released = fleet.ctl(&[
        "lease",
        "release",
        "--key",
        "workflow:lost",
        "--owner",
        "me",
        "--lease-id",
        &id,
        "--epoch",
        &epoch,
    ]);
    assert!(released.status.success(), "{}", String::from_utf8_lossy(&released.stderr));
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("lost workflow:lost"), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
}
