//! The bodies of tool answers: a success, a refusal naming its code and detail, and the
//! digests that stand in the text block for a snapshot or plan too large to repeat.

use super::*;

/// A success: the body as `structuredContent`, and as text for clients that read only
/// the content blocks.
pub(super) fn ok(value: Value) -> CallToolResult {
    CallToolResult::structured(value)
}

/// The longest snapshot JSON a text block repeats in full. Claude Code does not put a
/// tool result over 50,000 characters in the conversation: it saves it to a file and
/// names the file instead (its MCP documentation, "MCP output limits"), so the model
/// would meet a 1k-worker fleet as a path to one 443 KB line. A larger snapshot's text
/// block is a digest (see [`digest`]); the whole snapshot is the structured content.
pub(super) const FULL_TEXT_LIMIT: usize = 50_000;

/// The largest structured answer sent by default: the TypeScript SDK's stdio transport
/// (Claude Code, Gemini CLI, the MCP Inspector) drops any message past 10 MiB
/// (`STDIO_DEFAULT_MAX_BUFFER_SIZE` in its `shared/stdio.js`), and the rest of that
/// line then reaches it as a message that does not parse; 256 KiB are left for the text
/// block and the JSON-RPC envelope around the structured content.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 10 * 1024 * 1024 - 256 * 1024;

/// An answer of `size` bytes, past `limit`: refused, with the ways to a smaller one.
pub(super) fn too_large(size: usize, limit: usize) -> CallToolResult {
    refusal(
        Refusal::AnswerTooLarge,
        json!({
            "message": format!(
                "the answer would be {size} bytes, more than the {limit} this server sends: ask a summary \
                 (the default) and narrow or page it, or read the whole snapshot with `fleetctl snapshot --json`"
            ),
            "size": size,
            "limit": limit,
        }),
    )
}

pub(super) fn internal(e: serde_json::Error) -> CallToolResult {
    refuse(Refusal::InternalError, e)
}

/// The text block of a snapshot too large to repeat: the verdict, the counts and the
/// active blockers that fit within [`FULL_TEXT_LIMIT`] (in report order), with how many
/// instances, workers and findings it leaves to the structured content.
pub(super) fn digest(snap: &FleetSnapshot<'_>) -> Result<String, serde_json::Error> {
    // Room for everything but the findings, whatever the counts.
    let mut room = FULL_TEXT_LIMIT - 2_000;
    let mut shown = Vec::new();
    for finding in snap.findings.iter().filter(|f| f.active_blocker) {
        let len = serde_json::to_string(finding)?.len() + 1;
        if len > room {
            break;
        }
        room -= len;
        shown.push(finding);
    }
    let mut text = crate::pages::verdict(snap);
    text.extend(crate::pages::json_map(json!({
        "active_blockers": shown,
        "omitted": {
            "instances": snap.instances.len(),
            "workers": snap.workers.len(),
            "findings": snap.findings.len() - shown.len(),
        },
        "note": "this text is a digest, bounded for clients that read only text; this result's \
                 structuredContent holds the answer whole, and `fleetctl snapshot --json` prints the whole snapshot",
    })));
    serde_json::to_string(&text)
}

/// The text block of a plan too large to repeat: its fingerprints (all apply needs to
/// retire every candidate), the first candidate identities, its counts, and how many
/// per-row assessments it leaves to the structured content.
pub(super) fn plan_digest(plan: &fleet_retirement::Plan) -> Result<String, serde_json::Error> {
    let shown = usize::try_from(crate::pages::MAX_LIMIT).unwrap_or(usize::MAX);
    serde_json::to_string(&json!({
        "outcome": plan.outcome,
        "registry_fingerprint": plan.registry_fingerprint,
        "candidate_fingerprint": plan.candidate_fingerprint,
        "candidate_worker_identities": plan.candidate_worker_identities.iter().take(shown).collect::<Vec<_>>(),
        "preserved_reason_counts": plan.preserved_reason_counts,
        "assessed_count": plan.assessed_count,
        "candidate_count": plan.candidate_count,
        "preserved_count": plan.preserved_count,
        "protected_active_workflow_owners": plan.protected_active_workflow_owners,
        "next_eligible_after": plan.next_eligible_after,
        "canonical_repository": plan.canonical_repository,
        "mutation_performed": plan.mutation_performed,
        "read_only": plan.read_only,
        "omitted": {
            "candidates": plan.candidates.len(),
            "candidate_worker_identities": plan.candidate_worker_identities.len().saturating_sub(shown),
            "preserved": plan.preserved.len(),
        },
        "note": "this text is a digest for clients that read only text: all that apply needs, without each \
                 row's evidence; the whole plan is this result's structuredContent, and `fleetctl retire plan --json` prints it",
    }))
}

/// The body of every failure: `{"error": CODE, "detail": {...}}`, with `detail` always an
/// object a client can read fields from. Every string in it is cut to [`ECHO_LIMIT`]
/// bytes: a refusal may quote what it was given, never all of it.
pub(super) fn refusal(code: impl Into<RefusalCode>, detail: Value) -> CallToolResult {
    let mut detail = match detail {
        Value::Object(map) => Value::Object(map),
        Value::String(message) => json!({ "message": message }),
        other => json!({ "value": other }),
    };
    clip_strings(&mut detail);
    CallToolResult::structured_error(json!({ "error": code.into(), "detail": detail }))
}

/// The most bytes of one string a refusal repeats.
pub(crate) const ECHO_LIMIT: usize = 512;

/// Cuts every string in `value` (keys too) longer than [`ECHO_LIMIT`] bytes to a prefix
/// that says how long the whole was.
fn clip_strings(value: &mut Value) {
    match value {
        Value::String(text) => clip(text),
        Value::Array(items) => items.iter_mut().for_each(clip_strings),
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (mut key, mut item) in entries {
                clip(&mut key);
                clip_strings(&mut item);
                map.insert(key, item);
            }
        }
        _ => {}
    }
}

fn clip(text: &mut String) {
    if text.len() <= ECHO_LIMIT {
        return;
    }
    let mut end = ECHO_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let whole = text.len();
    text.truncate(end);
    text.push_str(&format!("… ({whole} bytes in all)"));
}

/// An argument the tool cannot use: `invalid_arguments`, naming the argument at fault.
pub(super) fn invalid(field: &str, message: impl std::fmt::Display) -> CallToolResult {
    refusal(Refusal::InvalidArguments, json!({ "field": field, "message": message.to_string() }))
}

/// A failure whose detail is one sentence.
pub(super) fn refuse(code: impl Into<RefusalCode>, detail: impl std::fmt::Display) -> CallToolResult {
    refusal(code, Value::String(detail.to_string()))
}

/// A tool body: a JSON value, or a refusal that becomes `isError: true`.
pub(super) type Outcome = Result<Value, CallToolResult>;

pub(super) fn finish(outcome: Outcome) -> CallToolResult {
    outcome.map(ok).unwrap_or_else(|refusal| refusal)
}
