//! Runs a `--sim` history: each operation against the simulated store, each
//! epoch end (a clean reopen or a power failure) checked against the log of
//! acknowledged writes.

use std::path::Path;
use std::sync::Arc;

use tern::io::{CrashMode, FaultFs, FsRef, MemFs};
use tern::{Db, Options, Settings, WriteBatch, WriteOptions};
use tern_ops::{History, Op, Target};

use super::state::{read_range, LoggedWrite, Sim};
use super::SimReport;
use crate::keys;

/// The simulated store's directory.
const DIR: &str = "/stress";

/// Engine options from a history's settings, on `fs`.
pub(super) fn options_from(h: &History, fs: FsRef) -> Result<Options, String> {
    let mut s = Settings::default();
    s.set_all(h.settings.iter().map(|(n, v)| (n, v)))
        .map_err(|e| format!("history settings: {e}"))?;
    Ok(Options::new(s).with_fs(fs))
}

/// `tern check` on the files in `mem`: an error naming `when` unless it
/// finds no problem.
fn check_files(mem: &Arc<MemFs>, when: &str) -> Result<(), String> {
    let rep = tern::tools::check::check_store(Path::new(DIR), mem.clone())
        .map_err(|e| format!("{when}: check failed to run: {e}"))?;
    if rep.is_ok() {
        return Ok(());
    }
    let p: Vec<String> = rep.problems.iter().map(|p| p.to_string()).collect();
    Err(format!(
        "{when}: tern check found problems: {}",
        p.join("; ")
    ))
}

/// The executor's state between operations.
pub(super) struct Exec {
    sim: Sim,
    mem: Arc<MemFs>,
    fault: Arc<FaultFs>,
    db: Option<Db>,
    opts: Options,
    /// Every write is synced.
    sync_all: bool,
    /// This epoch's writes skip the WAL.
    no_wal: bool,
    /// An operation failed this epoch: the store may be poisoned, so the
    /// rest of the epoch is skipped.
    failed: bool,
    last_crash: Option<CrashMode>,
    /// Epochs ended so far.
    pub(super) epochs: u64,
    pub(super) report: SimReport,
}

impl Exec {
    /// A fresh simulated store for `h`.
    pub(super) fn new(h: &History) -> Result<Exec, String> {
        let mem = MemFs::new();
        let fault = FaultFs::new(mem.clone());
        let opts = options_from(h, fault.clone())?;
        let db = Db::open(DIR, opts.clone()).map_err(|e| format!("open failed: {e}"))?;
        let no_wal = h.param_num("no_wal", 0u8)? == 1;
        let report = SimReport {
            no_wal_epochs: u64::from(no_wal),
            ..SimReport::default()
        };
        Ok(Exec {
            sim: Sim::new(h.keys as usize),
            mem,
            fault,
            db: Some(db),
            opts,
            sync_all: h.param_num("sync_all", 0u8)? == 1,
            no_wal,
            failed: false,
            last_crash: None,
            epochs: 0,
            report,
        })
    }

    fn db(&self) -> Result<&Db, String> {
        self.db.as_ref().ok_or_else(|| "no store open".to_string())
    }

    fn slot(&self, key: u32) -> usize {
        key as usize % self.sim.keys.max(1)
    }

