//! The registry's rows, keyed by the column names of DESIGN.md, the heartbeat rule
//! they are judged by, and the probe of the active ones.

use fleet_identity::{
    BootId, ClientInstanceId, ClientType, FleetRunId, GenerationId, HostId, Namespace, Pid, PidNamespace,
    ProcessStartTime, Profile, Repository, SessionId, Timestamp, WorkerIdentity,
};
use serde::{Deserialize, Deserializer, Serialize};

use crate::heartbeat::{heartbeat_expiry, heartbeat_lapsed};
use crate::process::{LivenessProbe, ProcessIdentity};

fleet_identity::outward_codes! {
    /// Where a registration is in its life.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum WorkerStatus ("worker status") {
        /// The worker registered and has not released.
        Active = "active",
        /// The worker exited cleanly and released its registration.
        Released = "released",
        /// A later process of the same instance and namespace replaced it.
        Superseded = "superseded",
        /// Stale retirement proved its process gone and retired it.
        Retired = "retired",
    }
}

fleet_identity::outward_codes! {
    /// Who owns an active registration.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum OwnershipState ("ownership state") {
        /// Its process heartbeats within the TTL.
        Owned = "owned",
        /// Its heartbeat expired: the sweep marked it stale.
        Stale = "stale",
        /// Its launch is gone but the row says nothing more.
        Orphaned = "orphaned",
        /// No process claims it.
        Unowned = "unowned",
    }
}

/// What a worker's own process says of its ownership when it registers and on every
/// heartbeat; only the sweep writes `stale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Claim {
    /// Its launch's client still runs: the launch owns it.
    Owned,
    /// Its launch's client is gone while the worker still runs.
    Orphaned,
    /// It was started outside any launch (no launch process in its environment).
    Unowned,
}

impl Claim {
    /// The ownership state the row records.
    pub fn state(self) -> OwnershipState {
        match self {
            Self::Owned => OwnershipState::Owned,
            Self::Orphaned => OwnershipState::Orphaned,
            Self::Unowned => OwnershipState::Unowned,
        }
    }

    /// The value as stored.
    pub fn as_str(self) -> &'static str {
        self.state().as_str()
    }
}

/// Reads a TTL written as `900` or as `900.0` (a REAL that round-tripped through SQLite).
fn lenient_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let Some(value) = Option::<f64>::deserialize(d)? else {
        return Ok(None);
    };
    if value.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&value) {
        // The range check above keeps the cast exact.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(Some(value as u32))
    } else {
        Err(serde::de::Error::custom(format!("heartbeat_ttl_s {value} is not a whole number of seconds")))
    }
}

/// Reads a fencing epoch, refusing one no store can keep (above 2^63 − 1) instead of
/// clamping it: a clamped epoch could be handed out twice.
fn storable_epoch<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let Some(value) = Option::<u64>::deserialize(d)? else {
        return Ok(None);
    };
    if i64::try_from(value).is_ok() {
        Ok(Some(value))
    } else {
        Err(serde::de::Error::custom(format!(
            "fencing_epoch {value} is above the largest storable epoch 2^63-1"
        )))
    }
}

/// The columns of `worker_registrations`, in the order every backend stores and reads
/// them (the field names of [`WorkerRow`]).
pub const WORKER_COLUMNS: [&str; 29] = [
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
    "token_fingerprint",
    "code_revision",
    "config_revision",
    "profile_revision",
    "schema_revision",
    "retired_at",
    "retired_by",
    "retirement_reason",
    "pid_namespace",
];

