//! Minting a launch: a fresh instance ID, recorded in the ledger before anyone sees it,
//! with the environment its five workers receive.

use fleet_identity::{ClientInstanceId, ClientType, FleetRunId, INSTANCE_DIGEST_BYTES, SessionId};
use fleet_registry::OpenMode;
use fleet_registry::{Claim, InstanceRecord, InstanceRef, StoreError, StoreErrorKind};

use crate::clock::now;
use crate::env::{InstanceEnv, PROVENANCE_TRUSTED_LAUNCHER, vars};
use crate::location::{RegistryLocation, open_registry};

/// A launch whose instance ID is recorded in the ledger.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The registry the ID is recorded in (absolute, so workers find it from anywhere).
    pub location: RegistryLocation,
    /// The environment every worker of the launch receives.
    pub env: InstanceEnv,
}

impl Launch {
    /// Mints an instance ID for `client_type`, records it in the ledger at `location`
    /// (creating the registry if needed), and returns the launch. Two calls never share
    /// an ID: the ledger's key refuses a duplicate.
    pub fn mint(
        location: &RegistryLocation,
        client_type: &ClientType,
        fleet_run_id: Option<FleetRunId>,
        session_id: Option<SessionId>,
    ) -> Result<Self, StoreError> {
        let mut random = [0u8; INSTANCE_DIGEST_BYTES];
        getrandom::fill(&mut random).map_err(|e| {
            StoreError::new(StoreErrorKind::Unavailable, format!("no randomness to mint with: {e}"))
        })?;
        let minted_at = now();
        let id = ClientInstanceId::mint(client_type, minted_at.get(), random)
            .map_err(|e| StoreError::invalid(e.to_string()))?;
        let record = InstanceRecord {
            client_instance_id: id.clone(),
            client_type: client_type.clone(),
            fleet_run_id: fleet_run_id.clone(),
            minted_at,
            host_id: fleet_probe::host_id().ok(),
        };
        // Recorded before it is printed or passed on: an ID the ledger lacks is never trusted.
        open_registry(location, OpenMode::CreateIfMissing)?.record_instance(&record)?;
        let session_id = match session_id {
            Some(s) => s,
            None => SessionId::new(format!("sess-{}", uuid::Uuid::now_v7()))
                .map_err(|e| StoreError::invalid(e.to_string()))?,
        };
        let env = InstanceEnv {
            client_type: client_type.clone(),
            instance: InstanceRef::Minted(id),
            provenance: Some(PROVENANCE_TRUSTED_LAUNCHER.into()),
            session_id: Some(session_id),
            fleet_run_id,
            profile: None,
        };
        Ok(Self { location: location.absolute(), env })
    }

    /// The minted ID.
    pub fn id(&self) -> &str {
        self.env.instance.as_str()
    }

    /// The variables to hand to the launch's workers, with `FLEET_REGISTRY`.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        let mut out = self.env.to_vars();
        out.push((vars::REGISTRY, self.location.as_config_value()));
        out
    }
}

/// The value of [`vars::LAUNCH_PROCESS`] naming this process: `fleet-launch run` sets it
/// just before it becomes the launch's client (`exec` keeps the pid and start time).
/// `PID:START_TIME:PID_NAMESPACE`: the namespace says where the pid is to be read.
pub fn launch_process_value() -> Result<String, StoreError> {
    let me = fleet_probe::current_process().map_err(|e| {
        StoreError::new(StoreErrorKind::Unavailable, format!("cannot read this process: {e}"))
    })?;
    let namespace = me.pid_namespace.map(|ns| format!(":{}", ns.inode())).unwrap_or_default();
    Ok(format!("{}:{}{namespace}", me.pid.get(), me.process_start_time.ticks()))
}

/// The process a launch started — its client — as [`vars::LAUNCH_PROCESS`] records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchProcess {
    pid: u32,
    start: u64,
    /// The PID namespace the pid belongs to (absent in values of older launchers).
    pid_namespace: Option<u64>,
}

