//! Seeded model-based test: random operations against the store and against
//! an in-memory model (a `BTreeMap`), compared after every step, across clean
//! restarts, simulated crashes (which keep nothing unsynced, everything, a
//! random prefix of unsynced bytes, or unsynced pages out of order), and I/O
//! faults injected into flush, compaction and GC installs.
//!
//! `TERN_MODEL_SEED=<n>` replays one seed; `TERN_MODEL_SEEDS=<count>` sets how
//! many seeds run (default 24; CI runs more). A failure names its seed.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tern::io::{CrashMode, FaultFs, FaultKind, MemFs};
use tern::{Compression, Db, Options, ReadOptions, Snapshot, WriteBatch, WriteOptions};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// GC jobs run across all seeds, to check the test exercises GC at all.
static GC_JOBS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Blob records relocated by GC and refs rewritten by compaction.
static RELOCATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static REWRITTEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Seeds whose writes all skip the WAL.
static NO_WAL_SEEDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

const DIR: &str = "/db";

/// Adds `key value` to the run summary CI prints and checks
/// (`TERN_SUMMARY_FILE`, set by `scripts/test.sh`); nothing without it.
/// The engine's tests cannot use `tern_stress::ci_summary` (that crate
/// depends on this one), hence this copy.
fn ci_summary(key: &str, value: u64) {
    use std::io::Write;
    let Ok(path) = std::env::var("TERN_SUMMARY_FILE") else {
        return;
    };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{key} {value}");
    }
}

fn random_options(rng: &mut StdRng, fs: tern::io::FsRef) -> Options {
    let comp = |rng: &mut StdRng| match rng.gen_range(0..3) {
        0 => Compression::None,
        1 => Compression::Lz4,
        _ => Compression::Zstd,
    };
    Options {
        fs,
        write_buffer_size: rng.gen_range(4096..32768),
        max_write_buffer_number: rng.gen_range(2..4),
        level0_file_num_compaction_trigger: rng.gen_range(1..4),
        level0_slowdown_writes_trigger: 8,
        level0_stop_writes_trigger: 12,
        max_bytes_for_level_base: rng.gen_range(16..64) << 10,
        max_bytes_for_level_multiplier: rng.gen_range(2..5),
        dynamic_level_bytes: rng.gen_bool(0.7),
        target_file_size: rng.gen_range(2..16) << 10,
        block_size: rng.gen_range(128..4096),
        block_restart_interval: rng.gen_range(1..17),
        bloom_bits_per_key: if rng.gen_bool(0.7) { 10 } else { 0 },
        compression_per_level: (0..3).map(|_| comp(rng)).collect(),
        block_cache_capacity: [0, 16 << 10, 1 << 20][rng.gen_range(0..3)],
        max_manifest_file_size: rng.gen_range(1..64) << 10,
        blob_threshold: match rng.gen_range(0..4) {
            0 => None,
            1 => Some(0),
            2 => Some(32),
            _ => Some(512),
        },
        blob_file_size: rng.gen_range(4096..32768),
        gc_garbage_ratio: rng.gen_range(0.05..0.9),
        gc_max_batch_files: rng.gen_range(1..4),
        // Few open files: reads reopen files the cache closed under them.
        max_open_files: [2, 8, 1000][rng.gen_range(0..3)],
        ..Options::default()
    }
}

thread_local! {
    /// Size of the key space: small in GC-heavy runs so values are overwritten often.
    static KEYS: std::cell::Cell<u32> = const { std::cell::Cell::new(400) };
}

fn key(rng: &mut StdRng) -> Vec<u8> {
    format!("k{:04}", rng.gen_range(0..KEYS.with(|k| k.get()))).into_bytes()
}

fn value(rng: &mut StdRng, step: usize) -> Vec<u8> {
    let len = if rng.gen_bool(0.05) {
        rng.gen_range(500..3000)
    } else {
        rng.gen_range(0..64)
    };
    let mut v = format!("v{step}-").into_bytes();
    v.resize(len.max(v.len()), b'a' + (step % 26) as u8);
    v
}

