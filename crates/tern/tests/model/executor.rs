//! Runs a [`History`] against the store and an in-memory model, checking
//! every step. A failure panics with the step and the operation.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use tern::io::{CrashMode, FaultFs, FaultKind, MemFs};
use tern::{Db, Options, ReadOptions, Settings, Snapshot, WriteBatch, WriteOptions};
use tern_ops::{History, Op, Recovery, ScanBounds, Target};

use crate::reads::{check_iter, group_key, key_for, mix, scan, value_for, GROUP_WIDTH};
use crate::Model;

pub const DIR: &str = "/db";

/// Faults that install paths meet: table and blob output, manifest appends
/// and syncs, directory syncs, `CURRENT` renames, WAL switches. An
/// [`Op::Fault`]'s kind indexes this list.
pub const INSTALL_FAULTS: [FaultKind; 5] = [
    FaultKind::Write,
    FaultKind::Sync,
    FaultKind::SyncDir,
    FaultKind::Create,
    FaultKind::Rename,
];

/// Counters across every history run, to check the test exercises what it
/// claims to.
#[derive(Default)]
pub struct Counters {
    pub gc_jobs: AtomicU64,
    pub relocated: AtomicU64,
    pub rewritten: AtomicU64,
    pub crashes: [AtomicU64; CrashMode::ALL.len()],
    pub faults_fired: AtomicU64,
    pub write_faults: AtomicU64,
    pub state_checks: AtomicU64,
    pub no_wal_epochs: AtomicU64,
    /// Key-range parts of split compactions, in the final epochs.
    pub subcompactions: AtomicU64,
    /// Values compactions moved into sorted runs, in the final epochs.
    pub values_moved: AtomicU64,
    /// Memory-tier copy-ins, merges and copy-outs, in the final epochs.
    pub memtier: [AtomicU64; 4],
}

pub static COUNTERS: Counters = Counters {
    gc_jobs: AtomicU64::new(0),
    relocated: AtomicU64::new(0),
    rewritten: AtomicU64::new(0),
    crashes: [const { AtomicU64::new(0) }; CrashMode::ALL.len()],
    faults_fired: AtomicU64::new(0),
    write_faults: AtomicU64::new(0),
    state_checks: AtomicU64::new(0),
    no_wal_epochs: AtomicU64::new(0),
    subcompactions: AtomicU64::new(0),
    values_moved: AtomicU64::new(0),
    memtier: [const { AtomicU64::new(0) }; 4],
};

/// Engine options from a history's settings, on `fs`.
pub fn options_from(settings: &[(String, String)], fs: tern::io::FsRef) -> Options {
    let mut s = Settings::default();
    s.set_all(settings.iter().map(|(n, v)| (n, v)))
        .unwrap_or_else(|e| panic!("history settings: {e}"));
    Options::new(s).with_fs(fs)
}

/// What an operation under [`Run::maybe_faulty`] is.
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

/// The store, the model and what a crash may recover.
pub struct Run {
    fs: Arc<MemFs>,
    fault: Arc<FaultFs>,
    pub opts: Options,
    db: Option<Db>,
    model: Model,
    /// Model states since the last point known durable; a crash may recover any of them.
    since_durable: Vec<Model>,
    snapshots: Vec<(Snapshot, Model)>,
    /// Seed of the traces failed operations leave (torn failures are always on).
    torn: u64,
    /// This epoch's writes skip the WAL (`disable_wal`): they survive only a
    /// flush or a clean close, so a crash falls back to the last flushed
    /// state (or a later one an automatic flush made durable).
    no_wal: bool,
    /// The fault armed for the next write or maintenance operation.
    armed: Option<(FaultKind, u32, Recovery)>,
    /// Key numbers are `0..keys`.
    keys: u32,
    /// What happened, one line per operation and per notable event.
    pub log: Vec<String>,
}

/// Snapshots held at most; an [`Op::Snapshot`] beyond releases the oldest.
const MAX_SNAPSHOTS: usize = 4;

