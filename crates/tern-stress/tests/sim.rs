//! The in-process reliability run: random I/O errors and simulated power
//! failures, in both sync modes, checked against the durability contract.
//! `TERN_SIM_SEEDS=<n>` runs more seeds.
#![allow(clippy::unwrap_used)]

use tern_stress::{StressArgs, StressConfig};

fn run(seed: u64, sync: bool) -> tern_stress::sim::SimReport {
    let args = StressArgs {
        sim: true,
        seed: Some(seed),
        sync: Some(sync),
        keys: 1_000,
        threads: 1,
        crashes: 12,
        ops_per_crash: 600,
        fault_probability: 0.001,
        ..Default::default()
    };
    let cfg = StressConfig::resolve(args).unwrap();
    let mut out = Vec::new();
    match tern_stress::sim::run(&cfg, &mut out) {
        Ok(r) => r,
        Err(e) => panic!("{e}\n{}", String::from_utf8_lossy(&out)),
    }
}

fn seeds() -> u64 {
    std::env::var("TERN_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4)
}

#[test]
fn power_failures_and_io_errors_keep_synced_writes() {
    let mut total = tern_stress::sim::SimReport::default();
    // The given seeds, then more until one ran an epoch without the WAL
    // (about one epoch in ten does), so that rule is always exercised
    // whatever stream the generator draws.
    let mut seed = 0;
    while seed < seeds() || (total.no_wal_epochs == 0 && seed < 50) {
        let r = run(seed, true);
        assert_eq!(r.lost_unsynced, 0, "seed {seed}");
        total.ops += r.ops;
        total.faults += r.faults;
        total.crashes += r.crashes;
        total.no_wal_epochs += r.no_wal_epochs;
        seed += 1;
    }
    tern_stress::ci_summary("sim_seeds_synced", seed);
    tern_stress::ci_summary("sim_crashes_synced", total.crashes);
    assert!(total.no_wal_epochs > 0, "no epoch ran without the WAL");
    assert!(
        total.ops > 0 && total.crashes > 0 && total.faults > 0,
        "{total:?}"
    );
}

/// Every crash is checked inside the run: what survives must be a prefix
/// of the acknowledged history that reaches at least its last durable
/// point. Here: that crashes happened and actually dropped un-synced
/// writes, or the prefix rule went untested.
#[test]
fn power_failures_lose_only_an_unsynced_suffix() {
    let (mut lost, mut crashes, mut ops) = ([0u64; tern::io::CrashMode::ALL.len()], 0, 0);
    for seed in 100..100 + seeds() {
        let r = run(seed, false);
        for (l, m) in lost.iter_mut().zip(r.lost_by_mode) {
            *l += m;
        }
        crashes += r.crashes;
        ops += r.ops;
    }
    eprintln!(
        "{ops} ops, {crashes} power failures, un-synced writes lost (allowed) per mode {:?}: {lost:?}",
        tern::io::CrashMode::ALL
    );
    tern_stress::ci_summary("sim_seeds_unsynced", seeds());
    tern_stress::ci_summary("sim_crashes_unsynced", crashes);
    assert!(ops > 0 && crashes > 0, "no operations or no power failures");
    // A crash that keeps only synced bytes must drop the writes after the
    // last sync; if none ever were, the suffix rule went untested.
    assert!(
        lost[tern::io::CrashMode::SyncedOnly as usize] > 0,
        "no power failure dropped an un-synced write"
    );
}

fn run_separated(seed: u64, sync: bool) -> tern_stress::sim::SimReport {
    let args = StressArgs {
        sim: true,
        seed: Some(seed),
        sync: Some(sync),
        keys: 300,
        threads: 1,
        crashes: 10,
        ops_per_crash: 800,
        fault_probability: 0.001,
        blob_threshold: Some(tern_stress::config::BlobThreshold(Some(0))),
        blob_file_size: Some(4096),
        gc_ratio: Some(0.2),
        gc: Some(true),
        ..Default::default()
    };
    let cfg = StressConfig::resolve(args).unwrap();
    let mut out = Vec::new();
    match tern_stress::sim::run(&cfg, &mut out) {
        Ok(r) => r,
        Err(e) => panic!("{e}\n{}", String::from_utf8_lossy(&out)),
    }
}

#[test]
fn power_failures_and_io_errors_with_every_value_in_blob_files_and_gc() {
    let mut gc_runs = 0;
    for seed in 200..200 + seeds() {
        let r = run_separated(seed, true);
        assert_eq!(r.lost_unsynced, 0, "seed {seed}");
        gc_runs += r.gc_runs;
        gc_runs += run_separated(seed + 1000, false).gc_runs;
    }
    eprintln!("blob gc jobs: {gc_runs}");
    tern_stress::ci_summary("sim_seeds_separated", 2 * seeds());
    tern_stress::ci_summary("sim_gc_jobs_separated", gc_runs);
    assert!(gc_runs > 0, "no blob GC job ran");
}

/// A run is a history: written as text, read back and run again, it makes
/// the same power failures and clean closes (which operations fail with
/// random faults can differ with background timing).
#[test]
fn a_sim_history_replays_from_its_file() {
    let args = StressArgs {
        sim: true,
        seed: Some(5),
        keys: 500,
        threads: 1,
        crashes: 6,
        ops_per_crash: 300,
        fault_probability: 0.0,
        ..Default::default()
    };
    let cfg = StressConfig::resolve(args).unwrap();
    let h = tern_stress::sim::history_for(&cfg);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.history");
    h.write(&path, "a test run").unwrap();
    assert_eq!(
        tern_ops::History::read(&path).unwrap(),
        h,
        "the file holds the history"
    );
    let mut out = Vec::new();
    let first = tern_stress::sim::execute(&h, &mut out, 0).unwrap();
    let again = tern_stress::sim::replay(&path, &mut out).unwrap();
    assert_eq!(
        (first.crashes, first.clean_closes, first.ops),
        (again.crashes, again.clean_closes, again.ops)
    );
    assert_eq!(first.crashes + first.clean_closes, 6);
    assert!(first.ops >= 6 * 300, "{first:?}");
    let model = tern_ops::History {
        harness: "model".into(),
        ..h
    };
    let err = tern_stress::sim::execute(&model, &mut out, 0).unwrap_err();
    assert!(err.contains("runs `sim` histories"), "{err}");
}
