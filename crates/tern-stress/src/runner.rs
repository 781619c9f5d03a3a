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

use parking_lot::{Mutex, MutexGuard};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tern::{Db, ReadOptions, Snapshot, WriteBatch, WriteOptions};

use crate::config::StressConfig;
use crate::expected::{ExpectedState, KeyState};
use crate::keys::{self, GROUP_WIDTH};

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

struct Stress {
    db: Db,
    exp: ExpectedState,
    locks: Vec<Mutex<()>>,
    keys: usize,
    groups: usize,
    wopts: WriteOptions,
    counters: Counters,
    stop: AtomicBool,
    failure: Mutex<Option<String>>,
}

type Guards<'a> = Vec<MutexGuard<'a, ()>>;

fn ranges(keys: usize) -> usize {
    keys.div_ceil(RANGE)
}

impl Stress {
    fn slots(&self) -> usize {
        self.keys + self.groups
    }

    fn lock_of(&self, slot: usize) -> usize {
        if slot < self.keys {
            slot / RANGE
        } else {
            ranges(self.keys) + (slot - self.keys)
        }
    }

    fn lock_all(&self, slots: &[usize]) -> Guards<'_> {
        let mut ids: Vec<usize> = slots.iter().map(|&s| self.lock_of(s)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().map(|i| self.locks[i].lock()).collect()
    }

