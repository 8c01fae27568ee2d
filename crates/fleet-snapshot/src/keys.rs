//! Strings a snapshot compares over and over, copied once into a buffer of its own.
//!
//! Rows arrive in identity order, and identities begin with the namespace: the five
//! workers of one launch lie a fifth of the fleet apart. Comparing a row's instance ID
//! and launch fields against those of its launch's first row touched strings read
//! tens of thousands of rows earlier, long gone from the cache; compared against copies
//! kept side by side here, in the order launches were first seen, the same comparisons
//! read a few cache lines that later rows of the same launches read next.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use rustc_hash::FxBuildHasher;

/// Where a string copied into an [`Arena`] lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    start: usize,
    end: usize,
}

/// Copied strings, end to end.
#[derive(Debug, Default)]
pub(crate) struct Arena(String);

impl Arena {
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        Self(String::with_capacity(bytes))
    }

    /// Copies `s` in.
    pub(crate) fn put(&mut self, s: &str) -> Span {
        let start = self.0.len();
        self.0.push_str(s);
        Span { start, end: self.0.len() }
    }

    /// The string at `span`, which this arena returned.
    pub(crate) fn get(&self, span: Span) -> &str {
        &self.0[span.start..span.end]
    }
}

/// Instance IDs as the rows spell them (`None` for rows without one), numbered from
/// zero in the order first seen, each copied once.
#[derive(Debug)]
pub(crate) struct KeyTable {
    /// Numbers, found by the hash of their key.
    table: HashTable<usize>,
    /// Each number's key.
    keys: Vec<Option<Span>>,
    arena: Arena,
}

/// A key's hash (the key's own [`std::hash::Hash`], as a map keyed by it would take).
fn hash(key: Option<&str>) -> u64 {
    FxBuildHasher.hash_one(key)
}

impl KeyTable {
    /// Room for `keys` keys of about `bytes_each` bytes without growing.
    pub(crate) fn with_capacity(keys: usize, bytes_each: usize) -> Self {
        Self {
            table: HashTable::with_capacity(keys),
            keys: Vec::with_capacity(keys),
            arena: Arena::with_capacity(keys.saturating_mul(bytes_each)),
        }
    }

    /// The number of `key`, and whether this call gave it one.
    pub(crate) fn number(&mut self, key: Option<&str>) -> (usize, bool) {
        let Self { table, keys, arena } = self;
        let spelled = |at: usize| keys[at].map(|span| arena.get(span));
        match table.entry(hash(key), |&at| spelled(at) == key, |&at| hash(spelled(at))) {
            Entry::Occupied(found) => (*found.get(), false),
            Entry::Vacant(slot) => {
                let at = keys.len();
                keys.push(key.map(|k| arena.put(k)));
                slot.insert(at);
                (at, true)
            }
        }
    }

    /// [`KeyTable::number`], checking first whether `key` is numbered `guess`: a right
    /// guess reads that key's copy, and not the table.
    pub(crate) fn number_guessing(&mut self, key: Option<&str>, guess: usize) -> (usize, bool) {
        if guess < self.keys.len() && self.key(guess) == key {
            return (guess, false);
        }
        self.number(key)
    }

    /// The number of `key`, when it has one.
    pub(crate) fn find(&self, key: Option<&str>) -> Option<usize> {
        self.table.find(hash(key), |&at| self.key(at) == key).copied()
    }

    /// The key numbered `at`.
    pub(crate) fn key(&self, at: usize) -> Option<&str> {
        self.keys[at].map(|span| self.arena.get(span))
    }

    /// Every number, in the order of their keys (`None` first, then by bytes).
    pub(crate) fn in_key_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.keys.len()).collect();
        order.sort_unstable_by(|&a, &b| self.key(a).cmp(&self.key(b)));
        order
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::KeyTable;

    proptest! {
        /// Equal keys get one number, different keys different ones, numbered in the
        /// order first seen; the key order is the order of the keys themselves.
        #[test]
        fn keys_are_numbered_once_and_listed_in_order(
            keys in prop::collection::vec(prop::option::of("[a-c]{0,3}"), 0..200),
        ) {
            // Start small, so that the table grows and rehashes from its copies.
            let mut table = KeyTable::with_capacity(1, 1);
            let mut seen: Vec<Option<&str>> = Vec::new();
            let mut last = 0;
            for key in &keys {
                let key = key.as_deref();
                // Guess the number after the last, as the snapshot does: right or wrong,
                // the answer is the key's number.
                let (at, new) = table.number_guessing(key, last + 1);
                last = at;
                match seen.iter().position(|k| *k == key) {
                    Some(first) => prop_assert_eq!((at, new), (first, false)),
                    None => {
                        prop_assert_eq!((at, new), (seen.len(), true));
                        seen.push(key);
                    }
                }
                prop_assert_eq!(table.key(at), key);
                prop_assert_eq!(table.find(key), Some(at));
            }
            let ordered: Vec<Option<&str>> = table.in_key_order().into_iter().map(|at| table.key(at)).collect();
            prop_assert_eq!(table.find(Some("absent")), None);
            seen.sort();
            prop_assert_eq!(ordered, seen);
        }
    }
}
