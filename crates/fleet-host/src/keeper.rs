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
//!
//! A keeper of a leased command (`initialize`, `connector run`) also keeps the lease's
//! deadline itself: the owner sends it, on a pipe, the time until which each committed
//! renewal lets the command act ([`fleet_lease::ActWindow`], on the boot clock, which
//! counts pauses), and the keeper ends the tree when that time passes with no newer one
//! sent — while the owner is paused, or its renewal is stalled on a network that stopped
//! answering. A keeper checks the deadline before it starts the command, so a keeper
//! resumed after a pause never starts work on authority that has passed.
//!
//! Every tree is marked with its tenure: the registry's id, the lease key and the fencing
//! epoch (`crate::tenure::Tenure`). Before a new tenure runs, trees of older epochs on this host are
//! ended; a tree of a newer epoch is never touched, and finding one means this tenure
//! has passed.
//!
//! The keeper knows its owner by the pid the owner passed it, so it works in a container
//! whose pid 1 is `fleetctl` itself.
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
pub const GRACE: Duration = Duration::from_secs(2);

/// A command run under a keeper (`fleetctl __keep`) that ends with this thread and takes
/// the command's whole process tree with it, and that holds a lease: the keeper ends the
/// command's tree by itself when the deadline its owner last sent passes, so a command
/// never outlives its lease, even while its owner is paused or its renewals stall.
#[allow(missing_debug_implementations)] // holds a `Command`, whose Debug prints its whole environment
pub struct LeasedCommand {
    command: Command,
    reader: OwnedFd,
    line: LeaseLine,
}

/// The owner's end of a keeper's lease line: each message is the time (on
/// [`crate::process::boot_clock`]) until which the command may act.
#[derive(Debug)]
pub struct LeaseLine {
    writer: PipeWriter,
    sent: Duration,
}

impl LeaseLine {
    /// Lets the command act until `until` on the boot clock; an earlier time than one
    /// already sent changes nothing. A keeper that is paused and does not read is not
    /// waited for: the line never blocks its owner.
    pub fn extend(&mut self, until: Duration) {
        if until <= self.sent {
            return;
        }
        let nanos = u64::try_from(until.as_nanos()).unwrap_or(u64::MAX);
        if self.writer.write_all(&nanos.to_le_bytes()).is_ok() {
            self.sent = until;
        }
    }
}

impl LeasedCommand {
    /// `program` kept, acting until `until` on the boot clock unless extended, and
    /// given `grace` between its stop signal and `SIGKILL` when the deadline passes.
    pub fn new(
        program: &OsStr,
        args: &[OsString],
        until: Duration,
        grace: Duration,
    ) -> std::io::Result<Self> {
        let (reader, writer) = std::io::pipe()?;
        nix::fcntl::fcntl(&writer, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK))
            .map_err(std::io::Error::from)?;
        let reader: OwnedFd = reader.into();
        let raw = reader.as_raw_fd();
        let mut command = Command::new(std::env::current_exe()?);
        command.arg("__keep").arg("--owner-pid").arg(std::process::id().to_string());
        command.arg("--lease-fd").arg(LEASE_FD.to_string());
        command.arg("--grace-ms").arg(grace.as_millis().to_string());
        command.arg("--").arg(program).args(args);
        // SAFETY: prctl(2), sigprocmask(2), fcntl(2) and dup2(2) are async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)?;
                hold_stop_signals()?;
                move_to(raw, LEASE_FD)
            });
        }
        let mut line = LeaseLine { writer, sent: Duration::ZERO };
        line.extend(until);
        Ok(Self { command, reader, line })
    }

    /// The command, to add its environment.
    pub fn command(&mut self) -> &mut Command {
        &mut self.command
    }

    /// Starts the keeper; the line extends its deadline.
    pub fn spawn(mut self) -> std::io::Result<(Child, LeaseLine)> {
        let child = self.command.spawn()?;
        drop(self.reader);
        Ok((child, self.line))
    }
}

