//! `profiles.json`: each profile has a role and the operations it allows.
//!
//! ```json
//! {"profiles": {"reconciler": {"role": "reconciler",
//!                              "allowed_operations": ["gitea.read", "gitea.worker_registry.retire"]}}}
//! ```
//!
//! Without a file, the defaults give every namespace a profile of its own name, with
//! `gitea.read` only. No profile holds `gitea.worker_registry.retire` by default.

use std::collections::BTreeMap;
use std::path::PathBuf;

use fleet_identity::Namespace;
use serde::Deserialize;

/// Read the fleet: snapshot and plan.
pub(crate) const READ: &str = "gitea.read";
/// Retire stale registry rows.
pub(crate) const RETIRE: &str = "gitea.worker_registry.retire";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Profile {
    pub(crate) role: Namespace,
    #[serde(default)]
    pub(crate) allowed_operations: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfilesFile {
    profiles: BTreeMap<String, Profile>,
}

/// Where the profiles come from: a file re-read on every resolution, or the defaults.
#[derive(Debug, Clone)]
pub(crate) struct Profiles {
    path: Option<PathBuf>,
}

impl Profiles {
    pub(crate) fn new(path: Option<PathBuf>) -> Self {
        Self { path }
    }

    /// Resolves `name` now, reading the file afresh, so an edit takes effect at once.
    pub(crate) fn resolve(&self, name: &str) -> Result<Profile, String> {
        let Some(path) = &self.path else {
            let role: Namespace = name.parse().map_err(|_| format!("no default profile {name:?}"))?;
            return Ok(Profile { role, allowed_operations: vec![READ.to_owned()] });
        };
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file: ProfilesFile =
            serde_json::from_str(&text).map_err(|e| format!("{} is not valid: {e}", path.display()))?;
        file.profiles
            .get(name)
            .cloned()
            .ok_or_else(|| format!("profile {name:?} is not in {}", path.display()))
    }
}

impl Profile {
    pub(crate) fn allows(&self, operation: &str) -> bool {
        self.allowed_operations.iter().any(|o| o == operation)
    }

    /// Fleet-wide tools are for the controller and reconciler roles only.
    pub(crate) fn fleet_role(&self) -> bool {
        matches!(self.role, Namespace::Controller | Namespace::Reconciler)
    }
}
