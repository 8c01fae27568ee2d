//! Reading many worker rows on two threads: this one steps SQLite and copies each row's
//! values out in batches, another checks and decodes them ([`columns::read_worker`]).
//! Decoding (every identity, token and time checked, every value allocated) costs about
//! what SQLite's own reading does, so on a machine with a core to spare a whole read of
//! a large registry waits for the slower of the two rather than for both.

use std::sync::mpsc;

use fleet_registry::columns::{self, RowColumns};
use fleet_registry::{StoreError, StoreErrorKind, WorkerRow};
use rusqlite::types::ValueRef;

use crate::columns::{integer_of, text_of};
use crate::map_error;

/// Below this many rows a read decodes each row as it steps: a thread and its batches
/// cost more than they save.
pub(crate) const FROM_ROWS: usize = 4096;

/// Rows per batch handed from one thread to the other.
const BATCH_ROWS: usize = 512;

/// One value copied out of SQLite: a number, or the span of its bytes in the batch.
#[derive(Debug, Clone, Copy)]
enum Cell {
    Null,
    Integer(i64),
    Real(f64),
    Text(usize, usize),
    Blob(usize, usize),
}

/// Rows copied out of SQLite, `width` cells each, their text and blobs side by side.
#[derive(Debug, Default)]
struct Batch {
    width: usize,
    bytes: Vec<u8>,
    cells: Vec<Cell>,
}

impl Batch {
    fn rows(&self) -> usize {
        self.cells.len().checked_div(self.width).unwrap_or(0)
    }

    fn push(&mut self, row: &rusqlite::Row<'_>) -> rusqlite::Result<()> {
        for idx in 0..self.width {
            let mut span = |bytes: &[u8]| {
                let start = self.bytes.len();
                self.bytes.extend_from_slice(bytes);
                (start, self.bytes.len())
            };
            let cell = match row.get_ref(idx)? {
                ValueRef::Null => Cell::Null,
                ValueRef::Integer(n) => Cell::Integer(n),
                ValueRef::Real(f) => Cell::Real(f),
                ValueRef::Text(t) => {
                    let (start, end) = span(t);
                    Cell::Text(start, end)
                }
                ValueRef::Blob(b) => {
                    let (start, end) = span(b);
                    Cell::Blob(start, end)
                }
            };
            self.cells.push(cell);
        }
        Ok(())
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.cells.clear();
    }
}

/// Row `row` of a batch, read as SQLite's own row is.
struct BatchRow<'b> {
    batch: &'b Batch,
    row: usize,
}

impl BatchRow<'_> {
    fn value(&self, idx: usize) -> Result<ValueRef<'_>, String> {
        let at = self.row * self.batch.width + idx;
        let cell = self.batch.cells.get(at).filter(|_| idx < self.batch.width);
        let bytes = |start: usize, end: usize| self.batch.bytes.get(start..end).unwrap_or_default();
        Ok(match cell.ok_or_else(|| format!("no column {idx}"))? {
            Cell::Null => ValueRef::Null,
            Cell::Integer(n) => ValueRef::Integer(*n),
            Cell::Real(f) => ValueRef::Real(*f),
            Cell::Text(start, end) => ValueRef::Text(bytes(*start, *end)),
            Cell::Blob(start, end) => ValueRef::Blob(bytes(*start, *end)),
        })
    }
}

impl RowColumns for BatchRow<'_> {
    fn text(&self, idx: usize) -> Result<Option<&str>, String> {
        text_of(self.value(idx)?)
    }

    fn integer(&self, idx: usize) -> Result<Option<i64>, String> {
        integer_of(self.value(idx)?)
    }
}

/// Reads the rows `stmt` returns for `params` (about `count` of them) as worker rows,
/// decoding on a second thread; in order, or the first error. Without a second thread
/// (the process may start no more), the rows are decoded here.
pub(crate) fn read_workers(
    stmt: &mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
    count: usize,
) -> Result<Vec<WorkerRow>, StoreError> {
    let width = stmt.column_count();
    std::thread::scope(|scope| {
        let (full, to_decode) = mpsc::sync_channel::<Batch>(4);
        let (emptied, to_refill) = mpsc::channel::<Batch>();
        let decoder =
            std::thread::Builder::new().name("fleet-decode".into()).spawn_scoped(scope, move || {
                let mut out = Vec::with_capacity(count);
                for mut batch in to_decode {
                    for row in 0..batch.rows() {
                        // An error returns, and the reader's next batch finds no one to take it.
                        out.push(columns::read_worker(&BatchRow { batch: &batch, row })?);
                    }
                    batch.clear();
                    let _ = emptied.send(batch);
                }
                Ok::<_, StoreError>(out)
            });
        let Ok(decoder) = decoder else {
            let rows = stmt.query_map(params, crate::columns::read_worker).map_err(map_error)?;
            return rows.map(|row| row.map_err(map_error).and_then(|row| row)).collect();
        };
        let stepped = (|| {
            let mut rows = stmt.query(params).map_err(map_error)?;
            let mut batch = Batch { width, ..Batch::default() };
            while let Some(row) = rows.next().map_err(map_error)? {
                batch.push(row).map_err(map_error)?;
                if batch.rows() == BATCH_ROWS {
                    let next = to_refill.try_recv().unwrap_or_else(|_| Batch { width, ..Batch::default() });
                    if full.send(std::mem::replace(&mut batch, next)).is_err() {
                        // The decoder stopped at a bad row: its error is the answer.
                        return Ok(());
                    }
                }
            }
            let _ = full.send(batch);
            Ok::<_, StoreError>(())
        })();
        drop(full);
        let decoded = decoder.join().map_err(|_| {
            StoreError::new(StoreErrorKind::Unavailable, "the thread decoding registry rows failed")
        })?;
        stepped?;
        decoded
    })
}