    /// Runs one operation. `Err` when the store broke the contract.
    pub(super) fn step(&mut self, op: &Op) -> Result<(), String> {
        if let Op::Reopen { no_wal, .. } = op {
            return self.end_epoch(None, *no_wal);
        }
        if let Op::Crash { mode, seed, no_wal } = op {
            let mode = CrashMode::ALL[*mode as usize % CrashMode::ALL.len()];
            return self.end_epoch(Some((mode, *seed)), *no_wal);
        }
        if let Op::Faults {
            seed,
            per_million,
            torn,
        } = op
        {
            self.fault
                .set_random(*seed, f64::from(*per_million) / 1e6, &[]);
            if *torn {
                self.fault.set_torn_failures(seed.rotate_left(17));
            }
            return Ok(());
        }
        if self.failed {
            return Ok(());
        }
        self.report.ops += 1;
        let ok = match op {
            Op::Write { entries, sync } => self.write(entries, *sync)?,
            Op::Get { key } => {
                self.check_get(self.slot(*key))?;
                true
            }
            Op::Scan { bounds } => {
                let mut lower = bounds.lower.map(|k| self.slot(k));
                let mut upper = bounds.upper.map(|k| self.slot(k));
                if let (Some(l), Some(u)) = (lower, upper) {
                    (lower, upper) = (Some(l.min(u)), Some(l.max(u)));
                }
                self.check_scan(lower, upper, bounds.reverse)?;
                true
            }
            Op::SyncWal => {
                let r = self.db()?.sync_wal();
                if self.no_wal {
                    // Writes that skip the WAL are not made durable by it.
                    r.is_ok()
                } else {
                    self.made_durable_by(r)
                }
            }
            Op::Flush => {
                let r = self.db()?.flush();
                self.made_durable_by(r)
            }
            Op::Gc => {
                // Garbage collection makes nothing durable by itself.
                self.report.gc_calls += 1;
                self.db()?.collect_garbage().is_ok()
            }
            Op::Compact { range } => {
                let r = match range {
                    None => self.db()?.compact_range(None, None),
                    Some((a, b)) => {
                        let (a, b) = (self.slot(*a), self.slot(*b));
                        let (lo, hi) = (keys::plain_key(a.min(b)), keys::plain_key(a.max(b)));
                        self.db()?.compact_range(Some(&lo), Some(&hi))
                    }
                };
                self.made_durable_by(r)
            }
            other => return Err(format!("--sim does not run `{other}` operations")),
        };
        self.failed = !ok;
        Ok(())
    }

    /// After a flush or compaction: everything acknowledged is durable.
    fn made_durable_by(&mut self, r: tern::Result<()>) -> bool {
        let ok = r.is_ok();
        if ok {
            self.sim.durable = self.sim.log.len();
        }
        ok
    }

    /// One atomic write; false if it failed (its outcome is then unknown).
    fn write(&mut self, entries: &[tern_ops::Entry], sync: bool) -> Result<bool, String> {
        let sync = (self.sync_all || sync) && !self.no_wal;
        let mut states = Vec::new();
        let mut batch = WriteBatch::new();
        // A later entry for the same key wins, as in every executor.
        for e in entries.iter().rev() {
            let Target::Key(k) = e.target else {
                return Err("--sim does not write groups".into());
            };
            let k = self.slot(k);
            if states.iter().any(|&(s, _)| s == k) {
                continue;
            }
            let st = self.sim.next_state(k, e.put);
            if st.exists() {
                batch.put(&keys::plain_key(k), &keys::value(k, st.version()));
            } else {
                batch.delete(&keys::plain_key(k));
            }
            states.push((k, st));
        }
        let entry = LoggedWrite { states };
        let opts = WriteOptions {
            sync,
            disable_wal: self.no_wal,
        };
        if self.db()?.write(batch, opts).is_err() {
            self.sim.unknown = Some(entry);
            return Ok(false);
        }
        for &(s, st) in &entry.states {
            self.sim.live[s] = st;
        }
        self.sim.log.push(entry);
        if sync {
            self.sim.durable = self.sim.log.len();
        }
        Ok(true)
    }

    /// A point read compared with the live state. An injected read error
    /// is reported, never wrong data; any other read error is a bug.
    fn check_get(&self, k: usize) -> Result<(), String> {
        let injected = self.fault.injected();
        match self.db()?.get(&keys::plain_key(k)) {
            Ok(v) if !keys::matches(k, self.sim.live[k], v.as_deref()) => Err(format!(
                "k{k:08} reads {}, expected {}",
                keys::describe(v.as_deref()),
                keys::describe_state(self.sim.live[k])
            )),
            Err(err) if self.fault.injected() == injected => {
                Err(format!("get k{k:08} failed with no fault injected: {err}"))
            }
            _ => Ok(()),
        }
    }

