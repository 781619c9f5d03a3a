//! Seeded model-based test: operation histories from the shared generator
//! (`tern-ops`) run against the store and against an in-memory model (a
//! `BTreeMap`).
//!
//! What is checked: after every step, the whole state through a forward
//! iterator and four keys through `get`; reads, bounded and reverse
//! iterations, seeks, snapshot reads and atomic groups against the model
//! when they run; after every restart and crash, that the recovered state is
//! one the history allows (every synced write, flush and sync_wal kept;
//! nothing deleted back; batches whole; a failed write either there or not).
//! Crashes keep nothing unsynced, everything (a process crash), a random
//! prefix of unsynced bytes, unsynced pages out of order, or any subset of
//! unsynced directory entries. I/O faults hit writes, WAL syncs, flushes,
//! compactions and GC, and a failed operation may leave part of its effect
//! behind (torn failures). Keys come in four shapes (short, long with a
//! shared prefix, binary, prefixes of others). One seed in seven writes
//! without the WAL. Several writers at once are in `concurrent.rs`;
//! compaction filters in `tests/basic.rs`.
//!
//! `TERN_MODEL_SEEDS=<count>` sets how many seeds run (default 24; CI runs
//! more), `TERN_MODEL_SEED=<n>` runs one. A failing seed's history is
//! written under `target/tmp/model-histories/`, shrunk, and the shrunk one
//! written beside it; `TERN_MODEL_REPLAY=<file>` runs a history file.
//! Histories kept under `tests/regressions/` run on every test run.
#![allow(clippy::unwrap_used)]

mod concurrent;
mod executor;
mod failure;
mod reads;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tern::io::CrashMode;
use tern_ops::{ci_summary, random_settings, Generator, History, Profile, Scale, Weights};

use executor::{execute, COUNTERS, INSTALL_FAULTS};

/// What the store must hold.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn env_num<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// The history seed `seed` draws: settings at the tiny scale, and `steps`
/// operations. Every other seed is GC-heavy: all values separated, a small
/// key space, a low GC ratio and frequent compaction + GC. One seed in
/// five splits compactions into small parts; one in seven writes without
/// the WAL.
pub fn history_for(seed: u64, steps: usize) -> History {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut settings: Vec<(String, String)> = random_settings(&mut rng, Scale::Tiny)
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let mut set = |name: &str, value: String| {
        settings.retain(|(n, _)| n != name);
        settings.push((name.to_string(), value));
    };
    let mut profile = Profile::model(INSTALL_FAULTS.len() as u8, CrashMode::ALL.len() as u8);
    let gc_heavy = seed % 2 == 1;
    if gc_heavy {
        set(
            "blob_threshold",
            if rng.gen_bool(0.5) { "0" } else { "16" }.into(),
        );
        set(
            "gc_garbage_ratio",
            format!("{:.3}", rng.gen_range(0.01..0.3)),
        );
        profile.keys = 40;
        profile.weights = Weights::model_gc_heavy();
    }
    if seed % 5 == 2 {
        // Small outputs, so that compactions read enough to be split.
        set("max_subcompactions", "4".into());
        set("target_file_size", "2048".into());
    }
    let no_wal = seed % 7 == 3;
    if no_wal {
        // Most later epochs skip the WAL too.
        profile.no_wal = 0.8;
    }
    let torn: u64 = rng.gen();
    History {
        harness: "model".into(),
        seed,
        keys: profile.keys,
        settings,
        params: vec![
            ("no_wal".into(), u8::from(no_wal).to_string()),
            ("torn".into(), torn.to_string()),
        ],
        ops: Generator::new(profile, rng.gen()).take(steps),
    }
}

/// Runs `h`; on failure saves it, shrinks it, saves the shrunk one, says
/// how to replay both, and fails.
fn run_history(h: &History, name: &str) {
    let mut log = Vec::new();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| execute(h, &mut log)));
    if let Err(e) = res {
        let tail: Vec<_> = log.iter().rev().take(15).rev().cloned().collect();
        eprintln!(
            "model test failed: {name}\nlast operations:\n  {}",
            tail.join("\n  ")
        );
        failure::save_and_shrink(h, name, &failure::panic_message(e.as_ref()));
        std::panic::resume_unwind(e);
    }
}