impl Run {
    /// Opens a fresh store for `h`.
    pub fn new(h: &History) -> Run {
        let fs = MemFs::new();
        let fault = FaultFs::new(fs.clone());
        let torn = h.param_num("torn", 0u64).unwrap();
        fault.set_torn_failures(torn);
        let opts = options_from(&h.settings, fault.clone());
        let no_wal = h.param_num("no_wal", 0u8).unwrap() == 1;
        if no_wal {
            COUNTERS.no_wal_epochs.fetch_add(1, Relaxed);
        }
        let db = Db::open(DIR, opts.clone()).unwrap();
        Run {
            fs,
            fault,
            opts,
            db: Some(db),
            model: Model::new(),
            since_durable: vec![Model::new()],
            snapshots: Vec::new(),
            torn,
            no_wal,
            armed: None,
            keys: h.keys.max(1),
            log: Vec::new(),
        }
    }

    fn db(&self) -> &Db {
        self.db.as_ref().unwrap()
    }

    fn key(&self, k: u32) -> Vec<u8> {
        key_for(k % self.keys)
    }

    /// A scan's bounds as keys, and its direction.
    fn key_bounds(&self, b: &ScanBounds) -> (Option<Vec<u8>>, Option<Vec<u8>>, bool) {
        let key = |k: Option<u32>| k.map(|k| self.key(k));
        (key(b.lower), key(b.upper), b.reverse)
    }

    fn applied(&mut self, durable: bool) {
        if durable {
            self.since_durable.clear();
        }
        self.since_durable.push(self.model.clone());
    }

    /// Runs operation number `step`, then checks the whole state.
    pub fn step(&mut self, step: usize, op: &Op) {
        self.log.push(format!("{step}: {op}"));
        let ctx = format!("step {step} ({op})");
        match op {
            Op::Write { entries, sync } => {
                let mut b = WriteBatch::new();
                let mut after = self.model.clone();
                for (i, e) in entries.iter().enumerate() {
                    let keys: Vec<Vec<u8>> = match e.target {
                        Target::Key(k) => vec![self.key(k)],
                        Target::Group(g) => (0..GROUP_WIDTH).map(|j| group_key(g, j)).collect(),
                    };
                    let v = value_for(step, i as u64);
                    for k in keys {
                        if e.put {
                            b.put(&k, &v);
                            after.insert(k, v.clone());
                        } else {
                            b.delete(&k);
                            after.remove(&k);
                        }
                    }
                }
                let sync = *sync && !self.no_wal;
                let opts = WriteOptions {
                    sync,
                    disable_wal: self.no_wal,
                };
                self.maybe_faulty(Step::Write { after, sync }, move |db| db.write(b, opts));
            }
            Op::Get { key } => {
                let k = self.key(*key);
                let got = self.db().get(&k).unwrap();
                assert_eq!(got.as_ref(), self.model.get(&k), "{ctx}: get");
            }
            Op::Scan { bounds } => {
                let bounds = self.key_bounds(bounds);
                check_iter(self.db(), None, &self.model, bounds, step as u64, &ctx);
            }
            Op::Snapshot => {
                if self.snapshots.len() >= MAX_SNAPSHOTS {
                    self.snapshots.remove(0);
                }
                let s = self.db().snapshot().unwrap();
                self.snapshots.push((s, self.model.clone()));
            }
            Op::Release { index } => {
                if !self.snapshots.is_empty() {
                    let i = *index as usize % self.snapshots.len();
                    self.snapshots.swap_remove(i);
                }
            }
            Op::SnapshotRead { index, key, bounds } => {
                if !self.snapshots.is_empty() {
                    let (snap, m) = &self.snapshots[*index as usize % self.snapshots.len()];
                    let k = self.key(*key);
                    let ro = ReadOptions {
                        snapshot: Some(snap),
                        ..Default::default()
                    };
                    let got = self.db().get_opt(&k, &ro).unwrap();
                    assert_eq!(got.as_ref(), m.get(&k), "{ctx}: snapshot get");
                    let bounds = self.key_bounds(bounds);
                    check_iter(self.db(), Some(snap), m, bounds, step as u64, &ctx);
                }
            }
            Op::GroupCheck { group } => self.check_group(*group, &ctx),
            Op::SyncWal => {
                if self.no_wal {
                    // Nothing to sync; the armed fault goes with the op.
                    self.armed = None;
                } else {
                    self.maybe_faulty(Step::SyncWal, |db| db.sync_wal());
                }
            }
            Op::Flush => self.maybe_faulty(Step::Flush, |db| db.flush()),
            Op::Compact { range } => {
                let range = range.map(|(a, b)| {
                    let (a, b) = (self.key(a), self.key(b));
                    if a <= b {
                        (a, b)
                    } else {
                        (b, a)
                    }
                });
                self.maybe_faulty(Step::Compact, move |db| match &range {
                    None => db.compact_range(None, None),
                    Some((lo, hi)) => db.compact_range(Some(lo), Some(hi)),
                });
            }
            Op::Gc => self.maybe_faulty(Step::Gc, |db| {
                let jobs = db.collect_garbage()?;
                COUNTERS.gc_jobs.fetch_add(jobs as u64, Relaxed);
                Ok(())
            }),
            Op::Fault { kind, skip, then } => {
                let kind = INSTALL_FAULTS[*kind as usize % INSTALL_FAULTS.len()];
                self.armed = Some((kind, *skip, *then));
            }
            Op::Faults { .. } => {
                panic!("{ctx}: the model test arms single faults; random faults are `tern stress --sim`'s")
            }
            Op::Reopen {
                no_wal,
                flip_dynamic,
            } => {
                self.armed = None;
                if *flip_dynamic {
                    self.opts.dynamic_level_bytes = !self.opts.dynamic_level_bytes;
                }
                self.snapshots.clear();
                self.db.take().unwrap().close().unwrap();
                self.db = Some(Db::open(DIR, self.opts.clone()).unwrap());
                self.applied(true);
                self.start_epoch(*no_wal);
            }
            Op::Crash { mode, seed, no_wal } => {
                self.armed = None;
                self.crash(&ctx, *mode, *seed, None);
                self.start_epoch(*no_wal);
            }
        }
        self.check_state(step);
    }

