//! Opening a store: lock, replay the manifest, replay WALs newer than the
//! flushed point into L0 tables, start a fresh manifest and WAL, and delete
//! every file the recovered version does not reference.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::core::{Shared, State, SuperVersion};
use super::snapshot::SnapshotList;
use super::stats::Counters;
use super::table_cache::TableCache;
use crate::blob::BlobCache;
use crate::cache::{BlockCache, OpenFiles};
use crate::compaction::{Executor, LocalExecutor, Retention};
use crate::error::{Error, IoContext, Result};
use crate::format::version_edit::VersionEdit;
use crate::format::write_batch::WriteBatch;
use crate::io::DirectIo;
use crate::memtable::MemTable;
use crate::memtier::memory::TierMemory;
use crate::memtier::table::TierTable;
use crate::memtier::TierLevels;
use crate::options::Options;
use crate::version::VersionSet;
use crate::wal::{parse_file_name, wal_file_name, FileType, LogKind, LogReader, LOCK_FILE_NAME};

/// Opens (or creates) the store in `dir`.
pub fn open(dir: &Path, opts: Options, executor: Option<Arc<dyn Executor>>) -> Result<Arc<Shared>> {
    opts.validate()?;
    let fs = opts.fs.clone();
    if opts.create_if_missing {
        crate::io::create_dir_all_durable(fs.as_ref(), dir).ctx(dir)?;
    }
    let lock_path = dir.join(LOCK_FILE_NAME);
    let lock = fs.lock(&lock_path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::InvalidArgument(format!(
                "{} does not exist (set create_if_missing)",
                dir.display()
            ))
        } else {
            Error::Busy(format!(
                "cannot lock {}: {e}; is another process using this store?",
                lock_path.display()
            ))
        }
    })?;
    let exists = fs.exists(&dir.join("CURRENT"));
    let versions = if exists {
        if opts.error_if_exists {
            return Err(Error::InvalidArgument(format!(
                "{} already holds a store",
                dir.display()
            )));
        }
        VersionSet::recover(fs.clone(), dir, opts.max_manifest_file_size)?.0
    } else if opts.create_if_missing {
        VersionSet::new(fs.clone(), dir, opts.max_manifest_file_size)
    } else {
        return Err(Error::InvalidArgument(format!(
            "{} holds no Tern store and create_if_missing is false",
            dir.display()
        )));
    };

    let block_cache =
        (opts.block_cache_capacity > 0).then(|| BlockCache::new(opts.block_cache_capacity));
    let open_files = Arc::new(OpenFiles::new(
        opts.max_open_files,
        opts.open_files_memory as u64,
    ));
    // Reads the process's memory limit (files under /proc and /sys) once,
    // here, rather than under the state lock at the first compaction.
    let _ = opts.sorted_runs_threshold();
    // The caches open every table and blob file that reads use.
    let read_fs = DirectIo::for_reads(&fs, opts.use_direct_reads);
    let tables = Arc::new(TableCache::new(
        dir.to_path_buf(),
        read_fs.clone(),
        block_cache.clone(),
        open_files.clone(),
    ));
    let (tier, tier_levels) = open_tier(fs.as_ref(), dir, &opts, &versions)?;
    let restored = tier_levels.tables().count() as u64;
    let mem = Arc::new(MemTable::new(16));
    let state = State {
        versions,
        mem: mem.clone(),
        mem_wal_number: 0,
        imms: VecDeque::new(),
        bg_error: None,
        shutting_down: false,
        flush_running: false,
        obsolete_tables: Vec::new(),
        obsolete_wals: Vec::new(),
        removals_in_flight: 0,
        obsolete_blobs: Vec::new(),
        reserved_numbers: Vec::new(),
        protected: Vec::new(),
        next_protection: 0,
        tier: tier_levels,
        tier_view: Default::default(),
        tier_drains: 0,
        tier_retired: Vec::new(),
    };
    let sv = SuperVersion {
        mem: mem.clone(),
        imms: Vec::new(),
        version: state.versions.current(),
        tier: Default::default(),
        imm_wals: Vec::new(),
    };
    let blobs = Arc::new(
        BlobCache::new(dir.to_path_buf(), read_fs, open_files.clone())
            .mapped_reads(opts.mmap_blob_reads && !opts.use_direct_reads)
            // Nothing below the engine keeps what direct reads read.
            .record_cache(block_cache.clone().filter(|_| opts.use_direct_reads)),
    );
    let shared = Arc::new(Shared {
        blobs,
        open_files,
        dir: dir.to_path_buf(),
        background_fs: DirectIo::for_background(
            &fs,
            opts.use_direct_io_for_flush_and_compaction,
            opts.bytes_per_sync,
        ),
        fs,
        state: Mutex::new(state),
        bg_done: Condvar::new(),
        bg_work: Condvar::new(),
        current: Mutex::new(Arc::new(sv)),
        sv_cache: Default::default(),
        visible_seq: AtomicU64::new(0),
        queue: Mutex::new(VecDeque::new()),
        poll_slots: super::commit_queue::PollSlots::for_this_machine(),
        wal: Mutex::new(None),
        leader_mem: Mutex::new(mem),
        l0_files: Arc::new(AtomicUsize::new(0)),
        wal_len: AtomicU64::new(0),
        bg_error_seen: Mutex::new(None),
        wal_syncer: Default::default(),
        linker: Default::default(),
        arena_pool: Default::default(),
        tables,
        block_cache,
        counters: Counters::default(),
        snapshots: Arc::new(SnapshotList::default()),
        compaction_lock: Mutex::new(()),
        gc_lock: Mutex::new(()),
        l0_shadow: AtomicU64::new(0),
        idle_pass: std::sync::atomic::AtomicBool::new(false),
        tier,
        tier_views: Mutex::new(Vec::new()),
        tier_lock: Mutex::new(()),
        rate_limiter: opts.background_rate_limit.map(crate::io::RateLimiter::new),
        executor: executor.unwrap_or_else(|| Arc::new(LocalExecutor)),
        closed: AtomicBool::new(false),
        lock: Mutex::new(Some(lock)),
        sync_points: Default::default(),
        opts,
    });
    let weak = Arc::downgrade(&shared);
    shared.open_files.on_first_room(move || {
        if let Some(s) = weak.upgrade() {
            s.stop_keeping_readers();
        }
    });
    Counters::add(&shared.counters.memtier_restored, restored);
    recover_wals(&shared)?;
    Ok(shared)
}

