//! Seeded model-based test: random operations against the store and against
//! an in-memory model (a `BTreeMap`).
//!
//! What is checked: after every step, the whole state through a forward
//! iterator and four random keys through `get`; reads, bounded and reverse
//! iterations, seeks and snapshot reads against the model when they run;
//! after every restart and crash, that the recovered state is one the
//! history allows (every synced write, flush and sync_wal kept; nothing
//! deleted back; batches whole; a failed write either there or not).
//! Crashes keep nothing unsynced, everything (a process crash), a random
//! prefix of unsynced bytes, unsynced pages out of order, or any subset of
//! unsynced directory entries. I/O faults hit writes, WAL syncs, flushes,
//! compactions and GC, and a failed operation may leave part of its effect
//! behind (torn failures). Keys come in four shapes (short, long with a
//! shared prefix, binary, prefixes of others). One seed in seven writes
//! without the WAL. Several writers at once are in
//! `concurrent_writers_see_their_own_writes`; compaction filters in
//! `tests/basic.rs`.
//!
//! `TERN_MODEL_SEED=<n>` replays one seed; `TERN_MODEL_SEEDS=<count>` sets how
//! many seeds run (default 24; CI runs more). A failure names its seed.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
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
        settings: tern::Settings {
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
            ..tern::Settings::default()
        },
        fs,
        ..Options::default()
    }
}

thread_local! {
    /// Size of the key space: small in GC-heavy runs so values are overwritten often.
    static KEYS: std::cell::Cell<u32> = const { std::cell::Cell::new(400) };
}

fn key(rng: &mut StdRng) -> Vec<u8> {
    key_for(rng.gen_range(0..KEYS.with(|k| k.get())))
}

/// Key number `i` in one of four shapes, so blocks see short keys, long
/// keys sharing a long prefix (restart points, prefix compression), binary
/// bytes including 0x00 and 0xff, and keys that are prefixes of others.
fn key_for(i: u32) -> Vec<u8> {
    match i % 4 {
        0 => format!("k{i:04}").into_bytes(),
        1 => format!("{}/{i:06}", "tenant-0042/objects/by-id".repeat(4)).into_bytes(),
        2 => {
            let mut k = vec![0xff, 0x00];
            k.extend_from_slice(&i.to_be_bytes());
            k
        }
        _ => format!("k{:04}", i - 3).into_bytes()[..1 + (i as usize % 5)].to_vec(),
    }
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
    scan_with(
        db,
        ReadOptions {
            snapshot: snap,
            ..Default::default()
        },
    )
}