/// One row of `worker_registrations`: one worker process, never deleted.
///
/// Only the key, the namespace, the status and the registration time are required:
/// rows written by older workers may lack the rest, and the snapshot and retirement
/// judge such rows as incomplete rather than refusing to read them. The instance ID and
/// heartbeat are kept as written, because a malformed one is evidence too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerRow {
    /// The row's key, minted at registration.
    pub worker_identity: WorkerIdentity,
    /// The agent client of the worker's launch.
    #[serde(default)]
    pub client_type: Option<ClientType>,
    /// The launch's instance ID, as written (a malformed one is evidence too).
    #[serde(default)]
    pub client_instance_id: Option<String>,
    /// Who vouched for the instance ID (`trusted_launcher`).
    #[serde(default)]
    pub instance_provenance: Option<String>,
    /// The fleet run its launch belongs to.
    #[serde(default)]
    pub fleet_run_id: Option<FleetRunId>,
    /// The namespace the worker serves.
    pub namespace: Namespace,
    /// The worker's profile.
    #[serde(default)]
    pub profile: Option<Profile>,
    /// The client session the launch's workers share.
    #[serde(default)]
    pub session_id: Option<SessionId>,
    /// Minted once per process boot of the worker.
    #[serde(default)]
    pub generation_id: Option<GenerationId>,
    /// The host of the registered process (its machine id).
    #[serde(default)]
    pub host_id: Option<HostId>,
    /// The boot of that host.
    #[serde(default)]
    pub boot_id: Option<BootId>,
    /// The registered process's pid.
    #[serde(default)]
    pub pid: Option<Pid>,
    /// When that process started (clock ticks since boot): which incarnation of the pid.
    #[serde(default)]
    pub process_start_time: Option<ProcessStartTime>,
    /// The repository the worker is bound to.
    #[serde(default)]
    pub repository: Option<Repository>,
    /// `active`, `released`, `superseded` or `retired`.
    pub status: WorkerStatus,
    /// Owned, orphaned, unowned, or stale (only the sweep writes stale).
    #[serde(default)]
    pub ownership_state: Option<OwnershipState>,
    /// When the row was written.
    pub registered_at: Timestamp,
    /// The last heartbeat, as written (an unparsable one is evidence too).
    #[serde(default)]
    pub last_heartbeat_at: Option<String>,
    /// How long a heartbeat vouches for the row, in seconds.
    #[serde(default, deserialize_with = "lenient_seconds")]
    pub heartbeat_ttl_s: Option<u32>,
    /// The slot's fencing epoch at registration: it only rises.
    #[serde(default, deserialize_with = "storable_epoch")]
    pub fencing_epoch: Option<u64>,
    /// The fingerprint of the secret only the registered process holds.
    #[serde(default)]
    pub token_fingerprint: Option<String>,
    /// The code revision the worker runs.
    #[serde(default)]
    pub code_revision: Option<String>,
    /// The configuration revision it was started with.
    #[serde(default)]
    pub config_revision: Option<String>,
    /// Its profile's revision.
    #[serde(default)]
    pub profile_revision: Option<String>,
    /// The registry data model it speaks.
    #[serde(default)]
    pub schema_revision: Option<String>,
    /// When stale retirement retired the row.
    #[serde(default)]
    pub retired_at: Option<Timestamp>,
    /// Who retired it.
    #[serde(default)]
    pub retired_by: Option<String>,
    /// Why (`eligible_stale_orphan`).
    #[serde(default)]
    pub retirement_reason: Option<String>,
    /// The PID namespace of `pid` (the inode of `/proc/<pid>/ns/pid`); rows written
    /// before it was recorded lack it, and a probe cannot judge their pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_namespace: Option<PidNamespace>,
}

impl WorkerRow {
    /// The last heartbeat, when it parses as a time.
    pub fn heartbeat(&self) -> Option<Timestamp> {
        self.last_heartbeat_at.as_deref().and_then(|s| Timestamp::parse(s).ok())
    }

    /// When the heartbeat lapses: the last heartbeat plus the TTL.
    pub fn expires_at(&self) -> Option<Timestamp> {
        Some(heartbeat_expiry(self.heartbeat()?, self.heartbeat_ttl_s?))
    }

    /// The TTL rule: a heartbeat has expired once more than `heartbeat_ttl_s` seconds
    /// have passed since it, or when it claims a time further ahead of `now` than clocks
    /// may drift ([`heartbeat_lapsed`]). A row without a parsable heartbeat or a TTL is
    /// not judged expired here; callers that need proof treat it as incomplete.
    pub fn heartbeat_expired(&self, now: Timestamp) -> bool {
        match (self.heartbeat(), self.heartbeat_ttl_s) {
            (Some(beat), Some(ttl)) => heartbeat_lapsed(beat, ttl, now),
            _ => false,
        }
    }

    /// The process the row records, when every part of its identity is there.
    pub fn process(&self) -> Option<ProcessIdentity> {
        Some(ProcessIdentity {
            host_id: self.host_id.clone()?,
            boot_id: self.boot_id.clone()?,
            pid: self.pid?,
            process_start_time: self.process_start_time?,
            pid_namespace: self.pid_namespace,
        })
    }

