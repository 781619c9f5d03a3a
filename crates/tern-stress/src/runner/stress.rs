//! The shared state of a stress run and what its threads do: write,
//! verify ranges, check snapshots and batches.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tern::{Db, ReadOptions, Snapshot, WriteBatch, WriteOptions};
use tern_ops::{Op, Target};

use super::{Counters, RANGE};
use crate::expected::{ExpectedState, KeyState};
use crate::keys::{self, GROUP_WIDTH};

pub(super) struct Stress {
    pub(super) db: Db,
    pub(super) exp: ExpectedState,
    pub(super) locks: Vec<Mutex<()>>,
    pub(super) keys: usize,
    pub(super) groups: usize,
    pub(super) wopts: WriteOptions,
    pub(super) counters: Counters,
    pub(super) stop: AtomicBool,
    pub(super) failure: Mutex<Option<String>>,
}

type Guards<'a> = Vec<MutexGuard<'a, ()>>;

pub(super) fn ranges(keys: usize) -> usize {
    keys.div_ceil(RANGE)
}

impl Stress {
    pub(super) fn slots(&self) -> usize {
        self.keys + self.groups
    }

    pub(super) fn lock_of(&self, slot: usize) -> usize {
        if slot < self.keys {
            slot / RANGE
        } else {
            ranges(self.keys) + (slot - self.keys)
        }
    }

    pub(super) fn lock_all(&self, slots: impl IntoIterator<Item = usize>) -> Guards<'_> {
        let mut ids: Vec<usize> = slots.into_iter().map(|s| self.lock_of(s)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().map(|i| self.locks[i].lock()).collect()
    }