/// Everything `opts` lets an iterator see.
fn scan_with(db: &Db, opts: ReadOptions<'_>) -> Model {
    let mut it = db.iter(opts).unwrap();
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

/// A step run under [`Run::maybe_faulty`].
enum Step {
    /// A write, after which the model is `after`.
    Write {
        after: Model,
        sync: bool,
    },
    SyncWal,
    Flush,
    Compact,
    Gc,
}

impl Step {
    fn name(&self) -> &'static str {
        match self {
            Step::Write { .. } => "write",
            Step::SyncWal => "sync_wal",
            Step::Flush => "flush",
            Step::Compact => "compact_range",
            Step::Gc => "gc",
        }
    }

    /// Whether success makes everything so far durable: a flush or
    /// compaction (which flushes first) does, a synced write or WAL sync
    /// does unless writes skip the WAL, a GC or unsynced write does not.
    fn durable(&self, no_wal: bool) -> bool {
        match self {
            Step::Write { sync, .. } => *sync,
            Step::SyncWal => !no_wal,
            Step::Flush | Step::Compact => true,
            Step::Gc => false,
        }
    }

    /// Whether it appends to or syncs the WAL, so that a failure may leave
    /// a torn record no later write may follow.
    fn appends_wal(&self) -> bool {
        matches!(self, Step::Write { .. } | Step::SyncWal)
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
static CRASHES: [std::sync::atomic::AtomicU64; CrashMode::ALL.len()] =
    [const { std::sync::atomic::AtomicU64::new(0) }; CrashMode::ALL.len()];
static FAULTS_FIRED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Steps after which the whole state was compared.
static STATE_CHECKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Of the faults fired, those that failed a write or left a store poisoned after one.
static WRITE_FAULTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
                    .push(format!("put {:?} sync={sync}", String::from_utf8_lossy(&k)));
                let mut b = WriteBatch::new();
                b.put(&k, &v);
                let mut after = self.model.clone();
                after.insert(k, v);
                self.write_op(b, sync, after);
            }
            300..=399 => {
                let k = key(&mut self.rng);
                let sync = self.rng.gen_bool(0.2) && !self.no_wal;
                self.log.push(format!(
                    "delete {:?} sync={sync}",
                    String::from_utf8_lossy(&k)
                ));
                let mut b = WriteBatch::new();
                b.delete(&k);
                let mut after = self.model.clone();
                after.remove(&k);
                self.write_op(b, sync, after);
            }
            400..=469 => {
                let mut b = WriteBatch::new();
                let mut after = self.model.clone();
                let n = self.rng.gen_range(1..8);
                for _ in 0..n {
                    let k = key(&mut self.rng);
                    if self.rng.gen_bool(0.3) {
                        b.delete(&k);
                        after.remove(&k);
                    } else {
                        let v = value(&mut self.rng, step);
                        b.put(&k, &v);
                        after.insert(k, v);
                    }
                }
                let sync = self.rng.gen_bool(0.3) && !self.no_wal;
                self.log.push(format!("batch of {n} sync={sync}"));
                self.write_op(b, sync, after);
            }
            470..=479 => {
                if !self.no_wal {
                    self.log.push("sync_wal".into());
                    self.maybe_faulty(Step::SyncWal, 0.1, |db| db.sync_wal());
                }
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
                self.maybe_faulty(Step::Flush, 0.1, |db| db.flush());
            }
            860..=889 => {
                let (a, b) = (key(&mut self.rng), key(&mut self.rng));
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                let all = self.rng.gen_bool(0.3);
                self.log.push(format!("compact_range all={all}"));
                self.maybe_faulty(Step::Compact, 0.1, move |db| {
                    if all {
                        db.compact_range(None, None)
                    } else {
                        db.compact_range(Some(&lo), Some(&hi))
                    }
                });
            }
            890..=914 => {
                self.log.push("gc".into());
                self.maybe_faulty(Step::Gc, 0.1, |db| {
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
            _ => self.crash(&ctx, None),
        }
    }

    /// After every step: the whole state through an iterator, and a few
    /// keys through `get` (its own path: memtables, bloom filters, table
    /// lookups, blob reads), must match the model.
    fn check_state(&mut self, step: usize) {
        assert!(
            scan(self.db(), None) == self.model,
            "step {step}: state differs from the model after {:?}",
            self.log.last()
        );
        for _ in 0..4 {
            let k = key(&mut self.rng);
            let got = self.db().get(&k).unwrap();
            assert_eq!(
                got.as_ref(),
                self.model.get(&k),
                "step {step}: get {:?}",
                String::from_utf8_lossy(&k)
            );
        }
        STATE_CHECKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Writes `batch`, after which the model is `after`; one write in fifty
    /// meets an armed I/O fault.
    fn write_op(&mut self, batch: WriteBatch, sync: bool, after: Model) {
        let opts = WriteOptions {
            sync,
            disable_wal: self.no_wal,
        };
        self.maybe_faulty(Step::Write { after, sync }, 0.02, move |db| {
            db.write(batch, opts)
        });
    }

    /// Runs `op`, the work of `step`, with one I/O fault armed in a
    /// `chance` of the cases. Failed operations may leave traces (torn
    /// failures are on). If the fault fired and the store failed, the
    /// store is restarted: as the process left the files (every
    /// acknowledged write must be there; a failed write may be) or after a
    /// crash.
    fn maybe_faulty(&mut self, step: Step, chance: f64, op: impl FnOnce(&Db) -> tern::Result<()>) {
        let what = step.name();
        let durable = step.durable(self.no_wal);
        let appends_wal = step.appends_wal();
        let after = match step {
            Step::Write { after, .. } => Some(after),
            _ => None,
        };
        if !self.rng.gen_bool(chance) {
            op(self.db()).unwrap_or_else(|e| panic!("{what} failed with no fault injected: {e}"));
            if let Some(after) = after {
                self.model = after;
            }
            self.applied(durable);
            return;
        }
        let before = self.fault.injected();
        let kind = INSTALL_FAULTS[self.rng.gen_range(0..INSTALL_FAULTS.len())];
        let skip = self.rng.gen_range(0..6);
        self.log.push(format!("  armed {kind} fault after {skip}"));
        self.fault.inject(kind, skip, false);
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
            if let Some(after) = after {
                self.model = after;
            }
            self.applied(true);
            return;
        }
        FAULTS_FIRED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if res.is_ok() && settled.is_ok() && failed.is_none() {
            // The fault hit work that is retried (a compaction or GC job).
            if let Some(after) = after {
                self.model = after;
            }
            self.applied(true);
            return;
        }
        if after.is_some() {
            WRITE_FAULTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // A write that failed may still be recovered; one acknowledged
        // before background work failed must be.
        let mut maybe = None;
        if let Some(after) = after {
            if res.is_ok() {
                self.model = after;
                self.applied(false);
            } else {
                self.since_durable.push(after.clone());
                maybe = Some(after);
            }
        }
        self.log.push(format!("  {what} failed: {res:?}"));
        if res.is_err() && appends_wal {
            // A failed write or WAL sync may have left a torn record; a
            // write accepted after it would follow it in the log and be
            // lost at recovery, so the store must refuse writes now.
            // (Failed compaction and GC jobs leave orphans and are retried.)
            let mut probe = WriteBatch::new();
            probe.put(b"probe-after-failure", b"x");
            let later = self.db().write(probe, WriteOptions::default());
            assert!(
                later.is_err(),
                "a write was accepted after a failed {what} ({res:?})"
            );
        }
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
                    state == self.model || Some(&state) == maybe.as_ref(),
                    "restart after a failed {what} lost acknowledged writes"
                );
                self.model = state;
                self.since_durable.clear();
                self.applied(true);
            }
        } else {
            self.crash(&format!("after a failed {what}"), maybe.as_ref());
        }
    }

    /// Crashes and reopens; `maybe` is the state a failed write would have
    /// made, which may be recovered too.
    fn crash(&mut self, ctx: &str, maybe: Option<&Model>) {
        let mode = CrashMode::ALL[self.rng.gen_range(0..CrashMode::ALL.len())];
        let seed = self.rng.gen();
        self.log.push(format!("crash {mode:?}"));
        CRASHES[mode as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.snapshots.clear();
        let survivor = self.fs.crashed_copy_with(mode, seed);
        drop(self.db.take());
        self.fs = survivor;
        self.fault = FaultFs::new(self.fs.clone());
        self.fault.set_torn_failures(self.rng.gen());
        self.opts.fs = self.fault.clone();
        self.db = Some(Db::open(DIR, self.opts.clone()).unwrap());
        let state = scan(self.db(), None);
        if mode == CrashMode::KeepAll && !self.no_wal {
            // Everything written reached the OS before it was acknowledged
            // (writes that skip the WAL only reach it at a flush).
            assert!(
                state == self.model || Some(&state) == maybe,
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
    fault.set_torn_failures(rng.gen());
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
            run.check_state(step);
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
    let write_faults = WRITE_FAULTS.load(std::sync::atomic::Ordering::Relaxed);
    let checks = STATE_CHECKS.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "{seeds} seeds: {checks} full-state checks, {jobs} forced GC jobs, {moved} records relocated, \
         {rewritten} refs rewritten, crashes per mode {:?} = {crashes:?}, {faults} faults fired \
         ({write_faults} on writes), {no_wal} seeds without WAL",
        CrashMode::ALL
    );
    ci_summary("model_state_checks", checks);
    ci_summary("model_write_faults", write_faults);
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
            crashes.iter().all(|&c| c > 0) && faults > 0 && write_faults > 0 && no_wal > 0,
            "the model test must exercise every crash mode, install and write faults and disable_wal"
        );
    }
}

