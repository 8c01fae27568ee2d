//! A PostgreSQL primary and its streaming standbys of the test's own, started from the
//! server binaries on the machine (`pg_config --bindir`: initdb, pg_ctl,
//! pg_basebackup), each on its own port and data directory, TCP on 127.0.0.1 only, trust
//! authentication. As root (CI), the binaries run as the `postgres` user, as the
//! server refuses to run as root. Set up as PostgreSQL's documentation describes
//! streaming replication (chapter 27.2: `wal_level = replica`, `pg_basebackup -R`);
//! a promotion is `pg_ctl promote`, a crash `pg_ctl stop -m immediate`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// One server of the cluster.
pub struct PgServer {
    pub port: u16,
    data: PathBuf,
    bin: PathBuf,
    running: bool,
}

/// Where the server binaries are, if the machine has them.
pub fn server_binaries() -> Option<PathBuf> {
    let out = Command::new("pg_config").arg("--bindir").output().ok()?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let found = ["initdb", "pg_ctl", "pg_basebackup"].iter().all(|b| dir.join(b).exists());
    found.then_some(dir)
}

/// Whether this process runs as root (its effective uid, from /proc).
fn as_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().nth(1));
    uid == Some("0")
}

/// A command running `program` as the `postgres` user when this process is root.
fn server_command(program: &Path) -> Command {
    if as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// `program args`, as the `postgres` user when this process is root; it must succeed.
fn run(program: &Path, args: &[&str]) -> Output {
    let out = server_command(program).args(args).output().expect("run a PostgreSQL server binary");
    assert!(
        out.status.success(),
        "{} {args:?}: {}{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// An empty directory the server's user owns (mode 0700, as the server wants it).
fn server_dir(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
    if as_root() {
        let chown = Command::new("chown").args(["postgres:postgres"]).arg(path).status().unwrap();
        assert!(chown.success());
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn append(path: &Path, lines: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    writeln!(f, "{lines}").unwrap();
}

impl PgServer {
    /// A new primary in `dir` (made readable by the server's user), with `conf` lines
    /// added to its configuration, started.
    pub fn primary(bin: &Path, dir: &Path, name: &str, conf: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = dir.join(name);
        server_dir(&data);
        run(&bin.join("initdb"), &["-D", data.to_str().unwrap(), "-U", "postgres", "--auth=trust", "-N"]);
        let port = free_port();
        append(
            &data.join("postgresql.conf"),
            &format!(
                "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n\
                 wal_level = replica\nmax_wal_senders = 8\nhot_standby = on\nwal_keep_size = '64MB'\n\
                 shared_buffers = '16MB'\nmax_connections = 40\nfsync = off\n{conf}"
            ),
        );
        let mut server = Self { port, data, bin: bin.to_owned(), running: false };
        server.start();
        server
    }

    /// A streaming standby of `primary` in `dir/name` (`pg_basebackup -R`), with `conf`
    /// lines overriding what it copied, started.
    pub fn standby_of(primary: &Self, dir: &Path, name: &str, conf: &str) -> Self {
        let data = dir.join(name);
        server_dir(&data);
        let port = free_port();
        run(
            &primary.bin.join("pg_basebackup"),
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                data.to_str().unwrap(),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ],
        );
        // The copy's auto.conf (primary_conninfo, anything ALTER SYSTEM set) is read last.
        append(&data.join("postgresql.auto.conf"), &format!("port = {port}\n{conf}"));
        let mut server = Self { port, data, bin: primary.bin.clone(), running: false };
        server.start();
        server
    }

    fn pg_ctl(&self, args: &[&str]) {
        let mut all = vec!["-D", self.data.to_str().unwrap()];
        all.extend_from_slice(args);
        run(&self.bin.join("pg_ctl"), &all);
    }

    pub fn start(&mut self) {
        let log = self.data.join("server.log");
        self.pg_ctl(&["-l", log.to_str().unwrap(), "-w", "-t", "60", "start"]);
        self.running = true;
    }

    /// A crash: the server stops at once, as a killed host's would (no shutdown
    /// checkpoint, connections cut).
    pub fn crash(&mut self) {
        self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        self.running = false;
    }

    /// A clean stop.
    pub fn stop(&mut self) {
        self.pg_ctl(&["-m", "fast", "-w", "stop"]);
        self.running = false;
    }

    /// Promotes a standby to primary, waiting until it accepts writes.
    pub fn promote(&self) {
        self.pg_ctl(&["-w", "-t", "60", "promote"]);
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// One value of `sql`, as text.
    pub fn value(&self, sql: &str) -> String {
        let mut client = postgres::Client::connect(&self.url(), postgres::NoTls).expect("connect");
        let rows = client.simple_query(sql).expect("query");
        rows.iter()
            .find_map(|m| match m {
                postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or_default().to_owned()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// Runs `sql`.
    pub fn execute(&self, sql: &str) {
        let mut client = postgres::Client::connect(&self.url(), postgres::NoTls).expect("connect");
        client.batch_execute(sql).expect("execute");
    }

    /// Waits until this standby has replayed everything `primary` wrote so far.
    pub fn caught_up_with(&self, primary: &Self) {
        let target = primary.value("SELECT pg_current_wal_lsn()");
        super::wait_for(Duration::from_secs(30), || {
            let done = self.value(&format!("SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"));
            (done == "t").then_some(())
        });
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.running {
            let _ = server_command(&self.bin.join("pg_ctl"))
                .args(["-D", self.data.to_str().unwrap_or_default(), "-m", "immediate", "stop"])
                .output();
        }
    }
}

/// A URL naming `servers` in turn, writes going to whichever is the primary
/// (libpq's multi-host form, which tokio-postgres reads the same way).
pub fn multi_host_url(servers: &[&PgServer]) -> String {
    let hosts: Vec<String> = servers.iter().map(|s| format!("127.0.0.1:{}", s.port)).collect();
    format!(
        "postgres://postgres@{}/postgres?target_session_attrs=read-write&connect_timeout=3",
        hosts.join(",")
    )
}
