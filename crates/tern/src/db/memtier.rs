//! The engine's side of the memory tier (`crate::memtier`): full memtables
//! copied in by the flush thread, merges and copy-outs on the tier thread,
//! and the WALs the tier's data still needs.
//!
//! A tier in anonymous memory is not durable: a table in it keeps the WALs
//! of the memtables it came from, and the manifest's log number stays at
//! the oldest of them until the table is copied out to L0. A crash loses
//! the tier and recovery replays those WALs, as it would for immutable
//! memtables.
//!
//! A durable tier (`memtier_path`) orders its writes so that a crash at
//! any instant leaves a tier recovery can rebuild:
//! 1. a copy-in's bytes are synced to the tier file (`msync`) before the
//!    manifest edit naming the table (and moving the log number past its
//!    WAL) is written; a crash before that edit leaves bytes nothing names;
//! 2. merges change link words only, which recovery never reads (it
//!    relinks each table from its nodes), so they need no ordering;
//! 3. a copy-out's L0 table and the removal of the tier tables it holds
//!    are one manifest edit, and their extents are reused only after it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::core::{Shared, State};
use super::stats::Counters;
use crate::compaction::Retention;
use crate::error::Result;
use crate::format::internal_key::SeqNo;
use crate::format::version_edit::{TierTableMeta, VersionEdit};
use crate::memtable::MemTable;
use crate::memtier::memory::TierMemory;
use crate::memtier::merge::merge_all;
use crate::memtier::table::TierTable;
use crate::memtier::{Retired, TierView};

/// Share of the tier in use above which the tier thread copies its oldest
/// table out before a flush has to.
const COPY_OUT_AT: f64 = 0.75;

/// Whether the tier is full enough for the tier thread to copy out.
fn filling(tier: &TierMemory) -> bool {
    tier.used() as f64 > COPY_OUT_AT * tier.capacity() as f64
}

impl State {
    /// The oldest WAL still holding writes no table file has: the tier's,
    /// the immutable memtables', or the active one.
    pub fn oldest_needed_wal(&self) -> u64 {
        let imms = self.imms.front().map(|i| i.wal_number);
        [self.tier.oldest_wal(), imms, Some(self.mem_wal_number)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.mem_wal_number)
    }
}

impl Shared {
    /// Makes a new view of the tier for the next super version.
    pub fn publish_tier(&self, state: &mut State) {
        let view = Arc::new(TierView::new(
            state.tier.tables().cloned().collect(),
            self.visible_seq.load(Ordering::Acquire),
        ));
        let mut views = self.tier_views.lock();
        views.retain(|v| v.strong_count() > 0);
        views.push(Arc::downgrade(&view));
        drop(views);
        state.tier_view = view;
        // Extents retired before may have outlived their last reader.
        state.tier_retired.retain(|r| r.in_use());
    }

    /// A sequence number at or below every one a read without a snapshot
    /// may still read the tier at.
    pub fn tier_horizon(&self) -> SeqNo {
        let mut views = self.tier_views.lock();
        views.retain(|v| v.strong_count() > 0);
        views
            .iter()
            .filter_map(Weak::upgrade)
            .map(|v| v.floor())
            .min()
            .unwrap_or_else(|| self.visible_seq.load(Ordering::Acquire))
    }

    /// Copies `mem` (holding WAL `wal`'s writes) into the tier, copying the
    /// oldest tables out first while there is no room. `None` when it
    /// cannot go there: no tier, an empty memtable, or one larger than the
    /// whole tier's free space with the tier empty; it then goes to L0,
    /// which keeps the tier's data newer than L0's. In a durable tier the
    /// copy is synced and comes with the metadata for the manifest
    /// ([`Shared::install_in_tier`]).
    pub fn move_into_tier(
        &self,
        mem: &MemTable,
        wal: u64,
    ) -> Result<Option<(TierTable, Option<TierTableMeta>)>> {
        let Some(tier) = &self.tier else {
            return Ok(None);
        };
        if mem.is_empty() {
            return Ok(None);
        }
        let id = tier
            .path()
            .map(|_| self.state.lock().versions.new_file_number());
        loop {
            if let Some(t) = TierTable::copy_in(tier, mem, wal, id, self.opts.bloom_bits_per_key)? {
                Counters::add(&self.counters.memtier_copy_ins, 1);
                return Ok(Some(t));
            }
            let _tier = self.tier_lock.lock();
            if !self.copy_out_oldest()? {
                return Ok(None);
            }
        }
    }

