//! The whole registry as one JSON document, for backup and restore: the ledger, the
//! worker rows, the leases (initialization versions, connector bindings, workflow
//! leases) and the lease audit log. A restore from it loses nothing the registry knew.

use std::collections::{HashMap, HashSet};

use fleet_identity::{ClientInstanceId, WorkerIdentity};
use fleet_lease::LeaseRecord;
use fleet_model::{DumpError, InstanceRecord, RegistryDump, WorkerRow, numbered};
use serde::Serialize;

use crate::error::StoreError;
use crate::records::{AuditEntry, lease_scope, slot_scope};
use crate::store::{AuditQuery, ImportSummary, Tx};

/// Every table of a registry.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RegistryBackup {
    /// The ledger and the worker rows (what [`RegistryDump`] holds).
    #[serde(flatten)]
    pub registry: RegistryDump,
    /// Every lease row.
    pub leases: Vec<LeaseRecord>,
    /// The lease audit log, in order.
    pub lease_audit_log: Vec<AuditEntry>,
    /// The highest fencing epoch ever handed out in each scope (a lease key, a worker
    /// slot), which no row may show any longer (pruned, released): a registry restored
    /// from this backup never hands one of them out again.
    pub fencing_high_water: Vec<HighWater>,
}

/// The highest fencing epoch ever handed out in one scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HighWater {
    /// The scope: `lease KEY`, or `slot INSTANCE NAMESPACE`.
    pub scope: String,
    /// The epoch.
    pub epoch: u64,
}

impl RegistryBackup {
    /// Reads a backup, or anything [`RegistryDump::from_json`] reads (an older export
    /// without leases, a bare array of worker rows): the missing tables are empty.
    pub fn from_json(text: &str) -> Result<Self, DumpError> {
        let value = serde_json::from_str(text).map_err(|e| DumpError::new(format!("not valid JSON: {e}")))?;
        Self::from_value(value)
    }

    /// [`RegistryBackup::from_json`] of JSON already parsed (a file read as it streams in).
    pub fn from_value(value: serde_json::Value) -> Result<Self, DumpError> {
        let serde_json::Value::Object(mut map) = value else {
            return Ok(Self { registry: RegistryDump::from_value(value)?, ..Self::default() });
        };
        let table = |map: &mut serde_json::Map<String, serde_json::Value>, key: &str| {
            map.remove(key).unwrap_or_else(|| serde_json::Value::Array(Vec::new()))
        };
        let leases: Vec<LeaseRecord> = numbered(table(&mut map, "leases"), "leases")?;
        let lease_audit_log: Vec<AuditEntry> =
            numbered(table(&mut map, "lease_audit_log"), "lease_audit_log")?;
        let fencing_high_water: Vec<HighWater> =
            numbered(table(&mut map, "fencing_high_water"), "fencing_high_water")?;
        for (i, lease) in leases.iter().enumerate() {
            lease.check().map_err(|e| DumpError::new(format!("leases[{i}]: {e}")))?;
        }
        for (i, entry) in lease_audit_log.iter().enumerate() {
            entry.check().map_err(|e| DumpError::new(format!("lease_audit_log[{i}]: {e}")))?;
        }
        let registry = RegistryDump::from_value(serde_json::Value::Object(map))?;
        Ok(Self { registry, leases, lease_audit_log, fencing_high_water })
    }

    /// The backup as pretty JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain data to a string cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// Why a restore failed: its input (a bad row, not JSON: exit 2 at the CLI, naming the
/// file), or the registry (a conflict, a store that cannot be written).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// The input is not JSON (cut short, or not JSON at all).
    #[error("not valid JSON: {0}")]
    NotJson(serde_json::Error),
    /// The input is JSON but not a backup the registry can take.
    #[error("{0}")]
    Input(#[from] DumpError),
    /// The registry refused or failed the write.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<RestoreError> for StoreError {
    fn from(e: RestoreError) -> Self {
        match e {
            RestoreError::Store(e) => e,
            other => StoreError::invalid(other.to_string()),
        }
    }
}

/// Rows written at a time while a restore streams in: memory stays flat at any size.
const BATCH: usize = 10_000;

/// The tables of a backup, as they are named in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Instances,
    Workers,
    Leases,
    Audit,
    HighWater,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Self::Instances => "instances",
            Self::Workers => "worker_registrations",
            Self::Leases => "leases",
            Self::Audit => "lease_audit_log",
            Self::HighWater => "fencing_high_water",
        }
    }

    fn named(name: &str) -> Option<Self> {
        [Self::Instances, Self::Workers, Self::Leases, Self::Audit, Self::HighWater]
            .into_iter()
            .find(|t| t.name() == name)
    }
}

