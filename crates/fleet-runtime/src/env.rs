//! The instance environment the launcher injects into every namespace worker. The names
//! are kept from the seeds so existing launchers and profiles keep working.

use fleet_identity::{
    ClientInstanceId, ClientType, FleetRunId, IdentityError, InstanceClaim, Profile, SessionId,
};
use fleet_registry::InstanceRef;

/// Names of the variables, as the seeds spell them.
pub mod vars {
    /// The client type.
    pub const CLIENT: &str = "GITEA_MCP_CLIENT";
    /// The launch's instance ID.
    pub const CLIENT_INSTANCE: &str = "GITEA_MCP_CLIENT_INSTANCE";
    /// Who minted the instance ID.
    pub const INSTANCE_PROVENANCE: &str = "GITEA_MCP_INSTANCE_PROVENANCE";
    /// The client session.
    pub const CLIENT_SESSION: &str = "GITEA_MCP_CLIENT_SESSION";
    /// The approved cohort.
    pub const FLEET_RUN_ID: &str = "GITEA_MCP_FLEET_RUN_ID";
    /// Set to 1 when a launcher manages the client.
    pub const CLIENT_MANAGED: &str = "GITEA_CLIENT_MANAGED";
    /// The role profile.
    pub const PROFILE: &str = "GITEA_MCP_PROFILE";
    /// Where the registry is.
    pub const REGISTRY: &str = "FLEET_REGISTRY";
    /// Where `fleet-mcp` reads its profiles.
    pub const PROFILES: &str = "FLEET_PROFILES";
    /// The process `fleet-launch run` started for the launch (its client), as
    /// `PID:START_TIME`: only servers that process starts register under the launch.
    pub const LAUNCH_PROCESS: &str = "GITEA_MCP_LAUNCH_PROCESS";
    /// The remotes a retirement's audit context may name, comma-separated (any remote
    /// name when unset).
    pub const REMOTES: &str = "FLEET_REMOTES";

    /// The variables a launch hands to each of its servers through the agent client.
    /// Client configs name these (never their values) so that one shared file serves
    /// every launch; `GITEA_MCP_PROFILE` is not among them, since each entry sets its own.
    pub const FORWARDED: [&str; 9] = [
        CLIENT,
        CLIENT_INSTANCE,
        INSTANCE_PROVENANCE,
        CLIENT_SESSION,
        FLEET_RUN_ID,
        CLIENT_MANAGED,
        REGISTRY,
        PROFILES,
        LAUNCH_PROCESS,
    ];
}

/// An agent client whose config file starts the five servers and carries the launch's
/// variables to them, each by its own documented rule.
/// Each is named on the command line by [`AgentClient::as_str`] (`claude` is accepted for
/// `claude_code`) and described by [`AgentClient::about`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentClient {
    /// OpenAI Codex.
    Codex,
    /// Claude Code.
    ClaudeCode,
    /// Cursor.
    Cursor,
    /// Gemini CLI.
    Gemini,
    /// VS Code.
    Vscode,
}

impl AgentClient {
    /// Every client, in the order help lists them.
    pub const ALL: [AgentClient; 5] = [
        AgentClient::Codex,
        AgentClient::ClaudeCode,
        AgentClient::Cursor,
        AgentClient::Gemini,
        AgentClient::Vscode,
    ];