/// One writer's view: its own keys (prefix `w<n>/`, which no one else
/// writes) and the states they passed through since the last point known
/// durable for it.
struct Writer {
    prefix: Vec<u8>,
    model: Model,
    /// `history[i]` is the writer's state after its i-th recorded write.
    history: Vec<Model>,
}

impl Writer {
    fn key(&self, rng: &mut StdRng) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(&key_for(rng.gen_range(0..120)));
        k
    }

    /// The writer's keys as the store holds them.
    fn own(&self, db: &Db, snap: Option<&Snapshot>) -> Model {
        let mut upper = self.prefix.clone();
        *upper.last_mut().unwrap() += 1;
        scan_with(
            db,
            ReadOptions {
                snapshot: snap,
                lower_bound: Some(self.prefix.clone()),
                upper_bound: Some(upper),
            },
        )
    }
}

/// Writes a random batch of `w`'s keys and records the new state once it
/// is acknowledged (under `gate`, with the durable mark when synced).
fn writer_write(
    db: &Db,
    w: &mut Writer,
    gate: &parking_lot::RwLock<()>,
    mark: &AtomicUsize,
    rng: &mut StdRng,
    step: usize,
) {
    let mut b = WriteBatch::new();
    let mut after = w.model.clone();
    for _ in 0..rng.gen_range(1..4) {
        let k = w.key(rng);
        if rng.gen_bool(0.25) {
            b.delete(&k);
            after.remove(&k);
        } else {
            let v = value(rng, step);
            b.put(&k, &v);
            after.insert(k, v);
        }
    }
    let sync = rng.gen_bool(0.2);
    db.write(
        b,
        WriteOptions {
            sync,
            disable_wal: false,
        },
    )
    .unwrap();
    let _g = gate.read();
    w.model = after;
    w.history.push(w.model.clone());
    if sync {
        mark.store(w.history.len() - 1, Ordering::SeqCst);
    }
    WRITES_RECORDED.fetch_add(1, Ordering::SeqCst);
}

