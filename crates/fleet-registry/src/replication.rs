//! What a registry on a replicated server needs before it hands out an epoch: a grant
//! (a lease's new tenure, a registration's slot epoch, a fence) must survive the
//! failover the server is set up for, or the registry refuses it, so that no epoch is
//! ever handed out twice.
//!
//! A store that replicates (PostgreSQL) reports the server's history (its system
//! identifier and timeline: a promoted standby or a restored backup starts a new one)
//! and its standbys; the registry records the history its grants were made on and the
//! operator's [`ReplicationPolicy`]. [`judge_grant`] decides, purely, from those two.

use std::fmt;

/// How a registry on a replicated server treats grants. Stored in the registry; an
/// operator sets it (`fleetctl registry replication --policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplicationPolicy {
    /// The default. Grants commit on a server that streams to no standby, or with the
    /// confirmation of a synchronous standby; they are refused while an asynchronous
    /// standby streams. After the server's history changes, grants wait for an
    /// operator's acceptance.
    #[default]
    Local,
    /// Every grant waits for a synchronous standby to apply it, and is refused when the
    /// server has none; a change of history (a failover to that standby) carries over on
    /// its own, since every grant the registry acknowledged is on it.
    Synchronous,
    /// Grants commit beside asynchronous standbys, each with a warning that a failover
    /// could lose it; after a change of history grants wait for acceptance.
    Asynchronous,
}

impl ReplicationPolicy {
    /// Every policy, in the order the docs list them.
    pub const ALL: [Self; 3] = [Self::Local, Self::Synchronous, Self::Asynchronous];

    /// The policy's name, as stored and as typed.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Synchronous => "synchronous",
            Self::Asynchronous => "asynchronous",
        }
    }

    /// The policy named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl fmt::Display for ReplicationPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One server history: a cluster (its system identifier, minted by `initdb`) and the
/// timeline it writes on (a promotion or a point-in-time restore starts a new one).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ServerHistory {
    /// The cluster's system identifier.
    pub system_identifier: String,
    /// The timeline the server writes on.
    pub timeline: u32,
}

impl fmt::Display for ServerHistory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "system {} timeline {}", self.system_identifier, self.timeline)
    }
}

/// What the server says of its replication, read inside the grant's transaction.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ServerReplication {
    /// The history the server writes on now.
    pub history: ServerHistory,
    /// `synchronous_standby_names` (empty: no commit waits for a standby).
    pub synchronous_standby_names: String,
    /// How many standbys stream from it now.
    pub standbys: u64,
}

impl ServerReplication {
    /// Whether a commit waits for a synchronous standby.
    pub fn has_synchronous_standby(&self) -> bool {
        !self.synchronous_standby_names.trim().is_empty()
    }
}

/// What the registry recorded: the history its grants are made on, and the policy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RecordedHistory {
    /// The history the last grant was made on (or an operator accepted).
    pub history: ServerHistory,
    /// The operator's policy.
    pub policy: ReplicationPolicy,
    /// When it was recorded, on the store's clock.
    pub recorded_at: String,
    /// Who accepted it, when an operator did.
    pub accepted_by: Option<String>,
    /// Why, as the operator said.
    pub reason: Option<String>,
}

/// The registry's replication, as `fleetctl registry replication` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReplicationStatus {
    /// What the server says now.
    pub server: ServerReplication,
    /// What the registry recorded, if any grant was made yet.
    pub recorded: Option<RecordedHistory>,
}

impl ReplicationStatus {
    /// What a grant made now would meet.
    pub fn verdict(&self) -> GrantVerdict {
        judge_grant(&self.server, self.recorded.as_ref())
    }
}

/// What a grant meets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantVerdict {
    /// It may commit. `record` says the registry records the server's history with it
    /// (the first grant, or a history carried over); `warning`, what to say of it.
    Grant {
        /// Whether to record the server's current history.
        record: bool,
        /// A warning to give at this grant.
        warning: Option<String>,
    },
    /// It must not: why, in one line.
    Refuse(String),
}

