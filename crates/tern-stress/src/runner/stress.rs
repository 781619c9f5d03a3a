//! The shared state of a stress run and what its threads do: write,
//! verify ranges, check snapshots and batches.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use rand::rngs::StdRng;
use rand::Rng;
use tern::{Db, ReadOptions, Snapshot, WriteBatch, WriteOptions};

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

    pub(super) fn lock_all(&self, slots: &[usize]) -> Guards<'_> {
        let mut ids: Vec<usize> = slots.iter().map(|&s| self.lock_of(s)).collect();
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

    pub(super) fn one_op(&self, writer: usize, rng: &mut StdRng) -> Result<(), String> {
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