    /// Adds a table [`Shared::move_into_tier`] made to the tier as its
    /// newest; its memtable has left `state.imms`. In a durable tier its
    /// metadata is logged first, with the log number moved to the oldest
    /// WAL still needed (the memtable's is not). On an error nothing
    /// changed and the table is dropped.
    pub fn install_in_tier(
        &self,
        state: &mut State,
        table: TierTable,
        meta: Option<TierTableMeta>,
    ) -> Result<()> {
        if let Some(meta) = meta {
            let mut edit = VersionEdit {
                log_number: Some(state.oldest_needed_wal()),
                tier_added: vec![meta],
                ..Default::default()
            };
            self.log_and_apply(state, &mut edit)?;
        }
        state.tier.add_newest(Arc::new(table));
        Ok(())
    }

    /// Writes the tier's oldest table to one L0 table (the lazy copy) and
    /// drops it from the tier. False if the tier is empty. The caller holds
    /// `tier_lock`.
    fn copy_out_oldest(&self) -> Result<bool> {
        let (table, number, counter) = {
            let state = self.state.lock();
            let Some(t) = state.tier.oldest().cloned() else {
                return Ok(false);
            };
            (
                t,
                state.versions.new_file_number(),
                state.versions.file_number_counter(),
            )
        };
        let retention = Retention::new(self.snapshots.all());
        let mut it = table.iter();
        let res = self.write_level0_table(&mut it, number, &counter, &retention, None);
        drop(it);
        let mut state = self.state.lock();
        let output = match res {
            Ok(o) => o,
            Err(e) => {
                self.set_bg_error(&mut state, &e);
                return Err(e);
            }
        };
        state.tier.remove(&table);
        let mut edit = VersionEdit {
            log_number: Some(state.oldest_needed_wal()),
            last_sequence: Some(self.visible_seq.load(Ordering::Acquire)),
            blob_files_added: output.blobs,
            tier_removed: table.ids(),
            ..Default::default()
        };
        edit.new_files.extend(output.table.map(|m| (0, m)));
        if let Err(e) = self.log_and_apply(&mut state, &mut edit) {
            // Nothing changed: the table serves reads again (the store is
            // poisoned if the manifest write failed).
            state.tier.add_oldest(table);
            return Err(e);
        }
        state.obsolete_wals.extend_from_slice(table.wals());
        Counters::add(&self.counters.memtier_copy_outs, 1);
        drop(table);
        self.publish_tier(&mut state);
        self.bg_work.notify_all();
        self.finish_install(state);
        Ok(true)
    }

    /// Whether the tier thread has work: a merge due, the tier filling, or
    /// a `Db::flush` waiting for the tier to empty.
    pub fn tier_work_due(&self, state: &State) -> bool {
        let Some(tier) = &self.tier else {
            return false;
        };
        if state.tier.is_empty() {
            return false;
        }
        state.tier_drains > 0
            || filling(tier)
            || state
                .tier
                .pick_merge(self.opts.memtier_level_tables)
                .is_some()
    }