/// Decides whether a grant may commit on a server in `server`'s state, given what the
/// registry recorded (`None`: no grant was made on this registry yet).
pub fn judge_grant(server: &ServerReplication, recorded: Option<&RecordedHistory>) -> GrantVerdict {
    let policy = recorded.map_or_else(ReplicationPolicy::default, |r| r.policy);
    let mut warning = None;
    let record = match recorded {
        None => true,
        Some(r) if r.history == server.history => false,
        Some(r) if policy == ReplicationPolicy::Synchronous => {
            warning = Some(format!(
                "the server's history changed ({} -> {}); carried over, since every grant was \
                 confirmed by a synchronous standby (replication policy synchronous)",
                r.history, server.history
            ));
            true
        }
        Some(r) => {
            return GrantVerdict::Refuse(format!(
                "the registry's server history changed ({} -> {}: a failover or a restore), and grants \
                 made on the old history may be lost with their epochs (replication policy {policy}); \
                 once no holder of the old history acts, run `fleetctl registry accept-history`",
                r.history, server.history
            ));
        }
    };
    if server.has_synchronous_standby() {
        return GrantVerdict::Grant { record, warning };
    }
    match policy {
        ReplicationPolicy::Synchronous => GrantVerdict::Refuse(
            "replication policy synchronous, but the server has no synchronous standby \
             (synchronous_standby_names is empty): the grant would not survive a failover"
                .to_owned(),
        ),
        ReplicationPolicy::Local if server.standbys > 0 => GrantVerdict::Refuse(format!(
            "the server streams to {} asynchronous standby(s): a failover could lose this grant and \
             hand its epoch out again; set synchronous_standby_names, or accept the risk with \
             `fleetctl registry replication --policy asynchronous`",
            server.standbys
        )),
        ReplicationPolicy::Local => GrantVerdict::Grant { record, warning },
        ReplicationPolicy::Asynchronous => GrantVerdict::Grant {
            record,
            warning: Some(warning.unwrap_or_else(|| {
                "this grant is confirmed by no standby: a failover could lose it (replication policy \
                 asynchronous)"
                    .to_owned()
            })),
        },
    }
}

/// The scope of the registry-wide epoch floor in the high-water marks: every new tenure
/// and registration is above it. Accepting a new server history raises it past every
/// epoch the lost history could have handed out.
pub const EPOCH_FLOOR_SCOPE: &str = "floor";

/// The floor a new epoch in `scope` must be above: its own high-water mark and the
/// registry-wide floor.
pub(crate) fn epoch_floor(tx: &mut dyn crate::Tx, scope: &str) -> Result<u64, crate::StoreError> {
    Ok(tx.high_water(scope)?.max(tx.high_water(EPOCH_FLOOR_SCOPE)?))
}

/// What accepting a new server history did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HistoryAcceptance {
    /// The history the registry had recorded, if any.
    pub previous: Option<ServerHistory>,
    /// The history it records now.
    pub accepted: ServerHistory,
    /// Every new epoch is above this.
    pub epoch_floor: u64,
}

/// How far an acceptance raises the epoch floor past the highest epoch the registry
/// knows, unless the operator says otherwise: more grants than a key could have had in
/// any replication lag (a lease is granted at most once per its TTL).
pub const DEFAULT_EPOCH_GAP: u64 = 1_000;

impl<S: crate::Store> crate::Registry<S> {
    /// The server's replication and what the registry recorded; `None` for a store
    /// that does not replicate.
    pub fn replication(&mut self) -> Result<Option<ReplicationStatus>, crate::StoreError> {
        self.store_mut().read(|tx| tx.replication())
    }

    /// Sets the replication policy (see [`ReplicationPolicy`]).
    pub fn set_replication_policy(&mut self, policy: ReplicationPolicy) -> Result<(), crate::StoreError> {
        self.store_mut().write(|tx| tx.set_replication_policy(policy))?;
        tracing::info!(policy = %policy, "replication policy set");
        Ok(())
    }

