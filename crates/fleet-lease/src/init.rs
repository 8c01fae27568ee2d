//! One-time initialization coordinated by a fenced lease (seed 001): the target version,
//! its status and bounded failure detail ride on an `initialization` lease.

use fleet_identity::Timestamp;
use serde::{Deserialize, Serialize};

use crate::{
    Holder, LeaseDenial, LeaseKey, LeaseKind, LeaseRecord, LeaseState, Tenure, check_holder, decide_acquire,
};

/// Failure detail is cut to this many bytes (at a character boundary) before storage.
pub const MAX_FAILURE_DETAIL: usize = 2048;

fleet_identity::outward_codes! {
    /// Where an initialization stands.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum InitStatus ("initialization status") {
        /// An owner is running it.
        Initializing = "initializing",
        /// It completed for `target_version`.
        Ready = "ready",
        /// It failed; `failure_detail` says why.
        Failed = "failed",
    }
}

/// The durable initialization state.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InitState {
    /// The version being (or last) initialized.
    pub target_version: u64,
    /// Where it stands.
    pub status: InitStatus,
    /// Why it failed, cut to [`MAX_FAILURE_DETAIL`] bytes.
    pub failure_detail: Option<String>,
}

/// Cuts `detail` to [`MAX_FAILURE_DETAIL`] bytes at a character boundary, marking the cut.
pub fn bound_detail(detail: &str) -> String {
    const MARK: &str = " [truncated]";
    if detail.len() <= MAX_FAILURE_DETAIL {
        return detail.to_owned();
    }
    let mut end = MAX_FAILURE_DETAIL - MARK.len();
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &detail[..end])
}

/// What a starter should do.
#[derive(Debug, Clone, PartialEq, Eq)]
// Decided once per start, never held in numbers: boxing the record would only cost its
// callers a dereference.
#[allow(clippy::large_enum_variant)]
pub enum InitDecision {
    /// The target version is durably ready: report ready, run nothing.
    Ready,
    /// Another owner holds a live lease: wait and look again.
    Wait {
        /// The current holder.
        owner: String,
        /// When its lease lapses unless renewed.
        expires_at: Timestamp,
    },
    /// The stored version is newer than this caller supports: refuse.
    NewerThanSupported {
        /// The stored version.
        stored: u64,
    },
    /// Run it: this record (status `initializing`) must be written by compare-and-swap.
    Run(LeaseRecord),
}

/// Decides what a starter wanting `target_version` does. It may acquire an absent,
/// failed, older-version or expired record; it waits while a valid lease exists.
pub fn decide_init_start(
    current: Option<&LeaseRecord>,
    key: &LeaseKey,
    target_version: u64,
    tenure: &Tenure,
    now: Timestamp,
) -> InitDecision {
    if let Some(init) = current.and_then(|c| c.init.as_ref()) {
        if init.target_version > target_version {
            return InitDecision::NewerThanSupported { stored: init.target_version };
        }
        if init.target_version == target_version && init.status == InitStatus::Ready {
            return InitDecision::Ready;
        }
    }
    if let Some(c) = current
        && c.is_live(now)
    {
        return InitDecision::Wait { owner: c.owner.clone(), expires_at: c.expires_at };
    }
    match decide_acquire(current, key, LeaseKind::Initialization, tenure, now) {
        Ok((_, mut record)) => {
            record.init =
                Some(InitState { target_version, status: InitStatus::Initializing, failure_detail: None });
            InitDecision::Run(record)
        }
        // Unreachable for initialization leases (lapsed leases are taken over), but a
        // live holder is the only denial acquisition can give here: wait for it.
        Err(_) => InitDecision::Wait {
            owner: current.map(|c| c.owner.clone()).unwrap_or_default(),
            expires_at: current.map_or(now, |c| c.expires_at),
        },
    }
}

