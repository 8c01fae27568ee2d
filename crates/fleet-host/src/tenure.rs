//! Tenures of a lease on this host: the marks a kept command's tree carries (which
//! registry, which lease key, which fencing epoch), ending the trees of older tenures
//! and never those of newer ones, and the lock that keeps one live holder per connector
//! and binding on a host.

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::keeper::{GRACE, running};

/// The variables that mark a kept command's tree with the lease it runs under: which
/// lease of which registry, and at which fencing epoch.
const TENURE: &str = "FLEET_TENURE";
const TENURE_EPOCH: &str = "FLEET_TENURE_EPOCH";

/// One tenure of a lease: the registry (by its id, never by how its location is
/// spelled), the lease key, and the fencing epoch granted.
#[derive(Debug, Clone)]
pub struct Tenure {
    lease: String,
    epoch: u64,
}

/// A process of a newer tenure of the same lease: this one has been superseded.
#[derive(Debug, Clone, Copy)]
pub struct Superseded {
    /// The newer epoch.
    pub epoch: u64,
    /// A process running under it.
    pub pid: i32,
}

impl std::fmt::Display for Superseded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "superseded: pid {} runs the same lease at the newer fencing epoch {}",
            self.pid, self.epoch
        )
    }
}

impl Tenure {
    /// The tenure at `epoch` of lease `lease_key` in the registry whose id is `registry`
    /// (a `fleet_registry::RegistryId`; this crate knows no registry, only its name).
    pub fn new(registry: &impl std::fmt::Display, lease_key: &str, epoch: u64) -> Self {
        Self { lease: format!("{registry} {lease_key}"), epoch }
    }

    /// Marks `cmd`'s tree as running under this tenure.
    pub fn mark(&self, cmd: &mut Command) {
        cmd.env(TENURE, &self.lease).env(TENURE_EPOCH, self.epoch.to_string());
    }

    /// The processes of this host marked with the same lease, each with its epoch
    /// (zombies left out: they have ended). Processes of other users are not visible
    /// here, and a process that cleared its environment is not found.
    fn marked(&self) -> Vec<(nix::unistd::Pid, u64)> {
        let wanted = format!("{TENURE}={}", self.lease);
        let epoch_prefix = format!("{TENURE_EPOCH}=");
        let me = std::process::id();
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| *pid != me)
            .filter_map(|pid| {
                let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
                let mut vars = env.split(|b| *b == 0);
                let mut same = false;
                let mut epoch = None;
                for var in vars.by_ref() {
                    if var == wanted.as_bytes() {
                        same = true;
                    } else if let Some(e) = var.strip_prefix(epoch_prefix.as_bytes()) {
                        epoch = std::str::from_utf8(e).ok().and_then(|e| e.parse::<u64>().ok());
                    }
                }
                (same && running(pid))
                    .then_some((nix::unistd::Pid::from_raw(i32::try_from(pid).ok()?), epoch?))
            })
            .collect()
    }

    /// Ends, before this tenure runs anything, every process of this host left over from
    /// an older tenure of the same lease (a former owner paused past its lease — SIGSTOP,
    /// a debugger — may still have its tree running). A tree of a newer epoch is never
    /// touched: its finding means this tenure has passed. Trees of this same epoch are
    /// ended only when `same_epoch` says they are leftovers (the caller proved that their
    /// owner is gone). Returns once none is left, or after a few seconds with how many
    /// remain.
    pub fn end_former_trees(&self, same_epoch: SameEpoch) -> Result<usize, Superseded> {
        let deadline = Instant::now() + GRACE + Duration::from_secs(5);
        loop {
            let marked = self.marked();
            if let Some((pid, epoch)) = marked.iter().find(|(_, epoch)| *epoch > self.epoch) {
                return Err(Superseded { epoch: *epoch, pid: pid.as_raw() });
            }
            let former: Vec<_> = marked
                .iter()
                .filter(|(_, epoch)| {
                    *epoch < self.epoch || (*epoch == self.epoch && same_epoch == SameEpoch::Leftover)
                })
                .map(|(pid, _)| *pid)
                .collect();
            if former.is_empty() || Instant::now() >= deadline {
                return Ok(former.len());
            }
            for pid in former {
                let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What processes marked with a tenure's own epoch are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameEpoch {
    /// Left by an owner of this tenure that is gone (a resumed lease): ended.
    Leftover,
    /// Nothing of this epoch can be running yet (a freshly granted epoch): kept.
    Untouched,
}

/// One live process per tenure on this host: an exclusive `flock` on a file named by the
/// registry's id, this host's id, the lease key and the owner, in a directory that no
/// environment variable moves (`lock_dir`), held for the life of the process that holds
/// the lease (the kernel lets go of it however the process ends). The file records who
/// holds it, for the refusal to name.
#[derive(Debug)]
pub struct HostLock {
    _file: nix::fcntl::Flock<std::fs::File>,
}

impl HostLock {
    /// Takes the lock of `owner`'s hold on `lease_key` in `registry`, or says which live
    /// process holds it. Another owner (a takeover) is not stopped by it.
    pub fn take(registry: &impl std::fmt::Display, lease_key: &str, owner: &str) -> Result<Self, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = lock_dir().map_err(|e| format!("cannot make a directory for tenure locks: {e}"))?;
        let host = crate::process::host_id().map(|h| h.to_string()).unwrap_or_default();
        let name = blake3::hash(format!("{registry} {host} {lease_key} {owner}").as_bytes()).to_hex();
        let path = dir.join(format!("{}.lock", &name[..32]));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| format!("cannot open the tenure lock {}: {e}", path.display()))?;
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(mut file) => {
                let _ = file.set_len(0);
                let _ = std::io::Seek::rewind(&mut *file);
                let _ = write!(*file, "pid {} on host {host}", std::process::id());
                Ok(Self { _file: file })
            }
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut holder = String::new();
                let _ = Read::take(&mut file, 256).read_to_string(&mut holder);
                Err(format!(
                    "{lease_key} is already held by {owner} in a live process on this host ({})",
                    holder.trim()
                ))
            }
            Err((_, e)) => Err(format!("cannot lock {}: {e}", path.display())),
        }
    }
}