    pub(super) fn fail(&self, msg: String) {
        let mut f = self.failure.lock();
        if f.is_none() {
            *f = Some(msg);
        }
        self.stop.store(true, Ordering::SeqCst);
    }

    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Writes `states` (slot → new state) in one batch for thread `writer`,
    /// with the expected state marked pending around it (and, for several
    /// slots, the batch recorded so a crash cannot tear it unnoticed). The
    /// caller holds the locks.
    pub(super) fn write(&self, writer: usize, states: &[(usize, KeyState)]) -> Result<(), String> {
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
    pub(super) fn read_slot(
        &self,
        slot: usize,
        snap: Option<&Snapshot>,
    ) -> Result<Option<Vec<u8>>, String> {
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

    pub(super) fn check(
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

    pub(super) fn slot_name(&self, slot: usize) -> String {
        if slot < self.keys {
            format!("key k{slot:08}")
        } else {
            format!("group {}", slot - self.keys)
        }
    }

    /// Scans the plain keys of `range` with an iterator (at `snap`) and
    /// compares them with `want` (the states of the range's keys, in order).
    pub(super) fn scan_range(
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
                // The whole range: its values are read ahead in one batch.
                scan_len_hint: Some(hi - lo),
                // Both ways of reading a batch out of memory, by range.
                serial_reads: range % 2 == 1,
                ..ReadOptions::default()
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

    pub(super) fn range_states(&self, range: usize) -> Vec<KeyState> {
        let lo = range * RANGE;
        let hi = (lo + RANGE).min(self.keys);
        (lo..hi).map(|k| self.exp.committed(k)).collect()
    }

    /// Compares one lock's keys with the store (point reads and a scan),
    /// holding the lock.
    pub(super) fn verify_lock(&self, lock: usize, ctx: &str) -> Result<u64, String> {
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
    pub(super) fn verify_all(&self, ctx: &str) -> Result<(), String> {
        for lock in 0..self.locks.len() {
            if self.stopped() && ctx != "final verification" {
                return Ok(());
            }
            let n = self.verify_lock(lock, ctx)?;
            self.counters.keys_verified.fetch_add(n, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Runs one operation drawn by the shared generator. Group operations
    /// need `--groups`; restarts, crashes and armed faults are `--sim`'s.
    pub(super) fn one_op(&self, writer: usize, op: &Op) -> Result<(), String> {
        let keys = self.keys;
        let slot = |k: u32| k as usize % keys.max(1);
        let group = |g: u32| keys + g as usize % self.groups.max(1);
        let c = &self.counters;
        match op {
            Op::Write { entries, .. } => {
                let mut slots: Vec<(usize, bool)> = entries
                    .iter()
                    .filter(|e| self.groups > 0 || matches!(e.target, Target::Key(_)))
                    .map(|e| match e.target {
                        Target::Key(k) => (slot(k), e.put),
                        Target::Group(g) => (group(g), e.put),
                    })
                    .collect();
                // One state per slot: the last entry for it wins.
                slots.reverse();
                slots.sort_by_key(|&(s, _)| s);
                slots.dedup_by_key(|&mut (s, _)| s);
                if slots.is_empty() {
                    return Ok(());
                }
                let _g = self.lock_all(slots.iter().map(|&(s, _)| s));
                let states: Vec<(usize, KeyState)> = slots
                    .iter()
                    .map(|&(s, put)| (s, self.exp.next_state(s, put)))
                    .collect();
                self.write(writer, &states)?;
                let counter = match (entries.len(), entries.first()) {
                    (1, Some(e)) if matches!(e.target, Target::Group(_)) => &c.group_writes,
                    (1, Some(e)) if e.put => &c.puts,
                    (1, Some(_)) => &c.deletes,
                    _ => &c.batches,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Op::Get { key } => {
                let s = slot(*key);
                let _g = self.lock_all([s]);
                let got = self.read_slot(s, None)?;
                self.check(s, got.as_deref(), self.exp.committed(s), "point read")?;
                c.reads.fetch_add(1, Ordering::Relaxed);
            }
            Op::GroupCheck { group: g } if self.groups > 0 => {
                let g = *g as usize % self.groups;
                let _g = self.lock_all([keys + g]);
                let got = self.read_slot(keys + g, None)?;
                self.check(keys + g, got.as_deref(), self.exp.committed(keys + g), "group read")?;
                self.check_group(g)?;
                c.group_checks.fetch_add(1, Ordering::Relaxed);
            }
            Op::Scan { bounds } => {
                // Unbounded scans spread over the ranges too.
                let at = bounds.lower.or(bounds.upper).unwrap_or_else(|| {
                    (c.scans.load(Ordering::Relaxed) as u32 ^ writer as u32).wrapping_mul(2_654_435_761)
                });
                let r = slot(at) / RANGE % ranges(keys);
                let _g = self.lock_all([r * RANGE]);
                let want = self.range_states(r);
                self.scan_range(r, &want, None, bounds.reverse, "scan")?;
                c.scans.fetch_add(1, Ordering::Relaxed);
            }
            Op::SnapshotRead { key, bounds, .. } => {
                let r = slot(bounds.lower.unwrap_or(*key)) / RANGE % ranges(keys);
                let (snap, want) = {
                    let _g = self.lock_all([r * RANGE]);
                    let snap = self.db.snapshot().map_err(|e| format!("snapshot: {e}"))?;
                    (snap, self.range_states(r))
                };
                // Let other threads move on before reading the old view.
                std::thread::sleep(Duration::from_micros(u64::from(*key) % 2000));
                self.scan_range(r, &want, Some(&snap), bounds.reverse, "snapshot scan")?;
                let lo = r * RANGE;
                for j in 0..4u32 {
                    let i = (key.wrapping_mul(31).wrapping_add(j * 7)) as usize % want.len();
                    let got = self.read_slot(lo + i, Some(&snap))?;
                    self.check(lo + i, got.as_deref(), want[i], "snapshot read")?;
                }
                c.snapshot_checks.fetch_add(1, Ordering::Relaxed);
            }
            Op::SyncWal => {
                self.db.sync_wal().map_err(|e| format!("sync_wal: {e}"))?;
                c.maintenance.fetch_add(1, Ordering::Relaxed);
            }
            Op::Flush => {
                self.db.flush().map_err(|e| format!("flush: {e}"))?;
                c.maintenance.fetch_add(1, Ordering::Relaxed);
            }
            Op::Gc => {
                self.db
                    .collect_garbage()
                    .map_err(|e| format!("collect_garbage: {e}"))?;
                c.gc_calls.fetch_add(1, Ordering::Relaxed);
                c.maintenance.fetch_add(1, Ordering::Relaxed);
            }
            Op::Compact { range } => {
                let r = match range {
                    None => self.db.compact_range(None, None),
                    Some((a, b)) => {
                        let (a, b) = (slot(*a), slot(*b));
                        self.db.compact_range(
                            Some(&keys::plain_key(a.min(b))),
                            Some(&keys::plain_key(a.max(b))),
                        )
                    }
                };
                r.map_err(|e| format!("compact_range: {e}"))?;
                c.maintenance.fetch_add(1, Ordering::Relaxed);
            }
            other => {
                return Err(format!(
                    "`{other}`: tern stress shares one store between threads and runs no {} \
                     operations (--sim runs restarts, crashes and faults; group operations need --groups)",
                    other.name()
                ))
            }
        }
        Ok(())
    }

    /// One snapshot, every member of group `g`, read two ways: a point
    /// read and a prefix scan must agree, all members or none.
    fn check_group(&self, g: usize) -> Result<(), String> {
        let keys = self.keys;
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
                ..ReadOptions::default()
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
        Ok(())
    }
}

/// Checks that each batch in flight at the crash applied to all its slots
/// or to none, then forgets the records.
pub(super) fn check_batches_whole(s: &Stress) -> Result<usize, String> {
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
pub(super) fn verify_and_resolve(s: &Stress) -> Result<(usize, usize, usize), String> {
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
