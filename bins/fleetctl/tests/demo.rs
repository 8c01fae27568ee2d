//! The README's main job runs end to end.

mod common;

#[test]
fn the_demo_runs_every_step_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::fleetctl_bin())
        .args(["demo", "--keep"])
        .arg(dir.path())
        .env_remove("FLEET_REGISTRY")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    for needle in [
        "fleet SAFE: 2 instances, 10 live",
        "fleet UNSAFE: 2 instances, 9 live, 1 stale",
        "applied: retired",
        "takes it over: epoch 2",
        "renews with epoch 1: stale_epoch",
        "9 released, 1 retired",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}
