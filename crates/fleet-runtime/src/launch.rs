//! Minting a launch: a fresh instance ID, recorded in the ledger before anyone sees it,
//! with the environment its five workers receive.

use fleet_identity::{ClientInstanceId, ClientType, FleetRunId, INSTANCE_DIGEST_BYTES, SessionId};
use fleet_registry::OpenMode;
use fleet_registry::{InstanceRecord, InstanceRef, StoreError, StoreErrorKind};

use crate::env::{InstanceEnv, PROVENANCE_TRUSTED_LAUNCHER, vars};
use crate::location::{RegistryLocation, open_registry};
use crate::worker::now;

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
        client_type: ClientType,
        fleet_run_id: Option<FleetRunId>,
        session_id: Option<SessionId>,
    ) -> Result<Self, StoreError> {
        let mut random = [0u8; INSTANCE_DIGEST_BYTES];
        getrandom::fill(&mut random).map_err(|e| {
            StoreError::new(StoreErrorKind::Unavailable, format!("no randomness to mint with: {e}"))
        })?;
        let minted_at = now();
        let id = ClientInstanceId::mint(&client_type, minted_at.get(), random)
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
            client_type,
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
pub fn launch_process_value() -> Result<String, StoreError> {
    let me = fleet_probe::current_process().map_err(|e| {
        StoreError::new(StoreErrorKind::Unavailable, format!("cannot read this process: {e}"))
    })?;
    Ok(format!("{}:{}", me.pid.get(), me.process_start_time.ticks()))
}

/// Why a server may not register under the launch in its environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineageError {
    /// The server's parent is not the process the launch started: a client started from
    /// inside the launch (an agent's shell) inherited the launch's variables.
    #[error(
        "this server was started by process {parent}, not by the client `fleet-launch run` started for this launch \
         (process {launched}): a client started inside a launch, such as from an agent's shell, does not borrow \
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
    /// The variable does not read `PID:START_TIME`.
    #[error("{} {value:?} is not PID:START_TIME", vars::LAUNCH_PROCESS)]
    Malformed {
        /// What it held.
        value: String,
    },
}

/// Checks that this process was started by the process its launch started, when the
/// launch recorded one ([`vars::LAUNCH_PROCESS`]). A launch minted by hand records none,
/// and then any process of its environment may register, as before lineage existed.
/// Clients start their stdio servers as their own children (Claude Code, Codex and
/// Gemini CLI spawn the configured command directly), so the parent is the client.
pub fn check_launch_lineage(client_type: &str) -> Result<(), LineageError> {
    let Some(value) = std::env::var(vars::LAUNCH_PROCESS).ok().filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    let malformed = || LineageError::Malformed { value: value.clone() };
    let (pid, start) = value.split_once(':').ok_or_else(malformed)?;
    let launched: u32 = pid.parse().map_err(|_| malformed())?;
    let start: u64 = start.parse().map_err(|_| malformed())?;
    let parent = std::os::unix::process::parent_id();
    let same = parent == launched
        && fleet_identity::Pid::new(i64::from(parent))
            .ok()
            .and_then(|p| fleet_probe::process_identity(p).ok())
            .is_some_and(|p| p.process_start_time.ticks() == start);
    if same {
        Ok(())
    } else {
        Err(LineageError::NotTheLaunchedClient { parent, launched, client: client_type.to_owned() })
    }
}

/// A fresh 256-bit key from the OS, for a process-local secret such as a grant issuer's.
pub fn random_key() -> Result<[u8; 32], StoreError> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key)
        .map_err(|e| StoreError::new(StoreErrorKind::Unavailable, format!("no randomness for a key: {e}")))?;
    Ok(key)
}
