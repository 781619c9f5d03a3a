//! Counters a RocksDB user would look for, and their typed snapshot.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live counters, updated with relaxed atomics off the critical sections.
#[derive(Default, Debug)]
pub struct Counters {
    pub(crate) user_bytes_written: AtomicU64,
    pub(crate) keys_written: AtomicU64,
    pub(crate) wal_bytes_written: AtomicU64,
    pub(crate) wal_syncs: AtomicU64,
    pub(crate) wal_background_syncs: AtomicU64,
    pub(crate) wals_prepared: AtomicU64,
    pub(crate) write_groups: AtomicU64,
    pub(crate) flush_bytes_written: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) flush_versions_dropped: AtomicU64,
    pub(crate) blob_bytes_written: AtomicU64,
    pub(crate) gc_bytes_read: AtomicU64,
    pub(crate) gc_bytes_written: AtomicU64,
    pub(crate) gc_records_relocated: AtomicU64,
    pub(crate) gc_runs: AtomicU64,
    pub(crate) blob_refs_rewritten: AtomicU64,
    pub(crate) values_moved: AtomicU64,
    pub(crate) value_bytes_moved: AtomicU64,
    pub(crate) value_moves_stopped: AtomicU64,
    pub(crate) compaction_bytes_read: AtomicU64,
    pub(crate) compaction_bytes_written: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) trivial_moves: AtomicU64,
    pub(crate) subcompactions: AtomicU64,
    pub(crate) remote_compactions: AtomicU64,
    pub(crate) remote_gc_runs: AtomicU64,
    pub(crate) compaction_failures: AtomicU64,
    pub(crate) gc_failures: AtomicU64,
    pub(crate) stall_micros: AtomicU64,
    pub(crate) slowdowns: AtomicU64,
    pub(crate) stops: AtomicU64,
    pub(crate) wal_bytes_dropped_at_recovery: AtomicU64,
    /// Bumped by every reader thread: striped.
    pub(crate) point_reads: crate::striped::StripedCounter,
    pub(crate) iterators: crate::striped::StripedCounter,
    pub(crate) memtier_copy_ins: AtomicU64,
    pub(crate) memtier_merges: AtomicU64,
    pub(crate) memtier_unlinked: AtomicU64,
    pub(crate) memtier_copy_outs: AtomicU64,
    pub(crate) memtier_restored: AtomicU64,
    pub(crate) memtier_extents_freed: AtomicU64,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
}

/// Size and file count of one level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LevelStats {
    /// Table files in the level.
    pub files: usize,
    /// Bytes of those files.
    pub bytes: u64,
}

/// Size and garbage of one blob file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlobFileStats {
    /// File number.
    pub number: u64,
    /// File size in bytes.
    pub file_size: u64,
    /// Records in the file.
    pub records: u64,
    /// Records known dead.
    pub dead_records: u64,
    /// Bytes of dead records.
    pub garbage_bytes: u64,
    /// A sorted run (`Settings::sorted_value_runs`): its records are in
    /// key order.
    pub sorted_run: bool,
}

