//! What a local user who is not the operator, or a leaked environment, can do to the
//! binaries: predictable names in shared directories, authority files others may
//! write, a FIFO handed in place of a file, and a database password in the
//! environment. Each test plays the attack for real.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Fleet, fleetctl_bin, sibling_bin};

const KEY: &str = "connector:acme/agent-7/slack-main";
const SECRET_URL: &str = "postgres://fleet:s3cr3t-pw@127.0.0.1:1/fleet";

fn policy(fleet: &Fleet) -> std::path::PathBuf {
    let rule = serde_json::json!({"tenant": "acme", "agent": "agent-7", "binding": "slack-main",
        "connector": "conn-a", "scopes": ["chat.read"], "max_ttl_s": 60});
    let path = fleet.dir.path().join("policy.json");
    std::fs::write(&path, serde_json::json!({"allow": [rule]}).to_string()).unwrap();
    path
}

/// Runs `cmd` and kills it if it has not finished within `limit`: a hang is a failure,
/// never a test that waits forever.
fn output_within(mut cmd: Command, limit: Duration) -> std::process::Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The command's context lives in a directory created afresh, private and with an
/// unpredictable name: a directory another user made at the old predictable name
/// (`fleetctl-connector-PID`, mode 0777) is not used, and the command is not handed the
/// registry's location, which may carry a password.
#[test]
fn the_connector_context_is_private_and_the_command_gets_no_registry() {
    let fleet = Fleet::new();
    let policy = policy(&fleet);
    let tmp = fleet.dir.path().join("shared-tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let seen = fleet.dir.path().join("seen");
    let script = format!(
        "d=$(dirname \"$FLEET_CONNECTOR_CONTEXT\"); echo \"$d\" > {0}; stat -c %a \"$d\" >> {0}; \
         echo \"registry=${{FLEET_REGISTRY:-none}}\" >> {0}",
        seen.display()
    );
    let out = fleet
        .fleetctl()
        .env("TMPDIR", &tmp)
        .args(["connector", "run", "--key", KEY, "--owner", "conn-a", "--scope", "chat.read", "--policy"])
        .arg(&policy)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen = std::fs::read_to_string(&seen).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    let dir = std::path::Path::new(lines[0]);
    assert_eq!(dir.parent(), Some(tmp.as_path()), "{seen}");
    let name = dir.file_name().unwrap().to_string_lossy();
    let suffix = name.strip_prefix("fleetctl-connector-").unwrap_or_else(|| panic!("{name}"));
    assert!(suffix.len() >= 6 && !suffix.bytes().all(|b| b.is_ascii_digit()), "not a process id: {name}");
    assert_eq!(lines[1], "700", "{seen}");
    assert_eq!(lines[2], "registry=none", "{seen}");
    assert!(!dir.exists(), "the directory is removed when the command ends");
}

/// A policy grants connector scopes, so it is read as profiles are: one that others may
/// write is refused, and a FIFO given in its place is refused at once, not waited on.
#[test]
fn a_policy_others_may_write_or_a_fifo_is_refused_at_once() {
    let fleet = Fleet::new();
    let loose = policy(&fleet);
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o666)).unwrap();
    let fifo = fleet.dir.path().join("policy.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for (path, needle) in [(&loose, "writable by others"), (&fifo, "not a regular file")] {
        let mut cmd = fleet.fleetctl();
        cmd.args(["connector", "run", "--key", KEY, "--owner", "conn-a", "--scope", "chat.read", "--policy"])
            .arg(path)
            .args(["--", "true"]);
        let out = output_within(cmd, Duration::from_secs(20));
        common::assert_one_line_error(&out, 2, needle);
    }
    assert!(
        fleet.workers_once_created().is_none_or(|rows| rows.is_empty()),
        "nothing was registered or held"
    );
}

/// Every help screen of every binary, with `FLEET_REGISTRY` holding a password: the
/// password is on none of them.
#[test]
fn no_help_screen_shows_a_password_from_the_environment() {
    let bins = [(fleetctl_bin(), 20), (sibling_bin("fleet-launch"), 5), (sibling_bin("fleet-mcp"), 1)];
    for (bin, at_least) in bins {
        let mut pending = vec![Vec::<String>::new()];
        let mut screens = 0;
        while let Some(path) = pending.pop() {
            let out = Command::new(&bin)
                .args(&path)
                .arg("--help")
                .env("FLEET_REGISTRY", SECRET_URL)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            screens += 1;
            assert!(
                !text.contains("s3cr3t"),
                "{} {path:?} --help shows the password:\n{text}",
                bin.display()
            );
            // Subcommands are listed under "Commands:" as "  NAME  description".
            let commands =
                text.split("Commands:").nth(1).and_then(|rest| rest.split("\n\n").next()).unwrap_or("");
            for line in commands.lines() {
                let name = line.split_whitespace().next().unwrap_or("");
                if !name.is_empty() && name != "help" && line.starts_with("  ") && !line.starts_with("   ") {
                    pending.push(path.iter().cloned().chain([name.to_owned()]).collect());
                }
            }
        }
        assert!(screens >= at_least, "{}: only {screens} help screens read", bin.display());
    }
}

