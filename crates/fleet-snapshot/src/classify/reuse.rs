//! The reuse engine: two active rows that share a session, generation, process, pid,
//! slot or token are one finding. Keys are hashed while the pass reads the rows, packed
//! with the row's number, prefiltered by a bit table and radix-sorted, and only rows
//! whose hashes repeat are grouped by the keys themselves.

use std::collections::BTreeSet;

use fleet_identity::Namespace;
use fleet_model::WorkerRow;
use rustc_hash::FxBuildHasher;
use serde::Serialize;

use crate::findings::{Finding, FindingCode};

// The keys under which two active rows are one reuse finding (the worker identity is
// the seventh: rows are ordered by it, so rows that share one are neighbours).
pub(super) fn session_key(r: &WorkerRow) -> Option<&str> {
    r.session_id.as_ref().map(|s| s.as_str())
}

pub(super) fn generation_key(r: &WorkerRow) -> Option<&str> {
    r.generation_id.as_ref().map(|g| g.as_str())
}

pub(super) fn process_key(
    r: &WorkerRow,
) -> Option<(&str, &str, fleet_identity::Pid, fleet_identity::ProcessStartTime)> {
    Some((r.host_id.as_ref()?.as_str(), r.boot_id.as_ref()?.as_str(), r.pid?, r.process_start_time?))
}

pub(super) fn pid_key(r: &WorkerRow) -> Option<(&str, &str, fleet_identity::Pid)> {
    Some((r.host_id.as_ref()?.as_str(), r.boot_id.as_ref()?.as_str(), r.pid?))
}

pub(super) fn slot_key(r: &WorkerRow) -> Option<(&str, Namespace, u64)> {
    Some((r.client_instance_id.as_deref()?, r.namespace, r.fencing_epoch?))
}

pub(super) fn token_key(r: &WorkerRow) -> Option<&str> {
    r.token_fingerprint.as_deref()
}

/// The active rows in identity order, and each reuse key of each row hashed while the
/// row was read: a key's top 32 hash bits above the row's number among `active`.
pub(super) struct ReuseKeys<'rows> {
    pub(super) active: Vec<&'rows WorkerRow>,
    /// The number of each active row's instance ID (see [`KeyTable`]): comparing these
    /// tells rows of two instances apart without reading their IDs again.
    pub(super) instances: Vec<usize>,
    /// Two neighbours among `active` share an identity.
    pub(super) identity_shared: bool,
    /// session, generation, process, pid, slot, token.
    pub(super) hashed: [Vec<u64>; 6],
}

impl<'rows> ReuseKeys<'rows> {
    pub(super) fn with_capacity(rows: usize) -> Self {
        Self {
            active: Vec::with_capacity(rows),
            instances: Vec::with_capacity(rows),
            identity_shared: false,
            hashed: std::array::from_fn(|_| Vec::with_capacity(rows)),
        }
    }

    pub(super) fn push(&mut self, row: &'rows WorkerRow, instance: usize) {
        fn pack(key: Option<impl std::hash::Hash>, at: u64) -> Option<u64> {
            use std::hash::BuildHasher;
            key.map(|k| (FxBuildHasher.hash_one(k) & !u64::from(u32::MAX)) | at)
        }
        // A row number past 32 bits is cut short here; `report_shared` checks every row
        // by its key then, and the numbers are not used.
        let at = u64::from(u32::try_from(self.active.len()).unwrap_or(u32::MAX));
        self.identity_shared |=
            self.active.last().is_some_and(|last| last.worker_identity == row.worker_identity);
        self.active.push(row);
        self.instances.push(instance);
        let keys = [
            pack(session_key(row), at),
            pack(generation_key(row), at),
            pack(process_key(row), at),
            pack(pid_key(row), at),
            pack(slot_key(row), at),
            pack(token_key(row), at),
        ];
        for (list, key) in self.hashed.iter_mut().zip(keys) {
            list.extend(key);
        }
    }

    pub(super) fn report(self, out: &mut Vec<Finding>) {
        // Rows are compared by their numbers among `active`. Any two rows under one key
        // are a finding, whatever else they hold.
        let always = |a: usize, b: usize| a != b;
        let active = self.active.as_slice();
        let instances = self.instances.as_slice();
        // Only active rows are compared: history never makes a live fleet unsafe.
        if self.identity_shared {
            let runs = active.chunk_by(|a, b| a.worker_identity == b.worker_identity);
            for run in runs.filter(|r| r.len() > 1) {
                let shared = run[0].worker_identity.as_str();
                report_group(FindingCode::ReusedWorkerIdentity, "worker identity", shared, run, out);
            }
        }
        let [session, generation, process, pid, slot, token] = self.hashed;
        report_shared(
            active,
            session,
            session_key,
            |a, b| instances[a] != instances[b],
            FindingCode::ReusedSessionIdentity,
            "session across instances",
            out,
        );
        let generation_code = FindingCode::ReusedGenerationIdentity;
        report_shared(active, generation, generation_key, always, generation_code, "generation", out);
        report_shared(
            active,
            process,
            process_key,
            always,
            FindingCode::ReusedProcessIdentity,
            "process",
            out,
        );
        report_shared(
            active,
            pid,
            pid_key,
            |a, b| active[a].process_start_time != active[b].process_start_time,
            FindingCode::ReusedPid,
            "pid number with different start times",
            out,
        );
        let fencing = FindingCode::ReusedFencingIdentity;
        report_shared(active, slot, slot_key, always, fencing, "fencing epoch in one slot", out);
        report_shared(active, token, token_key, always, fencing, "worker token", out);
    }
}

