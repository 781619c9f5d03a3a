//! The hash store: opening (and recovering), checkpoints, statistics.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tern::io::{FileLock, FileSystem, PosixFs};

use crate::checkpoint::{self, CheckpointMeta, Recovered};
use crate::index::HashIndex;
use crate::log::segments::{parse_segment_file_name, Segments};
use crate::log::{spawn_flusher, HybridLog, FIRST_ADDRESS};
use crate::{Error, HashOptions, Result};

/// Counters a store keeps (summed from sessions as they end or flush them).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) in_place: AtomicU64,
    pub(crate) appended: AtomicU64,
    pub(crate) disk_reads: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) compacted_bytes: AtomicU64,
}

/// A snapshot of a store's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HashStats {
    /// Lowest address in the log.
    pub begin: u64,
    /// Lowest address in memory.
    pub head: u64,
    /// Below this, updates copy the record to the tail.
    pub read_only: u64,
    /// Below this, the log is on disk.
    pub flushed: u64,
    /// Where the next record goes.
    pub tail: u64,
    /// Updates made in place (from ended sessions).
    pub in_place_updates: u64,
    /// Records appended (from ended sessions).
    pub appended: u64,
    /// Records read from disk (from ended sessions).
    pub disk_reads: u64,
    /// Operations retried after a lost race or a full log (ended sessions).
    pub retries: u64,
    /// Log compactions completed since open.
    pub compactions: u64,
    /// Bytes of live records log compaction copied forward since open.
    pub compacted_bytes: u64,
    /// Checkpoints completed since open.
    pub checkpoints: u64,
    /// The end of the last checkpoint (0: none).
    pub checkpoint_end: u64,
    /// Records read back by recovery at open.
    pub recovered_records: u64,
    /// Bytes of memory the index takes.
    pub index_bytes: u64,
}

/// Where a checkpoint cuts the log, and the how-many-th cut it is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cut {
    pub(crate) begin: u64,
    pub(crate) end: u64,
    number: u64,
}

pub(crate) struct CheckpointState {
    meta: Option<CheckpointMeta>,
}

/// Stops the periodic checkpointer.
struct Ticker {
    stop: Mutex<bool>,
    wake: Condvar,
}

/// A hash store: a hash index over a hybrid log, for point operations.
///
/// Operations run through [`Session`](crate::Session)s (one per thread; see
/// [`HashStore::session`]). Writes are durable once a checkpoint that
/// started after them has completed: [`HashStore::checkpoint`] takes one,
/// and `HashOptions::checkpoint_interval` takes them periodically.
pub struct HashStore {
    pub(crate) log: Arc<HybridLog>,
    pub(crate) index: HashIndex,
    pub(crate) options: HashOptions,
    pub(crate) counters: Counters,
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    pub(crate) checkpoint: Mutex<CheckpointState>,
    /// One log compaction at a time.
    pub(crate) compaction: Mutex<()>,
    recovered: Recovered,
    /// Checkpoint cuts made, and the newest cut whose checkpoint completed:
    /// what [`HashStore::wait_durable`] waits on.
    cuts: AtomicU64,
    durable_cuts: AtomicU64,
    /// Checkpoints completed since open and the last one's end, for
    /// `stats` without waiting on a checkpoint under way.
    taken: AtomicU64,
    durable_end: AtomicU64,
    flusher: Option<JoinHandle<()>>,
    ticker: Arc<Ticker>,
    _lock: Box<dyn FileLock>,
}

impl HashStore {
    /// Opens (or creates) the store in `dir` on the real file system.
    pub fn open(dir: impl AsRef<Path>, options: HashOptions) -> Result<Arc<HashStore>> {
        HashStore::open_with_fs(Arc::new(PosixFs), dir, options)
    }