impl LaunchProcess {
    /// Reads `PID:START_TIME[:PID_NAMESPACE]`.
    pub fn parse(value: &str) -> Result<Self, LineageError> {
        let malformed = || LineageError::Malformed { value: value.to_owned() };
        let mut parts = value.split(':');
        let pid = parts.next().and_then(|p| p.parse().ok()).ok_or_else(malformed)?;
        let start = parts.next().and_then(|s| s.parse().ok()).ok_or_else(malformed)?;
        let pid_namespace = parts.next().map(|ns| ns.parse().map_err(|_| malformed())).transpose()?;
        if parts.next().is_some() {
            return Err(malformed());
        }
        Ok(Self { pid, start, pid_namespace })
    }

    /// This process, as the client of a launch: for a tool that registers workers it
    /// runs itself, in-process (its workers are owned while it runs).
    pub fn current() -> Result<Self, StoreError> {
        Self::parse(&launch_process_value()?).map_err(|e| StoreError::invalid(e.to_string()))
    }

    /// The launch process this process's environment names, if any.
    pub fn from_env() -> Result<Option<Self>, LineageError> {
        std::env::var(vars::LAUNCH_PROCESS)
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| Self::parse(&v))
            .transpose()
    }

    /// Whether this process is the one named: the same pid and start time.
    fn is(self, pid: u32) -> bool {
        pid == self.pid
            && fleet_identity::Pid::new(i64::from(pid))
                .ok()
                .and_then(|p| fleet_probe::process_identity(p).ok())
                .is_some_and(|p| p.process_start_time.ticks() == self.start)
    }

    /// Whether the launch's client still runs: `Some(false)` only on proof that it is
    /// gone (its pid is free or names another process, in the PID namespace it was
    /// recorded in); `None` when this process cannot look (another PID namespace).
    pub fn alive(self) -> Option<bool> {
        let mine = fleet_probe::own_pid_namespace().ok().map(|ns| ns.inode());
        match (self.pid_namespace, mine) {
            (Some(recorded), Some(mine)) if recorded == mine => Some(self.is(self.pid)),
            // An older launcher's value: read in our own namespace, as it always was.
            (None, _) => Some(self.is(self.pid)),
            _ => None,
        }
    }
}

/// What a worker launched with `launch` claims of its ownership now: owned while its
/// launch's client runs (or when that cannot be seen), orphaned once it is proven gone,
/// unowned when it was started outside any launch.
pub fn claim_of(launch: Option<LaunchProcess>) -> Claim {
    match launch.map(LaunchProcess::alive) {
        None => Claim::Unowned,
        Some(Some(false)) => Claim::Orphaned,
        Some(Some(true) | None) => Claim::Owned,
    }
}

/// Why a server may not register under the launch in its environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LineageError {
    /// No ancestor of the server is the process the launch started: a process outside
    /// the launched client's tree copied the launch's variables.
    #[error(
        "this server (parent process {parent}) does not descend from the client `fleet-launch run` started for \
         this launch (process {launched}): a client started inside a launch, such as from an agent's shell, does not borrow \
         its identity; start it with `fleet-launch run --client {client} -- <client command>` to give it a launch \
         of its own"
    )]
    NotTheLaunchedClient {
        /// This server's parent.
        parent: u32,
        /// The process the launch started.
        launched: u32,
        /// The client type, for the advice.
        client: String,
    },
    /// A live server of this launch already holds this namespace's slot: this one was
    /// started by a client nested in the launch.
    #[error(
        "the {namespace} slot of this launch is held by live worker {holder} (pid {pid}): a client started \
         inside a launch, such as from an agent's shell, does not borrow its identity; start it with \
         `fleet-launch run --client {client} -- <client command>` to give it a launch of its own"
    )]
    SlotHeld {
        /// The namespace.
        namespace: String,
        /// The live worker holding the slot.
        holder: String,
        /// Its pid.
        pid: u32,
        /// The client type, for the advice.
        client: String,
    },
    /// The variable does not read `PID:START_TIME[:PID_NAMESPACE]`.
    #[error("{} {value:?} is not PID:START_TIME[:PID_NAMESPACE]", vars::LAUNCH_PROCESS)]
    Malformed {
        /// What it held.
        value: String,
    },
}

/// How a server descends from the client its launch started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lineage {
    /// The launch recorded no client (minted by hand): any process of its environment
    /// may register, as before lineage existed.
    Unrecorded,
    /// The launched client started this server itself.
    Child,
    /// The launched client is a further ancestor: a client whose published package
    /// starts its servers below a wrapper (Codex's npm entry point is a Node script that
    /// starts the native binary, which starts the servers; Gemini CLI relaunches itself
    /// in a child Node process) — or a client nested in the launch, started from an
    /// agent's shell. The two are told apart by the slot: see [`check_slot_unheld`].
    Descendant,
}

