//! The process side of the lease discipline, checked exhaustively for small bounds with
//! `stateright`: two starters contend for one lease; each has an owner (which acquires,
//! renews and starts the command) and a keeper (which holds the deadline the owner last
//! sent and ends the command's tree). Owners are paused and resumed at any step, a
//! renewal may stall (sent now, committed any time later, or never), and a command ends
//! by itself at any step. Time moves in ticks of 100 ms; the store's expiry and the
//! holders' deadlines come from the same rules the binaries use
//! (`ActWindow::for_ttl`, a renewal measured from its send).
//!
//! Properties, over every reachable state:
//! * no two commands can act at once;
//! * no command can act at an epoch older than the newest granted.
//!
//! A command "can act" from its start until its keeper's `SIGKILL` (deadline + grace):
//! a command that ignores its stop signal is still counted as acting through the grace.

use std::time::Duration;

use fleet_lease::ActWindow;
use stateright::{Checker, Model, Property};

const OWNERS: usize = 2;
/// Ticks of 100 ms.
const TTL: u32 = 10;
const LAST_TICK: u32 = 20;

fn window() -> (u32, u32) {
    let w = ActWindow::for_ttl(Duration::from_millis(u64::from(TTL) * 100));
    let ticks = |d: Duration| u32::try_from(d.as_millis() / 100).unwrap();
    (ticks(w.act), ticks(w.grace))
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct Starter {
    /// The epoch this owner holds, if any.
    epoch: Option<u32>,
    /// The keeper's deadline: the stop signal goes out then, `SIGKILL` a grace later.
    act_until: u32,
    paused: bool,
    /// A renewal sent at this tick and not yet answered.
    pending: Option<u32>,
    /// The command's epoch while its tree lives.
    command: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    clock: u32,
    /// The store: the newest epoch granted, its holder, and its expiry (store clock).
    epoch: u32,
    holder: Option<usize>,
    expires: u32,
    starters: [Starter; OWNERS],
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    Acquire(usize),
    Start(usize),
    SendRenewal(usize),
    CommitRenewal(usize),
    Pause(usize),
    Resume(usize),
    CommandEnds(usize),
}

struct Starters;

impl State {
    /// Whether `s`'s command can act now (alive, and not past its keeper's `SIGKILL`).
    fn can_act(&self, s: &Starter) -> bool {
        s.command.is_some() && self.clock < s.act_until + window().1
    }
}

impl Model for Starters {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State { clock: 0, epoch: 0, holder: None, expires: 0, starters: Default::default() }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.clock < LAST_TICK {
            actions.push(Action::Tick);
        }
        for i in 0..OWNERS {
            actions.extend([
                Action::Acquire(i),
                Action::Start(i),
                Action::SendRenewal(i),
                Action::CommitRenewal(i),
                Action::Pause(i),
                Action::Resume(i),
                Action::CommandEnds(i),
            ]);
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let (act, grace) = window();
        let mut next = state.clone();
        let t = state.clock;
        match action {
            Action::Tick => {
                next.clock += 1;
                // Each keeper, on its own (its owner may be paused): past the deadline
                // the tree gets its stop signal, a grace later it is gone.
                for s in &mut next.starters {
                    if s.command.is_some() && next.clock >= s.act_until + grace {
                        s.command = None;
                    }
                }
            }
            Action::Acquire(i) => {
                let s = &state.starters[i];
                // Only a lapsed lease is granted, on the store's clock; the owner's
                // deadline runs from the send (here the same tick as the commit).
                if s.paused || s.epoch.is_some() || t < state.expires || next.epoch >= 3 {
                    return None;
                }
                next.epoch += 1;
                next.holder = Some(i);
                next.expires = t + TTL;
                let s = &mut next.starters[i];
                s.epoch = Some(next.epoch);
                s.act_until = t + act;
                s.pending = None;
            }
            Action::Start(i) => {
                let s = &state.starters[i];
                // The owner checks its deadline before it starts anything (so does the
                // keeper, which reads the same deadline).
                if s.paused || s.command.is_some() || t >= s.act_until {
                    return None;
                }
                next.starters[i].command = Some(s.epoch?);
            }
            Action::SendRenewal(i) => {
                let s = &state.starters[i];
                if s.paused || s.epoch.is_none() || s.pending.is_some() {
                    return None;
                }
                next.starters[i].pending = Some(t);
            }
            Action::CommitRenewal(i) => {
                // Any time after the send (a stall), while the lease is still this
                // owner's and live on the store's clock.
                let s = &state.starters[i];
                let sent = s.pending?;
                if state.holder != Some(i) || s.epoch != Some(state.epoch) || t >= state.expires {
                    return None;
                }
                next.expires = t + TTL;
                let s = &mut next.starters[i];
                s.pending = None;
                // The answer is read when the owner runs; it extends from the send.
                if !s.paused {
                    s.act_until = s.act_until.max(sent + act);
                }
            }
            Action::Pause(i) => {
                if state.starters[i].paused {
                    return None;
                }
                next.starters[i].paused = true;
            }
            Action::Resume(i) => {
                let s = &mut next.starters[i];
                if !s.paused {
                    return None;
                }
                s.paused = false;
                // A resumed owner checks its tenure first: lapsed, it gives it up.
                if t >= s.act_until {
                    s.epoch = None;
                    s.pending = None;
                }
            }
            Action::CommandEnds(i) => {
                let s = &mut next.starters[i];
                s.command.take()?;
                if !s.paused && t >= s.act_until {
                    s.epoch = None;
                }
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no two commands can act at once", |_, s: &State| {
                s.starters.iter().filter(|x| s.can_act(x)).count() <= 1
            }),
            Property::always("no command acts at an epoch older than the newest granted", |_, s: &State| {
                s.starters.iter().filter(|x| s.can_act(x)).all(|x| x.command == Some(s.epoch))
            }),
            Property::sometimes("a second epoch's command runs", |_, s: &State| {
                s.starters.iter().any(|x| s.can_act(x) && x.command >= Some(2))
            }),
            Property::sometimes("a paused owner's command is ended by its keeper", |_, s: &State| {
                s.epoch >= 2
                    && s.starters.iter().any(|x| x.paused && x.epoch == Some(1) && x.command.is_none())
            }),
        ]
    }
}

#[test]
fn no_command_acts_on_authority_that_has_passed_in_any_reachable_state() {
    let checker = Starters.checker().spawn_bfs().join();
    checker.assert_properties();
    eprintln!("the process model explored {} states", checker.unique_state_count());
    assert!(checker.unique_state_count() > 10_000, "explored {}", checker.unique_state_count());
}
