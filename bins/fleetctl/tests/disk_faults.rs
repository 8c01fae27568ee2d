//! The disk fails under the registry: a full filesystem (a small tmpfs), a filesystem
//! remounted read-only, and another writer that holds the lock past the busy timeout.
//! Every operation completes or writes nothing, exits 3 naming the cause, and the file
//! stays whole.

mod common;

use std::process::Command;

use common::{Fleet, assert_one_line_error};

/// A 1 MiB tmpfs, unmounted when dropped; `None` where this machine may not mount.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: &std::path::Path) -> Option<Self> {
        let path = dir.join("disk");
        std::fs::create_dir(&path).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(&path)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Self(path))
    }
}

impl SmallDisk {
    fn remount(&self, mode: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "remount {mode}");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A registry on a fresh small disk, holding one lease (`workflow:before`); `None`
/// where this machine may not mount. The disk is unmounted before the fleet's directory
/// goes (bindings drop in reverse order).
fn registry_on_a_small_disk() -> Option<(Fleet, SmallDisk, std::path::PathBuf)> {
    let fleet = Fleet::new();
    let disk = SmallDisk::mount(fleet.dir.path())?;
    let registry = disk.0.join("registry.sqlite3");
    let ctl = |args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", &registry).args(args).output().unwrap();
    assert!(ctl(&["registry", "init"]).status.success());
    assert!(ctl(&["lease", "acquire", "--key", "workflow:before", "--owner", "me"]).status.success());
    Some((fleet, disk, registry))
}

#[test]
fn a_full_disk_writes_nothing_and_says_so() {
    let Some((fleet, disk, registry)) = registry_on_a_small_disk() else {
        eprintln!("skipped: this machine cannot mount a tmpfs (needs root)");
        return;
    };
    let ctl = |args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", &registry).args(args).output().unwrap();
    // Fill the disk.
    let filler = disk.0.join("filler");
    let _ = std::fs::write(&filler, vec![0u8; 2 << 20]);

    let mut refused = 0;
    for i in 0..50 {
        let out = ctl(&["lease", "acquire", "--key", &format!("workflow:w{i}"), "--owner", &"o".repeat(200)]);
        match out.status.code() {
            Some(0) => {}
            Some(3) => {
                assert_one_line_error(&out, 3, "full");
                refused += 1;
                break;
            }
            other => panic!("exit {other:?}: {}", String::from_utf8_lossy(&out.stderr)),
        }
    }
    assert_eq!(refused, 1, "the disk filled up");
    // Room again: the registry is whole and holds what was committed.
    std::fs::remove_file(&filler).unwrap();
    let out = ctl(&["lease", "show", "--key", "workflow:before", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let conn = rusqlite::Connection::open(&registry).unwrap();
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
    drop(conn);
}

#[test]
fn a_read_only_filesystem_writes_nothing_and_says_so() {
    let Some((fleet, disk, registry)) = registry_on_a_small_disk() else {
        eprintln!("skipped: this machine cannot mount a tmpfs (needs root)");
        return;
    };
    let ctl = |args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", &registry).args(args).output().unwrap();
    let before = std::fs::read(&registry).unwrap();

    disk.remount("ro");
    let out = ctl(&["lease", "acquire", "--key", "workflow:after", "--owner", "me"]);
    assert_one_line_error(&out, 3, "read-only");
    // Reading needs no write: a read-only filesystem is read.
    let out = ctl(&["lease", "show", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("workflow:before"));
    disk.remount("rw");

    assert_eq!(std::fs::read(&registry).unwrap(), before, "the file is as it was");
    let out = ctl(&["lease", "show", "--json"]);
    let leases: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys: Vec<&str> =
        leases.as_array().unwrap().iter().map(|l| l["lease_key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["workflow:before"]);
}

/// Another connection holds the write lock past the store's busy timeout (10 s): the
/// command gives up, exits 3 saying the registry is busy, and writes nothing.
#[test]
fn a_writer_holding_the_lock_past_the_busy_timeout_fails_busy() {
    let fleet = Fleet::new();
    let registry = fleet.dir.path().join("registry.sqlite3");
    let ctl = |args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", &registry).args(args).output().unwrap();
    assert!(ctl(&["registry", "init"]).status.success());
    let mut holder = rusqlite::Connection::open(&registry).unwrap();
    let held = holder.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).unwrap();

    let out = ctl(&["lease", "acquire", "--key", "workflow:w", "--owner", "me"]);
    assert_one_line_error(&out, 3, "busy");
    // Reads are not blocked by a writer (WAL).
    let out = ctl(&["lease", "show", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
    held.rollback().unwrap();

    let out = ctl(&["lease", "audit", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]", "the refused write left no audit entry");
}
