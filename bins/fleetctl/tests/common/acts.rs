//! The log that commands acting under a fencing epoch write, and its check, as Jepsen
//! checks a history: every command appends `tick EPOCH ACTOR` to a log the test owns
//! while it runs (ACTOR names the process, unique across hosts). The log, not the
//! code's view of itself, must show that authority that has passed is never acted on:
//!
//! * epochs never go back: no line of an older epoch after a line of a newer one (no
//!   command runs at an epoch older than the newest granted, and no two epochs overlap);
//! * within an epoch, one process at a time: once a second process ticks at an epoch
//!   (a connector resumed after its first run died), the first never ticks again.

use std::collections::BTreeMap;

/// Checks the log; returns how many epochs it saw.
pub fn check(log: &str) -> usize {
    let mut newest = 0u64;
    let mut actors: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for (n, line) in log.lines().enumerate() {
        let mut parts = line.split_whitespace();
        let (Some("tick"), Some(epoch), Some(actor)) = (parts.next(), parts.next(), parts.next()) else {
            panic!("line {n} is not a tick: {line:?}");
        };
        let epoch: u64 = epoch.parse().unwrap();
        assert!(epoch >= newest, "line {n}: epoch {epoch} acted after epoch {newest}");
        newest = epoch;
        let seen = actors.entry(epoch).or_default();
        match seen.iter().position(|a| *a == actor) {
            None => seen.push(actor),
            Some(i) => {
                assert_eq!(i, seen.len() - 1, "line {n}: {actor} of epoch {epoch} acted after a newer one")
            }
        }
    }
    actors.len()
}

/// How many epochs have acted so far (lines of the log still being written may be cut).
pub fn epochs_acted(log: &str) -> usize {
    let epochs: std::collections::BTreeSet<&str> =
        log.lines().filter_map(|l| l.strip_prefix("tick ")?.split_whitespace().next()).collect();
    epochs.len()
}