/// Replays WALs at or after the manifest's log number, writes what they hold
/// to L0, then starts a new manifest and WAL and removes orphans.
fn recover_wals(s: &Arc<Shared>) -> Result<()> {
    let mut state = s.state.lock();
    let names = s.fs.list_dir(&s.dir).ctx(&s.dir)?;
    let mut wals: Vec<u64> = names
        .iter()
        .filter_map(|n| parse_file_name(n))
        .filter(|&(t, n)| t == FileType::Wal && n >= state.versions.log_number)
        .map(|(_, n)| n)
        .collect();
    wals.sort_unstable();
    // WALs are created without a manifest edit, so the recovered counter may
    // be below them: never hand out a number that is already on disk.
    for (_, n) in names.iter().filter_map(|n| parse_file_name(n)) {
        state.versions.mark_file_number_used(n);
    }

    let mut edit = VersionEdit::default();
    // A durable tier holds every write up to its newest sequence number
    // (whole memtables, copied in order): replay skips those.
    let tier_max = state.tier.tables().map(|t| t.seqs().1).max();
    let mut max_seq = state.versions.last_sequence.max(tier_max.unwrap_or(0));
    let mut spill = Spill::default();
    let mut mem = s.new_memtable(0);
    // Point-in-time recovery: replay the WALs in order and stop at the first
    // incomplete or damaged record (the unsynced tail a crash may leave,
    // possibly with holes where pages were lost) or at a WAL whose
    // predecessor is shorter than it was at the switch, dropping every
    // later WAL, unless a later WAL's sync mark proves the damaged one was
    // synced whole: then it is corruption, not a crash.
    let mut replayed_len = std::collections::HashMap::new();
    for (i, &number) in wals.iter().enumerate() {
        let path = s.dir.join(wal_file_name(number));
        let data = s.fs.read_all(&path).ctx(&path)?;
        let len = data.len() as u64;
        let mut reader = LogReader::new(data, path.clone(), LogKind::Wal)?;
        if let Some(prev) = reader.predecessor() {
            let had = replayed_len.get(&prev.number).copied().unwrap_or(0);
            if prev.number >= state.versions.log_number && had < prev.len {
                let prev_path = s.dir.join(wal_file_name(prev.number));
                stop_replay(s, prev.number, &wals[i..], 0, || {
                    let cut = format!(
                        "write-ahead log ends at {had} but was {} bytes at the memtable switch",
                        prev.len
                    );
                    let what = format!("{}: {cut}", prev_path.display());
                    (
                        Error::corruption(&prev_path, had, format!("{cut}, and {VOUCHED}")),
                        what,
                    )
                })?;
                break;
            }
        }
        // Damage ends the loop like the end of the log; `stopped_at` and
        // `damage` below tell the two apart.
        while let Ok(Some(rec)) = reader.next_record() {
            let batch = WriteBatch::from_wal_bytes(rec);
            let offset = reader.last_record_offset();
            let batch = batch.map_err(|e| {
                e.in_file(
                    &path,
                    offset + crate::format::log_record::RECORD_HEADER_LEN as u64,
                )
            })?;
            for (seq, e) in (batch.seq()..).zip(batch.iter()) {
                let e = e.map_err(|e| {
                    e.in_file(
                        &path,
                        offset + crate::format::log_record::RECORD_HEADER_LEN as u64,
                    )
                })?;
                if tier_max.is_some_and(|t| seq <= t) {
                    continue;
                }
                if mem.add(seq, e.kind, e.key, e.value).is_err() {
                    // Full: write it out and continue in a fresh memtable.
                    spill_replayed(s, &mut state, &mem, &mut edit, &mut spill)?;
                    mem = s.new_memtable(e.key.len() + e.value.len() + 128);
                    mem.add(seq, e.kind, e.key, e.value).map_err(|_| {
                        Error::corruption(&path, offset, "write too large for a memtable")
                    })?;
                }
                max_seq = max_seq.max(seq);
            }
        }
        replayed_len.insert(number, reader.valid_len());
        let Some(at) = reader.stopped_at() else {
            continue;
        };
        if reader.only_a_torn_header() {
            // A WAL created just before the crash that received nothing (a
            // lost predecessor shows in its successor's predecessor record).
            continue;
        }
        stop_replay(s, number, &wals[i + 1..], len - at, || {
            let damage = reader.damage().unwrap_or_else(|| {
                Error::corruption(
                    &path,
                    at,
                    format!("incomplete record in a write-ahead log that {VOUCHED}"),
                )
            });
            let what = format!(
                "{}: incomplete or damaged record at offset {at}",
                path.display()
            );
            (damage, what)
        })?;
        break;
    }
    spill_replayed(s, &mut state, &mem, &mut edit, &mut spill)?;

    // A fresh WAL for new writes, then one manifest snapshot naming it.
    let wal_number = state.versions.new_file_number();
    let active = s.create_wal(wal_number)?;
    edit.log_number = Some(wal_number);
    edit.last_sequence = Some(max_seq);
    s.log_and_apply(&mut state, &mut edit)?;
    // The tables recovery took out of the tier are named no more.
    drop(spill);
    s.wal_len.store(active.writer.len(), Ordering::Relaxed);
    *s.wal.lock() = Some(active);
    // The first switch finds the next WAL ready too.
    s.wal_syncer.prepare();
    state.mem = s.new_memtable(0);
    *s.leader_mem.lock() = state.mem.clone();
    state.mem_wal_number = wal_number;
    s.visible_seq.store(max_seq, Ordering::Release);
    // Reads see the restored tier through its view.
    s.publish_tier(&mut state);
    s.install_super_version(&state);
    remove_orphans(s, &state, &names)?;
    Ok(())
}

