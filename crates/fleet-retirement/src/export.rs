//! The pure path from a registry export: what `fleetctl registry export` writes (every
//! table of it), read with nothing but the pure crates into what a retirement plan rests
//! on, and the plan made from it as `fleetctl retire plan` makes it from the store.

use std::borrow::Cow;
use std::collections::BTreeSet;

use fleet_identity::{ClientInstanceId, Timestamp};
use fleet_lease::{LeaseKind, LeaseRecord};
use fleet_model::{
    DumpError, HostEvidence, OwnershipState, ProcessVerdict, RegistryDump, WorkerRow, WorkerStatus,
};

use crate::{Evidence, Plan, RetirementContext, plan};

/// A registry export, read: the ledger and worker rows, and the leases a plan consults.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Export {
    /// The ledger and every worker row.
    pub dump: RegistryDump,
    /// Every lease the export holds (initialization versions, connector bindings,
    /// workflow leases).
    pub leases: Vec<LeaseRecord>,
}

impl Export {
    /// Reads what `fleetctl registry export` wrote: an object of tables, each of which
    /// this build knows (the audit log and the fencing high-water marks are read past:
    /// no plan rests on them), or a bare array of worker rows.
    ///
    /// # Errors
    /// A file that is not JSON, names a table this build does not know, or holds a row
    /// or lease that does not parse; the message names the table and the row's index.
    pub fn from_json(text: &str) -> Result<Self, DumpError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| DumpError::new(format!("not valid JSON: {e}")))?;
        let leases = match value.get("leases") {
            Some(leases) => fleet_model::numbered(leases.clone(), "leases")?,
            None => Vec::new(),
        };
        Ok(Self { dump: RegistryDump::from_value(value)?, leases })
    }

    /// The owners of the workflow leases live at `now`: a plan preserves their workers
    /// (`protected_active_workflow_owner`).
    pub fn workflow_owners(&self, now: Timestamp) -> BTreeSet<String> {
        self.leases
            .iter()
            .filter(|l| l.kind == LeaseKind::Workflow && l.is_live(now))
            .map(|l| l.owner.clone())
            .collect()
    }

    /// The launcher's ledger: every instance ID it minted.
    pub fn ledger(&self) -> BTreeSet<ClientInstanceId> {
        self.dump.instances.iter().map(|i| i.client_instance_id.clone()).collect()
    }

    /// The retirement plan of this export at `ctx.now`, with `probes` (the caller's
    /// liveness answers; none for a fleet only known on file, so rows of every host are
    /// judged by their heartbeats and preserved where only a probe could prove them
    /// gone). Rows are judged as the stale sweep leaves them ([`as_swept`]), as
    /// `fleetctl retire plan` judges them: on the same rows, leases, probes and context
    /// both give the same fingerprints and verdicts, but for what an operator's host
    /// fence proves (an export carries no fences). As the binary does, it plans over the
    /// live fleet ([`fleet_model::LiveScope`]): history is never a candidate, and the
    /// registry fingerprint covers the rows the plan read.
    pub fn plan(
        &self,
        probes: &std::collections::BTreeMap<fleet_identity::WorkerIdentity, ProcessVerdict>,
        ctx: &RetirementContext,
    ) -> Plan {
        let scope = fleet_model::LiveScope::of(&self.dump.worker_registrations);
        let live: Vec<WorkerRow> =
            self.dump.worker_registrations.iter().filter(|r| scope.holds(r)).cloned().collect();
        let rows = as_swept(&live, ctx.now);
        let ledger = self
            .dump
            .instances
            .iter()
            .filter(|i| scope.holds_record(i))
            .map(|i| i.client_instance_id.clone())
            .collect();
        let owners = self.workflow_owners(ctx.now);
        // What the rows' own boots prove; an export carries no host fences.
        let hosts = HostEvidence::new(&rows, &[]);
        plan(&Evidence::with_hosts(&rows, &ledger, &owners, probes, &hosts), ctx)
    }
}

/// Whether the stale sweep marks `row` stale at `now`: active, not yet stale, and its
/// heartbeat lapsed.
pub fn due_for_sweep(row: &WorkerRow, now: Timestamp) -> bool {
    let not_stale = row.ownership_state != Some(OwnershipState::Stale);
    row.status == WorkerStatus::Active && not_stale && row.heartbeat_expired(now)
}

/// The rows as the stale sweep would leave them at `now`: every row due marked stale.
/// Retirement reads rows through this, so a row whose heartbeat lapsed is judged as a
/// sweep would have marked it, whether or not a live worker happened to sweep.
pub fn as_swept(rows: &[WorkerRow], now: Timestamp) -> Cow<'_, [WorkerRow]> {
    if !rows.iter().any(|r| due_for_sweep(r, now)) {
        return Cow::Borrowed(rows);
    }
    Cow::Owned(
        rows.iter()
            .map(|r| {
                let mut r = r.clone();
                if due_for_sweep(&r, now) {
                    r.ownership_state = Some(OwnershipState::Stale);
                }
                r
            })
            .collect(),
    )
}
