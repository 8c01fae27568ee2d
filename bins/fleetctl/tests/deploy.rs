//! What `deploy/` ships, run as it would be: each container file's entrypoint as pid 1 of
//! a PID namespace (`unshare -p -f --mount-proc`, as a container runtime starts it, with
//! `-e` overrides as `docker run -e` gives them) and each systemd unit's `ExecStart`
//! (systemd.service(5): `%i` is the instance name). The image build itself needs a base
//! image from a registry, which a test cannot count on; what the image runs is the
//! binary these tests build.

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Fleet, fleetctl_bin, wait_for};

fn deploy(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A container file's exec-form instruction (`ENTRYPOINT ["a", "b"]`), as its words.
fn instruction(file: &str, name: &str) -> Vec<String> {
    let line = file.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_else(|| panic!("no {name}"));
    serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{name} is not the exec form: {e}"))
}

/// A unit's `ExecStart`, as its words, for the instance `instance`.
fn exec_start(unit: &str, instance: &str) -> Vec<String> {
    let line = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("ExecStart");
    line.replace("%i", instance).split_whitespace().map(str::to_owned).collect()
}

/// Whether this machine lets us make a PID namespace (root, or user namespaces allowed).
fn pid_namespaces_available() -> bool {
    Command::new("unshare")
        .args(["-p", "-f", "--mount-proc", "--kill-child", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `words` with the program `fleetctl` (bare or by its installed path) as this build's.
fn this_build(words: &[String]) -> (PathBuf, Vec<String>) {
    assert!(words[0].ends_with("fleetctl"), "the entry point is fleetctl: {words:?}");
    (fleetctl_bin(), words[1..].to_vec())
}

/// A server the test started, killed however the test ends (a panicking test must not
/// leave it holding the harness's output).
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn healthz(port: u16) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(stream, "GET /healthz HTTP/1.0\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

#[test]
fn the_worker_image_runs_its_command_as_pid_1_in_the_namespace_it_is_given() {
    if !pid_namespaces_available() {
        eprintln!("skipped: this machine cannot create a PID namespace (unshare -p needs root)");
        return;
    }
    let file = deploy("Containerfile.worker");
    let (program, mut args) = this_build(&instruction(&file, "ENTRYPOINT"));
    assert_eq!(instruction(&file, "CMD").len(), 1, "the image's command follows the entry point");
    // The image's command, played by one that says where it runs.
    args.extend(["sh".into(), "-c".into(), "echo worker pid $$".into()]);
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    let out = Command::new("unshare")
        .args(["-p", "-f", "--mount-proc", "--kill-child", "--"])
        .arg(program)
        .args(&args)
        .env("FLEET_REGISTRY", &fleet.registry)
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .env("FLEET_NAMESPACE", "reviewer")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("worker pid "), "the command ran: {stdout}");
    let rows = fleet.workers();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, fleet_registry::WorkerStatus::Released, "released when the command ended");
    assert_eq!(
        rows[0].namespace,
        fleet_identity::Namespace::Reviewer,
        "the namespace -e FLEET_NAMESPACE names"
    );
    let host = fleet_probe::own_pid_namespace().unwrap();
    assert!(rows[0].pid_namespace.is_some_and(|ns| ns != host), "the row records the container's namespace");
}

#[test]
fn the_serve_image_answers_as_pid_1_and_stops_on_sigterm() {
    if !pid_namespaces_available() {
        eprintln!("skipped: this machine cannot create a PID namespace (unshare -p needs root)");
        return;
    }
    let file = deploy("Containerfile.serve");
    let (program, args) = this_build(&instruction(&file, "ENTRYPOINT"));
    let port = free_port();
    let args: Vec<String> =
        args.into_iter().map(|a| if a == "0.0.0.0:9464" { format!("127.0.0.1:{port}") } else { a }).collect();
    let mut command = Command::new("unshare");
    command.args(["-p", "-f", "--mount-proc", "--kill-child", "--"]).arg(program).args(&args);
    // `docker stop` sends SIGTERM to pid 1 (unshare's one child), which the kernel
    // delivers only to a process that handles it.
    let stopped = serve_then_stop(command, port, |unshare| {
        let mut children = String::new();
        let parent = unshare.id();
        std::fs::File::open(format!("/proc/{parent}/task/{parent}/children"))
            .and_then(|mut f| f.read_to_string(&mut children))
            .unwrap();
        children.split_whitespace().next().and_then(|p| p.parse().ok()).expect("serve")
    });
    assert!(stopped.success(), "serve stops cleanly on SIGTERM: {stopped:?}");
}

/// Runs `command` (a `serve` on `port`) on a new registry until `/healthz` answers 200,
/// then sends SIGTERM to the process `target` names, and returns how it ended.
fn serve_then_stop(
    mut command: Command,
    port: u16,
    target: impl Fn(&std::process::Child) -> i32,
) -> std::process::ExitStatus {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let mut serve = Running(
        command
            .env("FLEET_REGISTRY", &fleet.registry)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let answer = wait_for(Duration::from_secs(10), || healthz(port));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let pid = nix::unistd::Pid::from_raw(target(&serve.0));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    wait_for(Duration::from_secs(5), || serve.0.try_wait().ok().flatten())
}

/// The variables `fleet-launch mint --json` hands out, as the unit's instructions turn
/// them into its environment file (`.env | to_entries[] | "KEY=value"`).
fn minted_env(fleet: &Fleet) -> Vec<(String, String)> {
    let out = fleet.launcher().args(["mint", "--client", "codex", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let minted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let env = minted["env"].as_object().expect("mint --json hands out an env object");
    env.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned())).collect()
}

/// The unit run as systemd runs it: in its `WorkingDirectory=` (here a directory standing
/// for the repository, put where the unit names it), with every variable the launch hands
/// out. Its row is bound to the repository the unit names and carries the launch's
/// provenance and session; the unit's instructions name every variable.
#[test]
fn the_worker_unit_binds_its_row_to_its_repository_with_every_launch_variable() {
    let unit = deploy("fleetctl-worker@.service");
    let fleet = Fleet::new();
    let env = minted_env(&fleet);
    for (key, _) in &env {
        assert!(unit.contains(key.as_str()), "the unit's instructions name {key}");
    }
    let named = unit.lines().find_map(|l| l.strip_prefix("WorkingDirectory=")).expect("WorkingDirectory=");
    let repository = tempfile::tempdir().unwrap();
    let here = std::fs::canonicalize(repository.path()).unwrap().display().to_string();
    let words: Vec<String> =
        exec_start(&unit, "author").into_iter().map(|w| w.replace(named, &here)).collect();
    assert!(words.windows(2).any(|w| w == ["--repository", here.as_str()]), "bound by name: {words:?}");
    let (program, mut args) = this_build(&words);
    assert_eq!(args.last().map(String::as_str), Some("/opt/fleetward/worker-author"), "{args:?}");
    args.pop();
    args.push("true".into());
    let out = Command::new(program)
        .args(&args)
        .current_dir(&here)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("FLEET_REGISTRY", &fleet.registry)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = fleet.workers();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.namespace, fleet_identity::Namespace::Author);
    assert_eq!(row.status, fleet_registry::WorkerStatus::Released);
    assert_eq!(row.repository.as_ref().map(|r| r.as_str()), Some(here.as_str()));
    assert_eq!(row.instance_provenance.as_deref(), Some("trusted_launcher"));
    let session = env.iter().find(|(k, _)| k == "GITEA_MCP_CLIENT_SESSION").map(|(_, v)| v.as_str());
    assert_eq!(row.session_id.as_ref().map(|s| s.as_str()), session);
}

/// The container files build from the repository alone: a first stage builds the
/// binary from the repository's files, the image copies only what that stage built, and
/// an image whose registry URL asks for certificate checks carries the system's roots.
/// (The build itself needs base images from a registry, which a test cannot count on.)
#[test]
fn the_images_build_from_the_repository_and_carry_the_roots_their_url_checks_against() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    for name in ["Containerfile.worker", "Containerfile.serve"] {
        let file = deploy(name);
        let lines: Vec<&str> = file.lines().filter(|l| !l.starts_with('#')).collect();
        let build = lines.iter().find_map(|l| l.strip_prefix("RUN cargo build")).expect("a build stage");
        for line in lines.iter().filter_map(|l| l.strip_prefix("COPY ")) {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["--from=build", from, _] => {
                    let binary = from.rsplit('/').next().unwrap();
                    assert!(from.contains("/target/release/"), "{name}: {from} is built in release");
                    assert!(
                        build.contains(&format!("-p {binary}")),
                        "{name}: the build stage builds {binary}"
                    );
                }
                [".", "."] => assert!(root.join("Cargo.lock").exists(), "--locked needs the lock file"),
                other => panic!("{name}: COPY {other:?} names what the repository does not hold"),
            }
        }
        let url = lines.iter().find_map(|l| l.strip_prefix("ENV FLEET_REGISTRY=")).unwrap_or("");
        if url.contains("sslmode=verify") {
            assert!(file.contains("install -y --no-install-recommends ca-certificates"), "{name}: no roots");
        }
    }
    let ignored = std::fs::read_to_string(root.join(".dockerignore")).expect(".dockerignore");
    assert!(
        ignored.lines().any(|l| l.trim_end_matches('/') == "target"),
        "the build context leaves target out"
    );
}

#[test]
fn the_serve_unit_serves_and_stops_on_sigterm() {
    let unit = deploy("fleetctl-serve.service");
    let (program, args) = this_build(&exec_start(&unit, ""));
    let port = free_port();
    let args: Vec<String> = args
        .into_iter()
        .map(|a| if a.starts_with("127.0.0.1:") { format!("127.0.0.1:{port}") } else { a })
        .collect();
    let mut command = Command::new(program);
    command.args(&args);
    let stopped = serve_then_stop(command, port, |serve| i32::try_from(serve.id()).unwrap());
    assert!(stopped.success(), "systemctl stop is a clean stop: {stopped:?}");
}

/// The retention unit's `ExecStart`, run as the timer runs it: history older than 90 days
/// moves into a new file, readable by its owner alone, in the unit's directory; newer
/// history and the live fleet stay; a run with nothing to prune writes no file.
#[test]
fn the_retention_unit_moves_old_history_into_a_private_file() {
    use std::os::unix::fs::PermissionsExt as _;
    let unit = deploy("fleetctl-retention.service");
    assert!(deploy("fleetctl-retention.timer").contains("OnCalendar=daily"));
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    fleet.register_and_release(&id, "author");
    let mut old = fleet.workers().remove(0);
    old.worker_identity = "wkr-released-a-hundred-days-ago".parse().unwrap();
    let hundred_days_ago =
        fleet_identity::Timestamp::from_unix_millis(fleet_runtime::now().unix_millis() - 100 * 86_400 * 1000)
            .unwrap();
    old.registered_at = hundred_days_ago;
    old.last_heartbeat_at = Some(hundred_days_ago.to_string());
    let dump = fleet_registry::RegistryDump { instances: Vec::new(), worker_registrations: vec![old] };
    fleet.open().import(&dump).unwrap();
    let pruned = fleet.dir.path().join("pruned");
    std::fs::create_dir(&pruned).unwrap();
    let (program, args) = this_build(&exec_start(&unit, ""));
    let args: Vec<String> = args
        .into_iter()
        .map(|a| if a == "/var/lib/fleetward/pruned/" { format!("{}/", pruned.display()) } else { a })
        .collect();
    let run = || Command::new(&program).args(&args).env("FLEET_REGISTRY", &fleet.registry).output().unwrap();
    let out = run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files: Vec<PathBuf> = std::fs::read_dir(&pruned).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("pruned-") && name.ends_with(".json"), "{name}");
    assert_eq!(std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777, 0o600);
    let kept: Vec<String> = fleet.workers().iter().map(|r| r.worker_identity.to_string()).collect();
    assert_eq!(kept.len(), 1, "the recent row stays: {kept:?}");
    assert!(!kept.contains(&"wkr-released-a-hundred-days-ago".to_owned()));
    let written =
        fleet_registry::RegistryDump::from_json(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(written.worker_registrations.len(), 1, "what went is written down");
    let out = run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_dir(&pruned).unwrap().count(), 1, "nothing to prune, no file");
}