fn scan(db: &Db, snap: Option<&Snapshot>) -> Model {
    let mut it = db
        .iter(ReadOptions {
            snapshot: snap,
            ..Default::default()
        })
        .unwrap();
    let mut out = Model::new();
    it.seek_to_first();
    while it.valid() {
        out.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.status().unwrap();
    out
}

/// Compares a bounded iteration (forward or backward, with a seek) against the model.
fn check_iter(db: &Db, snap: Option<&Snapshot>, model: &Model, rng: &mut StdRng, ctx: &str) {
    let lower = rng.gen_bool(0.4).then(|| key(rng));
    let upper = rng.gen_bool(0.4).then(|| key(rng));
    let in_range =
        |k: &Vec<u8>| lower.as_ref().is_none_or(|l| k >= l) && upper.as_ref().is_none_or(|u| k < u);
    let expect: Vec<(&Vec<u8>, &Vec<u8>)> = model.iter().filter(|(k, _)| in_range(k)).collect();
    let opts = ReadOptions {
        snapshot: snap,
        lower_bound: lower.clone(),
        upper_bound: upper.clone(),
    };
    let mut it = db.iter(opts).unwrap();
    let mut got = Vec::new();
    if rng.gen_bool(0.5) {
        it.seek_to_first();
        while it.valid() {
            got.push((it.key().to_vec(), it.value().to_vec()));
            it.next();
        }
    } else {
        it.seek_to_last();
        while it.valid() {
            got.push((it.key().to_vec(), it.value().to_vec()));
            it.prev();
        }
        got.reverse();
    }
    it.status().unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = expect
        .iter()
        .map(|(k, v)| ((*k).clone(), (*v).clone()))
        .collect();
    assert_eq!(
        got.len(),
        want.len(),
        "{ctx}: iteration length (lower {lower:?}, upper {upper:?})"
    );
    assert!(
        got == want,
        "{ctx}: iteration contents differ (lower {lower:?}, upper {upper:?})"
    );
    // A seek and a few mixed steps.
    let target = key(rng);
    it.seek(&target);
    let mut pos = expect.iter().position(|(k, _)| **k >= target);
    for _ in 0..6 {
        match pos {
            Some(p) => {
                assert!(it.valid(), "{ctx}: seek/step should be valid at {p}");
                assert_eq!(
                    it.key(),
                    expect[p].0.as_slice(),
                    "{ctx}: key after seek/step"
                );
                assert_eq!(
                    it.value(),
                    expect[p].1.as_slice(),
                    "{ctx}: value after seek/step"
                );
            }
            None => {
                assert!(!it.valid(), "{ctx}: iterator should be exhausted");
                break;
            }
        }
        if rng.gen_bool(0.5) {
            it.next();
            pos = pos.map(|p| p + 1).filter(|&p| p < expect.len());
        } else {
            it.prev();
            pos = pos.and_then(|p| p.checked_sub(1));
        }
    }
}

/// Faults that install paths meet: table and blob output, manifest appends
/// and syncs, directory syncs, `CURRENT` renames, WAL switches.
const INSTALL_FAULTS: [FaultKind; 5] = [
    FaultKind::Write,
    FaultKind::Sync,
    FaultKind::SyncDir,
    FaultKind::Create,
    FaultKind::Rename,
];

/// Crashes per mode and faults that fired, across all seeds.
static CRASHES: [std::sync::atomic::AtomicU64; 4] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 4];
static FAULTS_FIRED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

struct Run {
    rng: StdRng,
    fs: Arc<MemFs>,
    fault: Arc<FaultFs>,
    opts: Options,
    db: Option<Db>,
    model: Model,
    /// Model states since the last point known durable; a crash may recover any of them.
    since_durable: Vec<Model>,
    snapshots: Vec<(Snapshot, Model)>,
    log: Vec<String>,
    gc_heavy: bool,
    /// Every write skips the WAL (`disable_wal`): it survives only a flush
    /// or a clean close, so a crash falls back to the last flushed state
    /// (or a later one an automatic flush made durable).
    no_wal: bool,
}

impl Run {
    fn db(&self) -> &Db {
        self.db.as_ref().unwrap()
    }

    fn applied(&mut self, durable: bool) {
        if durable {
            self.since_durable.clear();
        }
        self.since_durable.push(self.model.clone());
    }

