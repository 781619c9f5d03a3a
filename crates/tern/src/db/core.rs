//! The state shared by the handle, the writers and the background threads.
//!
//! Locking: `state` guards the LSM shape, the memtable list and background
//! scheduling. It is not held while tables or blob files are written or
//! read, but it is held across the metadata I/O that must be ordered with
//! the version: an install's manifest append (directory fsync, append,
//! fsync), a memtable switch (creating the next WAL, directory fsync, fsync
//! of what the background WAL sync has not yet synced of the old WAL), and
//! recovery at open. Obsolete files are unlinked after it is released.
//! Readers touch only their own slot in `sv_cache` (`current` when an
//! install came since their last read). Writers take the commit queue
//! briefly, to join it and to take or remove a group, and wait on their
//! own signal (`commit_queue::Writer`) with no other lock held; a group
//! leader takes `leader_mem` and `bg_error_seen` for its room check,
//! `state` when it must make room, and `wal`.
//! Lock order: `state` → `wal` → `current`; `sv_cache`'s locks come after
//! all of them and are never taken with `current` held. The queue and each
//! writer's signal are taken with no other lock held.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::commit_queue::{CommitQueue, PollSlots};
use super::snapshot::SnapshotList;
use super::stats::Counters;
use super::table_cache::TableCache;
use super::wal_sync::{ActiveWal, WalSyncer};
use crate::blob::BlobCache;
use crate::cache::{BlockCache, OpenFiles};
use crate::compaction::Executor;
use crate::error::{Error, Result};
use crate::io::{FileLock, FsRef};
use crate::memtable::MemTable;
use crate::options::Options;
use crate::version::{Version, VersionSet};

/// What a read needs: the memtables and the table version, all immutable.
pub struct SuperVersion {
    /// The memtable receiving writes.
    pub mem: Arc<MemTable>,
    /// Immutable memtables, newest first.
    pub imms: Vec<Arc<MemTable>>,
    /// The table files.
    pub version: Arc<Version>,
    /// The memory tier's tables (empty without a tier).
    pub tier: Arc<crate::memtier::TierView>,
    /// WAL file numbers of `imms` and the tier's tables, for stats without
    /// the state mutex.
    pub imm_wals: Vec<u64>,
}

/// An immutable memtable waiting for flush, with the WAL that holds its data.
pub struct Immutable {
    pub mem: Arc<MemTable>,
    pub wal_number: u64,
}

/// Mutable state behind `Shared::state`.
pub struct State {
    pub versions: VersionSet,
    pub mem: Arc<MemTable>,
    pub mem_wal_number: u64,
    /// Oldest first.
    pub imms: VecDeque<Immutable>,
    /// Set after a failed WAL write/sync, flush or manifest write: the store
    /// refuses writes until reopened.
    pub bg_error: Option<String>,
    pub shutting_down: bool,
    pub flush_running: bool,
    /// Table files no longer in the current version, deleted once no reader
    /// holds a version that lists them.
    pub obsolete_tables: Vec<u64>,
    /// WAL files whose data is flushed.
    pub obsolete_wals: Vec<u64>,
    /// Batches of obsolete files taken out of the lists above and not yet
    /// unlinked; `Db::flush` waits for them, so its caller sees the files
    /// gone.
    pub removals_in_flight: usize,
    /// Blob files no longer in the current version (retired by GC or
    /// unreferenced), deleted once no reader's version lists them.
    pub obsolete_blobs: Vec<u64>,
    /// File numbers handed out for other stores to write files this one
    /// ingests ([`crate::Db::reserve_file_numbers`]), not yet ingested.
    pub reserved_numbers: Vec<std::ops::Range<u64>>,
    /// Key ranges `[lo, hi]` whose tombstones compaction keeps
    /// ([`crate::Db::protect_tombstones`]), by id.
    pub protected: Vec<(u64, Vec<u8>, Vec<u8>)>,
    /// The id the next protection gets.
    pub next_protection: u64,
    /// The memory tier's tables (none without a tier).
    pub tier: crate::memtier::TierLevels,
    /// The view of `tier` super versions carry.
    pub tier_view: Arc<crate::memtier::TierView>,
    /// `Db::flush` calls waiting for the tier to empty.
    pub tier_drains: usize,
    /// Tier extents whose nodes merges all unlinked, each batch with the
    /// tier views alive when it was taken out: readers holding one of
    /// those may still stand on its nodes, so it is freed once they are
    /// all gone.
    pub tier_retired: Vec<crate::memtier::Retired>,
}