/// Writes a backup's rows inside one transaction as they come, in batches, with every
/// check a whole-file restore makes: the one path for a backup in memory and one read
/// as it streams in.
pub(crate) struct Restorer<'t> {
    tx: &'t mut dyn Tx,
    summary: ImportSummary,
    /// The ledger as it was, read at the first instance of the backup.
    held: Option<HashMap<ClientInstanceId, InstanceRecord>>,
    fresh: Vec<InstanceRecord>,
    fresh_at: HashMap<ClientInstanceId, usize>,
    seen_workers: HashSet<WorkerIdentity>,
    workers: Vec<WorkerRow>,
    audit: Vec<AuditEntry>,
    last_audit_id: Option<i64>,
    /// A failure of the registry met inside the parser, which can carry only text.
    failure: Option<RestoreError>,
    /// The bytes read since the last row ended, when reading from a stream.
    row_bytes: std::rc::Rc<std::cell::Cell<u64>>,
}

/// The most one row of a backup may take as JSON text. A worker row, a lease or an
/// audit entry takes a few KB; a larger one (a launch id of 200 MB) is refused as it
/// streams in, before it is held whole.
pub const MAX_ROW_BYTES: u64 = 1 << 20;

/// A reader that fails once more than [`MAX_ROW_BYTES`] have passed since the last row
/// ended (as the restorer says by resetting `since_row`), and says so in `over`.
struct RowBounded<R> {
    inner: R,
    since_row: std::rc::Rc<std::cell::Cell<u64>>,
    over: std::rc::Rc<std::cell::Cell<bool>>,
}

impl<R: std::io::Read> std::io::Read for RowBounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let since = self.since_row.get() + n as u64;
        self.since_row.set(since);
        if since > MAX_ROW_BYTES {
            self.over.set(true);
            return Err(std::io::Error::other("a row is larger than its limit"));
        }
        Ok(n)
    }
}

impl<'t> Restorer<'t> {
    pub(crate) fn new(tx: &'t mut dyn Tx) -> Self {
        Self {
            tx,
            summary: ImportSummary::default(),
            held: None,
            fresh: Vec::new(),
            fresh_at: HashMap::new(),
            seen_workers: HashSet::new(),
            workers: Vec::new(),
            audit: Vec::new(),
            last_audit_id: None,
            failure: None,
            row_bytes: std::rc::Rc::default(),
        }
    }

    /// A ledger entry: new, the same as one held (counted unchanged), or a conflict.
    pub(crate) fn instance(&mut self, i: usize, record: InstanceRecord) -> Result<(), RestoreError> {
        record.check().map_err(|e| DumpError::new(format!("instances[{i}]: {e}")))?;
        if self.held.is_none() {
            let held = self.tx.instances()?.into_iter().map(|r| (r.client_instance_id.clone(), r)).collect();
            self.held = Some(held);
        }
        let held = self.held.as_ref().and_then(|h| h.get(&record.client_instance_id));
        match held.or_else(|| self.fresh_at.get(&record.client_instance_id).map(|&at| &self.fresh[at])) {
            Some(existing) if *existing == record => self.summary.instances_unchanged += 1,
            Some(_) => {
                return Err(StoreError::conflict(format!(
                    "instance {} is already recorded with other details",
                    record.client_instance_id
                ))
                .into());
            }
            None => {
                self.fresh_at.insert(record.client_instance_id.clone(), self.fresh.len());
                self.fresh.push(record);
            }
        }
        Ok(())
    }