/// Writes recorded by all writers; compared before and after a crash image
/// to count images taken while writers were still running.
static WRITES_RECORDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static IMAGES_MID_WRITE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Runs one writer thread's operations. Every read of its own keys must
/// show exactly its own latest writes (no one else touches them), snapshot
/// reads the state when the snapshot was taken. Writes are recorded under
/// `gate` after they are acknowledged, so a crash image taken while the
/// gate is held for writing holds every write made durable before `mark`.
fn writer_ops(
    db: &Db,
    w: &mut Writer,
    gate: &parking_lot::RwLock<()>,
    mark: &AtomicUsize,
    seed: u64,
    ops: usize,
) -> u64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut checks = 0;
    for step in 0..ops {
        let r = rng.gen_range(0..100);
        if r < 50 {
            writer_write(db, w, gate, mark, &mut rng, step);
        } else if r < 75 {
            let k = w.key(&mut rng);
            assert_eq!(db.get(&k).unwrap().as_ref(), w.model.get(&k), "own get");
            checks += 1;
        } else if r < 90 {
            assert!(w.own(db, None) == w.model, "own keys through an iterator");
            checks += 1;
        } else if r < 95 {
            let snap = db.snapshot().unwrap();
            let at = w.model.clone();
            writer_write(db, w, gate, mark, &mut rng, step);
            assert!(w.own(db, Some(&snap)) == at, "snapshot of own keys");
            checks += 1;
        } else {
            match rng.gen_range(0..3) {
                0 => {
                    db.flush().unwrap();
                    let _g = gate.read();
                    mark.store(w.history.len() - 1, Ordering::SeqCst);
                }
                1 => db.compact_range(None, None).unwrap(),
                _ => {
                    db.collect_garbage().unwrap();
                }
            }
        }
    }
    checks
}

