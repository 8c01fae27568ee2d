//! The consistency token: a hash of every row and judgement the snapshot rests on.

use fleet_identity::Timestamp;
use fleet_model::WorkerRow;

/// The consistency token, fed one row at a time. The fields go through one buffer,
/// hashed a block at a time: the same bytes as hashing each field alone, without a
/// hasher call per field.
pub(super) struct Token {
    pub(super) hasher: blake3::Hasher,
    pub(super) buf: Vec<u8>,
}

impl Token {
    const BLOCK: usize = 64 * 1024;

    pub(super) fn new(now: Timestamp) -> Self {
        let mut buf = Vec::with_capacity(Self::BLOCK + 1024);
        buf.extend_from_slice(now.to_string().as_bytes());
        Self { hasher: blake3::Hasher::new(), buf }
    }

    pub(super) fn row(&mut self, row: &WorkerRow) {
        push_row(&mut self.buf, row);
        if self.buf.len() >= Self::BLOCK {
            self.hasher.update(&self.buf);
            self.buf.clear();
        }
    }

    pub(super) fn finish(mut self) -> String {
        self.hasher.update(&self.buf);
        format!("b3:{}", &self.hasher.finalize().to_hex().as_str()[..32])
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
/// same, the token of a snapshot of them at another time is one hash of these bytes
/// behind that time, with no pass over the rows.
#[derive(Debug, Clone, Default)]
pub struct TokenRows {
    buf: Vec<u8>,
    /// Where each row's share ends in `buf`, when the rows were given in identity
    /// order with no identity twice (`None`: a moved row's share cannot be found).
    ends: Option<Vec<usize>>,
}

impl TokenRows {
    /// The share of `rows`, in the order a snapshot takes them.
    pub fn of(rows: &[WorkerRow]) -> Self {
        let mut buf = Vec::with_capacity(rows.len() * 160);
        let in_order = rows.windows(2).all(|w| w[0].worker_identity < w[1].worker_identity);
        if !in_order {
            for row in super::ordered(rows) {
                push_row(&mut buf, row);
            }
            return Self { buf, ends: None };
        }
        let mut ends = Vec::with_capacity(rows.len());
        for row in rows {
            push_row(&mut buf, row);
            ends.push(buf.len());
        }
        Self { buf, ends: Some(ends) }
    }

    /// Brings the share up to date with `rows`, the rows it was made of but for those
    /// at `places`, which changed. A row whose share keeps its length (a heartbeat
    /// written in the same format) is written over in place; otherwise the share is
    /// made again.
    pub fn update(&mut self, rows: &[WorkerRow], places: &[usize]) {
        let mut share = Vec::with_capacity(256);
        for &i in places {
            let span = match &self.ends {
                Some(ends) if ends.len() == rows.len() && i < rows.len() => {
                    (if i == 0 { 0 } else { ends[i - 1] })..ends[i]
                }
                _ => return *self = Self::of(rows),
            };
            share.clear();
            push_row(&mut share, &rows[i]);
            if share.len() != span.len() {
                return *self = Self::of(rows);
            }
            self.buf[span].copy_from_slice(&share);
        }
    }

    /// The consistency token a snapshot of these rows taken at `now` carries.
    pub fn token_at(&self, now: Timestamp) -> String {
        let mut hasher = blake3::Hasher::new();
        hasher.update(now.to_string().as_bytes());
        hasher.update(&self.buf);
        format!("b3:{}", &hasher.finalize().to_hex().as_str()[..32])
    }
}