/// A point-in-time copy of the store's statistics.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// The error that made the store refuse writes (a failed WAL or
    /// manifest write, or background work that kept failing), if any.
    /// Reads keep working; reopen the store to write again.
    pub background_error: Option<String>,
    /// Bytes of keys and values passed to writes.
    pub user_bytes_written: u64,
    /// Keys written (puts and deletes).
    pub keys_written: u64,
    /// Bytes appended to WAL files.
    pub wal_bytes_written: u64,
    /// WAL fsyncs for synced writes and `sync_wal`.
    pub wal_syncs: u64,
    /// WAL fsyncs by the background syncer (`wal_bytes_per_sync`).
    pub wal_background_syncs: u64,
    /// Memtable switches that took a WAL the syncer thread had created
    /// ahead of time; the others created one and synced the directory
    /// while writers waited.
    pub wals_prepared: u64,
    /// Group commits (one WAL record each).
    pub write_groups: u64,
    /// Bytes of L0 tables written by flushes.
    pub flush_bytes_written: u64,
    /// Completed flushes.
    pub flushes: u64,
    /// Versions a flush left out because a newer version hides them from
    /// every reader (no snapshot between the two).
    pub flush_versions_dropped: u64,
    /// Bytes of tables read by compactions.
    pub compaction_bytes_read: u64,
    /// Bytes of tables written by compactions.
    pub compaction_bytes_written: u64,
    /// Completed compactions (trivial moves included).
    pub compactions: u64,
    /// Compactions that moved a file down without rewriting it.
    pub trivial_moves: u64,
    /// Key-range parts run for compactions split into several
    /// (`max_subcompactions`).
    pub subcompactions: u64,
    /// Compaction jobs, or key-range parts of one, whose output another
    /// process made (an offload worker); the rest ran in this process.
    pub remote_compactions: u64,
    /// Compaction jobs that failed (their outputs were discarded).
    pub compaction_failures: u64,
    /// Background blob GC attempts that failed (retried with back-off).
    pub gc_failures: u64,
    /// Total microseconds writers waited on slow-down and stop triggers.
    pub stall_micros: u64,
    /// Writes delayed by the L0 slow-down trigger.
    pub slowdowns: u64,
    /// Times writers stopped for a flush or compaction.
    pub stops: u64,
    /// Shape of the LSM, L0 first.
    pub levels: Vec<LevelStats>,
    /// Bytes of all live table files.
    pub sst_bytes: u64,
    /// Bytes of live WAL files.
    pub wal_bytes: u64,
    /// Bytes the last open dropped from the end of the newest WAL written
    /// to, at its first incomplete or damaged record (writes that were
    /// never synced; see the durability contract). 0 after a clean shutdown.
    pub wal_bytes_dropped_at_recovery: u64,
    /// Bytes of live blob files.
    pub blob_bytes: u64,
    /// Bytes of blob records not known to be dead.
    pub blob_live_bytes: u64,
    /// Estimated bytes of blob records that newer versions in L0 shadow,
    /// not yet marked dead (only compaction marks them, and only then can
    /// GC free them).
    pub blob_hidden_garbage_bytes: u64,
    /// Per live blob file: size and garbage.
    pub blob_files: Vec<BlobFileStats>,
    /// Blob files retired by GC whose lineage is still needed.
    pub blob_lineage_entries: usize,
    /// Bytes of blob files written by flushes.
    pub blob_bytes_written: u64,
    /// Bytes of blob files read by GC (live records, and dead ones read
    /// through between them).
    pub gc_bytes_read: u64,
    /// Bytes of blob files written by GC.
    pub gc_bytes_written: u64,
    /// Records GC copied to new files.
    pub gc_records_relocated: u64,
    /// GC jobs installed.
    pub gc_runs: u64,
    /// GC jobs installed whose output another process made (an offload
    /// worker); the rest ran in this process.
    pub remote_gc_runs: u64,
    /// Blob refs compaction rewrote to a GC output.
    pub blob_refs_rewritten: u64,
    /// Separated values compactions moved into sorted runs
    /// (`Settings::sorted_value_runs`).
    pub values_moved: u64,
    /// Bytes of those records (counted in `compaction_bytes_written` too).
    pub value_bytes_moved: u64,
    /// Compactions that stopped moving values before their end, or moved
    /// none, because L0 had filled (writes come first).
    pub value_moves_stopped: u64,
    /// Memtable bytes (active + immutable): arena bytes used plus each
    /// memtable's hash index and key filter.
    pub memtable_bytes: u64,
    /// Immutable memtables waiting for flush.
    pub immutable_memtables: usize,
    /// The arena of a dropped memtable, kept for the next memtable (its
    /// pages stay mapped, counted here and not in `memtable_bytes`).
    pub spare_memtable_bytes: u64,
    /// Bytes of the memory tier holding tables (`memtier_size`).
    pub memtier_bytes: u64,
    /// Bytes the memory tier can hold (0 without one).
    pub memtier_capacity: u64,
    /// Tables in the memory tier.
    pub memtier_tables: usize,
    /// Memtables copied into the memory tier in one piece.
    pub memtier_copy_ins: u64,
    /// Memory-tier merges (tables relinked into one).
    pub memtier_merges: u64,
    /// Versions memory-tier merges unlinked as hidden from every reader.
    pub memtier_unlinked: u64,
    /// Memory-tier tables written out to L0 (counted in
    /// `flush_bytes_written`).
    pub memtier_copy_outs: u64,
    /// Durable memory-tier tables found in the tier file at open.
    pub memtier_restored: u64,
    /// Memory-tier extents (copied memtables) freed before their table was
    /// copied out, because merges unlinked every node in them.
    pub memtier_extents_freed: u64,
    /// Block cache hits.
    pub block_cache_hits: u64,
    /// Block cache misses.
    pub block_cache_misses: u64,
    /// Block cache lookups and inserts that found their shard locked by
    /// another thread for longer than a short spin and went on without the
    /// cache (such a lookup also counts as a miss of its kind, block or blob
    /// record).
    pub block_cache_busy: u64,
    /// Bytes the block cache holds (blocks, and with direct reads blob
    /// records).
    pub block_cache_usage: u64,
    /// Point reads of separated values that found their record in the
    /// block cache (direct reads only).
    pub blob_record_cache_hits: u64,
    /// Point reads of separated values that did not (direct reads only).
    pub blob_record_cache_misses: u64,
    /// Table and blob files open for reads (see `Options::max_open_files`).
    pub open_files: usize,
    /// Memory of the open tables' indexes and filters, bytes (bounded by
    /// `Options::open_files_memory`).
    pub open_file_bytes: u64,
    /// Table and blob files opened for reads since open; climbing fast while
    /// `open_files` sits at its bound means the bounds are too low.
    pub file_opens: u64,
    /// Point lookups served (`get`, `get_opt`, `get_if_cached`, `get_head`).
    pub point_reads: u64,
    /// Iterators created.
    pub iterators: u64,
    /// Last sequence number assigned.
    pub last_sequence: u64,
    /// Live snapshots.
    pub snapshots: usize,
}

