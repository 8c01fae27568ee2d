//! Every connector-lease operation passes the cap and the policy: random sequences of
//! acquire, renew, release and takeover, by random connectors, at random times, under
//! random policies. No lease ever outlives the cap or what its policy allows, and nothing
//! passes the default deny.

use fleet_identity::Timestamp;
use fleet_lease::{
    ConnectorIdentity, ConnectorOp, ConnectorPolicy, DenyAll, GrantLimits, LeaseId, LeaseRecord,
    PolicyDecision, Tenure, decide_connector,
};
use proptest::prelude::*;
use time::Duration;

const CONNECTORS: [&str; 3] = ["conn-a", "conn-b", "conn-c"];

/// A policy drawn at random: which connectors it admits, and the longest TTL it allows.
#[derive(Debug, Clone)]
struct Drawn {
    deny_all: bool,
    admitted: [bool; 3],
    max_ttl_s: i64,
}

impl ConnectorPolicy for Drawn {
    fn authorize_lease(
        &self,
        _: &ConnectorIdentity,
        connector: &str,
        _: &[String],
        ttl: Option<Duration>,
    ) -> PolicyDecision {
        let admitted = CONNECTORS.iter().position(|c| *c == connector).is_some_and(|i| self.admitted[i]);
        let short_enough = ttl.is_none_or(|t| t <= Duration::seconds(self.max_ttl_s));
        if !self.deny_all && admitted && short_enough { PolicyDecision::Allow } else { PolicyDecision::Deny }
    }

    fn authorize_grant(
        &self,
        _: &ConnectorIdentity,
        _: &str,
        _: &[String],
        _: Option<Duration>,
    ) -> PolicyDecision {
        PolicyDecision::Deny
    }
}

#[derive(Debug, Clone)]
enum Step {
    Acquire {
        who: usize,
        ttl_s: i64,
    },
    /// Renews as the current holder (`honest`) or as a forger of another connector.
    Renew {
        honest: bool,
        who: usize,
        ttl_s: i64,
    },
    Release {
        honest: bool,
        who: usize,
    },
    TakeOver {
        who: usize,
        ttl_s: i64,
        right_epoch: bool,
    },
    Wait {
        secs: i64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let ttl = -5i64..900;
    prop_oneof![
        (0usize..3, ttl.clone()).prop_map(|(who, ttl_s)| Step::Acquire { who, ttl_s }),
        (any::<bool>(), 0usize..3, ttl.clone()).prop_map(|(honest, who, ttl_s)| Step::Renew {
            honest,
            who,
            ttl_s
        }),
        (any::<bool>(), 0usize..3).prop_map(|(honest, who)| Step::Release { honest, who }),
        (0usize..3, ttl, any::<bool>()).prop_map(|(who, ttl_s, right_epoch)| Step::TakeOver {
            who,
            ttl_s,
            right_epoch
        }),
        (0i64..700).prop_map(|secs| Step::Wait { secs }),
    ]
}

fn policy() -> impl Strategy<Value = Drawn> {
    (any::<bool>(), any::<[bool; 3]>(), 1i64..900).prop_map(|(deny_all, admitted, max_ttl_s)| Drawn {
        deny_all,
        admitted,
        max_ttl_s,
    })
}

fn tenure(who: usize, ttl_s: i64, n: usize) -> Tenure {
    Tenure {
        owner: CONNECTORS[who].to_owned(),
        lease_id: LeaseId::new(format!("lease-{n}")).unwrap(),
        ttl: Duration::seconds(ttl_s),
        scopes: vec!["chat.read".into()],
        process: None,
    }
}

/// Runs `steps` under `policy`; returns every record that was written, with the time.
fn run(policy: &dyn ConnectorPolicy, steps: &[Step]) -> Vec<(Timestamp, LeaseRecord)> {
    let identity = ConnectorIdentity::new("acme", "agent", "slack").unwrap();
    let limits = GrantLimits::default();
    let mut now = Timestamp::from_unix_millis(1_785_412_800_000).unwrap();
    let mut current: Option<LeaseRecord> = None;
    let mut written = Vec::new();
    for (n, step) in steps.iter().enumerate() {
        let holder_as = |honest: bool, who: usize| {
            let mut h = current.as_ref().map(LeaseRecord::holder)?;
            if !honest {
                h.owner = CONNECTORS[who].to_owned();
            }
            Some(h)
        };
        let decided = match step {
            Step::Wait { secs } => {
                now = now.saturating_add(Duration::seconds(*secs));
                continue;
            }
            Step::Acquire { who, ttl_s } => {
                let t = tenure(*who, *ttl_s, n);
                decide_connector(&identity, ConnectorOp::Acquire(&t), current.as_ref(), now, limits, policy)
            }
            Step::Renew { honest, who, ttl_s } => {
                let Some(h) = holder_as(*honest, *who) else { continue };
                let op = ConnectorOp::Renew(&h, Duration::seconds(*ttl_s));
                decide_connector(&identity, op, current.as_ref(), now, limits, policy)
            }
            Step::Release { honest, who } => {
                let Some(h) = holder_as(*honest, *who) else { continue };
                decide_connector(&identity, ConnectorOp::Release(&h), current.as_ref(), now, limits, policy)
            }
            Step::TakeOver { who, ttl_s, right_epoch } => {
                let Some(epoch) = current.as_ref().map(|c| c.fencing_epoch) else { continue };
                let epoch = if *right_epoch { epoch } else { epoch.next().unwrap() };
                let t = tenure(*who, *ttl_s, n);
                decide_connector(
                    &identity,
                    ConnectorOp::TakeOver(epoch, &t),
                    current.as_ref(),
                    now,
                    limits,
                    policy,
                )
            }
        };
        if let Ok((_, record)) = decided {
            written.push((now, record.clone()));
            current = Some(record);
        }
    }
    written
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_lease_outlives_its_cap_or_its_policy(policy in policy(), steps in proptest::collection::vec(step(), 1..40)) {
        for (at, record) in run(&policy, &steps) {
            let lifetime = record.expires_at.since(at);
            prop_assert!(lifetime <= GrantLimits::default().max_lease_ttl(), "beyond the cap: {record:?}");
            prop_assert!(lifetime <= Duration::seconds(policy.max_ttl_s), "beyond the policy: {record:?}");
            let i = CONNECTORS.iter().position(|c| *c == record.owner).unwrap();
            prop_assert!(!policy.deny_all && policy.admitted[i], "held by a connector the policy refuses: {record:?}");
        }
    }

    #[test]
    fn nothing_passes_the_default_deny(steps in proptest::collection::vec(step(), 1..40)) {
        prop_assert!(run(&DenyAll, &steps).is_empty());
    }
}
