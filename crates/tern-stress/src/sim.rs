//! `tern stress --sim`: the store on simulated files ([`MemFs`] behind a
//! [`FaultFs`]), random I/O errors, and simulated power failures
//! ([`MemFs::crashed_copy_with`], in every [`CrashMode`]: nothing unsynced
//! kept, everything kept, a random prefix of unsynced bytes, unsynced pages
//! out of order, or any subset of unsynced directory entries; a failed
//! operation may leave part of its effect) checked against the durability
//! contract.
//!
//! One thread issues every operation, so the log of acknowledged writes is
//! the store's commit order. After each power failure the recovered store
//! must equal the state after some prefix of that log that includes every
//! write made durable (a `sync` write, a `flush`, a clean `close`), plus
//! possibly the one write that failed last (its outcome is unknown). A batch
//! is one log entry, so a torn batch matches no prefix. Before reopening,
//! [`tern::tools::check::check_store`] must find no problem in the crashed files.

use std::io::Write;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tern::io::{CrashMode, FaultFs, FsRef, MemFs};
use tern::{Db, Options, ReadOptions, WriteBatch, WriteOptions};

use crate::config::StressConfig;
use crate::expected::KeyState;
use crate::keys;

const DIR: &str = "/stress";

/// One acknowledged (or failed) write: the new states of the slots it set.
#[derive(Debug, Clone)]
struct LoggedWrite {
    states: Vec<(usize, KeyState)>,
}

/// What a simulation run did.
#[derive(Debug, Clone, Default)]
pub struct SimReport {
    /// Simulated power failures (each followed by a check and a reopen).
    pub crashes: u64,
    /// Of those, per [`CrashMode::ALL`] entry.
    pub crashes_by_mode: [u64; CrashMode::ALL.len()],
    /// Clean closes instead of a crash.
    pub clean_closes: u64,
    /// Operations issued.
    pub ops: u64,
    /// Injected I/O errors.
    pub faults: u64,
    /// Writes lost by crashes (acknowledged but not durable: allowed).
    pub lost_unsynced: u64,
    /// Of those, per [`CrashMode::ALL`] entry of the crash that lost them
    /// (clean closes lose nothing).
    pub lost_by_mode: [u64; CrashMode::ALL.len()],
    /// Explicit `collect_garbage` calls.
    pub gc_calls: u64,
    /// Epochs whose writes all skipped the WAL (`disable_wal`).
    pub no_wal_epochs: u64,
    /// Writes of those epochs lost by the crash that ended them (allowed:
    /// they were not flushed).
    pub lost_without_wal: u64,
    /// Blob GC jobs installed (`Stats::gc_runs`), background and explicit.
    pub gc_runs: u64,
    /// Blob files in the store at the end.
    pub blob_files: u64,
}

impl SimReport {
    /// The progress line after `done` of `total` cycles.
    fn progress_line(&self, done: u64, total: u64) -> String {
        format!(
            "stress: [cycle {done}/{total}] {} crashes, {} clean closes, {} ops, {} injected faults, {} un-synced writes lost, {} gc calls, {} gc jobs",
            self.crashes,
            self.clean_closes,
            self.ops,
            self.faults,
            self.lost_unsynced,
            self.gc_calls,
            self.gc_runs
        )
    }

    /// The closing line of a run.
    fn done_line(&self) -> String {
        format!(
            "stress: simulation done: {} crashes ({:?} per mode {:?}), {} clean closes, {} epochs without WAL, {} ops, {} injected faults, {} gc calls, {} gc jobs, {} blob files at the end",
            self.crashes,
            self.crashes_by_mode,
            CrashMode::ALL,
            self.clean_closes,
            self.no_wal_epochs,
            self.ops,
            self.faults,
            self.gc_calls,
            self.gc_runs,
            self.blob_files
        )
    }

    /// Counts the `lost` writes a recovery found missing, after an epoch
    /// that skipped the WAL (`no_wal`: allowed whatever the sync mode) or
    /// one that ended in the crash `last_crash` (none: a clean close). With
    /// every write synced, losing any is an error.
    fn count_lost(
        &mut self,
        lost: u64,
        no_wal: bool,
        last_crash: Option<CrashMode>,
        synced: bool,
    ) -> Result<(), String> {
        if no_wal {
            self.lost_without_wal += lost;
            return Ok(());
        }
        self.lost_unsynced += lost;
        if let Some(mode) = last_crash {
            self.lost_by_mode[mode as usize] += lost;
        }
        if synced && lost > 0 {
            return Err(format!("{lost} synced writes were lost"));
        }
        Ok(())
    }
}

