//! The fenced lease protocol, checked exhaustively for small bounds with `stateright`.
//!
//! Two owners race over one lease while a clock ticks: each may acquire, renew, release,
//! take over at the epoch it last saw, or act on an outside resource presenting its
//! tenure. Every step is decided by the same pure functions the stores call
//! (`decide_acquire`, `decide_renew`, `decide_release`, `decide_takeover`,
//! `check_holder`); the model only stores their results, as a store's transaction does.
//!
//! Properties, over every reachable state:
//! * at most one holder per epoch, and epochs strictly increase as they are handed out;
//! * a former holder never completes an action after a takeover: every completed action
//!   carries the newest epoch handed out at that moment.

use fleet_identity::Timestamp;
use fleet_lease::{
    FencingEpoch, Holder, LeaseId, LeaseKey, LeaseKind, LeaseRecord, Tenure, check_holder, decide_acquire,
    decide_release, decide_renew, decide_takeover,
};
use stateright::{Checker, Model, Property};
use time::Duration;

const OWNERS: usize = 2;
const TTL_S: i64 = 2;
const LAST_TICK: i64 = 5;
const MAX_TENURES: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    clock: i64,
    lease: Option<LeaseRecord>,
    /// The tenure each owner believes it holds (what it would present).
    held: [Option<Holder>; OWNERS],
    /// The last epoch each owner saw (to take over at).
    seen: [Option<FencingEpoch>; OWNERS],
    /// Every tenure handed out, in order: (epoch, owner, lease id).
    issued: Vec<(u64, usize, String)>,
    /// Completed outside actions: (the epoch presented, the newest epoch issued then).
    completed: Vec<(u64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Action {
    Acquire(usize),
    Renew(usize),
    Release(usize),
    TakeOver(usize),
    Act(usize),
    Tick,
}

struct Protocol;

fn at(s: i64) -> Timestamp {
    Timestamp::from_unix_millis(1_785_412_800_000 + s * 1000).unwrap()
}

fn key() -> LeaseKey {
    LeaseKey::new("workflow:model").unwrap()
}

fn tenure(owner: usize, n: usize) -> Tenure {
    Tenure {
        owner: format!("owner-{owner}"),
        lease_id: LeaseId::new(format!("lease-{n}")).unwrap(),
        ttl: Duration::seconds(TTL_S),
        scopes: Vec::new(),
        process: None,
    }
}

impl State {
    fn newest_epoch(&self) -> u64 {
        self.issued.last().map_or(0, |(e, _, _)| *e)
    }

    /// Stores a new tenure the decision granted.
    fn grant(&mut self, owner: usize, record: LeaseRecord) {
        self.issued.push((record.fencing_epoch.get(), owner, record.lease_id.as_str().to_owned()));
        self.held[owner] = Some(record.holder());
        self.seen[owner] = Some(record.fencing_epoch);
        self.lease = Some(record);
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            clock: 0,
            lease: None,
            held: [None, None],
            seen: [None, None],
            issued: Vec::new(),
            completed: Vec::new(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for owner in 0..OWNERS {
            if state.issued.len() < MAX_TENURES {
                actions.push(Action::Acquire(owner));
                actions.push(Action::TakeOver(owner));
            }
            if state.held[owner].is_some() {
                actions.push(Action::Renew(owner));
                actions.push(Action::Release(owner));
                actions.push(Action::Act(owner));
            }
        }
        if state.clock < LAST_TICK {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        let now = at(state.clock);
        let current = state.lease.as_ref();
        match action {
            Action::Tick => next.clock += 1,
            Action::Acquire(owner) => {
                let (_, record) = decide_acquire(
                    current,
                    &key(),
                    LeaseKind::Workflow,
                    &tenure(owner, state.issued.len()),
                    now,
                )
                .ok()?;
                next.grant(owner, record);
            }
            Action::TakeOver(owner) => {
                let seen = state.seen[owner].or(current.map(|c| c.fencing_epoch))?;
                let record = decide_takeover(current, seen, &tenure(owner, state.issued.len()), now).ok()?;
                next.grant(owner, record);
            }
            Action::Renew(owner) => {
                let holder = state.held[owner].as_ref()?;
                next.lease = Some(decide_renew(current, holder, Duration::seconds(TTL_S), now).ok()?);
            }
            Action::Release(owner) => {
                let holder = state.held[owner].as_ref()?;
                next.lease = Some(decide_release(current, holder, now).ok()?);
                next.held[owner] = None;
            }
            Action::Act(owner) => {
                // The outside resource checks the presented tenure against the lease as
                // stored, as grant validation and a fenced write do.
                let holder = state.held[owner].as_ref()?;
                check_holder(current, holder, now).ok()?;
                let done = (holder.fencing_epoch.get(), state.newest_epoch());
                if next.completed.contains(&done) {
                    return None;
                }
                next.completed.push(done);
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("epochs strictly increase, one holder each", |_, s: &State| {
                s.issued.windows(2).all(|w| w[0].0 < w[1].0)
            }),
            Property::always("a former holder never completes an action after a takeover", |_, s: &State| {
                s.completed.iter().all(|(presented, newest)| presented == newest)
            }),
            Property::sometimes("the lease changes hands", |_, s: &State| {
                s.issued.windows(2).any(|w| w[0].1 != w[1].1)
            }),
            Property::sometimes("an action completes after a takeover", |_, s: &State| {
                s.completed.iter().any(|(presented, _)| *presented > 1)
            }),
        ]
    }
}

#[test]
fn the_fenced_lease_protocol_holds_in_every_reachable_state() {
    let checker = Protocol.checker().spawn_bfs().join();
    checker.assert_properties();
    eprintln!("the lease model explored {} states", checker.unique_state_count());
    assert!(
        checker.unique_state_count() > 1_000,
        "the model explored {} states",
        checker.unique_state_count()
    );
}