    fn step(&mut self, step: usize) {
        let ctx = format!("step {step}");
        if self.gc_heavy && self.rng.gen_bool(0.04) {
            // Drop overwritten refs (dead marks), then relocate what is left,
            // so values move through lineage chains several times.
            self.log.push("compact all + gc".into());
            self.db().compact_range(None, None).unwrap();
            let jobs = self.db().collect_garbage().unwrap();
            GC_JOBS.fetch_add(jobs as u64, std::sync::atomic::Ordering::Relaxed);
            self.applied(true);
        }
        let r = self.rng.gen_range(0..1000);
        match r {
            0..=299 => {
                let (k, v) = (key(&mut self.rng), value(&mut self.rng, step));
                let sync = self.rng.gen_bool(0.2) && !self.no_wal;
                self.log
                    .push(format!("put {} sync={sync}", String::from_utf8_lossy(&k)));
                let mut b = WriteBatch::new();
                b.put(&k, &v);
                self.db()
                    .write(
                        b,
                        WriteOptions {
                            sync,
                            disable_wal: self.no_wal,
                        },
                    )
                    .unwrap();
                self.model.insert(k, v);
                self.applied(sync);
            }
            300..=399 => {
                let k = key(&mut self.rng);
                let sync = self.rng.gen_bool(0.2) && !self.no_wal;
                self.log.push(format!(
                    "delete {} sync={sync}",
                    String::from_utf8_lossy(&k)
                ));
                let mut b = WriteBatch::new();
                b.delete(&k);
                self.db()
                    .write(
                        b,
                        WriteOptions {
                            sync,
                            disable_wal: self.no_wal,
                        },
                    )
                    .unwrap();
                self.model.remove(&k);
                self.applied(sync);
            }
            400..=479 => {
                let mut b = WriteBatch::new();
                let n = self.rng.gen_range(1..8);
                for _ in 0..n {
                    let k = key(&mut self.rng);
                    if self.rng.gen_bool(0.3) {
                        b.delete(&k);
                        self.model.remove(&k);
                    } else {
                        let v = value(&mut self.rng, step);
                        b.put(&k, &v);
                        self.model.insert(k, v);
                    }
                }
                let sync = self.rng.gen_bool(0.3) && !self.no_wal;
                self.log.push(format!("batch of {n} sync={sync}"));
                self.db()
                    .write(
                        b,
                        WriteOptions {
                            sync,
                            disable_wal: self.no_wal,
                        },
                    )
                    .unwrap();
                self.applied(sync);
            }
            480..=629 => {
                let k = key(&mut self.rng);
                let got = self.db().get(&k).unwrap();
                assert_eq!(
                    got.as_ref(),
                    self.model.get(&k),
                    "{ctx}: get {}",
                    String::from_utf8_lossy(&k)
                );
            }
            630..=679 => {
                if self.snapshots.len() < 3 {
                    self.log.push("snapshot".into());
                    let s = self.db().snapshot().unwrap();
                    self.snapshots.push((s, self.model.clone()));
                } else {
                    self.log.push("release snapshot".into());
                    let i = self.rng.gen_range(0..self.snapshots.len());
                    self.snapshots.swap_remove(i);
                }
            }
            680..=719 => {
                if !self.snapshots.is_empty() {
                    let i = self.rng.gen_range(0..self.snapshots.len());
                    let k = key(&mut self.rng);
                    let (snap, m) = &self.snapshots[i];
                    let ro = ReadOptions {
                        snapshot: Some(snap),
                        ..Default::default()
                    };
                    let got = self.db().get_opt(&k, &ro).unwrap();
                    assert_eq!(got.as_ref(), m.get(&k), "{ctx}: snapshot get");
                    let mut rng = StdRng::seed_from_u64(self.rng.gen());
                    check_iter(
                        self.db(),
                        Some(snap),
                        m,
                        &mut rng,
                        &format!("{ctx} snapshot iter"),
                    );
                }
            }
            720..=819 => {
                let mut rng = StdRng::seed_from_u64(self.rng.gen());
                check_iter(
                    self.db(),
                    None,
                    &self.model,
                    &mut rng,
                    &format!("{ctx} iter"),
                );
            }
            820..=859 => {
                self.log.push("flush".into());
                self.maybe_faulty("flush", true, |db| db.flush());
            }
            860..=889 => {
                let (a, b) = (key(&mut self.rng), key(&mut self.rng));
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                let all = self.rng.gen_bool(0.3);
                self.log.push(format!("compact_range all={all}"));
                self.maybe_faulty("compact_range", true, move |db| {
                    if all {
                        db.compact_range(None, None)
                    } else {
                        db.compact_range(Some(&lo), Some(&hi))
                    }
                });
            }
            890..=914 => {
                self.log.push("gc".into());
                self.maybe_faulty("gc", false, |db| {
                    let jobs = db.collect_garbage()?;
                    GC_JOBS.fetch_add(jobs as u64, std::sync::atomic::Ordering::Relaxed);
                    Ok(())
                });
            }
            915..=939 => {
                // Sometimes flip between fixed and dynamic level sizes, which
                // moves the dynamic base level while shallower levels still
                // hold data; manual range compactions must cope.
                if self.rng.gen_bool(0.3) {
                    self.opts.dynamic_level_bytes = !self.opts.dynamic_level_bytes;
                }
                self.log.push(format!(
                    "reopen dynamic_level_bytes={}",
                    self.opts.dynamic_level_bytes
                ));
                self.snapshots.clear();
                self.db.take().unwrap().close().unwrap();
                self.db = Some(Db::open(DIR, self.opts.clone()).unwrap());
                self.applied(true);
                assert!(
                    scan(self.db(), None) == self.model,
                    "{ctx}: state after reopen differs"
                );
            }
            _ => self.crash(&ctx),
        }
    }

