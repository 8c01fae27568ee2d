//! Two hosts on one machine, sharing one PostgreSQL registry over a network link.
//!
//! Each host is a network namespace joined to this one by a veth pair (ip-netns(8),
//! ip-link(8) `type veth`), with a UTS namespace for its own hostname and a mount
//! namespace in which its own machine id is bind-mounted over `/etc/machine-id`
//! (unshare(1)), which is where the probe reads the host id. The registry server
//! listens on this namespace's loopback, so each link ends in a small TCP relay here.
//! Each host runs a launch of five workers.
//!
//! Cutting host A's link (its veth taken down) must leave host B honest: B's plan
//! preserves A's lapsed rows as `host_binding_unproven` and retires none; a lease A held
//! is taken over by B once its TTL passes; and when the link heals, A's next operation
//! on that lease is refused as `stale_epoch` in the audit log.
//!
//! Needs root (namespaces, veth) and `FLEET_TEST_POSTGRES_URL` on 127.0.0.1; skips,
//! saying why, where either is missing. `.ci/run` on these machines runs it.

mod common;

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{INSTANCE_VARS, Schema, base_url, fleetctl_bin, sibling_bin, wait_for};

/// Runs `ip` with `args`, and says whether it worked.
fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Copies bytes both ways between two sockets until either side closes.
fn splice(a: TcpStream, b: TcpStream) {
    for (mut from, mut to) in [(a.try_clone().unwrap(), b.try_clone().unwrap()), (b, a)] {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(std::net::Shutdown::Both);
        });
    }
}

/// One simulated host: its namespace, the veth end on this side, its address for the
/// registry, and its machine id.
struct Host {
    name: &'static str,
    netns: String,
    veth: String,
    gateway: String,
    machine_id: PathBuf,
    workers: Vec<Child>,
}

