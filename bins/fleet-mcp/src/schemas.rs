//! The output schema each tool declares: the fields its `structuredContent` carries, with
//! their JSON types. Clients validate every result against these — the TypeScript SDK
//! validates a refusal's too — so each schema is the union of the tool's success (every
//! field named here present) and the refusal body every tool shares
//! (`{"error": CODE, "detail": {…}}`).

use std::sync::Arc;

use rmcp::model::JsonObject;
use serde_json::{Value, json};

/// An object schema: either these properties of these types, all present, or the
/// refusal body.
fn object(fields: &[(&str, &str)]) -> Arc<JsonObject> {
    with_optional(fields, &[])
}

/// [`object`] with `optional` fields too: typed when present, never required.
fn with_optional(fields: &[(&str, &str)], optional: &[(&str, &str)]) -> Arc<JsonObject> {
    let mut properties: serde_json::Map<String, Value> =
        fields.iter().chain(optional).map(|(name, ty)| ((*name).to_owned(), json!({ "type": ty }))).collect();
    properties.insert("error".into(), json!({ "type": "string" }));
    properties.insert("detail".into(), json!({ "type": "object" }));
    let required: Vec<&str> = fields.iter().map(|(name, _)| *name).collect();
    let schema = json!({
        "type": "object",
        "properties": properties,
        "anyOf": [{ "required": required }, { "required": ["error", "detail"] }],
    });
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::default(),
    }
}

/// An input schema as every client reads it: schemars' integer formats (`uint64`, …)
/// are unknown to JSON Schema and to ajv's strict mode, and a `"default": null` on a
/// property whose type is not null contradicts it; both go, recursively. The ranges
/// the formats stood for are stated with `minimum`/`maximum` on the fields.
pub(crate) fn plain_input(schema: &JsonObject) -> JsonObject {
    fn clean(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.remove("format");
                if map.get("default") == Some(&Value::Null) {
                    map.remove("default");
                }
                map.values_mut().for_each(clean);
            }
            Value::Array(items) => items.iter_mut().for_each(clean),
            _ => {}
        }
    }
    let mut value = Value::Object(schema.clone());
    clean(&mut value);
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// `gitea_snapshot_instance_fleet`.
pub(crate) fn snapshot() -> Arc<JsonObject> {
    with_optional(
        &[
            ("snapshot_at", "string"),
            ("consistency_token", "string"),
            ("registry_revision", "string"),
            ("live_fleet_safe", "boolean"),
            ("manifest_supplied", "boolean"),
            ("counts", "object"),
            ("instances", "array"),
            ("workers", "array"),
            ("findings", "array"),
        ],
        &[("page", "object"), ("heartbeat_comparison", "object")],
    )
}

/// `gitea_plan_stale_worker_retirement`.
pub(crate) fn plan() -> Arc<JsonObject> {
    with_optional(
        &[
            ("outcome", "string"),
            ("registry_fingerprint", "string"),
            ("candidate_fingerprint", "string"),
            ("candidate_worker_identities", "array"),
            ("candidates", "array"),
            ("preserved", "array"),
            ("preserved_reason_counts", "object"),
            ("assessed_count", "integer"),
            ("candidate_count", "integer"),
            ("preserved_count", "integer"),
            ("protected_active_workflow_owners", "array"),
            ("canonical_repository", "string"),
            ("mutation_performed", "boolean"),
            ("read_only", "boolean"),
        ],
        &[("next_eligible_after", "string"), ("page", "object")],
    )
}

/// `gitea_apply_stale_worker_retirement`.
pub(crate) fn apply() -> Arc<JsonObject> {
    with_optional(
        &[
            ("outcome", "string"),
            ("success", "boolean"),
            ("retired", "array"),
            ("preserved", "array"),
            ("retired_count", "integer"),
            ("mutation_performed", "boolean"),
            ("plan_registry_fingerprint", "string"),
            ("registry_fingerprint", "string"),
            ("registry_moved", "boolean"),
            ("post_apply", "object"),
        ],
        &[("page", "object")],
    )
}

/// `gitea_get_runtime_context`.
pub(crate) fn runtime_context() -> Arc<JsonObject> {
    object(&[
        ("namespace", "string"),
        ("profile", "string"),
        ("registry_available", "boolean"),
        ("pid", "integer"),
        ("tools", "array"),
    ])
}

/// The workflow-lease tools.
pub(crate) fn lease() -> Arc<JsonObject> {
    object(&[("outcome", "string"), ("lease", "object")])
}
