//! Operating-system evidence about processes: which machine and boot we are on, when a
//! process started, and whether a given process is still alive.
//!
//! Liveness is answered as `alive`, `gone` or `unknown`, never guessed. A process we may
//! not signal (`EPERM`) exists, so it is alive. A pid whose current start time differs
//! from the recorded one belongs to a different incarnation of that number.
//!
//! The values it hands back ([`ProcessIdentity`], [`Liveness`], [`ProcessVerdict`]) and
//! the [`LivenessProbe`] trait it implements belong to `fleet-model`.
//!
//! ```
//! use fleet_model::{LivenessProbe, ProcessVerdict};
//! use fleet_probe::{LocalProbe, current_process};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let me = current_process()?; // pid, start time, host, boot, PID namespace
//! let probe = LocalProbe::new()?;
//! assert_eq!(probe.probe(&me), ProcessVerdict::Alive);
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod clock;
pub use clock::{host_now, kernel_wall_clock_ms, process_skew_ms};

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use fleet_identity::{BootId, HostId, IdentityError, Pid, PidNamespace, ProcessStartTime};
use fleet_model::{Liveness, LivenessProbe, ProcessIdentity, ProcessVerdict};
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid as NixPid;

/// Why a piece of process evidence could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// A file under `/etc` or `/proc` could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The underlying failure.
        source: io::Error,
    },
    /// A file was read but did not hold what it should.
    #[error("{path} does not hold a valid value: {detail}")]
    Invalid {
        /// The file.
        path: String,
        /// What was wrong.
        detail: String,
    },
}

fn read_trimmed(path: &str) -> Result<String, ProbeError> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|source| ProbeError::Read { path: path.to_owned(), source })
}

fn invalid(path: &str, err: IdentityError) -> ProbeError {
    ProbeError::Invalid { path: path.to_owned(), detail: err.to_string() }
}

/// This machine's id, from `/etc/machine-id` (or D-Bus's copy of it).
pub fn host_id() -> Result<HostId, ProbeError> {
    let path = ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("/etc/machine-id");
    HostId::new(read_trimmed(path)?).map_err(|e| invalid(path, e))
}

/// The id of this boot of this machine.
pub fn boot_id() -> Result<BootId, ProbeError> {
    let path = "/proc/sys/kernel/random/boot_id";
    BootId::new(read_trimmed(path)?).map_err(|e| invalid(path, e))
}

/// One line of `/proc/<pid>/stat`, as far as Fleetward reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatLine {
    state: char,
    parent: u32,
    start_time: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may itself
/// hold spaces and parentheses, so fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<StatLine> {
    let after_comm = &text[text.rfind(')')? + 1..];
    let mut fields = after_comm.split_ascii_whitespace();
    // Fields 3.. of the man page; `state` is field 3, `starttime` is field 22.
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    let start_time = fields.nth(22 - 5)?.parse().ok()?;
    Some(StatLine { state, parent, start_time })
}

fn read_stat(pid: Pid) -> Result<Option<StatLine>, ProbeError> {
    read_stat_in(&format!("/proc/{pid}"))
}

