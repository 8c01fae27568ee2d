//! The whole registry as one JSON document, for backup and restore: the ledger, the
//! worker rows, the leases (initialization versions, connector bindings, workflow
//! leases) and the lease audit log. A restore from it loses nothing the registry knew.

use fleet_lease::LeaseRecord;
use fleet_model::{DumpError, RegistryDump, numbered};
use serde::Serialize;

use crate::leases::AuditEntry;

/// Every table of a registry.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RegistryBackup {
    /// The ledger and the worker rows (what [`RegistryDump`] holds).
    #[serde(flatten)]
    pub registry: RegistryDump,
    /// Every lease row.
    pub leases: Vec<LeaseRecord>,
    /// The lease audit log, in order.
    pub lease_audit_log: Vec<AuditEntry>,
}

impl RegistryBackup {
    /// Reads a backup, or anything [`RegistryDump::from_json`] reads (an older export
    /// without leases, a bare array of worker rows): the missing tables are empty.
    pub fn from_json(text: &str) -> Result<Self, DumpError> {
        let value = serde_json::from_str(text).map_err(|e| DumpError::new(format!("not valid JSON: {e}")))?;
        Self::from_value(value)
    }

    /// [`RegistryBackup::from_json`] of JSON already parsed (a file read as it streams in).
    pub fn from_value(value: serde_json::Value) -> Result<Self, DumpError> {
        let serde_json::Value::Object(mut map) = value else {
            return Ok(Self { registry: RegistryDump::from_value(value)?, ..Self::default() });
        };
        let table = |map: &mut serde_json::Map<String, serde_json::Value>, key: &str| {
            map.remove(key).unwrap_or_else(|| serde_json::Value::Array(Vec::new()))
        };
        let leases: Vec<LeaseRecord> = numbered(table(&mut map, "leases"), "leases")?;
        let lease_audit_log: Vec<AuditEntry> =
            numbered(table(&mut map, "lease_audit_log"), "lease_audit_log")?;
        for (i, lease) in leases.iter().enumerate() {
            lease.check().map_err(|e| DumpError::new(format!("leases[{i}]: {e}")))?;
        }
        for (i, entry) in lease_audit_log.iter().enumerate() {
            entry.check().map_err(|e| DumpError::new(format!("lease_audit_log[{i}]: {e}")))?;
        }
        let registry = RegistryDump::from_value(serde_json::Value::Object(map))?;
        Ok(Self { registry, leases, lease_audit_log })
    }

    /// The backup as pretty JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain data to a string cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}
