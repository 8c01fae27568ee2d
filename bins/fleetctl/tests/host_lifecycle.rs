//! A host's life cycle, through the binaries: a host gone for good, fenced by its
//! operator; a host that reboots; two machines cloned from one image; a host fenced
//! while its workers run.
//!
//! Each simulated host is a mount and PID namespace (unshare(1): `--mount --pid --fork
//! --mount-proc`) in which a machine id of its own is bind-mounted over
//! `/etc/machine-id` and a boot id of its own over `/proc/sys/kernel/random/boot_id`
//! (mount(8) `--bind`), which is where the probe reads them; its processes see only
//! each other. Killing the namespace's first process kills every process in it
//! (pid_namespaces(7)), as a host that vanishes takes its processes with it. The hosts
//! share the registry file and the kernel's clock: what is played is each host's
//! identity, its processes and its death. Needs root; skips, saying why, without it.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Fleet, INSTANCE_VARS, fleetctl_bin, sibling_bin, wait_for};

/// One simulated host: its machine id and boot id files, and the launch it runs.
struct SimHost {
    machine_id: String,
    boot_file: PathBuf,
    id_file: PathBuf,
    running: Option<Child>,
}

impl SimHost {
    /// Host `id_char` (its machine id 32 of that hex digit) in boot `boot_char`.
    fn new(fleet: &Fleet, id_char: char, boot_char: char) -> Self {
        let machine_id: String = std::iter::repeat_n(id_char, 32).collect();
        let boot: String = std::iter::repeat_n(boot_char, 32).collect();
        let id_file = fleet.dir.path().join(format!("machine-id-{id_char}-{boot_char}"));
        let boot_file = fleet.dir.path().join(format!("boot-id-{id_char}-{boot_char}"));
        std::fs::write(&id_file, format!("{machine_id}\n")).unwrap();
        std::fs::write(&boot_file, format!("{boot}\n")).unwrap();
        Self { machine_id, boot_file, id_file, running: None }
    }