/// Why damage is corruption rather than a crash's loss.
const VOUCHED: &str = "a later log's sync mark says it was synced whole (damage, not a crash)";

/// Ends replay at damage in WAL `damaged`, `dropped_here` bytes of it lost:
/// an error (the first of `describe`'s pair) when one of the `later` WALs
/// vouches for it, else a warning (its second) and the dropped bytes, the
/// later WALs' included, counted. The later WALs hold only writes made
/// after the lost ones, none synced: a sync makes earlier WALs durable
/// first.
fn stop_replay(
    s: &Shared,
    damaged: u64,
    later: &[u64],
    dropped_here: u64,
    describe: impl FnOnce() -> (Error, String),
) -> Result<()> {
    let vouched = crate::wal::later_wal_vouches_for(s.fs.as_ref(), &s.dir, damaged, later)?;
    let (error, what) = describe();
    if vouched {
        return Err(error);
    }
    let dropped = dropped_here + later_wal_bytes(s, later)?;
    tracing::warn!(
        "tern: recovery stopped: {what}; dropped {dropped} bytes of unsynced writes, {} later WALs included",
        later.len()
    );
    Counters::add(&s.counters.wal_bytes_dropped_at_recovery, dropped);
    Ok(())
}

/// Bytes past their headers in the WALs `numbers`, which recovery drops.
fn later_wal_bytes(s: &Shared, numbers: &[u64]) -> Result<u64> {
    let mut bytes = 0;
    for &n in numbers {
        let p = s.dir.join(wal_file_name(n));
        let len = s.fs.file_size(&p).ctx(&p)?;
        bytes += len.saturating_sub(crate::format::log_record::FILE_HEADER_LEN as u64);
    }
    Ok(bytes)
}

/// Where replayed memtables go while recovery runs. Nothing recovery does
/// is logged before its one final edit (which also moves the log number
/// past the replayed WALs), so a recovery that stops half-way leaves the
/// store as it found it.
#[derive(Default)]
struct Spill {
    /// The durable tier had no room: everything in it went to L0 (in the
    /// final edit), and the rest of the replay follows it there.
    to_l0: bool,
    /// Tables taken out of the tier on the way: their extents stay taken
    /// until the final edit stops naming them.
    held: Vec<Arc<TierTable>>,
}

/// Writes a memtable of replayed WAL records out, recorded in `edit`: into
/// a durable tier while it has room, else to an L0 table. When a durable
/// tier is full, all of it goes to L0 first, which keeps L0 older than the
/// tier.
fn spill_replayed(
    s: &Arc<Shared>,
    state: &mut State,
    mem: &Arc<MemTable>,
    edit: &mut VersionEdit,
    spill: &mut Spill,
) -> Result<()> {
    let tier = s.tier.as_ref().filter(|t| t.path().is_some());
    if let (Some(tier), false) = (tier, spill.to_l0) {
        if mem.is_empty() {
            return Ok(());
        }
        let id = state.versions.new_file_number();
        let bits = s.opts.bloom_bits_per_key;
        if let Some((table, meta)) = TierTable::copy_in(tier, mem, 0, Some(id), bits)? {
            edit.tier_added.extend(meta);
            state.tier.add_newest(Arc::new(table));
            Counters::add(&s.counters.memtier_copy_ins, 1);
            return Ok(());
        }
        while let Some(t) = state.tier.oldest().cloned() {
            state.tier.remove(&t);
            let number = state.versions.new_file_number();
            let counter = state.versions.file_number_counter();
            let out =
                s.write_level0_table(&mut t.iter(), number, &counter, &Retention::default(), None)?;
            edit.new_files.extend(out.table.map(|m| (0, m)));
            edit.blob_files_added.extend(out.blobs);
            for id in t.ids() {
                // A table this recovery added leaves the edit instead.
                match edit.tier_added.iter().position(|a| a.id == id) {
                    Some(i) => {
                        edit.tier_added.remove(i);
                    }
                    None => edit.tier_removed.push(id),
                }
            }
            Counters::add(&s.counters.memtier_copy_outs, 1);
            spill.held.push(t);
        }
        spill.to_l0 = true;
    }
    let number = state.versions.new_file_number();
    let counter = state.versions.file_number_counter();
    let out = s.write_level0_table(
        &mut mem.iter_linked(),
        number,
        &counter,
        &Retention::default(),
        Some(mem.len() as u64),
    )?;
    edit.new_files.extend(out.table.map(|t| (0, t)));
    edit.blob_files_added.extend(out.blobs);
    Ok(())
}