    /// A scan of slots `lower..upper`, compared with the live state.
    fn check_scan(
        &self,
        lower: Option<usize>,
        upper: Option<usize>,
        reverse: bool,
    ) -> Result<(), String> {
        let injected = self.fault.injected();
        let n = self.sim.keys;
        match read_range(self.db()?, n, lower, upper, reverse) {
            Ok(got) => {
                let (lo, hi) = (lower.unwrap_or(0), upper.unwrap_or(n));
                // Outside the bounds the iterator must return nothing.
                let wrong = |k: usize| {
                    if (lo..hi).contains(&k) {
                        !keys::matches(k, self.sim.live[k], got[k].as_deref())
                    } else {
                        got[k].is_some()
                    }
                };
                match (0..n).find(|&k| wrong(k)) {
                    Some(k) => Err(format!(
                        "scan reads k{k:08} as {}, expected {}",
                        keys::describe(got[k].as_deref()),
                        keys::describe_state(self.sim.live[k])
                    )),
                    None => Ok(()),
                }
            }
            Err(err) if self.fault.injected() == injected => {
                Err(format!("scan failed with no fault injected: {err}"))
            }
            Err(_) => Ok(()),
        }
    }

    /// Ends the epoch with a clean close (`crash` none) or a power failure,
    /// then checks the files, reopens, and checks the recovered state
    /// against the log. The next epoch's writes skip the WAL if `no_wal`.
    fn end_epoch(&mut self, crash: Option<(CrashMode, u64)>, no_wal: bool) -> Result<(), String> {
        let db = self.db.take().ok_or("no store open")?;
        self.report.gc_runs += db.stats().gc_runs;
        self.fault.clear();
        match crash {
            None => {
                let closed = db.close().is_ok();
                if closed || !self.no_wal {
                    // A clean close makes everything durable; after a
                    // failed one (the store was poisoned) every
                    // acknowledged write is still in the WAL files as the
                    // process left them, and only the failed write's
                    // outcome is unknown.
                    self.sim.durable = self.sim.log.len();
                }
                self.report.clean_closes += u64::from(closed);
                self.last_crash = None;
            }
            Some((mode, seed)) => {
                let copy = self.mem.crashed_copy_with(mode, seed);
                drop(db);
                self.mem = copy;
                self.report.crashes += 1;
                self.report.crashes_by_mode[mode as usize] += 1;
                self.last_crash = Some(mode);
            }
        }
        self.report.faults += self.fault.injected();
        self.epochs += 1;
        // Check the files the epoch left before the store touches them.
        check_files(&self.mem, "after the epoch")?;
        self.fault = FaultFs::new(self.mem.clone());
        self.opts.fs = self.fault.clone();
        let db = Db::open(DIR, self.opts.clone()).map_err(|e| format!("reopen failed: {e}"))?;
        let lost = self.sim.recover(&db)?;
        self.report
            .count_lost(lost, self.no_wal, self.last_crash, self.sync_all)?;
        self.db = Some(db);
        self.no_wal = no_wal;
        self.report.no_wal_epochs += u64::from(no_wal);
        self.failed = false;
        Ok(())
    }

    /// After the last operation: a last power failure's recovery is
    /// checked by [`Exec::end_epoch`] already; this closes cleanly and
    /// checks the files once more.
    pub(super) fn finish(mut self) -> Result<SimReport, String> {
        let db = self.db.take().ok_or("no store open")?;
        self.fault.clear();
        self.report.gc_runs += db.stats().gc_runs;
        db.close().map_err(|e| format!("final close: {e}"))?;
        check_files(&self.mem, "after the final close")?;
        self.report.blob_files = self
            .mem
            .file_names()
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "blob"))
            .count() as u64;
        Ok(self.report)
    }
}
