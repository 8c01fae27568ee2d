//! Hosts: what the rows say of each host's boots, the operator's fences, and the two
//! proofs that a host's earlier processes are gone without probing them there.
//!
//! A liveness probe speaks only for its own host and boot. Two statements speak for
//! the processes of another host:
//!
//! * **a reboot**: a process of the same host running under a later boot vouches that
//!   every process of the earlier boot is gone. "Later" means every sign of life of the
//!   earlier boot (registrations, heartbeats) precedes the first sign of the later one.
//!   Machines cloned from one image share a machine id: two boots of one host whose
//!   signs of life overlap in time are two machines, not a reboot, and neither proves
//!   the other gone ([`CloneConflict`]);
//! * **a fence**: an operator's durable statement ([`HostFence`]) that a host (every
//!   boot of it, until lifted) or one boot of it is gone for good. The registry refuses
//!   every write from a fenced host and boot, so a host that does come back acts on
//!   nothing, and its rows may be retired.
//!
//! Signs of life are compared only between boots of one host, whose processes stamp
//! them on one clock.

use std::collections::BTreeMap;

use fleet_identity::{BootId, HostId, Timestamp};
use serde::{Deserialize, Serialize};

use crate::{WorkerRow, WorkerStatus};

/// Which boots of a host a fence covers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FencedBoot {
    /// Every boot of the host, the current and any later one, until the fence is
    /// lifted (`host unfence`).
    Every,
    /// One boot: never lifted.
    One(BootId),
}

impl FencedBoot {
    /// How a store keeps it: the boot id, or `*` for every boot.
    pub fn as_str(&self) -> &str {
        match self {
            FencedBoot::Every => "*",
            FencedBoot::One(boot) => boot.as_str(),
        }
    }

    /// Reads what [`FencedBoot::as_str`] wrote.
    pub fn parse(text: &str) -> Result<Self, fleet_identity::IdentityError> {
        if text == "*" { Ok(FencedBoot::Every) } else { BootId::new(text).map(FencedBoot::One) }
    }

    /// Whether this covers `boot`.
    pub fn covers(&self, boot: &BootId) -> bool {
        match self {
            FencedBoot::Every => true,
            FencedBoot::One(b) => b == boot,
        }
    }
}

impl std::str::FromStr for FencedBoot {
    type Err = fleet_identity::IdentityError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        FencedBoot::parse(text)
    }
}

impl Serialize for FencedBoot {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FencedBoot {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        FencedBoot::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// An operator's statement that a host, or one boot of it, is gone for good: who made
/// it, when (on the store's clock) and why. A fence of [`FencedBoot::Every`] may be
/// lifted for the host's later boots; the boots it covered stay fenced by fences of
/// their own, written beside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostFence {
    /// The host.
    pub host_id: HostId,
    /// Which of its boots.
    pub boot_id: FencedBoot,
    /// Why, in the operator's words.
    pub reason: String,
    /// Who fenced it.
    pub fenced_by: String,
    /// When.
    pub fenced_at: Timestamp,
    /// When it was lifted, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifted_at: Option<Timestamp>,
    /// Who lifted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifted_by: Option<String>,
}

impl HostFence {
    /// Whether this fence stands against a process of `host` and `boot`.
    pub fn stands_against(&self, host: &HostId, boot: &BootId) -> bool {
        self.lifted_at.is_none() && &self.host_id == host && self.boot_id.covers(boot)
    }
}

/// What a host said of itself when a process of one of its boots last registered:
/// its name, for people (never evidence), and how far its clock read from the store's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostBoot {
    /// The host.
    pub host_id: HostId,
    /// The boot.
    pub boot_id: BootId,
    /// Its hostname as it reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// When a process of this boot first registered, on the store's clock.
    pub first_seen_at: Timestamp,
    /// When one last registered, on the store's clock.
    pub last_seen_at: Timestamp,
    /// The registering process's clock minus the store's at that moment, in
    /// milliseconds (positive: the host's clock is ahead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<i64>,
}