impl Stats {
    pub(crate) fn from_counters(c: &Counters) -> Stats {
        Stats {
            user_bytes_written: c.user_bytes_written.load(Relaxed),
            keys_written: c.keys_written.load(Relaxed),
            wal_bytes_written: c.wal_bytes_written.load(Relaxed),
            wal_syncs: c.wal_syncs.load(Relaxed),
            wal_background_syncs: c.wal_background_syncs.load(Relaxed),
            wals_prepared: c.wals_prepared.load(Relaxed),
            write_groups: c.write_groups.load(Relaxed),
            flush_bytes_written: c.flush_bytes_written.load(Relaxed),
            flushes: c.flushes.load(Relaxed),
            flush_versions_dropped: c.flush_versions_dropped.load(Relaxed),
            compaction_bytes_read: c.compaction_bytes_read.load(Relaxed),
            compaction_bytes_written: c.compaction_bytes_written.load(Relaxed),
            compactions: c.compactions.load(Relaxed),
            trivial_moves: c.trivial_moves.load(Relaxed),
            subcompactions: c.subcompactions.load(Relaxed),
            remote_compactions: c.remote_compactions.load(Relaxed),
            remote_gc_runs: c.remote_gc_runs.load(Relaxed),
            compaction_failures: c.compaction_failures.load(Relaxed),
            gc_failures: c.gc_failures.load(Relaxed),
            stall_micros: c.stall_micros.load(Relaxed),
            slowdowns: c.slowdowns.load(Relaxed),
            stops: c.stops.load(Relaxed),
            blob_bytes_written: c.blob_bytes_written.load(Relaxed),
            gc_bytes_read: c.gc_bytes_read.load(Relaxed),
            gc_bytes_written: c.gc_bytes_written.load(Relaxed),
            gc_records_relocated: c.gc_records_relocated.load(Relaxed),
            gc_runs: c.gc_runs.load(Relaxed),
            blob_refs_rewritten: c.blob_refs_rewritten.load(Relaxed),
            values_moved: c.values_moved.load(Relaxed),
            value_bytes_moved: c.value_bytes_moved.load(Relaxed),
            value_moves_stopped: c.value_moves_stopped.load(Relaxed),
            wal_bytes_dropped_at_recovery: c.wal_bytes_dropped_at_recovery.load(Relaxed),
            point_reads: c.point_reads.get(),
            iterators: c.iterators.get(),
            memtier_copy_ins: c.memtier_copy_ins.load(Relaxed),
            memtier_merges: c.memtier_merges.load(Relaxed),
            memtier_unlinked: c.memtier_unlinked.load(Relaxed),
            memtier_copy_outs: c.memtier_copy_outs.load(Relaxed),
            memtier_restored: c.memtier_restored.load(Relaxed),
            memtier_extents_freed: c.memtier_extents_freed.load(Relaxed),
            ..Default::default()
        }
    }

    /// Write amplification: bytes written to tables and WAL per user byte.
    pub fn write_amplification(&self) -> f64 {
        let written = self.wal_bytes_written
            + self.flush_bytes_written
            + self.compaction_bytes_written
            + self.gc_bytes_written;
        written as f64 / self.user_bytes_written.max(1) as f64
    }

