//! Children that `fleetctl` owns, whole process trees included: they end with their
//! owner, and a worker does not start before it is registered.
//!
//! A command runs under a keeper, `fleetctl __keep -- CMD…`, a child of the owner that
//! is the command's parent and a child subreaper (`PR_SET_CHILD_SUBREAPER`): everything
//! the command starts — grandchildren, double-forked daemons that leave their parent —
//! stays in the keeper's subtree. The keeper gets `SIGTERM` when the thread that spawned
//! it ends, however it ends (`PR_SET_PDEATHSIG`, a SIGKILLed owner included), and when
//! the owner stops it (a lost lease, a stop signal). It then passes that signal to every
//! descendant, gives them [`GRACE`] to end, sends `SIGKILL` to what is left, reaps, and
//! exits as the command did. When the command itself ends, whatever it left running is
//! ended the same way. So no descendant outlives the work's authority on this host.
//! What the keeper cannot do: outlive a `SIGKILL` sent to the keeper itself (the command
//! then dies with it, but what the command started is orphaned to init), or reach a process that left its subtree by
//! a different route (`ptrace`, a service manager); across hosts the fencing epoch is
//! the defence.
//!
//! Holding a worker until it is registered uses a small gate: the child first runs
//! `fleetctl __gate -- CMD…`, which waits on a pipe for one byte and then becomes the
//! keeper of `CMD`. The pid and start time the registry records are the gate's: the
//! keeper's, which lives exactly as long as the worker's tree. If registration fails, or
//! the owner dies first, the pipe closes without the byte and the gate exits without
//! ever running `CMD`.

use std::ffi::{OsStr, OsString};
use std::io::{PipeWriter, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};

/// The file descriptor on which the gate reads its go-ahead.
const GATE_FD: i32 = 3;

/// Exit status of a gate that was never told to go: the worker never ran.
const NOT_STARTED: u8 = 125;

/// How long a stopped command's processes get between `SIGTERM` and `SIGKILL`.
pub(crate) const GRACE: Duration = Duration::from_secs(2);

/// A command that runs `program` under a keeper that ends with this thread and takes the
/// command's whole process tree with it.
pub(crate) fn kept(program: &OsStr, args: &[OsString]) -> std::io::Result<Command> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("__keep").arg("--").arg(program).args(args);
    // SAFETY: prctl(2) and sigprocmask(2) are async-signal-safe, which is all a pre_exec
    // hook may call.
    unsafe {
        cmd.pre_exec(|| {
            prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)?;
            hold_stop_signals()
        });
    }
    Ok(cmd)
}

/// The signals that ask a kept command to stop.
fn stop_signals() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(sig);
    }
    set
}

/// Blocks the stop signals in a child about to become a gate or a keeper: one that
/// arrives before the keeper watches them stays pending instead of being lost (a signal
/// caught while a handler is being installed can be dropped), and is delivered once the
/// keeper unblocks them. The mask survives `exec`; the keeper's own command starts with
/// an empty one, as every `Command` does.
fn hold_stop_signals() -> std::io::Result<()> {
    nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_BLOCK, Some(&stop_signals()), None)
        .map_err(std::io::Error::from)
}

/// Stops a kept command: `SIGTERM` to its keeper, which ends the whole tree within
/// [`GRACE`]; a keeper that has not ended well after that is killed.
pub(crate) fn stop_kept(child: &mut Child) -> Option<std::process::ExitStatus> {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + GRACE + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait().ok()
}

/// `fleetctl __keep -- CMD…`: runs `CMD` as a child subreaper's child, ends every
/// descendant when told to stop or when `CMD` ends, and exits as `CMD` did.
pub(crate) fn keep(command: &[OsString]) -> ExitCode {
    let Some((program, args)) = command.split_first() else { return ExitCode::from(NOT_STARTED) };
    // The owner may have died before the death signal was armed.
    let owner = nix::unistd::getppid();
    if prctl::set_child_subreaper(true).is_err() || owner.as_raw() == 1 {
        return ExitCode::from(NOT_STARTED);
    }
    let Ok(stop) = watch_stop_signals(None) else { return ExitCode::from(NOT_STARTED) };
    // Watched now: a stop that arrived while the gate waited or the keeper started is
    // delivered here, and noted.
    if nix::sys::signal::pthread_sigmask(
        nix::sys::signal::SigmaskHow::SIG_UNBLOCK,
        Some(&stop_signals()),
        None,
    )
    .is_err()
    {
        return ExitCode::from(NOT_STARTED);
    }
    if nix::unistd::getppid() != owner {
        return ExitCode::from(NOT_STARTED);
    }
    let mut cmd = Command::new(program);
    cmd.args(args);
    // Should the keeper itself be killed outright, the command goes with it.
    // SAFETY: prctl(2) is async-signal-safe, which is all a pre_exec hook may call.
    unsafe {
        cmd.pre_exec(|| prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from));
    }
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            fleet_runtime::warn(format_args!("fleetctl: cannot run {}: {e}", program.to_string_lossy()));
            return ExitCode::from(127);
        }
    };
    let main = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));
    let mut status = None;
    while status.is_none() && stop.load(Ordering::SeqCst) == 0 {
        status = reap_until(main, Duration::from_millis(20));
    }
    // The command ended or a stop was asked for: nothing it started outlives it. A stop
    // is passed on as the signal that asked for it.
    let asked = stop.load(Ordering::SeqCst);
    end_descendants(&mut status, main, Signal::try_from(asked).unwrap_or(Signal::SIGTERM));
    match status {
        Some(WaitStatus::Exited(_, code)) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Some(WaitStatus::Signaled(_, sig, _)) => exit_by(sig),
        _ => Signal::try_from(asked).map_or(ExitCode::from(1), exit_by),
    }
}