struct Sim {
    keys: usize,
    /// The recovered state at the start of the current epoch.
    base: Vec<KeyState>,
    /// Writes acknowledged since then, in commit order.
    log: Vec<LoggedWrite>,
    /// `log[..durable]` survives any crash.
    durable: usize,
    /// The write whose outcome is unknown (it returned an error).
    unknown: Option<LoggedWrite>,
    /// `base` with `log` applied: what reads must see now.
    live: Vec<KeyState>,
    /// Highest version used per slot (versions never repeat).
    version: Vec<u64>,
}

fn options_for(cfg: &StressConfig, fs: FsRef) -> Options {
    let k = &cfg.knobs.settings;
    Options {
        fs,
        ..cfg.knobs.options().tune(|s| {
            // Small memtables and files so flushes and compactions happen
            // within a few thousand operations.
            s.write_buffer_size = k.write_buffer_size.min(64 << 10);
            s.target_file_size = k.target_file_size.min(32 << 10);
            s.max_bytes_for_level_base = k.max_bytes_for_level_base.min(256 << 10);
            s.max_manifest_file_size = k.max_manifest_file_size.min(64 << 10);
            // Small blob files, so GC has many to pick from.
            s.blob_file_size = k.blob_file_size.min(16 << 10);
        })
    }
}

/// Reads every slot of the store: plain keys by one scan.
fn read_all(db: &Db, keys: usize) -> Result<Vec<Option<Vec<u8>>>, String> {
    let mut out = vec![None; keys];
    let mut it = db
        .iter(ReadOptions::default())
        .map_err(|e| format!("iterator: {e}"))?;
    it.seek_to_first();
    while it.valid() {
        match keys::parse_plain_key(it.key()) {
            Some(k) if k < keys => out[k] = Some(it.value().to_vec()),
            _ => {
                return Err(format!(
                    "unexpected key {}",
                    String::from_utf8_lossy(it.key())
                ))
            }
        }
        it.next();
    }
    it.status().map_err(|e| format!("iterator: {e}"))?;
    Ok(out)
}

impl Sim {
    /// Checks the recovered store against the log; on success starts a new
    /// epoch from what it holds. Returns the number of acknowledged writes
    /// that were lost (all of them after the durable point).
    fn recover(&mut self, db: &Db) -> Result<u64, String> {
        let got = read_all(db, self.keys)?;
        let mut state = self.base.clone();
        for w in &self.log[..self.durable] {
            for &(s, st) in &w.states {
                state[s] = st;
            }
        }
        let mut bad: usize = (0..self.keys)
            .filter(|&k| !keys::matches(k, state[k], got[k].as_deref()))
            .count();
        let apply = |state: &mut Vec<KeyState>, bad: &mut usize, w: &LoggedWrite| {
            for &(s, st) in &w.states {
                let before = keys::matches(s, state[s], got[s].as_deref());
                state[s] = st;
                let after = keys::matches(s, st, got[s].as_deref());
                match (before, after) {
                    (true, false) => *bad += 1,
                    (false, true) => *bad -= 1,
                    _ => {}
                }
            }
        };
        let mut best = (bad, self.durable);
        let mut found = (bad == 0).then_some(self.durable);
        let mut p = self.durable;
        while found.is_none() && p < self.log.len() {
            apply(&mut state, &mut bad, &self.log[p]);
            p += 1;
            if bad < best.0 {
                best = (bad, p);
            }
            if bad == 0 {
                found = Some(p);
            }
        }
        if found.is_none() {
            if let Some(u) = self.unknown.clone() {
                apply(&mut state, &mut bad, &u);
                if bad == 0 {
                    found = Some(self.log.len());
                }
            }
        }
        let Some(p) = found else {
            // Describe the closest prefix.
            let mut near = self.base.clone();
            for w in &self.log[..best.1] {
                for &(s, st) in &w.states {
                    near[s] = st;
                }
            }
            let diffs: Vec<String> = (0..self.keys)
                .filter(|&k| !keys::matches(k, near[k], got[k].as_deref()))
                .take(5)
                .map(|k| {
                    format!(
                        "k{k:08} reads {}, expected {}",
                        keys::describe(got[k].as_deref()),
                        keys::describe_state(near[k])
                    )
                })
                .collect();
            return Err(format!(
                "recovered state is no prefix of the acknowledged writes \
                 ({} logged, {} durable); closest prefix {} differs in {} keys: {}",
                self.log.len(),
                self.durable,
                best.1,
                best.0,
                diffs.join("; ")
            ));
        };
        let lost = (self.log.len() - p.min(self.log.len())) as u64;
        // `state` is the matched prefix (or the log plus the unknown
        // write): every key matches it.
        self.base = state;
        self.log.clear();
        self.durable = 0;
        self.unknown = None;
        self.live = self.base.clone();
        Ok(lost)
    }