/// `faketime` (Debian's package, which `.ci/run` installs) runs a command with its clock
/// calls shifted (libfaketime; documented in faketime(1)). Its README documents
/// `FAKETIME_DONT_FAKE_MONOTONIC=1`, which the tests set: a host whose wall clock is
/// wrong still counts intervals right, and std's timed waits use the monotonic clock.
fn faketime() -> Option<std::path::PathBuf> {
    let path = std::path::PathBuf::from("/usr/bin/faketime");
    path.exists().then_some(path)
}

/// A worker of another host whose clock is an hour ahead, and one an hour behind, among
/// healthy workers with a 2 s TTL (a sweep every tick): in neither case is a healthy
/// worker ever marked stale, and the skewed worker itself is what the snapshot reports.
/// The other host is played as the two-host test plays one: a mount namespace in which
/// its own machine id is bind-mounted over `/etc/machine-id` (unshare(1), mount(8)),
/// where the probe reads the host id — processes of one host share one kernel clock, so
/// only another host's clock can be skewed.
#[test]
fn a_worker_whose_clock_is_an_hour_off_marks_no_healthy_worker_stale() {
    let Some(faketime) = faketime() else {
        eprintln!(
            "faketime is not installed (apt-get install faketime): no process can be given a skewed clock here"
        );
        return;
    };
    if !common::mount_namespaces_available() {
        eprintln!("skipped: another host is played in a mount namespace, which needs root here");
        return;
    }
    for offset in ["+1h", "-1h"] {
        let fleet = Fleet::new();
        let id = fleet.mint("codex");
        let said = fleet.dir.path().join("skewed.stderr");
        let worker = |namespace: &str, skew: Option<&str>| {
            let mut cmd = match skew {
                Some(skew) => {
                    let mut cmd = common::on_another_host(fleet.dir.path(), &faketime);
                    cmd.args(["-f", skew]).arg(fleetctl_bin()).env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
                    cmd.stderr(std::fs::File::create(&said).unwrap());
                    cmd
                }
                None => {
                    let mut cmd = Command::new(fleetctl_bin());
                    cmd.stderr(Stdio::null());
                    cmd
                }
            };
            cmd.args(["worker", "run", "--namespace", namespace, "--ttl", "2", "--", "sleep", "60"])
                .env("FLEET_REGISTRY", &fleet.registry)
                .env("GITEA_MCP_CLIENT", "codex")
                .env("GITEA_MCP_CLIENT_INSTANCE", &id)
                .current_dir(fleet.dir.path())
                .stdout(Stdio::null())
                // faketime runs the worker as its child: the group is ended whole.
                .process_group(0);
            cmd.spawn().unwrap()
        };
        let mut children: Vec<_> =
            ["author", "reviewer", "merger", "controller"].iter().map(|ns| worker(ns, None)).collect();
        common::wait_for(Duration::from_secs(30), || {
            (fleet.workers_once_created()?.len() == 4).then_some(())
        });
        let honest: Vec<String> = fleet.workers().iter().map(|r| r.worker_identity.to_string()).collect();
        children.push(worker("reconciler", Some(offset)));
        common::wait_for(Duration::from_secs(30), || (fleet.workers().len() == 5).then_some(()));
        // Four TTLs: every worker sweeps on each of its ticks.
        let watch = Instant::now();
        while watch.elapsed() < Duration::from_secs(8) {
            for row in fleet.workers() {
                if honest.contains(&row.worker_identity.to_string()) {
                    assert_ne!(
                        row.ownership_state,
                        Some(fleet_registry::OwnershipState::Stale),
                        "{offset}: healthy worker {} marked stale",
                        row.worker_identity
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let out = fleet.ctl(&["snapshot", "--json"]);
        let snapshot: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let stale: Vec<&str> = snapshot["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["code"] == "stale_worker")
            .flat_map(|f| f["worker_identities"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()))
            .collect();
        let skewed = fleet.workers().into_iter().find(|r| r.namespace.as_str() == "reconciler").unwrap();
        assert_eq!(stale, [skewed.worker_identity.as_str()], "{offset}: only the skewed worker is reported");
        for child in &mut children {
            let group = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
        }
        let said = std::fs::read_to_string(&said).unwrap();
        assert!(
            said.contains("does not sweep") && said.contains("check this host's clock"),
            "{offset}: {said}"
        );
    }
}

/// On SQLite a lease's expiry is judged on the store's clock, which is the wall clock of
/// the host the file lives on as its kernel keeps it, never on the caller's: a caller
/// whose own clock was set an hour back cannot grant itself a lease that lapsed an hour
/// ago, nor one an hour ahead hold a 2 s lease for an hour.
#[test]
fn a_lease_is_judged_on_the_stores_clock_whatever_the_callers_clock_says() {
    let Some(faketime) = faketime() else {
        eprintln!(
            "faketime is not installed (apt-get install faketime): no process can be given a skewed clock here"
        );
        return;
    };
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let skewed = |offset: &str, key: &str, ttl: &str| {
        let mut cmd = Command::new(&faketime);
        cmd.args(["-f", offset])
            .arg(fleetctl_bin())
            .args(["lease", "acquire", "--key", key, "--owner", "skewed", "--ttl", ttl, "--json"])
            .env("FLEET_REGISTRY", &fleet.registry)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let honest = |key: &str| {
        fleet.ctl(&["lease", "acquire", "--key", key, "--owner", "honest", "--ttl", "5", "--json"])
    };
    skewed("-1h", "workflow:behind", "120");
    let out = honest("workflow:behind");
    assert_eq!(out.status.code(), Some(1), "a live lease is held: {}", String::from_utf8_lossy(&out.stdout));
    let said = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
    assert!(String::from_utf8_lossy(&said).contains("lease_held"), "{}", String::from_utf8_lossy(&said));
    skewed("+1h", "workflow:ahead", "2");
    std::thread::sleep(Duration::from_millis(2500));
    let out = honest("workflow:ahead");
    assert!(out.status.success(), "a 2 s lease lapsed after 2.5 s: {}", String::from_utf8_lossy(&out.stderr));
    let taken: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(taken["lease"]["fencing_epoch"], 2, "{taken}");
}

/// A worker on the registry's own host whose clock alone is an hour off (a preloaded
/// time library) marks no healthy worker stale: the store's clock, which it does not
/// share, holds its sweeps back, and it says so.
#[test]
fn a_process_whose_clock_alone_is_off_marks_no_healthy_worker_stale() {
    let Some(faketime) = faketime() else {
        eprintln!(
            "faketime is not installed (apt-get install faketime): no process can be given a skewed clock here"
        );
        return;
    };
    for offset in ["+1h", "-1h"] {
        let fleet = Fleet::new();
        let id = fleet.mint("codex");
        let said = fleet.dir.path().join("skewed.stderr");
        let worker = |namespace: &str, skew: Option<&str>| {
            let mut cmd = Command::new(skew.map_or(fleetctl_bin(), |_| faketime.clone()));
            if let Some(skew) = skew {
                cmd.args(["-f", skew]).arg(fleetctl_bin()).env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
                cmd.stderr(std::fs::File::create(&said).unwrap());
            } else {
                cmd.stderr(Stdio::null());
            }
            cmd.args(["worker", "run", "--namespace", namespace, "--ttl", "2", "--", "sleep", "60"])
                .env("FLEET_REGISTRY", &fleet.registry)
                .env("GITEA_MCP_CLIENT", "codex")
                .env("GITEA_MCP_CLIENT_INSTANCE", &id)
                .current_dir(fleet.dir.path())
                .stdout(Stdio::null())
                // faketime runs the worker as its child: the group is ended whole.
                .process_group(0);
            cmd.spawn().unwrap()
        };
        let mut children: Vec<_> = ["author", "reviewer"].iter().map(|ns| worker(ns, None)).collect();
        common::wait_for(Duration::from_secs(30), || {
            (fleet.workers_once_created()?.len() == 2).then_some(())
        });
        children.push(worker("reconciler", Some(offset)));
        common::wait_for(Duration::from_secs(30), || (fleet.workers().len() == 3).then_some(()));
        let watch = Instant::now();
        while watch.elapsed() < Duration::from_secs(5) {
            for row in fleet.workers().iter().filter(|r| r.namespace.as_str() != "reconciler") {
                assert_ne!(
                    row.ownership_state,
                    Some(fleet_registry::OwnershipState::Stale),
                    "{offset}: healthy worker {} marked stale",
                    row.worker_identity
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for child in &mut children {
            let group = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
        }
        let said = std::fs::read_to_string(&said).unwrap();
        assert!(said.contains("does not sweep") && said.contains("off the registry's"), "{offset}: {said}");
    }
}

/// A row written with the file's triggers switched off (`.dbconfig enable_trigger off`,
/// sqlite3(1); here rusqlite's `set_db_config`) leaves no trace in the history a
/// long-lived reader follows, and a change marker that moves once and then stands
/// still. `snapshot --watch` must still show it within the bound on what fools that
/// proof (`WHOLE_READ_EVERY`, a minute): the rows are read whole at least that often,
/// marker or not.
#[test]
fn a_long_lived_reader_sees_a_write_that_fooled_its_proof_within_the_bound() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    fleet.register_and_release(&fleet.mint("codex"), "author");
    let mut watch = fleet
        .fleetctl()
        .args(["snapshot", "--watch", "--interval", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (lines, seen) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let verdict = |line: &str| {
        if line.contains("UNSAFE") {
            Some(false)
        } else if line.contains("SAFE") {
            Some(true)
        } else {
            None
        }
    };
    // The watch has read the fleet: SAFE.
    loop {
        let line = seen.recv_timeout(Duration::from_secs(30)).expect("the watch draws");
        if verdict(&line) == Some(true) {
            break;
        }
    }
    let conn = rusqlite::Connection::open(&fleet.registry).unwrap();
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false).unwrap();
    conn.execute(
        "INSERT INTO worker_registrations (worker_identity, namespace, status, ownership_state, registered_at, \
         last_heartbeat_at, heartbeat_ttl_s) VALUES ('wkr-author-ghost', 'author', 'active', 'stale', \
         '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', 2)",
        [],
    )
    .unwrap();
    drop(conn);
    let written = Instant::now();
    assert_eq!(fleet.ctl(&["snapshot", "--gate"]).status.code(), Some(1), "a fresh snapshot: UNSAFE");
    let shown = loop {
        let line = seen
            .recv_timeout(Duration::from_secs(90).saturating_sub(written.elapsed()))
            .expect("the watch shows the row within the bound");
        if verdict(&line) == Some(false) {
            break written.elapsed();
        }
    };
    eprintln!("the watch showed the row {shown:?} after it was written");
    assert!(shown <= fleet_registry::WHOLE_READ_EVERY + Duration::from_secs(3), "{shown:?}");
    let _ = watch.kill();
    let _ = watch.wait();
}

/// A "database server" on loopback that accepts every connection and never says a
/// word (a stalled host, a port that swallows bytes). Connections are kept open for
/// as long as the listener lives.
fn silent_server() -> (u16, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        listener.set_nonblocking(true).unwrap();
        let start = Instant::now();
        // Bounded: the server stops by itself.
        while start.elapsed() < Duration::from_secs(60) {
            match listener.accept() {
                Ok((socket, _)) => open.push(socket),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    (port, held)
}

/// Every command answers within its bound when the PostgreSQL server accepts and never
/// answers: with the default deadline, with TLS required, and with the connection
/// string's own `connect_timeout` (which the driver alone applies to the TCP connect).
#[test]
fn a_database_server_that_never_answers_fails_within_the_deadline() {
    let (port, _server) = silent_server();
    let fleet = Fleet::new();
    let cases = [
        (format!("postgres://postgres@127.0.0.1:{port}/test"), &["snapshot"][..], 10),
        (format!("postgres://postgres@127.0.0.1:{port}/test?sslmode=require"), &["worker", "list"][..], 10),
        (format!("postgres://postgres@127.0.0.1:{port}/test?connect_timeout=2"), &["retire", "plan"][..], 2),
    ];
    let started: Vec<_> = cases
        .iter()
        .map(|(url, args, deadline)| {
            let mut cmd = fleet.fleetctl();
            cmd.env("FLEET_REGISTRY", url).args(*args);
            let start = Instant::now();
            let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
            (child, start, *deadline, url)
        })
        .collect();
    for (mut child, start, deadline, url) in started {
        // The deadline plus room for a loaded machine; a hang is caught, not waited out.
        let limit = Duration::from_secs(deadline + 15);
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > limit {
                let _ = child.kill();
                panic!("{url}: still waiting after {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        common::assert_one_line_error(&out, 3, &format!("did not answer within {deadline} s"));
    }
}

/// Part of the schema removed by hand (`DROP TABLE registry_changes`, a dropped
/// append-only trigger): every command names what is missing and how to mend it, and
/// `registry init` builds it again, after which the audit log is append-only again.
#[test]
fn a_schema_piece_removed_by_hand_is_named_and_rebuilt_by_registry_init() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let db = rusqlite::Connection::open(&fleet.registry).unwrap();
    db.execute_batch("DROP TABLE registry_changes; DROP TRIGGER lease_audit_log_is_append_only_delete;")
        .unwrap();
    let out = fleet.ctl(&["worker", "list"]);
    common::assert_one_line_error(&out, 3, "table registry_changes");
    assert!(String::from_utf8_lossy(&out.stderr).contains("fleetctl registry init"));
    let init = fleet.ctl(&["registry", "init"]);
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    assert!(String::from_utf8_lossy(&init.stderr).contains("rebuilt"), "init says what it rebuilt");
    assert!(fleet.ctl(&["worker", "list"]).status.success());
    db.execute(
        "INSERT INTO lease_audit_log (event, outcome, lease_key, kind, at) \
         VALUES ('acquire', 'acquired', 'workflow:x', 'workflow', '2026-07-30T12:00:00Z')",
        [],
    )
    .unwrap();
    let deleted = db.execute("DELETE FROM lease_audit_log", []);
    assert!(deleted.is_err_and(|e| e.to_string().contains("append-only")));
}

/// A table that held rows is not rebuilt empty: both the reader and `registry init`
/// refuse, saying to restore a backup, and the file is left as it was.
#[test]
fn a_table_of_rows_removed_by_hand_is_not_rebuilt_empty() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let db = rusqlite::Connection::open(&fleet.registry).unwrap();
    db.execute_batch("DROP TABLE leases").unwrap();
    for args in [&["worker", "list"][..], &["registry", "init"][..]] {
        let out = fleet.ctl(args);
        common::assert_one_line_error(&out, 3, "restore the registry from a backup");
    }
    let tables: i64 = db
        .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'leases'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(tables, 0, "nothing was created in its place");
}

/// One HTTP exchange: sends `request` and reads the whole answer (the server closes).
fn http(listen: &str, request: &[u8]) -> String {
    let mut stream = std::net::TcpStream::connect(listen).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    use std::io::{Read, Write};
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// `fleetctl serve` with a descriptor limit of 64 against hostile clients: a flood of
/// idle connections past the limit, a client that pipelines scrapes and never reads, a
/// header of megabytes, another method. Through all of it, honest scrapes are answered,
/// and a registry that cannot be read answers 503 without naming its path.
#[test]
fn serve_keeps_answering_through_floods_and_clients_that_never_read() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let script = format!("ulimit -n 64 && exec {} serve --listen {listen}", fleetctl_bin().display());
    let mut server = Command::new("sh");
    server.args(["-c", &script]).env("FLEET_REGISTRY", &fleet.registry).stderr(Stdio::null());
    let mut server = server.spawn().unwrap();
    common::wait_for(Duration::from_secs(10), || std::net::TcpStream::connect(&listen).ok());
    let scrape = || http(&listen, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");

    // Idle connections past the descriptor limit, held open.
    let idle: Vec<_> = (0..150).filter_map(|_| std::net::TcpStream::connect(&listen).ok()).collect();
    // A client that pipelines scrapes and never reads an answer.
    let mut greedy = std::net::TcpStream::connect(&listen).unwrap();
    {
        use std::io::Write;
        let _ = greedy.write_all(&b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(2000));
    }
    drop(idle);
    let answer = common::wait_for(Duration::from_secs(30), || {
        Some(scrape()).filter(|a| a.starts_with("HTTP/1.1 200"))
    });
    assert!(answer.contains("fleet_workers"), "{answer}");
    assert!(server.try_wait().unwrap().is_none(), "the server is still running");

    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 4 << 20));
    huge.extend_from_slice(b"\r\n\r\n");
    assert!(http(&listen, &huge).starts_with("HTTP/1.1 431"));
    let post = http(&listen, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(post.starts_with("HTTP/1.1 405") && post.contains("Allow: GET, HEAD"), "{post}");
    assert!(http(&listen, b"GET /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    assert!(http(&listen, b"\x16\x03\x01garbage\r\n\r\n").starts_with("HTTP/1.1 400"));

    std::fs::remove_file(&fleet.registry).unwrap();
    let unavailable = scrape();
    assert!(unavailable.starts_with("HTTP/1.1 503"), "{unavailable}");
    assert!(
        !unavailable.contains(fleet.dir.path().to_str().unwrap()),
        "the body names no path: {unavailable}"
    );
    drop(greedy);
    let _ = server.kill();
    let _ = server.wait();
}

/// `fleetctl serve` (1024 descriptors, as a default shell has) while 300 clients hold
/// half-sent requests open, trickling a byte now and then as a slowloris does: each
/// scrape is answered at once, and the server's memory stays within a few megabytes of
/// what it was.
#[test]
fn serve_answers_scrapes_while_300_clients_hold_half_requests() {
    use std::io::Write;
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let script = format!("ulimit -n 1024 && exec {} serve --listen {listen}", fleetctl_bin().display());
    let mut server = Command::new("sh");
    server.args(["-c", &script]).env("FLEET_REGISTRY", &fleet.registry).stderr(Stdio::null());
    let mut server = server.spawn().unwrap();
    common::wait_for(Duration::from_secs(10), || std::net::TcpStream::connect(&listen).ok());
    let scrape = || http(&listen, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(scrape().starts_with("HTTP/1.1 200"));
    let rss = || -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap().to_owned();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let before = rss();

    let mut slow: Vec<_> = (0..300)
        .filter_map(|_| {
            let mut s = std::net::TcpStream::connect(&listen).ok()?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").ok()?;
            Some(s)
        })
        .collect();
    for round in 0..3 {
        for s in &mut slow {
            let _ = s.write_all(b"a");
        }
        let answer = scrape();
        assert!(answer.starts_with("HTTP/1.1 200"), "round {round}: {answer:.200}");
    }
    let after = rss();
    assert!(after < before + 16 * 1024, "memory grew from {before} kB to {after} kB");
    assert!(server.try_wait().unwrap().is_none(), "the server is still running");
    drop(slow);
    let _ = server.kill();
    let _ = server.wait();
}

/// A launch stopped as Ctrl-Z stops it (SIGSTOP to its process group) beside a launch one
/// of whose workers crashed (SIGKILL): the hung launch's workers, alive on this host and
/// silent, are not taken as evidence against this host's clock, so the crashed row is
/// marked stale by the live workers' sweep within its TTL and a few ticks.
#[test]
fn a_ctrl_z_launch_never_holds_back_the_sweep_of_a_crashed_worker() {
    let fleet = Fleet::new();
    let launch = |client: &str, group: i32| -> Vec<std::process::Child> {
        let id = fleet.mint(client);
        let mut group = group;
        ["author", "reviewer", "merger"]
            .iter()
            .map(|namespace| {
                let child = fleet
                    .fleetctl()
                    .args(["worker", "run", "--namespace", namespace, "--ttl", "2", "--", "sleep", "120"])
                    .env("GITEA_MCP_CLIENT", client)
                    .env("GITEA_MCP_CLIENT_INSTANCE", &id)
                    .process_group(group)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                if group == 0 {
                    group = i32::try_from(child.id()).unwrap();
                }
                child
            })
            .collect()
    };
    let mut hung = launch("codex", 0);
    let mut crashing = launch("claude_code", 0);
    common::wait_for(Duration::from_secs(30), || (fleet.workers_once_created()?.len() == 6).then_some(()));
    let group = nix::unistd::Pid::from_raw(i32::try_from(hung[0].id()).unwrap());
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let victim = crashing.remove(0);
    common::wait_until_running(victim.id());
    let victim_pid = i32::try_from(victim.id()).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim_pid), nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    let mut victim = victim;
    let _ = victim.wait();
    let crashed = fleet
        .workers()
        .into_iter()
        .find(|r| {
            r.client_type.as_ref().is_some_and(|c| c.as_str() == "claude_code")
                && r.namespace.as_str() == "author"
        })
        .unwrap()
        .worker_identity;
    let watch = Instant::now();
    let mut stale = None;
    while stale.is_none() && watch.elapsed() < Duration::from_secs(15) {
        let row = fleet.workers().into_iter().find(|r| r.worker_identity == crashed);
        stale = row.filter(|r| r.ownership_state == Some(fleet_registry::OwnershipState::Stale));
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGCONT);
    for child in hung.iter_mut().chain(crashing.iter_mut()) {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(stale.is_some(), "the crashed worker's row was marked stale while the other launch was stopped");
}
