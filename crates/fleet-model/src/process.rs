//! What a liveness probe says about a recorded process, and the trait a probe
//! implements. The operating system's probe lives in `fleet-probe`; tests script their
//! own.

use fleet_identity::{BootId, HostId, Pid, PidNamespace, ProcessStartTime};
use serde::{Deserialize, Serialize};

fleet_identity::outward_codes! {
    /// The answer to "is this pid number occupied?".
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Liveness ("liveness") {
        /// The process exists and is running (or we may not signal it, which proves it exists).
        Alive = "alive",
        /// There is no such process, or only its unreaped exit status remains.
        Gone = "gone",
        /// The probe could not tell.
        Unknown = "unknown",
    }
}

fleet_identity::outward_codes! {
    /// What a recorded process (pid plus start time) is doing now.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ProcessVerdict ("process verdict") {
        /// The very process that was recorded is still alive.
        Alive = "alive",
        /// That process is gone and nothing else holds its pid number.
        Gone = "gone",
        /// That process is gone, but the pid number now belongs to a different incarnation.
        PidReused = "pid_reused",
        /// The probe could not tell.
        Unknown = "unknown",
    }
}

/// Everything that names one process: machine, boot, pid and start time.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessIdentity {
    /// The machine.
    pub host_id: HostId,
    /// The boot of the machine.
    pub boot_id: BootId,
    /// The pid number.
    pub pid: Pid,
    /// The start time of the incarnation that holds the pid number.
    pub process_start_time: ProcessStartTime,
    /// The PID namespace the pid belongs to, when it was recorded. A probe in another
    /// namespace (or facing a row that does not say) cannot judge the pid.
    pub pid_namespace: Option<PidNamespace>,
}

/// A source of liveness answers about recorded processes. The OS implements it
/// (`fleet_probe::LocalProbe`); tests may script it.
pub trait LivenessProbe {
    /// What the recorded process is doing now, judged from where the probe runs.
    fn probe(&self, process: &ProcessIdentity) -> ProcessVerdict;

    /// Whether this probe can speak for processes recorded on `host` (`None`: a row
    /// that names no host). Rows it cannot speak for stay unprobed rather than being
    /// answered `unknown`. A scripted probe speaks for every host.
    fn speaks_for(&self, host: Option<&HostId>) -> bool {
        let _ = host;
        true
    }
}
