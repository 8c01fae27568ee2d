//! The operator-approved fleet manifest: the instances expected to be live.

use fleet_identity::{ClientInstanceId, ClientType, FleetRunId, Namespace};
use serde::{Deserialize, Serialize};

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
#[error("manifest {0}")]
pub struct ManifestError(String);

/// One expected instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestInstance {
    /// The client type the instance runs.
    pub client_type: ClientType,
    /// The instance ID the launcher minted.
    pub client_instance_id: ClientInstanceId,
    /// The approved cohort.
    #[serde(default)]
    pub fleet_run_id: Option<FleetRunId>,
    /// The namespaces expected live (default: all five).
    #[serde(default = "all_namespaces")]
    pub namespaces: Vec<Namespace>,
}

fn all_namespaces() -> Vec<Namespace> {
    Namespace::ALL.to_vec()
}

/// The approved manifest: `{"instances": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The expected instances.
    pub instances: Vec<ManifestInstance>,
    /// The code revision every live worker should run; others are `old_revision`.
    #[serde(default)]
    pub code_revision: Option<String>,
}

impl Manifest {
    /// Parses and checks a manifest: valid JSON, known namespaces, and no instance listed
    /// twice. Errors name the field at fault.
    pub fn from_json(text: &str) -> Result<Self, ManifestError> {
        let value = serde_json::from_str(text).map_err(|e| ManifestError(format!("is not valid: {e}")))?;
        Self::from_value(value)
    }

    /// [`Manifest::from_json`] of JSON already parsed (a file read as it streams in).
    pub fn from_value(value: serde_json::Value) -> Result<Self, ManifestError> {
        let manifest: Manifest =
            serde_json::from_value(value).map_err(|e| ManifestError(format!("is not valid: {e}")))?;
        let mut seen = std::collections::BTreeSet::new();
        for (i, instance) in manifest.instances.iter().enumerate() {
            if !seen.insert(&instance.client_instance_id) {
                return Err(ManifestError(format!(
                    "lists instance {} twice (instances[{i}])",
                    instance.client_instance_id
                )));
            }
            if instance.client_instance_id.client_type() != &instance.client_type {
                return Err(ManifestError(format!(
                    "instances[{i}]: {} was minted for client {}, not {}",
                    instance.client_instance_id,
                    instance.client_instance_id.client_type(),
                    instance.client_type
                )));
            }
        }
        Ok(manifest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_example_parses() {
        let text = r#"{"instances": [
            {"client_type": "codex", "client_instance_id": "inst-codex-20260730T120000Z-abc123def456",
             "fleet_run_id": "canary-963-2026-07-30",
             "namespaces": ["author", "reviewer", "merger", "controller", "reconciler"]}]}"#;
        let m = Manifest::from_json(text).unwrap();
        assert_eq!(m.instances[0].namespaces.len(), 5);
    }

    #[test]
    fn an_unknown_namespace_is_named() {
        let text = r#"{"instances": [{"client_type": "codex",
            "client_instance_id": "inst-codex-20260730T120000Z-abc123def456", "namespaces": ["planner"]}]}"#;
        let err = Manifest::from_json(text).unwrap_err().to_string();
        assert!(err.contains("planner"), "{err}");
    }

    #[test]
    fn invalid_json_and_duplicates_are_refused() {
        assert!(Manifest::from_json("{").unwrap_err().to_string().starts_with("manifest is not valid"));
        let one =
            r#"{"client_type": "codex", "client_instance_id": "inst-codex-20260730T120000Z-abc123def456"}"#;
        let twice = format!(r#"{{"instances": [{one}, {one}]}}"#);
        assert!(Manifest::from_json(&twice).unwrap_err().to_string().contains("twice"));
    }
}
