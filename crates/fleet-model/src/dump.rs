//! The JSON dump that export writes and import reads: the ledger and every worker row,
//! keyed by table name, each bad row named by its table and index.

use serde::{Deserialize, Serialize};

use crate::rows::{InstanceRecord, WorkerRow};

/// The whole registry as JSON: the ledger and every worker row, keyed by table name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryDump {
    /// The launcher's ledger.
    #[serde(default)]
    pub instances: Vec<InstanceRecord>,
    /// Every worker registration.
    #[serde(default)]
    pub worker_registrations: Vec<WorkerRow>,
}

/// Why a dump could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DumpError(String);

impl DumpError {
    /// An error that says `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// Every table `fleetctl registry export` writes. A dump holds the first two; the others
/// (the leases, their audit log, the fencing high-water marks) are the registry's, read
/// past here and read by `fleet_retirement::Export` (the leases) and a restore.
pub const EXPORT_TABLES: [&str; 5] =
    ["instances", "worker_registrations", "leases", "lease_audit_log", "fencing_high_water"];

impl RegistryDump {
    /// Reads a dump: either the object export writes (every table of it; those past the
    /// ledger and the worker rows are read past), or a bare array of worker rows.
    pub fn from_json(text: &str) -> Result<Self, DumpError> {
        let value = serde_json::from_str(text).map_err(|e| DumpError(format!("not valid JSON: {e}")))?;
        Self::from_value(value)
    }

    /// [`RegistryDump::from_json`] of JSON already parsed (a file read as it streams in).
    pub fn from_value(value: serde_json::Value) -> Result<Self, DumpError> {
        let dump = if value.is_array() {
            let rows = serde_json::from_value(value).map_err(|e| DumpError(format!("worker row: {e}")))?;
            RegistryDump { instances: Vec::new(), worker_registrations: rows }
        } else {
            Self::from_object(value)?
        };
        for (i, record) in dump.instances.iter().enumerate() {
            record.check().map_err(|e| DumpError(format!("instances[{i}]: {e}")))?;
        }
        Ok(dump)
    }

    fn from_object(value: serde_json::Value) -> Result<Self, DumpError> {
        let serde_json::Value::Object(mut map) = value else {
            return Err(DumpError(
                "expected an object with instances and worker_registrations, or an array of rows".into(),
            ));
        };
        if let Some(key) = map.keys().find(|k| !EXPORT_TABLES.contains(&k.as_str())) {
            return Err(DumpError(format!("unknown table {key:?}")));
        }
        let mut dump = RegistryDump::default();
        if let Some(instances) = map.remove("instances") {
            dump.instances = numbered(instances, "instances")?;
        }
        if let Some(workers) = map.remove("worker_registrations") {
            dump.worker_registrations = numbered(workers, "worker_registrations")?;
        }
        Ok(dump)
    }

    /// The dump as pretty JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain data to a string cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// Deserialises an array of rows of `table`, naming the index of the first bad row (a
/// dump's reader, and a backup's for its other tables).
pub fn numbered<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
    table: &str,
) -> Result<Vec<T>, DumpError> {
    let serde_json::Value::Array(items) = value else {
        return Err(DumpError(format!("{table} is not an array")));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| serde_json::from_value(item).map_err(|e| DumpError(format!("{table}[{i}]: {e}"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_row_is_named_by_table_and_index() {
        let text = r#"{"worker_registrations":[
            {"worker_identity":"w1","namespace":"author","status":"active","registered_at":"2026-07-30T12:00:00Z"},
            {"worker_identity":"w2","namespace":"planner","status":"active","registered_at":"2026-07-30T12:00:00Z"}]}"#;
        let err = RegistryDump::from_json(text).unwrap_err().to_string();
        assert!(err.starts_with("worker_registrations[1]:"), "{err}");
        assert!(err.contains("planner"), "{err}");
    }

    #[test]
    fn unknown_columns_and_tables_are_refused_and_the_export_read_whole() {
        let col = r#"[{"worker_identity":"w1","namespace":"author","status":"active","registered_at":"2026-07-30T12:00:00Z","colour":"red"}]"#;
        assert!(RegistryDump::from_json(col).unwrap_err().to_string().contains("colour"));
        assert!(RegistryDump::from_json(r#"{"colours":[]}"#).unwrap_err().to_string().contains("colours"));
        // The export's other tables are the registry's: read past, not refused.
        let export = r#"{"instances":[],"worker_registrations":[],"leases":[],"lease_audit_log":[],"fencing_high_water":[]}"#;
        assert_eq!(RegistryDump::from_json(export).unwrap(), RegistryDump::default());
        assert!(RegistryDump::from_json("{").unwrap_err().to_string().starts_with("not valid JSON"));
    }

    #[test]
    fn a_ledger_entry_whose_client_type_contradicts_its_id_is_refused() {
        let text = r#"{"instances":[{"client_instance_id":"inst-codex-20260730T120000Z-abc123def456",
            "client_type":"gemini","minted_at":"2026-07-30T12:00:00Z"}]}"#;
        let err = RegistryDump::from_json(text).unwrap_err().to_string();
        assert!(err.starts_with("instances[0]:") && err.contains("minted for codex"), "{err}");
        assert!(RegistryDump::from_json(&text.replace("gemini", "codex")).is_ok());
    }
}
