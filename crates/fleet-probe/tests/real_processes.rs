//! The probe against real child processes: spawned, killed, reaped.

use std::process::{Child, Command};

use fleet_identity::{Pid, ProcessStartTime};
use fleet_model::{Liveness, LivenessProbe, ProcessVerdict};
use fleet_probe::{LocalProbe, TrackingProbe, probe_pid, probe_process, process_start_time};

fn sleeper() -> (Child, Pid) {
    let child = Command::new("sleep").arg("30").spawn().expect("spawn sleep");
    let pid = Pid::new(i64::from(child.id())).unwrap();
    (child, pid)
}

#[test]
fn a_running_child_is_alive_with_a_start_time() {
    let (mut child, pid) = sleeper();
    assert_eq!(probe_pid(pid), Liveness::Alive);
    let started = process_start_time(pid).unwrap().expect("start time");
    assert_eq!(probe_process(pid, started), ProcessVerdict::Alive);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_killed_child_is_gone_before_and_after_it_is_reaped() {
    let (mut child, pid) = sleeper();
    let started = process_start_time(pid).unwrap().unwrap();
    child.kill().unwrap();
    // Until it is reaped the child is a zombie: exited, so gone.
    let mut zombie_seen = false;
    for _ in 0..200 {
        if probe_pid(pid) == Liveness::Gone {
            zombie_seen = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(zombie_seen, "a killed, unreaped child must read as gone");
    child.wait().unwrap();
    assert_eq!(probe_pid(pid), Liveness::Gone);
    assert_eq!(probe_process(pid, started), ProcessVerdict::Gone);
    assert_eq!(process_start_time(pid).unwrap(), None);
}

#[test]
fn a_pid_held_by_another_incarnation_is_told_apart_by_start_time() {
    let (mut child, pid) = sleeper();
    let started = process_start_time(pid).unwrap().unwrap();
    // The recorded incarnation started at another tick than the one holding the number.
    let earlier = ProcessStartTime::new(started.ticks().saturating_sub(1)).unwrap();
    assert_eq!(probe_process(pid, earlier), ProcessVerdict::PidReused);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_process_we_may_not_signal_is_alive() {
    // pid 1 belongs to another user only when we are not root; either way it exists.
    let init = Pid::new(1).unwrap();
    assert_eq!(probe_pid(init), Liveness::Alive);
}

#[test]
fn the_local_probe_refuses_to_speak_for_other_hosts() {
    let probe = LocalProbe::new().unwrap();
    let mut me = fleet_probe::current_process().unwrap();
    assert_eq!(probe.probe(&me), ProcessVerdict::Alive);
    me.host_id = fleet_identity::HostId::new("00000000000000000000000000000001").unwrap();
    assert_eq!(probe.probe(&me), ProcessVerdict::Unknown);
}

/// A tracking probe holds a pidfd for a process it verified alive, says what a local
/// probe says at every step of the process's life, and lets go of it once it is gone.
#[test]
fn the_tracking_probe_answers_as_the_local_probe_across_a_life() {
    let (mut child, pid) = sleeper();
    let identity = fleet_probe::process_identity(pid).unwrap();
    let (local, tracking) = (LocalProbe::new().unwrap(), TrackingProbe::new().unwrap());
    for _ in 0..3 {
        assert_eq!(tracking.probe(&identity), ProcessVerdict::Alive);
        assert_eq!(local.probe(&identity), ProcessVerdict::Alive);
        assert_eq!(tracking.held(), 1, "a pidfd held from the first probe on");
    }
    // Killed, not yet reaped: a zombie, gone to both.
    child.kill().unwrap();
    let mut gone = false;
    for _ in 0..200 {
        if local.probe(&identity) == ProcessVerdict::Gone {
            gone = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(gone, "the killed child reads as gone");
    assert_eq!(tracking.probe(&identity), ProcessVerdict::Gone);
    assert_eq!(tracking.held(), 0, "the pidfd of an exited process is closed");
    child.wait().unwrap();
    assert_eq!(tracking.probe(&identity), local.probe(&identity));
    assert_eq!(tracking.held(), 0);
}

/// A recorded start time that is not the live process's own is another incarnation: no
/// pidfd is held for it, and both probes say the number was reused.
#[test]
fn the_tracking_probe_holds_nothing_for_another_incarnation() {
    let (mut child, pid) = sleeper();
    let mut identity = fleet_probe::process_identity(pid).unwrap();
    identity.process_start_time = ProcessStartTime::new(identity.process_start_time.ticks() + 1).unwrap();
    let tracking = TrackingProbe::new().unwrap();
    assert_eq!(tracking.probe(&identity), ProcessVerdict::PidReused);
    assert_eq!(LocalProbe::new().unwrap().probe(&identity), ProcessVerdict::PidReused);
    assert_eq!(tracking.held(), 0);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A process no longer probed (its row released or removed) loses its pidfd at the end
/// of the next round.
#[test]
fn a_round_without_a_process_closes_its_pidfd() {
    let (mut a, a_pid) = sleeper();
    let (mut b, b_pid) = sleeper();
    let (a_id, b_id) =
        (fleet_probe::process_identity(a_pid).unwrap(), fleet_probe::process_identity(b_pid).unwrap());
    let tracking = TrackingProbe::new().unwrap();
    tracking.probe(&a_id);
    tracking.probe(&b_id);
    tracking.end_round();
    assert_eq!(tracking.held(), 2, "both probed this round");
    tracking.probe(&a_id);
    tracking.end_round();
    assert_eq!(tracking.held(), 1, "b was not probed in the second round");
    for child in [&mut a, &mut b] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

/// In a round, every held pidfd is polled once at its start and each probe answers as
/// of that poll; the next round sees the exit.
#[test]
fn a_round_answers_as_of_its_one_poll() {
    let (mut child, pid) = sleeper();
    let identity = fleet_probe::process_identity(pid).unwrap();
    let (local, tracking) = (LocalProbe::new().unwrap(), TrackingProbe::new().unwrap());
    assert_eq!(tracking.probe(&identity), ProcessVerdict::Alive);
    tracking.end_round();

    tracking.begin_round();
    child.kill().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while local.probe(&identity) != ProcessVerdict::Gone {
        assert!(std::time::Instant::now() < deadline, "the killed child never read as gone");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(tracking.probe(&identity), ProcessVerdict::Alive, "alive when the round began");
    tracking.end_round();

    tracking.begin_round();
    assert_eq!(tracking.probe(&identity), ProcessVerdict::Gone);
    assert_eq!(tracking.held(), 0);
    tracking.end_round();
    child.wait().unwrap();
}
