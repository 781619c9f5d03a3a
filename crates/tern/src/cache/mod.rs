//! Block cache shared by all open tables, and the bounded set of open file
//! readers.
//!
//! Holds decoded (checksum-verified, decompressed) blocks keyed by
//! `(file number, block offset)`, weighted by their size in bytes. File
//! numbers are never reused, so entries of deleted tables simply age out.
//! With direct reads it also holds blob records, keyed the same way by
//! their blob file and offset (file numbers are one sequence, so a table's
//! keys and a blob file's never meet): nothing below the engine caches
//! them then, as RocksDB's BlobDB can keep blobs in its block cache when
//! its blob cache is set to it.

mod open_files;
pub use open_files::OpenFiles;

use crate::striped::StripedCounter;
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::{OptionsBuilder, Weighter};

use crate::format::block::Block;

/// Fixed per-entry overhead counted on top of the block bytes.
const ENTRY_OVERHEAD: u64 = 64;

/// Shards per core, at most (see [`shard_count`]). More shards mean fewer
/// lookups that find theirs busy and go to the file instead.
const SHARDS_PER_CORE: usize = 32;

/// Least capacity of a shard the extra shards may leave. An entry heavier
/// than about a shard's capacity is never cached, and with direct reads the
/// cache is the only place a large blob record can be kept.
const MIN_SHARD_BYTES: usize = 1 << 20;

/// Attempts at a busy shard before a lookup counts as a miss or an insert
/// is dropped. A shard is held for a fraction of a microsecond by a thread
/// that is running (readers, for an insert, or another insert), so a short
/// spin catches the common case; only a holder the scheduler took off the
/// CPU outlasts it.
const BUSY_TRIES: usize = 16;

/// The shard count for a cache of `capacity` bytes on `cores` cores: the
/// crate's 4 per core, and up to [`SHARDS_PER_CORE`] per core while each
/// shard keeps [`MIN_SHARD_BYTES`].
fn shard_count(capacity: usize, cores: usize) -> usize {
    let roomy = (capacity / MIN_SHARD_BYTES).min(cores * SHARDS_PER_CORE);
    roomy.max(cores * 4)
}

/// `attempt` until it succeeds, at most [`BUSY_TRIES`] times with a short
/// pause between; each failed try hands back the `state` the next one
/// takes (an insert's key and entry).
fn with_retries<S, T>(mut state: S, mut attempt: impl FnMut(S) -> Result<T, S>) -> Result<T, S> {
    for _ in 1..BUSY_TRIES {
        match attempt(state) {
            Ok(v) => return Ok(v),
            Err(back) => state = back,
        }
        for _ in 0..8 {
            std::hint::spin_loop();
        }
    }
    attempt(state)
}

/// What the cache holds at a `(file number, offset)`.
#[derive(Clone)]
enum Entry {
    /// A decoded table block.
    Block(Arc<Block>),
    /// A blob record's bytes as stored (checksum, lengths, key, value).
    Record(Arc<[u8]>),
}

#[derive(Debug, Clone, Copy)]
struct BlockWeighter;

impl Weighter<(u64, u64), Entry> for BlockWeighter {
    fn weight(&self, _key: &(u64, u64), val: &Entry) -> u64 {
        #[cfg(test)]
        tests::gate::pass(val);
        let bytes = match val {
            Entry::Block(b) => b.size(),
            Entry::Record(r) => r.len(),
        };
        bytes as u64 + ENTRY_OVERHEAD
    }
}

/// A size-bounded cache of decoded table blocks (and, with direct reads,
/// blob records).
///
/// No lookup or insert waits longer than a short spin. A shard is
/// locked for writing while an insert evicts, and a thread the scheduler
/// takes off the CPU inside that lock (more client threads than cores)
/// would hold every reader of the shard for a whole time slice,
/// milliseconds, for a block the page cache serves in microseconds. So a
/// lookup that still finds its shard busy after a short spin
/// ([`BUSY_TRIES`]) counts as a miss (and as busy) and the caller reads the
/// file, and an insert that does is dropped: the next reader of the block
/// caches it. With direct reads such a miss is a device read, still far
/// shorter than a time slice.
pub struct BlockCache {
    inner: Cache<(u64, u64), Entry, BlockWeighter>,
    capacity: usize,
    hits: StripedCounter,
    misses: StripedCounter,
    record_hits: StripedCounter,
    record_misses: StripedCounter,
    busy: StripedCounter,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity", &self.capacity)
            .field("usage", &self.usage())
            .field("hits", &self.hits())
            .field("misses", &self.misses())
            .field("record_hits", &self.record_hits())
            .field("record_misses", &self.record_misses())
            .field("busy", &self.busy())
            .finish()
    }
}