/// Places `raw` at `target` for the exec that follows, without close-on-exec.
fn move_to(raw: i32, target: i32) -> std::io::Result<()> {
    // dup2 onto itself keeps close-on-exec, so then clear it by hand.
    // SAFETY: called between fork and exec on descriptors this process owns.
    let moved = unsafe {
        if raw == target {
            nix::libc::fcntl(target, nix::libc::F_SETFD, 0)
        } else {
            nix::libc::dup2(raw, target)
        }
    };
    if moved < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The descriptor on which a keeper reads its lease deadlines.
const LEASE_FD: i32 = 3;

/// Exit status of a keeper that ended its command because the lease deadline passed
/// without a renewal: the command's authority lapsed.
pub const LAPSED: u8 = 124;

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

/// Stops a kept command: `SIGTERM` to its keeper, which ends the whole tree within its
/// grace (at most [`GRACE`]); a keeper that has not ended well after that is killed.
pub fn stop_kept(child: &mut Child) -> Option<std::process::ExitStatus> {
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

/// How a keeper runs: who its owner is, and the lease it holds, if any.
#[derive(Debug, Clone, Copy)]
pub struct KeepOptions {
    /// The owner's pid, as the owner saw itself: the keeper's parent must still be it.
    /// In a container whose pid 1 is the owner, that is 1.
    pub owner: i32,
    /// The descriptor the owner sends lease deadlines on, and the grace the command gets
    /// when one passes.
    pub lease: Option<(i32, Duration)>,
}

/// `fleetctl __keep --owner-pid P [--lease-fd 3 --grace-ms G] -- CMD…`: runs `CMD` as a
/// child subreaper's child, ends every descendant when told to stop, when `CMD` ends, or
/// (holding a lease) when the owner's last deadline passes, and exits as `CMD` did
/// ([`LAPSED`] for a passed deadline).
pub fn keep(options: KeepOptions, command: &[OsString]) -> ExitCode {
    let Some((program, args)) = command.split_first() else { return ExitCode::from(NOT_STARTED) };
    // The owner may have died before the death signal was armed: then this process was
    // adopted, and its parent is no longer the owner.
    let owner = nix::unistd::getppid();
    if prctl::set_child_subreaper(true).is_err() || owner.as_raw() != options.owner {
        return ExitCode::from(NOT_STARTED);
    }
    let mut lease = match options.lease {
        // SAFETY: the descriptor was placed here by `LeasedCommand` for this process alone.
        Some((fd, grace)) => match Deadline::read_from(unsafe { OwnedFd::from_raw_fd(fd) }, grace) {
            Ok(deadline) => Some(deadline),
            Err(_) => return ExitCode::from(NOT_STARTED),
        },
        None => None,
    };
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
    // A keeper that resumes after a pause checks its authority before anything else.
    if lease.as_mut().is_some_and(Deadline::passed) {
        return ExitCode::from(LAPSED);
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
            crate::warn(format_args!("fleetctl: cannot run {}: {e}", program.to_string_lossy()));
            return ExitCode::from(127);
        }
    };
    let main = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));
    let mut status = None;
    let mut lapsed = false;
    while status.is_none() && stop.load(Ordering::SeqCst) == 0 {
        if lease.as_mut().is_some_and(Deadline::passed) {
            lapsed = true;
            break;
        }
        status = reap_until(main, Duration::from_millis(10));
    }
    // The command ended, a stop was asked for, or its authority lapsed: nothing it
    // started outlives it. A stop is passed on as the signal that asked for it.
    let asked = stop.load(Ordering::SeqCst);
    let grace = lease.as_ref().map_or(GRACE, |l| l.grace);
    end_descendants(&mut status, main, Signal::try_from(asked).unwrap_or(Signal::SIGTERM), grace);
    if lapsed {
        return ExitCode::from(LAPSED);
    }
    match status {
        Some(WaitStatus::Exited(_, code)) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Some(WaitStatus::Signaled(_, sig, _)) => exit_by(sig),
        _ => Signal::try_from(asked).map_or(ExitCode::from(1), exit_by),
    }
}

/// The keeper's end of a lease line: the latest deadline its owner sent.
struct Deadline {
    line: std::fs::File,
    until: Duration,
    grace: Duration,
}

impl Deadline {
    /// Takes the line, with the deadline the owner sent before starting the keeper.
    fn read_from(fd: OwnedFd, grace: Duration) -> std::io::Result<Self> {
        nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK))
            .map_err(std::io::Error::from)?;
        let mut deadline =
            Self { line: std::fs::File::from(fd), until: Duration::ZERO, grace: grace.min(GRACE) };
        deadline.drain();
        Ok(deadline)
    }

    /// Reads every deadline sent since the last look; keeps the latest.
    fn drain(&mut self) {
        let mut message = [0u8; 8];
        // Each message is one write of 8 bytes, which a pipe delivers whole.
        while let Ok(8) = self.line.read(&mut message) {
            self.until = self.until.max(Duration::from_nanos(u64::from_le_bytes(message)));
        }
    }

    /// Whether the command must be ended now: no deadline sent is still ahead.
    fn passed(&mut self) -> bool {
        self.drain();
        crate::process::boot_clock() >= self.until
    }
}