    /// Bytes on disk: tables, blob files and WALs.
    pub fn disk_bytes(&self) -> u64 {
        self.sst_bytes + self.blob_bytes + self.wal_bytes
    }

    /// Space amplification: bytes on disk over an estimate of the live data
    /// (table bytes plus blob records not known dead). It measures what GC
    /// controls, the garbage in blob files; obsolete versions still in
    /// tables count as live until compaction drops them.
    pub fn space_amplification(&self) -> f64 {
        let live = self.sst_bytes + self.blob_live_bytes;
        self.disk_bytes() as f64 / live.max(1) as f64
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "user bytes written      {}", self.user_bytes_written)?;
        writeln!(f, "keys written            {}", self.keys_written)?;
        writeln!(
            f,
            "wal bytes written       {} ({} syncs, {} in the background, {} groups, {} prepared WALs)",
            self.wal_bytes_written,
            self.wal_syncs,
            self.wal_background_syncs,
            self.write_groups,
            self.wals_prepared
        )?;
        writeln!(
            f,
            "flush bytes written     {} ({} flushes, {} shadowed versions dropped)",
            self.flush_bytes_written, self.flushes, self.flush_versions_dropped
        )?;
        writeln!(
            f,
            "compaction read/write   {} / {} ({} jobs, {} trivial moves, {} failed, {} parts, {} remote)",
            self.compaction_bytes_read,
            self.compaction_bytes_written,
            self.compactions,
            self.trivial_moves,
            self.compaction_failures,
            self.subcompactions,
            self.remote_compactions
        )?;
        writeln!(
            f,
            "values moved into runs  {} ({} bytes; {} jobs stopped moving for L0)",
            self.values_moved, self.value_bytes_moved, self.value_moves_stopped
        )?;
        writeln!(
            f,
            "write amplification     {:.2}",
            self.write_amplification()
        )?;
        writeln!(
            f,
            "stall micros            {} ({} slowdowns, {} stops)",
            self.stall_micros, self.slowdowns, self.stops
        )?;
        writeln!(
            f,
            "block cache hit/miss    {} / {} ({} bytes held, {} busy)",
            self.block_cache_hits,
            self.block_cache_misses,
            self.block_cache_usage,
            self.block_cache_busy
        )?;
        if self.blob_record_cache_hits + self.blob_record_cache_misses > 0 {
            writeln!(
                f,
                "blob record hit/miss    {} / {} (block cache, direct reads)",
                self.blob_record_cache_hits, self.blob_record_cache_misses
            )?;
        }
        writeln!(
            f,
            "open files              {} ({} bytes of indexes and filters, {} opens)",
            self.open_files, self.open_file_bytes, self.file_opens
        )?;
        writeln!(
            f,
            "blob gc read/write      {} / {} ({} jobs, {} remote, {} failed, {} records relocated, {} refs rewritten)",
            self.gc_bytes_read,
            self.gc_bytes_written,
            self.gc_runs,
            self.remote_gc_runs,
            self.gc_failures,
            self.gc_records_relocated,
            self.blob_refs_rewritten
        )?;
        writeln!(
            f,
            "space: sst {} blob {} wal {} memtables {} ({} immutable, {} spare)",
            self.sst_bytes,
            self.blob_bytes,
            self.wal_bytes,
            self.memtable_bytes,
            self.immutable_memtables,
            self.spare_memtable_bytes
        )?;
        if self.memtier_capacity > 0 {
            writeln!(
                f,
                "memory tier             {} of {} bytes in {} tables ({} copied in, {} merges, {} versions unlinked, {} copied out, {} freed early, {} restored at open)",
                self.memtier_bytes,
                self.memtier_capacity,
                self.memtier_tables,
                self.memtier_copy_ins,
                self.memtier_merges,
                self.memtier_unlinked,
                self.memtier_copy_outs,
                self.memtier_extents_freed,
                self.memtier_restored
            )?;
        }
        writeln!(
            f,
            "space amplification     {:.2} ({} blob files, {} lineage entries, ~{} garbage hidden in L0)",
            self.space_amplification(),
            self.blob_files.len(),
            self.blob_lineage_entries,
            self.blob_hidden_garbage_bytes
        )?;
        for (i, l) in self.levels.iter().enumerate() {
            if l.files > 0 {
                writeln!(f, "  L{i}: {} files, {} bytes", l.files, l.bytes)?;
            }
        }
        Ok(())
    }
}