impl BlockCache {
    /// A cache holding at most about `capacity_bytes` of blocks.
    pub fn new(capacity_bytes: usize) -> Arc<Self> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::with_shards(capacity_bytes, shard_count(capacity_bytes, cores))
    }

    /// [`BlockCache::new`] with about `shards` shards (a power of two, and
    /// fewer where each would hold under 32 blocks).
    fn with_shards(capacity_bytes: usize, shards: usize) -> Arc<Self> {
        let items = (capacity_bytes / 4096).max(16);
        let options = OptionsBuilder::new()
            .estimated_items_capacity(items)
            .weight_capacity(capacity_bytes as u64)
            .shards(shards)
            .build();
        let inner = match options {
            Ok(o) => Cache::with_options(o, BlockWeighter, Default::default(), Default::default()),
            // Only an unset field fails the build, and all are set above.
            Err(_) => Cache::with_weighter(items, capacity_bytes as u64, BlockWeighter),
        };
        Arc::new(BlockCache {
            inner,
            capacity: capacity_bytes,
            hits: StripedCounter::default(),
            misses: StripedCounter::default(),
            record_hits: StripedCounter::default(),
            record_misses: StripedCounter::default(),
            busy: StripedCounter::default(),
        })
    }

    /// Block lookups that found their block.
    pub fn hits(&self) -> u64 {
        self.hits.get()
    }

    /// Block lookups that did not.
    pub fn misses(&self) -> u64 {
        self.misses.get()
    }

    /// Blob record lookups that found their record.
    pub fn record_hits(&self) -> u64 {
        self.record_hits.get()
    }

    /// Blob record lookups that did not.
    pub fn record_misses(&self) -> u64 {
        self.record_misses.get()
    }

    /// Lookups and inserts that found their shard locked by another thread
    /// for longer than a short spin and went on without it (such a lookup
    /// also counts as a miss of its kind, block or record).
    pub fn busy(&self) -> u64 {
        self.busy.get()
    }

    /// Configured capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes currently held (block and record bytes plus a small per-entry
    /// overhead).
    pub fn usage(&self) -> u64 {
        self.inner.weight()
    }

    /// Number of cached blocks and records.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// The block at `offset` of table `file_number`, counting a hit or miss.
    pub fn get(&self, file_number: u64, offset: u64) -> Option<Arc<Block>> {
        let r = match self.lookup(file_number, offset) {
            Some(Entry::Block(b)) => Some(b),
            _ => None,
        };
        counted(r, &self.hits, &self.misses)
    }

    /// Caches a decoded block, unless its shard is busy.
    pub fn insert(&self, file_number: u64, offset: u64, block: Arc<Block>) {
        self.store(file_number, offset, Entry::Block(block));
    }

    /// The entry at `(file_number, offset)`; `None` when absent or when its
    /// shard is locked by another thread.
    fn lookup(&self, file_number: u64, offset: u64) -> Option<Entry> {
        let key = (file_number, offset);
        with_retries((), |()| self.inner.try_get(&key).map_err(|_| ())).unwrap_or_else(|()| {
            self.busy.add(1);
            None
        })
    }

    /// Caches `entry`, or drops it when its shard is locked by another
    /// thread.
    fn store(&self, file_number: u64, offset: u64, entry: Entry) {
        let stored = with_retries(((file_number, offset), entry), |(key, entry)| {
            self.inner.try_insert(key, entry)
        });
        if stored.is_err() {
            self.busy.add(1);
        }
    }

    /// The record at `offset` of blob file `file_number`, as
    /// [`BlockCache::insert_record`] cached it, counting a hit or miss.
    pub fn get_record(&self, file_number: u64, offset: u64) -> Option<Arc<[u8]>> {
        let r = match self.lookup(file_number, offset) {
            Some(Entry::Record(r)) => Some(r),
            _ => None,
        };
        counted(r, &self.record_hits, &self.record_misses)
    }

    /// Caches the bytes of the record at `offset` of blob file
    /// `file_number`.
    pub fn insert_record(&self, file_number: u64, offset: u64, record: Arc<[u8]>) {
        self.store(file_number, offset, Entry::Record(record));
    }
}

