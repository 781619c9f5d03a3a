//! Block cache shared by all open tables, and the bounded set of open file
//! readers.
//!
//! Holds decoded (checksum-verified, decompressed) blocks keyed by
//! `(file number, block offset)`, weighted by their size in bytes. File
//! numbers are never reused, so entries of deleted tables simply age out.

mod open_files;
pub use open_files::OpenFiles;

use crate::striped::StripedCounter;
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::format::block::Block;

/// Fixed per-entry overhead counted on top of the block bytes.
const ENTRY_OVERHEAD: u64 = 64;

#[derive(Debug, Clone, Copy)]
struct BlockWeighter;

impl Weighter<(u64, u64), Arc<Block>> for BlockWeighter {
    fn weight(&self, _key: &(u64, u64), val: &Arc<Block>) -> u64 {
        val.size() as u64 + ENTRY_OVERHEAD
    }
}

/// A size-bounded cache of decoded table blocks.
pub struct BlockCache {
    inner: Cache<(u64, u64), Arc<Block>, BlockWeighter>,
    capacity: usize,
    hits: StripedCounter,
    misses: StripedCounter,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity", &self.capacity)
            .field("usage", &self.usage())
            .field("hits", &self.hits())
            .field("misses", &self.misses())
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
        })
    }

    /// Lookups that found their block.
    pub fn hits(&self) -> u64 {
        self.hits.get()
    }

    /// Lookups that did not.
    pub fn misses(&self) -> u64 {
        self.misses.get()
    }

    /// Configured capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes currently held (block bytes plus a small per-entry overhead).
    pub fn usage(&self) -> u64 {
        self.inner.weight()
    }

    /// Number of cached blocks.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// The block at `offset` of table `file_number`, counting a hit or miss.
    pub fn get(&self, file_number: u64, offset: u64) -> Option<Arc<Block>> {
        let r = self.inner.get(&(file_number, offset));
        let counter = if r.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.add(1);
        r
    }

    /// Caches a decoded block.
    pub fn insert(&self, file_number: u64, offset: u64, block: Arc<Block>) {
        self.inner.insert((file_number, offset), block);
    }
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
}