    /// Accepts the server's current history after a failover or restore the registry
    /// could not prove lost no grant: raises the epoch floor `gap` past the highest epoch
    /// the registry knows, so no epoch the lost history handed out (fewer than `gap` per
    /// key) is handed out again, and records the history, who accepted it and why.
    pub fn accept_server_history(
        &mut self,
        gap: u64,
        accepted_by: &str,
        reason: &str,
    ) -> Result<HistoryAcceptance, crate::StoreError> {
        for (field, text) in [("accepted_by", accepted_by), ("reason", reason)] {
            if text.trim().is_empty() || text.chars().any(char::is_control) || text.len() > 200 {
                return Err(crate::StoreError::invalid(format!(
                    "an acceptance's {field} must be one line of 1 to 200 bytes"
                )));
            }
        }
        if gap == 0 {
            return Err(crate::StoreError::invalid("the epoch gap must be at least 1"));
        }
        let acceptance = self.store_mut().write(|tx| {
            let highest = tx.high_waters()?.into_iter().map(|(_, epoch)| epoch).max().unwrap_or(0);
            let epoch_floor = highest.saturating_add(gap);
            tx.raise_high_water(EPOCH_FLOOR_SCOPE, epoch_floor)?;
            let (previous, accepted) = tx.accept_server_history(accepted_by, reason)?;
            Ok::<_, crate::StoreError>(HistoryAcceptance { previous, accepted, epoch_floor })
        })?;
        tracing::info!(
            accepted = %acceptance.accepted,
            epoch_floor = acceptance.epoch_floor,
            accepted_by,
            reason,
            "server history accepted"
        );
        Ok(acceptance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(timeline: u32, names: &str, standbys: u64) -> ServerReplication {
        ServerReplication {
            history: ServerHistory { system_identifier: "7".into(), timeline },
            synchronous_standby_names: names.into(),
            standbys,
        }
    }

    fn recorded(timeline: u32, policy: ReplicationPolicy) -> RecordedHistory {
        RecordedHistory {
            history: ServerHistory { system_identifier: "7".into(), timeline },
            policy,
            recorded_at: "2026-12-07T00:00:00.000Z".into(),
            accepted_by: None,
            reason: None,
        }
    }

    #[test]
    fn the_first_grant_records_the_history() {
        assert_eq!(judge_grant(&server(1, "", 0), None), GrantVerdict::Grant { record: true, warning: None });
    }

    #[test]
    fn a_standalone_server_grants_on_its_recorded_history() {
        let r = recorded(1, ReplicationPolicy::Local);
        assert_eq!(
            judge_grant(&server(1, "", 0), Some(&r)),
            GrantVerdict::Grant { record: false, warning: None }
        );
    }

    #[test]
    fn an_asynchronous_standby_refuses_grants_under_the_default_policy() {
        let r = recorded(1, ReplicationPolicy::Local);
        let GrantVerdict::Refuse(why) = judge_grant(&server(1, "", 1), Some(&r)) else { panic!("granted") };
        assert!(why.contains("asynchronous standby"), "{why}");
        // The first grant too: no history recorded is no licence.
        assert!(matches!(judge_grant(&server(1, "", 2), None), GrantVerdict::Refuse(_)));
    }

    #[test]
    fn a_synchronous_standby_lets_every_policy_grant() {
        for policy in ReplicationPolicy::ALL {
            let r = recorded(1, policy);
            assert!(
                matches!(
                    judge_grant(&server(1, "*", 1), Some(&r)),
                    GrantVerdict::Grant { warning: None, .. }
                ),
                "{policy}"
            );
        }
    }

    #[test]
    fn the_asynchronous_policy_warns_at_every_grant() {
        let r = recorded(1, ReplicationPolicy::Asynchronous);
        for standbys in [0, 1] {
            let verdict = judge_grant(&server(1, "", standbys), Some(&r));
            assert!(matches!(verdict, GrantVerdict::Grant { warning: Some(_), .. }), "{verdict:?}");
        }
    }

    #[test]
    fn the_synchronous_policy_refuses_without_a_synchronous_standby() {
        let r = recorded(1, ReplicationPolicy::Synchronous);
        assert!(matches!(judge_grant(&server(1, "", 0), Some(&r)), GrantVerdict::Refuse(_)));
    }

    #[test]
    fn a_changed_history_waits_for_acceptance_unless_every_grant_was_synchronous() {
        for policy in [ReplicationPolicy::Local, ReplicationPolicy::Asynchronous] {
            let r = recorded(1, policy);
            let GrantVerdict::Refuse(why) = judge_grant(&server(2, "", 0), Some(&r)) else {
                panic!("{policy}")
            };
            assert!(
                why.contains("timeline 1 -> system 7 timeline 2") && why.contains("accept-history"),
                "{why}"
            );
        }
        let r = recorded(1, ReplicationPolicy::Synchronous);
        let verdict = judge_grant(&server(2, "*", 0), Some(&r));
        assert!(matches!(verdict, GrantVerdict::Grant { record: true, warning: Some(_) }), "{verdict:?}");
        // Another cluster altogether is a changed history too.
        let mut other = recorded(1, ReplicationPolicy::Local);
        other.history.system_identifier = "8".into();
        assert!(matches!(judge_grant(&server(1, "", 0), Some(&other)), GrantVerdict::Refuse(_)));
    }

    #[test]
    fn policies_round_trip_their_names() {
        for policy in ReplicationPolicy::ALL {
            assert_eq!(ReplicationPolicy::parse(policy.as_str()), Some(policy));
        }
        assert_eq!(ReplicationPolicy::parse("sync"), None);
    }
}