    /// A worker row, written with its batch; imported epochs count as handed out.
    pub(crate) fn worker(&mut self, row: WorkerRow) -> Result<(), RestoreError> {
        if !self.seen_workers.insert(row.worker_identity.clone()) {
            return Err(StoreError::invalid(format!(
                "worker {} appears twice in the import",
                row.worker_identity
            ))
            .into());
        }
        self.workers.push(row);
        if self.workers.len() >= BATCH {
            self.flush_workers()?;
        }
        Ok(())
    }

    fn flush_workers(&mut self) -> Result<(), StoreError> {
        self.flush_instances()?;
        self.tx.insert_workers(&self.workers)?;
        // Each slot once, at its highest epoch in the batch.
        let mut marks: HashMap<String, u64> = HashMap::new();
        for row in &self.workers {
            if let (Some(instance), Some(epoch @ 1..)) =
                (row.client_instance_id.as_deref(), row.fencing_epoch)
            {
                let mark = marks.entry(slot_scope(instance, row.namespace)).or_default();
                *mark = (*mark).max(epoch);
            }
        }
        let mut marks: Vec<(String, u64)> = marks.into_iter().collect();
        marks.sort_unstable();
        self.tx.raise_high_waters(&marks)?;
        self.summary.workers += self.workers.len();
        self.workers.clear();
        Ok(())
    }

    fn flush_instances(&mut self) -> Result<(), StoreError> {
        if !self.fresh.is_empty() {
            self.tx.insert_instances(&self.fresh)?;
            self.summary.instances += self.fresh.len();
            self.fresh.clear();
        }
        Ok(())
    }

    /// A lease row: written unless the registry holds the same row; another row under
    /// its key is a conflict. Its epoch counts as handed out.
    pub(crate) fn lease(&mut self, i: usize, lease: LeaseRecord) -> Result<(), RestoreError> {
        lease.check().map_err(|e| DumpError::new(format!("leases[{i}]: {e}")))?;
        match self.tx.lease(&lease.lease_key)? {
            Some(held) if held == lease => {}
            Some(_) => {
                return Err(StoreError::conflict(format!(
                    "lease {} is already held with other details",
                    lease.lease_key
                ))
                .into());
            }
            None => {
                self.tx.put_lease(None, &lease)?;
                self.tx.raise_high_water(&lease_scope(&lease.lease_key), lease.fencing_epoch.get())?;
                self.summary.leases += 1;
            }
        }
        Ok(())
    }

    /// An audit entry, appended in log order, and only to a registry whose log is
    /// empty: two histories are never interleaved.
    pub(crate) fn audit(&mut self, i: usize, entry: AuditEntry) -> Result<(), RestoreError> {
        entry.check().map_err(|e| DumpError::new(format!("lease_audit_log[{i}]: {e}")))?;
        match self.last_audit_id {
            None => {
                let any = AuditQuery {
                    key: None,
                    since: None,
                    until: None,
                    after: 0,
                    newest_first: false,
                    limit: 1,
                };
                if !self.tx.audit_page(&any)?.is_empty() {
                    return Err(StoreError::conflict(
                        "the registry already has a lease audit log; restore a backup's log into a fresh registry",
                    )
                    .into());
                }
            }
            Some(last) if entry.id <= last => {
                return Err(DumpError::new(format!(
                    "lease_audit_log[{i}]: id {} is not after {last}: the log must be in order",
                    entry.id
                ))
                .into());
            }
            Some(_) => {}
        }
        self.last_audit_id = Some(entry.id);
        self.audit.push(entry);
        if self.audit.len() >= BATCH {
            self.flush_audit()?;
        }
        Ok(())
    }

    fn flush_audit(&mut self) -> Result<(), StoreError> {
        self.tx.append_audits(&self.audit)?;
        self.summary.audit_entries += self.audit.len();
        self.audit.clear();
        Ok(())
    }

