//! The probe against real child processes: spawned, killed, reaped.

use std::process::{Child, Command};

use fleet_identity::{Pid, ProcessStartTime};
use fleet_model::{Liveness, LivenessProbe, ProcessVerdict};
use fleet_probe::{LocalProbe, probe_pid, probe_process, process_start_time};

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