/// Everything the handle and the background threads share.
pub struct Shared {
    pub dir: PathBuf,
    pub opts: Options,
    pub fs: FsRef,
    /// `fs` as flush, compaction and GC use it: bypassing the page cache
    /// if `use_direct_io_for_flush_and_compaction`.
    pub background_fs: FsRef,
    pub state: Mutex<State>,
    /// Signalled when background work finishes (flush, compaction, error).
    pub bg_done: Condvar,
    /// Signalled to wake background threads.
    pub bg_work: Condvar,
    pub current: Mutex<Arc<SuperVersion>>,
    /// Each reading thread's cached copy of `current`.
    pub sv_cache: super::sv_cache::SvCache<SuperVersion>,
    /// Highest sequence number visible to readers.
    pub visible_seq: AtomicU64,
    pub queue: CommitQueue,
    /// Waiting writers that may poll at once (`commit_queue::PollSlots`).
    pub poll_slots: PollSlots,
    /// The active WAL; used by the group leader, switches and `sync_wal`.
    pub wal: Mutex<Option<ActiveWal>>,
    /// The active memtable, the same one as `State::mem` (replaced with it
    /// at every switch, under `state`): a group leader whose group fits
    /// takes it from here without locking `state`, which installs hold
    /// across manifest syncs.
    pub leader_mem: Mutex<Arc<MemTable>>,
    /// Files in L0 of the current version, for the same leaders and for
    /// compactions that move values (they stop moving when L0 fills).
    pub l0_files: Arc<AtomicUsize>,
    /// Bytes in the active WAL, for stats: the WAL mutex is held across a
    /// synced write's fsync, which stats must not wait for.
    pub wal_len: AtomicU64,
    /// A copy of `State::bg_error`, for stats: the state mutex is held
    /// across manifest writes and file creation.
    pub bg_error_seen: Mutex<Option<String>>,
    /// Syncs the active WAL in the background as it grows.
    pub wal_syncer: WalSyncer,
    /// Links large commit groups into the memtable's list.
    pub linker: super::linker::Linker,
    /// The arena of the last memtable dropped, for the next one.
    pub arena_pool: Arc<crate::memtable::ArenaPool>,
    pub tables: Arc<TableCache>,
    pub blobs: Arc<BlobCache>,
    /// The table and blob readers open for reads (bounded).
    pub open_files: Arc<OpenFiles>,
    pub block_cache: Option<Arc<BlockCache>>,
    pub counters: Counters,
    pub snapshots: Arc<SnapshotList>,
    /// Held while a compaction picks, runs and installs.
    pub compaction_lock: Mutex<()>,
    /// Held while a GC job picks, runs and installs.
    pub gc_lock: Mutex<()>,
    /// Blob bytes the last L0 compaction found dead per L0 entry it merged
    /// (an `f64`'s bits), for the garbage L0 still hides.
    pub l0_shadow: AtomicU64,
    /// An idle GC pass is under way ([`Shared::idle_gc_due`]): it goes on
    /// down to the idle limit whoever runs its next job, the GC thread or
    /// `Db::wait_for_background`; a write ends it.
    pub idle_pass: std::sync::atomic::AtomicBool,
    /// The memory tier's memory, when it is on.
    pub tier: Option<Arc<crate::memtier::memory::TierMemory>>,
    /// Every tier view made, for the merge horizon.
    pub tier_views: Mutex<Vec<std::sync::Weak<crate::memtier::TierView>>>,
    /// Held while a tier merge or copy-out runs.
    pub tier_lock: Mutex<()>,
    /// Paces background writes (compaction and GC).
    pub rate_limiter: Option<Arc<crate::io::RateLimiter>>,
    pub executor: Arc<dyn Executor>,
    pub closed: AtomicBool,
    /// The directory lock, released by `close`.
    pub lock: Mutex<Option<Box<dyn FileLock>>>,
    /// Test hooks at named points (no-op outside tests).
    pub sync_points: super::sync_point::SyncPoints,
}

impl Shared {
    /// Fails if the store was closed.
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// The current super version.
    pub fn super_version(&self) -> Arc<SuperVersion> {
        self.current.lock().clone()
    }

    /// Publishes a new super version from `state`.
    pub fn install_super_version(&self, state: &State) {
        self.l0_files
            .store(state.versions.current().levels[0].len(), Ordering::Relaxed);
        let sv = SuperVersion {
            mem: state.mem.clone(),
            imms: state.imms.iter().rev().map(|i| i.mem.clone()).collect(),
            version: state.versions.current(),
            tier: state.tier_view.clone(),
            imm_wals: state
                .imms
                .iter()
                .map(|i| i.wal_number)
                .chain(state.tier.tables().flat_map(|t| t.wals().iter().copied()))
                .collect(),
        };
        let old = {
            let mut current = self.current.lock();
            let old = std::mem::replace(&mut *current, Arc::new(sv));
            self.sv_cache.bump();
            old
        };
        // Dropped here, outside `current`: the last reference to a memtable
        // frees its arena.
        let cached = self.sv_cache.scrape();
        drop((old, cached));
    }

    /// Empties every thread's cached super version for good (a closed
    /// store must not keep its memtables or files alive in idle threads,
    /// nor may a read that raced the close cache them again).
    pub fn release_cached_super_versions(&self) {
        self.sv_cache.close();
        self.empty_sv_cache();
    }

    /// Once the open-file set has had to close a reader for room, readers
    /// kept with cached super versions would exceed its bounds: stops
    /// keeping them and releases those kept (the set calls this).
    pub fn stop_keeping_readers(&self) {
        if self.sv_cache.stop_keeping_readers() {
            self.empty_sv_cache();
        }
    }

