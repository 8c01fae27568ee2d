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

/// A fresh 256-bit key from the OS, for a process-local secret such as a grant issuer's.
pub fn random_key() -> Result<[u8; 32], StoreError> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key)
        .map_err(|e| StoreError::new(StoreErrorKind::Unavailable, format!("no randomness for a key: {e}")))?;
    Ok(key)
}
