//! Whether this process's clock agrees with the fleet's before it judges other workers'
//! heartbeats. Each heartbeat is stamped with its writer's clock, and the stale sweep
//! compares stamps with the sweeper's: one process whose clock is an hour ahead (or
//! behind) would find every healthy worker lapsed (or beating from the future) and mark
//! them all stale. So a sweeper first checks its clock against two witnesses:
//!
//! * the store's clock, where the store has one of its own (PostgreSQL's server clock);
//! * the fleet's recent heartbeats: the other workers of this host whose processes the
//!   probe finds alive each beat every third of their TTL, so by a clock that agrees
//!   most of them are neither lapsed nor in the future.
//!
//! When either disagrees beyond [`CLOCK_AGREEMENT`], the sweep is skipped and the
//! disagreement reported. The skewed worker's own row is what the fleet then reports:
//! its stamps lie in the others' past or future, so their sweeps and snapshots see it
//! stale.

use fleet_identity::{Timestamp, WorkerIdentity};
use fleet_registry::{ProcessVerdict, WorkerRow, WorkerStatus};
use fleet_snapshot::ProbeResults;
use time::Duration;

/// How far two clocks of one fleet may differ before a sweep by one of them is not
/// trusted. Hosts kept by NTP agree within milliseconds; heartbeats come every few
/// seconds at the shortest TTLs.
pub const CLOCK_AGREEMENT: Duration = Duration::seconds(5);

/// Why this process's clock is not trusted to judge others, and by how much it is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockDisagreement {
    /// The store's own clock reads `offset` behind this one (negative: ahead).
    Store {
        /// This clock minus the store's.
        offset: Duration,
    },
    /// Most live workers' heartbeats are lapsed or in the future by this clock; the
    /// median of (this clock − their last heartbeat).
    Fleet {
        /// The median heartbeat age by this clock.
        median_age: Duration,
        /// How many live workers were compared.
        witnesses: usize,
    },
}

impl std::fmt::Display for ClockDisagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClockDisagreement::Store { offset } => {
                write!(f, "this clock is {} s off the registry server's", offset.whole_seconds())
            }
            ClockDisagreement::Fleet { median_age, witnesses } => write!(
                f,
                "by this clock the heartbeats of {witnesses} live workers are a median {} s old",
                median_age.whole_seconds()
            ),
        }
    }
}

/// Checks `now` against the store's clock (`store_now`, where the store has its own).
pub fn against_store(now: Timestamp, store_now: Timestamp) -> Result<(), ClockDisagreement> {
    let offset = now.since(store_now);
    if offset.abs() > CLOCK_AGREEMENT { Err(ClockDisagreement::Store { offset }) } else { Ok(()) }
}

/// Checks `now` against the heartbeats of the active workers other than `me` whose
/// processes `probes` found alive. A heartbeat agrees when it is neither lapsed (older
/// than its TTL) nor more than [`CLOCK_AGREEMENT`] in the future; the clock disagrees
/// when most do not. With no live witness there is nothing to disagree with.
pub fn against_fleet(
    rows: &[WorkerRow],
    me: &WorkerIdentity,
    probes: &ProbeResults,
    now: Timestamp,
) -> Result<(), ClockDisagreement> {
    let mut ages = Vec::new();
    let mut disagreeing = 0;
    for row in rows {
        let alive = probes.get(&row.worker_identity) == Some(&ProcessVerdict::Alive);
        if row.status != WorkerStatus::Active || &row.worker_identity == me || !alive {
            continue;
        }
        let (Some(beat), Some(ttl)) = (row.heartbeat(), row.heartbeat_ttl_s) else { continue };
        let age = now.since(beat);
        if age > Duration::seconds(i64::from(ttl)) || age < -CLOCK_AGREEMENT {
            disagreeing += 1;
        }
        ages.push(age);
    }
    if ages.is_empty() || disagreeing * 2 <= ages.len() {
        return Ok(());
    }
    ages.sort_unstable();
    Err(ClockDisagreement::Fleet { median_age: ages[ages.len() / 2], witnesses: ages.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_unix_millis(1_785_412_800_000 + s * 1000).unwrap()
    }

    fn row(n: u32, beat: i64) -> WorkerRow {
        serde_json::from_value(serde_json::json!({
            "worker_identity": format!("wkr-author-{n:04}"),
            "namespace": "author",
            "status": "active",
            "registered_at": at(0).to_string(),
            "last_heartbeat_at": at(beat).to_string(),
            "heartbeat_ttl_s": 30,
        }))
        .unwrap()
    }

    fn alive(rows: &[WorkerRow]) -> ProbeResults {
        rows.iter().map(|r| (r.worker_identity.clone(), ProcessVerdict::Alive)).collect()
    }

    #[test]
    fn a_clock_an_hour_off_either_way_disagrees_with_a_beating_fleet() {
        let rows: Vec<WorkerRow> = (1..=5).map(|n| row(n, 1000 - i64::from(n))).collect();
        let me = row(9, 0).worker_identity;
        let probes = alive(&rows);
        assert_eq!(against_fleet(&rows, &me, &probes, at(1003)), Ok(()));
        let ahead = against_fleet(&rows, &me, &probes, at(1000 + 3600));
        assert!(matches!(ahead, Err(ClockDisagreement::Fleet { witnesses: 5, .. })), "{ahead:?}");
        let behind = against_fleet(&rows, &me, &probes, at(1000 - 3600));
        assert!(matches!(behind, Err(ClockDisagreement::Fleet { .. })), "{behind:?}");
    }

    #[test]
    fn dead_workers_and_a_minority_of_hung_ones_are_no_witnesses_against_the_clock() {
        let mut rows: Vec<WorkerRow> = (1..=3).map(|n| row(n, 1000)).collect();
        rows.push(row(4, 10)); // hung: alive, not beating
        rows.push(row(5, 10)); // dead
        let me = row(9, 0).worker_identity;
        let mut probes = alive(&rows);
        probes.insert(rows[4].worker_identity.clone(), ProcessVerdict::Gone);
        assert_eq!(against_fleet(&rows, &me, &probes, at(1005)), Ok(()));
        // A fleet whose every other worker is dead has no witness: the sweep may run.
        let dead: ProbeResults =
            rows.iter().map(|r| (r.worker_identity.clone(), ProcessVerdict::Gone)).collect();
        assert_eq!(against_fleet(&rows, &me, &dead, at(5000)), Ok(()));
    }

    #[test]
    fn the_store_clock_is_a_witness_within_the_agreement() {
        assert_eq!(against_store(at(1004), at(1000)), Ok(()));
        assert!(against_store(at(1000 + 3600), at(1000)).is_err());
        assert!(against_store(at(1000 - 3600), at(1000)).is_err());
    }
}