/// Reads `<proc_dir>/stat` (`/proc/<pid>`, or `/proc/self`, right in any PID namespace).
fn read_stat_in(proc_dir: &str) -> Result<Option<StatLine>, ProbeError> {
    let path = format!("{proc_dir}/stat");
    match fs::read_to_string(&path) {
        Ok(text) => parse_stat(&text)
            .map(Some)
            .ok_or_else(|| ProbeError::Invalid { path, detail: "unparsable stat line".into() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ProbeError::Read { path, source }),
    }
}

/// When process `pid` started, in clock ticks since boot; `None` when there is no such
/// process.
pub fn process_start_time(pid: Pid) -> Result<Option<ProcessStartTime>, ProbeError> {
    read_stat(pid)?
        .map(|stat| {
            ProcessStartTime::new(stat.start_time).map_err(|e| invalid(&format!("/proc/{pid}/stat"), e))
        })
        .transpose()
}

/// The parent of process `pid` (0 for a process whose parent is outside its PID
/// namespace); `None` when there is no such process.
pub fn parent_pid(pid: Pid) -> Result<Option<u32>, ProbeError> {
    Ok(read_stat(pid)?.map(|stat| stat.parent))
}

/// Whether the pid number is occupied, without asking which incarnation holds it.
pub fn probe_pid(pid: Pid) -> Liveness {
    match kill(NixPid::from_raw(pid.as_raw()), None) {
        // A zombie has exited; only its exit status waits for its parent.
        Ok(()) => match read_stat(pid) {
            Ok(Some(stat)) if stat.state == 'Z' || stat.state == 'X' => Liveness::Gone,
            Ok(None) => Liveness::Gone,
            _ => Liveness::Alive,
        },
        Err(Errno::EPERM) => Liveness::Alive,
        Err(Errno::ESRCH) => Liveness::Gone,
        Err(_) => Liveness::Unknown,
    }
}

/// Probes the recorded process `pid` that started at `start_time` on this boot: what
/// [`probe_pid`] and then [`process_start_time`] would say together, from one read of
/// `/proc/<pid>/stat` instead of two (a snapshot probes every local worker this way).
pub fn probe_process(pid: Pid, start_time: ProcessStartTime) -> ProcessVerdict {
    let same = |stat: StatLine| match ProcessStartTime::new(stat.start_time) {
        Ok(now) if now == start_time => ProcessVerdict::Alive,
        Ok(_) => ProcessVerdict::PidReused,
        Err(_) => ProcessVerdict::Unknown,
    };
    match kill(NixPid::from_raw(pid.as_raw()), None) {
        Ok(()) => match read_stat(pid) {
            // A zombie has exited; only its exit status waits for its parent.
            Ok(Some(stat)) if stat.state == 'Z' || stat.state == 'X' => ProcessVerdict::Gone,
            Ok(None) => ProcessVerdict::Gone,
            Ok(Some(stat)) => same(stat),
            Err(_) => ProcessVerdict::Unknown,
        },
        // Alive, but not ours to signal: its start time still tells which incarnation.
        Err(Errno::EPERM) => match read_stat(pid) {
            Ok(Some(stat)) => same(stat),
            // No /proc entry to compare (another pid namespace, a hidden /proc).
            Ok(None) | Err(_) => ProcessVerdict::Unknown,
        },
        Err(Errno::ESRCH) => ProcessVerdict::Gone,
        Err(_) => ProcessVerdict::Unknown,
    }
}

/// The PID namespace of the process whose `/proc` directory is `proc_dir`
/// (`/proc/self`, `/proc/<pid>`).
fn pid_namespace_at(proc_dir: &str) -> Result<PidNamespace, ProbeError> {
    let path = format!("{proc_dir}/ns/pid");
    let link = fs::read_link(&path).map_err(|source| ProbeError::Read { path: path.clone(), source })?;
    PidNamespace::from_link(&link.to_string_lossy()).map_err(|e| invalid(&path, e))
}

/// The PID namespace the calling process lives in: its pids mean something only there.
pub fn own_pid_namespace() -> Result<PidNamespace, ProbeError> {
    pid_namespace_at("/proc/self")
}

/// The identity of the process whose `/proc` directory is `proc_dir`, known as `pid`.
fn identity_in(proc_dir: &str, pid: Pid) -> Result<ProcessIdentity, ProbeError> {
    let path = format!("{proc_dir}/stat");
    let stat = read_stat_in(proc_dir)?
        .ok_or_else(|| ProbeError::Invalid { path: path.clone(), detail: "no such process".into() })?;
    let process_start_time = ProcessStartTime::new(stat.start_time).map_err(|e| invalid(&path, e))?;
    let pid_namespace = Some(pid_namespace_at(proc_dir)?);
    Ok(ProcessIdentity { host_id: host_id()?, boot_id: boot_id()?, pid, process_start_time, pid_namespace })
}

/// The identity of process `pid` on this machine, now, with the PID namespace it lives
/// in.
pub fn process_identity(pid: Pid) -> Result<ProcessIdentity, ProbeError> {
    identity_in(&format!("/proc/{pid}"), pid)
}

/// The identity of the calling process. It is read through `/proc/self`, which names the
/// caller whatever PID namespace it lives in; the pid is the caller's own view of it.
pub fn current_process() -> Result<ProcessIdentity, ProbeError> {
    let pid = Pid::new(i64::from(std::process::id())).map_err(|e| invalid("getpid", e))?;
    identity_in("/proc/self", pid)
}

/// The liveness probe of this machine: it can speak only of processes on this host, this
/// boot and its own PID namespace, and answers `unknown` for any other — a pid recorded
/// in a container means nothing to the host's process table.
#[derive(Debug, Clone)]
pub struct LocalProbe {
    host_id: HostId,
    boot_id: BootId,
    pid_namespace: PidNamespace,
}

impl LocalProbe {
    /// A probe for the current host, boot and PID namespace.
    pub fn new() -> Result<Self, ProbeError> {
        Ok(Self { host_id: host_id()?, boot_id: boot_id()?, pid_namespace: own_pid_namespace()? })
    }

    /// The host this probe speaks for.
    pub fn host_id(&self) -> &HostId {
        &self.host_id
    }

    /// The boot this probe speaks for.
    pub fn boot_id(&self) -> &BootId {
        &self.boot_id
    }
}

impl LivenessProbe for LocalProbe {
    fn speaks_for(&self, host: Option<&HostId>) -> bool {
        host == Some(&self.host_id)
    }

    fn probe(&self, process: &ProcessIdentity) -> ProcessVerdict {
        if process.host_id != self.host_id {
            return ProcessVerdict::Unknown;
        }
        // A row that does not say which PID namespace its pid lives in, or names another,
        // cannot be judged from here: the same number may be another process, or none.
        if process.pid_namespace != Some(self.pid_namespace) {
            return ProcessVerdict::Unknown;
        }
        if process.boot_id != self.boot_id {
            // The machine rebooted since: every process of the old boot is gone, but a
            // process of this boot may hold the same number.
            return match probe_pid(process.pid) {
                Liveness::Gone => ProcessVerdict::Gone,
                Liveness::Alive => ProcessVerdict::PidReused,
                Liveness::Unknown => ProcessVerdict::Unknown,
            };
        }
        probe_process(process.pid, process.process_start_time)
    }
}

/// A [`LocalProbe`] for a long-lived process that probes the same workers again and
/// again (the MCP server answers every snapshot call by probing every local worker).
///
/// Once it has verified a process alive, it holds a pidfd for it: a handle to that very
/// process, never to a later one that reuses its number, which becomes readable when the
/// process exits. Later probes of that process ask the pidfd (one `poll`) instead of
/// signalling it and reading its `/proc/<pid>/stat` (an open, a read and a close). A
/// process without a pidfd (the kernel has none, or the descriptor limit is reached) is
/// probed as [`LocalProbe`] does; the answers are the same either way.
///
/// A pass over the fleet is a round: [`TrackingProbe::begin_round`] polls every held
/// pidfd in one system call, and [`TrackingProbe::end_round`] closes the pidfds of
/// processes not probed since the previous round (their rows were released or removed).
/// Without `begin_round`, each probe polls its own pidfd.
#[derive(Debug)]
pub struct TrackingProbe {
    local: LocalProbe,
    held: Mutex<HashMap<(Pid, ProcessStartTime), Held>>,
    /// At most this many pidfds: half the open-file limit, so that the process keeps
    /// room for its registry, sockets and pipes.
    max_held: usize,
}

#[derive(Debug)]
struct Held {
    pidfd: OwnedFd,
    /// Probed since the last [`TrackingProbe::end_round`].
    seen: bool,
    /// Whether it had exited when [`TrackingProbe::begin_round`] last polled every
    /// pidfd at once; taken by the next probe of it.
    polled: Option<bool>,
}

/// Raises this process's soft limit on open files to its hard limit (at most 2^20), so
/// that a [`TrackingProbe`] can hold a pidfd for every worker of a large fleet. Returns
/// the limit now in force.
pub fn raise_open_file_limit() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let wanted = limit.maximum.unwrap_or(u64::MAX).min(1 << 20);
    if limit.current.is_some_and(|current| current < wanted)
        && setrlimit(Resource::Nofile, Rlimit { current: Some(wanted), maximum: limit.maximum }).is_ok()
    {
        return wanted;
    }
    limit.current.unwrap_or(u64::MAX)
}

