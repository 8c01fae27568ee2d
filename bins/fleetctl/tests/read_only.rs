//! A user who may read the registry but not write it (a file of another user's, mode
//! 0644; a read-only mount, as a container's volume) runs every reading command; a
//! writing command is refused in one line and changes nothing.
//!
//! Run as root, the readers run as `nobody` (`setpriv`); run as another user, the files
//! are made read-only to their owner, which the same check refuses.

mod common;

use std::io::{Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Fleet, fleetctl_bin, wait_for};

/// The readers' commands, each with a word its output must hold.
const READERS: [(&[&str], &str); 6] = [
    (&["snapshot", "--json"], "consistency_token"),
    (&["worker", "list"], "author"),
    (&["lease", "show"], "workflow:nightly"),
    (&["lease", "audit"], "workflow:nightly"),
    (&["registry", "export"], "workflow:nightly"),
    (&["metrics"], "fleet_workers"),
];

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A registry with a live worker and a lease, handed over to a reader: as root the
/// directory and files become 0755/0644 (another user, `nobody`, reads them); otherwise
/// 0555/0444 (the owner itself may not write).
fn shared_registry() -> Shared {
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    let running = fleet
        .fleetctl()
        .args(["worker", "run", "--namespace", "author", "--ttl", "30", "--", "sleep", "60"])
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("worker run");
    wait_for(Duration::from_secs(10), || fleet.workers_once_created().filter(|rows| !rows.is_empty()));
    let out = fleet.ctl(&["lease", "acquire", "--key", "workflow:nightly", "--owner", "ops"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (dir_mode, file_mode) = if is_root() { (0o755, 0o644) } else { (0o555, 0o444) };
    for entry in std::fs::read_dir(fleet.dir.path()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(file_mode)).unwrap();
    }
    std::fs::set_permissions(fleet.dir.path(), std::fs::Permissions::from_mode(dir_mode)).unwrap();
    Shared { fleet, children: vec![running] }
}

/// The registry and the processes a test started: killed, and the directory writable
/// again for its removal, however the test ends.
struct Shared {
    fleet: Fleet,
    children: Vec<std::process::Child>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::set_permissions(self.fleet.dir.path(), std::fs::Permissions::from_mode(0o700));
    }
}

/// `fleetctl ARGS` as the reader: `nobody` when this test is root, else this user.
fn as_reader(fleet: &Fleet, args: &[&str]) -> Command {
    let mut cmd = if is_root() {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(fleetctl_bin());
        cmd
    } else {
        Command::new(fleetctl_bin())
    };
    cmd.args(args).env("FLEET_REGISTRY", &fleet.registry).current_dir(fleet.dir.path());
    cmd
}

fn succeeded_with(out: &Output, word: &str, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(word), "{what} printed no {word}: {stdout}");
}

#[test]
fn every_reader_reads_a_registry_this_user_may_only_read() {
    let shared = shared_registry();
    let fleet = &shared.fleet;
    for (args, word) in READERS {
        let out = as_reader(fleet, args).output().unwrap();
        succeeded_with(&out, word, &args.join(" "));
    }
    // A writer as the same user is refused in one line, and nothing changes.
    let before = fleet.export();
    let out = as_reader(fleet, &["lease", "acquire", "--key", "workflow:other", "--owner", "ops"])
        .output()
        .unwrap();
    common::assert_one_line_error(&out, 3, "read-only to this user");
    let after = fleet.export();
    assert_eq!(serde_json::to_value(&before).unwrap(), serde_json::to_value(&after).unwrap());
}

#[test]
fn serve_answers_a_scrape_as_a_user_who_may_only_read() {
    let mut shared = shared_registry();
    let fleet = &shared.fleet;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let server = as_reader(fleet, &["serve", "--listen", &listen]).stderr(Stdio::null()).spawn().unwrap();
    shared.children.push(server);
    let body = wait_for(Duration::from_secs(10), || {
        let mut stream = std::net::TcpStream::connect(&listen).ok()?;
        write!(stream, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        Some(response)
    });
    assert!(body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("fleet_workers{"), "{body}");
}

/// A read-only bind mount of the registry's directory, as a container's volume mounted
/// `:ro`, while the writer keeps writing through the host's path.
#[test]
fn every_reader_reads_a_registry_on_a_read_only_mount() {
    if !is_root() {
        eprintln!("skipped: a read-only bind mount needs root (unshare -m)");
        return;
    }
    let shared = shared_registry();
    let fleet = &shared.fleet;
    let dir = fleet.dir.path().display().to_string();
    for (args, word) in READERS {
        let script = format!(
            "mount --bind {dir} {dir} && mount -o remount,bind,ro {dir} && exec \"$0\" \"$@\"",
            dir = shell_quote(&dir)
        );
        let out = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .arg(fleetctl_bin())
            .args(args)
            .env("FLEET_REGISTRY", &fleet.registry)
            .output()
            .unwrap();
        succeeded_with(&out, word, &format!("{} on a read-only mount", args.join(" ")));
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}
