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
use std::path::{Path, PathBuf};

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
        let text = read_trusted(path)?;
        let mut profiles = parse(&text).map_err(|e| format!("{} is not valid: {e}", path.display()))?;
        profiles.remove(name).ok_or_else(|| format!("profile {name:?} is not in {}", path.display()))
    }
}

/// A profiles file's text, by profile name: `{"profiles": {NAME: {"role", "allowed_operations"}}}`;
/// an unknown field is an error, not ignored.
pub fn parse(text: &str) -> Result<BTreeMap<String, Profile>, String> {
    serde_json::from_str::<ProfilesFile>(text).map(|f| f.profiles).map_err(|e| e.to_string())
}

/// Reads a file that may grant authority: without blocking, and only if it is a regular
/// file owned by this user and writable by no one else.
fn read_trusted(path: &Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file; refusing it"));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "{shown} is owned by uid {}, not by this user (uid {me}); refusing it",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{shown} is writable by others (mode {:o}); refusing it: chmod go-w {shown}",
            meta.mode() & 0o777
        ));
    }
    let mut text = String::new();
    file.take(MAX_BYTES).read_to_string(&mut text).map_err(|e| format!("cannot read {shown}: {e}"))?;
    Ok(text)
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
