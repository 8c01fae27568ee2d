//! Whole-process time of `fleet-launch mint` (start, open the registry, mint, record,
//! print, exit), against `true` as the baseline cost of spawning any process.

use std::process::Command;

use criterion::{Criterion, criterion_group, criterion_main};

fn mint(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = dir.path().join("registry.sqlite3");
    let exe = env!("CARGO_BIN_EXE_fleet-launch");
    let mut group = c.benchmark_group("process");
    group.sample_size(30);
    group.bench_function("fleet_launch_mint", |b| {
        b.iter(|| {
            let out = Command::new(exe)
                .args(["mint", "--client", "codex"])
                .env("FLEET_REGISTRY", &registry)
                .output()
                .expect("run");
            assert!(out.status.success());
        })
    });
    group.bench_function("spawn_true_baseline", |b| {
        b.iter(|| assert!(Command::new("true").status().expect("run").success()))
    });
    group.finish();
}

criterion_group!(benches, mint);
criterion_main!(benches);
