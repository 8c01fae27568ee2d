//! Probing a fleet's local processes, as every snapshot on a one-host fleet does: 1 000
//! live child processes, each judged by `LocalProbe::probe` and by a long-lived
//! `TrackingProbe` (a pidfd per process, as the MCP server keeps), beside the floor of
//! reading each one's `/proc/<pid>/stat` with nothing else.

use std::process::{Child, Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};
use fleet_model::LivenessProbe;
use fleet_probe::{LocalProbe, TrackingProbe, process_identity, raise_open_file_limit};

/// Children that outlive the bench unless killed, killed when dropped.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn probe(c: &mut Criterion) {
    raise_open_file_limit();
    let children = Children(
        (0..1_000)
            .map(|_| Command::new("sleep").arg("600").stdin(Stdio::null()).spawn().expect("spawn sleep"))
            .collect(),
    );
    let identities: Vec<_> = children
        .0
        .iter()
        .map(|child| {
            let pid = fleet_identity::Pid::new(i64::from(child.id())).expect("a pid");
            process_identity(pid).expect("its identity")
        })
        .collect();
    let probe = LocalProbe::new().expect("this host");
    let mut group = c.benchmark_group("probe_local_processes");
    group.sample_size(20);
    group.bench_function("local_probe/1000", |b| {
        b.iter(|| {
            identities.iter().filter(|id| probe.probe(id) == fleet_model::ProcessVerdict::Alive).count()
        })
    });
    let tracking = TrackingProbe::new().expect("this host");
    let alive = |probe: &TrackingProbe| {
        probe.begin_round();
        let alive =
            identities.iter().filter(|id| probe.probe(id) == fleet_model::ProcessVerdict::Alive).count();
        probe.end_round();
        alive
    };
    assert_eq!(alive(&tracking), 1_000, "every child verified and held");
    assert_eq!(tracking.held(), 1_000);
    group.bench_function("tracking_probe/1000", |b| b.iter(|| alive(&tracking)));
    group.bench_function("floor_read_proc_stat/1000", |b| {
        b.iter(|| {
            children.0.iter().filter(|c| std::fs::read(format!("/proc/{}/stat", c.id())).is_ok()).count()
        })
    });
    group.finish();
}

criterion_group!(benches, probe);
criterion_main!(benches);