    /// What the client is and which config file it reads, for help.
    pub fn about(self) -> &'static str {
        match self {
            AgentClient::Codex => "OpenAI Codex (`config.toml`)",
            AgentClient::ClaudeCode => "Claude Code (`.mcp.json`, or `~/.claude.json` for the user scope)",
            AgentClient::Cursor => "Cursor (`.cursor/mcp.json`)",
            AgentClient::Gemini => "Gemini CLI (`.gemini/settings.json`)",
            AgentClient::Vscode => "VS Code (`.vscode/mcp.json`)",
        }
    }

    /// Other names the command line accepts for this client.
    pub fn aliases(self) -> &'static [&'static str] {
        match self {
            AgentClient::ClaudeCode => &["claude"],
            _ => &[],
        }
    }

    /// The client's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentClient::Codex => "codex",
            AgentClient::ClaudeCode => "claude_code",
            AgentClient::Cursor => "cursor",
            AgentClient::Gemini => "gemini",
            AgentClient::Vscode => "vscode",
        }
    }

    /// How this client hands a launch's variables to a server, and what to do when one
    /// is missing: one sentence for an error message.
    pub fn forwarding_hint(self) -> String {
        let rule = match self {
            AgentClient::Codex => "Codex passes a server only the variables its entry names in env_vars",
            AgentClient::ClaudeCode => {
                "Claude Code fills the entry's env from ${VAR:-} in its own environment"
            }
            AgentClient::Cursor => "Cursor fills the entry's env from ${env:VAR} in its own environment",
            AgentClient::Gemini => "Gemini CLI fills the entry's env from ${VAR} in its own environment",
            AgentClient::Vscode => "VS Code fills the entry's env from ${env:VAR} in its own environment",
        };
        format!(
            "{rule}: install the entries with `fleet-launch install --client {0}` and start the session \
             with `fleet-launch run --client {0} -- {1}`",
            self.as_str(),
            self.program()
        )
    }

    /// The program that starts this client's sessions, as its own docs name it.
    pub fn program(self) -> &'static str {
        match self {
            AgentClient::Codex => "codex",
            AgentClient::ClaudeCode => "claude",
            AgentClient::Cursor => "cursor-agent",
            AgentClient::Gemini => "gemini",
            AgentClient::Vscode => "code",
        }
    }
}

impl std::str::FromStr for AgentClient {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|c| c.as_str() == s || c.aliases().contains(&s)).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|c| c.as_str()).collect();
            format!("unknown agent client {s:?} (one of {})", names.join(", "))
        })
    }
}

/// The provenance the launcher declares.
pub const PROVENANCE_TRUSTED_LAUNCHER: &str = "trusted_launcher";

/// Why the instance environment was refused; each names the variable at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// A required variable is not set.
    #[error("{0} is not set; start the session through `fleet-launch run`")]
    Missing(&'static str),
    /// A variable is set to something invalid.
    #[error("{var} is invalid: {detail}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// What was wrong.
        detail: String,
    },
}

/// The instance environment of one launch.
#[derive(Debug, Clone)]
pub struct InstanceEnv {
    /// `GITEA_MCP_CLIENT`.
    pub client_type: ClientType,
    /// `GITEA_MCP_CLIENT_INSTANCE`.
    pub instance: InstanceRef,
    /// `GITEA_MCP_INSTANCE_PROVENANCE`.
    pub provenance: Option<String>,
    /// `GITEA_MCP_CLIENT_SESSION`.
    pub session_id: Option<SessionId>,
    /// `GITEA_MCP_FLEET_RUN_ID`.
    pub fleet_run_id: Option<FleetRunId>,
    /// `GITEA_MCP_PROFILE`.
    pub profile: Option<Profile>,
}

fn optional<T>(
    lookup: &dyn Fn(&str) -> Option<String>,
    var: &'static str,
    make: fn(String) -> Result<T, IdentityError>,
) -> Result<Option<T>, EnvError> {
    lookup(var)
        .filter(|v| !v.is_empty())
        .map(|v| make(v).map_err(|e| EnvError::Invalid { var, detail: e.to_string() }))
        .transpose()
}