/// What a pidfd's poll events say: whether its process has exited (a pidfd is readable
/// from then on), or `None` when the pidfd cannot be polled.
fn exited(events: rustix::event::PollFlags) -> Option<bool> {
    use rustix::event::PollFlags;
    (!events.intersects(PollFlags::ERR | PollFlags::NVAL))
        .then(|| events.intersects(PollFlags::IN | PollFlags::HUP))
}

/// Whether the process behind `pidfd` has exited.
fn has_exited(pidfd: &OwnedFd) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
    poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 }))?;
    exited(fds[0].revents()).ok_or_else(|| io::Error::other("the pidfd cannot be polled"))
}

/// A pidfd for `pid`, held only if it names the process that started at `start_time`
/// and that process has not exited.
fn pidfd_for(pid: Pid, start_time: ProcessStartTime) -> Option<OwnedFd> {
    let raw = rustix::process::Pid::from_raw(pid.as_raw())?;
    let pidfd = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()).ok()?;
    // The number may have passed to another process between the probe and the open:
    // the start time read after the open says whether the descriptor names ours (a
    // process that began after the probe cannot carry the start time it verified).
    let ours = probe_process(pid, start_time) == ProcessVerdict::Alive;
    (ours && !has_exited(&pidfd).unwrap_or(true)).then_some(pidfd)
}