/// The user's directory for tenure locks on this host, created 0700 where missing: under
/// the user's runtime directory `/run/user/UID` where the system keeps one, else
/// `/tmp/fleetward-UID`. Never one an environment variable names (`XDG_RUNTIME_DIR`,
/// `HOME`, `TMPDIR`): two runs of one tenure with different environments must meet at
/// one lock. A directory planted by another user, or writable by others, is refused.
fn lock_dir() -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    use std::path::PathBuf;
    let uid = nix::unistd::getuid();
    let owned = |p: &std::path::Path| {
        std::fs::symlink_metadata(p)
            .is_ok_and(|m| m.is_dir() && m.uid() == uid.as_raw() && m.mode() & 0o022 == 0)
    };
    let run = PathBuf::from(format!("/run/user/{uid}"));
    let dir =
        if owned(&run) { run.join("fleetward") } else { PathBuf::from(format!("/tmp/fleetward-{uid}")) };
    let dir = dir.join("tenures");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    for d in [dir.parent().unwrap_or(&dir), &dir] {
        if !owned(d) {
            return Err(std::io::Error::other(format!(
                "{} is not a directory of this user's that only it may write",
                d.display()
            )));
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use std::process::Child;

    use super::*;

    /// A registry id as `fleet_registry::RegistryId` prints one: 32 hex digits.
    fn id(last: char) -> String {
        format!("{}{last}", "0".repeat(31))
    }

    /// A `sleep` marked as a tree of `tenure`.
    fn marked_sleep(tenure: &Tenure) -> Child {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        tenure.mark(&mut cmd);
        let child = cmd.spawn().unwrap();
        // Its environment is readable once it has exec'd.
        let pid = child.id();
        let start = Instant::now();
        while !std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|e| !e.is_empty())
            || std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| !e.ends_with("sleep"))
        {
            assert!(start.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(5));
        }
        child
    }

    /// A tenure that finds a tree of a newer epoch of its lease has passed: it touches
    /// nothing of that tree and says so.
    #[test]
    fn an_older_tenure_never_touches_a_newer_tree() {
        let key = format!("init:older-{}", std::process::id());
        let mut newer = marked_sleep(&Tenure::new(&id('a'), &key, 2));
        let found = Tenure::new(&id('a'), &key, 1).end_former_trees(SameEpoch::Untouched);
        let alive = newer.try_wait().unwrap().is_none();
        let _ = newer.kill();
        let _ = newer.wait();
        let superseded = found.expect_err("superseded");
        assert_eq!((superseded.epoch, superseded.pid), (2, i32::try_from(newer.id()).unwrap()));
        assert!(alive, "the newer tenure's tree still runs");
    }

    /// A newer tenure ends the tree of an older one; a tree of the same lease in another
    /// registry (another id) is not its to touch.
    #[test]
    fn a_newer_tenure_ends_older_trees_of_its_own_registry_only() {
        let key = format!("init:newer-{}", std::process::id());
        let mut older = marked_sleep(&Tenure::new(&id('a'), &key, 1));
        let mut elsewhere = marked_sleep(&Tenure::new(&id('b'), &key, 1));
        let ended = Tenure::new(&id('a'), &key, 2).end_former_trees(SameEpoch::Untouched);
        let older_status = older.wait().unwrap();
        let elsewhere_alive = elsewhere.try_wait().unwrap().is_none();
        let _ = elsewhere.kill();
        let _ = elsewhere.wait();
        assert_eq!(ended.unwrap(), 0, "none left");
        assert!(!older_status.success(), "the older tree was killed");
        assert!(elsewhere_alive, "another registry's tree is untouched");
    }

    /// A tree of the same epoch is ended only when the caller proved it a leftover.
    #[test]
    fn a_same_epoch_tree_is_ended_only_as_a_leftover() {
        let key = format!("connector:same-{}", std::process::id());
        let tenure = Tenure::new(&id('c'), &key, 3);
        let mut same = marked_sleep(&tenure);
        assert_eq!(tenure.end_former_trees(SameEpoch::Untouched).unwrap(), 0);
        assert!(same.try_wait().unwrap().is_none(), "untouched");
        assert_eq!(tenure.end_former_trees(SameEpoch::Leftover).unwrap(), 0);
        assert!(!same.wait().unwrap().success(), "ended as a leftover");
    }
}