/// The memory tier: anonymous memory, or the durable tier's file with the
/// tables the manifest names rebuilt from it (all in the first tier level,
/// newest first; merges sort them out).
fn open_tier(
    fs: &dyn crate::io::FileSystem,
    dir: &Path,
    opts: &Options,
    versions: &VersionSet,
) -> Result<(Option<Arc<TierMemory>>, TierLevels)> {
    let live = versions.current().tier.clone();
    let mut levels = TierLevels::new(opts.memtier_levels);
    let (Some(size), Some(path)) = (opts.memtier_size, &opts.memtier_path) else {
        if !live.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "the store holds {} tables in a durable memory tier, but memtier_path is not set; open it with the memtier_path and memtier_size it was written with",
                live.len()
            )));
        }
        let tier = opts.memtier_size.map(TierMemory::anonymous).transpose()?;
        return Ok((tier, levels));
    };
    let path = dir.join(path);
    let mem = TierMemory::file(fs, &path, size, &live)?;
    // Ids follow age: oldest first, so the last added is the newest.
    for meta in live.values() {
        let table = TierTable::restore(&mem, meta, opts.bloom_bits_per_key).map_err(|e| {
            Error::corruption(
                &path,
                e.offset as u64,
                format!("memory tier table {}: {}", meta.id, e.why),
            )
        })?;
        levels.add_newest(Arc::new(table));
    }
    Ok((Some(mem), levels))
}

