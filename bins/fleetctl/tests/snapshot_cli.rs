//! `fleetctl snapshot` on every SQLite fixture: the table as insta snapshots, the JSON
//! equal to the library's, `--gate` exit codes, and fail-closed input handling.

mod common;

use std::path::PathBuf;

use common::{Fleet, assert_one_line_error};

fn fixtures() -> Vec<(String, serde_json::Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/snapshot");
    let mut out: Vec<(String, serde_json::Value)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            (
                p.file_stem().unwrap().to_string_lossy().into_owned(),
                serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap(),
            )
        })
        .filter(|(_, f): &(String, serde_json::Value)| f["sqlite"].as_bool().unwrap_or(true))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A registry holding the fixture's rows, and the snapshot arguments it needs.
fn load(fixture: &serde_json::Value) -> (Fleet, Vec<String>) {
    let fleet = Fleet::new();
    let registry = fleet.dir.path().join("registry.json");
    std::fs::write(&registry, fixture["registry"].to_string()).unwrap();
    let out = fleet.ctl(&["registry", "import", registry.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut args: Vec<String> =
        vec!["snapshot".into(), "--at".into(), fixture["now"].as_str().unwrap().into()];
    args.extend(serde_json::from_value::<Vec<String>>(fixture["args"].clone()).unwrap());
    if !fixture["manifest"].is_null() {
        let path = fleet.dir.path().join("manifest.json");
        std::fs::write(&path, fixture["manifest"].to_string()).unwrap();
        args.extend(["--manifest".into(), path.display().to_string()]);
    }
    (fleet, args)
}

fn run(fleet: &Fleet, args: &[String], extra: &[&str]) -> std::process::Output {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend(extra);
    fleet.ctl(&all)
}

#[test]
fn every_fixture_prints_its_table() {
    for (name, fixture) in fixtures() {
        let (fleet, args) = load(&fixture);
        let out = run(&fleet, &args, &[]);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        insta::assert_snapshot!(name.clone(), String::from_utf8(out.stdout).unwrap());
    }
}

#[test]
fn the_json_is_the_library_snapshot_and_the_gate_follows_it() {
    for (name, fixture) in fixtures() {
        let (fleet, args) = load(&fixture);
        let out = run(&fleet, &args, &["--json"]);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let expected: serde_json::Value = {
            // The binary reads the live fleet (SNAPSHOT.md, "What a snapshot reads").
            let dump = fleet.export().live();
            let args: Vec<String> = serde_json::from_value(fixture["args"].clone()).unwrap();
            let flag = |f: &str| args.iter().position(|a| a == f).map(|i| args[i + 1].clone());
            let manifest = (!fixture["manifest"].is_null())
                .then(|| fleet_snapshot::Manifest::from_json(&fixture["manifest"].to_string()).unwrap());
            let policy = fleet_snapshot::Policy {
                canonical_repository: flag("--canonical-repository").map(|r| r.parse().unwrap()),
                expected_code_revision: flag("--expected-code-revision"),
            };
            serde_json::to_value(fleet_snapshot::snapshot(fleet_snapshot::SnapshotInput {
                rows: &dump.worker_registrations,
                ledger: &dump.instances,
                manifest: manifest.as_ref(),
                probes: &fleet_snapshot::ProbeResults::new(),
                policy: &policy,
                now: fixture["now"].as_str().unwrap().parse().unwrap(),
            }))
            .unwrap()
        };
        assert_eq!(json, expected, "{name}");
        let safe = json["live_fleet_safe"].as_bool().unwrap();
        let gated = run(&fleet, &args, &["--gate"]);
        assert_eq!(gated.status.code(), Some(if safe { 0 } else { 1 }), "{name}");
    }
}

#[test]
fn an_unreadable_registry_fails_closed_with_exit_3() {
    let fleet = Fleet::new();
    let out = fleet.ctl(&["snapshot", "--gate"]);
    assert_one_line_error(&out, 3, "does not exist");
    std::fs::write(&fleet.registry, b"garbage ".repeat(300)).unwrap();
    let out = fleet.ctl(&["snapshot", "--json"]);
    assert_one_line_error(&out, 3, "not a valid SQLite database");
    assert!(out.stdout.is_empty(), "nothing that looks like a snapshot is printed");
}

#[test]
fn a_bad_manifest_exits_2_with_one_line() {
    let fixture = &fixtures()[0].1;
    let (fleet, _) = load(fixture);
    let before = fleet.export();
    let cases = [
        ("broken.json", "{\"instances\": [".to_owned(), "is not valid"),
        (
            "planner.json",
            r#"{"instances": [{"client_type": "codex", "client_instance_id": "inst-codex-20260730T120000Z-aaaaaaaaaaaa", "namespaces": ["planner"]}]}"#.to_owned(),
            "planner",
        ),
    ];
    for (name, text, needle) in cases {
        let path = fleet.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = fleet.ctl(&["snapshot", "--manifest", path.to_str().unwrap()]);
        assert_one_line_error(&out, 2, needle);
    }
    let out = fleet.ctl(&["snapshot", "--manifest", "/nonexistent/manifest.json"]);
    assert_one_line_error(&out, 2, "cannot read manifest");
    assert_eq!(fleet.export(), before);
}

#[test]
fn a_live_local_fleet_is_safe_and_a_second_worker_in_one_namespace_is_not() {
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    let stop = fleet.dir.path().join("stop");
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.05; done", stop.display());
    let spawn = |ns: &str| {
        fleet
            .fleetctl()
            .args(["worker", "run", "--namespace", ns, "--", "sh", "-c", &wait])
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &id)
            .spawn()
            .unwrap()
    };
    let mut guard = common::StopGuard { stop: stop.clone(), children: Vec::new() };
    for ns in ["author", "reviewer", "merger", "controller", "reconciler"] {
        guard.children.push(spawn(ns));
    }
    common::wait_for(std::time::Duration::from_secs(30), || {
        (fleet.workers_once_created()?.len() == 5).then_some(())
    });
    let out = fleet.ctl(&["snapshot", "--gate", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{json:#}");
    assert_eq!(json["counts"]["live_worker_count"], 5);

    guard.children.push(spawn("merger"));
    common::wait_for(std::time::Duration::from_secs(30), || {
        (fleet.workers_once_created()?.len() == 6).then_some(())
    });
    let out = fleet.ctl(&["snapshot", "--gate", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json["findings"][0]["code"], "duplicate_namespace_worker");
}

/// `--watch` redraws until Ctrl-C and then exits with the gate's code for the last
/// snapshot: 0 for a safe (empty) fleet, 1 once a registry it cannot read stands there.
#[test]
fn watch_redraws_until_interrupted_and_exits_with_the_gate() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let watch = |fleet: &Fleet| {
        let child = fleet
            .fleetctl()
            .args(["snapshot", "--watch", "--interval", "0.2", "--json"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(900));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = watch(&fleet);
    assert_eq!(out.status.code(), Some(0));
    let frames = String::from_utf8(out.stdout).unwrap();
    assert!(frames.lines().count() >= 2, "it redrew: {frames}");
    assert!(frames.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
    std::fs::remove_file(&fleet.registry).unwrap();
    let out = watch(&fleet);
    assert_eq!(out.status.code(), Some(1), "an unreadable registry is not safe");
}

/// The registry copied back in place (`cp backup registry.sqlite3`: the same inode) with
/// its `-wal` and `-shm` deleted, then written by other processes: a watcher that kept
/// its connection would read its own deleted log for ever and never see a commit again
/// (SQLite's `data_version` does not move for it). It notices the log is not the one at
/// the path, opens the registry afresh and shows every row written since.
#[test]
fn a_watcher_sees_the_registry_copied_back_with_its_log_removed() {
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    let register = || fleet.register_and_release(&id, "author");
    register();
    // A row of the launch kept active (in a namespace the registrations below do not
    // supersede), so that its released rows stay in the live fleet the watcher reads
    // (SNAPSHOT.md, "What a snapshot reads").
    let mut keeps_it_live = fleet.workers().remove(0);
    keeps_it_live.worker_identity = "wkr-keeps-the-launch-live".parse().unwrap();
    keeps_it_live.namespace = fleet_identity::Namespace::Reconciler;
    keeps_it_live.status = fleet_registry::WorkerStatus::Active;
    let dump =
        fleet_registry::RegistryDump { instances: Vec::new(), worker_registrations: vec![keeps_it_live] };
    fleet.open().import(&dump).unwrap();
    // The copy is of the file alone: what the log holds is moved into it first.
    let conn = rusqlite::Connection::open(&fleet.registry).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).unwrap();
    drop(conn);
    let backup = std::fs::read(&fleet.registry).unwrap();
    let mut watcher = fleet
        .fleetctl()
        .args(["snapshot", "--watch", "--interval", "0.2", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<serde_json::Value>::new()));
    let reader = {
        let (lines, stdout) = (lines.clone(), watcher.stdout.take().unwrap());
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(serde_json::from_str(&line).unwrap_or_default());
            }
        })
    };
    let rows_shown = |want: u64| {
        common::wait_for(std::time::Duration::from_secs(10), || {
            lines
                .lock()
                .unwrap()
                .iter()
                .rev()
                .take(1)
                .any(|l| l["counts"]["total_rows"] == want)
                .then_some(())
        })
    };
    rows_shown(2);
    std::fs::write(&fleet.registry, &backup).unwrap();
    for suffix in ["-wal", "-shm"] {
        let mut log = fleet.registry.clone().into_os_string();
        log.push(suffix);
        let _ = std::fs::remove_file(&log);
    }
    for _ in 0..3 {
        register();
    }
    let now = u64::try_from(fleet.workers().len()).unwrap();
    assert!(now >= 3, "the writes after the copy landed: {now} rows");
    rows_shown(now);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(watcher.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    watcher.wait().unwrap();
    reader.join().unwrap();
}

/// Seed 000's orphaned and unowned workers, from live processes. A worker whose launch's
/// client dies while the worker still runs says so on its next heartbeat: orphaned. A
/// worker started outside any launch (no launch process in its environment) registers
/// unowned. Each is an active blocker naming its worker, and neither is a retirement
/// candidate while it runs.
#[test]
fn a_worker_outliving_its_client_is_orphaned_and_one_outside_any_launch_is_unowned() {
    use fleet_registry::OwnershipState;
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    let stop = fleet.dir.path().join("stop");
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.05; done", stop.display());
    // The launch's client, recorded as `fleet-launch run` records it.
    let mut client = std::process::Command::new("sleep").arg("600").spawn().unwrap();
    let seen =
        fleet_probe::process_identity(fleet_identity::Pid::new(i64::from(client.id())).unwrap()).unwrap();
    let recorded = format!(
        "{}:{}:{}",
        seen.pid.get(),
        seen.process_start_time.ticks(),
        seen.pid_namespace.unwrap().inode()
    );
    let spawn = |ns: &str, launch: Option<&str>| {
        let mut cmd = fleet.fleetctl();
        cmd.args(["worker", "run", "--namespace", ns, "--ttl", "2", "--", "sh", "-c", &wait])
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &id);
        match launch {
            Some(value) => cmd.env("GITEA_MCP_LAUNCH_PROCESS", value),
            None => cmd.env_remove("GITEA_MCP_LAUNCH_PROCESS"),
        };
        cmd.spawn().unwrap()
    };
    let mut guard = common::StopGuard { stop: stop.clone(), children: Vec::new() };
    guard.children.push(spawn("author", Some(&recorded)));
    guard.children.push(spawn("reviewer", None));
    let rows = common::wait_for(std::time::Duration::from_secs(30), || {
        fleet.workers_once_created().filter(|rows| rows.len() == 2)
    });
    let of = |rows: &[fleet_registry::WorkerRow], ns: &str| {
        rows.iter().find(|r| r.namespace.as_str() == ns).unwrap().clone()
    };
    assert_eq!(of(&rows, "author").ownership_state, Some(OwnershipState::Owned));
    let unowned = of(&rows, "reviewer");
    assert_eq!(unowned.ownership_state, Some(OwnershipState::Unowned));

    client.kill().unwrap();
    client.wait().unwrap();
    let orphan = common::wait_for(std::time::Duration::from_secs(30), || {
        Some(of(&fleet.workers(), "author")).filter(|r| r.ownership_state == Some(OwnershipState::Orphaned))
    });

    let out = fleet.ctl(&["snapshot", "--json"]);
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(snap["live_fleet_safe"], false);
    let named = |code: &str| -> Vec<String> {
        snap["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["code"] == code && f["active_blocker"] == true)
            .flat_map(|f| {
                f["worker_identities"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_owned())
            })
            .collect()
    };
    assert_eq!(named("orphaned_worker"), [orphan.worker_identity.to_string()]);
    assert_eq!(named("unowned_worker"), [unowned.worker_identity.to_string()]);

    let plan = fleet.ctl(&["retire", "plan", "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["candidate_count"], 0, "both still run: {plan}");
}

/// Seed 000's `compare_snapshot_heartbeats` for operators: `snapshot --compare` against an
/// earlier `snapshot --json` says which heartbeats advanced and which worker was lost;
/// a file that is not a whole snapshot is bad input.
#[test]
fn snapshot_compare_proves_heartbeat_continuity_and_names_a_lost_worker() {
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    let dir = fleet.dir.path();
    let spawn = |ns: &str| {
        let stop = dir.join(format!("stop-{ns}"));
        let wait = format!("while [ ! -e '{}' ]; do sleep 0.05; done", stop.display());
        fleet
            .fleetctl()
            .args(["worker", "run", "--namespace", ns, "--ttl", "2", "--", "sh", "-c", &wait])
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &id)
            .spawn()
            .unwrap()
    };
    let mut guard = common::StopGuard { stop: dir.join("stop-reviewer"), children: vec![spawn("author")] };
    guard.children.push(spawn("reviewer"));
    common::wait_for(std::time::Duration::from_secs(30), || {
        fleet.workers_once_created().filter(|r| r.len() == 2)
    });
    let previous = dir.join("previous.json");
    std::fs::write(&previous, fleet.ctl(&["snapshot", "--json"]).stdout).unwrap();
    let compare = || -> serde_json::Value {
        let out = fleet.ctl(&["snapshot", "--json", "--compare", previous.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let continuous = common::wait_for(std::time::Duration::from_secs(30), || {
        Some(compare()).filter(|c| c["continuous"] == true && c["advanced"].as_array().unwrap().len() == 2)
    });
    assert!(continuous["lost"].as_array().unwrap().is_empty(), "{continuous}");

    let author = fleet.workers().into_iter().find(|r| r.namespace.as_str() == "author").unwrap();
    std::fs::write(dir.join("stop-author"), "").unwrap();
    let broken = common::wait_for(std::time::Duration::from_secs(30), || {
        Some(compare()).filter(|c| !c["lost"].as_array().unwrap().is_empty())
    });
    assert_eq!(broken["continuous"], false);
    assert_eq!(broken["lost"], serde_json::json!([author.worker_identity.to_string()]));
    let human = fleet.ctl(&["snapshot", "--compare", previous.to_str().unwrap()]);
    let text = String::from_utf8(human.stdout).unwrap();
    assert!(text.contains("NOT continuous") && text.contains(author.worker_identity.as_str()), "{text}");

    let not_a_snapshot = dir.join("manifest.json");
    std::fs::write(&not_a_snapshot, r#"{"instances": []}"#).unwrap();
    let out = fleet.ctl(&["snapshot", "--compare", not_a_snapshot.to_str().unwrap()]);
    assert_one_line_error(&out, 2, "snapshot_at");
}