    /// Whether `other` is this row with another `last_heartbeat_at` and nothing else
    /// changed: what a heartbeat writes. (Every field is named, so a new one must be
    /// placed on one side or the other.)
    pub fn differs_only_in_heartbeat(&self, other: &WorkerRow) -> bool {
        let WorkerRow {
            worker_identity,
            client_type,
            client_instance_id,
            instance_provenance,
            fleet_run_id,
            namespace,
            profile,
            session_id,
            generation_id,
            host_id,
            boot_id,
            pid,
            process_start_time,
            repository,
            status,
            ownership_state,
            registered_at,
            last_heartbeat_at,
            heartbeat_ttl_s,
            fencing_epoch,
            token_fingerprint,
            code_revision,
            config_revision,
            profile_revision,
            schema_revision,
            retired_at,
            retired_by,
            retirement_reason,
            pid_namespace,
        } = self;
        *last_heartbeat_at != other.last_heartbeat_at
            && *worker_identity == other.worker_identity
            && *client_type == other.client_type
            && *client_instance_id == other.client_instance_id
            && *instance_provenance == other.instance_provenance
            && *fleet_run_id == other.fleet_run_id
            && *namespace == other.namespace
            && *profile == other.profile
            && *session_id == other.session_id
            && *generation_id == other.generation_id
            && *host_id == other.host_id
            && *boot_id == other.boot_id
            && *pid == other.pid
            && *process_start_time == other.process_start_time
            && *repository == other.repository
            && *status == other.status
            && *ownership_state == other.ownership_state
            && *registered_at == other.registered_at
            && *heartbeat_ttl_s == other.heartbeat_ttl_s
            && *fencing_epoch == other.fencing_epoch
            && *token_fingerprint == other.token_fingerprint
            && *code_revision == other.code_revision
            && *config_revision == other.config_revision
            && *profile_revision == other.profile_revision
            && *schema_revision == other.schema_revision
            && *retired_at == other.retired_at
            && *retired_by == other.retired_by
            && *retirement_reason == other.retirement_reason
            && *pid_namespace == other.pid_namespace
    }

    /// The row's instance ID, when it is a well-formed launcher ID.
    pub fn instance_id(&self) -> Option<ClientInstanceId> {
        self.client_instance_id.as_deref().and_then(|s| ClientInstanceId::parse(s).ok())
    }
}

/// The rows in worker-identity order, the order stores return them in (which costs one
/// pass to confirm); rows that share an identity keep their input order.
///
/// An unordered input is sorted on the first bytes of each identity, held inline so
/// most comparisons follow no pointer; zero padding keeps the order of the whole
/// strings, and equal prefixes fall back to comparing them.
pub fn rows_by_identity(rows: &[WorkerRow]) -> Vec<&WorkerRow> {
    if rows.windows(2).all(|w| w[0].worker_identity <= w[1].worker_identity) {
        return rows.iter().collect();
    }
    // The first 24 bytes as three big-endian words: comparing them compares the bytes.
    let mut keyed: Vec<([u64; 3], &WorkerRow)> = rows
        .iter()
        .map(|row| {
            let mut bytes = [0u8; 24];
            let id = row.worker_identity.as_str().as_bytes();
            let n = id.len().min(bytes.len());
            bytes[..n].copy_from_slice(&id[..n]);
            let mut words =
                bytes.chunks_exact(8).map(|w| u64::from_be_bytes(w.try_into().unwrap_or_default()));
            let key = [(); 3].map(|()| words.next().unwrap_or_default());
            (key, row)
        })
        .collect();
    // Ties keep input order through the row's place, which the unstable sort (faster
    // here) would not keep by itself.
    let place = |row: &WorkerRow| std::ptr::from_ref(row).addr();
    keyed.sort_unstable_by(|(ka, a), (kb, b)| {
        ka.cmp(kb)
            .then_with(|| a.worker_identity.cmp(&b.worker_identity))
            .then_with(|| place(a).cmp(&place(b)))
    });
    keyed.into_iter().map(|(_, row)| row).collect()
}

/// One row of `instances`: the launcher's ledger of the IDs it minted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceRecord {
    /// The minted ID.
    pub client_instance_id: ClientInstanceId,
    /// The client it was minted for.
    pub client_type: ClientType,
    /// The fleet run it was minted in, when one was named.
    #[serde(default)]
    pub fleet_run_id: Option<FleetRunId>,
    /// When it was minted.
    pub minted_at: Timestamp,
    /// The host it was minted on, when recorded.
    #[serde(default)]
    pub host_id: Option<HostId>,
}

impl InstanceRecord {
    /// An instance ID names the client it was minted for: a ledger entry that says
    /// otherwise is contradictory evidence, not a record to keep.
    pub fn check(&self) -> Result<(), ClientContradiction> {
        let minted_for = self.client_instance_id.client_type();
        if minted_for == &self.client_type {
            return Ok(());
        }
        Err(ClientContradiction {
            client_type: self.client_type.clone(),
            client_instance_id: self.client_instance_id.clone(),
        })
    }
}

