//! The launcher's ledger, indexed for the pass.

use fleet_identity::{ClientInstanceId, Ledger};
use fleet_model::InstanceRecord;

use crate::keys::KeyTable;

/// The launcher's ledger: its IDs numbered in a [`KeyTable`], so that looking one up
/// compares copies kept together rather than the records' own strings, and the host
/// each ID's record names.
pub(super) struct LedgerIndex<'a> {
    pub(super) ids: KeyTable,
    pub(super) hosts: Vec<Option<&'a fleet_identity::HostId>>,
}

impl<'a> LedgerIndex<'a> {
    pub(super) fn new(ledger: &'a [InstanceRecord]) -> Self {
        let mut ids = KeyTable::with_capacity(ledger.len(), 48);
        let mut hosts = Vec::with_capacity(ledger.len());
        for record in ledger {
            let (at, new) = ids.number(Some(record.client_instance_id.as_str()));
            if new {
                hosts.push(None);
            }
            // An ID recorded twice takes the host of its last record that names one.
            if let Some(host) = &record.host_id {
                hosts[at] = Some(host);
            }
        }
        Self { ids, hosts }
    }

    /// The host the ledger records for the instance ID spelled `id`.
    pub(super) fn host(&self, id: &str) -> Option<&'a fleet_identity::HostId> {
        self.ids.find(Some(id)).and_then(|at| self.hosts[at])
    }
}

impl Ledger for LedgerIndex<'_> {
    fn holds(&self, id: &ClientInstanceId) -> bool {
        // IDs are equal exactly when their text is: the rest is parsed from it.
        self.ids.find(Some(id.as_str())).is_some()
    }
}