impl TrackingProbe {
    /// A probe for the current host, boot and PID namespace.
    pub fn new() -> Result<Self, ProbeError> {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
        let max_held = usize::try_from(limit / 2).unwrap_or(usize::MAX);
        Ok(Self { local: LocalProbe::new()?, held: Mutex::new(HashMap::new()), max_held })
    }

    /// The host this probe speaks for.
    pub fn host_id(&self) -> &HostId {
        self.local.host_id()
    }

    /// How many processes it holds a pidfd for.
    pub fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Asks every held pidfd at once, in one `poll`, whether its process has exited; the
    /// next probe of each process in this round uses that answer instead of a `poll` of
    /// its own. A round's verdicts are then as of this call.
    pub fn begin_round(&self) {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let answers: Option<Vec<Option<bool>>> = {
            let mut fds: Vec<PollFd<'_>> =
                held.values().map(|h| PollFd::new(&h.pidfd, PollFlags::IN)).collect();
            // An unpollable pidfd (`None`) is left to the probe's own poll.
            poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 }))
                .ok()
                .map(|_| fds.iter().map(|fd| exited(fd.revents())).collect())
        };
        // The map is unchanged since the values were listed, so the order is the same.
        for (entry, answer) in held.values_mut().zip(answers.into_iter().flatten()) {
            entry.polled = answer;
        }
    }

    /// Closes the pidfds of processes not probed since the previous call.
    pub fn end_round(&self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.retain(|_, h| std::mem::take(&mut h.seen));
    }
}

impl LivenessProbe for TrackingProbe {
    fn speaks_for(&self, host: Option<&HostId>) -> bool {
        self.local.speaks_for(host)
    }

    fn probe(&self, process: &ProcessIdentity) -> ProcessVerdict {
        let local = &self.local;
        let trackable = process.host_id == local.host_id
            && process.pid_namespace == Some(local.pid_namespace)
            && process.boot_id == local.boot_id;
        if !trackable {
            return local.probe(process);
        }
        let key = (process.pid, process.process_start_time);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = held.get_mut(&key) {
            let exited = match entry.polled.take() {
                Some(exited) => Ok(exited),
                None => has_exited(&entry.pidfd),
            };
            if let Ok(false) = exited {
                entry.seen = true;
                return ProcessVerdict::Alive;
            }
            // It exited (or the pidfd cannot tell): the local probe says how, gone or
            // its number already reused, exactly as it would have without the pidfd.
            held.remove(&key);
        }
        let verdict = local.probe(process);
        if verdict == ProcessVerdict::Alive
            && held.len() < self.max_held
            && let Some(pidfd) = pidfd_for(process.pid, process.process_start_time)
        {
            held.insert(key, Held { pidfd, seen: true, polled: None });
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_counts_fields_after_the_last_parenthesis() {
        let line =
            "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let stat = parse_stat(line).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.parent, 1);
        assert_eq!(stat.start_time, 987_654);
        assert!(parse_stat("garbage").is_none());
    }
}
