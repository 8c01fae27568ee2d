//! Findings: what the snapshot found, with the workers and the evidence behind it.

use fleet_identity::{Namespace, WorkerIdentity};
use serde::Serialize;

fleet_identity::outward_codes! {
    /// Every class of finding. All but `historical_dead` are active blockers: any one of
    /// them makes `live_fleet_safe` false. The exact rule for each is in
    /// `docs/SNAPSHOT.md`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    #[non_exhaustive]
    pub enum FindingCode ("finding code") {
        /// An instance (or one of its namespaces) on the manifest has no live worker.
        MissingExpected = "missing_expected",
        /// A live instance is not on the manifest.
        Unmanifested = "unmanifested",
        /// More than one live worker for one `(client_instance_id, namespace)`.
        DuplicateNamespaceWorker = "duplicate_namespace_worker",
        /// Live workers of one `client_instance_id` disagree on who launched them.
        ClientInstanceCollision = "client_instance_collision",
        /// One `worker_identity` on more than one row.
        ReusedWorkerIdentity = "reused_worker_identity",
        /// One `session_id` on active workers of different instances.
        ReusedSessionIdentity = "reused_session_identity",
        /// One `generation_id` on more than one active worker.
        ReusedGenerationIdentity = "reused_generation_identity",
        /// One process (host, boot, pid, start time) behind more than one active worker.
        ReusedProcessIdentity = "reused_process_identity",
        /// One pid number (host, boot, pid) on active workers with different start times.
        ReusedPid = "reused_pid",
        /// One fencing epoch in one slot on two rows, or one token on two active workers.
        ReusedFencingIdentity = "reused_fencing_identity",
        /// An active worker whose ownership is `orphaned`.
        OrphanedWorker = "orphaned_worker",
        /// An active worker whose ownership is `unowned`.
        UnownedWorker = "unowned_worker",
        /// An active worker whose client type is missing or contradicts its instance ID.
        UnknownClient = "unknown_client",
        /// An active worker bound to another repository than the canonical one.
        ForeignRepository = "foreign_repository",
        /// An active worker running another code revision than the expected one.
        OldRevision = "old_revision",
        /// An active worker whose heartbeat expired, or whose process is proved gone.
        StaleWorker = "stale_worker",
        /// An active worker without a trusted-format instance ID or without process evidence.
        LegacyIncompleteIdentity = "legacy_incomplete_identity",
        /// A well-formed instance ID the launcher's ledger does not hold.
        UnmintedInstanceId = "unminted_instance_id",
        /// Released, superseded or retired rows: history, never a blocker.
        HistoricalDead = "historical_dead",
    }
}

impl FindingCode {
    /// Whether the finding makes the live fleet unsafe.
    pub fn is_active_blocker(self) -> bool {
        self != FindingCode::HistoricalDead
    }

    /// Whether the finding is one identity reused across workers (worker, session,
    /// generation, process, pid or fencing identity).
    pub fn is_reused_identity(self) -> bool {
        matches!(
            self,
            FindingCode::ReusedWorkerIdentity
                | FindingCode::ReusedSessionIdentity
                | FindingCode::ReusedGenerationIdentity
                | FindingCode::ReusedProcessIdentity
                | FindingCode::ReusedPid
                | FindingCode::ReusedFencingIdentity
        )
    }
}

/// A finding's evidence: JSON values by field name, in name order, serialised as one
/// object.
///
/// A finding holds a few pieces of evidence. Kept in a list they cost one allocation;
/// a B-tree map spent a node of some 540 bytes on every finding, most of a large
/// fleet's findings memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence(Vec<(&'static str, serde_json::Value)>);

impl Evidence {
    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&serde_json::Value> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Every key with its value, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &serde_json::Value)> + '_ {
        self.0.iter().map(|(k, v)| (*k, v))
    }

    /// How many pieces of evidence there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sets `key` to `value`, in its place by name.
    fn insert(&mut self, key: &'static str, value: serde_json::Value) {
        match self.0.binary_search_by(|(k, _)| (*k).cmp(key)) {
            Ok(at) => self.0[at].1 = value,
            Err(at) => self.0.insert(at, (key, value)),
        }
    }
}

/// The value under a key, or `null` when there is none (as indexing a JSON object does).
impl std::ops::Index<&str> for Evidence {
    type Output = serde_json::Value;

    fn index(&self, key: &str) -> &serde_json::Value {
        static NULL: serde_json::Value = serde_json::Value::Null;
        self.get(key).unwrap_or(&NULL)
    }
}

impl Serialize for Evidence {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Finding {
    /// What was found.
    pub code: FindingCode,
    /// Whether it makes the live fleet unsafe.
    pub active_blocker: bool,
    /// The instance it concerns, as the rows spell it (`null` for rows without one).
    pub client_instance_id: Option<String>,
    /// The namespace it concerns, when it concerns one.
    pub namespace: Option<Namespace>,
    /// The workers involved, sorted.
    pub worker_identities: Vec<WorkerIdentity>,
    /// The evidence that triggered it, keyed by field name.
    pub evidence: Evidence,
    /// One sentence for a person.
    pub detail: String,
}

impl Finding {
    pub(crate) fn new(code: FindingCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            active_blocker: code.is_active_blocker(),
            client_instance_id: None,
            namespace: None,
            worker_identities: Vec::new(),
            evidence: Evidence::default(),
            detail: detail.into(),
        }
    }

    pub(crate) fn instance(mut self, id: Option<&str>) -> Self {
        self.client_instance_id = id.map(str::to_owned);
        self
    }

    pub(crate) fn namespace(mut self, ns: Namespace) -> Self {
        self.namespace = Some(ns);
        self
    }

    pub(crate) fn workers<'a>(mut self, ids: impl IntoIterator<Item = &'a WorkerIdentity>) -> Self {
        let mut ids: Vec<WorkerIdentity> = ids.into_iter().cloned().collect();
        ids.sort();
        ids.dedup();
        self.worker_identities = ids;
        self
    }

    pub(crate) fn evidence(self, key: &'static str, value: impl Serialize) -> Self {
        self.evidence_value(key, serde_json::to_value(value).unwrap_or(serde_json::Value::Null))
    }

    /// [`Finding::evidence`] already in JSON form.
    pub(crate) fn evidence_value(mut self, key: &'static str, value: serde_json::Value) -> Self {
        self.evidence.insert(key, value);
        self
    }

    pub(crate) fn sort_key(
        &self,
    ) -> (FindingCode, &Option<String>, Option<Namespace>, &[WorkerIdentity], &str) {
        (self.code, &self.client_instance_id, self.namespace, &self.worker_identities, &self.detail)
    }
}

#[cfg(test)]
mod tests {
    use super::{Finding, FindingCode};

    /// Evidence serialises as an object in key order whatever the order it was given
    /// in, a key given twice keeps its last value, and an absent key reads as null.
    #[test]
    fn evidence_is_one_object_in_key_order() {
        let f = Finding::new(FindingCode::StaleWorker, "x")
            .evidence("pid", 7)
            .evidence("expires_at", "then")
            .evidence("liveness", "gone")
            .evidence("pid", 8);
        assert_eq!(
            serde_json::to_string(&f.evidence).unwrap(),
            r#"{"expires_at":"then","liveness":"gone","pid":8}"#
        );
        assert_eq!(f.evidence.len(), 3);
        assert_eq!(f.evidence["pid"], 8);
        assert!(f.evidence["absent"].is_null());
        assert_eq!(f.evidence.get("absent"), None);
    }
}