    /// Runs `op` (a flush, compaction or GC; `durable` says whether it
    /// makes everything so far durable), with one I/O fault armed in a
    /// tenth of the cases. If the fault fired and the store failed, the
    /// store is restarted: as the process left the files (every
    /// acknowledged write must be there) or after a crash.
    fn maybe_faulty(
        &mut self,
        what: &str,
        durable: bool,
        op: impl FnOnce(&Db) -> tern::Result<()>,
    ) {
        if !self.rng.gen_bool(0.1) {
            op(self.db()).unwrap_or_else(|e| panic!("{what} failed with no fault injected: {e}"));
            self.applied(durable);
            return;
        }
        let before = self.fault.injected();
        let kind = INSTALL_FAULTS[self.rng.gen_range(0..INSTALL_FAULTS.len())];
        let after = self.rng.gen_range(0..6);
        self.log.push(format!("  armed {kind} fault after {after}"));
        self.fault.inject(kind, after, false);
        let res = op(self.db());
        self.fault.clear();
        // Let background work started by `op` finish with faults off, so
        // nothing that met the fault is still in flight (this also flushes:
        // everything so far is durable once it succeeds).
        let settled = self.db().wait_for_background();
        let failed = self.db().stats().background_error;
        if self.fault.injected() == before {
            res.unwrap_or_else(|e| panic!("{what} failed with no fault injected: {e}"));
            settled.unwrap();
            assert_eq!(failed, None, "{what}: store failed with no fault injected");
            self.applied(true);
            return;
        }
        FAULTS_FIRED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if res.is_ok() && settled.is_ok() && failed.is_none() {
            // The fault hit work that is retried (a compaction or GC job).
            self.applied(true);
            return;
        }
        self.log.push(format!("  {what} failed: {res:?}"));
        if self.rng.gen_bool(0.5) {
            self.log.push("  restart".into());
            self.snapshots.clear();
            drop(self.db.take());
            self.db = Some(Db::open(DIR, self.opts.clone()).unwrap());
            let state = scan(self.db(), None);
            if self.no_wal {
                // The failed store could not flush at close: writes that
                // skipped the WAL since the last flush are gone.
                self.adopt_recovered(&format!("restart after a failed {what}"), state);
            } else {
                assert!(
                    state == self.model,
                    "restart after a failed {what} lost acknowledged writes"
                );
                self.applied(true);
            }
        } else {
            self.crash(&format!("after a failed {what}"));
        }
    }

