//! `profiles.json`: each profile has a role and the operations it allows.
//!
//! ```json
//! {"profiles": {"reconciler": {"role": "reconciler",
//!                              "allowed_operations": ["gitea.read", "gitea.worker_registry.retire"]}}}
//! ```
//!
//! Without a file, the defaults give every namespace a profile of its own name, with
//! `gitea.read` only. No profile holds `gitea.worker_registry.retire` or
//! `gitea.workflow_lease.write` by default.
//!
//! The file grants authority, so it fails closed: it must be a regular file owned by the
//! user the server runs as and writable by no one else, or it is refused. It is read
//! without blocking (a FIFO in its place is refused, not waited on), and only its first
//! megabyte.

use std::collections::BTreeMap;
use std::path::PathBuf;

use fleet_identity::Namespace;
use serde::Deserialize;

/// Read the fleet: snapshot and plan.
pub const READ: &str = "gitea.read";
/// Retire stale registry rows.
pub const RETIRE: &str = "gitea.worker_registry.retire";
/// Acquire, renew and release this worker's workflow leases.
pub const WORKFLOW_LEASE: &str = "gitea.workflow_lease.write";

/// The largest profiles file read.
const MAX_BYTES: u64 = 1 << 20;

/// One profile: the role it is for and the operations it allows.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The namespace role the profile is for.
    pub role: Namespace,
    /// The capabilities it grants (`gitea.read`, …).
    #[serde(default)]
    pub allowed_operations: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfilesFile {
    profiles: BTreeMap<String, Profile>,
}

/// Where the profiles come from: a file re-read on every resolution, or the defaults.
#[derive(Debug)]
pub struct Profiles {
    path: Option<PathBuf>,
    /// Answers a test hands out one per resolution, to move the world between the checks
    /// of a single call.
    #[cfg(test)]
    scripted: std::sync::Mutex<std::collections::VecDeque<Profile>>,
}

impl Profiles {
    /// Profiles read from `path` on every resolution, or the defaults without one.
    pub fn new(path: Option<PathBuf>) -> Self {
        Self {
            path,
            #[cfg(test)]
            scripted: std::sync::Mutex::default(),
        }
    }

    /// Profiles that answer `answers` in turn, then the defaults.
    #[cfg(test)]
    pub fn scripted(answers: Vec<Profile>) -> Self {
        Self { path: None, scripted: std::sync::Mutex::new(answers.into()) }
    }

    /// Resolves `name` now, reading the file afresh, so an edit takes effect at once.
    pub fn resolve(&self, name: &str) -> Result<Profile, String> {
        #[cfg(test)]
        if let Some(next) = self.scripted.lock().ok().and_then(|mut s| s.pop_front()) {
            return Ok(next);
        }
        let Some(path) = &self.path else {
            let role: Namespace = name.parse().map_err(|_| format!("no default profile {name:?}"))?;
            return Ok(Profile { role, allowed_operations: vec![READ.to_owned()] });
        };
        let text = fleet_runtime::user_file::read_trusted(path, MAX_BYTES)?;
        let mut profiles = parse(&text).map_err(|e| format!("{} is not valid: {e}", path.display()))?;
        profiles.remove(name).ok_or_else(|| format!("profile {name:?} is not in {}", path.display()))
    }
}

/// A profiles file's text, by profile name: `{"profiles": {NAME: {"role", "allowed_operations"}}}`;
/// an unknown field is an error, not ignored.
pub fn parse(text: &str) -> Result<BTreeMap<String, Profile>, String> {
    serde_json::from_str::<ProfilesFile>(text).map(|f| f.profiles).map_err(|e| e.to_string())
}

impl Profile {
    /// Whether the profile grants `operation`.
    pub fn allows(&self, operation: &str) -> bool {
        self.allowed_operations.iter().any(|o| o == operation)
    }

    /// Whether the profile is for the namespace that uses it: an author profile that
    /// calls itself a reconciler is refused, not promoted.
    pub fn fits(&self, namespace: Namespace) -> bool {
        self.role == namespace
    }

    /// Fleet-wide tools are for the controller and reconciler roles only.
    pub fn fleet_role(&self) -> bool {
        matches!(self.role, Namespace::Controller | Namespace::Reconciler)
    }
}