/// How many parents are followed looking for the launched client.
const MAX_ANCESTORS: usize = 64;

/// The parent of `pid`, when it can be read.
fn parent_of(pid: u32) -> Option<u32> {
    let pid = fleet_identity::Pid::new(i64::from(pid)).ok()?;
    fleet_probe::parent_pid(pid).ok().flatten()
}

/// Checks that this process descends from the process its launch started, when the
/// launch recorded one ([`vars::LAUNCH_PROCESS`]). A process outside the launched
/// client's tree (another terminal that copied the variables) may not register.
pub fn check_launch_lineage(client_type: &str) -> Result<Lineage, LineageError> {
    let Some(launch) = LaunchProcess::from_env()? else {
        return Ok(Lineage::Unrecorded);
    };
    let parent = std::os::unix::process::parent_id();
    if launch.is(parent) {
        return Ok(Lineage::Child);
    }
    let mut ancestor = parent;
    for _ in 0..MAX_ANCESTORS {
        match parent_of(ancestor) {
            Some(next) if next > 0 && next != ancestor => ancestor = next,
            _ => break,
        }
        if launch.is(ancestor) {
            return Ok(Lineage::Descendant);
        }
    }
    Err(LineageError::NotTheLaunchedClient { parent, launched: launch.pid, client: client_type.to_owned() })
}

/// For a server that descends from its launch's client through other processes
/// ([`Lineage::Descendant`]): the first live server of each namespace holds its slot
/// while its process lives. A server that finds an active row of its instance and
/// namespace whose process this host proves alive is a second client's — one nested in
/// the launch, started from an agent's shell, that merely inherited the environment —
/// and must not register under the launch's identity.
pub fn check_slot_unheld(
    location: &RegistryLocation,
    instance: &str,
    namespace: fleet_identity::Namespace,
    client_type: &str,
) -> Result<(), String> {
    let mut registry = match open_registry(location, OpenMode::MustExist) {
        Ok(registry) => registry,
        // No registry yet: nothing can hold the slot.
        Err(e) if e.kind() == StoreErrorKind::Missing => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    let rows: Vec<_> = registry
        .slot(instance, namespace)
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|r| r.status == fleet_registry::WorkerStatus::Active)
        .collect();
    let probes = crate::probe_local(&rows);
    match rows.iter().find(|r| probes.get(&r.worker_identity) == Some(&fleet_registry::ProcessVerdict::Alive))
    {
        None => Ok(()),
        Some(holder) => Err(LineageError::SlotHeld {
            namespace: namespace.to_string(),
            holder: holder.worker_identity.to_string(),
            pid: holder.pid.map_or(0, |p| p.get()),
            client: client_type.to_owned(),
        }
        .to_string()),
    }
}

/// A fresh 256-bit key from the OS, for a process-local secret such as a grant issuer's.
pub fn random_key() -> Result<[u8; 32], StoreError> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key)
        .map_err(|e| StoreError::new(StoreErrorKind::Unavailable, format!("no randomness for a key: {e}")))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_process_reads_with_or_without_its_namespace_and_nothing_else() {
        let old = LaunchProcess::parse("42:1000").unwrap();
        assert_eq!((old.pid, old.start, old.pid_namespace), (42, 1000, None));
        let new = LaunchProcess::parse("42:1000:4026531836").unwrap();
        assert_eq!(new.pid_namespace, Some(4_026_531_836));
        for bad in ["", "42", "x:1", "42:1:2:3", "42:1:ns"] {
            assert!(LaunchProcess::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_claim_follows_the_launch_process() {
        assert_eq!(claim_of(None), Claim::Unowned);
        let me = LaunchProcess::current().unwrap();
        assert_eq!(claim_of(Some(me)), Claim::Owned);
        let gone = LaunchProcess { start: me.start + 1, ..me };
        assert_eq!(claim_of(Some(gone)), Claim::Orphaned, "the pid names another process now");
        let elsewhere = LaunchProcess { pid_namespace: me.pid_namespace.map(|ns| ns + 1), ..me };
        assert_eq!(claim_of(Some(elsewhere)), Claim::Owned, "another namespace: nothing proven");
    }
}