/// Watches SIGTERM, SIGINT and SIGHUP from a thread that signal-hook wakes (no code runs
/// inside a signal handler): each is noted as the last stop asked for (0: none yet) and,
/// given `forward_to`, passed on to that process. Once watched, these signals no longer
/// end this process by themselves: the caller acts on the note.
pub(crate) fn watch_stop_signals(forward_to: Option<i32>) -> std::io::Result<Arc<AtomicI32>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    let asked = Arc::new(AtomicI32::new(0));
    let noted = Arc::clone(&asked);
    std::thread::Builder::new().name("fleet-signals".into()).spawn(move || {
        for raw in signals.forever() {
            noted.store(raw, Ordering::SeqCst);
            if let (Some(pid), Ok(sig)) = (forward_to, Signal::try_from(raw)) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
            }
        }
    })?;
    Ok(asked)
}

/// Ends this process by `sig`, as the command did, so the owner sees the same status.
fn exit_by(sig: Signal) -> ExitCode {
    // SAFETY: resetting a disposition to the default is sound at any point.
    let _ = unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl) };
    let _ = nix::sys::signal::raise(sig);
    ExitCode::from(u8::try_from(128 + sig as i32).unwrap_or(255))
}

/// Reaps every child that has ended (orphans reparented here included) for up to
/// `wait`; returns `main`'s status once it is among them.
fn reap_until(main: nix::unistd::Pid, wait: Duration) -> Option<WaitStatus> {
    let deadline = Instant::now() + wait;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(s @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _))) if pid == main => {
                return Some(s);
            }
            Ok(WaitStatus::StillAlive) | Err(_) => {
                if Instant::now() >= deadline {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(_) => {}
        }
    }
}

/// `first` (a stop signal) to every descendant, [`GRACE`] to end, then `SIGKILL` to
/// every one left, reaping all of them (and `main`, whose status lands in `status`).
fn end_descendants(status: &mut Option<WaitStatus>, main: nix::unistd::Pid, first: Signal) {
    let me = nix::unistd::getpid();
    signal_all(me, first);
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline && !descendants(me).is_empty() {
        if let Some(s) = reap_until(main, Duration::from_millis(20)) {
            *status = Some(s);
        }
    }
    // Processes may fork while being ended: repeat until none is left.
    for _ in 0..100 {
        if descendants(me).is_empty() {
            break;
        }
        signal_all(me, Signal::SIGKILL);
        if let Some(s) = reap_until(main, Duration::from_millis(20)) {
            *status = Some(s);
        }
    }
    while let Some(s) = reap_until(main, Duration::ZERO) {
        *status = Some(s);
    }
}

fn signal_all(root: nix::unistd::Pid, sig: Signal) {
    for pid in descendants(root) {
        let _ = nix::sys::signal::kill(pid, sig);
    }
}

/// Every live process whose chain of parents leads to `root` (zombies left out: they
/// have ended and wait only to be reaped).
fn descendants(root: nix::unistd::Pid) -> Vec<nix::unistd::Pid> {
    let mut parents: Vec<(i32, i32)> = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // After the command name's closing parenthesis: state, then ppid.
        let mut rest = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace()).into_iter().flatten();
        let (Some(state), Some(ppid)) = (rest.next(), rest.next().and_then(|p| p.parse::<i32>().ok())) else {
            continue;
        };
        if state != "Z" && state != "X" {
            parents.push((pid, ppid));
        }
    }
    let mut found = vec![root.as_raw()];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parents.iter().filter(|(_, p)| *p == parent).map(|(pid, _)| *pid));
        i += 1;
    }
    found.into_iter().skip(1).map(nix::unistd::Pid::from_raw).collect()
}

/// A child that has been created but holds before running its command.
#[derive(Debug)]
pub(crate) struct HeldChild {
    child: Child,
    gate: PipeWriter,
}

