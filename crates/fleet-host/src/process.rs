//! This process and the host it runs on, as the registry records them: the process
//! evidence a worker registers with, and the descriptor limit a tracking probe needs.
//! The binaries reach the operating system's probe through here only.

pub use fleet_probe::{ProbeError, current_process, host_id, process_identity, raise_open_file_limit};

/// The time since this host booted, on a clock that counts every moment this process is
/// paused (`SIGSTOP`, a debugger) or the host is suspended: the clock a lease holder
/// measures its own lease on (see [`fleet_lease::ActWindow`]). A monotonic clock that
/// stops while the host sleeps would let a resumed holder believe its lease still ran.
pub fn boot_clock() -> std::time::Duration {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME) {
        Ok(t) => std::time::Duration::new(
            u64::try_from(t.tv_sec()).unwrap_or(0),
            u32::try_from(t.tv_nsec()).unwrap_or(0),
        ),
        // Every Linux since 2.6.39 has CLOCK_BOOTTIME. Without it no deadline can be
        // kept: the far future makes every deadline already passed (add with
        // `saturating_add`).
        Err(_) => std::time::Duration::MAX,
    }
}

/// This process as the holder of a tenure: this host, this boot of it, this pid.
pub fn holder_process() -> Result<fleet_lease::HolderProcess, ProbeError> {
    let pid = fleet_identity::Pid::new(i64::from(std::process::id()))
        .map_err(|e| ProbeError::Invalid { path: "getpid()".to_owned(), detail: e.to_string() })?;
    Ok(fleet_lease::HolderProcess { host_id: host_id()?, boot_id: fleet_probe::boot_id()?, pid })
}

/// This host and this boot of it, where the OS says (`/etc/machine-id`, the boot id).
pub fn current_host() -> Option<(fleet_identity::HostId, fleet_identity::BootId)> {
    Some((host_id().ok()?, fleet_probe::boot_id().ok()?))
}

/// Whether `holder` is a live process on this very host and boot running this same
/// program: the run that holds a tenure, still there. A pid that a process of another
/// program now holds is not taken for it.
pub fn holder_alive_here(holder: &fleet_lease::HolderProcess) -> bool {
    let Some((host, boot)) = current_host() else { return false };
    if holder.host_id != host || holder.boot_id != boot || holder.pid.get() == std::process::id() {
        return false;
    }
    let exe = |pid: &str| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    exe(&holder.pid.get().to_string()).is_some_and(|theirs| exe("self").is_some_and(|mine| mine == theirs))
}
