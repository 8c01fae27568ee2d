//! The stable tokens: `registry_fingerprint` over every row, `candidate_fingerprint` over
//! the selected candidates. Unlike the snapshot's consistency token they hold no time, so
//! a plan/apply cycle of any length can compare them.

use fleet_model::WorkerRow;
use serde::Serialize;

/// Every column that retirement reads. Excluded on purpose: `token_fingerprint`
/// (credential-adjacent), the four `*_revision` columns (revision drift is a separate
/// concern) and the `retired_*` bookkeeping columns.
///
/// `pid_namespace` comes last and only when the row records it, so rows written before it
/// was recorded keep the tokens they always had.
pub const FINGERPRINT_FIELDS: [&str; 21] = [
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
    "pid_namespace",
];

fn push_text(out: &mut String, value: Option<&str>) {
    match value {
        None => out.push_str("null"),
        // Identities rarely need escaping; when one does, JSON's escaping is used.
        // JSON escapes only these bytes (serde_json leaves DEL and C1 controls as they are).
        Some(v) if v.bytes().all(|b| b != b'"' && b != b'\\' && b >= 0x20) => {
            out.push('"');
            out.push_str(v);
            out.push('"');
        }
        Some(v) => out.push_str(&serde_json::Value::from(v).to_string()),
    }
}

fn push_number(out: &mut String, value: Option<u64>) {
    use std::fmt::Write;
    match value {
        None => out.push_str("null"),
        Some(n) => {
            let _ = write!(out, "{n}");
        }
    }
}

/// The canonical text of one row: a JSON array of the fingerprinted fields in
/// [`FINGERPRINT_FIELDS`] order. Numbers are integers whatever their stored form (a TTL
/// read back as 900.0 is the integer 900 by the time it is a row), times are the
/// registry's canonical RFC 3339 form.
pub fn canonical_row(row: &WorkerRow) -> String {
    let mut out = String::with_capacity(640);
    write_canonical_row(row, &mut out);
    out
}

/// Appends [`canonical_row`]'s text to `out`.
fn write_canonical_row(row: &WorkerRow, out: &mut String) {
    out.push('[');
    let texts_before_pid: [Option<&str>; 11] = [
        Some(row.worker_identity.as_str()),
        row.client_type.as_ref().map(|v| v.as_str()),
        row.client_instance_id.as_deref(),
        row.instance_provenance.as_deref(),
        row.fleet_run_id.as_ref().map(|v| v.as_str()),
        Some(row.namespace.as_str()),
        row.profile.as_ref().map(|v| v.as_str()),
        row.session_id.as_ref().map(|v| v.as_str()),
        row.generation_id.as_ref().map(|v| v.as_str()),
        row.host_id.as_ref().map(|v| v.as_str()),
        row.boot_id.as_ref().map(|v| v.as_str()),
    ];
    for v in texts_before_pid {
        push_text(out, v);
        out.push(',');
    }
    push_number(out, row.pid.map(|p| u64::from(p.get())));
    out.push(',');
    push_number(out, row.process_start_time.map(|t| t.ticks()));
    out.push(',');
    push_text(out, row.repository.as_ref().map(|v| v.as_str()));
    out.push(',');
    push_text(out, Some(row.status.as_str()));
    out.push(',');
    push_text(out, row.ownership_state.map(|o| o.as_str()));
    out.push(',');
    // A parsed time is canonical as its instant: milliseconds since the epoch.
    push_number(out, u64::try_from(row.registered_at.unix_millis()).ok());
    out.push(',');
    push_text(out, row.last_heartbeat_at.as_deref());
    out.push(',');
    push_number(out, row.heartbeat_ttl_s.map(u64::from));
    out.push(',');
    push_number(out, row.fencing_epoch);
    if let Some(ns) = row.pid_namespace {
        out.push(',');
        push_number(out, Some(ns.inode()));
    }
    out.push(']');
}

/// The hash of each row's canonical text, in the order given; one text buffer serves
/// every row.
pub(crate) fn row_hashes<'a>(rows: impl Iterator<Item = &'a WorkerRow>) -> Vec<[u8; 32]> {
    let mut text = String::with_capacity(640);
    rows.map(|row| {
        text.clear();
        write_canonical_row(row, &mut text);
        *blake3::hash(text.as_bytes()).as_bytes()
    })
    .collect()
}

/// Sorts the row hashes (so row order never matters) and hashes the sorted list.
/// Sorting 32-byte hashes is cheaper than sorting the texts.
pub(crate) fn digest(mut hashes: Vec<[u8; 32]>) -> Fingerprint {
    hashes.sort_unstable();
    let mut hasher = blake3::Hasher::new();
    hasher.update(hashes.as_flattened());
    Fingerprint(format!("b3:{}", hasher.finalize().to_hex()))
}

/// The token over every row's retirement-relevant content, independent of row order.
pub fn registry_fingerprint(rows: &[WorkerRow]) -> RegistryFingerprint {
    RegistryFingerprint(digest(row_hashes(rows.iter())))
}

/// The token over the candidate rows.
pub fn candidate_fingerprint<'a>(candidates: impl Iterator<Item = &'a WorkerRow>) -> CandidateFingerprint {
    CandidateFingerprint(digest(row_hashes(candidates)))
}

/// A token this crate makes: `b3:` and 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub(crate) struct Fingerprint(String);

/// Text handed in as a fingerprint that no plan made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAFingerprint;

impl std::fmt::Display for NotAFingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a fingerprint the plan returned (b3: and 64 hex digits)")
    }
}

impl std::error::Error for NotAFingerprint {}

impl std::str::FromStr for Fingerprint {
    type Err = NotAFingerprint;

    fn from_str(text: &str) -> Result<Self, NotAFingerprint> {
        if is_fingerprint(text) { Ok(Self(text.to_owned())) } else { Err(NotAFingerprint) }
    }
}

/// The two tokens of a plan, each its own type so one cannot be handed where the other
/// is meant. Each parses only the shape a plan makes, prints as that text and
/// serializes as a JSON string.
macro_rules! fingerprint_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(Fingerprint);

        impl $name {
            pub(crate) fn from_digest(digest: Fingerprint) -> Self {
                Self(digest)
            }

            /// The token's text.
            pub fn as_str(&self) -> &str {
                &self.0 .0
            }
        }

        impl std::str::FromStr for $name {
            type Err = NotAFingerprint;

            fn from_str(text: &str) -> Result<Self, NotAFingerprint> {
                text.parse().map(Self)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }
    };
}

fingerprint_type!(
    /// The stable token over every row of the registry (seed 004's `registry_fingerprint`).
    RegistryFingerprint
);

fingerprint_type!(
    /// The stable token over a plan's candidates (seed 004's `candidate_fingerprint`).
    CandidateFingerprint
);

/// Whether `text` is shaped like a token this crate makes: `b3:` and 64 lowercase hex
/// digits. Anything else handed to an apply is bad input, not a moved registry.
fn is_fingerprint(text: &str) -> bool {
    text.strip_prefix("b3:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}
