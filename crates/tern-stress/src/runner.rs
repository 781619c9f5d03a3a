//! `tern stress` against a real directory: worker threads writing and
//! verifying, an expected-state file beside the store, verification of the
//! whole store at start-up and periodically.
//!
//! Keys are locked in ranges of [`RANGE`] plain keys (and one lock per atomic
//! group). A writer holds the locks of every key it writes while it marks
//! them pending, writes, and commits them in the expected state; a verifier
//! holds a range's lock while it compares the range with the store, so the
//! comparison is exact. Snapshot checks copy the expected state of a range
//! under its lock, take a snapshot at the same moment, and compare later,
//! while other threads keep writing the range.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tern::{Db, WriteOptions};
use tern_ops::{Generator, Profile};

use crate::config::StressConfig;
use crate::expected::ExpectedState;
use stress::{ranges, verify_and_resolve, Stress};

mod stress;

/// Plain keys per lock.
pub const RANGE: usize = 64;

/// Counters of one run.
#[derive(Debug, Default)]
pub struct Counters {
    /// Single puts.
    pub puts: AtomicU64,
    /// Single deletes.
    pub deletes: AtomicU64,
    /// Multi-key batches.
    pub batches: AtomicU64,
    /// Atomic group writes.
    pub group_writes: AtomicU64,
    /// Point reads checked against the expected state.
    pub reads: AtomicU64,
    /// Range scans checked against the expected state.
    pub scans: AtomicU64,
    /// Snapshot checks (point reads and scans at an older snapshot).
    pub snapshot_checks: AtomicU64,
    /// Group atomicity checks (one snapshot, all members agree).
    pub group_checks: AtomicU64,
    /// Explicit flushes, range compactions and blob GC calls.
    pub maintenance: AtomicU64,
    /// Of `maintenance`, explicit `collect_garbage` calls.
    pub gc_calls: AtomicU64,
    /// Keys compared by full verifications.
    pub keys_verified: AtomicU64,
}

impl Counters {
    /// All operations so far.
    pub fn ops(&self) -> u64 {
        [
            &self.puts,
            &self.deletes,
            &self.batches,
            &self.group_writes,
            &self.reads,
            &self.scans,
            &self.snapshot_checks,
            &self.group_checks,
            &self.maintenance,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    fn line(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "ops {} (put {} del {} batch {} group {} read {} scan {} snap {} groupcheck {} maint {} gc {}), keys verified {}",
            self.ops(),
            g(&self.puts),
            g(&self.deletes),
            g(&self.batches),
            g(&self.group_writes),
            g(&self.reads),
            g(&self.scans),
            g(&self.snapshot_checks),
            g(&self.group_checks),
            g(&self.maintenance),
            g(&self.gc_calls),
            g(&self.keys_verified)
        )
    }
}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Operations done.
    pub ops: u64,
    /// Keys found with a pending mark at start-up.
    pub pending_at_start: usize,
    /// Of those, how many held the in-flight write.
    pub pending_applied: usize,
    /// A one-line summary of the counters.
    pub summary: String,
    /// Blob GC jobs the store installed during the run
    /// (`Stats::gc_runs`), background and explicit.
    pub gc_runs: u64,
}

/// The offload part of a progress line: jobs workers ran, jobs run
/// locally, jobs on workers now.
fn offload_line(e: &tern_offload::RemoteExecutor) -> String {
    let st = e.stats();
    let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
    format!(
        ", offloaded {} (local {}), jobs in flight {}",
        st.remote_jobs(),
        g(&st.local_jobs),
        e.jobs_in_flight()
    )
}

/// Runs [`tern::tools::check::check_store`] on the closed store at `dir` and fails
/// on any problem it reports (blob files and every blob reference included).
pub fn check_dir(dir: &std::path::Path) -> Result<(), String> {
    let fs: tern::io::FsRef = Arc::new(tern::io::PosixFs);
    let report =
        tern::tools::check::check_store(dir, fs).map_err(|e| format!("tern check: {e}"))?;
    if report.is_ok() {
        Ok(())
    } else {
        let p: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
        Err(format!("tern check found problems: {}", p.join("; ")))
    }
}

