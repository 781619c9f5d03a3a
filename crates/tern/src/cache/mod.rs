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
use quick_cache::Weighter;

use crate::format::block::Block;

/// Fixed per-entry overhead counted on top of the block bytes.
const ENTRY_OVERHEAD: u64 = 64;

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
        let bytes = match val {
            Entry::Block(b) => b.size(),
            Entry::Record(r) => r.len(),
        };
        bytes as u64 + ENTRY_OVERHEAD
    }
}

/// A size-bounded cache of decoded table blocks (and, with direct reads,
/// blob records).
pub struct BlockCache {
    inner: Cache<(u64, u64), Entry, BlockWeighter>,
    capacity: usize,
    hits: StripedCounter,
    misses: StripedCounter,
    record_hits: StripedCounter,
    record_misses: StripedCounter,
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
            .finish()
    }
}

impl BlockCache {
    /// A cache holding at most about `capacity_bytes` of blocks.
    pub fn new(capacity_bytes: usize) -> Arc<Self> {
        let items = (capacity_bytes / 4096).max(16);
        Arc::new(BlockCache {
            inner: Cache::with_weighter(items, capacity_bytes as u64, BlockWeighter),
            capacity: capacity_bytes,
            hits: StripedCounter::default(),
            misses: StripedCounter::default(),
            record_hits: StripedCounter::default(),
            record_misses: StripedCounter::default(),
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
        let r = match self.inner.get(&(file_number, offset)) {
            Some(Entry::Block(b)) => Some(b),
            _ => None,
        };
        counted(r, &self.hits, &self.misses)
    }

    /// Caches a decoded block.
    pub fn insert(&self, file_number: u64, offset: u64, block: Arc<Block>) {
        self.inner
            .insert((file_number, offset), Entry::Block(block));
    }

    /// The record at `offset` of blob file `file_number`, as
    /// [`BlockCache::insert_record`] cached it, counting a hit or miss.
    pub fn get_record(&self, file_number: u64, offset: u64) -> Option<Arc<[u8]>> {
        let r = match self.inner.get(&(file_number, offset)) {
            Some(Entry::Record(r)) => Some(r),
            _ => None,
        };
        counted(r, &self.record_hits, &self.record_misses)
    }

    /// Caches the bytes of the record at `offset` of blob file
    /// `file_number`.
    pub fn insert_record(&self, file_number: u64, offset: u64, record: Arc<[u8]>) {
        self.inner
            .insert((file_number, offset), Entry::Record(record));
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
