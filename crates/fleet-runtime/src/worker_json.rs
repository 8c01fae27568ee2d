//! Each worker's JSON as a long-lived reader last wrote it, kept for its next snapshot.
//!
//! A 10 000-worker snapshot is some 4 MB of JSON, nine tenths of it the `workers` list,
//! and writing that list (escaping every string, formatting every timestamp) was most
//! of an MCP server's work per call. A worker's JSON is its row's fields and what the
//! snapshot judged of it (state, expiry, probe verdict): while the rows a reader keeps
//! stay the same, a worker judged the same as last time is written from the bytes kept.

use fleet_identity::Timestamp;
use fleet_registry::{ProcessVerdict, WorkerRow};
use fleet_snapshot::{FleetSnapshot, WorkerState, WorkerView};
use serde::Serialize;
use serde_json::value::RawValue;

/// What a worker's JSON holds besides its row.
#[derive(Debug, Clone, Copy, PartialEq)]
struct WorkerVerdict {
    state: WorkerState,
    expires_at: Option<Timestamp>,
    liveness: Option<ProcessVerdict>,
}

impl WorkerVerdict {
    fn of(view: &WorkerView<'_>) -> Self {
        // Every field named: a field added to the view must be weighed here.
        let WorkerView { row: _, state, expires_at, heartbeat: _, liveness } = *view;
        Self { state, expires_at, liveness }
    }
}

/// One worker's JSON, and the judgement it was written with.
#[derive(Debug)]
struct Kept {
    judged: WorkerVerdict,
    json: Box<RawValue>,
}

/// The JSON of each worker row, by the row's place in the rows a reader keeps. It must
/// be told whenever those rows change ([`WorkerJson::follow`]).
#[derive(Debug, Default)]
pub(crate) struct WorkerJson {
    kept: Vec<Option<Kept>>,
    /// The length of the last snapshot written, to size the next one's buffer.
    last_len: usize,
}

impl WorkerJson {
    /// The reader's rows changed: `origins` gives, for each row it now holds, the place
    /// that row held before when it is the same row, unchanged. Keeps the JSON of those
    /// rows, at their new places, and forgets the rest.
    pub(crate) fn follow(&mut self, origins: &[Option<usize>]) {
        if self.kept.iter().all(Option::is_none) {
            self.kept.clear();
            return;
        }
        let mut old = std::mem::take(&mut self.kept);
        self.kept = origins.iter().map(|origin| old.get_mut((*origin)?)?.take()).collect();
    }

    /// Appends `snapshot`, taken of `rows` (the rows last given to
    /// [`WorkerJson::follow`]), to `out` as JSON: the same bytes as
    /// `serde_json::to_writer(out, snapshot)`.
    pub(crate) fn write(
        &mut self,
        rows: &[WorkerRow],
        snapshot: &FleetSnapshot<'_>,
        out: &mut Vec<u8>,
    ) -> serde_json::Result<()> {
        self.kept.resize_with(rows.len(), || None);
        // Each view's row is found once: its kept JSON is brought up to date here and
        // is then exactly that view's.
        let mut places = Vec::with_capacity(snapshot.workers.len());
        for view in &snapshot.workers {
            let place = place(rows, view.row);
            if let Some(i) = place {
                let judged = WorkerVerdict::of(view);
                if self.kept[i].as_ref().is_none_or(|kept| kept.judged != judged) {
                    self.kept[i] = Some(Kept { judged, json: serde_json::value::to_raw_value(view)? });
                }
            }
            places.push(place);
        }
        let json = places.iter().map(|place| Some(&*self.kept.get((*place)?)?.as_ref()?.json)).collect();
        let workers = Workers { views: &snapshot.workers, json };
        out.reserve(self.last_len);
        let start = out.len();
        serde_json::to_writer(&mut *out, &snapshot.with_workers(&workers))?;
        self.last_len = out.len() - start;
        Ok(())
    }
}

/// The place of `row` in `rows`, if it is one of them (not a copy).
fn place(rows: &[WorkerRow], row: &WorkerRow) -> Option<usize> {
    let offset = std::ptr::from_ref(row).addr().checked_sub(rows.as_ptr().addr())?;
    let i = offset / size_of::<WorkerRow>();
    rows.get(i).filter(|at| std::ptr::eq(*at, row)).map(|_| i)
}

/// A snapshot's workers list: each worker from its JSON where one was kept (a view
/// whose row is not among the reader's is serialised afresh).
struct Workers<'a, 'rows> {
    views: &'a [WorkerView<'rows>],
    /// By view, its kept JSON.
    json: Vec<Option<&'a RawValue>>,
}

impl Serialize for Workers<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.views.len()))?;
        for (view, json) in self.views.iter().zip(&self.json) {
            match json {
                Some(json) => seq.serialize_element(json)?,
                None => seq.serialize_element(view)?,
            }
        }
        seq.end()
    }
}
