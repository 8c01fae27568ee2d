//! This process's clock ([`now`]), and whether it agrees with the store's before it
//! judges other workers' heartbeats. Each heartbeat is stamped with its writer's clock,
//! and the stale sweep compares stamps with the sweeper's: one host whose clock is an
//! hour ahead (or behind) would find every healthy worker of other hosts lapsed (or
//! beating from the future) and mark them all stale. So a sweeper first checks its clock
//! against the store's, which every store has and no caller's clock moves:
//! PostgreSQL's server clock, and for a SQLite file the wall clock of the host it lives
//! on as the kernel keeps it ([`fleet_probe::host_now`]), which a process whose own clock
//! alone lies (a preloaded time library) does not share. When they disagree beyond
//! [`CLOCK_AGREEMENT`] the sweep is skipped and the disagreement reported. The skewed
//! host's own rows are what the fleet then reports: their stamps lie in the others'
//! past or future.
//!
//! The other hosts' newest heartbeats are no witness of a clock: a host partitioned
//! from the store (or every host but one) makes its heartbeats old by any clock.
//! [`against_fleet`] tells how a clock reads against them, for a store without a clock
//! of its own.

use fleet_identity::{HostId, Timestamp};
use fleet_registry::{WorkerRow, WorkerStatus};
use time::{Duration, OffsetDateTime};

/// This process's clock now, as the registry stores a time.
pub fn now() -> Timestamp {
    Timestamp::new(OffsetDateTime::now_utc())
}

/// How far two clocks of one fleet may differ before a sweep by one of them is not
/// trusted. Hosts kept by NTP agree within milliseconds; heartbeats come every few
/// seconds at the shortest TTLs.
pub const CLOCK_AGREEMENT: Duration = Duration::seconds(5);

/// Why this process's clock is not trusted to judge others, and by how much it is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClockDisagreement {
    /// The store's clock reads `offset` behind this one (negative: ahead).
    Store {
        /// This clock minus the store's.
        offset: Duration,
    },
    /// Most other hosts' newest heartbeats are lapsed or in the future by this clock;
    /// the median of (this clock − their newest heartbeat).
    Fleet {
        /// The median heartbeat age by this clock.
        median_age: Duration,
        /// How many other hosts were compared.
        witnesses: usize,
    },
}

impl std::fmt::Display for ClockDisagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClockDisagreement::Store { offset } => {
                write!(f, "this clock is {} s off the registry's", offset.whole_seconds())
            }
            ClockDisagreement::Fleet { median_age, witnesses } => write!(
                f,
                "by this clock the newest heartbeats of {witnesses} other hosts are a median {} s old",
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

/// Checks `now` against the newest heartbeat of each host other than `host`, among its
/// active workers. A host agrees when its newest heartbeat is neither lapsed (older than
/// its TTL) nor more than [`CLOCK_AGREEMENT`] in the future; the clock disagrees when most
/// hosts do not. With no other host there is nothing to disagree with.
pub fn against_fleet(
    rows: &[WorkerRow],
    host: Option<&HostId>,
    now: Timestamp,
) -> Result<(), ClockDisagreement> {
    let mut newest: std::collections::BTreeMap<&HostId, (Timestamp, u32)> = std::collections::BTreeMap::new();
    for row in rows {
        let Some(other) = row.host_id.as_ref().filter(|h| Some(*h) != host) else { continue };
        let (Some(beat), Some(ttl)) = (row.heartbeat(), row.heartbeat_ttl_s) else { continue };
        if row.status != WorkerStatus::Active {
            continue;
        }
        let entry = newest.entry(other).or_insert((beat, ttl));
        if beat > entry.0 {
            *entry = (beat, ttl);
        }
    }
    let mut ages = Vec::new();
    let mut disagreeing = 0;
    for (beat, ttl) in newest.into_values() {
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

    fn host(n: u32) -> HostId {
        serde_json::from_value(serde_json::json!(format!("{n:032x}"))).unwrap()
    }

    fn row(n: u32, on: u32, beat: i64) -> WorkerRow {
        serde_json::from_value(serde_json::json!({
            "worker_identity": format!("wkr-author-{n:04}"),
            "namespace": "author",
            "status": "active",
            "host_id": host(on),
            "registered_at": at(0).to_string(),
            "last_heartbeat_at": at(beat).to_string(),
            "heartbeat_ttl_s": 30,
        }))
        .unwrap()
    }

    #[test]
    fn a_clock_an_hour_off_either_way_disagrees_with_the_other_hosts() {
        let rows: Vec<WorkerRow> = (1..=5).map(|n| row(n, n, 1000 - i64::from(n))).collect();
        let me = host(9);
        assert_eq!(against_fleet(&rows, Some(&me), at(1003)), Ok(()));
        let ahead = against_fleet(&rows, Some(&me), at(1000 + 3600));
        assert!(matches!(ahead, Err(ClockDisagreement::Fleet { witnesses: 5, .. })), "{ahead:?}");
        let behind = against_fleet(&rows, Some(&me), at(1000 - 3600));
        assert!(matches!(behind, Err(ClockDisagreement::Fleet { .. })), "{behind:?}");
    }

    /// A Ctrl-Z'd launch on the sweeper's own host (alive, not beating) is no witness:
    /// the host's processes share one clock.
    #[test]
    fn workers_of_the_sweepers_own_host_are_never_witnesses() {
        let me = host(1);
        let hung: Vec<WorkerRow> = (1..=6).map(|n| row(n, 1, 10)).collect();
        assert_eq!(against_fleet(&hung, Some(&me), at(5000)), Ok(()));
    }

    /// Each other host is one witness, its newest heartbeat: a host with one hung worker
    /// beside live ones agrees, and one host whose workers all died is outvoted.
    #[test]
    fn each_other_host_witnesses_once_by_its_newest_heartbeat() {
        let me = host(9);
        let mut rows = vec![row(1, 1, 1000), row(2, 1, 10), row(3, 1, 10), row(4, 2, 999), row(5, 3, 10)];
        assert_eq!(against_fleet(&rows, Some(&me), at(1005)), Ok(()), "hosts 1 and 2 live, host 3 dead");
        rows.extend([row(6, 4, 10), row(7, 5, 10)]);
        assert!(against_fleet(&rows, Some(&me), at(1005)).is_err(), "most hosts lapsed by this clock");
    }

    #[test]
    fn the_store_clock_is_a_witness_within_the_agreement() {
        assert_eq!(against_store(at(1004), at(1000)), Ok(()));
        assert!(against_store(at(1000 + 3600), at(1000)).is_err());
        assert!(against_store(at(1000 - 3600), at(1000)).is_err());
    }
}