static CONCURRENT_CHECKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn run_concurrent(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut fs = MemFs::new();
    let mut opts = random_options(&mut rng, fs.clone());
    let threads = rng.gen_range(2..5);
    let mut writers: Vec<Writer> = (0..threads)
        .map(|t| Writer {
            prefix: format!("w{t}/").into_bytes(),
            model: Model::new(),
            history: vec![Model::new()],
        })
        .collect();
    for epoch in 0..4 {
        let db = Db::open(DIR, opts.clone()).unwrap();
        let gate = parking_lot::RwLock::new(());
        let crash = rng.gen_bool(0.6).then(|| {
            let mode = CrashMode::ALL[rng.gen_range(0..CrashMode::ALL.len())];
            (mode, rng.gen::<u64>(), rng.gen_range(0..40u64))
        });
        let seeds: Vec<u64> = (0..threads).map(|_| rng.gen()).collect();
        // Index into each writer's history of its last durable state.
        let marks: Vec<AtomicUsize> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
        // Those marks when the crash image was taken.
        let mut at_crash: Vec<usize> = Vec::new();
        let mut image = None;
        let mut recorded_at_image = 0;
        std::thread::scope(|s| {
            let handles: Vec<_> = writers
                .iter_mut()
                .zip(&seeds)
                .zip(&marks)
                .map(|((w, &seed), mark)| {
                    let (db, gate) = (&db, &gate);
                    s.spawn(move || writer_ops(db, w, gate, mark, seed, 150))
                })
                .collect();
            if let Some((mode, seed, delay)) = crash {
                // Power fails while the writers (and background work) run.
                std::thread::sleep(std::time::Duration::from_millis(delay));
                let _g = gate.write();
                image = Some((mode, fs.crashed_copy_with(mode, seed)));
                at_crash = marks.iter().map(|m| m.load(Ordering::SeqCst)).collect();
                recorded_at_image = WRITES_RECORDED.load(Ordering::SeqCst);
            }
            for h in handles {
                CONCURRENT_CHECKS
                    .fetch_add(h.join().unwrap(), std::sync::atomic::Ordering::Relaxed);
            }
        });
        if image.is_some() && WRITES_RECORDED.load(Ordering::SeqCst) > recorded_at_image {
            IMAGES_MID_WRITE.fetch_add(1, Ordering::Relaxed);
        }
        match image {
            None => {
                db.close().unwrap();
                let db = Db::open(DIR, opts.clone()).unwrap();
                for w in &mut writers {
                    assert!(
                        w.own(&db, None) == w.model,
                        "seed {seed} epoch {epoch}: reopen"
                    );
                    w.history = vec![w.model.clone()];
                }
                db.close().unwrap();
            }
            Some((mode, copy)) => {
                drop(db);
                fs = copy;
                opts.fs = fs.clone();
                let db = Db::open(DIR, opts.clone()).unwrap();
                for (t, w) in writers.iter_mut().enumerate() {
                    let got = w.own(&db, None);
                    // Only states recorded before the image count as
                    // durable; any later one may have made it too.
                    let allowed = &w.history[at_crash[t]..];
                    let Some(i) = allowed.iter().rposition(|m| *m == got) else {
                        panic!(
                            "seed {seed} epoch {epoch}: writer {t} after a {mode:?} crash holds \
                             none of its {} states since its last durable write",
                            allowed.len()
                        );
                    };
                    w.model = allowed[i].clone();
                    w.history = vec![w.model.clone()];
                }
                db.close().unwrap();
            }
        }
    }
}

/// Several writers at once, each on its own keys, with flushes, compactions
/// and GC from the writers themselves and power failures in the middle of
/// it all. Each writer's reads must be linearizable with its own writes;
/// after a crash each writer's keys must hold a prefix of its history that
/// includes its last durable write.
#[test]
fn concurrent_writers_see_their_own_writes() {
    let seeds: u64 = std::env::var("TERN_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(8, |n| (n / 10).max(4));
    for seed in 0..seeds {
        let res = std::panic::catch_unwind(|| run_concurrent(seed));
        if let Err(e) = res {
            eprintln!("concurrent model test failed at seed {seed}");
            std::panic::resume_unwind(e);
        }
    }
    let checks = CONCURRENT_CHECKS.load(std::sync::atomic::Ordering::Relaxed);
    let mid = IMAGES_MID_WRITE.load(Ordering::Relaxed);
    eprintln!(
        "{seeds} concurrent seeds, {checks} own-read checks, {mid} power failures while writers ran"
    );
    ci_summary("model_concurrent_seeds", seeds);
    ci_summary("model_concurrent_checks", checks);
    ci_summary("model_concurrent_mid_write_crashes", mid);
    assert!(
        checks > 0 && mid > 0,
        "own reads were checked and crashes hit running writers"
    );
}