/// Watches SIGTERM, SIGINT and SIGHUP from a thread that signal-hook wakes (no code runs
/// inside a signal handler): each is noted as the last stop asked for (0: none yet) and,
/// given `forward_to`, passed on to that process. Once watched, these signals no longer
/// end this process by themselves: the caller acts on the note.
pub fn watch_stop_signals(forward_to: Option<i32>) -> std::io::Result<Arc<AtomicI32>> {
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

/// `first` (a stop signal) to every descendant, `grace` to end, then `SIGKILL` to
/// every one left, reaping all of them (and `main`, whose status lands in `status`).
fn end_descendants(status: &mut Option<WaitStatus>, main: nix::unistd::Pid, first: Signal, grace: Duration) {
    let me = nix::unistd::getpid();
    signal_all(me, first);
    let deadline = Instant::now() + grace;
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
pub struct HeldChild {
    child: Child,
    gate: PipeWriter,
}

impl HeldChild {
    /// Creates the child, dying with this thread, held before `program` runs.
    pub fn spawn(program: &OsString, args: &[OsString]) -> std::io::Result<Self> {
        let (reader, gate) = std::io::pipe()?;
        let reader: OwnedFd = reader.into();
        let raw = reader.as_raw_fd();
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("__gate").arg("--owner-pid").arg(std::process::id().to_string());
        cmd.arg("--").arg(program).args(args);
        // SAFETY: prctl(2), sigprocmask(2) and dup2(2) are async-signal-safe. dup2 leaves the new
        // descriptor without close-on-exec, so the gate inherits it.
        unsafe {
            cmd.pre_exec(move || {
                prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)?;
                hold_stop_signals()?;
                move_to(raw, GATE_FD)
            });
        }
        let child = cmd.spawn()?;
        drop(reader);
        Ok(Self { child, gate })
    }

    /// The child's pid, the same before and after its command starts.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Lets the command run.
    pub fn release(mut self) -> std::io::Result<Child> {
        self.gate.write_all(b"g")?;
        Ok(self.child)
    }

    /// Ends the child without its command ever running.
    pub fn abort(mut self) {
        drop(self.gate);
        let _ = self.child.wait();
    }
}

/// `fleetctl __gate -- CMD…`: waits for the go-ahead on the gate descriptor, then keeps
/// `CMD` (see [`keep`]). Without the go-ahead it exits with status 125 and runs nothing.
pub fn gate(owner: i32, command: &[OsString]) -> ExitCode {
    // SAFETY: descriptor 3 was placed here by `HeldChild::spawn` for this process alone.
    let mut gate = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(GATE_FD) });
    let mut go = [0u8; 1];
    let released = matches!(gate.read(&mut go), Ok(1));
    drop(gate);
    if !released {
        return ExitCode::from(NOT_STARTED);
    }
    keep(KeepOptions { owner, lease: None }, command)
}

/// Whether `program` names a file this process may execute, found as `execvp` finds it
/// (a name with a slash as given, else the first match on `PATH`): checked before any
/// registry row is written for it, so a command that cannot run is refused up front.
pub fn check_executable(program: &OsStr) -> Result<(), String> {
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

/// Whether process `pid` exists and has not ended (a zombie has: it only waits to be
/// reaped by its parent).
pub fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

/// Whether this process is pid 1 of its PID namespace (a container's entrypoint): the
/// kernel hands it every orphan of the namespace, which only it can reap.
pub fn is_namespace_init() -> bool {
    std::process::id() == 1
}

/// Reaps, without waiting, every exited child of this process but `ours` (whose status
/// its owner waits for): the orphans pid 1 inherits (what `docker exec … sh -c 'cmd &'`
/// leaves), which stay zombies until reaped. Stops at `ours` when it has exited: its
/// owner reaps it, and the next call sees the rest. Returns how many it reaped.
pub fn reap_orphans_but(ours: u32) -> usize {
    use nix::sys::wait::{Id, waitid};
    let mut reaped = 0;
    loop {
        let peek = waitid(Id::All, WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT);
        let Some(pid) = peek.ok().and_then(|status| status.pid()) else { return reaped };
        if u32::try_from(pid.as_raw()).ok() == Some(ours) {
            return reaped;
        }
        if matches!(waitpid(pid, Some(WaitPidFlag::WNOHANG)), Ok(WaitStatus::StillAlive) | Err(_)) {
            return reaped;
        }
        reaped += 1;
    }
}

/// As pid 1 of a PID namespace, reaps every orphan the kernel hands this process, on a
/// thread of its own, for as long as the process lives: for a process that has no
/// children of its own to wait for (`serve`). Does nothing otherwise.
pub fn reap_orphans_as_init() {
    if !is_namespace_init() {
        return;
    }
    let _ = std::thread::Builder::new().name("fleet-reaper".into()).spawn(|| {
        loop {
            match waitpid(None::<nix::unistd::Pid>, None) {
                Ok(_) => {}
                // No child at all: orphans arrive later.
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    });
}