    fn start_epoch(&mut self, no_wal: bool) {
        self.no_wal = no_wal;
        if no_wal {
            COUNTERS.no_wal_epochs.fetch_add(1, Relaxed);
        }
    }

    /// Every member of `group` at one snapshot: all there with one value,
    /// or none, as the model says.
    fn check_group(&self, group: u32, ctx: &str) {
        let snap = self.db().snapshot().unwrap();
        let ro = ReadOptions {
            snapshot: Some(&snap),
            ..Default::default()
        };
        let got: Vec<Option<Vec<u8>>> = (0..GROUP_WIDTH)
            .map(|j| self.db().get_opt(&group_key(group, j), &ro).unwrap())
            .collect();
        let want: Vec<Option<&Vec<u8>>> = (0..GROUP_WIDTH)
            .map(|j| self.model.get(&group_key(group, j)))
            .collect();
        assert!(
            got.iter().map(Option::as_ref).eq(want.iter().copied()),
            "{ctx}: group {group} reads {got:?}"
        );
        assert!(
            got.iter().all(|v| *v == got[0]),
            "{ctx}: group {group} is torn"
        );
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
        for i in 0..4 {
            let k = self.key(mix(step as u64, i) as u32);
            let got = self.db().get(&k).unwrap();
            assert_eq!(
                got.as_ref(),
                self.model.get(&k),
                "step {step}: get {:?}",
                String::from_utf8_lossy(&k)
            );
        }
        COUNTERS.state_checks.fetch_add(1, Relaxed);
    }