    fn fail(&self, msg: String) {
        let mut f = self.failure.lock();
        if f.is_none() {
            *f = Some(msg);
        }
        self.stop.store(true, Ordering::SeqCst);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Writes `states` (slot → new state) in one batch for thread `writer`,
    /// with the expected state marked pending around it (and, for several
    /// slots, the batch recorded so a crash cannot tear it unnoticed). The
    /// caller holds the locks.
    fn write(&self, writer: usize, states: &[(usize, KeyState)]) -> Result<(), String> {
        let mut batch = WriteBatch::new();
        for &(slot, st) in states {
            self.exp.set_pending(slot, st);
            if slot < self.keys {
                let k = keys::plain_key(slot);
                if st.exists() {
                    batch.put(&k, &keys::value(slot, st.version()));
                } else {
                    batch.delete(&k);
                }
            } else {
                let g = slot - self.keys;
                let v = keys::value(slot, st.version());
                for j in 0..GROUP_WIDTH {
                    if st.exists() {
                        batch.put(&keys::group_key(g, j), &v);
                    } else {
                        batch.delete(&keys::group_key(g, j));
                    }
                }
            }
        }
        if states.len() > 1 {
            let slots: Vec<usize> = states.iter().map(|&(s, _)| s).collect();
            self.exp.begin_batch(writer, &slots);
        }
        self.db
            .write(batch, self.wopts)
            .map_err(|e| format!("write failed: {e}"))?;
        for &(slot, _) in states {
            self.exp.commit(slot);
        }
        self.exp.end_batch(writer);
        Ok(())
    }

    /// Reads `slot` (a group: all members, which must agree) at `snap`.
    fn read_slot(&self, slot: usize, snap: Option<&Snapshot>) -> Result<Option<Vec<u8>>, String> {
        let ro = ReadOptions {
            snapshot: snap,
            ..Default::default()
        };
        if slot < self.keys {
            return self
                .db
                .get_opt(&keys::plain_key(slot), &ro)
                .map_err(|e| format!("get k{slot}: {e}"));
        }
        let g = slot - self.keys;
        let mut first: Option<Option<Vec<u8>>> = None;
        for j in 0..GROUP_WIDTH {
            let v = self
                .db
                .get_opt(&keys::group_key(g, j), &ro)
                .map_err(|e| format!("get group {g}: {e}"))?;
            match &first {
                None => first = Some(v),
                Some(f) if *f != v => {
                    return Err(format!(
                        "group {g} is torn: member 0 is {}, member {j} is {}",
                        keys::describe(f.as_deref()),
                        keys::describe(v.as_deref())
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(first.flatten())
    }

    fn check(
        &self,
        slot: usize,
        got: Option<&[u8]>,
        want: KeyState,
        ctx: &str,
    ) -> Result<(), String> {
        if keys::matches(slot, want, got) {
            Ok(())
        } else {
            Err(format!(
                "{ctx}: slot {slot} ({}) reads {}, expected {}",
                self.slot_name(slot),
                keys::describe(got),
                keys::describe_state(want)
            ))
        }
    }

    fn slot_name(&self, slot: usize) -> String {
        if slot < self.keys {
            format!("key k{slot:08}")
        } else {
            format!("group {}", slot - self.keys)
        }
    }

    /// Scans the plain keys of `range` with an iterator (at `snap`) and
    /// compares them with `want` (the states of the range's keys, in order).
    fn scan_range(
        &self,
        range: usize,
        want: &[KeyState],
        snap: Option<&Snapshot>,
        reverse: bool,
        ctx: &str,
    ) -> Result<(), String> {
        let lo = range * RANGE;
        let hi = (lo + RANGE).min(self.keys);
        let mut it = self
            .db
            .iter(ReadOptions {
                snapshot: snap,
                lower_bound: Some(keys::plain_key(lo)),
                upper_bound: Some(keys::plain_key(hi)),
            })
            .map_err(|e| format!("{ctx}: iterator: {e}"))?;
        let mut seen: Vec<Option<Vec<u8>>> = vec![None; hi - lo];
        let mut last: Option<Vec<u8>> = None;
        if reverse {
            it.seek_to_last();
        } else {
            it.seek_to_first();
        }
        while it.valid() {
            let k = it.key().to_vec();
            if let Some(l) = &last {
                let ordered = if reverse { k < *l } else { k > *l };
                if !ordered {
                    return Err(format!(
                        "{ctx}: iterator out of order: {} after {}",
                        String::from_utf8_lossy(&k),
                        String::from_utf8_lossy(l)
                    ));
                }
            }
            match keys::parse_plain_key(&k) {
                Some(slot) if (lo..hi).contains(&slot) => {
                    seen[slot - lo] = Some(it.value().to_vec())
                }
                _ => {
                    return Err(format!(
                        "{ctx}: iterator over [{lo}, {hi}) returned key {}",
                        String::from_utf8_lossy(&k)
                    ))
                }
            }
            last = Some(k);
            if reverse {
                it.prev();
            } else {
                it.next();
            }
        }
        it.status().map_err(|e| format!("{ctx}: iterator: {e}"))?;
        for (i, got) in seen.iter().enumerate() {
            self.check(lo + i, got.as_deref(), want[i], ctx)?;
        }
        Ok(())
    }

    fn range_states(&self, range: usize) -> Vec<KeyState> {
        let lo = range * RANGE;
        let hi = (lo + RANGE).min(self.keys);
        (lo..hi).map(|k| self.exp.committed(k)).collect()
    }

    /// Compares one lock's keys with the store (point reads and a scan),
    /// holding the lock.
    fn verify_lock(&self, lock: usize, ctx: &str) -> Result<u64, String> {
        let _g = self.locks[lock].lock();
        let nr = ranges(self.keys);
        if lock < nr {
            let want = self.range_states(lock);
            self.scan_range(lock, &want, None, false, ctx)?;
            let lo = lock * RANGE;
            for (i, w) in want.iter().enumerate() {
                let got = self.read_slot(lo + i, None)?;
                self.check(lo + i, got.as_deref(), *w, ctx)?;
            }
            Ok(want.len() as u64)
        } else {
            let slot = self.keys + (lock - nr);
            let got = self.read_slot(slot, None)?;
            self.check(slot, got.as_deref(), self.exp.committed(slot), ctx)?;
            Ok(1)
        }
    }

    /// Full verification while the workers run, one lock at a time.
    fn verify_all(&self, ctx: &str) -> Result<(), String> {
        for lock in 0..self.locks.len() {
            if self.stopped() && ctx != "final verification" {
                return Ok(());
            }
            let n = self.verify_lock(lock, ctx)?;
            self.counters.keys_verified.fetch_add(n, Ordering::Relaxed);
        }
        Ok(())
    }

    fn one_op(&self, writer: usize, rng: &mut StdRng) -> Result<(), String> {
        let keys = self.keys;
        let p = rng.gen_range(0..1000);
        let c = &self.counters;
        match p {
            0..=449 => {
                let exists = p < 350;
                let k = rng.gen_range(0..keys);
                let _g = self.lock_all(&[k]);
                let st = self.exp.next_state(k, exists);
                self.write(writer, &[(k, st)])?;
                if exists { &c.puts } else { &c.deletes }.fetch_add(1, Ordering::Relaxed);
            }
            450..=549 => {
                let n = rng.gen_range(2..9);
                let mut slots: Vec<usize> = (0..n).map(|_| rng.gen_range(0..keys)).collect();
                if self.groups > 0 && rng.gen_bool(0.3) {
                    slots.push(keys + rng.gen_range(0..self.groups));
                }
                slots.sort_unstable();
                slots.dedup();
                let _g = self.lock_all(&slots);
                let states: Vec<(usize, KeyState)> = slots
                    .iter()
                    .map(|&s| (s, self.exp.next_state(s, rng.gen_bool(0.8))))
                    .collect();
                self.write(writer, &states)?;
                c.batches.fetch_add(1, Ordering::Relaxed);
            }
            550..=629 if self.groups > 0 => {
                let slot = keys + rng.gen_range(0..self.groups);
                let _g = self.lock_all(&[slot]);
                let st = self.exp.next_state(slot, rng.gen_bool(0.85));
                self.write(writer, &[(slot, st)])?;
                c.group_writes.fetch_add(1, Ordering::Relaxed);
            }
            630..=799 => {
                let slot = if self.groups > 0 && rng.gen_bool(0.1) {
                    keys + rng.gen_range(0..self.groups)
                } else {
                    rng.gen_range(0..keys)
                };
                let _g = self.lock_all(&[slot]);
                let got = self.read_slot(slot, None)?;
                self.check(slot, got.as_deref(), self.exp.committed(slot), "point read")?;
                c.reads.fetch_add(1, Ordering::Relaxed);
            }
            800..=859 if self.groups > 0 => {
                // One snapshot, every member of a group, read two ways.
                let g = rng.gen_range(0..self.groups);
                let snap = self.db.snapshot().map_err(|e| format!("snapshot: {e}"))?;
                let point = self.read_slot(keys + g, Some(&snap))?;
                let mut prefix_end = keys::group_prefix(g);
                if let Some(last) = prefix_end.last_mut() {
                    *last += 1;
                }
                let mut it = self
                    .db
                    .iter(ReadOptions {
                        snapshot: Some(&snap),
                        lower_bound: Some(keys::group_prefix(g)),
                        upper_bound: Some(prefix_end),
                    })
                    .map_err(|e| format!("iterator: {e}"))?;
                it.seek_to_first();
                let mut n = 0;
                while it.valid() {
                    if Some(it.value()) != point.as_deref() {
                        return Err(format!(
                            "group {g} is torn at one snapshot: scan reads {} for {}, point reads {}",
                            keys::describe(Some(it.value())),
                            String::from_utf8_lossy(it.key()),
                            keys::describe(point.as_deref())
                        ));
                    }
                    n += 1;
                    it.next();
                }
                it.status().map_err(|e| format!("iterator: {e}"))?;
                let want = if point.is_some() { GROUP_WIDTH } else { 0 };
                if n != want {
                    return Err(format!(
                        "group {g} is torn at one snapshot: scan finds {n} members, point reads {}",
                        keys::describe(point.as_deref())
                    ));
                }
                c.group_checks.fetch_add(1, Ordering::Relaxed);
            }
            860..=929 => {
                let r = rng.gen_range(0..ranges(keys));
                let _g = self.lock_all(&[r * RANGE]);
                let want = self.range_states(r);
                self.scan_range(r, &want, None, rng.gen_bool(0.3), "scan")?;
                c.scans.fetch_add(1, Ordering::Relaxed);
            }
            930..=995 => {
                let r = rng.gen_range(0..ranges(keys));
                let (snap, want) = {
                    let _g = self.lock_all(&[r * RANGE]);
                    let snap = self.db.snapshot().map_err(|e| format!("snapshot: {e}"))?;
                    (snap, self.range_states(r))
                };
                // Let other threads move on before reading the old view.
                std::thread::sleep(Duration::from_micros(rng.gen_range(0..2000)));
                self.scan_range(r, &want, Some(&snap), rng.gen_bool(0.3), "snapshot scan")?;
                let lo = r * RANGE;
                for _ in 0..4 {
                    let i = rng.gen_range(0..want.len());
                    let got = self.read_slot(lo + i, Some(&snap))?;
                    self.check(lo + i, got.as_deref(), want[i], "snapshot read")?;
                }
                c.snapshot_checks.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                let m = rng.gen_range(0..100);
                if m < 55 {
                    self.db.flush().map_err(|e| format!("flush: {e}"))?;
                } else if m < 75 {
                    self.db
                        .collect_garbage()
                        .map_err(|e| format!("collect_garbage: {e}"))?;
                    c.gc_calls.fetch_add(1, Ordering::Relaxed);
                } else {
                    let a = rng.gen_range(0..keys);
                    let b = (a + rng.gen_range(1..keys.max(2))).min(keys - 1);
                    self.db
                        .compact_range(Some(&keys::plain_key(a)), Some(&keys::plain_key(b)))
                        .map_err(|e| format!("compact_range: {e}"))?;
                }
                c.maintenance.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

/// Checks that each batch in flight at the crash applied to all its slots
/// or to none, then forgets the records.
fn check_batches_whole(s: &Stress) -> Result<usize, String> {
    let batches = s.exp.batches_in_flight();
    for slots in &batches {
        let mut applied = Vec::new();
        let mut not = Vec::new();
        for &slot in slots {
            let got = s
                .read_slot(slot, None)
                .map_err(|e| format!("start-up verification: {e}"))?;
            // A slot without a pending mark was committed: the batch was
            // acknowledged, so it must have applied. A slot whose old and
            // new states read alike (a delete of an absent key) says nothing.
            let done = match s.exp.pending(slot) {
                Some(p) => {
                    let new = keys::matches(slot, p, got.as_deref());
                    if new && keys::matches(slot, s.exp.committed(slot), got.as_deref()) {
                        continue;
                    }
                    new
                }
                None => true,
            };
            if done { &mut applied } else { &mut not }.push(s.slot_name(slot));
        }
        if !applied.is_empty() && !not.is_empty() {
            return Err(format!(
                "start-up verification: a batch in flight at the crash is torn: \
                 applied to {applied:?}, not to {not:?}"
            ));
        }
    }
    for w in 0..crate::expected::MAX_WRITERS {
        s.exp.end_batch(w);
    }
    Ok(batches.len())
}

/// Checks every slot against its committed or pending state, then records
/// what the store holds as committed. Returns (pending found, pending
/// applied, batches in flight found whole). Single-threaded, before any
/// writer starts.
fn verify_and_resolve(s: &Stress) -> Result<(usize, usize, usize), String> {
    let batches = check_batches_whole(s)?;
    let mut pending = 0;
    let mut applied = 0;
    for slot in 0..s.slots() {
        let got = s
            .read_slot(slot, None)
            .map_err(|e| format!("start-up verification: {e}"))?;
        let committed = s.exp.committed(slot);
        let pend = s.exp.pending(slot);
        if let Some(p) = pend {
            pending += 1;
            if keys::matches(slot, p, got.as_deref()) {
                applied += 1;
                s.exp.resolve(slot, p);
                continue;
            }
        }
        if keys::matches(slot, committed, got.as_deref()) {
            s.exp.resolve(slot, committed);
            continue;
        }
        return Err(format!(
            "start-up verification: {} reads {}, expected {}{}",
            s.slot_name(slot),
            keys::describe(got.as_deref()),
            keys::describe_state(committed),
            match pend {
                Some(p) => format!(" or (in flight) {}", keys::describe_state(p)),
                None => " (no write in flight): an acknowledged write was lost or a deleted key came back"
                    .to_string(),
            }
        ));
    }
    // Now every slot is resolved; a full scan must agree exactly.
    for r in 0..ranges(s.keys) {
        let want = s.range_states(r);
        s.scan_range(r, &want, None, false, "start-up scan")?;
    }
    s.counters
        .keys_verified
        .fetch_add(s.slots() as u64, Ordering::Relaxed);
    Ok((pending, applied, batches))
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
    let db = Db::open(&dir, cfg.knobs.options())
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
    for t in 0..a.threads {
        let s = s.clone();
        let seed = cfg.seed.wrapping_mul(1000).wrapping_add(t as u64 + 1);
        handles.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            while !s.stopped() {
                if let Err(e) = s.one_op(t, &mut rng) {
                    s.fail(e);
                    break;
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
                    "stress: [{:.1}s] {}, gc jobs {}",
                    start.elapsed().as_secs_f64(),
                    s.counters.line(),
                    s.db.stats().gc_runs
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
            "stress: done in {secs:.1}s, {verifications} periodic verifications, {} ({:.0} ops/s), gc jobs {gc_runs}",
            s.counters.line(),
            ops as f64 / secs.max(1e-9)
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
