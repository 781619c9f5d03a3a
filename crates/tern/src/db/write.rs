//! The write path: a commit queue where the writer at the front leads a
//! group, writes one WAL record for all of it (fsyncing once if any member
//! asked for `sync`), inserts the group into the memtable and publishes its
//! sequence numbers. Everyone else in the group just waits for the result.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use super::commit_queue::Writer;
use super::core::{Immutable, Shared, State};
use super::stats::Counters;
use super::wal_sync::ActiveWal;
use crate::error::{Error, IoContext, Result};
use crate::format::write_batch::WriteBatch;
use crate::memtable::MemTable;
use crate::options::WriteOptions;
use crate::wal::{wal_file_name, LogKind, LogWriter};

/// Per-entry memtable overhead assumed when reserving room (node header,
/// links, trailer).
const ENTRY_OVERHEAD: usize = 96;

/// Memtable bytes needed for `batch`.
pub(crate) fn reserve_for(batch: &WriteBatch) -> usize {
    batch.approximate_size() + batch.len() * ENTRY_OVERHEAD
}

/// The largest group, as [`reserve_for`] counts it, that an empty memtable
/// of the largest arena holds (about 4 GiB: arena offsets are 32-bit).
/// A larger one could never go in: each fresh memtable would be too small.
pub(crate) fn max_group_need() -> usize {
    MemTable::max_entry_size(usize::MAX)
}

/// The error for a group of `need` bytes over [`max_group_need`].
pub(crate) fn too_large(need: usize) -> Error {
    Error::InvalidArgument(format!(
        "a write batch needing {need} bytes of memtable is larger than any memtable holds ({} bytes); split it into smaller batches",
        max_group_need()
    ))
}

/// Arena capacity for a new memtable that must hold at least `need` bytes
/// (the group that found the last one full). Groups of up to 1/32 of the
/// write buffer count as that big, and the result is rounded up to 1/16 of
/// the power of two above it, so that the memtables of a store get one
/// size and reuse each other's arena (`ArenaPool`) whatever group comes
/// first: 80 MiB for the default 64 MiB write buffer.
fn memtable_capacity(write_buffer_size: usize, need: usize) -> usize {
    let need = need.max(write_buffer_size / 32);
    let exact = write_buffer_size.max(need) + need + (write_buffer_size / 8).max(64 << 10);
    let step = (exact.next_power_of_two() / 16).max(4096);
    exact.next_multiple_of(step)
}

/// Armed while a leader commits its group. If the commit panics (a bug),
/// the group may be half applied: the store is poisoned, the followers are
/// told so, and the next writer leads (and is refused) instead of every
/// writer, `flush` and `close` waiting for good behind a leader that is
/// gone.
struct LeaderGuard<'a> {
    shared: &'a Shared,
    group: &'a [Arc<Writer>],
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        let cause =
            "a write group's leader panicked while committing; reopen the store".to_string();
        self.shared
            .set_bg_error_message(&mut self.shared.state.lock(), cause.clone());
        let _ = self
            .shared
            .finish_group(self.group, Err(Error::Poisoned(cause)));
    }
}

impl Shared {
    /// Creates the initial memtable for a store.
    pub fn new_memtable(&self, need: usize) -> Arc<MemTable> {
        let mem = MemTable::pooled(
            memtable_capacity(self.opts.write_buffer_size, need),
            &self.arena_pool,
        );
        // The memory tier copies memtables whole, as plain lists.
        Arc::new(match self.tier {
            Some(_) => mem.without_version_chains(),
            None => mem,
        })
    }

    /// Commits `batch` (None: only a forced memtable switch).
    pub fn write(
        &self,
        batch: Option<WriteBatch>,
        opts: WriteOptions,
        force_switch: bool,
    ) -> Result<()> {
        let me = Writer::new(batch, opts, force_switch);
        let mut queue = self.queue.lock();
        queue.push_back(me.clone());
        if queue.len() > 1 {
            drop(queue);
            let poll_for = Duration::from_micros(self.opts.write_thread_max_yield_usec);
            if let Some(result) = me.wait(poll_for, &self.poll_slots) {
                return result;
            }
            queue = self.queue.lock();
        }
        // Leader, at the front of the queue: take a group from there.
        debug_assert!(queue.front().is_some_and(|f| Arc::ptr_eq(f, &me)));
        let mut group: Vec<Arc<Writer>> = vec![me.clone()];
        let mut bytes = me.size;
        let max = self
            .opts
            .max_write_group_bytes
            .min(bytes.max(128 << 10) + (1 << 20));
        if !force_switch {
            for w in queue.iter().skip(1) {
                if w.force_switch || w.opts.disable_wal != opts.disable_wal || bytes + w.size > max
                {
                    break;
                }
                bytes += w.size;
                group.push(w.clone());
            }
        }
        drop(queue);

        let unwinding = LeaderGuard {
            shared: self,
            group: &group,
        };
        let result = self.commit_group(&group);
        std::mem::forget(unwinding);
        self.finish_group(&group, result)
    }

