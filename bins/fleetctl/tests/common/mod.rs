//! Helpers for driving the real binaries against a real registry file in a temporary
//! directory.
#![allow(dead_code, unreachable_pub)]

pub mod acts;
pub mod netns;
pub mod pg_cluster;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use fleet_registry::OpenMode;
use fleet_registry::{Registry, RegistryDump, WorkerRow};
use registry_sqlite::SqliteStore;

pub const INSTANCE_VARS: [&str; 7] = [
    "GITEA_MCP_CLIENT",
    "GITEA_MCP_CLIENT_INSTANCE",
    "GITEA_MCP_INSTANCE_PROVENANCE",
    "GITEA_MCP_CLIENT_SESSION",
    "GITEA_MCP_FLEET_RUN_ID",
    "GITEA_CLIENT_MANAGED",
    "GITEA_MCP_PROFILE",
];

pub fn fleetctl_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fleetctl"))
}

/// A sibling binary of the workspace, built by the same `cargo test` run.
pub fn sibling_bin(name: &str) -> PathBuf {
    let path = fleetctl_bin().with_file_name(name);
    assert!(path.exists(), "{} is not built; run the tests with `cargo test --workspace`", path.display());
    path
}

/// A throw-away registry and the commands that use it.
pub struct Fleet {
    pub dir: tempfile::TempDir,
    pub registry: PathBuf,
}

impl Fleet {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = dir.path().join("registry.sqlite3");
        Self { dir, registry }
    }

    fn command(&self, program: &Path) -> Command {
        self.with_registry(Command::new(program))
    }

    fn with_registry(&self, mut cmd: Command) -> Command {
        cmd.env("FLEET_REGISTRY", &self.registry).current_dir(self.dir.path());
        for var in INSTANCE_VARS {
            cmd.env_remove(var);
        }
        // The test is the client of its launches, as `fleet-launch run` records one: the
        // workers it starts are owned while it runs.
        cmd.env("GITEA_MCP_LAUNCH_PROCESS", fleet_runtime::launch_process_value().expect("this process"));
        cmd
    }

    pub fn fleetctl(&self) -> Command {
        self.command(&fleetctl_bin())
    }

    /// `fleetctl` run as on another host (see [`on_another_host`]).
    pub fn fleetctl_on_another_host(&self) -> Command {
        self.with_registry(on_another_host(self.dir.path(), &fleetctl_bin()))
    }

    pub fn launcher(&self) -> Command {
        self.command(&sibling_bin("fleet-launch"))
    }

    pub fn open(&self) -> Registry<SqliteStore> {
        Registry::new(SqliteStore::open(&self.registry, OpenMode::MustExist).expect("open registry"))
    }

    pub fn workers(&self) -> Vec<WorkerRow> {
        self.open().workers().expect("read workers")
    }

    /// The worker rows, or `None` while the registry does not exist yet.
    pub fn workers_once_created(&self) -> Option<Vec<WorkerRow>> {
        let store = SqliteStore::open(&self.registry, OpenMode::MustExist).ok()?;
        Registry::new(store).workers().ok()
    }

    pub fn export(&self) -> RegistryDump {
        self.open().export().expect("export")
    }

    /// Runs fleetctl with `args` and returns its output.
    pub fn ctl(&self, args: &[&str]) -> Output {
        self.fleetctl().args(args).output().expect("run fleetctl")
    }

    /// A codex worker of launch `id` in `namespace` that registers, runs `true` and
    /// releases its row (`worker run` exits 0).
    pub fn register_and_release(&self, id: &str, namespace: &str) {
        let out = self
            .fleetctl()
            .args(["worker", "run", "--namespace", namespace, "--", "true"])
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", id)
            .output()
            .expect("run fleetctl");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// Mints and records an instance, returning its ID.
    pub fn mint(&self, client: &str) -> String {
        let out = self.launcher().args(["mint", "--client", client]).output().expect("mint");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf8").trim().to_owned()
    }
}

/// Waits until the worker whose row names `pid` runs: `worker run` writes the row before
/// it lets the worker go, and then the worker's keeper (the registered process) starts
/// the command. A test that plays a crash kills the worker after that, as a crash finds
/// it, not while `worker run` still holds it.
pub fn wait_until_running(pid: impl std::fmt::Display) {
    wait_for(Duration::from_secs(30), || {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        (!children.trim().is_empty()).then_some(())
    });
}

/// The arguments of `retire apply` for `plan` (a plan's JSON): its two fingerprints,
/// then `rest`.
pub fn apply_args<'a>(plan: &'a serde_json::Value, rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "retire",
        "apply",
        "--registry-fingerprint",
        plan["registry_fingerprint"].as_str().unwrap_or_default(),
        "--candidate-fingerprint",
        plan["candidate_fingerprint"].as_str().unwrap_or_default(),
    ];
    args.extend_from_slice(rest);
    args
}

/// Polls `check` every 25 ms until it returns `Some`, for at most `limit`.
pub fn wait_for<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < limit, "condition not reached within {limit:?}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Asserts that a failed command printed exactly one line on stderr containing `needle`.
pub fn assert_one_line_error(out: &Output, code: i32, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "expected one line, got: {stderr}");
    assert!(stderr.contains(needle), "{stderr:?} does not mention {needle:?}");
}