    /// Drops what every thread's slot holds: the generation moves on under
    /// `current` (as an install does), so a pin taken before puts nothing
    /// back, then the slots are scraped.
    fn empty_sv_cache(&self) {
        {
            let _current = self.current.lock();
            self.sv_cache.bump();
        }
        drop(self.sv_cache.scrape());
    }

    /// The current super version for one read, from this thread's cache
    /// when no install came since (see [`super::sv_cache`]).
    pub fn pin_super_version(&self) -> super::sv_cache::Pinned<'_, SuperVersion> {
        self.sv_cache.pin(&self.current)
    }

    /// Records a fatal background error and wakes everyone.
    pub fn set_bg_error(&self, state: &mut State, e: &Error) {
        self.set_bg_error_message(state, e.to_string());
    }

    /// Like [`Shared::set_bg_error`], with the cause as text.
    pub fn set_bg_error_message(&self, state: &mut State, cause: String) {
        if state.bg_error.is_none() {
            tracing::error!("tern: background error, refusing writes until reopened: {cause}");
            *self.bg_error_seen.lock() = Some(cause.clone());
            state.bg_error = Some(cause);
        }
        self.bg_done.notify_all();
    }

    /// Logs `edit` (one manifest record, which also retires blob files and
    /// lineage no table can reach) and makes it current. Refuses once the
    /// store is poisoned, so a record whose write failed is never followed
    /// by another; a failed write poisons the store, an edit the version
    /// refuses ([`Error::Internal`], nothing written) does not. On error the
    /// caller must not delete any file the edit names: the record may be
    /// durable.
    pub fn log_and_apply(
        &self,
        state: &mut State,
        edit: &mut crate::format::version_edit::VersionEdit,
    ) -> crate::Result<()> {
        if let Some(e) = &state.bg_error {
            return Err(Error::Poisoned(e.clone()));
        }
        if let Err(e) = state.versions.log_and_apply(edit) {
            // Only a failed manifest write poisons the store; an edit the
            // version set refused was never written, so nothing changed.
            if state.versions.write_failed() {
                self.set_bg_error(state, &e);
            }
            return Err(e);
        }
        for (_, f) in &edit.new_files {
            self.executor
                .file_added(&self.dir.join(crate::wal::table_file_name(f.number)));
        }
        for b in &edit.blob_files_added {
            self.executor
                .file_added(&self.dir.join(crate::wal::blob_file_name(b.number)));
        }
        // Blob files leave the version when deleted or retired by GC.
        let retired = edit.relocations.iter().map(|(_, r)| r.old_file);
        state
            .obsolete_blobs
            .extend(edit.blob_files_deleted.iter().copied().chain(retired));
        Ok(())
    }

    /// The end of every install: publishes the new super version, wakes
    /// whoever waits for background work, then releases `state` and unlinks
    /// the files the install made obsolete.
    pub fn finish_install(&self, state: MutexGuard<'_, State>) {
        self.install_super_version(&state);
        self.bg_done.notify_all();
        self.purge_obsolete_files(state);
    }

    /// Unlinks the obsolete files no reader can still see, after releasing
    /// `state`: unlinking a large file can take milliseconds, and writers
    /// wait on `state`. File numbers are never reused, so nothing can claim
    /// a path in between. Failures are left for the next open to clean up.
    pub fn purge_obsolete_files(&self, mut state: MutexGuard<'_, State>) {
        let doomed = self.take_obsolete_files(&mut state);
        drop(state);
        self.remove_files(doomed);
    }

    /// Takes the obsolete files no reader can still see out of `state` (and
    /// out of the caches) and returns their paths.
    fn take_obsolete_files(&self, state: &mut State) -> Vec<PathBuf> {
        let mut doomed = Vec::new();
        if !state.obsolete_tables.is_empty() || !state.obsolete_blobs.is_empty() {
            let live = state.versions.live_files();
            state.obsolete_tables.retain(|&n| {
                if live.contains(&n) {
                    return true;
                }
                self.tables.evict(n);
                doomed.push(self.dir.join(crate::wal::table_file_name(n)));
                false
            });
            state.obsolete_blobs.retain(|&n| {
                if live.contains(&n) {
                    return true;
                }
                self.blobs.evict(n);
                doomed.push(self.dir.join(crate::wal::blob_file_name(n)));
                false
            });
        }
        doomed.extend(
            state
                .obsolete_wals
                .drain(..)
                .map(|n| self.dir.join(crate::wal::wal_file_name(n))),
        );
        if !doomed.is_empty() {
            state.removals_in_flight += 1;
        }
        doomed
    }

    /// Unlinks files taken by [`Shared::take_obsolete_files`], then counts
    /// the batch done (taking `state`).
    fn remove_files(&self, paths: Vec<PathBuf>) {
        if paths.is_empty() {
            return;
        }
        self.sync_points.hit("remove_files:before");
        for path in paths {
            if self.fs.remove_file(&path).is_ok() {
                self.executor.file_removed(&path);
            }
        }
        self.state.lock().removals_in_flight -= 1;
        self.bg_done.notify_all();
    }
}