    /// `program` and its arguments, run on this host.
    fn command(&self, fleet: &Fleet, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--propagation",
            "private",
            "--kill-child=SIGKILL",
            "--",
            "sh",
            "-c",
            r#"mount --bind "$0" /etc/machine-id && mount --bind "$1" /proc/sys/kernel/random/boot_id && shift && exec "$@""#,
        ])
        .arg(&self.id_file)
        .arg(&self.boot_file)
        .arg(program)
        .env("FLEET_REGISTRY", &fleet.registry)
        .env("XDG_RUNTIME_DIR", self.boot_file.with_extension("run"))
        .current_dir(fleet.dir.path());
        for var in INSTANCE_VARS.iter().chain(&["GITEA_MCP_LAUNCH_PROCESS"]) {
            cmd.env_remove(var);
        }
        cmd
    }

    /// Starts a launch of `namespaces` workers (TTL 2 s) that sleep, under
    /// `fleet-launch run`.
    fn launch(&mut self, fleet: &Fleet, namespaces: &[&str]) {
        let script = r#"for ns in $NAMESPACES; do "$FLEETCTL" worker run --namespace "$ns" --ttl 2 -- sleep 600 & done; wait"#;
        let child = self
            .command(fleet, &sibling_bin("fleet-launch"))
            .args(["run", "--client", "codex", "--", "sh", "-c", script])
            .env("NAMESPACES", namespaces.join(" "))
            .env("FLEETCTL", fleetctl_bin())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        self.running = Some(child);
    }

    /// The host dies with every process on it.
    fn vanish(&mut self) {
        if let Some(mut child) = self.running.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for SimHost {
    fn drop(&mut self) {
        self.vanish();
    }
}

fn root_with_namespaces() -> bool {
    Command::new("unshare")
        .args(["--mount", "--pid", "--fork", "--mount-proc", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The active rows of `host`, by its machine id.
fn active_rows(fleet: &Fleet, host: &SimHost) -> Vec<fleet_registry::WorkerRow> {
    fleet
        .workers()
        .into_iter()
        .filter(|r| {
            r.status == fleet_registry::WorkerStatus::Active
                && r.host_id.as_ref().is_some_and(|h| h.as_str() == host.machine_id)
        })
        .collect()
}

/// Waits until `host` has `n` active rows whose heartbeat is fresh.
fn wait_live(fleet: &Fleet, host: &SimHost, n: usize) {
    wait_for(Duration::from_secs(30), || {
        let now = fleet_runtime::now();
        let live = active_rows(fleet, host).iter().filter(|r| !r.heartbeat_expired(now)).count();
        (live == n).then_some(())
    });
}

/// Each preserved or candidate row of `host` in `plan`, with its reason.
fn reasons(plan: &serde_json::Value, fleet: &Fleet, host: &SimHost) -> Vec<String> {
    let mine: Vec<String> = fleet
        .workers()
        .into_iter()
        .filter(|r| r.host_id.as_ref().is_some_and(|h| h.as_str() == host.machine_id))
        .map(|r| r.worker_identity.to_string())
        .collect();
    let mut found: Vec<String> = ["candidates", "preserved"]
        .iter()
        .flat_map(|k| plan[k].as_array().unwrap().iter())
        .filter(|a| mine.iter().any(|m| a["worker_identity"] == m.as_str()))
        .map(|a| a["reason_code"].as_str().unwrap().to_owned())
        .collect();
    found.sort();
    found
}

/// Applies every candidate of `plan`.
fn apply_every(fleet: &Fleet, plan: &serde_json::Value) -> serde_json::Value {
    json(&fleet.ctl(&common::apply_args(plan, &["--every-candidate", "--json"])))
}

/// The registry's gate: exit 0 when the fleet is safe to mutate.
fn gate_is_safe(fleet: &Fleet) -> bool {
    fleet.ctl(&["snapshot", "--gate"]).status.success()
}

#[test]
fn a_host_gone_for_good_is_fenced_and_the_fleet_is_safe_again() {
    if !root_with_namespaces() {
        eprintln!("skipped: this machine cannot make mount and PID namespaces (needs root)");
        return;
    }
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let mut gone = SimHost::new(&fleet, 'b', '1');
    gone.launch(&fleet, &["author", "reviewer"]);
    wait_live(&fleet, &gone, 2);
    assert!(gate_is_safe(&fleet));

    gone.vanish();
    std::thread::sleep(Duration::from_millis(2600));
    assert!(!gate_is_safe(&fleet), "two stale rows of a vanished host block the fleet");
    let plan = json(&fleet.ctl(&["retire", "plan", "--json"]));
    assert_eq!(reasons(&plan, &fleet, &gone), ["host_binding_unproven"; 2], "{plan}");
    let hosts = json(&fleet.ctl(&["host", "list", "-o", "json"]));
    let listed = hosts["hosts"].as_array().unwrap().iter().find(|h| h["host_id"] == gone.machine_id.as_str());
    let listed = listed.unwrap_or_else(|| panic!("the vanished host is listed: {hosts}"));
    assert_eq!(
        (listed["state"].as_str(), listed["stale_rows"].as_u64()),
        (Some("silent"), Some(2)),
        "{hosts}"
    );

    let fenced = fleet.ctl(&["host", "fence", &gone.machine_id, "--reason", "VM deleted by the autoscaler"]);
    assert!(fenced.status.success(), "{}", String::from_utf8_lossy(&fenced.stderr));
    let metrics = String::from_utf8(fleet.ctl(&["metrics"]).stdout).unwrap();
    let fenced_series = format!("fleet_host_fenced{{host=\"{}\"}} 1", gone.machine_id);
    assert!(metrics.contains(&fenced_series), "one series per host says it is fenced:\n{metrics}");
    let plan = json(&fleet.ctl(&["retire", "plan", "--json"]));
    assert_eq!(reasons(&plan, &fleet, &gone), ["eligible_host_fenced"; 2], "{plan}");
    let applied = apply_every(&fleet, &plan);
    assert_eq!(applied["retired_count"], 2, "{applied}");
    assert!(gate_is_safe(&fleet), "the fleet is safe again");

    // The host comes back in the fenced boot: it acts on nothing, and says why.
    let back = gone
        .command(&fleet, &sibling_bin("fleet-launch"))
        .args(["run", "--client", "codex", "--"])
        .arg(fleetctl_bin())
        .args(["worker", "run", "--namespace", "merger", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&back.stderr);
    assert_eq!(back.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("fenced") && stderr.contains("VM deleted"), "{stderr}");
    assert!(active_rows(&fleet, &gone).is_empty(), "nothing registered");

    // Its own host cannot be fenced by a command run on it.
    let own = fleet_probe::host_id().unwrap();
    let refused = fleet.ctl(&["host", "fence", own.as_str(), "--reason", "oops"]);
    assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stderr));
}

#[test]
fn a_rebooted_host_clears_itself_and_a_clone_does_not() {
    if !root_with_namespaces() {
        eprintln!("skipped: this machine cannot make mount and PID namespaces (needs root)");
        return;
    }
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    // Host C reboots: boot 1 dies with its workers, boot 2 starts a new launch.
    let mut first = SimHost::new(&fleet, 'c', '1');
    first.launch(&fleet, &["author", "reviewer"]);
    wait_live(&fleet, &first, 2);
    first.vanish();
    std::thread::sleep(Duration::from_millis(300));
    let mut second = SimHost::new(&fleet, 'c', '2');
    second.launch(&fleet, &["author"]);
    // Host D is two machines cloned from one image: one machine id, two boots, both live.
    let mut clone_a = SimHost::new(&fleet, 'd', '3');
    let mut clone_b = SimHost::new(&fleet, 'd', '4');
    clone_a.launch(&fleet, &["merger"]);
    clone_b.launch(&fleet, &["controller"]);
    wait_for(Duration::from_secs(30), || (active_rows(&fleet, &clone_a).len() == 2).then_some(()));
    // Both beat for a while (a beat every TTL/3), then one clone vanishes: the other's
    // later signs of life prove nothing about it.
    std::thread::sleep(Duration::from_millis(1500));
    clone_a.vanish();
    std::thread::sleep(Duration::from_millis(2600));

    let plan = json(&fleet.ctl(&["retire", "plan", "--json"]));
    let old: Vec<String> =
        reasons(&plan, &fleet, &first).into_iter().filter(|r| r != "worker_live").collect();
    assert_eq!(old, ["eligible_host_rebooted"; 2], "{plan}");
    let on_d = reasons(&plan, &fleet, &clone_a);
    assert_eq!(on_d, ["host_binding_unproven", "worker_live"], "{plan}");
    let hosts = json(&fleet.ctl(&["host", "list", "--json"]));
    let d = hosts["hosts"].as_array().unwrap().iter().find(|h| h["host_id"] == clone_a.machine_id.as_str());
    assert_eq!(d.map(|d| d["cloned"].clone()), Some(serde_json::Value::Bool(true)), "{hosts}");

    let applied = apply_every(&fleet, &plan);
    assert_eq!(applied["retired_count"], 2, "{applied}");
    let new_boot: Vec<_> = active_rows(&fleet, &second).into_iter().filter_map(|r| r.boot_id).collect();
    assert_eq!(new_boot.len(), 1, "the new boot's worker is never retired");
    assert!(new_boot[0].as_str().starts_with('2'));
    assert_eq!(active_rows(&fleet, &clone_b).len(), 2, "both clones' rows stay");
    drop(clone_b);
}

#[test]
fn a_worker_on_a_host_fenced_under_it_ends_its_command_and_says_why() {
    if !root_with_namespaces() {
        eprintln!("skipped: this machine cannot make mount and PID namespaces (needs root)");
        return;
    }
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let mut host = SimHost::new(&fleet, 'e', '5');
    host.launch(&fleet, &["author"]);
    wait_live(&fleet, &host, 1);
    let fenced = fleet.ctl(&["host", "fence", &host.machine_id, "--reason", "host hung; power cut"]);
    assert!(fenced.status.success(), "{}", String::from_utf8_lossy(&fenced.stderr));
    // The launch ends once its worker does: well within the worker's TTL of 2 s.
    let mut child = host.running.take().unwrap();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr_pipe, &mut text);
        text
    });
    wait_for(Duration::from_secs(10), || child.try_wait().unwrap().map(|_| ()));
    let stderr = reader.join().unwrap();
    assert!(stderr.contains("is fenced as gone for good"), "{stderr}");
    assert!(stderr.contains("host hung; power cut"), "{stderr}");
    assert!(stderr.contains("its command was stopped"), "{stderr}");
    assert_eq!(active_rows(&fleet, &host).len(), 1, "its row stays as it was, for retirement to judge");
}