    /// Runs `op`, the work of `step`, with the armed I/O fault if there is
    /// one. Failed operations may leave traces (torn failures are on). If
    /// the fault fired and the store failed, the store is restarted: as the
    /// process left the files (every acknowledged write must be there; a
    /// failed write may be) or after a crash, as the fault says.
    fn maybe_faulty(&mut self, step: Step, op: impl FnOnce(&Db) -> tern::Result<()>) {
        let what = step.name();
        let durable = step.durable(self.no_wal);
        let appends_wal = step.appends_wal();
        let after = match step {
            Step::Write { after, .. } => Some(after),
            _ => None,
        };
        let Some((kind, skip, then)) = self.armed.take() else {
            op(self.db()).unwrap_or_else(|e| panic!("{what} failed with no fault injected: {e}"));
            if let Some(after) = after {
                self.model = after;
            }
            self.applied(durable);
            return;
        };
        let before = self.fault.injected();
        self.fault.inject(kind, skip as u64, false);
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
        COUNTERS.faults_fired.fetch_add(1, Relaxed);
        if res.is_ok() && settled.is_ok() && failed.is_none() {
            // The fault hit work that is retried (a compaction or GC job).
            if let Some(after) = after {
                self.model = after;
            }
            self.applied(true);
            return;
        }
        if after.is_some() {
            COUNTERS.write_faults.fetch_add(1, Relaxed);
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
        match then {
            Recovery::Restart => self.restart_after_failure(what, maybe.as_ref()),
            Recovery::Crash { mode, seed } => self.crash(
                &format!("after a failed {what}"),
                mode,
                seed,
                maybe.as_ref(),
            ),
        }
    }

    /// Drops the failed store and opens it on the files as they are.
    fn restart_after_failure(&mut self, what: &str, maybe: Option<&Model>) {
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
                state == self.model || Some(&state) == maybe,
                "restart after a failed {what} lost acknowledged writes"
            );
            self.model = state;
            self.since_durable.clear();
            self.applied(true);
        }
    }

    /// Crashes in mode `mode` (an index into [`CrashMode::ALL`]) and
    /// reopens; `maybe` is the state a failed write would have made, which
    /// may be recovered too.
    fn crash(&mut self, ctx: &str, mode: u8, seed: u64, maybe: Option<&Model>) {
        let mode = CrashMode::ALL[mode as usize % CrashMode::ALL.len()];
        self.log.push(format!("  crash {mode:?}"));
        COUNTERS.crashes[mode as usize].fetch_add(1, Relaxed);
        self.snapshots.clear();
        let survivor = self.fs.crashed_copy_with(mode, seed);
        drop(self.db.take());
        self.fs = survivor;
        self.fault = FaultFs::new(self.fs.clone());
        self.fault.set_torn_failures(self.torn ^ seed);
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

    /// Closes the store after the last step, checking the final state.
    pub fn finish(mut self) {
        self.snapshots.clear();
        let db = self.db.take().unwrap();
        assert!(scan(&db, None) == self.model, "final state differs");
        let st = db.stats();
        COUNTERS
            .relocated
            .fetch_add(st.gc_records_relocated, Relaxed);
        COUNTERS
            .rewritten
            .fetch_add(st.blob_refs_rewritten, Relaxed);
        COUNTERS
            .subcompactions
            .fetch_add(st.subcompactions, Relaxed);
        COUNTERS.values_moved.fetch_add(st.values_moved, Relaxed);
        for (c, n) in COUNTERS.memtier.iter().zip([
            st.memtier_copy_ins,
            st.memtier_merges,
            st.memtier_copy_outs,
            st.memtier_restored,
        ]) {
            c.fetch_add(n, Relaxed);
        }
        db.close().unwrap();
    }
}

/// Runs every operation of `h`, then closes the store. Panics at the first
/// step that goes wrong, with the operations before it in `log`.
pub fn execute(h: &History, log: &mut Vec<String>) {
    let mut run = Run::new(h);
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for (i, op) in h.ops.iter().enumerate() {
            run.step(i, op);
        }
    }));
    *log = std::mem::take(&mut run.log);
    match res {
        Ok(()) => run.finish(),
        Err(e) => std::panic::resume_unwind(e),
    }
}
