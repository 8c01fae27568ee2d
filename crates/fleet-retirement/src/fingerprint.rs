//! The stable tokens: `registry_fingerprint` over every row, `candidate_fingerprint` over
//! the selected candidates. Unlike the snapshot's consistency token they hold no time, so
//! a plan/apply cycle of any length can compare them.

use fleet_registry::WorkerRow;
use serde_json::Value;

/// Every column that retirement reads. Excluded on purpose: `token_fingerprint`
/// (credential-adjacent), the four `*_revision` columns (revision drift is a separate
/// concern) and the `retired_*` bookkeeping columns.
pub const FINGERPRINT_FIELDS: [&str; 20] = [
    "worker_identity",
    "client_type",
    "client_instance_id",
    "instance_provenance",
    "fleet_run_id",
    "namespace",
    "profile",
    "session_id",
    "generation_id",
    "host_id",
    "boot_id",
    "pid",
    "process_start_time",
    "repository",
    "status",
    "ownership_state",
    "registered_at",
    "last_heartbeat_at",
    "heartbeat_ttl_s",
    "fencing_epoch",
];

/// Numbers canonicalised: an integral float (a TTL that round-tripped as 900.0) becomes
/// the integer 900.
fn canonical(value: Value) -> Value {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
                #[allow(clippy::cast_possible_truncation)]
                let i = f as i64;
                Value::from(i)
            }
            _ => Value::Number(n),
        },
        other => other,
    }
}

/// The canonical text of one row: the fingerprinted fields in fixed order.
pub fn canonical_row(row: &WorkerRow) -> String {
    let full = serde_json::to_value(row).unwrap_or(Value::Null);
    let fields: Vec<Value> =
        FINGERPRINT_FIELDS.iter().map(|f| canonical(full.get(*f).cloned().unwrap_or(Value::Null))).collect();
    Value::Array(fields).to_string()
}

fn digest<'a>(rows: impl Iterator<Item = &'a WorkerRow>) -> String {
    let mut lines: Vec<String> = rows.map(canonical_row).collect();
    lines.sort_unstable();
    let mut hasher = blake3::Hasher::new();
    for line in &lines {
        hasher.update(&(line.len() as u64).to_le_bytes());
        hasher.update(line.as_bytes());
    }
    format!("b3:{}", hasher.finalize().to_hex())
}

/// The token over every row's retirement-relevant content, independent of row order.
pub fn registry_fingerprint(rows: &[WorkerRow]) -> String {
    digest(rows.iter())
}

/// The token over the candidate rows.
pub fn candidate_fingerprint<'a>(candidates: impl Iterator<Item = &'a WorkerRow>) -> String {
    digest(candidates)
}
