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

    /// A length prefix keeps field boundaries unambiguous; absent differs from empty.
    pub(super) fn field(&mut self, value: Option<&[u8]>) {
        match value {
            Some(v) => {
                self.buf.extend_from_slice(&(v.len() as u64).to_le_bytes());
                self.buf.extend_from_slice(v);
            }
            None => self.buf.extend_from_slice(&u64::MAX.to_le_bytes()),
        }
    }

    pub(super) fn row(&mut self, row: &WorkerRow) {
        self.field(Some(row.worker_identity.as_str().as_bytes()));
        self.field(row.client_instance_id.as_deref().map(str::as_bytes));
        self.field(Some(row.status.as_str().as_bytes()));
        self.field(row.last_heartbeat_at.as_deref().map(str::as_bytes));
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
        self.field(epoch.map(|at| &digits[at..]));
        self.field(row.generation_id.as_ref().map(|g| g.as_str().as_bytes()));
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
