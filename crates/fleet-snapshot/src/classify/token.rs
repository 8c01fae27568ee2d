//! The consistency token: a hash of every row and judgement the snapshot rests on.

use fleet_identity::Timestamp;
use fleet_model::WorkerRow;

/// How many rows' shares one chunk of the token holds. The token is the hash of the
/// snapshot's time and of each chunk's hash in order, so a kept token follows a changed
/// row by hashing its chunk again (about 10 KB) and the chunks' hashes (32 bytes each),
/// never the whole fleet's share (1.6 MB at 10 000 rows).
const CHUNK_ROWS: usize = 64;

/// Hashes one chunk of rows' shares.
fn chunk_hash(share: &[u8]) -> [u8; 32] {
    *blake3::hash(share).as_bytes()
}

/// The token of a snapshot at `now` whose chunks hash to `chunks`.
fn token_of(now: Timestamp, chunks: impl IntoIterator<Item = [u8; 32]>) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(now.to_string().as_bytes());
    for chunk in chunks {
        hasher.update(&chunk);
    }
    format!("b3:{}", &hasher.finalize().to_hex().as_str()[..32])
}

/// The consistency token, fed one row at a time: each chunk of [`CHUNK_ROWS`] rows'
/// shares is hashed as it fills.
pub(super) struct Token {
    now: Timestamp,
    chunk: Vec<u8>,
    rows: usize,
    chunks: Vec<[u8; 32]>,
}

impl Token {
    pub(super) fn new(now: Timestamp) -> Self {
        Self { now, chunk: Vec::with_capacity(CHUNK_ROWS * 256), rows: 0, chunks: Vec::new() }
    }

    pub(super) fn row(&mut self, row: &WorkerRow) {
        push_row(&mut self.chunk, row);
        self.rows += 1;
        if self.rows.is_multiple_of(CHUNK_ROWS) {
            self.chunks.push(chunk_hash(&self.chunk));
            self.chunk.clear();
        }
    }

    pub(super) fn finish(mut self) -> String {
        if !self.rows.is_multiple_of(CHUNK_ROWS) {
            self.chunks.push(chunk_hash(&self.chunk));
        }
        token_of(self.now, self.chunks)
    }
}

/// A length prefix keeps field boundaries unambiguous; absent differs from empty.
fn push_field(buf: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        Some(v) => {
            buf.extend_from_slice(&(v.len() as u64).to_le_bytes());
            buf.extend_from_slice(v);
        }
        None => buf.extend_from_slice(&u64::MAX.to_le_bytes()),
    }
}

/// Appends one row's share of the token to `buf`.
fn push_row(buf: &mut Vec<u8>, row: &WorkerRow) {
    push_field(buf, Some(row.worker_identity.as_str().as_bytes()));
    push_field(buf, row.client_instance_id.as_deref().map(str::as_bytes));
    push_field(buf, Some(row.status.as_str().as_bytes()));
    push_field(buf, row.last_heartbeat_at.as_deref().map(str::as_bytes));
    // The epoch in decimal, written from the right.
    let mut digits = [0u8; 20];
    let epoch = row.fencing_epoch.map(|mut e| {
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (e % 10) as u8;
            e /= 10;
            if e == 0 {
                break at;
            }
        }
    });
    push_field(buf, epoch.map(|at| &digits[at..]));
    push_field(buf, row.generation_id.as_ref().map(|g| g.as_str().as_bytes()));
}

/// The rows' share of a snapshot's consistency token, kept: while the rows stay the
/// same, the token of a snapshot of them at another time is one hash of the chunks'
/// hashes behind that time, with no pass over the rows; a row changed is one chunk
/// hashed again.
#[derive(Debug, Clone, Default)]
pub struct TokenRows {
    /// Every row's share, in the order a snapshot takes the rows.
    buf: Vec<u8>,
    /// Where each row's share ends in `buf`.
    ends: Vec<usize>,
    /// Whether the rows were given in identity order with no identity twice: only then
    /// is a row's share found by its place among the rows (a changed row is followed).
    in_order: bool,
    /// Each chunk's hash.
    chunks: Vec<[u8; 32]>,
}

impl TokenRows {
    /// The share of `rows`, in the order a snapshot takes them.
    pub fn of(rows: &[WorkerRow]) -> Self {
        let mut buf = Vec::with_capacity(rows.len() * 160);
        let mut ends = Vec::with_capacity(rows.len());
        let in_order = rows.windows(2).all(|w| w[0].worker_identity < w[1].worker_identity);
        let mut push = |row: &WorkerRow| {
            push_row(&mut buf, row);
            ends.push(buf.len());
        };
        if in_order {
            rows.iter().for_each(&mut push);
        } else {
            super::ordered(rows).into_iter().for_each(&mut push);
        }
        let mut kept = Self { buf, ends, in_order, chunks: Vec::new() };
        kept.chunks = (0..rows.len().div_ceil(CHUNK_ROWS)).map(|c| chunk_hash(kept.chunk(c))).collect();
        kept
    }

    /// The shares of chunk `c`.
    fn chunk(&self, c: usize) -> &[u8] {
        let first = c * CHUNK_ROWS;
        let last = (first + CHUNK_ROWS).min(self.ends.len()) - 1;
        let start = if first == 0 { 0 } else { self.ends[first - 1] };
        &self.buf[start..self.ends[last]]
    }

    /// Brings the share up to date with `rows`, the rows it was made of but for those
    /// at `places`, which changed. A row whose share keeps its length (a heartbeat
    /// written in the same format) is written over in place and its chunk hashed again;
    /// otherwise the share is made again.
    pub fn update(&mut self, rows: &[WorkerRow], places: &[usize]) {
        let mut share = Vec::with_capacity(256);
        let mut touched = Vec::with_capacity(places.len());
        for &i in places {
            if !self.in_order || self.ends.len() != rows.len() || i >= rows.len() {
                return *self = Self::of(rows);
            }
            let span = (if i == 0 { 0 } else { self.ends[i - 1] })..self.ends[i];
            share.clear();
            push_row(&mut share, &rows[i]);
            if share.len() != span.len() {
                return *self = Self::of(rows);
            }
            self.buf[span].copy_from_slice(&share);
            touched.push(i / CHUNK_ROWS);
        }
        touched.sort_unstable();
        touched.dedup();
        for c in touched {
            self.chunks[c] = chunk_hash(self.chunk(c));
        }
    }

    /// The consistency token a snapshot of these rows taken at `now` carries.
    pub fn token_at(&self, now: Timestamp) -> String {
        token_of(now, self.chunks.iter().copied())
    }
}