/// The longest hostname kept (a DNS name's limit).
pub const MAX_HOSTNAME_LEN: usize = 253;

/// `name` as a hostname worth keeping: trimmed, non-empty, at most
/// [`MAX_HOSTNAME_LEN`] bytes, no control character; `None` otherwise.
pub fn reported_hostname(name: &str) -> Option<String> {
    let name = name.trim();
    (!name.is_empty() && name.len() <= MAX_HOSTNAME_LEN && !name.chars().any(char::is_control))
        .then(|| name.to_owned())
}

fleet_identity::outward_codes! {
    /// Why a process of another host (or an earlier boot) is known to be gone.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum HostProof ("host proof") {
        /// A process of the same host runs under a later boot.
        HostRebooted = "host_rebooted",
        /// An operator fenced the host or the boot.
        HostFenced = "host_fenced",
    }
}

/// The signs of life of one boot of a host, from its rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BootSpan {
    /// The boot.
    pub boot_id: BootId,
    /// The earliest registration of a row of this boot.
    pub first_seen: Timestamp,
    /// The latest registration or heartbeat of a row of this boot.
    pub last_seen: Timestamp,
    /// Rows of this boot that are active.
    pub active_rows: usize,
    /// Rows of this boot in a terminal status.
    pub terminal_rows: usize,
}

impl BootSpan {
    /// Whether both boots hold active rows and their signs of life overlap in time: two
    /// machines at once. A boot whose rows are all terminal is history, not a machine
    /// that may still be running beside another (and its stamps, on a clock that may
    /// since have been set right, say nothing of the later boots' times).
    fn clashes_with(&self, other: &BootSpan) -> bool {
        self.active_rows > 0
            && other.active_rows > 0
            && self.first_seen <= other.last_seen
            && other.first_seen <= self.last_seen
    }
}

/// Two boots of one host, each with active rows, whose signs of life overlap in time:
/// two machines sharing a machine id (cloned from one image), not a reboot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CloneConflict {
    /// The host id both use.
    pub host_id: HostId,
    /// The two boots, in id order.
    pub boots: [BootId; 2],
}

/// Each host's boots as its rows show them, with the fences that stand: what the proofs
/// of [`HostProof`] are read from.
#[derive(Debug, Clone, Default)]
pub struct HostEvidence {
    boots: BTreeMap<HostId, Vec<BootSpan>>,
    fences: Vec<HostFence>,
}