impl InstanceEnv {
    /// Reads the environment through `lookup` (the process environment in binaries, a
    /// map in tests). A malformed or missing instance ID is refused; a legacy placeholder
    /// is accepted, so the snapshot can report it.
    pub fn read(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, EnvError> {
        let client_type =
            optional(lookup, vars::CLIENT, ClientType::new)?.ok_or(EnvError::Missing(vars::CLIENT))?;
        let instance = match InstanceClaim::read(lookup(vars::CLIENT_INSTANCE).as_deref()) {
            InstanceClaim::Missing => return Err(EnvError::Missing(vars::CLIENT_INSTANCE)),
            InstanceClaim::Malformed(raw) => {
                let detail = ClientInstanceId::parse(&raw).err().map(|e| e.to_string()).unwrap_or_default();
                return Err(EnvError::Invalid { var: vars::CLIENT_INSTANCE, detail });
            }
            InstanceClaim::Legacy(p) => InstanceRef::Legacy(p),
            InstanceClaim::WellFormed(id) => {
                if id.client_type() != &client_type {
                    return Err(EnvError::Invalid {
                        var: vars::CLIENT_INSTANCE,
                        detail: format!(
                            "{id} was minted for client {}, but {} is {client_type}",
                            id.client_type(),
                            vars::CLIENT
                        ),
                    });
                }
                InstanceRef::Minted(id)
            }
        };
        Ok(Self {
            client_type,
            instance,
            provenance: lookup(vars::INSTANCE_PROVENANCE).filter(|v| !v.is_empty()),
            session_id: optional(lookup, vars::CLIENT_SESSION, SessionId::new)?,
            fleet_run_id: optional(lookup, vars::FLEET_RUN_ID, FleetRunId::new)?,
            profile: optional(lookup, vars::PROFILE, Profile::new)?,
        })
    }

    /// Reads the current process's environment.
    pub fn from_process() -> Result<Self, EnvError> {
        Self::read(&|name| std::env::var(name).ok())
    }

    /// The variables to hand to a worker, in a fixed order. The profile is left to each
    /// entry, since each namespace runs its own.
    pub fn to_vars(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (vars::CLIENT, self.client_type.to_string()),
            (vars::CLIENT_INSTANCE, self.instance.as_str().to_owned()),
            (
                vars::INSTANCE_PROVENANCE,
                self.provenance.clone().unwrap_or_else(|| PROVENANCE_TRUSTED_LAUNCHER.into()),
            ),
        ];
        if let Some(s) = &self.session_id {
            out.push((vars::CLIENT_SESSION, s.to_string()));
        }
        if let Some(f) = &self.fleet_run_id {
            out.push((vars::FLEET_RUN_ID, f.to_string()));
        }
        out.push((vars::CLIENT_MANAGED, "1".into()));
        if let Some(p) = &self.profile {
            out.push((vars::PROFILE, p.to_string()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<InstanceEnv, EnvError> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        InstanceEnv::read(&|k| map.get(k).cloned())
    }

    #[test]
    fn each_refusal_names_its_variable() {
        let ok_id = "inst-codex-20260730T120000Z-abc123def456";
        let err = read(&[(vars::CLIENT_INSTANCE, ok_id)]).unwrap_err().to_string();
        assert!(err.starts_with("GITEA_MCP_CLIENT is not set"), "{err}");
        let err = read(&[(vars::CLIENT, "codex")]).unwrap_err().to_string();
        assert!(err.starts_with("GITEA_MCP_CLIENT_INSTANCE is not set"), "{err}");
        let err = read(&[(vars::CLIENT, "codex"), (vars::CLIENT_INSTANCE, "inst-codex-bogus")])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("GITEA_MCP_CLIENT_INSTANCE is invalid"), "{err}");
        let err = read(&[(vars::CLIENT, "gemini"), (vars::CLIENT_INSTANCE, ok_id)]).unwrap_err().to_string();
        assert!(err.contains("minted for client codex"), "{err}");
        let err =
            read(&[(vars::CLIENT, "codex"), (vars::CLIENT_INSTANCE, ok_id), (vars::CLIENT_SESSION, "a b")])
                .unwrap_err()
                .to_string();
        assert!(err.starts_with("GITEA_MCP_CLIENT_SESSION is invalid"), "{err}");
    }

    #[test]
    fn a_legacy_placeholder_is_read_as_legacy() {
        let env = read(&[(vars::CLIENT, "codex"), (vars::CLIENT_INSTANCE, "legacy-pid-77")]).unwrap();
        assert!(matches!(env.instance, InstanceRef::Legacy(_)));
    }
}