impl Host {
    /// Creates the namespace and the link; `None` where this machine cannot.
    fn new(name: &'static str, index: u8, dir: &Path) -> Option<Self> {
        let tag = std::process::id() % 100_000;
        let (netns, veth, peer) =
            (format!("fw-{name}-{tag}"), format!("fw{index}r{tag}"), format!("fw{index}p{tag}"));
        let subnet = format!("10.{}.{index}", 20 + tag % 200);
        let host = Self {
            name,
            netns: netns.clone(),
            veth: veth.clone(),
            gateway: format!("{subnet}.1"),
            machine_id: dir.join(format!("machine-id-{name}")),
            workers: Vec::new(),
        };
        if !ip(&["netns", "add", &netns]) {
            return None;
        }
        let ok = ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer])
            && ip(&["link", "set", &peer, "netns", &netns])
            && ip(&["addr", "add", &format!("{subnet}.1/24"), "dev", &veth])
            && ip(&["link", "set", &veth, "up"])
            && ip(&["-n", &netns, "addr", "add", &format!("{subnet}.2/24"), "dev", &peer])
            && ip(&["-n", &netns, "link", "set", &peer, "up"])
            && ip(&["-n", &netns, "link", "set", "lo", "up"]);
        // A host id of its own: 32 hex digits, like /etc/machine-id.
        let id = format!("{}\n", std::iter::repeat_n(char::from(b'a' + index), 32).collect::<String>());
        std::fs::write(&host.machine_id, id).unwrap();
        ok.then_some(host)
    }

    /// The registry URL as this host reaches it: through its link.
    fn registry(&self, schema: &Schema) -> String {
        schema.url().replacen("127.0.0.1", &self.gateway, 1)
    }

    /// Relays connections from this host's link to the server on this side's loopback.
    fn relay(&self) {
        let listener = TcpListener::bind((self.gateway.as_str(), 5432)).expect("relay listens on the link");
        std::thread::spawn(move || {
            for inbound in listener.incoming().flatten() {
                if let Ok(outbound) = TcpStream::connect("127.0.0.1:5432") {
                    splice(inbound, outbound);
                }
            }
        });
    }

    /// `program` run on this host: in its network namespace, with its hostname and its
    /// machine id.
    fn command(&self, program: &Path, schema: &Schema) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            &self.netns,
            "unshare",
            "--mount",
            "--uts",
            "--propagation",
            "private",
            "--",
        ])
        .args(["sh", "-c", r#"mount --bind "$0" /etc/machine-id && hostname "$1" && shift && exec "$@""#])
        .arg(&self.machine_id)
        .arg(self.name)
        .arg(program)
        .env("FLEET_REGISTRY", self.registry(schema));
        for var in INSTANCE_VARS {
            cmd.env_remove(var);
        }
        cmd
    }

    fn fleetctl(&self, schema: &Schema, args: &[&str]) -> std::process::Output {
        self.command(&fleetctl_bin(), schema).args(args).output().unwrap()
    }

    /// Mints an instance on this host and starts its five workers.
    fn launch(&mut self, schema: &Schema) {
        let out =
            self.command(&sibling_bin("fleet-launch"), schema).args(["mint", "--client", "codex"]).output();
        let out = out.unwrap();
        assert!(out.status.success(), "{}: {}", self.name, String::from_utf8_lossy(&out.stderr));
        let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        for namespace in ["author", "reviewer", "merger", "controller", "reconciler"] {
            let child = self
                .command(&sibling_bin("fleet-mcp"), schema)
                .args(["--namespace", namespace, "--ttl", "2"])
                .env("GITEA_MCP_CLIENT", "codex")
                .env("GITEA_MCP_CLIENT_INSTANCE", &id)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            self.workers.push(child);
        }
    }

    fn set_link(&self, state: &str) {
        assert!(ip(&["link", "set", &self.veth, state]), "link {state}");
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            let _ = worker.kill();
            let _ = worker.wait();
        }
        ip(&["link", "del", &self.veth]);
        ip(&["netns", "del", &self.netns]);
    }
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_cut_host_is_neither_retired_nor_left_holding_authority() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    if !base.contains("@127.0.0.1:") {
        eprintln!("skipped: the relay reaches the registry server only on 127.0.0.1");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(mut a) = Host::new("host-a", 1, dir.path()) else {
        eprintln!("skipped: this machine cannot create network namespaces and veth pairs (needs root)");
        return;
    };
    let Some(mut b) = Host::new("host-b", 2, dir.path()) else {
        eprintln!("skipped: this machine cannot create network namespaces and veth pairs (needs root)");
        return;
    };
    let schema = Schema::new(&base);
    let here = |args: &[&str]| {
        let mut cmd = Command::new(fleetctl_bin());
        cmd.env("FLEET_REGISTRY", schema.url()).args(args);
        cmd.output().unwrap()
    };
    assert!(here(&["registry", "init"]).status.success());
    a.relay();
    b.relay();
    a.launch(&schema);
    b.launch(&schema);

    // Ten live workers, five from each host, each row naming its host.
    let host_of = |snapshot: &serde_json::Value, worker: &str| {
        snapshot["workers"].as_array().unwrap().iter().find(|w| w["worker_identity"] == worker).unwrap()["host_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let snapshot = wait_for(Duration::from_secs(20), || {
        let snap = json(&here(&["snapshot", "--json"]));
        (snap["counts"]["live_worker_count"] == 10).then_some(snap)
    });
    let rows_of = |host: char| -> Vec<String> {
        snapshot["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["worker_identity"].as_str().unwrap().to_owned())
            .filter(|w| host_of(&snapshot, w).starts_with(host))
            .collect()
    };
    let (rows_a, rows_b) = (rows_of('b'), rows_of('c'));
    assert_eq!((rows_a.len(), rows_b.len()), (5, 5), "{snapshot}");

    // Host A holds a lease with a short TTL.
    let lease = json(&a.fleetctl(
        &schema,
        &["lease", "acquire", "--key", "workflow:two-hosts", "--owner", "host-a", "--ttl", "2", "--json"],
    ));
    let lease = &lease["lease"];
    let (lease_id, epoch) =
        (lease["lease_id"].as_str().unwrap().to_owned(), lease["fencing_epoch"].as_u64().unwrap());

    // Cut host A off, and let its heartbeats and its lease lapse.
    a.set_link("down");
    std::thread::sleep(Duration::from_millis(3500));

    // Host B plans: A's rows are preserved because B cannot speak for A's host.
    let plan = json(&b.fleetctl(&schema, &["retire", "plan", "--json"]));
    assert_eq!(plan["candidate_count"], 0, "{plan}");
    let reasons_a: Vec<&str> = plan["preserved"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| rows_a.iter().any(|r| p["worker_identity"] == r.as_str()))
        .map(|p| p["reason_code"].as_str().unwrap())
        .collect();
    assert_eq!(reasons_a, ["host_binding_unproven"; 5], "{plan}");
    // B takes the lapsed lease over, at a higher epoch.
    let taken = json(&b.fleetctl(
        &schema,
        &["lease", "acquire", "--key", "workflow:two-hosts", "--owner", "host-b", "--ttl", "30", "--json"],
    ));
    assert!(taken["lease"]["fencing_epoch"].as_u64().unwrap() > epoch, "{taken}");
    assert_eq!(taken["lease"]["owner"], "host-b", "{taken}");

    // The link heals: A's next operation on its old lease is refused.
    a.set_link("up");
    let epoch_text = epoch.to_string();
    let renew = a.fleetctl(
        &schema,
        &[
            "lease",
            "renew",
            "--key",
            "workflow:two-hosts",
            "--owner",
            "host-a",
            "--lease-id",
            &lease_id,
            "--epoch",
            &epoch_text,
            "--ttl",
            "2",
        ],
    );
    assert_eq!(renew.status.code(), Some(1), "{}", String::from_utf8_lossy(&renew.stderr));
    let audit = json(&here(&["lease", "audit", "--key", "workflow:two-hosts", "--json"]));
    let last = audit.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (
            last["event"].as_str(),
            last["outcome"].as_str(),
            last["reason"].as_str(),
            last["identity"].as_str()
        ),
        (Some("renew"), Some("denied"), Some("stale_epoch"), Some("host-a")),
        "{audit}"
    );
    // Nothing of A's was retired while it was cut off.
    let snapshot = json(&here(&["snapshot", "--json"]));
    for worker in snapshot["workers"].as_array().unwrap() {
        if rows_a.iter().any(|r| r == worker["worker_identity"].as_str().unwrap()) {
            assert_eq!(worker["status"], "active", "{worker}");
        }
    }
    let _ = std::io::stderr().flush();
}
