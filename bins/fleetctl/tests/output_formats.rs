//! kubectl's `-o json|yaml|wide|name` on every listing command (`worker list`,
//! `lease show`, `lease audit`): YAML holds exactly what JSON holds, `name` one
//! `KIND/NAME` per line, `wide` the table with more columns; a format it does not know
//! is a usage error.

mod common;

use common::{Fleet, assert_usage_error};
use serde_json::Value;

fn fleet_with_a_lease_and_a_worker() -> Fleet {
    let fleet = Fleet::new();
    let out = fleet.ctl(&["lease", "acquire", "--key", "workflow:build", "--owner", "me", "--ttl", "300"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    fleet.register_and_release(&fleet.mint("codex"), "author");
    fleet
}

fn stdout(fleet: &Fleet, args: &[&str]) -> String {
    let out = fleet.ctl(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn yaml_holds_what_json_holds_on_every_listing() {
    let fleet = fleet_with_a_lease_and_a_worker();
    for listing in [&["worker", "list"][..], &["lease", "show"], &["lease", "audit"]] {
        let json: Value =
            serde_json::from_str(&stdout(&fleet, &[listing, &["-o", "json"]].concat())).unwrap();
        let yaml: Value =
            serde_norway::from_str(&stdout(&fleet, &[listing, &["-o", "yaml"]].concat())).unwrap();
        assert_eq!(yaml, json, "{listing:?}");
        assert!(json.as_array().is_some_and(|a| !a.is_empty()), "{listing:?}: {json}");
        let legacy: Value = serde_json::from_str(&stdout(&fleet, &[listing, &["--json"]].concat())).unwrap();
        assert_eq!(legacy, json, "--json is -o json");
    }
    let none: Value =
        serde_norway::from_str(&stdout(&fleet, &["lease", "audit", "--key", "workflow:x", "-o", "yaml"]))
            .unwrap();
    assert_eq!(none, serde_json::json!([]), "nothing selected is an empty sequence");
}

/// `-o json|yaml` on the commands that print a result rather than a listing (the
/// snapshot, a plan, a sweep, an init, a lease outcome): YAML holds what JSON holds, and
/// `--json` is `-o json`.
#[test]
fn yaml_holds_what_json_holds_on_every_result() {
    let fleet = fleet_with_a_lease_and_a_worker();
    let repository = fleet.dir.path().to_str().unwrap().to_owned();
    let results: [&[&str]; 5] = [
        &["snapshot"],
        &["retire", "plan", "--canonical-repository", &repository],
        &["registry", "sweep"],
        &["registry", "init"],
        &["lease", "acquire", "--key", "workflow:held", "--owner", "me", "--ttl", "300"],
    ];
    for result in results {
        let json: Value = serde_json::from_str(&stdout(&fleet, &[result, &["-o", "json"]].concat())).unwrap();
        assert!(json.as_object().is_some_and(|o| !o.is_empty()), "{result:?}: {json}");
        if result[0] == "lease" {
            // A second acquire is refused (exit 1), so the YAML form asks about another lease.
            let other =
                [&result[..2], &["--key", "workflow:other", "--owner", "me", "--ttl", "300", "-o", "yaml"]]
                    .concat();
            let yaml: Value = serde_norway::from_str(&stdout(&fleet, &other)).unwrap();
            assert_eq!(yaml["outcome"], "ok", "{yaml}");
            assert_eq!(yaml["lease"]["owner"], json["lease"]["owner"]);
            continue;
        }
        let yaml: Value =
            serde_norway::from_str(&stdout(&fleet, &[result, &["-o", "yaml"]].concat())).unwrap();
        let legacy: Value = serde_json::from_str(&stdout(&fleet, &[result, &["--json"]].concat())).unwrap();
        if result[0] == "snapshot" {
            // Three snapshots at three moments: the same fields, verdict and counts.
            let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
            assert_eq!(keys(&yaml), keys(&json));
            for field in ["live_fleet_safe", "counts"] {
                assert_eq!(yaml[field], json[field], "{field}");
                assert_eq!(legacy[field], json[field], "{field}");
            }
            continue;
        }
        assert_eq!(yaml, json, "{result:?}");
        assert_eq!(legacy, json, "{result:?}: --json is -o json");
    }
}

/// A YAML 1.1 reader (PyYAML, the library kubectl users' Python tools read YAML with;
/// its `safe_load` resolves `yes`, `on`, dates, sexagesimal numbers and the merge key
/// `<<` as YAML 1.1 says) reads every owner back as the string it is.
#[test]
fn yaml_reads_back_as_the_same_strings_in_a_yaml_1_1_reader() {
    let has_pyyaml =
        std::process::Command::new("python3").args(["-c", "import yaml"]).status().is_ok_and(|s| s.success());
    if !has_pyyaml {
        eprintln!("skipped: python3 with PyYAML is not installed (pip install pyyaml)");
        return;
    }
    let fleet = Fleet::new();
    let owners = [
        "yes",
        "no",
        "on",
        "off",
        "y",
        "<<",
        "2026-01-01",
        "2026-12-07T04:07:05.666Z",
        "12:30",
        "0x1F",
        "1e3",
        "0o17",
        "~",
        "null",
        "-",
        "a: b",
        "#x",
        " lead",
        "true",
        "!tag",
        "*alias",
        "&anchor",
        "plain-owner",
    ];
    for (i, owner) in owners.iter().enumerate() {
        let key = format!("workflow:k{i}");
        let out = fleet.ctl(&["lease", "acquire", "--key", &key, "--owner", owner, "--ttl", "300"]);
        assert!(out.status.success(), "{owner}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let yaml = stdout(&fleet, &["lease", "show", "-o", "yaml"]);
    let json = stdout(&fleet, &["lease", "show", "-o", "json"]);
    let read = std::process::Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.stdin.read()), default=repr))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().unwrap().write_all(yaml.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        read.status.success(),
        "PyYAML cannot read it: {}\n{yaml}",
        String::from_utf8_lossy(&read.stderr)
    );
    let by_python: Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(by_python, serde_json::from_str::<Value>(&json).unwrap(), "{yaml}");
}

#[test]
fn name_prints_one_kind_and_name_per_line() {
    let fleet = fleet_with_a_lease_and_a_worker();
    let workers = fleet.workers();
    assert_eq!(
        stdout(&fleet, &["worker", "list", "-o", "name"]),
        format!("worker/{}\n", workers[0].worker_identity)
    );
    assert_eq!(stdout(&fleet, &["lease", "show", "-o", "name"]), "lease/workflow:build\n");
    let audit: Vec<Value> = serde_json::from_str(&stdout(&fleet, &["lease", "audit", "--json"])).unwrap();
    let expected: String = audit.iter().map(|e| format!("audit/{}\n", e["id"])).collect();
    assert_eq!(stdout(&fleet, &["lease", "audit", "-o", "name"]), expected);
}

#[test]
fn wide_adds_the_columns_the_table_leaves_out() {
    let fleet = fleet_with_a_lease_and_a_worker();
    let workers = stdout(&fleet, &["worker", "list", "-o", "wide"]);
    let header = workers.lines().next().unwrap();
    for column in ["WORKER", "HOST", "GENERATION", "EPOCH", "REGISTERED"] {
        assert!(header.contains(column), "{header}");
    }
    let row = fleet.workers().remove(0);
    assert!(workers.contains(&row.registered_at.to_string()), "{workers}");
    let leases = stdout(&fleet, &["lease", "show", "-o", "wide"]);
    assert!(
        leases.lines().next().is_some_and(|h| h.contains("EXPIRES AT") && h.contains("RENEWED AT")),
        "{leases}"
    );
    let audit = stdout(&fleet, &["lease", "audit", "-o", "wide"]);
    assert!(audit.starts_with("ID"), "{audit}");
}

#[test]
fn an_unknown_format_is_a_usage_error() {
    let fleet = fleet_with_a_lease_and_a_worker();
    for listing in [&["worker", "list"][..], &["lease", "show"], &["lease", "audit"]] {
        let out = fleet.ctl(&[listing, &["-o", "toml"]].concat());
        assert_usage_error(&out, "--output");
        let out = fleet.ctl(&[listing, &["-o", "json", "--json"]].concat());
        assert_usage_error(&out, "--json");
    }
}

/// `--watch` on a listing, on a pipe: the listing again only when it changed (one per
/// change, however many looks), in the format asked for; SIGTERM ends it with 0.
/// kubectl's `get -w` prints changes the same way.
#[test]
fn a_watched_listing_on_a_pipe_prints_once_per_change() {
    use std::io::Read as _;
    use std::sync::{Arc, Mutex};

    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let mut child = fleet
        .fleetctl()
        .args(["lease", "show", "-w", "--interval", "0.2", "-o", "name"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let reader = {
        let (seen, mut pipe) = (Arc::clone(&seen), child.stdout.take().unwrap());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let shows = |text: &str| {
        let text = text.to_owned();
        common::wait_for(std::time::Duration::from_secs(20), || {
            seen.lock().unwrap().contains(&text).then_some(())
        })
    };
    for key in ["workflow:a", "workflow:b"] {
        let out = fleet.ctl(&["lease", "acquire", "--key", key, "--owner", "me", "--ttl", "300"]);
        assert!(out.status.success());
        shows(&format!("lease/{key}\n"));
    }
    // Several looks at an unchanged registry print nothing more.
    std::thread::sleep(std::time::Duration::from_millis(800));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
    assert_eq!(*seen.lock().unwrap(), "lease/workflow:a\nlease/workflow:a\nlease/workflow:b\n");
}