    /// Opens (or creates) the store in `dir` on `fs`. A store with a
    /// checkpoint comes back as of that checkpoint; anything written after
    /// it is cut off.
    pub fn open_with_fs(
        fs: Arc<dyn FileSystem>,
        dir: impl AsRef<Path>,
        options: HashOptions,
    ) -> Result<Arc<HashStore>> {
        options.validate()?;
        let dir = dir.as_ref().to_path_buf();
        tern::io::create_dir_all_durable(fs.as_ref(), &dir).map_err(|e| Error::io(&dir, e))?;
        let lock_path = dir.join("LOCK");
        let lock = fs.lock(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
        let segments = Segments::new(fs.clone(), &dir, options.segment_bits);
        let index = HashIndex::new(options.index_bits);
        let meta = checkpoint::read_meta(fs.as_ref(), &dir)?;
        let (begin, end, recovered) = match meta {
            Some(m) => {
                if m.index_bits > options.index_bits {
                    return Err(Error::InvalidArgument(format!(
                        "the store in {} was written with index_bits {}: open it with at least that many \
                         (fewer buckets would merge chains recovery cannot tell apart)",
                        dir.display(),
                        m.index_bits
                    )));
                }
                if m.page_bits != options.page_bits || m.segment_bits != options.segment_bits {
                    return Err(Error::InvalidArgument(format!(
                        "the store in {} has page_bits {} and segment_bits {}; open it with those (asked for {} and {})",
                        dir.display(),
                        m.page_bits,
                        m.segment_bits,
                        options.page_bits,
                        options.segment_bits
                    )));
                }
                let recovered =
                    checkpoint::rebuild_index(&segments, &index, m.page_bits, m.begin, m.end)?;
                segments.resume_at(m.end)?;
                remove_segments_above(fs.as_ref(), &dir, m.end >> m.segment_bits)?;
                (m.begin, m.end, recovered)
            }
            None => {
                // Nothing was ever checkpointed: nothing here is durable.
                remove_segments_above(fs.as_ref(), &dir, 0)?;
                segments.start(FIRST_ADDRESS)?;
                (FIRST_ADDRESS, FIRST_ADDRESS, Recovered::default())
            }
        };
        let log = Arc::new(HybridLog::new(
            options.page_bits,
            options.memory_pages,
            options.mutable_pages,
            segments,
            begin,
            end,
        ));
        let flusher = spawn_flusher(log.clone()).map_err(|e| Error::io(&dir, e))?;
        let ticker = Arc::new(Ticker {
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let store = Arc::new(HashStore {
            log,
            index,
            options,
            counters: Counters::default(),
            fs,
            dir,
            checkpoint: Mutex::new(CheckpointState { meta }),
            compaction: Mutex::new(()),
            recovered,
            cuts: AtomicU64::new(0),
            durable_cuts: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            durable_end: AtomicU64::new(meta.map_or(0, |m| m.end)),
            flusher: Some(flusher),
            ticker,
            _lock: lock,
        });
        if let Some(every) = store.options.checkpoint_interval {
            spawn_checkpointer(&store, every).map_err(|e| Error::io(&store.dir, e))?;
        }
        Ok(store)
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes a checkpoint: every operation that completed before the call
    /// survives a crash once it returns. Returns the checkpointed log end.
    pub fn checkpoint(&self) -> Result<u64> {
        let mut state = self.checkpoint.lock();
        let cut = self.cut()?;
        self.write_checkpoint(&mut state, cut)
    }

    /// Where a checkpoint cuts the log: its `begin` and `end`. `begin` is
    /// read first: log compaction moves it only once its copies are linked,
    /// so they are then below the tail read after it, and a checkpoint
    /// never names a begin past records its end leaves out.
    pub(crate) fn cut(&self) -> Result<Cut> {
        self.log.regions.check()?;
        let number = self.cuts.fetch_add(1, Ordering::SeqCst) + 1;
        let begin = self.log.regions.begin.load(Ordering::SeqCst);
        let handle = self.log.register();
        let guard = handle.pin();
        // Read-only must cover the tail as it was when the boundary moved:
        // were an append to slip in between, an update in place that began
        // after it could land below the checkpoint's end while the append
        // would not.
        loop {
            let end = self.log.tail_address();
            self.log.shift_read_only(end, &guard);
            if self.log.tail_address() == end {
                return Ok(Cut { begin, end, number });
            }
        }
    }

    /// Waits until the log below the cut is flushed, syncs it and makes the
    /// cut the store's checkpoint.
    pub(crate) fn write_checkpoint(&self, state: &mut CheckpointState, cut: Cut) -> Result<u64> {
        let Cut {
            begin,
            end,
            number: cut_number,
        } = cut;
        let handle = self.log.register();
        while self.log.regions.flushed.load(Ordering::Acquire) < end {
            self.log.regions.check()?;
            self.log.wait_for_room(&handle);
        }
        self.log.segments.sync()?;
        let meta = CheckpointMeta {
            page_bits: self.options.page_bits,
            segment_bits: self.options.segment_bits,
            index_bits: self.options.index_bits,
            begin,
            end,
            number: state.meta.map_or(0, |m| m.number) + 1,
        };
        checkpoint::write_meta(self.fs.as_ref(), &self.dir, &meta)?;
        state.meta = Some(meta);
        self.durable_cuts.fetch_max(cut_number, Ordering::SeqCst);
        self.taken.fetch_add(1, Ordering::Relaxed);
        self.durable_end.store(end, Ordering::Relaxed);
        Ok(end)
    }

    /// The longest value a record with a key of `key_len` bytes holds: a
    /// record must fit in one log page.
    pub fn max_value_len(&self, key_len: usize) -> usize {
        (self.log.page_size() as usize).saturating_sub(crate::record::HEADER_LEN + key_len)
    }

    /// A point to pass to [`HashStore::wait_durable`], taken after some
    /// operations completed.
    pub fn sync_point(&self) -> u64 {
        self.cuts.load(Ordering::SeqCst)
    }

    /// Returns once a checkpoint cut after `point` was taken has completed,
    /// so every operation completed before `point` was taken is durable;
    /// takes that checkpoint if none is under way. Callers waiting at once
    /// share checkpoints (group commit).
    pub fn wait_durable(&self, point: u64) -> Result<()> {
        if self.durable_cuts.load(Ordering::SeqCst) > point {
            return Ok(());
        }
        let mut state = self.checkpoint.lock();
        if self.durable_cuts.load(Ordering::SeqCst) > point {
            return Ok(());
        }
        let cut = self.cut()?;
        self.write_checkpoint(&mut state, cut)?;
        Ok(())
    }

    /// The store's state and counters.
    pub fn stats(&self) -> HashStats {
        let r = &self.log.regions;
        let c = &self.counters;
        HashStats {
            begin: r.begin.load(Ordering::Relaxed),
            head: r.head.load(Ordering::Relaxed),
            read_only: r.read_only.load(Ordering::Relaxed),
            flushed: r.flushed.load(Ordering::Relaxed),
            tail: self.log.tail_address(),
            in_place_updates: c.in_place.load(Ordering::Relaxed),
            appended: c.appended.load(Ordering::Relaxed),
            disk_reads: c.disk_reads.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            compactions: c.compactions.load(Ordering::Relaxed),
            compacted_bytes: c.compacted_bytes.load(Ordering::Relaxed),
            checkpoints: self.taken.load(Ordering::Relaxed),
            checkpoint_end: self.durable_end.load(Ordering::Relaxed),
            recovered_records: self.recovered.records,
            index_bytes: self.index.memory(),
        }
    }
}

fn remove_segments_above(fs: &dyn FileSystem, dir: &Path, last: u64) -> Result<()> {
    for name in fs.list_dir(dir).map_err(|e| Error::io(dir, e))? {
        if parse_segment_file_name(&name).is_some_and(|n| n > last) || name.ends_with(".tmp") {
            let path = dir.join(&name);
            fs.remove_file(&path).map_err(|e| Error::io(&path, e))?;
        }
    }
    Ok(())
}

fn spawn_checkpointer(store: &Arc<HashStore>, every: Duration) -> std::io::Result<()> {
    let weak = Arc::downgrade(store);
    let ticker = store.ticker.clone();
    std::thread::Builder::new()
        .name("tern-hash-ckpt".into())
        .spawn(move || loop {
            {
                let mut stop = ticker.stop.lock();
                if !*stop {
                    ticker.wake.wait_for(&mut stop, every);
                }
                if *stop {
                    return;
                }
            }
            let Some(store) = weak.upgrade() else { return };
            // A failure stops the store; sessions report it.
            let _ = store.checkpoint();
            if let Some(limit) = store.options.log_size_limit {
                let s = store.stats();
                if s.tail - s.begin > limit {
                    let _ = store.compact(s.tail - limit);
                }
            }
        })?;
    Ok(())
}

impl Drop for HashStore {
    fn drop(&mut self) {
        *self.ticker.stop.lock() = true;
        self.ticker.wake.notify_all();
        self.log.shut_down();
        if let Some(f) = self.flusher.take() {
            let _ = f.join();
        }
    }
}
