//! The hosts of a fleet as an operator handles them: the list, and the fence of a host
//! gone for good (and its lifting for the host's later boots).

use fleet_identity::HostId;
use fleet_registry::{FenceReport, HostFence, HostList, OpenMode, StoreError};

use crate::location::{RegistryLocation, open_registry};

/// Every host the registry knows (see [`fleet_registry::Registry::hosts`]).
pub fn host_list(location: &RegistryLocation) -> Result<HostList, StoreError> {
    open_registry(location, OpenMode::MustExist)?.hosts()
}

/// Who is acting, for a fence's record: `$USER@hostname` (or the uid where no user
/// name is set).
pub fn operator_name() -> String {
    let user = ["USER", "LOGNAME"]
        .into_iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty() && !u.chars().any(char::is_control)))
        .unwrap_or_else(|| format!("uid {}", nix::unistd::getuid()));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    if host.is_empty() { user } else { format!("{user}@{host}") }
}

/// Fences `host` as gone for good, as `by` says why (`reason`); refused for this
/// process's own host.
pub fn fence_host(
    location: &RegistryLocation,
    host: &HostId,
    reason: &str,
    by: &str,
) -> Result<FenceReport, StoreError> {
    let own = fleet_probe::host_id().map_err(|e| {
        StoreError::new(
            fleet_registry::StoreErrorKind::Unavailable,
            format!("cannot read this host's id: {e}"),
        )
    })?;
    open_registry(location, OpenMode::MustExist)?.fence_host(host, reason, by, &own)
}

/// Lifts the fence of every boot of `host` for its later boots.
pub fn unfence_host(location: &RegistryLocation, host: &HostId, by: &str) -> Result<HostFence, StoreError> {
    open_registry(location, OpenMode::MustExist)?.unfence_host(host, by)
}
