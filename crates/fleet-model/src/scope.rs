//! The live fleet's share of a registry. Rows are never deleted but by an operator's
//! prune, so a registry that has run for months holds far more history (released,
//! superseded and retired rows of launches long ended) than live fleet. The reads a
//! fleet makes all the time — the snapshot, the retirement plan and its apply, a
//! watcher's page — read only [`LiveScope`]'s rows; the record stays whole for
//! `registry export`, `worker list` and the audit.

use std::collections::HashSet;

use crate::dump::RegistryDump;
use crate::rows::{InstanceRecord, WorkerRow, WorkerStatus};

/// Which rows belong to the live fleet: every active row, and every row (of any status)
/// of a launch (`client_instance_id`) that has an active row; and the ledger entries
/// of those launches. A terminal row of a launch with no active row left, or with no
/// launch at all, is history.
///
/// The stores answer the same question from an index (`Tx::live_workers`); this is the
/// rule they are held to.
#[derive(Debug, Clone, Default)]
pub struct LiveScope<'a> {
    launches: HashSet<&'a str>,
}

impl<'a> LiveScope<'a> {
    /// The launches of `rows` that have an active row.
    pub fn of(rows: &'a [WorkerRow]) -> Self {
        let launches = rows
            .iter()
            .filter(|r| r.status == WorkerStatus::Active)
            .filter_map(|r| r.client_instance_id.as_deref())
            .collect();
        Self { launches }
    }

    /// Whether `row` belongs to the live fleet.
    pub fn holds(&self, row: &WorkerRow) -> bool {
        row.status == WorkerStatus::Active || self.holds_launch(row.client_instance_id.as_deref())
    }

    /// Whether the launch `id` has an active row.
    pub fn holds_launch(&self, id: Option<&str>) -> bool {
        id.is_some_and(|id| self.launches.contains(id))
    }

    /// Whether the ledger entry `record` is of a launch with an active row.
    pub fn holds_record(&self, record: &InstanceRecord) -> bool {
        self.launches.contains(record.client_instance_id.as_str())
    }
}

impl RegistryDump {
    /// This dump's live fleet (see [`LiveScope`]): its other rows and ledger entries
    /// left out, the order of those kept unchanged.
    #[must_use]
    pub fn live(mut self) -> RegistryDump {
        let scope = LiveScope::of(&self.worker_registrations);
        let rows: Vec<bool> = self.worker_registrations.iter().map(|r| scope.holds(r)).collect();
        let records: Vec<bool> = self.instances.iter().map(|i| scope.holds_record(i)).collect();
        drop(scope);
        let (mut rows, mut records) = (rows.into_iter(), records.into_iter());
        self.worker_registrations.retain(|_| rows.next().unwrap_or(false));
        self.instances.retain(|_| records.next().unwrap_or(false));
        self
    }
}