#[test]
fn model_based_random_operations_with_restarts_and_crashes() {
    if let Ok(file) = std::env::var("TERN_MODEL_REPLAY") {
        // Tests run in the crate's directory; a path relative to the
        // workspace root (where `cargo test` is usually typed) works too.
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(&file);
        let path = if Path::new(&file).exists() {
            PathBuf::from(&file)
        } else {
            root
        };
        let h = History::read(&path).unwrap_or_else(|e| panic!("{e}"));
        run_history(&h, &format!("replay of {file}"));
        return;
    }
    let steps: usize = env_num("TERN_MODEL_STEPS").unwrap_or(400);
    let (base, seeds): (u64, u64) = match env_num("TERN_MODEL_SEED") {
        Some(seed) => (seed, 1),
        None => (
            env_num("TERN_MODEL_BASE").unwrap_or(0),
            env_num("TERN_MODEL_SEEDS").unwrap_or(24),
        ),
    };
    for seed in base..base + seeds {
        run_history(
            &history_for(seed, steps),
            &format!("seed {seed} (TERN_MODEL_SEED={seed})"),
        );
    }
    let c = &COUNTERS;
    let jobs = c.gc_jobs.load(Relaxed);
    let moved = c.relocated.load(Relaxed);
    let rewritten = c.rewritten.load(Relaxed);
    let crashes: Vec<u64> = c.crashes.iter().map(|c| c.load(Relaxed)).collect();
    let faults = c.faults_fired.load(Relaxed);
    let no_wal = c.no_wal_epochs.load(Relaxed);
    let write_faults = c.write_faults.load(Relaxed);
    let checks = c.state_checks.load(Relaxed);
    let parts = c.subcompactions.load(Relaxed);
    let values_moved = c.values_moved.load(Relaxed);
    let tier: Vec<u64> = c.memtier.iter().map(|c| c.load(Relaxed)).collect();
    eprintln!(
        "{seeds} seeds: {checks} full-state checks, {jobs} GC jobs, {moved} records relocated, \
         {rewritten} refs rewritten, crashes per mode {:?} = {crashes:?}, {faults} faults fired \
         ({write_faults} on writes), {no_wal} epochs without WAL, {parts} subcompactions, \
         {values_moved} values moved into sorted runs, \
         memory tier copy-ins/merges/copy-outs/restored at open {tier:?}",
        CrashMode::ALL
    );
    ci_summary("model_state_checks", checks);
    ci_summary("model_write_faults", write_faults);
    ci_summary("model_seeds", seeds);
    ci_summary("model_crashes", crashes.iter().sum());
    ci_summary("model_install_faults", faults);
    ci_summary("model_no_wal_epochs", no_wal);
    ci_summary("model_subcompactions", parts);
    ci_summary("model_values_moved", values_moved);
    ci_summary("model_memtier_merges", tier[1]);
    ci_summary("model_memtier_restored", tier[3]);
    if seeds >= 50 {
        // Merges need several memtables between flushes; `tests/memtier.rs`
        // makes them.
        assert!(
            tier[0] > 0 && tier[2] > 0 && tier[3] > 0,
            "the model test must copy memtables into the memory tier and out, and restore a durable tier at open: {tier:?}"
        );
    }
    if seeds >= 8 {
        assert!(
            jobs > 0 && moved > 0,
            "the model test must exercise blob GC"
        );
    }
    if seeds >= 50 {
        assert!(
            crashes.iter().all(|&c| c > 0)
                && faults > 0
                && write_faults > 0
                && no_wal > 0
                && parts > 0
                && values_moved > 0,
            "the model test must exercise every crash mode, install and write faults, disable_wal, \
             split compactions and sorted value runs"
        );
    }
}

/// The directory of kept regression histories.
fn regressions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions")
}

/// Every history kept under `tests/regressions/` runs clean.
#[test]
fn kept_regressions_run_clean() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(regressions_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "history"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no histories under tests/regressions/");
    for file in &files {
        let h = History::read(file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            h.harness,
            "model",
            "{}: not a model history",
            file.display()
        );
        run_history(&h, &format!("kept regression {}", file.display()));
    }
    ci_summary("model_regressions", files.len() as u64);
}
