//! Simulated hosts on one machine, reaching one PostgreSQL registry over a network link
//! of their own.
//!
//! Each host is a network namespace joined to this one by a veth pair (ip-netns(8),
//! ip-link(8) `type veth`). Every command run on it also gets namespaces of its own
//! (unshare(1)): a UTS namespace for its hostname; a mount namespace in which the
//! host's machine id is bind-mounted over `/etc/machine-id` and its boot id over
//! `/proc/sys/kernel/random/boot_id` (mount(8) `--bind`), where the probe reads them;
//! and a PID namespace (`--fork --mount-proc`), whose first process takes every process
//! in it down when it dies (pid_namespaces(7)), as a host that vanishes takes its
//! processes with it. The registry server listens on this namespace's loopback, so
//! each link ends in a small TCP relay here; taking the link down partitions the host.
//! Each host has a runtime directory of its own (`XDG_RUNTIME_DIR`, another host's
//! `/run/user`) and a `/dev/shm` of its own (where faketime(1) keeps its semaphores,
//! named by pids that another host's PID namespace reuses). The hosts share the machine's kernel and its clock: a skewed clock is
//! played with faketime(1).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::INSTANCE_VARS;

/// Runs `ip` with `args`, and says whether it worked.
pub fn ip(args: &[&str]) -> bool {
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
/// registry, its machine id and boot id, and the processes started on it.
pub struct NetHost {
    pub name: &'static str,
    netns: String,
    veth: String,
    gateway: String,
    machine_id_file: PathBuf,
    boot_id_file: PathBuf,
    /// The host's machine id (32 hex digits).
    pub machine_id: String,
    /// Its current boot id.
    pub boot_id: String,
    children: Vec<Child>,
}

impl NetHost {
    /// Creates the namespace and the link for host `index` (distinct per host of a
    /// test); `None` where this machine cannot (not root).
    pub fn new(name: &'static str, index: u8, dir: &Path) -> Option<Self> {
        let tag = std::process::id() % 100_000;
        let (netns, veth, peer) =
            (format!("fw-{name}-{tag}"), format!("fw{index}r{tag}"), format!("fw{index}p{tag}"));
        let subnet = format!("10.{}.{index}", 20 + tag % 200);
        let machine_id: String = std::iter::repeat_n(char::from(b'a' + index % 6), 32).collect();
        let mut host = Self {
            name,
            netns: netns.clone(),
            veth: veth.clone(),
            gateway: format!("{subnet}.1"),
            machine_id_file: dir.join(format!("machine-id-{name}")),
            boot_id_file: dir.join(format!("boot-id-{name}")),
            machine_id,
            boot_id: String::new(),
            children: Vec::new(),
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
        std::fs::write(&host.machine_id_file, format!("{}\n", host.machine_id)).unwrap();
        host.boot(1);
        ok.then_some(host)
    }

    /// Gives the host boot `n`: a boot id of its own, which later commands see.
    pub fn boot(&mut self, n: u8) {
        self.boot_id = format!("{:02x}{}", n, "0".repeat(30));
        std::fs::write(&self.boot_id_file, format!("{}\n", self.boot_id)).unwrap();
    }

    /// `url` as this host reaches it: through its link.
    pub fn registry(&self, url: &str) -> String {
        url.replacen("127.0.0.1", &self.gateway, 1)
    }

    /// Relays connections from this host's link to the server on this side's loopback.
    pub fn relay(&self) {
        let listener = TcpListener::bind((self.gateway.as_str(), 5432)).expect("relay listens on the link");
        std::thread::spawn(move || {
            for inbound in listener.incoming().flatten() {
                if let Ok(outbound) = TcpStream::connect("127.0.0.1:5432") {
                    splice(inbound, outbound);
                }
            }
        });
    }

    /// `program` run on this host: in its network namespace, with its hostname, its
    /// machine id and boot id, in a PID namespace of its own, against `url`.
    pub fn command(&self, program: &Path, url: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.netns, "unshare", "--mount", "--uts", "--pid", "--fork"])
            .args(["--mount-proc", "--propagation", "private", "--kill-child=SIGKILL", "--", "sh", "-c"])
            .arg(
                r#"mount --bind "$0" /etc/machine-id && mount --bind "$1" /proc/sys/kernel/random/boot_id && mount -t tmpfs tmpfs /dev/shm && hostname "$2" && shift 2 && exec "$@""#,
            )
            .arg(&self.machine_id_file)
            .arg(&self.boot_id_file)
            .arg(self.name)
            .arg(program)
            .env("FLEET_REGISTRY", self.registry(url))
            // A host's own /run: where its keepers record the trees they keep.
            .env("XDG_RUNTIME_DIR", self.boot_id_file.with_extension("run"));
        for var in INSTANCE_VARS.iter().chain(&["GITEA_MCP_LAUNCH_PROCESS"]) {
            cmd.env_remove(var);
        }
        cmd
    }

    /// Keeps `child` as one of this host's processes: it dies with the host.
    pub fn keep(&mut self, child: Child) {
        self.children.push(child);
    }

    /// Takes the link down (`"down"`) or up again (`"up"`).
    /// Brought up, the link is waited on until the host reaches its relay: `ip link set
    /// up` returns before the link carries traffic, and the host's neighbour entry for
    /// the gateway, failed while the link was down, answers a connection at once with
    /// "no route to host" (EHOSTUNREACH) until it is resolved again (arp(7)).
    pub fn set_link(&self, state: &str) {
        assert!(ip(&["link", "set", &self.veth, state]), "link {state}");
        if state == "up" {
            let probe = format!("exec 3<>/dev/tcp/{}/5432", self.gateway);
            super::wait_for(std::time::Duration::from_secs(10), || {
                Command::new("ip")
                    .args(["netns", "exec", &self.netns, "bash", "-c", &probe])
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
                    .then_some(())
            });
        }
    }

    /// The host dies with every process started on it.
    pub fn vanish(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.children.clear();
    }
}

impl Drop for NetHost {
    fn drop(&mut self) {
        self.vanish();
        ip(&["link", "del", &self.veth]);
        ip(&["netns", "del", &self.netns]);
    }
}