    /// One step of the tier thread's work: a due merge, else a copy-out
    /// when the tier is filling; a copy-out first when `Db::flush` waits
    /// for the tier to empty. Returns whether it did anything.
    pub fn tier_step(&self) -> Result<bool> {
        let Some(tier) = &self.tier else {
            return Ok(false);
        };
        let _tier = self.tier_lock.lock();
        let (drain, pick) = {
            let state = self.state.lock();
            (
                state.tier_drains > 0,
                state.tier.pick_merge(self.opts.memtier_level_tables),
            )
        };
        // A due merge goes first unless a flush waits: it costs no I/O, and
        // the table copied out afterwards holds fewer versions.
        let (level, inputs) = match pick {
            Some(p) if !drain => p,
            _ if drain || filling(tier) => return self.copy_out_oldest(),
            _ => return Ok(false),
        };
        self.sync_points.hit("tier:before_merge");
        let retention = Retention::new(self.snapshots.all());
        let Some((merged, report)) = merge_all(&inputs, &retention, self.tier_horizon()) else {
            return Ok(false);
        };
        Counters::add(&self.counters.memtier_unlinked, report.unlinked as u64);
        let merged = Arc::new(merged);
        let mut state = self.state.lock();
        if !state
            .tier
            .replace_merged(level, &inputs, Arc::clone(&merged))
        {
            return Ok(true);
        }
        Counters::add(&self.counters.memtier_merges, 1);
        let res = self.retire_unlinked(&mut state, &merged);
        self.publish_tier(&mut state);
        self.install_super_version(&state);
        res.map(|()| true)
    }

    /// Frees the extents of `merged` whose nodes merges all unlinked, once
    /// the readers alive now are gone; in a durable tier, after a manifest
    /// edit stops naming their tables (until then their bytes must stay).
    fn retire_unlinked(&self, state: &mut State, merged: &TierTable) -> Result<()> {
        let dead = merged.take_unlinked_extents();
        if dead.is_empty() {
            return Ok(());
        }
        let ids: Vec<u64> = dead.iter().filter_map(|e| e.id()).collect();
        let views = self.tier_views.lock().clone();
        if !ids.is_empty() {
            let mut edit = VersionEdit {
                tier_removed: ids,
                ..Default::default()
            };
            if let Err(e) = self.log_and_apply(state, &mut edit) {
                // The manifest may still name them: never free them (a
                // failed manifest write poisons the store).
                std::mem::forget(dead);
                return Err(e);
            }
        }
        Counters::add(&self.counters.memtier_extents_freed, dead.len() as u64);
        state.tier_retired.push(Retired::new(views, dead));
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use crate::io::MemFs;
    use crate::{Db, Options, ReadOptions};

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "timed out: {what}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Writes enough distinct keys after `tag` to switch the memtable.
    fn fill(db: &Db, tag: &str) {
        for i in 0..200 {
            db.put(format!("{tag}-{i:04}").as_bytes(), &[b'f'; 500])
                .unwrap();
        }
    }

    /// Regression: an iterator reads at its snapshot's sequence, but only
    /// the snapshot registered it; dropped before the iterator, a tier
    /// merge could unlink the version the iterator reads.
    #[test]
    fn an_iterator_keeps_its_snapshots_versions_after_the_snapshot_is_dropped() {
        let opts = Options {
            fs: MemFs::new(),
            ..Options::default()
        }
        .tune(|s| {
            s.write_buffer_size = 64 << 10;
            s.blob_threshold = None;
            s.memtier_size = Some(4 << 20);
            s.memtier_levels = 2;
            s.memtier_level_tables = 2;
        });
        let db = Db::open("/db", opts).unwrap();
        let (reached_tx, reached) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        db.shared.sync_points.set("tier:before_merge", move || {
            reached_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        });
        db.put(b"k", b"v1").unwrap();
        let snap = db.snapshot().unwrap();
        fill(&db, "a");
        wait_for("the first table in the tier", || {
            db.stats().memtier_tables >= 1
        });
        db.put(b"k", b"v2").unwrap();
        fill(&db, "b");
        reached.recv_timeout(Duration::from_secs(20)).unwrap();
        let mut it = db
            .iter(ReadOptions {
                snapshot: Some(&snap),
                ..Default::default()
            })
            .unwrap();
        drop(snap);
        let merges = db.stats().memtier_merges;
        go.send(()).unwrap();
        wait_for("the merge", || db.stats().memtier_merges > merges);
        it.seek(b"k");
        it.status().unwrap();
        assert!(it.valid() && it.key() == b"k", "the key is gone");
        assert_eq!(it.value(), b"v1", "the iterator's version");
    }
}