    fn next_state(&mut self, k: usize, exists: bool) -> KeyState {
        self.version[k] += 1;
        KeyState::new(self.version[k], exists)
    }
}

/// Runs the in-process simulation, printing progress to `log`.
/// The store one epoch runs against, and how its writes are made.
struct Epoch<'a> {
    db: &'a Db,
    fault: &'a FaultFs,
    /// Every write is synced (`--sync`).
    sync_all: bool,
    /// Writes skip the WAL this epoch.
    no_wal: bool,
}

impl Sim {
    fn new(keys: usize) -> Self {
        Sim {
            keys,
            base: vec![KeyState::ABSENT; keys],
            log: Vec::new(),
            durable: 0,
            unknown: None,
            live: vec![KeyState::ABSENT; keys],
            version: vec![0; keys],
        }
    }

    /// Runs up to `ops` random operations. Returns `Ok(false)` once one
    /// failed (the store may be poisoned: the epoch ends), `Err` when a read
    /// saw wrong data or failed with no fault injected.
    fn run_ops(
        &mut self,
        e: &Epoch<'_>,
        rng: &mut StdRng,
        ops: u64,
        report: &mut SimReport,
    ) -> Result<bool, String> {
        for _ in 0..ops {
            report.ops += 1;
            let p = rng.gen_range(0..100);
            let sync = (e.sync_all || rng.gen_bool(0.02)) && !e.no_wal;
            let ok = if p < 70 {
                self.write(e, rng, p, sync)
            } else if p < 92 {
                self.check_get(e, rng)?;
                true
            } else if p < 97 {
                self.check_scan(e)?;
                true
            } else if p < 98 {
                self.made_durable_by(e.db.flush())
            } else if rng.gen_bool(0.5) {
                // Garbage collection makes nothing durable by itself.
                report.gc_calls += 1;
                e.db.collect_garbage().is_ok()
            } else {
                let a = rng.gen_range(0..self.keys);
                let b = rng.gen_range(a..self.keys);
                let r =
                    e.db.compact_range(Some(&keys::plain_key(a)), Some(&keys::plain_key(b)));
                self.made_durable_by(r)
            };
            if !ok {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// After a flush or compaction: everything acknowledged is durable.
    fn made_durable_by(&mut self, r: tern::Result<()>) -> bool {
        let ok = r.is_ok();
        if ok {
            self.durable = self.log.len();
        }
        ok
    }

    /// One write of a single key (`p < 55`) or a batch of several; false if
    /// it failed (its outcome is then unknown).
    fn write(&mut self, e: &Epoch<'_>, rng: &mut StdRng, p: i32, sync: bool) -> bool {
        let n = if p < 55 { 1 } else { rng.gen_range(2..8) };
        let mut states = Vec::new();
        let mut batch = WriteBatch::new();
        for _ in 0..n {
            let k = rng.gen_range(0..self.keys);
            if states.iter().any(|&(s, _)| s == k) {
                continue;
            }
            let st = self.next_state(k, rng.gen_bool(0.8));
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
            disable_wal: e.no_wal,
        };
        if e.db.write(batch, opts).is_err() {
            self.unknown = Some(entry);
            return false;
        }
        for &(s, st) in &entry.states {
            self.live[s] = st;
        }
        self.log.push(entry);
        if sync {
            self.durable = self.log.len();
        }
        true
    }

    /// A point read of a random key, compared with the live state. An
    /// injected read error is reported, never wrong data; any other read
    /// error is a bug.
    fn check_get(&self, e: &Epoch<'_>, rng: &mut StdRng) -> Result<(), String> {
        let k = rng.gen_range(0..self.keys);
        let injected = e.fault.injected();
        match e.db.get(&keys::plain_key(k)) {
            Ok(v) if !keys::matches(k, self.live[k], v.as_deref()) => Err(format!(
                "k{k:08} reads {}, expected {}",
                keys::describe(v.as_deref()),
                keys::describe_state(self.live[k])
            )),
            Err(err) if e.fault.injected() == injected => {
                Err(format!("get k{k:08} failed with no fault injected: {err}"))
            }
            _ => Ok(()),
        }
    }

    /// A full scan, compared with the live state.
    fn check_scan(&self, e: &Epoch<'_>) -> Result<(), String> {
        let injected = e.fault.injected();
        match read_all(e.db, self.keys) {
            Ok(got) => {
                match (0..self.keys).find(|&k| !keys::matches(k, self.live[k], got[k].as_deref())) {
                    Some(k) => Err(format!(
                        "scan reads k{k:08} as {}, expected {}",
                        keys::describe(got[k].as_deref()),
                        keys::describe_state(self.live[k])
                    )),
                    None => Ok(()),
                }
            }
            Err(err) if e.fault.injected() == injected => {
                Err(format!("scan failed with no fault injected: {err}"))
            }
            Err(_) => Ok(()),
        }
    }
}

/// `tern check` on the files in `mem`: an error naming `when` unless it
/// finds no problem.
fn check_files(mem: &std::sync::Arc<MemFs>, when: &str) -> Result<(), String> {
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

/// Runs the simulation `cfg` describes, logging progress to `log`.
pub fn run(cfg: &StressConfig, log: &mut dyn Write) -> Result<SimReport, String> {
    let a = &cfg.args;
    let keys_n = a.keys.min(20_000);
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x5157_0000);
    let mut w = |s: String| {
        let _ = writeln!(log, "{s}");
        let _ = log.flush();
    };
    w(format!("stress: {}", cfg.command_line()));
    let repeat = format!("repeat with: {}", cfg.command_line());
    let mut mem = MemFs::new();
    let mut sim = Sim::new(keys_n);
    let mut report = SimReport::default();
    let mut last_crash: Option<CrashMode> = None;
    let mut no_wal = false;
    for cycle in 0..a.crashes {
        let at = |e: String| format!("cycle {cycle}: {e}\n{repeat}");
        let fault = FaultFs::new(mem.clone());
        let fs: FsRef = fault.clone();
        // Check the files a crash left before the store touches them.
        if cycle > 0 {
            check_files(&mem, "after a crash").map_err(at)?;
        }
        let db =
            Db::open(DIR, options_for(cfg, fs)).map_err(|e| at(format!("reopen failed: {e}")))?;
        let lost = sim.recover(&db).map_err(at)?;
        report
            .count_lost(lost, no_wal, last_crash, cfg.knobs.sync)
            .map_err(at)?;
        // Some epochs run without faults, so flushes, compactions and clean
        // closes get done too.
        if rng.gen_bool(0.7) {
            fault.set_random(rng.gen(), a.fault_probability, &[]);
            // A failed operation may leave part of its effect behind.
            fault.set_torn_failures(rng.gen());
        }
        // Some epochs write everything without the WAL: what survives a
        // crash is then what the last flush (explicit or automatic) kept,
        // still a prefix of the history.
        no_wal = rng.gen_bool(0.1);
        report.no_wal_epochs += u64::from(no_wal);
        let epoch = Epoch {
            db: &db,
            fault: &fault,
            sync_all: cfg.knobs.sync,
            no_wal,
        };
        let failed = !sim
            .run_ops(&epoch, &mut rng, a.ops_per_crash, &mut report)
            .map_err(at)?;
        report.gc_runs += db.stats().gc_runs;
        if !failed && rng.gen_bool(0.2) {
            fault.clear();
            last_crash = None;
            if db.close().is_ok() {
                sim.durable = sim.log.len();
                report.clean_closes += 1;
            }
            drop(db);
        } else {
            let mode = CrashMode::ALL[rng.gen_range(0..CrashMode::ALL.len())];
            let copy = mem.crashed_copy_with(mode, rng.gen());
            fault.clear();
            drop(db);
            mem = copy;
            report.crashes += 1;
            report.crashes_by_mode[mode as usize] += 1;
            last_crash = Some(mode);
        }
        report.faults += fault.injected();
        if (cycle + 1) % 10 == 0 || cycle + 1 == a.crashes {
            w(report.progress_line(cycle + 1, a.crashes));
        }
    }
    let fin = |e: String| format!("{e}\n{repeat}");
    // A last reopen checks the final crash too.
    check_files(&mem, "final check").map_err(fin)?;
    let db = Db::open(DIR, options_for(cfg, mem.clone()))
        .map_err(|e| fin(format!("final reopen failed: {e}")))?;
    let lost = sim.recover(&db).map_err(|e| fin(format!("final: {e}")))?;
    report
        .count_lost(lost, no_wal, last_crash, cfg.knobs.sync)
        .map_err(|e| fin(format!("final: {e}")))?;
    db.close().map_err(|e| format!("final close: {e}"))?;
    check_files(&mem, "after the final close").map_err(fin)?;
    report.blob_files = mem
        .file_names()
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "blob"))
        .count() as u64;
    w(report.done_line());
    Ok(report)
}