/// A ledger entry whose client type is not the one its instance ID was minted for
/// ([`InstanceRecord::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "client_type {client_type} contradicts {client_instance_id}, minted for {}",
    client_instance_id.client_type()
)]
#[non_exhaustive]
pub struct ClientContradiction {
    /// The client type the entry states.
    pub client_type: ClientType,
    /// The instance ID, which names the client it was minted for.
    pub client_instance_id: ClientInstanceId,
}

/// Probes every active row `probe` can speak for (see [`LivenessProbe::speaks_for`]); the
/// others stay unprobed. The one way every surface turns rows into probe results, so a
/// plan and the apply that rechecks it judge the same rows.
pub fn probe_active_rows<P: LivenessProbe + ?Sized>(
    rows: &[WorkerRow],
    probe: &P,
) -> std::collections::BTreeMap<WorkerIdentity, crate::ProcessVerdict> {
    probe_places(rows, &probed_places(rows, probe), probe)
}

/// The places in `rows` of the rows [`probe_active_rows`] probes: the active rows `probe`
/// speaks for. A reader that keeps them probes rows that changed only in their
/// heartbeats ([`WorkerRow::differs_only_in_heartbeat`]) at the same places, without
/// walking every row again.
pub fn probed_places<P: LivenessProbe + ?Sized>(rows: &[WorkerRow], probe: &P) -> Vec<usize> {
    rows.iter()
        .enumerate()
        .filter(|(_, r)| r.status == WorkerStatus::Active && probe.speaks_for(r.host_id.as_ref()))
        .map(|(i, _)| i)
        .collect()
}

