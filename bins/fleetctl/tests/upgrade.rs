//! Only `fleetctl registry upgrade` changes a registry's schema: every other command on
//! an older registry exits 3 with one line naming it, and leaves the file exactly as it
//! was; the upgrade's dry run prints the steps and changes nothing; the upgrade keeps a
//! private copy first and then serves every command.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{Fleet, assert_one_line_error};

fn user_version(path: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap()
}

#[test]
fn an_older_registry_is_upgraded_by_the_upgrade_command_alone() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let current = user_version(&fleet.registry);
    // The registry as the build before this one left it: without its last step.
    {
        let conn = rusqlite::Connection::open(&fleet.registry).unwrap();
        conn.execute_batch(&format!(
            "DROP INDEX worker_registrations_active; DROP TABLE fleet_schema_compatibility; \
             PRAGMA user_version = {};",
            current - 1
        ))
        .unwrap();
    }
    let before = std::fs::read(&fleet.registry).unwrap();

    for args in [&["snapshot"][..], &["worker", "list"], &["registry", "init"], &["lease", "show"]] {
        let out = fleet.ctl(args);
        assert_one_line_error(&out, 3, "fleetctl registry upgrade");
    }
    let planned = fleet.ctl(&["registry", "upgrade", "--dry-run"]);
    assert!(planned.status.success(), "{planned:?}");
    let text = String::from_utf8_lossy(&planned.stdout);
    assert!(text.contains(&format!("step {current}: ")) && text.contains("would upgrade"), "{text}");
    assert_eq!(std::fs::read(&fleet.registry).unwrap(), before, "nothing but the upgrade wrote");
    assert_eq!(user_version(&fleet.registry), current - 1);

    let done = fleet.ctl(&["registry", "upgrade", "--json"]);
    assert!(done.status.success(), "{done:?}");
    let report: serde_json::Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!((report["from"].as_i64(), report["to"].as_i64()), (Some(current - 1), Some(current)));
    let copy = std::path::PathBuf::from(report["backup"].as_str().unwrap());
    assert_eq!(std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(user_version(&copy), current - 1, "the copy is the registry as it was");
    assert_eq!(user_version(&fleet.registry), current);
    assert!(fleet.ctl(&["snapshot"]).status.success());
    let again = fleet.ctl(&["registry", "upgrade"]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("nothing to upgrade"), "{again:?}");
}

#[test]
fn every_binary_names_the_schema_versions_it_writes() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let written = user_version(&fleet.registry);
    for bin in [common::fleetctl_bin(), common::sibling_bin("fleet-mcp"), common::sibling_bin("fleet-launch")]
    {
        let out = std::process::Command::new(&bin).arg("--version").output().unwrap();
        assert!(out.status.success(), "{bin:?}: {out:?}");
        let line = String::from_utf8_lossy(&out.stdout);
        assert!(line.contains(env!("CARGO_PKG_VERSION")), "{line}");
        assert!(line.contains(&format!("SQLite {written}")), "{bin:?} says {line}");
        // Built from a git checkout (CI's clean clone), it names the commit.
        let head = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        if let Some(head) = head {
            assert!(line.contains(&format!("git {head}")), "{bin:?} says {line}, HEAD is {head}");
        }
    }
}