/// `found`, counted as a hit or a miss.
fn counted<T>(found: Option<T>, hits: &StripedCounter, misses: &StripedCounter) -> Option<T> {
    if found.is_some() { hits } else { misses }.add(1);
    found
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::block::BlockBuilder;

    fn block(n: usize) -> Arc<Block> {
        let mut b = BlockBuilder::new(16);
        b.add(b"k", &vec![7u8; n]);
        Arc::new(Block::new(b.finish().to_vec()).unwrap())
    }

    #[test]
    fn hits_misses_and_capacity() {
        let c = BlockCache::new(64 * 1024);
        assert!(c.get(1, 0).is_none());
        c.insert(1, 0, block(100));
        assert!(c.get(1, 0).is_some());
        assert!(c.get(2, 0).is_none());
        assert_eq!((c.hits(), c.misses()), (1, 2));
        for i in 0..100 {
            c.insert(3, i, block(4000));
        }
        assert!(c.usage() <= 64 * 1024);
        let zero = BlockCache::new(0);
        zero.insert(1, 0, block(10));
        assert!(zero.get(1, 0).is_none());
    }

    /// Holds an insert inside its shard's write lock: the cache weighs an
    /// entry there, and weighing [`gate::MARK`] waits until released.
    pub(super) mod gate {
        use super::Entry;
        use parking_lot::{Condvar, Mutex};

        /// The record whose weighing waits.
        pub const MARK: &[u8] = b"hold the shard";

        /// (inside the lock, released)
        static STATE: Mutex<(bool, bool)> = Mutex::new((false, false));
        static CHANGED: Condvar = Condvar::new();

        pub fn pass(val: &Entry) {
            if !matches!(val, Entry::Record(r) if &r[..] == MARK) {
                return;
            }
            let mut s = STATE.lock();
            s.0 = true;
            CHANGED.notify_all();
            while !s.1 {
                CHANGED.wait(&mut s);
            }
        }

        pub fn wait_until_inside() {
            let mut s = STATE.lock();
            while !s.0 {
                CHANGED.wait(&mut s);
            }
        }

        pub fn release() {
            STATE.lock().1 = true;
            CHANGED.notify_all();
        }
    }

    #[test]
    fn extra_shards_never_leave_a_shard_under_its_floor_or_fewer_than_the_default() {
        // 64 MiB on 2 cores: 64 shards of 1 MiB; 16 MiB: 16 of 1 MiB.
        assert_eq!(shard_count(64 << 20, 2), 64);
        assert_eq!(shard_count(16 << 20, 2), 16);
        // A large cache takes the full 32 per core.
        assert_eq!(shard_count(8 << 30, 2), 64);
        // Many cores or a small cache: never fewer than the crate's 4 per core.
        assert_eq!(shard_count(64 << 20, 16), 64);
        assert_eq!(shard_count(0, 2), 8);
    }

    #[test]
    fn a_lookup_never_waits_for_an_insert_that_holds_its_shard() {
        use std::sync::mpsc;
        use std::time::Duration;
        // One shard, so the held insert holds every key.
        let c = BlockCache::with_shards(64 * 1024, 1);
        c.insert(1, 0, block(100));
        let holder = {
            let c = c.clone();
            std::thread::spawn(move || c.insert_record(9, 0, Arc::from(gate::MARK)))
        };
        gate::wait_until_inside();
        let (tx, rx) = mpsc::channel();
        {
            let c = c.clone();
            std::thread::spawn(move || {
                let found = c.get(1, 0).is_some();
                c.insert(2, 0, block(100));
                let record = c.get_record(9, 0).is_some();
                let _ = tx.send((found, record));
            });
        }
        let got = rx.recv_timeout(Duration::from_secs(10));
        gate::release();
        holder.join().unwrap();
        assert_eq!(
            got,
            Ok((false, false)),
            "a lookup or insert waited for the insert holding its shard"
        );
        assert_eq!(c.busy(), 3, "each went on without the shard, and says so");
        assert_eq!((c.hits(), c.misses()), (0, 1));
        // Once the shard is free, the cache works as before: the block
        // kept, the dropped insert absent, the held one done.
        assert!(c.get(1, 0).is_some());
        assert!(c.get(2, 0).is_none());
        assert_eq!(c.get_record(9, 0).as_deref(), Some(gate::MARK));
    }

    #[test]
    fn records_and_blocks_share_the_budget_and_never_stand_in_for_each_other() {
        let c = BlockCache::new(64 * 1024);
        c.insert_record(5, 40, Arc::from(&b"record"[..]));
        assert_eq!(c.get_record(5, 40).as_deref(), Some(&b"record"[..]));
        assert!(c.get(5, 40).is_none(), "a record is no block");
        c.insert(6, 0, block(100));
        assert!(c.get_record(6, 0).is_none(), "a block is no record");
        assert_eq!((c.record_hits(), c.record_misses()), (1, 1));
        assert_eq!((c.hits(), c.misses()), (0, 1));
        for i in 0..100 {
            c.insert_record(7, i * 4096, Arc::from(vec![1u8; 4000]));
        }
        assert!(c.usage() <= 64 * 1024);
    }
}