/// Groups `rows` by `key` and reports each group with two rows that `differ` (asked of
/// their places in `rows`).
///
/// `hashed` holds each keyed row's key hash and number (see [`ReuseKeys`]). Of those
/// whose hash may repeat ([`sharing_candidates`]), sorted, runs of equal hashes in which
/// a row differs from the first are marked; only marked rows
/// are then grouped by the keys themselves, so a hash collision can never merge two
/// groups, and a fleet without reuse pays one sort. Equality is transitive, so "some row
/// differs from the first" is "two rows differ".
pub(super) fn report_shared<'rows, K: Ord + Serialize>(
    rows: &[&'rows WorkerRow],
    hashed: Vec<u64>,
    key: impl Fn(&'rows WorkerRow) -> Option<K>,
    differ: impl Fn(usize, usize) -> bool,
    code: FindingCode,
    what: &str,
    out: &mut Vec<Finding>,
) {
    let marked: Vec<usize> = if u32::try_from(rows.len()).is_ok() {
        let hashed = sharing_candidates(hashed);
        let at = |packed: u64| usize::try_from(packed & u64::from(u32::MAX)).unwrap_or(usize::MAX);
        let mut marked = Vec::new();
        for run in hashed.chunk_by(|a, b| a >> 32 == b >> 32).filter(|run| run.len() > 1) {
            let first = at(run[0]);
            if run.iter().any(|&h| differ(first, at(h))) {
                marked.extend(run.iter().map(|&h| at(h)));
            }
        }
        marked.sort_unstable();
        marked
    } else {
        // Row numbers did not fit beside the hashes: every row is checked by its key.
        (0..rows.len()).collect()
    };
    if marked.is_empty() {
        return;
    }
    let mut run: Vec<(K, usize)> = marked.into_iter().filter_map(|i| Some((key(rows[i])?, i))).collect();
    run.sort_by(|a, b| a.0.cmp(&b.0));
    for group in run.chunk_by(|a, b| a.0 == b.0) {
        let first = group[0].1;
        if group.iter().any(|&(_, i)| differ(first, i)) {
            let rows: Vec<&WorkerRow> = group.iter().map(|&(_, i)| rows[i]).collect();
            report_group(code, what, &group[0].0, &rows, out);
        }
    }
}

/// The packed reuse entries (see [`ReuseKeys`]) whose hash another entry may share, in
/// hash order: every entry that shares its hash, and perhaps a few that do not.
///
/// Most keys (generations, processes, tokens) are unique in a healthy fleet, and
/// sorting them all only to find no neighbours cost more than anything else the reuse
/// checks do. One pass marks, a bit per hash prefix, the prefixes seen twice (a table of
/// about sixteen bits per entry, so few unique prefixes collide); only entries under
/// such a prefix are kept and sorted.
pub(super) fn sharing_candidates(mut entries: Vec<u64>) -> Vec<u64> {
    if entries.len() < 4096 {
        entries.sort_unstable();
        return entries;
    }
    // 2^bits prefixes for n entries: bits = log2(n) + 4, so about 16 prefixes an entry,
    // up to two tables of 8 MiB (past four million entries, prefixes collide more).
    let bits = (usize::BITS - entries.len().leading_zeros() + 4).min(26);
    let prefix = |entry: u64| (entry >> (64 - bits)) as usize;
    let words = (1usize << bits) / 64;
    let (mut seen, mut again) = (vec![0u64; words], vec![0u64; words]);
    for &entry in &entries {
        let (word, bit) = (prefix(entry) / 64, 1u64 << (prefix(entry) % 64));
        again[word] |= seen[word] & bit;
        seen[word] |= bit;
    }
    entries.retain(|&entry| again[prefix(entry) / 64] & (1u64 << (prefix(entry) % 64)) != 0);
    sort_by_hash(&mut entries);
    entries
}

/// Orders packed reuse entries (see [`ReuseKeys`]) so that equal hashes are neighbours:
/// a byte of the hash at a time, least significant first (four counting passes, which
/// for a large fleet cost a fraction of a comparison sort); a small list is simply
/// sorted.
pub(super) fn sort_by_hash(entries: &mut Vec<u64>) {
    if entries.len() < 4096 {
        entries.sort_unstable();
        return;
    }
    let mut scratch = vec![0u64; entries.len()];
    for shift in [32, 40, 48, 56] {
        let digit = |entry: u64| usize::from((entry >> shift) as u8);
        // Where each digit's entries start, after a count of each.
        let mut starts = [0usize; 256];
        for &entry in entries.iter() {
            starts[digit(entry)] += 1;
        }
        let mut total = 0;
        for start in &mut starts {
            (*start, total) = (total, total + *start);
        }
        for &entry in entries.iter() {
            let at = &mut starts[digit(entry)];
            scratch[*at] = entry;
            *at += 1;
        }
        std::mem::swap(entries, &mut scratch);
    }
}

/// The finding for `rows`, which share the key `shared`.
pub(super) fn report_group(
    code: FindingCode,
    what: &str,
    shared: impl Serialize,
    rows: &[&WorkerRow],
    out: &mut Vec<Finding>,
) {
    let instances: BTreeSet<Option<&str>> = rows.iter().map(|r| r.client_instance_id.as_deref()).collect();
    let instance = if instances.len() == 1 { instances.into_iter().next().flatten() } else { None };
    out.push(
        Finding::new(code, format!("{} active rows share one {what}", rows.len()))
            .instance(instance)
            .workers(rows.iter().map(|r| &r.worker_identity))
            .evidence("shared", shared),
    );
}
