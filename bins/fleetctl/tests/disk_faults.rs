//! The disk fails under the registry: a full filesystem (a small tmpfs). Every operation
//! completes or writes nothing, exits 3 naming the cause, and the file stays whole.

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

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_writes_nothing_and_says_so() {
    let fleet = Fleet::new();
    let Some(disk) = SmallDisk::mount(fleet.dir.path()) else {
        eprintln!("skipped: this machine cannot mount a tmpfs (needs root)");
        return;
    };
    let registry = disk.0.join("registry.sqlite3");
    let ctl = |args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", &registry).args(args).output().unwrap();
    assert!(ctl(&["registry", "init"]).status.success());
    assert!(ctl(&["lease", "acquire", "--key", "workflow:before", "--owner", "me"]).status.success());
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