impl HeldChild {
    /// Creates the child, dying with this thread, held before `program` runs.
    pub(crate) fn spawn(program: &OsString, args: &[OsString]) -> std::io::Result<Self> {
        let (reader, gate) = std::io::pipe()?;
        let reader: OwnedFd = reader.into();
        let raw = reader.as_raw_fd();
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("__gate").arg("--").arg(program).args(args);
        // SAFETY: prctl(2), sigprocmask(2) and dup2(2) are async-signal-safe. dup2 leaves the new
        // descriptor without close-on-exec, so the gate inherits it.
        unsafe {
            cmd.pre_exec(move || {
                prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)?;
                hold_stop_signals()?;
                // dup2 onto itself keeps close-on-exec, so then clear it by hand.
                let moved = if raw == GATE_FD {
                    nix::libc::fcntl(GATE_FD, nix::libc::F_SETFD, 0)
                } else {
                    nix::libc::dup2(raw, GATE_FD)
                };
                if moved < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(reader);
        Ok(Self { child, gate })
    }

    /// The child's pid, the same before and after its command starts.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Lets the command run.
    pub(crate) fn release(mut self) -> std::io::Result<Child> {
        self.gate.write_all(b"g")?;
        Ok(self.child)
    }

    /// Ends the child without its command ever running.
    pub(crate) fn abort(mut self) {
        drop(self.gate);
        let _ = self.child.wait();
    }
}

/// `fleetctl __gate -- CMD…`: waits for the go-ahead on the gate descriptor, then keeps
/// `CMD` (see [`keep`]). Without the go-ahead it exits with status 125 and runs nothing.
pub(crate) fn gate(command: &[OsString]) -> ExitCode {
    // SAFETY: descriptor 3 was placed here by `HeldChild::spawn` for this process alone.
    let mut gate = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(GATE_FD) });
    let mut go = [0u8; 1];
    let released = matches!(gate.read(&mut go), Ok(1));
    drop(gate);
    if !released {
        return ExitCode::from(NOT_STARTED);
    }
    keep(command)
}

/// Whether `program` names a file this process may execute, found as `execvp` finds it
/// (a name with a slash as given, else the first match on `PATH`): checked before any
/// registry row is written for it, so a command that cannot run is refused up front.
pub(crate) fn check_executable(program: &OsStr) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    let runnable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
    };
    let shown = program.to_string_lossy();
    if program.as_encoded_bytes().contains(&b'/') {
        return if runnable(Path::new(program)) {
            Ok(())
        } else {
            Err(format!("cannot run {shown}: no such executable file"))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).map(|dir: PathBuf| dir.join(program)).any(|p| runnable(&p)) {
        Ok(())
    } else {
        Err(format!("cannot run {shown}: not found on PATH"))
    }
}

/// The variables that mark a kept command's tree with the lease it runs under: which
/// lease of which registry, and which tenure of it.
const TENURE: &str = "FLEET_TENURE";
const TENURE_LEASE_ID: &str = "FLEET_TENURE_LEASE_ID";

/// Which lease of which registry: the registry's location (printed without credentials)
/// and the lease key, so that registries that use the same key never touch each other.
pub(crate) fn tenure(location: &fleet_runtime::RegistryLocation, lease_key: &str) -> String {
    format!("{location} {lease_key}")
}

/// Marks `cmd`'s tree as running under `lease_id` of `tenure`.
pub(crate) fn mark_tenure(cmd: &mut Command, tenure: &str, lease_id: &str) {
    cmd.env(TENURE, tenure).env(TENURE_LEASE_ID, lease_id);
}

/// Ends, before a new owner runs anything, every process of this host left over from an
/// earlier tenure of the same work: processes marked with `tenure` ([`mark_tenure`])
/// but another lease than `lease_id`. A former owner that was paused
/// past its lease (SIGSTOP, a debugger) still has its tree running; it acts on authority
/// that has passed, so it is killed, and this returns only once none is left (or after
/// `GRACE` plus a few seconds, with how many remain). Processes of other users are not
/// visible here, and a process that cleared its environment is not found.
pub(crate) fn end_former_trees(tenure: &str, lease_id: &str) -> usize {
    let (key_var, lease_var) = (TENURE, TENURE_LEASE_ID);
    let mine = format!("{lease_var}={lease_id}");
    let wanted = format!("{key_var}={tenure}");
    let lease_prefix = format!("{lease_var}=");
    let me = std::process::id();
    let former = || -> Vec<nix::unistd::Pid> {
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| *pid != me)
            .filter(|pid| {
                let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { return false };
                let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
                vars.contains(&wanted.as_bytes())
                    && vars.iter().any(|v| v.starts_with(lease_prefix.as_bytes()))
                    && !vars.contains(&mine.as_bytes())
            })
            .filter(|pid| {
                // Zombies have ended; they only wait to be reaped by their parent.
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let state = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next());
                !matches!(state, Some("Z" | "X") | None)
            })
            .filter_map(|pid| i32::try_from(pid).ok().map(nix::unistd::Pid::from_raw))
            .collect()
    };
    let deadline = Instant::now() + GRACE + Duration::from_secs(5);
    loop {
        let left = former();
        if left.is_empty() || Instant::now() >= deadline {
            return left.len();
        }
        for pid in left {
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