/// Runs `tern stress` as configured, printing progress to `log`.
pub fn run(cfg: &StressConfig, log: &mut dyn Write) -> Result<RunReport, String> {
    let a = &cfg.args;
    let dir = a.dir.clone().ok_or("--dir is required")?;
    let exp_path = cfg.expected_path().ok_or("no expected-state path")?;
    let w = |log: &mut dyn Write, s: String| {
        let _ = writeln!(log, "{s}");
        let _ = log.flush();
    };
    w(log, format!("stress: {}", cfg.command_line()));
    let slots = a.keys + a.groups;
    let exp = ExpectedState::open(&exp_path, slots).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let offload = crate::offload::executor(a, &dir)?;
    let executor = offload
        .clone()
        .map(|e| e as Arc<dyn tern::compaction::Executor>);
    let db = Db::open_with_executor(&dir, cfg.knobs.options(), executor)
        .map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    w(
        log,
        format!("stress: opened {} in {:.2?}", dir.display(), t0.elapsed()),
    );
    let nlocks = ranges(a.keys) + a.groups;
    let s = Arc::new(Stress {
        db,
        exp,
        locks: (0..nlocks).map(|_| Mutex::new(())).collect(),
        keys: a.keys,
        groups: a.groups,
        wopts: WriteOptions {
            sync: cfg.knobs.sync,
            disable_wal: false,
        },
        counters: Counters::default(),
        stop: AtomicBool::new(false),
        failure: Mutex::new(None),
    });
    let t1 = Instant::now();
    let (pending, applied, batches) =
        verify_and_resolve(&s).map_err(|e| format!("{e}\nrepeat with: {}", cfg.command_line()))?;
    s.exp
        .flush()
        .map_err(|e| format!("cannot write {}: {e}", exp_path.display()))?;
    w(
        log,
        format!(
            "stress: start-up verification of {slots} slots passed in {:.2?}: {pending} writes were in flight, {applied} of them applied; {batches} batches in flight were whole",
            t1.elapsed()
        ),
    );
    if a.verify_only {
        let gc_runs = s.db.stats().gc_runs;
        s.db.close().map_err(|e| format!("close: {e}"))?;
        check_dir(&dir).map_err(|e| format!("after --verify-only: {e}"))?;
        return Ok(RunReport {
            ops: 0,
            pending_at_start: pending,
            pending_applied: applied,
            summary: s.counters.line(),
            gc_runs,
        });
    }

    let start = Instant::now();
    let deadline = (a.duration > 0.0).then(|| start + Duration::from_secs_f64(a.duration));
    let max_ops = a.ops;
    let mut handles = Vec::new();
    let profile = Profile {
        weights: cfg.weights,
        ..Profile::stress(a.keys as u32, a.groups as u32)
    };
    for t in 0..a.threads {
        let s = s.clone();
        let seed = cfg.seed.wrapping_mul(1000).wrapping_add(t as u64 + 1);
        handles.push(std::thread::spawn(move || {
            let mut gen = Generator::new(profile, seed);
            let mut ops = Vec::new();
            'run: while !s.stopped() {
                ops.clear();
                gen.next_into(&mut ops);
                for op in &ops {
                    if let Err(e) = s.one_op(t, op) {
                        s.fail(e);
                        break 'run;
                    }
                }
                if max_ops.is_some_and(|m| s.counters.ops() >= m) {
                    s.stop.store(true, Ordering::SeqCst);
                }
            }
        }));
    }
    let verify_every = Duration::from_secs_f64(a.verify_every.max(0.1));
    let progress_every = Duration::from_secs_f64(a.progress_every.max(0.1));
    let mut next_verify = Instant::now() + verify_every;
    let mut next_progress = Instant::now() + progress_every;
    let mut verifications = 0u64;
    while !s.stopped() {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            s.stop.store(true, Ordering::SeqCst);
            break;
        }
        if now >= next_progress {
            w(
                log,
                format!(
                    "stress: [{:.1}s] {}, gc jobs {}{}",
                    start.elapsed().as_secs_f64(),
                    s.counters.line(),
                    s.db.stats().gc_runs,
                    offload.as_deref().map(offload_line).unwrap_or_default()
                ),
            );
            next_progress = now + progress_every;
        }
        if now >= next_verify {
            if let Err(e) = s.verify_all("periodic verification") {
                s.fail(e);
                break;
            }
            verifications += 1;
            next_verify = Instant::now() + verify_every;
        }
    }
    for h in handles {
        if h.join().is_err() {
            s.fail("a worker thread panicked".into());
        }
    }
    if let Some(f) = s.failure.lock().take() {
        return Err(format!("{f}\nrepeat with: {}", cfg.command_line()));
    }
    s.verify_all("final verification")
        .map_err(|e| format!("{e}\nrepeat with: {}", cfg.command_line()))?;
    let gc_runs = s.db.stats().gc_runs;
    s.db.close().map_err(|e| format!("close: {e}"))?;
    check_dir(&dir)
        .map_err(|e| format!("after the run: {e}\nrepeat with: {}", cfg.command_line()))?;
    s.exp
        .flush()
        .map_err(|e| format!("cannot write {}: {e}", exp_path.display()))?;
    let ops = s.counters.ops();
    let secs = start.elapsed().as_secs_f64();
    w(
        log,
        format!(
            "stress: done in {secs:.1}s, {verifications} periodic verifications, {} ({:.0} ops/s), gc jobs {gc_runs}{}",
            s.counters.line(),
            ops as f64 / secs.max(1e-9),
            offload.as_deref().map(offload_line).unwrap_or_default()
        ),
    );
    Ok(RunReport {
        ops,
        pending_at_start: pending,
        pending_applied: applied,
        summary: format!("{}, gc jobs {gc_runs}", s.counters.line()),
        gc_runs,
    })
}