    fn crash(&mut self, ctx: &str) {
        let mode = CrashMode::ALL[self.rng.gen_range(0..CrashMode::ALL.len())];
        let seed = self.rng.gen();
        self.log.push(format!("crash {mode:?}"));
        CRASHES[mode as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.snapshots.clear();
        let survivor = self.fs.crashed_copy_with(mode, seed);
        drop(self.db.take());
        self.fs = survivor;
        self.fault = FaultFs::new(self.fs.clone());
        self.opts.fs = self.fault.clone();
        self.db = Some(Db::open(DIR, self.opts.clone()).unwrap());
        let state = scan(self.db(), None);
        if mode == CrashMode::KeepAll && !self.no_wal {
            // Everything written reached the OS before it was acknowledged
            // (writes that skip the WAL only reach it at a flush).
            assert!(
                state == self.model,
                "{ctx}: a process crash lost acknowledged writes"
            );
        }
        self.adopt_recovered(ctx, state);
    }

    /// Checks a recovered state and makes it the model's. It must be one of
    /// the states since the last durable point: every synced write present,
    /// nothing deleted reappearing, batches whole.
    fn adopt_recovered(&mut self, ctx: &str, state: Model) {
        let Some(i) = self.since_durable.iter().rposition(|m| *m == state) else {
            let last = self.since_durable.last().cloned().unwrap_or_default();
            let missing: Vec<_> = last
                .keys()
                .filter(|k| !state.contains_key(*k))
                .take(5)
                .collect();
            let extra: Vec<_> = state
                .keys()
                .filter(|k| !last.contains_key(*k))
                .take(5)
                .collect();
            panic!(
                "{ctx}: state after crash matches none of the {} states since the last durable point \
                 (vs latest: missing {missing:?}, extra {extra:?})",
                self.since_durable.len()
            );
        };
        self.model = self.since_durable[i].clone();
        self.since_durable.clear();
        self.since_durable.push(self.model.clone());
    }
}

fn run_seed(seed: u64, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let fs = MemFs::new();
    let fault = FaultFs::new(fs.clone());
    let mut opts = random_options(&mut rng, fault.clone());
    // Every other seed: all values separated, a small key space, low GC
    // ratio and frequent compaction + GC.
    let gc_heavy = seed % 2 == 1;
    if gc_heavy {
        opts.blob_threshold = Some(if rng.gen_bool(0.5) { 0 } else { 16 });
        opts.gc_garbage_ratio = rng.gen_range(0.01..0.3);
    }
    KEYS.with(|k| k.set(if gc_heavy { 40 } else { 400 }));
    let no_wal = seed % 7 == 3;
    if no_wal {
        NO_WAL_SEEDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let db = Db::open(DIR, opts.clone()).unwrap();
    let mut run = Run {
        rng,
        fs,
        fault,
        opts,
        db: Some(db),
        model: Model::new(),
        since_durable: vec![Model::new()],
        snapshots: Vec::new(),
        log: Vec::new(),
        gc_heavy,
        no_wal,
    };
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for step in 0..steps {
            run.step(step);
        }
        run.snapshots.clear();
        let db = run.db.take().unwrap();
        assert!(scan(&db, None) == run.model, "final state differs");
        let st = db.stats();
        RELOCATED.fetch_add(
            st.gc_records_relocated,
            std::sync::atomic::Ordering::Relaxed,
        );
        REWRITTEN.fetch_add(st.blob_refs_rewritten, std::sync::atomic::Ordering::Relaxed);
        db.close().unwrap();
    }));
    if let Err(e) = res {
        let tail: Vec<_> = run.log.iter().rev().take(15).rev().cloned().collect();
        eprintln!("model test failed; replay with TERN_MODEL_SEED={seed}\nlast operations: {tail:#?}\noptions: {:?}", run.opts);
        std::panic::resume_unwind(e);
    }
}

#[test]
fn model_based_random_operations_with_restarts_and_crashes() {
    let steps: usize = std::env::var("TERN_MODEL_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    if let Some(seed) = std::env::var("TERN_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        run_seed(seed, steps);
        return;
    }
    let seeds: u64 = std::env::var("TERN_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    let base: u64 = std::env::var("TERN_MODEL_BASE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in base..base + seeds {
        run_seed(seed, steps);
    }
    let (jobs, moved, rewritten) = (
        GC_JOBS.load(std::sync::atomic::Ordering::Relaxed),
        RELOCATED.load(std::sync::atomic::Ordering::Relaxed),
        REWRITTEN.load(std::sync::atomic::Ordering::Relaxed),
    );
    let crashes: Vec<u64> = CRASHES
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    let faults = FAULTS_FIRED.load(std::sync::atomic::Ordering::Relaxed);
    let no_wal = NO_WAL_SEEDS.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "{seeds} seeds: {jobs} forced GC jobs, {moved} records relocated, {rewritten} refs rewritten, \
         crashes per mode {:?} = {crashes:?}, {faults} install faults fired, {no_wal} seeds without WAL",
        CrashMode::ALL
    );
    ci_summary("model_seeds", seeds);
    ci_summary("model_crashes", crashes.iter().sum());
    ci_summary("model_install_faults", faults);
    ci_summary("model_no_wal_seeds", no_wal);
    assert!(
        jobs > 0 && moved > 0,
        "the model test must exercise blob GC"
    );
    if seeds >= 50 {
        assert!(
            crashes.iter().all(|&c| c > 0) && faults > 0 && no_wal > 0,
            "the model test must exercise every crash mode, install faults and disable_wal"
        );
    }
}