/// Deletes files of ours that the recovered state does not reference.
fn remove_orphans(s: &Shared, state: &State, names: &[String]) -> Result<()> {
    let live: std::collections::HashSet<u64> = state.versions.current().file_numbers().collect();
    for name in names {
        let Some((kind, number)) = parse_file_name(name) else {
            continue;
        };
        let obsolete = match kind {
            FileType::Wal => number < state.versions.log_number,
            FileType::Table | FileType::Blob => !live.contains(&number),
            FileType::Manifest => number != state.versions.manifest_number(),
            FileType::Temp => true,
            FileType::Current | FileType::Lock => false,
        };
        if obsolete {
            let path = s.dir.join(name);
            tracing::info!("tern: removing obsolete file {}", path.display());
            match s.fs.remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::io(path, e))
                }
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{FaultFs, FaultKind, FileSystem, MemFs};
    use crate::wal::LogWriter;
    use crate::Db;

    /// A store on `fault` with a durable tier of `tier` bytes and 64 KiB
    /// memtables, values kept inline.
    fn durable_tier_opts(fault: &Arc<FaultFs>, tier: u64) -> Options {
        Options {
            fs: fault.clone(),
            ..Options::default()
        }
        .tune(|s| {
            s.write_buffer_size = 64 << 10;
            s.memtier_size = Some(tier);
            s.memtier_path = Some("MEMTIER".into());
            s.blob_threshold = None;
        })
    }

    /// Writes the next WAL of the closed store in `/db` by hand, as a crash
    /// would leave it: `count` puts of 1000-byte values to keys from
    /// `first`, sequence numbers from `seq`, synced.
    fn unflushed_wal(mem: &Arc<MemFs>, first: u32, count: u32, seq: u64) {
        let (set, _) = VersionSet::recover(mem.clone(), Path::new("/db"), 1 << 20).unwrap();
        let number = set.new_file_number();
        drop(set);
        let path = Path::new("/db").join(wal_file_name(number));
        let mut writer = LogWriter::new(mem.create(&path).unwrap(), LogKind::Wal).unwrap();
        for i in first..first + count {
            let mut b = WriteBatch::new();
            b.put(&key(i), &[b'v'; 1000]);
            b.set_seq(seq + u64::from(i - first));
            writer.add_record(b.as_bytes()).unwrap();
        }
        writer.sync().unwrap();
        mem.sync_dir(Path::new("/db")).unwrap();
    }

    /// Regression: recovery made room in a full durable tier by copying its
    /// oldest tables out to L0, each with its own manifest edit, after it
    /// had logged a replayed memtable into the tier. When it then failed
    /// (here: syncing the next copy-in), the next recovery found a tier
    /// with a lower newest sequence and replayed the copied-out writes
    /// again, so they were held twice. Recovery now logs nothing before its
    /// final edit: a recovery failing during the replay (a tier sync) or at
    /// its very end (making the fresh WAL, after the tier went to L0) leaves
    /// every write exactly once for the next.
    #[test]
    fn a_failed_recovery_that_made_room_in_the_tier_does_not_replay_writes_twice() {
        let tier_sync: fn(&FaultFs) = |f| {
            f.only_paths_containing("MEMTIER");
            // The first copy-in of the replay fails to sync.
            f.inject(FaultKind::Sync, 0, true);
        };
        let new_wal: fn(&FaultFs) = |f| {
            f.only_paths_containing(".log");
            f.inject(FaultKind::Create, 0, true);
        };
        for (what, fail) in [("a tier sync", tier_sync), ("the fresh WAL", new_wal)] {
            let mem = MemFs::new();
            let fault = FaultFs::new(mem.clone());
            let opts = durable_tier_opts(&fault, 256 << 10).tune(|s| {
                s.enable_gc = false;
                s.level0_file_num_compaction_trigger = 100;
                s.level0_slowdown_writes_trigger = 200;
                s.level0_stop_writes_trigger = 300;
            });
            let db = Db::open("/db", opts.clone()).unwrap();
            const FIRST: u32 = 20;
            const MORE: u32 = 300;
            for i in 0..FIRST {
                db.put(&key(i), &[b'a'; 1000]).unwrap();
            }
            db.close().unwrap();
            drop(db);
            unflushed_wal(&mem, FIRST, MORE, 1 << 20);
            fail(&fault);
            assert!(
                Db::open("/db", opts.clone()).is_err(),
                "{what}: recovery failed"
            );
            assert!(fault.injected() > 0, "{what}: the fault was met");
            fault.clear();
            let db = Db::open("/db", opts).unwrap();
            for i in 0..FIRST + MORE {
                assert!(db.get(&key(i)).unwrap().is_some(), "{what}: key {i} lost");
            }
            let state = db.shared.state.lock();
            let version = state.versions.current();
            let in_tables: u64 = version.levels.iter().flatten().map(|f| f.num_entries).sum();
            let in_tier: u64 = state.tier.tables().map(|t| t.entries() as u64).sum();
            assert_eq!(
                in_tables + in_tier,
                u64::from(FIRST + MORE),
                "{what}: every write once: {in_tables} in tables, {in_tier} in the tier"
            );
        }
    }

    /// Regression: recovery named a replayed memtable too large for the
    /// (empty) durable tier, written to L0, only in its final edit, while a
    /// later replayed memtable went into the tier with an edit of its own.
    /// A failure before the final edit lost the first one: the next
    /// recovery skipped its records (the tier's newest sequence is above
    /// them) and removed its table as an orphan.
    #[test]
    fn recovery_logs_a_replayed_memtable_it_writes_to_l0_before_the_tier_hides_its_wal() {
        let mem = MemFs::new();
        let fault = FaultFs::new(mem.clone());
        let opts = durable_tier_opts(&fault, 128 << 10);
        Db::open("/db", opts.clone()).unwrap().close().unwrap();
        const KEYS: u32 = 300;
        unflushed_wal(&mem, 0, KEYS, 1000);
        // Recovery fails making its fresh WAL, after the replay.
        fault.only_paths_containing(".log");
        fault.inject(FaultKind::Create, 0, true);
        assert!(Db::open("/db", opts.clone()).is_err());
        fault.clear();
        let db = Db::open("/db", opts).unwrap();
        let missing: Vec<u32> = (0..KEYS)
            .filter(|&i| db.get(&key(i)).unwrap().is_none())
            .collect();
        assert!(
            missing.is_empty(),
            "{} synced writes lost: {missing:?}",
            missing.len()
        );
    }

    /// Regression: WALs are created without a manifest edit, so with two
    /// unflushed WALs on disk recovery used to give its fresh WAL the number
    /// of the newer one, truncating it before the recovered data was logged.
    #[test]
    fn recovery_never_reuses_the_number_of_an_unflushed_wal() {
        let mem = MemFs::new();
        let fault = FaultFs::new(mem.clone());
        let opts = Options {
            fs: fault.clone(),
            ..Options::default()
        };
        Db::open("/db", opts.clone()).unwrap().close().unwrap();
        let (set, _) = VersionSet::recover(mem.clone(), Path::new("/db"), 1 << 20).unwrap();
        let next = set.new_file_number();
        drop(set);
        // Two WALs the manifest never heard of, as after two memtable switches.
        for (i, number) in [next, next + 1].into_iter().enumerate() {
            let path = Path::new("/db").join(wal_file_name(number));
            let mut w = LogWriter::new(mem.create(&path).unwrap(), LogKind::Wal).unwrap();
            let mut b = WriteBatch::new();
            b.put(format!("key{i}").as_bytes(), b"value");
            b.set_seq(1000 + i as u64);
            w.add_record(b.as_bytes()).unwrap();
            w.sync().unwrap();
        }
        mem.sync_dir(Path::new("/db")).unwrap();
        // Recovery fails when it writes its manifest...
        fault.only_paths_containing("MANIFEST");
        fault.inject(FaultKind::Create, 0, true);
        assert!(Db::open("/db", opts.clone()).is_err());
        fault.clear();
        // ...and the next recovery must still find both writes.
        let db = Db::open("/db", opts).unwrap();
        assert_eq!(db.get(b"key0").unwrap(), Some(b"value".to_vec()));
        assert_eq!(db.get(b"key1").unwrap(), Some(b"value".to_vec()));
    }

    /// The WALs holding records, oldest first (not the empty one prepared
    /// for the next switch).
    fn wal_paths(fs: &MemFs) -> Vec<std::path::PathBuf> {
        let mut wals: Vec<_> = fs
            .file_names()
            .into_iter()
            .filter(|p| p.to_string_lossy().ends_with(".log"))
            .filter(|p| {
                fs.file_size(p).unwrap() > crate::format::log_record::FILE_HEADER_LEN as u64
            })
            .collect();
        wals.sort();
        wals
    }

    fn key(i: u32) -> Vec<u8> {
        format!("key{i:06}").into_bytes()
    }

    /// The keys 0..n present, as a prefix of `written`; panics on a gap.
    fn recovered_prefix(db: &Db, written: u32) -> u32 {
        let mut n = 0;
        while n < written && db.get(&key(n)).unwrap().is_some() {
            n += 1;
        }
        for i in n..written {
            assert_eq!(db.get(&key(i)).unwrap(), None, "key {i} after a gap at {n}");
        }
        n
    }

    /// Regression: with `sync = false` writes, the page cache can persist a
    /// later page of the newest WAL and lose an earlier one. Recovery
    /// reported corruption and the store would not open, although losing
    /// unsynced writes is within the contract. It now keeps the prefix
    /// before the hole and reports what it dropped.
    #[test]
    fn hole_in_the_newest_wal_recovers_the_prefix_before_it() {
        let mem = MemFs::new();
        let opts = Options {
            settings: crate::Settings {
                write_buffer_size: 8 << 20,
                ..crate::Settings::default()
            },
            fs: mem.clone(),
            ..Options::default()
        };
        let db = Db::open("/db", opts.clone()).unwrap();
        for i in 0..4000 {
            db.put(&key(i), &[b'v'; 100]).unwrap();
        }
        // The process dies with everything handed to the OS, and the OS
        // then loses one page in the middle of the WAL.
        let crashed = mem.crashed_copy_with(crate::io::CrashMode::KeepAll, 0);
        drop(db);
        let wals = wal_paths(&crashed);
        let wal = wals.last().unwrap();
        crashed.zero_range(wal, 20 * 4096, 4096).unwrap();
        let db = Db::open(
            "/db",
            Options {
                fs: crashed.clone(),
                ..opts.clone()
            },
        )
        .unwrap();
        let n = recovered_prefix(&db, 4000);
        assert!(n > 500 && n < 1000, "recovered {n} of 4000 writes");
        let st = db.stats();
        assert!(
            st.wal_bytes_dropped_at_recovery > 300_000,
            "{}",
            st.wal_bytes_dropped_at_recovery
        );
        // The store works and the next recovery is clean.
        db.put(b"after", b"x").unwrap();
        db.close().unwrap();
        let db = Db::open(
            "/db",
            Options {
                fs: crashed,
                ..opts
            },
        )
        .unwrap();
        assert_eq!(recovered_prefix(&db, 4000), n);
        assert_eq!(db.stats().wal_bytes_dropped_at_recovery, 0);
        assert_eq!(db.get(b"after").unwrap(), Some(b"x".to_vec()));
    }

    /// A WAL's path and the offsets of its records.
    type WalRecords = (std::path::PathBuf, Vec<u64>);

    /// Two synced WALs the manifest never heard of (as after two memtable
    /// switches and a crash), 50 writes each, the second starting with a
    /// sync mark naming the first; returns their paths and the offsets of
    /// their records, with the file system and options.
    fn two_unflushed_wals() -> (Arc<MemFs>, Options, Vec<WalRecords>) {
        two_wals(true)
    }

    /// [`two_unflushed_wals`], with the sync mark only if `marked`.
    fn two_wals(marked: bool) -> (Arc<MemFs>, Options, Vec<WalRecords>) {
        two_wals_with(marked, false)
    }

    /// [`two_wals`]; with `predecessor`, the second WAL starts with a
    /// predecessor record naming the first and its length, as a switch
    /// writes. The WALs are numbered two apart (room for a stale one).
    fn two_wals_with(marked: bool, predecessor: bool) -> (Arc<MemFs>, Options, Vec<WalRecords>) {
        let mem = MemFs::new();
        let opts = Options {
            fs: mem.clone(),
            ..Options::default()
        };
        Db::open("/db", opts.clone()).unwrap().close().unwrap();
        let (set, _) = VersionSet::recover(mem.clone(), Path::new("/db"), 1 << 20).unwrap();
        let next = set.new_file_number();
        drop(set);
        let mut out: Vec<WalRecords> = Vec::new();
        for (w, number) in [next, next + 2].into_iter().enumerate() {
            let path = Path::new("/db").join(wal_file_name(number));
            let mut writer = LogWriter::new(mem.create(&path).unwrap(), LogKind::Wal).unwrap();
            if let Some((older, _)) = out.last() {
                let len = mem.file_size(older.as_path()).unwrap();
                let mark = crate::format::log_record::SyncMark { number: next, len };
                if predecessor {
                    writer.add_predecessor(mark).unwrap();
                }
                if marked {
                    writer.add_sync_mark(mark).unwrap();
                }
            }
            let mut offsets = Vec::new();
            for i in 0..50u32 {
                let i = w as u32 * 50 + i;
                let mut b = WriteBatch::new();
                b.put(&key(i), b"value");
                b.set_seq(1000 + u64::from(i));
                offsets.push(writer.len());
                writer.add_record(b.as_bytes()).unwrap();
            }
            writer.sync().unwrap();
            out.push((path, offsets));
        }
        mem.sync_dir(Path::new("/db")).unwrap();
        (mem, opts, out)
    }

    /// Open fails with corruption at `file`/`offset`, and `tern check`
    /// reports a problem at the same place.
    #[track_caller]
    fn assert_corruption_at(mem: &Arc<MemFs>, opts: Options, file: &Path, offset: u64) {
        let report = crate::tools::check::check_store(Path::new("/db"), mem.clone()).unwrap();
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.file == file && p.offset == offset),
            "check: {:?}",
            report.problems
        );
        match Db::open("/db", opts) {
            Err(Error::Corruption {
                file: f, offset: o, ..
            }) => {
                assert_eq!((f.as_path(), o), (file, offset));
            }
            other => panic!(
                "expected corruption in {} at {offset}, got {other:?}",
                file.display()
            ),
        }
    }

    /// Regression: a record length pointing past the end of the file was
    /// a torn tail in any WAL, so one damaged length byte in an older,
    /// fully synced WAL silently dropped acknowledged writes while the later
    /// WAL was replayed on top (a result that is not a prefix of history).
    #[test]
    fn damaged_record_length_in_an_older_wal_is_corruption() {
        let (mem, opts, wals) = two_unflushed_wals();
        let (older, offsets) = &wals[0];
        // The length field's high byte: the record now runs past the end.
        mem.corrupt_byte(older, offsets[30] + 7, 0x40).unwrap();
        assert_corruption_at(&mem, opts, older, offsets[30]);
    }

    /// The same for an older WAL cut short (its tail lost) and for a
    /// checksum failure in its last record: both are damage, not a torn
    /// write, because a later WAL's sync mark says it was synced whole.
    #[test]
    fn truncated_or_damaged_tail_of_an_older_wal_is_corruption() {
        for truncate in [true, false] {
            let (mem, opts, wals) = two_unflushed_wals();
            let (older, offsets) = &wals[0];
            if truncate {
                mem.truncate(older, offsets[49] + 5).unwrap();
            } else {
                let len = mem.file_size(older).unwrap();
                mem.corrupt_byte(older, len - 1, 0x01).unwrap();
            }
            assert_corruption_at(&mem, opts, older, offsets[49]);
        }
    }

    /// Regression: a later WAL whose first record (or header) is also
    /// damaged counted as holding no writes, so real damage in the older,
    /// synced WAL was taken for a torn tail, recovery stopped there, and the
    /// later WAL's synced writes were removed with it. A sync mark read
    /// before the later WAL's damage, or a damaged header (whose marks
    /// cannot be read), keeps the older WAL's damage corruption.
    #[test]
    fn damage_in_an_older_wal_stays_corruption_when_the_later_wal_is_damaged_too() {
        for later_header in [false, true] {
            let (mem, opts, wals) = two_unflushed_wals();
            let (older, offsets) = &wals[0];
            let (newer, newer_offsets) = &wals[1];
            mem.corrupt_byte(older, offsets[30] + 12, 0x01).unwrap();
            let at = if later_header {
                0
            } else {
                newer_offsets[0] + 12
            };
            mem.corrupt_byte(newer, at, 0x01).unwrap();
            assert_corruption_at(&mem, opts, older, offsets[30]);
        }
    }

    /// A switch does not wait for the old WAL's fsync, so a crash can keep
    /// a later WAL's records and lose the end of an earlier one. Without a
    /// sync mark in the later WAL, no record there was synced: recovery
    /// keeps the prefix before the damage and drops the later WAL too.
    #[test]
    fn damage_in_an_older_wal_that_no_sync_mark_vouches_for_recovers_the_prefix() {
        for truncate in [true, false] {
            let (mem, opts, wals) = two_wals(false);
            let (older, offsets) = &wals[0];
            if truncate {
                mem.truncate(older, offsets[30] + 5).unwrap();
            } else {
                mem.corrupt_byte(older, offsets[30] + 12, 0x01).unwrap();
            }
            let report = crate::tools::check::check_store(Path::new("/db"), mem.clone()).unwrap();
            assert!(report.problems.is_empty(), "{:?}", report.problems);
            let newer_len = mem.file_size(&wals[1].0).unwrap();
            let db = Db::open("/db", opts.clone()).unwrap();
            assert_eq!(recovered_prefix(&db, 100), 30, "truncate {truncate}");
            let dropped = db.stats().wal_bytes_dropped_at_recovery;
            assert!(dropped > newer_len - 16, "dropped {dropped}");
            // The dropped WAL is never replayed later.
            db.put(b"after", b"x").unwrap();
            db.close().unwrap();
            let db = Db::open("/db", opts).unwrap();
            assert_eq!(recovered_prefix(&db, 100), 30);
            assert_eq!(db.get(b"after").unwrap(), Some(b"x".to_vec()));
        }
    }

    /// Regression: an older WAL that a crash cut exactly between two
    /// records (or emptied) read as complete, and the later WAL was
    /// replayed on top of the lost writes. The later WAL's predecessor
    /// record gives the older one's length at the switch: shorter is a
    /// crash (the prefix is kept, the later WAL dropped), or corruption
    /// when a sync mark says the older WAL was synced whole.
    #[test]
    fn an_older_wal_cut_between_records_is_seen_in_its_successors_predecessor_record() {
        for (marked, cut_to) in [(false, Some(30)), (false, None), (true, Some(30))] {
            let (mem, opts, wals) = two_wals_with(marked, true);
            let (older, offsets) = &wals[0];
            let at = cut_to.map_or(16, |c| offsets[c]);
            mem.truncate(older, at).unwrap();
            if marked {
                assert_corruption_at(&mem, opts, older, at);
                continue;
            }
            let report = crate::tools::check::check_store(Path::new("/db"), mem.clone()).unwrap();
            assert!(report.problems.is_empty(), "{:?}", report.problems);
            assert!(
                report
                    .warnings
                    .iter()
                    .any(|w| w.contains("memtable switch")),
                "{:?}",
                report.warnings
            );
            let db = Db::open("/db", opts).unwrap();
            assert_eq!(recovered_prefix(&db, 100), cut_to.unwrap_or(0) as u32);
            assert!(db.stats().wal_bytes_dropped_at_recovery > 0);
        }
    }

    /// Regression: an empty WAL prepared for a switch, found stale and
    /// discarded without its header ever synced, read as a torn tail at
    /// offset 0 after a crash and ended recovery, dropping the later WAL's
    /// synced writes. A header-only WAL that tore holds nothing to lose.
    #[test]
    fn a_torn_header_only_wal_between_two_written_ones_does_not_end_recovery() {
        for torn in [vec![0u8; 16], b"TERNW".to_vec()] {
            let (mem, opts, wals) = two_wals_with(true, true);
            let number =
                crate::wal::parse_file_name(&wals[0].0.file_name().unwrap().to_string_lossy())
                    .unwrap()
                    .1;
            let stale = Path::new("/db").join(wal_file_name(number + 1));
            let mut f = mem.create(&stale).unwrap();
            f.append(&torn).unwrap();
            f.sync().unwrap();
            let report = crate::tools::check::check_store(Path::new("/db"), mem.clone()).unwrap();
            assert!(report.problems.is_empty(), "{:?}", report.problems);
            let db = Db::open("/db", opts).unwrap();
            assert_eq!(recovered_prefix(&db, 100), 100);
            assert_eq!(db.stats().wal_bytes_dropped_at_recovery, 0);
        }
    }

    /// Damage in the newest WAL written to, followed only by WALs
    /// that hold none (created just before a crash), is a torn tail.
    #[test]
    fn damage_followed_only_by_empty_wals_recovers_the_prefix() {
        let (mem, opts, wals) = two_unflushed_wals();
        let (newer, offsets) = &wals[1];
        mem.corrupt_byte(newer, offsets[10] + 12, 0x01).unwrap();
        // An empty WAL after it, as a memtable switch leaves before a crash.
        let number = crate::wal::parse_file_name(&newer.file_name().unwrap().to_string_lossy())
            .unwrap()
            .1;
        let empty = Path::new("/db").join(wal_file_name(number + 1));
        LogWriter::new(mem.create(&empty).unwrap(), LogKind::Wal)
            .unwrap()
            .sync()
            .unwrap();
        mem.sync_dir(Path::new("/db")).unwrap();
        let db = Db::open("/db", opts).unwrap();
        assert_eq!(recovered_prefix(&db, 100), 60);
        assert!(db.stats().wal_bytes_dropped_at_recovery > 0);
    }

    /// Regression: open refused a WAL record holding an internal
    /// blob-reference entry (writers log only puts and deletes), while
    /// `tern check` passed the same WAL as clean.
    #[test]
    fn wal_record_with_an_internal_blob_ref_entry_is_corruption_for_open_and_check() {
        let (mem, opts, wals) = two_unflushed_wals();
        let (newer, offsets) = &wals[1];
        let at = offsets[49];
        let mut b = WriteBatch::new();
        b.put(&key(999), b"not a ref");
        b.set_seq(5000);
        let mut bytes = b.as_bytes().to_vec();
        // Header (seq u64, count u32), then the entry's kind byte.
        bytes[12] = crate::format::internal_key::ValueKind::BlobRef as u8;
        mem.rewrite(newer, |data| {
            data.truncate(at as usize);
            crate::format::log_record::encode_record(data, &bytes);
        })
        .unwrap();
        // The error names the record's payload, where the batch starts.
        let payload = at + crate::format::log_record::RECORD_HEADER_LEN as u64;
        assert_corruption_at(&mem, opts, newer, payload);
    }

    /// Regression: a WAL batch whose sequence numbers run past the largest
    /// one the internal key can hold panicked replay (an overflow) or was
    /// truncated into a manifest the next open rejects.
    #[test]
    fn wal_record_with_sequence_numbers_out_of_range_is_corruption() {
        for seq in [u64::MAX - 1, crate::format::internal_key::MAX_SEQ] {
            let (mem, opts, wals) = two_unflushed_wals();
            let (newer, offsets) = &wals[1];
            let at = offsets[49];
            let mut b = WriteBatch::new();
            b.put(&key(998), b"a");
            b.put(&key(999), b"b");
            b.set_seq(seq);
            mem.rewrite(newer, |data| {
                data.truncate(at as usize);
                crate::format::log_record::encode_record(data, b.as_bytes());
            })
            .unwrap();
            let payload = at + crate::format::log_record::RECORD_HEADER_LEN as u64;
            assert_corruption_at(&mem, opts, newer, payload);
        }
    }
}