    /// Takes a committed (or failed) group off the queue, tells the next
    /// writer to lead and every follower the outcome; returns the leader's.
    fn finish_group(&self, group: &[Arc<Writer>], result: Result<()>) -> Result<()> {
        let next = {
            let mut queue = self.queue.lock();
            for w in group {
                let front = queue.pop_front();
                debug_assert!(front.is_some_and(|f| Arc::ptr_eq(&f, w)));
            }
            queue.front().cloned()
        };
        // Told outside the queue's mutex, so joining writers never wait
        // behind the wake-ups. The next leader first: its group is
        // disjoint from this one, so it may commit while the followers
        // here are still being told.
        if let Some(next) = next {
            next.lead();
        }
        for w in &group[1..] {
            w.finish(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(e.duplicate()),
            });
        }
        result
    }

    fn commit_group(&self, group: &[Arc<Writer>]) -> Result<()> {
        let leader = &group[0];
        let sync = group.iter().any(|w| w.opts.sync);
        let disable_wal = leader.opts.disable_wal;
        // Merge the group into one batch (the leader's own when alone).
        let mut merged = leader.batch.lock().take().unwrap_or_default();
        for w in &group[1..] {
            if let Some(b) = w.batch.lock().take() {
                merged.append(&b);
            }
        }
        let need = reserve_for(&merged);
        let mem = match self.room_without_state(need, leader.force_switch) {
            Some(mem) => mem,
            None => {
                let mut state = self.state.lock();
                self.make_room(&mut state, need, leader.force_switch)?;
                state.mem.clone()
            }
        };
        if merged.is_empty() {
            return Ok(());
        }
        let first_seq = self.visible_seq.load(Ordering::Acquire) + 1;
        merged.set_seq(first_seq);
        // Decoded before the WAL append, so a batch that cannot go into the
        // memtable is never logged either.
        let mut entries = Vec::with_capacity(merged.len());
        for (seq, e) in (first_seq..).zip(merged.iter()) {
            let e = e.map_err(|e| Error::InvalidArgument(format!("malformed write batch: {e}")))?;
            entries.push((e.key, seq, e.kind, e.value));
        }
        if !disable_wal {
            let mut wal = self.wal.lock();
            let res = match wal.as_mut() {
                Some(active) => self.append_group(active, merged.as_bytes(), sync),
                None => Err(Error::Closed),
            };
            drop(wal);
            self.sync_points.hit("commit:after_wal");
            if let Err(e) = res {
                let mut state = self.state.lock();
                self.set_bg_error(&mut state, &e);
                return Err(e);
            }
            Counters::add(
                &self.counters.wal_bytes_written,
                merged.approximate_size() as u64 + 9,
            );
            if sync {
                Counters::add(&self.counters.wal_syncs, 1);
            }
        }
        let seq = first_seq + entries.len() as u64;
        let deferred = entries.len() >= super::linker::DEFER_MIN;
        let added = if deferred {
            mem.add_all_deferred(&entries)
        } else {
            mem.add_all(&mut entries)
        };
        if added.is_err() {
            // The WAL holds the group (replay brings it back) and part of
            // it may be in the memtable under unpublished sequence numbers
            // the next group would take again: only a reopen, which
            // replays the WAL, puts the two back in agreement.
            let e = Error::Internal(format!(
                "a write group of {} entries did not fit in the memtable that was \
                 checked to have room for it",
                entries.len()
            ));
            let mut state = self.state.lock();
            self.set_bg_error(&mut state, &e);
            return Err(e);
        }
        Counters::add(
            &self.counters.user_bytes_written,
            merged.approximate_size() as u64,
        );
        Counters::add(&self.counters.keys_written, merged.len() as u64);
        Counters::add(&self.counters.write_groups, 1);
        self.visible_seq.store(seq - 1, Ordering::Release);
        if deferred {
            self.linker.wake();
        }
        Ok(())
    }

    /// Appends a group's record to the active WAL, after a sync mark if
    /// one is due, and syncs it when asked: the retired WALs first, so a
    /// synced record never follows an unsynced one.
    fn append_group(&self, active: &mut ActiveWal, record: &[u8], sync: bool) -> Result<()> {
        if sync {
            self.wal_syncer.sync_retired(&self.dir)?;
        }
        let path = self.dir.join(wal_file_name(active.number));
        active.add_due_mark(&self.wal_syncer).ctx(&path)?;
        let w = &mut active.writer;
        w.add_record(record)
            .and_then(|()| w.flush())
            .and_then(|()| if sync { w.sync() } else { Ok(()) })
            .ctx(&path)?;
        self.wal_len.store(active.writer.len(), Ordering::Relaxed);
        active.after_append(&self.wal_syncer, self.opts.wal_bytes_per_sync, sync);
        Ok(())
    }

    /// The active memtable when a group of `need` bytes fits in it and
    /// nothing else [`Shared::make_room`] checks applies: no switch forced,
    /// L0 under its slowdown trigger, the store neither poisoned nor
    /// closed. Then the leader writes without locking `state`, so an
    /// install syncing the manifest under it does not hold up every write.
    /// Only group leaders switch memtables, one at a time, so the memtable
    /// cannot change between this check and the insert.
    fn room_without_state(&self, need: usize, force: bool) -> Option<Arc<MemTable>> {
        if force || self.closed.load(Ordering::Acquire) {
            return None;
        }
        if !self.opts.disable_auto_compactions
            && self.l0_files.load(Ordering::Relaxed) >= self.opts.level0_slowdown_writes_trigger
        {
            return None;
        }
        if self.bg_error_seen.lock().is_some() {
            return None;
        }
        let mem = self.leader_mem.lock().clone();
        let used = mem.approximate_memory_usage();
        let fits = used + need <= mem.arena_capacity() && used < self.opts.write_buffer_size;
        fits.then_some(mem)
    }

    /// Makes sure the active memtable has room for `need` bytes, switching
    /// it and stalling on flush/compaction debt as the triggers say.
    pub(crate) fn make_room(
        &self,
        state: &mut MutexGuard<'_, State>,
        need: usize,
        mut force: bool,
    ) -> Result<()> {
        if need > max_group_need() {
            return Err(too_large(need));
        }
        let mut allow_delay = !force;
        loop {
            if let Some(e) = &state.bg_error {
                return Err(Error::Poisoned(e.clone()));
            }
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            // With automatic compaction off nothing would ever lower L0, so
            // its triggers do not stall writes (as in RocksDB).
            let l0 = if self.opts.disable_auto_compactions {
                0
            } else {
                state.versions.current().levels[0].len()
            };
            if allow_delay && l0 >= self.opts.level0_slowdown_writes_trigger {
                // Spread the delay over many writes instead of stopping one.
                let start = Instant::now();
                MutexGuard::unlocked(state, || std::thread::sleep(Duration::from_millis(1)));
                Counters::add(
                    &self.counters.stall_micros,
                    start.elapsed().as_micros() as u64,
                );
                Counters::add(&self.counters.slowdowns, 1);
                allow_delay = false;
                continue;
            }
            let used = state.mem.approximate_memory_usage();
            let fits =
                used + need <= state.mem.arena_capacity() && used < self.opts.write_buffer_size;
            if !force && fits {
                return Ok(());
            }
            if force && state.mem.is_empty() {
                return Ok(());
            }
            if state.imms.len() + 1 >= self.opts.max_write_buffer_number
                || l0 >= self.opts.level0_stop_writes_trigger
            {
                let start = Instant::now();
                self.bg_work.notify_all();
                self.bg_done.wait_for(state, Duration::from_millis(100));
                Counters::add(
                    &self.counters.stall_micros,
                    start.elapsed().as_micros() as u64,
                );
                Counters::add(&self.counters.stops, 1);
                continue;
            }
            self.switch_memtable(state, need)?;
            force = false;
        }
    }

    /// Creates WAL `number`, empty, with its directory entry durable.
    pub(crate) fn create_wal(&self, number: u64) -> Result<ActiveWal> {
        let active = self.create_wal_file(number)?;
        self.fs.sync_dir(&self.dir).ctx(&self.dir)?;
        Ok(active)
    }

    /// Creates WAL `number`, empty; its name is not durable yet.
    pub(crate) fn create_wal_file(&self, number: u64) -> Result<ActiveWal> {
        let path = self.dir.join(wal_file_name(number));
        let file = self.fs.create(&path).ctx(&path)?;
        let writer = LogWriter::new(file, LogKind::Wal).ctx(&path)?;
        ActiveWal::new(number, writer).ctx(&path)
    }

    /// The WAL the syncer thread prepared, if it is newer than the active
    /// one (it may have been numbered before a switch that found none
    /// ready and created its own: WALs must replay in number order).
    fn take_prepared_wal(&self, state: &mut State) -> Option<ActiveWal> {
        let spare = self.wal_syncer.take_spare()?;
        if spare.number > state.mem_wal_number {
            return Some(spare);
        }
        // Empty; removed with the next install's obsolete files.
        state.obsolete_wals.push(spare.number);
        None
    }

    /// Freezes the active memtable and starts a new one with a new WAL:
    /// the one the syncer thread prepared when it is ready, so that writers
    /// do not wait for a directory sync. The old WAL is synced later, by
    /// the syncer thread or by the first synced write.
    fn switch_memtable(&self, state: &mut State, need: usize) -> Result<()> {
        let prepared = self.take_prepared_wal(state);
        let was_prepared = prepared.is_some();
        let res = (|| {
            let mut active = match prepared {
                Some(active) => active,
                None => self.create_wal(state.versions.new_file_number())?,
            };
            let number = active.number;
            self.sync_points.hit("switch:before_wal");
            let mut wal = self.wal.lock();
            // The old WAL is synced by the syncer thread, not here: the
            // fsync of a whole memtable's WAL would stall every writer.
            if let Some(old) = wal.take() {
                let path = self.dir.join(wal_file_name(old.number));
                active.replace(old, &self.wal_syncer).ctx(&path)?;
            }
            self.wal_len.store(active.writer.len(), Ordering::Relaxed);
            *wal = Some(active);
            Ok(number)
        })();
        let number = match res {
            Ok(number) => number,
            Err(e) => {
                self.set_bg_error(state, &e);
                return Err(e);
            }
        };
        if was_prepared {
            Counters::add(&self.counters.wals_prepared, 1);
        }
        self.wal_syncer.prepare();
        let mem = self.new_memtable(need);
        *self.leader_mem.lock() = mem.clone();
        let old = std::mem::replace(&mut state.mem, mem);
        let old_wal = std::mem::replace(&mut state.mem_wal_number, number);
        state.imms.push_back(Immutable {
            mem: old,
            wal_number: old_wal,
        });
        self.install_super_version(state);
        self.bg_work.notify_all();
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    use super::memtable_capacity;
    use crate::io::{FileSystem, MemFs};
    use crate::options::WriteOptions;
    use crate::wal::wal_file_name;
    use crate::{Db, Options};

    /// Waits up to 10 s for the syncer thread's prepared WAL.
    fn wait_for_spare(db: &Db) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !db.shared.wal_syncer.has_spare() {
            assert!(std::time::Instant::now() < deadline, "no WAL prepared");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    fn active_wal(db: &Db) -> u64 {
        db.shared.state.lock().mem_wal_number
    }

    fn force_switch(db: &Db) {
        db.put(b"k", b"v").unwrap();
        db.shared
            .write(None, WriteOptions::default(), true)
            .unwrap();
    }

    fn open(mem: &std::sync::Arc<MemFs>) -> Db {
        let opts = Options {
            fs: mem.clone(),
            ..Options::default()
        };
        Db::open("/db", opts).unwrap()
    }

    #[test]
    fn a_switch_takes_the_prepared_wal_and_never_one_numbered_below_the_active_one() {
        let mem = MemFs::new();
        let db = open(&mem);
        wait_for_spare(&db);
        // Held back while a switch finds none ready and numbers its own.
        let stale = db.shared.wal_syncer.take_spare().unwrap();
        let before = active_wal(&db);
        force_switch(&db);
        let inline = active_wal(&db);
        assert!(inline > stale.number && inline > before);
        assert_eq!(db.stats().wals_prepared, 0);

        wait_for_spare(&db);
        force_switch(&db);
        assert!(active_wal(&db) > inline);
        assert_eq!(db.stats().wals_prepared, 1, "took the prepared WAL");

        // A prepared WAL older than the active one would replay before it.
        wait_for_spare(&db);
        drop(db.shared.wal_syncer.take_spare());
        let active = active_wal(&db);
        let stale_number = stale.number;
        db.shared.wal_syncer.put_spare(stale);
        force_switch(&db);
        assert!(active_wal(&db) > active, "a new WAL, not the stale one");
        assert_eq!(db.stats().wals_prepared, 1);
        db.wait_for_background().unwrap();
        let stale_path = Path::new("/db").join(wal_file_name(stale_number));
        assert!(!mem.exists(&stale_path), "the stale WAL is removed");
        db.close().unwrap();

        // The prepared WAL left at close is empty: the next open replays
        // it as such and removes it.
        let db = open(&mem);
        assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
        db.close().unwrap();
        let wals = mem
            .list_dir(Path::new("/db"))
            .unwrap()
            .into_iter()
            .filter(|n| n.ends_with(".log"))
            .count();
        assert!(wals <= 2, "the active WAL and at most one prepared: {wals}");
    }

    #[test]
    fn memtables_for_groups_of_any_usual_size_get_one_capacity() {
        let wbs = 64 << 20;
        let usual = memtable_capacity(wbs, 0);
        assert_eq!(usual, 80 << 20);
        for need in [1, 4096, 1 << 20, 2 << 20, 3 << 20] {
            assert_eq!(memtable_capacity(wbs, need), usual, "need {need}");
        }
        // A huge group gets the room it needs.
        assert!(memtable_capacity(wbs, 100 << 20) >= 200 << 20);
        assert!(memtable_capacity(64 << 10, 0) >= 128 << 10);
    }
}