/// Creates the stop file and waits for the children when dropped, so a failing test
/// never leaves workers running (they would hold the test harness's output pipes open).
pub struct StopGuard {
    pub stop: PathBuf,
    pub children: Vec<std::process::Child>,
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        // The launches wait for their workers, and the workers for the stop file: waiting
        // on the launches is waiting for every process the test started.
        let _ = std::fs::write(&self.stop, b"");
        for child in &mut self.children {
            let _ = child.wait();
        }
    }
}

/// Asserts a usage error as clap prints it: exit 2, the first line names what was wrong
/// (`needle`), and the rest is clap's help (valid values, usage).
pub fn assert_usage_error(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error:") && first.contains(needle),
        "{stderr:?} does not start with an error naming {needle:?}"
    );
}

/// Whether a process with this pid still exists (a zombie counts as gone).
pub fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    matches!(state, Some(s) if s != "Z" && s != "X")
}

/// The PostgreSQL server the tests may use (`FLEET_TEST_POSTGRES_URL`), if set.
pub fn base_url() -> Option<String> {
    std::env::var("FLEET_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty())
}

/// A schema of its own, dropped afterwards; the registry URL selects it by search path.
/// With `FLEET_TEST_POSTGRES_ISOLATION=database` (through a pooler in transaction mode,
/// where no session state holds: `scripts/through-pgbouncer.sh`) a database of its own.
pub struct Schema {
    pub base: String,
    pub name: String,
}

/// Whether each test's registry gets a database of its own rather than a schema.
pub fn isolated_by_database() -> bool {
    std::env::var("FLEET_TEST_POSTGRES_ISOLATION").is_ok_and(|v| v == "database")
}

/// `url` with its database replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let query = path.split_once('?').map_or("", |(_, q)| q);
    let sep = if query.is_empty() { "" } else { "?" };
    format!("{scheme}://{authority}/{name}{sep}{query}")
}

impl Schema {
    pub fn new(base: &str) -> Self {
        let name = format!("fleet_cli_{}", uuid::Uuid::now_v7().simple());
        let mut client =
            postgres::Client::connect(base, postgres::NoTls).expect("the test PostgreSQL server");
        let create = if isolated_by_database() { "DATABASE" } else { "SCHEMA" };
        client.batch_execute(&format!("CREATE {create} {name}")).unwrap();
        Self { base: base.to_owned(), name }
    }

    pub fn url(&self) -> String {
        if isolated_by_database() {
            return with_database(&self.base, &self.name);
        }
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-csearch_path%3D{}", self.base, self.name)
    }
}

impl Schema {
    /// [`url`](Self::url) with one more query parameter (`name=value`).
    pub fn url_with(&self, param: &str) -> String {
        let url = self.url();
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}{param}")
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let drop = if isolated_by_database() {
                format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)
            } else {
                format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name)
            };
            let _ = client.batch_execute(&drop);
        }
    }
}

/// A TCP relay to the PostgreSQL server that can be told to stop forwarding (both ways)
/// while keeping every connection open: a network that stalls, not one that refuses. A
/// connection closed at either end is closed at the other (after what waited, when the
/// stall ends).
pub struct StallingProxy {
    pub port: u16,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl StallingProxy {
    pub fn to(server: &str) -> Self {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stalled);
        let server = server.to_owned();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(upstream) = std::net::TcpStream::connect(&server) else { continue };
                for (mut from, mut to) in
                    [(client.try_clone().unwrap(), upstream.try_clone().unwrap()), (upstream, client)]
                {
                    let flag = std::sync::Arc::clone(&flag);
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        while let Ok(n @ 1..) = from.read(&mut buf) {
                            while flag.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        // One side closed (a process that ended): the other side learns
                        // it, as across a network that still carries packets.
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Self { port, stalled }
    }

    /// Stops forwarding: every byte in flight either way waits.
    pub fn stall(&self) {
        self.stalled.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Stops forwarding for `pause`, then forwards again what waited (returns at once).
    pub fn stall_for(&self, pause: Duration) {
        self.stall();
        let flag = std::sync::Arc::clone(&self.stalled);
        std::thread::spawn(move || {
            std::thread::sleep(pause);
            flag.store(false, std::sync::atomic::Ordering::SeqCst);
        });
    }

    /// `url` (of the server at 127.0.0.1:5432) through this relay.
    pub fn url(&self, url: &str) -> String {
        let through = url.replacen("127.0.0.1:5432", &format!("127.0.0.1:{}", self.port), 1);
        assert_ne!(through, url, "the test server is at 127.0.0.1:5432");
        through
    }
}

/// Whether this process may make a mount namespace (`unshare -m`; root here).
pub fn mount_namespaces_available() -> bool {
    Command::new("unshare")
        .args(["-m", "true"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A command that runs `program` (its arguments follow) as on another host: in a mount
/// namespace of its own in which a machine id of its own is bind-mounted over
/// `/etc/machine-id`, where the probe reads the host id (unshare(1), mount(8)), with a
/// runtime directory of its own (another host's `/run/user`). Processes of one kernel
/// still share its clock and its pids: only the host's identity is played.
pub fn on_another_host(dir: &Path, program: &Path) -> Command {
    let machine_id = dir.join("other-host-machine-id");
    std::fs::write(&machine_id, "0123456789abcdef0123456789abcdef\n").unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--", "sh", "-c", "mount --bind \"$0\" /etc/machine-id && exec \"$@\""])
        .arg(&machine_id)
        .arg(program)
        .env("XDG_RUNTIME_DIR", dir.join("other-host-run"));
    cmd
}