    /// Writes what is still batched; the summary of everything written.
    /// A fencing high-water mark: the scope's mark is raised to it, never lowered.
    pub(crate) fn high_water(&mut self, mark: HighWater) -> Result<(), RestoreError> {
        if mark.epoch == 0 || mark.scope.is_empty() || mark.scope.len() > 4096 {
            return Err(DumpError::new(format!(
                "fencing_high_water: {mark:?} is not a scope's high-water mark"
            ))
            .into());
        }
        self.tx.raise_high_water(&mark.scope, mark.epoch)?;
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<ImportSummary, StoreError> {
        self.flush_instances()?;
        self.flush_workers()?;
        self.flush_audit()?;
        Ok(self.summary)
    }

    /// One row of `table`, the `i`th, as its JSON text: read straight into its type,
    /// never through a JSON value, whose map would keep the last of a field named twice,
    /// so a field named twice is refused.
    fn row(&mut self, table: Table, i: usize, raw: &serde_json::value::RawValue) -> Result<(), RestoreError> {
        fn typed<'a, T: serde::Deserialize<'a>>(
            table: Table,
            i: usize,
            raw: &'a serde_json::value::RawValue,
        ) -> Result<T, DumpError> {
            serde_json::from_str(raw.get()).map_err(|e| DumpError::new(format!("{}[{i}]: {e}", table.name())))
        }
        match table {
            Table::Instances => self.instance(i, typed(table, i, raw)?),
            Table::Workers => self.worker(typed(table, i, raw)?),
            Table::Leases => self.lease(i, typed(table, i, raw)?),
            Table::Audit => self.audit(i, typed(table, i, raw)?),
            Table::HighWater => self.high_water(typed(table, i, raw)?),
        }
    }

    /// Reads a backup (or anything [`RegistryBackup::from_json`] reads) from `reader`,
    /// writing its rows as they come.
    pub(crate) fn stream(mut self, reader: impl std::io::Read) -> Result<ImportSummary, RestoreError> {
        let over = std::rc::Rc::new(std::cell::Cell::new(false));
        let bounded = RowBounded {
            inner: reader,
            since_row: std::rc::Rc::clone(&self.row_bytes),
            over: std::rc::Rc::clone(&over),
        };
        let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(bounded));
        let parsed =
            serde::Deserializer::deserialize_any(&mut de, Whole { r: &mut self }).and_then(|()| de.end());
        if let Some(failure) = self.failure.take() {
            return Err(failure);
        }
        if over.get() {
            return Err(DumpError::new(format!(
                "a row is larger than {MAX_ROW_BYTES} bytes, more than any row of a registry takes"
            ))
            .into());
        }
        parsed.map_err(|e| match e.classify() {
            serde_json::error::Category::Io => {
                StoreError::new(crate::StoreErrorKind::Unavailable, format!("cannot read the input: {e}"))
                    .into()
            }
            serde_json::error::Category::Data => {
                RestoreError::Input(DumpError::new(format!("not a registry backup: {e}")))
            }
            _ => RestoreError::NotJson(e),
        })?;
        Ok(self.finish()?)
    }
}

/// The whole document: an object of tables, or a bare array of worker rows.
struct Whole<'a, 't> {
    r: &'a mut Restorer<'t>,
}

impl<'de> serde::de::Visitor<'de> for Whole<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object of tables (instances, worker_registrations, leases, lease_audit_log) or an array of rows")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            let Some(table) = Table::named(&key) else {
                return Err(serde::de::Error::custom(format!("unknown table {key:?}")));
            };
            map.next_value_seed(Rows { r: &mut *self.r, table })?;
        }
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        serde::de::Visitor::visit_seq(Rows { r: self.r, table: Table::Workers }, seq)
    }
}

/// One table's array, read a row at a time.
struct Rows<'a, 't> {
    r: &'a mut Restorer<'t>,
    table: Table,
}

impl<'de> serde::de::DeserializeSeed<'de> for Rows<'_, '_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Rows<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} as an array of rows", self.table.name())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while let Some(raw) = seq.next_element::<Box<serde_json::value::RawValue>>()? {
            if let Err(e) = self.r.row(self.table, i, &raw) {
                let message = e.to_string();
                self.r.failure = Some(e);
                return Err(serde::de::Error::custom(message));
            }
            self.r.row_bytes.set(0);
            i += 1;
        }
        Ok(())
    }
}