impl HostEvidence {
    /// No hosts, no fences: evidence that proves nothing.
    pub fn none() -> &'static HostEvidence {
        static NONE: HostEvidence = HostEvidence { boots: BTreeMap::new(), fences: Vec::new() };
        &NONE
    }

    /// Gathers the boots of every host from `rows` (rows naming no host or boot say
    /// nothing of one) and keeps `fences`.
    pub fn new(rows: &[WorkerRow], fences: &[HostFence]) -> Self {
        let mut spans: BTreeMap<(&HostId, &BootId), BootSpan> = BTreeMap::new();
        for row in rows {
            let (Some(host), Some(boot)) = (&row.host_id, &row.boot_id) else { continue };
            let last = row.heartbeat().map_or(row.registered_at, |beat| beat.max(row.registered_at));
            let span = spans.entry((host, boot)).or_insert_with(|| BootSpan {
                boot_id: boot.clone(),
                first_seen: row.registered_at,
                last_seen: last,
                active_rows: 0,
                terminal_rows: 0,
            });
            span.first_seen = span.first_seen.min(row.registered_at);
            span.last_seen = span.last_seen.max(last);
            if row.status == WorkerStatus::Active {
                span.active_rows += 1;
            } else {
                span.terminal_rows += 1;
            }
        }
        let mut boots: BTreeMap<HostId, Vec<BootSpan>> = BTreeMap::new();
        for ((host, _), span) in spans {
            boots.entry(host.clone()).or_default().push(span);
        }
        for list in boots.values_mut() {
            list.sort_by(|a, b| (a.first_seen, &a.boot_id).cmp(&(b.first_seen, &b.boot_id)));
        }
        Self { boots, fences: fences.to_vec() }
    }

    /// Every host the rows or the fences name, in id order.
    pub fn hosts(&self) -> Vec<&HostId> {
        let mut hosts: Vec<&HostId> =
            self.boots.keys().chain(self.fences.iter().map(|f| &f.host_id)).collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }

    /// The boots of `host` its rows show, earliest first.
    pub fn boots(&self, host: &HostId) -> &[BootSpan] {
        self.boots.get(host).map_or(&[], Vec::as_slice)
    }

    /// The fences recorded for `host`, lifted ones included.
    pub fn fences(&self, host: &HostId) -> impl Iterator<Item = &HostFence> {
        self.fences.iter().filter(move |f| &f.host_id == host)
    }

    /// The fence that stands against processes of `host` and `boot`, if one does.
    pub fn fence_against(&self, host: &HostId, boot: &BootId) -> Option<&HostFence> {
        self.fences.iter().find(|f| f.stands_against(host, boot))
    }

    /// Whether `host`'s boot `boot` is in a [`CloneConflict`].
    fn cloned(&self, host: &HostId, boot: &BootId) -> bool {
        let spans = self.boots(host);
        spans
            .iter()
            .find(|s| &s.boot_id == boot)
            .is_some_and(|me| spans.iter().any(|other| other.boot_id != me.boot_id && other.clashes_with(me)))
    }

    /// The proof that every process of `host` under `boot` is gone, if there is one:
    /// a fence that stands against it, or a later boot of the same host whose first
    /// sign of life follows this boot's last, where no boot of the host overlaps this
    /// one (a clone is never taken for a reboot).
    pub fn proof(&self, host: &HostId, boot: &BootId) -> Option<HostProof> {
        if self.fence_against(host, boot).is_some() {
            return Some(HostProof::HostFenced);
        }
        let spans = self.boots(host);
        let me = spans.iter().find(|s| &s.boot_id == boot)?;
        let later = spans.iter().any(|other| other.boot_id != *boot && other.first_seen > me.last_seen);
        (later && !self.cloned(host, boot)).then_some(HostProof::HostRebooted)
    }

    /// Every pair of boots of one host whose signs of life overlap: clones.
    pub fn clones(&self) -> Vec<CloneConflict> {
        let mut found = Vec::new();
        for (host, spans) in &self.boots {
            for (i, a) in spans.iter().enumerate() {
                for b in &spans[i + 1..] {
                    if a.clashes_with(b) {
                        let mut pair = [a.boot_id.clone(), b.boot_id.clone()];
                        pair.sort();
                        found.push(CloneConflict { host_id: host.clone(), boots: pair });
                    }
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OwnershipState;
    use fleet_identity::{Namespace, WorkerIdentity};

    fn at(s: i64) -> Timestamp {
        Timestamp::from_unix_millis(1_800_000_000_000 + s * 1000).unwrap()
    }

    fn hex(c: char) -> String {
        std::iter::repeat_n(c, 32).collect()
    }

    fn row(id: &str, host: char, boot: char, registered: i64, beat: i64) -> WorkerRow {
        WorkerRow {
            worker_identity: WorkerIdentity::new(id).unwrap(),
            client_type: None,
            client_instance_id: None,
            instance_provenance: None,
            fleet_run_id: None,
            namespace: Namespace::Author,
            profile: None,
            session_id: None,
            generation_id: None,
            host_id: Some(HostId::new(hex(host)).unwrap()),
            boot_id: Some(BootId::new(hex(boot)).unwrap()),
            pid: None,
            process_start_time: None,
            repository: None,
            status: WorkerStatus::Active,
            ownership_state: Some(OwnershipState::Owned),
            registered_at: at(registered),
            last_heartbeat_at: Some(at(beat).to_string()),
            heartbeat_ttl_s: Some(3),
            fencing_epoch: None,
            token_fingerprint: None,
            code_revision: None,
            config_revision: None,
            profile_revision: None,
            schema_revision: None,
            retired_at: None,
            retired_by: None,
            retirement_reason: None,
            pid_namespace: None,
        }
    }

    fn host(c: char) -> HostId {
        HostId::new(hex(c)).unwrap()
    }

    fn boot(c: char) -> BootId {
        BootId::new(hex(c)).unwrap()
    }

    #[test]
    fn a_later_boot_proves_the_earlier_one_gone_and_not_the_other_way() {
        let rows = [row("w-1", 'a', '1', 0, 50), row("w-2", 'a', '2', 60, 90)];
        let ev = HostEvidence::new(&rows, &[]);
        assert_eq!(ev.proof(&host('a'), &boot('1')), Some(HostProof::HostRebooted));
        assert_eq!(ev.proof(&host('a'), &boot('2')), None, "the latest boot is not proven gone");
        assert!(ev.clones().is_empty());
    }

    #[test]
    fn two_boots_alive_at_once_are_clones_and_prove_nothing() {
        let rows = [row("w-1", 'a', '1', 0, 100), row("w-2", 'a', '2', 60, 90)];
        let ev = HostEvidence::new(&rows, &[]);
        assert_eq!(ev.proof(&host('a'), &boot('1')), None);
        assert_eq!(ev.proof(&host('a'), &boot('2')), None);
        assert_eq!(ev.clones(), vec![CloneConflict { host_id: host('a'), boots: [boot('1'), boot('2')] }]);
    }

    #[test]
    fn a_finished_boot_stamped_ahead_of_time_is_no_clone_of_a_later_one() {
        // Boot 1 ran with a clock ahead; all its rows ended. Boot 2 then ran, and its
        // rows stopped; boot 3 proves boot 2 gone.
        let mut done = row("w-1", 'a', '1', 0, 900);
        done.status = WorkerStatus::Released;
        let rows = [done, row("w-2", 'a', '2', 20, 50), row("w-3", 'a', '3', 60, 90)];
        let ev = HostEvidence::new(&rows, &[]);
        assert_eq!(ev.proof(&host('a'), &boot('2')), Some(HostProof::HostRebooted));
        assert!(ev.clones().is_empty());
    }

    #[test]
    fn another_hosts_boot_proves_nothing() {
        let rows = [row("w-1", 'a', '1', 0, 50), row("w-2", 'b', '2', 60, 90)];
        let ev = HostEvidence::new(&rows, &[]);
        assert_eq!(ev.proof(&host('a'), &boot('1')), None);
    }

    #[test]
    fn a_fence_of_every_boot_stands_until_lifted_and_a_boots_own_for_good() {
        let fence = |b: FencedBoot, lifted: Option<i64>| HostFence {
            host_id: host('a'),
            boot_id: b,
            reason: "gone".into(),
            fenced_by: "op".into(),
            fenced_at: at(10),
            lifted_at: lifted.map(at),
            lifted_by: lifted.map(|_| "op".into()),
        };
        let rows = [row("w-1", 'a', '1', 0, 5)];
        let every = HostEvidence::new(&rows, &[fence(FencedBoot::Every, None)]);
        assert_eq!(every.proof(&host('a'), &boot('1')), Some(HostProof::HostFenced));
        assert_eq!(every.proof(&host('a'), &boot('9')), Some(HostProof::HostFenced), "a later boot too");
        let lifted = HostEvidence::new(
            &rows,
            &[fence(FencedBoot::Every, Some(20)), fence(FencedBoot::One(boot('1')), None)],
        );
        assert_eq!(lifted.proof(&host('a'), &boot('1')), Some(HostProof::HostFenced), "the old boot stays");
        assert_eq!(lifted.proof(&host('a'), &boot('9')), None, "a new boot is free once lifted");
        assert_eq!(lifted.hosts(), vec![&host('a')]);
    }

    #[test]
    fn a_fenced_boot_reads_back_from_its_stored_form() {
        assert_eq!(FencedBoot::parse("*").unwrap(), FencedBoot::Every);
        let one = FencedBoot::One(boot('3'));
        assert_eq!(FencedBoot::parse(one.as_str()).unwrap(), one);
        assert!(FencedBoot::parse("not a boot").is_err());
    }
}