/// Probes the rows at `places` (from [`probed_places`]), as [`probe_active_rows`] does.
pub fn probe_places<P: LivenessProbe + ?Sized>(
    rows: &[WorkerRow],
    places: &[usize],
    probe: &P,
) -> std::collections::BTreeMap<WorkerIdentity, crate::ProcessVerdict> {
    places
        .iter()
        .filter_map(|&i| rows.get(i))
        .filter_map(|r| Some((r.worker_identity.clone(), probe.probe(&r.process()?))))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rows_by_identity_orders_by_whole_identities_and_keeps_ties_in_input_order() {
        let row = |id: &str, pid: i64| {
            let mut row: WorkerRow = serde_json::from_value(serde_json::json!({
                "worker_identity": id, "namespace": "author", "status": "active",
                "registered_at": "2026-07-30T12:00:00Z",
            }))
            .unwrap();
            row.pid = Pid::new(pid).ok();
            row
        };
        // Identities that agree on the inline prefix and differ after it, one that is a
        // prefix of another, and two rows with one identity.
        let long = "wkr-author-0123456789abcdef-";
        let rows = [
            row(&format!("{long}b"), 1),
            row("wkr-b", 2),
            row(&format!("{long}a"), 3),
            row("wkr-b", 4),
            row("wkr-a", 5),
            row("wkr-ab", 6),
        ];
        let order: Vec<i64> =
            rows_by_identity(&rows).iter().map(|r| i64::from(r.pid.unwrap().get())).collect();
        assert_eq!(order, [5, 6, 3, 1, 2, 4]);
    }

    use super::*;
    use crate::RegistryDump;

    /// A heartbeat changes `last_heartbeat_at` alone; a change to any other column,
    /// with or without a new heartbeat, is more than a heartbeat.
    #[test]
    fn only_a_change_of_the_heartbeat_alone_is_a_heartbeat() {
        let full = serde_json::json!({
            "worker_identity": "wkr-a", "client_type": "codex",
            "client_instance_id": "inst-codex-20260730T120000Z-0123456789ab",
            "instance_provenance": "trusted_launcher", "fleet_run_id": "run-1",
            "namespace": "author", "profile": "default", "session_id": "sess-1",
            "generation_id": "gen-1", "host_id": "0123456789abcdef0123456789abcdef",
            "boot_id": "11111111-2222-3333-4444-555555555555", "pid": 42,
            "process_start_time": 7, "repository": "acme/widgets", "status": "active",
            "ownership_state": "owned", "registered_at": "2026-07-30T12:00:00Z",
            "last_heartbeat_at": "2026-07-30T12:00:05Z", "heartbeat_ttl_s": 30,
            "fencing_epoch": 3, "token_fingerprint": "b3:00", "code_revision": "1",
            "config_revision": "1", "profile_revision": "1", "schema_revision": "1",
            "retired_at": "2026-07-30T12:00:09Z", "retired_by": "op",
            "retirement_reason": "r", "pid_namespace": 4026531836_u64,
        });
        let row: WorkerRow = serde_json::from_value(full.clone()).unwrap();
        assert_eq!(serde_json::to_value(&row).unwrap().as_object().unwrap().len(), WORKER_COLUMNS.len());
        assert!(!row.differs_only_in_heartbeat(&row), "no change at all");
        let beat = |mut value: serde_json::Value| {
            value["last_heartbeat_at"] = "2026-07-30T12:00:15Z".into();
            value
        };
        let beaten: WorkerRow = serde_json::from_value(beat(full.clone())).unwrap();
        assert!(row.differs_only_in_heartbeat(&beaten));
        for column in WORKER_COLUMNS.iter().filter(|c| **c != "last_heartbeat_at") {
            let mut other = full.clone();
            other[*column] = match &full[*column] {
                serde_json::Value::Number(n) => (n.as_u64().unwrap() + 1).into(),
                _ if *column == "namespace" => "reviewer".into(),
                _ if *column == "status" => "released".into(),
                _ if *column == "ownership_state" => "stale".into(),
                _ if *column == "client_type" => "claude".into(),
                _ if column.ends_with("_at") => "2026-07-30T12:00:01Z".into(),
                serde_json::Value::String(s) => format!("{s}0").into(),
                v => panic!("{column}: {v}"),
            };
            let changed: WorkerRow = serde_json::from_value(other.clone()).unwrap();
            assert_ne!(changed, row, "{column} changed");
            assert!(!row.differs_only_in_heartbeat(&changed), "{column} alone");
            let changed: WorkerRow = serde_json::from_value(beat(other)).unwrap();
            assert!(!row.differs_only_in_heartbeat(&changed), "{column} and the heartbeat");
        }
    }

    #[test]
    fn a_ttl_written_as_a_real_reads_as_whole_seconds() {
        let row = r#"[{"worker_identity":"w1","namespace":"author","status":"active",
            "registered_at":"2026-07-30T12:00:00Z","heartbeat_ttl_s":900.0}]"#;
        let dump = RegistryDump::from_json(row).unwrap();
        assert_eq!(dump.worker_registrations[0].heartbeat_ttl_s, Some(900));
        let fractional = row.replace("900.0", "900.5");
        assert!(RegistryDump::from_json(&fractional).is_err());
    }

    #[test]
    fn an_epoch_no_store_can_keep_is_refused_not_clamped() {
        let row = |epoch: &str| {
            format!(
                r#"[{{"worker_identity":"w1","namespace":"author","status":"active",
                "registered_at":"2026-07-30T12:00:00Z","fencing_epoch":{epoch}}}]"#
            )
        };
        let max = RegistryDump::from_json(&row("9223372036854775807")).unwrap();
        assert_eq!(max.worker_registrations[0].fencing_epoch, Some(i64::MAX as u64));
        let err = RegistryDump::from_json(&row("9223372036854775808")).unwrap_err().to_string();
        assert!(err.contains("largest storable epoch"), "{err}");
        assert!(RegistryDump::from_json(&row("-1")).is_err());
    }

    #[test]
    fn a_heartbeat_from_the_future_vouches_for_nothing() {
        let row = |beat: &str| {
            let text = format!(
                r#"[{{"worker_identity":"w1","namespace":"author","status":"active",
                "registered_at":"2026-07-30T12:00:00Z","last_heartbeat_at":"{beat}","heartbeat_ttl_s":30}}]"#
            );
            RegistryDump::from_json(&text).unwrap().worker_registrations.remove(0)
        };
        let now = Timestamp::parse("2026-07-30T12:00:00Z").unwrap();
        assert!(!row("2026-07-30T12:04:00Z").heartbeat_expired(now), "within the clock skew");
        assert!(row("2026-07-30T12:06:00Z").heartbeat_expired(now), "beyond it");
        assert!(row("2036-07-30T12:00:00Z").heartbeat_expired(now), "years ahead");
    }

    #[test]
    fn expiry_follows_the_ttl_rule() {
        let text = r#"[{"worker_identity":"w1","namespace":"author","status":"active",
            "registered_at":"2026-07-30T12:00:00Z","last_heartbeat_at":"2026-07-30T12:00:00Z","heartbeat_ttl_s":30}]"#;
        let row = RegistryDump::from_json(text).unwrap().worker_registrations.remove(0);
        let at = |s| Timestamp::parse(s).unwrap();
        assert!(!row.heartbeat_expired(at("2026-07-30T12:00:30Z")));
        assert!(row.heartbeat_expired(at("2026-07-30T12:00:30.001Z")));
    }
}