/// Completion or failure by the current holder: the lease is released and the status
/// recorded. A holder whose tenure was taken over gets `stale_epoch` and writes nothing.
pub fn decide_init_finish(
    current: Option<&LeaseRecord>,
    holder: &Holder,
    outcome: Result<(), &str>,
    now: Timestamp,
) -> Result<LeaseRecord, LeaseDenial> {
    check_holder(current, holder, now)?;
    let mut next = current.cloned().ok_or(LeaseDenial::NotFound)?;
    let target_version = next.init.as_ref().map_or(0, |i| i.target_version);
    next.init = Some(match outcome {
        Ok(()) => InitState { target_version, status: InitStatus::Ready, failure_detail: None },
        Err(detail) => InitState {
            target_version,
            status: InitStatus::Failed,
            failure_detail: Some(bound_detail(detail)),
        },
    });
    next.state = LeaseState::Released;
    next.released_at = Some(now);
    next.expires_at = now;
    next.updated_at = now;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use time::Duration;

    use super::*;
    use crate::LeaseId;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_unix_millis(1_785_412_800_000 + s * 1000).unwrap()
    }

    fn tenure(owner: &str) -> Tenure {
        Tenure {
            owner: owner.into(),
            lease_id: LeaseId::new(format!("l-{owner}")).unwrap(),
            ttl: Duration::seconds(10),
            scopes: vec![],
            process: None,
        }
    }

    fn key() -> LeaseKey {
        LeaseKey::new("init:schema").unwrap()
    }

    fn run(d: InitDecision) -> LeaseRecord {
        match d {
            InitDecision::Run(r) => r,
            other => panic!("expected run, got {other:?}"),
        }
    }

    #[test]
    fn the_lifecycle_runs_once_then_reports_ready() {
        let first = run(decide_init_start(None, &key(), 3, &tenure("a"), at(0)));
        assert_eq!(first.init.as_ref().unwrap().status, InitStatus::Initializing);
        assert!(matches!(
            decide_init_start(Some(&first), &key(), 3, &tenure("b"), at(1)),
            InitDecision::Wait { .. }
        ));
        let done = decide_init_finish(Some(&first), &first.holder(), Ok(()), at(2)).unwrap();
        assert_eq!(decide_init_start(Some(&done), &key(), 3, &tenure("b"), at(3)), InitDecision::Ready);
        let rerun = run(decide_init_start(Some(&done), &key(), 4, &tenure("b"), at(4)));
        assert_eq!((rerun.fencing_epoch.get(), rerun.init.unwrap().target_version), (2, 4));
        assert_eq!(
            decide_init_start(Some(&done), &key(), 2, &tenure("b"), at(4)),
            InitDecision::NewerThanSupported { stored: 3 }
        );
    }

    #[test]
    fn an_expired_owner_is_taken_over_and_cannot_finish() {
        let first = run(decide_init_start(None, &key(), 1, &tenure("a"), at(0)));
        let second = run(decide_init_start(Some(&first), &key(), 1, &tenure("b"), at(10)));
        assert!(second.fencing_epoch > first.fencing_epoch);
        assert_eq!(
            decide_init_finish(Some(&second), &first.holder(), Ok(()), at(11)).unwrap_err(),
            LeaseDenial::StaleEpoch
        );
    }

    #[test]
    fn a_failure_is_kept_bounded_and_retried() {
        let first = run(decide_init_start(None, &key(), 1, &tenure("a"), at(0)));
        let long = "é".repeat(5000);
        let failed = decide_init_finish(Some(&first), &first.holder(), Err(&long), at(1)).unwrap();
        let detail = failed.init.as_ref().unwrap().failure_detail.clone().unwrap();
        assert!(detail.len() <= MAX_FAILURE_DETAIL && detail.ends_with("[truncated]"));
        assert!(matches!(
            decide_init_start(Some(&failed), &key(), 1, &tenure("b"), at(2)),
            InitDecision::Run(_)
        ));
    }
}
